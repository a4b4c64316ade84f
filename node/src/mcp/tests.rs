//! The MCP client against the hermetic server of `mew_tests::mcp`: over stdio (the
//! `mcp-server` binary) and Streamable HTTP (in this process), speaking 2026-07-28, 2025-11-25
//! or both.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mew_tests::mcp::{self as hermetic, Options, Protocol, TestMcpServer};
use rustix::process::{Pid, Signal, kill_process};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::sync::Barrier;

use super::*;
use crate::config::mcp::{McpSampling, McpServerConfig, McpTransport};
use crate::conversation::ResultPart;
use crate::tools::{Category, ToolContext, ToolOutput, test_support};

/// How long anything a test waits for may take before the test fails: a liveness bound for a
/// loaded machine, never a claim about speed.
const PATIENCE: Duration = Duration::from_secs(30);

/// The hermetic server's tools as Mew names them on the server `server`, sorted.
fn expected_tools(server: &str) -> Vec<String> {
    let mut names: Vec<String> = [
        "add_tool",
        "ask",
        "audio",
        "bare",
        "crash",
        "echo",
        "environment",
        "fail",
        "image",
        "link",
        "pid",
        "report",
        "resource",
        "roots",
        "sample",
        "slow",
        "slow_calls",
        "spawn_child",
        "structured",
        "trace_context",
    ]
    .iter()
    .map(|tool| format!("mcp__{server}__{tool}"))
    .collect();
    names.sort();
    names
}

fn server_bin() -> PathBuf {
    hermetic::server_bin().unwrap_or_else(|err| panic!("{err:#}"))
}

/// A server configuration with roomy limits.
fn config(transport: McpTransport) -> McpServerConfig {
    McpServerConfig {
        transport,
        connect_timeout: PATIENCE,
        call_timeout: PATIENCE,
        allow_tools: Vec::new(),
        deny_tools: Vec::new(),
        max_restarts: 5,
        protocol: Default::default(),
        sampling: Default::default(),
        elicitation: Default::default(),
        oauth: Default::default(),
        origin: "test".to_owned(),
        undefined_vars: Vec::new(),
        warnings: Vec::new(),
        as_written: None,
    }
}

/// The `mcp-server` binary over stdio, speaking `protocol`.
fn stdio(protocol: &str) -> McpServerConfig {
    config(McpTransport::Stdio {
        command: server_bin().display().to_string(),
        args: vec!["--protocol".to_owned(), protocol.to_owned()],
        env: BTreeMap::new(),
        cwd: None,
    })
}

fn http(url: &str) -> McpServerConfig {
    config(McpTransport::Http {
        url: url.to_owned(),
        headers: BTreeMap::new(),
    })
}

async fn http_server(protocol: Protocol) -> TestMcpServer {
    TestMcpServer::start_http_with(Options {
        protocol,
        ..Options::default()
    })
    .await
    .unwrap()
}

/// A project directory with a process ledger, and the context of a node running there.
struct Project {
    dir: TempDir,
}

impl Project {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn ledger(&self) -> PathBuf {
        self.path().join("processes")
    }

    fn context(&self) -> McpContext {
        let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_owned());
        McpContext {
            env: Arc::new(HashMap::from([
                ("PATH".to_owned(), path),
                ("MEW_TEST_SECRET".to_owned(), "s3cret".to_owned()),
            ])),
            project_dir: self.path().to_path_buf(),
            ledger: Some(self.ledger()),
            vault: None,
            sign_ins: None,
            memory: None,
        }
    }

    fn tool_context(&self) -> ToolContext {
        test_support::context(self.path())
    }

    async fn start(&self, servers: Vec<(&str, McpServerConfig)>) -> Arc<McpManager> {
        let servers = servers
            .into_iter()
            .map(|(name, config)| (name.to_owned(), config))
            .collect();
        McpManager::start(&servers, self.context()).await
    }
}

fn find(manager: &McpManager, name: &str) -> Arc<dyn Tool> {
    manager
        .tools()
        .into_iter()
        .find(|tool| tool.name() == name)
        .unwrap_or_else(|| panic!("no tool {name}"))
}

async fn call(manager: &McpManager, project: &Project, name: &str, input: Value) -> ToolOutput {
    find(manager, name)
        .call(input, &project.tool_context())
        .await
}

/// Calls `name` and expects success: its text.
async fn call_ok(manager: &McpManager, project: &Project, name: &str, input: Value) -> String {
    let output = call(manager, project, name, input).await;
    assert!(!output.is_error, "{name}: {output:?}");
    output.text_content()
}

fn status(manager: &McpManager, name: &str) -> ServerStatus {
    manager
        .status()
        .into_iter()
        .find(|status| status.name == name)
        .unwrap_or_else(|| panic!("no server {name}"))
}

/// Waits until `check` holds, failing the test after [`PATIENCE`].
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let waited = tokio::time::timeout(PATIENCE, async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "still not true after {PATIENCE:?}: {what}");
}

/// What the `slow_calls` tool says: (started, cancelled).
async fn slow_calls(manager: &McpManager, project: &Project, server: &str) -> (u64, u64) {
    let text = call_ok(
        manager,
        project,
        &format!("mcp__{server}__slow_calls"),
        json!({}),
    )
    .await;
    let stats: Value = serde_json::from_str(&text).unwrap();
    (
        stats["started"].as_u64().unwrap(),
        stats["cancelled"].as_u64().unwrap(),
    )
}

/// True once process `pid` is gone or a zombie.
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

async fn wait_ended(pid: u32) {
    eventually(
        &format!("process {pid} ended"),
        || async move { ended(pid) },
    )
    .await;
}

fn pid_of(text: &str) -> u32 {
    text.trim().parse().unwrap()
}

