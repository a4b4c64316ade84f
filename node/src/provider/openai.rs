//! The OpenAI-compatible Chat Completions client (OpenAI, Ollama, vLLM, llama.cpp server, LM Studio): request building and the streamed-chunk parser.
//!
//! `POST {base_url}/chat/completions`, where the base URL includes the API version path by
//! convention, as in OpenAI's SDKs and `OPENAI_BASE_URL`: `https://api.openai.com/v1`,
//! `http://localhost:11434/v1` (Ollama), `http://localhost:8000/v1` (vLLM),
//! `http://localhost:8080/v1` (llama.cpp server), `http://localhost:1234/v1` (LM Studio).
//! `Authorization: Bearer KEY` is sent only when a key is configured: local servers take none.
//!
//! Mapping: the system prompt is a `system` message; assistant tool calls are `tool_calls`
//! with `function.arguments` a JSON string; each tool result is a `tool` message with its
//! `tool_call_id` and text content. Chat Completions takes no images in tool results, so they
//! are described in text; images in user messages go as `image_url` data URLs. A tool result
//! marked as an error is prefixed `Error: ` (the API has no error flag).

use std::collections::BTreeMap;

use async_trait::async_trait;
use mew_transport::SseEvent;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::http::{Api, ApiError, ErrorClass, HttpClient, HttpRequest, StreamError, StreamParser};
use super::{Provider, ProviderConfigError, ProviderError, ProviderSetup, invalid_arguments};
use crate::conversation::{
    Block, ChatMessage, Delta, ModelRequest, ModelResponse, ResultPart, Speaker, StopReason,
    ToolSpec, Usage,
};

/// The base URL when none is configured.
pub(crate) const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// The environment variable that holds the key by default (for `api.openai.com` only).
pub(crate) const DEFAULT_KEY_ENV: &str = "OPENAI_API_KEY";

/// The host of OpenAI's own service, which needs a key and `max_completion_tokens`.
pub(crate) const OPENAI_HOST: &str = "api.openai.com";

/// The built-in model aliases; `providers.NAME.models` overrides them one by one (a local
/// server needs its own, e.g. `sonnet: qwen3:32b`).
pub(crate) const ALIASES: &[(&str, &str)] = &[
    ("haiku", "gpt-4o-mini"),
    ("sonnet", "gpt-4o"),
    ("opus", "gpt-4.1"),
];

/// A provider that speaks OpenAI-compatible Chat Completions.
#[derive(Debug)]
pub(crate) struct OpenAiProvider {
    url: String,
    headers: HeaderMap,
    models: BTreeMap<String, String>,
    /// OpenAI's own service takes `max_completion_tokens` (its reasoning models refuse
    /// `max_tokens`); compatible servers know `max_tokens`.
    official: bool,
    http: HttpClient,
}

impl OpenAiProvider {
    /// Builds the client; `setup.api_key` of `None` sends no `Authorization` header.
    pub(crate) fn new(setup: ProviderSetup) -> Result<Self, ProviderConfigError> {
        let official = is_official(&setup.base_url);
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(key) = &setup.api_key {
            let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                ProviderConfigError::BadKey {
                    provider: setup.name.clone(),
                    key_source: setup.key_source.clone(),
                }
            })?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        let url = format!("{}/chat/completions", setup.base_url.trim_end_matches('/'));
        let http = setup.client()?;
        Ok(Self {
            url,
            headers,
            models: setup.models,
            official,
            http,
        })
    }
}

/// Whether `base_url` is OpenAI's own service.
pub(crate) fn is_official(base_url: &str) -> bool {
    reqwest::Url::parse(base_url)
        .ok()
        .is_some_and(|url| url.host_str() == Some(OPENAI_HOST))
}

#[async_trait]
impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        self.http.provider()
    }

    fn resolve_model(&self, model: &str) -> String {
        super::resolve_alias(&self.models, model)
    }

    async fn complete(
        &self,
        request: &ModelRequest,
        on_delta: &(dyn Fn(Delta) + Send + Sync),
    ) -> Result<ModelResponse, ProviderError> {
        let body =
            request_body(request, self.official).map_err(|error| ProviderError::Protocol {
                provider: self.name().to_owned(),
                message: format!("the request does not serialize: {error}"),
            })?;
        let request = HttpRequest {
            url: &self.url,
            headers: &self.headers,
            body,
            model: &request.model,
        };
        self.http.stream(&ChatApi, request, on_delta).await
    }
}

