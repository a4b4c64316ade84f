//! The `push:` section: where the node may deliver push notifications, and how hard it tries.
//!
//! ```yaml
//! push:
//!   allow: ["127.0.0.1", "10.0.0.0/8", "hooks.internal.example"]   # reachable despite the guard
//!   max_attempts: 10    # deliveries of one notification before it is dropped
//!   timeout: 10s        # for one delivery
//! ```
//!
//! Webhook URLs that resolve to loopback, private, link-local, shared (CGNAT), documentation,
//! multicast or cloud metadata addresses are refused unless `allow` names the host or a
//! network that holds the address. Every key is optional.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ConfigError, LoadedConfig};
use crate::duration;
use crate::ssrf::AllowRule;

/// `push:` — the SSRF allowlist and the delivery limits of push notifications.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PushConfig {
    /// Hosts, addresses and networks (CIDR) webhooks may reach although the guard refuses
    /// them otherwise.
    pub allow: Vec<String>,
    /// Attempts at delivering one notification before it is dropped (at least 1).
    pub max_attempts: u32,
    /// The limit on one delivery.
    #[serde(serialize_with = "duration::serialize")]
    pub timeout: Duration,
}

impl Default for PushConfig {
    fn default() -> Self {
        let settings = PushSettings::default();
        Self {
            allow: settings.allow,
            max_attempts: settings.max_attempts,
            timeout: settings.timeout,
        }
    }
}

impl PushConfig {
    /// The `allow` entries, parsed (each was checked when resolving; a bad one is skipped).
    pub(crate) fn allow_rules(&self) -> Vec<AllowRule> {
        AllowRule::parse_all(&self.allow)
    }
}

impl LoadedConfig {
    /// `push:`, with every `allow` entry checked.
    pub(super) fn resolve_push(&self) -> Result<PushConfig, ConfigError> {
        let settings = &self.settings.push;
        for entry in &settings.allow {
            AllowRule::parse(entry).map_err(|message| self.key_error("push.allow", message))?;
        }
        if settings.max_attempts == 0 {
            return Err(self.key_error("push.max_attempts", "must be at least 1".to_owned()));
        }
        if settings.timeout.is_zero() {
            return Err(self.key_error("push.timeout", "must be longer than 0s".to_owned()));
        }
        Ok(PushConfig {
            allow: settings.allow.clone(),
            max_attempts: settings.max_attempts,
            timeout: settings.timeout,
        })
    }
}

// ---- As written in files ----

/// `push:` as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct PushSettings {
    pub(crate) allow: Vec<String>,
    pub(crate) max_attempts: u32,
    #[serde(with = "duration")]
    pub(crate) timeout: Duration,
}

impl Default for PushSettings {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            max_attempts: 10,
            timeout: Duration::from_secs(10),
        }
    }
}
