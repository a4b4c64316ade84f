//! Mew's client of one configured MCP server, through its life: connect, call, reconnect,
//! give up, stop.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, CallToolResponse};
use rmcp::service::ServiceError;
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::connect::{self, Connection, Handler, describe_service_error};
use super::tool::{adapt, server_name_problem};
use super::{McpContext, ServerState, ServerStatus, content};
use crate::config::mcp::{
    McpElicitation, McpOAuthGrant, McpSampling, McpServerConfig, McpTransport,
};
use crate::tools::{Tool, ToolContext, ToolOutput};

/// The wait before the first restart in a row; each further one waits twice as long.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The longest wait before a restart.
const MAX_BACKOFF: Duration = Duration::from_secs(8);

/// Calls in a row that time out before a stdio server is taken for hung and restarted.
const HUNG_AFTER: u32 = 3;

/// The longest wait between two tries of a server whose first connection failed.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(60);

/// How long try `n` of a server that never connected waits: 1 s doubling to a minute.
fn retry_wait(n: u32) -> Duration {
    Duration::from_secs(1)
        .saturating_mul(1 << n.saturating_sub(1).min(16))
        .min(MAX_RETRY_WAIT)
}

/// How long restart `n` in a row waits after the previous start.
pub(super) fn backoff(n: u32) -> Duration {
    let doublings = n.saturating_sub(1).min(16);
    FIRST_BACKOFF
        .saturating_mul(1 << doublings)
        .min(MAX_BACKOFF)
}

/// One configured server.
pub(super) struct McpClient {
    name: String,
    config: McpServerConfig,
    ctx: Arc<McpContext>,
    me: Weak<McpClient>,
    shared: Mutex<Shared>,
    /// Held while a connection is made, so concurrent calls wait for one restart.
    reconnecting: tokio::sync::Mutex<()>,
    /// Held while the tool list is reloaded.
    refreshing: tokio::sync::Mutex<()>,
    /// Cancelled by shutdown.
    stopping: CancellationToken,
    changes: watch::Sender<u64>,
    /// The running calls whose progress and the server's log messages someone follows.
    pub(super) followers: super::news::Followers,
    /// The last `WWW-Authenticate` challenge of an http server's 401 or 403.
    challenge: super::http::Challenge,
    /// The calls waiting for the user's reply to their server's question, by number.
    parked: Mutex<std::collections::HashMap<u64, Parked>>,
    /// Whose tokens the connection carries: `None`, the node's; a principal's on the client
    /// of one caller of a server with `oauth.per_caller` (see [`Self::for_caller`]).
    principal: Option<String>,
    /// The clients of the callers of a server with `oauth.per_caller`, by principal.
    callers: Mutex<std::collections::HashMap<String, Arc<McpClient>>>,
    /// The number of the next parked call.
    next_parked: std::sync::atomic::AtomicU64,
    /// When a call last went through this client (a caller's own: see [`CALLER_IDLE`]).
    last_used: Mutex<Instant>,
}

/// What changes, behind one lock.
struct Shared {
    state: ServerState,
    connection: Option<Arc<Connection>>,
    /// Counts connections; a notification from an older one is ignored.
    generation: u64,
    tools: Vec<Arc<dyn Tool>>,
    skipped: Vec<String>,
    /// The skills the server lists (see [`super::skills`]).
    skills: Arc<Vec<rmcp::model::Skill>>,
    protocol: Option<String>,
    /// The server spoke a version of the `initialize` era: its next connection starts there.
    spoke_initialize: bool,
    /// The last connection failed because the server asks for authorization.
    needs_sign_in: bool,
    last_error: Option<String>,
    restarts: u32,
    /// Restarts since a call last got an answer.
    in_a_row: u32,
    /// Calls of the current connection that timed out since one last got an answer.
    timeouts_in_a_row: u32,
    started: Option<Instant>,
}

/// Tells the server about a call whose caller stopped waiting for it, when dropped while
/// `id` is set: a best-effort `notifications/cancelled`, so the server does not keep working
/// on a result nobody reads.
struct Abandoned {
    peer: rmcp::Peer<rmcp::RoleClient>,
    id: Option<rmcp::model::RequestId>,
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let peer = self.peer.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let cancelled = rmcp::model::CancelledNotificationParam::new(
                    Some(id),
                    Some("request abandoned by the caller".to_owned()),
                );
                let _ = peer.notify_cancelled(cancelled).await;
            });
        }
    }
}

/// What a call that stopped to ask the user resumes with.
pub(super) enum Resumed {
    /// A server of 2026-07-28 ended the call asking: it is made again with the answers to its
    /// input requests and the state it handed out.
    Again {
        input_responses: rmcp::model::InputResponses,
        request_state: Option<String>,
    },
    /// A server of 2025-11-25 or before asked while the call runs: the call parked under
    /// `parked` gets the answer and goes on.
    Parked { parked: u64, answer: Value },
}

/// A call whose server asked the user a question while it runs: it waits, still running,
/// until the reply comes ([`McpClient::call`] with [`Resumed::Parked`]) or it expires
/// ([`QUESTION_WAIT`]).
struct Parked {
    running: RunningCall,
    question: super::news::Question,
    connection: Arc<Connection>,
    params: CallToolRequestParams,
    started: Instant,
}

/// A `tools/call` running in a task of its own, so that it can outlive the turn that made it
/// while its server waits for the user; with the questions its server asks. Dropping it drops
/// the call, which tells the server the call was cancelled.
struct RunningCall {
    handle: tokio::task::JoinHandle<Result<CallToolResponse, ServiceError>>,
    questions: tokio::sync::mpsc::Receiver<super::news::Question>,
}

impl Drop for RunningCall {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// The answers to an input-required result, or the question to put to the user first.
enum Inputs {
    Answered(rmcp::model::InputResponses),
    Ask(Asked),
}

/// The question of a round of input to put to the user, and what the round has so far.
struct Asked {
    key: String,
    /// The elicitation's parameters (`message`, `requestedSchema`, or `mode: url`).
    elicitation: Value,
    /// The answers to the server's other requests of the round.
    answered: rmcp::model::InputResponses,
    /// Set when the question asks whether the server's sampling request (these parameters)
    /// may be answered by the task's model (`sampling: ask`).
    sampling: Option<Value>,
}

/// What a call waiting for the user keeps, in the relay of its result: enough to make the
/// call again with the user's answer, after a restart too.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Waiting {
    pub(super) arguments: Option<serde_json::Map<String, Value>>,
    pub(super) request_state: Option<String>,
    pub(super) key: String,
    pub(super) schema: Value,
    pub(super) answered: rmcp::model::InputResponses,
    /// Set when a server of 2025-11-25 or before asked while the call runs: the call waits,
    /// still running, among the client's parked calls under this number; the reply goes to it
    /// instead of making the call again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) parked: Option<u64>,
    /// Set when the call failed because the server asks for authorization, and the user was
    /// asked to sign in: the reply makes the call again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) sign_in: bool,
    /// Set when the user was asked whether the server's sampling request (these parameters)
    /// may be answered by the task's model: a yes answers it, then the call is made again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) sampling: Option<Value>,
}

