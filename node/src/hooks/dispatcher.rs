//! The dispatcher: dispatches an event through the matching rules and merges their answers.
//!
//! [`HookDispatcher::dispatch`] runs the rules of the event in their load order:
//!
//! 1. a rule matches when its Claude Code `matcher` and `if` (settings-file hooks) and its
//!    `if:` (`hooks.yaml`) all hold for the payload; a settings-file `PostToolUse` hook sees
//!    only the calls that succeeded, as in Claude Code (`PostToolUseFailure` sees the others);
//! 2. an `only_once` rule runs at most once per session id, until
//!    [`HookDispatcher::reset_session`];
//! 3. a synchronous rule runs to its end (at most its timeout; the dispatch's cancellation
//!    kills it) and its answer is merged into the [`HookOutcome`]; a block, a deny or a stop
//!    ends the dispatch;
//! 4. an `async` rule is started on the dispatcher's task tracker and the dispatch goes on
//!    without it: its answer is only logged, so it cannot block, even on a blocking event. It is killed when its
//!    timeout passes, when the dispatch's cancellation token fires (the task it belongs to was
//!    canceled), or at [`HookDispatcher::shutdown`].
//!
//! A rule that updates the tool input hands the updated `tool_input` to the rules after it.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::action::{self, ActionContext, SubagentRunner, http_client};
use super::condition::{claude_code_tool_name, field_text, lookup_dotted};
use super::event::{HookEvent, Payload};
use super::output::{self, HookOutcome};
use super::rules::HookRule;
use crate::permission::rules::{Call, Dirs};

/// What the dispatcher needs from the node.
#[derive(Debug, Clone, Default)]
pub(crate) struct HookSettings {
    /// The node's environment snapshot, read once at start-up. Shell hooks get
    /// [`crate::process::BASE_ENV`] and [`Self::extra_env`] from it, nothing else.
    pub(crate) env: Arc<HashMap<String, String>>,
    /// More variable names shell hooks get (configured by the user).
    pub(crate) extra_env: Vec<String>,
    /// The project directory: `MEW_PROJECT_DIR` and `CLAUDE_PROJECT_DIR`.
    pub(crate) project_dir: PathBuf,
    /// The process ledger directory ([`crate::process::ledger_dir`]), so that hook processes a
    /// killed node left running are reaped at the next start.
    pub(crate) ledger_dir: Option<PathBuf>,
    /// Where sessions' transcripts are written for hooks ([`super::transcript`]); without
    /// one, payloads have no `transcript_path`.
    pub(crate) transcript_dir: Option<PathBuf>,
}

/// The dispatcher could not be built.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct HookDispatcherError(String);

/// A dispatch without a session id: every payload names its session, and `only_once` is kept
/// per session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("hooks need a session id; it is empty")]
pub(crate) struct EmptySessionId;

/// Who dispatches: the session, where, in which mode, and the token that cancels the work.
#[derive(Debug, Clone)]
pub(crate) struct HookContext {
    session_id: String,
    cwd: PathBuf,
    mode: String,
    cancel: CancellationToken,
}

impl HookContext {
    /// A context for `session_id` (not empty) working in `cwd`, in mode `default`, with a
    /// token nothing cancels.
    pub(crate) fn new(
        session_id: impl Into<String>,
        cwd: impl Into<PathBuf>,
    ) -> Result<Self, EmptySessionId> {
        let session_id = session_id.into();
        if session_id.trim().is_empty() {
            return Err(EmptySessionId);
        }
        Ok(Self {
            session_id,
            cwd: cwd.into(),
            mode: "default".to_owned(),
            cancel: CancellationToken::new(),
        })
    }

    /// The permission mode the payload reports (`default`, `acceptEdits`, `plan`, ...).
    #[must_use]
    pub(crate) fn with_mode(mut self, mode: impl Into<String>) -> Self {
        self.mode = mode.into();
        self
    }

