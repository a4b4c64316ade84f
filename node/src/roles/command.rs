//! Command roles: a program run per turn, fed the message on stdin, reporting on stdout.
//!
//! The protocol, as a program sees it:
//!
//! - **stdin**: with `input: text` (the default), the message's text parts joined by newlines,
//!   ending in a newline; with `input: message`, one line of JSON
//!   `{"message": <Message>, "history": [<Message>, ...]}`. Then stdin is closed.
//! - **stdout**, read as it arrives, line by line: a line holding one A2A `StreamResponse`
//!   object (`statusUpdate`, `artifactUpdate` or `message`) is an event of this task; any other
//!   line is plain text. Ids in an event are ignored (a program reports on its own task only);
//!   an artifact without `artifactId` gets a fresh one; a `task` object is ignored. The plain
//!   text, if any, becomes one artifact named `output` when the program exits.
//! - **exit status**: 0 completes the task (unless an event already ended or interrupted it);
//!   anything else fails it, with the end of stderr as the reason.
//! - **environment**: only allowlisted variables (see [`crate::process::BASE_ENV`] and the
//!   role's `env`), plus `MEW_NODE_URL` (the node's `node.public_url`, when the executor knows
//!   it), `MEW_TASK_TOKEN` (when the node takes delegations from its programs: see
//!   [`Callback`]), `MEW_TASK_ID`, `MEW_CONTEXT_ID`, `MEW_ROLE`, `MEW_RESUMED` (`1`
//!   when the message answers the task's INPUT_REQUIRED question) and `MEW_RECOVERED` (`1` when
//!   the turn runs again because the node running it was lost: only for a role with
//!   `resumable: true`, whose program may be run again with the same input).
//!
//! The program runs in its own process group. Cancel and timeout send SIGTERM to the group,
//! then SIGKILL; when the program exits, whatever it left running in its group is killed. While
//! it runs, the group has an entry in the process ledger (see [`crate::process::reap_orphans`]),
//! so a node that dies without killing it has its successor do so.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::io;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use mew_cards::{
    Artifact, ArtifactId, CommandInput, CommandSpec, ContextId, Message, MessageId, Part,
    RoleDefinition, RoleSource, StreamResponse, TaskId, TaskState,
};
use rustix::process::Signal;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::Command;
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use crate::process::{BASE_ENV, ProcessGroup, command, pass_env};
use crate::tasks::executor::{EventSink, ExecError, Executor, SinkClosed, Turn};

/// The node's way back in for a turn's program: `mew send` run by a command role delegates
/// through it, so that the child is recorded under the turn's task (and the tree shows it).
pub(crate) trait Callback: Send + Sync + std::fmt::Debug {
    /// Opens the way for `turn`, whose events go to `sink`, until the returned ticket drops;
    /// the program gets the ticket's token as `MEW_TASK_TOKEN`. `None` opens nothing (no
    /// secret could be made).
    fn open(&self, turn: &Turn, sink: Arc<dyn EventSink>) -> Option<Ticket>;
}

/// What [`Callback::open`] gives a turn: the secret its program presents, and what closes
/// the way when dropped.
pub(crate) struct Ticket {
    /// The secret, given to the program as `MEW_TASK_TOKEN`.
    pub(crate) token: String,
    /// Closes the way (and stops what went through it) when dropped.
    pub(crate) _close: Box<dyn Send + Sync>,
}

/// Plain stdout kept per turn by default, in bytes.
#[cfg_attr(not(test), allow(dead_code))] // wired by the task manager
pub(crate) const DEFAULT_OUTPUT_LIMIT: usize = 1 << 20;

/// Bytes of stderr kept for the error message of a failed run.
const STDERR_TAIL: usize = 4096;

/// Longest stdout line still read as a possible event; longer lines are plain text.
const MAX_EVENT_LINE: usize = 16 << 20;

/// Time between SIGTERM and SIGKILL when a run is canceled or times out.
const TERM_GRACE: Duration = Duration::from_secs(2);

/// How long stdout and stderr are still read after the program exited. Its process group is
/// killed then, which closes the pipes; this only bounds a process that left the group.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// Bytes read from stdout or stderr at a time.
const READ_CHUNK: usize = 8192;

/// Runs the turns of command roles: one process per turn.
#[cfg_attr(not(test), allow(dead_code))] // wired by the task manager
#[derive(Debug)]
pub(crate) struct CommandExecutor {
    /// The node's environment, read once at start-up; programs get allowlisted values from it.
    env: Arc<HashMap<String, String>>,
    /// Time limit of a run whose role sets no `timeout`.
    default_timeout: Option<Duration>,
    /// Plain stdout kept per turn, in bytes.
    output_limit: usize,
    /// The process ledger that records each running program's group; `None` keeps no record.
    ledger: Option<PathBuf>,
    /// The node's own URL, given to programs as `MEW_NODE_URL`; `None` sets nothing.
    node_url: Option<String>,
    /// The node's way back in for programs (`MEW_TASK_TOKEN`); `None` opens none.
    callback: Option<Arc<dyn Callback>>,
}

#[cfg_attr(not(test), allow(dead_code))] // wired by the task manager
impl CommandExecutor {
    /// An executor that takes environment values from `env` (the node's environment snapshot),
    /// limits runs whose role sets no `timeout` to `default_timeout`, and records each running
    /// program's process group in the process ledger `ledger` (see
    /// [`crate::process::ledger_dir`]; `None` records nothing, and a crash of the node then
    /// leaves the programs running).
    pub(crate) fn new(
        env: Arc<HashMap<String, String>>,
        default_timeout: Option<Duration>,
        ledger: Option<PathBuf>,
    ) -> Self {
        Self {
            env,
            default_timeout,
            output_limit: DEFAULT_OUTPUT_LIMIT,
            ledger,
            node_url: None,
            callback: None,
        }
    }

    /// Opens `callback` for every turn, so that programs can delegate through the node.
    pub(crate) fn with_callback(mut self, callback: Arc<dyn Callback>) -> Self {
        self.callback = Some(callback);
        self
    }

    /// Gives programs the node's own URL `url` as `MEW_NODE_URL`, so that they can call the
    /// node back (`mew send`).
    pub(crate) fn with_node_url(mut self, url: impl Into<String>) -> Self {
        self.node_url = Some(url.into());
        self
    }

    /// Keeps at most `bytes` of plain stdout per turn (default [`DEFAULT_OUTPUT_LIMIT`]); the
    /// rest is dropped and the output says so.
    pub(crate) fn with_output_limit(mut self, bytes: usize) -> Self {
        self.output_limit = bytes;
        self
    }

