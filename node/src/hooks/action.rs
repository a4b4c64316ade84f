//! What a hook does: run a shell command, call a URL, add a prompt, or ask a child agent.
//!
//! # shell
//!
//! `sh -c <command>` through [`crate::process`]: its own process group (killed whole on
//! timeout, cancellation, or when the hook returns: a hook cannot leave processes behind; use
//! `async` for slow work), an **empty environment** plus [`BASE_ENV`] and the configured extra
//! names from the node's environment snapshot, plus `MEW_PROJECT_DIR` and `CLAUDE_PROJECT_DIR`
//! (the same path, so Claude Code scripts that use `$CLAUDE_PROJECT_DIR` work). The payload is
//! one line of JSON on stdin. stdout (up to 1 MiB) and stderr (up to 64 KiB) are captured; see
//! [`super::output`] for what the exit code and stdout mean.
//!
//! # http
//!
//! `POST` (or `method`) to `url`, `http` or `https`. The body is the payload as JSON unless a
//! `body` template is given; `Content-Type` is `application/json` unless a header sets it.
//! A template only substitutes `{{field.path}}` (a dotted payload path, optionally written
//! with a leading dot as in Go templates: `{{.tool_name}}`); there are no functions,
//! pipelines, conditions or loops, and anything else between `{{` and `}}` is an error when
//! the rule is loaded. A missing field is empty. When the content type is JSON, substituted
//! text is JSON-escaped (without quotes), so `"cmd": "{{tool_input.command}}"` stays valid
//! JSON whatever the command holds; otherwise it is inserted as it is. Redirects are followed
//! only within the same origin (scheme, host and port), at most 5. A 2xx answer's body is read
//! (up to 1 MiB) like a shell hook's stdout; another status is a hook error.
//!
//! # prompt
//!
//! The text becomes additional context for the model.
//!
//! # subagent
//!
//! Runs the role `agent_name` with `prompt` (and the payload) through the
//! [`SubagentRunner`] the runtime provides. Its answer becomes additional context; a JSON
//! object in it (the whole answer, a fenced `json` block, or an inline object) is read as hook
//! output, so `{"decision": "block", "reason": "..."}` blocks.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use reqwest::{Method, Url};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::condition::{field_text, lookup_dotted};
use crate::duration;
use crate::process::{BASE_ENV, ProcessGroup, command, pass_env};

/// Bytes of a hook's stdout (or an http answer's body) kept.
pub(crate) const MAX_STDOUT: usize = 1 << 20;

/// Bytes of a hook's stderr kept.
pub(crate) const MAX_STDERR: usize = 64 << 10;

/// Redirects an http hook follows, within its origin.
const MAX_REDIRECTS: usize = 5;

/// How long the pipes may stay open once the group is dead (a process that escaped the group
/// with `setsid` may hold them).
const DRAIN: Duration = Duration::from_millis(500);

/// One hook action, compiled.
#[derive(Debug, Clone)]
pub(crate) enum Action {
    /// `sh -c command`.
    Shell {
        /// The command line.
        command: String,
    },
    /// A request.
    Http(HttpAction),
    /// Text for the model.
    Prompt {
        /// The text.
        text: String,
    },
    /// A child agent's judgement.
    Subagent {
        /// The role to run.
        agent_name: String,
        /// What to ask it.
        prompt: String,
    },
}

/// An http action, compiled.
#[derive(Debug, Clone)]
pub(crate) struct HttpAction {
    /// Where to send it.
    pub(crate) url: Url,
    /// The method; POST by default.
    pub(crate) method: Method,
    /// Headers, in order.
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    /// The body template; `None` sends the payload as JSON.
    pub(crate) body: Option<Template>,
    /// Whether the content type is JSON (substitutions are JSON-escaped).
    json: bool,
}

