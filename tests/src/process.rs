//! Child processes for tests: spawned in their own process group, killed with it on drop.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A running child process; its whole process group is killed when this is dropped.
#[derive(Debug)]
pub struct ChildProcess {
    child: Child,
    name: String,
}

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
        command.stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = command
            .spawn()
            .with_context(|| format!("cannot start {name}"))?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(timeout, async {
            while let Some(line) = lines.next_line().await? {
                if let Some(rest) = line.strip_prefix("READY ") {
                    return Ok::<_, anyhow::Error>(Some(rest.trim().to_owned()));
                }
            }
            Ok(None)
        })
        .await;
        let process = Self {
            child,
            name: name.to_owned(),
        };
        match ready {
            Ok(Ok(Some(address))) => {
                // Keep draining stdout so the child never blocks on a full pipe.
                tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                Ok((process, address))
            }
            Ok(Ok(None)) => bail!("{name} exited before it was ready"),
            Ok(Err(e)) => Err(e.context(format!("reading the output of {name}"))),
            Err(_) => bail!("{name} was not ready within {timeout:?}"),
        }
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
        if let Some(pid) = self.child.id() {
            // Kill the whole group: the child and anything it started.
            let _ = kill_command(pid).status();
        }
        let _ = self.child.start_kill();
    }
}

#[allow(clippy::disallowed_methods)] // part of the spawn helper: kills a process group
fn kill_command(pid: u32) -> std::process::Command {
    let mut command = std::process::Command::new("kill");
    command
        .arg("-KILL")
        .arg(format!("-{pid}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

/// The workspace root (the parent of this crate's folder).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}
