//! Peers: other A2A agents (usually other Mew nodes) this node can delegate to, with their roles discovered and cached.
//!
//! Each peer configured under `peers:` is fetched at start, all in parallel, each bounded by
//! its `timeout`, so start-up waits for the slowest peer rather than the sum:
//!
//! - its front card (`{url}/.well-known/agent-card.json`), which must answer: a peer whose
//!   front card cannot be fetched is `unreachable`, with the error, and a warning is logged;
//! - its role cards, `GET {url}/agents` answering `{"agents": [AgentCard...]}` (a Mew
//!   extension). When that fails (a plain A2A agent answers 404), the front card's skills
//!   stand for the roles: skill `S` is the role at `{url}/agents/S`, whose card is fetched the
//!   first time the role is resolved. If the peer has no such card (404), the role is the front
//!   agent itself: a plain A2A agent's skills are what it can do, not separate agents.
//!
//! What was fetched is used for the peer's `refresh` interval ([`Peers::refresh_if_stale`]),
//! or until [`Peers::refresh`]. A peer that cannot be reached never stops the node: it is
//! reported by [`Peers::list`] and `/status`, and resolving one of its roles fetches it again.
//!
//! Remote roles are addressed `peer/role`; [`Peers::resolve`] turns one into an
//! `Arc<dyn AgentTransport>` (a [`RemoteAgent`] built from the role's card), so the Agent tool
//! runs the same code for local and remote roles.

mod credentials;
mod discovery;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Instant;

use futures_util::future::join_all;
use mew_cards::Timestamp;
use mew_transport::{AgentTransport, Binding, ClientOptions, RemoteAgent};
use serde::{Serialize, Serializer};

pub(crate) use self::credentials::Outbound;
use self::discovery::{Discovery, RemoteRole, Snapshot};
use crate::config::{PeerBinding, PeerConfig};

/// The configured peers and what was last fetched from each. Shared as `Arc<Peers>`.
#[derive(Debug)]
pub(crate) struct Peers {
    /// The client for the role list and role cards (the front card is fetched by
    /// `mew_transport::fetch_card`); the error if it could not be built, or that there is no
    /// peer to build it for.
    http: Result<reqwest::Client, String>,
    /// Every peer, by name.
    peers: BTreeMap<String, Peer>,
    /// The options for agents reached by a URL that is no peer's.
    options: ClientOptions,
}

/// One configured peer.
#[derive(Debug)]
struct Peer {
    name: String,
    config: PeerConfig,
    /// The options for fetching its cards: the caller's, bounded by the peer's `timeout`.
    card_options: ClientOptions,
    /// The options for calling its agents: the caller's, with the peer's `binding` and
    /// credentials; why there are none when its credentials cannot be had.
    call_options: Result<ClientOptions, String>,
    /// What the last fetch found; replaced whole by each refresh.
    snapshot: RwLock<Arc<Snapshot>>,
    /// Held while the peer is fetched, so concurrent refreshes fetch once.
    refreshing: tokio::sync::Mutex<()>,
}

/// Whether a peer answered its last fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum PeerState {
    /// Its cards were fetched.
    Ok,
    /// Its front card could not be fetched; the status says why.
    Unreachable,
}

impl PeerState {
    /// The state's name, as `mew peers` and `/status` write it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Unreachable => "unreachable",
        }
    }
}

/// One peer as [`Peers::list`] reports it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct PeerStatus {
    /// The configured name.
    pub(crate) name: String,
    /// The configured base URL.
    pub(crate) url: String,
    /// Whether the last fetch succeeded.
    pub(crate) state: PeerState,
    /// Why the last fetch failed, when it did.
    pub(crate) error: Option<String>,
    /// The peer's roles, `(name, description)`, sorted by name; empty when unreachable.
    /// Serialized as `[{"name": ..., "description": ...}]`.
    #[serde(serialize_with = "roles_as_objects")]
    pub(crate) roles: Vec<(String, String)>,
    /// When the last fetch ended.
    pub(crate) fetched_at: Timestamp,
}

