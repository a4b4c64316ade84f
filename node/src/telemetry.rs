//! OpenTelemetry traces and the OTLP export of metrics: the exporters, set up the standard way
//! (`OTEL_*`) or from the `telemetry:` section; the W3C trace context read from requests and
//! sent with every call; and the trace and span ids on log lines.
//!
//! The node's spans are `tracing` spans of target [`TARGET`], made with [`span!`]. No log
//! layer shows them, so with tracing off nobody is interested in them and each costs one
//! check of a cached interest; with tracing on, `tracing-opentelemetry` makes them
//! OpenTelemetry spans, and the batch processor exports them from its own thread, dropping
//! what does not fit its queue: a request never waits for the collector.

use std::collections::HashMap;
use std::fmt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http::HeaderMap;
use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use serde::Serialize;
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The target of the node's trace spans: only the OpenTelemetry layer takes it.
pub const TARGET: &str = "mew::trace";

/// An INFO span of target [`TARGET`]: a span of the node's traces, not of its logs.
macro_rules! span {
    ($($rest:tt)*) => {
        tracing::info_span!(target: "mew::trace", $($rest)*)
    };
}
pub(crate) use span;

/// `telemetry:` — where traces go and whose trace context is continued.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TelemetryConfig {
    /// The OTLP/HTTP base URL (`/v1/traces` is added); unset: `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), and without those, no tracing.
    pub endpoint: Option<String>,
    /// `service.name` of the node's spans when `OTEL_SERVICE_NAME` does not say; unset: the
    /// node's name.
    pub service_name: Option<String>,
    /// Whose incoming trace context a request's span continues.
    pub inbound: Inbound,
    /// Whether model calls' spans carry the prompt and the completion (off: only sizes,
    /// models, tokens and finish reasons).
    pub capture_content: bool,
    /// Whether the node's metrics are exported over OTLP too, to the same collector (beside
    /// `/metrics`), as OpenTelemetry SDKs do by default (`OTEL_METRICS_EXPORTER=none` turns
    /// it off as well).
    pub metrics: bool,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            endpoint: None,
            service_name: None,
            inbound: Inbound::All,
            capture_content: false,
            metrics: true,
        }
    }
}

/// Whose `traceparent` a request's span takes as its parent; the others start a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Inbound {
    /// Every caller's.
    #[default]
    All,
    /// Authenticated callers' only (traces that feed billing or alerts).
    Authenticated,
    /// Nobody's.
    None,
}

impl TelemetryConfig {
    /// Where spans go: the configured endpoint, or the standard variables (`None`: tracing is
    /// off, as it is when `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`).
    fn exports_to(&self) -> Option<String> {
        self.signal_endpoint(Signal::Traces)
    }

    /// Where metrics go, the same way (`telemetry.metrics: false` or
    /// `OTEL_METRICS_EXPORTER=none`: nowhere but `/metrics`).
    fn exports_metrics_to(&self) -> Option<String> {
        self.metrics
            .then(|| self.signal_endpoint(Signal::Metrics))
            .flatten()
    }

    /// The OTLP/HTTP URL of one signal, as the OpenTelemetry specification resolves it: the
    /// signal's own variable is the whole URL, the general one a base the signal's path is
    /// added to; the configured endpoint is such a base too, and comes first.
    fn signal_endpoint(&self, signal: Signal) -> Option<String> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let (exporter, own, path) = match signal {
            Signal::Traces => (
                "OTEL_TRACES_EXPORTER",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "/v1/traces",
            ),
            Signal::Metrics => (
                "OTEL_METRICS_EXPORTER",
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "/v1/metrics",
            ),
        };
        if env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || env(exporter).is_some_and(|v| v.eq_ignore_ascii_case("none"))
        {
            return None;
        }
        let under = |base: &str| format!("{}{path}", base.trim_end_matches('/'));
        if let Some(endpoint) = &self.endpoint {
            return Some(under(endpoint));
        }
        env(own).or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT").map(|base| under(&base)))
    }

    /// The resource of the node's spans and metrics: `service.name` from `OTEL_SERVICE_NAME`
    /// (read by the SDK), else the configured one, else the node's name.
    fn resource(&self, node_name: &str) -> opentelemetry_sdk::Resource {
        let mut resource = opentelemetry_sdk::Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name(
                self.service_name
                    .clone()
                    .unwrap_or_else(|| node_name.to_owned()),
            );
        }
        resource.build()
    }
}

/// The OTLP signals the node exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signal {
    Traces,
    Metrics,
}

impl Signal {
    fn name(self) -> &'static str {
        match self {
            Self::Traces => "traces",
            Self::Metrics => "metrics",
        }
    }
}

