//! The `agent:` and `providers:` sections: which model services the node may call, and which one runs model-driven roles.
//!
//! ```yaml
//! agent:
//!   provider: anthropic      # default: the only provider, else `anthropic` if ANTHROPIC_API_KEY
//!                            # is set, else `openai` if OPENAI_API_KEY is set
//!   model: sonnet            # the model of roles whose model is `inherit`
//!   max_tokens: 8192
//!   max_depth: 1             # delegation depth: 1 lets only user-started tasks use `Agent`
//!   max_children: 4          # children one task may run at once; more calls wait
//!   background_after: 120s   # a foreground child still running then moves to the background
//!   context_window: 200000   # tokens; the conversation is compacted at compact_at of it
//!   compact_at: 0.8
//! providers:
//!   anthropic:               # a name of your choice
//!     kind: anthropic        # anthropic | openai; may be left out when the name is a kind
//!     base_url: https://api.anthropic.com
//!     api_key_env: ANTHROPIC_API_KEY   # the variable that holds the key, never the key
//!     models: {haiku: claude-haiku-4-5, sonnet: claude-sonnet-4-6, opus: claude-opus-4-6}
//!     timeout: 300s          # one attempt, request to end of the streamed answer
//!     connect_timeout: 10s
//!     idle_timeout: 120s     # silence allowed while an answer streams
//!     max_retries: 4         # on 429, 5xx, 529 and connection errors
//!     retry_backoff: 500ms   # the first retry's wait; doubles each time, up to 30s
//!   local:
//!     kind: openai           # any OpenAI-compatible server; its base URL includes /v1
//!     base_url: http://localhost:11434/v1
//!     models: {sonnet: qwen3:32b}
//! ```
//!
//! Without a `providers:` section the environment defines them (see
//! `crate::provider::Providers`). The key itself is never in a file: only the name of the
//! environment variable that holds it.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

use super::{ConfigError, LoadedConfig};
use crate::duration;
use crate::provider::{ProviderConfig, ProviderKind};

/// `agent:` — which provider and model run model-driven roles.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentConfig {
    /// The provider, by name; `None` picks one (see `crate::provider::Providers`).
    pub provider: Option<String>,
    /// The model of roles whose model is `inherit`: an alias (`haiku`, `sonnet`, `opus`, or
    /// one of the provider's `models`) or a concrete id.
    pub model: String,
    /// The most output tokens one model call may produce.
    pub max_tokens: u32,
    /// How deep delegation chains may go from this node: a task at depth `d` (0 when a user
    /// started it) gets the `Agent` tool only while `d < max_depth`. 1: only tasks a user
    /// started may delegate.
    pub max_depth: u32,
    /// Children one task may have running at once; more `Agent` calls wait for a place.
    pub max_children: usize,
    /// How long a foreground `Agent` call waits for its child before the child moves to the
    /// background (it keeps running; the parent is notified when it ends).
    #[serde(serialize_with = "duration::serialize")]
    pub background_after: Duration,
    /// The model's context window in tokens; the conversation is compacted when a request
    /// would fill `compact_at` of it.
    pub context_window: u64,
    /// The share of the context window (0 to 1) at which the conversation is compacted.
    pub compact_at: f64,
}

// ---- As written in files ----

/// `agent:` as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct AgentSettings {
    #[serde(deserialize_with = "optional_name")]
    pub(crate) provider: Option<String>,
    #[serde(deserialize_with = "name")]
    pub(crate) model: String,
    pub(crate) max_tokens: NonZeroU32,
    pub(crate) max_depth: u32,
    pub(crate) max_children: NonZeroU32,
    #[serde(serialize_with = "duration::serialize", deserialize_with = "positive")]
    pub(crate) background_after: Duration,
    pub(crate) context_window: NonZeroU32,
    #[serde(deserialize_with = "share")]
    pub(crate) compact_at: f64,
}

impl Default for AgentSettings {
    fn default() -> Self {
        Self {
            provider: None,
            model: "sonnet".to_owned(),
            max_tokens: NonZeroU32::new(8192).unwrap_or(NonZeroU32::MIN),
            max_depth: 1,
            max_children: NonZeroU32::new(4).unwrap_or(NonZeroU32::MIN),
            background_after: Duration::from_secs(120),
            context_window: NonZeroU32::new(200_000).unwrap_or(NonZeroU32::MIN),
            compact_at: 0.8,
        }
    }
}