/// Why a `peer/role` could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PeerError {
    /// The text is not `peer/role`.
    #[error("`{target}` does not name a peer role: write PEER/ROLE")]
    BadTarget {
        /// What was given.
        target: String,
    },
    /// No peer of that name is configured.
    #[error("unknown peer `{peer}`; configured peers: {}", names(known))]
    UnknownPeer {
        /// The name asked for.
        peer: String,
        /// The configured peers, sorted.
        known: Vec<String>,
    },
    /// The peer is reachable but has no role of that name.
    #[error("peer `{peer}` has no role `{role}`; its roles: {}", names(known))]
    UnknownRole {
        /// The peer.
        peer: String,
        /// The role asked for.
        role: String,
        /// The peer's roles, sorted.
        known: Vec<String>,
    },
    /// The peer (or the role's card) could not be fetched.
    #[error("peer `{peer}` is unreachable: {error}")]
    Unreachable {
        /// The peer.
        peer: String,
        /// The last error.
        error: String,
    },
    /// The role's card offers nothing this node can call (no A2A 1.x interface over a binding
    /// it speaks, or not the configured one).
    #[error("cannot call role `{role}` of peer `{peer}`: {error}")]
    Unusable {
        /// The peer.
        peer: String,
        /// The role.
        role: String,
        /// What is wrong with its card.
        error: String,
    },
}

/// When a peer is fetched again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refetch {
    /// Always.
    Now,
    /// When what was fetched is older than the refresh interval.
    IfStale,
    /// When stale, or when the last fetch failed.
    IfStaleOrUnreachable,
}

impl Peers {
    /// Builds the peers of `config` (the `peers:` section) and fetches each one now, all in
    /// parallel, each bounded by its `timeout`. `options` are the client options for every
    /// peer (headers, connect timeout, call timeouts); a peer's `binding` overrides theirs.
    ///
    /// Never fails: a peer that cannot be reached is reported `unreachable`.
    pub(crate) async fn start(
        config: &BTreeMap<String, PeerConfig>,
        options: &ClientOptions,
    ) -> Arc<Peers> {
        Self::start_with(config, options, None).await
    }

    /// [`Peers::start`], presenting each peer the credentials its `auth` names, made by
    /// `outbound`. Without `outbound`, calls carry no credentials (cards are public).
    pub(crate) async fn start_with(
        config: &BTreeMap<String, PeerConfig>,
        options: &ClientOptions,
        outbound: Option<&Outbound>,
    ) -> Arc<Peers> {
        // Building the client loads the system's trusted roots: not worth it for no peer.
        let http = if config.is_empty() {
            Err("no peers are configured".to_owned())
        } else {
            discovery::http_client(options)
        };
        let fetches = config.iter().map(|(name, config)| {
            let card_options = ClientOptions {
                request_timeout: config.timeout,
                connect_timeout: options.connect_timeout.min(config.timeout),
                ..options.clone()
            };
            let call_options = ClientOptions {
                binding: config.binding.map(binding).or(options.binding),
                ..options.clone()
            };
            let call_options = match (&config.auth, outbound) {
                (Some(auth), Some(outbound)) => outbound.apply(name, auth, call_options),
                _ => Ok(call_options),
            };
            let http = &http;
            async move {
                let snapshot = discovery::discover(http, name, config, &card_options).await;
                Peer {
                    name: name.clone(),
                    config: config.clone(),
                    card_options,
                    call_options,
                    snapshot: RwLock::new(Arc::new(snapshot)),
                    refreshing: tokio::sync::Mutex::new(()),
                }
            }
        });
        let peers = join_all(fetches)
            .await
            .into_iter()
            .map(|peer| (peer.name.clone(), peer))
            .collect();
        Arc::new(Peers {
            http,
            peers,
            options: options.clone(),
        })
    }