/// The tracer provider of the process, once tracing is on: flushed when the node stops.
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// The meter provider of the process, once metrics are exported: flushed when the node stops.
static METER_PROVIDER: OnceLock<SdkMeterProvider> = OnceLock::new();

/// Whether model calls' spans carry their content (`telemetry.capture_content`).
static CAPTURE_CONTENT: AtomicBool = AtomicBool::new(false);

/// Whether the node is to put prompts and completions on its spans.
pub fn captures_content() -> bool {
    CAPTURE_CONTENT.load(Ordering::Relaxed)
}

/// The OpenTelemetry layer for the node's subscriber, or `None` when tracing is off. It takes
/// the node's spans ([`TARGET`]) and the warnings and errors of the node's crates (as span
/// events).
pub fn layer<S>(
    config: &TelemetryConfig,
    node_name: &str,
) -> anyhow::Result<Option<impl Layer<S> + use<S>>>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    let Some(endpoint) = config.exports_to() else {
        return Ok(None);
    };
    use opentelemetry_otlp::WithExportConfig as _;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(endpoint.clone())
        .build()
        .map_err(|e| anyhow::anyhow!("cannot export traces to {endpoint}: {e}"))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(Warned::new(exporter, Signal::Traces, endpoint))
        .with_resource(config.resource(node_name))
        .build();
    let tracer = provider.tracer("mew");
    // A second call (tests start one node per process; a process has one subscriber) keeps
    // the first provider.
    let _ = PROVIDER.set(provider);
    CAPTURE_CONTENT.store(config.capture_content, Ordering::Relaxed);
    // The trace spans, and the node's warnings and errors inside them (as span events; the
    // INFO lines would cost every span more than they tell); not the spans made for log lines.
    let events = Targets::new()
        .with_target("mew_node", tracing::Level::WARN)
        .with_target("mew_transport", tracing::Level::WARN);
    let targets = tracing_subscriber::filter::filter_fn(move |meta| {
        if meta.is_span() {
            meta.target() == TARGET
        } else {
            events.would_enable(meta.target(), meta.level())
        }
    });
    Ok(Some(
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_target(false)
            .with_filter(targets),
    ))
}

/// Whether this process exports traces (`layer` found where to).
pub fn enabled() -> bool {
    PROVIDER.get().is_some()
}

/// The meter the node's metrics are exported through over OTLP, and how often they are
/// (`OTEL_METRIC_EXPORT_INTERVAL`, 60 s unless set); `None` when the telemetry exports no
/// metrics. The periodic reader exports from its own thread, as the batch processor does.
pub fn meter(
    config: &TelemetryConfig,
    node_name: &str,
) -> anyhow::Result<Option<(Meter, Duration)>> {
    let Some(endpoint) = config.exports_metrics_to() else {
        return Ok(None);
    };
    if let Some(provider) = METER_PROVIDER.get() {
        return Ok(Some((provider.meter("mew"), metric_interval())));
    }
    use opentelemetry_otlp::WithExportConfig as _;
    let exporter = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .with_endpoint(endpoint.clone())
        .build()
        .map_err(|e| anyhow::anyhow!("cannot export metrics to {endpoint}: {e}"))?;
    let interval = metric_interval();
    let reader = PeriodicReader::builder(Warned::new(exporter, Signal::Metrics, endpoint))
        .with_interval(interval)
        .build();
    let provider = SdkMeterProvider::builder()
        .with_reader(reader)
        .with_resource(config.resource(node_name))
        .build();
    let meter = provider.meter("mew");
    let _ = METER_PROVIDER.set(provider);
    Ok(Some((meter, interval)))
}

