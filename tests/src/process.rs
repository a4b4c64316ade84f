//! Child processes for tests: spawned in their own process group, killed with it on drop.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, bail};
use rustix::process::{Pid, Signal, kill_process, kill_process_group};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A running child process; its whole process group is killed when this is dropped.
#[derive(Debug)]
pub struct ChildProcess {
    child: Child,
    name: String,
    /// What the process printed on stdout, line by line (the first [`MAX_KEPT_LINES`]).
    stdout: Arc<Mutex<Vec<String>>>,
}

/// Stdout lines kept per process; later lines are read and dropped.
const MAX_KEPT_LINES: usize = 10_000;

/// Builds a command whose process gets its own process group.
///
/// This is the only place the tests create processes.
#[allow(clippy::disallowed_methods)] // the one spawn helper of the test crate
pub fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(program);
    command
        .process_group(0)
        .kill_on_drop(true)
        .stdin(Stdio::null());
    command
}

impl ChildProcess {
    /// Spawns `command`, reads stdout until a line starting with `READY `, and
    /// returns the process with the rest of that line (an address, usually).
    ///
    /// Fails if the process exits or says nothing for `timeout`; stderr is
    /// passed through so a failing peer explains itself in the test output.
    pub async fn spawn_ready(
        name: &str,
        mut command: Command,
        timeout: Duration,
    ) -> anyhow::Result<(Self, String)> {
        command.stderr(Stdio::inherit());
        Self::spawn_until(name, command, "READY ", timeout).await
    }

    /// Like [`ChildProcess::spawn_ready`], for a process that says it is ready
    /// with a stdout line starting with `prefix`; returns the rest of that line,
    /// trimmed. stderr is left as `command` sets it. Every stdout line is kept
    /// (see [`ChildProcess::stdout_lines`]).
    pub async fn spawn_until(
        name: &str,
        mut command: Command,
        prefix: &str,
        timeout: Duration,
    ) -> anyhow::Result<(Self, String)> {
        command.stdout(Stdio::piped());
        let mut child = command
            .spawn()
            .with_context(|| format!("cannot start {name}"))?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let kept = Arc::new(Mutex::new(Vec::new()));
        let keep = {
            let kept = kept.clone();
            move |line: &str| {
                let mut kept = kept.lock().unwrap_or_else(PoisonError::into_inner);
                if kept.len() < MAX_KEPT_LINES {
                    kept.push(line.to_owned());
                }
            }
        };
        let ready = tokio::time::timeout(timeout, async {
            while let Some(line) = lines.next_line().await? {
                keep(&line);
                if let Some(rest) = line.strip_prefix(prefix) {
                    return Ok::<_, anyhow::Error>(Some(rest.trim().to_owned()));
                }
            }
            Ok(None)
        })
        .await;
        let process = Self {
            child,
            name: name.to_owned(),
            stdout: kept,
        };
        match ready {
            Ok(Ok(Some(address))) => {
                // Keep draining stdout so the child never blocks on a full pipe.
                tokio::spawn(async move {
                    while let Ok(Some(line)) = lines.next_line().await {
                        keep(&line);
                    }
                });
                Ok((process, address))
            }
            Ok(Ok(None)) => bail!("{name} exited before it was ready"),
            Ok(Err(e)) => Err(e.context(format!("reading the output of {name}"))),
            Err(_) => bail!("{name} was not ready within {timeout:?}"),
        }
    }

    /// The stdout lines read so far (all of them, for a process started with
    /// [`ChildProcess::spawn_until`] or [`ChildProcess::spawn_ready`]).
    pub fn stdout_lines(&self) -> Vec<String> {
        self.stdout
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Sends `signal` to the process itself (not to its group). Fails if the
    /// process has been waited for already.
    pub fn signal(&self, signal: Signal) -> anyhow::Result<()> {
        let pid = self
            .child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(Pid::from_raw)
            .with_context(|| format!("{} has exited already", self.name))?;
        kill_process(pid, signal)
            .with_context(|| format!("cannot send {signal:?} to {}", self.name))
    }

    /// Waits up to `timeout` for the process to exit, and returns its status.
    pub async fn wait(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        tokio::time::timeout(timeout, self.child.wait())
            .await
            .with_context(|| format!("{} did not exit within {timeout:?}", self.name))?
            .with_context(|| format!("cannot wait for {}", self.name))
    }

    /// The process id.
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// The name given at spawn.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        // Kill the whole group: the child and anything it started. (Not with the `kill`
        // program: procps-ng 4.0.2 reads `kill -KILL -15846` as `kill -KILL -1`, which kills
        // every process the user may signal.)
        if let Some(pid) = self
            .child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(Pid::from_raw)
        {
            let _ = kill_process_group(pid, Signal::KILL);
        }
        let _ = self.child.start_kill();
    }
}

/// The workspace root (the parent of this crate's folder).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}