    /// The token of the run the hooks belong to: cancelling it kills their processes.
    #[must_use]
    pub(crate) fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }

    /// The session id.
    pub(crate) fn session_id(&self) -> &str {
        &self.session_id
    }
}

/// Runs hook rules. Cheap to share behind an `Arc`; every method takes `&self`.
pub(crate) struct HookDispatcher {
    rules: Vec<Arc<HookRule>>,
    settings: Arc<HookSettings>,
    subagents: Option<Arc<dyn SubagentRunner>>,
    http: reqwest::Client,
    /// Session id → names of the `only_once` rules that ran in it.
    fired: Mutex<HashMap<String, HashSet<String>>>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    /// Where a settings-file hook's `if` anchors relative and `~/` paths.
    dirs: Dirs,
}

impl std::fmt::Debug for HookDispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookDispatcher")
            .field("rules", &self.rules.len())
            .field("subagents", &self.subagents.is_some())
            .finish_non_exhaustive()
    }
}

impl HookDispatcher {
    /// An dispatcher for `rules` (from [`super::rules::load`]), in order.
    pub(crate) fn new(
        rules: Vec<HookRule>,
        settings: HookSettings,
    ) -> Result<Self, HookDispatcherError> {
        let dirs = Dirs {
            project: settings.project_dir.clone(),
            home: settings.env.get("HOME").map(PathBuf::from),
        };
        Ok(Self {
            rules: rules.into_iter().map(Arc::new).collect(),
            settings: Arc::new(settings),
            dirs,
            subagents: None,
            http: http_client().map_err(HookDispatcherError)?,
            fired: Mutex::new(HashMap::new()),
            tracker: TaskTracker::new(),
            shutdown: CancellationToken::new(),
        })
    }

    /// Sets the runner of `subagent` actions; without one they fail (and count as errors).
    #[must_use]
    pub(crate) fn with_subagents(mut self, runner: Arc<dyn SubagentRunner>) -> Self {
        self.subagents = Some(runner);
        self
    }

    /// The rules, in order.
    #[cfg_attr(not(test), allow(dead_code))] // read by tests
    pub(crate) fn rules(&self) -> impl Iterator<Item = &HookRule> {
        self.rules.iter().map(AsRef::as_ref)
    }

    /// Whether any rule listens to `event`: a caller may skip building the payload if not.
    pub(crate) fn listens_to(&self, event: HookEvent) -> bool {
        self.rules.iter().any(|rule| rule.event == event)
    }

    /// The transcript file of `session` that payloads name, when hooks are loaded and the
    /// node keeps transcripts.
    pub(crate) fn transcript_file(&self, session: &str) -> Option<PathBuf> {
        let dir = self.settings.transcript_dir.as_deref()?;
        (!self.rules.is_empty()).then(|| super::transcript::path(dir, session))
    }

    /// Forgets which `only_once` rules ran in `session_id` (a cleared or ended session).
    pub(crate) fn reset_session(&self, session_id: &str) {
        self.fired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(session_id);
    }

    /// Kills the running `async` hooks and waits for them to end. Later dispatches start no
    /// `async` hook.
    pub(crate) async fn shutdown(&self) {
        self.shutdown.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }

