//! What one run of the agent holds and is held to: its settings, its session (the
//! conversation and what it cost), and how it fails. The loop (`model_loop.rs`) and compaction
//! (`compact.rs`) both work on these; neither knows the other's insides.

use std::collections::HashSet;

use mew_cards::PermissionMode;
use serde::{Deserialize, Serialize};

use crate::conversation::{Block, ChatMessage, ResultPart, Speaker, Usage};
use crate::provider::ProviderError;

/// How one agent runs.
#[derive(Clone, Debug)]
pub(crate) struct AgentSettings {
    /// The system prompt; never changes during a run.
    pub(crate) system: String,
    /// The concrete model id.
    pub(crate) model: String,
    /// Model calls allowed in one run.
    pub(crate) max_turns: u32,
    /// Output tokens per model call.
    pub(crate) max_tokens: u32,
    /// The model's context window, in tokens.
    pub(crate) context_window: u64,
    /// The share of the context window at which the conversation is compacted.
    pub(crate) compact_at: f64,
    /// Consecutive answers that call only unknown tools before the run stops
    /// (3 for a main agent, 2 for a child).
    pub(crate) unknown_tool_limit: u32,
    /// The permission mode.
    pub(crate) mode: PermissionMode,
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AgentError {
    /// The model service failed.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// The model used all its turns.
    #[error("the agent reached its limit of {0} model calls without finishing")]
    MaxTurns(u32),
    /// The model kept calling tools that do not exist.
    #[error("the model called unknown tools {0} times in a row ({1}); stopping")]
    UnknownTools(u32, String),
    /// The run was canceled.
    #[error("canceled")]
    Canceled,
    /// A hook answered `continue: false`.
    #[error("stopped by a hook: {0}")]
    HookStopped(String),
}

/// The state a run carries: the conversation and what it cost.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Session {
    /// The conversation, oldest first.
    pub(crate) messages: Vec<ChatMessage>,
    /// Tokens used so far.
    pub(crate) usage: Usage,
    /// Tool calls made so far.
    pub(crate) tool_calls: u64,
    /// Model calls made so far.
    pub(crate) model_calls: u64,
    /// Model calls whose service reported no usage: their tokens are unknown, not zero.
    #[serde(default)]
    pub(crate) unreported_calls: u64,
    /// How full the context window is, and how often it was compacted.
    #[serde(default)]
    pub(crate) window: WindowUse,
}

/// How full the context window is, as far as the last model call tells.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct WindowUse {
    /// Tokens of the last model call, as the provider reported them: its whole request (input,
    /// cache reads and cache writes) and its answer. 0 when nothing was measured.
    pub(crate) tokens: u64,
    /// How many messages, from the first, those tokens cover (the request's and the answer).
    pub(crate) messages: usize,
    /// Times the conversation was compacted.
    pub(crate) compactions: u64,
    /// Whether the system prompt and tool definitions alone reach the threshold, which no
    /// compaction can get under: found and said once, then compaction is off for the session.
    pub(crate) too_small: bool,
}

/// Adds text to the conversation's last message if it is the user's, else as a new user message.
pub(crate) fn push_text(session: &mut Session, text: String) {
    let block = Block::Text { text };
    match session.messages.last_mut() {
        Some(last) if last.speaker == Speaker::User => last.content.push(block),
        _ => session.messages.push(ChatMessage {
            speaker: Speaker::User,
            content: vec![block],
        }),
    }
}

pub(crate) fn answered_ids(session: &Session) -> HashSet<String> {
    session
        .messages
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            Block::ToolResult { id, .. } => Some(id.clone()),
            _ => None,
        })
        .collect()
}

/// Gives every tool call without a result a placeholder error result.
pub(crate) fn close_dangling_calls(session: &mut Session) {
    let answered = answered_ids(session);
    let mut fixed = Vec::with_capacity(session.messages.len());
    let messages = std::mem::take(&mut session.messages);
    let mut iter = messages.into_iter().peekable();
    while let Some(message) = iter.next() {
        let dangling: Vec<String> = message
            .tool_uses()
            .map(|(id, _, _)| id.to_owned())
            .filter(|id| !answered.contains(id))
            .collect();
        fixed.push(message);
        if dangling.is_empty() {
            continue;
        }
        let placeholder = |id: String| Block::ToolResult {
            id,
            content: vec![ResultPart::Text {
                text: "[not run: the conversation moved on]".to_owned(),
            }],
            is_error: true,
        };
        match iter.peek_mut() {
            Some(next) if next.speaker == Speaker::User => {
                next.content.extend(dangling.into_iter().map(placeholder));
            }
            _ => fixed.push(ChatMessage {
                speaker: Speaker::User,
                content: dangling.into_iter().map(placeholder).collect(),
            }),
        }
    }
    session.messages = fixed;
}
