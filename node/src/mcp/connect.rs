//! One connection to an MCP server: the transport, the handshake, the first tool list.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use http::{HeaderName, HeaderValue};
use rmcp::ErrorData;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    Implementation, ProtocolVersion, ServerNotification, SubscriptionFilter, Tool as ListedTool,
};
// Roots, log messages and sampling are deprecated from 2026-07-28 on (SEP-2577); servers of
// 2025-11-25 still use them.
#[allow(deprecated)]
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ListRootsResult,
    LoggingMessageNotificationParam, ProgressNotificationParam, Root, SamplingMessage,
    SamplingMessageContentBlock,
};
use rmcp::service::{
    ClientInitializeError, NotificationContext, Peer, RequestContext, RoleClient, RunningService,
    ServiceError,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::auth::{AuthClient, AuthorizationManager};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt as _};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::McpContext;
use super::client::McpClient;
use super::http::HttpClient;
use super::stderr::StderrTail;
use crate::config::mcp::{McpOAuthGrant, McpProtocol, McpSampling, McpServerConfig, McpTransport};
use crate::process::{BASE_ENV, ProcessGroup, command, pass_env};

/// The version asked for in the `server/discover` probe.
const MODERN: ProtocolVersion = ProtocolVersion::V_2026_07_28;
/// The version offered in the `initialize` handshake.
const LEGACY: ProtocolVersion = ProtocolVersion::V_2025_11_25;
/// How long a failed stdio server is given to exit and finish its stderr, for the message.
const EXIT_GRACE: Duration = Duration::from_secs(1);
/// The transport's own headers, which a configuration may not set.
const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "content-type",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];
/// How long a server may take to acknowledge the `list_changed` subscription; one that does not
/// is used without it.
const LISTEN_LIMIT: Duration = Duration::from_secs(10);
/// The most redirects followed for one request.
const MAX_REDIRECTS: usize = 10;

/// Receives what a server sends unasked.
#[derive(Clone)]
pub(super) struct Handler {
    /// The server the connection belongs to.
    pub(super) server: Weak<McpClient>,
    /// Which of its connections this is.
    pub(super) generation: u64,
    /// The server's name, for logs.
    pub(super) name: Arc<str>,
    /// The roots the client declares and lists: the project directory, as a `file://` URI.
    #[allow(deprecated)]
    pub(super) roots: Arc<[Root]>,
    /// Whether the server may ask the task's model: trusted, asking the caller, or never.
    pub(super) sampling: McpSampling,
    /// Whether the server's questions are put to the user (`elicitation: ask`, the default).
    pub(super) elicitation: bool,
    /// Where an http server's last challenge (401, 403) is kept.
    pub(super) challenge: super::http::Challenge,
    /// Whose tokens the connection carries (`None`: the node's).
    pub(super) principal: Option<String>,
}

/// The roots of a project: its directory, as a `file://` URI (none when the path cannot be
/// one, such as a relative path).
#[allow(deprecated)]
pub(super) fn project_roots(project: &Path) -> Arc<[Root]> {
    let name = project
        .file_name()
        .map(|name| name.to_string_lossy().into_owned());
    reqwest::Url::from_directory_path(project)
        .ok()
        .map(|url| {
            let root = Root::new(url.to_string());
            match name {
                Some(name) => root.with_name(name),
                None => root,
            }
        })
        .into_iter()
        .collect()
}

#[allow(deprecated)] // Sampling, see the imports.
/// A sampling request as the task's model gets it: its text messages, system prompt, token
/// limit and model hints. Images, audio and tool use are refused: the request says so.
pub(super) fn sample_request(
    params: CreateMessageRequestParams,
) -> Result<crate::tools::SampleRequest, ErrorData> {
    use crate::conversation::ChatMessage;
    let mut messages = Vec::with_capacity(params.messages.len());
    for message in params.messages {
        let mut text = String::new();
        for block in message.content.into_vec() {
            match block {
                SamplingMessageContentBlock::Text(block) => text.push_str(&block.text),
                _ => {
                    return Err(ErrorData::invalid_params(
                        "Mew answers sampling requests with text messages only",
                        None,
                    ));
                }
            }
        }
        messages.push(match message.role {
            rmcp::model::Role::User => ChatMessage::user(text),
            rmcp::model::Role::Assistant => ChatMessage::assistant(text),
        });
    }
    if messages.is_empty() {
        return Err(ErrorData::invalid_params(
            "a sampling request needs at least one message",
            None,
        ));
    }
    let model_hints = params
        .model_preferences
        .and_then(|preferences| preferences.hints)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|hint| hint.name)
        .collect();
    Ok(crate::tools::SampleRequest {
        system: params.system_prompt,
        messages,
        max_tokens: params.max_tokens,
        model_hints,
    })
}

