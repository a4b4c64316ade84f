//! The node's configuration: one typed [`Config`], loaded from layered YAML files, `MEW_*`
//! environment variables and flags.
//!
//! Two steps, as in ripgrep's low-level and high-level arguments:
//!
//! 1. [`Config::load`] reads the files and merges every layer (defaults, `~/.mew/config.yaml`,
//!    the `permissions` of `<project>/.claude/settings.json`, the `mcpServers` of
//!    `<project>/.mcp.json`, `<project>/.mew/config.yaml`, `--config FILE`, environment,
//!    flags) into one tree,
//!    remembering for each key which layer set it ([`Origin`]). Each layer is checked against
//!    the schema on its own before merging, so an unknown key or a bad value is reported with
//!    the file and line (or variable, or flag) that holds it.
//! 2. [`LoadedConfig::resolve`] expands `~`, makes paths absolute against the project directory
//!    and computes the defaults that depend on other values (`data_dir`, `public_url`). It
//!    also checks each MCP server entry on its own and expands its `${VAR}`s: a bad entry is
//!    skipped and listed in [`Config::mcp_problems`] rather than failing (see [`mcp`]).
//!
//! The configuration is passed around explicitly as `&Config`; nothing here reads the process
//! environment (it comes in through [`Sources::env`]).

mod auth;
mod check;
mod error;
mod hooks;
mod load;
pub mod mcp;
mod mcp_entries;
mod merge;
mod peers;
mod providers;
pub(crate) mod push;
mod resolve;
mod schema;
mod skills;
pub(crate) mod store;
mod telemetry;
pub(crate) mod tls;
mod web;

#[cfg(test)]
mod mcp_tests;

/// A project (with a home inside it) whose `.mew/config.yaml` is `text`: its directory, that
/// file, and the sources to load it from. For the tests of each section.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) fn test_project(text: &str) -> (tempfile::TempDir, PathBuf, Sources) {
    let dir = tempfile::TempDir::new().unwrap();
    let file = dir.path().join(".mew/config.yaml");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, text).unwrap();
    let sources = Sources {
        home: Some(dir.path().join("home")),
        ..Sources::new(dir.path())
    };
    (dir, file, sources)
}
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::net::{Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration;

pub use crate::permission::PermissionsConfig;
pub use crate::provider::ProviderConfig;
#[cfg(test)]
pub use auth::ApiKeyConfig;
pub use auth::{AuthConfig, JwtConfig};
pub use error::ConfigError;
pub use hooks::HooksConfig;
pub use load::{FlagOverrides, LoadedConfig, Sources};
pub use merge::Origin;
pub use peers::{PeerAuth, PeerBinding, PeerConfig, PeerJwt};
pub use providers::AgentConfig;
pub use push::PushConfig;
pub use skills::SkillsConfig;
pub use tls::{ServerTls, TlsConfig};

/// The node's resolved configuration: every default computed, every path absolute.
///
/// Serializes to the same keys as the configuration file (`mew config show`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    /// `node:` — where the node listens and how it presents itself.
    pub node: NodeConfig,
    /// `log:` — logging.
    pub log: LogConfig,
    /// `limits:` — concurrency, queueing, timeouts and sizes.
    pub limits: LimitsConfig,
    /// `roles:` — where role definitions are found.
    pub roles: RolesConfig,
    /// `skills:` — extra skill roots, and where and within which limits skills are installed
    /// from.
    pub skills: SkillsConfig,
    /// `hooks:` — what shell hooks get from the node's environment (the hooks themselves are
    /// in `hooks.yaml` and Claude Code settings files).
    pub hooks: HooksConfig,
    /// `permissions:` — the default permission mode and the allow, deny and ask rules.
    pub permissions: PermissionsConfig,
    /// `auth:` — how callers of the node's A2A operations authenticate.
    pub auth: AuthConfig,
    /// `tls:` — certificates for serving HTTPS and for the node's HTTPS clients.
    pub tls: TlsConfig,
    /// `push:` — where push notifications may go, and how hard the node tries to deliver them.
    pub push: PushConfig,
    /// `web:` — what `web_fetch` may reach and within which limits, and `web_search`'s
    /// search service.
    pub web: crate::tools::web::WebConfig,
    /// `store:` — where the tasks live: SQLite in the data directory, or a PostgreSQL server.
    pub store: crate::tasks::StoreConfig,
    /// `telemetry:` — where traces go, and whose trace context is continued.
    pub telemetry: crate::telemetry::TelemetryConfig,
    /// `metrics:` — whether the node serves Prometheus metrics at `/metrics`, and to whom.
    pub metrics: crate::metrics::MetricsConfig,
    /// `agent:` — which provider and model run model-driven roles.
    pub agent: AgentConfig,
    /// `providers:` — the model services, by the names the user gave them.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// `peers:` — other A2A agents this node may delegate to, by the names the user gave them.
    pub peers: BTreeMap<String, PeerConfig>,
    /// `mcp_servers:` (and the project's `.mcp.json`) — the MCP servers whose tools roles use.
    pub mcp_servers: BTreeMap<String, mcp::McpServerConfig>,
    /// The MCP server entries that were skipped, and why.
    #[serde(skip)]
    pub mcp_problems: Vec<mcp::McpProblem>,
    /// The project directory, absolute: `.mew/` under it holds the project's configuration and
    /// roles.
    #[serde(skip)]
    pub project_dir: PathBuf,
    /// The user's home directory, if known: `~/.mew/` holds the user's configuration and roles.
    #[serde(skip)]
    pub home_dir: Option<PathBuf>,
}

