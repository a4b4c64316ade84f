//! `FixedAgent`: the ceiling's fixed answer, made through `mew-transport`, for benchmarks.
//!
//! The ceiling (`bare-axum`) answers every request with one constant body. This agent gives the
//! same answer, a COMPLETED task with the message's text as its artifact, but through everything
//! `mew_transport::router` does for an agent: the binding's parsing and checks, the message's
//! validation, the dispatch to an `AgentTransport`, and the encoding of a real task (fresh ids,
//! a timestamp, the caller's message in its history). It keeps no task and runs no work, so set
//! beside the ceiling it measures the transport alone, and beside `EchoAgent` what an agent's task
//! machinery adds.

use async_trait::async_trait;
use mew_cards::{
    A2aError, AgentCard, Artifact, CancelTaskRequest, GetTaskRequest, ListTasksRequest,
    ListTasksResponse, Part, SendMessageRequest, SendMessageResponse, StreamResponse,
    SubscribeToTaskRequest, Task, TaskState, TaskStatus,
};
use mew_transport::{AgentTransport, CallContext, Error, EventStream};

use crate::EchoAgent;
use crate::echo;

/// An agent that completes every message at once and remembers nothing.
#[derive(Debug, Clone)]
pub struct FixedAgent {
    card: AgentCard,
}

impl FixedAgent {
    /// A fixed agent whose card points both bindings at `base_url`.
    pub fn new(base_url: &str) -> Self {
        let mut card = EchoAgent::default_card(base_url);
        card.name = "fixed".to_owned();
        card.description =
            "Completes every message at once with its text; keeps no task.".to_owned();
        card.capabilities.push_notifications = Some(false);
        Self { card }
    }

    /// The completed task that answers `request`.
    fn answer(request: SendMessageRequest) -> Result<Task, A2aError> {
        // The echo agent's checks, so that both refuse the same requests.
        let history_length = echo::checked_history(request.history_length())?;
        let mut message = request.message;
        echo::validate(&message)?;
        if let Some(id) = &message.task_id {
            // It keeps no task, so there is none to continue.
            return Err(A2aError::task_not_found(id));
        }
        let text = message
            .parts
            .iter()
            .find_map(Part::as_text)
            .ok_or_else(|| A2aError::invalid_params("message.parts must hold a text part"))?;
        let text = text.strip_prefix("echo ").unwrap_or(text).to_owned();
        let (id, context_id) = echo::new_task_ids(&mut message);
        let mut task = Task {
            id,
            context_id,
            status: TaskStatus::new(TaskState::Completed),
            artifacts: vec![Artifact::new("echo", vec![Part::text(text)])],
            history: vec![message],
            metadata: None,
        };
        task.truncate_history(history_length);
        Ok(task)
    }
}

#[async_trait]
impl AgentTransport for FixedAgent {
    async fn card(&self) -> Result<AgentCard, Error> {
        Ok(self.card.clone())
    }

    async fn send_message(
        &self,
        _ctx: &CallContext,
        request: SendMessageRequest,
    ) -> Result<SendMessageResponse, Error> {
        Ok(SendMessageResponse::Task(Self::answer(request)?))
    }

    async fn send_streaming_message(
        &self,
        _ctx: &CallContext,
        request: SendMessageRequest,
    ) -> Result<EventStream, Error> {
        let task = Self::answer(request)?;
        Ok(EventStream::once(Ok(StreamResponse::Task(task))))
    }

    async fn get_task(&self, _ctx: &CallContext, request: GetTaskRequest) -> Result<Task, Error> {
        Err(A2aError::task_not_found(&request.id).into())
    }

    async fn list_tasks(
        &self,
        _ctx: &CallContext,
        request: ListTasksRequest,
    ) -> Result<ListTasksResponse, Error> {
        Ok(ListTasksResponse {
            page_size: request.page_size.unwrap_or(mew_cards::DEFAULT_PAGE_SIZE),
            ..ListTasksResponse::default()
        })
    }

    async fn cancel_task(
        &self,
        _ctx: &CallContext,
        request: CancelTaskRequest,
    ) -> Result<Task, Error> {
        Err(A2aError::task_not_found(&request.id).into())
    }

