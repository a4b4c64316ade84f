//! The Anthropic Messages API client: request building with prompt caching, and the SSE stream parser.
//!
//! `POST {base_url}/v1/messages` with `x-api-key` and `anthropic-version: 2023-06-01`, always
//! streaming. The base URL has no `/v1` (as in Anthropic's SDKs): `https://api.anthropic.com`.
//!
//! Prompt caching: the system prompt is one text block marked `cache_control: ephemeral`, and
//! so are the last tool definition and the last block of the last message (the conversation so
//! far, read back on the next turn). The body is built from typed structs in a fixed field
//! order, so the same conversation always serializes to the same bytes and the cached prefix
//! stays byte-identical across turns.

use std::collections::BTreeMap;

use async_trait::async_trait;
use mew_transport::SseEvent;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::http::{Api, ApiError, ErrorClass, HttpClient, HttpRequest, StreamError, StreamParser};
use super::{Provider, ProviderConfigError, ProviderError, ProviderSetup, invalid_arguments};
use crate::conversation::{
    Block, ChatMessage, Delta, ModelRequest, ModelResponse, ResultPart, Speaker, StopReason,
    ToolSpec, Usage,
};

/// The API version sent in `anthropic-version`.
pub(crate) const API_VERSION: &str = "2023-06-01";

/// The base URL when none is configured.
pub(crate) const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The environment variable that holds the key by default.
pub(crate) const DEFAULT_KEY_ENV: &str = "ANTHROPIC_API_KEY";

/// The built-in model aliases; `providers.NAME.models` overrides them one by one.
pub(crate) const ALIASES: &[(&str, &str)] = &[
    ("haiku", "claude-haiku-4-5"),
    ("sonnet", "claude-sonnet-4-6"),
    ("opus", "claude-opus-4-6"),
];

/// A provider that speaks the Anthropic Messages API.
#[derive(Debug)]
pub(crate) struct AnthropicProvider {
    url: String,
    headers: HeaderMap,
    models: BTreeMap<String, String>,
    http: HttpClient,
}

impl AnthropicProvider {
    /// Builds the client. Anthropic always needs a key; `setup.api_key` of `None` is an error.
    pub(crate) fn new(setup: ProviderSetup) -> Result<Self, ProviderConfigError> {
        let Some(key) = &setup.api_key else {
            return Err(ProviderConfigError::MissingKey {
                provider: setup.name.clone(),
                fix: setup.key_source.fix(),
            });
        };
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(API_VERSION),
        );
        let mut key = HeaderValue::from_str(key).map_err(|_| ProviderConfigError::BadKey {
            provider: setup.name.clone(),
            key_source: setup.key_source.clone(),
        })?;
        key.set_sensitive(true);
        headers.insert(HeaderName::from_static("x-api-key"), key);
        let url = format!("{}/v1/messages", setup.base_url.trim_end_matches('/'));
        let http = setup.client()?;
        Ok(Self {
            url,
            headers,
            models: setup.models,
            http,
        })
    }
}

#[async_trait]
impl Provider for AnthropicProvider {
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
        let body = request_body(request).map_err(|error| ProviderError::Protocol {
            provider: self.name().to_owned(),
            message: format!("the request does not serialize: {error}"),
        })?;
        let request = HttpRequest {
            url: &self.url,
            headers: &self.headers,
            body,
            model: &request.model,
        };
        self.http.stream(&MessagesApi, request, on_delta).await
    }
}

// ---- Request ----

/// The body of `POST /v1/messages`, fields in a fixed order.
#[derive(Debug, Serialize)]
struct MessagesRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<Marked<Content<'a>>>,
    messages: Vec<Message<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Marked<Tool<'a>>>,
    stream: bool,
}

/// `cache_control: {type: ephemeral}`.
#[derive(Debug, Clone, Copy, Serialize)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
}

const EPHEMERAL: CacheControl = CacheControl { kind: "ephemeral" };

