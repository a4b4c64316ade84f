//! Hook events, what a block means for each, and the JSON payload a hook receives.
//!
//! | event | when | a block means |
//! |---|---|---|
//! | `SessionStart` | a session starts (or is cleared), before its first user message | — |
//! | `SessionEnd` | before a session is closed | — |
//! | `SessionResume` | a session is resumed, before its first new user message | — |
//! | `UserPromptSubmit` | a user message arrives, before it enters the conversation | the message is refused |
//! | `Stop` | the agent loop stops on its own | the loop goes on, with the reason as its next instruction |
//! | `PreUserMessage` | before each model request | — |
//! | `PreToolUse` | before each tool call, before the permission check | the call is refused; the model sees the reason |
//! | `PostToolUse` | after a tool call has its result | the reason is fed back to the model (the call already ran) |
//! | `PostToolUseFailure` | after a tool call failed (its result is an error) | the reason is fed back to the model |
//! | `PermissionRequest` | a tool call needs approval, before the question is asked | the call is refused; the model sees the reason |
//! | `PreCompact` | before the conversation is compacted | — |
//! | `PostCompact` | after it was compacted | — |
//! | `Notification` | a permission question is asked, or a model request failed | — |
//! | `SubagentStart` | a child agent starts | — |
//! | `SubagentStop` | a child agent stops on its own | the child goes on, with the reason as its next instruction |
//! | `TaskCompleted` | a task reaches a terminal state | — |
//! | `TaskReceived` | a task arrives at the node, before a runner starts it | the task is refused |
//! | `DelegationStart` | before an agent delegates to a role, peer or URL | the delegation fails; the model sees the reason |
//!
//! `Stop` and `SubagentStop` can block, as in Claude Code: a hook that refuses the stop hands
//! the agent its next instruction. To keep such a hook from looping forever, the payload's
//! `stop_hook_active` is true when the run already goes on because of a stop hook, and the
//! caller ends the run after [`MAX_STOP_BLOCKS`] blocks in a row.
//!
//! The *blocking* events ([`HookEvent::is_blocking`]) are the ones whose caller waits for the
//! decision: `PreToolUse`, `PermissionRequest`, `UserPromptSubmit`, `TaskReceived`,
//! `DelegationStart`, `Stop` and `SubagentStop`. An `async` hook may listen to them too, as in
//! Claude Code, but it cannot block: the caller goes on without its answer, which is only
//! logged. `fail: closed` is allowed only on the events that prevent something
//! ([`BlockEffect::Prevent`]).
//!
//! `PostToolUse` follows every call that ran; hooks from Claude Code settings files see it
//! only for calls that succeeded, as in Claude Code, and `PostToolUseFailure` for the others.
//! A `PermissionRequest` hook answers for the user: `hookSpecificOutput.decision.behavior`
//! `allow` runs the call without the question (with its `updatedInput`, if any), `deny`
//! refuses it with `message`; no decision leaves the question to the user.
//!
//! # Payload
//!
//! A hook receives one JSON object (on stdin for a shell hook, as the POST body for an http
//! hook). The dispatcher adds the common fields to what [`Payload`]'s constructors put in:
//!
//! - `event` and `hook_event_name`: the event's name (the second is Claude Code's field);
//! - `session_id`: never empty (a [`super::dispatcher::HookContext`] cannot be made without one);
//! - `cwd`: the working directory;
//! - `mode` and `permission_mode`: the permission mode (`default`, `acceptEdits`, ...).
//!
//! Event fields use Claude Code's names where Claude Code has the event (`prompt`,
//! `tool_name`, `tool_input`, `tool_use_id`, `tool_response`, `source`, `trigger`, `message`,
//! `notification_type`, `agent_id`, `agent_type`, `stop_hook_active`), plus the seed's names
//! (`tool_result`, `is_error`, `iter`, `kind`, `detail`, `before_tokens`, `after_tokens`), so
//! scripts written for either work. Hooks from Claude Code settings files see Claude Code's
//! tool names in `tool_name` (`Bash`, `Write`, ...) and Mew's in `mew_tool_name`; hooks from
//! `hooks.yaml` see Mew's names (`bash`, `write_file`, ...) in `tool_name`.