// ---- Request ----

/// The body of `POST /chat/completions`, fields in a fixed order.
#[derive(Debug, Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: Vec<Message<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    stream: bool,
    stream_options: StreamOptions,
}

#[derive(Debug, Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Debug, Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum Message<'a> {
    System {
        content: &'a str,
    },
    User {
        content: UserContent<'a>,
    },
    Assistant {
        /// Always a string, `""` when the message is only tool calls: OpenAI takes `null`
        /// there, but llama.cpp's server refuses it (and fails when it is left out).
        content: String,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: String,
    },
}

/// A plain string when the message is only text (what every server takes), else parts.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum UserContent<'a> {
    Text(String),
    Parts(Vec<Part<'a>>),
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: ImageUrl },
}

#[derive(Debug, Serialize)]
struct ImageUrl {
    url: String,
}

#[derive(Debug, Serialize)]
struct ToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionCall<'a>,
}

#[derive(Debug, Serialize)]
struct FunctionCall<'a> {
    name: &'a str,
    arguments: String,
}

#[derive(Debug, Serialize)]
struct Tool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionSpec<'a>,
}

#[derive(Debug, Serialize)]
struct FunctionSpec<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

/// The JSON body for `request`; `official` selects `max_completion_tokens` over `max_tokens`.
pub(crate) fn request_body(
    request: &ModelRequest,
    official: bool,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut messages = Vec::new();
    if !request.system.is_empty() {
        messages.push(Message::System {
            content: &request.system,
        });
    }
    for message in &request.messages {
        match message.speaker {
            Speaker::User => user_messages(message, &mut messages),
            Speaker::Assistant => messages.push(assistant_message(message)),
        }
    }
    let tools = request.tools.iter().map(tool_spec).collect();
    let (max_tokens, max_completion_tokens) = if official {
        (None, Some(request.max_tokens))
    } else {
        (Some(request.max_tokens), None)
    };
    serde_json::to_vec(&ChatRequest {
        model: &request.model,
        messages,
        tools,
        max_tokens,
        max_completion_tokens,
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
    })
}

/// A user message: its tool results first, as `tool` messages (they must follow the
/// assistant's calls), then the rest as one `user` message, if there is any.
fn user_messages<'a>(message: &'a ChatMessage, out: &mut Vec<Message<'a>>) {
    let mut parts = Vec::new();
    for block in &message.content {
        match block {
            Block::ToolResult {
                id,
                content,
                is_error,
            } => out.push(Message::Tool {
                tool_call_id: id,
                content: tool_result_text(content, *is_error),
            }),
            Block::Text { text } if text.is_empty() => {}
            Block::Text { text } => parts.push(Part::Text { text }),
            Block::Image { media_type, data } => parts.push(Part::ImageUrl {
                image_url: ImageUrl {
                    url: format!("data:{media_type};base64,{data}"),
                },
            }),
            // Only the model calls tools: a user message holds none.
            Block::ToolUse { .. } => {}
        }
    }
    if parts.is_empty() {
        return;
    }
    let only_text = parts.iter().all(|part| matches!(part, Part::Text { .. }));
    let content = if only_text {
        let texts: Vec<&str> = parts
            .iter()
            .filter_map(|part| match part {
                Part::Text { text } => Some(*text),
                Part::ImageUrl { .. } => None,
            })
            .collect();
        UserContent::Text(texts.join("\n\n"))
    } else {
        UserContent::Parts(parts)
    };
    out.push(Message::User { content });
}

fn assistant_message(message: &ChatMessage) -> Message<'_> {
    let mut texts = Vec::new();
    let mut tool_calls = Vec::new();
    for block in &message.content {
        match block {
            Block::Text { text } if text.is_empty() => {}
            Block::Text { text } => texts.push(text.clone()),
            Block::ToolUse { id, name, input } => tool_calls.push(ToolCall {
                id,
                kind: "function",
                function: FunctionCall {
                    name,
                    arguments: input.to_string(),
                },
            }),
            Block::Image { media_type, data } => texts.push(image_note(media_type, data, "")),
            Block::ToolResult {
                content, is_error, ..
            } => {
                texts.push(tool_result_text(content, *is_error));
            }
        }
    }
    Message::Assistant {
        content: texts.join("\n\n"),
        tool_calls,
    }
}