/// A block or tool, with a cache breakpoint after it or not.
#[derive(Debug, Serialize)]
struct Marked<T> {
    #[serde(flatten)]
    item: T,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

impl<T> Marked<T> {
    fn plain(item: T) -> Self {
        Self {
            item,
            cache_control: None,
        }
    }
}

#[derive(Debug, Serialize)]
struct Message<'a> {
    role: &'static str,
    content: Vec<Marked<Content<'a>>>,
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Content<'a> {
    Text {
        text: &'a str,
    },
    Image {
        source: ImageSource<'a>,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: &'a Value,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: Vec<Content<'a>>,
        is_error: bool,
    },
}

#[derive(Debug, Serialize)]
struct ImageSource<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    media_type: &'a str,
    data: &'a str,
}

#[derive(Debug, Serialize)]
struct Tool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
}

/// The JSON body for `request`, byte-for-byte the same for the same request.
///
/// Empty text blocks are left out (the API rejects them), and so is a message left with no
/// blocks.
pub(crate) fn request_body(request: &ModelRequest) -> Result<Vec<u8>, serde_json::Error> {
    let system = if request.system.is_empty() {
        Vec::new()
    } else {
        vec![Marked {
            item: Content::Text {
                text: &request.system,
            },
            cache_control: Some(EPHEMERAL),
        }]
    };
    let mut messages: Vec<Message<'_>> = request
        .messages
        .iter()
        .map(message)
        .filter(|message| !message.content.is_empty())
        .collect();
    if let Some(last) = messages
        .last_mut()
        .and_then(|message| message.content.last_mut())
    {
        last.cache_control = Some(EPHEMERAL);
    }
    let mut tools: Vec<Marked<Tool<'_>>> = request
        .tools
        .iter()
        .map(|tool| Marked::plain(tool_spec(tool)))
        .collect();
    if let Some(last) = tools.last_mut() {
        last.cache_control = Some(EPHEMERAL);
    }
    serde_json::to_vec(&MessagesRequest {
        model: &request.model,
        max_tokens: request.max_tokens,
        system,
        messages,
        tools,
        stream: true,
    })
}

fn message(message: &ChatMessage) -> Message<'_> {
    let role = match message.speaker {
        Speaker::User => "user",
        Speaker::Assistant => "assistant",
    };
    let content = message
        .content
        .iter()
        .filter_map(block)
        .map(Marked::plain)
        .collect();
    Message { role, content }
}

fn block(block: &Block) -> Option<Content<'_>> {
    Some(match block {
        Block::Text { text } if text.is_empty() => return None,
        Block::Text { text } => Content::Text { text },
        Block::Image { media_type, data } => image(media_type, data),
        Block::ToolUse { id, name, input } => Content::ToolUse { id, name, input },
        Block::ToolResult {
            id,
            content,
            is_error,
        } => Content::ToolResult {
            tool_use_id: id,
            content: content.iter().filter_map(result_part).collect(),
            is_error: *is_error,
        },
    })
}

fn result_part(part: &ResultPart) -> Option<Content<'_>> {
    Some(match part {
        ResultPart::Text { text } if text.is_empty() => return None,
        ResultPart::Text { text } => Content::Text { text },
        ResultPart::Image { media_type, data } => image(media_type, data),
    })
}

fn image<'a>(media_type: &'a str, data: &'a str) -> Content<'a> {
    Content::Image {
        source: ImageSource {
            kind: "base64",
            media_type,
            data,
        },
    }
}

fn tool_spec(tool: &ToolSpec) -> Tool<'_> {
    Tool {
        name: &tool.name,
        description: &tool.description,
        input_schema: &tool.input_schema,
    }
}

// ---- Errors ----

/// The Messages API's error answers and streams.
#[derive(Debug, Clone, Copy)]
struct MessagesApi;

impl Api for MessagesApi {
    const SYSTEM: &'static str = "anthropic";
    type Parser = MessagesParser;

    fn parser(&self) -> MessagesParser {
        MessagesParser::default()
    }

    fn error(&self, body: &str) -> ApiError {
        match serde_json::from_str::<ErrorBody>(body) {
            Ok(ErrorBody { error }) => api_error(error),
            Err(_) => ApiError::raw(body),
        }
    }

