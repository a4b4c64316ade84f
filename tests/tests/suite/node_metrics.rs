//! `/metrics` on a real node: after command and model tasks (a tool call, a hook, both
//! bindings, a failed request) its exposition passes `promtool check metrics` and holds the
//! counts the tasks make; a running task and its stream show in the gauges until canceled; a
//! real Prometheus scrapes it and answers the same counts through its query API; the same
//! metrics reach an OTLP receiver (decoded with the official protobuf definitions) when the
//! telemetry names a collector; and the `metrics:` section's access rules hold.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use futures_util::StreamExt;
use mew_cards::{
    CancelTaskRequest, GetTaskRequest, Message, SendMessageRequest, StreamResponse, Task, TaskState,
};
use mew_tests::model::{ScriptedModel, Step, Usage};
use mew_tests::node::{MewNode, command_role, poll_until, scripted_model_config, send_text};
use mew_tests::otlp::{MetricPoint, OtlpReceiver};
use mew_tests::process::command;
use mew_transport::{AgentTransport, Binding, CallContext, EventStream};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

/// How long a condition may take on a busy machine (Prometheus starts, then scrapes each second).
const WAIT: Duration = Duration::from_secs(120);

/// A user hook that accepts every task: each task runs it once.
const ACCEPT_ALL: &str = "hooks:\n  - name: accept-all\n    event: TaskReceived\n    action:\n      type: shell\n      command: 'cat >/dev/null; exit 0'\n";

/// The value of the samples of `name` whose labels include `labels`, summed; `None` when
/// there is none. `text` is the Prometheus text format.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (series_name, series_labels) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        if series_name != name {
            continue;
        }
        let has_all = labels.iter().all(|(k, v)| {
            series_labels
                .split(',')
                .any(|pair| pair == format!("{k}=\"{v}\""))
        });
        if has_all && let Ok(value) = value.parse::<f64>() {
            *found.get_or_insert(0.0) += value;
        }
    }
    found
}

/// `GET /metrics` of `node`, with `headers`: the status, content type and body.
async fn scrape(node: &MewNode, headers: &[(&str, &str)]) -> anyhow::Result<(u16, String, String)> {
    let mut request = reqwest::Client::new()
        .get(format!("{}/metrics", node.url()))
        .timeout(Duration::from_secs(30));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.context("GET /metrics")?;
    let status = response.status().as_u16();
    let media = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    Ok((status, media, response.text().await?))
}

/// Runs `promtool check metrics` on `text`: its exit code and everything it printed.
async fn promtool(text: &str) -> anyhow::Result<(Option<i32>, String)> {
    let mut check = command("promtool");
    check
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = check
        .spawn()
        .context("cannot run promtool (scripts/deploy-tools installs Debian's prometheus)")?;
    let mut stdin = child.stdin.take().context("promtool has no stdin")?;
    stdin.write_all(text.as_bytes()).await?;
    drop(stdin);
    let out = child.wait_with_output().await?;
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status.code(), printed))
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Starts Prometheus on a free loopback port, scraping `target` (`host:port`) every second,
/// with its storage in `dir`; returns the process and its base URL once it is ready.
async fn prometheus(dir: &Path, target: &str) -> anyhow::Result<(tokio::process::Child, String)> {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: mew\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )?;
    let port = free_port()?;
    let log = std::fs::File::create(dir.join("prometheus.log"))?;
    let mut run = command("prometheus");
    run.arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(log);
    let child = run
        .spawn()
        .context("cannot run prometheus (scripts/deploy-tools installs Debian's prometheus)")?;
    let url = format!("http://127.0.0.1:{port}");
    let ready = format!("{url}/-/ready");
    poll_until("Prometheus is ready", WAIT, || {
        let ready = ready.clone();
        async move {
            let answer = reqwest::get(&ready).await;
            Ok(answer.ok().filter(|r| r.status().is_success()).map(drop))
        }
    })
    .await
    .with_context(|| std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default())?;
    Ok((child, url))
}

