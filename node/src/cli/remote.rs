//! Reaching agents from the command line: the `--node` flag, targets (URL, role or front agent),
//! connecting, and remote errors as messages.

use std::fmt;

use clap::Args;
use mew_cards::{is_valid_role_name, role_base_url};
use mew_transport::{Binding, ClientOptions, Error, RemoteAgent};

use super::bench::BindingArg;
use crate::config::Config;

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
}

impl Target {
    /// The agent's base URL (or card URL), given the node's base URL.
    pub(crate) fn url(&self, node: &str) -> String {
        match self {
            Target::Front => node.to_owned(),
            Target::Role(role) => role_base_url(node, role),
            Target::Url(url) => url.clone(),
        }
    }
}

impl fmt::Display for Target {
    /// The target as it is written on the command line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Front => f.write_str("-"),
            Target::Role(role) => f.write_str(role),
            Target::Url(url) => f.write_str(url),
        }
    }
}

/// Parses a target: `-` or `.` for the front agent, an http(s) URL, or a role name.
pub(crate) fn parse_target(text: &str) -> Result<Target, String> {
    if text == "-" || text == "." {
        Ok(Target::Front)
    } else if text.starts_with("http://") || text.starts_with("https://") {
        http_url(text).map(Target::Url)
    } else if is_valid_role_name(text) {
        Ok(Target::Role(text.to_owned()))
    } else {
        Err(format!(
            "{text:?} is not a role name, an http:// or https:// URL, or - for the node's front \
             agent"
        ))
    }
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
    RemoteAgent::resolve_with(&target.url(&node.url(config)), options)
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
