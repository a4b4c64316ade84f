//! The node's one spawn helper: a child in its own process group, with an allowlisted environment.
//!
//! MCP servers, hooks and command roles all start here. A child never inherits the node's
//! environment: [`command`] clears it and [`pass_env`] copies only named variables from a snapshot
//! the caller holds (the node reads its environment once, at start-up). Each child leads a new
//! process group, so [`ProcessGroup`] can signal it together with everything it started.
//!
//! The process ledger outlives the node: [`ProcessGroup::spawn_recorded`] writes one small file
//! per running group into a directory under the data directory (see [`ledger_dir`]), and the
//! group's drop removes it. A node killed with SIGKILL cannot clean up, so the next one calls
//! [`reap_orphans`] at start-up and kills the groups its predecessor left running. The ledger
//! knows a group before it exists: a pending entry, written before the spawn, names a token
//! the child carries in its environment ([`LEDGER_TOKEN_VAR`]), so a node killed between the
//! spawn and the entry of the group's id still leaves a trace the next one follows.
//!
//! `tokio::process` spawns and `rustix` signals and waits; what is written here is the policy
//! (a cleared environment, a group per child, the ledger). `process-wrap` and `command-group`
//! make groups too, but neither keeps a record that outlives the node, which is the point of
//! this module.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{self, Read as _};
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use rustix::io::Errno;
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions, kill_process_group, waitid};
use serde::{Deserialize, Serialize};
use tokio::process::{Child, Command};

/// The variable a recorded child carries its pending ledger entry's token in.
pub(crate) const LEDGER_TOKEN_VAR: &str = "MEW_LEDGER_TOKEN";

/// The prefix of a pending ledger entry's file name; the token follows.
const PENDING_PREFIX: &str = "pending-";

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
    /// The group's entry in the process ledger, if it has one. Declared last, so it goes only
    /// after [`Drop`] killed the group.
    ledger: Option<LedgerRecord>,
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
            ledger: None,
        })
    }

    /// [`Self::spawn`], recorded in the process ledger `dir` as running `task`'s turn of
    /// `role` ([`Self::record`]) from before the child exists: a pending entry is written
    /// first and the child gets its token in [`LEDGER_TOKEN_VAR`], so whenever the node dies,
    /// the next start finds the group. The pending entry goes once the group's own is written.
    pub(crate) fn spawn_recorded(
        command: &mut Command,
        dir: &Path,
        task: &str,
        role: &str,
    ) -> Result<Self, SpawnError> {
        let token = uuid::Uuid::now_v7().simple().to_string();
        let pending = PendingRecord::write(
            dir,
            &PendingEntry {
                token: token.clone(),
                task: task.to_owned(),
                role: role.to_owned(),
            },
        )?;
        command.env(LEDGER_TOKEN_VAR, &token);
        let mut group = Self::spawn(command).map_err(SpawnError::Spawn)?;
        // A group the ledger does not know could outlive a crash of the node: failing here
        // drops (kills) it.
        group.record(dir, task, role)?;
        drop(pending);
        Ok(group)
    }

    /// Records the group in the process ledger `dir` as running `task`'s turn of `role`: a file
    /// named by the group id holding a [`LedgerEntry`], written to a temporary name and renamed,
    /// so a reader never sees half of it. Dropping the group removes the file, after killing
    /// the group. Recording again replaces the entry.
    ///
    /// Does blocking file I/O, on a file of a few dozen bytes. There is no `fsync`: the ledger
    /// has to survive the node's death, not the machine's, and a reboot ends the groups too.
    pub(crate) fn record(&mut self, dir: &Path, task: &str, role: &str) -> Result<(), LedgerError> {
        let pgid = self.id();
        let entry = LedgerEntry {
            pgid,
            start_time: start_time(pgid)
                .map_err(|source| LedgerError::StartTime { pid: pgid, source })?,
            task: task.to_owned(),
            role: role.to_owned(),
        };
        // Forget any earlier entry first: its drop removes the file this writes.
        self.ledger = None;
        self.ledger = Some(LedgerRecord::write(dir, &entry)?);
        Ok(())
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

    /// How the group's leader ended, once it has; `None` while it runs. It is not reaped, so
    /// [`Self::wait`] still returns its status. Sees an exit as soon as the kernel does, where
    /// the runtime's `try_wait` alone may report a leader that was killed as still running.
    pub(crate) fn peek_exit(&mut self) -> Option<ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status);
        }
        let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
        let status = waitid(WaitId::Pid(self.leader), options).ok()??;
        let raw = if let Some(code) = status.exit_status() {
            (code & 0xff) << 8
        } else {
            let signal = status.terminating_signal()?;
            signal | if status.dumped() { 0x80 } else { 0 }
        };
        Some(ExitStatus::from_raw(raw))
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