/// The question put to the task's caller before the model answers a server's sampling
/// request (`sampling: ask`), as an elicitation: what the server asks the model, and a yes or
/// no.
pub(super) fn sampling_question(
    server: &str,
    request: &crate::tools::SampleRequest,
) -> serde_json::Value {
    let asked = request
        .messages
        .iter()
        .rev()
        .map(|message| message.text())
        .find(|text| !text.trim().is_empty())
        .unwrap_or_default();
    let asked = crate::tools::cut_chars(&asked, 500);
    serde_json::json!({
        "message": format!(
            "The MCP server {server} asks to use the task's model (sampling, up to {} tokens): \
             \"{asked}\". Allow it? (yes or no)",
            request.max_tokens
        ),
        "requestedSchema": {
            "type": "object",
            "properties": {
                "allow": {
                    "type": "boolean",
                    "description": "yes to let the task's model answer the server"
                }
            },
            "required": ["allow"]
        }
    })
}

/// Whether the caller's answer to [`sampling_question`] allows the request: accepted with
/// `allow` true (or `yes`).
pub(super) fn sampling_allowed(answer: &serde_json::Value) -> bool {
    answer["action"] == "accept"
        && match &answer["content"]["allow"] {
            serde_json::Value::Bool(allow) => *allow,
            serde_json::Value::String(text) => matches!(
                text.trim().to_ascii_lowercase().as_str(),
                "yes" | "y" | "true" | "allow"
            ),
            _ => false,
        }
}

/// The task's model's answer as a sampling result.
#[allow(deprecated)] // Sampling, see the imports.
pub(super) fn sample_result(answer: crate::tools::SampleAnswer) -> CreateMessageResult {
    let stop = if answer.hit_max_tokens {
        CreateMessageResult::STOP_REASON_END_MAX_TOKEN
    } else {
        CreateMessageResult::STOP_REASON_END_TURN
    };
    CreateMessageResult::new(SamplingMessage::assistant_text(answer.text), answer.model)
        .with_stop_reason(stop)
}

impl Handler {
    /// Puts `elicitation` (a question's `message` and form) to the user of the running call:
    /// the call waits, parked, while its task asks (INPUT_REQUIRED). The user's answer, `None`
    /// when the call ended before one, or why no one can be asked.
    async fn put_to_user(
        &self,
        elicitation: serde_json::Value,
    ) -> Result<Option<serde_json::Value>, String> {
        let asks = {
            let client = self.server.upgrade().ok_or("the client is shut down")?;
            if client.parked_full() {
                return Err("too many of its calls wait for their user already".to_owned());
            }
            client.followers.questioner()?
        };
        let (reply, answer) = tokio::sync::oneshot::channel();
        asks.send(super::news::Question { elicitation, reply })
            .await
            .map_err(|_| "the call it asked for has ended".to_owned())?;
        Ok(answer.await.ok())
    }

    fn tool_list_changed(&self) {
        if let Some(server) = self.server.upgrade() {
            server.tools_changed(self.generation);
        }
    }
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        // Roots are declared only when there are some to list.
        // The SDK's builder is behind its server feature, and the struct is non-exhaustive:
        // the capability is read from its JSON form.
        let mut capabilities = serde_json::Map::new();
        if !self.roots.is_empty() {
            capabilities.insert("roots".into(), serde_json::json!({"listChanged": false}));
        }
        if self.sampling.offered() {
            capabilities.insert("sampling".into(), serde_json::json!({}));
        }
        if self.elicitation {
            capabilities.insert(
                "elicitation".into(),
                serde_json::json!({"form": {}, "url": {}}),
            );
        }
        // Skills (SEP-2640): listed when the server offers them, read when a role loads one.
        capabilities.insert(
            "extensions".into(),
            serde_json::json!({ rmcp::model::SKILLS_EXTENSION_ID: {} }),
        );
        let capabilities: ClientCapabilities =
            serde_json::from_value(serde_json::Value::Object(capabilities)).unwrap_or_default();
        ClientConfig::new(
            capabilities,
            Implementation::new("mew", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(LEGACY)
    }

    #[allow(deprecated)]
    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        Ok(ListRootsResult::new(self.roots.to_vec()))
    }

