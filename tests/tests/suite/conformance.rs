//! One conformance suite for every `AgentTransport` backend: the same checks,
//! in-process, over Mew's server, against the Python SDK's server, and against
//! a real `mew` node's front agent, each on all three bindings.
//!
//! The agent under test is an echo agent (`EchoAgent`, `tests/peers/echo_server.py`, or
//! `tests/peers/echo_role.py` as a node's command role)
//! whose behaviour is chosen by the message text: `echo`, `stream N`, `ask`,
//! `wait`, `fail`, `message`.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use futures_util::StreamExt;
use mew_cards::{
    CancelTaskRequest, ContextId, ErrorKind, GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest, GetTaskRequest, ListTaskPushNotificationConfigsRequest,
    ListTasksRequest, Message, SendMessageConfiguration, SendMessageRequest, SendMessageResponse,
    StreamResponse, SubscribeToTaskRequest, Task, TaskId, TaskPushNotificationConfig, TaskState,
    join_text,
};
use mew_transport::{AgentTransport, CallContext, Error, EventStream};

use super::backends::{Backend, Kind};

type Agent = dyn AgentTransport;

fn ctx() -> CallContext {
    CallContext::anonymous()
}

/// Expects `outcome` to fail with the A2A error `kind`.
fn expect_kind<T: std::fmt::Debug>(
    outcome: Result<T, Error>,
    kind: ErrorKind,
) -> anyhow::Result<()> {
    match outcome {
        Err(Error::Protocol(e)) if e.kind == kind => Ok(()),
        other => bail!("expected {kind}, got {other:?}"),
    }
}

async fn send(
    agent: &Agent,
    message: Message,
    configuration: Option<SendMessageConfiguration>,
) -> anyhow::Result<SendMessageResponse> {
    let request = SendMessageRequest {
        configuration,
        ..SendMessageRequest::new(message)
    };
    Ok(agent.send_message(&ctx(), request).await?)
}

async fn send_task(agent: &Agent, text: &str) -> anyhow::Result<Task> {
    match send(agent, Message::user_text(text), None).await? {
        SendMessageResponse::Task(task) => Ok(task),
        SendMessageResponse::Message(m) => bail!("expected a task for {text:?}, got message {m:?}"),
    }
}

/// Starts a `wait` task and returns it as soon as it exists.
async fn start_waiting(agent: &Agent) -> anyhow::Result<Task> {
    let configuration = SendMessageConfiguration {
        return_immediately: true,
        ..Default::default()
    };
    match send(agent, Message::user_text("wait"), Some(configuration)).await? {
        SendMessageResponse::Task(task) => {
            ensure!(
                !task.status.state.is_terminal(),
                "a waiting task is already {:?}",
                task.status.state
            );
            Ok(task)
        }
        other => bail!("expected a task, got {other:?}"),
    }
}

async fn collect(stream: EventStream) -> anyhow::Result<Vec<StreamResponse>> {
    let items = tokio::time::timeout(Duration::from_secs(30), stream.collect::<Vec<_>>())
        .await
        .context("the stream did not end within 30 s")?;
    items
        .into_iter()
        .map(|item| item.map_err(anyhow::Error::from))
        .collect()
}

fn artifact_text(task: &Task) -> String {
    task.artifacts
        .iter()
        .map(|a| join_text(&a.parts))
        .collect::<Vec<_>>()
        .join("")
}

// ---- the checks ----

pub async fn card_speaks_1_0(agent: &Agent) -> anyhow::Result<()> {
    let card = agent.card().await?;
    ensure!(!card.name.is_empty(), "the card has no name");
    ensure!(
        card.supported_interfaces
            .iter()
            .any(|i| i.protocol_version == "1.0"),
        "no 1.0 interface in {:?}",
        card.supported_interfaces
    );
    ensure!(
        card.capabilities.streaming == Some(true),
        "streaming is not advertised"
    );
    ensure!(!card.skills.is_empty(), "the card lists no skills");
    Ok(())
}

pub async fn blocking_send_completes(agent: &Agent) -> anyhow::Result<()> {
    let task = send_task(agent, "echo hello there").await?;
    ensure!(
        task.status.state == TaskState::Completed,
        "state {:?}",
        task.status.state
    );
    ensure!(
        !task.id.is_empty() && !task.context_id.is_empty(),
        "ids missing: {task:?}"
    );
    ensure!(
        artifact_text(&task) == "hello there",
        "artifacts {:?}",
        task.artifacts
    );
    ensure!(
        task.history.iter().any(|m| m.text() == "echo hello there"),
        "the user message is not in the history: {:?}",
        task.history
    );
    Ok(())
}

