//! The node's one spawn helper: a child in its own process group, with an allowlisted environment.
//!
//! MCP servers, hooks and command roles all start here. A child never inherits the node's
//! environment: [`command`] clears it and [`pass_env`] copies only named variables from a snapshot
//! the caller holds (the node reads its environment once, at start-up). Each child leads a new
//! process group, so [`ProcessGroup`] can signal it together with everything it started.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use rustix::io::Errno;
use rustix::process::{Pid, Signal, kill_process_group};
use tokio::process::{Child, Command};

/// Variables a child gets by default, when the node's environment has them.
#[cfg_attr(not(test), allow(dead_code))] // wired by the task manager
pub(crate) const BASE_ENV: &[&str] = &["PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TERM", "USER"];

/// A command for `program` with `args`: empty environment, stdin, stdout and stderr connected to
/// nothing (callers pipe what they use), its own process group.
///
/// Spawn it with [`ProcessGroup::spawn`], whose guard kills the whole group. A relative
/// `program` with a slash is resolved by the OS; callers that set a working directory should
/// pass an absolute path.
#[cfg_attr(not(test), allow(dead_code))] // wired by the task manager
pub(crate) fn command<I, S>(program: impl AsRef<OsStr>, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    // The one place the node builds a process: every child gets its own group and a clean
    // environment here, and is spawned through `ProcessGroup`.
    #[allow(clippy::disallowed_methods)]
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true);
    command
}

/// Copies the variables `names` from `snapshot` into `command`'s environment. Names missing
/// from the snapshot stay unset. Pass [`BASE_ENV`] followed by the caller's own allowlist.
#[cfg_attr(not(test), allow(dead_code))] // wired by the task manager
pub(crate) fn pass_env<'a>(
    command: &mut Command,
    snapshot: &HashMap<String, String>,
    names: impl IntoIterator<Item = &'a str>,
) {
    for name in names {
        if let Some(value) = snapshot.get(name) {
            command.env(name, value);
        }
    }
}

/// A running child that leads its own process group. Dropping it, or calling
/// [`kill`](Self::kill), sends SIGKILL to the whole group: the child and whatever it started
/// that stayed in the group.
#[cfg_attr(not(test), allow(dead_code))] // wired by the task manager
#[derive(Debug)]
pub(crate) struct ProcessGroup {
    child: Child,
    /// The child's pid, which is also the group id.
    leader: Pid,
    /// False once the OS said the group is gone: no later signal may reach a reused id.
    alive: bool,
}

#[cfg_attr(not(test), allow(dead_code))] // wired by the task manager
impl ProcessGroup {
    /// Spawns `command` (built by [`command`]) as the leader of a new process group.
    pub(crate) fn spawn(command: &mut Command) -> io::Result<Self> {
        let mut child = command.process_group(0).kill_on_drop(true).spawn()?;
        let Some(leader) = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(Pid::from_raw)
        else {
            // Only a child that was already reaped has no pid, which cannot happen here.
            let _ = child.start_kill();
            return Err(io::Error::other("the spawned child has no process id"));
        };
        Ok(Self {
            child,
            leader,
            alive: true,
        })
    }

    /// The child's pid, which is also the group id.
    pub(crate) fn id(&self) -> u32 {
        self.leader.as_raw_nonzero().get().unsigned_abs()
    }

    /// False once a signal found the group gone (the child and all it started have exited).
    pub(crate) fn is_alive(&self) -> bool {
        self.alive
    }

    /// The child, to take its stdin, stdout and stderr.
    pub(crate) fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Waits for the group's leader to exit. Others in the group may still run.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, like [`Child::wait`].
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Sends SIGKILL to the whole group. A group that is already gone is not an error.
    pub(crate) fn kill(&mut self) {
        self.signal(Signal::KILL);
    }

    /// Sends SIGTERM to the whole group, waits up to `grace` for the leader to exit, then sends
    /// SIGKILL to whatever is left of the group and returns the leader's exit status.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped early, the group may have had SIGTERM only (dropping the
    /// `ProcessGroup` itself still kills it).
    pub(crate) async fn terminate(&mut self, grace: Duration) -> io::Result<ExitStatus> {
        self.signal(Signal::TERM);
        let early = tokio::time::timeout(grace, self.child.wait()).await;
        self.signal(Signal::KILL);
        match early {
            Ok(status) => status,
            Err(_elapsed) => self.child.wait().await,
        }
    }