    #[allow(deprecated)] // Sampling, see the imports.
    /// `sampling/createMessage`: answered by the model of the task whose call is running,
    /// when the server's entry allows it; text only.
    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let server = &self.name;
        if self.sampling == McpSampling::Deny {
            return Err(ErrorData::invalid_request(
                format!(
                    "Mew does not let the MCP server {server} ask its model (sampling): its \
                     entry says `sampling: false`"
                ),
                None,
            ));
        }
        let client = self
            .server
            .upgrade()
            .ok_or_else(|| ErrorData::internal_error("the client is shut down", None))?;
        let sampler = client
            .followers
            .sampler()
            .map_err(|why| ErrorData::invalid_request(format!("cannot sample: {why}"), None))?;
        let request = sample_request(params)?;
        if self.sampling == McpSampling::Ask {
            // The task's caller decides, as for a question (the call waits, parked).
            let why = match self.put_to_user(sampling_question(server, &request)).await {
                Ok(Some(answer)) if sampling_allowed(&answer) => None,
                Ok(Some(_)) => Some("the task's caller did not allow it".to_owned()),
                Ok(None) => Some("the call ended before the caller answered".to_owned()),
                Err(why) => Some(why),
            };
            if let Some(why) = why {
                tracing::info!(server = %server, "refused the MCP server's sampling request: {why}");
                return Err(ErrorData::invalid_request(
                    format!("Mew did not let the MCP server {server} ask its model: {why}"),
                    None,
                ));
            }
        }
        let answer = sampler(request)
            .await
            .map_err(|why| ErrorData::internal_error(why, None))?;
        tracing::info!(server = %server, model = %answer.model, "answered an MCP server's sampling request");
        Ok(sample_result(answer))
    }

    /// `elicitation/create` of a server of 2025-11-25 or before, asked while a call runs: the
    /// call waits, parked, while its task asks the user (INPUT_REQUIRED), and the user's reply
    /// is the answer. Declined when the server's entry declines, when the running call has no
    /// user to ask (see [`super::news::Followers::questioner`]), or when too many calls of the
    /// server wait already; cancelled when the call ends before the reply.
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let server = &self.name;
        let declined = |why: &str| {
            tracing::info!(server = %server, "declined the MCP server's question: {why}");
            Ok(ElicitResult::new(ElicitationAction::Decline))
        };
        if !self.elicitation {
            return declined("its entry declines questions (`elicitation: decline`)");
        }
        let elicitation = serde_json::to_value(&request).map_err(|e| {
            ErrorData::internal_error(format!("cannot read the question: {e}"), None)
        })?;
        match self.put_to_user(elicitation).await {
            Ok(Some(answer)) => serde_json::from_value(answer).map_err(|e| {
                ErrorData::internal_error(format!("cannot encode the user's answer: {e}"), None)
            }),
            // The call ended (cancelled, timed out, or the question expired) before a reply.
            Ok(None) => Ok(ElicitResult::new(ElicitationAction::Cancel)),
            Err(why) => declined(&why),
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tool_list_changed();
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some(server) = self.server.upgrade() {
            server.followers.progress(&params);
        }
    }

    // Deprecated by 2026-07-28 (SEP-2577); servers of 2025-11-25 and before send them.
    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some(server) = self.server.upgrade() {
            server.followers.log(&self.name, &params);
        }
    }
}

