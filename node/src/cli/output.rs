//! Printing shared by the client subcommands: tasks, stream events, task states and outcomes.
//!
//! `mew send`, `mew tasks get` and `mew tasks watch` all print through here, so a task looks
//! the same whichever command shows it.

use std::io::Write;

use anyhow::{Context as _, bail};
use futures_util::StreamExt as _;
use mew_cards::{Artifact, Message, Part, PartContent, Role, StreamResponse, Task, TaskState};
use mew_transport::EventStream;

use super::remote::remote_error;

/// Every state a task can be in, in the spec's order.
const STATES: [TaskState; 8] = [
    TaskState::Submitted,
    TaskState::Working,
    TaskState::Completed,
    TaskState::Failed,
    TaskState::Canceled,
    TaskState::InputRequired,
    TaskState::Rejected,
    TaskState::AuthRequired,
];

/// Width of the `key:` column of [`render_task`].
const KEY_WIDTH: usize = 10;

/// A state as the command line names it: lowercase with dashes (`input-required`).
pub(crate) fn state_name(state: TaskState) -> &'static str {
    match state {
        TaskState::Unspecified => "unspecified",
        TaskState::Submitted => "submitted",
        TaskState::Working => "working",
        TaskState::Completed => "completed",
        TaskState::Failed => "failed",
        TaskState::Canceled => "canceled",
        TaskState::InputRequired => "input-required",
        TaskState::Rejected => "rejected",
        TaskState::AuthRequired => "auth-required",
    }
}

/// Parses a state named as the command line does (`input-required`), or as the spec does
/// (`TASK_STATE_INPUT_REQUIRED`); case does not matter.
pub(crate) fn parse_state(text: &str) -> Result<TaskState, String> {
    let name = text.trim().to_ascii_lowercase().replace('_', "-");
    let name = name.strip_prefix("task-state-").unwrap_or(&name);
    STATES
        .into_iter()
        .find(|state| state_name(*state) == name)
        .ok_or_else(|| {
            let known: Vec<&str> = STATES.into_iter().map(state_name).collect();
            format!("unknown task state {text:?}; known: {}", known.join(", "))
        })
}

/// One part as text: text as is, data as compact JSON, files as `[file name (media type)]`
/// (with the URL of a file given by URL).
pub(crate) fn part_text(part: &Part) -> String {
    let file = |url: Option<&str>| {
        let mut text = String::from("[file");
        for piece in [part.filename.as_str(), url.unwrap_or_default()] {
            if !piece.is_empty() {
                text.push(' ');
                text.push_str(piece);
            }
        }
        if !part.media_type.is_empty() {
            text.push_str(&format!(" ({})", part.media_type));
        }
        text.push(']');
        text
    };
    match &part.content {
        PartContent::Text(text) => text.clone(),
        PartContent::Raw(_) => file(None),
        PartContent::Url(url) => file(Some(url)),
        PartContent::Data(value) => value.to_string(),
    }
}

/// The parts of a message or artifact as text, one part after another, separated by newlines.
pub(crate) fn parts_text(parts: &[Part]) -> String {
    parts.iter().map(part_text).collect::<Vec<_>>().join("\n")
}

/// A direct message's text, ending with a newline.
pub(crate) fn render_message(message: &Message) -> String {
    let mut out = parts_text(&message.parts);
    out.push('\n');
    out
}

/// A task as `key: value` lines (task, context, state, updated, message), its history when
/// `history` is set, then each artifact: an `artifact:` line and its parts, unindented.
pub(crate) fn render_task(task: &Task, history: bool) -> String {
    let mut out = String::new();
    field(&mut out, "task", task.id.as_str());
    field(&mut out, "context", task.context_id.as_str());
    field(&mut out, "state", state_name(task.status.state));
    if let Some(timestamp) = &task.status.timestamp {
        field(&mut out, "updated", &timestamp.to_string());
    }
    if let Some(text) = status_text(task) {
        field(&mut out, "message", &text);
    }
    if let Some(trace) = crate::telemetry::trace_id_of_task(task) {
        field(&mut out, "trace", &trace);
    }
    if history && !task.history.is_empty() {
        out.push_str("history:\n");
        for message in &task.history {
            let who = match message.role {
                Role::User => "user:",
                Role::Agent => "agent:",
                Role::Unspecified => "?:",
            };
            push_indented(
                &mut out,
                &format!("  {who:<7}"),
                &parts_text(&message.parts),
            );
        }
    }
    for artifact in &task.artifacts {
        field(&mut out, "artifact", artifact_label(artifact));
        let text = parts_text(&artifact.parts);
        if !text.is_empty() {
            out.push_str(&text);
            if !text.ends_with('\n') {
                out.push('\n');
            }
        }
    }
    out
}

