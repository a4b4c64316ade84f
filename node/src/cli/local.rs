//! What `mew run` and `mew chat` share: the terminal, the printing of a task's events, and
//! the exchange with an in-process role agent (permission questions, Ctrl-C).
//!
//! The answer goes to `out` as it streams; everything else (tool progress, questions,
//! prompts, final states) goes to `err`, so `mew run "..." > answer.txt` keeps only the
//! answer.

use std::collections::HashMap;
use std::io::{self, BufRead, IsTerminal as _, Write};

use anyhow::{Context as _, bail};
use futures_util::StreamExt as _;
use mew_cards::mew::{ChildNote, MewMetadata, TodoItem, ToolNote};
use mew_cards::role_base_url;
use mew_cards::{
    ArtifactId, CancelTaskRequest, Message, SendMessageRequest, StreamResponse,
    SubscribeToTaskRequest, Task, TaskState,
};
use mew_transport::{AgentTransport, CallContext, RemoteAgent};
use serde_json::Value;
use tokio::sync::mpsc;

use super::output::{part_text, state_name, status_text};
use super::remote::{NodeUrlArgs, client_options, remote_error};
use crate::config::Config;

/// How many characters of a tool's input a progress line shows.
const SUMMARY_CHARS: usize = 80;

/// The input fields that say best what a tool call does, in order of preference.
const SUMMARY_FIELDS: [&str; 8] = [
    "command",
    "file_path",
    "path",
    "pattern",
    "description",
    "url",
    "query",
    "prompt",
];

/// Where a local session reads the user's lines and writes its output.
pub(crate) struct Terminal<O, E> {
    input: Input,
    /// The answers.
    pub(crate) out: O,
    /// Progress, questions, prompts and final states.
    pub(crate) err: E,
    /// Whether a person types the input: only then are questions put to it.
    pub(crate) interactive: bool,
    interrupts: Interrupts,
}

impl Terminal<io::Stdout, io::Stderr> {
    /// The process's stdin, stdout and stderr; Ctrl-C interrupts. Questions are put only when
    /// stdin is a terminal.
    pub(crate) fn stdio() -> Self {
        Self::new(
            io::BufReader::new(io::stdin()),
            io::stdout(),
            io::stderr(),
            io::stdin().is_terminal(),
            Interrupts::ctrl_c(),
        )
    }
}

impl<O: Write, E: Write> Terminal<O, E> {
    /// A terminal over `input`, `out` and `err`. `input` is read on a thread of its own, and
    /// only once a line is needed.
    pub(crate) fn new(
        input: impl BufRead + Send + 'static,
        out: O,
        err: E,
        interactive: bool,
        interrupts: Interrupts,
    ) -> Self {
        Self {
            input: Input {
                source: Some(Box::new(input)),
                lines: None,
            },
            out,
            err,
            interactive,
            interrupts,
        }
    }

    /// The next line the user types (without its line ending), the end of the input, or a
    /// Ctrl-C, whichever comes first.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a line that arrives after the future is dropped is kept for the next call.
    pub(crate) async fn typed(&mut self) -> anyhow::Result<Typed> {
        tokio::select! {
            biased;
            () = self.interrupts.next() => Ok(Typed::Interrupted),
            line = self.input.line() => match line.context("cannot read the input")? {
                Some(line) => Ok(Typed::Line(line)),
                None => Ok(Typed::End),
            },
        }
    }

    /// Resolves at the next Ctrl-C; never, when nothing can interrupt.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub(crate) async fn interrupted(&mut self) {
        self.interrupts.next().await;
    }

    /// Writes `text` to `err` (ending an open answer line first) and flushes both.
    pub(crate) fn note(&mut self, printer: &mut Printer, text: &str) -> io::Result<()> {
        printer.close(&mut self.out)?;
        self.err.write_all(text.as_bytes())?;
        self.err.flush()
    }
}

/// What the user did at a prompt.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Typed {
    /// Typed this line.
    Line(String),
    /// Ended the input (Ctrl-D).
    End,
    /// Pressed Ctrl-C.
    Interrupted,
}

/// The user's lines, read on a thread so that waiting for one can be interrupted.
struct Input {
    /// The source, until the reader thread takes it.
    source: Option<Box<dyn BufRead + Send>>,
    /// Lines from the reader thread, once it runs.
    lines: Option<mpsc::Receiver<io::Result<String>>>,
}

impl Input {
    async fn line(&mut self) -> io::Result<Option<String>> {
        if let Some(source) = self.source.take() {
            self.lines = Some(read_lines(source)?);
        }
        let Some(lines) = self.lines.as_mut() else {
            return Ok(None);
        };
        lines.recv().await.transpose()
    }
}

/// Starts a thread that reads `source` line by line, one line ahead of its reader at most.
fn read_lines(
    mut source: Box<dyn BufRead + Send>,
) -> io::Result<mpsc::Receiver<io::Result<String>>> {
    let (sender, receiver) = mpsc::channel(1);
    std::thread::Builder::new()
        .name("mew-input".to_owned())
        .spawn(move || {
            loop {
                let mut line = String::new();
                let read = match source.read_line(&mut line) {
                    Ok(0) => break,
                    Ok(_) => {
                        let end = line.trim_end_matches(['\n', '\r']).len();
                        line.truncate(end);
                        Ok(line)
                    }
                    Err(error) => Err(error),
                };
                let failed = read.is_err();
                if sender.blocking_send(read).is_err() || failed {
                    break;
                }
            }
        })?;
    Ok(receiver)
}

/// Interruptions by the user (Ctrl-C).
pub(crate) struct Interrupts(mpsc::UnboundedReceiver<()>);

