//! `RoleAgent`: one role of the node as an `AgentTransport`, backed by the task manager.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use mew_cards::mew::MewMetadata;
use mew_cards::{
    AgentCard, CancelTaskRequest, ErrorKind, GetExtendedAgentCardRequest, GetTaskRequest,
    ListTasksRequest, ListTasksResponse, RoleDefinition, SendMessageRequest, SendMessageResponse,
    SubscribeToTaskRequest, Task,
};
use mew_transport::{AgentTransport, CallContext, Error, EventStream, collect_send};

use crate::agent::delegate::Forker;
use crate::hooks::{HookContext, HookDispatcher, HookEvent, Payload};
use crate::tasks::manager::{Scope, Submission, TaskManager};

/// A role served as an A2A agent. The node's front agent is one too: it runs
/// the default role and sees every task on the node; a role's own agent sees
/// only that role's tasks.
pub(crate) struct RoleAgent {
    manager: Arc<TaskManager>,
    role: Arc<RoleDefinition>,
    card: AgentCard,
    /// `None` for the front agent.
    scope_role: Option<String>,
    /// Push notifications: `None` answers PushNotificationNotSupported.
    push: Option<crate::push::Webhooks>,
    /// The node's hooks: `TaskReceived` runs before a new task starts.
    hooks: Option<Arc<HookDispatcher>>,
    /// The directory hooks run in (the project).
    hook_cwd: PathBuf,
    /// The card `GetExtendedAgentCard` answers authenticated callers with (`auth.extended_card`).
    extended_card: Option<AgentCard>,
}

impl RoleAgent {
    /// The definition of the role it runs (for the front agent, the default role).
    pub(crate) fn definition(&self) -> &Arc<RoleDefinition> {
        &self.role
    }

    /// The agent of `role` alone.
    pub(crate) fn role(
        manager: Arc<TaskManager>,
        role: Arc<RoleDefinition>,
        card: AgentCard,
    ) -> Self {
        let scope_role = Some(role.name.clone());
        Self {
            manager,
            role,
            card,
            scope_role,
            hooks: None,
            hook_cwd: PathBuf::new(),
            push: None,
            extended_card: None,
        }
    }

    /// The node's front agent: runs `default_role`, sees every task.
    pub(crate) fn front(
        manager: Arc<TaskManager>,
        default_role: Arc<RoleDefinition>,
        card: AgentCard,
    ) -> Self {
        Self {
            manager,
            role: default_role,
            card,
            scope_role: None,
            hooks: None,
            hook_cwd: PathBuf::new(),
            push: None,
            extended_card: None,
        }
    }

    /// Runs `hooks`'s `TaskReceived` hooks, in `cwd`, before each new task.
    #[must_use]
    pub(crate) fn with_hooks(mut self, hooks: Arc<HookDispatcher>, cwd: PathBuf) -> Self {
        self.hooks = Some(hooks);
        self.hook_cwd = cwd;
        self
    }

    /// The public card, signed.
    pub(crate) fn public_card(&self) -> &AgentCard {
        &self.card
    }

    /// Answers `GetExtendedAgentCard` with `card` (to authenticated callers only).
    #[must_use]
    pub(crate) fn with_extended_card(mut self, card: Option<AgentCard>) -> Self {
        self.extended_card = card;
        self
    }

    /// Takes push notification configs, checking webhooks with `webhooks`.
    #[must_use]
    pub(crate) fn with_push(mut self, webhooks: crate::push::Webhooks) -> Self {
        self.push = Some(webhooks);
        self
    }

    fn webhooks(&self) -> Result<&crate::push::Webhooks, Error> {
        self.push.as_ref().ok_or_else(|| {
            Error::protocol(
                ErrorKind::PushNotificationNotSupported,
                "push notifications are not supported",
            )
        })
    }