/// A tool result as text: its text parts, with images described.
fn tool_result_text(content: &[ResultPart], is_error: bool) -> String {
    let parts: Vec<String> = content
        .iter()
        .map(|part| match part {
            ResultPart::Text { text } => text.clone(),
            ResultPart::Image { media_type, data } => image_note(
                media_type,
                data,
                ": this provider takes no images in tool results",
            ),
        })
        .filter(|text| !text.is_empty())
        .collect();
    let text = parts.join("\n");
    if is_error {
        format!("Error: {text}")
    } else {
        text
    }
}

fn image_note(media_type: &str, data: &str, why: &str) -> String {
    format!(
        "[image {media_type}, {} bytes base64, not shown{why}]",
        data.len()
    )
}

fn tool_spec(tool: &ToolSpec) -> Tool<'_> {
    Tool {
        kind: "function",
        function: FunctionSpec {
            name: &tool.name,
            description: &tool.description,
            parameters: &tool.input_schema,
        },
    }
}

// ---- Errors ----

/// Chat Completions' error answers and streams.
#[derive(Debug, Clone, Copy)]
struct ChatApi;

impl Api for ChatApi {
    const SYSTEM: &'static str = "openai";
    type Parser = ChatParser;

    fn parser(&self) -> ChatParser {
        ChatParser::default()
    }

    fn error(&self, body: &str) -> ApiError {
        match serde_json::from_str::<ErrorBody>(body) {
            Ok(ErrorBody::Nested { error }) => api_error(error),
            Ok(ErrorBody::Flat(
                error @ WireError::Object {
                    message: Some(_), ..
                },
            )) => api_error(error),
            Ok(ErrorBody::Flat(_)) | Err(_) => ApiError::raw(body),
        }
    }

    fn no_endpoint_hint(&self, url: &str) -> String {
        let base = url.trim_end_matches("/chat/completions");
        if base.ends_with("/v1") {
            format!("check the provider's base_url ({base})")
        } else {
            format!(
                "OpenAI-compatible servers (Ollama, vLLM, llama.cpp, LM Studio) serve the API \
                 under /v1: try base_url: {base}/v1"
            )
        }
    }
}

/// `{"error": {"message", "type", "code"}}` (OpenAI, LM Studio, llama.cpp), `{"error": "..."}`
/// (Ollama), or the fields at the top level (older vLLM).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ErrorBody {
    Nested { error: WireError },
    Flat(WireError),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum WireError {
    Object {
        #[serde(default)]
        message: Option<String>,
        #[serde(rename = "type", default)]
        kind: Option<String>,
        /// A string at OpenAI, a number at some servers.
        #[serde(default)]
        code: Option<Value>,
    },
    Text(String),
}

fn api_error(error: WireError) -> ApiError {
    match error {
        WireError::Text(message) => ApiError::api(None, message),
        WireError::Object {
            message,
            kind,
            code,
        } => {
            let code = code.and_then(|code| code.as_str().map(str::to_owned));
            let class = code
                .as_deref()
                .and_then(error_class)
                .or_else(|| kind.as_deref().and_then(error_class));
            let label = code.or(kind);
            let message = message.unwrap_or_default();
            ApiError::api(
                class,
                match label {
                    Some(label) => format!("{label}: {message}"),
                    None => message,
                },
            )
        }
    }
}

/// The class of an OpenAI error code or type, where it decides more than the status does.
fn error_class(code: &str) -> Option<ErrorClass> {
    match code {
        "model_not_found" => Some(ErrorClass::UnknownModel),
        "invalid_api_key" | "authentication_error" => Some(ErrorClass::Auth),
        // A 429 that waiting will not fix.
        "insufficient_quota" => Some(ErrorClass::Unavailable),
        "rate_limit_exceeded" | "server_error" => Some(ErrorClass::Retry),
        _ => None,
    }
}

// ---- Stream ----

