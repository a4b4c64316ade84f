//! The agent loop: ask the model, run the tools it calls, feed the results back, until it answers.
//!
//! The request's prefix (system prompt, then tool definitions in a fixed order)
//! stays byte-identical from call to call so providers can cache it; what
//! changes per call (the environment block) rides at the end of the newest
//! user message.
//! Every tool call gets exactly one result, in call order. Notices of
//! background children join the next request; a run does not end while
//! background children still run. Read-only calls of
//! one model answer run concurrently; the others run one after another.
//! When the next request would near the context window, the older part of the
//! conversation is first replaced by a summary the model writes (`compact.rs`).
//!
//! The loop checkpoints the session (through its observer) before it runs the tools of a
//! model answer and after each batch of results: a run whose node was lost continues from
//! there (`Resume::Recovered`). A read-only call that had no result yet runs again; a
//! delegation whose task was started follows that task (`Tool::reattach`); any other gets a
//! result saying it was interrupted with an unknown outcome, and the model decides.
//!
//! Tools can change while a run goes on (an MCP server's `tools/list_changed`): an agent with
//! a [`ToolSource`] builds its tools again before the next model call after a change, so the
//! model sees the new set on its next request, not at the next turn.

use std::sync::Arc;

use futures_util::future::join_all;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::conversation::{
    Block, ChatMessage, Delta, ModelRequest, ResultPart, Speaker, StopReason, ToolSpec,
};
use crate::hooks::{HookOutcome, MAX_STOP_BLOCKS, Payload, PermissionDecision};
use crate::permission::{Decision, PermissionPolicy};
use crate::provider::{Provider, ProviderError};
use crate::tools::registry::ToolRegistry;
use crate::tools::{Category, ToolContext, ToolOutput};

use super::session::{
    AgentError, AgentSettings, Session, answered_ids, close_dangling_calls, push_text,
};

/// A tool call waiting for the user's approval, kept with the conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct PendingCall {
    /// The call's id.
    pub(crate) id: String,
    /// The tool.
    pub(crate) name: String,
    /// Its input.
    pub(crate) input: Value,
    /// The question put to the user.
    pub(crate) question: String,
    /// What asked it: the permission rule, the mode's default, or a hook.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) why: String,
    /// Set when the question is a delegated task's (this id): the call already ran, and the
    /// user's reply goes to that task instead of deciding whether the call runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) relay: Option<String>,
    /// Set when the question is the tool's own (an MCP server's elicitation), not a
    /// permission: its kind and data, for the task's status message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ask: Option<Box<crate::tools::ToolAsk>>,
    /// What the `PreToolUse` hooks said of this call and of the calls after it, by call id:
    /// each call's hooks run once, and the resumed run uses what they said.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) hooks: Vec<(String, HookOutcome)>,
}

/// What a run, or part of one, ended with.
#[derive(Debug, PartialEq)]
pub(crate) enum Outcome {
    /// The model answered without calling tools.
    Answered(String),
    /// A tool call needs the user's approval first; the run resumes with [`Resume::Approval`].
    NeedsApproval(PendingCall),
}

/// How a run continues.
#[derive(Debug)]
pub(crate) enum Resume {
    /// From a conversation whose last message is the user's.
    Fresh,
    /// The user approved (or refused) the pending call; the remaining calls of
    /// that model answer follow.
    Approval {
        pending: Box<PendingCall>,
        approved: bool,
        reason: String,
    },
    /// From a checkpoint of a run whose node was lost: the calls of the last model answer
    /// without a result are settled first (see the module's comment).
    Recovered,
}

/// The result of a call that was running when the node running it was lost, and that is not
/// run again because it may have had effects.
pub(crate) const INTERRUPTED: &str = "[interrupted: this call was running when the node \
     running this task was lost, and it is not run again; whether it took effect is unknown. \
     Check before you repeat it.]";

