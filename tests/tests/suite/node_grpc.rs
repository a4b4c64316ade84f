//! gRPC calls to a `mew up` node over h2c on its one port. Raw ones, sent as bytes (a codec
//! that frames what it is given, so nothing in the client repairs them): what is no good call
//! gets the spec's (or gRPC's own) status and the node keeps answering. And the node's
//! metrics count gRPC calls under their own binding.

use anyhow::{Context, ensure};
use bytes::{Buf, BufMut};
use mew_tests::node::MewNode;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};
use tonic_types::StatusExt;

/// The messages of a call, as bytes both ways.
#[derive(Clone, Copy, Default)]
struct Raw;

impl Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let n = src.remaining();
        Ok(Some(src.copy_to_bytes(n).to_vec()))
    }
}

/// A protobuf string field: its tag (wire type 2), its length and its bytes.
fn string_field(number: u8, value: &str) -> Vec<u8> {
    let mut out = vec![(number << 3) | 2];
    let mut len = value.len();
    loop {
        let byte = u8::try_from(len & 0x7f).unwrap_or(0);
        len >>= 7;
        if len == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    }
    out.extend_from_slice(value.as_bytes());
    out
}

/// Calls `path` with `message` (and `a2a-version: 1.0` when `versioned`).
async fn call(
    channel: &Channel,
    path: &'static str,
    message: Vec<u8>,
    versioned: bool,
) -> anyhow::Result<Result<Vec<u8>, Status>> {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.context("the channel is not ready")?;
    let mut request = tonic::Request::new(message);
    if versioned {
        request.metadata_mut().insert(
            "a2a-version",
            tonic::metadata::MetadataValue::from_static("1.0"),
        );
    }
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(path);
    Ok(grpc
        .unary(request, path, Raw)
        .await
        .map(tonic::Response::into_inner))
}

fn reason(status: &Status) -> Option<(String, String)> {
    status
        .get_details_error_info()
        .map(|info| (info.reason, info.domain))
}

#[tokio::test]
async fn bad_grpc_calls_get_their_status_and_the_node_keeps_answering() -> anyhow::Result<()> {
    let node = MewNode::start_echo("limits:\n  max_body_bytes: 65536\n", &[]).await?;
    let channel = Endpoint::from_shared(node.url().to_owned())?
        .connect()
        .await
        .context("cannot open an h2c connection to the node")?;
    let get_task = "/lf.a2a.v1.A2AService/GetTask";

    // An A2A error: the spec's code with an ErrorInfo of the A2A domain.
    let status = call(&channel, get_task, string_field(2, "no-such-task"), true)
        .await?
        .err()
        .context("GetTask of an unknown task succeeded")?;
    ensure!(status.code() == Code::NotFound, "{status:?}");
    ensure!(
        reason(&status) == Some(("TASK_NOT_FOUND".into(), "a2a-protocol.org".into())),
        "{status:?}"
    );

    // No A2A-Version: a 0.3 caller, whom a 1.0 agent does not serve.
    let status = call(&channel, get_task, string_field(2, "t"), false)
        .await?
        .err()
        .context("a call without a version succeeded")?;
    ensure!(status.code() == Code::FailedPrecondition, "{status:?}");
    ensure!(
        reason(&status).is_some_and(|(r, _)| r == "VERSION_NOT_SUPPORTED"),
        "{status:?}"
    );

    // Bytes that are no protobuf message: gRPC's answer to a request it cannot parse.
    let status = call(&channel, get_task, vec![0xff; 8], true)
        .await?
        .err()
        .context("a malformed message was accepted")?;
    ensure!(status.code() == Code::Internal, "{status:?}");

    // A method the service does not have, and a service the node does not have.
    for path in [
        "/lf.a2a.v1.A2AService/NoSuchMethod",
        "/no.such.Service/Call",
    ] {
        let status = call(&channel, path, Vec::new(), true)
            .await?
            .err()
            .with_context(|| format!("{path} succeeded"))?;
        ensure!(status.code() == Code::Unimplemented, "{path}: {status:?}");
    }

    // A message beyond `limits.max_body_bytes` is refused before it is read whole.
    let big = string_field(2, &"x".repeat(70 * 1024));
    let status = call(&channel, get_task, big, true)
        .await?
        .err()
        .context("an oversized message was accepted")?;
    ensure!(status.code() == Code::OutOfRange, "{status:?}");
    ensure!(status.message().contains("65536"), "{status:?}");

    // The same connection still serves, and so does the node.
    let status = call(&channel, get_task, string_field(2, "still-none"), true)
        .await?
        .err()
        .context("GetTask of an unknown task succeeded")?;
    ensure!(
        status.code() == Code::NotFound,
        "after the bad calls: {status:?}"
    );
    let (code, _) = node.get_json("/healthz").await?;
    ensure!(code == 200, "healthz after the bad calls: {code}");
    Ok(())
}

/// The value of the sample of `name` whose labels are all of `labels`, if there is one.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.rsplit_once(' '))
        .filter(|(series, _)| {
            let (series_name, series_labels) = series.split_once('{').unwrap_or((series, ""));
            series_name == name
                && labels.iter().all(|(k, v)| {
                    series_labels
                        .trim_end_matches('}')
                        .split(',')
                        .any(|pair| pair == format!("{k}=\"{v}\""))
                })
        })
        .find_map(|(_, value)| value.parse().ok())
}

#[tokio::test]
async fn grpc_calls_are_measured_under_their_binding() -> anyhow::Result<()> {
    use mew_cards::{GetTaskRequest, Message, SendMessageRequest, SendMessageResponse, TaskState};
    use mew_transport::{AgentTransport, Binding, CallContext};

    let node = MewNode::start_echo("", &[]).await?;
    let agent = node.agent("/agents/echo", Binding::Grpc).await?;
    let ctx = CallContext::anonymous();
    let sent = agent
        .send_message(&ctx, SendMessageRequest::new(Message::user_text("echo hi")))
        .await?;
    ensure!(
        matches!(&sent, SendMessageResponse::Task(t) if t.status.state == TaskState::Completed),
        "{sent:?}"
    );
    let missing = GetTaskRequest {
        id: "no-such-task".into(),
        ..GetTaskRequest::default()
    };
    ensure!(
        agent.get_task(&ctx, missing).await.is_err(),
        "a missing task was found"
    );

    let text = reqwest::get(format!("{}/metrics", node.url()))
        .await?
        .text()
        .await?;
    let requests = "mew_a2a_requests_total";
    let grpc = ("binding", "grpc");
    ensure!(
        sample(
            &text,
            requests,
            &[("method", "SendMessage"), grpc, ("status", "ok")]
        ) == Some(1.0),
        "no gRPC SendMessage counted:\n{text}"
    );
    ensure!(
        sample(
            &text,
            requests,
            &[("method", "GetTask"), grpc, ("status", "TaskNotFoundError")]
        ) == Some(1.0),
        "no failed gRPC GetTask counted:\n{text}"
    );
    Ok(())
}