    /// Takes the inline push config out of `request`, checked. For a message that continues a
    /// task it is saved for that task at once; for a new task it is returned, to be
    /// registered before the task's first event.
    async fn inline_push(
        &self,
        ctx: &CallContext,
        request: &mut SendMessageRequest,
    ) -> Result<Option<mew_cards::TaskPushNotificationConfig>, Error> {
        let Some(config) = request
            .configuration
            .as_mut()
            .and_then(|c| c.task_push_notification_config.take())
        else {
            return Ok(None);
        };
        let config = self.webhooks()?.accept(config).await?;
        match request.message.task_id.clone() {
            Some(task_id) => {
                let config = mew_cards::TaskPushNotificationConfig { task_id, ..config };
                self.manager
                    .set_push_config(config, &self.scope(ctx))
                    .await?;
                Ok(None)
            }
            None => Ok(Some(config)),
        }
    }

    fn scope(&self, ctx: &CallContext) -> Scope {
        Scope {
            role: self.scope_role.clone(),
            owner: ctx.principal.clone(),
        }
    }

    async fn submit(
        &self,
        ctx: &CallContext,
        request: SendMessageRequest,
    ) -> Result<(Task, EventStream), Error> {
        if request.history_length().is_some_and(|n| n < 0) {
            return Err(Error::protocol(
                ErrorKind::InvalidParams,
                "historyLength must not be negative",
            ));
        }
        let mut request = request;
        let push = self.inline_push(ctx, &mut request).await?;
        let mut submission = self.submission(ctx, request, serde_json::Value::Null)?;
        submission.push = push;
        // Another principal's context is refused before any hook hears of it.
        if submission.message.task_id.is_none()
            && let Some(context) = &submission.message.context_id
        {
            self.manager
                .check_context(context, submission.owner.as_deref())
                .await?;
        }
        let submitted = match self.task_received(&mut submission).await {
            Some(reason) => self.manager.reject(submission, &reason).await,
            None => self.manager.submit(submission, &self.scope(ctx)).await,
        };
        if let Ok((task, _)) = &submitted {
            super::observe::record_task(&task.id);
        }
        submitted
    }

    /// Dispatches `TaskReceived` when `submission` starts a new task and a hook listens;
    /// returns the reason when a hook refuses the task. The session is the message's context,
    /// which is given a fresh id first when it has none, and the hook is told the id the task
    /// will have (the task keeps both).
    async fn task_received(&self, submission: &mut Submission) -> Option<String> {
        let hooks = self.hooks.as_ref()?;
        if submission.message.task_id.is_some() || !hooks.listens_to(HookEvent::TaskReceived) {
            return None;
        }
        let task_id = submission
            .id
            .get_or_insert_with(mew_cards::TaskId::generate)
            .clone();
        let message = &mut submission.message;
        let context_id = message
            .context_id
            .get_or_insert_with(mew_cards::ContextId::generate)
            .clone();
        let ctx = match HookContext::new(context_id.as_str(), &self.hook_cwd) {
            Ok(ctx) => ctx,
            Err(e) => {
                tracing::warn!("TaskReceived hooks skipped: {e}");
                return None;
            }
        };
        let payload = Payload::task_received(
            task_id.as_str(),
            context_id.as_str(),
            &self.role.name,
            &message.text(),
        );
        let outcome = hooks.dispatch(payload, &ctx).await;
        for error in &outcome.errors {
            tracing::warn!(role = %self.role.name, "TaskReceived: {error}");
        }
        // A block or a deny refuses the task; so does `continue: false` (nothing may run).
        let (hook, reason) = match (outcome.refusal(), &outcome.stop) {
            (Some((hook, reason)), _) => (hook, reason),
            (None, Some(reason)) => ("", reason.as_str()),
            (None, None) => return None,
        };
        tracing::info!(role = %self.role.name, hook, "a hook rejected a task: {reason}");
        Some(match (reason.trim().is_empty(), hook.is_empty()) {
            (false, _) => reason.to_owned(),
            (true, false) => format!("the task was rejected by hook `{hook}`"),
            (true, true) => "the task was rejected by a hook".to_owned(),
        })
    }

    /// Submits `request`; a new task's runner starts from `private`.
    async fn submit_with(
        &self,
        ctx: &CallContext,
        request: SendMessageRequest,
        private: serde_json::Value,
    ) -> Result<(Task, EventStream), Error> {
        let submission = self.submission(ctx, request, private)?;
        self.manager.submit(submission, &self.scope(ctx)).await
    }

