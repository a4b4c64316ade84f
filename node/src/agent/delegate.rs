//! The `Agent` and `SendMessage` tools: hand work to a role on this node or on another one, through `AgentTransport`.
//!
//! Local roles and remote ones take the same path: the tool resolves the name
//! to an `Arc<dyn AgentTransport>` (the in-process role agent, or a
//! `RemoteAgent`), sends a streaming message whose metadata names the parent
//! task and the delegation depth, records the child in the parent's metadata
//! (see [`super::children`]), and folds the child's events into its answer.
//!
//! A foreground child that is still running after `agent.background_after`
//! moves to the background instead of failing; a background child (asked for,
//! a fork, or moved) leaves a `<task-notification>` for its parent when it
//! ends, and the parent's loop waits for those before it answers. At most
//! `agent.max_children` children of one task run at once; more calls wait.
//! Cancelling the parent cancels its children, wherever they run.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use futures_util::StreamExt;
use mew_cards::mew::{self, MewMetadata};
use mew_cards::{
    CancelTaskRequest, ContextId, GetTaskRequest, Message, SendMessageRequest, StreamResponse,
    SubscribeToTaskRequest, Task, TaskId, TaskState,
};
use mew_transport::{AgentTransport, CallContext, EventStream};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use super::children::{ChildLink, Children, Notifier, notice};
use crate::conversation::{Block, ChatMessage, Speaker};
use crate::hooks::{Payload, RunHooks};
use crate::peers::Peers;
use crate::tools::{Category, Tool, ToolContext, ToolOutput};

/// Starts a task of a local role whose conversation begins where another's is.
#[async_trait]
pub(crate) trait Forker: Send + Sync {
    /// Submits `request`, for the caller of `ctx`, as a new task whose runner starts from
    /// `private`.
    async fn fork(
        &self,
        ctx: &CallContext,
        request: SendMessageRequest,
        private: Value,
    ) -> Result<EventStream, mew_transport::Error>;
}

/// A role of this node, as the `Agent` tool reaches it.
pub(crate) struct LocalRole {
    /// What it does, for the model.
    pub(crate) description: String,
    /// Its in-process agent.
    pub(crate) agent: Arc<dyn AgentTransport>,
    /// Starts forks of it.
    pub(crate) forker: Arc<dyn Forker>,
}

/// The roles a delegating agent can reach by name.
pub(crate) struct Directory {
    /// This node's roles, by name; set once the task manager exists (the
    /// manager's runners hold this directory).
    local: OnceLock<HashMap<String, LocalRole>>,
    /// The configured peers' roles, as `peer/role`.
    peers: Arc<Peers>,
}

/// An agent to delegate to, and how a link names it.
pub(crate) struct Resolved {
    pub(crate) agent: Arc<dyn AgentTransport>,
    /// A local role's name, or the remote agent's URL.
    pub(crate) locator: String,
}

impl Directory {
    /// A directory of `peers`, and of this node's roles once they are set.
    pub(crate) fn new(peers: Arc<Peers>) -> Self {
        Self {
            local: OnceLock::new(),
            peers,
        }
    }

    /// Sets this node's roles; later calls change nothing.
    pub(crate) fn set_local(&self, roles: HashMap<String, LocalRole>) {
        let _ = self.local.set(roles);
    }

    fn local(&self, name: &str) -> Option<&LocalRole> {
        self.local.get()?.get(name)
    }

    fn describe(&self) -> String {
        let mut lines: Vec<String> = self
            .local
            .get()
            .map(|roles| {
                roles
                    .iter()
                    .map(|(name, role)| format!("- {name}: {}", role.description))
                    .collect()
            })
            .unwrap_or_default();
        lines.sort();
        let remote = self.peers.describe_for_model();
        if !remote.is_empty() {
            lines.push(String::new());
            lines.push("Roles of peer nodes:".to_owned());
            lines.extend(remote.lines().map(|line| format!("- {line}")));
        }
        lines.join("\n")
    }

