//! An OTLP/HTTP trace receiver for the tracing tests, and the Python peers that trace.
//!
//! [`OtlpReceiver`] runs `tests/peers/otlp_receiver.py`, which decodes exports with the
//! official OpenTelemetry protobuf definitions (`opentelemetry-proto`) and keeps every span as
//! a flat record, read back here as [`Span`]s. [`ReceiverOptions`] make it a bad collector
//! (failing every export, or slow). [`TracedPythonServer`] and [`run_traced_driver`] are the
//! Python SDK's echo server and client driver with OpenTelemetry on, exporting to a receiver.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::node::poll_until;
use crate::process::{ChildProcess, command, workspace_root};
use crate::python::{DriverOutput, python, run_driver_with};

/// How long [`OtlpReceiver::wait_for`] waits for the spans it is asked about.
pub const SPANS_WITHIN: Duration = Duration::from_secs(30);

/// How long a Python peer may take to start (the SDK imports are slow on a busy machine).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How the receiver answers exports.
#[derive(Debug, Clone, Default)]
pub struct ReceiverOptions {
    /// Answer every export with this HTTP status (e.g. 503) and keep nothing.
    pub fail_with: Option<u16>,
    /// Wait this long before answering each export.
    pub delay: Option<Duration>,
}

/// A running `otlp_receiver.py` on a free loopback port.
#[derive(Debug)]
pub struct OtlpReceiver {
    _process: ChildProcess,
    base_url: String,
    http: reqwest::Client,
}

impl OtlpReceiver {
    /// Starts a receiver that accepts every well-formed export.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with(ReceiverOptions::default()).await
    }

    /// Starts a receiver that answers as `options` say, and waits until it accepts connections.
    pub async fn start_with(options: ReceiverOptions) -> anyhow::Result<Self> {
        let mut cmd = command(python()?);
        cmd.arg(workspace_root().join("tests/peers/otlp_receiver.py"))
            .args(["--host", "127.0.0.1", "--port", "0"]);
        if let Some(status) = options.fail_with {
            cmd.arg("--fail-with").arg(status.to_string());
        }
        if let Some(delay) = options.delay {
            cmd.arg("--delay-ms").arg(delay.as_millis().to_string());
        }
        let (process, base_url) =
            ChildProcess::spawn_ready("OTLP receiver", cmd, START_TIMEOUT).await?;
        Ok(Self {
            _process: process,
            base_url,
            http: reqwest::Client::new(),
        })
    }

    /// The base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` takes it (exporters add `/v1/traces`).
    pub fn endpoint(&self) -> &str {
        &self.base_url
    }

    /// The traces endpoint itself, as `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` takes it.
    pub fn traces_url(&self) -> String {
        format!("{}/v1/traces", self.base_url)
    }

    /// Every span received so far, oldest export first.
    pub async fn spans(&self) -> anyhow::Result<Vec<Span>> {
        self.get_json("/spans").await
    }

    /// The spans of one trace (`trace_id` in hex).
    pub async fn trace(&self, trace_id: &str) -> anyhow::Result<Vec<Span>> {
        self.get_json(&format!("/spans?trace_id={trace_id}")).await
    }

    /// The metric data points received so far named `name`, oldest export first.
    pub async fn metric_points(&self, name: &str) -> anyhow::Result<Vec<MetricPoint>> {
        self.get_json(&format!("/metrics?name={name}")).await
    }

    /// What the receiver has counted.
    pub async fn stats(&self) -> anyhow::Result<ReceiverStats> {
        self.get_json("/stats").await
    }

    /// Forgets every span received so far (the counters stay).
    pub async fn clear(&self) -> anyhow::Result<()> {
        let response = self
            .http
            .delete(format!("{}/spans", self.base_url))
            .send()
            .await
            .context("cannot reach the OTLP receiver")?;
        ensure!(
            response.status().is_success(),
            "DELETE /spans answered {}",
            response.status()
        );
        Ok(())
    }

    /// Polls the spans until `check` finds what it looks for, for at most [`SPANS_WITHIN`];
    /// `what` names it in the error. Spans arrive when their exporter sends them, so a test
    /// waits for the ones it needs rather than reading once.
    pub async fn wait_for<T>(
        &self,
        what: &str,
        check: impl FnMut(&[Span]) -> Option<T>,
    ) -> anyhow::Result<T> {
        // Each poll's future borrows `check`, one poll at a time.
        let check = Mutex::new(check);
        let check = &check;
        poll_until(what, SPANS_WITHIN, || async move {
            let spans = self.spans().await?;
            let mut check = check.lock().unwrap_or_else(PoisonError::into_inner);
            Ok(check(&spans))
        })
        .await
    }

    /// POSTs `body` to `/v1/traces` as an exporter would, and returns the status and body.
    pub async fn post_export(
        &self,
        content_type: &str,
        body: Vec<u8>,
    ) -> anyhow::Result<(reqwest::StatusCode, Vec<u8>)> {
        let response = self
            .http
            .post(self.traces_url())
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body)
            .send()
            .await
            .context("cannot reach the OTLP receiver")?;
        let status = response.status();
        Ok((status, response.bytes().await?.to_vec()))
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        let response = self
            .http
            .get(format!("{}{path}", self.base_url))
            .send()
            .await
            .context("cannot reach the OTLP receiver")?;
        ensure!(
            response.status().is_success(),
            "GET {path} answered {}",
            response.status()
        );
        response
            .json()
            .await
            .with_context(|| format!("GET {path} answered something else than expected"))
    }
}