/// The value of an instant query that answers one series; `None` while it answers none.
async fn query(prometheus: &str, expr: &str) -> anyhow::Result<Option<String>> {
    let answer: Value = reqwest::Client::new()
        .get(format!("{prometheus}/api/v1/query"))
        .query(&[("query", expr)])
        .send()
        .await?
        .json()
        .await?;
    ensure!(answer["status"] == "success", "query {expr}: {answer}");
    let result = answer["data"]["result"].as_array().context("no result")?;
    match result.as_slice() {
        [] => Ok(None),
        [one] => Ok(one["value"][1].as_str().map(str::to_owned)),
        more => bail!("query {expr} answered {} series: {answer}", more.len()),
    }
}

#[tokio::test]
async fn metrics_count_what_the_node_did_pass_promtool_and_are_scraped_by_prometheus()
-> anyhow::Result<()> {
    let mut node = MewNode::new()?;
    let notes = node.project_dir().join("notes.txt");
    std::fs::write(&notes, "hello\n")?;
    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "read_file",
            json!({"file_path": notes.display().to_string()}),
        )
        .with_usage(Usage::new(12, 3)),
        Step::text("The notes say hello.")
            .expect_tool_results(["call_1"])
            .with_usage(Usage::new(20, 7).with_cache(4, 0)),
    ])?;
    node.write_config(&scripted_model_config(&model))?;
    node.write_role("shout.md", &command_role("shout", "echo hi"))?;
    node.write_role("sleeper.md", &command_role("sleeper", "sleep 600"))?;
    node.write_role(
        "writer.md",
        "---\nname: writer\ndescription: Reads notes.\ntools: [read_file]\n---\nYou read notes.\n",
    )?;
    let hooks = node.home_dir().join(".mew/hooks.yaml");
    std::fs::create_dir_all(hooks.parent().context("no parent")?)?;
    std::fs::write(&hooks, ACCEPT_ALL)?;
    node.launch().await?;

    // Three command tasks over JSON-RPC, one over HTTP+JSON, one model task, one failed get.
    for _ in 0..3 {
        let task = send_text(&node, "shout", "hi").await?;
        ensure!(task.status.state == TaskState::Completed, "{task:?}");
    }
    let rest = node.agent("/agents/shout", Binding::HttpJson).await?;
    let sent = rest
        .send_message(
            &CallContext::default(),
            SendMessageRequest::new(Message::user_text("hi")),
        )
        .await?;
    ensure!(
        matches!(&sent, mew_cards::SendMessageResponse::Task(t) if t.status.state == TaskState::Completed),
        "{sent:?}"
    );
    let task = send_text(&node, "writer", "what do the notes say?").await?;
    ensure!(task.status.state == TaskState::Completed, "{task:?}");
    model.assert_done();
    let jsonrpc = node.agent("/agents/shout", Binding::JsonRpc).await?;
    let missing = jsonrpc
        .get_task(
            &CallContext::default(),
            GetTaskRequest {
                id: "no-such-task".into(),
                ..GetTaskRequest::default()
            },
        )
        .await;
    ensure!(missing.is_err(), "{missing:?}");

    let (status, media, text) = scrape(&node, &[]).await?;
    ensure!(status == 200, "{status}: {text}");
    ensure!(
        media == "text/plain; version=0.0.4; charset=utf-8",
        "{media}"
    );
    let (code, printed) = promtool(&text).await?;
    ensure!(
        code == Some(0) && printed.trim().is_empty(),
        "promtool check metrics exited {code:?}:\n{printed}\n{text}"
    );
    let expect = |name: &str, labels: &[(&str, &str)], value: f64| -> anyhow::Result<()> {
        let found = sample(&text, name, labels);
        ensure!(
            found == Some(value),
            "{name} {labels:?}: {found:?}, not {value}\n{text}"
        );
        Ok(())
    };
    let completed = ("state", "completed");
    expect(
        "mew_tasks_ended_total",
        &[("role", "shout"), completed],
        4.0,
    )?;
    expect(
        "mew_tasks_ended_total",
        &[("role", "writer"), completed],
        1.0,
    )?;
    expect(
        "mew_task_duration_seconds_count",
        &[("role", "shout"), completed],
        4.0,
    )?;
    let send = ("method", "SendMessage");
    expect(
        "mew_a2a_requests_total",
        &[send, ("binding", "jsonrpc"), ("status", "ok")],
        4.0,
    )?;
    expect(
        "mew_a2a_requests_total",
        &[send, ("binding", "rest"), ("status", "ok")],
        1.0,
    )?;
    expect(
        "mew_a2a_requests_total",
        &[("method", "GetTask"), ("status", "TaskNotFoundError")],
        1.0,
    )?;
    expect("mew_a2a_request_duration_seconds_count", &[send], 5.0)?;
    let scripted = ("provider", "scripted");
    expect("mew_model_calls_total", &[scripted, ("outcome", "ok")], 2.0)?;
    expect("mew_model_call_duration_seconds_count", &[scripted], 2.0)?;
    expect(
        "mew_model_tokens_total",
        &[scripted, ("type", "input")],
        32.0,
    )?;
    expect(
        "mew_model_tokens_total",
        &[scripted, ("type", "output")],
        10.0,
    )?;
    expect(
        "mew_model_tokens_total",
        &[scripted, ("type", "cache_read")],
        4.0,
    )?;
    expect(
        "mew_tool_calls_total",
        &[("tool", "read_file"), ("outcome", "ok")],
        1.0,
    )?;
    expect(
        "mew_hook_runs_total",
        &[("event", "TaskReceived"), ("outcome", "ok")],
        5.0,
    )?;
    expect("mew_open_streams", &[], 0.0)?;
    expect("mew_push_outbox_depth", &[], 0.0)?;
    expect("mew_mcp_servers", &[("state", "connected")], 0.0)?;

    // A task that runs, watched by a stream: a live task and an open stream, until canceled.
    let (sleeping, stream) = start_sleeping(&node).await?;
    let gauges = |want_tasks: f64, want_streams: f64| {
        let node = &node;
        async move {
            let (_, _, text) = scrape(node, &[]).await?;
            let tasks = sample(
                &text,
                "mew_tasks",
                &[("role", "sleeper"), ("state", "working")],
            );
            let streams = sample(&text, "mew_open_streams", &[]);
            Ok((tasks.unwrap_or(0.0) == want_tasks && streams == Some(want_streams)).then_some(()))
        }
    };
    poll_until("a working task and an open stream", WAIT, || {
        gauges(1.0, 1.0)
    })
    .await?;
    cancel_and_drain(&node, &sleeping, stream).await?;
    poll_until("no live task and no open stream", WAIT, || gauges(0.0, 0.0)).await?;

    // A real Prometheus scrapes the node (it asks for OpenMetrics) and counts the same.
    let dir = tempfile::tempdir()?;
    let target = node
        .url()
        .strip_prefix("http://")
        .context("the node's URL is not http://")?
        .to_owned();
    let (_prometheus, url) = prometheus(dir.path(), &target).await?;
    for (expr, want) in [
        (
            r#"mew_tasks_ended_total{role="shout",state="completed"}"#,
            "4",
        ),
        (
            r#"mew_tasks_ended_total{role="writer",state="completed"}"#,
            "1",
        ),
        (
            r#"sum(mew_a2a_requests_total{method="SendMessage",status="ok"})"#,
            "5",
        ),
        (r#"up{job="mew"}"#, "1"),
    ] {
        let value = poll_until(&format!("Prometheus answers {expr}"), WAIT, || {
            let url = url.clone();
            async move { query(&url, expr).await }
        })
        .await?;
        ensure!(value == want, "{expr} = {value}, not {want}");
    }
    Ok(())
}