/// What the loop reports while it runs.
pub(crate) trait Observer: Send + Sync {
    /// More answer text.
    fn text(&self, delta: &str);
    /// A tool call starts.
    fn tool_started(&self, id: &str, name: &str, input: &Value);
    /// A tool call ended.
    fn tool_finished(&self, id: &str, name: &str, output: &ToolOutput);
    /// Something the user should know about the run that is not part of the answer.
    fn warning(&self, _text: &str) {}
    /// The session as it is now, to keep durably before the loop goes on: what a run that
    /// loses its node continues from. The loop waits for it.
    fn checkpoint<'a>(&'a self, _session: &'a Session) -> futures_util::future::BoxFuture<'a, ()> {
        Box::pin(std::future::ready(()))
    }
}

/// The span of one tool call: the tool, its category, what the permissions decided, and
/// (recorded when it is over) its outcome.
fn tool_span(id: &str, name: &str, verdict: &Verdict) -> tracing::Span {
    let (decision, category) = match verdict {
        Verdict::Run(category) => ("allow", category.name()),
        Verdict::Refuse(_) => ("deny", ""),
        Verdict::Ask(..) => ("ask", ""),
    };
    crate::telemetry::span!(
        "execute_tool",
        otel.name = %format_args!("execute_tool {name}"),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %name,
        gen_ai.tool.call.id = %id,
        mew.tool.category = category,
        mew.permission.decision = decision,
        mew.tool.outcome = tracing::field::Empty,
    )
}

/// Where an agent's tools come from when they can change during a run.
pub(crate) struct ToolSource {
    /// Changes whenever what `build` returns may have changed.
    pub(crate) changes: tokio::sync::watch::Receiver<u64>,
    /// The agent's tools as they are now, filtered as the run's first set was.
    pub(crate) build: Box<dyn Fn() -> ToolRegistry + Send + Sync>,
}

/// One agent: a model, its tools and its permissions.
pub(crate) struct Agent {
    pub(crate) provider: Arc<dyn Provider>,
    pub(crate) tools: ToolRegistry,
    /// Set when the tools can change during a run: `tools` is built again from it before the
    /// model call that follows a change.
    pub(crate) tool_source: Option<ToolSource>,
    pub(crate) permissions: Arc<PermissionPolicy>,
    pub(crate) settings: AgentSettings,
    pub(crate) context: ToolContext,
}

impl Agent {
    /// Builds the tools again if they changed since they were last built.
    fn refresh_tools(&mut self) {
        if let Some(source) = &mut self.tool_source
            && source.changes.has_changed().unwrap_or(false)
        {
            source.changes.mark_unchanged();
            self.tools = (source.build)();
            tracing::debug!(tools = self.tools.len(), "the tools changed during the run");
        }
    }
}

/// The fate of one tool call.
enum Verdict {
    /// Allowed: run it (its category decides whether it may join a concurrent batch).
    Run(Category),
    /// Not run: this error result goes back to the model.
    Refuse(ToolOutput),
    /// Needs the user's approval first: the question, and what asked it (a rule, the mode,
    /// a hook).
    Ask(String, String),
}

fn result_block(id: &str, output: ToolOutput) -> Block {
    Block::ToolResult {
        id: id.to_owned(),
        content: output.content,
        is_error: output.is_error,
    }
}

