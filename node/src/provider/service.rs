//! `providers.NAME:` as the node runs it: one model service ([`ProviderConfig`]) and the API
//! it speaks ([`ProviderKind`]). The configuration loader reads and checks the section
//! (`crate::config`); [`super::Providers`] builds the clients from it.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{anthropic, openai};
use crate::duration;

/// `providers.NAME:` — one model service.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProviderConfig {
    /// Which API it speaks.
    pub kind: ProviderKind,
    /// Where it is: `https://api.anthropic.com` (no `/v1`) for Anthropic, a URL that ends in
    /// the version path for OpenAI-compatible servers (`https://api.openai.com/v1`).
    pub base_url: String,
    /// The environment variable that holds the key; `None` sends no key (local servers).
    /// Defaults to `ANTHROPIC_API_KEY` for Anthropic and, for `api.openai.com` only, to
    /// `OPENAI_API_KEY`.
    pub api_key_env: Option<String>,
    /// Aliases over the built-in ones: `sonnet: claude-sonnet-4-6`, or names of your own.
    pub models: BTreeMap<String, String>,
    /// The limit on one attempt, from sending the request to the end of the streamed answer.
    #[serde(serialize_with = "duration::serialize")]
    pub timeout: Duration,
    /// The limit on opening a connection.
    #[serde(serialize_with = "duration::serialize")]
    pub connect_timeout: Duration,
    /// The longest silence allowed while an answer streams.
    #[serde(serialize_with = "duration::serialize")]
    pub idle_timeout: Duration,
    /// Retries after the first attempt (429, 5xx, 529, connection errors).
    pub max_retries: u32,
    /// The wait before the first retry; it doubles (with jitter) up to 30 s.
    #[serde(serialize_with = "duration::serialize")]
    pub retry_backoff: Duration,
}

/// The API a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// Anthropic Messages.
    Anthropic,
    /// OpenAI-compatible Chat Completions (OpenAI, Ollama, vLLM, llama.cpp, LM Studio).
    Openai,
}

impl ProviderKind {
    /// The kind's name in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Anthropic => "anthropic",
            Self::Openai => "openai",
        }
    }

    /// The kind named `name`, if it is one.
    pub(crate) fn from_name(name: &str) -> Option<Self> {
        match name {
            "anthropic" => Some(Self::Anthropic),
            "openai" => Some(Self::Openai),
            _ => None,
        }
    }

    /// The base URL when none is configured.
    pub fn default_base_url(self) -> &'static str {
        match self {
            Self::Anthropic => anthropic::DEFAULT_BASE_URL,
            Self::Openai => openai::DEFAULT_BASE_URL,
        }
    }

    /// The environment variable of the key when none is configured, for a provider at
    /// `base_url`: Anthropic's always, OpenAI's only for OpenAI's own service (a local
    /// server must not be sent the user's OpenAI key).
    pub fn default_key_env(self, base_url: &str) -> Option<&'static str> {
        match self {
            Self::Anthropic => Some(anthropic::DEFAULT_KEY_ENV),
            Self::Openai => openai::is_official(base_url).then_some(openai::DEFAULT_KEY_ENV),
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