    /// The agent a `subagent_type` (or a link's `agent`) names: a local role,
    /// a peer's role (`peer/role`), or an agent's URL.
    pub(crate) async fn resolve(&self, target: &str) -> Result<Resolved, String> {
        if let Some(role) = self.local(target) {
            return Ok(Resolved {
                agent: role.agent.clone(),
                locator: target.to_owned(),
            });
        }
        if target.starts_with("http://") || target.starts_with("https://") {
            let agent = self
                .peers
                .resolve_url(target)
                .await
                .map_err(|e| format!("cannot reach the agent at {target}: {e}"))?;
            return Ok(Resolved {
                agent: Arc::new(agent),
                locator: target.trim_end_matches('/').to_owned(),
            });
        }
        if target.contains('/') {
            let agent = self
                .peers
                .resolve(target)
                .await
                .map_err(|e| e.to_string())?;
            // Links name remote agents by URL: readers elsewhere know no peer names.
            let locator = match agent.card().await {
                Ok(card) => card
                    .supported_interfaces
                    .first()
                    .map(|i| i.url.trim_end_matches('/').to_owned())
                    .unwrap_or_else(|| target.to_owned()),
                Err(_) => target.to_owned(),
            };
            return Ok(Resolved { agent, locator });
        }
        let mut known: Vec<&str> = self
            .local
            .get()
            .map(|r| r.keys().map(String::as_str).collect())
            .unwrap_or_default();
        known.sort_unstable();
        Err(format!(
            "there is no agent {target:?}; the roles of this node are: {}",
            known.join(", ")
        ))
    }
}

/// What the child ended with, for the parent model.
pub(crate) fn result_text(task: &Task) -> String {
    let said = task
        .status
        .message
        .as_ref()
        .map(Message::text)
        .unwrap_or_default();
    if !said.is_empty() {
        return said;
    }
    task.artifacts
        .iter()
        .flat_map(|a| a.parts.iter().filter_map(|p| p.as_text()))
        .collect()
}

/// Whether the task waits for a decision only a user may make: a permission, or an MCP
/// server's question (elicitation).
fn asks_permission(task: &Task) -> bool {
    task.status.state == TaskState::InputRequired
        && task.status.message.as_ref().is_some_and(|m| {
            matches!(
                MewMetadata::read(m.metadata.as_ref()).ask.as_deref(),
                Some(mew::ASK_PERMISSION | mew::ASK_ELICITATION)
            )
        })
}

/// The question of `task` only the user may answer, to be put to the user; an MCP server's
/// question keeps its data (what to fill in) on the way.
fn relay_of(task: &Task, target: &str) -> ToolOutput {
    let elicitation = task.status.message.as_ref().and_then(|m| {
        (MewMetadata::read(m.metadata.as_ref()).ask.as_deref() == Some(mew::ASK_ELICITATION))
            .then(|| {
                m.parts.iter().find_map(|p| match &p.content {
                    mew_cards::PartContent::Data(data) => Some(data.clone()),
                    _ => None,
                })
            })
            .flatten()
    });
    ToolOutput {
        relay: Some(task.id.to_string()),
        ask: elicitation.map(|data| {
            Box::new(crate::tools::ToolAsk {
                kind: mew::ASK_ELICITATION.to_owned(),
                data,
            })
        }),
        ..ToolOutput::text(format!(
            "{target} (task {}) asks: {}",
            task.id,
            result_text(task)
        ))
    }
}

fn answer_of(task: &Task, target: &str) -> ToolOutput {
    let text = result_text(task);
    if asks_permission(task) {
        return relay_of(task, target);
    }
    match task.status.state {
        TaskState::Completed => ToolOutput::text(text),
        TaskState::InputRequired | TaskState::AuthRequired => ToolOutput::text(format!(
            "{target} (task {}) stopped to ask: {text}\nAnswer it with SendMessage.",
            task.id
        )),
        state => ToolOutput::error(format!("{target} (task {}) ended {state}: {text}", task.id)),
    }
}

/// The opening of a fork's task message: the seed's fork boilerplate.
const FORK_PREAMBLE: &str = "<fork_boilerplate>\nYou are a fork of the agent whose conversation \
     is above, started to do one task on your own. Do not fork or delegate again, do not ask \
     questions: do the task directly and stay within its scope. Start your report with \
     \"Scope:\" and keep it under 500 words.\n</fork_boilerplate>\n\n";

/// How a child task starts.
enum Start {
    /// A message to an agent.
    Send(SendMessageRequest),
    /// A fork of the parent's role with the parent's conversation.
    Fork(Arc<dyn Forker>, SendMessageRequest, Value),
}

/// Everything one delegation needs.
struct Delegation {
    agent: Arc<dyn AgentTransport>,
    start: Start,
    link: ChildLink,
    background: bool,
}

/// The metadata of a delegated message: who delegates, how deep the chain is, and whether the
/// child is a fork.
fn link_metadata(ctx: &ToolContext, description: &str, fork: bool) -> mew_cards::Metadata {
    MewMetadata {
        parent_task: ctx.task_id.clone(),
        depth: Some(ctx.depth + 1),
        description: Some(description.to_owned()),
        fork,
        ..MewMetadata::default()
    }
    .to_metadata()
}