impl HttpAction {
    /// Compiles an http action, checking the URL, the method, the headers and the template.
    pub(crate) fn compile(
        url: &str,
        method: Option<&str>,
        headers: BTreeMap<String, String>,
        body: Option<&str>,
    ) -> Result<Self, String> {
        let url = Url::parse(url).map_err(|err| format!("bad `url` `{url}`: {err}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("`url` must be http or https, not {}", url.scheme()));
        }
        let method = match method.map(str::to_ascii_uppercase).as_deref() {
            None | Some("POST") => Method::POST,
            Some("PUT") => Method::PUT,
            Some("PATCH") => Method::PATCH,
            Some("GET") => Method::GET,
            Some("DELETE") => Method::DELETE,
            Some(other) => {
                return Err(format!(
                    "`method: {other}` (expected POST, PUT, PATCH, GET or DELETE)"
                ));
            }
        };
        let headers = headers
            .into_iter()
            .map(|(name, value)| {
                let header = HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| format!("bad header name `{name}`"))?;
                let value = HeaderValue::from_str(&value)
                    .map_err(|_| format!("bad value for header `{name}`"))?;
                Ok((header, value))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let json = headers
            .iter()
            .find(|(name, _)| name == CONTENT_TYPE)
            .is_none_or(|(_, value)| value.to_str().is_ok_and(|v| v.contains("json")));
        let body = body
            .map(Template::parse)
            .transpose()
            .map_err(|err| format!("`body`: {err}"))?;
        Ok(Self {
            url,
            method,
            headers,
            body,
            json,
        })
    }
}

/// A body template: text with `{{field.path}}` substitutions and nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Field(String),
}

impl Template {
    /// Parses a template; anything but a field path between `{{` and `}}` is an error.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(start) = rest.find("{{") {
            if start > 0 {
                parts.push(Part::Text(rest[..start].to_owned()));
            }
            let after = &rest[start + 2..];
            let end = after.find("}}").ok_or_else(|| {
                format!(
                    "`{{{{` without `}}}}` in template at `{}`",
                    excerpt(&rest[start..])
                )
            })?;
            let inner = after[..end].trim();
            let path = inner.strip_prefix('.').unwrap_or(inner);
            let valid = !path.is_empty()
                && path.split('.').all(|segment| {
                    !segment.is_empty()
                        && segment
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                });
            if !valid {
                return Err(format!(
                    "`{{{{{}}}}}` is not a field path: a template only substitutes fields such \
                     as {{{{tool_input.command}}}} (no functions, pipes or actions)",
                    after[..end].trim()
                ));
            }
            parts.push(Part::Field(path.to_owned()));
            rest = &after[end + 2..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_owned()));
        }
        Ok(Self { parts })
    }

    /// The text with each field's text substituted (JSON-escaped when `json`); a missing
    /// field is empty.
    pub(crate) fn render(&self, payload: &Value, json: bool) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Field(path) => {
                    let text = lookup_dotted(payload, path)
                        .and_then(field_text)
                        .unwrap_or_default();
                    if json {
                        let quoted = Value::String(text).to_string();
                        out.push_str(&quoted[1..quoted.len() - 1]);
                    } else {
                        out.push_str(&text);
                    }
                }
            }
        }
        out
    }
}

/// The first characters of `text`, for a message.
fn excerpt(text: &str) -> String {
    text.chars().take(40).collect()
}

/// Runs child agents for `subagent` hooks; the runtime implements it.
///
/// The future is dropped when the hook times out or its run is canceled: an implementation
/// must stop the child then (or let it finish detached, on its own account).
#[async_trait]
pub(crate) trait SubagentRunner: Send + Sync {
    /// Runs the role `role` with `prompt`, given the hook's `payload`; returns its final
    /// answer, or why it failed.
    async fn run_subagent(
        &self,
        role: &str,
        prompt: &str,
        payload: &Value,
    ) -> Result<String, String>;
}

/// What an action needs from the dispatcher.
#[derive(Clone, Copy)]
pub(crate) struct ActionContext<'a> {
    /// The node's environment snapshot.
    pub(crate) env: &'a HashMap<String, String>,
    /// Variables passed on top of [`BASE_ENV`].
    pub(crate) extra_env: &'a [String],
    /// `MEW_PROJECT_DIR` / `CLAUDE_PROJECT_DIR`.
    pub(crate) project_dir: &'a Path,
    /// The hook's working directory.
    pub(crate) cwd: &'a Path,
    /// The client for http hooks ([`http_client`]).
    pub(crate) http: &'a reqwest::Client,
    /// The runner for subagent hooks.
    pub(crate) subagents: Option<&'a dyn SubagentRunner>,
    /// The process ledger, with the session and hook names to record there.
    pub(crate) ledger: Option<(&'a Path, &'a str, &'a str)>,
    /// `CLAUDE_PLUGIN_ROOT`, for a hook of a plugin.
    pub(crate) plugin_root: Option<&'a Path>,
}

/// How an action ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ActionResult {
    /// A shell command exited.
    Exited {
        /// Its exit code; `None` when a signal ended it.
        code: Option<i32>,
        /// The signal, if one ended it.
        signal: Option<i32>,
        /// What it wrote to stdout (capped).
        stdout: String,
        /// Whether stdout was over [`MAX_STDOUT`].
        stdout_truncated: bool,
        /// What it wrote to stderr (capped).
        stderr: String,
    },
    /// An http hook got an answer.
    Http {
        /// The status code.
        status: u16,
        /// The body (capped).
        body: String,
    },
    /// A prompt action's text.
    Prompt(String),
    /// A subagent's answer.
    Subagent(String),
    /// It could not run or finish: start failure, timeout, cancellation, transport error.
    Failed(String),
}

