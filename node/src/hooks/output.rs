//! Claude Code's hook output protocol, and the merged outcome of one dispatch.
//!
//! # One hook's answer
//!
//! - **exit 0**: success. stdout may hold one JSON object (below). stdout that does not start
//!   with `{` is plain text: context for the model on `UserPromptSubmit`, `SessionStart` and
//!   `SessionResume` (as in Claude Code), otherwise only logged. stdout that starts with `{`
//!   but is not valid JSON is a hook error (so a broken policy script is noticed, and blocks
//!   when it fails closed).
//! - **exit 2**: a block, with stderr as the reason (stdout if stderr is empty). What a block
//!   does depends on the event ([`BlockEffect`]): it refuses the action, refuses a stop, is
//!   fed back to the model (`PostToolUse`), or, on events that cannot block, is reported as
//!   an error.
//! - **any other exit**, a signal, a timeout, a failure to start: a hook error; reported, and
//!   a block when the rule fails closed.
//!
//! An http hook's 2xx body is read like stdout on exit 0; any other status is a hook error.
//!
//! JSON fields (unknown ones are ignored):
//!
//! | field | meaning |
//! |---|---|
//! | `continue: false` | stop the run, with `stopReason` (shown to the user) |
//! | `suppressOutput: true` | leave the hook's stdout out of the outcome's `outputs` |
//! | `systemMessage` | a message for the user |
//! | `decision: "block"`, `reason` | a block, as exit 2 with `reason` |
//! | `decision: "approve"` | on `PreToolUse`: `permissionDecision: allow` (legacy form) |
//! | `hookSpecificOutput.hookEventName` | must name the event, else the object is ignored |
//! | `hookSpecificOutput.permissionDecision` | `allow`, `ask` or `deny` (`PreToolUse` only), with `permissionDecisionReason` |
//! | `hookSpecificOutput.updatedInput` | the tool input to use instead (`PreToolUse` only; an object) |
//! | `hookSpecificOutput.additionalContext` | context for the model |
//! | `hookSpecificOutput.decision` | on `PermissionRequest`: `{behavior: allow, updatedInput}` or `{behavior: deny, message, interrupt}` |
//!
//! # The outcome of a dispatch
//!
//! [`HookOutcome`] merges the answers of the rules that ran, in order:
//!
//! - the first block wins, and no later rule runs; so does the first `deny` and the first
//!   `continue: false`;
//! - permission decisions: `deny` > `ask` > `allow`; the reason of the first hook that gave the
//!   winning decision is kept;
//! - `updatedInput`: each later rule sees the updated `tool_input`; the last update wins;
//! - context, system messages, errors and outputs accumulate in rule order;
//! - a failing rule that fails closed blocks, with the error as its reason.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::action::{ActionResult, MAX_STDOUT};
use super::event::{BlockEffect, HookEvent};
use super::rules::FailMode;

/// A hook's permission decision on a tool call.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum PermissionDecision {
    /// Run it without asking (the permission policy's deny rules still apply).
    Allow,
    /// Ask the user, whatever the mode and the rules would do.
    Ask,
    /// Refuse it; the model sees the reason.
    Deny,
}

impl PermissionDecision {
    fn parse(text: &str) -> Option<Self> {
        match text {
            "allow" => Some(Self::Allow),
            "ask" => Some(Self::Ask),
            "deny" => Some(Self::Deny),
            _ => None,
        }
    }
}

/// A block: which hook, and why.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub(crate) struct Blocked {
    /// The rule's name.
    pub(crate) hook: String,
    /// The reason (for the model on tool calls and stops, for the user on prompts and tasks).
    pub(crate) reason: String,
}

/// A permission decision from a hook.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub(crate) struct Permission {
    /// The decision.
    pub(crate) decision: PermissionDecision,
    /// Why (may be empty).
    pub(crate) reason: String,
    /// The rule that gave it.
    pub(crate) hook: String,
}

/// What a hook printed (or answered), for the user's log.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub(crate) struct HookOutput {
    /// The rule's name.
    pub(crate) hook: String,
    /// Its stdout, http body or subagent answer.
    pub(crate) text: String,
}