/// `node:` — where the node listens and how it presents itself.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeConfig {
    /// The address to listen on (`MEW_HOST`, `--host`).
    pub host: String,
    /// The port to listen on; 0 picks a free one (`MEW_PORT`, `--port`).
    pub port: u16,
    /// The name of the node's front agent card.
    pub name: String,
    /// The base URL written in agent cards, without a trailing slash. Defaults to
    /// `http://{host}:{port}` (`https://` when `tls:` has a server certificate); see [`NodeConfig::bound_to`] for port 0.
    pub public_url: String,
    /// True when `public_url` was computed from `host` and `port` rather than configured.
    #[serde(skip)]
    pub public_url_is_default: bool,
    /// The role that answers messages sent to the front card.
    pub default_role: String,
    /// Where the node keeps its state (`MEW_DATA_DIR`, `--data-dir`); defaults to the
    /// project's `.mew/data`, so that each project keeps its own tasks.
    pub data_dir: PathBuf,
    /// How long running tasks get to finish after shutdown begins.
    #[serde(serialize_with = "duration::serialize")]
    pub shutdown_grace: Duration,
    /// How long a stopping node keeps serving, unready (`/readyz` 503), before it stops: time
    /// for a load balancer's health checks to send new work elsewhere. 0 by default.
    #[serde(serialize_with = "duration::serialize")]
    pub drain_delay: Duration,
}

impl NodeConfig {
    /// The address to bind, `host:port`, with an IPv6 host in brackets.
    pub fn listen_address(&self) -> String {
        format!("{}:{}", url_host(&self.host), self.port)
    }

    /// Records the address the listener actually bound: sets `port` to its port and, when
    /// `public_url` is the computed default, recomputes it. Needed when `port` is 0.
    pub fn bound_to(&mut self, address: SocketAddr) {
        self.port = address.port();
        if self.public_url_is_default {
            let https = self.public_url.starts_with("https://");
            self.public_url = default_public_url(https, &self.host, self.port);
        }
    }
}

/// `log:` — logging.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogConfig {
    /// A `tracing` `EnvFilter` directive, such as `info` or `info,mew_node=debug`
    /// (`MEW_LOG_LEVEL`, `--log-level`). Checked when loading.
    pub level: String,
    /// Text or JSON lines on stderr (`MEW_LOG_FORMAT`, `--log-format`).
    pub format: LogFormat,
}

/// `limits:` — concurrency, queueing, timeouts and sizes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LimitsConfig {
    /// Tasks running at once (at least 1); more wait in `SUBMITTED`, in order.
    pub max_running_tasks: usize,
    /// Tasks of one role running at once (at least 1, at most `max_running_tasks`), unless
    /// the role's own `maxRunning` says otherwise: what one role's backlog leaves to the
    /// others.
    pub max_running_per_role: usize,
    /// Tasks waiting to run; beyond this, new tasks are rejected.
    pub max_queued_tasks: usize,
    /// How long a task waits for a slot before it says why in its status message (and a
    /// blocking send returns it, still `SUBMITTED`); `None` (configured as 0) for never.
    #[serde(serialize_with = "duration::serialize_optional")]
    pub queue_notice: Option<Duration>,
    /// The limit on one task turn; `None` (configured as 0) for no limit.
    #[serde(serialize_with = "duration::serialize_optional")]
    pub task_timeout: Option<Duration>,
    /// Events buffered per live task (at least 1, 64 by default); a subscriber further
    /// behind reads what it missed back from the store.
    pub event_buffer: usize,
    /// The largest request body accepted, in bytes (at least 1).
    pub max_body_bytes: usize,
    /// Bytes of request bodies one role reads and parses at once (at least 1); more wait.
    pub max_inflight_body_bytes: usize,
    /// The time a client has to send a whole request body.
    #[serde(serialize_with = "duration::serialize")]
    pub body_timeout: Duration,
    /// Connections served at once; 0: as many as the open-file limit leaves room for.
    pub max_connections: usize,
    /// The time a new connection has to send its first request's headers.
    #[serde(serialize_with = "duration::serialize")]
    pub header_timeout: Duration,
    /// The time a kept-alive connection may wait for its next request.
    #[serde(serialize_with = "duration::serialize")]
    pub idle_timeout: Duration,
    /// The history messages per task `ListTasks` returns when the caller asks for no number.
    pub list_history: usize,
    /// A `ListTasks` page ends early when its tasks pass this many bytes of JSON.
    pub max_list_bytes: usize,
    /// How many times a turn starts over after the node running it was lost (0: never);
    /// the next loss fails the task.
    pub max_attempts: u32,
}

/// `roles:` — where role definitions are found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RolesConfig {
    /// Extra role directories, absolute, in the order configured. They take precedence over
    /// the standard places (`~/.mew/roles`, the project's `.mew/roles`, ...).
    pub dirs: Vec<PathBuf>,
    /// How often a running node looks for added, changed and removed role and skill files;
    /// `None` (`roles.watch: 0`): never, roles change only with a restart.
    #[serde(serialize_with = "duration::serialize_optional")]
    pub watch: Option<Duration>,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(format!(
                "unknown log format `{text}` (expected text or json)"
            )),
        }
    }
}

/// `http://{host}:{port}` (`https://` with `https`), with an IPv6 host in brackets.
fn default_public_url(https: bool, host: &str, port: u16) -> String {
    let scheme = if https { "https" } else { "http" };
    format!("{scheme}://{}:{port}", url_host(host))
}

fn url_host(host: &str) -> String {
    if host.parse::<Ipv6Addr>().is_ok() {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}
