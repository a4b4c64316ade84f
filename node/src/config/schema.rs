//! The configuration as written in files, with its built-in defaults: what each layer is checked against.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

use super::LogFormat;
use super::auth::AuthSettings;
use super::hooks::HooksSettings;
use super::peers::{PeerSettings, peer_entry_schema};
use super::providers::{AgentSettings, ProviderSettings, provider_entry_schema};
use super::push::PushSettings;
use super::skills::SkillsSettings;
use super::store::StoreSettings;
use super::telemetry::TelemetrySettings;
use super::tls::TlsSettings;
use super::web::WebSettings;
use crate::duration;
use crate::permission::rules::Rule;

/// The whole configuration file. Every section and key is optional in a file (`serde(default)`),
/// and unknown keys are errors (`deny_unknown_fields`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Settings {
    pub(crate) node: NodeSettings,
    pub(crate) log: LogSettings,
    pub(crate) limits: LimitsSettings,
    pub(crate) roles: RolesSettings,
    pub(crate) skills: SkillsSettings,
    pub(crate) hooks: HooksSettings,
    pub(crate) permissions: PermissionsSettings,
    pub(crate) auth: AuthSettings,
    pub(crate) tls: TlsSettings,
    pub(crate) push: PushSettings,
    pub(crate) web: WebSettings,
    pub(crate) store: StoreSettings,
    pub(crate) telemetry: TelemetrySettings,
    /// Typed by its domain as written: every value of it is valid once parsed.
    pub(crate) metrics: crate::metrics::MetricsConfig,
    pub(crate) agent: AgentSettings,
    pub(crate) providers: BTreeMap<String, ProviderSettings>,
    pub(crate) peers: BTreeMap<String, PeerSettings>,
    /// Kept as written: each entry is checked when resolving, where a bad one is skipped and
    /// reported instead of failing the whole file.
    pub(crate) mcp_servers: BTreeMap<String, serde_yaml_ng::Value>,
}

/// `node:` — where the node listens and how it presents itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct NodeSettings {
    #[serde(deserialize_with = "non_empty")]
    pub(crate) host: String,
    pub(crate) port: u16,
    #[serde(deserialize_with = "non_empty")]
    pub(crate) name: String,
    #[serde(deserialize_with = "http_url")]
    pub(crate) public_url: Option<String>,
    #[serde(deserialize_with = "non_empty")]
    pub(crate) default_role: String,
    pub(crate) data_dir: Option<PathBuf>,
    #[serde(with = "duration")]
    pub(crate) shutdown_grace: Duration,
    #[serde(with = "duration")]
    pub(crate) drain_delay: Duration,
}

impl Default for NodeSettings {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".to_owned(),
            port: 7777,
            name: "mew".to_owned(),
            public_url: None,
            default_role: "general-purpose".to_owned(),
            data_dir: None,
            shutdown_grace: Duration::from_secs(10),
            drain_delay: Duration::ZERO,
        }
    }
}

/// `log:` — the tracing filter and output format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct LogSettings {
    #[serde(deserialize_with = "filter_directive")]
    pub(crate) level: String,
    pub(crate) format: LogFormat,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self {
            level: "info".to_owned(),
            format: LogFormat::Text,
        }
    }
}

/// `limits:` — concurrency, queueing, timeouts and sizes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct LimitsSettings {
    pub(crate) max_running_tasks: NonZeroUsize,
    /// Zero means three quarters of `max_running_tasks` (at least one).
    pub(crate) max_running_per_role: usize,
    pub(crate) max_queued_tasks: usize,
    /// Zero means never.
    #[serde(with = "duration")]
    pub(crate) queue_notice: Duration,
    /// Zero means no timeout.
    #[serde(with = "duration")]
    pub(crate) task_timeout: Duration,
    pub(crate) event_buffer: NonZeroUsize,
    pub(crate) max_body_bytes: NonZeroUsize,
    pub(crate) max_inflight_body_bytes: NonZeroUsize,
    #[serde(with = "duration")]
    pub(crate) body_timeout: Duration,
    /// Zero means: as many as the open-file limit leaves room for.
    pub(crate) max_connections: usize,
    #[serde(with = "duration")]
    pub(crate) header_timeout: Duration,
    #[serde(with = "duration")]
    pub(crate) idle_timeout: Duration,
    pub(crate) list_history: usize,
    pub(crate) max_list_bytes: NonZeroUsize,
    pub(crate) max_attempts: u32,
}