impl Interrupts {
    /// Every Ctrl-C the process receives, from now on. Must be called within a tokio runtime.
    pub(crate) fn ctrl_c() -> Self {
        let (sender, interrupts) = Self::channel();
        tokio::spawn(async move {
            while tokio::signal::ctrl_c().await.is_ok() {
                if sender.send(()).is_err() {
                    break;
                }
            }
        });
        interrupts
    }

    /// Interrupts that come from the returned sender: one per `()` sent.
    pub(crate) fn channel() -> (mpsc::UnboundedSender<()>, Self) {
        let (sender, receiver) = mpsc::unbounded_channel();
        (sender, Self(receiver))
    }

    /// Resolves at the next interrupt; never, once no more can come.
    async fn next(&mut self) {
        if self.0.recv().await.is_none() {
            std::future::pending::<()>().await;
        }
    }
}

/// Prints a task's events as they arrive: the answer's chunks on `out`, appended as they come;
/// tool progress, status notes and the final state on `err`. With `json`, each event is one
/// `StreamResponse` JSON line on `out` and nothing else is printed but questions.
#[derive(Debug, Default)]
pub(crate) struct Printer {
    /// Print JSON lines.
    pub(crate) json: bool,
    /// Name the task and context in the final state line (`mew run` does, `mew chat` not).
    pub(crate) ids: bool,
    /// Text was printed on `out` that did not end with a newline.
    open: bool,
    /// Parts printed per artifact, so that a snapshot (a resumed stream starts with one)
    /// prints only what is new.
    printed: HashMap<ArtifactId, usize>,
    /// Whether any answer text was printed for the current task.
    answered: bool,
}

impl Printer {
    /// A printer for one session.
    pub(crate) fn new(json: bool, ids: bool) -> Self {
        Self {
            json,
            ids,
            ..Self::default()
        }
    }

    /// Forgets the parts printed: the next events are those of another task.
    pub(crate) fn start_task(&mut self) {
        self.printed.clear();
        self.answered = false;
    }