    async fn subscribe_to_task(
        &self,
        _ctx: &CallContext,
        request: SubscribeToTaskRequest,
    ) -> Result<EventStream, Error> {
        Err(A2aError::task_not_found(&request.id).into())
    }
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;
    use mew_cards::{ErrorKind, Message, Role, SendMessageConfiguration, TaskId};

    use super::*;

    fn send(text: &str) -> SendMessageRequest {
        SendMessageRequest {
            message: Message::user_text(text),
            ..SendMessageRequest::default()
        }
    }

    fn kind<T: std::fmt::Debug>(result: Result<T, Error>) -> ErrorKind {
        result.unwrap_err().kind().unwrap()
    }

    #[tokio::test]
    async fn every_message_completes_at_once_with_its_text() {
        let agent = FixedAgent::new("http://127.0.0.1:8080");
        let ctx = CallContext::anonymous();
        let SendMessageResponse::Task(task) =
            agent.send_message(&ctx, send("echo hello")).await.unwrap()
        else {
            panic!("a task was expected");
        };
        assert_eq!(task.status.state, TaskState::Completed);
        assert_eq!(task.artifacts.len(), 1);
        assert_eq!(task.artifacts[0].parts[0].as_text(), Some("hello"));
        assert_eq!(task.history.len(), 1);
        assert_eq!(task.history[0].task_id.as_ref(), Some(&task.id));
        assert_eq!(task.history[0].context_id.as_ref(), Some(&task.context_id));

        let mut stream = agent
            .send_streaming_message(&ctx, send("plain"))
            .await
            .unwrap();
        let Some(Ok(StreamResponse::Task(streamed))) = stream.next().await else {
            panic!("a task snapshot was expected");
        };
        assert_eq!(streamed.status.state, TaskState::Completed);
        assert_eq!(streamed.artifacts[0].parts[0].as_text(), Some("plain"));
        assert!(stream.next().await.is_none());
        assert_ne!(streamed.id, task.id);

        let mut no_history = send("echo hi");
        no_history.configuration = Some(SendMessageConfiguration {
            history_length: Some(0),
            ..SendMessageConfiguration::default()
        });
        let SendMessageResponse::Task(task) = agent.send_message(&ctx, no_history).await.unwrap()
        else {
            panic!("a task was expected");
        };
        assert!(task.history.is_empty());
    }

    #[tokio::test]
    async fn it_refuses_what_it_cannot_answer_and_keeps_nothing() {
        let agent = FixedAgent::new("http://127.0.0.1:8080");
        let ctx = CallContext::anonymous();
        let mut no_id = send("echo hello");
        no_id.message.message_id = mew_cards::MessageId::from("");
        assert_eq!(
            kind(agent.send_message(&ctx, no_id).await),
            ErrorKind::InvalidParams
        );
        let mut agent_role = send("echo hello");
        agent_role.message.role = Role::Agent;
        assert_eq!(
            kind(agent.send_message(&ctx, agent_role).await),
            ErrorKind::InvalidParams
        );
        let mut no_text = send("echo hello");
        no_text.message.parts.clear();
        assert_eq!(
            kind(agent.send_message(&ctx, no_text).await),
            ErrorKind::InvalidParams
        );
        let mut follow_up = send("echo hello");
        follow_up.message.task_id = Some(TaskId::from("earlier"));
        assert_eq!(
            kind(agent.send_message(&ctx, follow_up).await),
            ErrorKind::TaskNotFound
        );
        let SendMessageResponse::Task(task) =
            agent.send_message(&ctx, send("echo hello")).await.unwrap()
        else {
            panic!("a task was expected");
        };
        let get = GetTaskRequest {
            id: task.id.clone(),
            ..GetTaskRequest::default()
        };
        assert_eq!(
            kind(agent.get_task(&ctx, get).await),
            ErrorKind::TaskNotFound
        );
        let page = agent
            .list_tasks(&ctx, ListTasksRequest::default())
            .await
            .unwrap();
        assert_eq!((page.tasks.len(), page.total_size), (0, 0));
        let card = agent.card().await.unwrap();
        assert_eq!(
            (card.name.as_str(), card.capabilities.push_notifications),
            ("fixed", Some(false))
        );
    }
}