/// `OTEL_METRIC_EXPORT_INTERVAL` (milliseconds), as the SDK reads it: 60 s when unset or not
/// a positive number.
fn metric_interval() -> Duration {
    std::env::var("OTEL_METRIC_EXPORT_INTERVAL")
        .ok()
        .and_then(|ms| ms.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map_or(Duration::from_secs(60), Duration::from_millis)
}

/// Sends what the batch processor and the metric reader still hold, and stops them: the last
/// thing a node does.
pub fn flush() {
    if let Some(provider) = PROVIDER.get() {
        let _ = provider.shutdown();
    }
    if let Some(provider) = METER_PROVIDER.get() {
        let _ = provider.shutdown();
    }
}

/// An OTLP exporter, saying once that the collector refuses or cannot be reached (and once
/// when it answers again), instead of once per batch or never.
#[derive(Debug)]
struct Warned<E> {
    inner: E,
    signal: Signal,
    endpoint: String,
    failing: AtomicBool,
}

impl<E> Warned<E> {
    fn new(inner: E, signal: Signal, endpoint: String) -> Self {
        Self {
            inner,
            signal,
            endpoint,
            failing: AtomicBool::new(false),
        }
    }

    /// Says what an export's outcome changed: the first failure, or the first success after.
    fn observe(&self, result: &opentelemetry_sdk::error::OTelSdkResult) {
        let signal = self.signal.name();
        match result {
            Err(e) if !self.failing.swap(true, Ordering::Relaxed) => tracing::warn!(
                endpoint = %self.endpoint,
                error = %e,
                "cannot export {signal}; they are dropped until the collector answers"
            ),
            Ok(()) if self.failing.swap(false, Ordering::Relaxed) => {
                tracing::info!(endpoint = %self.endpoint, "exporting {signal} again");
            }
            _ => {}
        }
    }
}

impl<E: SpanExporter> SpanExporter for Warned<E> {
    async fn export(&self, batch: Vec<SpanData>) -> opentelemetry_sdk::error::OTelSdkResult {
        let result = self.inner.export(batch).await;
        self.observe(&result);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

impl<E: PushMetricExporter> PushMetricExporter for Warned<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> opentelemetry_sdk::error::OTelSdkResult {
        let result = self.inner.export(metrics).await;
        self.observe(&result);
        result
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

/// The W3C trace context of the current span as headers (`traceparent`, `tracestate`):
/// nothing when tracing is off or no span is current. Inbound `baggage` is never forwarded.
pub fn inject(headers: &mut HeaderMap) {
    let context = tracing::Span::current().context();
    if context.span().span_context().is_valid() {
        TraceContextPropagator::new()
            .inject_context(&context, &mut opentelemetry_http::HeaderInjector(headers));
    }
}

/// The trace context a request's headers carry (an empty context when none or malformed).
pub fn extract(headers: &HeaderMap) -> opentelemetry::Context {
    TraceContextPropagator::new().extract(&opentelemetry_http::HeaderExtractor(headers))
}

/// Makes `context` the parent of `span` (before it is entered).
pub fn set_parent(span: &tracing::Span, context: opentelemetry::Context) {
    let _ = span.set_parent(context);
}

/// Names `span` anew: what a span of a request is called is known only once it is served
/// (its operation), after the span started.
pub fn rename(span: &tracing::Span, name: String) {
    span.context().span().update_name(name);
}

/// Links `span` to the span `link` names (the one that was running when a turn resumes).
pub fn add_link(span: &tracing::Span, link: &TraceParent) {
    let context = link.context();
    let span_context = context.span().span_context().clone();
    if span_context.is_valid() {
        span.add_link(span_context);
    }
}

/// A stored W3C trace context: what a task keeps so that its later turns join its trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceParent {
    pub traceparent: String,
    pub tracestate: Option<String>,
}

impl TraceParent {
    /// The context of `span`, when it has a valid one (tracing is on).
    pub fn of(span: &tracing::Span) -> Option<Self> {
        let context = span.context();
        let span_context = context.span().span_context().clone();
        if !span_context.is_valid() {
            return None;
        }
        let mut carrier: HashMap<String, String> = HashMap::new();
        TraceContextPropagator::new().inject_context(&context, &mut carrier);
        Some(Self {
            traceparent: carrier.remove("traceparent")?,
            tracestate: carrier.remove("tracestate").filter(|s| !s.is_empty()),
        })
    }

    /// The context of the current span.
    pub fn current() -> Option<Self> {
        Self::of(&tracing::Span::current())
    }

    /// The OpenTelemetry context this names (empty when it is not a valid `traceparent`).
    pub fn context(&self) -> opentelemetry::Context {
        let mut carrier: HashMap<String, String> = HashMap::new();
        carrier.insert("traceparent".to_owned(), self.traceparent.clone());
        if let Some(state) = &self.tracestate {
            carrier.insert("tracestate".to_owned(), state.clone());
        }
        TraceContextPropagator::new().extract(&carrier)
    }
}

/// The trace id a task's metadata names (`mew.traceparent`), as hex: what trace viewers
/// search by.
pub fn trace_id_of_task(task: &mew_cards::Task) -> Option<String> {
    let traceparent = mew_cards::mew::MewMetadata::read(task.metadata.as_ref()).traceparent?;
    trace_id_of(&traceparent).map(str::to_owned)
}

/// The trace id of a W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`), if it is one.
pub fn trace_id_of(traceparent: &str) -> Option<&str> {
    let mut parts = traceparent.split('-');
    let (_version, trace, span) = (parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(trace, 32) && hex(span, 16) && trace != "0".repeat(32)).then_some(trace)
}

/// Adds the current span's trace context to the node's outgoing A2A requests.
#[derive(Debug, Default)]
pub struct TraceHeaders;

impl mew_transport::ContextHeaders for TraceHeaders {
    fn add_to(&self, headers: &mut HeaderMap) {
        inject(headers);
    }
}

/// The ids of the span an event happens in, when tracing is on.
fn current_ids() -> Option<(String, String)> {
    let context = opentelemetry::Context::current();
    let span = context.span();
    let span_context: &SpanContext = span.span_context();
    span_context.is_valid().then(|| {
        (
            span_context.trace_id().to_string(),
            span_context.span_id().to_string(),
        )
    })
}

/// A log line format that adds `trace_id` and `span_id` to the lines written inside a span
/// (a field of the JSON object, or `key=value` pairs at the end of a text line).
pub struct WithTraceIds<F> {
    inner: F,
    json: bool,
}

impl<F> WithTraceIds<F> {
    pub fn new(inner: F, json: bool) -> Self {
        Self { inner, json }
    }
}

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> fmt::Result {
        let Some((trace_id, span_id)) = current_ids() else {
            return self.inner.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        let body = line.trim_end_matches('\n');
        if self.json
            && let Some(rest) = body.strip_prefix('{')
        {
            let separator = if rest.trim_start().starts_with('}') {
                ""
            } else {
                ","
            };
            writeln!(
                writer,
                "{{\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\"{separator}{rest}"
            )
        } else {
            writeln!(writer, "{body} trace_id={trace_id} span_id={span_id}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_gives_its_trace_id_and_nothing_else_does() {
        let id = "4bf92f3577b34da6a3ce929d0e0e4736";
        assert_eq!(
            trace_id_of(&format!("00-{id}-00f067aa0ba902b7-01")),
            Some(id)
        );
        for bad in [
            "",
            "00",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e47zz-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        ] {
            assert_eq!(trace_id_of(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_stored_context_reads_back_as_the_same_span() {
        let stored = TraceParent {
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned(),
            tracestate: Some("vendor=1".to_owned()),
        };
        let context = stored.context();
        let span = context.span();
        let span_context = span.span_context();
        assert!(span_context.is_remote());
        assert_eq!(
            span_context.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(span_context.span_id().to_string(), "00f067aa0ba902b7");
        assert_eq!(span_context.trace_state().header(), "vendor=1");
        let junk = TraceParent {
            traceparent: "junk".to_owned(),
            tracestate: None,
        };
        assert!(!junk.context().span().span_context().is_valid());
    }

    /// Log lines written with `json` or text through [`WithTraceIds`], with an OpenTelemetry
    /// layer that exports nothing: one inside a span, one outside.
    fn lines(json: bool) -> (Vec<String>, String, String) {
        use std::sync::{Arc, Mutex};
        use tracing_subscriber::layer::SubscriberExt as _;

        #[derive(Clone, Default)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let make = move || writer.clone();
        let lines: Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync> = if json {
            tracing_subscriber::fmt::layer()
                .json()
                .event_format(WithTraceIds::new(
                    tracing_subscriber::fmt::format().json(),
                    true,
                ))
                .with_writer(make)
                .boxed()
        } else {
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .event_format(WithTraceIds::new(tracing_subscriber::fmt::format(), false))
                .with_writer(make)
                .boxed()
        };
        let tracer = SdkTracerProvider::builder().build().tracer("test");
        let subscriber = tracing_subscriber::registry()
            .with(lines)
            .with(tracing_opentelemetry::layer().with_tracer(tracer));
        let ids = tracing::subscriber::with_default(subscriber, || {
            let span = span!("work");
            let _entered = span.enter();
            tracing::info!("inside");
            let ids = current_ids().unwrap();
            drop(_entered);
            tracing::info!("outside");
            ids
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        (text.lines().map(str::to_owned).collect(), ids.0, ids.1)
    }

    #[test]
    fn a_text_line_inside_a_span_ends_with_its_trace_and_span_ids() {
        let (lines, trace, span) = lines(false);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].contains("inside"), "{lines:?}");
        assert!(
            lines[0].ends_with(&format!(" trace_id={trace} span_id={span}")),
            "{lines:?}"
        );
        assert!(!lines[1].contains("trace_id"), "{lines:?}");
    }

    #[test]
    fn a_json_line_inside_a_span_has_trace_and_span_id_fields() {
        let (lines, trace, span) = lines(true);
        let inside: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(inside["trace_id"], trace.as_str(), "{inside}");
        assert_eq!(inside["span_id"], span.as_str(), "{inside}");
        assert_eq!(inside["fields"]["message"], "inside", "{inside}");
        let outside: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
        assert!(outside.get("trace_id").is_none(), "{outside}");
        assert_eq!(outside["fields"]["message"], "outside", "{outside}");
    }

    #[test]
    fn without_tracing_nothing_is_injected() {
        let mut headers = HeaderMap::new();
        inject(&mut headers);
        assert!(headers.is_empty());
        assert_eq!(TraceParent::current(), None);
    }
}