    fn no_endpoint_hint(&self, url: &str) -> String {
        let base = url.trim_end_matches("/v1/messages");
        match base.strip_suffix("/v1") {
            Some(without) => format!("the Anthropic API adds /v1 itself: try base_url: {without}"),
            None => format!("check the provider's base_url ({base})"),
        }
    }
}

/// `{"type": "error", "error": {"type": ..., "message": ...}}`
#[derive(Debug, Deserialize)]
struct ErrorBody {
    error: WireError,
}

#[derive(Debug, Deserialize)]
struct WireError {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    message: String,
}

fn api_error(error: WireError) -> ApiError {
    ApiError::api(
        error_class(&error.kind),
        if error.kind.is_empty() {
            error.message
        } else {
            format!("{}: {}", error.kind, error.message)
        },
    )
}

/// The class of an Anthropic error type (see the API's "Errors" page).
fn error_class(kind: &str) -> Option<ErrorClass> {
    match kind {
        "authentication_error" | "permission_error" => Some(ErrorClass::Auth),
        "not_found_error" => Some(ErrorClass::UnknownModel),
        "invalid_request_error" | "request_too_large" => Some(ErrorClass::BadRequest),
        "rate_limit_error" | "overloaded_error" | "api_error" | "timeout_error" => {
            Some(ErrorClass::Retry)
        }
        "billing_error" => Some(ErrorClass::Unavailable),
        _ => None,
    }
}

// ---- Stream ----

/// One event of the stream, by its `type`. Unknown types are skipped (the API documents that
/// new event types may appear).
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: usize,
        content_block: StartBlock,
    },
    ContentBlockDelta {
        index: usize,
        delta: BlockDelta,
    },
    /// Blocks are finished when the stream is (their `index` is not needed).
    ContentBlockStop,
    MessageDelta {
        delta: MessageDeltaBody,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop,
    Ping,
    Error {
        error: WireError,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Deserialize)]
