//! The node's Prometheus metrics: one process-wide registry, the typed functions every layer
//! records through, the `metrics:` config section, and the text exposition of `/metrics`.
//!
//! The registry is one `LazyLock` for the process, as `tracing`'s dispatcher is, and not a value
//! passed down: it is recorded from every layer (the server, providers, tools, MCP, hooks, push,
//! the task manager), it holds no configuration, and threading a handle through each of those
//! constructors would add a parameter to dozens of them for no behaviour that depends on it.
//! Recording is switched on once, by `mew up` with `metrics.enabled` ([`enable`]); until then
//! every recording function returns at its first load of an atomic, and the registry is never
//! built (so `mew run`, `mew chat` and `metrics.enabled: false` pay nothing else).
//!
//! Labels stay bounded: methods, states, outcomes and binding names are fixed sets; role,
//! provider, model, tool and MCP server names come from configuration and files, and each of
//! those labels keeps at most [`MAX_NAMES`] distinct values, folding any more into `other`. No
//! task id, context id or user text is ever a label.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex, OnceLock, PoisonError};

use mew_cards::TaskState;
use opentelemetry::KeyValue;
use opentelemetry::metrics as otel;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use serde::{Deserialize, Serialize};

/// `metrics:` — whether the node serves `/metrics`, and to whom.
///
/// ```yaml
/// metrics:
///   enabled: true       # false: no /metrics route, and nothing is recorded
///   access: loopback    # loopback | public | authenticated
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Whether `/metrics` is served and metrics are recorded.
    pub enabled: bool,
    /// Who may scrape `/metrics`.
    pub access: MetricsAccess,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            access: MetricsAccess::Loopback,
        }
    }
}

/// Who may scrape `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricsAccess {
    /// Callers on a loopback address without credentials; others authenticate as for the rest
    /// of the node (`auth:`).
    Loopback,
    /// Everyone, without credentials.
    Public,
    /// Only callers that authenticate as for the rest of the node, wherever they are.
    Authenticated,
}

/// The most distinct values one name label (role, provider, model, tool, MCP server) keeps;
/// any more are counted under `other`.
pub(crate) const MAX_NAMES: usize = 256;

/// The label value that unknown and surplus values are folded into.
pub(crate) const OTHER: &str = "other";

/// The content type of the Prometheus text format (0.0.4).
pub(crate) const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// The content type of the OpenMetrics text format, served when a scraper asks for it.
pub(crate) const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

static ENABLED: AtomicBool = AtomicBool::new(false);
static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// Switches recording on for the rest of the process (`mew up` with `metrics.enabled`).
pub(crate) fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
    LazyLock::force(&METRICS);
}

/// Whether recording is on.
pub(crate) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

fn metrics() -> Option<&'static Metrics> {
    ENABLED.load(Ordering::Relaxed).then(|| &*METRICS)
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Request and MCP call latencies, in seconds.
const SHORT_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Model call latencies, in seconds.
const MODEL_BUCKETS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// Task durations, in seconds.
const TASK_BUCKETS: &[f64] = &[
    0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0,
];

fn short_buckets() -> Histogram {
    Histogram::new(SHORT_BUCKETS.iter().copied())
}

fn model_buckets() -> Histogram {
    Histogram::new(MODEL_BUCKETS.iter().copied())
}

fn task_buckets() -> Histogram {
    Histogram::new(TASK_BUCKETS.iter().copied())
}

/// A label set: its Prometheus encoding, and the same labels as OpenTelemetry attributes.
macro_rules! label_set {
    ($name:ident { $($field:ident : $ty:ty),* $(,)? }) => {
        #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
        struct $name {
            $($field: $ty),*
        }

        impl $name {
            fn attributes(&self) -> Vec<KeyValue> {
                vec![$(KeyValue::new(attribute_key(stringify!($field)), self.$field.clone())),*]
            }
        }
    };
}