impl Agent {
    /// Runs until the model answers, a call needs approval, or a limit is hit.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropping the future may leave a tool call without a
    /// result in `session`. Cancel through the context's token instead.
    pub(crate) async fn run(
        &mut self,
        session: &mut Session,
        resume: Resume,
        environment: &str,
        observer: &dyn Observer,
    ) -> Result<Outcome, AgentError> {
        if let Resume::Recovered = resume
            && let Some(outcome) = self.settle_interrupted(session, observer).await?
        {
            return Ok(outcome);
        }
        if let Resume::Approval {
            pending,
            approved,
            reason,
        } = resume
        {
            let pending = *pending;
            let calls = self.pending_calls(session, &pending.id);
            let output = if let Some(task) = &pending.relay {
                match self.tools.get(&pending.name) {
                    Some(tool) => tool.answer(task, &reason, &self.context).await,
                    None => ToolOutput::error(format!("there is no tool {:?}", pending.name)),
                }
            } else if approved {
                observer.tool_started(&pending.id, &pending.name, &pending.input);
                let mut output = self
                    .call(&pending.id, &pending.name, pending.input.clone())
                    .await;
                if output.relay.is_none()
                    && let Some(reason) = self
                        .post_tool_use(&pending.id, &pending.name, &pending.input, &mut output)
                        .await
                {
                    observer.tool_finished(&pending.id, &pending.name, &output);
                    self.push_result(session, result_block(&pending.id, output));
                    close_dangling_calls(session);
                    return Err(AgentError::HookStopped(reason));
                }
                output
            } else {
                ToolOutput::error(format!("the user did not allow this call: {reason}"))
            };
            if let Some(task) = output.relay.clone() {
                // The task asks again: the user answers again.
                return Ok(Outcome::NeedsApproval(PendingCall {
                    question: output.text_content(),
                    relay: Some(task),
                    ask: output.ask.clone(),
                    ..pending
                }));
            }
            let mut output = output;
            if let Some((_, own)) = pending.hooks.iter().find(|(id, _)| *id == pending.id) {
                append_text(&mut output, &own.additional_context);
            }
            observer.tool_finished(&pending.id, &pending.name, &output);
            self.push_result(session, result_block(&pending.id, output));
            observer.checkpoint(session).await;
            if let Some(outcome) = self
                .run_calls(session, calls, pending.hooks, observer)
                .await?
            {
                return Ok(outcome);
            }
        }
        self.close_dangling_calls(session);
        let mut unknown_streak = 0;
        let mut stop_blocks = 0;
        loop {
            if self.context.cancel.is_cancelled() {
                return Err(AgentError::Canceled);
            }
            if session.model_calls >= u64::from(self.settings.max_turns) {
                return Err(AgentError::MaxTurns(self.settings.max_turns));
            }
            if let Some(children) = super::scope::children(&self.context) {
                for notice in children.take_notices().await {
                    push_text(session, notice);
                }
            }
            self.refresh_tools();
            // Once per model call: the compaction check and the request both need them.
            let specs = self.tools.specs();
            match super::compact::compact_if_needed(
                self.provider.as_ref(),
                &self.settings,
                &specs,
                session,
                &self.context.cancel,
                super::scope::hooks(&self.context).map(Arc::as_ref),
            )
            .await
            {
                Ok(super::compact::Compaction::WindowTooSmall { fixed, threshold }) => {
                    let text = format!(
                        "the model's context window ({} tokens) is too small for this role's \
                         tools: the system prompt and tool definitions alone come to about \
                         {fixed} tokens, past the compaction threshold of {threshold}; the \
                         conversation is not compacted (give the role fewer tools, or set \
                         agent.context_window to the model's real window)",
                        self.settings.context_window
                    );
                    tracing::warn!("{text}");
                    observer.warning(&text);
                    self.notify("context_window", &text).await;
                }
                Ok(_) => {}
                Err(error) => {
                    if let AgentError::Provider(provider_error) = &error {
                        self.notify("stream_error", &provider_error.to_string())
                            .await;
                    }
                    return Err(error);
                }
            }
            if let Some(hooks) = super::scope::hooks(&self.context) {
                hooks.record_transcript(&session.messages).await;
                let outcome = hooks
                    .dispatch(Payload::pre_user_message(session.model_calls + 1))
                    .await;
                if let Some(reason) = outcome.stop {
                    return Err(AgentError::HookStopped(reason));
                }
                for context in outcome.additional_context {
                    push_text(session, context);
                }
            }
            let request = self.request(session, environment, specs);
            let on_delta = |delta: Delta| {
                if let Delta::Text(text) = delta {
                    observer.text(&text);
                }
            };
            let response = tokio::select! {
                response = crate::provider::complete(self.provider.as_ref(), &request, &on_delta) => response,
                () = self.context.cancel.cancelled() => return Err(AgentError::Canceled),
            };
            let response = match response {
                Ok(response) => response,
                Err(error) => {
                    self.notify("stream_error", &error.to_string()).await;
                    return Err(error.into());
                }
            };
            session.model_calls += 1;
            match response.usage {
                Some(usage) => session.usage += usage,
                None => session.unreported_calls += 1,
            }
            let assistant = ChatMessage {
                speaker: Speaker::Assistant,
                content: response.content,
            };
            let calls: Vec<(String, String, Value)> = assistant
                .tool_uses()
                .map(|(id, name, input)| (id.to_owned(), name.to_owned(), input.clone()))
                .collect();
            let text = assistant.text();
            session.messages.push(assistant);
            // The tool and stop hooks that follow read the answer in the transcript.
            if let Some(hooks) = super::scope::hooks(&self.context) {
                hooks.record_transcript(&session.messages).await;
            }
            if let Some(usage) = response.usage {
                // Without a report, the next request's size is estimated from the text.
                super::compact::record_usage(session, usage);
            }
            if calls.is_empty() {
                if response.stop == StopReason::MaxTokens && text.is_empty() {
                    return Err(AgentError::Provider(ProviderError::Protocol {
                        provider: self.provider.name().to_owned(),
                        message: "the model ran out of output tokens before answering".to_owned(),
                    }));
                }
                // Background children report before the run ends: their notices are the
                // model's next input.
                if let Some(children) = super::scope::children(&self.context)
                    && let Some(notice) = children.next_notice(&self.context.cancel).await
                {
                    push_text(session, notice);
                    continue;
                }
                if self.context.cancel.is_cancelled() {
                    return Err(AgentError::Canceled);
                }
                // A stop hook may refuse the stop: its reason is the model's next input.
                if let Some(hooks) = super::scope::hooks(&self.context) {
                    let outcome = hooks
                        .dispatch(Payload::stop(session.model_calls, stop_blocks > 0, &text))
                        .await;
                    if outcome.stop.is_none()
                        && let Some(blocked) = outcome.blocked
                        && stop_blocks < MAX_STOP_BLOCKS
                    {
                        stop_blocks += 1;
                        push_text(session, blocked.reason);
                        continue;
                    }
                }
                return Ok(Outcome::Answered(text));
            }
            let unknown: Vec<&str> = calls
                .iter()
                .filter(|(_, name, _)| self.tools.get(name).is_none())
                .map(|(_, n, _)| n.as_str())
                .collect();
            if unknown.len() == calls.len() {
                unknown_streak += 1;
                if unknown_streak >= self.settings.unknown_tool_limit {
                    let names = unknown.join(", ");
                    // Keep the conversation well-formed for whoever reads it next.
                    self.close_dangling_calls(session);
                    return Err(AgentError::UnknownTools(unknown_streak, names));
                }
            } else {
                unknown_streak = 0;
            }
            session.messages.push(ChatMessage {
                speaker: Speaker::User,
                content: Vec::new(),
            });
            // What the model asked for is kept before anything runs.
            observer.checkpoint(session).await;
            if let Some(outcome) = self.run_calls(session, calls, Vec::new(), observer).await? {
                return Ok(outcome);
            }
        }
    }