struct StartMessage {
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    model: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StartBlock {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    /// Thinking, server tools, and whatever comes next: not part of the answer here.
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
struct MessageDeltaBody {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

/// A content block being streamed.
#[derive(Debug)]
enum Slot {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        start: Value,
        json: String,
    },
    Skipped,
}

/// Reads one streamed answer.
#[derive(Debug, Default)]
pub(crate) struct MessagesParser {
    blocks: BTreeMap<usize, Slot>,
    usage: Usage,
    stop: Option<String>,
    started: bool,
    model: Option<String>,
}

impl MessagesParser {
    fn usage(&mut self, usage: WireUsage) {
        if let Some(input) = usage.input_tokens {
            self.usage.input = input;
        }
        if let Some(output) = usage.output_tokens {
            self.usage.output = output;
        }
        if let Some(write) = usage.cache_creation_input_tokens {
            self.usage.cache_write = write;
        }
        if let Some(read) = usage.cache_read_input_tokens {
            self.usage.cache_read = read;
        }
    }
}

impl StreamParser for MessagesParser {
    fn event(&mut self, event: SseEvent, deltas: &mut Vec<Delta>) -> Result<bool, StreamError> {
        let parsed: Event = serde_json::from_str(&event.data).map_err(|error| {
            StreamError::Protocol(format!("unreadable event {:?}: {error}", event.data))
        })?;
        match parsed {
            Event::MessageStart { message } => {
                self.started = true;
                self.usage(message.usage.unwrap_or_default());
                self.model = message.model.filter(|model| !model.is_empty());
            }
            Event::ContentBlockStart {
                index,
                content_block,
            } => {
                let slot = match content_block {
                    StartBlock::Text { text } => {
                        if !text.is_empty() {
                            deltas.push(Delta::Text(text.clone()));
                        }
                        Slot::Text(text)
                    }
                    StartBlock::ToolUse { id, name, input } => {
                        deltas.push(Delta::ToolUse {
                            id: id.clone(),
                            name: name.clone(),
                        });
                        Slot::ToolUse {
                            id,
                            name,
                            start: input,
                            json: String::new(),
                        }
                    }
                    StartBlock::Other => Slot::Skipped,
                };
                self.blocks.insert(index, slot);
            }
            Event::ContentBlockDelta { index, delta } => match (self.blocks.get_mut(&index), delta)
            {
                (Some(Slot::Text(text)), BlockDelta::TextDelta { text: more }) => {
                    if !more.is_empty() {
                        text.push_str(&more);
                        deltas.push(Delta::Text(more));
                    }
                }
                (Some(Slot::ToolUse { json, .. }), BlockDelta::InputJsonDelta { partial_json }) => {
                    json.push_str(&partial_json);
                }
                (Some(Slot::Skipped), _) | (Some(_), BlockDelta::Other) => {}
                (Some(_), BlockDelta::TextDelta { .. } | BlockDelta::InputJsonDelta { .. }) => {
                    return Err(StreamError::Protocol(format!(
                        "a delta for content block {index} does not match its type"
                    )));
                }
                (None, _) => {
                    return Err(StreamError::Protocol(format!(
                        "a delta for content block {index}, which was never started"
                    )));
                }
            },
            Event::ContentBlockStop | Event::Ping | Event::Unknown => {}
            Event::MessageDelta { delta, usage } => {
                if let Some(stop) = delta.stop_reason {
                    self.stop = Some(stop);
                }
                self.usage(usage.unwrap_or_default());
            }
            Event::MessageStop => return Ok(true),
            Event::Error { error } => return Err(StreamError::Remote(api_error(error))),
        }
        Ok(false)
    }

    fn finish(self, complete: bool) -> Result<ModelResponse, StreamError> {
        if !self.started || (!complete && self.stop.is_none()) {
            return Err(StreamError::Truncated);
        }
        let content: Vec<Block> = self
            .blocks
            .into_values()
            .filter_map(|slot| match slot {
                Slot::Text(text) if text.is_empty() => None,
                Slot::Text(text) => Some(Block::Text { text }),
                Slot::ToolUse {
                    id,
                    name,
                    start,
                    json,
                } => {
                    let input = if json.trim().is_empty() {
                        start
                    } else {
                        serde_json::from_str(&json).unwrap_or_else(|_| invalid_arguments(json))
                    };
                    Some(Block::ToolUse { id, name, input })
                }
                Slot::Skipped => None,
            })
            .collect();
        let stop = match self.stop.as_deref() {
            Some("end_turn") => StopReason::EndTurn,
            Some("tool_use") => StopReason::ToolUse,
            Some("max_tokens") => StopReason::MaxTokens,
            Some(other) => StopReason::Other(other.to_owned()),
            None if content
                .iter()
                .any(|block| matches!(block, Block::ToolUse { .. })) =>
            {
                StopReason::ToolUse
            }
            None => StopReason::EndTurn,
        };
        Ok(ModelResponse {
            content,
            stop,
            // Every Messages answer reports its usage (in `message_start`).
            usage: Some(self.usage),
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
            model: "claude-sonnet-4-6".into(),
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
                            id: "toolu_1".into(),
                            name: "Read".into(),
                            input: json!({"path": "a.txt"}),
                        },
                        Block::ToolUse {
                            id: "toolu_2".into(),
                            name: "Screenshot".into(),
                            input: json!({}),
                        },
                    ],
                },
                ChatMessage {
                    speaker: Speaker::User,
                    content: vec![
                        Block::ToolResult {
                            id: "toolu_1".into(),
                            content: vec![ResultPart::Text {
                                text: "no such file".into(),
                            }],
                            is_error: true,
                        },
                        Block::ToolResult {
                            id: "toolu_2".into(),
                            content: vec![
                                ResultPart::Text { text: "".into() },
                                ResultPart::Image {
                                    media_type: "image/jpeg".into(),
                                    data: "/9j/4A==".into(),
                                },
                            ],
                            is_error: false,
                        },
                    ],
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
    fn builds_the_exact_body_with_cache_breakpoints() {
        let body = request_body(&conversation()).unwrap();
        let text = String::from_utf8(body.clone()).unwrap();
        let expected = json!({
            "model": "claude-sonnet-4-6",
            "max_tokens": 1024,
            "system": [
                {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}
            ],
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "What is in this picture?"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0="}}
                ]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a.txt"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "Screenshot", "input": {}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1",
                     "content": [{"type": "text", "text": "no such file"}], "is_error": true},
                    {"type": "tool_result", "tool_use_id": "toolu_2",
                     "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4A=="}}],
                     "is_error": false, "cache_control": {"type": "ephemeral"}}
                ]}
            ],
            "tools": [
                {"name": "Read", "description": "Reads a file.",
                 "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
                {"name": "Screenshot", "description": "Takes a screenshot.",
                 "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}
            ],
            "stream": true
        });
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), expected);
        // Field order is fixed, so the bytes are too.
        assert!(text.starts_with(
            r#"{"model":"claude-sonnet-4-6","max_tokens":1024,"system":[{"type":"text","text":"You are terse.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","#
        ));
        assert!(text.ends_with(r#""cache_control":{"type":"ephemeral"}}],"stream":true}"#));
        assert_eq!(request_body(&conversation()).unwrap(), body);
    }

    #[test]
    fn the_prefix_stays_byte_identical_as_the_conversation_grows() {
        let first = conversation();
        let mut second = first.clone();
        second.messages.push(ChatMessage::assistant("Done."));
        second.messages.push(ChatMessage::user("Thanks"));
        let first = String::from_utf8(request_body(&first).unwrap()).unwrap();
        let second = String::from_utf8(request_body(&second).unwrap()).unwrap();
        let prefix_end = first.find(r#""messages":"#).unwrap();
        assert_eq!(first[..prefix_end], second[..prefix_end]);
    }

    #[test]
    fn leaves_out_empty_system_tools_and_text() {
        let request = ModelRequest {
            model: "m".into(),
            system: String::new(),
            messages: vec![ChatMessage::user("hi"), ChatMessage::assistant("")],
            tools: Vec::new(),
            max_tokens: 10,
        };
        let body: Value = serde_json::from_slice(&request_body(&request).unwrap()).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "m",
                "max_tokens": 10,
                "messages": [{"role": "user", "content": [
                    {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}
                ]}],
                "stream": true
            })
        );
    }

    /// Runs literal wire text through the decoder and parser, in chunks of `chunk` bytes.
    fn parse(wire: &str, chunk: usize) -> (Result<ModelResponse, StreamError>, Vec<Delta>) {
        let mut decoder = SseDecoder::default();
        let mut parser = MessagesParser::default();
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

    const TEXT_STREAM: &str = "event: message_start\n\
data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-6\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"cache_creation_input_tokens\":100,\"cache_read_input_tokens\":2000,\"output_tokens\":1}}}\n\
\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\
\n\
event: ping\n\
data: {\"type\": \"ping\"}\n\
\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\
\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\", world\"}}\n\
\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":0}\n\
\n\
event: message_delta\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":15}}\n\
\n\
event: message_stop\n\
data: {\"type\":\"message_stop\"}\n\
\n";

    #[test]
    fn parses_a_text_answer_with_usage() {
        for chunk in [1, 7, 4096] {
            let (response, deltas) = parse(TEXT_STREAM, chunk);
            assert_eq!(
                response.unwrap(),
                ModelResponse {
                    content: vec![Block::Text {
                        text: "Hello, world".into()
                    }],
                    stop: StopReason::EndTurn,
                    usage: Some(Usage {
                        input: 25,
                        output: 15,
                        cache_read: 2000,
                        cache_write: 100
                    }),
                    model: Some("claude-sonnet-4-6".into()),
                }
            );
            assert_eq!(
                deltas,
                [Delta::Text("Hello".into()), Delta::Text(", world".into())]
            );
        }
    }

    const TOOL_STREAM: &str = r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_2","type":"message","role":"assistant","content":[],"model":"m","stop_reason":null,"usage":{"input_tokens":50,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Reading both."}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_a","name":"Read","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"path\": \"a"}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":".txt\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: content_block_start