#[tokio::test]
async fn every_transport_and_protocol_lists_and_calls_the_tools() {
    let project = Project::new();
    let both = http_server(Protocol::Both).await;
    let legacy = http_server(Protocol::Legacy).await;
    let modern = http_server(Protocol::Modern).await;
    let manager = project
        .start(vec![
            ("stdio", stdio("both")),
            ("stdio_legacy", stdio("legacy")),
            ("stdio_modern", stdio("modern")),
            ("http", http(both.url())),
            ("http_legacy", http(legacy.url())),
            ("http_modern", http(modern.url())),
        ])
        .await;

    let servers = [
        ("http", "2026-07-28"),
        ("http_legacy", "2025-11-25"),
        ("http_modern", "2026-07-28"),
        ("stdio", "2026-07-28"),
        ("stdio_legacy", "2025-11-25"),
        ("stdio_modern", "2026-07-28"),
    ];
    let statuses = manager.status();
    assert_eq!(
        statuses.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        servers.map(|(name, _)| name)
    );
    let mut all = Vec::new();
    for (name, protocol) in servers {
        let status = status(&manager, name);
        assert_eq!(status.state, ServerState::Connected, "{status:?}");
        assert_eq!(status.protocol_version.as_deref(), Some(protocol), "{name}");
        assert_eq!(status.tools, expected_tools(name).len(), "{name}");
        assert_eq!(status.skipped_tools, ["bad.name", "has space"], "{name}");
        assert_eq!(status.last_error, None, "{name}");
        assert_eq!(status.restarts, 0, "{name}");
        assert_eq!(
            status.transport,
            if name.starts_with("http") {
                "http"
            } else {
                "stdio"
            }
        );
        all.extend(expected_tools(name));

        let echo = format!("mcp__{name}__echo");
        let text = call_ok(&manager, &project, &echo, json!({"text": "hi", "times": 3})).await;
        assert_eq!(text, "hi hi hi", "{name}");
    }
    all.sort();
    let names: Vec<String> = manager
        .tools()
        .iter()
        .map(|tool| tool.name().to_owned())
        .collect();
    assert_eq!(names, all);

    // Descriptions, schemas and categories pass through, with fallbacks.
    let echo = find(&manager, "mcp__stdio__echo");
    assert_eq!(echo.description(), "Echoes `text`, `times` times.");
    assert_eq!(echo.category(), Category::Exec);
    assert_eq!(echo.input_schema()["required"], json!(["text"]));
    assert_eq!(echo.input_schema()["properties"]["times"]["minimum"], 1);
    let stats = find(&manager, "mcp__http__slow_calls");
    assert_eq!(stats.category(), Category::Read);
    let bare = find(&manager, "mcp__http_modern__bare");
    assert_eq!(
        bare.description(),
        "The tool bare of the MCP server http_modern."
    );
    assert_eq!(bare.input_schema(), json!({"type": "object"}));
    assert_eq!(bare.category(), Category::Exec);
    assert_eq!(bare.spec().name, "mcp__http_modern__bare");

    manager.shutdown(PATIENCE).await;
    for status in manager.status() {
        assert_eq!(status.state, ServerState::Stopped, "{status:?}");
    }
    assert!(manager.tools().is_empty());
}

#[tokio::test]
async fn every_kind_of_content_comes_through() {
    let project = Project::new();
    let server = http_server(Protocol::Both).await;
    let manager = project
        .start(vec![("s", stdio("both")), ("h", http(server.url()))])
        .await;
    for name in ["s", "h"] {
        let tool = |tool: &str| format!("mcp__{name}__{tool}");

        let image = call(&manager, &project, &tool("image"), json!({})).await;
        assert!(!image.is_error);
        assert_eq!(
            image.content,
            [
                ResultPart::Text {
                    text: "a red pixel".to_owned()
                },
                ResultPart::Image {
                    media_type: "image/png".to_owned(),
                    data: hermetic::PNG_BASE64.to_owned()
                }
            ]
        );

        let audio = call_ok(&manager, &project, &tool("audio"), json!({})).await;
        assert_eq!(audio, "[audio: audio/wav, 44 bytes, not shown]");

        let resource = call_ok(&manager, &project, &tool("resource"), json!({})).await;
        assert_eq!(
            resource,
            format!(
                "[resource {} (text/plain)]\n{}\n[resource {} (application/octet-stream): \
                 binary, 16 bytes, not shown]",
                hermetic::TEXT_RESOURCE_URI,
                hermetic::TEXT_RESOURCE_TEXT,
                hermetic::BLOB_RESOURCE_URI
            )
        );

        let link = call_ok(&manager, &project, &tool("link"), json!({})).await;
        assert_eq!(
            link,
            format!(
                "[resource link: report.pdf {} (application/pdf): The quarterly report]",
                hermetic::LINK_URI
            )
        );

        let structured = call_ok(
            &manager,
            &project,
            &tool("structured"),
            json!({"city": "Oslo"}),
        )
        .await;
        assert_eq!(
            serde_json::from_str::<Value>(&structured).unwrap(),
            json!({"city": "Oslo", "temperature": 21})
        );

        let failed = call(
            &manager,
            &project,
            &tool("fail"),
            json!({"reason": "no such city"}),
        )
        .await;
        assert!(failed.is_error);
        assert_eq!(failed.text_content(), "no such city");

        // A JSON-RPC error (a missing argument) is an error result naming the code.
        let refused = call(&manager, &project, &tool("echo"), json!({})).await;
        assert!(refused.is_error);
        assert!(
            refused
                .text_content()
                .contains("error -32602: text must be a string"),
            "{refused:?}"
        );
        // Input that is not an object never reaches the server.
        let wrong = call(&manager, &project, &tool("echo"), json!("hi")).await;
        assert!(wrong.is_error);
        assert!(
            wrong.text_content().contains("expected a JSON object"),
            "{wrong:?}"
        );
        // A call without input is a call without arguments.
        let bare = call_ok(&manager, &project, &tool("bare"), Value::Null).await;
        assert_eq!(bare, "called bare");
    }
    manager.shutdown(PATIENCE).await;
}

#[tokio::test]
async fn allow_and_deny_lists_use_the_names_on_the_server() {
    let project = Project::new();
    let mut filtered = stdio("both");
    filtered.allow_tools = vec!["echo".to_owned(), "fail".to_owned(), "slow".to_owned()];
    filtered.deny_tools = vec!["fail".to_owned()];
    let mut denied = stdio("legacy");
    denied.deny_tools = vec!["crash".to_owned(), "mcp__denied__echo".to_owned()];
    let manager = project
        .start(vec![("filtered", filtered), ("denied", denied)])
        .await;
    let names: Vec<String> = manager
        .tools()
        .iter()
        .map(|tool| tool.name().to_owned())
        .filter(|name| name.starts_with("mcp__filtered__"))
        .collect();
    assert_eq!(names, ["mcp__filtered__echo", "mcp__filtered__slow"]);
    assert_eq!(status(&manager, "filtered").tools, 2);
    let denied: Vec<String> = manager
        .tools()
        .iter()
        .map(|tool| tool.name().to_owned())
        .filter(|name| name.starts_with("mcp__denied__"))
        .collect();
    assert!(!denied.contains(&"mcp__denied__crash".to_owned()));
    // Lists name tools as the server does, never by their Mew names.
    assert!(denied.contains(&"mcp__denied__echo".to_owned()));
    assert_eq!(denied.len(), expected_tools("denied").len() - 1);
    manager.shutdown(PATIENCE).await;
}