/// The latest point of the metric `name` the receiver holds with `labels`, if any.
async fn latest(
    receiver: &OtlpReceiver,
    name: &str,
    labels: &[(&str, &str)],
) -> anyhow::Result<Option<MetricPoint>> {
    let points = receiver.metric_points(name).await?;
    Ok(points
        .into_iter()
        .filter(|point| point.has(labels))
        .max_by_key(|point| point.time_unix_nano))
}

#[tokio::test]
async fn metrics_are_exported_over_otlp_as_well_when_a_collector_is_named() -> anyhow::Result<()> {
    let receiver = OtlpReceiver::start().await?;
    let mut node = MewNode::new()?;
    node.write_role("shout.md", &command_role("shout", "echo hi"))?;
    node.write_role("sleeper.md", &command_role("sleeper", "sleep 600"))?;
    node.set_env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint());
    node.set_env("OTEL_SERVICE_NAME", "mew-metrics");
    node.set_env("OTEL_METRIC_EXPORT_INTERVAL", "200");
    // Metrics go out though traces do not: each signal has its own switch.
    node.set_env("OTEL_TRACES_EXPORTER", "none");
    node.launch().await?;
    for _ in 0..3 {
        let task = send_text(&node, "shout", "hi").await?;
        ensure!(task.status.state == TaskState::Completed, "{task:?}");
    }
    let (sleeping, stream) = start_sleeping(&node).await?;

    let shout_done = [("role", "shout"), ("state", "completed")];
    let ended = poll_until("three ended tasks over OTLP", WAIT, || async {
        let point = latest(&receiver, "mew_tasks_ended", &shout_done).await?;
        Ok(point.filter(|p| p.value == Some(3.0)))
    })
    .await?;
    ensure!(
        ended.kind == "sum"
            && ended.monotonic == Some(true)
            && ended.temporality.as_deref() == Some("AGGREGATION_TEMPORALITY_CUMULATIVE")
            && ended.service.as_deref() == Some("mew-metrics")
            && ended
                .description
                .starts_with("Tasks this node brought to a final state"),
        "{ended:?}"
    );
    let duration = latest(&receiver, "mew_task_duration", &shout_done)
        .await?
        .context("no task duration over OTLP")?;
    ensure!(
        duration.kind == "histogram"
            && duration.unit == "s"
            && duration.count == Some(3)
            && duration.explicit_bounds.first() == Some(&0.1)
            && duration.bucket_counts.len() == duration.explicit_bounds.len() + 1
            && duration.bucket_counts.iter().sum::<u64>() == 3,
        "{duration:?}"
    );
    let requests = latest(
        &receiver,
        "mew_a2a_requests",
        &[
            ("method", "SendMessage"),
            ("binding", "jsonrpc"),
            ("status", "ok"),
        ],
    )
    .await?
    .context("no A2A requests over OTLP")?;
    ensure!(requests.value == Some(3.0), "{requests:?}");
    // The gauges read from the node: the sleeping task and its stream, until canceled.
    let gauges = |want: f64| {
        let receiver = &receiver;
        async move {
            let sleeping = [("role", "sleeper"), ("state", "working")];
            let tasks = latest(receiver, "mew_tasks", &sleeping).await?;
            let streams = latest(receiver, "mew_open_streams", &[]).await?;
            Ok((tasks.and_then(|p| p.value) == Some(want)
                && streams.and_then(|p| p.value) == Some(want))
            .then_some(()))
        }
    };
    poll_until("a working task and an open stream over OTLP", WAIT, || {
        gauges(1.0)
    })
    .await?;
    cancel_and_drain(&node, &sleeping, stream).await?;
    poll_until("no working task and no open stream over OTLP", WAIT, || {
        gauges(0.0)
    })
    .await?;
    // `/metrics` says the same.
    let (_, _, text) = scrape(&node, &[]).await?;
    ensure!(
        sample(&text, "mew_tasks_ended_total", &shout_done) == Some(3.0),
        "{text}"
    );
    let stats = receiver.stats().await?;
    ensure!(stats.exports == 0, "traces were exported: {stats:?}");
    Ok(())
}