    /// Runs one turn: see the module documentation for the protocol.
    async fn run_turn(&self, turn: Turn, sink: Arc<dyn EventSink>) -> Result<(), ExecError> {
        let Some(spec) = turn.role.command.as_ref() else {
            return Err(ExecError(format!(
                "role {} has no command to run",
                turn.role.name
            )));
        };
        if turn.cancel.is_cancelled() {
            return Err(ExecError("canceled".to_owned()));
        }
        let program = spec.program.as_str();
        let (mut process, input) = self.prepare(&turn, spec).await?;
        // Held until the turn ends: the program's token is good only while it runs.
        let ticket = self
            .callback
            .as_ref()
            .and_then(|callback| callback.open(&turn, sink.clone()));
        if let Some(ticket) = &ticket {
            process.env("MEW_TASK_TOKEN", &ticket.token);
        }
        let mut group = ProcessGroup::spawn(&mut process)
            .map_err(|err| ExecError(format!("cannot start {program}: {err}")))?;
        if let Some(ledger) = &self.ledger {
            // A group the ledger does not know could outlive a crash of the node: failing here
            // drops (kills) it.
            group
                .record(ledger, turn.task_id.as_str(), &turn.role.name)
                .map_err(|err| ExecError(format!("cannot start {program}: {err}")))?;
        }
        tracing::debug!(
            task = %turn.task_id,
            role = %turn.role.name,
            program,
            pid = group.id(),
            "command started"
        );

        let child = group.child_mut();
        let mut stdout = child.stdout.take();
        let mut stderr = child.stderr.take();
        // Written by its own task, so a program that never reads stdin cannot block the turn;
        // dropping the handle stops it.
        let _writer = child.stdin.take().map(|mut stdin| {
            AbortOnDropHandle::new(tokio::spawn(async move {
                if let Err(err) = stdin.write_all(&input).await {
                    tracing::debug!("command stopped reading stdin: {err}");
                }
            }))
        });

        let reporter = Reporter {
            sink,
            task_id: turn.task_id.clone(),
            context_id: turn.context_id.clone(),
            program,
            last_artifact: std::sync::Mutex::new(None),
        };
        let mut lines = Lines::new(self.output_limit);
        let mut tail = Tail::default();
        let timeout = spec.timeout.or(self.default_timeout);
        let deadline = timeout.map(|limit| Instant::now() + limit);
        let mut drain_until = None;
        let mut exit = None;
        let mut out_buf = vec![0; READ_CHUNK];
        let mut err_buf = vec![0; READ_CHUNK];

        let ending = loop {
            if exit.is_some() && stdout.is_none() && stderr.is_none() {
                break Ending::Exited;
            }
            tokio::select! {
                biased;
                () = turn.cancel.cancelled() => break Ending::Canceled,
                () = sleep_until(deadline) => break Ending::TimedOut(timeout.unwrap_or_default()),
                () = sleep_until(drain_until) => {
                    tracing::warn!(
                        program,
                        "stopped reading output: a process outside the command's process \
                         group still holds its stdout or stderr"
                    );
                    stdout = None;
                    stderr = None;
                }
                status = group.wait(), if exit.is_none() => match status {
                    Ok(status) => {
                        exit = Some(status);
                        // The turn ends with the program: what it left behind goes too.
                        group.kill();
                        drain_until = Some(Instant::now() + DRAIN_GRACE);
                    }
                    Err(err) => break Ending::WaitFailed(err),
                },
                read = read_some(&mut stdout, &mut out_buf) => {
                    let fed = match read {
                        Ok(0) => {
                            stdout = None;
                            lines.finish(&reporter).await
                        }
                        Ok(n) => lines.feed(&out_buf[..n], &reporter).await,
                        Err(err) => {
                            tracing::warn!(program, "cannot read stdout: {err}");
                            stdout = None;
                            lines.finish(&reporter).await
                        }
                    };
                    if fed.is_err() {
                        break Ending::SinkClosed;
                    }
                }
                read = read_some(&mut stderr, &mut err_buf) => match read {
                    Ok(0) => stderr = None,
                    Ok(n) => tail.push(&err_buf[..n]),
                    Err(err) => {
                        tracing::warn!(program, "cannot read stderr: {err}");
                        stderr = None;
                    }
                },
            }
        };

        match ending {
            Ending::Canceled => {
                stop(&mut group, program).await;
                Err(ExecError("canceled".to_owned()))
            }
            Ending::TimedOut(limit) => {
                stop(&mut group, program).await;
                Err(ExecError(format!(
                    "timed out after {}",
                    format_duration(limit)
                )))
            }
            Ending::SinkClosed => {
                group.kill();
                tracing::debug!(task = %turn.task_id, "task is over; command killed");
                Ok(())
            }
            Ending::WaitFailed(err) => {
                group.kill();
                Err(ExecError(format!("cannot wait for {program}: {err}")))
            }
            Ending::Exited => {
                if let Some(output) = lines.plain.take() {
                    let artifact = Artifact::new("output", vec![Part::text(output)]);
                    if reporter.sink.artifact(artifact, false, true).await.is_err() {
                        return Ok(());
                    }
                }
                match exit.and_then(|status| failure(program, status, &tail.text())) {
                    Some(reason) => Err(ExecError(reason)),
                    None => Ok(()),
                }
            }
        }
    }

    /// The process for one turn, with its environment, working directory and pipes.
    async fn prepare(
        &self,
        turn: &Turn,
        spec: &CommandSpec,
    ) -> Result<(Command, Vec<u8>), ExecError> {
        let dir = working_dir(&turn.role, spec)
            .map(|dir| {
                std::path::absolute(&dir).map_err(|err| {
                    ExecError(format!(
                        "cannot start {}: working directory {}: {err}",
                        spec.program,
                        dir.display()
                    ))
                })
            })
            .transpose()?;
        if let Some(dir) = &dir {
            match tokio::fs::metadata(dir).await {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => {
                    return Err(ExecError(format!(
                        "cannot start {}: working directory {} is not a directory",
                        spec.program,
                        dir.display()
                    )));
                }
                Err(err) => {
                    return Err(ExecError(format!(
                        "cannot start {}: working directory {}: {err}",
                        spec.program,
                        dir.display()
                    )));
                }
            }
        }
        // A program path with a slash is relative to the working directory (made absolute
        // above), whatever the OS would make of it.
        let program = match &dir {
            Some(dir) if spec.program.contains('/') => dir.join(&spec.program),
            _ => PathBuf::from(&spec.program),
        };

        let mut process = command(&program, &spec.args);
        pass_env(
            &mut process,
            &self.env,
            BASE_ENV
                .iter()
                .copied()
                .chain(spec.env.iter().map(String::as_str)),
        );
        if let Some(url) = &self.node_url {
            process.env("MEW_NODE_URL", url);
        }
        process
            .env("MEW_TASK_ID", turn.task_id.as_str())
            .env("MEW_CONTEXT_ID", turn.context_id.as_str())
            .env("MEW_ROLE", &turn.role.name)
            .env("MEW_RESUMED", if turn.resumed { "1" } else { "0" })
            .env("MEW_RECOVERED", if turn.recovered { "1" } else { "0" })
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(dir) = dir {
            process.current_dir(dir);
        }
        Ok((process, stdin_input(turn, spec)?))
    }
}