    /// Prints `event`.
    pub(crate) fn event(
        &mut self,
        event: &StreamResponse,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> io::Result<()> {
        if self.json {
            serde_json::to_writer(&mut *out, event)?;
            writeln!(out)?;
            return out.flush();
        }
        match event {
            StreamResponse::ArtifactUpdate(update) => {
                let artifact = &update.artifact;
                let before = if update.append {
                    self.printed.get(&artifact.artifact_id).copied()
                } else {
                    None
                };
                if before.is_none() {
                    // A new artifact, or one replaced: on a line of its own.
                    self.close(out)?;
                }
                self.parts(out, &artifact.parts)?;
                self.printed.insert(
                    artifact.artifact_id.clone(),
                    before.unwrap_or(0) + artifact.parts.len(),
                );
                if update.last_chunk {
                    self.close(out)?;
                }
            }
            StreamResponse::Task(task) => {
                for artifact in &task.artifacts {
                    let done = self.printed.get(&artifact.artifact_id).copied();
                    let new = artifact.parts.get(done.unwrap_or(0)..).unwrap_or_default();
                    if done.is_none() {
                        self.close(out)?;
                    }
                    self.parts(out, new)?;
                    self.printed
                        .insert(artifact.artifact_id.clone(), artifact.parts.len());
                }
            }
            StreamResponse::StatusUpdate(update) => {
                if update.status.state != TaskState::Working {
                    // Questions and final states are the session's to print.
                    return out.flush();
                }
                let mew = MewMetadata::read(update.metadata.as_ref());
                let line = match (&mew.tool, &mew.child, &mew.todos) {
                    (Some(tool), _, _) => tool_line(tool),
                    (None, Some(child), _) => child_line(child),
                    (None, None, Some(todos)) => Some(plan_lines(todos)),
                    (None, None, None) => update
                        .status
                        .message
                        .as_ref()
                        .map(Message::text)
                        .filter(|text| !text.is_empty())
                        .map(|text| format!("[working] {text}")),
                };
                if let Some(line) = line {
                    self.close(out)?;
                    writeln!(err, "{line}")?;
                    err.flush()?;
                }
            }
            StreamResponse::Message(message) => {
                self.close(out)?;
                self.text(out, &message.text())?;
                self.close(out)?;
            }
        }
        out.flush()
    }

    /// Prints how `task` ended: the status message as the answer when the task completed
    /// without streaming one, and the state (with the reason when it did not complete).
    pub(crate) fn end(
        &mut self,
        task: &Task,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> io::Result<()> {
        if self.json {
            return Ok(());
        }
        self.close(out)?;
        let state = task.status.state;
        let reason = status_text(task);
        if state == TaskState::Completed {
            if let Some(answer) = reason.as_deref().filter(|_| !self.answered) {
                self.text(out, answer)?;
                self.close(out)?;
            }
            out.flush()?;
            if self.ids {
                writeln!(
                    err,
                    "[completed] task {} (context {})",
                    task.id, task.context_id
                )?;
            }
            return err.flush();
        }
        out.flush()?;
        let mut line = format!("[{}]", state_name(state));
        if self.ids {
            line.push_str(&format!(" task {} (context {})", task.id, task.context_id));
        }
        if let Some(reason) = reason {
            line.push_str(if self.ids { ": " } else { " " });
            line.push_str(&reason);
        }
        writeln!(err, "{line}")?;
        err.flush()
    }

    /// Ends the answer's line if it is open.
    pub(crate) fn close(&mut self, out: &mut dyn Write) -> io::Result<()> {
        if self.open {
            out.write_all(b"\n")?;
            out.flush()?;
            self.open = false;
        }
        Ok(())
    }

    fn parts(&mut self, out: &mut dyn Write, parts: &[mew_cards::Part]) -> io::Result<()> {
        for part in parts {
            self.text(out, &part_text(part))?;
        }
        Ok(())
    }

    fn text(&mut self, out: &mut dyn Write, text: &str) -> io::Result<()> {
        if !text.is_empty() {
            out.write_all(text.as_bytes())?;
            self.open = !text.ends_with('\n');
            self.answered = true;
        }
        Ok(())
    }
}

/// The progress line of a `mew.tool` note: `  → bash: ls -la` when the call starts, `  ✓ bash`
/// or `  ✗ bash` when it ends.
pub(crate) fn tool_line(tool: &ToolNote) -> Option<String> {
    let name = &tool.name;
    match tool.phase.as_str() {
        "started" => {
            let summary = tool
                .detail
                .pointer("/input")
                .map(summarize)
                .unwrap_or_default();
            Some(if summary.is_empty() {
                format!("  → {name}")
            } else {
                format!("  → {name}: {summary}")
            })
        }
        "finished" => {
            let failed = tool
                .detail
                .pointer("/isError")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            Some(format!("  {} {name}", if failed { "✗" } else { "✓" }))
        }
        // What an MCP server says during the call: `  … mcp__s__t: 1/2 halfway`, and its log
        // messages with their level: `  … mcp__s__t: [warning] disk low`.
        "progress" => {
            let detail = &tool.detail;
            let count = match (
                detail.get("progress").and_then(Value::as_f64),
                detail.get("total").and_then(Value::as_f64),
            ) {
                (Some(done), Some(total)) => format!("{done}/{total}"),
                (Some(done), None) => done.to_string(),
                _ => String::new(),
            };
            let message = detail.get("message").and_then(Value::as_str).unwrap_or("");
            let text = [count.as_str(), message]
                .into_iter()
                .filter(|part| !part.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            Some(format!("  … {name}: {}", one_line(&text, SUMMARY_CHARS)))
        }
        "log" => {
            let level = tool.detail.get("level").and_then(Value::as_str);
            let message = tool
                .detail
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("");
            let message = one_line(message, SUMMARY_CHARS);
            Some(match level {
                Some(level) => format!("  … {name}: [{level}] {message}"),
                None => format!("  … {name}: {message}"),
            })
        }
        _ => None,
    }
}

/// The progress lines of a plan (`mew.todos`): how far it is, then each step, marked done
/// (`✓`), in progress (`→`, as it is being done) or pending (`○`).
pub(crate) fn plan_lines(todos: &[TodoItem]) -> String {
    let done = todos.iter().filter(|t| t.status == "completed").count();
    let mut lines = format!("  plan ({done} of {} done):", todos.len());
    for todo in todos {
        let (mark, text) = match todo.status.as_str() {
            "completed" => ("✓", &todo.content),
            "in_progress" => ("→", todo.active_form.as_ref().unwrap_or(&todo.content)),
            _ => ("○", &todo.content),
        };
        lines.push_str(&format!("\n    {mark} {}", one_line(text, SUMMARY_CHARS)));
    }
    lines
}

/// The progress line of a delegated task's note (`mew.child`): its own tool calls, indented
/// under the parent's, or its state when that changes: `    ↳ read the note: → read_file: x`.
pub(crate) fn child_line(child: &ChildNote) -> Option<String> {
    let description = &child.description;
    let what = match &child.tool {
        Some(tool) => tool_line(tool)?.trim_start().to_owned(),
        None => {
            let state = child.state.as_str();
            let state = state
                .strip_prefix("TASK_STATE_")
                .unwrap_or(state)
                .to_ascii_lowercase()
                .replace('_', " ");
            match child.text.as_deref() {
                Some(text) => format!("{state}: {}", one_line(text, SUMMARY_CHARS)),
                None => state,
            }
        }
    };
    Some(format!("    ↳ {description}: {what}"))
}

/// What a tool call is about, in one short line: its most telling input field, or its input as
/// JSON.
fn summarize(input: &Value) -> String {
    let text = SUMMARY_FIELDS
        .iter()
        .find_map(|field| input.get(field).and_then(Value::as_str))
        .map(str::to_owned)
        .unwrap_or_else(|| match input {
            Value::Object(fields) if fields.is_empty() => String::new(),
            Value::Null => String::new(),
            other => other.to_string(),
        });
    one_line(&text, SUMMARY_CHARS)
}

/// The first line of `text`, at most `limit` characters, with `…` when anything was cut.
pub(crate) fn one_line(text: &str, limit: usize) -> String {
    let trimmed = text.trim();
    let first = trimmed.lines().next().unwrap_or_default();
    let mut line: String = first.chars().take(limit).collect();
    if line.len() < trimmed.len() {
        line.push('…');
    }
    line
}

/// How an exchange with an agent ended.
#[derive(Debug)]
pub(crate) enum Ending {
    /// The task stopped: it completed, failed, was canceled or rejected, or it waits for
    /// something this terminal cannot give.
    Task(Box<Task>),
    /// The agent answered with a message, without a task.
    Message,
    /// The user interrupted: the task, when there was one, was canceled.
    Interrupted(Option<Box<Task>>),
}

/// What a question to the user got.
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    /// Send this.
    Text(String),
    /// Nobody can answer here.
    Unanswerable,
    /// The user pressed Ctrl-C.
    Interrupted,
}

/// The answer to a permission question sent for what the user typed: `yes` for `y` or `yes`
/// (any case), `no` for anything else.
pub(crate) fn approval(typed: &str) -> &'static str {
    match typed.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => "yes",
        _ => "no",
    }
}