async fn jsonrpc_sleeper(node: &MewNode) -> anyhow::Result<mew_transport::RemoteAgent> {
    node.agent("/agents/sleeper", Binding::JsonRpc).await
}

/// Starts a `sleeper` task with a streaming send: the task, and its open stream.
async fn start_sleeping(node: &MewNode) -> anyhow::Result<(Task, EventStream)> {
    let mut stream = jsonrpc_sleeper(node)
        .await?
        .send_streaming_message(
            &CallContext::default(),
            SendMessageRequest::new(Message::user_text("sleep")),
        )
        .await?;
    let first = stream.next().await.context("the stream ended at once")??;
    let StreamResponse::Task(sleeping) = first else {
        bail!("the stream began with {first:?}");
    };
    Ok((sleeping, stream))
}

/// Cancels `task` and reads its stream to the end, which closes it.
async fn cancel_and_drain(
    node: &MewNode,
    task: &Task,
    mut stream: EventStream,
) -> anyhow::Result<()> {
    jsonrpc_sleeper(node)
        .await?
        .cancel_task(
            &CallContext::default(),
            CancelTaskRequest {
                id: task.id.clone(),
                ..CancelTaskRequest::default()
            },
        )
        .await?;
    while let Some(event) = stream.next().await {
        event?;
    }
    Ok(())
}