/// The receiver's counters.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
pub struct ReceiverStats {
    /// Exports received (POST /v1/traces), answered or not.
    pub exports: u64,
    /// Exports decoded and kept.
    pub accepted: u64,
    /// Exports answered with an error status (bad bodies, `fail_with`).
    pub refused: u64,
    /// Exports that came with `Content-Encoding: gzip`.
    pub gzip: u64,
    /// Spans kept now.
    pub spans: u64,
    /// Metrics exports received (POST /v1/metrics), answered or not.
    pub metric_exports: u64,
    /// Metric data points kept now.
    pub points: u64,
}

/// One metric data point as the receiver keeps it, with its metric's name, unit and kind.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct MetricPoint {
    /// The metric's name.
    pub name: String,
    /// The metric's description.
    pub description: String,
    /// The metric's unit (UCUM: `s`, `1`, or empty).
    pub unit: String,
    /// `gauge`, `sum` or `histogram`.
    pub kind: String,
    /// The point's attributes.
    pub attributes: Map<String, Value>,
    /// Unix time in nanoseconds of the point.
    pub time_unix_nano: u64,
    /// A gauge's or sum's value.
    #[serde(default)]
    pub value: Option<f64>,
    /// A sum's or histogram's `AGGREGATION_TEMPORALITY_...`.
    #[serde(default)]
    pub temporality: Option<String>,
    /// Whether a sum only grows.
    #[serde(default)]
    pub monotonic: Option<bool>,
    /// A histogram's count of values.
    #[serde(default)]
    pub count: Option<u64>,
    /// A histogram's sum of values.
    #[serde(default)]
    pub sum: Option<f64>,
    /// A histogram's count in each bucket (one more than its bounds).
    #[serde(default)]
    pub bucket_counts: Vec<u64>,
    /// A histogram's bucket bounds.
    #[serde(default)]
    pub explicit_bounds: Vec<f64>,
    /// The resource's `service.name`.
    pub service: Option<String>,
    /// The instrumentation scope's name.
    pub scope: String,
}

impl MetricPoint {
    /// Whether the point's attributes include every one of `labels`.
    pub fn has(&self, labels: &[(&str, &str)]) -> bool {
        labels
            .iter()
            .all(|(key, value)| self.attributes.get(*key).and_then(Value::as_str) == Some(*value))
    }
}