    /// Checks `request` and makes it a submission; a new task's runner starts from `private`.
    fn submission(
        &self,
        ctx: &CallContext,
        request: SendMessageRequest,
        private: serde_json::Value,
    ) -> Result<Submission, Error> {
        if request.history_length().is_some_and(|n| n < 0) {
            return Err(Error::protocol(
                ErrorKind::InvalidParams,
                "historyLength must not be negative",
            ));
        }
        if request
            .configuration
            .as_ref()
            .is_some_and(|c| c.task_push_notification_config.is_some())
        {
            return Err(Error::protocol(
                ErrorKind::InvalidParams,
                "this message cannot carry a push notification config",
            ));
        }
        // What the node itself records about a task is never taken from a caller: forged
        // links would send the task's agent to agents of the caller's choosing.
        let mut request = request;
        if let Some(metadata) = request.metadata.as_mut() {
            MewMetadata::strip_node_owned(metadata);
        }
        // A delegating agent names its task in `mew.parentTask`: the link of a task tree,
        // local or across nodes.
        let parent = MewMetadata::read(request.metadata.as_ref()).parent_task;
        Ok(Submission {
            role: self.role.clone(),
            message: request.message,
            owner: ctx.principal.clone(),
            parent,
            metadata: request.metadata,
            private,
            push: None,
            id: None,
        })
    }
}

#[async_trait]
impl Forker for RoleAgent {
    async fn fork(
        &self,
        ctx: &CallContext,
        request: SendMessageRequest,
        private: serde_json::Value,
    ) -> Result<EventStream, Error> {
        Ok(self.submit_with(ctx, request, private).await?.1)
    }
}

/// `stream` up to and with the first status update whose message says the task waits for a
/// slot (`mew.waiting`): a blocking send returns the task there, still SUBMITTED, with a status
/// message saying why, rather than holding its caller without a word. The task runs later;
/// the caller follows it with GetTask or SubscribeToTask.
fn until_it_waits(stream: EventStream) -> EventStream {
    use futures_util::StreamExt;
    // Unfolded rather than scanned: the stream ends without waiting for another event.
    EventStream::new(futures_util::stream::unfold(
        (stream, false),
        |(mut stream, done)| async move {
            if done {
                return None;
            }
            let event = stream.next().await?;
            let waits = match &event {
                Ok(mew_cards::StreamResponse::StatusUpdate(update)) => update
                    .status
                    .message
                    .as_ref()
                    .is_some_and(|m| MewMetadata::read(m.metadata.as_ref()).waiting.is_some()),
                _ => false,
            };
            Some((event, (stream, waits)))
        },
    ))
}

#[async_trait]
impl AgentTransport for RoleAgent {
    async fn card(&self) -> Result<AgentCard, Error> {
        Ok(self.card.clone())
    }

    /// The extended card, to an authenticated caller only: an anonymous one (a node without
    /// `auth:` never has an extended card; with it, the server refuses anonymous calls first)
    /// is told there is none.
    async fn get_extended_agent_card(
        &self,
        ctx: &CallContext,
        _request: GetExtendedAgentCardRequest,
    ) -> Result<AgentCard, Error> {
        match (&self.extended_card, &ctx.principal) {
            (Some(card), Some(_)) => Ok(card.clone()),
            _ => Err(Error::protocol(
                ErrorKind::ExtendedAgentCardNotConfigured,
                "this agent has no extended card for this caller",
            )),
        }
    }

    async fn send_message(
        &self,
        ctx: &CallContext,
        request: SendMessageRequest,
    ) -> Result<SendMessageResponse, Error> {
        let history_length = request.history_length();
        let return_immediately = request.return_immediately();
        let (task, stream) = self.submit(ctx, request).await?;
        let response = if return_immediately {
            SendMessageResponse::Task(task)
        } else {
            collect_send(until_it_waits(stream), false).await?
        };
        Ok(match response {
            SendMessageResponse::Task(mut task) => {
                task.truncate_history(history_length);
                SendMessageResponse::Task(task)
            }
            message => message,
        })
    }

    async fn send_streaming_message(
        &self,
        ctx: &CallContext,
        request: SendMessageRequest,
    ) -> Result<EventStream, Error> {
        Ok(self.submit(ctx, request).await?.1)
    }