/// A field's name as a label's (`r#type` is `type`).
fn attribute_key(field: &'static str) -> &'static str {
    field.strip_prefix("r#").unwrap_or(field)
}

label_set!(RequestLabels { method: &'static str, binding: &'static str, status: &'static str });
label_set!(TaskLabels { role: String, state: &'static str });
label_set!(ModelLabels { provider: String, model: String, outcome: &'static str });
label_set!(TokenLabels { provider: String, model: String, r#type: &'static str });
label_set!(ToolLabels { tool: String, outcome: &'static str });
label_set!(StateLabels { state: &'static str });
label_set!(McpCallLabels { server: String, outcome: &'static str });
label_set!(HookLabels { event: &'static str, outcome: &'static str });
label_set!(OutcomeLabels { outcome: &'static str });

/// The names one label has taken, at most [`MAX_NAMES`].
#[derive(Default)]
struct Names(Mutex<HashSet<String>>);

impl Names {
    /// `name` as a label value: itself while it is known or there is room, else `other`.
    fn label(&self, name: &str) -> String {
        let mut names = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if names.contains(name) {
            return name.to_owned();
        }
        if names.len() < MAX_NAMES {
            names.insert(name.to_owned());
            return name.to_owned();
        }
        OTHER.to_owned()
    }
}

/// Every metric family, registered once.
struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    request_seconds: Histograms<RequestLabels>,
    open_streams: Gauge,
    tasks: Family<TaskLabels, Gauge>,
    tasks_ended: Family<TaskLabels, Counter>,
    task_seconds: Histograms<TaskLabels>,
    model_calls: Family<ModelLabels, Counter>,
    model_seconds: Histograms<ModelLabels>,
    model_tokens: Family<TokenLabels, Counter>,
    tool_calls: Family<ToolLabels, Counter>,
    mcp_servers: Family<StateLabels, Gauge>,
    mcp_seconds: Histograms<McpCallLabels>,
    hook_runs: Family<HookLabels, Counter>,
    push_outbox: Gauge,
    push_deliveries: Family<OutcomeLabels, Counter>,
    leases_held: Gauge,
    takeovers: Counter,
    roles: Names,
    providers: Names,
    models: Names,
    tools: Names,
    servers: Names,
    /// Held while a scrape sets the gauges it reads and encodes them, so that two scrapes do
    /// not interleave; it also keeps the task label sets seen, set to 0 when none is live.
    scrape: Mutex<HashSet<TaskLabels>>,
}

/// A metric family's name and help text: the same in `/metrics` and over OTLP.
#[derive(Clone, Copy)]
struct Describe {
    name: &'static str,
    help: &'static str,
}

const A2A_REQUESTS: Describe = Describe {
    name: "mew_a2a_requests",
    help: "A2A requests answered, by method, binding and A2A outcome (ok or the error)",
};
const A2A_REQUEST_DURATION: Describe = Describe {
    name: "mew_a2a_request_duration",
    help: "Time to answer an A2A request (a stream: to its response head), by method, binding \
           and outcome",
};
const OPEN_STREAMS: Describe = Describe {
    name: "mew_open_streams",
    help: "SSE streams open now (streaming sends and subscriptions)",
};
const TASKS: Describe = Describe {
    name: "mew_tasks",
    help: "Tasks this node's task manager holds live now (running, queued, or asking for \
             input and loaded), by role and state",
};
const TASKS_ENDED: Describe = Describe {
    name: "mew_tasks_ended",
    help: "Tasks this node brought to a final state, by role and final state",
};
const TASK_DURATION: Describe = Describe {
    name: "mew_task_duration",
    help: "Time from a task's creation to its final state, by role and final state",
};
const MODEL_CALLS: Describe = Describe {
    name: "mew_model_calls",
    help: "Model calls, by provider, model and outcome",
};
const MODEL_CALL_DURATION: Describe = Describe {
    name: "mew_model_call_duration",
    help: "Time of one model call, by provider, model and outcome",
};
const MODEL_TOKENS: Describe = Describe {
    name: "mew_model_tokens",
    help: "Tokens the providers reported, by provider, model and type (input, output, \
             cache_read, cache_write)",
};
const TOOL_CALLS: Describe = Describe {
    name: "mew_tool_calls",
    help: "Tool calls of model-driven roles, by tool and outcome",
};
const MCP_SERVERS: Describe = Describe {
    name: "mew_mcp_servers",
    help: "Configured MCP servers, by state",
};
const MCP_CALL_DURATION: Describe = Describe {
    name: "mew_mcp_call_duration",
    help: "Time of one MCP tool call, by server and outcome",
};
const HOOK_RUNS: Describe = Describe {
    name: "mew_hook_runs",
    help: "Hook runs, by event and outcome",
};
const PUSH_OUTBOX_DEPTH: Describe = Describe {
    name: "mew_push_outbox_depth",
    help: "Push notifications waiting in the task store's outbox (counted up to 10000)",
};
const PUSH_DELIVERIES: Describe = Describe {
    name: "mew_push_deliveries",
    help: "Push delivery attempts, by outcome",
};
const LEASES_HELD: Describe = Describe {
    name: "mew_leases_held",
    help: "Task leases this replica holds now (shared store only)",
};
const LEASE_TAKEOVERS: Describe = Describe {
    name: "mew_lease_takeovers",
    help: "Tasks this replica took over on a shared store: left by a lost replica, or offered \
             by a busy one",
};

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::default();
        registry.register(A2A_REQUESTS.name, A2A_REQUESTS.help, requests.clone());
        let request_seconds = Family::new_with_constructor(short_buckets as fn() -> Histogram);
        registry.register_with_unit(
            A2A_REQUEST_DURATION.name,
            A2A_REQUEST_DURATION.help,
            Unit::Seconds,
            request_seconds.clone(),
        );
        let open_streams = Gauge::default();
        registry.register(OPEN_STREAMS.name, OPEN_STREAMS.help, open_streams.clone());
        let tasks = Family::default();
        registry.register(TASKS.name, TASKS.help, tasks.clone());
        let tasks_ended = Family::default();
        registry.register(TASKS_ENDED.name, TASKS_ENDED.help, tasks_ended.clone());
        let task_seconds = Family::new_with_constructor(task_buckets as fn() -> Histogram);
        registry.register_with_unit(
            TASK_DURATION.name,
            TASK_DURATION.help,
            Unit::Seconds,
            task_seconds.clone(),
        );
        let model_calls = Family::default();
        registry.register(MODEL_CALLS.name, MODEL_CALLS.help, model_calls.clone());
        let model_seconds = Family::new_with_constructor(model_buckets as fn() -> Histogram);
        registry.register_with_unit(
            MODEL_CALL_DURATION.name,
            MODEL_CALL_DURATION.help,
            Unit::Seconds,
            model_seconds.clone(),
        );
        let model_tokens = Family::default();
        registry.register(MODEL_TOKENS.name, MODEL_TOKENS.help, model_tokens.clone());
        let tool_calls = Family::default();
        registry.register(TOOL_CALLS.name, TOOL_CALLS.help, tool_calls.clone());
        let mcp_servers = Family::default();
        registry.register(MCP_SERVERS.name, MCP_SERVERS.help, mcp_servers.clone());
        let mcp_seconds = Family::new_with_constructor(short_buckets as fn() -> Histogram);
        registry.register_with_unit(
            MCP_CALL_DURATION.name,
            MCP_CALL_DURATION.help,
            Unit::Seconds,
            mcp_seconds.clone(),
        );
        let hook_runs = Family::default();
        registry.register(HOOK_RUNS.name, HOOK_RUNS.help, hook_runs.clone());
        let push_outbox = Gauge::default();
        registry.register(
            PUSH_OUTBOX_DEPTH.name,
            PUSH_OUTBOX_DEPTH.help,
            push_outbox.clone(),
        );
        let push_deliveries = Family::default();
        registry.register(
            PUSH_DELIVERIES.name,
            PUSH_DELIVERIES.help,
            push_deliveries.clone(),
        );
        let leases_held = Gauge::default();
        registry.register(LEASES_HELD.name, LEASES_HELD.help, leases_held.clone());
        let takeovers = Counter::default();
        registry.register(
            LEASE_TAKEOVERS.name,
            LEASE_TAKEOVERS.help,
            takeovers.clone(),
        );
        Self {
            registry,
            requests,
            request_seconds,
            open_streams,
            tasks,
            tasks_ended,
            task_seconds,
            model_calls,
            model_seconds,
            model_tokens,
            tool_calls,
            mcp_servers,
            mcp_seconds,
            hook_runs,
            push_outbox,
            push_deliveries,
            leases_held,
            takeovers,
            roles: Names::default(),
            providers: Names::default(),
            models: Names::default(),
            tools: Names::default(),
            servers: Names::default(),
            scrape: Mutex::new(HashSet::new()),
        }
    }
}

/// The same families as OpenTelemetry instruments, when metrics are exported over OTLP too
/// ([`export`]): recorded beside the registry, with the same names, labels and buckets.
struct Otel {
    requests: otel::Counter<u64>,
    request_seconds: otel::Histogram<f64>,
    open_streams: otel::UpDownCounter<i64>,
    tasks: otel::Gauge<i64>,
    tasks_ended: otel::Counter<u64>,
    task_seconds: otel::Histogram<f64>,
    model_calls: otel::Counter<u64>,
    model_seconds: otel::Histogram<f64>,
    model_tokens: otel::Counter<u64>,
    tool_calls: otel::Counter<u64>,
    mcp_servers: otel::Gauge<i64>,
    mcp_seconds: otel::Histogram<f64>,
    hook_runs: otel::Counter<u64>,
    push_outbox: otel::Gauge<i64>,
    push_deliveries: otel::Counter<u64>,
    leases_held: otel::Gauge<i64>,
    takeovers: otel::Counter<u64>,
}

impl Otel {
    fn new(meter: &otel::Meter) -> Self {
        let counter = |d: Describe| meter.u64_counter(d.name).with_description(d.help).build();
        let gauge = |d: Describe| meter.i64_gauge(d.name).with_description(d.help).build();
        let seconds = |d: Describe, buckets: &[f64]| {
            meter
                .f64_histogram(d.name)
                .with_description(d.help)
                .with_unit("s")
                .with_boundaries(buckets.to_vec())
                .build()
        };
        Self {
            requests: counter(A2A_REQUESTS),
            request_seconds: seconds(A2A_REQUEST_DURATION, SHORT_BUCKETS),
            open_streams: meter
                .i64_up_down_counter(OPEN_STREAMS.name)
                .with_description(OPEN_STREAMS.help)
                .build(),
            tasks: gauge(TASKS),
            tasks_ended: counter(TASKS_ENDED),
            task_seconds: seconds(TASK_DURATION, TASK_BUCKETS),
            model_calls: counter(MODEL_CALLS),
            model_seconds: seconds(MODEL_CALL_DURATION, MODEL_BUCKETS),
            model_tokens: counter(MODEL_TOKENS),
            tool_calls: counter(TOOL_CALLS),
            mcp_servers: gauge(MCP_SERVERS),
            mcp_seconds: seconds(MCP_CALL_DURATION, SHORT_BUCKETS),
            hook_runs: counter(HOOK_RUNS),
            push_outbox: gauge(PUSH_OUTBOX_DEPTH),
            push_deliveries: counter(PUSH_DELIVERIES),
            leases_held: gauge(LEASES_HELD),
            takeovers: counter(LEASE_TAKEOVERS),
        }
    }
}

static OTEL: OnceLock<Otel> = OnceLock::new();

/// Records every metric through `meter` as well, from now on (recording must be on): the
/// telemetry exports it over OTLP. The gauges read from the node are recorded by
/// [`observe`], which the caller runs as often as the meter exports.
pub(crate) fn export(meter: &otel::Meter) {
    if enabled() {
        let _ = OTEL.set(Otel::new(meter));
    }
}

fn otel() -> Option<&'static Otel> {
    OTEL.get()
}

/// One A2A request answered: its method (as the transport names the operations it knows;
/// `None`: `other`), binding (`jsonrpc`, `rest` or `grpc`), outcome (`ok` or the A2A error's name)
/// and time to answer.
pub(crate) fn a2a_request(
    method: Option<&'static str>,
    binding: &'static str,
    status: &'static str,
    seconds: f64,
) {
    let Some(m) = metrics() else { return };
    let labels = RequestLabels {
        method: method.unwrap_or(OTHER),
        binding,
        status,
    };
    m.requests.get_or_create(&labels).inc();
    m.request_seconds.get_or_create(&labels).observe(seconds);
    if let Some(o) = otel() {
        let attributes = labels.attributes();
        o.requests.add(1, &attributes);
        o.request_seconds.record(seconds, &attributes);
    }
}

/// An open SSE stream: counted in `mew_open_streams` until dropped.
#[must_use]
pub(crate) struct OpenStream(bool);

/// Counts a stream as open until the returned guard is dropped.
pub(crate) fn open_stream() -> OpenStream {
    match metrics() {
        Some(m) => {
            m.open_streams.inc();
            if let Some(o) = otel() {
                o.open_streams.add(1, &[]);
            }
            OpenStream(true)
        }
        None => OpenStream(false),
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        if self.0 {
            METRICS.open_streams.dec();
            if let Some(o) = otel() {
                o.open_streams.add(-1, &[]);
            }
        }
    }
}

/// The label of a task state: its name without the `TASK_STATE_` prefix, in lower case.
pub(crate) fn state_label(state: TaskState) -> &'static str {
    match state {
        TaskState::Unspecified => "unspecified",
        TaskState::Submitted => "submitted",
        TaskState::Working => "working",
        TaskState::Completed => "completed",
        TaskState::Failed => "failed",
        TaskState::Canceled => "canceled",
        TaskState::InputRequired => "input_required",
        TaskState::Rejected => "rejected",
        TaskState::AuthRequired => "auth_required",
    }
}

/// A task of `role` reached the final `state`, `seconds` after it was created.
pub(crate) fn task_ended(role: &str, state: TaskState, seconds: f64) {
    let Some(m) = metrics() else { return };
    let labels = TaskLabels {
        role: m.roles.label(role),
        state: state_label(state),
    };
    let seconds = seconds.max(0.0);
    m.tasks_ended.get_or_create(&labels).inc();
    m.task_seconds.get_or_create(&labels).observe(seconds);
    if let Some(o) = otel() {
        let attributes = labels.attributes();
        o.tasks_ended.add(1, &attributes);
        o.task_seconds.record(seconds, &attributes);
    }
}

/// Tokens one model call used, as its provider reported them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tokens {
    pub(crate) input: u64,
    pub(crate) output: u64,
    pub(crate) cache_read: u64,
    pub(crate) cache_write: u64,
}

/// One model call of `provider` for `model`: its outcome (`ok` or the error's kind), its time,
/// and the tokens it reported.
pub(crate) fn model_call(
    provider: &str,
    model: &str,
    outcome: &'static str,
    seconds: f64,
    tokens: Option<Tokens>,
) {
    let Some(m) = metrics() else { return };
    let (provider, model) = (m.providers.label(provider), m.models.label(model));
    let labels = ModelLabels {
        provider: provider.clone(),
        model: model.clone(),
        outcome,
    };
    m.model_calls.get_or_create(&labels).inc();
    m.model_seconds.get_or_create(&labels).observe(seconds);
    if let Some(o) = otel() {
        let attributes = labels.attributes();
        o.model_calls.add(1, &attributes);
        o.model_seconds.record(seconds, &attributes);
    }
    let Some(tokens) = tokens else { return };
    for (kind, count) in [
        ("input", tokens.input),
        ("output", tokens.output),
        ("cache_read", tokens.cache_read),
        ("cache_write", tokens.cache_write),
    ] {
        let labels = TokenLabels {
            provider: provider.clone(),
            model: model.clone(),
            r#type: kind,
        };
        m.model_tokens.get_or_create(&labels).inc_by(count);
        if let Some(o) = otel() {
            o.model_tokens.add(count, &labels.attributes());
        }
    }
}

/// One tool call of a model-driven role: the tool's name (`None` for a name the model made up,
/// counted as `other`) and its outcome (`ok`, `error`, `panicked`, `unknown_tool`).
pub(crate) fn tool_call(tool: Option<&str>, outcome: &'static str) {
    let Some(m) = metrics() else { return };
    let labels = ToolLabels {
        tool: tool.map_or_else(|| OTHER.to_owned(), |name| m.tools.label(name)),
        outcome,
    };
    m.tool_calls.get_or_create(&labels).inc();
    if let Some(o) = otel() {
        o.tool_calls.add(1, &labels.attributes());
    }
}

/// One MCP tool call to `server`: its outcome and its time.
pub(crate) fn mcp_call(server: &str, outcome: &'static str, seconds: f64) {
    let Some(m) = metrics() else { return };
    let labels = McpCallLabels {
        server: m.servers.label(server),
        outcome,
    };
    m.mcp_seconds.get_or_create(&labels).observe(seconds);
    if let Some(o) = otel() {
        o.mcp_seconds.record(seconds, &labels.attributes());
    }
}

/// One hook run for `event` (its name in hook files): `ok`, `blocked` or `error`.
pub(crate) fn hook_run(event: &'static str, outcome: &'static str) {
    let Some(m) = metrics() else { return };
    let labels = HookLabels { event, outcome };
    m.hook_runs.get_or_create(&labels).inc();
    if let Some(o) = otel() {
        o.hook_runs.add(1, &labels.attributes());
    }
}

/// One push delivery attempt: `delivered`, `failed` (to be retried), `dropped` (after its last
/// attempt) or `refused` (never deliverable).
pub(crate) fn push_delivery(outcome: &'static str) {
    let Some(m) = metrics() else { return };
    let labels = OutcomeLabels { outcome };
    m.push_deliveries.get_or_create(&labels).inc();
    if let Some(o) = otel() {
        o.push_deliveries.add(1, &labels.attributes());
    }
}

/// Tasks this replica took over from lost replicas.
pub(crate) fn takeovers(count: u64) {
    let Some(m) = metrics() else { return };
    m.takeovers.inc_by(count);
    if let Some(o) = otel() {
        o.takeovers.add(count, &[]);
    }
}

/// What a scrape reads from the node right then: each value was read with a bounded cost.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Snapshot {
    /// The live tasks: role, state, how many.
    pub(crate) tasks: Vec<(String, TaskState, i64)>,
    /// The MCP servers: each state's name, how many.
    pub(crate) mcp_servers: Vec<(&'static str, i64)>,
    /// The push outbox's depth (counted up to a bound), when the store could tell.
    pub(crate) push_outbox: Option<i64>,
    /// The leases this replica holds, on a shared store.
    pub(crate) leases_held: Option<i64>,
}

/// The MCP server states, each reported (0 when no server is in it).
pub(crate) const MCP_STATES: &[&str] =
    &["connecting", "connected", "failed", "restarting", "stopped"];

/// Sets the gauges read from the node to `snapshot`'s values, in the registry and (when
/// metrics are exported over OTLP) as OpenTelemetry gauges.
pub(crate) fn observe(snapshot: &Snapshot) {
    let Some(m) = metrics() else { return };
    let mut seen = m.scrape.lock().unwrap_or_else(PoisonError::into_inner);
    set_gauges(m, &mut seen, snapshot);
}

/// What [`observe`] does, with the scrape lock held.
fn set_gauges(m: &Metrics, seen: &mut HashSet<TaskLabels>, snapshot: &Snapshot) {
    let mut tasks: HashMap<TaskLabels, i64> = seen.iter().map(|l| (l.clone(), 0)).collect();
    for (role, state, count) in &snapshot.tasks {
        let labels = TaskLabels {
            role: m.roles.label(role),
            state: state_label(*state),
        };
        *tasks.entry(labels).or_default() += *count;
    }
    let mcp_servers = MCP_STATES.iter().map(|state| {
        let count = snapshot
            .mcp_servers
            .iter()
            .filter(|(s, _)| s == state)
            .map(|(_, n)| n)
            .sum();
        (StateLabels { state }, count)
    });
    let push_outbox = snapshot.push_outbox.unwrap_or(0);
    let leases_held = snapshot.leases_held.unwrap_or(0);
    let otel = otel();
    for (labels, count) in &tasks {
        m.tasks.get_or_create(labels).set(*count);
        if let Some(o) = otel {
            o.tasks.record(*count, &labels.attributes());
        }
    }
    for (labels, count) in mcp_servers {
        m.mcp_servers.get_or_create(&labels).set(count);
        if let Some(o) = otel {
            o.mcp_servers.record(count, &labels.attributes());
        }
    }
    m.push_outbox.set(push_outbox);
    m.leases_held.set(leases_held);
    if let Some(o) = otel {
        o.push_outbox.record(push_outbox, &[]);
        o.leases_held.record(leases_held, &[]);
    }
    seen.extend(tasks.into_keys());
}

/// The exposition of every metric with `snapshot`'s gauges: OpenMetrics text when
/// `open_metrics`, else the Prometheus text format 0.0.4. `None` while recording is off.
pub(crate) fn render(snapshot: &Snapshot, open_metrics: bool) -> Option<String> {
    let m = metrics()?;
    let mut seen = m.scrape.lock().unwrap_or_else(PoisonError::into_inner);
    set_gauges(m, &mut seen, snapshot);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &m.registry).ok()?;
    drop(seen);
    Some(if open_metrics {
        text
    } else {
        prometheus_text(&text)
    })
}

/// The Prometheus text format (0.0.4) of an OpenMetrics exposition: a counter's family is
/// named with its `_total` suffix, as its samples are, and the `# UNIT` and `# EOF` lines,
/// which that format does not have, are left out. Samples and label escaping are the same.
fn prometheus_text(open_metrics: &str) -> String {
    let counters: HashSet<&str> = open_metrics
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(open_metrics.len());
    for line in open_metrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let described = ["# HELP ", "# TYPE "].into_iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        match described {
            Some(renamed) => out.push_str(&renamed),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Whether an `Accept` header asks for OpenMetrics before (or instead of) the text format.
pub(crate) fn wants_open_metrics(accept: &str) -> bool {
    let quality = |media: &str| {
        accept
            .split(',')
            .filter_map(|entry| {
                let mut parts = entry.split(';').map(str::trim);
                let name = parts.next()?;
                (name == media).then(|| {
                    parts
                        .find_map(|p| p.strip_prefix("q="))
                        .and_then(|q| q.parse::<f64>().ok())
                        .unwrap_or(1.0)
                })
            })
            .fold(0.0_f64, f64::max)
    };
    let open = quality("application/openmetrics-text");
    open > 0.0 && open >= quality("text/plain")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn the_text_format_names_counters_with_their_suffix_and_drops_what_it_lacks() {
        let open = "# HELP mew_x Things.\n# TYPE mew_x counter\nmew_x_total{a=\"b\"} 1\n\
                    # HELP mew_d_seconds Time.\n# TYPE mew_d_seconds histogram\n# UNIT mew_d_seconds seconds\n\
                    mew_d_seconds_sum 0.5\n# EOF\n";
        assert_eq!(
            prometheus_text(open),
            "# HELP mew_x_total Things.\n# TYPE mew_x_total counter\nmew_x_total{a=\"b\"} 1\n\
             # HELP mew_d_seconds Time.\n# TYPE mew_d_seconds histogram\nmew_d_seconds_sum 0.5\n"
        );
    }

    #[test]
    fn open_metrics_is_served_only_when_asked_for_first() {
        // What Prometheus 2.x sends.
        assert!(wants_open_metrics(
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        ));
        assert!(!wants_open_metrics("text/plain;version=0.0.4"));
        assert!(!wants_open_metrics("*/*"));
        assert!(!wants_open_metrics(
            "text/plain, application/openmetrics-text;q=0.5"
        ));
    }

    #[test]
    fn a_name_label_keeps_a_bounded_number_of_values() {
        let names = Names::default();
        for n in 0..MAX_NAMES {
            assert_eq!(names.label(&format!("role-{n}")), format!("role-{n}"));
        }
        assert_eq!(names.label("one-too-many"), OTHER);
        // Known names keep their label.
        assert_eq!(names.label("role-0"), "role-0");
    }

    #[test]
    fn recorded_values_are_in_both_expositions() {
        enable();
        a2a_request(Some("GetTask"), "jsonrpc", "ok", 0.02);
        a2a_request(None, "rest", "MethodNotFoundError", 0.001);
        task_ended("metrics-unit-role", TaskState::Completed, 1.5);
        model_call(
            "metrics-unit-provider",
            "metrics-unit-model",
            "ok",
            0.3,
            Some(Tokens {
                input: 7,
                output: 3,
                ..Tokens::default()
            }),
        );
        let snapshot = Snapshot {
            tasks: vec![("metrics-unit-role".to_owned(), TaskState::Working, 2)],
            mcp_servers: vec![("connected", 1)],
            push_outbox: Some(4),
            leases_held: None,
        };
        let text = render(&snapshot, false).unwrap();
        for line in [
            "# TYPE mew_a2a_requests_total counter",
            "mew_a2a_requests_total{method=\"GetTask\",binding=\"jsonrpc\",status=\"ok\"} 1",
            "mew_a2a_requests_total{method=\"other\",binding=\"rest\",status=\"MethodNotFoundError\"} 1",
            "mew_tasks_ended_total{role=\"metrics-unit-role\",state=\"completed\"} 1",
            "mew_task_duration_seconds_count{role=\"metrics-unit-role\",state=\"completed\"} 1",
            "mew_model_tokens_total{provider=\"metrics-unit-provider\",model=\"metrics-unit-model\",type=\"input\"} 7",
            "mew_tasks{role=\"metrics-unit-role\",state=\"working\"} 2",
            "mew_mcp_servers{state=\"connected\"} 1",
            "mew_mcp_servers{state=\"failed\"} 0",
            "mew_push_outbox_depth 4",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        assert!(!text.contains("# EOF"));
        let open = render(&Snapshot::default(), true).unwrap();
        assert!(open.ends_with("# EOF\n"), "{open}");
        assert!(open.contains("# TYPE mew_a2a_requests counter"), "{open}");
        // A task that is no longer live is reported as none.
        assert!(
            open.lines()
                .any(|l| l == "mew_tasks{role=\"metrics-unit-role\",state=\"working\"} 0"),
            "{open}"
        );
    }
}