fn share<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    let value = f64::deserialize(deserializer)?;
    if !(value > 0.0 && value <= 1.0) {
        return Err(serde::de::Error::custom(
            "must be a share of the context window: more than 0, at most 1",
        ));
    }
    Ok(value)
}

/// `providers.NAME:` as written. Every key has a default, so each can be checked on its own;
/// `kind` is required unless the name is a kind (checked when resolving).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ProviderSettings {
    pub(crate) kind: Option<ProviderKind>,
    #[serde(deserialize_with = "super::schema::http_url")]
    pub(crate) base_url: Option<String>,
    #[serde(deserialize_with = "optional_name")]
    pub(crate) api_key_env: Option<String>,
    #[serde(deserialize_with = "model_table")]
    pub(crate) models: BTreeMap<String, String>,
    #[serde(serialize_with = "duration::serialize", deserialize_with = "positive")]
    pub(crate) timeout: Duration,
    #[serde(serialize_with = "duration::serialize", deserialize_with = "positive")]
    pub(crate) connect_timeout: Duration,
    #[serde(serialize_with = "duration::serialize", deserialize_with = "positive")]
    pub(crate) idle_timeout: Duration,
    pub(crate) max_retries: u32,
    #[serde(with = "duration")]
    pub(crate) retry_backoff: Duration,
}

impl Default for ProviderSettings {
    fn default() -> Self {
        let http = crate::provider::HttpSettings::default();
        Self {
            kind: None,
            base_url: None,
            api_key_env: None,
            models: BTreeMap::new(),
            timeout: http.timeout,
            connect_timeout: http.connect_timeout,
            idle_timeout: http.idle_timeout,
            max_retries: http.max_retries,
            retry_backoff: http.retry_backoff,
        }
    }
}

/// The schema of one `providers.NAME` entry: its tree of defaults.
pub(crate) fn provider_entry_schema() -> Result<serde_yaml_ng::Value, serde_yaml_ng::Error> {
    serde_yaml_ng::to_value(ProviderSettings::default())
}

fn name<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let text = String::deserialize(deserializer)?;
    if text.trim().is_empty() || text.chars().any(char::is_whitespace) {
        return Err(serde::de::Error::custom(
            "must be a name: not empty, without spaces",
        ));
    }
    Ok(text)
}

fn optional_name<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    match Option::<String>::deserialize(deserializer)? {
        Some(text) => name(serde::de::value::StringDeserializer::<D::Error>::new(text)).map(Some),
        None => Ok(None),
    }
}

fn model_table<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    let table = BTreeMap::<String, String>::deserialize(deserializer)?;
    if let Some((alias, _)) = table.iter().find(|(_, id)| id.trim().is_empty()) {
        return Err(serde::de::Error::custom(format!(
            "the model of alias `{alias}` is empty"
        )));
    }
    Ok(table)
}

fn positive<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let value = duration::deserialize(deserializer)?;
    if value.is_zero() {
        return Err(serde::de::Error::custom("must be longer than zero"));
    }
    Ok(value)
}

// ---- Resolution ----

impl LoadedConfig {
    /// `agent:`, as configured.
    pub(super) fn resolve_agent(&self) -> AgentConfig {
        let agent = &self.settings.agent;
        AgentConfig {
            provider: agent.provider.clone(),
            model: agent.model.clone(),
            max_tokens: agent.max_tokens.get(),
            max_depth: agent.max_depth,
            max_children: usize::try_from(agent.max_children.get()).unwrap_or(usize::MAX),
            background_after: agent.background_after,
            context_window: u64::from(agent.context_window.get()),
            compact_at: agent.compact_at,
        }
    }

    /// `providers:`, with each provider's kind (from its name when not written), base URL
    /// and key variable filled in.
    pub(super) fn resolve_providers(
        &self,
    ) -> Result<BTreeMap<String, ProviderConfig>, ConfigError> {
        let mut providers = BTreeMap::new();
        for (name, settings) in &self.settings.providers {
            let Some(kind) = settings.kind.or_else(|| ProviderKind::from_name(name)) else {
                let key = format!("providers.{name}.kind");
                return Err(ConfigError::Resolve {
                    origin: self.origin_below(&format!("providers.{name}")),
                    key,
                    message: "missing: say which API the provider speaks (anthropic or openai)"
                        .to_owned(),
                });
            };
            let base_url = settings
                .base_url
                .as_deref()
                .unwrap_or(kind.default_base_url())
                .trim_end_matches('/')
                .to_owned();
            let api_key_env = settings
                .api_key_env
                .clone()
                .or_else(|| kind.default_key_env(&base_url).map(str::to_owned));
            providers.insert(
                name.clone(),
                ProviderConfig {
                    kind,
                    base_url,
                    api_key_env,
                    models: settings.models.clone(),
                    timeout: settings.timeout,
                    connect_timeout: settings.connect_timeout,
                    idle_timeout: settings.idle_timeout,
                    max_retries: settings.max_retries,
                    retry_backoff: settings.retry_backoff,
                },
            );
        }
        Ok(providers)
    }

