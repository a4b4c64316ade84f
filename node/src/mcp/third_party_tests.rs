//! The MCP client against real third-party servers, installed by `scripts/install-peers` at
//! pinned versions: `@modelcontextprotocol/server-everything` (npm) over stdio and over
//! Streamable HTTP, and `tests/peers/mcp_server.py` (the `mcp` package from PyPI) over both,
//! at 2026-07-28 and (with `--legacy`) through `initialize`. `tests/peers/NOTES.md` says what
//! each server offers.
//!
//! Per server: the tools listed with their names and categories, a call with arguments, every
//! content kind the server returns, an error result, a call that times out, and a server that
//! dies mid-session (a stdio server is restarted by the client; an HTTP server is restarted on
//! the same port here and the client opens a new session).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use mew_tests::process::{ChildProcess, command, workspace_root};
use rustix::process::{Pid, Signal, kill_process};
use serde_json::{Value, json};

use crate::config::mcp::{McpServerConfig, McpTransport};
use crate::conversation::ResultPart;
use crate::mcp::{McpContext, McpManager, ServerState, ServerStatus};
use crate::tools::test_support::context;
use crate::tools::{Category, Tool, ToolContext, ToolOutput};

/// Limits waits that should end long before: a hung client fails the test instead of hanging it.
const GUARD: Duration = Duration::from_secs(120);
/// The call timeout of servers that are not meant to time out.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// The call timeout of the timeout tests (their slow calls last a minute).
const SHORT_CALL_TIMEOUT: Duration = Duration::from_secs(3);

// ---------------------------------------------------------------------------------------------
// The installed peers.

fn peers_dir() -> PathBuf {
    workspace_root().join("tests/peers")
}

/// server-everything's launcher, or a failure that says how to install it.
fn everything_bin() -> PathBuf {
    let bin = peers_dir().join("node_modules/.bin/mcp-server-everything");
    assert!(
        bin.exists(),
        "the npm MCP test server is not installed ({} is missing): run scripts/install-peers",
        bin.display()
    );
    bin
}