#[async_trait]
impl Executor for CommandExecutor {
    async fn run(&self, turn: Turn, sink: Arc<dyn EventSink>) -> Result<(), ExecError> {
        self.run_turn(turn, sink).await
    }

    /// Only when the role says running its program again with the same input is safe.
    fn resumable(&self, role: &RoleDefinition) -> bool {
        role.command
            .as_ref()
            .is_some_and(|command| command.resumable)
    }
}

/// Why the reading loop stopped.
enum Ending {
    /// The program exited and its output was read.
    Exited,
    /// The task was canceled.
    Canceled,
    /// The time limit passed.
    TimedOut(Duration),
    /// The sink refused an event: the task is over.
    SinkClosed,
    /// Waiting for the program failed.
    WaitFailed(io::Error),
}

/// SIGTERM, a grace period, SIGKILL.
async fn stop(group: &mut ProcessGroup, program: &str) {
    if let Err(err) = group.terminate(TERM_GRACE).await {
        tracing::warn!(program, "cannot wait for the stopped command: {err}");
    }
}

/// The directory the program runs in: `cwd`, relative to the role file's directory (to the
/// node's for a builtin role); `None` (the node's own) when the role sets no `cwd`.
fn working_dir(role: &RoleDefinition, spec: &CommandSpec) -> Option<PathBuf> {
    let cwd = Path::new(spec.cwd.as_deref()?);
    let role_dir = (role.source != RoleSource::Builtin && !role.path.is_empty())
        .then(|| Path::new(&role.path).parent())
        .flatten();
    Some(match role_dir {
        Some(base) => base.join(cwd),
        None => cwd.to_owned(),
    })
}

/// What the program reads on stdin.
fn stdin_input(turn: &Turn, spec: &CommandSpec) -> Result<Vec<u8>, ExecError> {
    match spec.input {
        CommandInput::Text => {
            let mut text = turn.message.text();
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            Ok(text.into_bytes())
        }
        CommandInput::Message => {
            #[derive(Serialize)]
            struct Input<'a> {
                message: &'a Message,
                history: &'a [Message],
            }
            let mut line = serde_json::to_vec(&Input {
                message: &turn.message,
                history: &turn.history,
            })
            .map_err(|err| {
                ExecError(format!(
                    "cannot write the message for {} as JSON: {err}",
                    spec.program
                ))
            })?;
            line.push(b'\n');
            Ok(line)
        }
    }
}

/// Reads from a pipe that may be closed already (`None`: never ready).
///
/// # Cancel safety
///
/// Cancel safe, like [`AsyncReadExt::read`].
async fn read_some<R: AsyncRead + Unpin>(
    pipe: &mut Option<R>,
    buf: &mut [u8],
) -> io::Result<usize> {
    match pipe {
        Some(pipe) => pipe.read(buf).await,
        None => std::future::pending().await,
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Reports a program's events on its own task.
struct Reporter<'a> {
    sink: Arc<dyn EventSink>,
    task_id: TaskId,
    context_id: ContextId,
    program: &'a str,
    /// The last artifact this turn reported: an appended chunk without an id joins it.
    last_artifact: std::sync::Mutex<Option<ArtifactId>>,
}

impl Reporter<'_> {
    /// Passes one event from the program to the sink.
    async fn report(&self, event: StreamResponse) -> Result<(), SinkClosed> {
        match event {
            StreamResponse::Task(_) => {
                tracing::debug!(
                    program = self.program,
                    "ignored a task object: a command cannot replace its task"
                );
                Ok(())
            }
            StreamResponse::StatusUpdate(update) => {
                let message = update.status.message.map(|message| self.own(message));
                self.sink.status(update.status.state, message).await
            }
            StreamResponse::ArtifactUpdate(update) => {
                let mut artifact = update.artifact;
                {
                    let mut last = self
                        .last_artifact
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    if artifact.artifact_id.is_empty() {
                        artifact.artifact_id = match (&*last, update.append) {
                            (Some(id), true) => id.clone(),
                            _ => ArtifactId::generate(),
                        };
                    }
                    *last = Some(artifact.artifact_id.clone());
                }
                self.sink
                    .artifact(artifact, update.append, update.last_chunk)
                    .await
            }
            StreamResponse::Message(message) => self.sink.message(self.own(message)).await,
        }
    }

    /// Makes a program's message an agent message of this task.
    fn own(&self, mut message: Message) -> Message {
        if message.message_id.is_empty() {
            message.message_id = MessageId::generate();
        }
        message.role = mew_cards::Role::Agent;
        message.task_id = Some(self.task_id.clone());
        message.context_id = Some(self.context_id.clone());
        message
    }
}

/// The event a stdout line carries, if it is one: a JSON `StreamResponse` with content.
fn parse_event(line: &[u8]) -> Option<StreamResponse> {
    let text = std::str::from_utf8(line).ok()?.trim();
    if !text.starts_with('{') {
        return None;
    }
    let event = serde_json::from_str::<StreamResponse>(text).ok()?;
    let has_parts = |message: &Message| !message.parts.is_empty();
    let valid = match &event {
        StreamResponse::Task(_) => true,
        StreamResponse::Message(message) => has_parts(message),
        StreamResponse::StatusUpdate(update) => {
            update.status.state != TaskState::Unspecified
                && update.status.message.as_ref().is_none_or(has_parts)
        }
        StreamResponse::ArtifactUpdate(update) => !update.artifact.parts.is_empty(),
    };
    valid.then_some(event)
}

/// Splits stdout into lines: events go to the sink, the rest is kept as plain text.
struct Lines {
    /// The line read so far, without its newline yet.
    pending: Vec<u8>,
    /// The current line outgrew [`MAX_EVENT_LINE`]: the rest of it is plain text.
    overlong: bool,
    plain: PlainText,
}

impl Lines {
    fn new(limit: usize) -> Self {
        Self {
            pending: Vec::new(),
            overlong: false,
            plain: PlainText::new(limit),
        }
    }