/// The context of the calls made for a task's delegations: the task's principal, so that
/// what it starts, reads and stops on this node is its own (`children` is `None` outside a
/// task: an anonymous call).
pub(crate) fn call_for(children: Option<&Children>) -> CallContext {
    CallContext {
        principal: children.and_then(|c| c.owner.clone()),
        ..CallContext::default()
    }
}

/// Runs a delegation: waits for a place, starts the child, records it, and
/// either follows it to its end or leaves it running in the background. Its span is the
/// client side of the child's task: the child's node continues it.
async fn delegate(ctx: &ToolContext, d: Delegation) -> ToolOutput {
    let span = crate::telemetry::span!(
        "a2a.delegate",
        otel.name = %format_args!("delegate {}", d.link.agent),
        otel.kind = "client",
        a2a.agent = %d.link.agent,
        a2a.task_id = tracing::field::Empty,
        mew.background = d.background,
    );
    tracing::Instrument::instrument(delegate_in_span(ctx, d), span).await
}

async fn delegate_in_span(ctx: &ToolContext, mut d: Delegation) -> ToolOutput {
    if let Some(hooks) = super::scope::hooks(ctx) {
        let (Start::Send(request) | Start::Fork(_, request, _)) = &d.start;
        let parent = ctx.task_id.as_ref().map_or("", |task| task.as_str());
        let outcome = hooks
            .dispatch(Payload::delegation_start(
                parent,
                &d.link.agent,
                &request.message.text(),
                d.background,
            ))
            .await;
        if let Some((hook, reason)) = outcome.refusal() {
            return ToolOutput::error(format!(
                "delegation to {} blocked by hook {hook}: {reason}",
                d.link.agent
            ));
        }
    }
    let children = super::scope::children(ctx).cloned();
    // A child on this node belongs to the principal of its parent; a remote agent sees only
    // the credentials this node presents to it.
    let call = call_for(children.as_deref());
    let permit = match &children {
        Some(children) => match children.place(&ctx.cancel).await {
            Some(permit) => Some(permit),
            None => return ToolOutput::error("canceled"),
        },
        None => None,
    };
    let started = match d.start {
        Start::Send(request) => d.agent.send_streaming_message(&call, request).await,
        Start::Fork(forker, request, private) => forker.fork(&call, request, private).await,
    };
    let mut stream = match started {
        Ok(stream) => stream,
        Err(e) => return ToolOutput::error(format!("{} refused the task: {e}", d.link.agent)),
    };
    let mut child = tokio::select! {
        event = stream.next() => match event {
            Some(Ok(StreamResponse::Task(task))) => task,
            Some(Ok(StreamResponse::Message(message))) => return ToolOutput::text(message.text()),
            Some(Ok(_)) => return ToolOutput::error(format!("{} answered without a task", d.link.agent)),
            Some(Err(e)) => return ToolOutput::error(format!("{} failed: {e}", d.link.agent)),
            None => return ToolOutput::error(format!("{} ended without a task", d.link.agent)),
        },
        () = ctx.cancel.cancelled() => return ToolOutput::error("canceled"),
    };
    d.link.task_id = child.id.to_string();
    tracing::Span::current().record("a2a.task_id", child.id.as_str());
    if let Some(hooks) = super::scope::hooks(ctx) {
        let _ = hooks
            .dispatch(Payload::subagent_start(&d.link.task_id, &d.link.agent))
            .await;
    }
    let Some(children) = children else {
        // Outside a task: nothing to record, no background; follow to the end.
        return match follow(
            &mut stream,
            &mut child,
            (&d.agent, &call),
            &ctx.cancel,
            None,
        )
        .await
        {
            Followed::Ended => {
                subagent_stop(super::scope::hooks(ctx).map(Arc::as_ref), &d.link, &child).await;
                answer_of(&child, &d.link.agent)
            }
            Followed::Canceled => ToolOutput::error("canceled"),
            Followed::Failed(e) => ToolOutput::error(format!("{} failed: {e}", d.link.agent)),
        };
    };
    d.link.background = d.background;
    d.link.call_id = ctx.call_id.clone();
    children.record(&d.link).await;
    carry(ctx, children, (stream, child), d.agent, d.link, permit).await
}