    /// The request for the next model call.
    fn request(&self, session: &Session, environment: &str, tools: Vec<ToolSpec>) -> ModelRequest {
        let mut messages = session.messages.clone();
        // Active skills ride in the environment, so the system prompt stays the same.
        let skills = super::scope::skills(&self.context).and_then(|s| s.block());
        let environment = match skills {
            Some(block) if environment.is_empty() => block,
            Some(block) => format!("{environment}\n\n{block}"),
            None => environment.to_owned(),
        };
        if !environment.is_empty()
            && let Some(last) = messages
                .iter_mut()
                .rev()
                .find(|m| m.speaker == Speaker::User)
        {
            // After any tool results: providers want those first in the message.
            last.content.push(Block::Text {
                text: environment.to_owned(),
            });
        }
        ModelRequest {
            model: self.settings.model.clone(),
            system: self.settings.system.clone(),
            messages,
            tools,
            max_tokens: self.settings.max_tokens,
        }
    }

    /// Runs the calls of one model answer and appends their results to the
    /// last (user) message, in call order; stops at a call that needs approval.
    /// Consecutive read-only and delegating calls that need no approval run concurrently.
    ///
    /// `known` is what the `PreToolUse` hooks already said of some of the calls (a run resumed
    /// after an approval): their hooks do not run again.
    async fn run_calls(
        &self,
        session: &mut Session,
        calls: Vec<(String, String, Value)>,
        known: Vec<(String, HookOutcome)>,
        observer: &dyn Observer,
    ) -> Result<Option<Outcome>, AgentError> {
        // The PreToolUse hooks of every call first: they may rewrite an input, refuse a
        // call or decide its permission, and `decide` is synchronous.
        let pre = self.pre_tool_use(&calls, known).await;
        if let Some(reason) = pre.iter().find_map(|outcome| outcome.stop.clone()) {
            for (id, _, _) in &calls {
                self.push_result(
                    session,
                    result_block(
                        id,
                        ToolOutput::error(format!("[not run: a hook stopped the run: {reason}]")),
                    ),
                );
            }
            return Err(AgentError::HookStopped(reason));
        }
        let mut calls: Vec<(String, String, Value)> = calls
            .into_iter()
            .zip(&pre)
            .map(|((id, name, input), outcome)| {
                let input = match &outcome.updated_input {
                    Some(updated @ Value::Object(_)) => updated.clone(),
                    _ => input,
                };
                (id, name, input)
            })
            .collect();
        if let Some(children) = super::scope::children(&self.context)
            && calls
                .iter()
                .any(|(_, name, input)| is_fork(name, input) || name == "LoadSkill")
        {
            children.set_fork_source(session.messages.clone());
        }
        let mut decisions: Vec<Verdict> = calls
            .iter()
            .zip(&pre)
            .map(|((_, name, input), outcome)| self.decide(name, input, outcome))
            .collect();
        let mut index = 0;
        while index < calls.len() {
            let batch_end = (index..calls.len())
                .find(|&i| {
                    !matches!(
                        decisions[i],
                        Verdict::Run(Category::Read | Category::Delegate)
                    )
                })
                .unwrap_or(calls.len());
            let end = if batch_end > index {
                batch_end
            } else {
                index + 1
            };
            if let Verdict::Ask(question, why) = &decisions[index] {
                let (id, name, input) = &calls[index];
                if let Some((verdict, updated)) =
                    self.permission_request(id, name, input, question).await
                {
                    // A hook answered for the user: the call runs or is refused as it said.
                    if let Some(updated) = updated {
                        calls[index].2 = updated;
                    }
                    decisions[index] = verdict;
                    continue;
                }
                self.notify("permission_prompt", question).await;
                return Ok(Some(Outcome::NeedsApproval(PendingCall {
                    id: id.clone(),
                    name: name.clone(),
                    input: input.clone(),
                    question: question.clone(),
                    why: why.clone(),
                    relay: None,
                    ask: None,
                    hooks: said(&calls[index..], &pre[index..]),
                })));
            }
            let outputs = join_all(calls[index..end].iter().zip(&decisions[index..end]).map(
                |((id, name, input), verdict)| {
                    let span = tool_span(id, name, verdict);
                    let call = async move {
                        observer.tool_started(id, name, input);
                        let mut stop = None;
                        let output = match verdict {
                            Verdict::Run(_) => {
                                let mut output = self.call(id, name, input.clone()).await;
                                if output.relay.is_none() {
                                    stop = self.post_tool_use(id, name, input, &mut output).await;
                                }
                                output
                            }
                            Verdict::Refuse(output) => output.clone(),
                            Verdict::Ask(question, _) => ToolOutput::error(question.clone()),
                        };
                        let outcome = if output.relay.is_some() {
                            "asked"
                        } else if output.is_error {
                            "error"
                        } else {
                            "ok"
                        };
                        tracing::Span::current().record("mew.tool.outcome", outcome);
                        (id, name, output, stop)
                    };
                    tracing::Instrument::instrument(call, span)
                },
            ))
            .await;
            let mut relayed = None;
            let mut stopped = None;
            for ((id, name, mut output, stop), ((_, _, input), pre)) in outputs
                .into_iter()
                .zip(calls[index..end].iter().zip(&pre[index..end]))
            {
                if stopped.is_none() {
                    stopped = stop;
                }
                if let Some(task) = output.relay.take() {
                    let question = output.text_content();
                    let ask = output.ask.take();
                    if relayed.is_none() && stopped.is_none() {
                        // The first question of the batch goes to the user; its call gets its
                        // result once the user has answered.
                        relayed = Some(PendingCall {
                            id: id.clone(),
                            name: name.clone(),
                            input: input.clone(),
                            question,
                            why: match &ask {
                                Some(_) => format!("{name} asks"),
                                None => format!("a delegated task of {name} asks"),
                            },
                            relay: Some(task),
                            ask,
                            hooks: vec![(id.clone(), pre.clone())],
                        });
                        continue;
                    }
                    output = ToolOutput::error(match ask {
                        // The tool's own question is gone with the call: it may be made again.
                        Some(_) => format!(
                            "{question}\nThis was not put to the user: another call of the same \
                             answer asked first. Call {name} again after it is answered."
                        ),
                        None => format!(
                            "{question}\nOnly the user can answer this; call SendMessage with \
                             to={task} to put the question to them."
                        ),
                    });
                }
                // What the PreToolUse hooks had to say rides with the result.
                append_text(&mut output, &pre.additional_context);
                observer.tool_finished(id, name, &output);
                session.tool_calls += 1;
                self.push_result(session, result_block(id, output));
            }
            if let Some(reason) = stopped {
                close_dangling_calls(session);
                return Err(AgentError::HookStopped(reason));
            }
            observer.checkpoint(session).await;
            if let Some(mut pending) = relayed {
                pending.hooks.extend(said(&calls[end..], &pre[end..]));
                self.notify("permission_prompt", &pending.question).await;
                return Ok(Some(Outcome::NeedsApproval(pending)));
            }
            index = end;
        }
        Ok(None)
    }

