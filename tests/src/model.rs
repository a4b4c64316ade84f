//! A scripted model service: a local HTTP server that speaks the real Anthropic Messages and
//! OpenAI Chat Completions APIs and answers from a script, so tests run Mew's real provider code.
//!
//! # Endpoints
//!
//! [`ScriptedModel::base_url`] is `http://127.0.0.1:PORT`, without `/v1` and without a trailing
//! slash. Clients append the API path themselves:
//!
//! | request | what it is |
//! |---|---|
//! | `POST {base_url}/v1/messages` | Anthropic Messages (`x-api-key`, `anthropic-version`) |
//! | `POST {base_url}/v1/chat/completions` | OpenAI Chat Completions (`Authorization: Bearer`) |
//! | `GET {base_url}/_script/status` | `{"remaining": n, "failures": [...], "requests": n}` |
//!
//! # Script
//!
//! An ordered list of [`Step`]s, as Rust values or as YAML/JSON (the `scripted-model` binary):
//!
//! ```yaml
//! - expect:                            # all optional; a mismatch is a recorded failure
//!     api: anthropic                   # or openai
//!     model: claude-sonnet-4-5
//!     last_user_contains: "hello"      # text of the last user turn, tool results included
//!     tool_results: ["call_1"]         # tool result ids that must be in the request
//!     tools_include: ["read_file"]     # tool names that must be offered
//!     tools_exclude: ["Agent"]         # tool names that must not be offered
//!     system_contains: "You are"
//!   reply:
//!     text: "Hello!"
//!     tool_calls: [{id: call_1, name: read_file, input: {file_path: "a.txt"}}]
//!     stop: end_turn                   # default: tool_use with tool calls, else end_turn
//!     usage: {input: 10, output: 5, cache_read: 0, cache_write: 0}
//!     chunks: 3                        # stream deltas per text or tool input (default 2)
//!     delay_ms: 0                      # wait before answering
//! - reply: {error: {status: 429, type: rate_limit_error, message: "slow down", retry_after: 0}}
//! ```
//!
//! # Behaviour
//!
//! Every model request consumes the next step, whichever API it uses. The server records every
//! request ([`Recorded`]) and these failures ([`ScriptedModel::failures`]), each answered with an
//! error in the API's own shape:
//!
//! - an `expect` mismatch: HTTP 500 naming what was expected and what came (the step is used up);
//! - a request after the last step: HTTP 500 "script exhausted at request #N";
//! - a request the real service would refuse (no `anthropic-version`, no `max_tokens`, a
//!   `tool_use` without its `tool_result`, a tool call whose `arguments` is not a string, a tool
//!   name the API does not allow, a Chat Completions message whose `content` is `null` or
//!   missing, which llama.cpp's server refuses, ...): HTTP 400 `invalid_request_error`; no step
//!   is used;
//! - an unknown endpoint: HTTP 404.
//!
//! A wrong or missing key, when the server was started with one, is answered with HTTP 401 in the
//! API's shape, uses no step and is not a failure: a test may script it on purpose.
//!
//! Tests call [`ScriptedModel::assert_done`] at the end: it panics if anything failed or if steps
//! were left unused.
//!
//! # Repeating the last step (load tests only)
//!
//! With [`Options::repeat`] (the binary's `--repeat`), a request after the last step is not a
//! failure: it is answered by the last step again, forever, its `expect` still checked. Such
//! repeated requests are counted (`requests` in the status) but not recorded, so a long load test
//! holds constant memory. The script must have at least one step. Tests keep the default: an
//! exhausted script is a failure.
//!
//! # Wire formats
//!
//! Anthropic, `stream: false`: one `Message` JSON (`id`, `type: "message"`, `role`, `model`,
//! `content` of `text` and `tool_use` blocks, `stop_reason`, `stop_sequence`, `usage`).
//! `stream: true`: `text/event-stream` with `event:`/`data:` pairs in the API's order:
//! `message_start` (empty content, input usage, `output_tokens` at most 1), then per block
//! `content_block_start`, `content_block_delta` (`text_delta`, or `input_json_delta` starting
//! with an empty `partial_json` like the real service), `content_block_stop`, with one `ping`
//! after the first `content_block_start`, then `message_delta` (`stop_reason`, `stop_sequence`,
//! `usage.output_tokens`) and `message_stop`. Errors: `{"type":"error","error":{"type","message"}}`.
//!
//! OpenAI, `stream: false`: one `chat.completion` JSON. `stream: true`: `data: {chunk}` lines: a
//! first chunk with `delta {role: "assistant", content: ""}`, text chunks, per tool call one chunk
//! with `{index, id, type, function {name, arguments: ""}}` then argument fragments, a last chunk
//! with an empty delta and `finish_reason`, a usage chunk with empty `choices` when
//! `stream_options.include_usage` is set (every chunk then carries `"usage": null`), and
//! `data: [DONE]`. Errors: `{"error":{"message","type","param","code"}}`. OpenAI has no cache
//! writes: `prompt_tokens` is `input + cache_read + cache_write` and `cached_tokens` is
//! `cache_read`.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::fmt;
use std::net::TcpListener as StdTcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// The Anthropic Messages path, appended to [`ScriptedModel::base_url`].
pub const ANTHROPIC_PATH: &str = "/v1/messages";
/// The OpenAI Chat Completions path, appended to [`ScriptedModel::base_url`].
pub const OPENAI_PATH: &str = "/v1/chat/completions";
/// The status path, appended to [`ScriptedModel::base_url`].
pub const STATUS_PATH: &str = "/_script/status";

/// The largest request body accepted, as the Anthropic API's limit.
const MAX_BODY: usize = 32 * 1024 * 1024;
/// Usage reported when a reply scripts none.
const DEFAULT_USAGE: Usage = Usage {
    input: 10,
    output: 5,
    cache_read: 0,
    cache_write: 0,
};
/// Stream deltas per text or tool input when a reply scripts none.
const DEFAULT_CHUNKS: usize = 2;
/// How much of the last user text a failure message quotes.
const QUOTE_CHARS: usize = 200;

/// A model API the server speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Api {
    /// Anthropic Messages, `POST /v1/messages`.
    #[serde(rename = "anthropic")]
    Anthropic,
    /// OpenAI Chat Completions, `POST /v1/chat/completions`.
    #[serde(rename = "openai")]
    OpenAi,
}

impl Api {
    /// The request path of this API.
    pub fn path(self) -> &'static str {
        match self {
            Self::Anthropic => ANTHROPIC_PATH,
            Self::OpenAi => OPENAI_PATH,
        }
    }
}

impl fmt::Display for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Anthropic => "anthropic",
            Self::OpenAi => "openai",
        })
    }
}

/// One scripted exchange: what the request must look like, and the answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Checks on the request; all optional.
    #[serde(default, skip_serializing_if = "Expect::is_empty")]
    pub expect: Expect,
    /// The answer.
    pub reply: Reply,
}

/// Checks on a request. A mismatch is a recorded failure answered with HTTP 500.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Expect {
    /// The API the request must use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api: Option<Api>,
    /// The exact `model` of the request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Text the last user turn must contain (see [`Recorded::last_user_text`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_user_contains: Option<String>,
    /// Tool result ids that must be in the request (see [`Recorded::tool_result_ids`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_results: Vec<String>,
    /// Tool names that must be offered.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools_include: Vec<String>,
    /// Tool names that must not be offered.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools_exclude: Vec<String>,
    /// Text the system prompt must contain (see [`Recorded::system_text`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_contains: Option<String>,
}

impl Expect {
    /// Whether nothing is checked.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

/// A scripted answer: a message (text and/or tool calls) or an error.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Reply {
    /// The text of the answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Tool calls, in order; several make parallel calls.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Why the answer stops: `tool_use` with tool calls, `stop_sequence` with a
    /// [`Reply::stop_sequence`], else `end_turn` when not given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    /// The stop sequence that was matched (Anthropic's `stop_sequence`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_sequence: Option<String>,
    /// Token counts; `{input: 10, output: 5}` when not given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Report no usage, even when the request asks for it, as some OpenAI-compatible local
    /// servers do (Chat Completions only: every Anthropic answer has its usage).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_usage: bool,
    /// Stream deltas per text and per tool input (2 when not given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunks: Option<usize>,
    /// Milliseconds to wait before answering.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// Answer with this error instead of a message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ScriptedError>,
}

/// A tool call in a scripted answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    /// The call id; `toolu_scripted_R_I` or `call_scripted_R_I` when not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The tool name.
    pub name: String,
    /// The input, a JSON object (`{}` when not given).
    #[serde(default = "empty_object")]
    pub input: Value,
}

impl ToolCall {
    /// A call of `name` with id `id` and `input`.
    pub fn new(id: impl Into<String>, name: impl Into<String>, input: Value) -> Self {
        Self {
            id: Some(id.into()),
            name: name.into(),
            input,
        }
    }
}

/// `{}`.
fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// Why an answer stops, in Anthropic's words (OpenAI's are accepted as aliases).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// Finished (OpenAI `stop`).
    #[serde(alias = "stop")]
    EndTurn,
    /// Wants tool results (OpenAI `tool_calls`).
    #[serde(alias = "tool_calls")]
    ToolUse,
    /// Ran out of output tokens (OpenAI `length`).
    #[serde(alias = "length")]
    MaxTokens,
    /// Hit a stop sequence (OpenAI `stop`).
    StopSequence,
    /// Refused (OpenAI `content_filter`).
    #[serde(alias = "content_filter")]
    Refusal,
}

impl Stop {
    /// Anthropic's `stop_reason`.
    fn anthropic(self) -> &'static str {
        match self {
            Self::EndTurn => "end_turn",
            Self::ToolUse => "tool_use",
            Self::MaxTokens => "max_tokens",
            Self::StopSequence => "stop_sequence",
            Self::Refusal => "refusal",
        }
    }

    /// OpenAI's `finish_reason`.
    fn openai(self) -> &'static str {
        match self {
            Self::EndTurn | Self::StopSequence => "stop",
            Self::ToolUse => "tool_calls",
            Self::MaxTokens => "length",
            Self::Refusal => "content_filter",
        }
    }
}

/// Token counts of an answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Usage {
    /// Input tokens not read from or written to the cache.
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Input tokens read from the cache.
    pub cache_read: u64,
    /// Input tokens written to the cache.
    pub cache_write: u64,
}

impl Usage {
    /// `input` and `output` tokens, no cache.
    pub fn new(input: u64, output: u64) -> Self {
        Self {
            input,
            output,
            cache_read: 0,
            cache_write: 0,
        }
    }

    /// The same with cache reads and writes.
    pub fn with_cache(mut self, read: u64, write: u64) -> Self {
        self.cache_read = read;
        self.cache_write = write;
        self
    }
}

/// A scripted error answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScriptedError {
    /// The HTTP status; from the kind when not given (per API: 529 or 503 when overloaded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The kind, in Anthropic's words; from the status when not given.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<ErrorKind>,
    /// The message; a stock one when not given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Seconds for a `retry-after` header.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
    /// OpenAI's `code`, when not the one the kind implies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

/// The kind of an error, named as Anthropic's `error.type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// 400.
    InvalidRequestError,
    /// 401.
    AuthenticationError,
    /// 403.
    PermissionError,
    /// 404.
    NotFoundError,
    /// 413.
    RequestTooLarge,
    /// 429.
    RateLimitError,
    /// 500.
    ApiError,
    /// 529 (Anthropic) or 503 (OpenAI).
    OverloadedError,
}