/// Follows a recorded child: to its end in the foreground, moving it to the background when
/// it runs longer than `background_after`, or at once in the background when its link says
/// so.
async fn carry(
    ctx: &ToolContext,
    children: Arc<Children>,
    (mut stream, mut child): (EventStream, Task),
    agent: Arc<dyn AgentTransport>,
    mut link: ChildLink,
    permit: Option<OwnedSemaphorePermit>,
) -> ToolOutput {
    let hooks = super::scope::hooks(ctx).cloned();
    if link.background {
        let notifier = children.started_in_background();
        let answer = launched(&link, "async_launched");
        spawn_follower(
            stream,
            child,
            agent,
            link,
            (children, notifier),
            (ctx.cancel.clone(), hooks),
            permit,
        );
        return answer;
    }
    let call = call_for(Some(&children));
    let limit = children.background_after;
    let followed = tokio::time::timeout(
        limit,
        follow(
            &mut stream,
            &mut child,
            (&agent, &call),
            &ctx.cancel,
            Some((&children, &link)),
        ),
    )
    .await;
    match followed {
        Ok(Followed::Ended) => {
            subagent_stop(hooks.as_deref(), &link, &child).await;
            answer_of(&child, &link.agent)
        }
        Ok(Followed::Canceled) => ToolOutput::error("canceled"),
        Ok(Followed::Failed(e)) => ToolOutput::error(format!("{} failed: {e}", link.agent)),
        Err(_) => {
            // Still running: it carries on in the background instead of failing.
            link.background = true;
            children.record(&link).await;
            let notifier = children.started_in_background();
            let answer = launched(&link, "timed_out_to_background");
            spawn_follower(
                stream,
                child,
                agent,
                link,
                (children, notifier),
                (ctx.cancel.clone(), hooks),
                permit,
            );
            answer
        }
    }
}

/// What became of a child found again by its link.
enum Again {
    /// It still runs: its events from the snapshot on.
    Running(EventStream, Task),
    /// It ended, or waits for an answer.
    Over(Task),
}

/// Finds the child `id` again on `agent`: subscribed to while it runs, read once it is over.
async fn find_again(
    agent: &Arc<dyn AgentTransport>,
    call: &CallContext,
    id: &str,
) -> Result<Again, String> {
    let over = |task: &Task| task.status.state.is_terminal() || task.status.state.is_interrupted();
    let request = SubscribeToTaskRequest {
        id: TaskId::from(id),
        ..SubscribeToTaskRequest::default()
    };
    // A task that is over cannot be subscribed to: it is read instead.
    if let Ok(mut stream) = agent.subscribe_to_task(call, request).await
        && let Some(Ok(StreamResponse::Task(task))) = stream.next().await
    {
        return Ok(if over(&task) {
            Again::Over(task)
        } else {
            Again::Running(stream, task)
        });
    }
    let request = GetTaskRequest {
        id: TaskId::from(id),
        history_length: Some(0),
        ..GetTaskRequest::default()
    };
    let task = agent
        .get_task(call, request)
        .await
        .map_err(|e| e.to_string())?;
    if over(&task) {
        Ok(Again::Over(task))
    } else {
        Err(format!(
            "it is {} and cannot be followed",
            task.status.state
        ))
    }
}

/// Takes up the delegation of the call `ctx.call_id`, which was running when the node running
/// its task was lost: the child its link names is followed again, not started twice. `None`
/// when the call had started no child (or none was recorded): the call stays interrupted.
async fn reattach(directory: &Directory, ctx: &ToolContext) -> Option<ToolOutput> {
    let call_id = ctx.call_id.as_deref()?;
    let children = super::scope::children(ctx)?.clone();
    let link = children
        .links()
        .await
        .into_iter()
        .rev()
        .find(|l| l.call_id.as_deref() == Some(call_id))?;
    let lost = |e: String| {
        ToolOutput::error(format!(
            "{} (task {}) was started by this call before the node running this task was lost, \
             and cannot be followed again: {e}",
            link.agent, link.task_id
        ))
    };
    let resolved = match directory.resolve(&link.agent).await {
        Ok(resolved) => resolved,
        Err(e) => return Some(lost(e)),
    };
    let Some(permit) = children.place(&ctx.cancel).await else {
        return Some(ToolOutput::error("canceled"));
    };
    let call = call_for(Some(&children));
    Some(
        match find_again(&resolved.agent, &call, &link.task_id).await {
            Ok(Again::Running(stream, child)) => {
                tracing::info!(child = %link.task_id, agent = %link.agent, "following a delegated task again");
                carry(
                    ctx,
                    children,
                    (stream, child),
                    resolved.agent,
                    link,
                    Some(permit),
                )
                .await
            }
            Ok(Again::Over(child)) => {
                subagent_stop(super::scope::hooks(ctx).map(Arc::as_ref), &link, &child).await;
                answer_of(&child, &link.agent)
            }
            Err(e) => lost(e),
        },
    )
}

