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

use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ConfigError, LoadedConfig};
use crate::duration;

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
        self.allow
            .iter()
            .filter_map(|entry| AllowRule::parse(entry).ok())
            .collect()
    }
}

/// One entry of `push.allow`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AllowRule {
    /// An address, or a network: the address and the length of its prefix.
    Network(IpAddr, u8),
    /// A host name, lowercase, without a trailing dot.
    Host(String),
}

impl AllowRule {
    /// Parses `1.2.3.4`, `10.0.0.0/8`, `fd00::/8`, `[::1]` or a host name.
    pub(crate) fn parse(entry: &str) -> Result<Self, String> {
        let entry = entry.trim();
        let (address, prefix) = match entry.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (entry, None),
        };
        let bare = address.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            let max = if ip.is_ipv4() { 32 } else { 128 };
            let len = match prefix {
                None => max,
                Some(prefix) => prefix
                    .parse::<u8>()
                    .ok()
                    .filter(|len| *len <= max)
                    .ok_or_else(|| {
                        format!("`{entry}`: the prefix length must be a number from 0 to {max}")
                    })?,
            };
            return Ok(Self::Network(ip, len));
        }
        if prefix.is_some() {
            return Err(format!(
                "`{entry}` is not a network: write an address and a prefix length, as in \
                 10.0.0.0/8"
            ));
        }
        let host = entry.trim_end_matches('.').to_ascii_lowercase();
        let valid = !host.is_empty()
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            });
        if !valid {
            return Err(format!(
                "`{entry}` is neither an address, a network (CIDR) nor a host name"
            ));
        }
        Ok(Self::Host(host))
    }
}

impl LoadedConfig {
    /// `push:`, with every `allow` entry checked.
    pub(super) fn resolve_push(&self) -> Result<PushConfig, ConfigError> {
        let settings = &self.settings.push;
        for entry in &settings.allow {
            AllowRule::parse(entry).map_err(|message| self.push_error("push.allow", message))?;
        }
        if settings.max_attempts == 0 {
            return Err(self.push_error("push.max_attempts", "must be at least 1".to_owned()));
        }
        if settings.timeout.is_zero() {
            return Err(self.push_error("push.timeout", "must be longer than 0s".to_owned()));
        }
        Ok(PushConfig {
            allow: settings.allow.clone(),
            max_attempts: settings.max_attempts,
            timeout: settings.timeout,
        })
    }

    fn push_error(&self, key: &str, message: String) -> ConfigError {
        let below = format!("{key}.");
        let origin = self
            .origins
            .iter()
            .find(|(k, _)| *k == key || k.starts_with(&below))
            .map(|(_, origin)| origin.clone())
            .unwrap_or(super::Origin::Default);
        ConfigError::Resolve {
            origin,
            key: key.to_owned(),
            message,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_entries_parse_as_networks_or_hosts() {
        let net = |ip: &str, len| AllowRule::Network(ip.parse().unwrap(), len);
        for (entry, expected) in [
            ("127.0.0.1", net("127.0.0.1", 32)),
            ("10.0.0.0/8", net("10.0.0.0", 8)),
            ("fd00::/8", net("fd00::", 8)),
            ("[::1]", net("::1", 128)),
            (
                "Hooks.Internal.Example.",
                AllowRule::Host("hooks.internal.example".into()),
            ),
            ("localhost", AllowRule::Host("localhost".into())),
        ] {
            assert_eq!(AllowRule::parse(entry).unwrap(), expected, "{entry}");
        }
        for bad in ["10.0.0.0/33", "::/129", "host/8", "", "a..b", "http://x"] {
            assert!(AllowRule::parse(bad).is_err(), "{bad}");
        }
    }
}