impl ErrorKind {
    /// The kind a status implies.
    fn from_status(status: u16) -> Self {
        match status {
            401 => Self::AuthenticationError,
            403 => Self::PermissionError,
            404 => Self::NotFoundError,
            413 => Self::RequestTooLarge,
            429 => Self::RateLimitError,
            503 | 529 => Self::OverloadedError,
            500..=599 => Self::ApiError,
            _ => Self::InvalidRequestError,
        }
    }

    /// Anthropic's `error.type`.
    fn anthropic(self) -> &'static str {
        match self {
            Self::InvalidRequestError => "invalid_request_error",
            Self::AuthenticationError => "authentication_error",
            Self::PermissionError => "permission_error",
            Self::NotFoundError => "not_found_error",
            Self::RequestTooLarge => "request_too_large",
            Self::RateLimitError => "rate_limit_error",
            Self::ApiError => "api_error",
            Self::OverloadedError => "overloaded_error",
        }
    }

    /// The status the API answers this kind with.
    fn status(self, api: Api) -> u16 {
        match self {
            Self::InvalidRequestError => 400,
            Self::AuthenticationError => 401,
            Self::PermissionError => 403,
            Self::NotFoundError => 404,
            Self::RequestTooLarge => 413,
            Self::RateLimitError => 429,
            Self::ApiError => 500,
            Self::OverloadedError => match api {
                Api::Anthropic => 529,
                Api::OpenAi => 503,
            },
        }
    }

    /// OpenAI's `error.type` and `error.code`.
    fn openai(self) -> (&'static str, Option<&'static str>) {
        match self {
            Self::InvalidRequestError => ("invalid_request_error", None),
            Self::AuthenticationError => ("invalid_request_error", Some("invalid_api_key")),
            Self::PermissionError => ("invalid_request_error", Some("permission_denied")),
            Self::NotFoundError => ("invalid_request_error", Some("model_not_found")),
            Self::RequestTooLarge => ("invalid_request_error", Some("request_too_large")),
            Self::RateLimitError => ("requests", Some("rate_limit_exceeded")),
            Self::ApiError | Self::OverloadedError => ("server_error", None),
        }
    }

    /// A stock message.
    fn message(self) -> &'static str {
        match self {
            Self::InvalidRequestError => "invalid request",
            Self::AuthenticationError => "invalid api key",
            Self::PermissionError => "not allowed",
            Self::NotFoundError => "not found",
            Self::RequestTooLarge => "request too large",
            Self::RateLimitError => "rate limited",
            Self::ApiError => "internal server error",
            Self::OverloadedError => "overloaded",
        }
    }
}

impl Step {
    /// A step answering with `reply`, expecting nothing.
    pub fn new(reply: Reply) -> Self {
        Self {
            expect: Expect::default(),
            reply,
        }
    }

    /// Answers `text`.
    pub fn text(text: impl Into<String>) -> Self {
        Self::new(Reply {
            text: Some(text.into()),
            ..Reply::default()
        })
    }

    /// Answers one tool call.
    pub fn tool_call(id: impl Into<String>, name: impl Into<String>, input: Value) -> Self {
        Self::tool_calls(vec![ToolCall::new(id, name, input)])
    }

    /// Answers several (parallel) tool calls.
    pub fn tool_calls(calls: Vec<ToolCall>) -> Self {
        Self::new(Reply {
            tool_calls: calls,
            ..Reply::default()
        })
    }

    /// Answers an error of `kind` with HTTP `status`.
    pub fn error(status: u16, kind: ErrorKind, message: impl Into<String>) -> Self {
        Self::new(Reply {
            error: Some(ScriptedError {
                status: Some(status),
                kind: Some(kind),
                message: Some(message.into()),
                ..ScriptedError::default()
            }),
            ..Reply::default()
        })
    }

    /// Adds text to the answer (before its tool calls).
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.reply.text = Some(text.into());
        self
    }

    /// Sets the stop reason.
    pub fn with_stop(mut self, stop: Stop) -> Self {
        self.reply.stop = Some(stop);
        self
    }

    /// Sets the matched stop sequence (and so, by default, `stop_sequence` as the reason).
    pub fn with_stop_sequence(mut self, sequence: impl Into<String>) -> Self {
        self.reply.stop_sequence = Some(sequence.into());
        self
    }

    /// Sets the token counts.
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.reply.usage = Some(usage);
        self
    }

    /// Reports no usage (see [`Reply::no_usage`]).
    pub fn without_usage(mut self) -> Self {
        self.reply.no_usage = true;
        self
    }

    /// Sets the number of stream deltas per text and tool input.
    pub fn with_chunks(mut self, chunks: usize) -> Self {
        self.reply.chunks = Some(chunks);
        self
    }

    /// Waits `ms` milliseconds before answering.
    pub fn with_delay_ms(mut self, ms: u64) -> Self {
        self.reply.delay_ms = Some(ms);
        self
    }

    /// Sends `retry-after: seconds` with an error answer.
    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        if let Some(error) = &mut self.reply.error {
            error.retry_after = Some(seconds);
        }
        self
    }

    /// The request must use `api`.
    pub fn expect_api(mut self, api: Api) -> Self {
        self.expect.api = Some(api);
        self
    }

    /// The request's model must be `model`.
    pub fn expect_model(mut self, model: impl Into<String>) -> Self {
        self.expect.model = Some(model.into());
        self
    }

    /// The last user turn must contain `text`.
    pub fn expect_last_user(mut self, text: impl Into<String>) -> Self {
        self.expect.last_user_contains = Some(text.into());
        self
    }

    /// The request must carry results for these tool call ids.
    pub fn expect_tool_results<S: Into<String>>(
        mut self,
        ids: impl IntoIterator<Item = S>,
    ) -> Self {
        self.expect.tool_results = ids.into_iter().map(Into::into).collect();
        self
    }

    /// The request must offer these tools.
    pub fn expect_tools_include<S: Into<String>>(
        mut self,
        names: impl IntoIterator<Item = S>,
    ) -> Self {
        self.expect.tools_include = names.into_iter().map(Into::into).collect();
        self
    }

    /// The request must not offer these tools.
    pub fn expect_tools_exclude<S: Into<String>>(
        mut self,
        names: impl IntoIterator<Item = S>,
    ) -> Self {
        self.expect.tools_exclude = names.into_iter().map(Into::into).collect();
        self
    }

    /// The system prompt must contain `text`.
    pub fn expect_system(mut self, text: impl Into<String>) -> Self {
        self.expect.system_contains = Some(text.into());
        self
    }

    /// A short description for messages about unused steps.
    fn describe(&self) -> String {
        let reply = &self.reply;
        if let Some(error) = &reply.error {
            let kind = error
                .kind
                .or(error.status.map(ErrorKind::from_status))
                .map_or("?", ErrorKind::anthropic);
            return format!("error {kind}");
        }
        let mut parts = Vec::new();
        if let Some(text) = &reply.text {
            parts.push(format!("text {:?}", quote(text)));
        }
        for call in &reply.tool_calls {
            parts.push(format!("tool call {}", call.name));
        }
        if parts.is_empty() {
            parts.push("empty answer".to_owned());
        }
        parts.join(", ")
    }
}

/// Reads a script: JSON if `path` ends in `.json`, else YAML.
pub fn load_script(path: &Path) -> anyhow::Result<Vec<Step>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read script {}", path.display()))?;
    let steps = if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text).with_context(|| format!("bad script {}", path.display()))?
    } else {
        parse_script(&text).with_context(|| format!("bad script {}", path.display()))?
    };
    validate(&steps).with_context(|| format!("bad script {}", path.display()))?;
    Ok(steps)
}

/// Parses a YAML script (a list of steps).
pub fn parse_script(yaml: &str) -> anyhow::Result<Vec<Step>> {
    let steps: Vec<Step> = serde_yaml_ng::from_str(yaml)?;
    validate(&steps)?;
    Ok(steps)
}

/// Refuses steps that cannot be answered: an error mixed with a message, bad statuses,
/// tool inputs that are not objects.
fn validate(steps: &[Step]) -> anyhow::Result<()> {
    for (i, step) in steps.iter().enumerate() {
        let n = i + 1;
        let reply = &step.reply;
        if let Some(error) = &reply.error {
            if reply.text.is_some()
                || !reply.tool_calls.is_empty()
                || reply.stop.is_some()
                || reply.stop_sequence.is_some()
                || reply.usage.is_some()
                || reply.chunks.is_some()
            {
                bail!("step #{n}: an error reply has only `error` and `delay_ms`");
            }
            if error.status.is_none() && error.kind.is_none() {
                bail!("step #{n}: an error needs a `status` or a `type`");
            }
            if let Some(status) = error.status
                && !(400..=599).contains(&status)
            {
                bail!("step #{n}: error status {status} is not 4xx or 5xx");
            }
        }
        for call in &reply.tool_calls {
            if !call.input.is_object() {
                bail!(
                    "step #{n}: the input of tool call {} is not an object",
                    call.name
                );
            }
        }
    }
    Ok(())
}

/// One request the server received.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Recorded {
    /// The API, or `None` for an unknown endpoint.
    pub api: Option<Api>,
    /// The HTTP method.
    pub method: String,
    /// The path.
    pub path: String,
    /// The headers, names in lower case; repeated ones joined with `, `.
    pub headers: BTreeMap<String, String>,
    /// The body as JSON (`null` if it is not JSON).
    pub body: Value,
    /// The HTTP status of the answer.
    pub status: u16,
    /// The index (from 0) of the step this request used, if it used one.
    pub step: Option<usize>,
}

impl Recorded {
    /// A header by lower-case name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// The request's `model`.
    pub fn model(&self) -> &str {
        self.body["model"].as_str().unwrap_or_default()
    }

    /// Whether the request asked for a stream.
    pub fn is_stream(&self) -> bool {
        self.body["stream"].as_bool().unwrap_or(false)
    }

    /// The system prompt: Anthropic's `system`, or OpenAI's `system` and `developer` messages.
    pub fn system_text(&self) -> String {
        system_text(self.api, &self.body)
    }

    /// The text of the last user turn: the user (and OpenAI `tool`) messages after the last
    /// assistant message, tool results included, joined by newlines; if the request ends with
    /// an assistant message, the last user message.
    pub fn last_user_text(&self) -> String {
        last_user_text(&self.body)
    }

    /// The ids of all tool results in the request (`tool_use_id` or `tool_call_id`).
    pub fn tool_result_ids(&self) -> Vec<String> {
        tool_result_ids(self.api, &self.body)
    }

    /// The names of the tools offered.
    pub fn tool_names(&self) -> Vec<String> {
        tool_names(self.api, &self.body)
    }
}

/// The state reported by `GET /_script/status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// Steps not used yet.
    pub remaining: usize,
    /// Failures so far.
    pub failures: Vec<String>,
    /// Requests received (model and unknown endpoints).
    pub requests: usize,
}

/// How to start a [`ScriptedModel`].
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The key requests must carry (`x-api-key` or `Authorization: Bearer`); any when `None`.
    pub key: Option<String>,
    /// The port; 0 for a free one.
    pub port: u16,
    /// Print each failure on stderr as it happens.
    pub log_failures: bool,
    /// After the last step, answer every further model request with the last step again
    /// (counted, not recorded); for load tests. Needs at least one step.
    pub repeat: bool,
}