    /// The origin of some key at or below `prefix` (for errors about a whole entry).
    fn origin_below(&self, prefix: &str) -> super::Origin {
        let below = format!("{prefix}.");
        self.origins
            .iter()
            .find(|(key, _)| *key == prefix || key.starts_with(&below))
            .map(|(_, origin)| origin.clone())
            .unwrap_or(super::Origin::Default)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::config::{Config, Origin};

    use crate::config::test_project as project;

    fn load(text: &str) -> Result<Config, ConfigError> {
        let (_dir, _file, sources) = project(text);
        Config::load(&sources)?.resolve()
    }

    fn error(text: &str) -> (String, PathBuf) {
        let (_dir, file, sources) = project(text);
        let error = Config::load(&sources)
            .and_then(|loaded| loaded.resolve())
            .unwrap_err();
        (error.to_string(), file)
    }

    #[test]
    fn defaults_have_no_providers_and_sonnet() {
        let config = load("").unwrap();
        assert_eq!(
            config.agent,
            AgentConfig {
                provider: None,
                model: "sonnet".into(),
                max_tokens: 8192,
                max_depth: 1,
                max_children: 4,
                background_after: Duration::from_secs(120),
                context_window: 200_000,
                compact_at: 0.8,
            }
        );
        assert!(config.providers.is_empty());
    }

    #[test]
    fn reads_providers_with_names_of_the_users_choice() {
        let config = load(
            "agent:\n  provider: local\n  model: opus\n  max_tokens: 1000\n\
             \x20 max_depth: 2\n  max_children: 1\n  background_after: 5s\n\
             \x20 context_window: 32000\n  compact_at: 0.5\n\
             providers:\n\
             \x20 anthropic:\n    models: {sonnet: claude-sonnet-4-5, fast: claude-haiku-4-5}\n\
             \x20   timeout: 60s\n    max_retries: 2\n    retry_backoff: 10ms\n\
             \x20 local:\n    kind: openai\n    base_url: http://localhost:11434/v1/\n\
             \x20 work:\n    kind: openai\n    api_key_env: WORK_OPENAI_KEY\n",
        )
        .unwrap();
        assert_eq!(
            config.agent,
            AgentConfig {
                provider: Some("local".into()),
                model: "opus".into(),
                max_tokens: 1000,
                max_depth: 2,
                max_children: 1,
                background_after: Duration::from_secs(5),
                context_window: 32_000,
                compact_at: 0.5,
            }
        );
        let anthropic = &config.providers["anthropic"];
        assert_eq!(anthropic.kind, ProviderKind::Anthropic);
        assert_eq!(anthropic.base_url, "https://api.anthropic.com");
        assert_eq!(anthropic.api_key_env.as_deref(), Some("ANTHROPIC_API_KEY"));
        assert_eq!(anthropic.models["fast"], "claude-haiku-4-5");
        assert_eq!(anthropic.timeout, Duration::from_secs(60));
        assert_eq!(anthropic.connect_timeout, Duration::from_secs(10));
        assert_eq!(anthropic.max_retries, 2);
        assert_eq!(anthropic.retry_backoff, Duration::from_millis(10));
        let local = &config.providers["local"];
        assert_eq!(local.base_url, "http://localhost:11434/v1");
        assert_eq!(local.api_key_env, None);
        let work = &config.providers["work"];
        assert_eq!(work.base_url, "https://api.openai.com/v1");
        assert_eq!(work.api_key_env.as_deref(), Some("WORK_OPENAI_KEY"));
    }

    #[test]
    fn provider_entries_merge_across_layers_with_origins() {
        let (dir, project_file, mut sources) =
            project("providers:\n  anthropic:\n    max_retries: 1\n");
        let user_file = dir.path().join("home/.mew/config.yaml");
        std::fs::create_dir_all(user_file.parent().unwrap()).unwrap();
        std::fs::write(
            &user_file,
            "providers:\n  anthropic:\n    base_url: http://proxy:8080\n",
        )
        .unwrap();
        sources.home = Some(dir.path().join("home"));
        let loaded = Config::load(&sources).unwrap();
        let config = loaded.resolve().unwrap();
        let anthropic = &config.providers["anthropic"];
        assert_eq!(anthropic.base_url, "http://proxy:8080");
        assert_eq!(anthropic.max_retries, 1);
        assert_eq!(
            loaded.origin("providers.anthropic.base_url"),
            Some(&Origin::File(user_file))
        );
        assert_eq!(
            loaded.origin("providers.anthropic.max_retries"),
            Some(&Origin::File(project_file))
        );
        // The empty default `providers: {}` no longer has an origin of its own.
        assert_eq!(loaded.origin("providers"), None);
    }

    #[test]
    fn an_unknown_kind_names_the_file_line_and_kinds() {
        let (message, file) = error("providers:\n  mine:\n    kind: gemini\n");
        assert!(
            message.starts_with(&format!("{}:3:", file.display())),
            "{message}"
        );
        assert!(message.contains("providers.mine.kind"), "{message}");
        assert!(
            message.contains("anthropic") && message.contains("openai"),
            "{message}"
        );
    }

    #[test]
    fn a_missing_kind_is_required_unless_the_name_is_one() {
        let (message, _) = error("providers:\n  mine:\n    base_url: http://localhost:8000/v1\n");
        assert!(message.contains("providers.mine.kind"), "{message}");
        assert!(message.contains("anthropic or openai"), "{message}");
    }

    #[test]
    fn unknown_keys_inside_an_entry_are_errors_with_suggestions() {
        let (message, file) = error("providers:\n  mine:\n    kind: openai\n    modles: {}\n");
        assert_eq!(
            message,
            format!(
                "{}:4: unknown key providers.mine.modles (did you mean models?)",
                file.display()
            )
        );
        let (message, _) = error("providers:\n  mine:\n    api_key: sk-123\n");
        assert!(
            message.contains("unknown key providers.mine.api_key"),
            "{message}"
        );
    }

    #[test]
    fn bad_values_are_errors() {
        for (text, key) in [
            (
                "providers:\n  a:\n    base_url: localhost:8080\n",
                "providers.a.base_url",
            ),
            ("providers:\n  a:\n    timeout: 0s\n", "providers.a.timeout"),
            (
                "providers:\n  a:\n    models: {sonnet: ''}\n",
                "providers.a.models.sonnet",
            ),
            (
                "providers:\n  a:\n    models: {sonnet: [x]}\n",
                "providers.a.models.sonnet",
            ),
            (
                "providers:\n  a:\n    max_retries: -1\n",
                "providers.a.max_retries",
            ),
            ("providers:\n  a.b:\n    kind: openai\n", "providers.a.b"),
            ("providers:\n  a: 5\n", "providers.a"),
            ("agent:\n  max_tokens: 0\n", "agent.max_tokens"),
            ("agent:\n  max_children: 0\n", "agent.max_children"),
            ("agent:\n  background_after: 0s\n", "agent.background_after"),
            ("agent:\n  compact_at: 1.5\n", "agent.compact_at"),
            ("agent:\n  model: ''\n", "agent.model"),
        ] {
            let (message, _) = error(text);
            assert!(
                message.contains(&format!("bad value for {key}")),
                "{text}: {message}"
            );
        }
    }

    #[test]
    fn an_entry_with_nothing_under_it_is_a_provider_with_defaults() {
        let config = load("providers:\n  openai:\n").unwrap();
        assert_eq!(config.providers["openai"].kind, ProviderKind::Openai);
        assert_eq!(
            config.providers["openai"].api_key_env.as_deref(),
            Some("OPENAI_API_KEY")
        );
    }

    #[test]
    fn the_shown_configuration_reads_back_the_same() {
        let config = load(
            "providers:\n  local:\n    kind: openai\n    base_url: http://127.0.0.1:1/v1\n\
             \x20   models: {sonnet: qwen3}\n    retry_backoff: 10ms\n",
        )
        .unwrap();
        let yaml = serde_yaml_ng::to_string(&config).unwrap();
        assert!(yaml.contains("    kind: openai\n"), "{yaml}");
        assert!(yaml.contains("    timeout: 5m\n"), "{yaml}");
        let reread = load(&yaml).unwrap();
        assert_eq!(reread.providers, config.providers);
        assert_eq!(reread.agent, config.agent);
    }
}