use std::fmt;

use serde_json::{Map, Value, json};

/// After this many `Stop` (or `SubagentStop`) blocks in a row the caller ends the run anyway.
#[allow(dead_code)] // read by the agent loop
pub(crate) const MAX_STOP_BLOCKS: u32 = 8;

/// A point in a run where hooks are dispatched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum HookEvent {
    /// A session starts.
    SessionStart,
    /// A session ends.
    SessionEnd,
    /// A session is resumed.
    SessionResume,
    /// A user message arrives.
    UserPromptSubmit,
    /// The agent loop stops on its own.
    Stop,
    /// Before each model request.
    PreUserMessage,
    /// Before a tool call.
    PreToolUse,
    /// After a tool call.
    PostToolUse,
    /// After a tool call that failed.
    PostToolUseFailure,
    /// A tool call needs approval.
    PermissionRequest,
    /// Before compaction.
    PreCompact,
    /// After compaction.
    PostCompact,
    /// A permission question or a failed model request.
    Notification,
    /// A child agent starts.
    SubagentStart,
    /// A child agent stops on its own.
    SubagentStop,
    /// A task reached a terminal state.
    TaskCompleted,
    /// A task arrives at the node.
    TaskReceived,
    /// An agent is about to delegate.
    DelegationStart,
}

/// What a block from a hook does on an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BlockEffect {
    /// The action is refused (a tool call, a message, a task, a delegation).
    Prevent,
    /// The stop is refused: the run goes on with the reason as its next instruction.
    Continue,
    /// The action already happened: the reason is fed back to the model as context.
    Feedback,
    /// A block means nothing here; it is reported as an error.
    None,
}

impl HookEvent {
    /// Every event, in the order of the table above.
    pub(crate) const ALL: [Self; 18] = [
        Self::SessionStart,
        Self::SessionEnd,
        Self::SessionResume,
        Self::UserPromptSubmit,
        Self::Stop,
        Self::PreUserMessage,
        Self::PreToolUse,
        Self::PostToolUse,
        Self::PostToolUseFailure,
        Self::PermissionRequest,
        Self::PreCompact,
        Self::PostCompact,
        Self::Notification,
        Self::SubagentStart,
        Self::SubagentStop,
        Self::TaskCompleted,
        Self::TaskReceived,
        Self::DelegationStart,
    ];