/// A running scripted model server; stopped when dropped.
pub struct ScriptedModel {
    base_url: String,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedModel")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

/// What the server's handlers share.
struct Shared {
    options: Options,
    state: Mutex<ScriptState>,
}

/// The script's progress and the record.
struct ScriptState {
    steps: VecDeque<Step>,
    /// Steps used so far.
    used: usize,
    /// The last step, kept once used when [`Options::repeat`] is set.
    last: Option<Step>,
    /// Requests received, recorded or not.
    received: usize,
    /// Whether the request being answered came after the last step was used, with
    /// [`Options::repeat`]: it is counted, not recorded.
    repeating: bool,
    requests: Vec<Recorded>,
    failures: Vec<String>,
}

impl ScriptState {
    /// Numbers a new request (from 1).
    fn next_number(&mut self) -> usize {
        self.received += 1;
        self.repeating = self.last.is_some();
        self.received
    }

    /// Keeps `request` in the record, unless it came after the last step was used (repeat).
    fn record(&mut self, request: Recorded) {
        if !self.repeating {
            self.requests.push(request);
        }
    }
}

impl Shared {
    /// The state, even if a holder panicked.
    fn lock(&self) -> MutexGuard<'_, ScriptState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a failure (and prints it if asked to).
    fn fail(&self, state: &mut ScriptState, message: String) {
        if self.options.log_failures {
            eprintln!("{message}");
        }
        state.failures.push(message);
    }

    /// The status report.
    fn status(&self) -> Status {
        let state = self.lock();
        Status {
            remaining: state.steps.len(),
            failures: state.failures.clone(),
            requests: state.received,
        }
    }
}

impl ScriptedModel {
    /// Starts a server on `127.0.0.1` (a free port) answering from `steps`, accepting any key.
    ///
    /// Must be called inside a tokio runtime.
    pub fn start(steps: Vec<Step>) -> anyhow::Result<Self> {
        Self::start_with(steps, Options::default())
    }

    /// Like [`ScriptedModel::start`], but requests must carry `key`.
    pub fn with_key(steps: Vec<Step>, key: impl Into<String>) -> anyhow::Result<Self> {
        Self::start_with(
            steps,
            Options {
                key: Some(key.into()),
                ..Options::default()
            },
        )
    }

    /// Starts a server with `options`.
    pub fn start_with(steps: Vec<Step>, options: Options) -> anyhow::Result<Self> {
        validate(&steps)?;
        if options.repeat && steps.is_empty() {
            bail!("repeating the last step needs a script with at least one step");
        }
        let runtime = tokio::runtime::Handle::try_current()
            .context("the scripted model needs a tokio runtime")?;
        let listener = StdTcpListener::bind(("127.0.0.1", options.port))
            .with_context(|| format!("cannot bind 127.0.0.1:{}", options.port))?;
        listener.set_nonblocking(true)?;
        let base_url = format!("http://{}", listener.local_addr()?);
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        let shared = Arc::new(Shared {
            options,
            state: Mutex::new(ScriptState {
                steps: steps.into(),
                used: 0,
                last: None,
                received: 0,
                repeating: false,
                requests: Vec::new(),
                failures: Vec::new(),
            }),
        });
        let router = Router::new()
            .fallback(dispatch)
            .layer(DefaultBodyLimit::max(MAX_BODY))
            .with_state(shared.clone());
        // Answers are written in several small pieces (SSE events): without TCP_NODELAY the
        // last one can wait for the client's delayed ACK.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let task = runtime.spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                eprintln!("scripted model: server stopped: {e}");
            }
        });
        Ok(Self {
            base_url,
            shared,
            task,
        })
    }

    /// `http://127.0.0.1:PORT`: clients append `/v1/messages` or `/v1/chat/completions`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Every request received so far, in order (with [`Options::repeat`], not those answered by
    /// the repeated last step).
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.lock().requests.clone()
    }

    /// Steps not used yet.
    pub fn remaining(&self) -> usize {
        self.shared.lock().steps.len()
    }

    /// Failures so far: mismatches, an exhausted script, refused requests, unknown endpoints.
    pub fn failures(&self) -> Vec<String> {
        self.shared.lock().failures.clone()
    }

    /// What `GET /_script/status` reports.
    pub fn status(&self) -> Status {
        self.shared.status()
    }

    /// Everything wrong so far: the failures, then one line for unused steps. Empty when the
    /// script was followed exactly.
    pub fn problems(&self) -> Vec<String> {
        let state = self.shared.lock();
        let mut problems = state.failures.clone();
        if !state.steps.is_empty() {
            let unused: Vec<String> = state
                .steps
                .iter()
                .enumerate()
                .map(|(i, step)| format!("#{} {}", state.used + i + 1, step.describe()))
                .collect();
            problems.push(format!(
                "scripted model: {} step(s) not used: {}",
                state.steps.len(),
                unused.join("; ")
            ));
        }
        problems
    }

    /// Panics, listing every problem, if anything failed or steps are left.
    #[track_caller]
    pub fn assert_done(&self) {
        let problems = self.problems();
        if !problems.is_empty() {
            panic!("scripted model:\n  {}", problems.join("\n  "));
        }
    }
}

impl Drop for ScriptedModel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Routes every request.
async fn dispatch(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match (&method, uri.path()) {
        (&Method::POST, ANTHROPIC_PATH) => {
            model_call(&shared, Api::Anthropic, &headers, &body).await
        }
        (&Method::POST, OPENAI_PATH) => model_call(&shared, Api::OpenAi, &headers, &body).await,
        (&Method::GET, STATUS_PATH) => axum::Json(shared.status()).into_response(),
        _ => unknown_endpoint(&shared, &method, uri.path(), &headers, &body),
    }
}

/// Records a request to an unknown endpoint as a failure and answers 404.
fn unknown_endpoint(
    shared: &Shared,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    let mut state = shared.lock();
    let n = state.next_number();
    state.record(Recorded {
        api: None,
        method: method.to_string(),
        path: path.to_owned(),
        headers: header_map(headers),
        body: serde_json::from_slice(body).unwrap_or(Value::Null),
        status: 404,
        step: None,
    });
    let message = format!(
        "scripted model: request #{n}: no such endpoint: {method} {path} (clients append \
         {ANTHROPIC_PATH} or {OPENAI_PATH} to the base URL)"
    );
    shared.fail(&mut state, message.clone());
    let body = json!({"error": {"message": message, "type": "invalid_request_error",
        "param": null, "code": "unknown_url"}});
    (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
}

/// The answer decided for a model request, under the lock.
enum Decision {
    /// An error in the API's shape.
    Error {
        status: u16,
        kind: ErrorKind,
        message: String,
        code: Option<String>,
        retry_after: Option<u64>,
        delay_ms: u64,
    },
    /// A message.
    Message {
        reply: Reply,
        n: usize,
        model: String,
        stream: bool,
        include_usage: bool,
    },
}

/// Handles one model request: checks the key, the request and the script; answers.
async fn model_call(shared: &Shared, api: Api, headers: &HeaderMap, body: &Bytes) -> Response {
    let (n, decision) = decide(shared, api, headers, body);
    match decision {
        Decision::Error {
            status,
            kind,
            message,
            code,
            retry_after,
            delay_ms,
        } => {
            if delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            }
            error_response(api, n, status, kind, &message, code.as_deref(), retry_after)
        }
        Decision::Message {
            reply,
            n,
            model,
            stream,
            include_usage,
        } => {
            if let Some(ms) = reply.delay_ms.filter(|ms| *ms > 0) {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            let created = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            match (api, stream) {
                (Api::Anthropic, false) => {
                    json_response(api, n, anthropic_message(&reply, n, &model))
                }
                (Api::Anthropic, true) => sse_response(api, n, anthropic_events(&reply, n, &model)),
                (Api::OpenAi, false) => {
                    json_response(api, n, openai_completion(&reply, n, &model, created))
                }
                (Api::OpenAi, true) => sse_response(
                    api,
                    n,
                    openai_chunks(&reply, n, &model, created, include_usage && !reply.no_usage),
                ),
            }
        }
    }
}

/// Records the request and decides the answer; returns the request's number (from 1).
fn decide(shared: &Shared, api: Api, headers: &HeaderMap, body: &Bytes) -> (usize, Decision) {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let is_json = parsed.is_some();
    let mut state = shared.lock();
    let n = state.next_number();
    let mut recorded = Recorded {
        api: Some(api),
        method: "POST".to_owned(),
        path: api.path().to_owned(),
        headers: header_map(headers),
        body: parsed.unwrap_or(Value::Null),
        status: 200,
        step: None,
    };
    let refuse =
        |status: u16, kind: ErrorKind, message: String, code: Option<&str>| Decision::Error {
            status,
            kind,
            message,
            code: code.map(str::to_owned),
            retry_after: None,
            delay_ms: 0,
        };

    // A wrong key is an answer a test may want: not a failure.
    if let Some((message, code)) = key_rejection(shared.options.key.as_deref(), api, headers) {
        recorded.status = 401;
        state.record(recorded);
        let decision = refuse(401, ErrorKind::AuthenticationError, message, code);
        return (n, decision);
    }

    // What the real service refuses is a client bug: a failure.
    let checked = match (is_json, api) {
        (false, _) => Err("the request body is not valid JSON".to_owned()),
        (true, Api::Anthropic) => check_anthropic(headers, &recorded.body),
        (true, Api::OpenAi) => check_openai(&recorded.body),
    };
    if let Err(problem) = checked {
        recorded.status = 400;
        state.record(recorded);
        shared.fail(
            &mut state,
            format!(
                "scripted model: request #{n} ({api}) refused as the real API would: {problem}"
            ),
        );
        return (
            n,
            refuse(400, ErrorKind::InvalidRequestError, problem, None),
        );
    }

    let model = recorded.model().to_owned();
    let (step, index) = match state.steps.pop_front() {
        Some(step) => {
            let index = state.used;
            state.used += 1;
            if shared.options.repeat && state.steps.is_empty() {
                state.last = Some(step.clone());
            }
            (Some(step), index)
        }
        None => (state.last.clone(), state.used.saturating_sub(1)),
    };
    let Some(step) = step else {
        recorded.status = 500;
        let quoted = quote(&recorded.last_user_text());
        state.record(recorded);
        let message = format!(
            "scripted model: script exhausted at request #{n} ({api} {model}, last user text: \
             {quoted:?})"
        );
        shared.fail(&mut state, message.clone());
        return (n, refuse(500, ErrorKind::ApiError, message, None));
    };
    recorded.step = Some(index);

    let mismatches = mismatches(&step.expect, &recorded);
    if !mismatches.is_empty() {
        recorded.status = 500;
        state.record(recorded);
        let message = format!(
            "scripted model: request #{n} ({api} {model}) does not match step #{}: {}",
            index + 1,
            mismatches.join("; ")
        );
        shared.fail(&mut state, message.clone());
        return (n, refuse(500, ErrorKind::ApiError, message, None));
    }

    let reply = step.reply;
    if let Some(error) = reply.error {
        let kind = error
            .kind
            .unwrap_or_else(|| ErrorKind::from_status(error.status.unwrap_or(500)));
        let status = error.status.unwrap_or_else(|| kind.status(api));
        recorded.status = status;
        state.record(recorded);
        let decision = Decision::Error {
            status,
            kind,
            message: error.message.unwrap_or_else(|| kind.message().to_owned()),
            code: error.code,
            retry_after: error.retry_after,
            delay_ms: reply.delay_ms.unwrap_or(0),
        };
        return (n, decision);
    }
    let stream = recorded.is_stream();
    let include_usage = recorded.body["stream_options"]["include_usage"]
        .as_bool()
        .unwrap_or(false);
    state.record(recorded);
    let decision = Decision::Message {
        reply,
        n,
        model,
        stream,
        include_usage,
    };
    (n, decision)
}

/// The 401 message and OpenAI code for a missing or wrong key, if it is.
fn key_rejection(
    key: Option<&str>,
    api: Api,
    headers: &HeaderMap,
) -> Option<(String, Option<&'static str>)> {
    let key = key?;
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    match api {
        Api::Anthropic => match header("x-api-key") {
            Some(given) if given == key => None,
            Some(_) => Some(("invalid x-api-key".to_owned(), None)),
            None => Some(("x-api-key header is required".to_owned(), None)),
        },
        Api::OpenAi => match header("authorization").map(|v| v.strip_prefix("Bearer ")) {
            Some(Some(given)) if given == key => None,
            Some(Some(given)) => Some((
                format!(
                    "Incorrect API key provided: {}. You can find your API key at \
                     https://platform.openai.com/account/api-keys.",
                    mask(given)
                ),
                Some("invalid_api_key"),
            )),
            Some(None) | None => Some((
                "You didn't provide an API key. You need to provide your API key in an \
                 Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
                    .to_owned(),
                Some("invalid_api_key"),
            )),
        },
    }
}

/// A key with its middle hidden, as OpenAI quotes it.
fn mask(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    if chars.len() <= 8 {
        return "*".repeat(chars.len());
    }
    let head: String = chars[..3].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{head}{}{tail}", "*".repeat(chars.len() - 7))
}

/// Headers as a map of lower-case names.
fn header_map(headers: &HeaderMap) -> BTreeMap<String, String> {
    let mut map: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        map.entry(name.as_str().to_owned())
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert(value);
    }
    map
}