/// What is behind a connection: a stdio program (its group and its stderr), or a URL.
pub(super) struct Endpoint {
    process: Mutex<Option<ProcessGroup>>,
    stderr: Option<Arc<StderrTail>>,
    /// How it is named in messages.
    what: String,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Endpoint {
    /// How the stdio program ended, once it has.
    fn exit_status(&self) -> Option<ExitStatus> {
        let mut process = lock(&self.process);
        process.as_mut()?.peek_exit()
    }

    /// Why the connection ended, as far as is known now.
    fn end_reason_now(&self) -> String {
        let mut reason = match self.exit_status() {
            Some(status) => format!("{} exited ({status})", self.what),
            None => format!("the connection to {} ended", self.what),
        };
        if let Some(tail) = self
            .stderr
            .as_ref()
            .map(|s| s.tail())
            .filter(|t| !t.is_empty())
        {
            reason.push_str("; its stderr ends with:\n");
            reason.push_str(&tail);
        }
        reason
    }

    /// Gives a stdio program that is going away a moment to exit and finish its stderr.
    async fn settle(&self) {
        if let Some(stderr) = &self.stderr {
            let until = Instant::now() + EXIT_GRACE;
            while self.exit_status().is_none() && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            stderr.settle(EXIT_GRACE / 2).await;
        }
    }

    /// What went wrong, then what the program said: `why` alone for a URL.
    fn explain(&self, why: &str) -> String {
        match &self.stderr {
            Some(stderr) => {
                let tail = stderr.tail();
                let mut text = match self.exit_status() {
                    Some(status) => format!("{why}; {} exited ({status})", self.what),
                    None => format!("{why} ({})", self.what),
                };
                if !tail.is_empty() {
                    text.push_str("; its stderr ends with:\n");
                    text.push_str(&tail);
                }
                text
            }
            None => format!("{}: {why}", self.what),
        }
    }
}

/// A live connection: the SDK's session, and what is behind it.
pub(super) struct Connection {
    peer: Peer<RoleClient>,
    protocol: String,
    service: Mutex<Option<RunningService<RoleClient, Handler>>>,
    endpoint: Endpoint,
    /// What reads `notifications/tools/list_changed` on a 2026-07-28 connection.
    listener: Option<Listener>,
}

/// The task that reads a `subscriptions/listen` subscription, and what stops it.
struct Listener {
    task: JoinHandle<()>,
    stop: CancellationToken,
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(listener) = &self.listener {
            listener.stop.cancel();
            listener.task.abort();
        }
        // The session's drop guard ends the session; the group's drop kills the group.
    }
}

impl Connection {
    /// The session, to send requests.
    pub(super) fn peer(&self) -> &Peer<RoleClient> {
        &self.peer
    }

    /// The protocol version agreed with the server.
    pub(super) fn protocol(&self) -> &str {
        &self.protocol
    }

    /// Whether the server spoke a version of the `initialize` era (before 2026-07-28).
    pub(super) fn spoke_initialize(&self) -> bool {
        self.peer
            .peer_info()
            .is_some_and(|info| info.protocol_version.has_initialize())
    }

    /// False once the session ended or the stdio program exited.
    pub(super) fn is_alive(&self) -> bool {
        !self.peer.is_transport_closed() && self.endpoint.exit_status().is_none()
    }

    /// Why the connection ended, as far as is known now.
    pub(super) fn end_reason_now(&self) -> String {
        self.endpoint.end_reason_now()
    }

    /// Why the connection ended, after giving a stdio program a moment to exit and finish its
    /// stderr.
    pub(super) async fn end_reason(&self) -> String {
        self.endpoint.settle().await;
        self.endpoint.end_reason_now()
    }

    /// Kills a stdio program's process group at once.
    pub(super) fn kill(&self) {
        if let Some(group) = lock(&self.endpoint.process).as_mut() {
            group.kill();
        }
    }