/// The agent of `role` (the front agent for `None`) on the node that serves this project,
/// when one runs (its data directory says so: [`crate::node::running_node`]), with the node's
/// URL. `Ok(None)` when none runs: the caller runs the role in-process. A node that runs but
/// cannot give the card is an error (the role is not there, or the node refuses this client).
pub(crate) async fn node_agent(
    config: &Config,
    role: Option<&str>,
) -> anyhow::Result<Option<(String, RemoteAgent)>> {
    let Some(url) = crate::node::running_node(&config.node.data_dir) else {
        return Ok(None);
    };
    let agent = agent_at(config, &url, role).await.map_err(|error| {
        let what = role.map_or_else(
            || "its card".to_owned(),
            |r| format!("the card of role {r}"),
        );
        anyhow::anyhow!(
            "the node at {url} serves this project, and cannot give {what}: {:#}",
            remote_error(error)
        )
    })?;
    Ok(Some((url, agent)))
}

/// The agent of `role` (the front agent for `None`) on the node at `url`, with the configured
/// TLS settings and `MEW_TOKEN` (when set) as a bearer token.
pub(crate) async fn agent_at(
    config: &Config,
    url: &str,
    role: Option<&str>,
) -> Result<RemoteAgent, mew_transport::Error> {
    let node = NodeUrlArgs {
        node: Some(url.to_owned()),
        token: std::env::var("MEW_TOKEN").ok().filter(|t| !t.is_empty()),
    };
    let options = client_options(&node, config, None)
        .map_err(|error| mew_transport::Error::transport(format!("{error:#}")))?;
    let base = role.map_or_else(|| url.to_owned(), |role| role_base_url(url, role));
    RemoteAgent::resolve_with(&base, options).await
}

/// Sends `message` to `agent` and follows the task to its end, printing as it goes.
///
/// When the task asks for input, the question is put to the user and the reply is sent as a
/// new message of the task, and following goes on. A model role asks only for permission:
/// the user answers `allow? [y/N]`, and a terminal that is not interactive refuses. A command
/// role's question takes any line. When the task waits for a sign-in (an MCP server asks for
/// authorization), the address is shown and an interactive terminal follows the task until
/// the node's callback continues it. Ctrl-C cancels the task.
pub(crate) async fn converse<O: Write, E: Write>(
    agent: &dyn AgentTransport,
    message: Message,
    permission_asks: bool,
    terminal: &mut Terminal<O, E>,
    printer: &mut Printer,
) -> anyhow::Result<Ending> {
    let call = CallContext::anonymous();
    let mut next = Next::Send(Box::new(SendMessageRequest::new(message)));
    printer.start_task();
    loop {
        let (stream, following) = match next {
            Next::Send(request) => (agent.send_streaming_message(&call, *request).await, false),
            Next::Follow(id) => {
                let request = SubscribeToTaskRequest {
                    id,
                    ..SubscribeToTaskRequest::default()
                };
                (agent.subscribe_to_task(&call, request).await, true)
            }
        };
        let mut stream = stream.map_err(remote_error)?;
        let mut task: Option<Task> = None;
        loop {
            // The first event names the task: only then can an interrupt cancel it.
            let next = match &task {
                None => stream.next().await,
                Some(current) => tokio::select! {
                    biased;
                    () = terminal.interrupted() => {
                        return interrupt(agent, current, terminal, printer).await;
                    }
                    next = stream.next() => next,
                },
            };
            let Some(event) = next else { break };
            let event = event
                .map_err(remote_error)
                .context("the event stream failed")?;
            // A subscription starts with the task as it was shown already.
            let again = following && task.is_none();
            if !again {
                printer.event(&event, &mut terminal.out, &mut terminal.err)?;
            }
            match (&event, &mut task) {
                (StreamResponse::Message(_), _) => return Ok(Ending::Message),
                (StreamResponse::Task(snapshot), slot) => *slot = Some(snapshot.clone()),
                (_, Some(current)) => current.apply(&event),
                (_, None) => {}
            }
            // A subscription stays open while the task waits again: that is decided below.
            if following && !again && event.ends_stream() {
                break;
            }
        }
        let Some(task) = task else {
            bail!("the agent's stream ended without any task event");
        };
        let state = task.status.state;
        if state == TaskState::AuthRequired {
            let question =
                status_text(&task).unwrap_or_else(|| "The task waits for a sign-in.".to_owned());
            terminal.note(printer, &format!("! {question}\n"))?;
            if !terminal.interactive {
                terminal.note(
                    printer,
                    &format!(
                        "[auth-required] task {} goes on once the sign-in is done\n",
                        task.id
                    ),
                )?;
                return Ok(Ending::Task(Box::new(task)));
            }
            terminal.note(
                printer,
                "  waiting for the sign-in (Ctrl-C cancels the task)\n",
            )?;
            next = Next::Follow(task.id.clone());
            continue;
        }
        if state != TaskState::InputRequired {
            if !state.ends_stream() {
                bail!(
                    "the stream ended while task {} was still {}",
                    task.id,
                    state_name(state)
                );
            }
            printer.end(&task, &mut terminal.out, &mut terminal.err)?;
            return Ok(Ending::Task(Box::new(task)));
        }
        let question = status_text(&task).unwrap_or_else(|| "The task asks for input.".to_owned());
        // An MCP server's question is answered in words (or JSON), not allowed or refused.
        let elicitation = task.status.message.as_ref().is_some_and(|m| {
            MewMetadata::read(m.metadata.as_ref()).ask.as_deref()
                == Some(mew_cards::mew::ASK_ELICITATION)
        });
        match ask(
            terminal,
            printer,
            &question,
            permission_asks && !elicitation,
        )
        .await?
        {
            Reply::Text(answer) => {
                let mut reply = Message::user_text(answer);
                reply.task_id = Some(task.id.clone());
                reply.context_id = Some(task.context_id.clone());
                next = Next::Send(Box::new(SendMessageRequest::new(reply)));
            }
            Reply::Unanswerable => {
                terminal.note(
                    printer,
                    &format!(
                        "[input-required] task {} waits for an answer this terminal cannot give\n",
                        task.id
                    ),
                )?;
                return Ok(Ending::Task(Box::new(task)));
            }
            Reply::Interrupted => return interrupt(agent, &task, terminal, printer).await,
        }
    }
}