/// Follows again, after a run continued from a checkpoint, the background children its
/// answered calls started whose notice is not in the conversation: their followers were lost
/// with the node, and the parent still waits for their notices (a child that ended meanwhile
/// leaves its notice at once).
pub(crate) async fn follow_background_again(
    directory: &Directory,
    ctx: &ToolContext,
    session: &super::session::Session,
) {
    let Some(children) = super::scope::children(ctx).cloned() else {
        return;
    };
    let answered = super::session::answered_ids(session);
    let said: String = session
        .messages
        .iter()
        .filter(|m| m.speaker == Speaker::User)
        .map(ChatMessage::text)
        .collect::<Vec<_>>()
        .join("\n");
    let call = call_for(Some(&children));
    for link in children.links().await {
        let ours = link
            .call_id
            .as_deref()
            .is_some_and(|id| answered.contains(id));
        if !link.background || !ours || said.contains(&format!("Task {}", link.task_id)) {
            continue;
        }
        let notifier = children.started_in_background();
        let found = match directory.resolve(&link.agent).await {
            Ok(resolved) => find_again(&resolved.agent, &call, &link.task_id)
                .await
                .map(|again| (resolved.agent, again)),
            Err(e) => Err(e),
        };
        match found {
            Ok((agent, Again::Running(stream, child))) => {
                tracing::info!(child = %link.task_id, agent = %link.agent, "following a background task again");
                let permit = children.place(&ctx.cancel).await;
                spawn_follower(
                    stream,
                    child,
                    agent,
                    link,
                    (children.clone(), notifier),
                    (ctx.cancel.clone(), super::scope::hooks(ctx).cloned()),
                    permit,
                );
            }
            Ok((_, Again::Over(child))) => {
                let state = child.status.state.to_string();
                notifier.send(notice(&link, &state, &result_text(&child)));
            }
            Err(e) => notifier.send(notice(&link, "unknown", &format!("lost track of it: {e}"))),
        }
    }
}

/// Dispatches `SubagentStop` for a child that ended (information only: a block does not
/// restart the child).
async fn subagent_stop(hooks: Option<&RunHooks>, link: &ChildLink, child: &Task) {
    if let Some(hooks) = hooks {
        let _ = hooks
            .dispatch(Payload::subagent_stop(
                &link.task_id,
                &link.agent,
                false,
                &result_text(child),
            ))
            .await;
    }
}

/// The answer for a child that runs on in the background.
fn launched(link: &ChildLink, status: &str) -> ToolOutput {
    let name = link.name.as_deref().unwrap_or("");
    ToolOutput::text(
        json!({
            "task_id": link.task_id,
            "name": name,
            "status": status,
            "note": "The task runs in the background; a <task-notification> tells you when it \
                     ends. TaskGet shows its progress, TaskStop stops it."
        })
        .to_string(),
    )
}

enum Followed {
    Ended,
    Canceled,
    Failed(String),
}

/// Applies the child's events to `child` until its stream ends; cancels the
/// child if `cancel` fires first. With `report`, the child's status updates
/// become progress notes of the parent task.
async fn follow(
    stream: &mut EventStream,
    child: &mut Task,
    (agent, call): (&Arc<dyn AgentTransport>, &CallContext),
    cancel: &CancellationToken,
    report: Option<(&Children, &ChildLink)>,
) -> Followed {
    loop {
        tokio::select! {
            event = stream.next() => match event {
                Some(Ok(StreamResponse::Task(task))) => *child = task,
                Some(Ok(StreamResponse::Message(message))) => {
                    child.status.message = Some(message);
                }
                Some(Ok(StreamResponse::StatusUpdate(update))) => {
                    if let Some((children, link)) = report {
                        children.report(link, &update).await;
                    }
                    child.apply(&StreamResponse::StatusUpdate(update));
                }
                Some(Ok(event)) => child.apply(&event),
                Some(Err(e)) => return Followed::Failed(e.to_string()),
                None => return Followed::Ended,
            },
            () = cancel.cancelled() => {
                let request = CancelTaskRequest { id: child.id.clone(), ..CancelTaskRequest::default() };
                let _ = agent.cancel_task(call, request).await;
                return Followed::Canceled;
            }
        }
    }
}

/// Follows a background child to its end, then leaves its notice.
fn spawn_follower(
    mut stream: EventStream,
    mut child: Task,
    agent: Arc<dyn AgentTransport>,
    link: ChildLink,
    (children, notifier): (Arc<Children>, Notifier),
    (cancel, hooks): (CancellationToken, Option<Arc<RunHooks>>),
    permit: Option<OwnedSemaphorePermit>,
) {
    tokio::spawn(async move {
        let _permit = permit;
        let report = Some((children.as_ref(), &link));
        let call = call_for(Some(&children));
        let text = match follow(&mut stream, &mut child, (&agent, &call), &cancel, report).await {
            Followed::Ended => {
                subagent_stop(hooks.as_deref(), &link, &child).await;
                let state = child.status.state.to_string();
                notice(&link, &state, &result_text(&child))
            }
            Followed::Canceled => notice(&link, "canceled", "its parent was canceled"),
            Followed::Failed(e) => notice(&link, "unknown", &format!("lost track of it: {e}")),
        };
        notifier.send(text);
    });
}