/// The test peers' Python with the `mcp` package, or a failure that says how to install it.
async fn python() -> PathBuf {
    let python = mew_tests::python::python().unwrap_or_else(|err| {
        panic!("{err:#}\nthe Python MCP test server is not installed: run scripts/install-peers")
    });
    let status = command(&python)
        .args(["-c", "import mcp.server.mcpserver"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
    assert!(
        matches!(status, Ok(status) if status.success()),
        "{} cannot import the `mcp` package: run scripts/install-peers",
        python.display()
    );
    python
}

fn python_server_script() -> String {
    peers_dir().join("mcp_server.py").display().to_string()
}

/// A free loopback port (for a server that cannot report the one it picked).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// server-everything serving Streamable HTTP on some free port; returns the process, the
/// endpoint and the port. (The port is picked before the server binds it, so another process
/// may take it first: then another port is tried.)
async fn start_everything_http_anywhere() -> (ChildProcess, String, u16) {
    let mut last = None;
    for _ in 0..5 {
        let port = free_port();
        match try_start_everything_http(port).await {
            Ok((process, url)) => return (process, url, port),
            Err(err) => last = Some(err),
        }
    }
    panic!("cannot start server-everything over HTTP: {last:?}")
}

/// server-everything serving Streamable HTTP on `port`; returns the process and the endpoint.
async fn start_everything_http(port: u16) -> (ChildProcess, String) {
    try_start_everything_http(port).await.unwrap()
}

async fn try_start_everything_http(port: u16) -> anyhow::Result<(ChildProcess, String)> {
    // It says it listens on stderr; the shell passes stderr to stdout, where the helper reads.
    let mut cmd = command("sh");
    cmd.args(["-c", "exec \"$0\" streamableHttp 2>&1"])
        .arg(everything_bin())
        .env("PORT", port.to_string());
    let (process, said) = ChildProcess::spawn_until(
        "server-everything (http)",
        cmd,
        "MCP Streamable HTTP Server listening on port ",
        GUARD,
    )
    .await?;
    anyhow::ensure!(
        said == port.to_string(),
        "it listens on port {said}, not {port}"
    );
    Ok((process, format!("http://127.0.0.1:{port}/mcp")))
}

/// `mcp_server.py` serving Streamable HTTP on `port` (0: a free one), with `--legacy` when
/// `legacy`; returns the process, the endpoint and the port.
async fn start_python_http(port: u16, legacy: bool) -> (ChildProcess, String, u16) {
    let mut cmd = command(python().await);
    cmd.arg(python_server_script())
        .args(["--http", &port.to_string()]);
    if legacy {
        cmd.arg("--legacy");
    }
    let (process, url) = ChildProcess::spawn_ready("mcp_server.py (http)", cmd, GUARD)
        .await
        .unwrap();
    let port = url
        .strip_prefix("http://127.0.0.1:")
        .and_then(|rest| rest.strip_suffix("/mcp"))
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("unexpected READY line: {url}"));
    (process, url, port)
}

/// Kills `process` (unless it exited by itself) and waits until it is gone, so that its port
/// is free again.
async fn stop(mut process: ChildProcess) {
    let _ = process.signal(Signal::KILL);
    process.wait(GUARD).await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// The client under test.

fn stdio(program: impl Into<String>, args: &[&str]) -> McpTransport {
    McpTransport::Stdio {
        command: program.into(),
        args: args.iter().map(|arg| (*arg).to_owned()).collect(),
        env: BTreeMap::from([("MEW_MCP_TEST_VAR".to_owned(), "configured".to_owned())]),
        cwd: None,
    }
}

fn http(url: &str) -> McpTransport {
    McpTransport::Http {
        url: url.to_owned(),
        headers: BTreeMap::new(),
    }
}

fn server_config(transport: McpTransport, call_timeout: Duration) -> McpServerConfig {
    McpServerConfig {
        transport,
        connect_timeout: Duration::from_secs(60),
        call_timeout,
        allow_tools: Vec::new(),
        deny_tools: Vec::new(),
        max_restarts: 5,
        protocol: Default::default(),
        sampling: crate::config::mcp::McpSampling::Deny,
        elicitation: Default::default(),
        oauth: Default::default(),
        origin: "third_party_tests".to_owned(),
        undefined_vars: Vec::new(),
        warnings: Vec::new(),
        as_written: None,
    }
}

/// One server behind a manager, with a tool context rooted in a temporary directory.
struct Client {
    name: &'static str,
    /// `stdio` or `http`.
    transport: &'static str,
    manager: Arc<McpManager>,
    ctx: ToolContext,
    dir: tempfile::TempDir,
}

impl Client {
    /// Starts a manager with the one server `name` and waits until its tools are listed.
    async fn start(name: &'static str, server: McpServerConfig) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let transport = server.transport.kind();
        let servers = BTreeMap::from([(name.to_owned(), server)]);
        let manager = McpManager::start(
            &servers,
            McpContext {
                env: ctx.env.clone(),
                project_dir: dir.path().to_path_buf(),
                ledger: None,
                vault: None,
                sign_ins: None,
                memory: None,
            },
        )
        .await;
        let client = Self {
            name,
            transport,
            manager,
            ctx,
            dir,
        };
        let status = client.status();
        assert_eq!(
            status.state,
            ServerState::Connected,
            "cannot connect to {name}: {status:?}"
        );
        client
    }

    /// The tools of this client's server, by their names on the server.
    fn tools(&self) -> BTreeMap<String, Arc<dyn Tool>> {
        let prefix = format!("mcp__{}__", self.name);
        self.manager
            .tools()
            .into_iter()
            .map(|tool| {
                let name = tool.name().to_owned();
                let short = name
                    .strip_prefix(&prefix)
                    .unwrap_or_else(|| panic!("tool {name} lacks the prefix {prefix}"))
                    .to_owned();
                (short, tool)
            })
            .collect()
    }

    /// Calls the server's tool `tool` (its name on the server) with `input`.
    async fn call(&self, tool: &str, input: Value) -> ToolOutput {
        let full = format!("mcp__{}__{tool}", self.name);
        let found = self
            .manager
            .tools()
            .into_iter()
            .find(|t| t.name() == full)
            .unwrap_or_else(|| panic!("no tool {full}"));
        tokio::time::timeout(GUARD, found.call(input, &self.ctx))
            .await
            .unwrap_or_else(|_| panic!("{full} did not answer within {GUARD:?}"))
    }

    /// Calls `tool` and expects a successful answer.
    async fn call_ok(&self, tool: &str, input: Value) -> ToolOutput {
        let out = self.call(tool, input.clone()).await;
        assert!(
            !out.is_error,
            "{tool} {input} failed: {}",
            out.text_content()
        );
        out
    }

    /// Checks the status line of the one server: connected at `protocol`, with `tools` tools.
    fn assert_connected(&self, protocol: &str, tools: usize) {
        let status = self.status();
        assert_eq!(status.name, self.name);
        assert_eq!(status.transport, self.transport);
        assert_eq!(status.state, ServerState::Connected, "{status:?}");
        assert_eq!(status.tools, tools, "{status:?}");
        assert_eq!(
            status.protocol_version.as_deref(),
            Some(protocol),
            "{status:?}"
        );
        assert!(status.skipped_tools.is_empty(), "{status:?}");
    }

    /// The status line of the one server.
    fn status(&self) -> ServerStatus {
        let mut status = self.manager.status();
        assert_eq!(status.len(), 1, "{status:?}");
        status.remove(0)
    }

    /// Waits until the server is in `state`; returns its status then.
    async fn wait_for_state(&self, state: ServerState) -> ServerStatus {
        tokio::time::timeout(GUARD, async {
            loop {
                let status = self.status();
                if status.state == state {
                    return status;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{} never became {state:?}: {:?}", self.name, self.status()))
    }

    async fn shutdown(self) {
        tokio::time::timeout(GUARD, self.manager.shutdown(Duration::from_secs(5)))
            .await
            .unwrap();
    }
}

/// The images of an answer: (media type, decoded bytes).
fn images(out: &ToolOutput) -> Vec<(String, Vec<u8>)> {
    out.content
        .iter()
        .filter_map(|part| match part {
            ResultPart::Image { media_type, data } => Some((
                media_type.clone(),
                base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .unwrap(),
            )),
            ResultPart::Text { .. } => None,
        })
        .collect()
}

/// The text parts of an answer.
fn texts(out: &ToolOutput) -> Vec<&str> {
    out.content
        .iter()
        .filter_map(|part| match part {
            ResultPart::Text { text } => Some(text.as_str()),
            ResultPart::Image { .. } => None,
        })
        .collect()
}

const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";

fn assert_contains(out: &ToolOutput, needles: &[&str]) {
    let text = out.text_content();
    for needle in needles {
        assert!(text.contains(needle), "{needle:?} not in {text:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// server-everything: shared checks.

/// Every tool server-everything always lists, with the category its `readOnlyHint` implies.
const EVERYTHING_TOOLS: &[(&str, Category)] = &[
    ("echo", Category::Read),
    ("get-annotated-message", Category::Read),
    ("get-env", Category::Read),
    ("get-resource-links", Category::Read),
    ("get-resource-reference", Category::Read),
    ("get-structured-content", Category::Read),
    ("get-sum", Category::Read),
    ("get-tiny-image", Category::Read),
    ("gzip-file-as-resource", Category::Exec),
    ("toggle-simulated-logging", Category::Exec),
    ("toggle-subscriber-updates", Category::Exec),
    ("trigger-long-running-operation", Category::Read),
];

async fn everything_lists_tools(client: &Client) {
    let tools = client.tools();
    for (name, category) in EVERYTHING_TOOLS {
        let tool = tools
            .get(*name)
            .unwrap_or_else(|| panic!("{name} not listed; listed: {:?}", tools.keys()));
        assert_eq!(tool.category(), *category, "category of {name}");
        assert_eq!(tool.input_schema()["type"], "object", "schema of {name}");
    }
    // Registered after initialize; when listed, it is not read-only.
    if let Some(tool) = tools.get("simulate-research-query") {
        assert_eq!(tool.category(), Category::Exec);
    }
    let echo = &tools["echo"];
    assert!(
        echo.description().contains("Echo"),
        "{}",
        echo.description()
    );
    assert_eq!(echo.input_schema()["required"], json!(["message"]));

    // It does not know `server/discover`: the client falls back to `initialize`.
    client.assert_connected("2025-11-25", tools.len());
}

async fn everything_calls_and_content(client: &Client) {
    // Arguments.
    let out = client
        .call_ok("echo", json!({"message": "hello mew"}))
        .await;
    assert_eq!(out.text_content(), "Echo: hello mew");
    let out = client.call_ok("get-sum", json!({"a": 2, "b": 40})).await;
    assert_contains(&out, &["42"]);

    // Image: a real PNG between two texts.
    let out = client.call_ok("get-tiny-image", json!({})).await;
    assert!(
        matches!(
            out.content.as_slice(),
            [
                ResultPart::Text { .. },
                ResultPart::Image { .. },
                ResultPart::Text { .. }
            ]
        ),
        "{out:?}"
    );
    let images = images(&out);
    assert_eq!(images[0].0, "image/png");
    assert!(images[0].1.starts_with(PNG_MAGIC));

    // Embedded resources: the text one with its body, the blob one by reference.
    let out = client
        .call_ok(
            "get-resource-reference",
            json!({"resourceType": "Text", "resourceId": 1}),
        )
        .await;
    let shown = texts(&out);
    assert_eq!(shown.len(), 3, "{out:?}");
    assert!(
        shown[1].starts_with(
            "[resource demo://resource/dynamic/text/1 (text/plain)]\nResource 1: This is a plaintext resource"
        ),
        "{out:?}"
    );
    let out = client
        .call_ok(
            "get-resource-reference",
            json!({"resourceType": "Blob", "resourceId": 2}),
        )
        .await;
    let shown = texts(&out);
    assert_eq!(shown.len(), 3, "{out:?}");
    assert!(
        shown[1].starts_with("[resource demo://resource/dynamic/blob/2 (text/plain): binary, ")
            && shown[1].ends_with(" bytes, not shown]"),
        "{out:?}"
    );

    // Resource links.
    let out = client
        .call_ok("get-resource-links", json!({"count": 2}))
        .await;
    let shown = texts(&out);
    assert_eq!(shown.len(), 3, "{out:?}");
    assert!(
        shown[1].starts_with(
            "[resource link: Blob Resource 1 demo://resource/dynamic/blob/1 (text/plain): "
        ),
        "{out:?}"
    );
    assert!(
        shown[2].starts_with(
            "[resource link: Text Resource 2 demo://resource/dynamic/text/2 (text/plain): "
        ),
        "{out:?}"
    );

    // Structured content: the server also sends it as JSON text, so it is shown once.
    let out = client
        .call_ok("get-structured-content", json!({"location": "Chicago"}))
        .await;
    let shown = texts(&out);
    assert_eq!(shown.len(), 1, "{out:?}");
    let weather: Value = serde_json::from_str(shown[0]).unwrap();
    for field in ["temperature", "conditions", "humidity"] {
        assert!(weather.get(field).is_some(), "{field} not in {weather}");
    }

    // An annotated message with an image: the text, then the image.
    let out = client
        .call_ok(
            "get-annotated-message",
            json!({"messageType": "success", "includeImage": true}),
        )
        .await;
    assert!(
        matches!(
            out.content.as_slice(),
            [ResultPart::Text { .. }, ResultPart::Image { .. }]
        ),
        "{out:?}"
    );

    // An error result: arguments the server's schema rejects.
    let out = client.call("get-sum", json!({"a": "two"})).await;
    assert!(out.is_error, "{out:?}");
    assert_contains(&out, &["Invalid arguments for tool get-sum"]);

    // Still connected, nothing restarted.
    assert_eq!(client.status().state, ServerState::Connected);
    assert_eq!(client.status().restarts, 0);
}

async fn everything_times_out(client: &Client) {
    let out = client
        .call(
            "trigger-long-running-operation",
            json!({"duration": 60, "steps": 1}),
        )
        .await;
    assert!(out.is_error, "{out:?}");
    assert_contains(&out, &["timed out"]);
    // The server is still usable.
    let out = client.call_ok("echo", json!({"message": "after"})).await;
    assert_eq!(out.text_content(), "Echo: after");
    assert_eq!(client.status().restarts, 0);
}

// ---------------------------------------------------------------------------------------------
// server-everything over stdio.

/// server-everything over stdio, started through a shell that writes its process id to `pid_file`.
fn everything_stdio(pid_file: &Path, call_timeout: Duration) -> McpServerConfig {
    let bin = everything_bin().display().to_string();
    let pid_file = pid_file.display().to_string();
    server_config(
        stdio(
            "sh",
            &["-c", "echo $$ > \"$0\"; exec \"$1\" stdio", &pid_file, &bin],
        ),
        call_timeout,
    )
}

fn read_pid(pid_file: &Path) -> i32 {
    std::fs::read_to_string(pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn everything_stdio_tools_content_and_errors() {
    let pids = tempfile::tempdir().unwrap();
    let client = Client::start(
        "everything",
        everything_stdio(&pids.path().join("pid"), CALL_TIMEOUT),
    )
    .await;
    everything_lists_tools(&client).await;
    everything_calls_and_content(&client).await;

    // The server gets its configured variables, not the node's other ones.
    let out = client.call_ok("get-env", json!({})).await;
    let env: Value = serde_json::from_str(&out.text_content()).unwrap();
    assert_eq!(env["MEW_MCP_TEST_VAR"], "configured", "{env}");
    assert!(env.get("MEW_TEST_SECRET").is_none(), "{env}");
    client.shutdown().await;
}

#[tokio::test]
async fn everything_stdio_call_times_out() {
    let pids = tempfile::tempdir().unwrap();
    let client = Client::start(
        "everything",
        everything_stdio(&pids.path().join("pid"), SHORT_CALL_TIMEOUT),
    )
    .await;
    everything_times_out(&client).await;
    client.shutdown().await;
}

#[tokio::test]
async fn everything_stdio_killed_server_is_restarted() {
    let pids = tempfile::tempdir().unwrap();
    let pid_file = pids.path().join("pid");
    let client = Client::start("everything", everything_stdio(&pid_file, CALL_TIMEOUT)).await;
    client.call_ok("echo", json!({"message": "one"})).await;
    let first = read_pid(&pid_file);
    let tools = client.status().tools;

    kill_process(Pid::from_raw(first).unwrap(), Signal::KILL).unwrap();
    // Once the client has seen it die (a multi-threaded program shows as a zombie in /proc
    // before it can be waited for), the next call starts it again.
    let died = client.wait_for_state(ServerState::Restarting).await;
    assert!(
        died.last_error
            .as_deref()
            .is_some_and(|e| e.contains("signal: 9")),
        "{died:?}"
    );
    assert_eq!(
        died.tools, tools,
        "its tools stay, so that a call can start it again"
    );

    let out = client.call_ok("echo", json!({"message": "two"})).await;
    assert_eq!(out.text_content(), "Echo: two");
    let second = read_pid(&pid_file);
    assert_ne!(first, second, "the server was not restarted");
    let restarted = client.status();
    assert_eq!(restarted.state, ServerState::Connected, "{restarted:?}");
    assert_eq!(restarted.restarts, 1, "{restarted:?}");
    client.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// server-everything over Streamable HTTP.

#[tokio::test]
async fn everything_http_tools_content_and_errors() {
    let (_server, url, _) = start_everything_http_anywhere().await;
    let client = Client::start("everything", server_config(http(&url), CALL_TIMEOUT)).await;
    everything_lists_tools(&client).await;
    everything_calls_and_content(&client).await;
    client.shutdown().await;
}

#[tokio::test]
async fn everything_http_call_times_out() {
    let (_server, url, _) = start_everything_http_anywhere().await;
    let client = Client::start("everything", server_config(http(&url), SHORT_CALL_TIMEOUT)).await;
    everything_times_out(&client).await;
    client.shutdown().await;
}

#[tokio::test]
async fn everything_http_server_restarted_on_the_same_port() {
    let (server, url, port) = start_everything_http_anywhere().await;
    let client = Client::start("everything", server_config(http(&url), CALL_TIMEOUT)).await;
    client.call_ok("echo", json!({"message": "one"})).await;

    // Restarted between two calls: the new process knows nothing of the old session (it
    // answers 400 to its id), so the client needs a new one.
    stop(server).await;
    let (server, _) = start_everything_http(port).await;
    let out = client.call_ok("echo", json!({"message": "two"})).await;
    assert_eq!(out.text_content(), "Echo: two");

    // Down when a call comes (an error result), then back.
    stop(server).await;
    let out = client.call("echo", json!({"message": "down"})).await;
    assert!(out.is_error, "a call to a dead server succeeded: {out:?}");
    let (_server, _) = start_everything_http(port).await;
    let out = client.call_ok("echo", json!({"message": "three"})).await;
    assert_eq!(out.text_content(), "Echo: three");
    client.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// mcp_server.py: shared checks.

const PYTHON_TOOLS: &[(&str, Category)] = &[
    ("audio", Category::Exec),
    ("crash", Category::Exec),
    ("echo", Category::Read),
    ("fail", Category::Exec),
    ("image", Category::Exec),
    ("pid", Category::Exec),
    ("resource", Category::Exec),
    ("resource_link", Category::Exec),
    ("slow", Category::Exec),
    ("structured", Category::Exec),
];

/// The protocol versions `mcp_server.py` ends up speaking: 2026-07-28 by default, the newest
/// `initialize` version with `--legacy`.
fn python_protocol(legacy: bool) -> &'static str {
    if legacy { "2025-11-25" } else { "2026-07-28" }
}

async fn python_lists_tools(client: &Client, legacy: bool) {
    let tools = client.tools();
    let listed: Vec<(&str, Category)> = tools
        .iter()
        .map(|(name, tool)| (name.as_str(), tool.category()))
        .collect();
    assert_eq!(listed, PYTHON_TOOLS);
    let echo = &tools["echo"];
    assert_eq!(echo.input_schema()["required"], json!(["text"]));
    assert_eq!(
        echo.input_schema()["properties"]["times"]["type"],
        "integer"
    );
    client.assert_connected(python_protocol(legacy), PYTHON_TOOLS.len());
}

async fn python_calls_and_content(client: &Client) {
    // Arguments.
    let out = client
        .call_ok("echo", json!({"text": "mew", "times": 3}))
        .await;
    assert_eq!(texts(&out), ["mew mew mew"]);

    // Image: the text, then the PNG as an image part.
    let out = client.call_ok("image", json!({})).await;
    assert_eq!(texts(&out), ["a red pixel:"]);
    let images = images(&out);
    assert_eq!(images.len(), 1, "{out:?}");
    assert_eq!(images[0].0, "image/png");
    assert!(images[0].1.starts_with(PNG_MAGIC));
    assert!(
        matches!(out.content[1], ResultPart::Image { .. }),
        "{out:?}"
    );

    // Audio: described in text (the clip is 124 bytes), never passed on as an image.
    let out = client.call_ok("audio", json!({})).await;
    assert_eq!(
        texts(&out),
        [
            "ten milliseconds of silence:",
            "[audio: audio/wav, 124 bytes, not shown]"
        ]
    );
    assert_eq!(out.content.len(), 2, "{out:?}");

    // Embedded resources: the text one with its body, the blob one by reference (6 bytes).
    let out = client.call_ok("resource", json!({})).await;
    assert_eq!(
        texts(&out),
        [
            "two embedded resources:",
            "[resource mew-test://notes/readme.txt (text/plain)]\nembedded text body",
            "[resource mew-test://blobs/data.bin (application/octet-stream): binary, 6 bytes, not shown]",
        ]
    );

    // A resource link.
    let out = client.call_ok("resource_link", json!({})).await;
    assert_eq!(
        texts(&out),
        [
            "one link:",
            "[resource link: report.pdf mew-test://files/report.pdf (application/pdf): the quarterly report]",
        ]
    );

    // Structured content: the server also sends it as JSON text, so it is shown once.
    let out = client.call_ok("structured", json!({"city": "Oslo"})).await;
    let shown = texts(&out);
    assert_eq!(shown.len(), 1, "{out:?}");
    assert_eq!(
        serde_json::from_str::<Value>(shown[0]).unwrap(),
        json!({"city": "Oslo", "temperature": 21, "conditions": "sunny"})
    );

    // An error result.
    let out = client.call("fail", json!({"reason": "because"})).await;
    assert!(out.is_error, "{out:?}");
    assert_contains(&out, &["failed on purpose: because"]);

    // Arguments the server rejects: an error result naming the field.
    let out = client.call("echo", json!({"times": "x"})).await;
    assert!(out.is_error, "{out:?}");
    assert_contains(&out, &["text"]);

    // Still connected, nothing restarted.
    assert_eq!(client.status().state, ServerState::Connected);
    assert_eq!(client.status().restarts, 0);
}

async fn python_times_out(client: &Client) {
    let marker = client.dir.path().join("cancelled");
    let out = client
        .call(
            "slow",
            json!({"seconds": 60, "marker": marker.display().to_string()}),
        )
        .await;
    assert!(out.is_error, "{out:?}");
    assert_contains(&out, &["timed out"]);
    // The server was told to cancel the call (`notifications/cancelled`), and did.
    tokio::time::timeout(GUARD, async {
        while std::fs::read_to_string(&marker).unwrap_or_default() != "cancelled" {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the server never saw the call cancelled");
    // The server is still usable.
    let out = client.call_ok("echo", json!({"text": "after"})).await;
    assert_eq!(out.text_content(), "after");
    assert_eq!(client.status().restarts, 0);
}

// ---------------------------------------------------------------------------------------------
// mcp_server.py over stdio.

/// `mcp_server.py` over stdio; `legacy`: with `--legacy`.
async fn python_stdio(call_timeout: Duration, legacy: bool) -> McpServerConfig {
    let python = python().await.display().to_string();
    let script = python_server_script();
    let args: &[&str] = if legacy {
        &[&script, "--legacy"]
    } else {
        &[&script]
    };
    server_config(stdio(python, args), call_timeout)
}

#[tokio::test]
async fn python_stdio_tools_content_and_errors() {
    let client = Client::start("python", python_stdio(CALL_TIMEOUT, false).await).await;
    python_lists_tools(&client, false).await;
    python_calls_and_content(&client).await;
    client.shutdown().await;
}

#[tokio::test]
async fn python_stdio_legacy_tools_content_and_errors() {
    let client = Client::start("python", python_stdio(CALL_TIMEOUT, true).await).await;
    python_lists_tools(&client, true).await;
    python_calls_and_content(&client).await;
    client.shutdown().await;
}

#[tokio::test]
async fn python_stdio_call_times_out() {
    let client = Client::start("python", python_stdio(SHORT_CALL_TIMEOUT, false).await).await;
    python_times_out(&client).await;
    client.shutdown().await;
}

#[tokio::test]
async fn python_stdio_crashed_server_is_restarted() {
    let client = Client::start("python", python_stdio(CALL_TIMEOUT, false).await).await;
    let first = client.call_ok("pid", json!({})).await.text_content();

    // The server exits in the middle of the call: an error result that says how it ended.
    let out = client.call("crash", json!({})).await;
    assert!(out.is_error, "{out:?}");
    assert_contains(&out, &["exit status: 3"]);

    let out = client.call_ok("echo", json!({"text": "back"})).await;
    assert_eq!(out.text_content(), "back");
    let second = client.call_ok("pid", json!({})).await.text_content();
    assert_ne!(first, second, "the server was not restarted");
    let restarted = client.status();
    assert_eq!(restarted.state, ServerState::Connected, "{restarted:?}");
    assert_eq!(restarted.restarts, 1, "{restarted:?}");
    client.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// mcp_server.py over Streamable HTTP.

#[tokio::test]
async fn python_http_tools_content_and_errors() {
    let (_server, url, _) = start_python_http(0, false).await;
    let client = Client::start("python", server_config(http(&url), CALL_TIMEOUT)).await;
    python_lists_tools(&client, false).await;
    python_calls_and_content(&client).await;
    client.shutdown().await;
}

#[tokio::test]
async fn python_http_call_times_out() {
    let (_server, url, _) = start_python_http(0, false).await;
    let client = Client::start("python", server_config(http(&url), SHORT_CALL_TIMEOUT)).await;
    python_times_out(&client).await;
    client.shutdown().await;
}

/// The server dies in the middle of a call and comes back on the same port; later it is down
/// when a call comes, and comes back again.
async fn python_http_restarts(legacy: bool) {
    let (server, url, port) = start_python_http(0, legacy).await;
    let client = Client::start("python", server_config(http(&url), CALL_TIMEOUT)).await;
    python_lists_tools(&client, legacy).await;
    let first = client.call_ok("pid", json!({})).await.text_content();

    let out = client.call("crash", json!({})).await;
    assert!(out.is_error, "{out:?}");
    stop(server).await;
    let (server, again, _) = start_python_http(port, legacy).await;
    assert_eq!(again, url);
    let out = client.call_ok("echo", json!({"text": "back"})).await;
    assert_eq!(out.text_content(), "back");
    let second = client.call_ok("pid", json!({})).await.text_content();
    assert_ne!(first, second);

    stop(server).await;
    let out = client.call("echo", json!({"text": "down"})).await;
    assert!(out.is_error, "a call to a dead server succeeded: {out:?}");
    let (_server, _, _) = start_python_http(port, legacy).await;
    let out = client.call_ok("echo", json!({"text": "again"})).await;
    assert_eq!(out.text_content(), "again");
    assert_eq!(client.status().state, ServerState::Connected);
    client.shutdown().await;
}

/// With `initialize` the new process knows nothing of the old session (it answers 404 to its
/// id): the client opens a new one.
#[tokio::test]
async fn python_http_legacy_server_restarted_on_the_same_port() {
    python_http_restarts(true).await;
}

/// On 2026-07-28 there is no session: the requests simply reach the new process.
#[tokio::test]
async fn python_http_server_restarted_on_the_same_port() {
    python_http_restarts(false).await;
}