/// The process ledger's directory under the node's data directory.
pub(crate) fn ledger_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("processes")
}

/// Largest ledger file read; a bigger one is garbage.
const MAX_ENTRY_BYTES: u64 = 64 << 10;

/// What a file in the process ledger holds, as JSON: a group that was running one turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LedgerEntry {
    /// The group id, which is the leader's pid.
    pub(crate) pgid: u32,
    /// When the leader started, in clock ticks since boot (`/proc/<pid>/stat` field 22): with
    /// the pid it names one process, whatever reuses the pid later.
    pub(crate) start_time: u64,
    /// The task whose turn the group runs.
    pub(crate) task: String,
    /// The role the task runs.
    pub(crate) role: String,
}

impl LedgerEntry {
    /// The entry's file name in the ledger: the group id.
    fn file_name(pgid: u32) -> String {
        pgid.to_string()
    }

    /// The name the entry is written under before it is renamed into place.
    fn temp_name(pgid: u32) -> String {
        format!(".{pgid}.tmp")
    }
}

/// Why a group could not be recorded in the process ledger.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LedgerError {
    /// `/proc/<pid>/stat` could not be read or parsed.
    #[error("cannot read the start time of process {pid} from /proc/{pid}/stat: {source}")]
    StartTime {
        /// The process asked about.
        pid: u32,
        /// What went wrong.
        source: io::Error,
    },
    /// The entry could not be written.
    #[error("cannot write the process ledger entry {}: {source}", path.display())]
    Write {
        /// The file (or directory) that could not be written, or renamed into place.
        path: PathBuf,
        /// What went wrong.
        source: io::Error,
    },
}

/// Why [`ProcessGroup::spawn_recorded`] failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SpawnError {
    /// The program could not be started.
    #[error("{0}")]
    Spawn(io::Error),
    /// The ledger could not record it (the child, if any, is killed).
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// A group about to be spawned, as the ledger knows it until its id is known: the token its
/// leader carries in [`LEDGER_TOKEN_VAR`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PendingEntry {
    token: String,
    task: String,
    role: String,
}

/// A pending ledger file; dropping it removes the file.
#[derive(Debug)]
struct PendingRecord {
    path: PathBuf,
}

impl PendingRecord {
    fn write(dir: &Path, entry: &PendingEntry) -> Result<Self, LedgerError> {
        let path = dir.join(format!("{PENDING_PREFIX}{}", entry.token));
        let json = serde_json::to_vec(entry).map_err(|err| LedgerError::Write {
            path: path.clone(),
            source: io::Error::other(err),
        })?;
        fs::create_dir_all(dir).map_err(|source| LedgerError::Write {
            path: dir.to_owned(),
            source,
        })?;
        // Written whole before the child can exist: a reader finds it whole or not at all
        // (a half-written one is garbage the next start removes).
        if let Err(source) = fs::write(&path, json) {
            remove_quietly(&path);
            return Err(LedgerError::Write { path, source });
        }
        Ok(Self { path })
    }
}

impl Drop for PendingRecord {
    fn drop(&mut self) {
        remove_entry(&self.path);
    }
}

/// A ledger file; dropping it removes the file.
#[derive(Debug)]
struct LedgerRecord {
    path: PathBuf,
}