#[derive(Debug, Deserialize)]
struct Chunk {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<WireError>,
}

#[derive(Debug, Deserialize)]
struct Choice {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    delta: Option<ChoiceDelta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ChoiceDelta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Debug, Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Debug, Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Debug, Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

/// A tool call being streamed.
#[derive(Debug, Default)]
struct CallSlot {
    index: Option<u64>,
    id: String,
    name: String,
    arguments: String,
    announced: bool,
}

/// Reads one streamed answer.
#[derive(Debug, Default)]
pub(crate) struct ChatParser {
    text: String,
    calls: Vec<CallSlot>,
    finish: Option<String>,
    usage: Option<Usage>,
    model: Option<String>,
}

impl ChatParser {
    /// Adds a fragment of a tool call: fragments with the same `index` build one call (the
    /// first carries id and name, the rest pieces of the arguments); a fragment with a new
    /// id starts a new call even at an index already used (as some servers send whole calls,
    /// all at index 0).
    fn tool_fragment(&mut self, fragment: ToolCallDelta, deltas: &mut Vec<Delta>) {
        let id = fragment.id.filter(|id| !id.is_empty());
        let found = self.calls.iter().rposition(|call| match fragment.index {
            Some(index) => call.index == Some(index),
            None => true,
        });
        let position = match (found, &id) {
            (Some(position), Some(id))
                if !self.calls[position].id.is_empty() && self.calls[position].id != *id =>
            {
                None
            }
            (found, _) => found,
        };
        let position = position.unwrap_or_else(|| {
            self.calls.push(CallSlot {
                index: fragment.index,
                ..CallSlot::default()
            });
            self.calls.len() - 1
        });
        let call = &mut self.calls[position];
        if let Some(id) = id
            && call.id.is_empty()
        {
            call.id = id;
        }
        if let Some(function) = fragment.function {
            if let Some(name) = function.name.filter(|name| !name.is_empty())
                && call.name.is_empty()
            {
                call.name = name;
            }
            if let Some(arguments) = function.arguments {
                call.arguments.push_str(&arguments);
            }
        }
        if !call.announced && !call.id.is_empty() && !call.name.is_empty() {
            call.announced = true;
            deltas.push(Delta::ToolUse {
                id: call.id.clone(),
                name: call.name.clone(),
            });
        }
    }
}

impl StreamParser for ChatParser {
    fn event(&mut self, event: SseEvent, deltas: &mut Vec<Delta>) -> Result<bool, StreamError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        let chunk: Chunk = serde_json::from_str(data).map_err(|error| {
            StreamError::Protocol(format!("unreadable chunk {data:?}: {error}"))
        })?;
        if let Some(error) = chunk.error {
            return Err(StreamError::Remote(api_error(error)));
        }
        if self.model.is_none() {
            self.model = chunk.model.filter(|model| !model.is_empty());
        }
        for choice in chunk.choices {
            // One answer is asked for (`n` is not sent); other choices are not ours.
            if choice.index.is_some_and(|index| index != 0) {
                continue;
            }
            if let Some(delta) = choice.delta {
                if let Some(text) = delta.content.filter(|text| !text.is_empty()) {
                    self.text.push_str(&text);
                    deltas.push(Delta::Text(text));
                }
                for fragment in delta.tool_calls.unwrap_or_default() {
                    self.tool_fragment(fragment, deltas);
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.finish = Some(reason);
            }
        }
        if let Some(usage) = chunk.usage {
            let prompt = usage.prompt_tokens.unwrap_or(0);
            let cached = usage
                .prompt_tokens_details
                .and_then(|details| details.cached_tokens)
                .unwrap_or(0);
            self.usage = Some(Usage {
                input: prompt.saturating_sub(cached),
                output: usage.completion_tokens.unwrap_or(0),
                cache_read: cached,
                cache_write: 0,
            });
        }
        Ok(false)
    }