/// One span as the receiver keeps it: ids in lowercase hex, enums by their proto names.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Span {
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// The parent's span id; `None` for a root span.
    pub parent_span_id: Option<String>,
    /// The W3C `tracestate`, empty when none.
    pub trace_state: String,
    /// What the span is called.
    pub name: String,
    /// Its kind.
    pub kind: SpanKind,
    /// Unix time in nanoseconds.
    pub start_time_unix_nano: u64,
    /// Unix time in nanoseconds.
    pub end_time_unix_nano: u64,
    /// Its status.
    pub status: SpanStatus,
    /// Its attributes: strings, integers, doubles, booleans, arrays, and objects for kvlists
    /// (bytes as hex).
    pub attributes: Map<String, Value>,
    /// Its events.
    pub events: Vec<SpanEvent>,
    /// Its links to other spans.
    pub links: Vec<SpanLink>,
    /// The resource's `service.name`.
    pub service: Option<String>,
    /// Every attribute of the resource, `service.name` included.
    pub resource: Map<String, Value>,
    /// The instrumentation scope's name.
    pub scope: String,
    /// The instrumentation scope's version.
    pub scope_version: String,
}

impl Span {
    /// The attribute `key`, if the span has it.
    pub fn attribute(&self, key: &str) -> Option<&Value> {
        self.attributes.get(key)
    }

    /// The attribute `key` if it is a string.
    pub fn str_attribute(&self, key: &str) -> Option<&str> {
        self.attribute(key).and_then(Value::as_str)
    }

    /// The attribute `key` if it is an integer.
    pub fn int_attribute(&self, key: &str) -> Option<i64> {
        self.attribute(key).and_then(Value::as_i64)
    }

    /// Whether the span has no parent.
    pub fn is_root(&self) -> bool {
        self.parent_span_id.is_none()
    }

    /// Whether the span comes from `service` (its resource's `service.name`).
    pub fn is_from(&self, service: &str) -> bool {
        self.service.as_deref() == Some(service)
    }

    /// The span's duration (zero if it ended before it started).
    pub fn duration(&self) -> Duration {
        Duration::from_nanos(
            self.end_time_unix_nano
                .saturating_sub(self.start_time_unix_nano),
        )
    }
}

/// `Span.SpanKind` of the OTLP protobuf.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
pub enum SpanKind {
    /// `SPAN_KIND_UNSPECIFIED`.
    #[serde(rename = "SPAN_KIND_UNSPECIFIED")]
    Unspecified,
    /// `SPAN_KIND_INTERNAL`.
    #[serde(rename = "SPAN_KIND_INTERNAL")]
    Internal,
    /// `SPAN_KIND_SERVER`.
    #[serde(rename = "SPAN_KIND_SERVER")]
    Server,
    /// `SPAN_KIND_CLIENT`.
    #[serde(rename = "SPAN_KIND_CLIENT")]
    Client,
    /// `SPAN_KIND_PRODUCER`.
    #[serde(rename = "SPAN_KIND_PRODUCER")]
    Producer,
    /// `SPAN_KIND_CONSUMER`.
    #[serde(rename = "SPAN_KIND_CONSUMER")]
    Consumer,
}

/// `Status` of the OTLP protobuf.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct SpanStatus {
    /// The code.
    pub code: StatusCode,
    /// The message, empty when none.
    pub message: String,
}

/// `Status.StatusCode` of the OTLP protobuf.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
pub enum StatusCode {
    /// `STATUS_CODE_UNSET`.
    #[serde(rename = "STATUS_CODE_UNSET")]
    Unset,
    /// `STATUS_CODE_OK`.
    #[serde(rename = "STATUS_CODE_OK")]
    Ok,
    /// `STATUS_CODE_ERROR`.
    #[serde(rename = "STATUS_CODE_ERROR")]
    Error,
}

/// An event of a span.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct SpanEvent {
    /// Its name (`exception` for a recorded error).
    pub name: String,
    /// Unix time in nanoseconds.
    pub time_unix_nano: u64,
    /// Its attributes.
    pub attributes: Map<String, Value>,
}

/// A link from a span to another span.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct SpanLink {
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// The W3C `tracestate` of the linked span.
    pub trace_state: String,
    /// The link's attributes.
    pub attributes: Map<String, Value>,
}

/// The parent of `span` among `spans`, if it is there.
pub fn parent<'a>(spans: &'a [Span], span: &Span) -> Option<&'a Span> {
    let id = span.parent_span_id.as_deref()?;
    spans
        .iter()
        .find(|s| s.trace_id == span.trace_id && s.span_id == id)
}