    /// The event's name, as written in rules and payloads.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::SessionStart => "SessionStart",
            Self::SessionEnd => "SessionEnd",
            Self::SessionResume => "SessionResume",
            Self::UserPromptSubmit => "UserPromptSubmit",
            Self::Stop => "Stop",
            Self::PreUserMessage => "PreUserMessage",
            Self::PreToolUse => "PreToolUse",
            Self::PostToolUse => "PostToolUse",
            Self::PostToolUseFailure => "PostToolUseFailure",
            Self::PermissionRequest => "PermissionRequest",
            Self::PreCompact => "PreCompact",
            Self::PostCompact => "PostCompact",
            Self::Notification => "Notification",
            Self::SubagentStart => "SubagentStart",
            Self::SubagentStop => "SubagentStop",
            Self::TaskCompleted => "TaskCompleted",
            Self::TaskReceived => "TaskReceived",
            Self::DelegationStart => "DelegationStart",
        }
    }

    /// The event named `name` (exact, case-sensitive).
    pub(crate) fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|event| event.as_str() == name)
    }

    /// What a block does on this event.
    pub(crate) fn block_effect(self) -> BlockEffect {
        match self {
            Self::PreToolUse
            | Self::PermissionRequest
            | Self::UserPromptSubmit
            | Self::TaskReceived
            | Self::DelegationStart => BlockEffect::Prevent,
            Self::Stop | Self::SubagentStop => BlockEffect::Continue,
            Self::PostToolUse | Self::PostToolUseFailure => BlockEffect::Feedback,
            _ => BlockEffect::None,
        }
    }

    /// Whether the caller waits for a decision: no `async` hook may listen to the event.
    pub(crate) fn is_blocking(self) -> bool {
        matches!(
            self.block_effect(),
            BlockEffect::Prevent | BlockEffect::Continue
        )
    }

    /// Whether plain (non-JSON) stdout of a successful hook becomes context for the model, as
    /// in Claude Code. On other events it is only logged.
    pub(crate) fn takes_plain_context(self) -> bool {
        matches!(
            self,
            Self::UserPromptSubmit | Self::SessionStart | Self::SessionResume
        )
    }

    /// Whether the event is about one tool call: its payload has `tool_name` and
    /// `tool_input`, and a settings-file hook's `if` (a permission rule) is tested on it.
    pub(crate) fn is_tool_event(self) -> bool {
        matches!(
            self,
            Self::PreToolUse
                | Self::PostToolUse
                | Self::PostToolUseFailure
                | Self::PermissionRequest
        )
    }

    /// The payload field a Claude Code `matcher` is tested against on this event, if any
    /// (`tool_name` for tool events, `source` for `SessionStart`, ...). Events without one
    /// ignore the matcher, as Claude Code does.
    pub(crate) fn matcher_field(self) -> Option<&'static str> {
        match self {
            Self::PreToolUse
            | Self::PostToolUse
            | Self::PostToolUseFailure
            | Self::PermissionRequest => Some("tool_name"),
            Self::SessionStart | Self::SessionResume => Some("source"),
            Self::SessionEnd => Some("reason"),
            Self::PreCompact | Self::PostCompact => Some("trigger"),
            Self::Notification => Some("notification_type"),
            Self::SubagentStart | Self::SubagentStop => Some("agent_type"),
            Self::TaskReceived | Self::TaskCompleted => Some("role"),
            Self::DelegationStart => Some("target"),
            Self::UserPromptSubmit | Self::Stop | Self::PreUserMessage => None,
        }
    }
}

/// Why Mew has no event of this name, for the events Claude Code has and a node does not:
/// what a settings file's hooks for it are skipped with.
pub(crate) fn missing_claude_code_event(name: &str) -> Option<&'static str> {
    Some(match name {
        "Setup" => {
            "it runs for `claude --init` and `--maintenance`; a node has no such start (SessionStart runs when a session starts)"
        }
        "ConfigChange" => {
            "a node reads its settings files when it starts (a change takes effect at the next \
             start); the role and skill files it reloads while running are reported in /status \
             and the log, not to hooks, which run for a session"
        }
        "InstructionsLoaded" => "Mew loads no CLAUDE.md or rules files into a role's context",
        "PermissionDenied" => {
            "it follows Claude Code's auto-mode denials, which Mew does not have; a denied call is answered to the model"
        }
        "StopFailure" => {
            "Notification with notification_type stream_error reports a failed model request"
        }
        "PostToolBatch" => "PostToolUse runs after each call of a batch",
        "UserPromptExpansion" => "UserPromptSubmit sees the message, slash commands included",
        "TaskCreated" => "TaskReceived runs when a task arrives at the node",
        "TeammateIdle" => "Mew has no agent teams",
        "Elicitation" | "ElicitationResult" => {
            "Mew puts an MCP server's questions to the task's caller (the task waits in \
             INPUT_REQUIRED, and the caller answers); hooks neither see nor answer them"
        }
        "WorktreeCreate" | "WorktreeRemove" => "Mew creates no git worktrees",
        "CwdChanged" | "FileChanged" => {
            "a role's working directory is fixed and Mew watches no files for hooks"
        }
        _ => return None,
    })
}

impl fmt::Display for HookEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An event and its own fields; the dispatcher adds the common ones when it dispatches.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Payload {
    event: HookEvent,
    fields: Map<String, Value>,
}

impl Payload {
    /// A payload for `event` with no fields of its own.
    pub(crate) fn new(event: HookEvent) -> Self {
        Self {
            event,
            fields: Map::new(),
        }
    }