#[tokio::test]
async fn a_call_that_times_out_is_cancelled_on_the_server() {
    let project = Project::new();
    let legacy = http_server(Protocol::Legacy).await;
    let modern = http_server(Protocol::Modern).await;
    let mut servers = vec![
        ("stdio", stdio("both")),
        ("stdio_legacy", stdio("legacy")),
        ("http_legacy", http(legacy.url())),
        ("http_modern", http(modern.url())),
    ];
    for (_, config) in &mut servers {
        config.call_timeout = Duration::from_millis(300);
    }
    let manager = project.start(servers).await;
    for name in ["stdio", "stdio_legacy", "http_legacy", "http_modern"] {
        let slow = format!("mcp__{name}__slow");
        let output = call(&manager, &project, &slow, json!({"seconds": 600})).await;
        assert!(output.is_error, "{name}: {output:?}");
        assert_eq!(
            output.text_content(),
            format!(
                "{slow} timed out after 300ms (the call_timeout of the MCP server {name}); \
                 the server was told to cancel it"
            )
        );
        eventually(&format!("{name} saw the cancellation"), || async {
            slow_calls(&manager, &project, name).await == (1, 1)
        })
        .await;
        // The connection is fine afterwards.
        assert_eq!(status(&manager, name).state, ServerState::Connected);
    }
    assert_eq!(legacy.server().cancellations(), 1);
    assert_eq!(modern.server().cancellations(), 1);
    manager.shutdown(PATIENCE).await;
}

#[tokio::test]
async fn a_cancelled_task_cancels_its_call_on_the_server() {
    let project = Project::new();
    let server = http_server(Protocol::Both).await;
    let manager = project
        .start(vec![("s", stdio("both")), ("h", http(server.url()))])
        .await;
    for name in ["s", "h"] {
        let ctx = project.tool_context();
        let cancel = ctx.cancel.clone();
        let slow = find(&manager, &format!("mcp__{name}__slow"));
        let running = tokio::spawn(async move { slow.call(json!({"seconds": 600}), &ctx).await });
        eventually(&format!("{name} started the slow call"), || async {
            slow_calls(&manager, &project, name).await.0 == 1
        })
        .await;
        cancel.cancel();
        let output = running.await.unwrap();
        assert!(output.is_error);
        assert!(
            output.text_content().contains("was cancelled"),
            "{output:?}"
        );
        eventually(&format!("{name} saw the cancellation"), || async {
            slow_calls(&manager, &project, name).await == (1, 1)
        })
        .await;
        // A task that is cancelled already makes no call.
        let output = find(&manager, &format!("mcp__{name}__echo"))
            .call(json!({"text": "late"}), &{
                let ctx = project.tool_context();
                ctx.cancel.cancel();
                ctx
            })
            .await;
        assert!(output.is_error);
        assert!(output.text_content().contains("did not run"), "{output:?}");
    }
    manager.shutdown(PATIENCE).await;
}

#[tokio::test]
async fn a_stdio_server_that_answers_nothing_in_time_is_restarted() {
    let project = Project::new();
    let mut config = stdio("both");
    config.call_timeout = Duration::from_millis(200);
    let manager = project.start(vec![("s", config)]).await;
    let first = pid_of(&call_ok(&manager, &project, "mcp__s__pid", json!({})).await);
    let slow = |seconds| {
        let (manager, project) = (&manager, &project);
        async move {
            call(
                manager,
                project,
                "mcp__s__slow",
                json!({"seconds": seconds}),
            )
            .await
        }
    };
    // Two timeouts leave it be; the third in a row takes it for hung.
    for _ in 0..2 {
        let output = slow(600).await;
        assert!(output.text_content().contains("timed out"), "{output:?}");
        assert!(
            !output.text_content().contains("started again"),
            "{output:?}"
        );
    }
    let output = slow(600).await;
    assert!(
        output
            .text_content()
            .contains("answered none of its last 3 calls")
            && output
                .text_content()
                .contains("started again on the next call"),
        "{output:?}"
    );
    assert_eq!(status(&manager, "s").state, ServerState::Restarting);
    let second = pid_of(&call_ok(&manager, &project, "mcp__s__pid", json!({})).await);
    assert_ne!(first, second, "the hung server was not replaced");
    wait_ended(first).await;
    assert_eq!(status(&manager, "s").restarts, 1);
    manager.shutdown(PATIENCE).await;
}

#[tokio::test]
async fn a_killed_stdio_server_is_started_again_on_the_next_call() {
    let project = Project::new();
    let manager = project.start(vec![("s", stdio("both"))]).await;
    let first = pid_of(&call_ok(&manager, &project, "mcp__s__pid", json!({})).await);
    let ledger = project.ledger();
    assert_eq!(
        std::fs::read_dir(&ledger).unwrap().count(),
        1,
        "the ledger records the server's group"
    );

    kill_process(Pid::from_raw(first.cast_signed()).unwrap(), Signal::KILL).unwrap();
    // Seen once the whole process is gone (a zombie leader may still have threads ending).
    eventually("the server's death is seen", || async {
        status(&manager, "s").state == ServerState::Restarting
    })
    .await;
    let died = status(&manager, "s");
    assert_eq!(died.state, ServerState::Restarting, "{died:?}");
    assert!(
        died.last_error.as_deref().unwrap().contains("signal: 9"),
        "{died:?}"
    );
    // Its tools stay, so that a call can start it again.
    assert_eq!(died.tools, expected_tools("s").len());

    let text = call_ok(&manager, &project, "mcp__s__echo", json!({"text": "back"})).await;
    assert_eq!(text, "back");
    let second = pid_of(&call_ok(&manager, &project, "mcp__s__pid", json!({})).await);
    assert_ne!(first, second);
    let restarted = status(&manager, "s");
    assert_eq!(restarted.state, ServerState::Connected, "{restarted:?}");
    assert_eq!(restarted.restarts, 1);
    manager.shutdown(PATIENCE).await;
}

#[tokio::test]
async fn a_crash_during_a_call_is_an_error_result_with_the_servers_last_words() {
    let project = Project::new();
    let manager = project.start(vec![("s", stdio("legacy"))]).await;
    let crashed = call(&manager, &project, "mcp__s__crash", json!({})).await;
    assert!(crashed.is_error);
    let text = crashed.text_content();
    assert!(text.contains("exit status: 3"), "{text}");
    assert!(text.contains(hermetic::CRASH_MESSAGE), "{text}");
    assert!(text.contains("started again on the next call"), "{text}");
    let status_now = status(&manager, "s");
    assert_eq!(status_now.state, ServerState::Restarting);
    assert!(
        status_now
            .last_error
            .as_deref()
            .unwrap()
            .contains(hermetic::CRASH_MESSAGE),
        "{status_now:?}"
    );

    let text = call_ok(&manager, &project, "mcp__s__echo", json!({"text": "again"})).await;
    assert_eq!(text, "again");
    assert_eq!(status(&manager, "s").state, ServerState::Connected);
    manager.shutdown(PATIENCE).await;
}