pub async fn direct_message_reply(agent: &Agent) -> anyhow::Result<()> {
    match send(agent, Message::user_text("message hi back"), None).await? {
        SendMessageResponse::Message(message) => {
            ensure!(message.text() == "hi back", "text {:?}", message.text());
            ensure!(
                message.role == mew_cards::Role::Agent,
                "role {:?}",
                message.role
            );
            Ok(())
        }
        other => bail!("expected a message, got {other:?}"),
    }
}

pub async fn failing_task_fails(agent: &Agent) -> anyhow::Result<()> {
    let task = send_task(agent, "fail").await?;
    ensure!(
        task.status.state == TaskState::Failed,
        "state {:?}",
        task.status.state
    );
    let reason = task
        .status
        .message
        .as_ref()
        .map(Message::text)
        .unwrap_or_default();
    ensure!(
        reason.contains("failed on purpose"),
        "status message {reason:?}"
    );
    Ok(())
}

pub async fn stream_order_and_close(agent: &Agent) -> anyhow::Result<()> {
    let stream = agent
        .send_streaming_message(
            &ctx(),
            SendMessageRequest::new(Message::user_text("stream 3")),
        )
        .await?;
    let items = collect(stream).await?;
    let Some(StreamResponse::Task(first)) = items.first() else {
        bail!("the first item is not the task: {items:?}");
    };
    ensure!(
        matches!(
            first.status.state,
            TaskState::Submitted | TaskState::Working
        ),
        "first state {:?}",
        first.status.state
    );
    let chunks: Vec<_> = items
        .iter()
        .filter_map(|item| match item {
            StreamResponse::ArtifactUpdate(update) => Some(update),
            _ => None,
        })
        .collect();
    let texts: Vec<String> = chunks
        .iter()
        .map(|u| join_text(&u.artifact.parts))
        .collect();
    ensure!(
        texts == ["chunk 1", "chunk 2", "chunk 3"],
        "chunks {texts:?}"
    );
    ensure!(
        !chunks[0].append && chunks[1].append && chunks[2].append,
        "append flags wrong"
    );
    ensure!(
        !chunks[0].last_chunk && chunks[2].last_chunk,
        "lastChunk flags wrong"
    );
    ensure!(
        chunks
            .iter()
            .all(|u| u.artifact.artifact_id == chunks[0].artifact.artifact_id),
        "artifact ids differ"
    );
    match items.last() {
        Some(StreamResponse::StatusUpdate(update)) => {
            ensure!(
                update.status.state == TaskState::Completed,
                "last state {:?}",
                update.status.state
            );
            ensure!(
                update.task_id == first.id,
                "the last update is for another task"
            );
        }
        other => bail!("the stream did not end with a status update: {other:?}"),
    }
    let mut folded = first.clone();
    for item in &items[1..] {
        folded.apply(item);
    }
    ensure!(
        artifact_text(&folded) == "chunk 1\nchunk 2\nchunk 3",
        "folded artifact {:?}",
        folded.artifacts
    );
    Ok(())
}

pub async fn input_required_then_resumed(agent: &Agent) -> anyhow::Result<()> {
    let task = send_task(agent, "ask").await?;
    ensure!(
        task.status.state == TaskState::InputRequired,
        "state {:?}",
        task.status.state
    );
    let question = task
        .status
        .message
        .as_ref()
        .map(Message::text)
        .unwrap_or_default();
    ensure!(question.contains("need input"), "question {question:?}");
    let mut reply = Message::user_text("yes");
    reply.task_id = Some(task.id.clone());
    reply.context_id = Some(task.context_id.clone());
    let resumed = match send(agent, reply, None).await? {
        SendMessageResponse::Task(t) => t,
        other => bail!("expected a task, got {other:?}"),
    };
    ensure!(resumed.id == task.id, "the reply started another task");
    ensure!(
        resumed.status.state == TaskState::Completed,
        "state {:?}",
        resumed.status.state
    );
    ensure!(
        artifact_text(&resumed) == "got yes",
        "artifacts {:?}",
        resumed.artifacts
    );
    Ok(())
}

pub async fn message_to_terminal_task_is_rejected(agent: &Agent) -> anyhow::Result<()> {
    let task = send_task(agent, "echo done").await?;
    let mut again = Message::user_text("echo more");
    again.task_id = Some(task.id.clone());
    let outcome = agent
        .send_message(&ctx(), SendMessageRequest::new(again))
        .await;
    expect_kind(outcome, ErrorKind::UnsupportedOperation)
}