/// The text of a task's status message, if it has any.
pub(crate) fn status_text(task: &Task) -> Option<String> {
    let text = parts_text(&task.status.message.as_ref()?.parts);
    (!text.is_empty()).then_some(text)
}

/// `text` on one line, at most `width` characters (the last one `…` when cut).
pub(crate) fn one_line(text: &str, width: usize) -> String {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.chars().count() <= width {
        return text;
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// An artifact's name, or its id when it has none.
fn artifact_label(artifact: &Artifact) -> &str {
    if artifact.name.is_empty() {
        artifact.artifact_id.as_str()
    } else {
        &artifact.name
    }
}

/// Appends `key: value`, the value's later lines indented under its first.
fn field(out: &mut String, key: &str, value: &str) {
    push_indented(out, &format!("{:<KEY_WIDTH$}", format!("{key}:")), value);
}

/// Appends `prefix` and `text`, the text's later lines indented by the prefix's width.
fn push_indented(out: &mut String, prefix: &str, text: &str) {
    let indent = " ".repeat(prefix.chars().count());
    for (i, line) in text.split('\n').enumerate() {
        out.push_str(if i == 0 { prefix } else { &indent });
        out.push_str(line);
        out.push('\n');
    }
}

/// Prints the events of a stream as they arrive.
///
/// A task is a `task <id> (context <id>)` line, then its state; a status update is
/// `[state] message`; artifact chunks are printed as they come, an appended chunk on the same
/// line as the one before it.
#[derive(Debug, Default)]
pub(crate) struct EventPrinter {
    /// Text was printed that did not end with a newline.
    open: bool,
}

impl EventPrinter {
    /// What to print for `event`.
    pub(crate) fn event(&mut self, event: &StreamResponse) -> String {
        let mut out = String::new();
        match event {
            StreamResponse::ArtifactUpdate(update) => {
                if !update.append {
                    self.close(&mut out);
                }
                self.chunk(&mut out, &parts_text(&update.artifact.parts));
                if update.last_chunk {
                    self.close(&mut out);
                }
            }
            StreamResponse::Task(task) => {
                self.close(&mut out);
                out.push_str(&format!("task {} (context {})\n", task.id, task.context_id));
                out.push_str(&state_line(task.status.state, status_text(task)));
                for artifact in &task.artifacts {
                    self.chunk(&mut out, &parts_text(&artifact.parts));
                    self.close(&mut out);
                }
            }
            StreamResponse::StatusUpdate(update) => {
                self.close(&mut out);
                let text = update
                    .status
                    .message
                    .as_ref()
                    .map(|message| parts_text(&message.parts))
                    .filter(|text| !text.is_empty());
                out.push_str(&state_line(update.status.state, text));
            }
            StreamResponse::Message(message) => {
                self.close(&mut out);
                out.push_str(&render_message(message));
            }
        }
        out
    }

    /// What to print when the stream ends: a newline if a chunk left the line open.
    pub(crate) fn finish(&mut self) -> String {
        let mut out = String::new();
        self.close(&mut out);
        out
    }

    fn chunk(&mut self, out: &mut String, text: &str) {
        if !text.is_empty() {
            out.push_str(text);
            self.open = !text.ends_with('\n');
        }
    }

    fn close(&mut self, out: &mut String) {
        if self.open {
            out.push('\n');
            self.open = false;
        }
    }
}

/// `[state]`, or `[state] text`, ending with a newline.
fn state_line(state: TaskState, text: Option<String>) -> String {
    match text {
        Some(text) => format!("[{}] {text}\n", state_name(state)),
        None => format!("[{}]\n", state_name(state)),
    }
}

/// Prints a stream's events to `out` as they arrive (with `json`, one `StreamResponse` per
/// line), and returns the task they describe, or `None` when a direct message answered.
///
/// Fails when the stream breaks or is empty, or ends while the task is still running.
pub(crate) async fn follow(
    mut stream: EventStream,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<Option<Task>> {
    let mut printer = EventPrinter::default();
    let mut task: Option<Task> = None;
    let mut answered = false;
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                out.write_all(printer.finish().as_bytes())?;
                return Err(remote_error(error)).context("the event stream failed");
            }
        };
        if json {
            serde_json::to_writer(&mut *out, &event)?;
            writeln!(out)?;
        } else {
            out.write_all(printer.event(&event).as_bytes())?;
        }
        out.flush()?;
        match (&event, &mut task) {
            (StreamResponse::Message(_), _) => answered = true,
            (StreamResponse::Task(snapshot), slot) => *slot = Some(snapshot.clone()),
            (_, Some(current)) => current.apply(&event),
            (StreamResponse::StatusUpdate(update), slot @ None) => {
                *slot = Some(Task {
                    id: update.task_id.clone(),
                    context_id: update.context_id.clone(),
                    status: update.status.clone(),
                    ..Task::default()
                });
            }
            (StreamResponse::ArtifactUpdate(_), None) => {}
        }
    }
    out.write_all(printer.finish().as_bytes())?;
    out.flush()?;
    match task {
        _ if answered => Ok(None),
        None => bail!("the stream ended without any task event"),
        Some(task) if !task.status.state.ends_stream() => bail!(
            "the stream ended while task {} was still {}",
            task.id,
            state_name(task.status.state)
        ),
        Some(task) => Ok(Some(task)),
    }
}