    /// Ends the session and a stdio program: its stdin closes, then it gets SIGTERM, then its
    /// group gets SIGKILL, all within `deadline`.
    pub(super) async fn close(&self, deadline: Duration) {
        let start = Instant::now();
        // Ending the subscription first lets the server end its side at once.
        if let Some(listener) = &self.listener {
            listener.stop.cancel();
            let _ = tokio::time::timeout(deadline / 4, async {
                while !listener.task.is_finished() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await;
        }
        let service = lock(&self.service).take();
        if let Some(mut service) = service {
            let _ = service.close_with_timeout(deadline / 2).await;
        }
        let group = lock(&self.endpoint.process).take();
        if let Some(mut group) = group {
            let left = deadline.saturating_sub(start.elapsed());
            if tokio::time::timeout(left / 2, group.wait()).await.is_err() {
                let left = deadline.saturating_sub(start.elapsed());
                let _ = group.terminate(left).await;
            }
            // Whatever else runs in the group goes with it.
            group.kill();
        }
    }
}

/// Why a connection could not be made.
pub(super) enum Failure {
    /// Worth a new connection with `initialize`: the server answered the 2026-07-28 probe but
    /// supports none of the versions asked for, or answered it with something that is no
    /// discovery result (a 2025-11-25 server may answer a method it does not know with an
    /// empty result, as the TypeScript SDK's servers do).
    Legacy(String),
    /// Anything else.
    Other(String),
}

impl Failure {
    fn message(self) -> String {
        match self {
            Self::Legacy(message) | Self::Other(message) => message,
        }
    }

    fn message_ref(&self) -> &str {
        match self {
            Self::Legacy(message) | Self::Other(message) => message,
        }
    }
}

/// Which handshake one attempt makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `server/discover`, falling back to `initialize` when the server says it is legacy.
    Auto,
    /// `initialize` only.
    Initialize,
    /// `server/discover` only.
    Discover,
}

/// Connects to the server, within `limit`: the transport, the handshake, the tool list, and
/// on 2026-07-28 the `list_changed` subscription. Returns the connection and the tools.
///
/// The handshake is the entry's `protocol`; with `auto`, a server that answered the probe with
/// something else than a discovery result is connected again with `initialize`, and one known
/// to speak an earlier version (`spoke_initialize`, from its last connection) starts there.
pub(super) async fn connect(
    name: &str,
    config: &McpServerConfig,
    ctx: &McpContext,
    handler: Handler,
    limit: Duration,
    spoke_initialize: bool,
) -> Result<(Connection, Listed), String> {
    let start = Instant::now();
    let mode = match config.protocol {
        McpProtocol::Initialize => Mode::Initialize,
        McpProtocol::Discover => Mode::Discover,
        McpProtocol::Auto if spoke_initialize => Mode::Initialize,
        McpProtocol::Auto => Mode::Auto,
    };
    match open(name, config, ctx, handler.clone(), mode, limit).await {
        Err(Failure::Legacy(why)) if mode == Mode::Auto => {
            tracing::debug!(server = name, "{why}; connecting again with initialize");
            let left = limit.saturating_sub(start.elapsed());
            open(name, config, ctx, handler, Mode::Initialize, left)
                .await
                .map_err(Failure::message)
        }
        // A server remembered as one of the `initialize` era that refuses it now may have been
        // upgraded: it gets the probe.
        Err(failure)
            if spoke_initialize
                && config.protocol == McpProtocol::Auto
                && !failure.message_ref().contains(ASKS_FOR_AUTHORIZATION) =>
        {
            tracing::debug!(
                server = name,
                "initialize failed ({}); probing with server/discover",
                failure.message_ref()
            );
            let left = limit.saturating_sub(start.elapsed());
            match open(name, config, ctx, handler.clone(), Mode::Auto, left).await {
                Err(Failure::Legacy(why)) => Err(why),
                other => other.map_err(Failure::message),
            }
        }
        other => other.map_err(Failure::message),
    }
}

/// One attempt, with the handshake of `mode`.
async fn open(
    name: &str,
    config: &McpServerConfig,
    ctx: &McpContext,
    handler: Handler,
    mode: Mode,
    limit: Duration,
) -> Result<(Connection, Listed), Failure> {
    let start = Instant::now();
    let (endpoint, session) = match &config.transport {
        McpTransport::Stdio {
            command: program,
            args,
            env,
            cwd,
        } => {
            let (mut group, dir) =
                spawn(name, program, args, env, cwd.as_deref(), ctx).map_err(Failure::Other)?;
            let child = group.child_mut();
            let (Some(stdin), Some(stdout), Some(stderr)) =
                (child.stdin.take(), child.stdout.take(), child.stderr.take())
            else {
                return Err(Failure::Other("the program's pipes are missing".to_owned()));
            };
            let endpoint = Endpoint {
                process: Mutex::new(Some(group)),
                stderr: Some(StderrTail::capture(name, stderr)),
                what: format!("the server program {program:?} (in {})", dir.display()),
            };
            let transport = AsyncRwTransport::new_client(stdout, stdin);
            let session =
                tokio::time::timeout(limit, handshake(handler.clone(), transport, mode)).await;
            (endpoint, session)
        }
        McpTransport::Http { url, headers } => {
            let endpoint = Endpoint {
                process: Mutex::new(None),
                stderr: None,
                what: url.clone(),
            };
            let session = tokio::time::timeout(limit, async {
                check_url(url).map_err(Failure::Other)?;
                let auth =
                    authorization(name, url, config, ctx, handler.principal.as_deref()).await;
                let (auth, dpop) = auth?;
                let transport = http_transport(
                    url,
                    headers,
                    config.connect_timeout,
                    auth,
                    handler.challenge.clone(),
                    dpop,
                )
                .map_err(Failure::Other)?;
                handshake(handler.clone(), transport, mode)
                    .await
                    .map_err(|failure| match failure {
                        Failure::Other(why) if why.contains(ASKS_FOR_AUTHORIZATION) => {
                            Failure::Other(format!(
                                "{why}: sign in with `mew mcp login {name}` (or give a token \
                                 in `headers`)"
                            ))
                        }
                        other => other,
                    })
            })
            .await;
            (endpoint, session)
        }
    };
    let session = match session {
        Ok(Ok(session)) => session,
        Ok(Err(Failure::Legacy(why))) => {
            return Err(Failure::Legacy(endpoint.explain(&why)));
        }
        Ok(Err(Failure::Other(why))) => {
            endpoint.settle().await;
            return Err(Failure::Other(endpoint.explain(&why)));
        }
        Err(_elapsed) => {
            return Err(Failure::Other(
                endpoint.explain(&format!("no answer to the handshake within {limit:?}")),
            ));
        }
    };
    let peer = session.peer().clone();
    let protocol = peer
        .peer_info()
        .map(|info| info.protocol_version.to_string())
        .unwrap_or_default();
    let mut connection = Connection {
        peer,
        protocol,
        service: Mutex::new(Some(session)),
        endpoint,
        listener: None,
    };
    let left = limit.saturating_sub(start.elapsed());
    let tools = match tokio::time::timeout(left, connection.peer.list_all_tools()).await {
        Ok(Ok(tools)) => tools,
        Ok(Err(err)) => {
            let why = format!("cannot list its tools: {}", describe_service_error(&err));
            return Err(Failure::Other(connection.endpoint.explain(&why)));
        }
        Err(_elapsed) => {
            let why = format!("no tool list within {limit:?}");
            return Err(Failure::Other(connection.endpoint.explain(&why)));
        }
    };
    // Skills are listed, never read, on connecting (see `skills`); a list that fails leaves
    // the server without skills, not without a connection.
    let mut skills = Vec::new();
    if super::skills::offered(&connection.peer) {
        let left = limit.saturating_sub(start.elapsed());
        match tokio::time::timeout(left, super::skills::list(name, &connection.peer)).await {
            Ok(Ok(listed)) => skills = listed,
            Ok(Err(why)) => tracing::warn!(server = name, "{why}"),
            Err(_elapsed) => tracing::warn!(server = name, "no skill list within {limit:?}"),
        }
    }
    let left = limit.saturating_sub(start.elapsed()).min(LISTEN_LIMIT);
    connection.listener = listen_for_changes(&connection.peer, &handler, left).await;
    Ok((connection, Listed { tools, skills }))
}

/// What a new connection's server offers.
pub(super) struct Listed {
    /// Its tools.
    pub(super) tools: Vec<ListedTool>,
    /// Its skills (the skills extension), listed, not read.
    pub(super) skills: Vec<rmcp::model::Skill>,
}

/// The SDK's handshake of `mode`.
async fn handshake<T, E, A>(
    handler: Handler,
    transport: T,
    mode: Mode,
) -> Result<RunningService<RoleClient, Handler>, Failure>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let lifecycle = match mode {
        Mode::Initialize => ClientLifecycleMode::Initialize,
        Mode::Discover => ClientLifecycleMode::Discover {
            preferred_versions: vec![MODERN],
        },
        Mode::Auto => ClientLifecycleMode::Auto {
            preferred_versions: vec![MODERN],
            legacy_version: Some(LEGACY),
        },
    };
    handler
        .serve_with_lifecycle(transport, lifecycle)
        .await
        .map_err(|err| match err {
            ClientInitializeError::NoCompatibleProtocolVersion { .. } => {
                Failure::Legacy(describe_init_error(&err))
            }
            // Only the probe can be answered with something else: `initialize` is final.
            ClientInitializeError::ExpectedInitResult(_)
            | ClientInitializeError::ExpectedInitResponse(_)
                if mode == Mode::Auto =>
            {
                Failure::Legacy(format!(
                    "the server/discover probe got no discovery result ({})",
                    describe_init_error(&err)
                ))
            }
            other => Failure::Other(describe_init_error(&other)),
        })
}