pub async fn get_task_and_history_length(agent: &Agent) -> anyhow::Result<()> {
    let task = send_task(agent, "echo remember me").await?;
    let got = agent
        .get_task(
            &ctx(),
            GetTaskRequest {
                id: task.id.clone(),
                ..Default::default()
            },
        )
        .await?;
    ensure!(
        got.id == task.id && got.status.state == TaskState::Completed,
        "got {got:?}"
    );
    ensure!(!got.history.is_empty(), "no history");
    let trimmed = agent
        .get_task(
            &ctx(),
            GetTaskRequest {
                id: task.id.clone(),
                history_length: Some(0),
                ..Default::default()
            },
        )
        .await?;
    ensure!(
        trimmed.history.is_empty(),
        "historyLength 0 kept {:?}",
        trimmed.history
    );
    let unknown = agent
        .get_task(
            &ctx(),
            GetTaskRequest {
                id: TaskId::generate(),
                ..Default::default()
            },
        )
        .await;
    expect_kind(unknown, ErrorKind::TaskNotFound)
}

pub async fn cancel_rules(agent: &Agent) -> anyhow::Result<()> {
    let task = start_waiting(agent).await?;
    let canceled = agent
        .cancel_task(
            &ctx(),
            CancelTaskRequest {
                id: task.id.clone(),
                ..Default::default()
            },
        )
        .await?;
    ensure!(
        canceled.status.state == TaskState::Canceled,
        "cancel answered {:?}",
        canceled.status.state
    );
    let got = agent
        .get_task(
            &ctx(),
            GetTaskRequest {
                id: task.id.clone(),
                ..Default::default()
            },
        )
        .await?;
    ensure!(
        got.status.state == TaskState::Canceled,
        "stored state {:?}",
        got.status.state
    );
    let again = agent
        .cancel_task(
            &ctx(),
            CancelTaskRequest {
                id: task.id.clone(),
                ..Default::default()
            },
        )
        .await;
    expect_kind(again, ErrorKind::TaskNotCancelable)?;
    let unknown = agent
        .cancel_task(
            &ctx(),
            CancelTaskRequest {
                id: TaskId::generate(),
                ..Default::default()
            },
        )
        .await;
    expect_kind(unknown, ErrorKind::TaskNotFound)
}

pub async fn subscribe_starts_with_the_task(agent: &Agent) -> anyhow::Result<()> {
    let task = start_waiting(agent).await?;
    let mut stream = agent
        .subscribe_to_task(
            &ctx(),
            SubscribeToTaskRequest {
                id: task.id.clone(),
                ..Default::default()
            },
        )
        .await?;
    let first = tokio::time::timeout(Duration::from_secs(30), stream.next())
        .await
        .context("no first event")?;
    match first {
        Some(Ok(StreamResponse::Task(snapshot))) => {
            ensure!(snapshot.id == task.id, "snapshot of another task")
        }
        other => bail!("the first event is not the task: {other:?}"),
    }
    agent
        .cancel_task(
            &ctx(),
            CancelTaskRequest {
                id: task.id.clone(),
                ..Default::default()
            },
        )
        .await?;
    let rest = collect(stream).await?;
    let last_state = rest.iter().rev().find_map(|item| match item {
        StreamResponse::StatusUpdate(u) => Some(u.status.state),
        StreamResponse::Task(t) => Some(t.status.state),
        _ => None,
    });
    ensure!(
        last_state == Some(TaskState::Canceled),
        "the subscription ended with {last_state:?}: {rest:?}"
    );
    let terminal = agent
        .subscribe_to_task(
            &ctx(),
            SubscribeToTaskRequest {
                id: task.id.clone(),
                ..Default::default()
            },
        )
        .await;
    expect_kind(terminal.map(|_| ()), ErrorKind::UnsupportedOperation)?;
    let unknown = agent
        .subscribe_to_task(
            &ctx(),
            SubscribeToTaskRequest {
                id: TaskId::generate(),
                ..Default::default()
            },
        )
        .await;
    expect_kind(unknown.map(|_| ()), ErrorKind::TaskNotFound)
}

