//! The `bash` tool: runs a shell command in its own process group, with a timeout and a capped output.

use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt as _};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{Category, Tool, ToolContext, ToolOutput, parse_input};
use crate::process::{BASE_ENV, ProcessGroup, command, pass_env};

/// The timeout when the call names none.
const DEFAULT_TIMEOUT_MS: u64 = 120_000;

/// The longest timeout a call may ask for.
const MAX_TIMEOUT_MS: u64 = 600_000;

/// How long a canceled command gets between SIGTERM and SIGKILL.
const CANCEL_GRACE: Duration = Duration::from_secs(2);

/// How long the output pipes may stay open once the process group is dead: a process that left
/// the group (with `setsid`) may hold them forever.
const DRAIN: Duration = Duration::from_millis(500);

/// The most characters of output one answer holds; the middle of longer output is cut.
const MAX_OUTPUT_CHARS: usize = 30_000;

/// Bytes of each stream kept in memory, at its start and at its end; the middle of a larger
/// stream is dropped while it is read.
const KEEP_BYTES: usize = 256 * 1024;

/// Runs shell commands.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Bash;

/// The input of `bash`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    command: String,
    #[serde(default)]
    timeout_ms: Option<u64>,
    /// For the user (the runtime shows it); the tool itself ignores it.
    #[serde(rename = "description", default)]
    _description: Option<IgnoredAny>,
}

#[async_trait]
impl Tool for Bash {
    fn name(&self) -> &str {
        "bash"
    }

    fn description(&self) -> String {
        format!(
            "Runs a shell command with `sh -c` in the working directory and returns its output \
             and exit code.\n\
             - The environment holds only {vars}; no secrets are passed on.\n\
             - timeout_ms defaults to {DEFAULT_TIMEOUT_MS} (2 minutes), at most \
             {MAX_TIMEOUT_MS}; at the timeout the command and everything it started are \
             killed.\n\
             - Background processes (`cmd &`) are killed when the command exits: do not start \
             servers or watchers that must outlive the call.\n\
             - stdout and stderr are returned separately; output over {MAX_OUTPUT_CHARS} \
             characters keeps its start and end and says how much was cut.\n\
             - A non-zero exit code is reported as an error, with the output.\n\
             - Prefer read_file, edit_file, write_file, glob and grep over cat, sed, echo \
             redirection, find and grep: they are safer and their output is made for you. \
             Quote paths that contain spaces.",
            vars = BASE_ENV.join(", ")
        )
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": {
                    "type": "string",
                    "description": "The shell command to run (with sh -c)."
                },
                "timeout_ms": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_TIMEOUT_MS,
                    "description": format!("Milliseconds before the command is killed (default {DEFAULT_TIMEOUT_MS}, at most {MAX_TIMEOUT_MS}).")
                },
                "description": {
                    "type": "string",
                    "description": "What the command does, in 5-10 words, for the user."
                }
            },
            "required": ["command"],
            "additionalProperties": false
        })
    }

    fn category(&self) -> Category {
        Category::Exec
    }

    async fn call(&self, input: Value, ctx: &ToolContext) -> ToolOutput {
        let input: Input = match parse_input(self.name(), input) {
            Ok(input) => input,
            Err(err) => return err,
        };
        if input.command.trim().is_empty() {
            return ToolOutput::error("command is empty");
        }
        let timeout_ms = input
            .timeout_ms
            .unwrap_or(DEFAULT_TIMEOUT_MS)
            .clamp(1, MAX_TIMEOUT_MS);
        run(&input.command, Duration::from_millis(timeout_ms), ctx).await
    }
}

/// How the command ended.
enum Ending {
    /// It exited (or was killed by someone else).
    Exited(ExitStatus),
    /// The timeout killed it.
    TimedOut,
    /// The task was canceled.
    Canceled,
}

