//! `Providers`: the node's model providers, built from the configuration and the environment, and the mapping of role models to concrete ids.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use mew_cards::ModelChoice;
use serde::Serialize;

use super::anthropic::{self, AnthropicProvider};
use super::openai::{self, OpenAiProvider};
use super::{HttpSettings, KeySource, Provider, ProviderSetup};
use super::{ProviderConfig, ProviderKind};

/// The environment variables that define providers when the configuration has no
/// `providers:` section.
const ANTHROPIC_BASE_URL: &str = "ANTHROPIC_BASE_URL";
const OPENAI_BASE_URL: &str = "OPENAI_BASE_URL";

/// Why the providers cannot be built from the configuration and the environment.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProviderConfigError {
    /// A provider that needs a key has none.
    #[error("provider `{provider}` needs an API key: {fix}")]
    MissingKey { provider: String, fix: String },
    /// The key's text cannot be sent in an HTTP header.
    #[error(
        "provider `{provider}`: the key in {} is not a valid HTTP header value",
        key_source.env_var().unwrap_or("its variable")
    )]
    BadKey {
        provider: String,
        key_source: KeySource,
    },
    /// The base URL is not an `http://` or `https://` URL with a host.
    #[error("provider `{provider}`: `{url}` (from {from}) is not a usable base URL: {message}")]
    BadUrl {
        provider: String,
        url: String,
        from: String,
        message: String,
    },
    /// `agent.provider` names no provider.
    #[error("agent.provider is `{name}`, but {known}")]
    UnknownProvider { name: String, known: String },
    /// The HTTP client could not be built (TLS setup).
    #[error("provider `{provider}`: the HTTP client cannot be built: {message}")]
    Client { provider: String, message: String },
}

/// What `mew config show` and the logs say about a provider (never its key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ProviderDescription {
    /// Its name.
    pub(crate) name: String,
    /// The API it speaks.
    pub(crate) kind: ProviderKind,
    /// Where it is.
    pub(crate) base_url: String,
    /// The environment variable its key is read from, if any.
    pub(crate) key_env: Option<String>,
    /// Whether that variable was set (non-empty).
    pub(crate) key_found: bool,
    /// `config` (a `providers:` entry) or `environment` (no `providers:` section).
    pub(crate) source: &'static str,
    /// Whether it runs model roles.
    pub(crate) default: bool,
    /// Its alias table: built-in aliases with the configured ones over them.
    pub(crate) models: BTreeMap<String, String>,
}

impl fmt::Display for ProviderDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}, {}", self.name, self.kind, self.base_url)?;
        match (&self.key_env, self.key_found) {
            (Some(var), true) => write!(f, ", key from {var}")?,
            (Some(var), false) => write!(f, ", no key: {var} is not set")?,
            (None, _) => write!(f, ", no key")?,
        }
        write!(f, ", from {})", self.source)?;
        if self.default {
            f.write_str(" [default]")?;
        }
        Ok(())
    }
}

/// The node's model providers by name, and the one that runs model roles.
///
/// Built once at start from the configuration and a snapshot of the environment; cheap to
/// share (`Arc` inside).
#[cfg_attr(not(test), allow(dead_code))] // wired by the agent runtime
pub(crate) struct Providers {
    entries: BTreeMap<String, Entry>,
    default: Option<String>,
}

struct Entry {
    provider: Arc<dyn Provider>,
    description: ProviderDescription,
}

impl fmt::Debug for Providers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Providers")
            .field("providers", &self.describe())
            .field("default", &self.default)
            .finish()
    }
}

/// One provider to build.
struct Spec {
    name: String,
    kind: ProviderKind,
    base_url: String,
    base_url_from: String,
    key_source: KeySource,
    models: BTreeMap<String, String>,
    http: HttpSettings,
    source: &'static str,
}