/// The `Agent` tool.
pub(crate) struct AgentTool {
    pub(crate) directory: Arc<Directory>,
    /// The deepest a delegation chain may go.
    pub(crate) max_depth: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentInput {
    prompt: String,
    description: String,
    #[serde(default)]
    subagent_type: String,
    #[serde(default)]
    run_in_background: bool,
    #[serde(default)]
    name: Option<String>,
}

impl AgentTool {
    /// The start of a fork: the parent's conversation, its dangling calls closed, and the task.
    fn fork(&self, ctx: &ToolContext, input: &AgentInput) -> Result<(Resolved, Start), String> {
        let children = super::scope::children(ctx).ok_or("a fork needs a parent task")?;
        let role = self
            .directory
            .local(&children.role)
            .ok_or_else(|| format!("cannot fork: role {:?} is not served here", children.role))?;
        let mut session = super::session::Session {
            messages: children.fork_source(),
            ..Default::default()
        };
        super::session::close_dangling_calls(&mut session);
        if !matches!(session.messages.first(), Some(m) if m.speaker == Speaker::User) {
            session.messages.insert(
                0,
                ChatMessage {
                    speaker: Speaker::User,
                    content: vec![Block::Text {
                        text: "(the conversation so far)".to_owned(),
                    }],
                },
            );
        }
        let private = json!({ "session": session });
        let mut request = SendMessageRequest::new(Message::user_text(format!(
            "{FORK_PREAMBLE}{}",
            input.prompt
        )));
        request.metadata = Some(link_metadata(ctx, &input.description, true));
        let resolved = Resolved {
            agent: role.agent.clone(),
            locator: children.role.clone(),
        };
        Ok((resolved, Start::Fork(role.forker.clone(), request, private)))
    }
}

#[async_trait]
impl Tool for AgentTool {
    fn name(&self) -> &str {
        "Agent"
    }

    fn description(&self) -> String {
        format!(
            "Hands a task to another agent and returns its answer. The agent works on its own, \
             with its own tools and an empty conversation: give it everything it needs in the \
             prompt. subagent_type is one of the roles below (`peer/role` for a role of a \
             peer node), or the URL of any A2A agent; leave it empty to fork yourself: the fork \
             sees this conversation and runs in the background. run_in_background returns at \
             once and a <task-notification> arrives when the task ends; a task still running \
             after a while moves to the background by itself. Give it a name to continue it \
             later with SendMessage.\n\n\
             Roles of this node:\n{}",
            self.directory.describe()
        )
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "prompt": {"type": "string", "description": "The task, complete and self-contained."},
                "description": {"type": "string", "description": "A short (3-5 words) description of the task."},
                "subagent_type": {"type": "string", "description": "A role of this node, `peer/role`, or an agent's URL; empty to fork yourself."},
                "run_in_background": {"type": "boolean", "description": "Return at once; a notification follows when the task ends."},
                "name": {"type": "string", "description": "A name for the task, to address it with SendMessage."}
            },
            "required": ["prompt", "description"],
            "additionalProperties": false
        })
    }

    fn category(&self) -> Category {
        Category::Delegate
    }

    async fn answer(&self, task: &str, reply: &str, ctx: &ToolContext) -> ToolOutput {
        pass_reply(&self.directory, ctx, task, reply).await
    }

    async fn reattach(&self, ctx: &ToolContext) -> Option<ToolOutput> {
        reattach(&self.directory, ctx).await
    }

    async fn call(&self, input: Value, ctx: &ToolContext) -> ToolOutput {
        let input: AgentInput = match serde_json::from_value(input) {
            Ok(input) => input,
            Err(e) => return ToolOutput::error(format!("invalid input for Agent: {e}")),
        };
        if ctx.depth + 1 > self.max_depth {
            return ToolOutput::error(format!(
                "delegation is limited to {} level(s); do this task yourself",
                self.max_depth
            ));
        }
        let target = input.subagent_type.trim();
        if !target.is_empty() {
            let send = Handoff {
                target,
                prompt: input.prompt,
                description: input.description,
                name: input.name,
                background: input.run_in_background,
            };
            return send_to(&self.directory, ctx, send).await;
        }
        let (resolved, start) = match self.fork(ctx, &input) {
            Ok(fork) => fork,
            Err(e) => return ToolOutput::error(e),
        };
        // A fork always runs in the background, as in the seed.
        let link = ChildLink {
            task_id: String::new(),
            agent: resolved.locator,
            name: input.name.filter(|n| !n.trim().is_empty()),
            description: input.description,
            background: true,
            call_id: None,
        };
        let delegation = Delegation {
            agent: resolved.agent,
            start,
            link,
            background: true,
        };
        delegate(ctx, delegation).await
    }
}