/// Runs `script` with `sh -c` in `ctx.cwd` and renders the answer.
///
/// # Cancel safety
///
/// Dropping the future kills the command's process group.
async fn run(script: &str, timeout: Duration, ctx: &ToolContext) -> ToolOutput {
    if ctx.cancel.is_cancelled() {
        return ToolOutput::error("canceled");
    }
    let mut cmd = command("sh", ["-c", script]);
    cmd.current_dir(&ctx.cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    pass_env(&mut cmd, &ctx.env, BASE_ENV.iter().copied());
    let mut group = match ProcessGroup::spawn(&mut cmd) {
        Ok(group) => group,
        Err(err) => {
            return ToolOutput::error(format!("cannot start sh in {}: {err}", ctx.cwd.display()));
        }
    };
    let stop_reading = CancellationToken::new();
    // Dropped early, the call stops its readers too (dropping `group` kills the command).
    let _stop_on_drop = stop_reading.clone().drop_guard();
    let stdout = group
        .child_mut()
        .stdout
        .take()
        .map(|out| read_capped(out, stop_reading.clone()));
    let stderr = group
        .child_mut()
        .stderr
        .take()
        .map(|err| read_capped(err, stop_reading.clone()));

    let ending = tokio::select! {
        status = group.wait() => match status {
            Ok(status) => Ending::Exited(status),
            Err(err) => return ToolOutput::error(format!("cannot wait for the command: {err}")),
        },
        () = tokio::time::sleep(timeout) => Ending::TimedOut,
        () = ctx.cancel.cancelled() => Ending::Canceled,
    };
    match ending {
        // Whatever the command left running in the background goes with it.
        Ending::Exited(_) => group.kill(),
        Ending::TimedOut => {
            group.kill();
            let _ = group.wait().await;
        }
        Ending::Canceled => {
            let _ = group.terminate(CANCEL_GRACE).await;
        }
    }
    // The group is dead, so the pipes reach their end unless a process escaped the group
    // (with setsid) and holds them: the readers stop after DRAIN and keep what they read.
    let stopper = tokio::spawn(async move {
        tokio::time::sleep(DRAIN).await;
        stop_reading.cancel();
    });
    let out = collect(stdout).await;
    let err = collect(stderr).await;
    stopper.abort();
    render(&ending, &out, &err, timeout)
}

/// Waits for a reader task; a missing or failed reader yields nothing.
async fn collect(reader: Option<JoinHandle<Captured>>) -> Captured {
    match reader {
        Some(handle) => handle.await.unwrap_or_default(),
        None => Captured::default(),
    }
}

/// The start and end of a stream, and its full length.
#[derive(Debug, Default)]
struct Captured {
    head: Vec<u8>,
    /// The last bytes once `head` is full, at most [`KEEP_BYTES`] (oldest first).
    tail: Vec<u8>,
    total: u64,
}

impl Captured {
    /// Adds bytes read from the stream.
    fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = KEEP_BYTES.saturating_sub(self.head.len());
        let into_head = room.min(bytes.len());
        self.head.extend_from_slice(&bytes[..into_head]);
        bytes = &bytes[into_head..];
        if bytes.is_empty() {
            return;
        }
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > 2 * KEEP_BYTES {
            let excess = self.tail.len() - KEEP_BYTES;
            self.tail.drain(..excess);
        }
    }

    /// The kept text; a marker stands for the bytes dropped from the middle.
    fn text(&self) -> String {
        let mut tail = self.tail.as_slice();
        if tail.len() > KEEP_BYTES {
            tail = &tail[tail.len() - KEEP_BYTES..];
        }
        let dropped = self.total - (self.head.len() + tail.len()) as u64;
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if dropped > 0 {
            text.push_str(&format!("\n[... {dropped} bytes dropped ...]\n"));
        }
        text.push_str(&String::from_utf8_lossy(tail));
        text
    }
}

