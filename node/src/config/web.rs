//! The `web:` section: what `web_fetch` may reach and within which limits, and the search
//! service of `web_search`.
//!
//! ```yaml
//! web:
//!   allow: ["127.0.0.1", "10.0.0.0/8", "wiki.internal.example"]  # reachable despite the guard
//!   timeout: 30s          # one fetch (redirects included) or one search
//!   max_bytes: 10485760   # of one response body; the rest is left out
//!   search:               # no url: web_search answers that no search is configured
//!     provider: searxng   # the default, and the only kind so far
//!     url: http://127.0.0.1:8888
//! ```
//!
//! `web_fetch` refuses URLs that resolve to loopback, private, link-local, shared (CGNAT),
//! documentation, multicast or cloud metadata addresses unless `allow` names the host or a
//! network that holds the address, as `push.allow` does for webhooks. The search service is
//! the operator's own choice and is not held to the guard. Every key is optional.

use std::num::NonZeroUsize;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::schema::http_url;
use super::{ConfigError, LoadedConfig};
use crate::duration;
use crate::ssrf::AllowRule;
use crate::tools::web::{
    DEFAULT_MAX_BYTES, DEFAULT_TIMEOUT, SearchConfig, SearchProvider, WebConfig,
};

impl LoadedConfig {
    /// `web:`, with every `allow` entry checked.
    pub(super) fn resolve_web(&self) -> Result<WebConfig, ConfigError> {
        let settings = &self.settings.web;
        for entry in &settings.allow {
            AllowRule::parse(entry).map_err(|message| self.key_error("web.allow", message))?;
        }
        if settings.timeout.is_zero() {
            return Err(self.key_error("web.timeout", "must be longer than 0s".to_owned()));
        }
        Ok(WebConfig {
            allow: settings.allow.clone(),
            timeout: settings.timeout,
            max_bytes: settings.max_bytes.get(),
            search: SearchConfig {
                provider: settings.search.provider,
                url: settings.search.url.clone(),
            },
        })
    }
}

// ---- As written in files ----

/// `web:` as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct WebSettings {
    pub(crate) allow: Vec<String>,
    #[serde(with = "duration")]
    pub(crate) timeout: Duration,
    pub(crate) max_bytes: NonZeroUsize,
    pub(crate) search: SearchSettings,
}

impl Default for WebSettings {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            max_bytes: NonZeroUsize::new(DEFAULT_MAX_BYTES).unwrap_or(NonZeroUsize::MIN),
            search: SearchSettings::default(),
        }
    }
}

/// `web.search:` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct SearchSettings {
    pub(crate) provider: SearchProvider,
    #[serde(deserialize_with = "http_url")]
    pub(crate) url: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, test_project};

    fn load(text: &str) -> Result<Config, String> {
        let (_dir, _file, sources) = test_project(text);
        Config::load(&sources)
            .and_then(|loaded| loaded.resolve())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_allow_nothing_and_configure_no_search() {
        let config = load("").unwrap();
        assert_eq!(config.web, WebConfig::default());
        assert_eq!(config.web.timeout, Duration::from_secs(30));
        assert_eq!(config.web.max_bytes, 10 * 1024 * 1024);
        assert_eq!(config.web.search.url, None);
    }

    #[test]
    fn the_section_is_read_and_checked() {
        let config = load(
            "web:\n  allow: [\"127.0.0.1\", localhost]\n  timeout: 5s\n  max_bytes: 1000\n  \
             search:\n    provider: searxng\n    url: http://127.0.0.1:8888\n",
        )
        .unwrap();
        assert_eq!(
            config.web,
            WebConfig {
                allow: vec!["127.0.0.1".to_owned(), "localhost".to_owned()],
                timeout: Duration::from_secs(5),
                max_bytes: 1000,
                search: SearchConfig {
                    provider: SearchProvider::Searxng,
                    url: Some("http://127.0.0.1:8888".to_owned()),
                },
            }
        );
        // The provider is SearXNG unless said otherwise.
        let config = load("web:\n  search:\n    url: https://search.example\n").unwrap();
        assert_eq!(config.web.search.provider, SearchProvider::Searxng);
        for (bad, key) in [
            ("web:\n  allow: [\"10.0.0.0/33\"]\n", "web.allow"),
            ("web:\n  timeout: 0s\n", "web.timeout"),
            ("web:\n  max_bytes: 0\n", "web.max_bytes"),
            (
                "web:\n  search:\n    provider: google\n    url: http://x\n",
                "web.search.provider",
            ),
            (
                "web:\n  search:\n    provider: searxng\n    url: ftp://x\n",
                "web.search.url",
            ),
            ("web:\n  fetch: true\n", "web.fetch"),
            ("web:\n  search:\n    key: k\n", "web.search.key"),
        ] {
            let err = load(bad).unwrap_err();
            assert!(err.contains(key), "{bad}: {err}");
        }
    }
}