/// The first [`QUOTE_CHARS`] characters of `text`, with `…` if cut.
fn quote(text: &str) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(QUOTE_CHARS).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

/// What differs from `expect`.
fn mismatches(expect: &Expect, request: &Recorded) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(api) = expect.api
        && request.api != Some(api)
    {
        let got = request.api.map_or("none".to_owned(), |a| a.to_string());
        out.push(format!("expected api {api}, got {got}"));
    }
    if let Some(model) = &expect.model
        && request.model() != model
    {
        out.push(format!(
            "expected model {model:?}, got {:?}",
            request.model()
        ));
    }
    if let Some(wanted) = &expect.last_user_contains {
        let text = request.last_user_text();
        if !text.contains(wanted.as_str()) {
            out.push(format!(
                "expected the last user text to contain {wanted:?}, got {:?}",
                quote(&text)
            ));
        }
    }
    if !expect.tool_results.is_empty() {
        let ids = request.tool_result_ids();
        let missing: Vec<&String> = expect
            .tool_results
            .iter()
            .filter(|id| !ids.contains(id))
            .collect();
        if !missing.is_empty() {
            out.push(format!(
                "expected tool results {:?}, got {ids:?} (missing {missing:?})",
                expect.tool_results
            ));
        }
    }
    if !expect.tools_include.is_empty() || !expect.tools_exclude.is_empty() {
        let names = request.tool_names();
        let missing: Vec<&String> = expect
            .tools_include
            .iter()
            .filter(|n| !names.contains(n))
            .collect();
        if !missing.is_empty() {
            out.push(format!(
                "expected tools {missing:?} to be offered, got {names:?}"
            ));
        }
        let present: Vec<&String> = expect
            .tools_exclude
            .iter()
            .filter(|n| names.contains(n))
            .collect();
        if !present.is_empty() {
            out.push(format!(
                "expected tools {present:?} not to be offered, got {names:?}"
            ));
        }
    }
    if let Some(wanted) = &expect.system_contains {
        let text = request.system_text();
        if !text.contains(wanted.as_str()) {
            out.push(format!(
                "expected the system prompt to contain {wanted:?}, got {:?}",
                quote(&text)
            ));
        }
    }
    out
}

// ---- Reading requests ----

/// The messages of a request.
fn messages(body: &Value) -> &[Value] {
    body["messages"].as_array().map_or(&[], Vec::as_slice)
}

/// The text of a content value: a string, or text parts and tool results, joined by newlines.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|block| match block["type"].as_str() {
                Some("text") => block["text"].as_str().map(str::to_owned),
                Some("tool_result") => Some(content_text(&block["content"])),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// See [`Recorded::system_text`].
fn system_text(api: Option<Api>, body: &Value) -> String {
    match api {
        Some(Api::Anthropic) => content_text(&body["system"]),
        Some(Api::OpenAi) => messages(body)
            .iter()
            .filter(|m| matches!(m["role"].as_str(), Some("system" | "developer")))
            .map(|m| content_text(&m["content"]))
            .collect::<Vec<_>>()
            .join("\n"),
        None => String::new(),
    }
}

