//! `RoleAgent`: one role of the node as an `AgentTransport`, backed by the task manager.

use std::sync::Arc;

use async_trait::async_trait;
use mew_cards::{
    AgentCard, CancelTaskRequest, ErrorKind, GetTaskRequest, ListTasksRequest, ListTasksResponse,
    RoleDefinition, SendMessageRequest, SendMessageResponse, SubscribeToTaskRequest, Task,
};
use mew_transport::{AgentTransport, CallContext, Error, EventStream, collect_send};

use crate::agent::delegate::Forker;
use crate::tasks::manager::{Scope, Submission, TaskManager};

/// The keys of a task's `metadata.mew` that only the node writes: its children
/// (`crate::agent::children`) and its usage (`crate::agent::runner`).
const NODE_OWNED_KEYS: &[&str] = &["children", "usage"];

/// A role served as an A2A agent. The node's front agent is one too: it runs
/// the default role and sees every task on the node; a role's own agent sees
/// only that role's tasks.
pub(crate) struct RoleAgent {
    manager: Arc<TaskManager>,
    role: Arc<RoleDefinition>,
    card: AgentCard,
    /// `None` for the front agent.
    scope_role: Option<String>,
}

impl RoleAgent {
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
        self.submit_with(ctx, request, serde_json::Value::Null)
            .await
    }

    /// Submits `request`; a new task's runner starts from `private`.
    async fn submit_with(
        &self,
        ctx: &CallContext,
        request: SendMessageRequest,
        private: serde_json::Value,
    ) -> Result<(Task, EventStream), Error> {
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
                ErrorKind::PushNotificationNotSupported,
                "this node does not send push notifications yet",
            ));
        }
        // What the node itself records about a task is never taken from a caller: forged
        // links would send the task's agent to agents of the caller's choosing.
        let mut request = request;
        if let Some(mew) = request
            .metadata
            .as_mut()
            .and_then(|m| m.get_mut("mew"))
            .and_then(serde_json::Value::as_object_mut)
        {
            for key in NODE_OWNED_KEYS {
                mew.remove(*key);
            }
        }
        // A delegating agent names its task in `mew.parentTask`: the link of a task tree,
        // local or across nodes.
        let parent = request
            .metadata
            .as_ref()
            .and_then(|m| m.get("mew"))
            .and_then(|mew| mew.get("parentTask"))
            .and_then(serde_json::Value::as_str)
            .map(mew_cards::TaskId::from);
        let submission = Submission {
            role: self.role.clone(),
            message: request.message,
            owner: ctx.principal.clone(),
            parent,
            metadata: request.metadata,
            private,
        };
        self.manager.submit(submission, &self.scope(ctx)).await
    }
}

#[async_trait]
impl Forker for RoleAgent {
    async fn fork(
        &self,
        request: SendMessageRequest,
        private: serde_json::Value,
    ) -> Result<EventStream, Error> {
        Ok(self
            .submit_with(&CallContext::default(), request, private)
            .await?
            .1)
    }
}

#[async_trait]
impl AgentTransport for RoleAgent {
    async fn card(&self) -> Result<AgentCard, Error> {
        Ok(self.card.clone())
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
            collect_send(stream, false).await?
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
        self.manager.cancel(&request.id, &self.scope(ctx)).await
    }

    async fn subscribe_to_task(
        &self,
        ctx: &CallContext,
        request: SubscribeToTaskRequest,
    ) -> Result<EventStream, Error> {
        self.manager.subscribe(&request.id, &self.scope(ctx)).await
    }
}