impl LedgerRecord {
    /// Writes `entry` into `dir` (created if missing) under a temporary name, then renames it.
    fn write(dir: &Path, entry: &LedgerEntry) -> Result<Self, LedgerError> {
        let temp = dir.join(LedgerEntry::temp_name(entry.pgid));
        let path = dir.join(LedgerEntry::file_name(entry.pgid));
        let json = serde_json::to_vec(entry).map_err(|err| LedgerError::Write {
            path: temp.clone(),
            source: io::Error::other(err),
        })?;
        fs::create_dir_all(dir).map_err(|source| LedgerError::Write {
            path: dir.to_owned(),
            source,
        })?;
        if let Err(source) = fs::write(&temp, json) {
            remove_quietly(&temp);
            return Err(LedgerError::Write { path: temp, source });
        }
        if let Err(source) = fs::rename(&temp, &path) {
            remove_quietly(&temp);
            return Err(LedgerError::Write { path, source });
        }
        Ok(Self { path })
    }
}

impl Drop for LedgerRecord {
    fn drop(&mut self) {
        remove_entry(&self.path);
    }
}

/// Removes a ledger file that may be half written; failure does not matter, as the next
/// start-up removes what is left.
fn remove_quietly(path: &Path) {
    let _ = fs::remove_file(path);
}

/// Removes a ledger file; one already gone is fine, any other failure is logged.
fn remove_entry(path: &Path) {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => tracing::warn!(
            path = %path.display(),
            "cannot remove the process ledger entry: {err}"
        ),
    }
}

/// The start time of process `pid`, in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
/// A process that is gone gives [`io::ErrorKind::NotFound`].
pub(crate) fn start_time(pid: u32) -> io::Result<u64> {
    let stat = match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // Reading the file of a process that is being reaped fails with ESRCH.
        Err(err) if err.raw_os_error() == Some(Errno::SRCH.raw_os_error()) => {
            return Err(io::Error::new(io::ErrorKind::NotFound, err));
        }
        read => read?,
    };
    parse_start_time(&stat).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "the file has no start time in field 22",
        )
    })
}

/// Field 22 (`starttime`) of a `/proc/<pid>/stat` line. Field 2 is the command name in
/// parentheses, which may itself hold spaces and `)`: the fields from 3 on follow the last `)`.
fn parse_start_time(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts at field 3 (the state), so field 22 is its 20th.
    rest.split_ascii_whitespace().nth(22 - 3)?.parse().ok()
}

/// A process group [`reap_orphans`] killed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reaped {
    /// The group id.
    pub(crate) pgid: u32,
    /// The task whose turn the group ran.
    pub(crate) task: String,
    /// The role the task ran.
    pub(crate) role: String,
}

/// Kills the process groups that the ledger `dir` says are running, and empties the ledger.
///
/// Call it at start-up, before anything records a group: every entry is then one that an
/// earlier node left when it died without cleaning up. A group is signalled only while its
/// leader still runs with the recorded start time, so a pid that was reused is never
/// signalled; a group whose leader exited is not found (its other members, if any, keep
/// running). Entries of groups that are gone are removed, and so are files that are not
/// entries, with a warning. Returns the groups it sent SIGKILL; a missing ledger is empty.
///
/// Does blocking file I/O.
pub(crate) fn reap_orphans(dir: &Path) -> Vec<Reaped> {
    let files = match fs::read_dir(dir) {
        Ok(files) => files,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Vec::new(),
        Err(err) => {
            tracing::warn!(
                dir = %dir.display(),
                "cannot read the process ledger; commands a previous run left may still run: {err}"
            );
            return Vec::new();
        }
    };
    let mut reaped = Vec::new();
    for file in files {
        let file = match file {
            Ok(file) => file,
            Err(err) => {
                tracing::warn!(dir = %dir.display(), "cannot read the process ledger: {err}");
                continue;
            }
        };
        let path = file.path();
        if file.file_type().is_ok_and(|kind| kind.is_dir()) {
            tracing::warn!(
                path = %path.display(),
                "left a directory in the process ledger alone: the ledger holds files only"
            );
            continue;
        }
        let pending = path
            .file_name()
            .and_then(OsStr::to_str)
            .is_some_and(|name| name.starts_with(PENDING_PREFIX));
        if pending {
            match read_pending(&path) {
                Ok(entry) => reaped.extend(reap_pending(&entry)),
                Err(reason) => tracing::warn!(
                    path = %path.display(),
                    "removed a file of the process ledger that is not a pending entry: {reason}"
                ),
            }
            remove_entry(&path);
            continue;
        }
        match read_entry(&path) {
            Ok(entry) => reaped.extend(reap(entry)),
            Err(reason) => tracing::warn!(
                path = %path.display(),
                "removed a file of the process ledger that is not an entry: {reason}"
            ),
        }
        remove_entry(&path);
    }
    reaped
}

