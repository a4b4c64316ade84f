//! Reaching agents from the command line: the `--node` flag, targets (URL, role or front agent),
//! connecting, and remote errors as messages.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use clap::Args;
use mew_cards::{is_valid_role_name, role_base_url};
use mew_transport::{AgentTransport, Binding, ClientOptions, Error, RemoteAgent};

use super::bench::BindingArg;
use crate::config::Config;
use crate::identity::NodeKey;
use crate::peers::{Outbound, Peers};

/// `--node URL`: the node the client subcommands talk to.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct NodeUrlArgs {
    /// The node to talk to, like http://127.0.0.1:7801 [default: the configured
    /// node.public_url]
    #[arg(long, global = true, value_name = "URL", value_parser = http_url)]
    pub(crate) node: Option<String>,
    /// A credential for a node that requires one (an API key or a JWT), sent as
    /// `Authorization: Bearer`
    #[arg(
        long,
        global = true,
        value_name = "TOKEN",
        env = "MEW_TOKEN",
        hide_env_values = true
    )]
    pub(crate) token: Option<String>,
}

impl NodeUrlArgs {
    /// The node's base URL: `--node`, or the configured `node.public_url`.
    pub(crate) fn url(&self, config: &Config) -> String {
        self.node
            .clone()
            .unwrap_or_else(|| config.node.public_url.trim_end_matches('/').to_owned())
    }

    /// ` --node URL` when the flag was given, for the commands suggested to the user.
    pub(crate) fn flag(&self) -> String {
        self.node
            .as_ref()
            .map(|url| format!(" --node {url}"))
            .unwrap_or_default()
    }
}

/// Parses an absolute http(s) URL, without its trailing slashes.
pub(crate) fn http_url(text: &str) -> Result<String, String> {
    let rest = text
        .strip_prefix("http://")
        .or_else(|| text.strip_prefix("https://"));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') => {
            Ok(text.trim_end_matches('/').to_owned())
        }
        _ => Err(format!(
            "{text:?} is not an absolute http:// or https:// URL"
        )),
    }
}

/// Who a command talks to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// The node's front agent (`-` or `.`), at the node's base URL.
    Front,
    /// A role of the node, at `{node}/agents/{role}`.
    Role(String),
    /// An agent's base URL, or its card's URL (ending in `.json`).
    Url(String),
    /// A role of a configured peer, `peer/role`, reached with the peer's credentials.
    Peer {
        /// The peer's name in `peers:`.
        peer: String,
        /// The role's name on the peer.
        role: String,
    },
}

impl Target {
    /// The agent's base URL (or card URL), given the node's base URL and the configured
    /// peers; a peer that is not configured is an error naming the ones that are.
    pub(crate) fn url(&self, node: &str, config: &Config) -> anyhow::Result<String> {
        Ok(match self {
            Target::Front => node.to_owned(),
            Target::Role(role) => role_base_url(node, role),
            Target::Url(url) => url.clone(),
            Target::Peer { peer, role } => role_base_url(&peer_config(config, peer)?.url, role),
        })
    }
}

impl fmt::Display for Target {
    /// The target as it is written on the command line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Front => f.write_str("-"),
            Target::Role(role) => f.write_str(role),
            Target::Url(url) => f.write_str(url),
            Target::Peer { peer, role } => write!(f, "{peer}/{role}"),
        }
    }
}

/// Parses a target: `-` or `.` for the front agent, an http(s) URL, a role name, or
/// `peer/role`.
pub(crate) fn parse_target(text: &str) -> Result<Target, String> {
    if text == "-" || text == "." {
        return Ok(Target::Front);
    }
    if text.starts_with("http://") || text.starts_with("https://") {
        return http_url(text).map(Target::Url);
    }
    if is_valid_role_name(text) {
        return Ok(Target::Role(text.to_owned()));
    }
    match text.split_once('/') {
        Some((peer, role)) if is_valid_role_name(peer) && is_valid_role_name(role) => {
            Ok(Target::Peer {
                peer: peer.to_owned(),
                role: role.to_owned(),
            })
        }
        _ => Err(format!(
            "{text:?} is not a role name, peer/role, an http:// or https:// URL, or - for the \
             node's front agent"
        )),
    }
}

