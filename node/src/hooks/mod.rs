//! Hooks: user-defined actions run at points of a run (a tool call, a user message, a stop,
//! a task arriving, ...), which can observe, add context, rewrite a tool's input or block.
//!
//! - [`event`]: the events, what a block means on each, and the payload.
//! - [`rules`]: `hooks.yaml` and Claude Code settings files, compiled; problems as data.
//! - [`matcher`]: conditions on payload fields, and Claude Code's `matcher` strings.
//! - [`action`]: shell, http, prompt and subagent actions.
//! - [`output`]: Claude Code's exit-code and JSON protocol, and the merged [`HookOutcome`].
//! - [`dispatcher`]: [`HookDispatcher::dispatch`], `only_once`, `async` hooks, timeouts, fail modes.
//! - [`trust`]: project hooks run only once the user trusted their content.
//!
//! Typical use by a dispatch point:
//!
//! ```ignore
//! let outcome = dispatcher.dispatch(Payload::pre_tool_use(name, &input, id), &ctx).await;
//! if let Some((hook, reason)) = outcome.refusal() { /* the call fails with the reason */ }
//! ```

pub(crate) mod action;
pub(crate) mod condition;
pub(crate) mod dispatcher;
pub(crate) mod event;
pub(crate) mod output;
pub(crate) mod rules;
pub(crate) mod transcript;
pub(crate) mod trust;

#[cfg(test)]
mod tests;

// The API the dispatch points use.
pub(crate) use self::{
    action::SubagentRunner,
    dispatcher::{HookContext, HookDispatcher, HookSettings},
    event::{HookEvent, MAX_STOP_BLOCKS, Payload},
    output::{HookOutcome, PermissionDecision},
    rules::{HookProblem, load, standard_files},
    trust::{TrustStore, default_trust_file, trust_project, untrust_project},
};

/// The hooks of one run: the node's dispatcher and who dispatches (the session is the task's
/// context, the cwd the project, the mode the run's permission mode, the cancel token the
/// task's). Cheap to clone behind an `Arc`.
pub(crate) struct RunHooks {
    pub(crate) dispatcher: std::sync::Arc<HookDispatcher>,
    pub(crate) ctx: HookContext,
    /// Told of each hook that ran (the task's progress notes), when set.
    pub(crate) report: Option<ReportHookRun>,
}

/// What a run does with each hook that ran for it.
pub(crate) type ReportHookRun = std::sync::Arc<dyn Fn(&output::HookRun) + Send + Sync>;

impl RunHooks {
    /// Dispatches `payload` when some rule listens to its event; an empty outcome otherwise.
    pub(crate) async fn dispatch(&self, payload: Payload) -> HookOutcome {
        let outcome = self.dispatcher.dispatch(payload, &self.ctx).await;
        if let Some(report) = &self.report {
            for run in &outcome.runs {
                report(run);
            }
        }
        outcome
    }

    /// Writes the session's conversation where hooks read it (`transcript_path`), when hooks
    /// are loaded; a failure is logged, and the hooks run without it.
    pub(crate) async fn record_transcript(&self, messages: &[crate::conversation::ChatMessage]) {
        let session = self.ctx.session_id();
        let Some(path) = self.dispatcher.transcript_file(session) else {
            return;
        };
        if let Err(err) = transcript::write(&path, session, messages).await {
            tracing::warn!(path = %path.display(), "cannot write the transcript for hooks: {err}");
        }
    }
}

impl std::fmt::Debug for RunHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHooks")
            .field("session", &self.ctx.session_id())
            .finish_non_exhaustive()
    }
}