/// Fails when a task ended failed, rejected or canceled. The error has the reason (the status
/// message) when `with_reason`, which the human forms leave out: they printed it already.
pub(crate) fn outcome(task: &Task, with_reason: bool) -> anyhow::Result<()> {
    let ended = match task.status.state {
        TaskState::Failed => "failed",
        TaskState::Rejected => "was rejected",
        TaskState::Canceled => "was canceled",
        TaskState::Unspecified
        | TaskState::Submitted
        | TaskState::Working
        | TaskState::Completed
        | TaskState::InputRequired
        | TaskState::AuthRequired => return Ok(()),
    };
    match status_text(task).filter(|_| with_reason) {
        Some(reason) => bail!("task {} {ended}: {reason}", task.id),
        None => bail!("task {} {ended}", task.id),
    }
}

/// What the user may do next with a task that stopped without ending: answer it with
/// `{reply} --task <id> "<answer>"` (`reply` being `mew send <target>`), or follow it with
/// `mew tasks watch`; `node_flag` (` --node URL` or nothing) ends both.
pub(crate) fn next_step(task: &Task, reply: &str, node_flag: &str) -> Option<String> {
    match task.status.state {
        TaskState::InputRequired | TaskState::AuthRequired => Some(format!(
            "reply with: {reply} --task {} \"<answer>\"{node_flag}\n",
            task.id
        )),
        TaskState::Submitted | TaskState::Working => Some(format!(
            "follow it with: mew tasks watch {}{node_flag}\n",
            task.id
        )),
        TaskState::Unspecified
        | TaskState::Completed
        | TaskState::Failed
        | TaskState::Canceled
        | TaskState::Rejected => None,
    }
}

/// Writes `value` as pretty JSON and a newline.
///
/// The text is made first, so that a failed write (a closed pipe: `mew tasks list --json |
/// head`) is the `io::Error` itself, which `main` recognizes, not wrapped in a serde error.
pub(crate) fn write_json(out: &mut dyn Write, value: &impl serde::Serialize) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    out.write_all(text.as_bytes())?;
    Ok(())
}