/// The entry at `path`, or why it is none: its content must be one small entry, its name the
/// group id (or the temporary name of one, left by a node that died before renaming it).
fn read_entry(path: &Path) -> Result<LedgerEntry, String> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|file| file.take(MAX_ENTRY_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|err| format!("cannot read it: {err}"))?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_ENTRY_BYTES {
        return Err(format!("it is larger than {MAX_ENTRY_BYTES} bytes"));
    }
    let entry: LedgerEntry =
        serde_json::from_slice(&bytes).map_err(|err| format!("it is not an entry: {err}"))?;
    let name = path.file_name().and_then(OsStr::to_str).unwrap_or_default();
    if name != LedgerEntry::file_name(entry.pgid) && name != LedgerEntry::temp_name(entry.pgid) {
        return Err(format!(
            "its name does not match the process group {} it records",
            entry.pgid
        ));
    }
    Ok(entry)
}

/// The pending entry at `path`, or why it is none.
fn read_pending(path: &Path) -> Result<PendingEntry, String> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|file| file.take(MAX_ENTRY_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|err| format!("cannot read it: {err}"))?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_ENTRY_BYTES {
        return Err(format!("it is larger than {MAX_ENTRY_BYTES} bytes"));
    }
    let entry: PendingEntry = serde_json::from_slice(&bytes)
        .map_err(|err| format!("it is not a pending entry: {err}"))?;
    let name = path.file_name().and_then(OsStr::to_str).unwrap_or_default();
    if name != format!("{PENDING_PREFIX}{}", entry.token) || entry.token.is_empty() {
        return Err("its name does not match the token it records".to_owned());
    }
    Ok(entry)
}

/// Kills the groups of the processes that carry the pending `entry`'s token in their
/// environment: a group spawned by a node that died before it recorded the group's id.
fn reap_pending(entry: &PendingEntry) -> Vec<Reaped> {
    let needle = format!("{LEDGER_TOKEN_VAR}={}", entry.token);
    let Ok(processes) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut groups: Vec<u32> = Vec::new();
    for process in processes.filter_map(Result::ok) {
        let Some(pid) = process
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // Another user's processes cannot be read, and cannot be ours.
        let Ok(environ) = fs::read(process.path().join("environ")) else {
            continue;
        };
        if environ
            .split(|b| *b == 0)
            .any(|var| var == needle.as_bytes())
            && let Ok(pgid) = rustix::process::getpgid(Pid::from_raw(pid.cast_signed()))
        {
            let pgid = pgid.as_raw_nonzero().get().unsigned_abs();
            if !groups.contains(&pgid) {
                groups.push(pgid);
            }
        }
    }
    groups
        .into_iter()
        .filter_map(|pgid| {
            let group = i32::try_from(pgid).ok().and_then(Pid::from_raw)?;
            match kill_process_group(group, Signal::KILL) {
                Ok(()) => Some(Reaped {
                    pgid,
                    task: entry.task.clone(),
                    role: entry.role.clone(),
                }),
                Err(err) => {
                    if err != Errno::SRCH {
                        tracing::warn!(
                            pgid,
                            "cannot kill a command a previous run left running: {err}"
                        );
                    }
                    None
                }
            }
        })
        .collect()
}

