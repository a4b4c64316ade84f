//! What the web tools (`web_fetch`, `web_search`) share: the `web:` section as resolved, and
//! the bounded reading of a response.

use std::time::Duration;

use serde::Serialize;

use crate::duration;

/// The default limit on one fetch or search, redirects included.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The default limit on the bytes of one response body that are read.
pub(crate) const DEFAULT_MAX_BYTES: usize = 10 * 1024 * 1024;

/// `web:` — what `web_fetch` may reach and within which limits, and the search provider of
/// `web_search`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WebConfig {
    /// Hosts, addresses and networks (CIDR) `web_fetch` may reach although the SSRF guard
    /// refuses them otherwise (loopback, private, link-local... addresses).
    pub allow: Vec<String>,
    /// The limit on one fetch (all its redirects) or one search.
    #[serde(serialize_with = "duration::serialize")]
    pub timeout: Duration,
    /// The most bytes of one response body read; the rest is left out, and the answer says so.
    pub max_bytes: usize,
    /// The service `web_search` asks.
    pub search: SearchConfig,
}

impl Default for WebConfig {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            max_bytes: DEFAULT_MAX_BYTES,
            search: SearchConfig::default(),
        }
    }
}

/// `web.search:` — a search service and where it answers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SearchConfig {
    /// The kind of service.
    pub provider: SearchProvider,
    /// Its base URL (for SearXNG, the instance's: `/search` is added). Unset: there is no
    /// search service, and `web_search` answers that none is configured.
    pub url: Option<String>,
}

/// The kinds of search service `web_search` can ask.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchProvider {
    /// A SearXNG instance, through its JSON API (`GET /search?q=...&format=json`; the
    /// instance's settings must list `json` under `search.formats`).
    #[default]
    Searxng,
}

/// What a response's body came to, read within a limit.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Body {
    /// The bytes read, at most the limit.
    pub(crate) bytes: Vec<u8>,
    /// True when the body went on past the limit.
    pub(crate) cut: bool,
}

/// Reads `response`'s body up to `max_bytes`, chunk by chunk, so that a larger body never
/// reaches memory. A declared length above the limit is not trusted to be true either way.
pub(crate) async fn read_body(
    mut response: reqwest::Response,
    max_bytes: usize,
) -> reqwest::Result<Body> {
    let mut body = Body::default();
    while let Some(chunk) = response.chunk().await? {
        let room = max_bytes.saturating_sub(body.bytes.len());
        if chunk.len() > room {
            body.bytes.extend_from_slice(&chunk[..room]);
            body.cut = true;
            break;
        }
        body.bytes.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// `text` cut to at most `limit` characters, with a note of how many were left out.
pub(crate) fn cut_text(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        None => text.to_owned(),
        Some((end, _)) => {
            let rest = text[end..].chars().count();
            format!(
                "{}\n[cut at {limit} characters; {rest} more left out]",
                &text[..end]
            )
        }
    }
}

/// The error and its causes, on one line.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// The User-Agent of the web tools' requests.
pub(crate) fn user_agent() -> String {
    format!("mew/{} (web tools)", env!("CARGO_PKG_VERSION"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_cut_at_a_char_boundary_with_a_note() {
        assert_eq!(cut_text("short", 10), "short");
        assert_eq!(
            cut_text("ééééé", 2),
            "éé\n[cut at 2 characters; 3 more left out]"
        );
    }
}