/// The client http hooks share: redirects only within the origin.
pub(crate) fn http_client() -> Result<reqwest::Client, String> {
    let policy = reqwest::redirect::Policy::custom(|attempt| {
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
        }
        let same = attempt
            .previous()
            .first()
            .is_some_and(|first| same_origin(first, attempt.url()));
        if same {
            attempt.follow()
        } else {
            let message = format!(
                "redirect to another origin refused: {}",
                attempt.url().origin().ascii_serialization()
            );
            attempt.error(message)
        }
    });
    reqwest::Client::builder()
        .redirect(policy)
        .user_agent(concat!("mew-hooks/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|err| format!("cannot build the http client for hooks: {err}"))
}

fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

/// Runs `action` with `payload`, for at most `timeout`, until `cancel`.
///
/// # Cancel safety
///
/// Dropping the future kills a shell hook's process group and drops a request or a
/// subagent's future.
pub(crate) async fn run(
    action: &Action,
    payload: &Value,
    timeout: Duration,
    cancel: &CancellationToken,
    ctx: &ActionContext<'_>,
) -> ActionResult {
    if cancel.is_cancelled() {
        return ActionResult::Failed("canceled".to_owned());
    }
    match action {
        Action::Prompt { text } => ActionResult::Prompt(text.clone()),
        Action::Shell { command } => run_shell(command, payload, timeout, cancel, ctx).await,
        Action::Http(http) => {
            let request = send(http, payload, timeout, ctx.http);
            tokio::select! {
                result = request => result,
                () = tokio::time::sleep(timeout) => timed_out(timeout),
                () = cancel.cancelled() => ActionResult::Failed("canceled".to_owned()),
            }
        }
        Action::Subagent { agent_name, prompt } => {
            let Some(runner) = ctx.subagents else {
                return ActionResult::Failed(
                    "subagent hooks are not available here (no runner)".to_owned(),
                );
            };
            tokio::select! {
                answer = runner.run_subagent(agent_name, prompt, payload) => match answer {
                    Ok(answer) => ActionResult::Subagent(answer),
                    Err(err) => ActionResult::Failed(format!("subagent `{agent_name}` failed: {err}")),
                },
                () = tokio::time::sleep(timeout) => timed_out(timeout),
                () = cancel.cancelled() => ActionResult::Failed("canceled".to_owned()),
            }
        }
    }
}

fn timed_out(timeout: Duration) -> ActionResult {
    ActionResult::Failed(format!("timed out after {}", duration::format(timeout)))
}

async fn send(
    http: &HttpAction,
    payload: &Value,
    timeout: Duration,
    client: &reqwest::Client,
) -> ActionResult {
    let body = match &http.body {
        Some(template) => template.render(payload, http.json),
        None => payload.to_string(),
    };
    let mut request = client
        .request(http.method.clone(), http.url.clone())
        .timeout(timeout);
    if !http.headers.iter().any(|(name, _)| name == CONTENT_TYPE) {
        request = request.header(CONTENT_TYPE, "application/json");
    }
    for (name, value) in &http.headers {
        request = request.header(name, value);
    }
    if http.method != Method::GET {
        request = request.body(body);
    }
    let mut response = match request.send().await {
        Ok(response) => response,
        Err(err) => return ActionResult::Failed(error_chain(&err)),
    };
    let status = response.status().as_u16();
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = MAX_STDOUT.saturating_sub(body.len());
                body.extend_from_slice(&chunk[..room.min(chunk.len())]);
                if body.len() >= MAX_STDOUT {
                    break;
                }
            }
            Ok(None) => break,
            Err(err) => return ActionResult::Failed(error_chain(&err)),
        }
    }
    ActionResult::Http {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// An error with its sources, on one line.
fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let message = cause.to_string();
        if !text.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        source = cause.source();
    }
    text
}

/// How the command ended.
enum Ending {
    Exited(std::process::ExitStatus),
    TimedOut,
    Canceled,
}