#[tokio::test]
async fn a_server_that_keeps_dying_fails_after_max_restarts() {
    let project = Project::new();
    let mut flaky = stdio("both");
    flaky.max_restarts = 2;
    let manager = project
        .start(vec![("flaky", flaky), ("steady", stdio("both"))])
        .await;
    // The first crash, then two restarts that crash again without an answer in between.
    for round in 0..3 {
        let output = call(&manager, &project, "mcp__flaky__crash", json!({})).await;
        assert!(output.is_error, "round {round}: {output:?}");
    }
    let failed = status(&manager, "flaky");
    assert_eq!(failed.state, ServerState::Failed, "{failed:?}");
    assert_eq!(failed.restarts, 2);
    assert_eq!(failed.tools, 0);
    let last_error = failed.last_error.unwrap();
    assert!(
        last_error.starts_with("gave up after 2 restarts in a row"),
        "{last_error}"
    );
    assert!(last_error.contains(hermetic::CRASH_MESSAGE), "{last_error}");
    assert!(
        manager
            .tools()
            .iter()
            .all(|tool| !tool.name().starts_with("mcp__flaky__"))
    );
    // The other server is untouched.
    assert_eq!(status(&manager, "steady").state, ServerState::Connected);
    let text = call_ok(
        &manager,
        &project,
        "mcp__steady__echo",
        json!({"text": "ok"}),
    )
    .await;
    assert_eq!(text, "ok");
    manager.shutdown(PATIENCE).await;
}

#[tokio::test]
async fn an_answer_between_crashes_starts_the_count_again() {
    let project = Project::new();
    let mut flaky = stdio("both");
    flaky.max_restarts = 1;
    let manager = project.start(vec![("flaky", flaky)]).await;
    for round in 0..3 {
        let crashed = call(&manager, &project, "mcp__flaky__crash", json!({})).await;
        assert!(crashed.is_error, "round {round}");
        let text = call_ok(
            &manager,
            &project,
            "mcp__flaky__echo",
            json!({"text": "up"}),
        )
        .await;
        assert_eq!(text, "up", "round {round}");
    }
    let status = status(&manager, "flaky");
    assert_eq!(status.state, ServerState::Connected, "{status:?}");
    assert_eq!(status.restarts, 3);
    manager.shutdown(PATIENCE).await;
}

/// The names of [`every_generation`]'s servers.
const GENERATIONS: [&str; 4] = ["stdio_legacy", "stdio_modern", "http_legacy", "http_modern"];

/// The hermetic server speaking only 2025-11-25 and only 2026-07-28, over stdio and HTTP, as
/// [`GENERATIONS`]; the HTTP servers are returned to be kept alive.
async fn every_generation(project: &Project) -> (Arc<McpManager>, [TestMcpServer; 2]) {
    let legacy = http_server(Protocol::Legacy).await;
    let modern = http_server(Protocol::Modern).await;
    let manager = project
        .start(vec![
            (GENERATIONS[0], stdio("legacy")),
            (GENERATIONS[1], stdio("modern")),
            (GENERATIONS[2], http(legacy.url())),
            (GENERATIONS[3], http(modern.url())),
        ])
        .await;
    (manager, [legacy, modern])
}

#[tokio::test]
async fn list_changed_reloads_the_servers_tools() {
    let project = Project::new();
    let (manager, _servers) = every_generation(&project).await;
    let mut changes = manager.subscribe();
    for name in GENERATIONS {
        let extra = format!("mcp__{name}__extra");
        let text = call_ok(
            &manager,
            &project,
            &format!("mcp__{name}__add_tool"),
            json!({"name": "extra"}),
        )
        .await;
        assert_eq!(text, "added extra");
        let waited = tokio::time::timeout(PATIENCE, async {
            while !manager.tools().iter().any(|tool| tool.name() == extra) {
                changes.changed().await.unwrap();
            }
        })
        .await;
        assert!(waited.is_ok(), "{extra} never appeared");
        let text = call_ok(&manager, &project, &extra, json!({})).await;
        assert_eq!(text, "extra tool extra");
        assert_eq!(status(&manager, name).tools, expected_tools(name).len() + 1);
    }
    manager.shutdown(PATIENCE).await;
}

#[tokio::test]
async fn a_server_that_fails_to_start_affects_no_other() {
    let project = Project::new();
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let mut missing = stdio("both");
    missing.transport = McpTransport::Stdio {
        command: "/nonexistent/mew-mcp-server".to_owned(),
        args: Vec::new(),
        env: BTreeMap::new(),
        cwd: None,
    };
    let mut exits = stdio("both");
    exits.transport = McpTransport::Stdio {
        command: "sh".to_owned(),
        args: vec![
            "-c".to_owned(),
            "echo 'no config file' >&2; exit 7".to_owned(),
        ],
        env: BTreeMap::new(),
        cwd: None,
    };
    let mut undefined = stdio("both");
    undefined.undefined_vars = vec!["GITHUB_TOKEN".to_owned()];
    let manager = project
        .start(vec![
            ("missing", missing),
            ("exits", exits),
            ("unreachable", http(&format!("http://{closed}/mcp"))),
            ("bad.name", stdio("both")),
            ("a__b", stdio("both")),
            ("fine", undefined),
        ])
        .await;

    let missing = status(&manager, "missing");
    assert_eq!(missing.state, ServerState::Failed);
    let error = missing.last_error.unwrap();
    assert!(
        error.starts_with("cannot start \"/nonexistent/mew-mcp-server\""),
        "{error}"
    );
    assert!(error.contains("No such file or directory"), "{error}");

    let exits = status(&manager, "exits");
    assert_eq!(exits.state, ServerState::Failed);
    let error = exits.last_error.unwrap();
    assert!(error.contains("exit status: 7"), "{error}");
    assert!(error.contains("no config file"), "{error}");

    let unreachable = status(&manager, "unreachable");
    assert_eq!(unreachable.state, ServerState::Failed);
    assert_eq!(unreachable.transport, "http");
    let error = unreachable.last_error.unwrap();
    assert!(
        error.starts_with(&format!("http://{closed}/mcp: ")),
        "{error}"
    );
    assert!(error.contains("onnect"), "{error}");

    let bad = status(&manager, "bad.name");
    assert_eq!(bad.state, ServerState::Failed);
    assert!(
        bad.last_error
            .unwrap()
            .contains("does not match ^[A-Za-z0-9_-]+$"),
        "the server name is checked"
    );
    assert_eq!(status(&manager, "a__b").state, ServerState::Failed);

    let fine = status(&manager, "fine");
    assert_eq!(fine.state, ServerState::Connected);
    assert_eq!(fine.undefined_vars, ["GITHUB_TOKEN"]);
    let names: Vec<String> = manager
        .tools()
        .iter()
        .map(|tool| tool.name().to_owned())
        .collect();
    assert_eq!(names, expected_tools("fine"));
    let text = call_ok(&manager, &project, "mcp__fine__echo", json!({"text": "ok"})).await;
    assert_eq!(text, "ok");
    manager.shutdown(PATIENCE).await;
}