    /// Runs the rules that match `payload`, and merges their answers.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills the running hook's process group.
    pub(crate) async fn dispatch(&self, payload: Payload, ctx: &HookContext) -> HookOutcome {
        let event = payload.event();
        let mut outcome = HookOutcome::default();
        if !self.listens_to(event) {
            return outcome;
        }
        let cwd = ctx.cwd.display().to_string();
        let mut json = payload.to_json(&ctx.session_id, &cwd, &ctx.mode);
        if let (Some(path), Value::Object(map)) = (self.transcript_file(&ctx.session_id), &mut json)
        {
            map.insert(
                "transcript_path".to_owned(),
                Value::String(path.display().to_string()),
            );
        }
        for rule in self.rules.iter().filter(|rule| rule.event == event) {
            if !self.matches(rule, &json) {
                continue;
            }
            if rule.only_once && !self.first_time(&ctx.session_id, &rule.name) {
                continue;
            }
            let presented = present(rule, &json);
            if rule.run_async {
                self.spawn_async(rule, presented.into_owned(), ctx);
                continue;
            }
            let ledger = self
                .settings
                .ledger_dir
                .as_deref()
                .map(|dir| (dir, ctx.session_id.as_str(), rule.name.as_str()));
            let actx = ActionContext {
                env: &self.settings.env,
                extra_env: &self.settings.extra_env,
                project_dir: &self.settings.project_dir,
                cwd: &ctx.cwd,
                http: &self.http,
                subagents: self.subagents.as_deref(),
                ledger,
                plugin_root: rule.source.plugin_root.as_deref(),
            };
            let span = crate::telemetry::span!(
                "hook",
                otel.name = %format_args!("hook {event}"),
                otel.status_code = tracing::field::Empty,
                mew.hook.event = %event,
                mew.hook.name = %rule.name,
                mew.hook.outcome = tracing::field::Empty,
            );
            let result = tracing::Instrument::instrument(
                action::run(&rule.action, &presented, rule.timeout, &ctx.cancel, &actx),
                span.clone(),
            )
            .await;
            drop(presented);
            let reply = output::interpret(event, &rule.name, result);
            span.record(
                "mew.hook.outcome",
                if reply.error.is_some() { "error" } else { "ok" },
            );
            if reply.error.is_some() {
                span.record("otel.status_code", "error");
            }
            crate::metrics::hook_run(event.as_str(), reply_outcome(&reply));
            outcome.runs.push(output::HookRun {
                hook: rule.name.clone(),
                event: event.as_str(),
                outcome: reply_outcome(&reply),
                reason: reply
                    .error
                    .clone()
                    .or_else(|| reply.block.clone())
                    .or_else(|| reply.stop.clone())
                    .or_else(|| {
                        reply
                            .permission
                            .as_ref()
                            .filter(|(decision, _)| *decision == output::PermissionDecision::Deny)
                            .map(|(_, reason)| reason.clone())
                    }),
            });
            if let Some(error) = &reply.error {
                tracing::warn!(hook = %rule.name, %event, "hook failed: {error}");
            }
            if let Some(text) = reply.output.as_deref().filter(|_| !reply.suppress_output) {
                tracing::debug!(hook = %rule.name, %event, "hook output: {text}");
            }
            if let (Some(input), Value::Object(map)) = (&reply.updated_input, &mut json) {
                map.insert("tool_input".to_owned(), input.clone());
            }
            if outcome.absorb(&rule.name, rule.fail, reply) {
                break;
            }
        }
        outcome
    }

    /// Whether `rule`'s matcher, `if` and condition hold for `payload`.
    fn matches(&self, rule: &HookRule, payload: &Value) -> bool {
        if let (Some(matcher), Some(field)) = (&rule.matcher, rule.event.matcher_field()) {
            let Some(value) = lookup_dotted(payload, field).and_then(field_text) else {
                return false;
            };
            let hit = if field == "tool_name" {
                matcher.is_match_tool(&value)
            } else {
                matcher.is_match(&value)
            };
            if !hit {
                return false;
            }
        }
        if rule.event == HookEvent::PostToolUse
            && rule.wants_claude_code_names()
            && payload.get("is_error") == Some(&Value::Bool(true))
        {
            return false;
        }
        if let Some(tool_if) = &rule.tool_if {
            let (Some(Value::String(tool)), Some(input)) =
                (payload.get("tool_name"), payload.get("tool_input"))
            else {
                return false;
            };
            let call = Call::new(tool, input, &self.dirs);
            if !tool_if.matches(&call, &self.dirs) {
                return false;
            }
        }
        rule.condition
            .as_ref()
            .is_none_or(|condition| condition.is_match(payload))
    }