    /// Every peer with what its last fetch found, sorted by name. Fetches nothing.
    pub(crate) fn list(&self) -> Vec<PeerStatus> {
        self.peers
            .values()
            .map(|peer| {
                let snapshot = peer.snapshot();
                let (state, error, roles) = match &snapshot.outcome {
                    Ok(discovery) => (
                        PeerState::Ok,
                        None,
                        discovery
                            .roles
                            .iter()
                            .map(|(name, role)| (name.clone(), role.description.clone()))
                            .collect(),
                    ),
                    Err(error) => (PeerState::Unreachable, Some(error.clone()), Vec::new()),
                };
                PeerStatus {
                    name: peer.name.clone(),
                    url: peer.config.url.clone(),
                    state,
                    error,
                    roles,
                    fetched_at: snapshot.fetched_at,
                }
            })
            .collect()
    }

    /// [`Peers::list`] as JSON, an array of `{name, url, state, error, roles: [{name,
    /// description}], fetched_at}`: what `/status` reports under `peers`.
    pub(crate) fn status_json(&self) -> serde_json::Value {
        serde_json::to_value(self.list()).unwrap_or_else(
            |error| serde_json::json!({ "error": format!("cannot serialize the peers: {error}") }),
        )
    }

    /// Fetches again, in parallel, every peer whose cards are older than its `refresh`.
    ///
    /// Cancel safe: dropped mid-fetch, each peer keeps the cards it had.
    #[cfg_attr(not(test), allow(dead_code))] // wired by the Agent tool
    pub(crate) async fn refresh_if_stale(&self) {
        join_all(
            self.peers
                .values()
                .map(|peer| self.refetch(peer, Refetch::IfStale)),
        )
        .await;
    }

    /// Fetches peer `name` again now; its new state is in [`Peers::list`].
    ///
    /// Cancel safe: dropped mid-fetch, the peer keeps the cards it had.
    #[cfg_attr(not(test), allow(dead_code))] // wired by the Agent tool
    pub(crate) async fn refresh(&self, name: &str) -> Result<(), PeerError> {
        let peer = self.peer(name)?;
        self.refetch(peer, Refetch::Now).await;
        Ok(())
    }

    /// The agent behind `target`, written `peer/role`: a [`RemoteAgent`] built from the role's
    /// card (fetched now if only the front card listed the role). A stale or unreachable peer
    /// is fetched again first.
    #[cfg_attr(not(test), allow(dead_code))] // wired by the Agent tool
    pub(crate) async fn resolve(&self, target: &str) -> Result<Arc<dyn AgentTransport>, PeerError> {
        let Some((peer_name, role_name)) = target
            .split_once('/')
            .filter(|(peer, role)| !peer.is_empty() && !role.is_empty() && !role.contains('/'))
        else {
            return Err(PeerError::BadTarget {
                target: target.to_owned(),
            });
        };
        let peer = self.peer(peer_name)?;
        self.refetch(peer, Refetch::IfStaleOrUnreachable).await;
        let snapshot = peer.snapshot();
        let discovery = snapshot
            .outcome
            .as_ref()
            .map_err(|error| PeerError::Unreachable {
                peer: peer.name.clone(),
                error: error.clone(),
            })?;
        let Some(role) = discovery.roles.get(role_name) else {
            return Err(PeerError::UnknownRole {
                peer: peer.name.clone(),
                role: role_name.to_owned(),
                known: discovery.roles.keys().cloned().collect(),
            });
        };
        role.agent
            .get_or_try_init(|| self.connect(peer, discovery, role_name, role))
            .await
            .cloned()
    }