impl Providers {
    /// Builds the providers of the `providers:` section, or, when there are none, the ones the
    /// environment defines: `ANTHROPIC_API_KEY` (with `ANTHROPIC_BASE_URL`) makes an
    /// `anthropic` provider; `OPENAI_API_KEY` or `OPENAI_BASE_URL` makes an `openai` one
    /// (a local server named by `OPENAI_BASE_URL` needs no key). `env` is a snapshot of the
    /// process environment; nothing here reads or changes the real one.
    ///
    /// The default provider is `default` (`agent.provider`), else the only provider, else `anthropic`
    /// if `ANTHROPIC_API_KEY` is set, else `openai` if `OPENAI_API_KEY` is set (by name, or
    /// the only provider of that kind reading that variable), else none.
    #[cfg_attr(not(test), allow(dead_code))] // wired by the agent runtime
    pub(crate) fn new(
        providers: &BTreeMap<String, ProviderConfig>,
        default: Option<&str>,
        env: &HashMap<String, String>,
    ) -> Result<Self, ProviderConfigError> {
        let specs = if providers.is_empty() {
            implicit_specs(env)
        } else {
            providers
                .iter()
                .map(|(name, provider)| configured_spec(name, provider))
                .collect()
        };
        let mut entries = BTreeMap::new();
        for spec in specs {
            let entry = build(spec, env)?;
            entries.insert(entry.description.name.clone(), entry);
        }
        let default = choose_default(default, &entries, env)?;
        if let Some(entry) = default.as_ref().and_then(|name| entries.get_mut(name)) {
            entry.description.default = true;
        }
        Ok(Self { entries, default })
    }

    /// The providers of a resolved configuration, for tests that start from a file.
    #[cfg(test)]
    pub(crate) fn from_config(
        config: &crate::config::Config,
        env: &HashMap<String, String>,
    ) -> Result<Self, ProviderConfigError> {
        Self::new(&config.providers, config.agent.provider.as_deref(), env)
    }

    /// The provider that runs model roles, if any is configured.
    #[cfg_attr(not(test), allow(dead_code))] // wired by the agent runtime
    pub(crate) fn default(&self) -> Option<Arc<dyn Provider>> {
        self.default.as_ref().and_then(|name| self.get(name))
    }

    /// The provider named `name`.
    #[cfg_attr(not(test), allow(dead_code))] // wired by the agent runtime
    pub(crate) fn get(&self, name: &str) -> Option<Arc<dyn Provider>> {
        self.entries.get(name).map(|entry| entry.provider.clone())
    }

    /// Every provider, by name, for `mew config show` and the logs.
    #[cfg_attr(not(test), allow(dead_code))] // wired by the agent runtime
    pub(crate) fn describe(&self) -> Vec<ProviderDescription> {
        self.entries
            .values()
            .map(|entry| entry.description.clone())
            .collect()
    }

    /// The concrete model id for a role's `model`: `inherit` takes `agent_default` (the
    /// caller's model, normally `agent.model`); aliases (`haiku`, `sonnet`, `opus`, and any
    /// in the provider's `models`) go through the default provider's table; other ids are
    /// used as they are. With no provider, the value is returned as written.
    #[cfg_attr(not(test), allow(dead_code))] // wired by the agent runtime
    pub(crate) fn resolve_model(&self, role_model: &ModelChoice, agent_default: &str) -> String {
        let wanted = match role_model {
            ModelChoice::Inherit => agent_default,
            ModelChoice::Haiku => "haiku",
            ModelChoice::Sonnet => "sonnet",
            ModelChoice::Opus => "opus",
            ModelChoice::Id(id) => id,
        };
        match self.default() {
            Some(provider) => provider.resolve_model(wanted),
            None => wanted.to_owned(),
        }
    }
}

/// The built-in alias table of a kind.
fn builtin_aliases(kind: ProviderKind) -> &'static [(&'static str, &'static str)] {
    match kind {
        ProviderKind::Anthropic => anthropic::ALIASES,
        ProviderKind::Openai => openai::ALIASES,
    }
}

fn configured_spec(name: &str, provider: &ProviderConfig) -> Spec {
    let key_source = match &provider.api_key_env {
        Some(var) => KeySource::Env {
            var: var.clone(),
            named_by: Some(format!("providers.{name}.api_key_env")),
        },
        None => KeySource::Unset {
            config_key: format!("providers.{name}.api_key_env"),
        },
    };
    Spec {
        name: name.to_owned(),
        kind: provider.kind,
        base_url: provider.base_url.clone(),
        base_url_from: format!("providers.{name}.base_url"),
        key_source,
        models: provider.models.clone(),
        http: HttpSettings {
            timeout: provider.timeout,
            connect_timeout: provider.connect_timeout,
            idle_timeout: provider.idle_timeout,
            max_retries: provider.max_retries,
            retry_backoff: provider.retry_backoff,
        },
        source: "config",
    }
}