/// What [`converse`] does next: send a message, or follow a task that goes on by itself.
enum Next {
    Send(Box<SendMessageRequest>),
    Follow(mew_cards::TaskId),
}

/// Puts `question` to the user and reads the reply.
async fn ask<O: Write, E: Write>(
    terminal: &mut Terminal<O, E>,
    printer: &mut Printer,
    question: &str,
    permission: bool,
) -> anyhow::Result<Reply> {
    let mut shown = String::new();
    for (i, line) in question.lines().enumerate() {
        shown.push_str(if i == 0 { "? " } else { "  " });
        shown.push_str(line);
        shown.push('\n');
    }
    terminal.note(printer, &shown)?;
    if !terminal.interactive {
        if permission {
            terminal.note(printer, "  refused: the input is not a terminal\n")?;
            return Ok(Reply::Text("no".to_owned()));
        }
        return Ok(Reply::Unanswerable);
    }
    terminal.note(printer, if permission { "allow? [y/N] " } else { "> " })?;
    Ok(match terminal.typed().await? {
        Typed::Line(typed) if permission => Reply::Text(approval(&typed).to_owned()),
        Typed::Line(typed) => Reply::Text(typed),
        Typed::End if permission => {
            terminal.note(printer, "\n  refused: the input ended\n")?;
            Reply::Text("no".to_owned())
        }
        Typed::End => {
            terminal.note(printer, "\n")?;
            Reply::Unanswerable
        }
        Typed::Interrupted => {
            terminal.note(printer, "\n")?;
            Reply::Interrupted
        }
    })
}

/// Cancels `task` after a Ctrl-C and prints how it ended.
async fn interrupt<O: Write, E: Write>(
    agent: &dyn AgentTransport,
    task: &Task,
    terminal: &mut Terminal<O, E>,
    printer: &mut Printer,
) -> anyhow::Result<Ending> {
    if terminal.interactive {
        // The terminal echoed `^C` where the cursor was.
        terminal.note(printer, "\n")?;
    }
    let request = CancelTaskRequest {
        id: task.id.clone(),
        ..CancelTaskRequest::default()
    };
    match agent.cancel_task(&CallContext::anonymous(), request).await {
        Ok(canceled) => {
            printer.end(&canceled, &mut terminal.out, &mut terminal.err)?;
            Ok(Ending::Interrupted(Some(Box::new(canceled))))
        }
        Err(error) => {
            // It ended on its own in the meantime, most likely.
            terminal.note(
                printer,
                &format!(
                    "cannot cancel task {}: {:#}\n",
                    task.id,
                    remote_error(error)
                ),
            )?;
            Ok(Ending::Interrupted(Some(Box::new(task.clone()))))
        }
    }
}

/// Helpers for the tests of `mew run` and `mew chat`: a temporary project and a terminal
/// that records what is printed.
#[cfg(test)]
pub(crate) mod testing {
    use std::io::Cursor;
    use std::path::PathBuf;

    use mew_tests::model::ScriptedModel;
    use tempfile::TempDir;

    use super::{Interrupts, Terminal};
    use crate::config::{Config, FlagOverrides, Sources};

    /// A temporary home, project and data directory.
    pub(crate) struct Project {
        dir: TempDir,
        /// The configuration `mew --project <project>` would resolve, with the data directory
        /// in the temporary directory.
        pub(crate) config: Config,
    }

    impl Project {
        /// A project whose model roles run on `model` (over the OpenAI API), with `roles`
        /// (file name, text) in its `.mew/agents/`.
        pub(crate) fn new(model: Option<&ScriptedModel>, roles: &[(&str, &str)]) -> Self {
            Self::with_config(model, roles, "")
        }

        /// [`Project::new`] with `extra` (YAML) at the end of its configuration.
        pub(crate) fn with_config(
            model: Option<&ScriptedModel>,
            roles: &[(&str, &str)],
            extra: &str,
        ) -> Self {
            let dir = TempDir::new().unwrap();
            let project = dir.path().join("project");
            std::fs::create_dir_all(project.join(".mew/agents")).unwrap();
            std::fs::create_dir_all(dir.path().join("home")).unwrap();
            let mut config = String::new();
            if let Some(model) = model {
                config = format!(
                    "agent:\n  provider: scripted\n  model: sonnet\nproviders:\n  scripted:\n    kind: openai\n    base_url: {}/v1\n    max_retries: 0\n",
                    model.base_url()
                );
            }
            config.push_str(extra);
            if !config.is_empty() {
                std::fs::write(project.join(".mew/config.yaml"), config).unwrap();
            }
            for (file, text) in roles {
                std::fs::write(project.join(".mew/agents").join(file), text).unwrap();
            }
            let sources = Sources {
                home: Some(dir.path().join("home")),
                flags: FlagOverrides {
                    data_dir: Some(dir.path().join("data")),
                    ..FlagOverrides::default()
                },
                ..Sources::new(&project)
            };
            let config = Config::load(&sources).unwrap().resolve().unwrap();
            Self { dir, config }
        }