#[tokio::test]
async fn a_server_that_is_not_up_at_start_is_connected_when_it_comes_up() {
    let project = Project::new();
    // A port nobody listens on yet: the server comes up there after the node started.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let manager = project
        .start(vec![("late", http(&format!("http://{port}/mcp")))])
        .await;
    assert_eq!(status(&manager, "late").state, ServerState::Failed);
    assert!(manager.tools().is_empty());

    let listener = tokio::net::TcpListener::bind(port).await.unwrap();
    let _server = TestMcpServer::start_http_on(listener).unwrap();
    eventually("the late server is connected", || async {
        status(&manager, "late").state == ServerState::Connected
    })
    .await;
    let text = call_ok(
        &manager,
        &project,
        "mcp__late__echo",
        json!({"text": "late"}),
    )
    .await;
    assert_eq!(text, "late");
    manager.shutdown(PATIENCE).await;
}

#[tokio::test]
async fn servers_connect_at_the_same_time() {
    // Each server answers its first tools/list only once both are being listed: connected one
    // after the other, the first would wait out its connect_timeout and fail.
    let gate = Arc::new(Barrier::new(2));
    let gated = || Options {
        list_gate: Some(gate.clone()),
        ..Options::default()
    };
    let first = TestMcpServer::start_http_with(gated()).await.unwrap();
    let second = TestMcpServer::start_http_with(gated()).await.unwrap();
    let project = Project::new();
    let manager = project
        .start(vec![
            ("first", http(first.url())),
            ("second", http(second.url())),
        ])
        .await;
    for status in manager.status() {
        assert_eq!(status.state, ServerState::Connected, "{status:?}");
    }
    manager.shutdown(PATIENCE).await;
}

#[tokio::test]
async fn roots_are_declared_and_list_the_project_directory() {
    let project = Project::new();
    let manager = project.start(vec![("s", stdio("legacy"))]).await;
    let text = call_ok(&manager, &project, "mcp__s__roots", json!({})).await;
    let seen: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(seen["declared"], true, "{seen}");
    let uri = reqwest::Url::from_directory_path(project.path()).unwrap();
    let name = project.path().file_name().unwrap().to_string_lossy();
    assert_eq!(
        seen["roots"],
        json!([{"uri": uri.to_string(), "name": name}]),
        "{seen}"
    );
    manager.shutdown(PATIENCE).await;
}

#[tokio::test]
async fn a_stdio_server_gets_an_allowlisted_environment_and_the_project_directory() {
    let project = Project::new();
    let mut config = stdio("both");
    if let McpTransport::Stdio { env, .. } = &mut config.transport {
        env.insert("GREETING".to_owned(), "hello".to_owned());
    }
    let sub = project.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let mut elsewhere = stdio("both");
    if let McpTransport::Stdio { cwd, .. } = &mut elsewhere.transport {
        *cwd = Some(PathBuf::from("sub"));
    }
    let manager = project
        .start(vec![("s", config), ("elsewhere", elsewhere)])
        .await;
    let text = call_ok(&manager, &project, "mcp__s__environment", json!({})).await;
    let seen: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        PathBuf::from(seen["cwd"].as_str().unwrap())
            .canonicalize()
            .unwrap(),
        project.path().canonicalize().unwrap()
    );
    let env = seen["env"].as_object().unwrap();
    assert_eq!(env["GREETING"], "hello");
    assert_eq!(env["PATH"], project.context().env["PATH"].as_str());
    assert!(!env.contains_key("MEW_TEST_SECRET"), "{env:?}");
    // HOME is allowlisted but not in the node's snapshot: the test process's own never leaks.
    assert!(!env.contains_key("HOME"), "{env:?}");
    let mut names: Vec<&String> = env.keys().collect();
    names.sort();
    assert_eq!(names, ["GREETING", "PATH"]);

    let text = call_ok(&manager, &project, "mcp__elsewhere__environment", json!({})).await;
    let seen: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        PathBuf::from(seen["cwd"].as_str().unwrap())
            .canonicalize()
            .unwrap(),
        sub.canonicalize().unwrap()
    );
    manager.shutdown(PATIENCE).await;
}

#[tokio::test]
async fn shutdown_kills_the_process_group_and_clears_the_ledger() {
    let project = Project::new();
    let manager = project.start(vec![("s", stdio("both"))]).await;
    let server = pid_of(&call_ok(&manager, &project, "mcp__s__pid", json!({})).await);
    let child = pid_of(&call_ok(&manager, &project, "mcp__s__spawn_child", json!({})).await);
    assert!(!ended(server) && !ended(child));
    assert_eq!(std::fs::read_dir(project.ledger()).unwrap().count(), 1);

    manager.shutdown(Duration::from_secs(5)).await;
    wait_ended(server).await;
    wait_ended(child).await;
    assert_eq!(status(&manager, "s").state, ServerState::Stopped);
    assert!(manager.tools().is_empty());
    assert_eq!(std::fs::read_dir(project.ledger()).unwrap().count(), 0);
}

#[tokio::test]
async fn a_tool_kept_past_shutdown_answers_with_an_error() {
    let project = Project::new();
    let manager = project.start(vec![("s", stdio("both"))]).await;
    let echo = find(&manager, "mcp__s__echo");
    manager.shutdown(PATIENCE).await;
    let output = echo
        .call(json!({"text": "late"}), &project.tool_context())
        .await;
    assert!(output.is_error);
    assert!(
        output
            .text_content()
            .contains("the MCP server s is shut down"),
        "{output:?}"
    );
}

#[tokio::test]
async fn an_expired_http_session_is_established_again_transparently() {
    let project = Project::new();
    let server = http_server(Protocol::Legacy).await;
    let manager = project.start(vec![("h", http(server.url()))]).await;
    let text = call_ok(&manager, &project, "mcp__h__echo", json!({"text": "one"})).await;
    assert_eq!(text, "one");
    assert_eq!(server.server().initializations(), 1);
    assert_eq!(server.expire_sessions().await.unwrap(), 1);

    let text = call_ok(&manager, &project, "mcp__h__echo", json!({"text": "two"})).await;
    assert_eq!(text, "two");
    assert_eq!(server.server().initializations(), 2);
    let status = status(&manager, "h");
    assert_eq!(status.state, ServerState::Connected);
    assert_eq!(status.restarts, 0, "{status:?}");
    manager.shutdown(PATIENCE).await;
}

