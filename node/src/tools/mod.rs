//! Tools an agent can call: the `Tool` trait, the registry, and the built-in tools.
//!
//! The built-in tools are `read_file`, `write_file`, `edit_file`, `multi_edit`, `ls`, `glob`,
//! `grep`, `bash`, `web_fetch` and `web_search`, one file each (what the web tools share and
//! their `web:` configuration are in `web.rs`); [`registry::ToolRegistry::builtin`] holds them all, and
//! [`registry::ToolRegistry::filter`] narrows a registry for a child agent. Every tool answers
//! with a [`ToolOutput`]: failures are `is_error` answers the model can read, never panics.

mod bash;
mod edit_file;
mod files;
pub(crate) use files::write_atomic;
mod glob;
mod grep;
mod html;
mod ls;
mod multi_edit;
mod read_file;
pub(crate) mod registry;
pub(crate) mod web;
mod web_fetch;
mod web_search;
mod write_file;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::conversation::{ResultPart, ToolSpec};

/// What a tool does to the world, for the permission policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Category {
    /// Reads only; runs in the concurrent read-only batch.
    Read,
    /// Changes files.
    Edit,
    /// Runs commands or has other effects (the strictest).
    Exec,
    /// Hands work to another agent, whose own permissions govern what it does;
    /// runs in the concurrent batch, like reads.
    Delegate,
}

impl Category {
    /// The category's name, for spans and metrics.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Category::Read => "read",
            Category::Edit => "edit",
            Category::Exec => "exec",
            Category::Delegate => "delegate",
        }
    }
}

/// Where and for whom a tool runs.
#[derive(Clone)]
pub(crate) struct ToolContext {
    /// The working directory; relative paths resolve against it.
    pub(crate) cwd: PathBuf,
    /// The node's environment snapshot (tools pass on only an allowlist).
    pub(crate) env: Arc<HashMap<String, String>>,
    /// Canceled when the task is.
    pub(crate) cancel: CancellationToken,
    /// The task the calls are made for (the parent of any delegated task).
    pub(crate) task_id: Option<mew_cards::TaskId>,
    /// How deep that task is in a delegation chain (0: started by a user).
    pub(crate) depth: u32,
    /// What the agent that runs the tools hands its own tools (delegation, skills, hooks),
    /// of a type this module does not know: the built-in tools never look at it.
    pub(crate) scope: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// The id of the model's tool call being run, when a model made it.
    pub(crate) call_id: Option<String>,
    /// Where a tool's news goes while it runs (`None` where nobody follows the calls).
    pub(crate) news: Option<NewsReport>,
    /// Answers the model calls a tool's server asks for (MCP sampling) with the task's own
    /// model (`None` outside a model-driven task).
    pub(crate) sampler: Option<Sampler>,
    /// Whether a tool may put a question of its own to the user ([`ToolAsk`]): a task's (it
    /// waits in INPUT_REQUIRED) or the terminal's. Where nobody could answer, a tool's server
    /// that asks is told no.
    pub(crate) can_ask_user: bool,
    /// The principal the task belongs to (`None` without authentication): a tool that keeps
    /// credentials per caller (an MCP server with `oauth.per_caller`) uses theirs.
    pub(crate) principal: Option<String>,
}

/// A question of a tool's own to the user: its kind (`metadata.mew.ask` of the task's status
/// message) and the data the message carries (an elicitation's message and schema).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ToolAsk {
    pub(crate) kind: String,
    pub(crate) data: Value,
}

/// A model call a tool's server asks for on the task's behalf (MCP `sampling/createMessage`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SampleRequest {
    /// The server's system prompt, if any.
    pub(crate) system: Option<String>,
    /// The conversation, oldest first, as text.
    pub(crate) messages: Vec<crate::conversation::ChatMessage>,
    /// The most tokens the server wants.
    pub(crate) max_tokens: u32,
    /// The server's model hints, most preferred first.
    pub(crate) model_hints: Vec<String>,
}

/// The task's model's answer to a [`SampleRequest`].
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SampleAnswer {
    /// The answer's text.
    pub(crate) text: String,
    /// The model that answered.
    pub(crate) model: String,
    /// Whether it stopped at the token limit.
    pub(crate) hit_max_tokens: bool,
}

/// Answers [`SampleRequest`]s; the error says why a request was refused or failed.
pub(crate) type Sampler = Arc<
    dyn Fn(SampleRequest) -> futures_util::future::BoxFuture<'static, Result<SampleAnswer, String>>
        + Send
        + Sync,
>;

/// Something a tool says while it runs, before its result: an MCP server's progress or log
/// message. The task shows it as a progress note of the call.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ToolNews {
    /// The model's call it is about.
    pub(crate) call_id: Option<String>,
    /// The tool, as the model names it.
    pub(crate) tool: String,
    /// `progress` or `log`.
    pub(crate) phase: &'static str,
    /// What it said.
    pub(crate) detail: Value,
}

/// Where the news of running tools goes.
pub(crate) type NewsReport = Arc<dyn Fn(ToolNews) + Send + Sync>;

/// At most `max` characters of `text` for a note or a question, saying how many were left out.
pub(crate) fn cut_chars(text: &str, max: usize) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(max).collect();
    match chars.count() {
        0 => head,
        rest => format!("{head}… ({rest} more characters)"),
    }
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("cwd", &self.cwd)
            .field("task_id", &self.task_id)
            .field("depth", &self.depth)
            .field("scope", &self.scope.is_some())
            .finish_non_exhaustive()
    }
}