    fn finish(self, complete: bool) -> Result<ModelResponse, StreamError> {
        // A server that closes without `[DONE]` after the finish reason has said everything.
        if !complete && self.finish.is_none() {
            return Err(StreamError::Truncated);
        }
        let mut content = Vec::new();
        if !self.text.is_empty() {
            content.push(Block::Text { text: self.text });
        }
        let has_calls = !self.calls.is_empty();
        for (position, call) in self.calls.into_iter().enumerate() {
            let input = if call.arguments.trim().is_empty() {
                Value::Object(serde_json::Map::new())
            } else {
                serde_json::from_str(&call.arguments)
                    .unwrap_or_else(|_| invalid_arguments(call.arguments))
            };
            let id = if call.id.is_empty() {
                format!("call_{position}")
            } else {
                call.id
            };
            content.push(Block::ToolUse {
                id,
                name: call.name,
                input,
            });
        }
        let stop = match self.finish.as_deref() {
            Some("tool_calls" | "function_call") => StopReason::ToolUse,
            // Some local servers say `stop` after tool calls.
            Some("stop") | None if has_calls => StopReason::ToolUse,
            Some("stop") | None => StopReason::EndTurn,
            Some("length") => StopReason::MaxTokens,
            Some(other) => StopReason::Other(other.to_owned()),
        };
        Ok(ModelResponse {
            content,
            stop,
            usage: self.usage,
            model: self.model,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use mew_transport::SseDecoder;

    fn conversation() -> ModelRequest {
        ModelRequest {
            model: "gpt-4o".into(),
            system: "You are terse.".into(),
            messages: vec![
                ChatMessage {
                    speaker: Speaker::User,
                    content: vec![
                        Block::Text {
                            text: "What is in this picture?".into(),
                        },
                        Block::Image {
                            media_type: "image/png".into(),
                            data: "iVBORw0=".into(),
                        },
                    ],
                },
                ChatMessage {
                    speaker: Speaker::Assistant,
                    content: vec![
                        Block::Text {
                            text: "Let me look.".into(),
                        },
                        Block::ToolUse {
                            id: "call_1".into(),
                            name: "Read".into(),
                            input: json!({"path": "a.txt"}),
                        },
                        Block::ToolUse {
                            id: "call_2".into(),
                            name: "Screenshot".into(),
                            input: json!({}),
                        },
                    ],
                },
                ChatMessage {
                    speaker: Speaker::User,
                    content: vec![
                        Block::ToolResult {
                            id: "call_1".into(),
                            content: vec![ResultPart::Text {
                                text: "no such file".into(),
                            }],
                            is_error: true,
                        },
                        Block::ToolResult {
                            id: "call_2".into(),
                            content: vec![
                                ResultPart::Text {
                                    text: "captured".into(),
                                },
                                ResultPart::Image {
                                    media_type: "image/png".into(),
                                    data: "x".repeat(1234),
                                },
                            ],
                            is_error: false,
                        },
                        Block::Text {
                            text: "Go on.".into(),
                        },
                    ],
                },
                ChatMessage {
                    speaker: Speaker::Assistant,
                    content: vec![Block::ToolUse {
                        id: "call_3".into(),
                        name: "Read".into(),
                        input: json!({"_invalid_arguments": "{\"pa"}),
                    }],
                },
            ],
            tools: vec![
                ToolSpec {
                    name: "Read".into(),
                    description: "Reads a file.".into(),
                    input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
                },
                ToolSpec {
                    name: "Screenshot".into(),
                    description: "Takes a screenshot.".into(),
                    input_schema: json!({"type": "object"}),
                },
            ],
            max_tokens: 1024,
        }
    }

    #[test]
    fn builds_the_exact_body() {
        let body = request_body(&conversation(), false).unwrap();
        let expected = json!({
            "model": "gpt-4o",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": [
                    {"type": "text", "text": "What is in this picture?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0="}}
                ]},
                {"role": "assistant", "content": "Let me look.", "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "Read", "arguments": "{\"path\":\"a.txt\"}"}},
                    {"id": "call_2", "type": "function",
                     "function": {"name": "Screenshot", "arguments": "{}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "Error: no such file"},
                {"role": "tool", "tool_call_id": "call_2", "content":
                    "captured\n[image image/png, 1234 bytes base64, not shown: this provider takes no images in tool results]"},
                {"role": "user", "content": "Go on."},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "call_3", "type": "function",
                     "function": {"name": "Read", "arguments": "{\"_invalid_arguments\":\"{\\\"pa\"}"}}
                ]}
            ],
            "tools": [
                {"type": "function", "function": {"name": "Read", "description": "Reads a file.",
                    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}},
                {"type": "function", "function": {"name": "Screenshot", "description": "Takes a screenshot.",
                    "parameters": {"type": "object"}}}
            ],
            "max_tokens": 1024,
            "stream": true,
            "stream_options": {"include_usage": true}
        });
        assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), expected);
        let text = String::from_utf8(body.clone()).unwrap();
        assert!(text.starts_with(
            r#"{"model":"gpt-4o","messages":[{"role":"system","content":"You are terse."},"#
        ));
        assert!(text.ends_with(
            r#""max_tokens":1024,"stream":true,"stream_options":{"include_usage":true}}"#
        ));
        assert_eq!(request_body(&conversation(), false).unwrap(), body);
    }

    #[test]
    fn openai_itself_gets_max_completion_tokens_and_no_empty_system() {
        let request = ModelRequest {
            model: "gpt-4.1".into(),
            system: String::new(),
            messages: vec![ChatMessage::user("hi")],
            tools: Vec::new(),
            max_tokens: 7,
        };
        let body: Value = serde_json::from_slice(&request_body(&request, true).unwrap()).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "gpt-4.1",
                "messages": [{"role": "user", "content": "hi"}],
                "max_completion_tokens": 7,
                "stream": true,
                "stream_options": {"include_usage": true}
            })
        );
        assert!(is_official("https://api.openai.com/v1"));
        assert!(!is_official("http://localhost:11434/v1"));
    }

    fn parse(wire: &str, chunk: usize) -> (Result<ModelResponse, StreamError>, Vec<Delta>) {
        let mut decoder = SseDecoder::default();
        let mut parser = ChatParser::default();
        let mut deltas = Vec::new();
        let mut events = Vec::new();
        for piece in wire.as_bytes().chunks(chunk) {
            decoder.push(piece);
            while let Some(event) = decoder.next_event().unwrap() {
                events.push(event);
            }
        }
        events.extend(decoder.finish().unwrap());
        let mut complete = false;
        for event in events {
            match parser.event(event, &mut deltas) {
                Ok(true) => {
                    complete = true;
                    break;
                }
                Ok(false) => {}
                Err(error) => return (Err(error), deltas),
            }
        }
        (parser.finish(complete), deltas)
    }

    const TEXT_STREAM: &str = r#"data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":", world"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}