/// One hook that ran for an event, and what it came to: what a task's progress notes show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HookRun {
    /// The rule's name.
    pub(crate) hook: String,
    /// The event's name in hook files.
    pub(crate) event: &'static str,
    /// `ok`, `blocked` or `error`.
    pub(crate) outcome: &'static str,
    /// Why it blocked, or how it failed.
    pub(crate) reason: Option<String>,
}

/// The merged result of dispatching one event. See the [module docs](self). It is kept
/// with a task waiting for approval, for the tool calls whose hooks have run (serialized).
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
#[serde(default)]
pub(crate) struct HookOutcome {
    /// The first block (see [`BlockEffect`] for what it means on the event).
    pub(crate) blocked: Option<Blocked>,
    /// The strongest permission decision (`PreToolUse`).
    pub(crate) permission: Option<Permission>,
    /// The tool input to use instead (`PreToolUse`).
    pub(crate) updated_input: Option<Value>,
    /// Text for the model, in rule order.
    pub(crate) additional_context: Vec<String>,
    /// `continue: false`: the run stops, with this reason for the user.
    pub(crate) stop: Option<String>,
    /// Messages for the user.
    pub(crate) system_messages: Vec<String>,
    /// Hook errors (`hook <name>: <what>`); they block only when the rule fails closed.
    pub(crate) errors: Vec<String>,
    /// Hook output for the user's log, unless the hook suppressed it.
    pub(crate) outputs: Vec<HookOutput>,
    /// Each hook that ran, in order (not kept with a task waiting for approval: its runs
    /// were reported when they happened).
    #[serde(skip)]
    pub(crate) runs: Vec<HookRun>,
}

impl HookOutcome {
    /// Why the action is refused, if it is: a block, or a `deny` decision. This is the one
    /// check a caller of a [`BlockEffect::Prevent`] event needs before looking at
    /// [`Self::permission`] for `ask` and `allow`.
    pub(crate) fn refusal(&self) -> Option<(&str, &str)> {
        if let Some(blocked) = &self.blocked {
            return Some((&blocked.hook, &blocked.reason));
        }
        self.permission
            .as_ref()
            .filter(|permission| permission.decision == PermissionDecision::Deny)
            .map(|permission| (permission.hook.as_str(), permission.reason.as_str()))
    }

    /// Merges one rule's reply. Returns true when no later rule may run (a block, a deny or a
    /// stop).
    pub(crate) fn absorb(&mut self, hook: &str, fail: FailMode, reply: HookReply) -> bool {
        if let Some(error) = reply.error {
            if fail == FailMode::Closed && self.blocked.is_none() {
                self.blocked = Some(Blocked {
                    hook: hook.to_owned(),
                    reason: format!("hook `{hook}` failed and fails closed: {error}"),
                });
            }
            self.errors.push(format!("hook `{hook}`: {error}"));
        }
        if let Some(reason) = reply.block
            && self.blocked.is_none()
        {
            self.blocked = Some(Blocked {
                hook: hook.to_owned(),
                reason,
            });
        }
        if let Some((decision, reason)) = reply.permission {
            let stronger = self
                .permission
                .as_ref()
                .is_none_or(|current| decision > current.decision);
            if stronger {
                self.permission = Some(Permission {
                    decision,
                    reason,
                    hook: hook.to_owned(),
                });
            }
        }
        if let Some(input) = reply.updated_input {
            self.updated_input = Some(input);
        }
        self.additional_context.extend(reply.context);
        if let Some(message) = reply.system_message {
            self.system_messages.push(message);
        }
        if let Some(reason) = reply.stop
            && self.stop.is_none()
        {
            self.stop = Some(reason);
        }
        if let Some(text) = reply.output
            && !reply.suppress_output
        {
            self.outputs.push(HookOutput {
                hook: hook.to_owned(),
                text,
            });
        }
        self.blocked.is_some()
            || self.stop.is_some()
            || self
                .permission
                .as_ref()
                .is_some_and(|permission| permission.decision == PermissionDecision::Deny)
    }
}