    async fn get_task(&self, ctx: &CallContext, request: GetTaskRequest) -> Result<Task, Error> {
        if request.history_length.is_some_and(|n| n < 0) {
            return Err(Error::protocol(
                ErrorKind::InvalidParams,
                "historyLength must not be negative",
            ));
        }
        super::observe::record_task(&request.id);
        let mut task = self.manager.get(&request.id, &self.scope(ctx)).await?.task;
        task.truncate_history(request.history_length);
        Ok(task)
    }

    async fn list_tasks(
        &self,
        ctx: &CallContext,
        request: ListTasksRequest,
    ) -> Result<ListTasksResponse, Error> {
        self.manager.list(&request, &self.scope(ctx)).await
    }

    async fn cancel_task(
        &self,
        ctx: &CallContext,
        request: CancelTaskRequest,
    ) -> Result<Task, Error> {
        super::observe::record_task(&request.id);
        self.manager.cancel(&request.id, &self.scope(ctx)).await
    }

    async fn subscribe_to_task(
        &self,
        ctx: &CallContext,
        request: SubscribeToTaskRequest,
    ) -> Result<EventStream, Error> {
        super::observe::record_task(&request.id);
        self.manager
            .subscribe(&request.id, &self.scope(ctx), ctx.last_event_id)
            .await
    }

    async fn create_task_push_notification_config(
        &self,
        ctx: &CallContext,
        request: mew_cards::TaskPushNotificationConfig,
    ) -> Result<mew_cards::TaskPushNotificationConfig, Error> {
        if request.task_id.as_str().is_empty() {
            return Err(Error::protocol(
                ErrorKind::InvalidParams,
                "taskId is required",
            ));
        }
        let config = self.webhooks()?.accept(request).await?;
        self.manager.set_push_config(config, &self.scope(ctx)).await
    }

    async fn get_task_push_notification_config(
        &self,
        ctx: &CallContext,
        request: mew_cards::GetTaskPushNotificationConfigRequest,
    ) -> Result<mew_cards::TaskPushNotificationConfig, Error> {
        self.webhooks()?;
        self.manager
            .get_push_config(&request.task_id, &request.id, &self.scope(ctx))
            .await
    }

    async fn list_task_push_notification_configs(
        &self,
        ctx: &CallContext,
        request: mew_cards::ListTaskPushNotificationConfigsRequest,
    ) -> Result<mew_cards::ListTaskPushNotificationConfigsResponse, Error> {
        self.webhooks()?;
        self.manager
            .list_push_configs(
                &request.task_id,
                request.page_size,
                &request.page_token,
                &self.scope(ctx),
            )
            .await
    }

    async fn delete_task_push_notification_config(
        &self,
        ctx: &CallContext,
        request: mew_cards::GetTaskPushNotificationConfigRequest,
    ) -> Result<(), Error> {
        self.webhooks()?;
        self.manager
            .delete_push_config(&request.task_id, &request.id, &self.scope(ctx))
            .await
    }
}

#[cfg(test)]
mod tests {
    use mew_cards::{
        Artifact, Message, Part, RoleSource, SendMessageRequest, SendMessageResponse, TaskState,
        parse_role,
    };
    use mew_transport::{AgentTransport, CallContext};

    use super::*;
    use crate::hooks::{HookSettings, TrustStore, load, standard_files};
    use crate::tasks::executor::{EventSink, ExecError, Executor, Turn};
    use crate::tasks::manager::{Limits, Roles};
    use crate::tasks::sqlite::SqliteStore;
    use crate::tasks::store::TaskStore;

    /// Answers every turn with one artifact.
    struct Answer;

    #[async_trait]
    impl Executor for Answer {
        async fn run(&self, _turn: Turn, sink: Arc<dyn EventSink>) -> Result<(), ExecError> {
            sink.artifact(
                Artifact::new("answer", vec![Part::text("ok")]),
                false,
                false,
            )
            .await
            .map_err(|_| ExecError("closed".into()))
        }
    }

    struct OneRole(Arc<RoleDefinition>);

    impl Roles for OneRole {
        fn role(&self, name: &str) -> Option<Arc<RoleDefinition>> {
            (name == self.0.name).then(|| self.0.clone())
        }