data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":2100,"completion_tokens":12,"total_tokens":2112,"prompt_tokens_details":{"cached_tokens":2048,"audio_tokens":0}}}

data: [DONE]

"#;

    #[test]
    fn parses_a_text_answer_with_usage() {
        for chunk in [1, 9, 4096] {
            let (response, deltas) = parse(TEXT_STREAM, chunk);
            assert_eq!(
                response.unwrap(),
                ModelResponse {
                    content: vec![Block::Text {
                        text: "Hello, world".into()
                    }],
                    stop: StopReason::EndTurn,
                    usage: Some(Usage {
                        input: 52,
                        output: 12,
                        cache_read: 2048,
                        cache_write: 0
                    }),
                    model: Some("gpt-4o".into()),
                }
            );
            assert_eq!(
                deltas,
                [Delta::Text("Hello".into()), Delta::Text(", world".into())]
            );
        }
    }

    const TOOL_STREAM: &str = r#"data: {"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"Read","arguments":""}}]},"finish_reason":null}]}

data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\""}}]},"finish_reason":null}]}

data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"List","arguments":""}}]},"finish_reason":null}]}

data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":": \"a.txt\"}"}}]},"finish_reason":null}]}

data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"id":"call_c","type":"function","function":{"name":"Read","arguments":"{\"pa"}}]},"finish_reason":null}]}

data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}

data: {"choices":[],"usage":{"prompt_tokens":80,"completion_tokens":30,"total_tokens":110}}

data: [DONE]