    /// Marks `rule` as run in `session`; false when it already was.
    fn first_time(&self, session: &str, rule: &str) -> bool {
        self.fired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(session.to_owned())
            .or_default()
            .insert(rule.to_owned())
    }

    fn spawn_async(&self, rule: &Arc<HookRule>, payload: Value, ctx: &HookContext) {
        if self.shutdown.is_cancelled() {
            tracing::warn!(hook = %rule.name, "async hook not started: the hooks are shut down");
            return;
        }
        let rule = Arc::clone(rule);
        let settings = Arc::clone(&self.settings);
        let subagents = self.subagents.clone();
        let http = self.http.clone();
        let shutdown = self.shutdown.clone();
        let task_cancel = ctx.cancel.clone();
        let cwd = ctx.cwd.clone();
        let session = ctx.session_id.clone();
        self.tracker.spawn(async move {
            let ledger = settings
                .ledger_dir
                .as_deref()
                .map(|dir| (dir, session.as_str(), rule.name.as_str()));
            let actx = ActionContext {
                env: &settings.env,
                extra_env: &settings.extra_env,
                project_dir: &settings.project_dir,
                cwd: &cwd,
                http: &http,
                subagents: subagents.as_deref(),
                ledger,
                plugin_root: rule.source.plugin_root.as_deref(),
            };
            // Shutdown cancels through `run`, which kills and reaps the process group; the
            // task's cancellation drops `run`, which kills the group too.
            let cancel = shutdown.child_token();
            let result = tokio::select! {
                result = action::run(&rule.action, &payload, rule.timeout, &cancel, &actx) => result,
                () = task_cancel.cancelled() => action::ActionResult::Failed("canceled".to_owned()),
            };
            let reply = output::interpret(rule.event, &rule.name, result);
            crate::metrics::hook_run(rule.event.as_str(), reply_outcome(&reply));
            if rule.event.is_blocking() && (reply.block.is_some() || reply.permission.is_some()) {
                tracing::warn!(
                    hook = %rule.name,
                    event = %rule.event,
                    "an async hook cannot block or decide; its answer is only logged"
                );
            }
            match &reply.error {
                Some(error) => {
                    tracing::warn!(hook = %rule.name, event = %rule.event, "async hook failed: {error}");
                }
                None => {
                    tracing::debug!(hook = %rule.name, event = %rule.event, output = ?reply.output, "async hook done");
                }
            }
        });
    }
}

/// What a hook's reply comes to, for metrics: `error`, `blocked` (a block, a stop or a
/// denial), or `ok`.
fn reply_outcome(reply: &output::HookReply) -> &'static str {
    let denied = reply
        .permission
        .as_ref()
        .is_some_and(|(decision, _)| *decision == output::PermissionDecision::Deny);
    if reply.error.is_some() {
        "error"
    } else if reply.block.is_some() || reply.stop.is_some() || denied {
        "blocked"
    } else {
        "ok"
    }
}

/// The payload as `rule` expects it: hooks from Claude Code settings files see Claude Code's
/// tool names in `tool_name`, and Mew's in `mew_tool_name`.
fn present<'a>(rule: &HookRule, payload: &'a Value) -> Cow<'a, Value> {
    if !rule.wants_claude_code_names() {
        return Cow::Borrowed(payload);
    }
    let Some(Value::String(name)) = payload.get("tool_name") else {
        return Cow::Borrowed(payload);
    };
    let mut presented = payload.clone();
    if let Value::Object(map) = &mut presented {
        map.insert("mew_tool_name".to_owned(), Value::String(name.clone()));
        map.insert(
            "tool_name".to_owned(),
            Value::String(claude_code_tool_name(name).to_owned()),
        );
    }
    Cow::Owned(presented)
}