/// The result of a call whose server asks the user: the question (the task asks it in
/// INPUT_REQUIRED), and the relay that brings the reply back to the call.
fn ask_user(
    name: &str,
    server: &str,
    params: &CallToolRequestParams,
    required: &rmcp::model::InputRequiredResult,
    asked: Asked,
) -> ToolOutput {
    let waiting = Waiting {
        arguments: params.arguments.clone(),
        request_state: required.request_state.clone(),
        key: asked.key,
        schema: Value::Null,
        answered: asked.answered,
        parked: None,
        sign_in: false,
        sampling: asked.sampling,
    };
    put_question(name, server, &asked.elicitation, waiting)
}

/// The result of a call that waits for the user: `elicitation` as the task's question, and
/// `waiting` (with the form filled in here) as the relay that brings the reply back.
fn put_question(name: &str, server: &str, elicitation: &Value, mut waiting: Waiting) -> ToolOutput {
    let message = super::news::cut(
        elicitation
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("The server asks for input."),
    );
    let message = message.as_str();
    let schema = elicitation
        .get("requestedSchema")
        .cloned()
        .unwrap_or(Value::Null);
    // The form rides in the task's status message and private state: it is bounded.
    let size = schema.to_string().len();
    if size > MAX_FORM_BYTES {
        return ToolOutput::error(format!(
            "{name} failed: the MCP server {server} asked a question whose form is {size} bytes \
             of JSON, more than the {MAX_FORM_BYTES} Mew puts to a user"
        ));
    }
    let mut data = serde_json::json!({
        "server": server,
        "tool": name,
        "message": message,
        "requestedSchema": schema,
    });
    let mut question = format!("The MCP server {server} asks (for {name}): {message}");
    if let Some(url) = elicitation.get("url").and_then(Value::as_str) {
        let url = super::news::cut(url);
        data["url"] = Value::String(url.clone());
        question.push_str(&format!("\nOpen {url}, then reply \"done\"."));
    } else {
        question.push_str(
            "\nReply with a JSON object of the fields asked for (or the value alone when one \
             field is asked for), \"decline\" or \"cancel\".",
        );
    }
    waiting.schema = schema;
    match serde_json::to_string(&waiting) {
        Ok(relay) => ToolOutput {
            relay: Some(relay),
            ask: Some(Box::new(crate::tools::ToolAsk {
                kind: mew_cards::mew::ASK_ELICITATION.to_owned(),
                data,
            })),
            ..ToolOutput::text(question)
        },
        Err(e) => ToolOutput::error(format!(
            "{name} failed: the MCP server {server} asked a question Mew cannot keep: {e}"
        )),
    }
}

/// The task's model's answer to a server's sampling request, through the call's sampler.
pub(super) async fn sample(
    ctx: &ToolContext,
    request: crate::tools::SampleRequest,
) -> Result<crate::tools::SampleAnswer, String> {
    let sampler = ctx
        .sampler
        .clone()
        .ok_or("the model of a task (sampling), and this call is not a task's")?;
    sampler(request)
        .await
        .map_err(|why| format!("the task's model, which failed: {why}"))
}

/// The user's reply to an elicitation, as the server reads it: `decline` and `cancel` as
/// they are, a JSON object as the fields (with the form's defaults for the fields it leaves
/// out), a bare value as the one field the schema asks for, `done` as the acceptance of a URL
/// elicitation.
pub(super) fn elicitation_answer(reply: &str, schema: &Value) -> Value {
    let trimmed = reply.trim();
    match trimmed.to_ascii_lowercase().as_str() {
        "decline" => return serde_json::json!({"action": "decline"}),
        "cancel" => return serde_json::json!({"action": "cancel"}),
        _ => {}
    }
    if let Ok(Value::Object(mut fields)) = serde_json::from_str::<Value>(trimmed) {
        // The form's defaults stand for the fields the answer leaves out (SEP-1034).
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            for (field, spec) in properties {
                if let Some(default) = spec.get("default")
                    && !fields.contains_key(field)
                {
                    fields.insert(field.clone(), default.clone());
                }
            }
        }
        return serde_json::json!({"action": "accept", "content": fields});
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    match properties {
        Some(properties) if properties.len() == 1 => {
            let (field, spec) = properties
                .iter()
                .next()
                .map_or(("", &Value::Null), |(k, v)| (k.as_str(), v));
            let value = match spec.get("type").and_then(Value::as_str) {
                Some("number" | "integer" | "boolean") => serde_json::from_str(trimmed)
                    .unwrap_or_else(|_| Value::String(trimmed.to_owned())),
                _ => Value::String(trimmed.to_owned()),
            };
            serde_json::json!({"action": "accept", "content": {field: value}})
        }
        // A URL elicitation (no fields): any other reply accepts.
        None if !trimmed.is_empty() => serde_json::json!({"action": "accept"}),
        _ => serde_json::json!({"action": "decline"}),
    }
}

/// The largest form (`requestedSchema`, as JSON) of a server's question put to the user.
const MAX_FORM_BYTES: usize = 16 * 1024;

/// The most rounds of input a server may ask for in one call.
const MAX_INPUT_ROUNDS: u32 = 8;

/// How long a call whose server asked the user while it runs waits for the reply; then it is
/// cancelled on the server, and a later reply says the question expired.
const QUESTION_WAIT: Duration = Duration::from_secs(60 * 60);

/// The most calls of one server that wait for the user's reply at once; the server's further
/// questions are declined.
const MAX_PARKED: usize = 64;

/// The most callers with a session of their own with one server (`oauth.per_caller`).
const MAX_CALLERS: usize = 256;

/// How long a caller's own session (`oauth.per_caller`) is kept without a call (beyond the
/// server's `call_timeout`, so that no call is still running on it) before it is closed; the
/// caller's next call opens a new one with the caller's kept tokens.
pub(super) const CALLER_IDLE: Duration = Duration::from_secs(30 * 60);

/// How long a closed session may take to end.
const CLOSE_DEADLINE: Duration = Duration::from_secs(5);

/// What became of a call.
enum Outcome {
    Answer(Result<CallToolResponse, ServiceError>),
    Cancelled,
    TimedOut,
    Stopped,
}

impl McpClient {
    pub(super) fn new(
        name: &str,
        config: McpServerConfig,
        ctx: Arc<McpContext>,
        changes: watch::Sender<u64>,
    ) -> Arc<Self> {
        Self::with_principal(name, config, ctx, changes, None)
    }

    fn with_principal(
        name: &str,
        config: McpServerConfig,
        ctx: Arc<McpContext>,
        changes: watch::Sender<u64>,
        principal: Option<String>,
    ) -> Arc<Self> {
        let remembered = ctx
            .memory
            .as_ref()
            .is_some_and(|memory| memory.spoke_initialize(name, &config));
        Arc::new_cyclic(|me| Self {
            name: name.to_owned(),
            config,
            ctx,
            me: me.clone(),
            shared: Mutex::new(Shared {
                state: ServerState::Connecting,
                connection: None,
                generation: 0,
                tools: Vec::new(),
                skills: Arc::default(),
                skipped: Vec::new(),
                protocol: None,
                spoke_initialize: remembered,
                needs_sign_in: false,
                last_error: None,
                restarts: 0,
                in_a_row: 0,
                timeouts_in_a_row: 0,
                started: None,
            }),
            reconnecting: tokio::sync::Mutex::new(()),
            refreshing: tokio::sync::Mutex::new(()),
            stopping: CancellationToken::new(),
            changes,
            followers: super::news::Followers::default(),
            challenge: super::http::Challenge::default(),
            parked: Mutex::default(),
            next_parked: std::sync::atomic::AtomicU64::new(1),
            last_used: Mutex::new(Instant::now()),
            principal,
            callers: Mutex::default(),
        })
    }