    /// Dispatches `PreToolUse` for each call, concurrently; empty outcomes without hooks. A
    /// call in `known` takes what its hooks said then.
    async fn pre_tool_use(
        &self,
        calls: &[(String, String, Value)],
        known: Vec<(String, HookOutcome)>,
    ) -> Vec<HookOutcome> {
        let Some(hooks) = super::scope::hooks(&self.context) else {
            return vec![HookOutcome::default(); calls.len()];
        };
        let known = &known;
        join_all(calls.iter().map(|(id, name, input)| async move {
            if let Some((_, outcome)) = known.iter().find(|(known, _)| known == id) {
                return outcome.clone();
            }
            // A call of an unknown tool is refused anyway: no hook sees it.
            if self.tools.get(name).is_none() {
                return HookOutcome::default();
            }
            hooks.dispatch(Payload::pre_tool_use(name, input, id)).await
        }))
        .await
    }

    /// Dispatches `PostToolUse` for a call that ran, and `PostToolUseFailure` too when it
    /// failed: added context and a block's reason (the call already ran: the reason is
    /// feedback) are appended to its result. Returns the reason of a `continue: false`.
    async fn post_tool_use(
        &self,
        id: &str,
        name: &str,
        input: &Value,
        output: &mut ToolOutput,
    ) -> Option<String> {
        let hooks = super::scope::hooks(&self.context)?;
        let text = output.text_content();
        let mut outcomes = vec![
            hooks
                .dispatch(Payload::post_tool_use(
                    name,
                    input,
                    id,
                    &text,
                    output.response.as_ref(),
                    output.is_error,
                ))
                .await,
        ];
        if output.is_error {
            let interrupted = self.context.cancel.is_cancelled();
            outcomes.push(
                hooks
                    .dispatch(Payload::post_tool_use_failure(
                        name,
                        input,
                        id,
                        &text,
                        interrupted,
                    ))
                    .await,
            );
        }
        let mut stop = None;
        for outcome in outcomes {
            append_text(output, &outcome.additional_context);
            if let Some(blocked) = &outcome.blocked {
                append_text(
                    output,
                    &[format!("[hook {}] {}", blocked.hook, blocked.reason)],
                );
            }
            stop = stop.or(outcome.stop);
        }
        stop
    }

