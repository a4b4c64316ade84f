//! The Python A2A SDK peers: its echo server and its client driver, from the test virtualenv.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::process::{ChildProcess, command, workspace_root};

/// The Python interpreter of the test peers: `MEW_TEST_PYTHON`, else the
/// workspace's `.venv-peers` (which the test script creates).
pub fn python() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("MEW_TEST_PYTHON") {
        return Ok(PathBuf::from(path));
    }
    let venv = workspace_root().join(".venv-peers/bin/python");
    if venv.exists() {
        return Ok(venv);
    }
    bail!(
        "the Python test peers are not installed: run `scripts/test` (it creates .venv-peers), \
         or set MEW_TEST_PYTHON to a Python with tests/peers/requirements.txt installed"
    )
}

fn peers_dir() -> PathBuf {
    workspace_root().join("tests/peers")
}

/// The Python SDK's own server, serving the echo agent on a free loopback port.
#[derive(Debug)]
pub struct PythonEchoServer {
    _process: ChildProcess,
    /// Where its card is published.
    pub base_url: String,
}

impl PythonEchoServer {
    /// Starts the server and waits until it accepts connections.
    pub async fn start() -> anyhow::Result<Self> {
        let mut cmd = command(python()?);
        cmd.arg(peers_dir().join("echo_server.py"))
            .args(["--host", "127.0.0.1", "--port", "0"]);
        let (process, base_url) =
            ChildProcess::spawn_ready("python echo server", cmd, Duration::from_secs(60)).await?;
        Ok(Self {
            _process: process,
            base_url,
        })
    }
}

/// What the Python SDK client printed: one JSON document per line.
#[derive(Debug)]
pub struct DriverOutput {
    /// The exit code.
    pub code: i32,
    /// Each stdout line, parsed.
    pub lines: Vec<serde_json::Value>,
    /// stderr, for error messages.
    pub stderr: String,
}

/// Runs the Python SDK client against `base_url` over `binding` (`jsonrpc` or `rest`).
pub async fn run_driver(
    base_url: &str,
    binding: &str,
    args: &[&str],
) -> anyhow::Result<DriverOutput> {
    run_driver_with(base_url, binding, &[], args).await
}

/// [`run_driver`] with more of the driver's options (`options`, before the scenario).
pub async fn run_driver_with(
    base_url: &str,
    binding: &str,
    options: &[&str],
    args: &[&str],
) -> anyhow::Result<DriverOutput> {
    let mut cmd = command(python()?);
    cmd.arg(peers_dir().join("client_driver.py"))
        .args(["--url", base_url, "--binding", binding])
        .args(options)
        .args(args);
    let output = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .context("the Python client driver did not finish within 120 s")?
        .context("cannot run the Python client driver")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines = stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l).with_context(|| format!("driver printed a non-JSON line: {l}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(DriverOutput {
        code: output.status.code().unwrap_or(-1),
        lines,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}