/// One hook's answer, interpreted for its event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HookReply {
    /// A block, with its reason.
    pub(crate) block: Option<String>,
    /// A permission decision and its reason.
    pub(crate) permission: Option<(PermissionDecision, String)>,
    /// A replacement tool input.
    pub(crate) updated_input: Option<Value>,
    /// Context for the model.
    pub(crate) context: Vec<String>,
    /// `continue: false`, with the reason.
    pub(crate) stop: Option<String>,
    /// A message for the user.
    pub(crate) system_message: Option<String>,
    /// The hook failed.
    pub(crate) error: Option<String>,
    /// What it printed.
    pub(crate) output: Option<String>,
    /// `suppressOutput: true`.
    pub(crate) suppress_output: bool,
}

/// The JSON object a hook may print.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct HookJson {
    #[serde(rename = "continue")]
    continue_: Option<bool>,
    stop_reason: Option<String>,
    #[serde(default)]
    suppress_output: bool,
    system_message: Option<String>,
    decision: Option<String>,
    reason: Option<String>,
    hook_specific_output: Option<HookSpecific>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct HookSpecific {
    hook_event_name: Option<String>,
    permission_decision: Option<String>,
    permission_decision_reason: Option<String>,
    updated_input: Option<Value>,
    additional_context: Option<String>,
    decision: Option<RequestDecision>,
}

/// A `PermissionRequest` hook's answer for the user.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequestDecision {
    behavior: String,
    updated_input: Option<Value>,
    message: Option<String>,
    #[serde(default)]
    interrupt: bool,
}

/// Characters of stderr quoted in an error.
const ERROR_EXCERPT: usize = 2000;

fn clip(text: &str) -> String {
    let text = text.trim();
    if text.chars().count() <= ERROR_EXCERPT {
        return text.to_owned();
    }
    let mut clipped: String = text.chars().take(ERROR_EXCERPT).collect();
    clipped.push_str(" […]");
    clipped
}

/// Interprets how the action of `hook` ended, on `event`.
pub(crate) fn interpret(event: HookEvent, hook: &str, result: ActionResult) -> HookReply {
    match result {
        ActionResult::Exited {
            code: Some(0),
            stdout,
            stdout_truncated,
            ..
        } => {
            if stdout_truncated {
                return HookReply {
                    error: Some(format!("stdout is over {MAX_STDOUT} bytes")),
                    ..HookReply::default()
                };
            }
            success_text(event, hook, &stdout)
        }
        ActionResult::Exited {
            code: Some(2),
            stdout,
            stderr,
            ..
        } => {
            let reason = [stderr.trim(), stdout.trim()]
                .into_iter()
                .find(|text| !text.is_empty())
                .map_or_else(|| format!("blocked by hook `{hook}` (exit code 2)"), clip);
            block(event, reason)
        }
        ActionResult::Exited {
            code: Some(code),
            stderr,
            ..
        } => HookReply {
            error: Some(with_detail(format!("exit code {code}"), &stderr)),
            ..HookReply::default()
        },
        ActionResult::Exited {
            code: None,
            signal,
            stderr,
            ..
        } => HookReply {
            error: Some(with_detail(
                format!("killed by signal {}", signal.unwrap_or_default()),
                &stderr,
            )),
            ..HookReply::default()
        },
        ActionResult::Http { status, body } if (200..300).contains(&status) => {
            success_text(event, hook, &body)
        }
        ActionResult::Http { status, body } => HookReply {
            error: Some(with_detail(format!("HTTP status {status}"), &body)),
            ..HookReply::default()
        },
        ActionResult::Prompt(text) => HookReply {
            context: vec![text],
            ..HookReply::default()
        },
        ActionResult::Subagent(answer) => subagent_answer(event, hook, answer),
        ActionResult::Failed(error) => HookReply {
            error: Some(error),
            ..HookReply::default()
        },
    }
}

fn with_detail(head: String, detail: &str) -> String {
    let detail = clip(detail);
    if detail.is_empty() {
        head
    } else {
        format!("{head}: {detail}")
    }
}