/// Reads `stream` to its end (or until `stop`), keeping its start and end, in a task.
fn read_capped(
    mut stream: impl AsyncRead + Unpin + Send + 'static,
    stop: CancellationToken,
) -> JoinHandle<Captured> {
    tokio::spawn(async move {
        let mut captured = Captured::default();
        let mut chunk = vec![0u8; 16 * 1024];
        loop {
            tokio::select! {
                // Stop first: an escaped process may write without end.
                biased;
                () = stop.cancelled() => break,
                read = stream.read(&mut chunk) => match read {
                    Ok(0) | Err(_) => break,
                    Ok(n) => captured.push(&chunk[..n]),
                },
            }
        }
        captured
    })
}

/// The answer: stdout and stderr sections, then how the command ended.
fn render(ending: &Ending, out: &Captured, err: &Captured, timeout: Duration) -> ToolOutput {
    let (out_text, err_text) = (out.text(), err.text());
    let (out_budget, err_budget) = budgets(
        out_text.chars().count(),
        err_text.chars().count(),
        MAX_OUTPUT_CHARS,
    );
    let stdout = cap(&out_text, out_budget, out.total);
    let stderr = cap(&err_text, err_budget, err.total);
    let mut text = String::new();
    if !out_text.is_empty() {
        text.push_str("stdout:\n");
        text.push_str(&stdout);
        if !text.ends_with('\n') {
            text.push('\n');
        }
    }
    if !err_text.is_empty() {
        text.push_str("stderr:\n");
        text.push_str(&stderr);
        if !text.ends_with('\n') {
            text.push('\n');
        }
    }
    if text.is_empty() {
        text.push_str("(no output)\n");
    }
    let interrupted = !matches!(ending, Ending::Exited(_));
    let output = match ending {
        Ending::Exited(status) => match status.code() {
            Some(code) => {
                text.push_str(&format!("exit code {code}"));
                ToolOutput {
                    is_error: code != 0,
                    ..ToolOutput::text(text)
                }
            }
            None => {
                use std::os::unix::process::ExitStatusExt as _;
                let signal = status.signal().unwrap_or(0);
                text.push_str(&format!("killed by signal {signal}"));
                ToolOutput::error(text)
            }
        },
        Ending::TimedOut => {
            ToolOutput::error(format!("timed out after {}\n{text}", seconds(timeout)))
        }
        Ending::Canceled => ToolOutput::error(format!("canceled\n{text}")),
    };
    // Claude Code's Bash result, for hooks: the same capped texts.
    output.with_response(serde_json::json!({
        "stdout": stdout,
        "stderr": stderr,
        "interrupted": interrupted,
        "isImage": false,
    }))
}

