//! The runner of `subagent` hooks: the named role of this node answers the hook's prompt,
//! given the event's payload.
//!
//! The child is an ordinary task of the role, started as deep as delegation may go (at least 1),
//! so it never gets the `Agent` tool. Its final answer goes back to
//! the hook dispatcher, which adds it as context and reads a JSON decision in it. When the hook
//! times out or its run is canceled, the runner's future is dropped and the child is canceled.

use std::sync::Arc;

use async_trait::async_trait;
use futures_util::StreamExt;
use mew_cards::{
    CancelTaskRequest, Message, SendMessageRequest, StreamResponse, TaskId, TaskState,
};
use mew_transport::{AgentTransport, CallContext};
use serde_json::Value;

use super::delegate::{Directory, result_text};
use crate::hooks::SubagentRunner;

/// Runs `subagent` hooks with this node's roles.
pub(crate) struct HookSubagents {
    /// Where the roles are found (local roles only).
    pub(crate) directory: Arc<Directory>,
    /// The delegation depth the child starts at: `agent.max_depth` (at least 1), where no
    /// tool that delegates is offered.
    pub(crate) depth: u32,
}

impl HookSubagents {
    /// A runner of the roles in `directory`; children start at depth `max_depth` (at least 1).
    pub(crate) fn new(directory: Arc<Directory>, max_depth: u32) -> Self {
        Self {
            directory,
            depth: max_depth.max(1),
        }
    }
}

/// The child's message: the hook's prompt, then the payload as pretty JSON in a fenced block.
fn request_text(prompt: &str, payload: &Value) -> String {
    let payload = serde_json::to_string_pretty(payload).unwrap_or_else(|_| payload.to_string());
    format!("{prompt}\n\n```json\n{payload}\n```")
}

/// Cancels the child task when dropped, unless it ended.
struct CancelOnDrop {
    agent: Arc<dyn AgentTransport>,
    task: Option<TaskId>,
}

impl CancelOnDrop {
    /// The child ended: nothing to cancel.
    fn disarm(&mut self) {
        self.task = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.task.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let agent = self.agent.clone();
        runtime.spawn(async move {
            let request = CancelTaskRequest {
                id: id.clone(),
                ..CancelTaskRequest::default()
            };
            if let Err(err) = agent.cancel_task(&CallContext::default(), request).await {
                tracing::debug!(task = %id, "cannot cancel a subagent hook's task: {err}");
            }
        });
    }
}