/// On a 2026-07-28 connection whose server announces `tools.listChanged`, subscribes to
/// `notifications/tools/list_changed` (earlier versions send it unasked, to the handler).
async fn listen_for_changes(
    peer: &Peer<RoleClient>,
    handler: &Handler,
    limit: Duration,
) -> Option<Listener> {
    let info = peer.peer_info()?;
    if info.protocol_version.has_initialize() {
        return None;
    }
    if info
        .capabilities
        .tools
        .as_ref()
        .and_then(|tools| tools.list_changed)
        != Some(true)
    {
        return None;
    }
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    let mut subscription = match tokio::time::timeout(limit, peer.listen(filter)).await {
        Ok(Ok(subscription)) => subscription,
        Ok(Err(err)) => {
            tracing::debug!(
                server = %handler.name,
                "no tool list updates: {}",
                describe_service_error(&err)
            );
            return None;
        }
        Err(_elapsed) => {
            tracing::debug!(server = %handler.name, "no tool list updates: no answer");
            return None;
        }
    };
    let handler = handler.clone();
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    let task = tokio::spawn(async move {
        loop {
            let next = tokio::select! {
                next = subscription.next() => next,
                () = stopped.cancelled() => {
                    let _ = subscription
                        .cancel_with_reason(Some("the client is closing".to_owned()))
                        .await;
                    break;
                }
            };
            match next {
                Ok(Some(ServerNotification::ToolListChangedNotification(_))) => {
                    handler.tool_list_changed();
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(err) => {
                    tracing::debug!(
                        server = %handler.name,
                        "tool list updates ended: {}",
                        describe_service_error(&err)
                    );
                    break;
                }
            }
        }
    });
    Some(Listener { task, stop })
}

/// Starts the program of a stdio server in its own process group, with the node's allowlisted
/// environment plus `env`, in `cwd` (relative to the project) or the project directory.
fn spawn(
    name: &str,
    program: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    cwd: Option<&Path>,
    ctx: &McpContext,
) -> Result<(ProcessGroup, PathBuf), String> {
    let dir = match cwd {
        Some(dir) => ctx.project_dir.join(dir),
        None => ctx.project_dir.clone(),
    };
    if !dir.is_dir() {
        return Err(format!(
            "cannot start {program:?}: its working directory {} is not a directory",
            dir.display()
        ));
    }
    let mut cmd = command(program, args);
    pass_env(&mut cmd, &ctx.env, BASE_ENV.iter().copied());
    cmd.envs(env)
        .current_dir(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut group = ProcessGroup::spawn(&mut cmd)
        .map_err(|err| format!("cannot start {program:?} (in {}): {err}", dir.display()))?;
    if let Some(ledger) = &ctx.ledger
        && let Err(err) = group.record(ledger, "mcp", name)
    {
        tracing::warn!(server = name, "{err}");
    }
    Ok((group, dir))
}

use super::ASKS_FOR_AUTHORIZATION;

/// The authorization of the connection to the http server `name` at `url`: the stored OAuth
/// tokens of `principal` (`None`: the node's) for it, when there are (see [`super::oauth`]),
/// with the DPoP key they are bound to, if they are; with none, requests go out without a
/// token and a 401 fails the connection with [`ASKS_FOR_AUTHORIZATION`].
async fn authorization(
    name: &str,
    url: &str,
    config: &McpServerConfig,
    ctx: &McpContext,
    principal: Option<&str>,
) -> Result<(AuthorizationManager, Option<Arc<super::dpop::DpopKey>>), Failure> {
    let failed = |why: String| Failure::Other(format!("OAuth: {why}"));
    match &ctx.vault {
        Some(vault) => {
            let principal = principal.unwrap_or(super::oauth::NODE_PRINCIPAL);
            let entry = vault.entry(name, url, principal);
            match config.oauth.grant {
                McpOAuthGrant::AuthorizationCode => {
                    let dpop =
                        super::oauth::dpop_key(&entry, &config.oauth, None).map_err(failed)?;
                    super::oauth::manager(url, entry, &config.oauth, dpop.clone())
                        .await
                        .map(|manager| (manager, dpop))
                }
                McpOAuthGrant::ClientCredentials if config.oauth.private_key.is_none() => {
                    super::oauth::client_credentials(
                        url,
                        entry,
                        &config.oauth,
                        config.connect_timeout,
                    )
                    .await
                    .map(|manager| (manager, None))
                }
                _ => super::grants::unattended(url, entry, &config.oauth, config.connect_timeout)
                    .await
                    .map(|manager| (manager, None)),
            }
            .map_err(failed)
        }
        None => AuthorizationManager::new(url)
            .await
            .map(|manager| (manager, None))
            .map_err(|err| failed(chain(&err))),
    }
}

/// The Streamable HTTP transport to `url`, sending `headers` with every request and the
/// OAuth token of `auth` when it has one (as a DPoP-bound token with proofs of `dpop`, when
/// given).
fn http_transport(
    url: &str,
    headers: &BTreeMap<String, String>,
    connect_timeout: Duration,
    auth: AuthorizationManager,
    challenge: super::http::Challenge,
    dpop: Option<Arc<super::dpop::DpopKey>>,
) -> Result<StreamableHttpClientTransport<AuthClient<HttpClient>>, String> {
    check_url(url)?;
    let mut custom = HashMap::new();
    for (name, value) in headers {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("{name:?} is not a valid header name"))?;
        if RESERVED_HEADERS.contains(&header.as_str()) {
            return Err(format!(
                "the header {name} is the transport's own and cannot be configured"
            ));
        }
        let mut value = HeaderValue::from_str(value)
            .map_err(|_| format!("the value of the header {name} is not a valid header value"))?;
        value.set_sensitive(true);
        custom.insert(header, value);
    }
    let client = reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .pool_max_idle_per_host(0)
        .redirect(reqwest::redirect::Policy::custom(same_origin_redirects))
        .build()
        .map_err(|err| format!("cannot set up the HTTP client: {}", chain(&err)))?;
    let config = StreamableHttpClientTransportConfig::with_uri(url).custom_headers(custom);
    let dpop = dpop.map(|key| Arc::new(super::dpop::DpopState::new(key)));
    Ok(StreamableHttpClientTransport::with_client(
        AuthClient::new(
            HttpClient {
                client,
                challenge,
                dpop,
            },
            auth,
        ),
        config,
    ))
}

/// Checks that `url` is an http or https URL.
fn check_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|err| format!("not a URL: {err}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("{} is not an http or https URL", parsed.scheme()));
    }
    Ok(())
}