/// A block with `reason`, as the event understands it.
fn block(event: HookEvent, reason: String) -> HookReply {
    match event.block_effect() {
        BlockEffect::Prevent | BlockEffect::Continue => HookReply {
            block: Some(reason),
            ..HookReply::default()
        },
        BlockEffect::Feedback => HookReply {
            context: vec![reason],
            ..HookReply::default()
        },
        BlockEffect::None => HookReply {
            error: Some(format!(
                "{event} cannot be blocked; the hook said: {reason}"
            )),
            ..HookReply::default()
        },
    }
}

/// Successful output: a JSON object, or plain text.
fn success_text(event: HookEvent, hook: &str, text: &str) -> HookReply {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return HookReply::default();
    }
    if trimmed.starts_with('{') {
        let mut reply = match serde_json::from_str::<HookJson>(trimmed) {
            Ok(json) => apply_json(event, hook, json),
            Err(err) => HookReply {
                error: Some(format!("invalid JSON output: {err}")),
                ..HookReply::default()
            },
        };
        reply.output = Some(trimmed.to_owned());
        return reply;
    }
    let mut reply = HookReply {
        output: Some(trimmed.to_owned()),
        ..HookReply::default()
    };
    if event.takes_plain_context() {
        reply.context.push(trimmed.to_owned());
    } else {
        tracing::debug!(hook, %event, "plain hook output (not context on this event): {trimmed}");
    }
    reply
}

/// Applies the JSON protocol.
fn apply_json(event: HookEvent, hook: &str, json: HookJson) -> HookReply {
    let mut reply = HookReply {
        suppress_output: json.suppress_output,
        system_message: json.system_message,
        ..HookReply::default()
    };
    let mut problems = Vec::new();
    if json.continue_ == Some(false) {
        reply.stop = Some(
            json.stop_reason
                .unwrap_or_else(|| format!("stopped by hook `{hook}`")),
        );
    }
    match json.decision.as_deref() {
        None => {}
        Some("block") => {
            let reason = json
                .reason
                .clone()
                .filter(|reason| !reason.trim().is_empty())
                .unwrap_or_else(|| format!("blocked by hook `{hook}`"));
            let blocked = block(event, reason);
            reply.block = blocked.block;
            reply.context.extend(blocked.context);
            problems.extend(blocked.error);
        }
        Some("approve") if event == HookEvent::PreToolUse => {
            reply.permission = Some((
                PermissionDecision::Allow,
                json.reason.clone().unwrap_or_default(),
            ));
        }
        Some("approve") => {}
        Some(other) => problems.push(format!(
            "unknown decision `{other}` (expected block or approve)"
        )),
    }
    if let Some(specific) = json.hook_specific_output {
        match specific.hook_event_name.as_deref() {
            Some(name) if name != event.as_str() => problems.push(format!(
                "hookSpecificOutput is for {name}, not {event}; ignored"
            )),
            _ => apply_specific(event, specific, &mut reply, &mut problems),
        }
    }
    if !problems.is_empty() {
        reply.error = Some(problems.join("; "));
    }
    reply
}

fn apply_specific(
    event: HookEvent,
    specific: HookSpecific,
    reply: &mut HookReply,
    problems: &mut Vec<String>,
) {
    if let Some(decision) = specific.permission_decision {
        match (event, PermissionDecision::parse(&decision)) {
            (HookEvent::PreToolUse, Some(parsed)) => {
                // The specific field overrides a legacy `decision: approve`.
                reply.permission = Some((
                    parsed,
                    specific.permission_decision_reason.unwrap_or_default(),
                ));
            }
            (HookEvent::PreToolUse, None) => problems.push(format!(
                "unknown permissionDecision `{decision}` (expected allow, ask or deny)"
            )),
            _ => problems.push(format!(
                "permissionDecision is only for PreToolUse, not {event}; ignored"
            )),
        }
    }
    if let Some(decision) = specific.decision {
        apply_request_decision(event, decision, reply, problems);
    }
    if let Some(input) = specific.updated_input {
        match (event, input) {
            (HookEvent::PreToolUse, input @ Value::Object(_)) => reply.updated_input = Some(input),
            (HookEvent::PreToolUse, _) => {
                problems.push("updatedInput must be an object; ignored".to_owned());
            }
            _ => problems.push(format!(
                "updatedInput is only for PreToolUse, not {event}; ignored"
            )),
        }
    }
    if let Some(context) = specific.additional_context
        && !context.trim().is_empty()
    {
        reply.context.push(context);
    }
}

