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

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex, PoisonError};

use mew_cards::TaskState;
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
fn short_buckets() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    ])
}

/// Model call latencies, in seconds.
fn model_buckets() -> Histogram {
    Histogram::new([
        0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    ])
}

/// Task durations, in seconds.
fn task_buckets() -> Histogram {
    Histogram::new([
        0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0,
    ])
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: &'static str,
    binding: &'static str,
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabels {
    role: String,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    provider: String,
    model: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    provider: String,
    model: String,
    r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct McpCallLabels {
    server: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HookLabels {
    event: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

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

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::default();
        registry.register(
            "mew_a2a_requests",
            "A2A requests answered, by method, binding and A2A outcome (ok or the error)",
            requests.clone(),
        );
        let request_seconds = Family::new_with_constructor(short_buckets as fn() -> Histogram);
        registry.register_with_unit(
            "mew_a2a_request_duration",
            "Time to answer an A2A request (a stream: to its response head), by method, binding \
             and outcome",
            Unit::Seconds,
            request_seconds.clone(),
        );
        let open_streams = Gauge::default();
        registry.register(
            "mew_open_streams",
            "SSE streams open now (streaming sends and subscriptions)",
            open_streams.clone(),
        );
        let tasks = Family::default();
        registry.register(
            "mew_tasks",
            "Tasks this node's task manager holds live now (running, queued, or asking for \
             input and loaded), by role and state",
            tasks.clone(),
        );
        let tasks_ended = Family::default();
        registry.register(
            "mew_tasks_ended",
            "Tasks this node brought to a final state, by role and final state",
            tasks_ended.clone(),
        );
        let task_seconds = Family::new_with_constructor(task_buckets as fn() -> Histogram);
        registry.register_with_unit(
            "mew_task_duration",
            "Time from a task's creation to its final state, by role and final state",
            Unit::Seconds,
            task_seconds.clone(),
        );
        let model_calls = Family::default();
        registry.register(
            "mew_model_calls",
            "Model calls, by provider, model and outcome",
            model_calls.clone(),
        );
        let model_seconds = Family::new_with_constructor(model_buckets as fn() -> Histogram);
        registry.register_with_unit(
            "mew_model_call_duration",
            "Time of one model call, by provider, model and outcome",
            Unit::Seconds,
            model_seconds.clone(),
        );
        let model_tokens = Family::default();
        registry.register(
            "mew_model_tokens",
            "Tokens the providers reported, by provider, model and type (input, output, \
             cache_read, cache_write)",
            model_tokens.clone(),
        );
        let tool_calls = Family::default();
        registry.register(
            "mew_tool_calls",
            "Tool calls of model-driven roles, by tool and outcome",
            tool_calls.clone(),
        );
        let mcp_servers = Family::default();
        registry.register(
            "mew_mcp_servers",
            "Configured MCP servers, by state",
            mcp_servers.clone(),
        );
        let mcp_seconds = Family::new_with_constructor(short_buckets as fn() -> Histogram);
        registry.register_with_unit(
            "mew_mcp_call_duration",
            "Time of one MCP tool call, by server and outcome",
            Unit::Seconds,
            mcp_seconds.clone(),
        );
        let hook_runs = Family::default();
        registry.register(
            "mew_hook_runs",
            "Hook runs, by event and outcome",
            hook_runs.clone(),
        );
        let push_outbox = Gauge::default();
        registry.register(
            "mew_push_outbox_depth",
            "Push notifications waiting in the task store's outbox (counted up to 10000)",
            push_outbox.clone(),
        );
        let push_deliveries = Family::default();
        registry.register(
            "mew_push_deliveries",
            "Push delivery attempts, by outcome",
            push_deliveries.clone(),
        );
        let leases_held = Gauge::default();
        registry.register(
            "mew_leases_held",
            "Task leases this replica holds now (shared store only)",
            leases_held.clone(),
        );
        let takeovers = Counter::default();
        registry.register(
            "mew_lease_takeovers",
            "Tasks this replica took over on a shared store: left by a lost replica, or offered \
             by a busy one",
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

/// The JSON-RPC method names of the A2A operations: any other value is counted as `other`.
const METHODS: &[&str] = &[
    "SendMessage",
    "SendStreamingMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
    "GetExtendedAgentCard",
];

/// One A2A request answered: its method (`None` or an unknown one: `other`), binding
/// (`jsonrpc` or `rest`), outcome (`ok` or the A2A error's name) and time to answer.
pub(crate) fn a2a_request(
    method: Option<&str>,
    binding: &'static str,
    status: &'static str,
    seconds: f64,
) {
    let Some(m) = metrics() else { return };
    let method = method
        .and_then(|name| METHODS.iter().copied().find(|known| *known == name))
        .unwrap_or(OTHER);
    let labels = RequestLabels {
        method,
        binding,
        status,
    };
    m.requests.get_or_create(&labels).inc();
    m.request_seconds.get_or_create(&labels).observe(seconds);
}

/// An open SSE stream: counted in `mew_open_streams` until dropped.
#[must_use]
pub(crate) struct OpenStream(bool);

/// Counts a stream as open until the returned guard is dropped.
pub(crate) fn open_stream() -> OpenStream {
    match metrics() {
        Some(m) => {
            m.open_streams.inc();
            OpenStream(true)
        }
        None => OpenStream(false),
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        if self.0 {
            METRICS.open_streams.dec();
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
    m.tasks_ended.get_or_create(&labels).inc();
    m.task_seconds
        .get_or_create(&labels)
        .observe(seconds.max(0.0));
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
}

/// One MCP tool call to `server`: its outcome and its time.
pub(crate) fn mcp_call(server: &str, outcome: &'static str, seconds: f64) {
    let Some(m) = metrics() else { return };
    let labels = McpCallLabels {
        server: m.servers.label(server),
        outcome,
    };
    m.mcp_seconds.get_or_create(&labels).observe(seconds);
}

/// One hook run for `event` (its name in hook files): `ok`, `blocked` or `error`.
pub(crate) fn hook_run(event: &'static str, outcome: &'static str) {
    let Some(m) = metrics() else { return };
    m.hook_runs
        .get_or_create(&HookLabels { event, outcome })
        .inc();
}

/// One push delivery attempt: `delivered`, `failed` (to be retried), `dropped` (after its last
/// attempt) or `refused` (never deliverable).
pub(crate) fn push_delivery(outcome: &'static str) {
    let Some(m) = metrics() else { return };
    m.push_deliveries
        .get_or_create(&OutcomeLabels { outcome })
        .inc();
}

/// Tasks this replica took over from lost replicas.
pub(crate) fn takeovers(count: u64) {
    let Some(m) = metrics() else { return };
    m.takeovers.inc_by(count);
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

/// The exposition of every metric with `snapshot`'s gauges: OpenMetrics text when
/// `open_metrics`, else the Prometheus text format 0.0.4. `None` while recording is off.
pub(crate) fn render(snapshot: &Snapshot, open_metrics: bool) -> Option<String> {
    let m = metrics()?;
    let mut seen = m.scrape.lock().unwrap_or_else(PoisonError::into_inner);
    for labels in seen.iter() {
        m.tasks.get_or_create(labels).set(0);
    }
    for (role, state, count) in &snapshot.tasks {
        let labels = TaskLabels {
            role: m.roles.label(role),
            state: state_label(*state),
        };
        m.tasks.get_or_create(&labels).inc_by(*count);
        seen.insert(labels);
    }
    for state in MCP_STATES {
        let count = snapshot
            .mcp_servers
            .iter()
            .filter(|(s, _)| s == state)
            .map(|(_, n)| n)
            .sum();
        m.mcp_servers
            .get_or_create(&StateLabels { state })
            .set(count);
    }
    m.push_outbox.set(snapshot.push_outbox.unwrap_or(0));
    m.leases_held.set(snapshot.leases_held.unwrap_or(0));
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
        a2a_request(Some("NoSuchMethod"), "rest", "MethodNotFoundError", 0.001);
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