/// The providers the environment defines when the configuration has none.
fn implicit_specs(env: &HashMap<String, String>) -> Vec<Spec> {
    let mut specs = Vec::new();
    for kind in [ProviderKind::Anthropic, ProviderKind::Openai] {
        let (key_var, url_var) = match kind {
            ProviderKind::Anthropic => (anthropic::DEFAULT_KEY_ENV, ANTHROPIC_BASE_URL),
            ProviderKind::Openai => (openai::DEFAULT_KEY_ENV, OPENAI_BASE_URL),
        };
        let key = lookup(env, key_var);
        let url = lookup(env, url_var);
        // Anthropic needs a key; an OpenAI-compatible server named by its URL may not.
        let wanted = match kind {
            ProviderKind::Anthropic => key.is_some(),
            ProviderKind::Openai => key.is_some() || url.is_some(),
        };
        if !wanted {
            continue;
        }
        let (base_url, base_url_from) = match url {
            Some(url) => (url.trim_end_matches('/').to_owned(), url_var.to_owned()),
            None => (kind.default_base_url().to_owned(), "the default".to_owned()),
        };
        specs.push(Spec {
            name: kind.as_str().to_owned(),
            kind,
            base_url,
            base_url_from,
            key_source: KeySource::Env {
                var: key_var.to_owned(),
                named_by: None,
            },
            models: BTreeMap::new(),
            http: HttpSettings::default(),
            source: "environment",
        });
    }
    specs
}

/// A variable's value, if set and not empty.
fn lookup<'a>(env: &'a HashMap<String, String>, name: &str) -> Option<&'a str> {
    env.get(name)
        .map(|value| value.trim())
        .filter(|value| !value.is_empty())
}

fn build(spec: Spec, env: &HashMap<String, String>) -> Result<Entry, ProviderConfigError> {
    check_url(&spec)?;
    let api_key = spec
        .key_source
        .env_var()
        .and_then(|var| lookup(env, var))
        .map(str::to_owned);
    let needs_key = match spec.kind {
        ProviderKind::Anthropic => true,
        ProviderKind::Openai => openai::is_official(&spec.base_url),
    };
    if needs_key && api_key.is_none() {
        return Err(ProviderConfigError::MissingKey {
            provider: spec.name,
            fix: spec.key_source.fix(),
        });
    }
    let mut models: BTreeMap<String, String> = builtin_aliases(spec.kind)
        .iter()
        .map(|(alias, id)| ((*alias).to_owned(), (*id).to_owned()))
        .collect();
    models.extend(spec.models);
    let description = ProviderDescription {
        name: spec.name.clone(),
        kind: spec.kind,
        base_url: spec.base_url.clone(),
        key_env: spec.key_source.env_var().map(str::to_owned),
        key_found: api_key.is_some(),
        source: spec.source,
        default: false,
        models: models.clone(),
    };
    let setup = ProviderSetup {
        name: spec.name,
        base_url: spec.base_url,
        api_key,
        key_source: spec.key_source,
        models,
        http: spec.http,
    };
    let provider: Arc<dyn Provider> = match spec.kind {
        ProviderKind::Anthropic => Arc::new(AnthropicProvider::new(setup)?),
        ProviderKind::Openai => Arc::new(OpenAiProvider::new(setup)?),
    };
    Ok(Entry {
        provider,
        description,
    })
}