/// Kills the group of `entry` if its leader still runs with the recorded start time.
fn reap(entry: LedgerEntry) -> Option<Reaped> {
    let Some(pgid) = i32::try_from(entry.pgid).ok().and_then(Pid::from_raw) else {
        tracing::warn!(
            pgid = entry.pgid,
            "removed a process ledger entry whose group id is not a process id"
        );
        return None;
    };
    match start_time(entry.pgid) {
        Ok(started) if started == entry.start_time => {}
        Ok(_) => {
            tracing::debug!(
                pgid = entry.pgid,
                task = %entry.task,
                "the group of a process ledger entry is gone; its id now names another process"
            );
            return None;
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => return None,
        Err(err) => {
            tracing::warn!(
                pgid = entry.pgid,
                task = %entry.task,
                role = %entry.role,
                "cannot tell whether a command a previous run left still runs, so it is left \
                 alone: {err}"
            );
            return None;
        }
    }
    match kill_process_group(pgid, Signal::KILL) {
        Ok(()) => Some(Reaped {
            pgid: entry.pgid,
            task: entry.task,
            role: entry.role,
        }),
        // Gone between the check and the signal: nothing left to reap.
        Err(Errno::SRCH) => None,
        Err(err) => {
            tracing::warn!(
                pgid = entry.pgid,
                task = %entry.task,
                role = %entry.role,
                "cannot kill a command a previous run left running: {err}"
            );
            None
        }
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

    /// The files in the ledger `dir`, by name, sorted.
    fn ledger_files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|file| file.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    /// A group running `sleep 1000` (possibly under `sh`), ready.
    async fn sleeper() -> (ProcessGroup, BufReader<ChildStdout>) {
        let mut group = ProcessGroup::spawn(&mut sh("echo ready; exec sleep 1000")).unwrap();
        let mut out = stdout(&mut group);
        assert_eq!(read_line(&mut out).await, "ready");
        (group, out)
    }

    /// Waits (at most 10 s) for the group's leader to exit, and returns the signal that ended it.
    async fn ended_by(group: &mut ProcessGroup) -> Option<i32> {
        tokio::time::timeout(Duration::from_secs(10), group.wait())
            .await
            .expect("the group's leader still runs after 10 s")
            .unwrap()
            .signal()
    }

    #[test]
    fn start_time_is_field_22_after_the_last_parenthesis() {
        let fields = "S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 123456 19 20";
        assert_eq!(
            parse_start_time(&format!("42 (sleep) {fields}")),
            Some(123_456)
        );
        // The command name may hold spaces and parentheses of its own.
        assert_eq!(
            parse_start_time(&format!("42 (a) b (c) 1 2 3) {fields}\n")),
            Some(123_456)
        );
        assert_eq!(parse_start_time("42 (sleep) S 1 2"), None);
        assert_eq!(parse_start_time("no parenthesis at all"), None);
        let own = start_time(std::process::id()).unwrap();
        assert!(own > 0);
        assert_eq!(start_time(std::process::id()).unwrap(), own);
        assert_eq!(
            start_time(i32::MAX.unsigned_abs()).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }

    #[tokio::test]
    async fn recorded_entry_lives_as_long_as_the_group() {
        let ledger = tempfile::tempdir().unwrap();
        // The ledger directory is created on first use.
        let dir = ledger.path().join("processes");
        let (mut group, _out) = sleeper().await;
        group.record(&dir, "task-1", "tester").unwrap();
        let pgid = group.id();
        assert_eq!(ledger_files(&dir), [pgid.to_string()]);
        let entry: LedgerEntry =
            serde_json::from_slice(&fs::read(dir.join(pgid.to_string())).unwrap()).unwrap();
        assert_eq!(
            entry,
            LedgerEntry {
                pgid,
                start_time: start_time(pgid).unwrap(),
                task: "task-1".to_owned(),
                role: "tester".to_owned(),
            }
        );
        // Recording again replaces the entry.
        group.record(&dir, "task-2", "tester").unwrap();
        assert_eq!(ledger_files(&dir), [pgid.to_string()]);
        assert_eq!(
            read_entry(&dir.join(pgid.to_string())).unwrap().task,
            "task-2"
        );

        drop(group);
        assert_eq!(ledger_files(&dir), Vec::<String>::new());
    }

    #[tokio::test]
    async fn record_into_an_unusable_ledger_names_the_file() {
        let ledger = tempfile::tempdir().unwrap();
        let dir = ledger.path().join("processes");
        fs::write(&dir, "a file, not a directory").unwrap();
        let (mut group, _out) = sleeper().await;
        let err = group.record(&dir, "task-1", "tester").unwrap_err();
        assert!(
            err.to_string().starts_with(&format!(
                "cannot write the process ledger entry {}: ",
                dir.display()
            )),
            "{err}"
        );
    }

    #[tokio::test]
    async fn reap_orphans_kills_a_group_whose_leader_has_the_recorded_start_time() {
        let ledger = tempfile::tempdir().unwrap();
        let (mut group, _out) = sleeper().await;
        group.record(ledger.path(), "task-1", "tester").unwrap();

        let reaped = reap_orphans(ledger.path());
        assert_eq!(
            reaped,
            [Reaped {
                pgid: group.id(),
                task: "task-1".to_owned(),
                role: "tester".to_owned(),
            }]
        );
        assert_eq!(ledger_files(ledger.path()), Vec::<String>::new());
        // Nothing else signals the group before it is dropped.
        assert_eq!(ended_by(&mut group).await, Some(9));
    }

    #[tokio::test]
    async fn a_recorded_group_is_pending_before_it_exists_and_reaped_from_that_alone() {
        let ledger = tempfile::tempdir().unwrap();
        // The child checks, first thing, that the ledger knows it.
        let script = format!(
            "if [ -e '{d}'/pending-$MEW_LEDGER_TOKEN ] || [ -e '{d}'/$$ ]; then echo known; \
             else echo unknown; fi; exec sleep 1000",
            d = ledger.path().display()
        );
        let mut group =
            ProcessGroup::spawn_recorded(&mut sh(&script), ledger.path(), "task-1", "tester")
                .unwrap();
        let mut out = BufReader::new(group.child_mut().stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).await.unwrap();
        assert_eq!(line, "known\n");
        // Once spawned, only the group's own entry is left.
        assert_eq!(ledger_files(ledger.path()), [group.id().to_string()]);

        // A node that died between the spawn and the entry of the group's id leaves only the
        // pending entry: the next start finds the group by its token and kills it.
        let token = "0123456789abcdef";
        let pending = PendingEntry {
            token: token.to_owned(),
            task: "task-2".to_owned(),
            role: "tester".to_owned(),
        };
        fs::write(
            ledger.path().join(format!("pending-{token}")),
            serde_json::to_vec(&pending).unwrap(),
        )
        .unwrap();
        let mut orphan = sh("echo started; exec sleep 1000");
        orphan.env(LEDGER_TOKEN_VAR, token);
        let mut orphan = ProcessGroup::spawn(&mut orphan).unwrap();
        // Until the child has run `exec`, its environment is still the parent's, without the
        // token: wait for it to speak.
        assert_eq!(read_line(&mut stdout(&mut orphan)).await, "started");
        let mut reaped = reap_orphans(ledger.path());
        reaped.sort_by_key(|r| r.task.clone());
        assert_eq!(
            reaped,
            [
                Reaped {
                    pgid: group.id(),
                    task: "task-1".to_owned(),
                    role: "tester".to_owned(),
                },
                Reaped {
                    pgid: orphan.id(),
                    task: "task-2".to_owned(),
                    role: "tester".to_owned(),
                },
            ]
        );
        assert_eq!(ledger_files(ledger.path()), Vec::<String>::new());
        assert_eq!(ended_by(&mut orphan).await, Some(9));
        assert_eq!(ended_by(&mut group).await, Some(9));
    }

    #[tokio::test]
    async fn reap_orphans_kills_an_entry_left_under_its_temporary_name() {
        let ledger = tempfile::tempdir().unwrap();
        let (mut group, _out) = sleeper().await;
        let pgid = group.id();
        let entry = LedgerEntry {
            pgid,
            start_time: start_time(pgid).unwrap(),
            task: "task-1".to_owned(),
            role: "tester".to_owned(),
        };
        let temp = ledger.path().join(format!(".{pgid}.tmp"));
        fs::write(&temp, serde_json::to_vec(&entry).unwrap()).unwrap();

        assert_eq!(reap_orphans(ledger.path()).len(), 1);
        assert_eq!(ledger_files(ledger.path()), Vec::<String>::new());
        assert_eq!(ended_by(&mut group).await, Some(9));
    }

    #[tokio::test]
    async fn reap_orphans_leaves_a_process_with_another_start_time_alone() {
        let ledger = tempfile::tempdir().unwrap();
        let (mut group, _out) = sleeper().await;
        let pgid = group.id();
        // As if the recorded group had ended and its id been reused by this one.
        let entry = LedgerEntry {
            pgid,
            start_time: start_time(pgid).unwrap() - 1,
            task: "task-1".to_owned(),
            role: "tester".to_owned(),
        };
        fs::write(
            ledger.path().join(pgid.to_string()),
            serde_json::to_vec(&entry).unwrap(),
        )
        .unwrap();

        assert_eq!(reap_orphans(ledger.path()), []);
        assert_eq!(ledger_files(ledger.path()), Vec::<String>::new());
        // Had the reaper sent SIGKILL, the leader would have died of it, not of this SIGTERM.
        let status = group.terminate(Duration::from_secs(10)).await.unwrap();
        assert_eq!(status.signal(), Some(15));
    }

    #[test]
    fn reap_orphans_removes_garbage_and_entries_of_gone_groups() {
        let ledger = tempfile::tempdir().unwrap();
        let dir = ledger.path();
        // No process ever has this id: Linux pids stay below 2^22.
        let gone = i32::MAX.unsigned_abs();
        let entry = |pgid: u32| {
            serde_json::to_vec(&LedgerEntry {
                pgid,
                start_time: 1,
                task: "task-1".to_owned(),
                role: "tester".to_owned(),
            })
            .unwrap()
        };
        fs::write(dir.join(gone.to_string()), entry(gone)).unwrap();
        fs::write(dir.join("12"), "not json").unwrap();
        fs::write(dir.join("13"), "").unwrap();
        fs::write(dir.join(".14.tmp"), "{\"pgid\": 14, \"start_ti").unwrap();
        fs::write(dir.join("15"), "{\"pgid\": 15}").unwrap();
        // A well-formed entry under another group's name, and one for no process at all.
        fs::write(dir.join("16"), entry(gone)).unwrap();
        fs::write(dir.join("0"), entry(0)).unwrap();
        fs::write(dir.join("17"), vec![b' '; 100 << 10]).unwrap();
        fs::create_dir(dir.join("a-directory")).unwrap();

        assert_eq!(reap_orphans(dir), []);
        assert_eq!(ledger_files(dir), ["a-directory"]);
        assert_eq!(reap_orphans(&dir.join("missing")), []);
    }

    /// Polls [`ProcessGroup::peek_exit`] (at most 10 s) until it sees the leader's end.
    async fn peeked_exit(group: &mut ProcessGroup) -> ExitStatus {
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Some(status) = group.peek_exit() {
                    return status;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the group's leader still runs after 10 s")
    }

    #[tokio::test]
    async fn peek_exit_sees_the_end_without_reaping() {
        let (mut group, _out) = sleeper().await;
        assert_eq!(group.peek_exit(), None);
        group.kill();
        assert_eq!(peeked_exit(&mut group).await.signal(), Some(9));
        // Still there for `wait`.
        assert_eq!(ended_by(&mut group).await, Some(9));

        let mut group = ProcessGroup::spawn(&mut sh("exit 3")).unwrap();
        assert_eq!(peeked_exit(&mut group).await.code(), Some(3));
        assert_eq!(group.wait().await.unwrap().code(), Some(3));
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
