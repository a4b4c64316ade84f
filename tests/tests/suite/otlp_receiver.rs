//! The OTLP receiver of the tracing tests, checked with real exporters: the Python SDK's
//! client and server, traced with OpenTelemetry, make one trace; bad bodies and a collector
//! told to fail are answered as the OTLP/HTTP spec says.

use std::time::Duration;

use anyhow::ensure;
use mew_tests::otlp::{
    OtlpReceiver, PYTHON_CLIENT_SERVICE, ReceiverOptions, Span, SpanKind, StatusCode,
    TracedPythonServer, ancestors, is_ancestor, run_traced_driver,
};
use reqwest::StatusCode as HttpStatus;
use serde_json::json;

const PROTOBUF: &str = "application/x-protobuf";

/// The traced server's HTTP SERVER span for the client's SendMessage (`POST /`).
fn send_message_server_span(spans: &[Span]) -> Option<&Span> {
    spans.iter().find(|s| {
        s.is_from(TracedPythonServer::SERVICE)
            && s.scope == TracedPythonServer::HTTP_SCOPE
            && s.kind == SpanKind::Server
            && s.name.starts_with("POST")
    })
}

#[tokio::test]
async fn a_traced_python_client_and_server_make_one_trace() -> anyhow::Result<()> {
    let receiver = OtlpReceiver::start().await?;
    // The server compresses its exports, as the Rust exporter may: the receiver takes both.
    let server = TracedPythonServer::start_with_env(
        &receiver,
        &[("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")],
    )
    .await?;
    let run =
        run_traced_driver(&receiver, &server.base_url, "jsonrpc", &["send", "echo hi"]).await?;
    ensure!(
        run.output.code == 0,
        "the traced client failed ({}): {}",
        run.output.code,
        run.output.stderr
    );
    let task = &run.output.lines[0]["task"];
    ensure!(
        task["status"]["state"] == "TASK_STATE_COMPLETED"
            && task["artifacts"][0]["parts"][0]["text"] == "hi",
        "the traced server answered {task}"
    );
    ensure!(
        run.trace_id.len() == 32 && run.trace_id.chars().all(|c| c.is_ascii_hexdigit()),
        "trace id {:?}",
        run.trace_id
    );

    let (spans, server_span) = receiver
        .wait_for(
            "the server's span of SendMessage, under the client's root",
            |spans| {
                let server_span = send_message_server_span(spans)?;
                let chain = ancestors(spans, server_span);
                chain
                    .last()
                    .is_some_and(|root| root.is_root())
                    .then(|| (spans.to_vec(), server_span.clone()))
            },
        )
        .await?;

    let others: Vec<&Span> = spans
        .iter()
        .filter(|s| s.trace_id != run.trace_id)
        .collect();
    ensure!(
        others.is_empty(),
        "spans outside the client's trace {}: {others:#?}",
        run.trace_id
    );
    let chain = ancestors(&spans, &server_span);
    let root = chain.last().copied().unwrap();
    ensure!(
        root.is_from(PYTHON_CLIENT_SERVICE)
            && root.name == "client_driver send"
            && root.kind == SpanKind::Internal,
        "the trace's root is {root:#?}"
    );
    let parent = chain[0];
    ensure!(
        parent.is_from(PYTHON_CLIENT_SERVICE)
            && parent.kind == SpanKind::Client
            && parent.name.starts_with("POST"),
        "the server span's parent is not the client's HTTP span: {parent:#?}"
    );
    ensure!(
        parent
            .str_attribute("url.full")
            .or(parent.str_attribute("http.url"))
            == Some(format!("{}/", server.base_url).as_str()),
        "the client span's attributes: {:?}",
        parent.attributes
    );
    ensure!(
        server_span.resource.get("telemetry.sdk.language") == Some(&json!("python"))
            && server_span.status.code != StatusCode::Error,
        "the server span: {server_span:#?}"
    );
    // The SDK's own spans (its telemetry extra) sit below the HTTP span.
    ensure!(
        spans.iter().any(|s| s.scope == "a2a-python-sdk"
            && s.is_from(TracedPythonServer::SERVICE)
            && is_ancestor(&spans, &server_span, s)),
        "no a2a-sdk span under the server span"
    );
    ensure!(
        receiver.stats().await?.gzip > 0,
        "the server's exports were not gzip-encoded"
    );

    receiver.clear().await?;
    ensure!(
        receiver.spans().await?.is_empty(),
        "spans are left after clear"
    );
    Ok(())
}