    /// Dispatches `PermissionRequest` for a call that needs approval: what its hooks decide
    /// stands for the user's answer (the call runs, with their updated input, or is
    /// refused); `None` when no hook decided and the user is asked.
    async fn permission_request(
        &self,
        id: &str,
        name: &str,
        input: &Value,
        question: &str,
    ) -> Option<(Verdict, Option<Value>)> {
        let hooks = super::scope::hooks(&self.context)?;
        let outcome = hooks
            .dispatch(Payload::permission_request(name, input, id, question))
            .await;
        if let Some((hook, reason)) = outcome.refusal() {
            return Some((
                Verdict::Refuse(ToolOutput::error(format!("[hook {hook}] {reason}"))),
                None,
            ));
        }
        let permission = outcome.permission.as_ref()?;
        if permission.decision != PermissionDecision::Allow {
            return None;
        }
        // The policy's deny rules and plan mode still hold for the input the hook gives.
        let updated = outcome.updated_input.filter(|updated| updated.is_object());
        let category = self.tools.get(name)?.category();
        match &updated {
            Some(updated) => {
                match self
                    .permissions
                    .check(self.settings.mode, name, category, updated)
                {
                    Decision::Deny { reason } => Some((
                        Verdict::Refuse(ToolOutput::error(format!("permission denied: {reason}"))),
                        None,
                    )),
                    _ => Some((Verdict::Run(category), Some(updated.clone()))),
                }
            }
            None => Some((Verdict::Run(category), None)),
        }
    }