const AUTH: &str = "auth:\n  api_keys:\n    - name: scraper\n      key_env: TEST_SCRAPER_KEY\n";
const KEY: &str = "scraper-key-0123456789";

/// A node with `config` and the scraper's key in its environment.
async fn node_with(config: &str) -> anyhow::Result<MewNode> {
    let mut node = MewNode::new()?;
    node.write_config(config)?;
    node.write_role("shout.md", &command_role("shout", "echo hi"))?;
    node.set_env("TEST_SCRAPER_KEY", KEY);
    node.launch().await?;
    Ok(node)
}

#[tokio::test]
async fn metrics_access_follows_the_metrics_section() -> anyhow::Result<()> {
    // authenticated: no credentials, no metrics; the node's API key opens them.
    let node = node_with(&format!("{AUTH}metrics:\n  access: authenticated\n")).await?;
    let (status, _, body) = scrape(&node, &[]).await?;
    ensure!(status == 401, "anonymous scrape: {status} {body}");
    let (status, media, body) = scrape(&node, &[("X-API-Key", KEY)]).await?;
    ensure!(
        status == 200
            && media.starts_with("text/plain")
            && body.lines().any(|line| line == "mew_open_streams 0"),
        "scrape with a key: {status} {media}\n{body}"
    );
    let (status, _, _) = scrape(&node, &[("X-API-Key", "wrong")]).await?;
    ensure!(status == 401, "a wrong key: {status}");
    drop(node);

    // The default, loopback: a caller on loopback needs no credentials though the node has
    // `auth:`, while the A2A operations still want them.
    let node = node_with(AUTH).await?;
    let (status, _, body) = scrape(&node, &[]).await?;
    ensure!(
        status == 200,
        "anonymous scrape on loopback: {status} {body}"
    );
    let (status, _) = node.get_json("/agents/shout/tasks").await?;
    ensure!(status == 401, "the A2A operations without a key: {status}");
    // OpenMetrics when asked for.
    let (status, media, body) = scrape(
        &node,
        &[("Accept", "application/openmetrics-text;version=1.0.0")],
    )
    .await?;
    ensure!(
        status == 200
            && media.starts_with("application/openmetrics-text")
            && body.ends_with("# EOF\n"),
        "{status} {media}\n{body}"
    );
    drop(node);

    // Switched off: no such route.
    let node = node_with("metrics:\n  enabled: false\n").await?;
    let (status, _, body) = scrape(&node, &[]).await?;
    ensure!(status == 404, "metrics switched off: {status} {body}");

    // `authenticated` without any scheme to authenticate with is a configuration error.
    let mut node = MewNode::new()?;
    node.write_config("metrics:\n  access: authenticated\n")?;
    match node.launch().await {
        Ok(()) => bail!("a node without auth: started with metrics.access: authenticated"),
        Err(e) => ensure!(format!("{e:#}").contains("metrics.access"), "{e:#}"),
    }
    Ok(())
}