        /// A path in the project directory.
        pub(crate) fn path(&self, relative: &str) -> PathBuf {
            self.dir.path().join("project").join(relative)
        }
    }

    /// A role file: `frontmatter` lines after the name and description.
    pub(crate) fn role(name: &str, frontmatter: &str) -> String {
        format!(
            "---\nname: {name}\ndescription: A test role.\n{frontmatter}---\nYou help with tests.\n"
        )
    }

    /// A terminal that reads `input` and records its output; nothing interrupts it.
    pub(crate) fn terminal(input: &str, interactive: bool) -> Terminal<Vec<u8>, Vec<u8>> {
        let (_, interrupts) = Interrupts::channel();
        Terminal::new(
            Cursor::new(input.to_owned()),
            Vec::new(),
            Vec::new(),
            interactive,
            interrupts,
        )
    }

    /// What the terminal printed on `out` and on `err`.
    pub(crate) fn printed(terminal: &Terminal<Vec<u8>, Vec<u8>>) -> (String, String) {
        (
            String::from_utf8_lossy(&terminal.out).into_owned(),
            String::from_utf8_lossy(&terminal.err).into_owned(),
        )
    }
}

#[cfg(test)]
mod tests {
    use mew_cards::{
        Artifact, ContextId, Part, TaskArtifactUpdateEvent, TaskId, TaskStatus,
        TaskStatusUpdateEvent,
    };
    use serde_json::json;

    use super::*;

    fn task(state: TaskState, message: Option<&str>) -> Task {
        Task {
            id: TaskId::from("t1".to_owned()),
            context_id: ContextId::from("c1".to_owned()),
            status: match message {
                Some(text) => TaskStatus::with_message(state, Message::agent_text(text)),
                None => TaskStatus::new(state),
            },
            ..Task::default()
        }
    }