/// A message to hand to an agent as a new child task of the task of a [`ToolContext`].
pub(crate) struct Handoff<'a> {
    /// A local role, `peer/role`, or an agent's URL.
    pub(crate) target: &'a str,
    /// The child's first message.
    pub(crate) prompt: String,
    /// A short description, kept in the link.
    pub(crate) description: String,
    /// A name to address the child by.
    pub(crate) name: Option<String>,
    /// Whether the child runs in the background.
    pub(crate) background: bool,
}

/// The context a turn of the task `task_id` (at `depth`, canceled by `cancel`) delegates in
/// outside the model loop, its children recorded through `children`: what `remote:` roles and
/// command roles' programs hand to [`send_to`].
pub(crate) fn turn_context(
    (cwd, env): (std::path::PathBuf, Arc<HashMap<String, String>>),
    task_id: mew_cards::TaskId,
    depth: u32,
    cancel: CancellationToken,
    children: Arc<Children>,
) -> ToolContext {
    ToolContext {
        cwd,
        env,
        cancel,
        task_id: Some(task_id),
        depth,
        scope: super::scope::RunScope {
            children: Some(children),
            ..super::scope::RunScope::default()
        }
        .into_context(),
        call_id: None,
        news: None,
        sampler: None,
        can_ask_user: true,
        principal: None,
    }
}

/// Starts `send` as a child of the task of `ctx` on the agent its target resolves to, records
/// the link, and follows the child: what the `Agent` tool does for a named target, and what a
/// `remote:` role does with each turn.
pub(crate) async fn send_to(
    directory: &Directory,
    ctx: &ToolContext,
    send: Handoff<'_>,
) -> ToolOutput {
    let resolved = match directory.resolve(send.target).await {
        Ok(resolved) => resolved,
        Err(e) => return ToolOutput::error(e),
    };
    let mut request = SendMessageRequest::new(Message::user_text(send.prompt));
    request.metadata = Some(link_metadata(ctx, &send.description, false));
    let link = ChildLink {
        task_id: String::new(),
        agent: resolved.locator,
        name: send.name.filter(|n| !n.trim().is_empty()),
        description: send.description,
        background: send.background,
        call_id: None,
    };
    let delegation = Delegation {
        agent: resolved.agent,
        start: Start::Send(request),
        link,
        background: send.background,
    };
    delegate(ctx, delegation).await
}

/// Runs a fork skill: a new task of the local role `role` whose runner starts from `private`
/// (the part of the conversation the skill sees, and its tool filter and model), followed in
/// the foreground to its answer.
pub(crate) async fn fork_for_skill(
    directory: &Directory,
    ctx: &ToolContext,
    role: &str,
    description: &str,
    prompt: String,
    private: Value,
) -> ToolOutput {
    let Some(local) = directory.local(role) else {
        return ToolOutput::error(format!("cannot fork: role {role:?} is not served here"));
    };
    let mut request = SendMessageRequest::new(Message::user_text(prompt));
    request.metadata = Some(link_metadata(ctx, description, true));
    let delegation = Delegation {
        agent: local.agent.clone(),
        start: Start::Fork(local.forker.clone(), request, private),
        link: ChildLink {
            task_id: String::new(),
            agent: role.to_owned(),
            name: None,
            description: description.to_owned(),
            background: false,
            call_id: None,
        },
        background: false,
    };
    delegate(ctx, delegation).await
}

/// Finds a child of this conversation by name or task id; the newest wins.
pub(crate) async fn find_child(children: &Children, key: &str) -> Result<ChildLink, String> {
    let links = children.links().await;
    links
        .iter()
        .rev()
        .find(|l| l.task_id == key || l.name.as_deref() == Some(key))
        .cloned()
        .ok_or_else(|| {
            let known: Vec<String> = links
                .iter()
                .map(|l| match &l.name {
                    Some(name) => format!("{name} ({})", l.task_id),
                    None => l.task_id.clone(),
                })
                .collect();
            if known.is_empty() {
                format!("there is no task {key:?}: this conversation has delegated nothing yet")
            } else {
                format!(
                    "there is no task {key:?}; the tasks of this conversation are: {}",
                    known.join(", ")
                )
            }
        })
}