        fn executor(&self, _: &RoleDefinition) -> Arc<dyn Executor> {
            Arc::new(Answer)
        }
    }

    const GATE: &str = "hooks:\n  - name: gate\n    event: TaskReceived\n    if:\n      \
                        all_of:\n        - {field: prompt, match: 're:forbidden'}\n        \
                        - {field: role, match: helper}\n    action:\n      type: shell\n      \
                        command: \"echo 'not this topic' >&2; exit 2\"\n  \
                        - name: halt\n    event: TaskReceived\n    \
                        if: {all_of: [{field: prompt, match: 're:^halt'}]}\n    \
                        action:\n      type: shell\n      \
                        command: \"echo '{\\\"continue\\\": false, \\\"stopReason\\\": \\\"closed\\\"}'\"\n";

    /// The agent of role `helper`, with a user hook rejecting messages about "forbidden".
    async fn agent(dir: &std::path::Path) -> RoleAgent {
        let home = dir.join("home");
        let project = dir.join("project");
        std::fs::create_dir_all(home.join(".mew")).unwrap();
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(home.join(".mew/hooks.yaml"), GATE).unwrap();
        let loaded = load(
            &standard_files(Some(&home), &project),
            &TrustStore::default(),
        );
        assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
        let settings = HookSettings {
            project_dir: project.clone(),
            ..HookSettings::default()
        };
        let hooks = Arc::new(HookDispatcher::new(loaded.rules, settings).unwrap());
        let text = "---\nname: helper\ndescription: helps\ncommand: [true]\n---\n";
        let role = Arc::new(
            parse_role(text, "helper.md", RoleSource::Project)
                .unwrap()
                .definition,
        );
        let store: Arc<dyn TaskStore> = Arc::new(SqliteStore::open(&dir.join("tasks.db")).unwrap());
        let manager = TaskManager::start(store, Arc::new(OneRole(role.clone())), Limits::default())
            .await
            .unwrap();
        RoleAgent::role(manager, role, AgentCard::default()).with_hooks(hooks, project)
    }

    async fn send(agent: &RoleAgent, message: Message) -> Result<Task, Error> {
        let request = SendMessageRequest::new(message);
        match agent.send_message(&CallContext::default(), request).await? {
            SendMessageResponse::Task(task) => Ok(task),
            other => panic!("expected a task, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_task_received_hook_rejects_a_new_task_with_its_reason() {
        let dir = tempfile::tempdir().unwrap();
        let agent = agent(dir.path()).await;

        let rejected = send(&agent, Message::user_text("the forbidden topic"))
            .await
            .unwrap();
        assert_eq!(rejected.status.state, TaskState::Rejected);
        let reason = rejected.status.message.as_ref().unwrap();
        assert_eq!(reason.text(), "not this topic");
        assert_eq!(reason.task_id.as_ref(), Some(&rejected.id));
        assert_eq!(rejected.history[0].text(), "the forbidden topic");
        // Stored as it was answered.
        let stored = agent
            .get_task(
                &CallContext::default(),
                GetTaskRequest {
                    id: rejected.id.clone(),
                    ..GetTaskRequest::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(stored.status.state, TaskState::Rejected);

        // A message in a context keeps it.
        let mut in_context = Message::user_text("forbidden again");
        in_context.context_id = Some(rejected.context_id.clone());
        let again = send(&agent, in_context).await.unwrap();
        assert_eq!(again.status.state, TaskState::Rejected);
        assert_eq!(again.context_id, rejected.context_id);
        assert_ne!(again.id, rejected.id);

        let halted = send(&agent, Message::user_text("halt now")).await.unwrap();
        assert_eq!(halted.status.state, TaskState::Rejected);
        assert_eq!(halted.status.message.as_ref().unwrap().text(), "closed");

        let accepted = send(&agent, Message::user_text("something else"))
            .await
            .unwrap();
        assert_eq!(accepted.status.state, TaskState::Completed);

        // A message to an existing task is not a new task: no hook, the task's own answer.
        let mut follow_up = Message::user_text("forbidden follow-up");
        follow_up.task_id = Some(accepted.id.clone());
        let error = send(&agent, follow_up).await.unwrap_err();
        assert!(
            error.to_string().contains("takes no more messages"),
            "{error}"
        );
    }
}