#[async_trait]
impl SubagentRunner for HookSubagents {
    async fn run_subagent(
        &self,
        role: &str,
        prompt: &str,
        payload: &Value,
    ) -> Result<String, String> {
        if role.is_empty() || role.contains('/') || role.contains(':') {
            return Err(format!(
                "`{role}` is not a role of this node: a subagent hook runs a local role, named \
                 as in its role file"
            ));
        }
        let agent = self.directory.resolve(role).await?.agent;
        let mut request =
            SendMessageRequest::new(Message::user_text(request_text(prompt, payload)));
        request.metadata = Some(
            mew_cards::mew::MewMetadata {
                depth: Some(self.depth),
                description: Some("subagent hook".to_owned()),
                ..Default::default()
            }
            .to_metadata(),
        );
        let mut stream = agent
            .send_streaming_message(&CallContext::default(), request)
            .await
            .map_err(|err| format!("{role} refused the task: {err}"))?;
        let mut task = match stream.next().await {
            Some(Ok(StreamResponse::Task(task))) => task,
            Some(Ok(StreamResponse::Message(message))) => return Ok(message.text()),
            Some(Ok(_)) => return Err(format!("{role} answered without a task")),
            Some(Err(err)) => return Err(format!("{role} failed: {err}")),
            None => return Err(format!("{role} ended without a task")),
        };
        let mut guard = CancelOnDrop {
            agent: agent.clone(),
            task: Some(task.id.clone()),
        };
        while !task.status.state.ends_stream() {
            match stream.next().await {
                Some(Ok(StreamResponse::Task(snapshot))) => task = snapshot,
                Some(Ok(StreamResponse::Message(message))) => {
                    task.status.message = Some(message);
                }
                Some(Ok(event)) => task.apply(&event),
                Some(Err(err)) => return Err(format!("{role} (task {}) failed: {err}", task.id)),
                None => break,
            }
        }
        let state = task.status.state;
        if state.is_terminal() {
            guard.disarm();
        }
        let text = result_text(&task);
        if state == TaskState::Completed {
            Ok(text)
        } else {
            Err(format!("{role} (task {}) ended {state}: {text}", task.id))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};
    use std::time::Duration;

    use mew_cards::ListTasksRequest;
    use mew_tests::EchoAgent;
    use mew_transport::{ClientOptions, EventStream};
    use serde_json::json;

    use super::*;
    use crate::agent::delegate::{Forker, LocalRole};
    use crate::peers::Peers;

    struct NoFork;

    #[async_trait]
    impl Forker for NoFork {
        async fn fork(
            &self,
            _ctx: &CallContext,
            _request: SendMessageRequest,
            _private: Value,
        ) -> Result<EventStream, mew_transport::Error> {
            Err(mew_transport::Error::transport("no forks here"))
        }
    }

    /// A runner whose only local role, `echo`, is an [`EchoAgent`].
    async fn runner() -> (HookSubagents, Arc<EchoAgent>) {
        let echo = Arc::new(EchoAgent::new("http://127.0.0.1:9"));
        let peers = Peers::start(&BTreeMap::new(), &ClientOptions::default()).await;
        let directory = Arc::new(Directory::new(peers));
        directory.set_local(HashMap::from([(
            "echo".to_owned(),
            LocalRole {
                description: "Echoes.".to_owned(),
                agent: echo.clone(),
                forker: Arc::new(NoFork),
            },
        )]));
        (HookSubagents::new(directory, 1), echo)
    }

    #[test]
    fn the_request_is_the_prompt_then_the_payload_in_a_fence() {
        let text = request_text("Is this safe?", &json!({"tool_name": "Bash"}));
        assert_eq!(
            text,
            "Is this safe?\n\n```json\n{\n  \"tool_name\": \"Bash\"\n}\n```"
        );
    }

    #[tokio::test]
    async fn a_completed_child_answers_with_its_text() {
        let (runner, _echo) = runner().await;
        let answer = runner
            .run_subagent("echo", "echo looks fine", &json!({"tool_name": "Bash"}))
            .await
            .unwrap();
        assert!(answer.starts_with("looks fine"), "{answer}");
        assert!(answer.contains("\"tool_name\": \"Bash\""), "{answer}");
    }

    #[tokio::test]
    async fn a_child_that_does_not_complete_is_an_error_with_its_state() {
        let (runner, _echo) = runner().await;
        let err = runner
            .run_subagent("echo", "fail ", &json!({}))
            .await
            .unwrap_err();
        assert!(err.contains("failed on purpose"), "{err}");
        assert!(err.contains("ended"), "{err}");
    }

    #[tokio::test]
    async fn only_local_roles_run() {
        let (runner, echo) = runner().await;
        for role in ["peer/role", "http://127.0.0.1:9/agents/x", ""] {
            let err = runner
                .run_subagent(role, "echo hi", &json!({}))
                .await
                .unwrap_err();
            assert!(err.contains("is not a role of this node"), "{role}: {err}");
        }
        let err = runner
            .run_subagent("nobody", "echo hi", &json!({}))
            .await
            .unwrap_err();
        assert!(err.contains("there is no agent"), "{err}");
        assert_eq!(echo.task_count(), 0);
    }

    #[tokio::test]
    async fn a_dropped_run_cancels_the_child() {
        let (runner, echo) = runner().await;
        let runner = Arc::new(runner);
        let run = tokio::spawn({
            let runner = runner.clone();
            async move { runner.run_subagent("echo", "wait ", &json!({})).await }
        });
        let ctx = CallContext::default();
        // Drop the run once the child exists (however long that takes on a busy machine).
        let mut started = false;
        for _ in 0..500 {
            let tasks = echo
                .list_tasks(&ctx, ListTasksRequest::default())
                .await
                .unwrap()
                .tasks;
            if !tasks.is_empty() {
                started = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(started, "the child never started");
        run.abort();
        assert!(run.await.is_err_and(|e| e.is_cancelled()));
        let mut state = None;
        for _ in 0..500 {
            let tasks = echo
                .list_tasks(&ctx, ListTasksRequest::default())
                .await
                .unwrap()
                .tasks;
            assert_eq!(tasks.len(), 1);
            state = Some(tasks[0].status.state);
            if state == Some(TaskState::Canceled) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the child was not canceled: {state:?}");
    }
}