    /// Dispatches a `Notification` (information only: its outcome is not used).
    async fn notify(&self, kind: &str, detail: &str) {
        if let Some(hooks) = super::scope::hooks(&self.context) {
            let _ = hooks.dispatch(Payload::notification(kind, detail)).await;
        }
    }

    /// What happens to a call: it runs, it is refused with an error result, or it needs approval.
    /// `hook` is what the call's `PreToolUse` hooks said: a refusal refuses it, `ask` asks even
    /// where the rules allow, `allow` skips the question (deny rules and plan mode still refuse).
    fn decide(&self, name: &str, input: &Value, hook: &HookOutcome) -> Verdict {
        let Some(tool) = self.tools.get(name) else {
            let known: Vec<String> = self.tools.specs().into_iter().map(|s| s.name).collect();
            return Verdict::Refuse(ToolOutput::error(format!(
                "there is no tool {name:?}; the tools are: {}",
                known.join(", ")
            )));
        };
        if let Some(invalid) = input.get("_invalid_arguments") {
            return Verdict::Refuse(ToolOutput::error(format!(
                "the arguments of this call are not valid JSON: {invalid}; call the tool again with a JSON object"
            )));
        }
        if let Some((hook, reason)) = hook.refusal() {
            return Verdict::Refuse(ToolOutput::error(format!("[hook {hook}] {reason}")));
        }
        let decision = self
            .permissions
            .check(self.settings.mode, name, tool.category(), input);
        let by_hook = hook.permission.as_ref();
        match decision {
            Decision::Deny { reason } => {
                Verdict::Refuse(ToolOutput::error(format!("permission denied: {reason}")))
            }
            Decision::Allow => match by_hook {
                Some(permission) if permission.decision == PermissionDecision::Ask => {
                    let why = if permission.reason.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", permission.reason)
                    };
                    Verdict::Ask(
                        format!(
                            "Allow this {name} call {input}? The hook {} asks for approval{why}.",
                            permission.hook
                        ),
                        format!("the hook {} asks for approval{why}", permission.hook),
                    )
                }
                _ => Verdict::Run(tool.category()),
            },
            Decision::Ask { question } => match by_hook {
                Some(permission) if permission.decision == PermissionDecision::Allow => {
                    Verdict::Run(tool.category())
                }
                _ => {
                    let why = match self.permissions.ask_rule(name, input) {
                        Some(rule) => format!("the permission rule `{rule}` asks"),
                        None => format!(
                            "the {} mode asks before {} tools run, and no allow rule covers \
                             this call",
                            self.settings.mode.as_str(),
                            tool.category().name()
                        ),
                    };
                    Verdict::Ask(question, why)
                }
            },
        }
    }

    /// Runs a tool without asking; a panicking tool is an error result.
    async fn call(&self, id: &str, name: &str, input: Value) -> ToolOutput {
        use futures_util::FutureExt as _;
        let Some(tool) = self.tools.get(name) else {
            // A name the model made up is no label.
            crate::metrics::tool_call(None, "unknown_tool");
            return ToolOutput::error(format!("there is no tool {name:?}"));
        };
        let context = self.call_context(id);
        let (outcome, output) = match std::panic::AssertUnwindSafe(tool.call(input, &context))
            .catch_unwind()
            .await
        {
            Ok(output) if output.is_error => ("error", output),
            Ok(output) => ("ok", output),
            Err(_) => (
                "panicked",
                ToolOutput::error(format!("the tool {name} failed unexpectedly (it panicked)")),
            ),
        };
        crate::metrics::tool_call(Some(name), outcome);
        output
    }

    /// The context of the call `id`.
    fn call_context(&self, id: &str) -> ToolContext {
        ToolContext {
            call_id: Some(id.to_owned()),
            ..self.context.clone()
        }
    }

    /// Appends a tool result to the conversation's last user message.
    fn push_result(&self, session: &mut Session, block: Block) {
        match session.messages.last_mut() {
            Some(last) if last.speaker == Speaker::User => last.content.push(block),
            _ => session.messages.push(ChatMessage {
                speaker: Speaker::User,
                content: vec![block],
            }),
        }
    }

    /// The calls of the last model answer that come after `pending` and have no result yet.
    fn pending_calls(&self, session: &Session, pending: &str) -> Vec<(String, String, Value)> {
        unanswered_calls(session, Some(pending))
    }

    /// Settles the calls of the last model answer that have no result, in a run continued
    /// from a checkpoint: read-only ones run again, a delegation follows the task it started,
    /// the others get [`INTERRUPTED`].
    async fn settle_interrupted(
        &self,
        session: &mut Session,
        observer: &dyn Observer,
    ) -> Result<Option<Outcome>, AgentError> {
        let (again, lost): (Vec<_>, Vec<_>) = unanswered_calls(session, None)
            .into_iter()
            .partition(|(_, name, _)| {
                self.tools
                    .get(name)
                    .is_some_and(|tool| tool.category() == Category::Read)
            });
        for (id, name, _) in &lost {
            // A call that started something it can follow (a delegated task) takes it up.
            let output = match self.tools.get(name) {
                Some(tool) => tool.reattach(&self.call_context(id)).await,
                None => None,
            }
            .unwrap_or_else(|| ToolOutput::error(INTERRUPTED));
            observer.tool_finished(id, name, &output);
            self.push_result(session, result_block(id, output));
        }
        if again.is_empty() {
            return Ok(None);
        }
        self.run_calls(session, again, Vec::new(), observer).await
    }

    /// Gives every tool call without a result a placeholder result, so the
    /// conversation stays well-formed (a fork, a restart, or a stopped run).
    pub(crate) fn close_dangling_calls(&self, session: &mut Session) {
        close_dangling_calls(session);
    }
}