    fn chunk(id: &str, text: &str, append: bool) -> StreamResponse {
        StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
            task_id: TaskId::from("t1".to_owned()),
            context_id: ContextId::from("c1".to_owned()),
            artifact: Artifact {
                artifact_id: ArtifactId::from(id.to_owned()),
                parts: vec![Part::text(text)],
                ..Artifact::default()
            },
            append,
            ..TaskArtifactUpdateEvent::default()
        })
    }

    fn tool_note(tool: Value) -> StreamResponse {
        let metadata = json!({"mew": {"tool": tool}});
        StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: TaskId::from("t1".to_owned()),
            context_id: ContextId::from("c1".to_owned()),
            status: TaskStatus::new(TaskState::Working),
            metadata: serde_json::from_value(metadata).unwrap(),
        })
    }

    /// Prints `events` and then the end of `last`, and returns (out, err).
    fn print(
        printer: &mut Printer,
        events: &[StreamResponse],
        last: Option<&Task>,
    ) -> (String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        for event in events {
            printer.event(event, &mut out, &mut err).unwrap();
        }
        if let Some(task) = last {
            printer.end(task, &mut out, &mut err).unwrap();
        }
        (
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    #[test]
    fn chunks_are_appended_and_tool_lines_go_to_err() {
        let mut printer = Printer::new(false, true);
        let events = [
            StreamResponse::Task(task(TaskState::Submitted, None)),
            chunk("a1", "Let me ", false),
            chunk("a1", "look.", true),
            tool_note(json!({"phase": "started", "id": "c1", "name": "bash",
                             "detail": {"input": {"command": "ls -la"}}})),
            tool_note(json!({"phase": "finished", "id": "c1", "name": "bash",
                             "detail": {"isError": false}})),
            chunk("a1", " Two files.", true),
        ];
        let (out, err) = print(
            &mut printer,
            &events,
            Some(&task(TaskState::Completed, Some("Let me look. Two files."))),
        );
        // The tool lines end the open answer line; the status message is not printed again.
        assert_eq!(out, "Let me look.\n Two files.\n");
        assert_eq!(
            err,
            "  → bash: ls -la\n  ✓ bash\n[completed] task t1 (context c1)\n"
        );
    }

    #[test]
    fn a_resumed_stream_prints_only_what_is_new() {
        let mut printer = Printer::new(false, false);
        let mut snapshot = task(TaskState::Working, None);
        snapshot.artifacts.push(Artifact {
            artifact_id: ArtifactId::from("a1".to_owned()),
            parts: vec![Part::text("Asked. "), Part::text("Allowed: ")],
            ..Artifact::default()
        });
        let events = [
            chunk("a1", "Asked. ", false),
            chunk("a1", "Allowed: ", true),
            // The stream of the reply starts with the task as it is.
            StreamResponse::Task(snapshot),
            chunk("a1", "done.", true),
        ];
        let (out, err) = print(
            &mut printer,
            &events,
            Some(&task(TaskState::Completed, None)),
        );
        assert_eq!(out, "Asked. Allowed: done.\n");
        assert_eq!(err, "");
    }

    #[test]
    fn the_status_message_is_the_answer_when_nothing_streamed() {
        let mut printer = Printer::new(false, false);
        let (out, err) = print(
            &mut printer,
            &[StreamResponse::Task(task(TaskState::Submitted, None))],
            Some(&task(TaskState::Completed, Some("(no answer)"))),
        );
        assert_eq!(out, "(no answer)\n");
        assert_eq!(err, "");
    }

    #[test]
    fn a_failure_prints_its_state_and_reason() {
        let failed = task(TaskState::Failed, Some("the model service refused"));
        let (out, err) = print(&mut Printer::new(false, false), &[], Some(&failed));
        assert_eq!(
            (out.as_str(), err.as_str()),
            ("", "[failed] the model service refused\n")
        );
        let (_, err) = print(&mut Printer::new(false, true), &[], Some(&failed));
        assert_eq!(
            err,
            "[failed] task t1 (context c1): the model service refused\n"
        );
        let canceled = task(TaskState::Canceled, None);
        let (_, err) = print(&mut Printer::new(false, false), &[], Some(&canceled));
        assert_eq!(err, "[canceled]\n");
    }

    #[test]
    fn json_prints_one_stream_response_per_line_and_nothing_else() {
        let mut printer = Printer::new(true, true);
        let events = [
            chunk("a1", "Hi", false),
            tool_note(json!({"phase": "started", "id": "c1", "name": "glob", "detail": {}})),
        ];
        let (out, err) = print(
            &mut printer,
            &events,
            Some(&task(TaskState::Completed, None)),
        );
        let lines: Vec<Value> = out
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[0]["artifactUpdate"]["artifact"]["parts"][0]["text"],
            "Hi"
        );
        assert_eq!(
            lines[1]["statusUpdate"]["metadata"]["mew"]["tool"]["name"],
            "glob"
        );
        assert_eq!(err, "");
    }

    #[test]
    fn tool_lines_are_short() {
        let tool_line = |note: Value| tool_line(&serde_json::from_value(note).unwrap());
        let started = |input: Value| {
            tool_line(
                json!({"phase": "started", "id": "c", "name": "t", "detail": {"input": input}}),
            )
        };
        assert_eq!(
            started(json!({"file_path": "src/main.rs", "limit": 10})).as_deref(),
            Some("  → t: src/main.rs")
        );
        assert_eq!(
            started(json!({"command": "echo a\necho b"})).as_deref(),
            Some("  → t: echo a…")
        );
        assert_eq!(started(json!({})).as_deref(), Some("  → t"));
        assert_eq!(
            started(json!({"n": 1})).as_deref(),
            Some("  → t: {\"n\":1}")
        );
        let long = "x".repeat(100);
        assert_eq!(
            started(json!({"pattern": long})),
            Some(format!("  → t: {}…", "x".repeat(SUMMARY_CHARS)))
        );
        assert_eq!(
            tool_line(
                json!({"phase": "finished", "id": "c", "name": "bash", "detail": {"isError": true}})
            )
            .as_deref(),
            Some("  ✗ bash")
        );
        assert_eq!(
            tool_line(json!({"phase": "progress", "id": "c", "name": "mcp__s__t",
                "detail": {"progress": 1.0, "total": 2.0, "message": "halfway"}}))
            .as_deref(),
            Some("  … mcp__s__t: 1/2 halfway")
        );
        assert_eq!(
            tool_line(json!({"phase": "log", "id": "c", "name": "mcp__s__t",
                "detail": {"level": "warning", "message": "disk\nlow"}}))
            .as_deref(),
            Some("  … mcp__s__t: [warning] disk…")
        );
        assert_eq!(
            tool_line(json!({"phase": "other", "id": "c", "name": "bash"})),
            None
        );
    }

    #[test]
    fn a_plan_shows_each_step_and_how_far_it_is() {
        let step = |content: &str, status: &str, active: Option<&str>| TodoItem {
            content: content.to_owned(),
            status: status.to_owned(),
            active_form: active.map(str::to_owned),
        };
        assert_eq!(
            plan_lines(&[
                step("Read the notes", "completed", Some("Reading the notes")),
                step(
                    "Write the summary",
                    "in_progress",
                    Some("Writing the summary")
                ),
                step("Check spelling", "in_progress", None),
                step("Send it", "pending", None),
            ]),
            "  plan (1 of 4 done):\n    ✓ Read the notes\n    → Writing the summary\n    → Check \
             spelling\n    ○ Send it"
        );
    }

    #[test]
    fn child_lines_show_the_childs_tools_and_states() {
        let child = |extra: Value| {
            let mut note = json!({"taskId": "t1", "agent": "reader", "description": "read it"});
            if let (Some(note), Some(extra)) = (note.as_object_mut(), extra.as_object()) {
                note.extend(extra.clone());
            }
            child_line(&serde_json::from_value(note).unwrap())
        };
        assert_eq!(
            child(json!({"state": "TASK_STATE_WORKING", "tool": {"phase": "started", "name": "grep", "detail": {"input": {"pattern": "fn main"}}}}))
                .as_deref(),
            Some("    ↳ read it: → grep: fn main")
        );
        assert_eq!(
            child(json!({"state": "TASK_STATE_INPUT_REQUIRED", "text": "may I?\nsecond line"}))
                .as_deref(),
            Some("    ↳ read it: input required: may I?…")
        );
        assert_eq!(
            child(json!({"state": "TASK_STATE_WORKING"})).as_deref(),
            Some("    ↳ read it: working")
        );
        // A note without its child's id and agent is none: nothing is shown for it.
        assert!(
            serde_json::from_value::<ChildNote>(json!({"state": "TASK_STATE_WORKING"})).is_err()
        );
    }

    #[test]
    fn only_y_and_yes_approve() {
        for (typed, sent) in [
            ("y", "yes"),
            ("Y", "yes"),
            (" yes ", "yes"),
            ("YES", "yes"),
            ("", "no"),
            ("n", "no"),
            ("yes please", "no"),
            ("ok", "no"),
        ] {
            assert_eq!(approval(typed), sent, "{typed:?}");
        }
    }

    #[tokio::test]
    async fn lines_come_without_their_endings_then_the_end() {
        let (_, interrupts) = Interrupts::channel();
        let mut terminal = Terminal::new(
            std::io::Cursor::new("one\r\ntwo\n\nthree"),
            Vec::new(),
            Vec::new(),
            true,
            interrupts,
        );
        let mut lines = Vec::new();
        while let Typed::Line(line) = terminal.typed().await.unwrap() {
            lines.push(line);
        }
        assert_eq!(lines, ["one", "two", "", "three"]);
        assert_eq!(terminal.typed().await.unwrap(), Typed::End);
    }

    #[tokio::test]
    async fn an_interrupt_wins_over_a_waiting_line() {
        let (sender, interrupts) = Interrupts::channel();
        let mut terminal = Terminal::new(
            std::io::Cursor::new("line\n"),
            Vec::new(),
            Vec::new(),
            true,
            interrupts,
        );
        sender.send(()).unwrap();
        assert_eq!(terminal.typed().await.unwrap(), Typed::Interrupted);
        assert_eq!(
            terminal.typed().await.unwrap(),
            Typed::Line("line".to_owned())
        );
    }

    /// An agent whose task waits for a sign-in, then, once followed, goes on and completes.
    struct SignInAgent {
        follows: std::sync::atomic::AtomicUsize,
    }

    fn update(state: TaskState, text: Option<&str>) -> StreamResponse {
        StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: TaskId::from("t1".to_owned()),
            context_id: ContextId::from("c1".to_owned()),
            status: match text {
                Some(text) => TaskStatus::with_message(state, Message::agent_text(text)),
                None => TaskStatus::new(state),
            },
            metadata: None,
        })
    }

    const SIGN_IN: &str = "The MCP server s asks you to sign in. Open http://as.test/authorize";

    #[async_trait::async_trait]
    impl AgentTransport for SignInAgent {
        async fn card(&self) -> Result<mew_cards::AgentCard, mew_transport::Error> {
            Ok(mew_cards::AgentCard::default())
        }
        async fn send_message(
            &self,
            _: &CallContext,
            _: SendMessageRequest,
        ) -> Result<mew_cards::SendMessageResponse, mew_transport::Error> {
            Err(mew_transport::Error::transport("not used"))
        }
        async fn send_streaming_message(
            &self,
            _: &CallContext,
            _: SendMessageRequest,
        ) -> Result<mew_transport::EventStream, mew_transport::Error> {
            let events = vec![
                Ok(StreamResponse::Task(task(TaskState::Working, None))),
                Ok(update(TaskState::AuthRequired, Some(SIGN_IN))),
            ];
            Ok(mew_transport::EventStream::new(futures_util::stream::iter(
                events,
            )))
        }
        async fn get_task(
            &self,
            _: &CallContext,
            _: mew_cards::GetTaskRequest,
        ) -> Result<Task, mew_transport::Error> {
            Err(mew_transport::Error::transport("not used"))
        }
        async fn list_tasks(
            &self,
            _: &CallContext,
            _: mew_cards::ListTasksRequest,
        ) -> Result<mew_cards::ListTasksResponse, mew_transport::Error> {
            Err(mew_transport::Error::transport("not used"))
        }
        async fn cancel_task(
            &self,
            _: &CallContext,
            _: CancelTaskRequest,
        ) -> Result<Task, mew_transport::Error> {
            Err(mew_transport::Error::transport("not used"))
        }
        async fn subscribe_to_task(
            &self,
            _: &CallContext,
            request: SubscribeToTaskRequest,
        ) -> Result<mew_transport::EventStream, mew_transport::Error> {
            assert_eq!(request.id, TaskId::from("t1".to_owned()));
            self.follows
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // The subscription starts with the task as it is, then what follows.
            let events = vec![
                Ok(StreamResponse::Task(task(
                    TaskState::AuthRequired,
                    Some(SIGN_IN),
                ))),
                Ok(update(TaskState::Working, None)),
                Ok(update(TaskState::Completed, Some("Signed in and done."))),
            ];
            Ok(mew_transport::EventStream::new(futures_util::stream::iter(
                events,
            )))
        }
    }

    #[tokio::test]
    async fn a_sign_in_is_shown_and_an_interactive_terminal_follows_the_task_until_it_goes_on() {
        let agent = SignInAgent {
            follows: Default::default(),
        };
        let mut terminal = crate::cli::local::testing::terminal("", true);
        let mut printer = Printer::new(false, true);
        let ending = converse(
            &agent,
            Message::user_text("hi"),
            true,
            &mut terminal,
            &mut printer,
        )
        .await
        .unwrap();
        let Ending::Task(done) = ending else {
            panic!("no task")
        };
        assert_eq!(done.status.state, TaskState::Completed);
        assert_eq!(agent.follows.load(std::sync::atomic::Ordering::SeqCst), 1);
        let (_, err) = crate::cli::local::testing::printed(&terminal);
        assert_eq!(err.matches("http://as.test/authorize").count(), 1, "{err}");
        assert!(err.contains("waiting for the sign-in"), "{err}");

        // A terminal that is not interactive says how the task goes on, and leaves it.
        let mut terminal = crate::cli::local::testing::terminal("", false);
        let mut printer = Printer::new(false, true);
        let ending = converse(
            &agent,
            Message::user_text("hi"),
            true,
            &mut terminal,
            &mut printer,
        )
        .await
        .unwrap();
        let Ending::Task(left) = ending else {
            panic!("no task")
        };
        assert_eq!(left.status.state, TaskState::AuthRequired);
        assert_eq!(agent.follows.load(std::sync::atomic::Ordering::SeqCst), 1);
        let (_, err) = crate::cli::local::testing::printed(&terminal);
        assert!(err.contains("[auth-required] task t1 goes on"), "{err}");
    }
}