data: {"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_b","name":"List","input":{}}}

event: content_block_stop
data: {"type":"content_block_stop","index":3}

event: content_block_start
data: {"type":"content_block_start","index":4,"content_block":{"type":"tool_use","id":"toolu_c","name":"Read","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":4,"delta":{"type":"input_json_delta","partial_json":"{\"path\": "}}

event: content_block_stop
data: {"type":"content_block_stop","index":4}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}

event: message_stop
data: {"type":"message_stop"}

"#;

    #[test]
    fn parses_parallel_tool_calls_and_keeps_invalid_input() {
        let (response, deltas) = parse(TOOL_STREAM, 13);
        let response = response.unwrap();
        assert_eq!(
            response.content,
            [
                Block::Text {
                    text: "Reading both.".into()
                },
                Block::ToolUse {
                    id: "toolu_a".into(),
                    name: "Read".into(),
                    input: json!({"path": "a.txt"})
                },
                Block::ToolUse {
                    id: "toolu_b".into(),
                    name: "List".into(),
                    input: json!({})
                },
                Block::ToolUse {
                    id: "toolu_c".into(),
                    name: "Read".into(),
                    input: json!({"_invalid_arguments": "{\"path\": "}),
                },
            ]
        );
        assert_eq!(response.stop, StopReason::ToolUse);
        assert_eq!(
            response.usage.unwrap(),
            Usage {
                input: 50,
                output: 89,
                ..Usage::default()
            }
        );
        assert_eq!(
            deltas,
            [
                Delta::Text("Reading both.".into()),
                Delta::ToolUse {
                    id: "toolu_a".into(),
                    name: "Read".into()
                },
                Delta::ToolUse {
                    id: "toolu_b".into(),
                    name: "List".into()
                },
                Delta::ToolUse {
                    id: "toolu_c".into(),
                    name: "Read".into()
                },
            ]
        );
    }

    #[test]
    fn an_error_event_is_classified_by_its_type() {
        let wire = "event: message_start\n\
data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n\
event: error\n\
data: {\"type\": \"error\", \"error\": {\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}\n\n";
        let (response, _) = parse(wire, 4096);
        assert_eq!(
            response.unwrap_err(),
            StreamError::Remote(ApiError::api(
                Some(ErrorClass::Retry),
                "overloaded_error: Overloaded".into(),
            ))
        );
    }

    #[test]
    fn a_stream_cut_short_is_truncated_and_garbage_is_a_protocol_error() {
        let cut = &TEXT_STREAM[..TEXT_STREAM.find("event: message_delta").unwrap()];
        assert_eq!(parse(cut, 4096).0.unwrap_err(), StreamError::Truncated);
        assert!(matches!(
            parse("data: {not json\n\n", 4096).0,
            Err(StreamError::Protocol(_))
        ));
        let mismatched = "data: {\"type\":\"message_start\",\"message\":{}}\n\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n";
        assert!(matches!(
            parse(mismatched, 4096).0,
            Err(StreamError::Protocol(_))
        ));
    }

    #[test]
    fn error_bodies_are_read_and_classified() {
        let api = MessagesApi;
        let error = api.error(
            r#"{"type":"error","error":{"type":"not_found_error","message":"model: claude-x"}}"#,
        );
        assert_eq!(error.class, Some(ErrorClass::UnknownModel));
        assert_eq!(error.message, "not_found_error: model: claude-x");
        assert_eq!(
            api.error("<html>bad gateway</html>"),
            ApiError::raw("<html>bad gateway</html>")
        );
        for (kind, class) in [
            ("authentication_error", ErrorClass::Auth),
            ("permission_error", ErrorClass::Auth),
            ("invalid_request_error", ErrorClass::BadRequest),
            ("rate_limit_error", ErrorClass::Retry),
            ("api_error", ErrorClass::Retry),
            ("overloaded_error", ErrorClass::Retry),
        ] {
            assert_eq!(error_class(kind), Some(class), "{kind}");
        }
        assert_eq!(error_class("something_new"), None);
    }
}
