//! The conversation as models see it, provider-neutral: messages of text, tool calls, tool results and images.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who said a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Speaker {
    /// The user, or tool results sent back to the model.
    User,
    /// The model.
    Assistant,
}

/// One block of a message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Block {
    /// Text.
    Text { text: String },
    /// An image, base64-encoded.
    Image { media_type: String, data: String },
    /// The model calls a tool.
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    /// The result of a tool call, paired with the call by `id`.
    ToolResult {
        id: String,
        content: Vec<ResultPart>,
        is_error: bool,
    },
}

/// A piece of a tool result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ResultPart {
    /// Text.
    Text { text: String },
    /// An image, base64-encoded (providers that take no images in tool results get a description).
    Image { media_type: String, data: String },
}

/// One message of the conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct ChatMessage {
    /// Who said it.
    pub(crate) speaker: Speaker,
    /// What was said.
    pub(crate) content: Vec<Block>,
}

impl ChatMessage {
    /// A user message of plain text.
    pub(crate) fn user(text: impl Into<String>) -> Self {
        Self {
            speaker: Speaker::User,
            content: vec![Block::Text { text: text.into() }],
        }
    }

    /// An assistant message of plain text.
    pub(crate) fn assistant(text: impl Into<String>) -> Self {
        Self {
            speaker: Speaker::Assistant,
            content: vec![Block::Text { text: text.into() }],
        }
    }

    /// The text blocks joined.
    pub(crate) fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|b| match b {
                Block::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("")
    }

    /// The tool calls in this message.
    pub(crate) fn tool_uses(&self) -> impl Iterator<Item = (&str, &str, &Value)> {
        self.content.iter().filter_map(|b| match b {
            Block::ToolUse { id, name, input } => Some((id.as_str(), name.as_str(), input)),
            _ => None,
        })
    }
}

/// A tool as the model is told about it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct ToolSpec {
    /// The name the model calls it by.
    pub(crate) name: String,
    /// What it does.
    pub(crate) description: String,
    /// JSON Schema of its input (an object schema).
    pub(crate) input_schema: Value,
}

/// Tokens a model call used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Usage {
    /// Input tokens (not counting cache reads).
    pub(crate) input: u64,
    /// Output tokens.
    pub(crate) output: u64,
    /// Input tokens read from the prompt cache.
    pub(crate) cache_read: u64,
    /// Input tokens written to the prompt cache.
    pub(crate) cache_write: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Self) {
        self.input += other.input;
        self.output += other.output;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
    }
}

/// Why the model stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StopReason {
    /// It finished its answer.
    EndTurn,
    /// It wants tool results.
    ToolUse,
    /// It ran out of output tokens.
    MaxTokens,
    /// Anything else the provider said.
    Other(String),
}

/// One call to a model.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ModelRequest {
    /// The concrete model id.
    pub(crate) model: String,
    /// The system prompt (kept byte-identical across turns, for prompt caching).
    pub(crate) system: String,
    /// The conversation, oldest first.
    pub(crate) messages: Vec<ChatMessage>,
    /// The tools, in a fixed order.
    pub(crate) tools: Vec<ToolSpec>,
    /// The most output tokens to produce.
    pub(crate) max_tokens: u32,
}

/// What a model call produced.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ModelResponse {
    /// The assistant message's blocks.
    pub(crate) content: Vec<Block>,
    /// Why it stopped.
    pub(crate) stop: StopReason,
    /// Tokens used, as the service reported them; `None` when it reported none (some local
    /// servers send no usage), which is not the same as zero.
    pub(crate) usage: Option<Usage>,
    /// The model that answered, as the service named it (`None`: it did not say).
    pub(crate) model: Option<String>,
}

/// Progress while a model answers.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Delta {
    /// More text of the answer.
    Text(String),
    /// The model started a tool call.
    ToolUse { id: String, name: String },
}