/// A subscription to a task that waits for input stays open through the reply and ends
/// when the task does (A2A 1.0, section 3.1.6; the TCK's STREAM-SUB-002).
pub async fn subscription_outlasts_input_required(agent: &Agent) -> anyhow::Result<()> {
    let task = send_task(agent, "ask").await?;
    ensure!(
        task.status.state == TaskState::InputRequired,
        "state {:?}",
        task.status.state
    );
    let mut stream = agent
        .subscribe_to_task(
            &ctx(),
            SubscribeToTaskRequest {
                id: task.id.clone(),
                ..Default::default()
            },
        )
        .await?;
    let first = tokio::time::timeout(Duration::from_secs(30), stream.next())
        .await
        .context("no first event")?;
    match first {
        Some(Ok(StreamResponse::Task(snapshot))) => ensure!(
            snapshot.id == task.id && snapshot.status.state == TaskState::InputRequired,
            "the snapshot is {:?} of {}",
            snapshot.status.state,
            snapshot.id
        ),
        other => bail!("the first event is not the task: {other:?}"),
    }
    let mut reply = Message::user_text("yes");
    reply.task_id = Some(task.id.clone());
    reply.context_id = Some(task.context_id.clone());
    let resumed = send(agent, reply, None).await?;
    ensure!(
        matches!(&resumed, SendMessageResponse::Task(t) if t.status.state == TaskState::Completed),
        "the reply ended with {resumed:?}"
    );
    let rest = collect(stream).await?;
    let states: Vec<TaskState> = rest
        .iter()
        .filter_map(|item| match item {
            StreamResponse::StatusUpdate(u) => Some(u.status.state),
            StreamResponse::Task(t) => Some(t.status.state),
            _ => None,
        })
        .collect();
    ensure!(
        states.last() == Some(&TaskState::Completed),
        "the subscription saw {states:?} after the snapshot: {rest:?}"
    );
    Ok(())
}

pub async fn list_tasks_pages(agent: &Agent) -> anyhow::Result<()> {
    let context = ContextId::generate();
    let mut created = Vec::new();
    for i in 0..5 {
        let mut message = Message::user_text(format!("echo {i}"));
        message.context_id = Some(context.clone());
        match send(agent, message, None).await? {
            SendMessageResponse::Task(task) => created.push(task.id),
            other => bail!("expected a task, got {other:?}"),
        }
    }
    let mut seen = Vec::new();
    let mut token = String::new();
    let mut pages = Vec::new();
    loop {
        let request = ListTasksRequest {
            context_id: context.clone(),
            page_size: Some(2),
            page_token: token.clone(),
            ..Default::default()
        };
        let page = agent.list_tasks(&ctx(), request).await?;
        ensure!(page.total_size == 5, "totalSize {}", page.total_size);
        ensure!(
            page.tasks.iter().all(|t| t.context_id == context),
            "a task from another context"
        );
        pages.push(page.tasks.len());
        seen.extend(page.tasks.into_iter().map(|t| t.id));
        if page.next_page_token.is_empty() {
            break;
        }
        ensure!(pages.len() < 5, "pagination does not end");
        token = page.next_page_token;
    }
    ensure!(pages == [2, 2, 1], "page sizes {pages:?}");
    created.reverse();
    ensure!(seen == created, "not newest first: {seen:?} vs {created:?}");
    let completed = ListTasksRequest {
        context_id: context.clone(),
        status: TaskState::Completed,
        ..Default::default()
    };
    ensure!(
        agent.list_tasks(&ctx(), completed).await?.tasks.len() == 5,
        "status filter"
    );
    let failed = ListTasksRequest {
        context_id: context.clone(),
        status: TaskState::Failed,
        ..Default::default()
    };
    ensure!(
        agent.list_tasks(&ctx(), failed).await?.tasks.is_empty(),
        "status filter kept completed tasks"
    );
    for size in [0, 101] {
        let bad = ListTasksRequest {
            page_size: Some(size),
            ..Default::default()
        };
        expect_kind(
            agent.list_tasks(&ctx(), bad).await,
            ErrorKind::InvalidParams,
        )?;
    }
    Ok(())
}