"#;

    #[test]
    fn parses_parallel_tool_calls_by_index_and_keeps_invalid_arguments() {
        let (response, deltas) = parse(TOOL_STREAM, 11);
        let response = response.unwrap();
        assert_eq!(
            response.content,
            [
                Block::ToolUse {
                    id: "call_a".into(),
                    name: "Read".into(),
                    input: json!({"path": "a.txt"})
                },
                Block::ToolUse {
                    id: "call_b".into(),
                    name: "List".into(),
                    input: json!({})
                },
                Block::ToolUse {
                    id: "call_c".into(),
                    name: "Read".into(),
                    input: json!({"_invalid_arguments": "{\"pa"}),
                },
            ]
        );
        assert_eq!(response.stop, StopReason::ToolUse);
        assert_eq!(
            response.usage.unwrap(),
            Usage {
                input: 80,
                output: 30,
                ..Usage::default()
            }
        );
        assert_eq!(
            deltas,
            [
                Delta::ToolUse {
                    id: "call_a".into(),
                    name: "Read".into()
                },
                Delta::ToolUse {
                    id: "call_b".into(),
                    name: "List".into()
                },
                Delta::ToolUse {
                    id: "call_c".into(),
                    name: "Read".into()
                },
            ]
        );
    }

    #[test]
    fn whole_calls_at_one_index_with_stop_are_separate_tool_calls() {
        // As Ollama sends them: complete calls, each at index 0, then `stop`, no `[DONE]` yet.
        let wire = r#"data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"","tool_calls":[{"id":"call_x","index":0,"type":"function","function":{"name":"A","arguments":"{\"n\":1}"}}]},"finish_reason":null}]}

data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"","tool_calls":[{"id":"call_y","index":0,"type":"function","function":{"name":"B","arguments":"{}"}}]},"finish_reason":null}]}

data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":"stop"}]}
"#;
        let (response, _) = parse(wire, 4096);
        let response = response.unwrap();
        assert_eq!(
            response.content,
            [
                Block::ToolUse {
                    id: "call_x".into(),
                    name: "A".into(),
                    input: json!({"n": 1})
                },
                Block::ToolUse {
                    id: "call_y".into(),
                    name: "B".into(),
                    input: json!({})
                },
            ]
        );
        assert_eq!(response.stop, StopReason::ToolUse);
    }

    #[test]
    fn length_means_max_tokens_and_a_cut_stream_is_truncated() {
        let wire = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"abc\"},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n";
        assert_eq!(parse(wire, 4096).0.unwrap().stop, StopReason::MaxTokens);
        let cut = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"abc\"},\"finish_reason\":null}]}\n\n";
        assert_eq!(parse(cut, 4096).0.unwrap_err(), StreamError::Truncated);
        assert!(matches!(
            parse("data: nonsense\n\n", 4096).0,
            Err(StreamError::Protocol(_))
        ));
    }

    #[test]
    fn an_error_chunk_is_classified_by_its_code() {
        let wire = "data: {\"error\":{\"message\":\"Rate limit reached\",\"type\":\"requests\",\"code\":\"rate_limit_exceeded\"}}\n\n";
        assert_eq!(
            parse(wire, 4096).0.unwrap_err(),
            StreamError::Remote(ApiError::api(
                Some(ErrorClass::Retry),
                "rate_limit_exceeded: Rate limit reached".into(),
            ))
        );
    }

    #[test]
    fn error_bodies_are_read_and_classified() {
        let api = ChatApi;
        let error = api.error(
            r#"{"error":{"message":"The model `gpt-9` does not exist","type":"invalid_request_error","param":null,"code":"model_not_found"}}"#,
        );
        assert_eq!(error.class, Some(ErrorClass::UnknownModel));
        assert_eq!(
            error.message,
            "model_not_found: The model `gpt-9` does not exist"
        );
        let quota = api.error(r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#);
        assert_eq!(quota.class, Some(ErrorClass::Unavailable));
        let ollama = api.error(r#"{"error":"model \"llama9\" not found, try pulling it first"}"#);
        assert_eq!(ollama.class, None);
        assert_eq!(
            ollama.message,
            "model \"llama9\" not found, try pulling it first"
        );
        let vllm = api.error(
            r#"{"object":"error","message":"bad","type":"BadRequestError","param":null,"code":400}"#,
        );
        assert_eq!(vllm, ApiError::api(None, "BadRequestError: bad".into()));
        let html = api.error("<html>502</html>");
        assert_eq!(html, ApiError::raw("<html>502</html>"));
    }
}