/// The ancestors of `span` among `spans`, its parent first, up to the first one whose parent
/// is not among them (the root, when every span has arrived).
pub fn ancestors<'a>(spans: &'a [Span], span: &Span) -> Vec<&'a Span> {
    let mut chain: Vec<&Span> = Vec::new();
    let mut next = parent(spans, span);
    while let Some(found) = next {
        if chain.iter().any(|s| s.span_id == found.span_id) {
            break; // a loop in broken data: stop rather than spin
        }
        chain.push(found);
        next = parent(spans, found);
    }
    chain
}

/// Whether `ancestor` is `span`'s parent, or its parent's, and so on.
pub fn is_ancestor(spans: &[Span], ancestor: &Span, span: &Span) -> bool {
    ancestors(spans, span)
        .iter()
        .any(|s| s.trace_id == ancestor.trace_id && s.span_id == ancestor.span_id)
}

/// The Python SDK's echo server (`echo_server.py --otlp`), tracing with OpenTelemetry: a
/// SERVER span per request from the ASGI middleware (scope
/// [`TracedPythonServer::HTTP_SCOPE`]), continuing the request's `traceparent`, with the
/// SDK's own spans below it.
#[derive(Debug)]
pub struct TracedPythonServer {
    _process: ChildProcess,
    /// Where its card is published.
    pub base_url: String,
}

impl TracedPythonServer {
    /// The `service.name` of its spans.
    pub const SERVICE: &str = "python-peer";
    /// The instrumentation scope of its HTTP server spans.
    pub const HTTP_SCOPE: &str = "opentelemetry.instrumentation.asgi";

    /// Starts the server exporting to `receiver`, and waits until it accepts connections.
    pub async fn start(receiver: &OtlpReceiver) -> anyhow::Result<Self> {
        Self::start_with_env(receiver, &[]).await
    }

    /// Like [`TracedPythonServer::start`], with extra environment variables for the
    /// OpenTelemetry SDK (e.g. `OTEL_EXPORTER_OTLP_COMPRESSION=gzip`).
    pub async fn start_with_env(
        receiver: &OtlpReceiver,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let mut cmd = command(python()?);
        cmd.arg(workspace_root().join("tests/peers/echo_server.py"))
            .args(["--host", "127.0.0.1", "--port", "0"])
            .args(["--otlp", receiver.endpoint()])
            .args(["--service-name", Self::SERVICE])
            .envs(env.iter().copied());
        let (process, base_url) =
            ChildProcess::spawn_ready("traced python echo server", cmd, START_TIMEOUT).await?;
        Ok(Self {
            _process: process,
            base_url,
        })
    }
}

/// What the traced Python client did: the trace its root span started, and its output.
#[derive(Debug)]
pub struct TracedDriverOutput {
    /// The trace id of the client's root span, 32 hex digits.
    pub trace_id: String,
    /// The exit code, the scenario's output lines (without the trace id's) and stderr.
    pub output: DriverOutput,
}

/// The `service.name` of the traced Python client's spans.
pub const PYTHON_CLIENT_SERVICE: &str = "python-client";

/// Runs the Python SDK client (`client_driver.py --otlp`) against `base_url` over `binding`
/// (`jsonrpc` or `rest`), tracing into `receiver`: a root span `client_driver SCENARIO` of
/// service [`PYTHON_CLIENT_SERVICE`], and the httpx instrumentation's CLIENT spans below it,
/// which send `traceparent` with each request.
pub async fn run_traced_driver(
    receiver: &OtlpReceiver,
    base_url: &str,
    binding: &str,
    args: &[&str],
) -> anyhow::Result<TracedDriverOutput> {
    let otlp = ["--otlp", receiver.endpoint()];
    let mut output = run_driver_with(base_url, binding, &otlp, args).await?;
    let Some(first) = output.lines.first() else {
        bail!(
            "the traced Python client printed nothing (exit {}): {}",
            output.code,
            output.stderr
        );
    };
    let Some(trace_id) = first["traceId"].as_str().map(str::to_owned) else {
        bail!("the traced Python client's first line is not its trace id: {first}");
    };
    output.lines.remove(0);
    Ok(TracedDriverOutput { trace_id, output })
}