    /// Signals the group; forgets the group once the OS says it is gone, so a later signal can
    /// never reach a new group that reused the id.
    fn signal(&mut self, signal: Signal) {
        if !self.alive {
            return;
        }
        match kill_process_group(self.leader, signal) {
            Ok(()) => {}
            Err(Errno::SRCH) => self.alive = false,
            Err(err) => tracing::warn!(
                pgid = self.leader.as_raw_pid(),
                ?signal,
                "cannot signal process group: {err}"
            ),
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt as _;

    use rustix::process::getpgid;
    use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};
    use tokio::process::ChildStdout;

    use super::*;

    /// A snapshot with the test process's PATH (read, never changed) and two made-up variables.
    fn snapshot() -> HashMap<String, String> {
        HashMap::from([
            (
                "PATH".to_owned(),
                std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_owned()),
            ),
            ("MEW_TEST_ALLOWED".to_owned(), "yes".to_owned()),
            ("MEW_TEST_SECRET".to_owned(), "s3cret".to_owned()),
        ])
    }

    fn sh(script: &str) -> Command {
        let mut command = command("sh", ["-c", script]);
        pass_env(&mut command, &snapshot(), ["PATH"]);
        command.stdout(Stdio::piped());
        command
    }

    fn stdout(group: &mut ProcessGroup) -> BufReader<ChildStdout> {
        BufReader::new(group.child_mut().stdout.take().unwrap())
    }

    async fn read_line(stdout: &mut BufReader<ChildStdout>) -> String {
        let mut line = String::new();
        stdout.read_line(&mut line).await.unwrap();
        line.trim_end().to_owned()
    }

    /// Waits for end of file on `stdout`: every process that held it has exited.
    async fn all_exited(mut stdout: BufReader<ChildStdout>) {
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), stdout.read_to_end(&mut rest))
            .await
            .expect("a process of the group still runs after 10 s")
            .unwrap();
    }

    #[tokio::test]
    async fn environment_holds_only_allowlisted_variables() {
        let mut command = command(
            "sh",
            [
                "-c",
                "echo \"${MEW_TEST_ALLOWED-unset} ${MEW_TEST_SECRET-unset} ${HOME-unset}\"",
            ],
        );
        pass_env(
            &mut command,
            &snapshot(),
            BASE_ENV.iter().copied().chain(["MEW_TEST_ALLOWED"]),
        );
        command.stdout(Stdio::piped());
        let mut group = ProcessGroup::spawn(&mut command).unwrap();
        let mut out = stdout(&mut group);
        // HOME is allowlisted but absent from the snapshot, so the child does not get the
        // test process's HOME either.
        assert_eq!(read_line(&mut out).await, "yes unset unset");
        assert!(group.wait().await.unwrap().success());
    }

    #[tokio::test]
    async fn child_leads_its_own_group() {
        let mut group = ProcessGroup::spawn(&mut sh("echo ready; sleep 1000")).unwrap();
        let mut out = stdout(&mut group);
        assert_eq!(read_line(&mut out).await, "ready");
        let pid = Pid::from_raw(i32::try_from(group.id()).unwrap()).unwrap();
        assert_eq!(getpgid(Some(pid)).unwrap(), pid);
        assert_ne!(getpgid(None).unwrap(), pid);
        group.kill();
        assert_eq!(group.wait().await.unwrap().signal(), Some(9));
    }

    #[tokio::test]
    async fn drop_kills_background_children() {
        // The background `sleep` holds stdout too: end of file means it is gone.
        let mut group = ProcessGroup::spawn(&mut sh("sleep 1000 & echo started; wait")).unwrap();
        let mut out = stdout(&mut group);
        assert_eq!(read_line(&mut out).await, "started");
        drop(group);
        all_exited(out).await;
    }

    #[tokio::test]
    async fn terminate_sends_term_first() {
        let mut group = ProcessGroup::spawn(&mut sh("echo ready; sleep 1000")).unwrap();
        let mut out = stdout(&mut group);
        assert_eq!(read_line(&mut out).await, "ready");
        let status = group.terminate(Duration::from_secs(10)).await.unwrap();
        assert_eq!(status.signal(), Some(15));
        all_exited(out).await;
    }

    #[tokio::test]
    async fn terminate_kills_what_ignores_term() {
        let script = "trap '' TERM; sleep 1000 & echo started; wait";
        let mut group = ProcessGroup::spawn(&mut sh(script)).unwrap();
        let mut out = stdout(&mut group);
        assert_eq!(read_line(&mut out).await, "started");
        let status = group.terminate(Duration::from_millis(100)).await.unwrap();
        assert_eq!(status.signal(), Some(9));
        all_exited(out).await;
    }

    #[tokio::test]
    async fn kill_after_exit_is_harmless() {
        let mut group = ProcessGroup::spawn(&mut sh("exit 3")).unwrap();
        assert_eq!(group.wait().await.unwrap().code(), Some(3));
        assert!(group.is_alive());
        group.kill();
        assert!(!group.is_alive());
        group.kill();
    }
}