pub async fn push_config_crud(agent: &Agent) -> anyhow::Result<()> {
    let task = start_waiting(agent).await?;
    let config = TaskPushNotificationConfig {
        id: "hook-1".into(),
        task_id: task.id.clone(),
        url: "https://example.invalid/hook".into(),
        token: "secret-token".into(),
        ..Default::default()
    };
    let created = agent
        .create_task_push_notification_config(&ctx(), config)
        .await?;
    ensure!(
        created.id == "hook-1" && created.url == "https://example.invalid/hook",
        "created {created:?}"
    );
    let key = GetTaskPushNotificationConfigRequest {
        task_id: task.id.clone(),
        id: "hook-1".into(),
        ..Default::default()
    };
    let got = agent
        .get_task_push_notification_config(&ctx(), key.clone())
        .await?;
    ensure!(got.token == "secret-token", "got {got:?}");
    let list = ListTaskPushNotificationConfigsRequest {
        task_id: task.id.clone(),
        ..Default::default()
    };
    let listed = agent
        .list_task_push_notification_configs(&ctx(), list.clone())
        .await?;
    ensure!(listed.configs.len() == 1, "listed {listed:?}");
    agent
        .delete_task_push_notification_config(&ctx(), key.clone())
        .await?;
    let after = agent
        .list_task_push_notification_configs(&ctx(), list)
        .await?;
    ensure!(after.configs.is_empty(), "not deleted: {after:?}");
    agent
        .cancel_task(
            &ctx(),
            CancelTaskRequest {
                id: task.id,
                ..Default::default()
            },
        )
        .await?;
    Ok(())
}

pub async fn extended_card(agent: &Agent) -> anyhow::Result<()> {
    let card = agent
        .get_extended_agent_card(&ctx(), GetExtendedAgentCardRequest::default())
        .await?;
    ensure!(!card.name.is_empty(), "extended card has no name");
    Ok(())
}

/// An agent whose card says `extendedAgentCard: false` answers GetExtendedAgentCard with
/// ExtendedAgentCardNotConfigured.
pub async fn extended_card_not_offered(agent: &Agent) -> anyhow::Result<()> {
    let card = agent.card().await?;
    ensure!(
        card.capabilities.extended_agent_card != Some(true),
        "the card offers an extended card: {:?}",
        card.capabilities
    );
    let outcome = agent
        .get_extended_agent_card(&ctx(), GetExtendedAgentCardRequest::default())
        .await;
    expect_kind(outcome, ErrorKind::ExtendedAgentCardNotConfigured)
}

pub async fn invalid_message_is_rejected(agent: &Agent) -> anyhow::Result<()> {
    let empty = Message {
        parts: Vec::new(),
        ..Message::user_text("")
    };
    let outcome = agent
        .send_message(&ctx(), SendMessageRequest::new(empty))
        .await;
    expect_kind(outcome, ErrorKind::InvalidParams)
}

macro_rules! backend {
    ($module:ident, $kind:ident, [$($check:ident),* $(,)?]) => {
        mod $module {
            $(
                #[tokio::test]
                async fn $check() -> anyhow::Result<()> {
                    let backend = super::Backend::start(super::Kind::$kind).await?;
                    super::$check(&*backend.agent).await
                }
            )*
        }
    };
}

macro_rules! suite {
    (
        every: [$($check:ident),* $(,)?],
        not_node: [$($optional:ident),* $(,)?],
        node_only: [$($node_check:ident),* $(,)?] $(,)?
    ) => {
        backend!(in_process, InProcess, [$($check,)* $($optional),*]);
        backend!(mew_jsonrpc, MewJsonRpc, [$($check,)* $($optional),*]);
        backend!(mew_rest, MewRest, [$($check,)* $($optional),*]);
        backend!(mew_grpc, MewGrpc, [$($check,)* $($optional),*]);
        backend!(python_jsonrpc, PythonJsonRpc, [$($check,)* $($optional),*]);
        backend!(python_rest, PythonRest, [$($check,)* $($optional),*]);
        backend!(python_grpc, PythonGrpc, [$($check,)* $($optional),*]);
        backend!(node_jsonrpc, NodeJsonRpc, [$($check,)* $($node_check),*]);
        backend!(node_rest, NodeRest, [$($check,)* $($node_check),*]);
        backend!(node_grpc, NodeGrpc, [$($check,)* $($node_check),*]);
    };
}

suite!(
    every: [
        card_speaks_1_0,
        blocking_send_completes,
        direct_message_reply,
        failing_task_fails,
        stream_order_and_close,
        input_required_then_resumed,
        message_to_terminal_task_is_rejected,
        get_task_and_history_length,
        cancel_rules,
        subscribe_starts_with_the_task,
        subscription_outlasts_input_required,
        list_tasks_pages,
        invalid_message_is_rejected,
        push_config_crud,
    ],
    // Optional features of A2A that a `mew` node does not offer without configuration, and
    // says so on its card: `capabilities.extendedAgentCard` is false. The spec's answer for
    // an agent without them is an error, which `node_only` checks.
    not_node: [extended_card],
    node_only: [extended_card_not_offered],
);