/// The configuration of the peer `name`, or an error naming the configured peers.
fn peer_config<'c>(
    config: &'c Config,
    name: &str,
) -> anyhow::Result<&'c crate::config::PeerConfig> {
    config.peers.get(name).ok_or_else(|| {
        let known: Vec<&str> = config.peers.keys().map(String::as_str).collect();
        if known.is_empty() {
            anyhow::anyhow!(
                "no peer named {name} is configured: add it to the peers: section of \
                 .mew/config.yaml"
            )
        } else {
            anyhow::anyhow!(
                "no peer named {name} is configured (peers: {}); `mew peers` lists them",
                known.join(", ")
            )
        }
    })
}

/// Connects to `target` the way [`connect`] does; a peer's role is resolved through the
/// configured peer, with the credentials its `auth` names, as the node itself reaches it.
pub(crate) async fn connect_any(
    target: &Target,
    node: &NodeUrlArgs,
    config: &Config,
    binding: Option<BindingArg>,
) -> anyhow::Result<Arc<dyn AgentTransport>> {
    let Target::Peer { peer, role } = target else {
        let agent = connect(target, node, config, binding).await?;
        return Ok(Arc::new(agent));
    };
    let peer_config = peer_config(config, peer)?;
    let options = ClientOptions {
        binding: binding.map(Binding::from),
        tls: config.tls.client_options().map_err(anyhow::Error::msg)?,
        ..ClientOptions::default()
    };
    let mut peer_config = peer_config.clone();
    if binding.is_some() {
        // `--binding` wins over the peer's configured one.
        peer_config.binding = None;
    }
    let outbound = match &peer_config.auth {
        Some(_) => Some(outbound(config)?),
        None => None,
    };
    let only: BTreeMap<String, crate::config::PeerConfig> = [(peer.clone(), peer_config)].into();
    let peers = Peers::start_with(&only, &options, outbound.as_ref()).await;
    peers
        .resolve(&format!("{peer}/{role}"))
        .await
        .map_err(|error| anyhow::anyhow!("{error}"))
}

/// What the node presents to its peers, made here as the node makes it: the JWTs a peer may
/// want are the node's, signed with its key and issued by its public URL.
fn outbound(config: &Config) -> anyhow::Result<Outbound> {
    Ok(Outbound {
        env: Arc::new(std::env::vars().collect()),
        key: Arc::new(NodeKey::load_or_create(&config.node.data_dir)?),
        issuer: config.node.public_url.clone(),
        subject: config.node.name.clone(),
    })
}

/// Each configured peer's base URL with the options that carry its credentials (`peers.NAME.
/// auth`), for the peers that have any; a peer whose credentials cannot be made (a variable
/// that is not set) is left out, with a warning.
pub(crate) fn peer_credentials(config: &Config) -> anyhow::Result<Vec<(String, ClientOptions)>> {
    if config.peers.values().all(|peer| peer.auth.is_none()) {
        return Ok(Vec::new());
    }
    let outbound = outbound(config)?;
    let mut credentials = Vec::new();
    for (name, peer) in &config.peers {
        let Some(auth) = &peer.auth else { continue };
        match outbound.apply(name, auth, ClientOptions::default()) {
            Ok(options) => credentials.push((peer.url.trim_end_matches('/').to_owned(), options)),
            Err(error) => tracing::warn!("{error}: its tasks are asked for without credentials"),
        }
    }
    Ok(credentials)
}

/// Fetches the card of `target` (on the node `node`) and connects to the agent, over `binding`
/// if given.
pub(crate) async fn connect(
    target: &Target,
    node: &NodeUrlArgs,
    config: &Config,
    binding: Option<BindingArg>,
) -> anyhow::Result<RemoteAgent> {
    let options = client_options(node, config, binding)?;
    RemoteAgent::resolve_with(&target.url(&node.url(config), config)?, options)
        .await
        .map_err(|error| card_error(error, target, node, config))
}