/// Follows only 307 and 308 redirects within the same origin: they keep the method and body,
/// and the configured headers (tokens) never reach another host.
fn same_origin_redirects(attempt: reqwest::redirect::Attempt<'_>) -> reqwest::redirect::Action {
    let same_origin = attempt
        .previous()
        .first()
        .is_some_and(|first| first.origin() == attempt.url().origin());
    let keeps_the_body = matches!(attempt.status().as_u16(), 307 | 308);
    if same_origin && keeps_the_body && attempt.previous().len() <= MAX_REDIRECTS {
        attempt.follow()
    } else {
        attempt.stop()
    }
}

/// `err` and its sources, joined by `: ` (the HTTP client's error, which the SDK wraps
/// without naming it as a source, included).
pub(super) fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = next_source(err);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = next_source(cause);
    }
    text
}

fn next_source<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a (dyn std::error::Error + 'static)> {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    match err.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
        Some(StreamableHttpError::Client(client)) => Some(client),
        Some(StreamableHttpError::AuthRequired(_) | StreamableHttpError::InsufficientScope(_)) => {
            Some(&AsksForAuthorization)
        }
        _ => err.source(),
    }
}

/// The cause [`chain`] names for a 401 or 403 with a challenge.
#[derive(Debug)]
struct AsksForAuthorization;