/// `timeout` as the user wrote it: whole seconds as `120s`, else milliseconds.
fn seconds(timeout: Duration) -> String {
    let ms = timeout.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// Splits `total` characters between two texts of lengths `a` and `b`: a short one keeps all
/// it has and the other gets the rest.
fn budgets(a: usize, b: usize, total: usize) -> (usize, usize) {
    let half = total / 2;
    if a + b <= total {
        (a, b)
    } else if a <= half {
        (a, total - a)
    } else if b <= half {
        (total - b, b)
    } else {
        (half, total - half)
    }
}

/// `text` cut to `budget` characters by dropping its middle, with a note of what was cut.
/// `stream_bytes` is the stream's full length, for the note.
fn cap(text: &str, budget: usize, stream_bytes: u64) -> String {
    let chars = text.chars().count();
    if chars <= budget {
        return text.to_owned();
    }
    let head = budget / 2;
    let tail = budget - head;
    let head_end = text.char_indices().nth(head).map_or(text.len(), |(i, _)| i);
    let tail_start = text
        .char_indices()
        .nth(chars - tail)
        .map_or(text.len(), |(i, _)| i);
    format!(
        "{}\n[... output cut: showing the first {head} and last {tail} characters of \
         {stream_bytes} bytes ...]\n{}",
        &text[..head_end],
        &text[tail_start..]
    )
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::io::{BufRead as _, BufReader, Read as _};
    use std::path::Path;
    use std::sync::mpsc;

    use super::*;
    use crate::tools::test_support::context;

    /// The call's answer as the model sees it (its structured form for hooks left out).
    async fn call(dir: &Path, input: Value) -> ToolOutput {
        let out = Bash.call(input, &context(dir)).await;
        ToolOutput {
            response: None,
            ..out
        }
    }

    #[tokio::test]
    async fn returns_stdout_stderr_and_exit_code() {
        let dir = tempfile::tempdir().unwrap();
        let input = json!({"command": "echo hello; echo oops >&2"});
        let out = Bash.call(input, &context(dir.path())).await;
        assert_eq!(
            out,
            ToolOutput::text("stdout:\nhello\nstderr:\noops\nexit code 0").with_response(
                json!({"stdout": "hello\n", "stderr": "oops\n", "interrupted": false, "isImage": false})
            )
        );
    }

    #[tokio::test]
    async fn non_zero_exit_is_an_error_with_the_output() {
        let dir = tempfile::tempdir().unwrap();
        let out = call(dir.path(), json!({"command": "echo partial; exit 3"})).await;
        assert_eq!(out, ToolOutput::error("stdout:\npartial\nexit code 3"));
        let out = call(dir.path(), json!({"command": "true"})).await;
        assert_eq!(out, ToolOutput::text("(no output)\nexit code 0"));
    }

    #[tokio::test]
    async fn runs_in_the_cwd_with_only_the_base_environment() {
        let dir = tempfile::tempdir().unwrap();
        let script = "pwd -P; echo ${MEW_TEST_SECRET-unset}; echo ${PATH:+has-path}";
        let out = call(
            dir.path(),
            json!({"command": script, "description": "env check"}),
        )
        .await;
        let cwd = dir.path().canonicalize().unwrap();
        let expected = format!("stdout:\n{}\nunset\nhas-path\nexit code 0", cwd.display());
        assert_eq!(out, ToolOutput::text(expected));
    }

    #[tokio::test]
    async fn background_children_do_not_hold_the_call() {
        let dir = tempfile::tempdir().unwrap();
        let call = call(dir.path(), json!({"command": "sleep 1000 & echo started"}));
        let out = tokio::time::timeout(Duration::from_secs(30), call)
            .await
            .unwrap();
        assert_eq!(out, ToolOutput::text("stdout:\nstarted\nexit code 0"));
    }

    /// Makes a FIFO in `dir` (with the tool itself) and a thread that opens it for reading:
    /// the first receiver gets the first line a writer sends, the second receives once every
    /// writer has closed it (all processes holding it are gone).
    async fn fifo(dir: &Path) -> (mpsc::Receiver<String>, mpsc::Receiver<()>) {
        let out = call(dir, json!({"command": "mkfifo fifo"})).await;
        assert!(!out.is_error, "{out:?}");
        let path = dir.join("fifo");
        let (line_tx, line_rx) = mpsc::channel();
        let (eof_tx, eof_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(File::open(path).unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            line_tx.send(line).unwrap();
            let mut rest = Vec::new();
            reader.read_to_end(&mut rest).unwrap();
            eof_tx.send(()).unwrap();
        });
        (line_rx, eof_rx)
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let (line, eof) = fifo(dir.path()).await;
        // The background sleep holds the FIFO open; end of file means it was killed.
        let script = "exec 3>fifo; sleep 1000 >&3 & echo ready >&3; echo waiting; wait";
        let out = call(dir.path(), json!({"command": script, "timeout_ms": 1000})).await;
        assert_eq!(
            out,
            ToolOutput::error("timed out after 1s\nstdout:\nwaiting\n")
        );
        assert_eq!(
            line.recv_timeout(Duration::from_secs(10)).unwrap(),
            "ready\n"
        );
        eof.recv_timeout(Duration::from_secs(10)).unwrap();
    }

    #[tokio::test]
    async fn cancel_terminates_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let (line, eof) = fifo(dir.path()).await;
        let ctx = context(dir.path());
        let script = "exec 3>fifo; sleep 1000 >&3 & echo ready >&3; wait";
        let cancel = ctx.cancel.clone();
        let task = tokio::spawn(async move { Bash.call(json!({"command": script}), &ctx).await });
        let ready = tokio::task::spawn_blocking(move || line.recv_timeout(Duration::from_secs(10)));
        assert_eq!(ready.await.unwrap().unwrap(), "ready\n");
        cancel.cancel();
        let out = tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            out,
            ToolOutput::error("canceled\n(no output)\n").with_response(
                json!({"stdout": "", "stderr": "", "interrupted": true, "isImage": false})
            )
        );
        eof.recv_timeout(Duration::from_secs(10)).unwrap();
    }

    #[tokio::test]
    async fn a_missing_cwd_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("gone");
        let out = call(&gone, json!({"command": "true"})).await;
        assert!(out.is_error);
        let expected = format!("cannot start sh in {}: ", gone.display());
        assert!(out.text_content().starts_with(&expected), "{out:?}");
    }

    #[tokio::test]
    async fn a_canceled_context_runs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        ctx.cancel.cancel();
        let out = Bash.call(json!({"command": "touch made"}), &ctx).await;
        assert_eq!(out, ToolOutput::error("canceled"));
        assert!(!dir.path().join("made").exists());
    }

    #[tokio::test]
    async fn long_output_keeps_head_and_tail() {
        let dir = tempfile::tempdir().unwrap();
        // 20000 lines "1".."20000": 108894 bytes.
        let out = call(dir.path(), json!({"command": "seq 1 20000"})).await;
        assert!(!out.is_error);
        let text = out.text_content();
        assert!(text.starts_with("stdout:\n1\n2\n3\n"));
        assert!(text.ends_with("19999\n20000\nexit code 0"));
        assert!(text.contains(
            "[... output cut: showing the first 15000 and last 15000 characters of 108894 bytes ...]"
        ));
        assert!(text.chars().count() < MAX_OUTPUT_CHARS + 200);
    }

    #[tokio::test]
    async fn a_short_stream_keeps_all_beside_a_long_one() {
        let dir = tempfile::tempdir().unwrap();
        let out = call(dir.path(), json!({"command": "seq 1 20000; echo tiny >&2"})).await;
        let text = out.text_content();
        assert!(text.contains("characters of 108894 bytes ...]"));
        assert!(text.ends_with("20000\nstderr:\ntiny\nexit code 0"));
    }

    #[tokio::test]
    async fn bad_input_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let out = call(dir.path(), json!({"command": "  "})).await;
        assert_eq!(out, ToolOutput::error("command is empty"));
        let out = call(dir.path(), json!({"cmd": "ls"})).await;
        assert!(out.is_error);
        assert!(
            out.text_content()
                .starts_with("invalid input for bash: unknown field `cmd`")
        );
    }

    #[test]
    fn captured_streams_keep_their_ends() {
        let mut captured = Captured::default();
        captured.push(&vec![b'a'; KEEP_BYTES]);
        captured.push(&vec![b'b'; 3 * KEEP_BYTES]);
        captured.push(b"end");
        let text = captured.text();
        assert_eq!(captured.total, 4 * KEEP_BYTES as u64 + 3);
        let dropped = 2 * KEEP_BYTES + 3;
        assert!(text.starts_with(&"a".repeat(KEEP_BYTES)));
        assert!(text.contains(&format!("\n[... {dropped} bytes dropped ...]\n")));
        assert!(text.ends_with(&format!("{}end", "b".repeat(KEEP_BYTES - 3))));
    }

    #[test]
    fn budgets_favour_the_short_stream() {
        assert_eq!(budgets(10, 20, 100), (10, 20));
        assert_eq!(budgets(90_000, 10, 30_000), (29_990, 10));
        assert_eq!(budgets(10, 90_000, 30_000), (10, 29_990));
        assert_eq!(budgets(90_000, 90_000, 30_000), (15_000, 15_000));
    }

    #[test]
    fn timeouts_read_as_written() {
        assert_eq!(seconds(Duration::from_millis(120_000)), "120s");
        assert_eq!(seconds(Duration::from_millis(1500)), "1500ms");
    }
}