#[tokio::test]
async fn a_session_refused_with_400_and_no_id_is_established_again() {
    // Servers built from the TypeScript SDK's example answer an unknown session id with 400 and
    // an error without an id; without care the call would wait out its call_timeout.
    let project = Project::new();
    let server = TestMcpServer::start_http_with(Options {
        protocol: Protocol::Legacy,
        unknown_session_is_bad_request: true,
        ..Options::default()
    })
    .await
    .unwrap();
    let manager = project.start(vec![("h", http(server.url()))]).await;
    let text = call_ok(&manager, &project, "mcp__h__echo", json!({"text": "one"})).await;
    assert_eq!(text, "one");
    assert_eq!(server.expire_sessions().await.unwrap(), 1);
    let text = call_ok(&manager, &project, "mcp__h__echo", json!({"text": "two"})).await;
    assert_eq!(text, "two");
    assert_eq!(server.server().initializations(), 2);
    manager.shutdown(PATIENCE).await;
}

#[tokio::test]
async fn http_headers_are_checked() {
    let project = Project::new();
    let server = http_server(Protocol::Both).await;
    let mut reserved = http(server.url());
    if let McpTransport::Http { headers, .. } = &mut reserved.transport {
        headers.insert("Mcp-Session-Id".to_owned(), "mine".to_owned());
    }
    let mut authorized = http(server.url());
    if let McpTransport::Http { headers, .. } = &mut authorized.transport {
        headers.insert("Authorization".to_owned(), "Bearer token".to_owned());
        headers.insert("X-Trace".to_owned(), "1".to_owned());
    }
    let manager = project
        .start(vec![
            ("reserved", reserved),
            ("authorized", authorized),
            ("not_a_url", http("no scheme here")),
        ])
        .await;
    let reserved = status(&manager, "reserved");
    assert_eq!(reserved.state, ServerState::Failed);
    assert!(
        reserved
            .last_error
            .unwrap()
            .contains("the header Mcp-Session-Id is the transport's own")
    );
    assert_eq!(status(&manager, "authorized").state, ServerState::Connected);
    let not_a_url = status(&manager, "not_a_url");
    assert_eq!(not_a_url.state, ServerState::Failed);
    assert!(not_a_url.last_error.unwrap().contains("not a URL"));
    manager.shutdown(PATIENCE).await;
}

#[test]
fn backoff_doubles_up_to_a_limit() {
    use super::client::backoff;
    assert_eq!(backoff(1), Duration::from_millis(250));
    assert_eq!(backoff(2), Duration::from_millis(500));
    assert_eq!(backoff(3), Duration::from_secs(1));
    assert_eq!(backoff(6), Duration::from_secs(8));
    assert_eq!(backoff(100), Duration::from_secs(8));
}

#[test]
fn status_serializes_for_json() {
    let status = ServerStatus {
        name: "github".to_owned(),
        transport: "stdio",
        state: ServerState::Restarting,
        tools: 3,
        protocol_version: Some("2025-11-25".to_owned()),
        last_error: Some("it exited".to_owned()),
        restarts: 1,
        skipped_tools: vec!["bad.name".to_owned()],
        undefined_vars: vec!["TOKEN".to_owned()],
    };
    assert_eq!(
        serde_json::to_value(&status).unwrap(),
        json!({
            "name": "github",
            "transport": "stdio",
            "state": "restarting",
            "tools": 3,
            "protocol_version": "2025-11-25",
            "last_error": "it exited",
            "restarts": 1,
            "skipped_tools": ["bad.name"],
            "undefined_vars": ["TOKEN"],
        })
    );
}