    /// One line per role of every reachable peer, `peer/role: description` (the description
    /// on one line), sorted: the remote roles the Agent tool offers the model.
    #[cfg_attr(not(test), allow(dead_code))] // wired by the Agent tool
    pub(crate) fn describe_for_model(&self) -> String {
        let mut lines: Vec<String> = self
            .list()
            .into_iter()
            .flat_map(|status| {
                status
                    .roles
                    .into_iter()
                    .map(move |(role, description)| {
                        let description = one_line(&description);
                        if description.is_empty() {
                            format!("{}/{role}", status.name)
                        } else {
                            format!("{}/{role}: {description}", status.name)
                        }
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        lines.sort();
        lines.join("\n")
    }

    /// The agent at `url` (its base URL or card URL), reached with the options of the peer
    /// whose URL it is under (its credentials and binding), else with the node's defaults.
    pub(crate) async fn resolve_url(&self, url: &str) -> Result<RemoteAgent, String> {
        let url = url.trim_end_matches('/');
        let peer = self.peers.values().find(|peer| {
            url.strip_prefix(peer.config.url.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        });
        let options = match peer {
            Some(peer) => peer.call_options.clone()?,
            None => self.options.clone(),
        };
        RemoteAgent::resolve_with(url, options)
            .await
            .map_err(|e| e.to_string())
    }

    fn peer(&self, name: &str) -> Result<&Peer, PeerError> {
        self.peers.get(name).ok_or_else(|| PeerError::UnknownPeer {
            peer: name.to_owned(),
            known: self.peers.keys().cloned().collect(),
        })
    }

    /// Fetches `peer` again if `when` says so. Callers that wait while another fetch of the
    /// same peer runs take its result instead of fetching once more.
    async fn refetch(&self, peer: &Peer, when: Refetch) {
        let asked = Instant::now();
        let _fetching = peer.refreshing.lock().await;
        let snapshot = peer.snapshot();
        if snapshot.fetched >= asked {
            return;
        }
        let stale = snapshot.fetched.elapsed() >= peer.config.refresh;
        let wanted = match when {
            Refetch::Now => true,
            Refetch::IfStale => stale,
            Refetch::IfStaleOrUnreachable => stale || snapshot.outcome.is_err(),
        };
        if !wanted {
            return;
        }
        let fresh =
            discovery::discover(&self.http, &peer.name, &peer.config, &peer.card_options).await;
        *peer
            .snapshot
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(fresh);
    }

    /// Connects to a role: its listed card, else its card fetched from
    /// `{url}/agents/{role}`, else (no such card) the peer's front agent.
    async fn connect(
        &self,
        peer: &Peer,
        discovery: &Discovery,
        role_name: &str,
        role: &RemoteRole,
    ) -> Result<Arc<dyn AgentTransport>, PeerError> {
        let card = match &role.card {
            Some(card) => card.clone(),
            None => match discovery::role_card(&self.http, &peer.config, role_name).await {
                Ok(Some(card)) => card,
                Ok(None) => discovery.front.clone(),
                Err(error) => {
                    return Err(PeerError::Unreachable {
                        peer: peer.name.clone(),
                        error,
                    });
                }
            },
        };
        let options = peer
            .call_options
            .clone()
            .map_err(|error| PeerError::Unusable {
                peer: peer.name.clone(),
                role: role_name.to_owned(),
                error,
            })?;
        let agent = RemoteAgent::from_card(card, options).map_err(|error| PeerError::Unusable {
            peer: peer.name.clone(),
            role: role_name.to_owned(),
            error: discovery::error_chain(&error),
        })?;
        Ok(Arc::new(agent))
    }
}

impl Peer {
    /// What the last fetch found.
    fn snapshot(&self) -> Arc<Snapshot> {
        Arc::clone(&self.snapshot.read().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The transport's binding for a configured one.
fn binding(binding: PeerBinding) -> Binding {
    match binding {
        PeerBinding::Jsonrpc => Binding::JsonRpc,
        PeerBinding::Rest => Binding::HttpJson,
        PeerBinding::Grpc => Binding::Grpc,
    }
}

/// `text` with every run of whitespace (newlines included) made one space, trimmed.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `a, b, c`, or `none`.
fn names(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// Serializes `(name, description)` pairs as `[{"name": ..., "description": ...}]`.
fn roles_as_objects<S: Serializer>(
    roles: &[(String, String)],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Role<'a> {
        name: &'a str,
        description: &'a str,
    }
    serializer.collect_seq(
        roles
            .iter()
            .map(|(name, description)| Role { name, description }),
    )
}