/// The current state of a child of `children`, from the agent that runs it.
pub(crate) async fn fetch_child(
    directory: &Directory,
    children: &Children,
    link: &ChildLink,
) -> Result<(Resolved, Task), String> {
    let resolved = directory.resolve(&link.agent).await?;
    let request = GetTaskRequest {
        id: TaskId::from(link.task_id.as_str()),
        history_length: Some(0),
        ..GetTaskRequest::default()
    };
    let task = resolved
        .agent
        .get_task(&call_for(Some(children)), request)
        .await
        .map_err(|e| format!("cannot get task {} from {}: {e}", link.task_id, link.agent))?;
    Ok((resolved, task))
}

/// Gives the user's reply to a delegated task that asked a permission question, and
/// follows the task again (in the foreground) to its next answer.
async fn pass_reply(
    directory: &Directory,
    ctx: &ToolContext,
    task: &str,
    reply: &str,
) -> ToolOutput {
    let Some(children) = super::scope::children(ctx) else {
        return ToolOutput::error("replies reach delegated tasks only inside a task");
    };
    let link = match find_child(children, task).await {
        Ok(link) => link,
        Err(e) => return ToolOutput::error(e),
    };
    let resolved = match directory.resolve(&link.agent).await {
        Ok(resolved) => resolved,
        Err(e) => return ToolOutput::error(e),
    };
    let mut message = Message::user_text(reply);
    message.task_id = Some(TaskId::from(link.task_id.as_str()));
    let mut request = SendMessageRequest::new(message);
    request.metadata = Some(link_metadata(ctx, &link.description, false));
    let delegation = Delegation {
        agent: resolved.agent,
        start: Start::Send(request),
        link: ChildLink {
            background: false,
            ..link
        },
        background: false,
    };
    delegate(ctx, delegation).await
}

/// The `SendMessage` tool: continues a delegated task by name or id.
pub(crate) struct SendMessageTool {
    pub(crate) directory: Arc<Directory>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SendInput {
    to: String,
    message: String,
    #[serde(default)]
    run_in_background: bool,
}

#[async_trait]
impl Tool for SendMessageTool {
    fn name(&self) -> &str {
        "SendMessage"
    }

    fn description(&self) -> String {
        "Sends a message to a task you delegated earlier in this conversation (by its name or \
         task id) and returns its answer. A task that asked a question gets your reply; a \
         finished task continues in its own conversation with the new message. A task that is \
         still running cannot take messages: wait for it, or stop it with TaskStop."
            .to_owned()
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "to": {"type": "string", "description": "The task's name or id."},
                "message": {"type": "string", "description": "What to tell it."},
                "run_in_background": {"type": "boolean", "description": "Return at once; a notification follows when the task ends."}
            },
            "required": ["to", "message"],
            "additionalProperties": false
        })
    }

    fn category(&self) -> Category {
        Category::Delegate
    }

    async fn answer(&self, task: &str, reply: &str, ctx: &ToolContext) -> ToolOutput {
        pass_reply(&self.directory, ctx, task, reply).await
    }

    async fn reattach(&self, ctx: &ToolContext) -> Option<ToolOutput> {
        reattach(&self.directory, ctx).await
    }

    async fn call(&self, input: Value, ctx: &ToolContext) -> ToolOutput {
        let input: SendInput = match serde_json::from_value(input) {
            Ok(input) => input,
            Err(e) => return ToolOutput::error(format!("invalid input for SendMessage: {e}")),
        };
        let Some(children) = super::scope::children(ctx) else {
            return ToolOutput::error("SendMessage works only inside a task");
        };
        let link = match find_child(children, input.to.trim()).await {
            Ok(link) => link,
            Err(e) => return ToolOutput::error(e),
        };
        let (resolved, task) = match fetch_child(&self.directory, children, &link).await {
            Ok(found) => found,
            Err(e) => return ToolOutput::error(e),
        };
        if asks_permission(&task) {
            // The model may not answer it: the question goes to the user.
            return relay_of(&task, &link.agent);
        }
        let mut message = Message::user_text(input.message);
        let state = task.status.state;
        if state.is_interrupted() {
            message.task_id = Some(task.id.clone());
        } else if state.is_terminal() {
            message.context_id = Some(ContextId::from(task.context_id.as_str()));
        } else {
            return ToolOutput::error(format!(
                "task {} ({}) is still {state}: it takes messages once it ends or asks; wait for \
                 its notification, or stop it with TaskStop",
                link.task_id,
                link.name.as_deref().unwrap_or(&link.description)
            ));
        }
        let mut request = SendMessageRequest::new(message);
        request.metadata = Some(link_metadata(ctx, &link.description, false));
        let link = ChildLink {
            task_id: String::new(),
            background: input.run_in_background,
            ..link
        };
        let delegation = Delegation {
            agent: resolved.agent,
            start: Start::Send(request),
            link,
            background: input.run_in_background,
        };
        delegate(ctx, delegation).await
    }
}
