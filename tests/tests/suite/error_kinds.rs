//! Every A2A error kind crosses the wire intact, on both bindings, as a
//! direct answer and as an error event in the middle of a stream.

use std::sync::Arc;

use async_trait::async_trait;
use futures_util::StreamExt;
use mew_cards::{
    A2aError, AgentCard, CancelTaskRequest, ErrorKind, GetTaskRequest, ListTasksRequest,
    ListTasksResponse, SendMessageRequest, SendMessageResponse, StreamResponse,
    SubscribeToTaskRequest, Task, TaskState, TaskStatus,
};
use mew_tests::EchoAgent;
use mew_transport::{
    AgentTransport, Binding, CallContext, ClientOptions, Error, EventStream, RemoteAgent,
};

use super::backends::serve;

/// An agent whose answers are errors named by the request: `get_task("TASK_NOT_FOUND")`
/// fails with that kind; `subscribe_to_task` sends the task, then that error.
struct ErrorAgent {
    card: AgentCard,
}

fn kind_of(id: &str) -> Result<ErrorKind, Error> {
    ErrorKind::from_reason(id)
        .ok_or_else(|| Error::protocol(ErrorKind::InvalidParams, format!("no kind {id}")))
}

fn failure(kind: ErrorKind) -> Error {
    Error::Protocol(A2aError::new(kind, format!("on purpose: {}", kind.name())))
}

#[async_trait]
impl AgentTransport for ErrorAgent {
    async fn card(&self) -> Result<AgentCard, Error> {
        Ok(self.card.clone())
    }

    async fn send_message(
        &self,
        _: &CallContext,
        _: SendMessageRequest,
    ) -> Result<SendMessageResponse, Error> {
        Err(failure(ErrorKind::Internal))
    }

    async fn send_streaming_message(
        &self,
        _: &CallContext,
        _: SendMessageRequest,
    ) -> Result<EventStream, Error> {
        Err(failure(ErrorKind::Internal))
    }

    async fn get_task(&self, _: &CallContext, request: GetTaskRequest) -> Result<Task, Error> {
        Err(failure(kind_of(request.id.as_str())?))
    }

    async fn list_tasks(
        &self,
        _: &CallContext,
        _: ListTasksRequest,
    ) -> Result<ListTasksResponse, Error> {
        Err(failure(ErrorKind::Internal))
    }

    async fn cancel_task(&self, _: &CallContext, _: CancelTaskRequest) -> Result<Task, Error> {
        Err(failure(ErrorKind::Internal))
    }

    async fn subscribe_to_task(
        &self,
        _: &CallContext,
        request: SubscribeToTaskRequest,
    ) -> Result<EventStream, Error> {
        let kind = kind_of(request.id.as_str())?;
        let task = Task {
            id: request.id,
            status: TaskStatus::new(TaskState::Working),
            ..Task::default()
        };
        Ok(EventStream::new(futures_util::stream::iter([
            Ok(StreamResponse::Task(task)),
            Err(failure(kind)),
        ])))
    }
}

#[tokio::test]
async fn every_kind_survives_both_bindings() -> anyhow::Result<()> {
    let (url, _server) = serve(|url| {
        Arc::new(ErrorAgent {
            card: EchoAgent::default_card(url),
        })
    })
    .await?;
    for binding in [Binding::JsonRpc, Binding::HttpJson] {
        let options = ClientOptions {
            binding: Some(binding),
            ..ClientOptions::default()
        };
        let agent = RemoteAgent::resolve_with(&url, options).await?;
        for &kind in ErrorKind::ALL {
            let request = GetTaskRequest {
                id: kind.reason().into(),
                ..Default::default()
            };
            match agent.get_task(&CallContext::default(), request).await {
                Err(Error::Protocol(e)) => {
                    anyhow::ensure!(e.kind == kind, "{binding:?}: sent {kind}, got {}", e.kind);
                    anyhow::ensure!(
                        e.message == format!("on purpose: {}", kind.name()),
                        "{binding:?}: message {:?}",
                        e.message
                    );
                }
                other => anyhow::bail!("{binding:?}: expected {kind}, got {other:?}"),
            }
        }
    }
    Ok(())
}

#[tokio::test]
async fn error_events_end_streams_on_both_bindings() -> anyhow::Result<()> {
    let (url, _server) = serve(|url| {
        Arc::new(ErrorAgent {
            card: EchoAgent::default_card(url),
        })
    })
    .await?;
    for binding in [Binding::JsonRpc, Binding::HttpJson] {
        let options = ClientOptions {
            binding: Some(binding),
            ..ClientOptions::default()
        };
        let agent = RemoteAgent::resolve_with(&url, options).await?;
        let request = SubscribeToTaskRequest {
            id: "TASK_NOT_CANCELABLE".into(),
            ..Default::default()
        };
        let items: Vec<_> = agent
            .subscribe_to_task(&CallContext::default(), request)
            .await?
            .collect()
            .await;
        anyhow::ensure!(items.len() == 2, "{binding:?}: {items:?}");
        anyhow::ensure!(
            matches!(items[0], Ok(StreamResponse::Task(_))),
            "{binding:?}: first {:?}",
            items[0]
        );
        match &items[1] {
            Err(Error::Protocol(e)) => {
                anyhow::ensure!(e.kind == ErrorKind::TaskNotCancelable, "{binding:?}: {e}")
            }
            other => anyhow::bail!("{binding:?}: expected an error event, got {other:?}"),
        }
    }
    Ok(())
}

#[tokio::test]
async fn unreachable_agents_are_transport_errors() -> anyhow::Result<()> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let url = format!("http://{}", listener.local_addr()?);
    drop(listener);
    match RemoteAgent::resolve(&url).await {
        Err(Error::Transport { .. }) => Ok(()),
        other => anyhow::bail!("expected a transport error, got {other:?}"),
    }
}

#[tokio::test]
async fn garbage_answers_are_decode_errors() -> anyhow::Result<()> {
    use axum::routing::{get, post};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let card = serde_json::to_string(&EchoAgent::default_card(&url))?;
    let app = axum::Router::new()
        .route(
            "/.well-known/agent-card.json",
            get(move || async move { card }),
        )
        .route(
            "/",
            post(|| async {
                r#"{"jsonrpc":"2.0","id":"1","result":{"status":{"state":"TASK_STATE_BOGUS"}}}"#
            }),
        );
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let agent = RemoteAgent::resolve(&url).await?;
    let outcome = agent
        .get_task(
            &CallContext::default(),
            GetTaskRequest {
                id: "x".into(),
                ..Default::default()
            },
        )
        .await;
    server.abort();
    match outcome {
        Err(Error::Decode { message }) => {
            anyhow::ensure!(message.contains("TASK_STATE_BOGUS"), "message {message}");
            Ok(())
        }
        other => anyhow::bail!("expected a decode error, got {other:?}"),
    }
}
