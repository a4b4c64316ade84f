//! Fetching a peer: its front card, its role list (`GET /agents`) or the front card's skills, and role cards on demand.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use mew_cards::{AgentCard, PROTOCOL_VERSION, Timestamp, WELL_KNOWN_CARD_PATH};
use mew_transport::{AgentTransport, ClientOptions};
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, HeaderName, HeaderValue};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use tokio::sync::OnceCell;

use crate::config::PeerConfig;

/// What one fetch of a peer found. Replaced whole by the next fetch.
#[derive(Debug)]
pub(super) struct Snapshot {
    /// When the fetch ended, for people.
    pub(super) fetched_at: Timestamp,
    /// When the fetch ended, for staleness.
    pub(super) fetched: Instant,
    /// The peer's cards, or why its front card could not be fetched.
    pub(super) outcome: Result<Discovery, String>,
}

/// A reachable peer's cards.
#[derive(Debug)]
pub(super) struct Discovery {
    /// Its front card.
    pub(super) front: AgentCard,
    /// Its roles, by name.
    pub(super) roles: BTreeMap<String, RemoteRole>,
}

/// One role of a peer.
#[derive(Debug)]
pub(super) struct RemoteRole {
    /// What it does (the card's description, or the skill's).
    pub(super) description: String,
    /// Its card, when `/agents` listed it; otherwise it is fetched when the role is first
    /// resolved.
    pub(super) card: Option<AgentCard>,
    /// The client for it, built on first use.
    pub(super) agent: OnceCell<Arc<dyn AgentTransport>>,
}

impl RemoteRole {
    fn new(description: String, card: Option<AgentCard>) -> Self {
        Self {
            description,
            card,
            agent: OnceCell::new(),
        }
    }
}

/// The body of `GET {url}/agents` on a Mew node.
#[derive(Debug, Deserialize)]
struct AgentList {
    agents: Vec<AgentCard>,
}

/// The client for role lists and role cards: the caller's headers, connect timeout and TLS
/// settings, and `A2A-Version` on every request.
pub(super) fn http_client(options: &ClientOptions) -> Result<reqwest::Client, String> {
    let mut headers = options.headers.clone();
    headers.insert(
        HeaderName::from_static("a2a-version"),
        HeaderValue::from_static(PROTOCOL_VERSION),
    );
    let builder = reqwest::Client::builder()
        .connect_timeout(options.connect_timeout)
        .default_headers(headers)
        .redirect(reqwest::redirect::Policy::none());
    options
        .tls
        .configure(builder)
        .and_then(reqwest::ClientBuilder::build)
        .map_err(|error| format!("cannot build the HTTP client: {}", error_chain(&error)))
}

/// Fetches the front card and the role list of peer `name` at once, each bounded by the
/// peer's timeout, and logs the outcome (a warning when the peer is unreachable).
pub(super) async fn discover(
    http: &Result<reqwest::Client, String>,
    name: &str,
    config: &PeerConfig,
    card_options: &ClientOptions,
) -> Snapshot {
    let list_url = format!("{}/agents", config.url);
    let (front, list) = tokio::join!(
        mew_transport::fetch_card(&config.url, card_options),
        get_json::<AgentList>(http, &list_url, config),
    );
    let outcome = match front {
        Ok(front) => {
            let roles = match list {
                Ok(Some(list)) => listed_roles(list),
                Ok(None) => {
                    tracing::debug!(peer = name, url = %list_url, "no role list (404); using the front card's skills");
                    skill_roles(&front)
                }
                Err(error) => {
                    tracing::debug!(peer = name, url = %list_url, %error, "no role list; using the front card's skills");
                    skill_roles(&front)
                }
            };
            tracing::info!(peer = name, url = %config.url, roles = roles.len(), "peer fetched");
            Ok(Discovery { front, roles })
        }
        Err(error) => {
            let error = error_chain(&error);
            tracing::warn!(peer = name, url = %config.url, %error, "peer unreachable");
            Err(error)
        }
    };
    Snapshot {
        fetched_at: Timestamp::now(),
        fetched: Instant::now(),
        outcome,
    }
}

/// The roles of a `/agents` list: one per card, named by the card.
fn listed_roles(list: AgentList) -> BTreeMap<String, RemoteRole> {
    list.agents
        .into_iter()
        .filter(|card| !card.name.is_empty())
        .map(|card| {
            let name = card.name.clone();
            (name, RemoteRole::new(card.description.clone(), Some(card)))
        })
        .collect()
}

/// The roles a front card's skills stand for: one per skill id, card not yet fetched.
fn skill_roles(front: &AgentCard) -> BTreeMap<String, RemoteRole> {
    front
        .skills
        .iter()
        .filter(|skill| !skill.id.is_empty())
        .map(|skill| {
            (
                skill.id.clone(),
                RemoteRole::new(skill.description.clone(), None),
            )
        })
        .collect()
}

/// The card of role `role` at `{url}/agents/{role}`; `Ok(None)` when the peer has none (404,
/// or a role name that cannot be a path segment there).
pub(super) async fn role_card(
    http: &Result<reqwest::Client, String>,
    config: &PeerConfig,
    role: &str,
) -> Result<Option<AgentCard>, String> {
    if !mew_cards::is_valid_role_name(role) {
        return Ok(None);
    }
    let url = format!(
        "{}/{WELL_KNOWN_CARD_PATH}",
        mew_cards::role_base_url(&config.url, role)
    );
    get_json(http, &url, config).await
}

/// GETs `url` as JSON within the peer's timeout; `Ok(None)` on 404.
async fn get_json<T: DeserializeOwned>(
    http: &Result<reqwest::Client, String>,
    url: &str,
    config: &PeerConfig,
) -> Result<Option<T>, String> {
    let http = http.as_ref().map_err(String::clone)?;
    let exchange = async {
        let response = http
            .get(url)
            .header(ACCEPT, "application/json")
            .send()
            .await
            .map_err(|error| format!("cannot fetch {url}: {}", error_chain(&error)))?;
        let status = response.status();
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let body = response
            .bytes()
            .await
            .map_err(|error| format!("cannot read {url}: {}", error_chain(&error)))?;
        if !status.is_success() {
            return Err(format!("fetching {url} answered HTTP {status}"));
        }
        serde_json::from_slice(&body)
            .map(Some)
            .map_err(|error| format!("{url} did not answer what was expected: {error}"))
    };
    tokio::time::timeout(config.timeout, exchange)
        .await
        .map_err(|_| {
            format!(
                "fetching {url} timed out after {}",
                crate::duration::format(config.timeout)
            )
        })?
}

/// `error` and its sources, `a: b: c`, leaving out a source already quoted by the one above.
pub(super) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