    /// Adds (or replaces) one field.
    #[must_use]
    pub(crate) fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.fields.insert(key.to_owned(), value.into());
        self
    }

    /// The event.
    pub(crate) fn event(&self) -> HookEvent {
        self.event
    }

    /// The event's own fields.
    #[cfg_attr(not(test), allow(dead_code))] // read by tests
    pub(crate) fn fields(&self) -> &Map<String, Value> {
        &self.fields
    }

    /// `SessionStart`; `source` is `startup`, `clear` or `compact` (Claude Code's values).
    pub(crate) fn session_start(source: &str) -> Self {
        Self::new(HookEvent::SessionStart).with("source", source)
    }

    /// `SessionEnd`; `reason` is `exit`, `clear`, `resume` or `other`.
    pub(crate) fn session_end(reason: &str) -> Self {
        Self::new(HookEvent::SessionEnd).with("reason", reason)
    }

    /// `SessionResume` (its `source` is `resume`, as Claude Code's `SessionStart` on resume).
    pub(crate) fn session_resume() -> Self {
        Self::new(HookEvent::SessionResume).with("source", "resume")
    }

    /// `UserPromptSubmit` with the user's text.
    pub(crate) fn user_prompt_submit(prompt: &str) -> Self {
        Self::new(HookEvent::UserPromptSubmit).with("prompt", prompt)
    }

    /// `Stop` after `iter` model turns; `stop_hook_active` is true when the run goes on because
    /// a stop hook blocked the previous stop.
    pub(crate) fn stop(iter: u64, stop_hook_active: bool, last_message: &str) -> Self {
        Self::new(HookEvent::Stop)
            .with("iter", iter)
            .with("stop_hook_active", stop_hook_active)
            .with("last_assistant_message", last_message)
    }

    /// `PreUserMessage` before model turn `iter`.
    pub(crate) fn pre_user_message(iter: u64) -> Self {
        Self::new(HookEvent::PreUserMessage).with("iter", iter)
    }

    /// `PreToolUse` for the call `tool_use_id` of Mew's tool `tool_name`.
    pub(crate) fn pre_tool_use(tool_name: &str, tool_input: &Value, tool_use_id: &str) -> Self {
        Self::new(HookEvent::PreToolUse)
            .with("tool_name", tool_name)
            .with("tool_input", tool_input.clone())
            .with("tool_use_id", tool_use_id)
    }

    /// `PostToolUse`: the call and its result (`tool_response` for Claude Code's scripts: the
    /// tool's structured answer where it gives one, else its text; `tool_result` and
    /// `is_error` for the seed's).
    pub(crate) fn post_tool_use(
        tool_name: &str,
        tool_input: &Value,
        tool_use_id: &str,
        result: &str,
        response: Option<&Value>,
        is_error: bool,
    ) -> Self {
        Self::new(HookEvent::PostToolUse)
            .with("tool_name", tool_name)
            .with("tool_input", tool_input.clone())
            .with("tool_use_id", tool_use_id)
            .with(
                "tool_response",
                response.cloned().unwrap_or_else(|| Value::from(result)),
            )
            .with("tool_result", result)
            .with("is_error", is_error)
    }

    /// `PostToolUseFailure`: a call whose result is an error (`error` is its text, as in
    /// Claude Code; `is_interrupt` is true when the task was canceled under it).
    pub(crate) fn post_tool_use_failure(
        tool_name: &str,
        tool_input: &Value,
        tool_use_id: &str,
        error: &str,
        is_interrupt: bool,
    ) -> Self {
        Self::new(HookEvent::PostToolUseFailure)
            .with("tool_name", tool_name)
            .with("tool_input", tool_input.clone())
            .with("tool_use_id", tool_use_id)
            .with("error", error)
            .with("is_interrupt", is_interrupt)
    }

    /// `PermissionRequest`: a call that needs approval, and the question the user would be
    /// asked (`permission_suggestions` is empty: Mew offers no rule to add from here).
    pub(crate) fn permission_request(
        tool_name: &str,
        tool_input: &Value,
        tool_use_id: &str,
        question: &str,
    ) -> Self {
        Self::new(HookEvent::PermissionRequest)
            .with("tool_name", tool_name)
            .with("tool_input", tool_input.clone())
            .with("tool_use_id", tool_use_id)
            .with("permission_suggestions", Value::Array(Vec::new()))
            .with("question", question)
    }

    /// `PreCompact`; `trigger` is `auto` or `manual`.
    pub(crate) fn pre_compact(trigger: &str, before_tokens: u64) -> Self {
        Self::new(HookEvent::PreCompact)
            .with("trigger", trigger)
            .with("before_tokens", before_tokens)
    }

    /// `PostCompact`.
    pub(crate) fn post_compact(trigger: &str, before_tokens: u64, after_tokens: u64) -> Self {
        Self::new(HookEvent::PostCompact)
            .with("trigger", trigger)
            .with("before_tokens", before_tokens)
            .with("after_tokens", after_tokens)
    }

    /// `Notification`; `kind` is `permission_prompt` or `stream_error`, `detail` the question
    /// or the error.
    pub(crate) fn notification(kind: &str, detail: &str) -> Self {
        Self::new(HookEvent::Notification)
            .with("kind", kind)
            .with("notification_type", kind)
            .with("detail", detail)
            .with("message", detail)
    }

    /// `SubagentStart`: `agent_id` is the child's task id, `agent_type` its role.
    pub(crate) fn subagent_start(agent_id: &str, agent_type: &str) -> Self {
        Self::new(HookEvent::SubagentStart)
            .with("agent_id", agent_id)
            .with("agent_type", agent_type)
    }

    /// `SubagentStop`, with the fields of [`Self::stop`].
    pub(crate) fn subagent_stop(
        agent_id: &str,
        agent_type: &str,
        stop_hook_active: bool,
        last_message: &str,
    ) -> Self {
        Self::new(HookEvent::SubagentStop)
            .with("agent_id", agent_id)
            .with("agent_type", agent_type)
            .with("stop_hook_active", stop_hook_active)
            .with("last_assistant_message", last_message)
    }

    /// `TaskCompleted`; `state` is the A2A state name (`TASK_STATE_COMPLETED`, ...).
    pub(crate) fn task_completed(task_id: &str, role: &str, state: &str) -> Self {
        Self::new(HookEvent::TaskCompleted)
            .with("task_id", task_id)
            .with("role", role)
            .with("state", state)
    }

    /// `TaskReceived`, with the text of the message that starts the task.
    pub(crate) fn task_received(
        task_id: &str,
        context_id: &str,
        role: &str,
        message: &str,
    ) -> Self {
        Self::new(HookEvent::TaskReceived)
            .with("task_id", task_id)
            .with("context_id", context_id)
            .with("role", role)
            .with("prompt", message)
    }

    /// `DelegationStart`: `target` as the agent wrote it (a role, `peer/role` or a URL).
    pub(crate) fn delegation_start(
        parent_task_id: &str,
        target: &str,
        prompt: &str,
        background: bool,
    ) -> Self {
        Self::new(HookEvent::DelegationStart)
            .with("parent_task_id", parent_task_id)
            .with("target", target)
            .with("prompt", prompt)
            .with("background", background)
    }

    /// The whole JSON object: the common fields, then the event's own (which cannot replace
    /// the common ones).
    pub(crate) fn to_json(&self, session_id: &str, cwd: &str, mode: &str) -> Value {
        let mut object = self.fields.clone();
        let common = json!({
            "event": self.event.as_str(),
            "hook_event_name": self.event.as_str(),
            "session_id": session_id,
            "cwd": cwd,
            "mode": mode,
            "permission_mode": mode,
        });
        if let Value::Object(common) = common {
            object.extend(common);
        }
        Value::Object(object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        for event in HookEvent::ALL {
            assert_eq!(HookEvent::parse(event.as_str()), Some(event));
            assert_eq!(event.to_string(), event.as_str());
        }
        let mut names: Vec<&str> = HookEvent::ALL.iter().map(|e| e.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), HookEvent::ALL.len());
        assert_eq!(HookEvent::parse("pretooluse"), None);
        assert_eq!(HookEvent::parse("PermissionDenied"), None);
    }

    #[test]
    fn blocking_events() {
        let blocking: Vec<HookEvent> = HookEvent::ALL
            .into_iter()
            .filter(|event| event.is_blocking())
            .collect();
        assert_eq!(
            blocking,
            [
                HookEvent::UserPromptSubmit,
                HookEvent::Stop,
                HookEvent::PreToolUse,
                HookEvent::PermissionRequest,
                HookEvent::SubagentStop,
                HookEvent::TaskReceived,
                HookEvent::DelegationStart,
            ]
        );
        assert_eq!(HookEvent::Stop.block_effect(), BlockEffect::Continue);
        assert_eq!(HookEvent::PostToolUse.block_effect(), BlockEffect::Feedback);
        assert!(!HookEvent::PostToolUse.is_blocking());
        assert_eq!(HookEvent::SessionEnd.block_effect(), BlockEffect::None);
    }

    #[test]
    fn every_constructor_fills_its_event_and_its_matcher_field() {
        let input = json!({"command": "ls"});
        let payloads = [
            Payload::session_start("startup"),
            Payload::session_end("exit"),
            Payload::session_resume(),
            Payload::user_prompt_submit("hi"),
            Payload::stop(3, false, "done"),
            Payload::pre_user_message(1),
            Payload::pre_tool_use("bash", &input, "c"),
            Payload::post_tool_use("bash", &input, "c", "out", None, false),
            Payload::post_tool_use_failure("bash", &input, "c", "exit code 1", false),
            Payload::permission_request("bash", &input, "c", "run ls?"),
            Payload::pre_compact("auto", 100),
            Payload::post_compact("auto", 100, 10),
            Payload::notification("permission_prompt", "run ls?"),
            Payload::subagent_start("t-2", "reviewer"),
            Payload::subagent_stop("t-2", "reviewer", true, "ok"),
            Payload::task_completed("t-1", "coder", "TASK_STATE_COMPLETED"),
            Payload::task_received("t-1", "ctx-1", "coder", "fix it"),
            Payload::delegation_start("t-1", "peer/reviewer", "review", true),
        ];
        let events: Vec<HookEvent> = payloads.iter().map(Payload::event).collect();
        assert_eq!(events, HookEvent::ALL);
        for payload in &payloads {
            if let Some(field) = payload.event().matcher_field() {
                assert!(
                    payload.fields().contains_key(field),
                    "{} lacks its matcher field {field}",
                    payload.event()
                );
            }
        }
        assert_eq!(payloads[4].fields()["stop_hook_active"], false);
        assert_eq!(payloads[14].fields()["stop_hook_active"], true);
        assert_eq!(payloads[12].fields()["message"], "run ls?");
    }

    #[test]
    fn payload_has_common_and_claude_code_fields() {
        let payload = Payload::pre_tool_use("bash", &json!({"command": "ls"}), "call-1");
        let value = payload.to_json("s-1", "/p", "default");
        assert_eq!(
            value,
            json!({
                "event": "PreToolUse",
                "hook_event_name": "PreToolUse",
                "session_id": "s-1",
                "cwd": "/p",
                "mode": "default",
                "permission_mode": "default",
                "tool_name": "bash",
                "tool_input": {"command": "ls"},
                "tool_use_id": "call-1",
            })
        );
        // An event field cannot pass itself off as a common one.
        let forged = Payload::new(HookEvent::Stop).with("session_id", "other");
        assert_eq!(forged.to_json("s-1", "/p", "plan")["session_id"], "s-1");
        let post = Payload::post_tool_use("bash", &json!({}), "c", "out", None, true)
            .to_json("s", "/", "m");
        assert_eq!(post["tool_response"], "out");
        assert_eq!(post["tool_result"], "out");
        assert_eq!(post["is_error"], true);
        // A tool's structured answer is Claude Code's `tool_response`; the text stays the seed's.
        let response = json!({"stdout": "out", "stderr": "", "interrupted": false});
        let post = Payload::post_tool_use("bash", &json!({}), "c", "out", Some(&response), false)
            .to_json("s", "/", "m");
        assert_eq!(post["tool_response"], response);
        assert_eq!(post["tool_result"], "out");
    }
}