#[tokio::test]
async fn an_export_is_decoded_from_protobuf_and_json_and_a_bad_body_refused() -> anyhow::Result<()>
{
    let receiver = OtlpReceiver::start().await?;

    // An empty ExportTraceServiceRequest is a valid export; the answer is an empty
    // ExportTraceServiceResponse (zero bytes) in the same encoding.
    let (status, body) = receiver.post_export(PROTOBUF, Vec::new()).await?;
    ensure!(
        status == HttpStatus::OK && body.is_empty(),
        "empty export: {status} {body:?}"
    );

    // Field 1 (resource_spans) says 255 bytes follow; none do.
    let (status, _) = receiver.post_export(PROTOBUF, vec![0x0a, 0xff]).await?;
    ensure!(
        status == HttpStatus::BAD_REQUEST,
        "truncated protobuf: {status}"
    );
    let (status, _) = receiver
        .post_export("application/json", b"{not json".to_vec())
        .await?;
    ensure!(status == HttpStatus::BAD_REQUEST, "bad JSON: {status}");
    let (status, _) = receiver.post_export("text/plain", b"x".to_vec()).await?;
    ensure!(
        status == HttpStatus::UNSUPPORTED_MEDIA_TYPE,
        "text/plain: {status}"
    );

    // OTLP/JSON: hex ids, int64 as strings, enums as numbers.
    let export = json!({"resourceSpans": [{
        "resource": {"attributes": [
            {"key": "service.name", "value": {"stringValue": "json-exporter"}},
            {"key": "host.arch", "value": {"stringValue": "amd64"}}]},
        "scopeSpans": [{"scope": {"name": "handmade", "version": "0.1"}, "spans": [{
            "traceId": "5B8EFFF798038103D269B633813FC60C",
            "spanId": "eee19b7ec3c1b174",
            "parentSpanId": "eee19b7ec3c1b173",
            "name": "chat model-a",
            "kind": 3,
            "startTimeUnixNano": "1700000000000000000",
            "endTimeUnixNano": "1700000000500000000",
            "status": {"code": 2, "message": "boom"},
            "attributes": [
                {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "12"}},
                {"key": "ratio", "value": {"doubleValue": 0.5}},
                {"key": "streamed", "value": {"boolValue": true}},
                {"key": "gen_ai.response.finish_reasons", "value": {"arrayValue": {"values": [{"stringValue": "stop"}]}}}],
            "links": [{"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331"}]
        }]}]
    }]});
    let (status, body) = receiver
        .post_export("application/json", serde_json::to_vec(&export)?)
        .await?;
    ensure!(
        status == HttpStatus::OK,
        "JSON export: {status} {}",
        String::from_utf8_lossy(&body)
    );
    let spans = receiver.spans().await?;
    ensure!(spans.len() == 1, "spans {spans:#?}");
    let span = &spans[0];
    ensure!(
        span.trace_id == "5b8efff798038103d269b633813fc60c"
            && span.span_id == "eee19b7ec3c1b174"
            && span.parent_span_id.as_deref() == Some("eee19b7ec3c1b173")
            && span.kind == SpanKind::Client
            && span.status.code == StatusCode::Error
            && span.status.message == "boom"
            && span.duration() == Duration::from_millis(500)
            && span.service.as_deref() == Some("json-exporter")
            && span.resource.get("host.arch") == Some(&json!("amd64"))
            && span.scope == "handmade"
            && span.scope_version == "0.1",
        "decoded {span:#?}"
    );
    ensure!(
        span.int_attribute("gen_ai.usage.input_tokens") == Some(12)
            && span.attribute("ratio") == Some(&json!(0.5))
            && span.attribute("streamed") == Some(&json!(true))
            && span.attribute("gen_ai.response.finish_reasons") == Some(&json!(["stop"])),
        "attributes {:?}",
        span.attributes
    );
    ensure!(
        span.links.len() == 1
            && span.links[0].trace_id == "0af7651916cd43dd8448eb211c80319c"
            && span.links[0].span_id == "b7ad6b7169203331",
        "links {:?}",
        span.links
    );
    ensure!(
        receiver
            .trace("5b8efff798038103d269b633813fc60c")
            .await?
            .len()
            == 1
            && receiver
                .trace("0af7651916cd43dd8448eb211c80319c")
                .await?
                .is_empty(),
        "GET /spans?trace_id= does not select by trace"
    );

    let stats = receiver.stats().await?;
    ensure!(
        (stats.exports, stats.accepted, stats.refused, stats.spans) == (5, 2, 3, 1),
        "stats {stats:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_receiver_told_to_fail_answers_every_export_with_that_status() -> anyhow::Result<()> {
    let receiver = OtlpReceiver::start_with(ReceiverOptions {
        fail_with: Some(503),
        ..ReceiverOptions::default()
    })
    .await?;
    for _ in 0..2 {
        let (status, _) = receiver.post_export(PROTOBUF, Vec::new()).await?;
        ensure!(
            status == HttpStatus::SERVICE_UNAVAILABLE,
            "export answered {status}"
        );
    }
    let stats = receiver.stats().await?;
    ensure!(
        (stats.exports, stats.accepted, stats.refused, stats.spans) == (2, 0, 2, 0),
        "stats {stats:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_slow_receiver_still_keeps_what_it_is_sent() -> anyhow::Result<()> {
    let receiver = OtlpReceiver::start_with(ReceiverOptions {
        delay: Some(Duration::from_millis(300)),
        ..ReceiverOptions::default()
    })
    .await?;
    let export = json!({"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331", "name": "late"}]}]}]});
    let (status, _) = receiver
        .post_export("application/json", serde_json::to_vec(&export)?)
        .await?;
    ensure!(status == HttpStatus::OK, "export answered {status}");
    let names: Vec<String> = receiver
        .spans()
        .await?
        .into_iter()
        .map(|s| s.name)
        .collect();
    ensure!(names == ["late"], "spans {names:?}");
    Ok(())
}
