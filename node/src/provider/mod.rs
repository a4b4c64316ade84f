//! Model providers: Anthropic Messages and OpenAI-compatible Chat Completions, behind one trait.
//!
//! [`Providers`] builds them from the `providers:` configuration (or, without one, from the
//! usual `ANTHROPIC_API_KEY` / `OPENAI_API_KEY` environment variables) and maps role model
//! values through each provider's alias table. Both clients share [`http`]: timeouts, retries
//! with backoff, SSE streaming and error classification.

pub(crate) mod anthropic;
pub(crate) mod http;
pub(crate) mod openai;
mod registry;
mod service;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;

use async_trait::async_trait;
use serde_json::Value;

use crate::conversation::{Delta, ModelRequest, ModelResponse};

pub(crate) use http::HttpSettings;
#[cfg_attr(not(test), allow(unused_imports))] // wired by the agent runtime
pub(crate) use registry::{ProviderConfigError, ProviderDescription, Providers};
pub use service::{ProviderConfig, ProviderKind};

/// Why a model call failed, classified so callers can decide what to do.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProviderError {
    /// The key is missing, wrong or not allowed (401/403).
    #[error("{provider}: authentication failed: {message}")]
    Auth { provider: String, message: String },
    /// The model id is not known to the provider (404, or the provider's own code).
    #[error("{provider}: unknown model {model:?}: {message}")]
    UnknownModel {
        provider: String,
        model: String,
        message: String,
    },
    /// The request was refused as invalid (400); not retried.
    #[error("{provider}: bad request: {message}")]
    BadRequest { provider: String, message: String },
    /// Rate limited or overloaded (429, 5xx, 529) after every retry.
    #[error("{provider}: unavailable after {attempts} attempts: {message}")]
    Unavailable {
        provider: String,
        attempts: u32,
        message: String,
    },
    /// No answer within the time allowed.
    #[error("{provider}: timed out after {seconds}s")]
    Timeout { provider: String, seconds: u64 },
    /// The connection failed.
    #[error("{provider}: cannot reach {url}: {message}")]
    Connect {
        provider: String,
        url: String,
        message: String,
    },
    /// The URL has no such endpoint (an HTTP 404 that is not the API's own error): the base
    /// URL is wrong.
    #[error("{provider}: {url} answered 404 Not Found: there is no such endpoint; {hint}")]
    NoEndpoint {
        provider: String,
        url: String,
        hint: String,
    },
    /// The provider answered (HTTP 200) but the answer stopped before it was complete: the
    /// same request would fail the same way, so it is not retried.
    #[error("{provider}: {url} answered, but {message}")]
    Incomplete {
        provider: String,
        url: String,
        message: String,
    },
    /// The provider answered something this client cannot read.
    #[error("{provider}: unreadable answer: {message}")]
    Protocol { provider: String, message: String },
    /// The call was canceled.
    #[cfg_attr(not(test), allow(dead_code))] // wired by the agent runtime
    #[error("canceled")]
    Canceled,
}

impl ProviderError {
    /// The error's kind, for metrics: a fixed set of names.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Auth { .. } => "auth",
            Self::UnknownModel { .. } => "unknown_model",
            Self::BadRequest { .. } => "bad_request",
            Self::Unavailable { .. } => "unavailable",
            Self::Timeout { .. } => "timeout",
            Self::Connect { .. } => "connect",
            Self::NoEndpoint { .. } => "no_endpoint",
            Self::Incomplete { .. } => "incomplete",
            Self::Protocol { .. } => "protocol",
            Self::Canceled => "canceled",
        }
    }

    /// Whether trying again later may help.
    #[cfg_attr(not(test), allow(dead_code))] // wired by the agent runtime
    pub(crate) fn is_retryable(&self) -> bool {
        match self {
            Self::Unavailable { .. } | Self::Timeout { .. } | Self::Connect { .. } => true,
            Self::Auth { .. }
            | Self::UnknownModel { .. }
            | Self::BadRequest { .. }
            | Self::NoEndpoint { .. }
            | Self::Incomplete { .. }
            | Self::Protocol { .. }
            | Self::Canceled => false,
        }
    }
}

/// A model service.
#[cfg_attr(not(test), allow(dead_code))] // wired by the agent runtime
#[async_trait]
pub(crate) trait Provider: Send + Sync {
    /// The provider's configured name (for messages and usage accounting).
    fn name(&self) -> &str;

    /// Maps a role's model value (`haiku`, `sonnet`, `opus`, or a concrete
    /// id) to this provider's concrete model id.
    fn resolve_model(&self, model: &str) -> String;

    /// Runs one model call, streaming, calling `on_delta` as the answer arrives.
    ///
    /// # Cancel safety
    /// Dropping the future abandons the HTTP request; nothing is retried after.
    async fn complete(
        &self,
        request: &ModelRequest,
        on_delta: &(dyn Fn(Delta) + Send + Sync),
    ) -> Result<ModelResponse, ProviderError>;
}

