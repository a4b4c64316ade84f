//! The gRPC server driven with `oneshot`: framing, statuses and their `ErrorInfo`, metadata,
//! tenants, streams, and what gRPC itself answers (unknown method, undecodable or oversized
//! message).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use async_trait::async_trait;
use axum::body::Body;
use axum::http::{HeaderMap, Request};
use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::BodyExt;
use mew_cards::{
    AgentCard, CancelTaskRequest, ErrorKind, GetTaskRequest, ListTasksRequest, ListTasksResponse,
    Message, SendMessageRequest, SendMessageResponse, StreamResponse, SubscribeToTaskRequest, Task,
    TaskState, TaskStatus, TaskStatusUpdateEvent,
};
use prost::Message as _;
use tonic::Code;
use tower::ServiceExt;

use super::super::proto;
use super::*;
use crate::{Error, ServerOptions};

/// An agent whose one task is `t1`, which finishes at once; it names its caller in the
/// task's metadata.
struct OneTask(&'static str);

fn task(ctx: &CallContext, name: &str, state: TaskState) -> Task {
    let mut metadata = serde_json::Map::new();
    metadata.insert("agent".into(), name.into());
    metadata.insert(
        "principal".into(),
        ctx.principal.clone().unwrap_or_default().into(),
    );
    metadata.insert("extensions".into(), ctx.extensions.join(",").into());
    Task {
        id: "t1".into(),
        context_id: "c1".into(),
        status: TaskStatus::new(state),
        metadata: Some(metadata),
        ..Task::default()
    }
}

#[async_trait]
impl AgentTransport for OneTask {
    async fn card(&self) -> Result<AgentCard, Error> {
        Ok(AgentCard::default())
    }
    async fn send_message(
        &self,
        ctx: &CallContext,
        request: SendMessageRequest,
    ) -> Result<SendMessageResponse, Error> {
        let stream = self.send_streaming_message(ctx, request).await?;
        crate::collect_send(stream, false).await
    }
    async fn send_streaming_message(
        &self,
        ctx: &CallContext,
        _: SendMessageRequest,
    ) -> Result<EventStream, Error> {
        let first = task(ctx, self.0, TaskState::Working);
        let done = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: "t1".into(),
            context_id: "c1".into(),
            status: TaskStatus::new(TaskState::Completed),
            metadata: None,
        });
        // The item after the final one is never sent.
        let after = StreamResponse::Message(Message::agent_text("too late"));
        Ok(EventStream::new(futures_util::stream::iter([
            Ok(StreamResponse::Task(first)),
            Ok(done),
            Ok(after),
        ])))
    }
    async fn get_task(&self, ctx: &CallContext, request: GetTaskRequest) -> Result<Task, Error> {
        if request.id.as_str() == "t1" {
            Ok(task(ctx, self.0, TaskState::Completed))
        } else {
            Err(Error::protocol(ErrorKind::TaskNotFound, "no such task"))
        }
    }
    async fn list_tasks(
        &self,
        _: &CallContext,
        _: ListTasksRequest,
    ) -> Result<ListTasksResponse, Error> {
        Ok(ListTasksResponse::default())
    }
    async fn cancel_task(&self, _: &CallContext, _: CancelTaskRequest) -> Result<Task, Error> {
        Err(Error::protocol(ErrorKind::TaskNotCancelable, "it is done"))
    }
    async fn subscribe_to_task(
        &self,
        _: &CallContext,
        _: SubscribeToTaskRequest,
    ) -> Result<EventStream, Error> {
        Ok(EventStream::once(Err(Error::protocol(
            ErrorKind::UnsupportedOperation,
            "the task is terminal",
        ))))
    }
}

/// Two tenants: `""` (the front) and `"rev"`, which only `bob` may use.
struct Two;

impl Tenants for Two {
    fn agent(
        &self,
        tenant: &str,
        principal: Option<&Principal>,
    ) -> Result<Arc<dyn AgentTransport>, TenantRefusal> {
        match tenant {
            "" => Ok(Arc::new(OneTask("front"))),
            "rev" if principal.is_some_and(|p| p.0 == "bob") => Ok(Arc::new(OneTask("rev"))),
            "rev" => Err(TenantRefusal::Forbidden("only bob".into())),
            _ => Err(TenantRefusal::Unknown),
        }
    }
}