    /// Takes a chunk of stdout, handling every line it completes.
    async fn feed(&mut self, mut chunk: &[u8], reporter: &Reporter<'_>) -> Result<(), SinkClosed> {
        while let Some(newline) = chunk.iter().position(|&b| b == b'\n') {
            let (line, rest) = chunk.split_at(newline + 1);
            chunk = rest;
            if self.overlong {
                self.plain.push(line);
                self.overlong = false;
            } else if self.pending.is_empty() {
                self.line(line, reporter).await?;
            } else {
                self.pending.extend_from_slice(line);
                let line = std::mem::take(&mut self.pending);
                self.line(&line, reporter).await?;
            }
        }
        if self.overlong {
            self.plain.push(chunk);
        } else {
            self.pending.extend_from_slice(chunk);
            if self.pending.len() > MAX_EVENT_LINE {
                self.plain.push(&std::mem::take(&mut self.pending));
                self.overlong = true;
            }
        }
        Ok(())
    }

    /// Handles a last line that has no newline.
    async fn finish(&mut self, reporter: &Reporter<'_>) -> Result<(), SinkClosed> {
        let line = std::mem::take(&mut self.pending);
        if !line.is_empty() {
            self.line(&line, reporter).await?;
        }
        Ok(())
    }

    async fn line(&mut self, line: &[u8], reporter: &Reporter<'_>) -> Result<(), SinkClosed> {
        match parse_event(line) {
            Some(event) => reporter.report(event).await,
            None => {
                self.plain.push(line);
                Ok(())
            }
        }
    }
}

/// Plain stdout, kept up to a limit.
struct PlainText {
    text: String,
    limit: usize,
    truncated: bool,
}

impl PlainText {
    fn new(limit: usize) -> Self {
        Self {
            text: String::new(),
            limit,
            truncated: false,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        if self.truncated {
            return;
        }
        let text = String::from_utf8_lossy(bytes);
        let room = self.limit.saturating_sub(self.text.len());
        if text.len() <= room {
            self.text.push_str(&text);
        } else {
            self.text.push_str(&text[..text.floor_char_boundary(room)]);
            self.truncated = true;
        }
    }

    /// The text without its trailing newlines, with a note when it was cut; `None` when empty.
    fn take(&mut self) -> Option<String> {
        let mut text = std::mem::take(&mut self.text);
        text.truncate(text.trim_end_matches(['\n', '\r']).len());
        if self.truncated {
            if !text.is_empty() {
                text.push('\n');
            }
            let _ = write!(text, "[output truncated at {} bytes]", self.limit);
        }
        (!text.is_empty()).then_some(text)
    }
}

/// The last [`STDERR_TAIL`] bytes of stderr.
#[derive(Default)]
struct Tail {
    bytes: VecDeque<u8>,
    cut: bool,
}

impl Tail {
    fn push(&mut self, bytes: &[u8]) {
        self.bytes.extend(bytes);
        if self.bytes.len() > STDERR_TAIL {
            let excess = self.bytes.len() - STDERR_TAIL;
            self.bytes.drain(..excess);
            self.cut = true;
        }
    }

    /// The kept lines, trimmed; a line cut at the front is left out.
    fn text(&self) -> String {
        let bytes: Vec<u8> = self.bytes.iter().copied().collect();
        let text = String::from_utf8_lossy(&bytes);
        let text = match text.split_once('\n') {
            Some((_cut, rest)) if self.cut => rest,
            _ => &text,
        };
        text.trim().to_owned()
    }
}

/// Why a run that ended with `status` failed, or `None` when it succeeded.
fn failure(program: &str, status: ExitStatus, stderr: &str) -> Option<String> {
    let mut reason = match (status.code(), status.signal()) {
        (Some(0), _) => return None,
        (Some(code), _) => format!("{program} exited with status {code}"),
        (None, Some(signal)) => match signal_name(signal) {
            Some(name) => format!("{program} was killed by signal {signal} ({name})"),
            None => format!("{program} was killed by signal {signal}"),
        },
        (None, None) => format!("{program} ended with {status}"),
    };
    if !stderr.is_empty() {
        reason.push_str(": ");
        reason.push_str(stderr);
    }
    Some(reason)
}

/// The name of a common signal.
fn signal_name(raw: i32) -> Option<&'static str> {
    let signal = Signal::from_named_raw(raw)?;
    [
        (Signal::HUP, "SIGHUP"),
        (Signal::INT, "SIGINT"),
        (Signal::QUIT, "SIGQUIT"),
        (Signal::ILL, "SIGILL"),
        (Signal::ABORT, "SIGABRT"),
        (Signal::BUS, "SIGBUS"),
        (Signal::FPE, "SIGFPE"),
        (Signal::KILL, "SIGKILL"),
        (Signal::SEGV, "SIGSEGV"),
        (Signal::PIPE, "SIGPIPE"),
        (Signal::ALARM, "SIGALRM"),
        (Signal::TERM, "SIGTERM"),
        (Signal::USR1, "SIGUSR1"),
        (Signal::USR2, "SIGUSR2"),
        (Signal::XCPU, "SIGXCPU"),
        (Signal::XFSZ, "SIGXFSZ"),
    ]
    .into_iter()
    .find_map(|(known, name)| (known == signal).then_some(name))
}