/// Runs one model call through `provider` ([`Provider::complete`]) and records it in the
/// node's metrics: the call by outcome, its time, and the tokens it reported.
///
/// # Cancel safety
/// As [`Provider::complete`]; a call dropped before its answer is not recorded.
pub(crate) async fn complete(
    provider: &dyn Provider,
    request: &ModelRequest,
    on_delta: &(dyn Fn(Delta) + Send + Sync),
) -> Result<ModelResponse, ProviderError> {
    let started = std::time::Instant::now();
    let response = provider.complete(request, on_delta).await;
    let outcome = match &response {
        Ok(_) => "ok",
        Err(error) => error.kind(),
    };
    let tokens = response
        .as_ref()
        .ok()
        .and_then(|response| response.usage)
        .map(|usage| crate::metrics::Tokens {
            input: usage.input,
            output: usage.output,
            cache_read: usage.cache_read,
            cache_write: usage.cache_write,
        });
    crate::metrics::model_call(
        provider.name(),
        &request.model,
        outcome,
        started.elapsed().as_secs_f64(),
        tokens,
    );
    response
}

/// What building one provider takes: its name, where it is, its key, its aliases, its limits.
///
/// Its `Debug` leaves the key out.
#[derive(Clone)]
pub(crate) struct ProviderSetup {
    /// The provider's configured name.
    pub(crate) name: String,
    /// The base URL (Anthropic: without `/v1`; OpenAI-compatible: with it).
    pub(crate) base_url: String,
    /// The key, if one was found.
    pub(crate) api_key: Option<String>,
    /// Where the key comes from, for error messages (never the key itself).
    pub(crate) key_source: KeySource,
    /// The complete alias table: built-in aliases with the configured ones over them.
    pub(crate) models: BTreeMap<String, String>,
    /// Timeouts and retries.
    pub(crate) http: HttpSettings,
}

impl fmt::Debug for ProviderSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderSetup")
            .field("name", &self.name)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("key_source", &self.key_source)
            .field("models", &self.models)
            .field("http", &self.http)
            .finish()
    }
}

impl ProviderSetup {
    /// The HTTP client for this provider.
    fn client(&self) -> Result<http::HttpClient, ProviderConfigError> {
        http::HttpClient::new(&self.name, self.http.clone(), self.key_source.auth_note()).map_err(
            |error| ProviderConfigError::Client {
                provider: self.name.clone(),
                message: error.to_string(),
            },
        )
    }
}

/// Where a provider's key comes from: named in messages, never the key itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeySource {
    /// An environment variable; `named_by` is the configuration key that names it, when the
    /// provider is configured (`providers.anthropic.api_key_env`).
    Env {
        var: String,
        named_by: Option<String>,
    },
    /// No variable is configured; `config_key` is where one would be named.
    Unset { config_key: String },
}

impl KeySource {
    /// The environment variable, if there is one.
    pub(crate) fn env_var(&self) -> Option<&str> {
        match self {
            Self::Env { var, .. } => Some(var),
            Self::Unset { .. } => None,
        }
    }

    /// What the user should do to supply a key.
    pub(crate) fn fix(&self) -> String {
        match self {
            Self::Env {
                var,
                named_by: Some(key),
            } => {
                format!("set the environment variable {var} (named by {key})")
            }
            Self::Env {
                var,
                named_by: None,
            } => format!("set the environment variable {var}"),
            Self::Unset { config_key } => {
                format!("set {config_key} to the name of the environment variable that holds it")
            }
        }
    }

    /// Said with authentication errors: where the key that was refused came from.
    pub(crate) fn auth_note(&self) -> String {
        match self {
            Self::Env {
                var,
                named_by: Some(key),
            } => {
                format!("the key is read from the environment variable {var}, named by {key}")
            }
            Self::Env {
                var,
                named_by: None,
            } => {
                format!("the key is read from the environment variable {var}")
            }
            Self::Unset { config_key } => format!(
                "no key was sent: set {config_key} to the name of the environment variable that \
                 holds one"
            ),
        }
    }
}

/// Maps `model` through an alias table: an exact key, else a key equal ignoring ASCII case
/// (`Sonnet`), else `model` itself (a concrete id).
pub(crate) fn resolve_alias(models: &BTreeMap<String, String>, model: &str) -> String {
    if let Some(id) = models.get(model) {
        return id.clone();
    }
    models
        .iter()
        .find(|(alias, _)| alias.eq_ignore_ascii_case(model))
        .map_or_else(|| model.to_owned(), |(_, id)| id.clone())
}

/// The input of a tool call whose arguments are not valid JSON: kept, so the agent loop can
/// answer the call with an error result instead of failing the model call.
pub(crate) fn invalid_arguments(raw: String) -> Value {
    let mut object = serde_json::Map::new();
    object.insert("_invalid_arguments".to_owned(), Value::String(raw));
    Value::Object(object)
}