/// See [`Recorded::last_user_text`].
fn last_user_text(body: &Value) -> String {
    let messages = messages(body);
    let is_user = |m: &&Value| matches!(m["role"].as_str(), Some("user" | "tool"));
    let after = messages
        .iter()
        .rposition(|m| m["role"] == "assistant")
        .map_or(0, |i| i + 1);
    let turn: Vec<&Value> = messages[after..].iter().filter(is_user).collect();
    let turn = if turn.is_empty() {
        messages.iter().rev().find(is_user).into_iter().collect()
    } else {
        turn
    };
    turn.iter()
        .map(|m| content_text(&m["content"]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// See [`Recorded::tool_result_ids`].
fn tool_result_ids(api: Option<Api>, body: &Value) -> Vec<String> {
    let messages = messages(body);
    match api {
        Some(Api::Anthropic) => messages
            .iter()
            .filter_map(|m| m["content"].as_array())
            .flatten()
            .filter(|b| b["type"] == "tool_result")
            .filter_map(|b| b["tool_use_id"].as_str().map(str::to_owned))
            .collect(),
        Some(Api::OpenAi) => messages
            .iter()
            .filter(|m| m["role"] == "tool")
            .filter_map(|m| m["tool_call_id"].as_str().map(str::to_owned))
            .collect(),
        None => Vec::new(),
    }
}

/// See [`Recorded::tool_names`].
fn tool_names(api: Option<Api>, body: &Value) -> Vec<String> {
    let tools = body["tools"].as_array().map_or(&[][..], Vec::as_slice);
    tools
        .iter()
        .filter_map(|tool| match api {
            Some(Api::Anthropic) => tool["name"].as_str(),
            Some(Api::OpenAi) => tool["function"]["name"].as_str(),
            None => None,
        })
        .map(str::to_owned)
        .collect()
}

/// Whether `name` is a tool name the API accepts: `^[a-zA-Z0-9_-]{1,max}$`.
fn valid_tool_name(name: &str, max: usize) -> bool {
    !name.is_empty()
        && name.len() <= max
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// What the Anthropic API would refuse in this request, in its words.
fn check_anthropic(headers: &HeaderMap, body: &Value) -> Result<(), String> {
    if !headers.contains_key("anthropic-version") {
        return Err("anthropic-version: header is required".to_owned());
    }
    if !body.is_object() {
        return Err("the request body must be a JSON object".to_owned());
    }
    if !body["model"].is_string() {
        return Err("model: Field required".to_owned());
    }
    if !body["max_tokens"].is_u64() {
        return Err("max_tokens: Field required".to_owned());
    }
    if !matches!(body["stream"], Value::Null | Value::Bool(_)) {
        return Err("stream: Input should be a valid boolean".to_owned());
    }
    match &body["system"] {
        Value::Null | Value::String(_) => {}
        Value::Array(blocks) if blocks.iter().all(|b| b["type"] == "text") => {}
        _ => return Err("system: Input should be a string or a list of text blocks".to_owned()),
    }
    let Some(messages) = body["messages"].as_array() else {
        return Err("messages: Field required".to_owned());
    };
    if messages.is_empty() {
        return Err("messages: at least one message is required".to_owned());
    }
    for (i, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or_default();
        if role != "user" && role != "assistant" {
            return Err(format!(
                "messages.{i}.role: Input should be 'user' or 'assistant'"
            ));
        }
        let blocks = match &message["content"] {
            Value::String(_) => continue,
            Value::Array(blocks) => blocks,
            _ => return Err(format!("messages.{i}.content: Field required")),
        };
        let mut seen_other = false;
        for (j, block) in blocks.iter().enumerate() {
            match block["type"].as_str() {
                None => return Err(format!("messages.{i}.content.{j}.type: Field required")),
                Some("tool_use") => {
                    if role != "assistant" {
                        return Err(format!(
                            "messages.{i}.content.{j}: `tool_use` blocks are only allowed in \
                             assistant messages"
                        ));
                    }
                    if !block["id"].is_string() || !block["name"].is_string() {
                        return Err(format!(
                            "messages.{i}.content.{j}.tool_use: id and name are required"
                        ));
                    }
                    if !block["input"].is_object() {
                        return Err(format!(
                            "messages.{i}.content.{j}.tool_use.input: Input should be a valid \
                             dictionary"
                        ));
                    }
                }
                Some("tool_result") => {
                    if role != "user" {
                        return Err(format!(
                            "messages.{i}.content.{j}: `tool_result` blocks are only allowed in \
                             user messages"
                        ));
                    }
                    if seen_other {
                        return Err(format!(
                            "messages.{i}.content.{j}: `tool_result` blocks must come first in \
                             the content of a user message"
                        ));
                    }
                    if !block["tool_use_id"].is_string() {
                        return Err(format!(
                            "messages.{i}.content.{j}.tool_result.tool_use_id: Field required"
                        ));
                    }
                }
                Some(_) => seen_other = true,
            }
        }
    }
    check_anthropic_pairs(messages)?;
    if let Some(tools) = body.get("tools") {
        let Some(tools) = tools.as_array() else {
            return Err("tools: Input should be a valid list".to_owned());
        };
        for (i, tool) in tools.iter().enumerate() {
            let name = tool["name"].as_str().unwrap_or_default();
            if !valid_tool_name(name, 128) {
                return Err(format!(
                    "tools.{i}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
                ));
            }
            if tool.get("type").is_none() && !tool["input_schema"].is_object() {
                return Err(format!("tools.{i}.custom.input_schema: Field required"));
            }
        }
    }
    Ok(())
}

/// Every `tool_use` has its `tool_result` in the next message, and every `tool_result`
/// answers a `tool_use` of the previous message.
fn check_anthropic_pairs(messages: &[Value]) -> Result<(), String> {
    let ids = |message: &Value, kind: &str, field: &str| -> Vec<String> {
        message["content"]
            .as_array()
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .filter(|b| b["type"] == kind)
            .filter_map(|b| b[field].as_str().map(str::to_owned))
            .collect()
    };
    for (i, message) in messages.iter().enumerate() {
        let uses = ids(message, "tool_use", "id");
        if let Some(next) = messages.get(i + 1)
            && !uses.is_empty()
        {
            let results = ids(next, "tool_result", "tool_use_id");
            let missing: Vec<&str> = uses
                .iter()
                .filter(|id| !results.contains(id))
                .map(String::as_str)
                .collect();
            if !missing.is_empty() {
                return Err(format!(
                    "messages.{}: `tool_use` ids were found without `tool_result` blocks \
                     immediately after: {}. Each `tool_use` block must have a corresponding \
                     `tool_result` block in the next message.",
                    i + 1,
                    missing.join(", ")
                ));
            }
        }
        let results = ids(message, "tool_result", "tool_use_id");
        if !results.is_empty() {
            let previous = i
                .checked_sub(1)
                .map(|p| ids(&messages[p], "tool_use", "id"))
                .unwrap_or_default();
            if let Some(stray) = results.iter().find(|id| !previous.contains(id)) {
                return Err(format!(
                    "messages.{i}: unexpected `tool_use_id` found in `tool_result` blocks: \
                     {stray}. Each `tool_result` block must have a corresponding `tool_use` \
                     block in the previous message."
                ));
            }
        }
    }
    Ok(())
}

/// What the OpenAI API would refuse in this request, in its words.
fn check_openai(body: &Value) -> Result<(), String> {
    if !body.is_object() {
        return Err("the request body must be a JSON object".to_owned());
    }
    if !body["model"].is_string() {
        return Err("you must provide a model parameter".to_owned());
    }
    if !matches!(body["stream"], Value::Null | Value::Bool(_)) {
        return Err("Invalid type for 'stream': expected a boolean".to_owned());
    }
    if !body["stream_options"].is_null() && body["stream"] != true {
        return Err(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.".to_owned(),
        );
    }
    let Some(messages) = body["messages"].as_array() else {
        return Err("Missing required parameter: 'messages'.".to_owned());
    };
    if messages.is_empty() {
        return Err(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, \
                    but got an empty array instead."
                .to_owned(),
        );
    }
    // Tool call ids still waiting for their `tool` message.
    let mut pending: Vec<String> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or_default();
        // As strict as the strictest server users run: OpenAI takes `content: null` (or no
        // content) on an assistant message with tool calls, llama.cpp's server answers HTTP
        // 500 to `null` and fails when it is left out. Every message has string content, or
        // (user and system) a list of text and image parts.
        match &message["content"] {
            Value::String(_) => {}
            Value::Array(parts) if matches!(role, "user" | "system" | "developer") => {
                for (j, part) in parts.iter().enumerate() {
                    let valid = match part["type"].as_str() {
                        Some("text") => part["text"].is_string(),
                        Some("image_url") => part["image_url"]["url"].is_string(),
                        _ => false,
                    };
                    if !valid {
                        return Err(format!(
                            "Invalid 'messages[{i}].content[{j}]': expected a text or \
                             image_url part"
                        ));
                    }
                }
            }
            Value::Null if message.get("content").is_some() => {
                return Err(format!(
                    "Invalid type for 'messages[{i}].content': got null; this server takes \
                     a string (llama.cpp's server answers HTTP 500 to null content)"
                ));
            }
            Value::Null => {
                return Err(format!(
                    "Missing required parameter: 'messages[{i}].content' (llama.cpp's server \
                     fails without it)"
                ));
            }
            _ => {
                return Err(format!(
                    "Invalid type for 'messages[{i}].content': expected a string"
                ));
            }
        }
        if role != "tool" && !pending.is_empty() {
            return Err(format!(
                "An assistant message with 'tool_calls' must be followed by tool messages \
                 responding to each 'tool_call_id'. The following tool_call_ids did not have \
                 response messages: {}",
                pending.join(", ")
            ));
        }
        match role {
            "system" | "developer" | "user" => {}
            "assistant" => {
                if let Some(calls) = message.get("tool_calls").filter(|c| !c.is_null()) {
                    let Some(calls) = calls.as_array() else {
                        return Err(format!(
                            "Invalid type for 'messages[{i}].tool_calls': expected an array"
                        ));
                    };
                    for (j, call) in calls.iter().enumerate() {
                        let Some(id) = call["id"].as_str() else {
                            return Err(format!(
                                "Missing required parameter: 'messages[{i}].tool_calls[{j}].id'."
                            ));
                        };
                        if call["type"] != "function" || !call["function"]["name"].is_string() {
                            return Err(format!(
                                "Invalid 'messages[{i}].tool_calls[{j}]': expected type \
                                 'function' with a function name"
                            ));
                        }
                        if !call["function"]["arguments"].is_string() {
                            return Err(format!(
                                "Invalid type for 'messages[{i}].tool_calls[{j}].function.\
                                 arguments': expected a string"
                            ));
                        }
                        pending.push(id.to_owned());
                    }
                }
            }
            "tool" => {
                let Some(id) = message["tool_call_id"].as_str() else {
                    return Err(format!(
                        "Missing required parameter: 'messages[{i}].tool_call_id'."
                    ));
                };
                let Some(at) = pending.iter().position(|p| p == id) else {
                    return Err(format!(
                        "Invalid parameter: messages with role 'tool' must be a response to a \
                         preceeding message with 'tool_calls' (messages[{i}], tool_call_id \
                         {id})."
                    ));
                };
                pending.remove(at);
            }
            other => {
                return Err(format!(
                    "Invalid value: '{other}'. Supported values are: 'system', 'assistant', \
                     'user', 'tool', 'function', and 'developer'."
                ));
            }
        }
    }
    if let Some(tools) = body.get("tools") {
        let Some(tools) = tools.as_array() else {
            return Err("Invalid type for 'tools': expected an array".to_owned());
        };
        for (i, tool) in tools.iter().enumerate() {
            if tool["type"] != "function" {
                return Err(format!("Missing required parameter: 'tools[{i}].type'."));
            }
            let name = tool["function"]["name"].as_str().unwrap_or_default();
            if !valid_tool_name(name, 64) {
                return Err(format!(
                    "Invalid 'tools[{i}].function.name': string does not match pattern. \
                     Expected a string that matches the pattern '^[a-zA-Z0-9_-]{{1,64}}$'."
                ));
            }
        }
    }
    Ok(())
}

// ---- Writing answers ----

/// The stop reason of `reply`.
fn stop_of(reply: &Reply) -> Stop {
    reply.stop.unwrap_or(if !reply.tool_calls.is_empty() {
        Stop::ToolUse
    } else if reply.stop_sequence.is_some() {
        Stop::StopSequence
    } else {
        Stop::EndTurn
    })
}

/// The usage of `reply`.
fn usage_of(reply: &Reply) -> Usage {
    reply.usage.unwrap_or(DEFAULT_USAGE)
}

/// The id of tool call `i` of request `n`.
fn call_id(api: Api, call: &ToolCall, n: usize, i: usize) -> String {
    call.id.clone().unwrap_or_else(|| match api {
        Api::Anthropic => format!("toolu_scripted_{n}_{i}"),
        Api::OpenAi => format!("call_scripted_{n}_{i}"),
    })
}

/// `text` cut into at most `chunks` non-empty pieces of about equal length (in characters).
fn split(text: &str, chunks: usize) -> Vec<&str> {
    let bounds: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .collect();
    let count = bounds.len() - 1;
    let parts = chunks.max(1).min(count);
    (0..parts)
        .map(|p| &text[bounds[p * count / parts]..bounds[(p + 1) * count / parts]])
        .collect()
}

/// Anthropic's `usage` object.
fn anthropic_usage(usage: Usage, output: u64) -> Value {
    json!({
        "input_tokens": usage.input,
        "cache_creation_input_tokens": usage.cache_write,
        "cache_read_input_tokens": usage.cache_read,
        "output_tokens": output,
        "service_tier": "standard",
    })
}

/// The non-streaming Anthropic `Message`.
fn anthropic_message(reply: &Reply, n: usize, model: &str) -> Value {
    let mut content = Vec::new();
    if let Some(text) = reply.text.as_deref().filter(|t| !t.is_empty()) {
        content.push(json!({"type": "text", "text": text}));
    }
    for (i, call) in reply.tool_calls.iter().enumerate() {
        content.push(json!({
            "type": "tool_use",
            "id": call_id(Api::Anthropic, call, n, i),
            "name": call.name,
            "input": call.input,
        }));
    }
    let usage = usage_of(reply);
    json!({
        "id": format!("msg_scripted_{n}"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_of(reply).anthropic(),
        "stop_sequence": reply.stop_sequence,
        "usage": anthropic_usage(usage, usage.output),
    })
}

/// One server-sent event with a name.
fn sse_event(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// The Anthropic stream of `reply`, event by event.
fn anthropic_events(reply: &Reply, n: usize, model: &str) -> Vec<String> {
    let usage = usage_of(reply);
    let chunks = reply.chunks.unwrap_or(DEFAULT_CHUNKS);
    let mut events = vec![sse_event(
        "message_start",
        &json!({"type": "message_start", "message": {
            "id": format!("msg_scripted_{n}"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": anthropic_usage(usage, usage.output.min(1)),
        }}),
    )];
    let ping = sse_event("ping", &json!({"type": "ping"}));
    let mut pinged = false;
    let mut index = 0;
    let mut start_block = |events: &mut Vec<String>, index: usize, block: Value| {
        events.push(sse_event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
        ));
        if !pinged {
            events.push(ping.clone());
            pinged = true;
        }
    };
    let delta = |index: usize, delta: Value| {
        sse_event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": delta}),
        )
    };
    let stop_block = |index: usize| {
        sse_event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        )
    };
    if let Some(text) = reply.text.as_deref().filter(|t| !t.is_empty()) {
        start_block(&mut events, index, json!({"type": "text", "text": ""}));
        for piece in split(text, chunks) {
            events.push(delta(index, json!({"type": "text_delta", "text": piece})));
        }
        events.push(stop_block(index));
        index += 1;
    }
    for (i, call) in reply.tool_calls.iter().enumerate() {
        let block = json!({
            "type": "tool_use",
            "id": call_id(Api::Anthropic, call, n, i),
            "name": call.name,
            "input": {},
        });
        start_block(&mut events, index, block);
        let input = call.input.to_string();
        for piece in std::iter::once("").chain(split(&input, chunks)) {
            events.push(delta(
                index,
                json!({"type": "input_json_delta", "partial_json": piece}),
            ));
        }
        events.push(stop_block(index));
        index += 1;
    }
    if !pinged {
        events.push(ping);
    }
    events.push(sse_event(
        "message_delta",
        &json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_of(reply).anthropic(), "stop_sequence": reply.stop_sequence},
            "usage": {"output_tokens": usage.output},
        }),
    ));
    events.push(sse_event("message_stop", &json!({"type": "message_stop"})));
    events
}

/// OpenAI's `usage` object.
fn openai_usage(usage: Usage) -> Value {
    let prompt = usage.input + usage.cache_read + usage.cache_write;
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": usage.output,
        "total_tokens": prompt + usage.output,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    })
}

/// The non-streaming OpenAI `chat.completion`.
fn openai_completion(reply: &Reply, n: usize, model: &str, created: u64) -> Value {
    let mut message = json!({
        "role": "assistant",
        "content": match (&reply.text, reply.tool_calls.is_empty()) {
            (Some(text), _) => Value::String(text.clone()),
            (None, true) => Value::String(String::new()),
            (None, false) => Value::Null,
        },
        "refusal": null,
        "annotations": [],
    });
    if !reply.tool_calls.is_empty() {
        let calls: Vec<Value> = reply
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, call)| {
                json!({
                    "id": call_id(Api::OpenAi, call, n, i),
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.input.to_string()},
                })
            })
            .collect();
        message["tool_calls"] = Value::Array(calls);
    }
    json!({
        "id": format!("chatcmpl-scripted-{n}"),
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": stop_of(reply).openai(),
        }],
        "usage": openai_usage(usage_of(reply)),
        "service_tier": "default",
        "system_fingerprint": "fp_scripted",
    })
}