    /// The client a call made in `ctx` goes through: for a server with `oauth.per_caller`
    /// and a task that belongs to a principal, that principal's own client (made, and
    /// connected once, on its first call), whose tokens are the principal's; else this one.
    pub(super) async fn for_caller(
        self: Arc<Self>,
        ctx: &ToolContext,
    ) -> Result<Arc<Self>, String> {
        let (true, None, Some(principal)) = (
            self.config.oauth.per_caller,
            &self.principal,
            ctx.principal.as_ref(),
        ) else {
            return Ok(self);
        };
        self.close_idle_callers(Instant::now());
        let (client, new) = {
            let mut callers = self.callers.lock().unwrap_or_else(PoisonError::into_inner);
            match callers.get(principal) {
                Some(client) => {
                    *client
                        .last_used
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = Instant::now();
                    (client.clone(), false)
                }
                None => {
                    if callers.len() >= MAX_CALLERS {
                        return Err(format!(
                            "{MAX_CALLERS} callers have sessions with the MCP server {} already",
                            self.name
                        ));
                    }
                    let client = Self::with_principal(
                        &self.name,
                        self.config.clone(),
                        self.ctx.clone(),
                        self.changes.clone(),
                        Some(principal.clone()),
                    );
                    callers.insert(principal.clone(), client.clone());
                    (client, true)
                }
            }
        };
        if new {
            // The first connection, once: a caller who has not signed in is asked to when a
            // call fails for it, and connects again after the sign-in.
            let _connecting = client.reconnecting.lock().await;
            if let Err(err) = client.establish().await {
                client.failed(err);
            }
        }
        Ok(client)
    }

    /// Whether each caller gets a session of their own (`oauth.per_caller`).
    pub(super) fn per_caller(&self) -> bool {
        self.config.oauth.per_caller && self.principal.is_none()
    }

    /// Closes the callers' own sessions that carried no call since [`CALLER_IDLE`] (and the
    /// server's `call_timeout`) before `now` and hold no call waiting for its user; they are
    /// forgotten, and a caller's next call opens a new one. Returns how many were closed.
    pub(super) fn close_idle_callers(&self, now: Instant) -> usize {
        let idle = CALLER_IDLE.saturating_add(self.config.call_timeout);
        let closed: Vec<Arc<Self>> = {
            let mut callers = self.callers.lock().unwrap_or_else(PoisonError::into_inner);
            let gone: Vec<String> = callers
                .iter()
                .filter(|(_, client)| {
                    let used = *client
                        .last_used
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    now.saturating_duration_since(used) > idle
                        && client
                            .parked
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .is_empty()
                })
                .map(|(principal, _)| principal.clone())
                .collect();
            gone.iter()
                .filter_map(|principal| callers.remove(principal))
                .collect()
        };
        for client in &closed {
            tracing::debug!(server = %self.name, "closing an idle caller's session");
            let client = client.clone();
            tokio::spawn(async move { client.close(CLOSE_DEADLINE).await });
        }
        closed.len()
    }

    /// The skills the server lists while it is connected (see [`super::skills`]).
    pub(super) fn skills(&self) -> Arc<Vec<rmcp::model::Skill>> {
        let shared = self.shared();
        match shared.state {
            ServerState::Connected | ServerState::Restarting => shared.skills.clone(),
            ServerState::Connecting | ServerState::Failed | ServerState::Stopped => Arc::default(),
        }
    }

    /// Reads the file `uri` of the listed skill `name`, verified (see [`super::skills::read`]);
    /// `SKILL.md` is also checked for its frontmatter, and comes back as text.
    pub(super) async fn skill_file(
        &self,
        name: &str,
        path: Option<&str>,
        cancel: &CancellationToken,
    ) -> Result<(rmcp::model::Skill, Vec<u8>), String> {
        let skill = self
            .skills()
            .iter()
            .find(|skill| skill.name() == name)
            .cloned()
            .ok_or_else(|| format!("the MCP server {} lists no skill {name}", self.name))?;
        let connection = self.live_connection(cancel).await?;
        let reading = async {
            match path {
                None => super::skills::load(connection.peer(), &skill)
                    .await
                    .map(String::into_bytes),
                Some(path) => {
                    let uri = super::skills::file_uri(&skill, path)?;
                    super::skills::read(connection.peer(), &skill, &uri).await
                }
            }
        };
        let bytes = tokio::select! {
            read = tokio::time::timeout(self.config.call_timeout, reading) => read
                .map_err(|_| format!("the MCP server {} did not answer within {:?}", self.name, self.config.call_timeout))??,
            () = cancel.cancelled() => return Err("the task was cancelled".to_owned()),
            () = self.stopping.cancelled() => return Err(self.stopped()),
        };
        Ok((skill, bytes))
    }

    /// Whether the server is connected now.
    pub(super) fn is_connected(&self) -> bool {
        self.shared().state == ServerState::Connected
    }