/// A tool's answer, sent back to the model.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ToolOutput {
    /// The content.
    pub(crate) content: Vec<ResultPart>,
    /// True when the call failed; the model sees the content as an error.
    pub(crate) is_error: bool,
    /// Set when the call waits for something only the user may decide: a delegated task (this
    /// id) asks a permission or a question, or the tool's own server asks a question (this is
    /// what the call needs to go on, opaque to all but the tool). The run stops and puts the
    /// question (the content) to the user, whose reply goes back through [`Tool::answer`].
    pub(crate) relay: Option<String>,
    /// Set with `relay` when the question is the tool's own (an MCP server's elicitation):
    /// what kind of question it is and what the user fills in, for the task's status message.
    pub(crate) ask: Option<Box<ToolAsk>>,
    /// The answer as structured JSON, in the shape Claude Code's hooks read as
    /// `tool_response` (`{stdout, stderr, interrupted}` for `bash`, `{filePath, ..}` for the
    /// file tools, an MCP tool's result); hooks only, the model sees `content`.
    pub(crate) response: Option<Value>,
}

impl ToolOutput {
    /// A successful text answer.
    pub(crate) fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![ResultPart::Text { text: text.into() }],
            is_error: false,
            relay: None,
            ask: None,
            response: None,
        }
    }

    /// A failed call, explained in text.
    pub(crate) fn error(text: impl Into<String>) -> Self {
        Self {
            content: vec![ResultPart::Text { text: text.into() }],
            is_error: true,
            relay: None,
            ask: None,
            response: None,
        }
    }

    /// The same answer, with `response` as its structured form for hooks.
    #[must_use]
    pub(crate) fn with_response(mut self, response: Value) -> Self {
        self.response = Some(response);
        self
    }

    /// The text parts joined by newlines (images are left out).
    #[cfg_attr(not(test), allow(dead_code))] // wired by the agent runtime
    pub(crate) fn text_content(&self) -> String {
        self.content
            .iter()
            .filter_map(|part| match part {
                ResultPart::Text { text } => Some(text.as_str()),
                ResultPart::Image { .. } => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Parses a tool's JSON input into its typed form; a mismatch is an error answer naming the tool.
fn parse_input<T: DeserializeOwned>(tool: &str, input: Value) -> Result<T, ToolOutput> {
    serde_json::from_value(input)
        .map_err(|err| ToolOutput::error(format!("invalid input for {tool}: {err}")))
}

/// Runs blocking file-system work off the async runtime. A panic inside `work` becomes an error
/// answer, so a broken tool fails its call, not the node.
async fn run_blocking(work: impl FnOnce() -> ToolOutput + Send + 'static) -> ToolOutput {
    match tokio::task::spawn_blocking(work).await {
        Ok(output) => output,
        Err(err) => ToolOutput::error(format!("the tool failed unexpectedly: {err}")),
    }
}

/// A tool.
#[async_trait]
pub(crate) trait Tool: Send + Sync {
    /// The name the model calls it by.
    fn name(&self) -> &str;
    /// What it does, for the model.
    fn description(&self) -> String;
    /// JSON Schema of its input.
    fn input_schema(&self) -> Value;
    /// What it does to the world.
    fn category(&self) -> Category;
    /// Whether it writes files (a read-only role is given no such tool): every edit tool,
    /// and tools of other categories that write too.
    fn writes(&self) -> bool {
        self.category() == Category::Edit
    }
    /// Runs the tool. Errors are answers with `is_error`, never panics.
    async fn call(&self, input: Value, ctx: &ToolContext) -> ToolOutput;

    /// Gives the user's `reply` to what asked for it through [`ToolOutput::relay`] (`task`:
    /// the delegated task, or the tool's own state of the call). Only the runtime calls this,
    /// never the model: a model cannot answer a question meant for the user.
    async fn answer(&self, task: &str, _reply: &str, _ctx: &ToolContext) -> ToolOutput {
        ToolOutput::error(format!(
            "{} cannot pass a reply to task {task}",
            self.name()
        ))
    }

    /// Takes up the call `ctx.call_id` of this tool, which was running when the node running
    /// the task was lost: `Some` answer when the tool can find out what became of it (a
    /// delegation follows the task it started, by its link), `None` when it cannot and the
    /// call stays interrupted with an unknown outcome.
    async fn reattach(&self, _ctx: &ToolContext) -> Option<ToolOutput> {
        None
    }

    /// The spec the model sees.
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().to_owned(),
            description: self.description(),
            input_schema: self.input_schema(),
        }
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Helpers shared by the tools' tests.

    use super::*;

    /// A context rooted at `cwd`, with the test process's PATH (read, never changed) and a
    /// variable that no tool may pass on.
    pub(crate) fn context(cwd: &std::path::Path) -> ToolContext {
        let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_owned());
        ToolContext {
            cwd: cwd.to_path_buf(),
            env: Arc::new(HashMap::from([
                ("PATH".to_owned(), path),
                ("MEW_TEST_SECRET".to_owned(), "s3cret".to_owned()),
            ])),
            cancel: CancellationToken::new(),
            task_id: None,
            depth: 0,
            scope: None,
            call_id: None,
            news: None,
            sampler: None,
            can_ask_user: false,
            principal: None,
        }
    }
}