/// The OpenAI stream of `reply`, chunk by chunk, `data: [DONE]` last.
fn openai_chunks(
    reply: &Reply,
    n: usize,
    model: &str,
    created: u64,
    include_usage: bool,
) -> Vec<String> {
    let chunks = reply.chunks.unwrap_or(DEFAULT_CHUNKS);
    let chunk = |choices: Value, usage: Option<Value>| {
        let mut chunk = json!({
            "id": format!("chatcmpl-scripted-{n}"),
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "service_tier": "default",
            "system_fingerprint": "fp_scripted",
            "choices": choices,
        });
        if include_usage {
            chunk["usage"] = usage.unwrap_or(Value::Null);
        }
        format!("data: {chunk}\n\n")
    };
    let delta = |delta: Value| {
        chunk(
            json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": null}]),
            None,
        )
    };
    let mut out = vec![delta(
        json!({"role": "assistant", "content": "", "refusal": null}),
    )];
    if let Some(text) = &reply.text {
        for piece in split(text, chunks) {
            out.push(delta(json!({"content": piece})));
        }
    }
    for (i, call) in reply.tool_calls.iter().enumerate() {
        out.push(delta(json!({"tool_calls": [{
            "index": i,
            "id": call_id(Api::OpenAi, call, n, i),
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }]})));
        let arguments = call.input.to_string();
        for piece in split(&arguments, chunks) {
            out.push(delta(
                json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}),
            ));
        }
    }
    out.push(chunk(
        json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": stop_of(reply).openai()}]),
        None,
    ));
    if include_usage {
        out.push(chunk(json!([]), Some(openai_usage(usage_of(reply)))));
    }
    out.push("data: [DONE]\n\n".to_owned());
    out
}

/// The request id header of `api`.
fn request_id(api: Api, n: usize) -> [(HeaderName, HeaderValue); 1] {
    let name = match api {
        Api::Anthropic => HeaderName::from_static("request-id"),
        Api::OpenAi => HeaderName::from_static("x-request-id"),
    };
    let value = HeaderValue::from_str(&format!("req_scripted_{n}"))
        .unwrap_or(HeaderValue::from_static("req_scripted"));
    [(name, value)]
}

/// A JSON answer with status 200.
fn json_response(api: Api, n: usize, body: Value) -> Response {
    (StatusCode::OK, request_id(api, n), axum::Json(body)).into_response()
}