/// The base URL must be `http://` or `https://` with a host (the configuration checks its
/// own; URLs from the environment are checked only here).
fn check_url(spec: &Spec) -> Result<(), ProviderConfigError> {
    let bad = |message: String| ProviderConfigError::BadUrl {
        provider: spec.name.clone(),
        url: spec.base_url.clone(),
        from: spec.base_url_from.clone(),
        message,
    };
    let url = reqwest::Url::parse(&spec.base_url).map_err(|error| bad(error.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad(format!(
            "the scheme is {}, not http or https",
            url.scheme()
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("it has no host".to_owned()));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad(
            "it has a query or fragment; paths are appended to it".to_owned()
        ));
    }
    Ok(())
}

fn choose_default(
    wanted: Option<&str>,
    entries: &BTreeMap<String, Entry>,
    env: &HashMap<String, String>,
) -> Result<Option<String>, ProviderConfigError> {
    if let Some(name) = wanted {
        if entries.contains_key(name) {
            return Ok(Some(name.to_owned()));
        }
        let known = if entries.is_empty() {
            "no provider is configured (set ANTHROPIC_API_KEY or OPENAI_API_KEY, or add a \
             providers: section)"
                .to_owned()
        } else {
            let names: Vec<&str> = entries.keys().map(String::as_str).collect();
            format!("the providers are {}", names.join(", "))
        };
        return Err(ProviderConfigError::UnknownProvider {
            name: name.to_owned(),
            known,
        });
    }
    if entries.len() == 1 {
        return Ok(entries.keys().next().cloned());
    }
    for kind in [ProviderKind::Anthropic, ProviderKind::Openai] {
        let var = match kind {
            ProviderKind::Anthropic => anthropic::DEFAULT_KEY_ENV,
            ProviderKind::Openai => openai::DEFAULT_KEY_ENV,
        };
        if lookup(env, var).is_none() {
            continue;
        }
        let of_kind = |entry: &&Entry| entry.description.kind == kind;
        if let Some(entry) = entries.get(kind.as_str()).filter(of_kind) {
            return Ok(Some(entry.description.name.clone()));
        }
        let reading: Vec<&Entry> = entries
            .values()
            .filter(of_kind)
            .filter(|entry| entry.description.key_env.as_deref() == Some(var))
            .collect();
        if let [only] = reading.as_slice() {
            return Ok(Some(only.description.name.clone()));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use tempfile::TempDir;

    use super::*;
    use crate::config::Sources;

    fn config(yaml: &str) -> Config {
        let dir = TempDir::new().unwrap();
        let file = dir.path().join(".mew/config.yaml");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, yaml).unwrap();
        let sources = Sources {
            home: Some(dir.path().join("home")),
            ..Sources::new(dir.path())
        };
        Config::load(&sources).unwrap().resolve().unwrap()
    }

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect()
    }

    #[test]
    fn without_a_section_the_environment_defines_providers() {
        let providers = Providers::from_config(&config(""), &env(&[])).unwrap();
        assert!(providers.describe().is_empty());
        assert!(providers.default().is_none());

        let both = env(&[
            ("ANTHROPIC_API_KEY", "sk-ant-secret"),
            ("OPENAI_API_KEY", "sk-secret"),
        ]);
        let providers = Providers::from_config(&config(""), &both).unwrap();
        let described = providers.describe();
        assert_eq!(described.len(), 2);
        assert_eq!(
            described[0],
            ProviderDescription {
                name: "anthropic".into(),
                kind: ProviderKind::Anthropic,
                base_url: "https://api.anthropic.com".into(),
                key_env: Some("ANTHROPIC_API_KEY".into()),
                key_found: true,
                source: "environment",
                default: true,
                models: [
                    ("haiku", "claude-haiku-4-5"),
                    ("opus", "claude-opus-4-6"),
                    ("sonnet", "claude-sonnet-4-6"),
                ]
                .into_iter()
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .collect(),
            }
        );
        assert_eq!(described[1].base_url, "https://api.openai.com/v1");
        assert!(!described[1].default);
        assert_eq!(providers.default().unwrap().name(), "anthropic");
        // Never the key.
        let shown = format!(
            "{providers:?} {}",
            serde_json::to_string(&described).unwrap()
        );
        assert!(!shown.contains("secret"), "{shown}");
        assert_eq!(
            described[0].to_string(),
            "anthropic (anthropic, https://api.anthropic.com, key from ANTHROPIC_API_KEY, \
             from environment) [default]"
        );

        let openai_only = env(&[
            ("OPENAI_API_KEY", "k"),
            ("OPENAI_BASE_URL", "http://h:1/v1/"),
        ]);
        let providers = Providers::from_config(&config(""), &openai_only).unwrap();
        assert_eq!(providers.default().unwrap().name(), "openai");
        assert_eq!(providers.describe()[0].base_url, "http://h:1/v1");

        // A local server needs no key.
        let local = env(&[("OPENAI_BASE_URL", "http://localhost:11434/v1")]);
        let providers = Providers::from_config(&config(""), &local).unwrap();
        assert!(!providers.describe()[0].key_found);
        assert!(providers.default().is_some());
    }

    #[test]
    fn configured_providers_replace_the_environment_ones() {
        let yaml = "providers:\n  local:\n    kind: openai\n    base_url: http://localhost:8000/v1\n\
                    \x20   models: {sonnet: qwen3, fast: qwen3:0.6b}\n";
        let providers =
            Providers::from_config(&config(yaml), &env(&[("ANTHROPIC_API_KEY", "k")])).unwrap();
        let names: Vec<String> = providers.describe().into_iter().map(|d| d.name).collect();
        assert_eq!(names, ["local"]);
        assert_eq!(providers.get("local").unwrap().name(), "local");
        assert!(providers.get("anthropic").is_none());
        assert_eq!(providers.describe()[0].key_env, None);
    }

    #[test]
    fn role_models_map_through_the_default_providers_table() {
        let yaml = "agent:\n  model: fast\n\
                    providers:\n  local:\n    kind: openai\n    base_url: http://localhost:8000/v1\n\
                    \x20   models: {sonnet: qwen3, fast: qwen3:0.6b}\n";
        let config = config(yaml);
        let providers = Providers::from_config(&config, &env(&[])).unwrap();
        let resolve = |choice: ModelChoice| providers.resolve_model(&choice, &config.agent.model);
        assert_eq!(resolve(ModelChoice::Sonnet), "qwen3");
        assert_eq!(resolve(ModelChoice::Haiku), "gpt-4o-mini");
        assert_eq!(resolve(ModelChoice::Opus), "gpt-4.1");
        assert_eq!(resolve(ModelChoice::Inherit), "qwen3:0.6b");
        assert_eq!(resolve(ModelChoice::Id("fast".into())), "qwen3:0.6b");
        assert_eq!(
            resolve(ModelChoice::Id("llama3.3:70b".into())),
            "llama3.3:70b"
        );
        assert_eq!(
            providers.resolve_model(&ModelChoice::Inherit, "SONNET"),
            "qwen3"
        );

        let anthropic =
            Providers::from_config(&self::config(""), &env(&[("ANTHROPIC_API_KEY", "k")])).unwrap();
        assert_eq!(
            anthropic.resolve_model(&ModelChoice::Inherit, "sonnet"),
            "claude-sonnet-4-6"
        );
        assert_eq!(
            anthropic.resolve_model(&ModelChoice::Haiku, "sonnet"),
            "claude-haiku-4-5"
        );

        let none = Providers::from_config(&self::config(""), &env(&[])).unwrap();
        assert_eq!(none.resolve_model(&ModelChoice::Opus, "sonnet"), "opus");
    }

    #[test]
    fn a_provider_that_needs_a_key_without_one_is_an_error_naming_the_variable() {
        let error = Providers::from_config(
            &config("providers:\n  claude:\n    kind: anthropic\n"),
            &env(&[]),
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "provider `claude` needs an API key: set the environment variable ANTHROPIC_API_KEY \
             (named by providers.claude.api_key_env)"
        );
        let error = Providers::from_config(
            &config("providers:\n  gpt:\n    kind: openai\n    api_key_env: MY_KEY\n"),
            &env(&[("MY_KEY", "  ")]),
        )
        .unwrap_err();
        assert!(
            matches!(error, ProviderConfigError::MissingKey { .. }),
            "{error}"
        );
        assert!(error.to_string().contains("MY_KEY"), "{error}");
        // An OpenAI-compatible server elsewhere does not.
        let local =
            config("providers:\n  gpt:\n    kind: openai\n    base_url: http://10.0.0.2/v1\n");
        assert!(Providers::from_config(&local, &env(&[])).is_ok());
    }

    #[test]
    fn bad_urls_and_unknown_default_providers_are_errors() {
        let error = Providers::from_config(
            &config(""),
            &env(&[
                ("ANTHROPIC_API_KEY", "k"),
                ("ANTHROPIC_BASE_URL", "ftp://host"),
            ]),
        )
        .unwrap_err();
        assert!(
            matches!(error, ProviderConfigError::BadUrl { .. }),
            "{error}"
        );
        assert!(error.to_string().contains("ANTHROPIC_BASE_URL"), "{error}");
        let error = Providers::from_config(&config(""), &env(&[("OPENAI_BASE_URL", "not a url")]))
            .unwrap_err();
        assert!(
            matches!(error, ProviderConfigError::BadUrl { .. }),
            "{error}"
        );

        let error = Providers::from_config(
            &config("agent:\n  provider: nope\n"),
            &env(&[("ANTHROPIC_API_KEY", "k")]),
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "agent.provider is `nope`, but the providers are anthropic"
        );
    }

    #[test]
    fn several_providers_pick_a_default_by_the_key_set() {
        let yaml = "providers:\n  a:\n    kind: openai\n    base_url: http://a/v1\n\
                    \x20 b:\n    kind: openai\n    base_url: http://b/v1\n";
        let none = Providers::from_config(&config(yaml), &env(&[])).unwrap();
        assert!(none.default().is_none());
        let yaml = "providers:\n  main:\n    kind: openai\n\
                    \x20 local:\n    kind: openai\n    base_url: http://b/v1\n";
        let by_key =
            Providers::from_config(&config(yaml), &env(&[("OPENAI_API_KEY", "k")])).unwrap();
        assert_eq!(by_key.default().unwrap().name(), "main");
        let chosen = Providers::from_config(
            &config(&format!("agent:\n  provider: local\n{yaml}")),
            &env(&[("OPENAI_API_KEY", "k")]),
        )
        .unwrap();
        assert_eq!(chosen.default().unwrap().name(), "local");
    }
}