/// `30s`, or `1500ms` when not whole seconds.
fn format_duration(duration: Duration) -> String {
    if duration.subsec_nanos() == 0 {
        format!("{}s", duration.as_secs())
    } else {
        format!("{}ms", duration.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;
    use std::sync::Mutex;

    use mew_cards::{Role, parse_role};
    use tokio::net::unix::pipe;
    use tokio::sync::mpsc;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::process::{LedgerEntry, reap_orphans, start_time};

    /// What the executor reported, in order.
    #[derive(Debug, Clone, PartialEq)]
    enum Event {
        Status(TaskState, Option<Message>),
        Artifact(Artifact, bool, bool),
        Message(Message),
    }

    /// A sink that records events and announces each one; closed, it refuses everything.
    struct Recorder {
        events: Mutex<Vec<Event>>,
        announce: mpsc::UnboundedSender<Event>,
        closed: bool,
    }

    impl Recorder {
        fn new(closed: bool) -> (Arc<Self>, mpsc::UnboundedReceiver<Event>) {
            let (announce, announced) = mpsc::unbounded_channel();
            let recorder = Self {
                events: Mutex::new(Vec::new()),
                announce,
                closed,
            };
            (Arc::new(recorder), announced)
        }

        fn record(&self, event: Event) -> Result<(), SinkClosed> {
            if self.closed {
                let _ = self.announce.send(event);
                return Err(SinkClosed);
            }
            self.events.lock().unwrap().push(event.clone());
            let _ = self.announce.send(event);
            Ok(())
        }

        fn events(&self) -> Vec<Event> {
            self.events.lock().unwrap().clone()
        }
    }

    #[async_trait]
    impl EventSink for Recorder {
        async fn status(
            &self,
            state: TaskState,
            message: Option<Message>,
        ) -> Result<(), SinkClosed> {
            self.record(Event::Status(state, message))
        }

        async fn artifact(
            &self,
            artifact: Artifact,
            append: bool,
            last_chunk: bool,
        ) -> Result<(), SinkClosed> {
            self.record(Event::Artifact(artifact, append, last_chunk))
        }

        async fn message(&self, message: Message) -> Result<(), SinkClosed> {
            self.record(Event::Message(message))
        }
    }

    /// The node's environment as the tests pretend it is: the real PATH (read, never
    /// changed) and two made-up variables.
    fn snapshot() -> Arc<HashMap<String, String>> {
        Arc::new(HashMap::from([
            (
                "PATH".to_owned(),
                std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_owned()),
            ),
            ("MEW_TEST_ALLOWED".to_owned(), "yes".to_owned()),
            ("MEW_TEST_SECRET".to_owned(), "s3cret".to_owned()),
        ]))
    }

    fn executor() -> CommandExecutor {
        CommandExecutor::new(snapshot(), None, None)
    }

    /// A project role named `tester` that runs `program args...`.
    fn role(program: &str, args: &[&str]) -> RoleDefinition {
        let text =
            "---\nname: tester\ndescription: Runs a test program\ncommand: placeholder\n---\n";
        let mut role = parse_role(text, "agents/tester.md", RoleSource::Project)
            .unwrap()
            .definition;
        let spec = role.command.as_mut().unwrap();
        spec.program = program.to_owned();
        spec.args = args.iter().map(|arg| (*arg).to_owned()).collect();
        role
    }

    fn sh(script: &str) -> RoleDefinition {
        role("sh", &["-c", script])
    }

    fn spec(role: &mut RoleDefinition) -> &mut CommandSpec {
        role.command.as_mut().unwrap()
    }

    fn turn(role: RoleDefinition, message: Message) -> Turn {
        Turn {
            task_id: TaskId::generate(),
            context_id: ContextId::generate(),
            owner: None,
            role: Arc::new(role),
            message,
            history: Vec::new(),
            resumed: false,
            recovered: false,
            cancel: CancellationToken::new(),
            private: serde_json::Value::Null,
            earlier_private: serde_json::Value::Null,
            depth: 0,
        }
    }

    /// Runs a turn to its end (failing the test after 20 s rather than hanging).
    async fn run(executor: &CommandExecutor, turn: Turn) -> (Result<(), ExecError>, Vec<Event>) {
        let (sink, _announced) = Recorder::new(false);
        let result =
            tokio::time::timeout(Duration::from_secs(20), executor.run(turn, sink.clone()))
                .await
                .expect("the turn did not end within 20 s");
        (result, sink.events())
    }

    fn text_of(parts: &[Part]) -> String {
        mew_cards::join_text(parts)
    }

    /// The text of the single `output` artifact in `events`.
    fn output(events: &[Event]) -> String {
        match events {
            [Event::Artifact(artifact, false, true)] if artifact.name == "output" => {
                text_of(&artifact.parts)
            }
            other => panic!("expected one output artifact, got {other:?}"),
        }
    }

    /// A FIFO in `dir`, open for reading: it reaches end of file once every process that
    /// opened it for writing has exited.
    async fn watch(dir: &Path) -> (PathBuf, pipe::Receiver) {
        let fifo = dir.join("watch");
        let mut mkfifo = command("mkfifo", [&fifo]);
        pass_env(&mut mkfifo, &snapshot(), ["PATH"]);
        let status = ProcessGroup::spawn(&mut mkfifo)
            .unwrap()
            .wait()
            .await
            .unwrap();
        assert!(status.success());
        let receiver = pipe::OpenOptions::new().open_receiver(&fifo).unwrap();
        (fifo, receiver)
    }

    /// Waits for end of file on a [`watch`] FIFO.
    async fn all_exited(mut watch: pipe::Receiver) {
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), watch.read_to_end(&mut rest))
            .await
            .expect("a process still holds the FIFO after 10 s")
            .unwrap();
    }

    /// A program that starts `sleep 1000` in the background holding `fifo` open (and nothing
    /// else does), says WORKING and waits.
    fn with_background_sleep(fifo: &Path) -> RoleDefinition {
        sh(&format!(
            "exec 3>'{}'; sleep 1000 & exec 3>&-; \
             echo '{{\"statusUpdate\":{{\"status\":{{\"state\":\"TASK_STATE_WORKING\"}}}}}}'; \
             wait",
            fifo.display()
        ))
    }

    #[tokio::test]
    async fn plain_text_becomes_one_output_artifact() {
        let message = Message::new(Role::User, vec![Part::text("hello"), Part::text("world")]);
        let (result, events) = run(&executor(), turn(role("cat", &[]), message)).await;
        result.unwrap();
        assert_eq!(output(&events), "hello\nworld");
    }

    #[tokio::test]
    async fn appended_chunks_without_an_id_join_the_last_artifact() {
        let script = r#"cat <<'EOF'
{"artifactUpdate":{"artifact":{"name":"answer","parts":[{"text":"one "}]}}}
{"artifactUpdate":{"artifact":{"parts":[{"text":"two"}]},"append":true,"lastChunk":true}}
{"artifactUpdate":{"artifact":{"name":"other","parts":[{"text":"new"}]}}}
EOF"#;
        let (result, events) = run(&executor(), turn(sh(script), Message::user_text("go"))).await;
        result.unwrap();
        let ids: Vec<&str> = events
            .iter()
            .map(|e| match e {
                Event::Artifact(a, _, _) => a.artifact_id.as_str(),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(ids.len(), 3);
        assert!(!ids[0].is_empty());
        assert_eq!(
            ids[0], ids[1],
            "the appended chunk joins the first artifact"
        );
        assert_ne!(
            ids[1], ids[2],
            "a chunk that does not append starts a new artifact"
        );
    }

    #[tokio::test]
    async fn json_lines_stream_events() {
        let script = r#"cat <<'EOF'
{"statusUpdate":{"status":{"state":"TASK_STATE_WORKING"}}}
{"artifactUpdate":{"artifact":{"artifactId":"a1","name":"story","parts":[{"text":"Once "}]}}}
a plain note
{"artifactUpdate":{"taskId":"other","artifact":{"artifactId":"a1","parts":[{"text":"upon"}]},"append":true,"lastChunk":true}}
{"statusUpdate":{"taskId":"other","contextId":"other","status":{"state":"TASK_STATE_INPUT_REQUIRED","message":{"role":"ROLE_USER","parts":[{"text":"Which one?"}]}}}}
EOF"#;
        let turn = turn(sh(script), Message::user_text("tell a story"));
        let (task_id, context_id) = (turn.task_id.clone(), turn.context_id.clone());
        let (result, events) = run(&executor(), turn).await;
        result.unwrap();

        assert_eq!(events.len(), 5, "{events:?}");
        assert_eq!(events[0], Event::Status(TaskState::Working, None));
        let Event::Artifact(first, false, false) = &events[1] else {
            panic!("expected a first chunk, got {:?}", events[1]);
        };
        assert_eq!(first.artifact_id.as_str(), "a1");
        assert_eq!(first.name, "story");
        assert_eq!(text_of(&first.parts), "Once ");
        let Event::Artifact(last, true, true) = &events[2] else {
            panic!("expected a last appended chunk, got {:?}", events[2]);
        };
        assert_eq!(last.artifact_id.as_str(), "a1");
        assert_eq!(text_of(&last.parts), "upon");
        let Event::Status(TaskState::InputRequired, Some(question)) = &events[3] else {
            panic!("expected an INPUT_REQUIRED question, got {:?}", events[3]);
        };
        assert_eq!(question.text(), "Which one?");
        assert_eq!(question.role, Role::Agent);
        assert_eq!(question.task_id.as_ref(), Some(&task_id));
        assert_eq!(question.context_id.as_ref(), Some(&context_id));
        assert!(!question.message_id.is_empty());
        assert_eq!(output(&events[4..]), "a plain note");
    }

    #[tokio::test]
    async fn direct_message_and_ids_filled_in() {
        let script = r#"cat <<'EOF'
{"artifactUpdate":{"artifact":{"parts":[{"data":{"n":1}}]}}}
{"message":{"messageId":"m1","parts":[{"text":"hi there"}]}}
EOF"#;
        let turn = turn(sh(script), Message::user_text("hi"));
        let task_id = turn.task_id.clone();
        let (result, events) = run(&executor(), turn).await;
        result.unwrap();

        assert_eq!(events.len(), 2, "{events:?}");
        let Event::Artifact(artifact, false, false) = &events[0] else {
            panic!("expected an artifact, got {:?}", events[0]);
        };
        assert!(!artifact.artifact_id.is_empty());
        assert_eq!(
            artifact.parts,
            vec![Part::data(serde_json::json!({"n": 1}))]
        );
        let Event::Message(message) = &events[1] else {
            panic!("expected a message, got {:?}", events[1]);
        };
        assert_eq!(message.message_id.as_str(), "m1");
        assert_eq!(message.role, Role::Agent);
        assert_eq!(message.task_id.as_ref(), Some(&task_id));
        assert_eq!(message.text(), "hi there");
    }

    #[tokio::test]
    async fn other_json_is_plain_text_and_task_objects_are_ignored() {
        let script = r#"cat <<'EOF'
{"task":{"id":"t9","status":{"state":"TASK_STATE_COMPLETED"}}}
{"unknown": 1}
{"message": "not a message"}
{"message": {"parts": []}}
{"statusUpdate":{"status":{}}}
{"message":{"parts":[{"text":"a"}]},"statusUpdate":{"status":{"state":"TASK_STATE_WORKING"}}}
[1, 2]
EOF"#;
        let (result, events) = run(&executor(), turn(sh(script), Message::user_text("x"))).await;
        result.unwrap();
        assert_eq!(
            output(&events),
            "{\"unknown\": 1}\n\
             {\"message\": \"not a message\"}\n\
             {\"message\": {\"parts\": []}}\n\
             {\"statusUpdate\":{\"status\":{}}}\n\
             {\"message\":{\"parts\":[{\"text\":\"a\"}]},\"statusUpdate\":{\"status\":{\"state\":\"TASK_STATE_WORKING\"}}}\n\
             [1, 2]"
        );
    }

    #[tokio::test]
    async fn plain_output_is_capped() {
        let executor = executor().with_output_limit(10);
        let role = sh("printf 'abcdefghijklmnopqrstuvwxyz\\n'; printf 'more\\n'");
        let (result, events) = run(&executor, turn(role, Message::user_text("x"))).await;
        result.unwrap();
        assert_eq!(
            output(&events),
            "abcdefghij\n[output truncated at 10 bytes]"
        );
    }

    #[tokio::test]
    async fn nonzero_exit_fails_with_stderr() {
        let role = sh("echo partial; echo 'first problem' >&2; echo 'second problem' >&2; exit 3");
        let (result, events) = run(&executor(), turn(role, Message::user_text("x"))).await;
        assert_eq!(
            result.unwrap_err().0,
            "sh exited with status 3: first problem\nsecond problem"
        );
        assert_eq!(output(&events), "partial");
    }

    #[tokio::test]
    async fn only_the_end_of_stderr_is_kept() {
        let role = sh(
            "i=0; while [ $i -lt 500 ]; do echo \"line $i of noise\" >&2; i=$((i+1)); done; exit 1",
        );
        let (result, _) = run(&executor(), turn(role, Message::user_text("x"))).await;
        let reason = result.unwrap_err().0;
        let stderr = reason.strip_prefix("sh exited with status 1: ").unwrap();
        assert!(stderr.len() <= STDERR_TAIL, "{} bytes", stderr.len());
        assert!(stderr.starts_with("line "), "{stderr}");
        assert!(stderr.ends_with("line 499 of noise"), "{stderr}");
    }

    #[tokio::test]
    async fn killed_by_a_signal_names_it() {
        let (result, _) = run(&executor(), turn(sh("kill -9 $$"), Message::user_text("x"))).await;
        assert_eq!(result.unwrap_err().0, "sh was killed by signal 9 (SIGKILL)");
    }

    #[tokio::test]
    async fn cancel_kills_the_whole_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let (fifo, watch) = watch(dir.path()).await;
        let turn = turn(with_background_sleep(&fifo), Message::user_text("x"));
        let cancel = turn.cancel.clone();
        let (sink, mut announced) = Recorder::new(false);
        let executor = Arc::new(executor());
        let running = tokio::spawn({
            let executor = executor.clone();
            let sink = sink.clone();
            async move { executor.run(turn, sink).await }
        });

        assert_eq!(
            announced.recv().await,
            Some(Event::Status(TaskState::Working, None))
        );
        cancel.cancel();
        let result = tokio::time::timeout(Duration::from_secs(10), running)
            .await
            .expect("the turn did not end within 10 s of cancel")
            .unwrap();
        assert_eq!(result.unwrap_err().0, "canceled");
        all_exited(watch).await;
    }

    #[tokio::test]
    async fn timeout_kills_the_program() {
        let mut role = sh("sleep 1000");
        spec(&mut role).timeout = Some(Duration::from_millis(200));
        let (result, events) = run(&executor(), turn(role, Message::user_text("x"))).await;
        assert_eq!(result.unwrap_err().0, "timed out after 200ms");
        assert_eq!(events, []);

        let executor = CommandExecutor::new(snapshot(), Some(Duration::from_millis(300)), None);
        let (result, _) = run(&executor, turn(sh("sleep 1000"), Message::user_text("x"))).await;
        assert_eq!(result.unwrap_err().0, "timed out after 300ms");
    }

    #[tokio::test]
    async fn closed_sink_stops_the_program() {
        let dir = tempfile::tempdir().unwrap();
        let (fifo, watch) = watch(dir.path()).await;
        let turn = turn(with_background_sleep(&fifo), Message::user_text("x"));
        let (sink, mut announced) = Recorder::new(true);
        let result = tokio::time::timeout(Duration::from_secs(10), executor().run(turn, sink))
            .await
            .expect("the turn did not end within 10 s of the sink closing");
        result.unwrap();
        assert_eq!(
            announced.recv().await,
            Some(Event::Status(TaskState::Working, None))
        );
        all_exited(watch).await;
    }

    #[tokio::test]
    async fn environment_is_the_allowlist_plus_mew_variables() {
        let mut role = sh(
            "echo \"$MEW_TASK_ID|$MEW_CONTEXT_ID|$MEW_ROLE|$MEW_RESUMED|$MEW_RECOVERED|\
             ${MEW_TEST_ALLOWED-unset}|${MEW_TEST_SECRET-unset}|${HOME-unset}\"",
        );
        spec(&mut role).env = vec!["MEW_TEST_ALLOWED".to_owned()];
        let mut turn = turn(role, Message::user_text("x"));
        turn.resumed = true;
        turn.recovered = true;
        let expected = format!(
            "{}|{}|tester|1|1|yes|unset|unset",
            turn.task_id, turn.context_id
        );
        let (result, events) = run(&executor(), turn).await;
        result.unwrap();
        assert_eq!(output(&events), expected);
    }

    #[tokio::test]
    async fn node_url_is_given_when_the_executor_knows_it() {
        let script = "echo \"${MEW_NODE_URL-unset}\"";
        let (result, events) = run(&executor(), turn(sh(script), Message::user_text("x"))).await;
        result.unwrap();
        assert_eq!(output(&events), "unset");
        let executor = executor().with_node_url("http://127.0.0.1:7000");
        let (result, events) = run(&executor, turn(sh(script), Message::user_text("x"))).await;
        result.unwrap();
        assert_eq!(output(&events), "http://127.0.0.1:7000");
    }

    #[tokio::test]
    async fn message_input_carries_the_history() {
        let dir = tempfile::tempdir().unwrap();
        let input_file = dir.path().join("input.json");
        let mut role = sh(&format!("cat > '{}'", input_file.display()));
        spec(&mut role).input = CommandInput::Message;
        let mut turn = turn(role, Message::user_text("the second answer"));
        turn.history = vec![
            Message::user_text("the first question"),
            Message::agent_text("the first answer"),
        ];
        let (result, events) = run(&executor(), turn).await;
        result.unwrap();
        assert_eq!(events, []);

        let input = std::fs::read_to_string(&input_file).unwrap();
        assert_eq!(input.lines().count(), 1);
        let input: serde_json::Value = serde_json::from_str(&input).unwrap();
        assert_eq!(input["message"]["parts"][0]["text"], "the second answer");
        assert_eq!(input["message"]["role"], "ROLE_USER");
        let history = input["history"].as_array().unwrap();
        assert_eq!(history.len(), 2);
        assert_eq!(history[0]["parts"][0]["text"], "the first question");
        assert_eq!(history[1]["role"], "ROLE_AGENT");
    }

    #[tokio::test]
    async fn missing_or_unusable_program_names_it() {
        let role = role("mew-test-no-such-program", &[]);
        let (result, _) = run(&executor(), turn(role, Message::user_text("x"))).await;
        let reason = result.unwrap_err().0;
        assert!(
            reason.starts_with("cannot start mew-test-no-such-program: No such file"),
            "{reason}"
        );

        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("not-executable.sh");
        std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
        let program = script.to_str().unwrap();
        let (result, _) = run(&executor(), turn(role_at(program), Message::user_text("x"))).await;
        assert_eq!(
            result.unwrap_err().0,
            format!("cannot start {program}: Permission denied (os error 13)")
        );
    }

    fn role_at(program: &str) -> RoleDefinition {
        role(program, &[])
    }

    #[tokio::test]
    async fn cwd_is_relative_to_the_role_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("agents")).unwrap();
        let tool = dir.path().join("tool.sh");
        std::fs::write(&tool, "#!/bin/sh\necho \"tool in $(pwd)\"\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();

        let mut role = role("./tool.sh", &[]);
        role.path = dir.path().join("agents/tester.md").display().to_string();
        spec(&mut role).cwd = Some("..".to_owned());
        let (result, events) = run(&executor(), turn(role, Message::user_text("x"))).await;
        result.unwrap();
        let root = dir.path().canonicalize().unwrap();
        assert_eq!(output(&events), format!("tool in {}", root.display()));

        let mut role = role_at("pwd");
        role.path = dir.path().join("agents/tester.md").display().to_string();
        spec(&mut role).cwd = Some("missing".to_owned());
        let (result, _) = run(&executor(), turn(role, Message::user_text("x"))).await;
        let reason = result.unwrap_err().0;
        assert!(
            reason.starts_with("cannot start pwd: working directory ")
                && reason.contains("agents/missing: No such file"),
            "{reason}"
        );
    }

    #[tokio::test]
    async fn a_program_that_ignores_stdin_does_not_block() {
        let big = "x".repeat(4 << 20);
        let (result, events) =
            run(&executor(), turn(sh("echo done"), Message::user_text(big))).await;
        result.unwrap();
        assert_eq!(output(&events), "done");
    }

    #[tokio::test]
    async fn leftover_background_processes_do_not_hold_the_turn() {
        let dir = tempfile::tempdir().unwrap();
        let (fifo, watch) = watch(dir.path()).await;
        let role = sh(&format!(
            "exec 3>'{}'; sleep 1000 & exec 3>&-; echo done",
            fifo.display()
        ));
        let (result, events) = run(&executor(), turn(role, Message::user_text("x"))).await;
        result.unwrap();
        assert_eq!(output(&events), "done");
        all_exited(watch).await;
    }

    /// An executor that records its programs in the ledger `dir`.
    fn executor_with_ledger(dir: &Path) -> CommandExecutor {
        CommandExecutor::new(snapshot(), None, Some(dir.to_owned()))
    }

    /// The names of the files in the ledger `dir`, sorted; none when it does not exist.
    fn ledger_files(dir: &Path) -> Vec<String> {
        let Ok(files) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut names: Vec<String> = files
            .map(|file| file.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[tokio::test]
    async fn ledger_records_the_program_while_it_runs() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("processes");
        let pid_file = dir.path().join("pid");
        let executor = Arc::new(executor_with_ledger(&ledger));
        let role = sh(&format!(
            "echo $$ > '{}'; \
             echo '{{\"statusUpdate\":{{\"status\":{{\"state\":\"TASK_STATE_WORKING\"}}}}}}'; \
             sleep 1000",
            pid_file.display()
        ));
        let first = turn(role, Message::user_text("x"));
        let (task_id, cancel) = (first.task_id.clone(), first.cancel.clone());
        let (sink, mut announced) = Recorder::new(false);
        let running = tokio::spawn({
            let executor = executor.clone();
            async move { executor.run(first, sink).await }
        });
        assert_eq!(
            announced.recv().await,
            Some(Event::Status(TaskState::Working, None))
        );

        let pid: u32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(ledger_files(&ledger), [pid.to_string()]);
        let entry: LedgerEntry =
            serde_json::from_slice(&std::fs::read(ledger.join(pid.to_string())).unwrap()).unwrap();
        assert_eq!(entry.pgid, pid);
        assert_eq!(entry.start_time, start_time(pid).unwrap());
        assert_eq!(entry.task, task_id.as_str());
        assert_eq!(entry.role, "tester");

        cancel.cancel();
        let result = tokio::time::timeout(Duration::from_secs(10), running)
            .await
            .expect("the turn did not end within 10 s of cancel")
            .unwrap();
        assert_eq!(result.unwrap_err().0, "canceled");
        assert_eq!(ledger_files(&ledger), Vec::<String>::new());

        // A program that exits by itself, or fails, leaves no entry either.
        let (result, _) = run(&executor, turn(sh("echo hi"), Message::user_text("x"))).await;
        result.unwrap();
        let (result, _) = run(&executor, turn(sh("exit 4"), Message::user_text("x"))).await;
        assert_eq!(result.unwrap_err().0, "sh exited with status 4");
        let (result, _) = run(&executor, turn(sh("kill -9 $$"), Message::user_text("x"))).await;
        assert_eq!(result.unwrap_err().0, "sh was killed by signal 9 (SIGKILL)");
        assert_eq!(ledger_files(&ledger), Vec::<String>::new());
    }

    #[tokio::test]
    async fn an_unusable_ledger_fails_the_turn() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("processes");
        std::fs::write(&ledger, "a file, not a directory").unwrap();
        // The group is dropped, and so killed, before the program gets far: its output, if
        // any, is not read.
        let turn = turn(sh("echo hi"), Message::user_text("x"));
        let (result, events) = run(&executor_with_ledger(&ledger), turn).await;
        let reason = result.unwrap_err().0;
        assert!(
            reason.starts_with(&format!(
                "cannot start sh: cannot write the process ledger entry {}: ",
                ledger.display()
            )),
            "{reason}"
        );
        assert_eq!(events, []);
    }

    #[tokio::test]
    async fn reap_orphans_kills_the_program_of_a_lost_turn() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("processes");
        let (fifo, watch) = watch(dir.path()).await;
        let executor = executor_with_ledger(&ledger);
        let turn = turn(with_background_sleep(&fifo), Message::user_text("x"));
        let task_id = turn.task_id.clone();
        let (sink, mut announced) = Recorder::new(false);
        let mut running = Box::pin(executor.run(turn, sink));
        tokio::select! {
            result = &mut running => panic!("the turn ended early: {result:?}"),
            event = announced.recv() => {
                assert_eq!(event, Some(Event::Status(TaskState::Working, None)));
            }
        }
        // As when the node dies: nothing kills the group or removes its entry.
        std::mem::forget(running);
        assert_eq!(ledger_files(&ledger).len(), 1);

        let reaped = reap_orphans(&ledger);
        assert_eq!(reaped.len(), 1, "{reaped:?}");
        assert_eq!(reaped[0].task, task_id.as_str());
        assert_eq!(reaped[0].role, "tester");
        assert_eq!(ledger_files(&ledger), Vec::<String>::new());
        // The program and its background sleep are gone.
        all_exited(watch).await;
    }

    /// A role file of `examples/wrap-cli`, as the catalog would load it.
    fn example_role(name: &str) -> RoleDefinition {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/wrap-cli/.mew/agents")
            .join(format!("{name}.md"));
        let text = std::fs::read_to_string(&path).unwrap();
        let path = path.display().to_string();
        let parsed = parse_role(&text, &path, RoleSource::Project).unwrap();
        assert_eq!(parsed.warnings, []);
        parsed.definition
    }

    #[tokio::test]
    async fn wrap_cli_example_roles_work() {
        let wc = example_role("wc");
        let (result, events) = run(
            &executor(),
            turn(wc, Message::user_text("the quick brown fox")),
        )
        .await;
        result.unwrap();
        let counts = output(&events);
        assert_eq!(
            counts.split_whitespace().collect::<Vec<_>>(),
            ["1", "4", "20"]
        );

        let upper = example_role("upper");
        let message = Message::user_text("make \"this\"\tloud\nplease");
        let (result, events) = run(&executor(), turn(upper, message)).await;
        result.unwrap();
        assert_eq!(events.len(), 2, "{events:?}");
        let Event::Status(TaskState::Working, Some(note)) = &events[0] else {
            panic!("expected WORKING with a note, got {:?}", events[0]);
        };
        assert_eq!(note.text(), "upper-casing...");
        let Event::Artifact(artifact, false, true) = &events[1] else {
            panic!("expected the whole artifact, got {:?}", events[1]);
        };
        assert_eq!(artifact.name, "upper");
        assert_eq!(text_of(&artifact.parts), "MAKE \"THIS\"\tLOUD\nPLEASE");

        let upper = example_role("upper");
        let (result, _) = run(&executor(), turn(upper, Message::user_text(""))).await;
        assert_eq!(
            result.unwrap_err().0,
            "sh exited with status 2: upper: nothing to upper-case: send some text"
        );
    }

    #[test]
    fn working_dir_follows_the_role_file() {
        let mut role = role("pwd", &[]);
        role.path = "project/.mew/agents/tester.md".to_owned();
        assert_eq!(working_dir(&role, role.command.as_ref().unwrap()), None);
        spec(&mut role).cwd = Some("../..".to_owned());
        assert_eq!(
            working_dir(&role, role.command.as_ref().unwrap()),
            Some(PathBuf::from("project/.mew/agents/../.."))
        );
        spec(&mut role).cwd = Some("/srv".to_owned());
        assert_eq!(
            working_dir(&role, role.command.as_ref().unwrap()),
            Some(PathBuf::from("/srv"))
        );
        role.source = RoleSource::Builtin;
        role.path = "builtin:tester".to_owned();
        spec(&mut role).cwd = Some("work".to_owned());
        assert_eq!(
            working_dir(&role, role.command.as_ref().unwrap()),
            Some(PathBuf::from("work"))
        );
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(format_duration(Duration::from_secs(30)), "30s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
    }
}