async fn run_shell(
    script: &str,
    payload: &Value,
    timeout: Duration,
    cancel: &CancellationToken,
    ctx: &ActionContext<'_>,
) -> ActionResult {
    use std::os::unix::process::ExitStatusExt as _;

    let mut cmd = command("sh", ["-c", script]);
    cmd.current_dir(ctx.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    pass_env(
        &mut cmd,
        ctx.env,
        BASE_ENV
            .iter()
            .copied()
            .chain(ctx.extra_env.iter().map(String::as_str)),
    );
    cmd.env("MEW_PROJECT_DIR", ctx.project_dir)
        .env("CLAUDE_PROJECT_DIR", ctx.project_dir);
    if let Some(root) = ctx.plugin_root {
        cmd.env("CLAUDE_PLUGIN_ROOT", root);
    }
    // Recorded in the ledger before it exists, so a crash of the node cannot leave it unknown;
    // a ledger that cannot be written costs the hook its record, not its run.
    let spawned = match ctx.ledger {
        Some((dir, session, hook)) => {
            match ProcessGroup::spawn_recorded(&mut cmd, dir, session, &format!("hook {hook}")) {
                Err(crate::process::SpawnError::Ledger(err)) => {
                    tracing::warn!(
                        hook,
                        "hook process not recorded in the process ledger: {err}"
                    );
                    ProcessGroup::spawn(&mut cmd)
                }
                Err(crate::process::SpawnError::Spawn(err)) => Err(err),
                Ok(group) => Ok(group),
            }
        }
        None => ProcessGroup::spawn(&mut cmd),
    };
    let mut group = match spawned {
        Ok(group) => group,
        Err(err) => {
            return ActionResult::Failed(format!(
                "cannot start sh in {}: {err}",
                ctx.cwd.display()
            ));
        }
    };
    let mut input = payload.to_string().into_bytes();
    input.push(b'\n');
    let stdin = group.child_mut().stdin.take();
    let writer = tokio::spawn(async move {
        if let Some(mut stdin) = stdin {
            // A hook that does not read its stdin closes the pipe: not an error.
            let _ = stdin.write_all(&input).await;
            let _ = stdin.shutdown().await;
        }
    });
    let stop_reading = CancellationToken::new();
    let _stop_on_drop = stop_reading.clone().drop_guard();
    let stdout = group
        .child_mut()
        .stdout
        .take()
        .map(|out| read_capped(out, MAX_STDOUT, stop_reading.clone()));
    let stderr = group
        .child_mut()
        .stderr
        .take()
        .map(|err| read_capped(err, MAX_STDERR, stop_reading.clone()));

    let ending = tokio::select! {
        status = group.wait() => match status {
            Ok(status) => Ending::Exited(status),
            Err(err) => return ActionResult::Failed(format!("cannot wait for the hook: {err}")),
        },
        () = tokio::time::sleep(timeout) => Ending::TimedOut,
        () = cancel.cancelled() => Ending::Canceled,
    };
    // Whatever the hook left running goes with it.
    group.kill();
    if !matches!(ending, Ending::Exited(_)) {
        let _ = group.wait().await;
    }
    writer.abort();
    let stopper = tokio::spawn(async move {
        tokio::time::sleep(DRAIN).await;
        stop_reading.cancel();
    });
    let (stdout, stdout_truncated) = collect(stdout).await;
    let (stderr, _) = collect(stderr).await;
    stopper.abort();
    match ending {
        Ending::Exited(status) => ActionResult::Exited {
            code: status.code(),
            signal: status.signal(),
            stdout,
            stdout_truncated,
            stderr,
        },
        Ending::TimedOut => timed_out(timeout),
        Ending::Canceled => ActionResult::Failed("canceled".to_owned()),
    }
}

/// Reads `stream` to its end (or until `stop`), keeping the first `cap` bytes; the rest is
/// read and dropped, so the writer never blocks.
fn read_capped(
    mut stream: impl AsyncRead + Unpin + Send + 'static,
    cap: usize,
    stop: CancellationToken,
) -> JoinHandle<(Vec<u8>, bool)> {
    tokio::spawn(async move {
        let mut kept = Vec::new();
        let mut truncated = false;
        let mut chunk = vec![0u8; 16 * 1024];
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                read = stream.read(&mut chunk) => match read {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let room = cap.saturating_sub(kept.len());
                        if n > room {
                            truncated = true;
                        }
                        kept.extend_from_slice(&chunk[..n.min(room)]);
                    }
                },
            }
        }
        (kept, truncated)
    })
}

async fn collect(reader: Option<JoinHandle<(Vec<u8>, bool)>>) -> (String, bool) {
    let (bytes, truncated) = match reader {
        Some(handle) => handle.await.unwrap_or_default(),
        None => (Vec::new(), false),
    };
    (String::from_utf8_lossy(&bytes).into_owned(), truncated)
}