impl std::fmt::Display for AsksForAuthorization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(ASKS_FOR_AUTHORIZATION)
    }
}

impl std::error::Error for AsksForAuthorization {}

/// A handshake failure, without the SDK's type names.
fn describe_init_error(err: &ClientInitializeError) -> String {
    match err {
        ClientInitializeError::TransportError { error, context } => {
            format!("{context} failed: {}", chain(error.error.as_ref()))
        }
        ClientInitializeError::ConnectionClosed(when) => {
            format!("the connection closed while waiting for the {when}")
        }
        ClientInitializeError::JsonRpcError(error) => {
            format!(
                "the server refused the handshake: {} ({})",
                error.message, error.code.0
            )
        }
        ClientInitializeError::LegacyFallbackFailed { discover, fallback } => format!(
            "the server/discover probe failed ({}), and so did initialize ({})",
            describe_init_error(discover),
            describe_init_error(fallback)
        ),
        other => chain(other),
    }
}

/// A request failure, without the SDK's type names.
pub(super) fn describe_service_error(err: &ServiceError) -> String {
    match err {
        ServiceError::McpError(error) => format!("error {}: {}", error.code.0, error.message),
        ServiceError::TransportSend(error) => {
            format!("cannot send the request: {}", chain(error.error.as_ref()))
        }
        ServiceError::TransportClosed => "the connection closed".to_owned(),
        other => chain(other),
    }
}