impl Default for LimitsSettings {
    fn default() -> Self {
        Self {
            max_running_tasks: nonzero(16),
            max_running_per_role: 0,
            max_queued_tasks: 1024,
            queue_notice: Duration::from_secs(10),
            task_timeout: Duration::from_secs(30 * 60),
            event_buffer: nonzero(64),
            max_body_bytes: nonzero(10 * 1024 * 1024),
            max_inflight_body_bytes: nonzero(32 * 1024 * 1024),
            body_timeout: Duration::from_secs(60),
            max_connections: 0,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            list_history: 10,
            max_list_bytes: nonzero(4 * 1024 * 1024),
            max_attempts: 3,
        }
    }
}

/// `roles:` — where role definitions are found besides the standard places, and how often a
/// running node looks for changed role and skill files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RolesSettings {
    pub(crate) dirs: Vec<PathBuf>,
    #[serde(with = "duration")]
    pub(crate) watch: Duration,
}

impl Default for RolesSettings {
    fn default() -> Self {
        Self {
            dirs: Vec::new(),
            watch: Duration::from_secs(1),
        }
    }
}

/// `permissions:` — the default mode and the rules; every rule is parsed when its layer is
/// checked, so a bad one is blamed on its file.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct PermissionsSettings {
    pub(crate) mode: mew_cards::PermissionMode,
    pub(crate) allow: Vec<Rule>,
    pub(crate) deny: Vec<Rule>,
    pub(crate) ask: Vec<Rule>,
}

/// A non-zero count from a literal (every caller passes a positive constant).
const fn nonzero(n: usize) -> NonZeroUsize {
    match NonZeroUsize::new(n) {
        Some(n) => n,
        None => NonZeroUsize::MIN,
    }
}

fn non_empty<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let text = String::deserialize(deserializer)?;
    if text.trim().is_empty() {
        return Err(serde::de::Error::custom("must not be empty"));
    }
    Ok(text)
}

pub(super) fn http_url<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    let url = Option::<String>::deserialize(deserializer)?;
    if let Some(url) = &url {
        let rest = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"));
        if rest.is_none_or(|rest| rest.is_empty() || rest.starts_with('/')) {
            return Err(serde::de::Error::custom(format!(
                "`{url}` is not an http:// or https:// URL with a host"
            )));
        }
    }
    Ok(url)
}

fn filter_directive<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let directive = String::deserialize(deserializer)?;
    tracing_subscriber::EnvFilter::builder()
        .parse(&directive)
        .map_err(|error| {
            serde::de::Error::custom(format!(
                "`{directive}` is not a log filter directive: {error}"
            ))
        })?;
    Ok(directive)
}

/// A map whose keys the user chooses (provider, peer and MCP server names): the checker
/// accepts any key there and checks each entry against [`FreeFormMap::entry`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct FreeFormMap {
    /// The map's dotted path; `*` stands for any user-chosen key above it
    /// (`providers.*.models`).
    pub(crate) path: &'static str,
    /// What one entry is.
    pub(crate) entry: FreeFormEntry,
}

/// What one entry of a [`FreeFormMap`] is.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FreeFormEntry {
    /// A section, checked key by key against this tree of defaults (an entry written with
    /// nothing under it is a section of defaults).
    Section(fn() -> Result<serde_yaml_ng::Value, serde_yaml_ng::Error>),
    /// A plain value, checked by its type only.
    Value,
    /// Anything, not checked with the layer: the entries are checked one by one when
    /// resolving, and a bad one is skipped and reported rather than failing the file. Any
    /// name is accepted here (a name that is not text becomes text).
    Unchecked,
}

/// Every map whose keys the user chooses. Entry names must not contain `.` (dotted keys name
/// configuration paths); in an [`FreeFormEntry::Unchecked`] map such a name is a problem of
/// that entry, found when resolving.
pub(crate) const FREE_FORM_MAPS: &[FreeFormMap] = &[
    FreeFormMap {
        path: "providers",
        entry: FreeFormEntry::Section(provider_entry_schema),
    },
    FreeFormMap {
        path: "providers.*.models",
        entry: FreeFormEntry::Value,
    },
    FreeFormMap {
        path: "peers",
        entry: FreeFormEntry::Section(peer_entry_schema),
    },
    FreeFormMap {
        path: "mcp_servers",
        entry: FreeFormEntry::Unchecked,
    },
];