#[tokio::test]
async fn a_servers_progress_and_log_messages_reach_the_call_while_it_runs() {
    let project = Project::new();
    let (manager, _servers) = every_generation(&project).await;
    for name in GENERATIONS {
        let gate = project.path().join(format!("gate-{name}"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let mut ctx = project.tool_context();
        ctx.call_id = Some("call_1".to_owned());
        ctx.news = Some(Arc::new(move |news| sink.lock().unwrap().push(news)));
        let tool = format!("mcp__{name}__report");
        let call = {
            let (manager, tool, gate) = (manager.clone(), tool.clone(), gate.clone());
            tokio::spawn(async move {
                let tool = manager
                    .tools()
                    .into_iter()
                    .find(|t| t.name() == tool)
                    .unwrap();
                tool.call(json!({"gate": gate.display().to_string()}), &ctx)
                    .await
            })
        };
        eventually(&format!("{name}'s notes"), || {
            let seen = seen.clone();
            async move { seen.lock().unwrap().len() >= 2 }
        })
        .await;
        std::fs::write(&gate, "").unwrap();
        let output = call.await.unwrap();
        assert_eq!(output.text_content(), "reported", "{name}");
        let seen = seen.lock().unwrap().clone();
        let news = |phase: &str, detail: Value| crate::tools::ToolNews {
            call_id: Some("call_1".to_owned()),
            tool: tool.clone(),
            phase: if phase == "log" { "log" } else { "progress" },
            detail,
        };
        assert!(
            seen.contains(&news(
                "log",
                json!({"level": "info", "message": "reporting"})
            )),
            "{name}: {seen:?}"
        );
        assert!(
            seen.contains(&news(
                "progress",
                json!({"progress": 1.0, "total": 2.0, "message": "halfway"})
            )),
            "{name}: {seen:?}"
        );
    }
    manager.shutdown(PATIENCE).await;
}

#[tokio::test]
async fn a_server_allowed_to_sample_asks_the_calling_tasks_model_and_others_are_refused() {
    let project = Project::new();
    let legacy = http_server(Protocol::Legacy).await;
    let modern = http_server(Protocol::Modern).await;
    let with = |sampling, mut config: McpServerConfig| {
        config.sampling = sampling;
        config
    };
    let allowed = |config| with(McpSampling::Allow, config);
    let manager = project
        .start(vec![
            ("stdio_legacy", allowed(stdio("legacy"))),
            ("http_legacy", allowed(http(legacy.url()))),
            ("stdio_modern", allowed(stdio("modern"))),
            ("http_modern", allowed(http(modern.url()))),
            ("refused", with(McpSampling::Deny, stdio("legacy"))),
            ("refused_modern", with(McpSampling::Deny, stdio("modern"))),
            // The default: the caller is asked, and a call with no one to ask is refused.
            ("asking", stdio("legacy")),
            ("asking_modern", stdio("modern")),
        ])
        .await;
    let asked = Arc::new(Mutex::new(Vec::new()));
    let mut ctx = project.tool_context();
    ctx.task_id = Some(mew_cards::TaskId::from("task-1"));
    ctx.sampler = Some({
        let asked = asked.clone();
        Arc::new(move |request: crate::tools::SampleRequest| {
            asked.lock().unwrap().push(request.clone());
            Box::pin(async move {
                Ok(crate::tools::SampleAnswer {
                    text: format!("{} words", request.messages.len()),
                    model: "task-model".to_owned(),
                    hit_max_tokens: false,
                })
            })
        })
    });
    // 2025-11-25 servers send a request; 2026-07-28 ones ask in the call's input-required
    // result and read the answer in the call made again.
    for name in ["stdio_legacy", "http_legacy", "stdio_modern", "http_modern"] {
        let output = find(&manager, &format!("mcp__{name}__sample"))
            .call(json!({"prompt": "name a cat", "hint": "haiku"}), &ctx)
            .await;
        assert!(!output.is_error, "{name}: {output:?}");
        assert_eq!(
            output.text_content(),
            "model said: 1 words (task-model)",
            "{name}"
        );
    }
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 4);
    assert!(
        asked.iter().all(|request| *request == asked[0]),
        "{asked:?}"
    );
    assert_eq!(
        asked[0],
        crate::tools::SampleRequest {
            system: Some("Answer in one word.".to_owned()),
            messages: vec![crate::conversation::ChatMessage::user("name a cat")],
            max_tokens: 50,
            model_hints: vec!["haiku".to_owned()],
        }
    );
    // With `sampling: false` the server hears why, or the call fails saying so.
    for name in ["refused", "refused_modern"] {
        let output = find(&manager, &format!("mcp__{name}__sample"))
            .call(json!({"prompt": "name a cat"}), &ctx)
            .await;
        assert!(
            output.is_error && output.text_content().contains("sampling: false"),
            "{name}: {output:?}"
        );
    }
    // Asking, without a user to ask (this call cannot ask): refused, saying why.
    for (name, why) in [
        ("asking", "has no user to ask"),
        ("asking_modern", "no one can be asked"),
    ] {
        let output = find(&manager, &format!("mcp__{name}__sample"))
            .call(json!({"prompt": "name a cat"}), &ctx)
            .await;
        assert!(
            output.is_error && output.text_content().contains(why),
            "{name}: {output:?}"
        );
    }
    assert_eq!(asked.len(), 4, "no refused request reached the model");
    manager.shutdown(PATIENCE).await;
}

#[tokio::test]
async fn a_servers_question_waits_for_the_user_and_the_call_resumes_with_the_reply() {
    let project = Project::new();
    let modern = http_server(Protocol::Modern).await;
    let declining = |mut config: McpServerConfig| {
        config.elicitation = crate::config::mcp::McpElicitation::Decline;
        config
    };
    let manager = project
        .start(vec![
            ("stdio_modern", stdio("modern")),
            ("http_modern", http(modern.url())),
            ("declining", declining(stdio("modern"))),
        ])
        .await;
    let mut ctx = project.tool_context();
    ctx.task_id = Some(mew_cards::TaskId::from("task-1"));
    ctx.can_ask_user = true;
    for name in ["stdio_modern", "http_modern"] {
        let tool = find(&manager, &format!("mcp__{name}__ask"));
        let asked = tool.call(json!({}), &ctx).await;
        let relay = asked
            .relay
            .clone()
            .unwrap_or_else(|| panic!("{name}: {asked:?}"));
        let ask = asked.ask.clone().unwrap();
        assert_eq!(ask.kind, "elicitation");
        assert_eq!(ask.data["message"], "What is your name?");
        assert_eq!(
            ask.data["requestedSchema"]["properties"]["name"]["type"],
            "string"
        );
        assert!(
            asked.text_content().contains("What is your name?"),
            "{asked:?}"
        );
        // A bare value fills the one field; a JSON object fills the fields; decline declines.
        for (reply, said) in [
            ("Ada", "hello Ada"),
            (r#"{"name": "Grace"}"#, "hello Grace"),
            ("decline", "you declined"),
            ("cancel", "you cancelled"),
        ] {
            let output = tool.answer(&relay, reply, &ctx).await;
            assert_eq!(output.text_content(), said, "{name}: {reply}");
        }
    }
    // Declined by the entry, or with no user to ask: no question reaches anyone.
    let output = find(&manager, "mcp__declining__ask")
        .call(json!({}), &ctx)
        .await;
    assert_eq!(output.text_content(), "you declined");
    let output = find(&manager, "mcp__stdio_modern__ask")
        .call(json!({}), &project.tool_context())
        .await;
    assert_eq!(output.text_content(), "you declined");
    manager.shutdown(PATIENCE).await;
}

#[tokio::test]
async fn a_legacy_servers_question_during_a_call_keeps_the_call_waiting_for_the_reply() {
    // Before 2026-07-28 a server asks with a request while the call runs: the call waits,
    // parked, while the question goes to the user, and goes on with the reply.
    let project = Project::new();
    let legacy = http_server(Protocol::Legacy).await;
    let declining = |mut config: McpServerConfig| {
        config.elicitation = crate::config::mcp::McpElicitation::Decline;
        config
    };
    let manager = project
        .start(vec![
            ("stdio_legacy", stdio("legacy")),
            ("http_legacy", http(legacy.url())),
            ("declining", declining(stdio("legacy"))),
        ])
        .await;
    let mut ctx = project.tool_context();
    ctx.task_id = Some(mew_cards::TaskId::from("task-1"));
    ctx.can_ask_user = true;
    for name in ["stdio_legacy", "http_legacy"] {
        let tool = find(&manager, &format!("mcp__{name}__ask"));
        for (reply, said) in [
            ("Ada", "hello Ada"),
            (r#"{"name": "Grace"}"#, "hello Grace"),
            ("decline", "you declined"),
            ("cancel", "you cancelled"),
        ] {
            let asked = tool.call(json!({}), &ctx).await;
            let relay = asked
                .relay
                .clone()
                .unwrap_or_else(|| panic!("{name}: {asked:?}"));
            let ask = asked.ask.clone().unwrap();
            assert_eq!(ask.kind, "elicitation");
            assert_eq!(ask.data["message"], "What is your name?");
            assert_eq!(
                ask.data["requestedSchema"]["properties"]["name"]["type"],
                "string"
            );
            let output = tool.answer(&relay, reply, &ctx).await;
            assert_eq!(output.text_content(), said, "{name}: {reply}");
            // The call took its reply: a second one finds nothing waiting.
            let again = tool.answer(&relay, reply, &ctx).await;
            assert!(
                again.is_error && again.text_content().contains("waits no longer"),
                "{again:?}"
            );
        }
    }
    // Declined by the entry, or with no user to ask: the server hears no at once.
    let output = find(&manager, "mcp__declining__ask")
        .call(json!({}), &ctx)
        .await;
    assert_eq!(output.text_content(), "you declined");
    let output = find(&manager, "mcp__stdio_legacy__ask")
        .call(json!({}), &project.tool_context())
        .await;
    assert_eq!(output.text_content(), "you declined");
    // A parked call whose task is cancelled before the reply ends; the server hears cancel.
    let tool = find(&manager, "mcp__stdio_legacy__ask");
    let asked = tool.call(json!({}), &ctx).await;
    let relay = asked.relay.clone().unwrap();
    let mut cancelled = ctx.clone();
    cancelled.cancel = tokio_util::sync::CancellationToken::new();
    cancelled.cancel.cancel();
    let output = tool.answer(&relay, "Ada", &cancelled).await;
    assert!(
        output.is_error && output.text_content().contains("cancelled"),
        "{output:?}"
    );
    manager.shutdown(PATIENCE).await;
}

#[tokio::test]
async fn a_servers_skills_are_listed_unread_then_read_verified_when_loaded() {
    let project = Project::new();
    let legacy = http_server(Protocol::Legacy).await;
    let modern = http_server(Protocol::Modern).await;
    let tampered = TestMcpServer::start_http_with(Options {
        tampered_skill: true,
        ..Options::default()
    })
    .await
    .unwrap();
    let manager = project
        .start(vec![
            ("legacy", http(legacy.url())),
            ("modern", http(modern.url())),
            ("tampered", http(tampered.url())),
            ("stdio", stdio("both")),
        ])
        .await;
    let mut listed: Vec<String> = manager
        .skills_for(None)
        .iter()
        .map(|skill| skill.name())
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        [
            "legacy:greeting-kit",
            "modern:greeting-kit",
            "stdio:greeting-kit",
            "tampered:greeting-kit"
        ]
    );
    let skill = &manager.skills_for(None)[0];
    assert_eq!(skill.description(), "Greets people in the house style");
    assert_eq!(
        skill.files(),
        Some(vec![(
            "references/STYLE.md".to_owned(),
            hermetic::STYLE_MD.len() as u64
        )])
    );
    // Connecting and listing read nothing.
    for server in [&legacy, &modern, &tampered] {
        assert!(
            server.server().reads().is_empty(),
            "{:?}",
            server.server().reads()
        );
    }

    let cancel = tokio_util::sync::CancellationToken::new();
    for (server, hermetic) in [("legacy", &legacy), ("modern", &modern)] {
        let (_, text) = manager
            .skill_file(server, "greeting-kit", None, None, &cancel)
            .await
            .unwrap();
        assert_eq!(text, hermetic::SKILL_MD.as_bytes());
        let (_, style) = manager
            .skill_file(
                server,
                "greeting-kit",
                Some("references/STYLE.md"),
                None,
                &cancel,
            )
            .await
            .unwrap();
        assert_eq!(style, hermetic::STYLE_MD.as_bytes());
        let err = manager
            .skill_file(
                server,
                "greeting-kit",
                Some("../other/SKILL.md"),
                None,
                &cancel,
            )
            .await
            .unwrap_err();
        assert!(err.contains("is not a path in the skill"), "{err}");
        let err = manager
            .skill_file(server, "greeting-kit", Some("secret.md"), None, &cancel)
            .await
            .unwrap_err();
        assert!(
            err.contains("is not a file of the skill greeting-kit"),
            "{err}"
        );
        // Only the listed files were asked for.
        assert_eq!(
            hermetic.server().reads(),
            [hermetic::SKILL_URI, hermetic::STYLE_URI]
        );
    }
    let (_, text) = manager
        .skill_file("stdio", "greeting-kit", None, None, &cancel)
        .await
        .unwrap();
    assert_eq!(text, hermetic::SKILL_MD.as_bytes());

    // A SKILL.md that is not what the server listed is not used.
    let err = manager
        .skill_file("tampered", "greeting-kit", None, None, &cancel)
        .await
        .unwrap_err();
    assert!(
        err.contains("the manifest says") && err.contains("its content is not used"),
        "{err}"
    );
    let err = manager
        .skill_file("legacy", "no-such-skill", None, None, &cancel)
        .await
        .unwrap_err();
    assert!(err.contains("lists no skill no-such-skill"), "{err}");
    manager.shutdown(PATIENCE).await;
}

#[tokio::test]
async fn a_server_remembered_as_2025_11_25_that_refuses_initialize_now_is_probed_and_forgotten() {
    let project = Project::new();
    let modern = http_server(Protocol::Modern).await;
    let entry = http(modern.url());
    let memory = Arc::new(memory::ProtocolMemory::new(&project.path().join("data")));
    memory.record("upgraded", &entry, true);
    let servers = BTreeMap::from([("upgraded".to_owned(), entry.clone())]);
    let manager = McpManager::start(
        &servers,
        McpContext {
            memory: Some(memory.clone()),
            ..project.context()
        },
    )
    .await;
    let status = status(&manager, "upgraded");
    assert_eq!(status.state, ServerState::Connected, "{status:?}");
    assert_eq!(status.protocol_version.as_deref(), Some("2026-07-28"));
    assert!(!memory.spoke_initialize("upgraded", &entry));
    manager.shutdown(PATIENCE).await;
}

#[tokio::test]
async fn a_callers_own_session_left_idle_is_closed_and_opened_again_on_their_next_call() {
    let project = Project::new();
    let hermetic = http_server(Protocol::Both).await;
    let mut entry = http(hermetic.url());
    entry.oauth.per_caller = true;
    let servers = BTreeMap::from([("shared".to_owned(), entry)]);
    let manager = McpManager::start(
        &servers,
        McpContext {
            vault: Some(Arc::new(oauth::Vault::new(&project.path().join("data")))),
            ..project.context()
        },
    )
    .await;
    let alice = ToolContext {
        principal: Some("alice".to_owned()),
        ..project.tool_context()
    };
    let echo = find(&manager, "mcp__shared__echo");
    let said = echo.call(json!({"text": "hi"}), &alice).await;
    assert_eq!(said.text_content(), "hi");
    let server = manager.servers[0].clone();
    let session = server.caller("alice").expect("alice's own session");
    assert!(session.is_connected());

    // Used just now: kept.
    assert_eq!(server.close_idle_callers(std::time::Instant::now()), 0);
    // Idle past the limit: closed and forgotten.
    let later = std::time::Instant::now() + client::CALLER_IDLE + PATIENCE + Duration::from_secs(1);
    assert_eq!(server.close_idle_callers(later), 1);
    assert!(server.caller("alice").is_none());
    eventually("the idle session to end", || {
        let session = session.clone();
        async move { session.status().state == ServerState::Stopped }
    })
    .await;
    // Alice's next call opens a new session.
    let said = echo.call(json!({"text": "again"}), &alice).await;
    assert_eq!(said.text_content(), "again");
    let again = server.caller("alice").expect("a new session");
    assert!(!Arc::ptr_eq(&again, &session));
    manager.shutdown(PATIENCE).await;
}