/// A `text/event-stream` answer of `events`, each sent as its own frame.
fn sse_response(api: Api, n: usize, events: Vec<String>) -> Response {
    let body = Body::from_stream(futures_util::stream::iter(
        events.into_iter().map(Ok::<_, Infallible>),
    ));
    (
        StatusCode::OK,
        request_id(api, n),
        [
            (header::CONTENT_TYPE, "text/event-stream; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// An error answer in the shape of `api`.
fn error_response(
    api: Api,
    n: usize,
    status: u16,
    kind: ErrorKind,
    message: &str,
    code: Option<&str>,
    retry_after: Option<u64>,
) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = match api {
        Api::Anthropic => json!({
            "type": "error",
            "error": {"type": kind.anthropic(), "message": message},
            "request_id": format!("req_scripted_{n}"),
        }),
        Api::OpenAi => {
            let (kind, default_code) = kind.openai();
            json!({"error": {
                "message": message,
                "type": kind,
                "param": null,
                "code": code.or(default_code),
            }})
        }
    };
    let mut response = (status, request_id(api, n), axum::Json(body)).into_response();
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A raw client.
    fn client() -> reqwest::Client {
        reqwest::Client::new()
    }

    /// A minimal Anthropic request body.
    fn anthropic_body(user: &str, stream: bool) -> Value {
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "stream": stream,
            "system": [{"type": "text", "text": "You are Mew."}],
            "messages": [{"role": "user", "content": user}],
            "tools": [{"name": "read_file", "description": "Reads a file",
                       "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}}],
        })
    }

    /// A minimal OpenAI request body.
    fn openai_body(user: &str, stream: bool) -> Value {
        let mut body = json!({
            "model": "gpt-4o",
            "stream": stream,
            "messages": [
                {"role": "system", "content": "You are Mew."},
                {"role": "user", "content": user},
            ],
            "tools": [{"type": "function", "function": {"name": "read_file",
                "description": "Reads a file", "parameters": {"type": "object"}}}],
        });
        if stream {
            body["stream_options"] = json!({"include_usage": true});
        }
        body
    }

    /// Posts an Anthropic request with `key`.
    async fn post_anthropic(model: &ScriptedModel, key: &str, body: &Value) -> reqwest::Response {
        client()
            .post(format!("{}{ANTHROPIC_PATH}", model.base_url()))
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01")
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// Posts an OpenAI request with `key`.
    async fn post_openai(model: &ScriptedModel, key: &str, body: &Value) -> reqwest::Response {
        client()
            .post(format!("{}{OPENAI_PATH}", model.base_url()))
            .bearer_auth(key)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// Parses a server-sent event stream into (event name, data) pairs.
    fn parse_sse(text: &str) -> Vec<(Option<String>, String)> {
        text.split("\n\n")
            .filter(|e| !e.trim().is_empty())
            .map(|event| {
                let mut name = None;
                let mut data = String::new();
                for line in event.lines() {
                    if let Some(n) = line.strip_prefix("event: ") {
                        name = Some(n.to_owned());
                    } else if let Some(d) = line.strip_prefix("data: ") {
                        data.push_str(d);
                    }
                }
                (name, data)
            })
            .collect()
    }

    /// The JSON data of Anthropic events, checking that each `event:` names its `type`.
    async fn anthropic_stream(response: reqwest::Response) -> Vec<Value> {
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers()["content-type"],
            "text/event-stream; charset=utf-8"
        );
        let events = parse_sse(&response.text().await.unwrap());
        events
            .into_iter()
            .map(|(name, data)| {
                let value: Value = serde_json::from_str(&data).unwrap();
                assert_eq!(Some(value["type"].as_str().unwrap()), name.as_deref());
                value
            })
            .collect()
    }

    /// The JSON chunks of an OpenAI stream, checking it ends with `[DONE]`.
    async fn openai_stream(response: reqwest::Response) -> Vec<Value> {
        assert_eq!(response.status(), 200);
        let events = parse_sse(&response.text().await.unwrap());
        let (last, chunks) = events.split_last().unwrap();
        assert_eq!(last, &(None, "[DONE]".to_owned()));
        chunks
            .iter()
            .map(|(name, data)| {
                assert_eq!(name, &None);
                serde_json::from_str(data).unwrap()
            })
            .collect()
    }

    #[tokio::test]
    async fn anthropic_text_without_stream() {
        let model = ScriptedModel::start(vec![
            Step::text("Hello!")
                .expect_api(Api::Anthropic)
                .expect_model("claude-sonnet-4-5")
                .expect_last_user("hi there")
                .expect_system("You are")
                .expect_tools_include(["read_file"])
                .expect_tools_exclude(["Agent"])
                .with_usage(Usage::new(12, 3).with_cache(4, 5)),
        ])
        .unwrap();
        let response = post_anthropic(&model, "any", &anthropic_body("hi there", false)).await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["request-id"], "req_scripted_1");
        let body: Value = response.json().await.unwrap();
        assert_eq!(
            body,
            json!({
                "id": "msg_scripted_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [{"type": "text", "text": "Hello!"}],
                "stop_reason": "end_turn",
                "stop_sequence": null,
                "usage": {"input_tokens": 12, "output_tokens": 3,
                          "cache_read_input_tokens": 4, "cache_creation_input_tokens": 5,
                          "service_tier": "standard"},
            })
        );
        let requests = model.requests();
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].api, Some(Api::Anthropic));
        assert_eq!(requests[0].header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(requests[0].body["max_tokens"], 1024);
        assert_eq!(requests[0].step, Some(0));
        model.assert_done();
    }

    #[tokio::test]
    async fn anthropic_stream_of_text_reassembles() {
        let model = ScriptedModel::start(vec![
            Step::text("Hello, streaming world!")
                .with_chunks(3)
                .with_usage(Usage::new(20, 7)),
        ])
        .unwrap();
        let events = anthropic_stream(
            post_anthropic(&model, "k", &anthropic_body("stream please", true)).await,
        )
        .await;
        let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
        let start = &events[0]["message"];
        assert_eq!(start["content"], json!([]));
        assert_eq!(start["stop_reason"], Value::Null);
        assert_eq!(start["usage"]["input_tokens"], 20);
        assert_eq!(
            events[1]["content_block"],
            json!({"type": "text", "text": ""})
        );
        let text: String = events
            .iter()
            .filter(|e| e["type"] == "content_block_delta")
            .map(|e| {
                assert_eq!(e["delta"]["type"], "text_delta");
                e["delta"]["text"].as_str().unwrap()
            })
            .collect();
        assert_eq!(text, "Hello, streaming world!");
        assert_eq!(
            events[7],
            json!({"type": "message_delta",
                   "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                   "usage": {"output_tokens": 7}})
        );
        model.assert_done();
    }

    #[tokio::test]
    async fn anthropic_streamed_tool_input_reassembles() {
        let input = json!({"file_path": "dir/a b.txt", "limit": 20, "nested": {"ü": [1, 2]}});
        let model = ScriptedModel::start(vec![
            Step::tool_call("toolu_1", "read_file", input.clone())
                .with_text("Let me look.")
                .with_chunks(4),
        ])
        .unwrap();
        let events =
            anthropic_stream(post_anthropic(&model, "k", &anthropic_body("read", true)).await)
                .await;
        let tool_start = events
            .iter()
            .find(|e| e["type"] == "content_block_start" && e["index"] == 1)
            .unwrap();
        assert_eq!(
            tool_start["content_block"],
            json!({"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}})
        );
        let fragments: Vec<&str> = events
            .iter()
            .filter(|e| e["type"] == "content_block_delta" && e["index"] == 1)
            .map(|e| {
                assert_eq!(e["delta"]["type"], "input_json_delta");
                e["delta"]["partial_json"].as_str().unwrap()
            })
            .collect();
        assert_eq!(fragments.len(), 5, "an empty fragment, then 4");
        assert_eq!(fragments[0], "");
        let joined: String = fragments.concat();
        assert_eq!(serde_json::from_str::<Value>(&joined).unwrap(), input);
        let delta = events
            .iter()
            .find(|e| e["type"] == "message_delta")
            .unwrap();
        assert_eq!(delta["delta"]["stop_reason"], "tool_use");
        model.assert_done();
    }

    #[tokio::test]
    async fn anthropic_parallel_tool_calls_and_results() {
        let model = ScriptedModel::start(vec![
            Step::tool_calls(vec![
                ToolCall::new("toolu_a", "read_file", json!({"file_path": "a.txt"})),
                ToolCall::new("toolu_b", "read_file", json!({"file_path": "b.txt"})),
            ]),
            Step::text("Both read.")
                .expect_tool_results(["toolu_a", "toolu_b"])
                .expect_last_user("contents of b"),
        ])
        .unwrap();
        let body: Value = post_anthropic(&model, "k", &anthropic_body("read both", false))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(body["stop_reason"], "tool_use");
        assert_eq!(
            body["content"],
            json!([
                {"type": "tool_use", "id": "toolu_a", "name": "read_file", "input": {"file_path": "a.txt"}},
                {"type": "tool_use", "id": "toolu_b", "name": "read_file", "input": {"file_path": "b.txt"}},
            ])
        );
        let mut next = anthropic_body("read both", false);
        next["messages"] = json!([
            {"role": "user", "content": "read both"},
            {"role": "assistant", "content": body["content"]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "contents of a"},
                {"type": "tool_result", "tool_use_id": "toolu_b",
                 "content": [{"type": "text", "text": "contents of b"}]},
            ]},
        ]);
        let body: Value = post_anthropic(&model, "k", &next)
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(body["content"][0]["text"], "Both read.");
        assert_eq!(
            model.requests()[1].last_user_text(),
            "contents of a\ncontents of b"
        );
        model.assert_done();
    }

    #[tokio::test]
    async fn anthropic_missing_tool_result_is_refused() {
        let model = ScriptedModel::start(vec![Step::text("never")]).unwrap();
        let mut body = anthropic_body("x", false);
        body["messages"] = json!([
            {"role": "user", "content": "read"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}]},
            {"role": "user", "content": "no result"},
        ]);
        let response = post_anthropic(&model, "k", &body).await;
        assert_eq!(response.status(), 400);
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["type"], "invalid_request_error");
        assert!(error["error"]["message"].as_str().unwrap().contains(
            "`tool_use` ids were found without `tool_result` blocks immediately after: toolu_1"
        ));
        assert_eq!(model.remaining(), 1);
        assert_eq!(model.failures().len(), 1);
    }

    #[tokio::test]
    async fn anthropic_scripted_rate_limit_with_retry_after() {
        let model = ScriptedModel::start(vec![
            Step::error(429, ErrorKind::RateLimitError, "slow down").with_retry_after(7),
            Step::error(529, ErrorKind::OverloadedError, "busy"),
        ])
        .unwrap();
        let response = post_anthropic(&model, "k", &anthropic_body("hi", true)).await;
        assert_eq!(response.status(), 429);
        assert_eq!(response.headers()["retry-after"], "7");
        let body: Value = response.json().await.unwrap();
        assert_eq!(
            body,
            json!({"type": "error",
                   "error": {"type": "rate_limit_error", "message": "slow down"},
                   "request_id": "req_scripted_1"})
        );
        let response = post_anthropic(&model, "k", &anthropic_body("hi", false)).await;
        assert_eq!(response.status(), 529);
        assert!(response.headers().get("retry-after").is_none());
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["type"], "overloaded_error");
        assert_eq!(model.requests()[0].status, 429);
        model.assert_done();
    }

    #[tokio::test]
    async fn anthropic_wrong_key_is_401() {
        let model = ScriptedModel::with_key(vec![Step::text("ok")], "sk-ant-right").unwrap();
        let response = post_anthropic(&model, "sk-ant-wrong", &anthropic_body("hi", false)).await;
        assert_eq!(response.status(), 401);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["type"], "error");
        assert_eq!(
            body["error"],
            json!({"type": "authentication_error", "message": "invalid x-api-key"})
        );
        assert_eq!(model.remaining(), 1, "a refused key uses no step");
        assert!(model.failures().is_empty(), "a refused key is no failure");
        let response = post_anthropic(&model, "sk-ant-right", &anthropic_body("hi", false)).await;
        assert_eq!(response.status(), 200);
        model.assert_done();
    }

    #[tokio::test]
    async fn anthropic_exhausted_script_fails() {
        let model = ScriptedModel::start(vec![]).unwrap();
        let response = post_anthropic(&model, "k", &anthropic_body("one more", false)).await;
        assert_eq!(response.status(), 500);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["type"], "api_error");
        let expected = "scripted model: script exhausted at request #1 (anthropic \
                        claude-sonnet-4-5, last user text: \"one more\")";
        assert_eq!(body["error"]["message"], expected);
        assert_eq!(model.failures(), [expected]);
        let panic = std::panic::catch_unwind(|| model.assert_done()).unwrap_err();
        assert!(panic.downcast_ref::<String>().unwrap().contains(expected));
    }

    #[tokio::test]
    async fn anthropic_expect_mismatch_fails() {
        let model = ScriptedModel::start(vec![
            Step::text("no")
                .expect_model("claude-opus-4-1")
                .expect_last_user("bye"),
        ])
        .unwrap();
        let response = post_anthropic(&model, "k", &anthropic_body("hello", false)).await;
        assert_eq!(response.status(), 500);
        let expected = "scripted model: request #1 (anthropic claude-sonnet-4-5) does not match \
                        step #1: expected model \"claude-opus-4-1\", got \"claude-sonnet-4-5\"; \
                        expected the last user text to contain \"bye\", got \"hello\"";
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["message"], expected);
        assert_eq!(model.failures(), [expected]);
        assert_eq!(model.remaining(), 0);
    }

    #[tokio::test]
    async fn anthropic_version_is_required() {
        let model = ScriptedModel::start(vec![Step::text("ok")]).unwrap();
        let response = client()
            .post(format!("{}{ANTHROPIC_PATH}", model.base_url()))
            .json(&anthropic_body("hi", false))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400);
        let body: Value = response.json().await.unwrap();
        assert_eq!(
            body["error"],
            json!({"type": "invalid_request_error", "message": "anthropic-version: header is required"})
        );
        assert_eq!(model.failures().len(), 1);
        assert_eq!(model.remaining(), 1);
    }

    #[tokio::test]
    async fn openai_text_without_stream() {
        let model = ScriptedModel::start(vec![
            Step::text("Hello!")
                .expect_api(Api::OpenAi)
                .expect_model("gpt-4o")
                .expect_last_user("hi there")
                .expect_system("You are Mew")
                .expect_tools_include(["read_file"])
                .with_usage(Usage::new(12, 3).with_cache(4, 5)),
        ])
        .unwrap();
        let response = post_openai(&model, "sk-any", &openai_body("hi there", false)).await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-request-id"], "req_scripted_1");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["id"], "chatcmpl-scripted-1");
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(body["model"], "gpt-4o");
        assert!(body["created"].as_u64().unwrap() > 1_700_000_000);
        assert_eq!(
            body["choices"],
            json!([{"index": 0,
                    "message": {"role": "assistant", "content": "Hello!", "refusal": null,
                                "annotations": []},
                    "logprobs": null, "finish_reason": "stop"}])
        );
        assert_eq!(body["usage"]["prompt_tokens"], 21);
        assert_eq!(body["usage"]["completion_tokens"], 3);
        assert_eq!(body["usage"]["total_tokens"], 24);
        assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
        assert_eq!(
            model.requests()[0].header("authorization"),
            Some("Bearer sk-any")
        );
        model.assert_done();
    }

    #[tokio::test]
    async fn openai_stream_of_text_reassembles() {
        let model = ScriptedModel::start(vec![
            Step::text("Hello, streaming world!")
                .with_chunks(3)
                .with_usage(Usage::new(20, 7).with_cache(5, 0)),
        ])
        .unwrap();
        let chunks =
            openai_stream(post_openai(&model, "k", &openai_body("stream please", true)).await)
                .await;
        assert_eq!(chunks.len(), 6, "role, 3 text chunks, finish, usage");
        for chunk in &chunks {
            assert_eq!(chunk["object"], "chat.completion.chunk");
            assert_eq!(chunk["id"], "chatcmpl-scripted-1");
        }
        assert_eq!(
            chunks[0]["choices"][0]["delta"],
            json!({"role": "assistant", "content": "", "refusal": null})
        );
        assert_eq!(chunks[0]["usage"], Value::Null);
        let text: String = chunks[1..4]
            .iter()
            .map(|c| c["choices"][0]["delta"]["content"].as_str().unwrap())
            .collect();
        assert_eq!(text, "Hello, streaming world!");
        assert_eq!(chunks[4]["choices"][0]["finish_reason"], "stop");
        assert_eq!(chunks[4]["choices"][0]["delta"], json!({}));
        assert_eq!(chunks[5]["choices"], json!([]));
        assert_eq!(chunks[5]["usage"]["prompt_tokens"], 25);
        assert_eq!(chunks[5]["usage"]["completion_tokens"], 7);
        assert_eq!(
            chunks[5]["usage"]["prompt_tokens_details"]["cached_tokens"],
            5
        );
        model.assert_done();
    }

    #[tokio::test]
    async fn openai_stream_without_usage_has_no_usage_chunk() {
        let model = ScriptedModel::start(vec![Step::text("hi")]).unwrap();
        let mut body = openai_body("x", true);
        body.as_object_mut().unwrap().remove("stream_options");
        let chunks = openai_stream(post_openai(&model, "k", &body).await).await;
        assert!(chunks.iter().all(|c| c.get("usage").is_none()));
        assert_eq!(
            chunks.last().unwrap()["choices"][0]["finish_reason"],
            "stop"
        );
        model.assert_done();
    }

    #[tokio::test]
    async fn openai_streamed_parallel_tool_calls_reassemble() {
        let a = json!({"file_path": "a.txt", "options": {"lines": [1, 20]}});
        let b = json!({"file_path": "ü/b.txt"});
        let model = ScriptedModel::start(vec![
            Step::tool_calls(vec![
                ToolCall::new("call_a", "read_file", a.clone()),
                ToolCall::new("call_b", "read_file", b.clone()),
            ])
            .with_chunks(3),
        ])
        .unwrap();
        let chunks =
            openai_stream(post_openai(&model, "k", &openai_body("read both", true)).await).await;
        let mut calls: BTreeMap<u64, (String, String, String)> = BTreeMap::new();
        let mut order = Vec::new();
        for chunk in &chunks {
            let Some(deltas) = chunk["choices"][0]["delta"]["tool_calls"].as_array() else {
                continue;
            };
            for delta in deltas {
                let index = delta["index"].as_u64().unwrap();
                order.push(index);
                let entry = calls.entry(index).or_default();
                if let Some(id) = delta["id"].as_str() {
                    assert_eq!(delta["type"], "function");
                    assert_eq!(delta["function"]["arguments"], "");
                    entry.0 = id.to_owned();
                    entry.1 = delta["function"]["name"].as_str().unwrap().to_owned();
                }
                entry
                    .2
                    .push_str(delta["function"]["arguments"].as_str().unwrap());
            }
        }
        assert_eq!(order, [0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(calls[&0].0, "call_a");
        assert_eq!(calls[&1].0, "call_b");
        assert_eq!(calls[&0].1, "read_file");
        assert_eq!(serde_json::from_str::<Value>(&calls[&0].2).unwrap(), a);
        assert_eq!(serde_json::from_str::<Value>(&calls[&1].2).unwrap(), b);
        let finish = &chunks[chunks.len() - 2];
        assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
        model.assert_done();
    }

    #[tokio::test]
    async fn openai_tool_call_without_stream_and_results() {
        let model = ScriptedModel::start(vec![
            Step::tool_call("call_1", "read_file", json!({"file_path": "a.txt"})),
            Step::text("done")
                .expect_tool_results(["call_1"])
                .expect_last_user("file body"),
        ])
        .unwrap();
        let body: Value = post_openai(&model, "k", &openai_body("read", false))
            .await
            .json()
            .await
            .unwrap();
        let message = &body["choices"][0]["message"];
        assert_eq!(message["content"], Value::Null);
        assert_eq!(
            message["tool_calls"],
            json!([{"id": "call_1", "type": "function",
                    "function": {"name": "read_file", "arguments": "{\"file_path\":\"a.txt\"}"}}])
        );
        assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
        let mut next = openai_body("read", false);
        let messages = next["messages"].as_array_mut().unwrap();
        // Sent back with string content, as every server takes it.
        let mut message = message.clone();
        message["content"] = json!("");
        messages.push(message);
        messages.push(json!({"role": "tool", "tool_call_id": "call_1", "content": "file body"}));
        let body: Value = post_openai(&model, "k", &next).await.json().await.unwrap();
        assert_eq!(body["choices"][0]["message"]["content"], "done");
        model.assert_done();
    }

    #[tokio::test]
    async fn openai_arguments_must_be_a_string() {
        let model = ScriptedModel::start(vec![Step::text("never")]).unwrap();
        let mut body = openai_body("x", false);
        body["messages"] = json!([
            {"role": "user", "content": "read"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1",
             "type": "function", "function": {"name": "read_file", "arguments": {"a": 1}}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "x"},
        ]);
        let response = post_openai(&model, "k", &body).await;
        assert_eq!(response.status(), 400);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("'messages[1].tool_calls[0].function.arguments': expected a string")
        );
        assert_eq!(model.failures().len(), 1);
    }

    #[tokio::test]
    async fn openai_content_must_be_present_and_not_null() {
        let model = ScriptedModel::start(vec![Step::text("never")]).unwrap();
        let call = json!([{"id": "call_1", "type": "function",
                           "function": {"name": "read_file", "arguments": "{}"}}]);
        for (assistant, says) in [
            (
                json!({"role": "assistant", "content": null, "tool_calls": call}),
                "got null",
            ),
            (
                json!({"role": "assistant", "tool_calls": call}),
                "Missing required parameter",
            ),
        ] {
            let mut body = openai_body("x", false);
            body["messages"] = json!([
                {"role": "user", "content": "read"},
                assistant,
                {"role": "tool", "tool_call_id": "call_1", "content": "x"},
            ]);
            let response = post_openai(&model, "k", &body).await;
            assert_eq!(response.status(), 400);
            let body: Value = response.json().await.unwrap();
            let message = body["error"]["message"].as_str().unwrap();
            assert!(
                message.contains("'messages[1].content'") && message.contains(says),
                "{message}"
            );
        }
        assert_eq!(model.failures().len(), 2);
    }

    #[tokio::test]
    async fn openai_scripted_rate_limit_with_retry_after() {
        let model = ScriptedModel::start(vec![
            Step::error(429, ErrorKind::RateLimitError, "slow down").with_retry_after(2),
            Step::new(Reply {
                error: Some(ScriptedError {
                    kind: Some(ErrorKind::OverloadedError),
                    ..ScriptedError::default()
                }),
                ..Reply::default()
            }),
        ])
        .unwrap();
        let response = post_openai(&model, "k", &openai_body("hi", true)).await;
        assert_eq!(response.status(), 429);
        assert_eq!(response.headers()["retry-after"], "2");
        let body: Value = response.json().await.unwrap();
        assert_eq!(
            body,
            json!({"error": {"message": "slow down", "type": "requests", "param": null,
                             "code": "rate_limit_exceeded"}})
        );
        let response = post_openai(&model, "k", &openai_body("hi", false)).await;
        assert_eq!(response.status(), 503, "overloaded is 503 for OpenAI");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["type"], "server_error");
        model.assert_done();
    }

    #[tokio::test]
    async fn openai_wrong_key_is_401() {
        let model = ScriptedModel::with_key(vec![Step::text("ok")], "sk-right-key-123").unwrap();
        let response = post_openai(&model, "sk-wrong-key-456", &openai_body("hi", false)).await;
        assert_eq!(response.status(), 401);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(body["error"]["code"], "invalid_api_key");
        assert_eq!(body["error"]["param"], Value::Null);
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("Incorrect API key provided: sk-*********-456.")
        );
        let response = client()
            .post(format!("{}{OPENAI_PATH}", model.base_url()))
            .json(&openai_body("hi", false))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401);
        assert_eq!(model.remaining(), 1);
        assert!(model.failures().is_empty());
        assert_eq!(model.requests()[0].status, 401);
        let response = post_openai(&model, "sk-right-key-123", &openai_body("hi", false)).await;
        assert_eq!(response.status(), 200);
        model.assert_done();
    }

    #[tokio::test]
    async fn openai_exhausted_script_fails() {
        let model = ScriptedModel::start(vec![Step::text("one")]).unwrap();
        assert_eq!(
            post_openai(&model, "k", &openai_body("first", false))
                .await
                .status(),
            200
        );
        let response = post_openai(&model, "k", &openai_body("second", true)).await;
        assert_eq!(response.status(), 500);
        let body: Value = response.json().await.unwrap();
        let expected = "scripted model: script exhausted at request #2 (openai gpt-4o, last \
                        user text: \"second\")";
        assert_eq!(
            body,
            json!({"error": {"message": expected, "type": "server_error", "param": null, "code": null}})
        );
        assert_eq!(model.failures(), [expected]);
        assert_eq!(model.problems(), [expected]);
    }

    #[tokio::test]
    async fn repeat_serves_the_last_step_again_and_counts_without_recording() {
        let options = Options {
            repeat: true,
            ..Options::default()
        };
        let model = ScriptedModel::start_with(
            vec![
                Step::text("first"),
                Step::text("again").expect_last_user("echo"),
            ],
            options,
        )
        .unwrap();
        let mut answers = Vec::new();
        for _ in 0..4 {
            let body: Value = post_openai(&model, "k", &openai_body("echo hello", false))
                .await
                .json()
                .await
                .unwrap();
            answers.push(body["choices"][0]["message"]["content"].clone());
        }
        let streamed = post_anthropic(&model, "k", &anthropic_body("echo hello", true))
            .await
            .text()
            .await
            .unwrap();
        let streamed: String = parse_sse(&streamed)
            .iter()
            .filter_map(|(_, data)| serde_json::from_str::<Value>(data).ok())
            .filter_map(|event| event["delta"]["text"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(streamed, "again");
        assert_eq!(answers, ["first", "again", "again", "again"]);
        assert_eq!(
            model.status(),
            Status {
                remaining: 0,
                failures: vec![],
                requests: 5
            }
        );
        let steps: Vec<Option<usize>> = model.requests().iter().map(|r| r.step).collect();
        assert_eq!(steps, [Some(0), Some(1)], "repeats are not recorded");
        model.assert_done();

        // The repeated step still checks its expectations.
        let response = post_openai(&model, "k", &openai_body("something else", false)).await;
        assert_eq!(response.status(), 500);
        assert_eq!(model.failures().len(), 1);
        assert!(
            model.failures()[0].contains("request #6"),
            "{:?}",
            model.failures()
        );
        assert!(model.failures()[0].contains("does not match step #2"));
    }

    #[tokio::test]
    async fn repeat_needs_a_step() {
        let options = Options {
            repeat: true,
            ..Options::default()
        };
        let error = ScriptedModel::start_with(vec![], options).unwrap_err();
        assert!(error.to_string().contains("at least one step"), "{error}");
    }

    #[tokio::test]
    async fn openai_expect_mismatch_fails() {
        let model = ScriptedModel::start(vec![
            Step::text("no")
                .expect_api(Api::Anthropic)
                .expect_tool_results(["call_9"])
                .expect_tools_exclude(["read_file"]),
            Step::text("left over"),
        ])
        .unwrap();
        let response = post_openai(&model, "k", &openai_body("hello", false)).await;
        assert_eq!(response.status(), 500);
        let expected = "scripted model: request #1 (openai gpt-4o) does not match step #1: \
                        expected api anthropic, got openai; expected tool results \
                        [\"call_9\"], got [] (missing [\"call_9\"]); expected tools \
                        [\"read_file\"] not to be offered, got [\"read_file\"]";
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["message"], expected);
        assert_eq!(model.failures(), [expected]);
        assert_eq!(
            model.problems(),
            [
                expected,
                "scripted model: 1 step(s) not used: #2 text \"left over\""
            ]
        );
    }

    #[tokio::test]
    async fn unknown_endpoint_is_a_failure() {
        let model = ScriptedModel::start(vec![]).unwrap();
        let response = client()
            .post(format!("{}/v1/v1/messages", model.base_url()))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404);
        assert_eq!(model.failures().len(), 1);
        assert!(model.failures()[0].contains("no such endpoint: POST /v1/v1/messages"));
        assert_eq!(model.requests()[0].api, None);
    }

    #[tokio::test]
    async fn status_endpoint_reports_progress() {
        let model = ScriptedModel::start(vec![Step::text("a"), Step::text("b")]).unwrap();
        post_anthropic(&model, "k", &anthropic_body("hi", false)).await;
        let status: Status = client()
            .get(format!("{}{STATUS_PATH}", model.base_url()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            status,
            Status {
                remaining: 1,
                failures: vec![],
                requests: 1
            }
        );
        assert_eq!(model.status(), status);
    }

    #[tokio::test]
    async fn yaml_script_drives_both_apis() {
        let steps = parse_script(
            r#"
- expect: {api: anthropic, model: claude-sonnet-4-5, last_user_contains: hello}
  reply:
    text: "Hi!"
    usage: {input: 3, output: 2}
- expect: {api: openai}
  reply:
    tool_calls: [{id: call_1, name: read_file, input: {file_path: a.txt}}]
    stop: max_tokens
- reply: {error: {status: 429, type: rate_limit_error, message: "slow down", retry_after: 0}}
"#,
        )
        .unwrap();
        assert_eq!(steps[1].reply.stop, Some(Stop::MaxTokens));
        let model = ScriptedModel::start(steps).unwrap();
        let body: Value = post_anthropic(&model, "k", &anthropic_body("hello", false))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(body["content"][0]["text"], "Hi!");
        assert_eq!(body["usage"]["output_tokens"], 2);
        let body: Value = post_openai(&model, "k", &openai_body("x", false))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(body["choices"][0]["finish_reason"], "length");
        assert_eq!(
            body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            "{\"file_path\":\"a.txt\"}"
        );
        let response = post_openai(&model, "k", &openai_body("x", false)).await;
        assert_eq!(response.status(), 429);
        assert_eq!(response.headers()["retry-after"], "0");
        model.assert_done();
    }

    #[test]
    fn bad_scripts_are_refused() {
        let unknown = parse_script("- reply: {txt: hi}").unwrap_err();
        assert!(format!("{unknown:#}").contains("unknown field `txt`"));
        let mixed = parse_script("- reply: {text: hi, error: {status: 500}}").unwrap_err();
        assert!(
            mixed
                .to_string()
                .contains("step #1: an error reply has only")
        );
        let status = parse_script("- reply: {error: {status: 200}}").unwrap_err();
        assert!(status.to_string().contains("not 4xx or 5xx"));
    }

    #[test]
    fn split_keeps_characters_whole() {
        assert_eq!(split("abcdefg", 3), ["ab", "cd", "efg"]);
        assert_eq!(split("üé", 5), ["ü", "é"]);
        assert_eq!(split("", 3), Vec::<&str>::new());
        assert_eq!(split("abc", 0), ["abc"]);
    }
}