/// The options for calling the node: `binding` if given, the configured TLS settings, and
/// the `--token` (or `MEW_TOKEN`) as a bearer token.
pub(crate) fn client_options(
    node: &NodeUrlArgs,
    config: &Config,
    binding: Option<BindingArg>,
) -> anyhow::Result<ClientOptions> {
    let mut options = ClientOptions {
        binding: binding.map(Binding::from),
        tls: config.tls.client_options().map_err(anyhow::Error::msg)?,
        ..ClientOptions::default()
    };
    if let Some(token) = &node.token {
        let mut value = http::HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| anyhow::anyhow!("--token: not a value an HTTP header can carry"))?;
        value.set_sensitive(true);
        options.headers.insert(http::header::AUTHORIZATION, value);
    }
    Ok(options)
}

/// Why the card of `target` could not be had, with a hint for the usual mistakes: a local
/// node that is not running, a role that does not exist.
pub(crate) fn card_error(
    error: Error,
    target: &Target,
    node: &NodeUrlArgs,
    config: &Config,
) -> anyhow::Error {
    let hint = match (&error, target) {
        // Nothing listens where the configured node should be.
        (
            Error::Transport {
                source: Some(source),
                ..
            },
            Target::Front | Target::Role(_),
        ) if node.node.is_none() && refused(source.as_ref()) => {
            return anyhow::anyhow!("{}", no_node(&node.url(config)));
        }
        // Another failed connection (not an HTTP error status) to the configured node.
        (
            Error::Transport {
                source: Some(_), ..
            },
            Target::Front | Target::Role(_),
        ) if node.node.is_none() => {
            "; is the node running? Start it with `mew up`, or pass --node URL".to_owned()
        }
        // An HTTP error status for a role's card.
        (Error::Transport { source: None, .. }, Target::Role(role)) => {
            format!("; is {role} a published role of the node? `mew agents` lists the roles")
        }
        _ => String::new(),
    };
    let error = remote_error(error);
    if hint.is_empty() {
        error
    } else {
        anyhow::anyhow!("{error}{hint}")
    }
}

/// Whether `error` (or what caused it) is a connection refused: nothing listens there.
pub(crate) fn refused(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if error
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        next = error.source();
    }
    false
}

/// What the client commands say when nothing listens at the configured node's `url`.
pub(crate) fn no_node(url: &str) -> String {
    format!("no node is running at {url}: start one with `mew up`, or pass --node URL")
}

/// The error of a request to the configured node (`--node` not given): "no node is running"
/// when the connection was refused, else `error` with a hint.
pub(crate) fn node_error(error: anyhow::Error, url: &str) -> anyhow::Error {
    if error.chain().any(refused) {
        anyhow::anyhow!("{}", no_node(url))
    } else {
        error.context("is the node running? Start it with `mew up`, or pass --node URL")
    }
}

/// A remote error as the user reads it: the A2A error kind and message, or what failed on the
/// way, down to its root cause.
pub(crate) fn remote_error(error: Error) -> anyhow::Error {
    match error {
        Error::Protocol(error) => anyhow::anyhow!("{}: {}", error.kind, error.message),
        Error::Transport { message, source } => {
            let mut root: Option<&(dyn std::error::Error + 'static)> = source
                .as_deref()
                .map(|source| source as &(dyn std::error::Error + 'static));
            while let Some(next) = root.and_then(std::error::Error::source) {
                root = Some(next);
            }
            match root.map(ToString::to_string) {
                Some(cause) if !message.contains(&cause) => anyhow::anyhow!("{message}: {cause}"),
                _ => anyhow::anyhow!("{message}"),
            }
        }
        Error::Decode { message } => anyhow::anyhow!("invalid answer from the agent: {message}"),
    }
}