/// A `PermissionRequest` hook's `decision`: allow (with an updated input) or deny.
fn apply_request_decision(
    event: HookEvent,
    decision: RequestDecision,
    reply: &mut HookReply,
    problems: &mut Vec<String>,
) {
    if event != HookEvent::PermissionRequest {
        problems.push(format!(
            "decision is only for PermissionRequest, not {event}; ignored"
        ));
        return;
    }
    match decision.behavior.as_str() {
        "allow" => {
            reply.permission = Some((PermissionDecision::Allow, String::new()));
            match decision.updated_input {
                None => {}
                Some(input @ Value::Object(_)) => reply.updated_input = Some(input),
                Some(_) => problems.push("updatedInput must be an object; ignored".to_owned()),
            }
        }
        "deny" => {
            let message = decision
                .message
                .filter(|message| !message.trim().is_empty())
                .unwrap_or_else(|| "denied by a PermissionRequest hook".to_owned());
            if decision.interrupt {
                reply.stop = Some(message.clone());
            }
            reply.permission = Some((PermissionDecision::Deny, message));
        }
        other => problems.push(format!(
            "unknown decision.behavior `{other}` (expected allow or deny)"
        )),
    }
}

/// A subagent's answer: context, plus any JSON hook output it holds.
fn subagent_answer(event: HookEvent, hook: &str, answer: String) -> HookReply {
    let trimmed = answer.trim();
    if trimmed.starts_with('{') && serde_json::from_str::<Value>(trimmed).is_ok() {
        return success_text(event, hook, trimmed);
    }
    let mut reply = find_json_object(trimmed)
        .and_then(|object| serde_json::from_value::<HookJson>(object).ok())
        .map(|json| apply_json(event, hook, json))
        .unwrap_or_default();
    if !trimmed.is_empty() {
        reply.context.insert(0, trimmed.to_owned());
        reply.output = Some(trimmed.to_owned());
    }
    reply
}