    /// The client of the caller `principal`, if it has one (see [`Self::for_caller`]).
    pub(super) fn caller(&self, principal: &str) -> Option<Arc<Self>> {
        self.callers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(principal)
            .cloned()
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    fn shared(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn announce(&self) {
        self.changes.send_modify(|version| *version += 1);
    }

    /// The first connection.
    pub(super) async fn start(&self) {
        if let Some(problem) = server_name_problem(&self.name) {
            tracing::warn!(server = %self.name, "skipped the MCP server: {problem}");
            let mut shared = self.shared();
            shared.state = ServerState::Failed;
            shared.last_error = Some(problem);
            return;
        }
        let _connecting = self.reconnecting.lock().await;
        if let Err(err) = self.establish().await {
            tracing::warn!(
                server = %self.name,
                "cannot connect to the MCP server (trying again in the background): {err}"
            );
            self.failed(err);
            self.retry_in_background();
        }
    }

    /// Marks the server failed (unless it is stopping), with `err` as its last error.
    fn failed(&self, err: String) {
        let mut shared = self.shared();
        if shared.state != ServerState::Stopped {
            shared.state = ServerState::Failed;
        }
        shared.needs_sign_in = err.contains(super::ASKS_FOR_AUTHORIZATION);
        shared.last_error = Some(err);
    }

    /// After a failed first connection (a server that is not up yet, a network that is not
    /// there yet): tries again in the background, waiting longer each time ([`retry_wait`]),
    /// until it connects or the node stops. Its tools appear when it connects.
    fn retry_in_background(&self) {
        let me = self.me.clone();
        let stopping = self.stopping.clone();
        tokio::spawn(async move {
            for attempt in 1u32.. {
                tokio::select! {
                    () = tokio::time::sleep(retry_wait(attempt)) => {}
                    () = stopping.cancelled() => return,
                }
                let Some(server) = me.upgrade() else {
                    return;
                };
                let _connecting = server.reconnecting.lock().await;
                if server.shared().state != ServerState::Failed {
                    return;
                }
                match server.establish().await {
                    Ok(()) => {
                        tracing::info!(server = %server.name, attempt, "the MCP server is up after all");
                        return;
                    }
                    Err(err) => {
                        tracing::debug!(server = %server.name, attempt, "still cannot connect to the MCP server: {err}");
                        server.failed(err);
                    }
                }
            }
        });
    }

    /// Makes a connection, lists the tools, and puts both in place.
    async fn establish(&self) -> Result<(), String> {
        let generation = {
            let mut shared = self.shared();
            shared.generation += 1;
            shared.started = Some(Instant::now());
            shared.generation
        };
        let handler = Handler {
            server: self.me.clone(),
            generation,
            name: Arc::from(self.name.as_str()),
            roots: connect::project_roots(&self.ctx.project_dir),
            sampling: self.config.sampling,
            elicitation: self.config.elicitation == McpElicitation::Ask,
            challenge: self.challenge.clone(),
            principal: self.principal.clone(),
        };
        let limit = self.config.connect_timeout;
        let spoke_initialize = self.shared().spoke_initialize;
        let attempt = connect::connect(
            &self.name,
            &self.config,
            &self.ctx,
            handler,
            limit,
            spoke_initialize,
        );
        let (connection, listed) = tokio::select! {
            result = attempt => result?,
            () = self.stopping.cancelled() => return Err("the node is shutting down".to_owned()),
        };
        let (tools, skipped) = adapt(&self.me, &self.name, &self.config, listed.tools);
        let mut shared = self.shared();
        if shared.state == ServerState::Stopped {
            return Err("the node is shutting down".to_owned());
        }
        tracing::info!(
            server = %self.name,
            protocol = connection.protocol(),
            tools = tools.len(),
            "connected to the MCP server"
        );
        shared.protocol = Some(connection.protocol().to_owned());
        let spoke_initialize = connection.spoke_initialize();
        let learned = shared.spoke_initialize != spoke_initialize;
        shared.spoke_initialize = spoke_initialize;
        shared.needs_sign_in = false;
        shared.connection = Some(Arc::new(connection));
        shared.tools = tools;
        shared.skipped = skipped;
        shared.skills = Arc::new(listed.skills);
        shared.state = ServerState::Connected;
        drop(shared);
        if learned && let Some(memory) = &self.ctx.memory {
            memory.record(&self.name, &self.config, spoke_initialize);
        }
        self.announce();
        Ok(())
    }

    /// The tools the model sees: none once the server failed or stopped; with the sign-in
    /// tool for a server that asks for authorization (see [`Self::offers_sign_in`]).
    pub(super) fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let shared = self.shared();
        let mut tools = match shared.state {
            ServerState::Connected | ServerState::Restarting => shared.tools.clone(),
            ServerState::Connecting | ServerState::Failed | ServerState::Stopped => Vec::new(),
        };
        let asked = shared.needs_sign_in && shared.state == ServerState::Failed;
        drop(shared);
        if self.offers_sign_in(asked) {
            let name = super::tool::full_name(&self.name, super::tool::SIGN_IN_TOOL);
            if !tools.iter().any(|tool| tool.name() == name) {
                tools.push(Arc::new(super::tool::SignInTool {
                    server: self.me.clone(),
                    server_name: self.name.clone(),
                    name,
                }));
            }
        }
        tools
    }

    /// Whether the sign-in tool is offered: for an HTTP server that asks for authorization
    /// (`asked`), or asked for it earlier, when the node takes sign-ins. It stays once the
    /// server connected, so that the task that signed in finds it when it goes on.
    fn offers_sign_in(&self, asked: bool) -> bool {
        // The node's own tokens act for every task: only a node whose callers are not told
        // apart lets a task sign the node in. A caller's own client signs its caller in.
        let for_whom = self.principal.is_some() || self.config.oauth.per_caller;
        matches!(self.config.transport, McpTransport::Http { .. })
            && self.config.oauth.grant == McpOAuthGrant::AuthorizationCode
            && self.ctx.vault.is_some()
            && self.ctx.sign_ins.as_ref().is_some_and(|sign_ins| {
                sign_ins.enabled() && (for_whom || sign_ins.node_sign_ins())
            })
            && (asked || self.challenge.last().is_some())
    }

    /// Asks the user of the call `ctx` to sign in to this server (the task waits in
    /// AUTH_REQUIRED): the result carries the authorization URL; once the node's callback got
    /// the tokens, the server connects again and the task goes on. `redo`: the arguments of a
    /// call of `name` that failed because the server asks for authorization, made again then;
    /// `None`: the sign-in tool's own call, which says whether the server is now connected.
    pub(super) async fn sign_in(
        &self,
        name: &str,
        redo: Option<serde_json::Map<String, Value>>,
        ctx: &ToolContext,
    ) -> ToolOutput {
        let server = self.name.clone();
        if redo.is_none() {
            let connected = {
                let shared = self.shared();
                shared.state == ServerState::Connected
            };
            if connected {
                return ToolOutput::text(format!(
                    "Signed in to the MCP server {server}: its tools are offered from the next \
                     step on."
                ));
            }
        }
        let (Some(vault), Some(sign_ins), McpTransport::Http { url, .. }) =
            (&self.ctx.vault, &self.ctx.sign_ins, &self.config.transport)
        else {
            return ToolOutput::error(format!(
                "{name}: the MCP server {server} asks for authorization; sign in on the node's \
                 machine with `mew mcp login {server}`"
            ));
        };
        if !ctx.can_ask_user {
            return ToolOutput::error(format!(
                "{name}: the MCP server {server} asks for authorization, and this call has no \
                 user to ask to sign in (`mew mcp login {server}` signs the node in)"
            ));
        }
        let principal = self
            .principal
            .as_deref()
            .unwrap_or(super::oauth::NODE_PRINCIPAL);
        let entry = vault.entry(&server, url, principal);
        let me = self.me.clone();
        let then: super::oauth::AfterSignIn = Box::new(move || {
            Box::pin(async move {
                if let Some(me) = me.upgrade() {
                    me.signed_in().await;
                }
            })
        });
        let challenge = self.challenge.last();
        let started = sign_ins
            .start(
                &entry,
                &self.config.oauth,
                challenge.as_deref(),
                ctx.task_id.clone(),
                then,
            )
            .await;
        let address = match started {
            Ok(address) => address,
            Err(why) => {
                return ToolOutput::error(format!(
                    "{name}: the MCP server {server} asks for authorization, and the sign-in \
                     cannot start: {why}"
                ));
            }
        };
        let waiting = Waiting {
            arguments: redo,
            request_state: None,
            key: String::new(),
            schema: Value::Null,
            answered: rmcp::model::InputResponses::new(),
            parked: None,
            sign_in: true,
            sampling: None,
        };
        let message = format!(
            "The MCP server {server} asks you to sign in. Open {address} ; the task goes on \
             once you have."
        );
        match serde_json::to_string(&waiting) {
            Ok(relay) => ToolOutput {
                relay: Some(relay),
                ask: Some(Box::new(crate::tools::ToolAsk {
                    kind: mew_cards::mew::ASK_AUTHORIZATION.to_owned(),
                    data: serde_json::json!({
                        "server": server,
                        "tool": name,
                        "url": address,
                    }),
                })),
                ..ToolOutput::text(message)
            },
            Err(e) => ToolOutput::error(format!("{name}: cannot keep the sign-in: {e}")),
        }
    }

    /// The server refused the client credentials token: the connection is replaced by a new
    /// one, which gets a new token.
    async fn authorize_again(&self) {
        let _connecting = self.reconnecting.lock().await;
        let old = {
            let mut shared = self.shared();
            if shared.state == ServerState::Stopped {
                return;
            }
            shared.connection.take()
        };
        if let Some(old) = old {
            old.kill();
        }
        if let Err(err) = self.establish().await {
            tracing::warn!(server = %self.name, "cannot connect to the MCP server with a new token: {err}");
            self.failed(err);
        }
    }

    /// A sign-in completed: the server connects now, with the new tokens, instead of at its
    /// next try in the background.
    pub(super) async fn signed_in(&self) {
        let _connecting = self.reconnecting.lock().await;
        let (state, current) = {
            let shared = self.shared();
            (shared.state, shared.connection.clone())
        };
        match state {
            ServerState::Stopped => {}
            ServerState::Connected if current.as_ref().is_some_and(|c| c.is_alive()) => {}
            _ => {
                if let Err(err) = self.establish().await {
                    tracing::warn!(server = %self.name, "cannot connect to the MCP server after the sign-in: {err}");
                    self.failed(err);
                }
            }
        }
    }

    /// The last `WWW-Authenticate` challenge the server answered with (401 or 403), if any:
    /// what a new authorization starts from.
    pub(super) fn challenge(&self) -> Option<String> {
        self.challenge.last()
    }

    pub(super) fn status(&self) -> ServerStatus {
        let shared = self.shared();
        let mut state = shared.state;
        let mut last_error = shared.last_error.clone();
        if state == ServerState::Connected
            && let Some(connection) = &shared.connection
            && !connection.is_alive()
        {
            state = ServerState::Restarting;
            last_error = Some(connection.end_reason_now());
        }
        ServerStatus {
            name: self.name.clone(),
            transport: self.config.transport.kind(),
            state,
            tools: match state {
                ServerState::Connected | ServerState::Restarting => shared.tools.len(),
                _ => 0,
            },
            protocol_version: shared.protocol.clone(),
            last_error,
            restarts: shared.restarts,
            skipped_tools: shared.skipped.clone(),
            undefined_vars: self.config.undefined_vars.clone(),
        }
    }

    /// Calls the tool `remote` (`name` to the model) with `input`.
    pub(super) async fn call(
        &self,
        name: &str,
        remote: &str,
        input: Value,
        resumed: Option<Resumed>,
        ctx: &ToolContext,
    ) -> ToolOutput {
        let span = crate::telemetry::span!(
            "mcp.call",
            otel.name = %format_args!("tools/call {remote}"),
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            mcp.method.name = "tools/call",
            mcp.server = %self.name,
            gen_ai.tool.name = %remote,
            gen_ai.operation.name = "execute_tool",
        );
        // The arguments, for a call made again after a sign-in.
        let redo = match (&input, &self.config.transport) {
            (Value::Object(arguments), McpTransport::Http { .. }) => Some(arguments.clone()),
            (Value::Null, McpTransport::Http { .. }) => Some(serde_json::Map::new()),
            _ => None,
        };
        let mut output = tracing::Instrument::instrument(
            self.call_in_span(name, remote, input, resumed, ctx),
            span.clone(),
        )
        .await;
        // A token of an unattended grant that ran out: a new connection gets a new one, and
        // the call is made once more.
        if output.is_error
            && self.config.oauth.grant.is_unattended()
            && output
                .text_content()
                .contains(super::ASKS_FOR_AUTHORIZATION)
            && let Some(redo) = redo.clone()
        {
            self.authorize_again().await;
            output = tracing::Instrument::instrument(
                self.call_in_span(name, remote, Value::Object(redo), None, ctx),
                span.clone(),
            )
            .await;
        }
        // A server that asks for authorization (no tokens, refused ones, or more scopes):
        // the user is asked to sign in, where the node takes sign-ins.
        if output.is_error
            && output
                .text_content()
                .contains(super::ASKS_FOR_AUTHORIZATION)
            && let Some(redo) = redo
            && ctx.can_ask_user
            && self.offers_sign_in(true)
        {
            output = self.sign_in(name, Some(redo), ctx).await;
        }
        if output.is_error {
            span.record("otel.status_code", "error");
        }
        output
    }

    async fn call_in_span(
        &self,
        name: &str,
        remote: &str,
        input: Value,
        resumed: Option<Resumed>,
        ctx: &ToolContext,
    ) -> ToolOutput {
        let arguments = match input {
            Value::Object(arguments) => Some(arguments),
            Value::Null => None,
            other => {
                return ToolOutput::error(format!(
                    "invalid input for {name}: expected a JSON object, got {other}"
                ));
            }
        };
        if ctx.cancel.is_cancelled() {
            return ToolOutput::error(format!("{name} did not run: its task was cancelled"));
        }
        let connection = match self.live_connection(&ctx.cancel).await {
            Ok(connection) => connection,
            Err(why) => return ToolOutput::error(format!("{name} cannot run: {why}")),
        };
        let mut params = CallToolRequestParams::new(remote.to_owned());
        params.arguments = arguments;
        match resumed {
            Some(Resumed::Again {
                input_responses,
                request_state,
            }) => {
                params.input_responses = Some(input_responses);
                params.request_state = request_state;
            }
            Some(Resumed::Parked { parked, answer }) => {
                return self.answer_parked(name, parked, answer, ctx).await;
            }
            None => {}
        }
        // The trace context travels in `_meta`, as the MCP trace-context proposal (SEP-414)
        // has it.
        if let Some(trace) = crate::telemetry::TraceParent::current() {
            let mut meta = rmcp::model::RequestMetaObject::new();
            meta.set_traceparent(trace.traceparent);
            if let Some(state) = trace.tracestate {
                meta.set_tracestate(state);
            }
            params.meta = Some(meta);
        }
        let started = Instant::now();
        let running = self.start_call(&connection, params.clone(), name, ctx);
        self.follow_call(name, params, connection, running, started, ctx)
            .await
    }

    /// Starts `tools/call` with `params` on `connection`, in a task of its own (see
    /// [`RunningCall`]).
    fn start_call(
        &self,
        connection: &Arc<Connection>,
        params: CallToolRequestParams,
        name: &str,
        ctx: &ToolContext,
    ) -> RunningCall {
        let (asks, questions) = tokio::sync::mpsc::channel(1);
        // A call that may not ask its user keeps no sender: its server's questions are
        // declined.
        let asks =
            (ctx.can_ask_user && self.config.elicitation == McpElicitation::Ask).then_some(asks);
        let me = self.me.clone();
        let peer = connection.peer().clone();
        let name = name.to_owned();
        let ctx = ctx.clone();
        let call = async move {
            let Some(me) = me.upgrade() else {
                return Err(ServiceError::TransportClosed);
            };
            me.call_tool(&peer, params, &name, &ctx, asks).await
        };
        let handle = tokio::spawn(tracing::Instrument::instrument(
            call,
            tracing::Span::current(),
        ));
        RunningCall { handle, questions }
    }

    /// Follows a running call to its end: a 2026-07-28 server's rounds of input requests are
    /// answered and the call made again; an earlier server's question to the user parks the
    /// call and puts the question to the user; cancellation, the call's timeout (counted from
    /// now) and shutdown end it.
    async fn follow_call(
        &self,
        name: &str,
        mut params: CallToolRequestParams,
        connection: Arc<Connection>,
        mut running: RunningCall,
        started: Instant,
        ctx: &ToolContext,
    ) -> ToolOutput {
        let timeout = self.config.call_timeout;
        // Dropping the call before its answer (below, on cancellation or timeout) sends the
        // server `notifications/cancelled` for the request.
        let deadline = tokio::time::Instant::now() + timeout;
        let mut rounds = 0;
        let outcome = loop {
            let outcome = tokio::select! {
                biased;
                answer = &mut running.handle => Outcome::Answer(
                    // Only a panic ends the call's task early.
                    answer.unwrap_or(Err(ServiceError::UnexpectedResponse)),
                ),
                Some(question) = running.questions.recv() => {
                    let parked = Parked { running, question, connection, params, started };
                    return self.park(name, parked, ctx);
                }
                () = ctx.cancel.cancelled() => Outcome::Cancelled,
                () = tokio::time::sleep_until(deadline) => Outcome::TimedOut,
                () = self.stopping.cancelled() => Outcome::Stopped,
            };
            // A 2026-07-28 server asks what it needs in the call's result; the call is made
            // again with the answers, for at most MAX_INPUT_ROUNDS rounds.
            let Outcome::Answer(Ok(CallToolResponse::InputRequired(required))) = &outcome else {
                break outcome;
            };
            if rounds == MAX_INPUT_ROUNDS {
                break outcome;
            }
            rounds += 1;
            let answers = tokio::select! {
                biased;
                answers = self.answer_inputs(required, ctx) => answers,
                () = ctx.cancel.cancelled() => break Outcome::Cancelled,
                () = tokio::time::sleep_until(deadline) => break Outcome::TimedOut,
                () = self.stopping.cancelled() => break Outcome::Stopped,
            };
            match answers {
                Ok(Inputs::Answered(answers)) => {
                    params.input_responses = Some(answers);
                    params.request_state = required.request_state.clone();
                    running = self.start_call(&connection, params.clone(), name, ctx);
                }
                Ok(Inputs::Ask(asked)) => {
                    self.answered(&connection);
                    return ask_user(name, &self.name, &params, required, asked);
                }
                Err(why) => {
                    self.answered(&connection);
                    return ToolOutput::error(format!(
                        "{name} failed: the MCP server {} asked for {why}",
                        self.name
                    ));
                }
            }
        };
        let label = match &outcome {
            Outcome::Answer(Ok(CallToolResponse::Complete(result))) => {
                if result.is_error == Some(true) {
                    "tool_error"
                } else {
                    "ok"
                }
            }
            Outcome::Answer(Ok(_)) => "unsupported_answer",
            Outcome::Answer(Err(ServiceError::McpError(_))) => "error",
            Outcome::Answer(Err(_)) => "transport_error",
            Outcome::Cancelled => "cancelled",
            Outcome::TimedOut => "timeout",
            Outcome::Stopped => "stopped",
        };
        crate::metrics::mcp_call(&self.name, label, started.elapsed().as_secs_f64());
        let server = &self.name;
        match outcome {
            Outcome::Answer(Ok(CallToolResponse::Complete(result))) => {
                self.answered(&connection);
                content::output(result)
            }
            Outcome::Answer(Ok(CallToolResponse::InputRequired(_))) => {
                self.answered(&connection);
                ToolOutput::error(format!(
                    "{name} failed: the MCP server {server} still asked for input after \
                     {MAX_INPUT_ROUNDS} rounds"
                ))
            }
            Outcome::Answer(Ok(CallToolResponse::Task(_))) => {
                self.answered(&connection);
                ToolOutput::error(format!(
                    "{name} failed: the MCP server {server} turned the call into a task to poll, \
                     which Mew does not follow"
                ))
            }
            Outcome::Answer(Ok(_)) => {
                self.answered(&connection);
                ToolOutput::error(format!(
                    "{name} failed: the MCP server {server} gave an answer Mew does not know"
                ))
            }
            Outcome::Answer(Err(ServiceError::McpError(error))) => {
                self.answered(&connection);
                ToolOutput::error(format!(
                    "{name} failed: the MCP server {server} answered with error {}: {}",
                    error.code.0, error.message
                ))
            }
            Outcome::Answer(Err(err)) => {
                if connection.is_alive() && !matches!(err, ServiceError::TransportClosed) {
                    return ToolOutput::error(format!(
                        "{name} failed: the MCP server {server}: {}",
                        describe_service_error(&err)
                    ));
                }
                let reason = connection.end_reason().await;
                let after = self.connection_ended(&connection, &reason);
                ToolOutput::error(format!("{name} failed: {reason}{after}"))
            }
            Outcome::Cancelled => ToolOutput::error(format!(
                "{name} was cancelled with its task; the MCP server {server} was told to stop it"
            )),
            Outcome::TimedOut => {
                let after = if self.timed_out(&connection) {
                    let reason = format!(
                        "the MCP server {server} answered none of its last {HUNG_AFTER} calls \
                         within its call_timeout"
                    );
                    let ended = self.connection_ended(&connection, &reason);
                    format!("; {reason}{ended}")
                } else {
                    String::new()
                };
                ToolOutput::error(format!(
                    "{name} timed out after {} (the call_timeout of the MCP server {server}); the \
                     server was told to cancel it{after}",
                    crate::duration::format(timeout)
                ))
            }
            Outcome::Stopped => ToolOutput::error(format!(
                "{name} was stopped: the MCP server {server} is shutting down"
            )),
        }
    }

    /// Parks a call whose server asked a question while it runs, and puts the question to the
    /// user; the reply reaches it through [`Self::answer_parked`].
    fn park(&self, name: &str, parked: Parked, ctx: &ToolContext) -> ToolOutput {
        let number = self
            .next_parked
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let waiting = Waiting {
            arguments: parked.params.arguments.clone(),
            request_state: None,
            key: String::new(),
            schema: Value::Null,
            answered: rmcp::model::InputResponses::new(),
            parked: Some(number),
            sign_in: false,
            sampling: None,
        };
        let output = put_question(name, &self.name, &parked.question.elicitation, waiting);
        if output.relay.is_none() {
            // A question that cannot be put: the call ends, and the server is told so.
            return output;
        }
        self.parked_calls().insert(number, parked);
        // It waits until the reply takes it, and goes when the wait is over, the task that
        // made it is cancelled, or the node stops.
        let me = self.me.clone();
        let stopping = self.stopping.clone();
        let cancel = ctx.cancel.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(QUESTION_WAIT) => {}
                () = stopping.cancelled() => {}
                () = cancel.cancelled() => {}
            }
            if let Some(me) = me.upgrade() {
                let expired = me.parked_calls().remove(&number);
                drop(expired);
            }
        });
        output
    }

    /// The calls waiting for their user's reply.
    fn parked_calls(&self) -> MutexGuard<'_, std::collections::HashMap<u64, Parked>> {
        self.parked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether as many calls wait for their user as may ([`MAX_PARKED`]).
    pub(super) fn parked_full(&self) -> bool {
        self.parked_calls().len() >= MAX_PARKED
    }

    /// Gives the parked call `number` the user's `answer` and follows it on.
    async fn answer_parked(
        &self,
        name: &str,
        number: u64,
        answer: Value,
        ctx: &ToolContext,
    ) -> ToolOutput {
        let Some(parked) = self.parked_calls().remove(&number) else {
            return ToolOutput::error(format!(
                "{name} cannot take the reply: the call whose server asked waits {} for it, and \
                 not across a restart of the node, and it waits no longer; call {name} again",
                crate::duration::format(QUESTION_WAIT)
            ));
        };
        let Parked {
            running,
            question,
            connection,
            params,
            started,
        } = parked;
        // A cancelled task's call gets no answer: it ends below, and the server is told so. A
        // server that stopped waiting ends the call its own way, which follows.
        if !ctx.cancel.is_cancelled() {
            let _ = question.reply.send(answer);
        }
        self.follow_call(name, params, connection, running, started, ctx)
            .await
    }

    /// A call on `connection` got an answer: the server works, so restarts in a row start
    /// from zero again.
    fn answered(&self, connection: &Arc<Connection>) {
        let mut shared = self.shared();
        if shared
            .connection
            .as_ref()
            .is_some_and(|current| Arc::ptr_eq(current, connection))
        {
            shared.in_a_row = 0;
            shared.timeouts_in_a_row = 0;
        }
    }

    /// A call on `connection` timed out. Whether a stdio server now looks hung: its last
    /// [`HUNG_AFTER`] calls all timed out. It is then restarted like a server that died; a
    /// remote (HTTP) server is left alone, slow is not dead there.
    fn timed_out(&self, connection: &Arc<Connection>) -> bool {
        let mut shared = self.shared();
        if !shared
            .connection
            .as_ref()
            .is_some_and(|current| Arc::ptr_eq(current, connection))
        {
            return false;
        }
        shared.timeouts_in_a_row += 1;
        let hung = shared.timeouts_in_a_row >= HUNG_AFTER
            && matches!(self.config.transport, McpTransport::Stdio { .. });
        if hung {
            shared.timeouts_in_a_row = 0;
        }
        hung
    }

    /// Records that `connection` ended for `reason`: the server is restarted on the next call,
    /// or has failed once it used up its restarts. Returns what happens next, for messages.
    fn connection_ended(&self, connection: &Arc<Connection>, reason: &str) -> String {
        let mut shared = self.shared();
        let current = shared
            .connection
            .as_ref()
            .is_some_and(|c| Arc::ptr_eq(c, connection));
        if !current {
            return String::new();
        }
        connection.kill();
        shared.connection = None;
        if shared.state == ServerState::Stopped {
            return String::new();
        }
        if shared.in_a_row >= self.config.max_restarts {
            let restarts = self.config.max_restarts;
            tracing::warn!(server = %self.name, "gave up on the MCP server after {restarts} restarts in a row: {reason}");
            shared.state = ServerState::Failed;
            shared.last_error = Some(format!(
                "gave up after {restarts} restarts in a row; the last time: {reason}"
            ));
            shared.tools.clear();
            drop(shared);
            self.announce();
            format!(
                "; gave up on the MCP server {} after {restarts} restarts in a row",
                self.name
            )
        } else {
            tracing::warn!(server = %self.name, "the MCP server's connection ended: {reason}");
            shared.state = ServerState::Restarting;
            shared.last_error = Some(reason.to_owned());
            format!(
                "; the MCP server {} is started again on the next call",
                self.name
            )
        }
    }

    /// The connection to call on: the current one while it lives, else a new one (after a
    /// backoff, within the restart limit).
    async fn live_connection(&self, cancel: &CancellationToken) -> Result<Arc<Connection>, String> {
        let _reconnecting = tokio::select! {
            guard = self.reconnecting.lock() => guard,
            () = cancel.cancelled() => return Err("the task was cancelled".to_owned()),
            () = self.stopping.cancelled() => return Err(self.stopped()),
        };
        let dead = {
            let shared = self.shared();
            match shared.state {
                ServerState::Stopped => return Err(self.stopped()),
                ServerState::Failed => {
                    return Err(format!(
                        "the MCP server {} has failed: {}",
                        self.name,
                        shared.last_error.as_deref().unwrap_or("no reason known")
                    ));
                }
                ServerState::Connecting | ServerState::Connected | ServerState::Restarting => {}
            }
            match &shared.connection {
                Some(connection) if connection.is_alive() => return Ok(connection.clone()),
                Some(connection) => Some(connection.clone()),
                None => None,
            }
        };
        if let Some(dead) = dead {
            let reason = dead.end_reason().await;
            self.connection_ended(&dead, &reason);
        }
        let (n, wait) = {
            let mut shared = self.shared();
            if shared.state == ServerState::Failed {
                return Err(format!(
                    "the MCP server {} has failed: {}",
                    self.name,
                    shared.last_error.as_deref().unwrap_or("no reason known")
                ));
            }
            shared.in_a_row += 1;
            shared.restarts += 1;
            shared.state = ServerState::Restarting;
            let n = shared.in_a_row;
            let since = shared
                .started
                .map_or(Duration::MAX, |started| started.elapsed());
            (n, backoff(n).saturating_sub(since))
        };
        tracing::info!(server = %self.name, "restarting the MCP server (restart {n} in a row)");
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = cancel.cancelled() => return Err("the task was cancelled".to_owned()),
            () = self.stopping.cancelled() => return Err(self.stopped()),
        }
        match self.establish().await {
            Ok(()) => self
                .shared()
                .connection
                .clone()
                .ok_or_else(|| self.stopped()),
            Err(err) => {
                let mut shared = self.shared();
                if shared.state == ServerState::Stopped {
                    return Err(self.stopped());
                }
                let why = format!("restart {n} in a row failed: {err}");
                if n >= self.config.max_restarts {
                    shared.state = ServerState::Failed;
                    shared.tools.clear();
                    shared.last_error = Some(format!(
                        "gave up after {n} restarts in a row; the last one: {err}"
                    ));
                    drop(shared);
                    self.announce();
                } else {
                    shared.last_error = Some(why.clone());
                }
                Err(format!("the MCP server {}: {why}", self.name))
            }
        }
    }

    /// Sends `tools/call` and waits for its answer, the server's progress and log messages
    /// on the way going to `ctx`'s news. Dropped before the answer, it tells the server the
    /// call was cancelled.
    ///
    /// The SDK's `call_tool_once` does the same without saying which progress token it gave
    /// the request (it replaces any the caller sets), so the request is sent here, as it
    /// does, and followed by the token it got.
    async fn call_tool(
        &self,
        peer: &rmcp::Peer<rmcp::RoleClient>,
        params: CallToolRequestParams,
        name: &str,
        ctx: &ToolContext,
        asks: Option<tokio::sync::mpsc::Sender<super::news::Question>>,
    ) -> Result<CallToolResponse, ServiceError> {
        let request =
            rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(params));
        let handle = peer
            .send_request_with_option(request, rmcp::service::PeerRequestOptions::no_options())
            .await?;
        let _following =
            (ctx.news.is_some() || ctx.sampler.is_some() || asks.is_some()).then(|| {
                self.followers
                    .follow(handle.progress_token.clone(), name, ctx, asks)
            });
        let mut abandoned = Abandoned {
            peer: peer.clone(),
            id: Some(handle.id.clone()),
        };
        let result = handle.await_response().await;
        abandoned.id = None;
        match result? {
            rmcp::model::ServerResult::CallToolResult(result) => {
                Ok(CallToolResponse::Complete(result))
            }
            rmcp::model::ServerResult::InputRequiredResult(result) => {
                Ok(CallToolResponse::InputRequired(result))
            }
            rmcp::model::ServerResult::CreateTaskResult(result) => {
                Ok(CallToolResponse::Task(result))
            }
            // A result without content decodes as the empty result.
            rmcp::model::ServerResult::EmptyResult(_) => Ok(CallToolResponse::Complete(
                rmcp::model::CallToolResult::default(),
            )),
            _ => Err(ServiceError::UnexpectedResponse),
        }
    }

    /// The answers to what a server asks in an input-required result: sampling through the
    /// task's model (when the entry allows it), the roots, and for elicitation the question to
    /// put to the user (one a round; declined when the call has no user to ask, or when the entry declines).
    /// The error says what could not be answered.
    #[allow(deprecated)] // Sampling and roots, as servers of 2025-11-25 know them.
    async fn answer_inputs(
        &self,
        required: &rmcp::model::InputRequiredResult,
        ctx: &ToolContext,
    ) -> Result<Inputs, String> {
        use rmcp::model::InputRequest;
        let mut answers = rmcp::model::InputResponses::new();
        let mut question = None;
        let mut sampling = None;
        for (key, request) in required.input_requests.iter().flatten() {
            let answer = match request {
                InputRequest::CreateMessage(request) => {
                    if self.config.sampling == McpSampling::Deny {
                        return Err(
                            "the task's model (sampling), which its entry does not allow \
                             (`sampling: false`)"
                                .to_owned(),
                        );
                    }
                    if ctx.sampler.is_none() {
                        return Err(
                            "the model of a task (sampling), and this call is not a task's"
                                .to_owned(),
                        );
                    }
                    let asked = connect::sample_request(request.params.clone())
                        .map_err(|e| format!("a model call Mew cannot make: {}", e.message))?;
                    if self.config.sampling == McpSampling::Ask {
                        // The task's caller decides first: one question at a time.
                        if !ctx.can_ask_user {
                            return Err("the task's model (sampling), and no one can be asked \
                                 to allow it (the entry says `sampling: ask`)"
                                .to_owned());
                        }
                        if question.is_some() {
                            continue;
                        }
                        question = Some((
                            key.clone(),
                            Ok(connect::sampling_question(&self.name, &asked)),
                        ));
                        sampling = Some(
                            serde_json::to_value(&request.params)
                                .map_err(|e| format!("a request Mew cannot keep: {e}"))?,
                        );
                        continue;
                    }
                    let answer = sample(ctx, asked).await?;
                    serde_json::to_value(connect::sample_result(answer))
                }
                InputRequest::ListRoots(_) => {
                    serde_json::to_value(rmcp::model::ListRootsResult::new(
                        connect::project_roots(&self.ctx.project_dir).to_vec(),
                    ))
                }
                // The user is asked (the task waits in INPUT_REQUIRED) when the call is a
                // task's and the entry does not decline; one question at a time.
                InputRequest::Elicitation(request)
                    if question.is_none()
                        && ctx.can_ask_user
                        && self.config.elicitation == McpElicitation::Ask =>
                {
                    question = Some((key.clone(), serde_json::to_value(&request.params)));
                    continue;
                }
                InputRequest::Elicitation(_) => Ok(serde_json::json!({"action": "decline"})),
                _ => return Err(format!("something Mew does not know ({key})")),
            };
            answers.insert(
                key.clone(),
                answer.map_err(|e| format!("an answer Mew cannot encode: {e}"))?,
            );
        }
        Ok(match question {
            Some((key, elicitation)) => Inputs::Ask(Asked {
                key,
                elicitation: elicitation.map_err(|e| format!("a question Mew cannot read: {e}"))?,
                answered: answers,
                sampling,
            }),
            None => Inputs::Answered(answers),
        })
    }

    fn stopped(&self) -> String {
        format!("the MCP server {} is shut down", self.name)
    }

    /// The server said its tools changed (on the connection `generation`): reload them.
    pub(super) fn tools_changed(&self, generation: u64) {
        let Some(me) = self.me.upgrade() else {
            return;
        };
        tokio::spawn(async move { me.refresh(generation).await });
    }

    async fn refresh(&self, generation: u64) {
        let _refreshing = self.refreshing.lock().await;
        let connection = {
            let shared = self.shared();
            if shared.generation != generation {
                return;
            }
            match &shared.connection {
                Some(connection) => connection.clone(),
                None => return,
            }
        };
        let listed = tokio::select! {
            listed = tokio::time::timeout(self.config.connect_timeout, connection.peer().list_all_tools()) => listed,
            () = self.stopping.cancelled() => return,
        };
        let listed = match listed {
            Ok(Ok(listed)) => listed,
            Ok(Err(err)) => {
                tracing::warn!(
                    server = %self.name,
                    "cannot reload the tools of the MCP server: {}",
                    describe_service_error(&err)
                );
                return;
            }
            Err(_elapsed) => {
                tracing::warn!(server = %self.name, "cannot reload the tools of the MCP server: no answer");
                return;
            }
        };
        let (tools, skipped) = adapt(&self.me, &self.name, &self.config, listed);
        let mut shared = self.shared();
        if shared.generation != generation || shared.state == ServerState::Stopped {
            return;
        }
        tracing::info!(server = %self.name, tools = tools.len(), "reloaded the MCP server's tools");
        shared.tools = tools;
        shared.skipped = skipped;
        drop(shared);
        self.announce();
    }

    /// Ends the session and the program, and the callers' sessions, within `deadline`.
    pub(super) async fn shutdown(&self, deadline: Duration) {
        let callers: Vec<Arc<Self>> = self
            .callers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .map(|(_, client)| client)
            .collect();
        futures_util::future::join_all(
            std::iter::once(self)
                .chain(callers.iter().map(|client| &**client))
                .map(|client| client.close(deadline)),
        )
        .await;
    }

    /// Ends this client's own session and program, within `deadline`.
    async fn close(&self, deadline: Duration) {
        self.stopping.cancel();
        let connection = {
            let mut shared = self.shared();
            shared.state = ServerState::Stopped;
            shared.tools.clear();
            shared.connection.take()
        };
        self.announce();
        if let Some(connection) = connection {
            connection.close(deadline).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::elicitation_answer;

    #[test]
    fn an_answer_takes_the_forms_defaults_for_the_fields_it_leaves_out() {
        let schema = json!({"type": "object", "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "note": {"type": "string"},
        }});
        assert_eq!(
            elicitation_answer(r#"{"name": "Ada"}"#, &schema),
            json!({"action": "accept", "content": {"name": "Ada", "age": 30}})
        );
        assert_eq!(
            elicitation_answer("{}", &schema),
            json!({"action": "accept", "content": {"name": "John Doe", "age": 30}})
        );
        assert_eq!(
            elicitation_answer("decline", &schema),
            json!({"action": "decline"})
        );
    }
}