/// The calls of the conversation's last model answer that have no result yet, in order
/// (only those after the call `after`, when given).
fn unanswered_calls(session: &Session, after: Option<&str>) -> Vec<(String, String, Value)> {
    let answered = answered_ids(session);
    session
        .messages
        .iter()
        .rev()
        .find(|m| m.speaker == Speaker::Assistant)
        .map(|assistant| {
            let mut calls = assistant.tool_uses();
            if let Some(after) = after {
                calls.find(|(id, _, _)| *id == after);
            }
            calls
                .filter(|(id, _, _)| !answered.contains(*id))
                .map(|(id, name, input)| (id.to_owned(), name.to_owned(), input.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// What the `PreToolUse` hooks said of each of `calls`, by call id.
fn said(calls: &[(String, String, Value)], pre: &[HookOutcome]) -> Vec<(String, HookOutcome)> {
    calls
        .iter()
        .zip(pre)
        .map(|((id, _, _), outcome)| (id.clone(), outcome.clone()))
        .collect()
}

/// Appends each text to a tool result.
fn append_text(output: &mut ToolOutput, texts: &[String]) {
    output.content.extend(
        texts
            .iter()
            .filter(|text| !text.trim().is_empty())
            .map(|text| ResultPart::Text { text: text.clone() }),
    );
}

/// Whether a call starts a fork: `Agent` without a `subagent_type`.
fn is_fork(name: &str, input: &Value) -> bool {
    name == "Agent"
        && input
            .get("subagent_type")
            .and_then(Value::as_str)
            .is_none_or(|t| t.trim().is_empty())
}