/// The last JSON object in `text` that has a `decision` or `hookSpecificOutput` key: in a
/// fenced block or inline.
fn find_json_object(text: &str) -> Option<Value> {
    let mut found = None;
    for (start, _) in text.match_indices('{') {
        let mut stream = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        if let Some(Ok(value @ Value::Object(_))) = stream.next()
            && (value.get("decision").is_some() || value.get("hookSpecificOutput").is_some())
        {
            found = Some(value);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn exit(code: i32, stdout: &str, stderr: &str) -> ActionResult {
        ActionResult::Exited {
            code: Some(code),
            signal: None,
            stdout: stdout.to_owned(),
            stdout_truncated: false,
            stderr: stderr.to_owned(),
        }
    }

    fn reply(event: HookEvent, result: ActionResult) -> HookReply {
        interpret(event, "h", result)
    }

    #[test]
    fn exit_codes() {
        let ok = reply(HookEvent::PreToolUse, exit(0, "", "noise"));
        assert_eq!(ok, HookReply::default());

        let blocked = reply(HookEvent::PreToolUse, exit(2, "out", "  no rm -rf\n"));
        assert_eq!(blocked.block.as_deref(), Some("no rm -rf"));
        assert_eq!(
            reply(HookEvent::PreToolUse, exit(2, "from stdout", ""))
                .block
                .as_deref(),
            Some("from stdout")
        );
        assert_eq!(
            reply(HookEvent::UserPromptSubmit, exit(2, "", ""))
                .block
                .as_deref(),
            Some("blocked by hook `h` (exit code 2)")
        );
        assert_eq!(
            reply(HookEvent::Stop, exit(2, "", "keep going"))
                .block
                .as_deref(),
            Some("keep going")
        );
        // After the fact, a block is feedback for the model.
        let post = reply(HookEvent::PostToolUse, exit(2, "", "lint failed"));
        assert_eq!(
            (post.block, post.context),
            (None, vec!["lint failed".to_owned()])
        );
        // On events that cannot block, it is reported.
        let end = reply(HookEvent::SessionEnd, exit(2, "", "nope"));
        assert_eq!(end.block, None);
        assert_eq!(
            end.error.as_deref(),
            Some("SessionEnd cannot be blocked; the hook said: nope")
        );

        let failed = reply(HookEvent::PreToolUse, exit(1, "", "boom\n"));
        assert_eq!(
            (failed.block, failed.error.as_deref()),
            (None, Some("exit code 1: boom"))
        );
        let killed = reply(
            HookEvent::PreToolUse,
            ActionResult::Exited {
                code: None,
                signal: Some(9),
                stdout: String::new(),
                stdout_truncated: false,
                stderr: String::new(),
            },
        );
        assert_eq!(killed.error.as_deref(), Some("killed by signal 9"));
        let big = reply(
            HookEvent::PreToolUse,
            ActionResult::Exited {
                code: Some(0),
                signal: None,
                stdout: "{".to_owned(),
                stdout_truncated: true,
                stderr: String::new(),
            },
        );
        assert!(big.error.unwrap().starts_with("stdout is over"));
    }

    #[test]
    fn plain_stdout_is_context_only_where_claude_code_makes_it_so() {
        let prompt = reply(
            HookEvent::UserPromptSubmit,
            exit(0, "today is Monday\n", ""),
        );
        assert_eq!(prompt.context, ["today is Monday"]);
        assert_eq!(prompt.output.as_deref(), Some("today is Monday"));
        assert_eq!(
            reply(HookEvent::SessionStart, exit(0, "x", "")).context,
            ["x"]
        );
        let tool = reply(HookEvent::PreToolUse, exit(0, "just logging", ""));
        assert!(tool.context.is_empty() && tool.error.is_none());
        assert_eq!(tool.output.as_deref(), Some("just logging"));
        let broken = reply(HookEvent::PreToolUse, exit(0, "{not json", ""));
        assert!(broken.error.unwrap().starts_with("invalid JSON output: "));
    }

    #[test]
    fn json_permission_decisions_and_updated_input() {
        let deny = reply(
            HookEvent::PreToolUse,
            exit(
                0,
                r#"{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "no"}}"#,
                "",
            ),
        );
        assert_eq!(
            deny.permission,
            Some((PermissionDecision::Deny, "no".to_owned()))
        );
        assert_eq!(deny.error, None);
        let ask = reply(
            HookEvent::PreToolUse,
            exit(
                0,
                r#"{"hookSpecificOutput": {"permissionDecision": "ask"}}"#,
                "",
            ),
        );
        assert_eq!(
            ask.permission,
            Some((PermissionDecision::Ask, String::new()))
        );
        let allow = reply(
            HookEvent::PreToolUse,
            exit(
                0,
                r#"{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow", "updatedInput": {"command": "ls -a"}, "additionalContext": "rewrote"}}"#,
                "",
            ),
        );
        assert_eq!(
            allow.permission,
            Some((PermissionDecision::Allow, String::new()))
        );
        assert_eq!(allow.updated_input, Some(json!({"command": "ls -a"})));
        assert_eq!(allow.context, ["rewrote"]);
        let legacy = reply(
            HookEvent::PreToolUse,
            exit(0, r#"{"decision": "approve", "reason": "fine"}"#, ""),
        );
        assert_eq!(
            legacy.permission,
            Some((PermissionDecision::Allow, "fine".to_owned()))
        );

        let wrong_event = reply(
            HookEvent::PreToolUse,
            exit(
                0,
                r#"{"hookSpecificOutput": {"hookEventName": "PostToolUse", "permissionDecision": "deny"}}"#,
                "",
            ),
        );
        assert_eq!(wrong_event.permission, None);
        assert_eq!(
            wrong_event.error.as_deref(),
            Some("hookSpecificOutput is for PostToolUse, not PreToolUse; ignored")
        );
        let bad = reply(
            HookEvent::PreToolUse,
            exit(
                0,
                r#"{"hookSpecificOutput": {"permissionDecision": "defer", "updatedInput": "x"}}"#,
                "",
            ),
        );
        assert_eq!(
            bad.error.as_deref(),
            Some(
                "unknown permissionDecision `defer` (expected allow, ask or deny); updatedInput must be an object; ignored"
            )
        );
        let elsewhere = reply(
            HookEvent::PostToolUse,
            exit(
                0,
                r#"{"hookSpecificOutput": {"permissionDecision": "deny", "updatedInput": {}}}"#,
                "",
            ),
        );
        assert_eq!(elsewhere.permission, None);
        assert!(
            elsewhere
                .error
                .unwrap()
                .contains("permissionDecision is only for PreToolUse, not PostToolUse")
        );
    }

    #[test]
    fn json_block_continue_messages_and_suppress() {
        let block = reply(
            HookEvent::UserPromptSubmit,
            exit(
                0,
                r#"{"decision": "block", "reason": "secret in prompt"}"#,
                "",
            ),
        );
        assert_eq!(block.block.as_deref(), Some("secret in prompt"));
        let stop = reply(HookEvent::Stop, exit(0, r#"{"decision": "block"}"#, ""));
        assert_eq!(stop.block.as_deref(), Some("blocked by hook `h`"));
        let all = reply(
            HookEvent::PostToolUse,
            exit(
                0,
                r#"{"continue": false, "stopReason": "budget", "systemMessage": "careful", "suppressOutput": true, "decision": "block", "reason": "tests fail", "future": 1}"#,
                "",
            ),
        );
        assert_eq!(all.stop.as_deref(), Some("budget"));
        assert_eq!(all.system_message.as_deref(), Some("careful"));
        assert!(all.suppress_output);
        assert_eq!(all.context, ["tests fail"]);
        assert_eq!(all.block, None);
        let default_stop = reply(
            HookEvent::SessionStart,
            exit(0, r#"{"continue": false}"#, ""),
        );
        assert_eq!(default_stop.stop.as_deref(), Some("stopped by hook `h`"));
        let unknown = reply(
            HookEvent::PreToolUse,
            exit(0, r#"{"decision": "maybe"}"#, ""),
        );
        assert_eq!(
            unknown.error.as_deref(),
            Some("unknown decision `maybe` (expected block or approve)")
        );
    }

    #[test]
    fn http_prompt_subagent_and_failures() {
        let ok = reply(
            HookEvent::PreToolUse,
            ActionResult::Http {
                status: 200,
                body: r#"{"decision": "block", "reason": "remote says no"}"#.to_owned(),
            },
        );
        assert_eq!(ok.block.as_deref(), Some("remote says no"));
        let empty = reply(
            HookEvent::PreToolUse,
            ActionResult::Http {
                status: 204,
                body: String::new(),
            },
        );
        assert_eq!(empty, HookReply::default());
        let bad = reply(
            HookEvent::PreToolUse,
            ActionResult::Http {
                status: 500,
                body: "oops".to_owned(),
            },
        );
        assert_eq!(bad.error.as_deref(), Some("HTTP status 500: oops"));
        assert_eq!(
            reply(HookEvent::Stop, ActionResult::Prompt("p".to_owned())).context,
            ["p"]
        );
        assert_eq!(
            reply(
                HookEvent::Stop,
                ActionResult::Failed("timed out after 1s".to_owned())
            )
            .error
            .as_deref(),
            Some("timed out after 1s")
        );

        let review = reply(
            HookEvent::PreToolUse,
            ActionResult::Subagent("This deletes the repo.\n```json\n{\"decision\": \"block\", \"reason\": \"destructive\"}\n```".to_owned()),
        );
        assert_eq!(review.block.as_deref(), Some("destructive"));
        assert!(review.context[0].starts_with("This deletes the repo."));
        let pure = reply(
            HookEvent::PreToolUse,
            ActionResult::Subagent(r#"{"decision": "block", "reason": "r"}"#.to_owned()),
        );
        assert_eq!((pure.block.as_deref(), pure.context.len()), (Some("r"), 0));
        let prose = reply(
            HookEvent::PreToolUse,
            ActionResult::Subagent("Looks fine {not json}".to_owned()),
        );
        assert_eq!(
            (prose.block, prose.context),
            (None, vec!["Looks fine {not json}".to_owned()])
        );
    }

    fn merge(replies: Vec<(&str, FailMode, HookReply)>) -> (HookOutcome, Vec<bool>) {
        let mut outcome = HookOutcome::default();
        let halts = replies
            .into_iter()
            .map(|(hook, fail, reply)| outcome.absorb(hook, fail, reply))
            .collect();
        (outcome, halts)
    }

    #[test]
    fn merge_precedence() {
        let permission = |decision, reason: &str| HookReply {
            permission: Some((decision, reason.to_owned())),
            ..HookReply::default()
        };
        let (outcome, halts) = merge(vec![
            (
                "a",
                FailMode::Open,
                permission(PermissionDecision::Allow, "a"),
            ),
            (
                "b",
                FailMode::Open,
                permission(PermissionDecision::Ask, "b"),
            ),
            (
                "c",
                FailMode::Open,
                permission(PermissionDecision::Allow, "c"),
            ),
            (
                "d",
                FailMode::Open,
                permission(PermissionDecision::Ask, "d"),
            ),
        ]);
        assert_eq!(
            outcome.permission,
            Some(Permission {
                decision: PermissionDecision::Ask,
                reason: "b".to_owned(),
                hook: "b".to_owned()
            })
        );
        assert_eq!(halts, [false; 4]);
        assert_eq!(outcome.refusal(), None);
        let (outcome, halts) = merge(vec![
            (
                "a",
                FailMode::Open,
                permission(PermissionDecision::Ask, "a"),
            ),
            (
                "b",
                FailMode::Open,
                permission(PermissionDecision::Deny, "b"),
            ),
        ]);
        assert_eq!(
            outcome.permission.as_ref().unwrap().decision,
            PermissionDecision::Deny
        );
        assert_eq!(halts, [false, true]);
        assert_eq!(outcome.refusal(), Some(("b", "b")));

        let block = |reason: &str| HookReply {
            block: Some(reason.to_owned()),
            ..HookReply::default()
        };
        let (outcome, halts) = merge(vec![
            ("a", FailMode::Open, block("first")),
            ("b", FailMode::Open, block("second")),
        ]);
        assert_eq!(
            outcome.blocked,
            Some(Blocked {
                hook: "a".to_owned(),
                reason: "first".to_owned()
            })
        );
        assert_eq!(halts, [true, true]);

        let error = HookReply {
            error: Some("exit code 1".to_owned()),
            ..HookReply::default()
        };
        let (open, halts) = merge(vec![("a", FailMode::Open, error.clone())]);
        assert_eq!(
            (open.blocked, open.errors, halts),
            (None, vec!["hook `a`: exit code 1".to_owned()], vec![false])
        );
        let (closed, halts) = merge(vec![("a", FailMode::Closed, error)]);
        assert_eq!(
            closed.blocked.unwrap().reason,
            "hook `a` failed and fails closed: exit code 1"
        );
        assert_eq!(halts, [true]);

        let context = |text: &str, suppress| HookReply {
            context: vec![text.to_owned()],
            updated_input: Some(json!({"v": text})),
            system_message: Some(text.to_owned()),
            output: Some(text.to_owned()),
            suppress_output: suppress,
            ..HookReply::default()
        };
        let (outcome, _) = merge(vec![
            ("a", FailMode::Open, context("1", false)),
            ("b", FailMode::Open, context("2", true)),
        ]);
        assert_eq!(outcome.additional_context, ["1", "2"]);
        assert_eq!(outcome.system_messages, ["1", "2"]);
        assert_eq!(outcome.updated_input, Some(json!({"v": "2"})));
        assert_eq!(
            outcome.outputs,
            [HookOutput {
                hook: "a".to_owned(),
                text: "1".to_owned()
            }]
        );

        let stop = |reason: &str| HookReply {
            stop: Some(reason.to_owned()),
            ..HookReply::default()
        };
        let (outcome, halts) = merge(vec![
            ("a", FailMode::Open, stop("x")),
            ("b", FailMode::Open, stop("y")),
        ]);
        assert_eq!(
            (outcome.stop.as_deref(), halts),
            (Some("x"), vec![true, true])
        );
    }
}