fn router(max: usize) -> axum::Router {
    let options = ServerOptions {
        max_body_bytes: max,
        ..ServerOptions::default()
    };
    grpc_router_with(Arc::new(Two), &options)
}

/// One length-prefixed gRPC message.
fn frame(message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(message.len() + 5);
    out.put_u8(0);
    out.put_u32(u32::try_from(message.len()).unwrap());
    out.put_slice(message);
    out.freeze()
}

/// The answer of one call: its messages and its status (from the headers of a trailers-only
/// answer, or from the trailers), and what the router said it served.
struct Answer {
    messages: Vec<Bytes>,
    status: tonic::Status,
    served: Option<Served>,
}

async fn call_with(
    router: axum::Router,
    method: &str,
    body: Bytes,
    metadata: &[(&str, &str)],
) -> Answer {
    let mut request = Request::post(format!("{GRPC_SERVICE_PATH}{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (k, v) in metadata {
        request = request.header(*k, *v);
    }
    let mut request = request.body(Body::from(body)).unwrap();
    if let Some((_, who)) = metadata.iter().find(|(k, _)| *k == "x-test-principal") {
        request
            .extensions_mut()
            .insert(Principal((*who).to_owned()));
    }
    let response = router.oneshot(request).await.unwrap();
    let served = response.extensions().get::<Served>().copied();
    let headers = response.headers().clone();
    let collected = response.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned().unwrap_or_default();
    let mut data = collected.to_bytes();
    let mut messages = Vec::new();
    while data.len() >= 5 {
        let len = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
        messages.push(data.slice(5..5 + len));
        data = data.slice(5 + len..);
    }
    let status = status_of(&headers)
        .or_else(|| status_of(&trailers))
        .expect("every answer has a status");
    Answer {
        messages,
        status,
        served,
    }
}

fn status_of(headers: &HeaderMap) -> Option<tonic::Status> {
    tonic::Status::from_header_map(headers)
}

const V1: (&str, &str) = ("a2a-version", "1.0");

async fn call(method: &str, message: &impl prost::Message, metadata: &[(&str, &str)]) -> Answer {
    call_with(
        router(1024 * 1024),
        method,
        frame(&message.encode_to_vec()),
        metadata,
    )
    .await
}

fn reason(status: &tonic::Status) -> Option<String> {
    use tonic_types::StatusExt;
    let info = status.get_details_error_info()?;
    assert_eq!(info.domain, "a2a-protocol.org");
    Some(info.reason)
}

fn get(id: &str, tenant: &str) -> proto::GetTaskRequest {
    proto::GetTaskRequest {
        id: id.into(),
        tenant: tenant.into(),
        history_length: None,
    }
}

#[tokio::test]
async fn a_unary_call_answers_the_tenants_agent_with_the_callers_context() {
    let answer = call(
        "GetTask",
        &get("t1", "rev"),
        &[
            V1,
            ("x-test-principal", "bob"),
            ("a2a-extensions", "urn:a, urn:b"),
        ],
    )
    .await;
    assert_eq!(answer.status.code(), Code::Ok, "{:?}", answer.status);
    let task = Task::try_from(proto::Task::decode(answer.messages[0].clone()).unwrap()).unwrap();
    let metadata = task.metadata.unwrap();
    assert_eq!(metadata["agent"], "rev");
    assert_eq!(metadata["principal"], "bob");
    assert_eq!(metadata["extensions"], "urn:a,urn:b");
    assert_eq!(
        answer.served,
        Some(Served {
            binding: Binding::Grpc,
            method: Some("GetTask"),
            outcome: Ok(()),
        })
    );
}

#[tokio::test]
async fn a2a_errors_are_statuses_with_the_specs_code_and_error_info() {
    let cases: [(&str, Bytes, Code, &str); 2] = [
        (
            "GetTask",
            get("nope", "").encode_to_vec().into(),
            Code::NotFound,
            "TASK_NOT_FOUND",
        ),
        (
            "CancelTask",
            proto::CancelTaskRequest {
                id: "t1".into(),
                ..Default::default()
            }
            .encode_to_vec()
            .into(),
            Code::FailedPrecondition,
            "TASK_NOT_CANCELABLE",
        ),
    ];
    for (method, body, code, why) in cases {
        let answer = call_with(router(1 << 20), method, frame(&body), &[V1]).await;
        assert_eq!(answer.status.code(), code, "{method}: {:?}", answer.status);
        assert_eq!(reason(&answer.status).as_deref(), Some(why), "{method}");
        assert_eq!(
            answer.served.map(|s| (s.method, s.outcome)),
            Some((Some(method), Err(ErrorKind::from_reason(why).unwrap())))
        );
    }
    // Push configs are the trait's defaults: the spec's "not supported".
    let answer = call(
        "GetTaskPushNotificationConfig",
        &proto::GetTaskPushNotificationConfigRequest::default(),
        &[V1],
    )
    .await;
    assert_eq!(answer.status.code(), Code::FailedPrecondition);
    assert_eq!(
        reason(&answer.status).as_deref(),
        Some("PUSH_NOTIFICATION_NOT_SUPPORTED")
    );
}

#[tokio::test]
async fn a_call_without_the_version_is_refused_as_0_3() {
    let answer = call("GetTask", &get("t1", ""), &[]).await;
    assert_eq!(answer.status.code(), Code::FailedPrecondition);
    assert_eq!(
        reason(&answer.status).as_deref(),
        Some("VERSION_NOT_SUPPORTED")
    );
    let answer = call("GetTask", &get("t1", ""), &[("a2a-version", "0.3")]).await;
    assert_eq!(
        reason(&answer.status).as_deref(),
        Some("VERSION_NOT_SUPPORTED")
    );
}

#[tokio::test]
async fn tenants_are_refused_when_unknown_or_forbidden() {
    let answer = call("GetTask", &get("t1", "ghost"), &[V1]).await;
    assert_eq!(answer.status.code(), Code::Unimplemented);
    assert!(answer.status.message().contains("ghost"));
    let answer = call(
        "GetTask",
        &get("t1", "rev"),
        &[V1, ("x-test-principal", "alice")],
    )
    .await;
    assert_eq!(answer.status.code(), Code::PermissionDenied);
    assert!(answer.status.message().contains("only bob"));
}

#[tokio::test]
async fn a_stream_ends_after_its_final_event_and_the_blocking_send_collects_it() {
    let send = proto::SendMessageRequest::from(SendMessageRequest::new(Message::user_text("hi")));
    let answer = call("SendStreamingMessage", &send, &[V1]).await;
    assert_eq!(answer.status.code(), Code::Ok, "{:?}", answer.status);
    let events: Vec<StreamResponse> = answer
        .messages
        .iter()
        .map(|m| StreamResponse::try_from(proto::StreamResponse::decode(m.clone()).unwrap()))
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(matches!(events[0], StreamResponse::Task(_)));
    assert!(events[1].ends_stream());

    let answer = call("SendMessage", &send, &[V1]).await;
    let sent = SendMessageResponse::try_from(
        proto::SendMessageResponse::decode(answer.messages[0].clone()).unwrap(),
    )
    .unwrap();
    let SendMessageResponse::Task(task) = sent else {
        panic!("a task was expected: {sent:?}");
    };
    assert_eq!(task.status.state, TaskState::Completed);
}

#[tokio::test]
async fn an_error_inside_a_stream_is_the_streams_status() {
    let subscribe = proto::SubscribeToTaskRequest {
        id: "t1".into(),
        tenant: String::new(),
    };
    let answer = call("SubscribeToTask", &subscribe, &[V1]).await;
    assert!(answer.messages.is_empty());
    assert_eq!(answer.status.code(), Code::FailedPrecondition);
    assert_eq!(
        reason(&answer.status).as_deref(),
        Some("UNSUPPORTED_OPERATION")
    );
}

#[tokio::test]
async fn grpc_answers_what_is_no_call_of_the_service() {
    // An unknown method of the service.
    let answer = call("Nope", &get("t1", ""), &[V1]).await;
    assert_eq!(answer.status.code(), Code::Unimplemented);
    assert_eq!(answer.served.map(|s| s.method), Some(None));

    // Bytes that are no protobuf message (a field of wire type 7).
    let answer = call_with(router(1 << 20), "GetTask", frame(&[0xff; 8]), &[V1]).await;
    assert_eq!(answer.status.code(), Code::Internal, "{:?}", answer.status);

    // A protobuf message that is no value of the model: a part with no content.
    let mut send =
        proto::SendMessageRequest::from(SendMessageRequest::new(Message::user_text("hi")));
    if let Some(message) = send.message.as_mut() {
        message.parts = vec![proto::Part::default()];
    }
    let answer = call("SendMessage", &send, &[V1]).await;
    assert_eq!(answer.status.code(), Code::InvalidArgument);
    assert_eq!(reason(&answer.status).as_deref(), Some("INVALID_PARAMS"));

    // A message beyond the size limit is refused before it is read whole.
    let big = proto::SendMessageRequest::from(SendMessageRequest::new(Message::user_text(
        "x".repeat(4096),
    )));
    let answer = call_with(
        router(1024),
        "SendMessage",
        frame(&big.encode_to_vec()),
        &[V1],
    )
    .await;
    assert_eq!(
        answer.status.code(),
        Code::OutOfRange,
        "{:?}",
        answer.status
    );
    assert!(answer.status.message().contains("1024"));
}

/// A body that sends `sent` and then nothing more, never ending.
fn stalled(sent: Bytes) -> Body {
    let first = futures_util::stream::iter([Ok::<_, std::io::Error>(sent)]);
    Body::from_stream(first.chain(futures_util::stream::pending()))
}

async fn call_body(router: axum::Router, body: Body) -> tonic::Status {
    let request = Request::post(format!("{GRPC_SERVICE_PATH}SendMessage"))
        .header("content-type", "application/grpc")
        .header("a2a-version", "1.0")
        .body(body)
        .unwrap();
    let response = router.oneshot(request).await.unwrap();
    let headers = response.headers().clone();
    let collected = response.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned().unwrap_or_default();
    status_of(&headers)
        .or_else(|| status_of(&trailers))
        .expect("every answer has a status")
}

fn budgeted_router() -> axum::Router {
    let options = ServerOptions {
        max_inflight_body_bytes: 4096,
        body_timeout: std::time::Duration::from_secs(5),
        ..ServerOptions::default()
    };
    grpc_router_with(Arc::new(Two), &options)
}

#[tokio::test(start_paused = true)]
async fn a_body_that_does_not_arrive_in_time_is_refused() {
    let send = proto::SendMessageRequest::from(SendMessageRequest::new(Message::user_text("hi")));
    let whole = frame(&send.encode_to_vec());
    // All but the last byte of the message, then silence.
    let status = call_body(budgeted_router(), stalled(whole.slice(..whole.len() - 1))).await;
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
}

#[tokio::test(start_paused = true)]
async fn bodies_wait_for_room_in_the_budget_and_are_turned_away_without_it() {
    let router = budgeted_router();
    // One call holds three of the four KiB with a message it never finishes.
    let big = proto::SendMessageRequest::from(SendMessageRequest::new(Message::user_text(
        "x".repeat(3500),
    )));
    let big = frame(&big.encode_to_vec());
    let holder = tokio::spawn(call_body(router.clone(), stalled(big.slice(..3072))));
    tokio::task::yield_now().await;
    // A whole 2 KiB message finds no room for the whole body timeout.
    let other = proto::SendMessageRequest::from(SendMessageRequest::new(Message::user_text(
        "y".repeat(2000),
    )));
    let status = call_body(router.clone(), Body::from(frame(&other.encode_to_vec()))).await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("try again"), "{status:?}");
    assert_eq!(holder.await.unwrap().code(), Code::DeadlineExceeded);
    // With the room given back, the same message is served.
    let status = call_body(router, Body::from(frame(&other.encode_to_vec()))).await;
    assert_eq!(status.code(), Code::Ok, "{status:?}");
}
