//! A hermetic MCP server for the MCP client's tests, built on the `rmcp` SDK.
//!
//! [`TestMcpServer::start_http`] serves it in this process over Streamable HTTP on
//! `127.0.0.1:0`; the `mcp-server` binary serves it over stdio (or `--http PORT`), located by
//! [`server_bin`]. Both serve the same tools:
//!
//! | tool            | what it does                                                         |
//! |-----------------|----------------------------------------------------------------------|
//! | `echo`          | `text` repeated `times` times (default 1), joined by spaces          |
//! | `image`         | a text and a 1x1 PNG image ([`PNG_BASE64`])                           |
//! | `audio`         | a 44-byte WAV clip ([`WAV_BASE64`])                                   |
//! | `resource`      | an embedded text resource ([`TEXT_RESOURCE_URI`]) and a 16-byte blob |
//! | `link`          | a resource link to [`LINK_URI`]                                       |
//! | `structured`    | `structuredContent` `{city, temperature}` and its JSON as text        |
//! | `fail`          | an `isError` result whose text is `reason`                           |
//! | `slow`          | sleeps `seconds`; counts its calls and the cancellations it sees     |
//! | `slow_calls`    | `{"started": n, "cancelled": m}` of `slow` (`readOnlyHint: true`)   |
//! | `crash`         | the stdio server writes [`CRASH_MESSAGE`] to stderr and exits 3       |
//! | `pid`           | the server's process id                                              |
//! | `trace_context` | `meta` and `header`: the request's `_meta.traceparent` and (over HTTP)  |
//! |                 | its `traceparent` header, `none` without                             |
//! | `environment`   | `{"cwd": ..., "env": {...}}` of the server process                   |
//! | `spawn_child`   | starts `sleep 1000` in the server's process group; its pid           |
//! | `add_tool`      | adds a tool `name` and sends `notifications/tools/list_changed`      |
//! | `report`        | log message `reporting`, progress 1/2 `halfway`; once the file `gate` |
//! |                 | exists, progress 2/2 `done`; answers `reported`                      |
//! | `ask`           | on 2026-07-28, asks the user `What is your name?` (`name`, a string) in |
//! |                 | an input-required result: `hello NAME`, `you declined`, `you cancelled` |
//! | `sample`        | asks the client's model (`sampling/createMessage`) `prompt`, with     |
//! |                 | system prompt `Answer in one word.`, 50 tokens and the model hint    |
//! |                 | `hint` if given: `model said: TEXT (MODEL)`, or the refusal as error |
//! | `bare`          | no description and an empty input schema                             |
//! | `bad.name`, `has space` | names outside `^[A-Za-z0-9_-]+$`, which clients must skip    |
//!
//! It serves one skill (MCP's skills extension): [`SKILL_URI`] (`greeting-kit`, whose text is
//! [`SKILL_MD`]) with the file [`STYLE_URI`] ([`STYLE_MD`]), listed with their digests and
//! sizes; [`Options::tampered_skill`] serves a `SKILL.md` that differs from its listing. Every
//! `resources/read` is counted by URI ([`TestServer::reads`]).
//!
//! [`Protocol`] picks what the server speaks: every version rmcp knows (the default), only
//! 2025-11-25 and older (the `initialize` handshake; `server/discover` is an unknown method, as
//! on a server written before 2026-07-28), or only 2026-07-28 (`server/discover` and per-request
//! metadata; `initialize` is refused). Over HTTP, an unknown session id gets the spec's 404, or
//! with [`Options::unknown_session_is_bad_request`] the 400 some servers send.

use std::borrow::Cow;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context as _, ensure};
use rmcp::model::{
    AudioContent, CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock,
    DiscoverResult, ErrorData, Implementation, InitializeRequestParams, InitializeResult,
    JsonObject, ListToolsResult, PaginatedRequestParams, ProtocolVersion, Resource,
    ResourceContents, ServerCapabilities, ServerConfig, SubscriptionFilter, Tool, ToolAnnotations,
};
use rmcp::service::{MaybeSendFuture, RequestContext, RoleServer, SubscriptionContext};
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::{ServerHandler, ServiceExt as _};
use serde_json::{Value, json};
use tokio::sync::{Barrier, broadcast};
use tokio_util::sync::CancellationToken;

/// A 1x1 PNG, base64-encoded, as the `image` tool returns it.
pub const PNG_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
/// A WAV header without samples (44 bytes), base64-encoded, as the `audio` tool returns it.
pub const WAV_BASE64: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA=";
/// The bytes 0 to 15, base64-encoded: the blob the `resource` tool embeds.
pub const BLOB_BASE64: &str = "AAECAwQFBgcICQoLDA0ODw==";
/// The URI of the text resource the `resource` tool embeds.
pub const TEXT_RESOURCE_URI: &str = "mew-test://notes/readme.txt";
/// The text of that resource.
pub const TEXT_RESOURCE_TEXT: &str = "the notes say hello";
/// The URI of the blob the `resource` tool embeds.
pub const BLOB_RESOURCE_URI: &str = "mew-test://data/bytes.bin";
/// The URI the `link` tool links to.
pub const LINK_URI: &str = "mew-test://files/report.pdf";
/// The URI of the server's skill's `SKILL.md`.
pub const SKILL_URI: &str = "skill://greeting-kit/SKILL.md";
/// Its text.
pub const SKILL_MD: &str = "---\nname: greeting-kit\ndescription: Greets people in the house style\n---\nGreet in the style that references/STYLE.md describes.\n";
/// The URI of the skill's other file.
pub const STYLE_URI: &str = "skill://greeting-kit/references/STYLE.md";
/// Its text.
pub const STYLE_MD: &str = "Say ahoy before anything else.\n";
/// What the stdio server writes to stderr before the `crash` tool makes it exit.
pub const CRASH_MESSAGE: &str = "mcp-server: crashing on request";

/// The protocol versions a server speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Protocol {
    /// Every version rmcp knows: 2026-07-28 through `server/discover`, older ones through the
    /// `initialize` handshake.
    #[default]
    Both,
    /// 2025-11-25 and older only: `initialize`; `server/discover` is an unknown method.
    Legacy,
    /// 2026-07-28 only: `server/discover`; `initialize` is refused.
    Modern,
}

impl Protocol {
    /// Parses `both`, `legacy` or `modern`.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        match text {
            "both" => Ok(Self::Both),
            "legacy" => Ok(Self::Legacy),
            "modern" => Ok(Self::Modern),
            other => anyhow::bail!("unknown protocol {other:?}: use both, legacy or modern"),
        }
    }

    fn versions(self) -> &'static [ProtocolVersion] {
        match self {
            Self::Both => ProtocolVersion::KNOWN_VERSIONS,
            Self::Legacy => ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25),
            Self::Modern => &[ProtocolVersion::V_2026_07_28],
        }
    }
}

/// How a server behaves.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The protocol versions it speaks.
    pub protocol: Protocol,
    /// True when `crash` ends the process (the stdio binary); in-process servers answer it with
    /// an error instead.
    pub crash_exits: bool,
    /// When set, the first `tools/list` waits at this barrier: servers sharing one are listed
    /// only once all of them are being listed at the same time.
    pub list_gate: Option<Arc<Barrier>>,
    /// Over HTTP: answer a session id the server does not know with 400 and a JSON-RPC error
    /// without an id, as servers built from the TypeScript SDK's example do, instead of the
    /// spec's 404.
    pub unknown_session_is_bad_request: bool,
    /// Serve a `SKILL.md` whose bytes differ from the skill's listing (a server changed, or
    /// one lying).
    pub tampered_skill: bool,
}

/// What the server's instances share (an HTTP server makes one instance per session).
#[derive(Debug)]
struct Shared {
    options: Options,
    slow_started: AtomicUsize,
    cancellations: AtomicUsize,
    initializations: AtomicUsize,
    gate_passed: AtomicBool,
    extra_tools: Mutex<Vec<String>>,
    reads: Mutex<Vec<String>>,
    tools_changed: broadcast::Sender<()>,
    children: Mutex<Vec<tokio::process::Child>>,
}

/// The server: a [`ServerHandler`] over state its clones share.
#[derive(Debug, Clone)]
pub struct TestServer {
    shared: Arc<Shared>,
}

impl TestServer {
    /// A server that behaves as `options` say.
    pub fn new(options: Options) -> Self {
        let (tools_changed, _) = broadcast::channel(16);
        Self {
            shared: Arc::new(Shared {
                options,
                slow_started: AtomicUsize::new(0),
                cancellations: AtomicUsize::new(0),
                initializations: AtomicUsize::new(0),
                gate_passed: AtomicBool::new(false),
                extra_tools: Mutex::new(Vec::new()),
                reads: Mutex::new(Vec::new()),
                tools_changed,
                children: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The URIs `resources/read` was asked for, in order.
    pub fn reads(&self) -> Vec<String> {
        lock(&self.shared.reads).clone()
    }

    /// Serves over stdin and stdout until the client goes away.
    pub async fn serve_stdio(self) -> anyhow::Result<()> {
        let running = self
            .serve(rmcp::transport::stdio())
            .await
            .context("the MCP handshake failed")?;
        running.waiting().await?;
        Ok(())
    }

    /// How many `slow` calls started.
    pub fn slow_started(&self) -> usize {
        self.shared.slow_started.load(Ordering::SeqCst)
    }

    /// How many `slow` calls saw their cancellation.
    pub fn cancellations(&self) -> usize {
        self.shared.cancellations.load(Ordering::SeqCst)
    }

    /// How many `initialize` handshakes the server answered.
    pub fn initializations(&self) -> usize {
        self.shared.initializations.load(Ordering::SeqCst)
    }

    fn tools(&self) -> Vec<Tool> {
        let mut tools = vec![
            tool(
                "echo",
                "Echoes `text`, `times` times.",
                json!({
                    "type": "object",
                    "properties": {
                        "text": {"type": "string"},
                        "times": {"type": "integer", "minimum": 1}
                    },
                    "required": ["text"]
                }),
            ),
            tool("image", "Returns a tiny image.", no_input()),
            tool(
                "trace_context",
                "Returns the request's trace context.",
                no_input(),
            ),
            tool("audio", "Returns a tiny audio clip.", no_input()),
            tool("resource", "Returns embedded resources.", no_input()),
            tool("link", "Returns a resource link.", no_input()),
            tool(
                "structured",
                "Returns the weather of `city` as structured content.",
                json!({
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"]
                }),
            ),
            tool(
                "fail",
                "Fails with `reason`.",
                json!({
                    "type": "object",
                    "properties": {"reason": {"type": "string"}},
                    "required": ["reason"]
                }),
            ),
            tool(
                "slow",
                "Sleeps `seconds` seconds.",
                json!({
                    "type": "object",
                    "properties": {"seconds": {"type": "number"}},
                    "required": ["seconds"]
                }),
            ),
            tool(
                "slow_calls",
                "How many slow calls started, and how many were cancelled.",
                no_input(),
            )
            .with_annotations(ToolAnnotations::new().read_only(true)),
            tool("crash", "Exits the server process.", no_input()),
            tool("pid", "The server's process id.", no_input()),
            tool(
                "environment",
                "The server's working directory and environment.",
                no_input(),
            ),
            tool(
                "roots",
                "The roots the client declared (`declared`) and lists (`roots`).",
                no_input(),
            ),
            tool(
                "spawn_child",
                "Starts `sleep 1000` in the server's process group.",
                no_input(),
            ),
            tool(
                "add_tool",
                "Adds a tool called `name`.",
                json!({
                    "type": "object",
                    "properties": {"name": {"type": "string"}},
                    "required": ["name"]
                }),
            ),
            tool(
                "report",
                "Says `reporting` as a log message and `halfway` as progress, waits until the \
                 file `gate` exists, then says `done` as progress.",
                json!({
                    "type": "object",
                    "properties": {"gate": {"type": "string"}},
                    "required": ["gate"]
                }),
            ),
            tool("ask", "Asks the user's name and greets them.", no_input()),
            tool(
                "sample",
                "Asks the client's model `prompt` and answers what it said.",
                json!({
                    "type": "object",
                    "properties": {"prompt": {"type": "string"}, "hint": {"type": "string"}},
                    "required": ["prompt"]
                }),
            ),
            Tool::new_with_raw("bare", None, Arc::new(JsonObject::new())),
            tool("bad.name", "A name with a dot.", no_input()),
            tool("has space", "A name with a space.", no_input()),
        ];
        let extra = lock(&self.shared.extra_tools).clone();
        for name in extra {
            let description = format!("Added at run time: {name}.");
            tools.push(tool(&name, &description, no_input()));
        }
        tools
    }

    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let text = |text: String| Ok(CallToolResult::success(vec![ContentBlock::text(text)]));
        match request.name.as_ref() {
            // The SDK hands the request's `_meta` over in the context, and over HTTP the
            // request's head too.
            "trace_context" => {
                let meta = context
                    .meta
                    .get_traceparent()
                    .or_else(|| request.meta.as_ref().and_then(|m| m.get_traceparent()))
                    .unwrap_or("none");
                let header = context
                    .extensions
                    .get::<axum::http::request::Parts>()
                    .and_then(|parts| parts.headers.get("traceparent"))
                    .and_then(|value| value.to_str().ok())
                    .unwrap_or("none");
                text(format!("meta {meta}\nheader {header}"))
            }
            "echo" => {
                let word = string_arg(&args, "text")?;
                let times = args.get("times").and_then(Value::as_u64).unwrap_or(1);
                let words: Vec<&str> = (0..times).map(|_| word.as_str()).collect();
                text(words.join(" "))
            }
            "image" => Ok(CallToolResult::success(vec![
                ContentBlock::text("a red pixel"),
                ContentBlock::image(PNG_BASE64, "image/png"),
            ])),
            "audio" => Ok(CallToolResult::success(vec![ContentBlock::Audio(
                AudioContent::new(WAV_BASE64, "audio/wav"),
            )])),
            "resource" => Ok(CallToolResult::success(vec![
                ContentBlock::resource(ResourceContents::TextResourceContents {
                    uri: TEXT_RESOURCE_URI.to_owned(),
                    mime_type: Some("text/plain".to_owned()),
                    text: TEXT_RESOURCE_TEXT.to_owned(),
                    meta: None,
                }),
                ContentBlock::resource(ResourceContents::BlobResourceContents {
                    uri: BLOB_RESOURCE_URI.to_owned(),
                    mime_type: Some("application/octet-stream".to_owned()),
                    blob: BLOB_BASE64.to_owned(),
                    meta: None,
                }),
            ])),
            "link" => Ok(CallToolResult::success(vec![ContentBlock::resource_link(
                Resource::new(LINK_URI, "report.pdf")
                    .with_mime_type("application/pdf")
                    .with_description("The quarterly report"),
            )])),
            "structured" => {
                let city = string_arg(&args, "city")?;
                Ok(CallToolResult::structured(
                    json!({"city": city, "temperature": 21}),
                ))
            }
            "fail" => {
                let reason = string_arg(&args, "reason")?;
                Ok(CallToolResult::error(vec![ContentBlock::text(reason)]))
            }
            "slow" => {
                let seconds = args.get("seconds").and_then(Value::as_f64).unwrap_or(1.0);
                let nap = Duration::from_secs_f64(seconds.clamp(0.0, 3600.0));
                self.shared.slow_started.fetch_add(1, Ordering::SeqCst);
                tokio::select! {
                    () = tokio::time::sleep(nap) => text(format!("slept {seconds} s")),
                    () = context.ct.cancelled() => {
                        self.shared.cancellations.fetch_add(1, Ordering::SeqCst);
                        text("cancelled".to_owned())
                    }
                }
            }
            "slow_calls" => text(
                json!({"started": self.slow_started(), "cancelled": self.cancellations()})
                    .to_string(),
            ),
            "crash" => {
                if self.shared.options.crash_exits {
                    eprintln!("{CRASH_MESSAGE}");
                    std::process::exit(3);
                }
                Ok(CallToolResult::error(vec![ContentBlock::text(
                    "crash only ends a stdio server",
                )]))
            }
            "pid" => text(std::process::id().to_string()),
            "environment" => {
                let cwd = std::env::current_dir()
                    .map(|dir| dir.display().to_string())
                    .unwrap_or_default();
                let env: serde_json::Map<String, Value> = std::env::vars()
                    .map(|(name, value)| (name, Value::String(value)))
                    .collect();
                text(json!({"cwd": cwd, "env": env}).to_string())
            }
            // Roots are deprecated from 2026-07-28 on; 2025-11-25 clients still answer them.
            #[allow(deprecated)]
            "roots" => {
                let declared = context
                    .peer
                    .peer_info()
                    .is_some_and(|info| info.capabilities.roots.is_some());
                let roots = if declared {
                    let listed = context.peer.list_roots().await.map_err(|err| {
                        ErrorData::internal_error(format!("roots/list failed: {err}"), None)
                    })?;
                    serde_json::to_value(&listed.roots).unwrap_or_default()
                } else {
                    Value::Null
                };
                text(json!({"declared": declared, "roots": roots}).to_string())
            }
            "spawn_child" => self.spawn_child(),
            "add_tool" => {
                let name = string_arg(&args, "name")?;
                lock(&self.shared.extra_tools).push(name.clone());
                let _ = self.shared.tools_changed.send(());
                if context
                    .protocol_version()
                    .is_none_or(|version| version.has_initialize())
                {
                    let _ = context.peer.notify_tool_list_changed().await;
                }
                text(format!("added {name}"))
            }
            "report" => {
                let gate = PathBuf::from(string_arg(&args, "gate")?);
                // Log messages are deprecated from 2026-07-28 on; older servers send them.
                #[allow(deprecated)]
                {
                    let log = rmcp::model::LoggingMessageNotificationParam::new(
                        rmcp::model::LoggingLevel::Info,
                        json!("reporting"),
                    );
                    let _ = context.peer.notify_logging_message(log).await;
                }
                let token = context.meta.get_progress_token();
                let progress = |done: f64, message: &str| {
                    token.clone().map(|token| {
                        let mut params = rmcp::model::ProgressNotificationParam::new(token, done);
                        params.total = Some(2.0);
                        params.message = Some(message.to_owned());
                        params
                    })
                };
                if let Some(params) = progress(1.0, "halfway") {
                    let _ = context.peer.notify_progress(params).await;
                }
                while !gate.exists() {
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(20)) => {}
                        () = context.ct.cancelled() => return text("cancelled".to_owned()),
                    }
                }
                if let Some(params) = progress(2.0, "done") {
                    let _ = context.peer.notify_progress(params).await;
                }
                text("reported".to_owned())
            }
            // Sampling is deprecated from 2026-07-28 on; 2025-11-25 clients still answer it.
            #[allow(deprecated)]
            "sample" => match context.peer.create_message(sample_params(&args)?).await {
                Ok(result) => text(said(result)),
                Err(err) => Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                    "sampling refused: {err}"
                ))])),
            },
            "bare" | "bad.name" | "has space" => text(format!("called {}", request.name)),
            name if lock(&self.shared.extra_tools).iter().any(|t| t == name) => {
                text(format!("extra tool {name}"))
            }
            name => Err(ErrorData::invalid_params(
                format!("there is no tool {name}"),
                None,
            )),
        }
    }

    /// Starts `sleep 1000` in this process's group, with nothing on its standard streams.
    fn spawn_child(&self) -> Result<CallToolResult, ErrorData> {
        let group = rustix::process::getpgrp().as_raw_pid();
        let mut command = crate::process::command("sleep");
        command
            .arg("1000")
            .process_group(group)
            .kill_on_drop(false)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = command
            .spawn()
            .map_err(|err| ErrorData::internal_error(format!("cannot start sleep: {err}"), None))?;
        let pid = child.id().unwrap_or_default();
        lock(&self.shared.children).push(child);
        Ok(CallToolResult::success(vec![ContentBlock::text(
            pid.to_string(),
        )]))
    }
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .enable_skills()
                .build(),
        )
        .with_server_info(Implementation::new("mew-test-mcp", "1.0.0"))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(self.shared.options.protocol.versions())
    }

    fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<DiscoverResult, ErrorData>> + MaybeSendFuture + '_ {
        let _ = context;
        std::future::ready(if self.shared.options.protocol == Protocol::Legacy {
            Err(ErrorData::method_not_found::<
                rmcp::model::DiscoverRequestMethod,
            >())
        } else {
            Ok(DiscoverResult::from_server_info(
                self.supported_protocol_versions().into_owned(),
                self.get_info(),
            ))
        })
    }

    fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<InitializeResult, ErrorData>> + MaybeSendFuture + '_ {
        self.shared.initializations.fetch_add(1, Ordering::SeqCst);
        context.peer.set_peer_info(request.clone());
        std::future::ready(self.negotiate_initialize(&request))
    }

    async fn list_skills(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListSkillsResult, ErrorData> {
        use rmcp::model::{Skill, SkillFrontmatter, SkillResource, SkillResources};
        let skill = Skill::new(
            SKILL_URI,
            SkillFrontmatter::new("greeting-kit", "Greets people in the house style"),
            SkillResources::Files(vec![
                SkillResource::from_bytes(SKILL_URI, SKILL_MD.as_bytes()),
                SkillResource::from_bytes(STYLE_URI, STYLE_MD.as_bytes()),
            ]),
        );
        Ok(rmcp::model::ListSkillsResult::with_all_items(vec![skill]))
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, ErrorData> {
        lock(&self.shared.reads).push(request.uri.clone());
        let text = match request.uri.as_str() {
            SKILL_URI if self.shared.options.tampered_skill => {
                SKILL_MD.replace("house style", "pirate style")
            }
            SKILL_URI => SKILL_MD.to_owned(),
            STYLE_URI => STYLE_MD.to_owned(),
            _ => {
                return Err(ErrorData::resource_not_found(
                    format!("no resource {}", request.uri),
                    None,
                ));
            }
        };
        Ok(
            rmcp::model::ReadResourceResult::new(vec![ResourceContents::text(text, request.uri)])
                .into(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        if let Some(gate) = &self.shared.options.list_gate
            && !self.shared.gate_passed.swap(true, Ordering::SeqCst)
        {
            gate.wait().await;
        }
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // On 2026-07-28 a server asks through the call's result (input required), and reads
        // the answer in the call that the client makes again.
        let modern = context
            .protocol_version()
            .is_some_and(|version| !version.has_initialize());
        if request.name == "sample" && modern {
            return sample_round(&request);
        }
        if request.name == "ask" {
            if modern {
                return ask_round(&request);
            }
            // Before 2026-07-28 the question is a request to the client, answered while the
            // call waits.
            let answer = context
                .peer
                .create_elicitation(name_question()?)
                .await
                .map_err(|e| ErrorData::internal_error(format!("elicitation: {e}"), None))?;
            let answer = serde_json::to_value(answer)
                .map_err(|e| ErrorData::internal_error(format!("elicitation: {e}"), None))?;
            return greeting(&answer).map(CallToolResponse::Complete);
        }
        self.call(request, context).await.map(Into::into)
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let mut changes = self.shared.tools_changed.subscribe();
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                change = changes.recv() => match change {
                    Ok(()) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        if context.accepted().tools_list_changed == Some(true) {
                            let _ = context.sink().notify_tool_list_changed().await;
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return Ok(()),
                },
            }
        }
    }
}

/// A tool with a JSON schema.
fn tool(name: &str, description: &str, schema: Value) -> Tool {
    let schema = match schema {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    };
    Tool::new(name.to_owned(), description.to_owned(), Arc::new(schema))
}

fn no_input() -> Value {
    json!({"type": "object", "properties": {}})
}

fn string_arg(args: &JsonObject, name: &str) -> Result<String, ErrorData> {
    args.get(name)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ErrorData::invalid_params(format!("{name} must be a string"), None))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The server served in this process over Streamable HTTP; stops when dropped.
#[derive(Debug)]
pub struct TestMcpServer {
    url: String,
    server: TestServer,
    sessions: Arc<LocalSessionManager>,
    stop: CancellationToken,
}

impl TestMcpServer {
    /// Serves a default server (every protocol version) at `http://127.0.0.1:PORT/mcp`.
    pub async fn start_http() -> anyhow::Result<Self> {
        Self::start_http_with(Options::default()).await
    }

    /// Serves a server that behaves as `options` say.
    pub async fn start_http_with(options: Options) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        Self::serve_http(listener, options)
    }

    /// Serves a default server on `listener` (a port chosen before the server exists).
    pub fn start_http_on(listener: tokio::net::TcpListener) -> anyhow::Result<Self> {
        Self::serve_http(listener, Options::default())
    }

    fn serve_http(listener: tokio::net::TcpListener, options: Options) -> anyhow::Result<Self> {
        let url = format!("http://{}/mcp", listener.local_addr()?);
        let server = TestServer::new(options);
        let sessions = Arc::new(LocalSessionManager::default());
        let stop = CancellationToken::new();
        let router = http_router(server.clone(), sessions.clone(), stop.child_token());
        let token = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(token.cancelled_owned())
                .await;
        });
        Ok(Self {
            url,
            server,
            sessions,
            stop,
        })
    }

    /// The endpoint's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The server, for its counters.
    pub fn server(&self) -> &TestServer {
        &self.server
    }

    /// Forgets every session, as a server that restarted would: the next request that names
    /// one gets 404. Returns how many there were.
    pub async fn expire_sessions(&self) -> anyhow::Result<usize> {
        use rmcp::transport::streamable_http_server::session::SessionManager as _;
        let ids: Vec<_> = self
            .sessions
            .sessions
            .read()
            .await
            .keys()
            .cloned()
            .collect();
        for id in &ids {
            self.sessions.close_session(id).await?;
        }
        Ok(ids.len())
    }
}

impl Drop for TestMcpServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The router that serves `server` at `/mcp`.
pub fn http_router(
    server: TestServer,
    sessions: Arc<LocalSessionManager>,
    stop: CancellationToken,
) -> axum::Router {
    let bad_request = server.shared.options.unknown_session_is_bad_request;
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        sessions.clone(),
        StreamableHttpServerConfig::default()
            .with_sse_keep_alive(None)
            .with_cancellation_token(stop),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    if bad_request {
        router.layer(axum::middleware::from_fn_with_state(
            sessions,
            reject_unknown_sessions,
        ))
    } else {
        router
    }
}

/// Answers a request naming a session the server does not know with 400 and an id-less error.
async fn reject_unknown_sessions(
    axum::extract::State(sessions): axum::extract::State<Arc<LocalSessionManager>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let session = request
        .headers()
        .get("mcp-session-id")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    if let Some(session) = session
        && !sessions
            .sessions
            .read()
            .await
            .contains_key(session.as_str())
    {
        let body = json!({
            "jsonrpc": "2.0",
            "error": {"code": -32000, "message": "Bad Request: No valid session ID provided"}
        });
        return (axum::http::StatusCode::BAD_REQUEST, axum::Json(body)).into_response();
    }
    next.run(request).await
}

/// The `mcp-server` binary: `MEW_MCP_SERVER_BIN`, else `target/<profile>/mcp-server` beside
/// this test executable (`cargo build --workspace --all-targets` puts it there).
pub fn server_bin() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("MEW_MCP_SERVER_BIN") {
        let path = PathBuf::from(path);
        ensure!(
            path.is_file(),
            "MEW_MCP_SERVER_BIN is {}, which is not a file",
            path.display()
        );
        return Ok(path);
    }
    let exe = std::env::current_exe().context("cannot find the test executable")?;
    let mut dir = exe
        .parent()
        .context("the test executable has no directory")?;
    if dir.file_name().is_some_and(|name| name == "deps") {
        dir = dir.parent().context("deps/ has no parent")?;
    }
    let bin = dir.join("mcp-server");
    ensure!(
        bin.is_file(),
        "there is no mcp-server binary at {} (or set MEW_MCP_SERVER_BIN): build it first: \
         cargo build --workspace --all-targets",
        bin.display()
    );
    Ok(bin)
}

/// The `sample` tool's request: `prompt`, a system prompt, 50 tokens and the `hint`.
// Sampling is deprecated from 2026-07-28 on (as a request to the client).
#[allow(deprecated)]
fn sample_params(args: &JsonObject) -> Result<rmcp::model::CreateMessageRequestParams, ErrorData> {
    let prompt = string_arg(args, "prompt")?;
    let mut params = rmcp::model::CreateMessageRequestParams::new(
        vec![rmcp::model::SamplingMessage::user_text(prompt)],
        50,
    );
    params.system_prompt = Some("Answer in one word.".to_owned());
    if let Some(hint) = args.get("hint").and_then(Value::as_str) {
        params.model_preferences = Some(
            rmcp::model::ModelPreferences::new()
                .with_hints(vec![rmcp::model::ModelHint::new(hint)]),
        );
    }
    Ok(params)
}

/// What the `sample` tool answers: the model's text and the model.
#[allow(deprecated)]
fn said(result: rmcp::model::CreateMessageResult) -> String {
    let text: String = result
        .message
        .content
        .into_vec()
        .into_iter()
        .filter_map(|block| match block {
            rmcp::model::SamplingMessageContentBlock::Text(t) => Some(t.text),
            _ => None,
        })
        .collect();
    format!("model said: {text} ({})", result.model)
}

/// One round of `sample` on 2026-07-28: the sampling request as an input-required result, then
/// the answer from the call's `inputResponses`.
#[allow(deprecated)]
fn sample_round(request: &CallToolRequestParams) -> Result<CallToolResponse, ErrorData> {
    let args = request.arguments.clone().unwrap_or_default();
    if let Some(answer) = request
        .input_responses
        .as_ref()
        .and_then(|answers| answers.get("sample"))
    {
        ensure_state(request.request_state.as_deref())?;
        let result: rmcp::model::CreateMessageResult = serde_json::from_value(answer.clone())
            .map_err(|e| ErrorData::invalid_params(format!("not a sampling result: {e}"), None))?;
        return Ok(CallToolResponse::Complete(CallToolResult::success(vec![
            ContentBlock::text(said(result)),
        ])));
    }
    let mut requests = rmcp::model::InputRequests::new();
    requests.insert(
        "sample".to_owned(),
        rmcp::model::InputRequest::CreateMessage(rmcp::model::CreateMessageRequest::new(
            sample_params(&args)?,
        )),
    );
    Ok(CallToolResponse::InputRequired(
        rmcp::model::InputRequiredResult::new(Some(requests), Some(SAMPLE_STATE.to_owned())),
    ))
}

/// The request state `sample` hands out, which the client must echo.
const SAMPLE_STATE: &str = "sample-round-1";

fn ensure_state(state: Option<&str>) -> Result<(), ErrorData> {
    if state == Some(SAMPLE_STATE) {
        Ok(())
    } else {
        Err(ErrorData::invalid_params(
            format!("requestState must be echoed as {SAMPLE_STATE:?}, got {state:?}"),
            None,
        ))
    }
}

/// The request state `ask` hands out.
const ASK_STATE: &str = "ask-round-1";

/// One round of `ask`: the question as an input-required result, then the greeting from the
/// answer in the call's `inputResponses`.
fn ask_round(request: &CallToolRequestParams) -> Result<CallToolResponse, ErrorData> {
    let answer = request
        .input_responses
        .as_ref()
        .and_then(|answers| answers.get("name"));
    let Some(answer) = answer else {
        let mut requests = rmcp::model::InputRequests::new();
        requests.insert(
            "name".to_owned(),
            rmcp::model::InputRequest::Elicitation(rmcp::model::ElicitRequest::new(
                name_question()?
            )),
        );
        return Ok(CallToolResponse::InputRequired(
            rmcp::model::InputRequiredResult::new(Some(requests), Some(ASK_STATE.to_owned())),
        ));
    };
    if request.request_state.as_deref() != Some(ASK_STATE) {
        return Err(ErrorData::invalid_params(
            format!("requestState must be echoed as {ASK_STATE:?}"),
            None,
        ));
    }
    greeting(answer).map(CallToolResponse::Complete)
}

/// The question `ask` asks: the user's name.
fn name_question() -> Result<rmcp::model::ElicitRequestParams, ErrorData> {
    serde_json::from_value(json!({
        "message": "What is your name?",
        "requestedSchema": {
            "type": "object",
            "properties": {"name": {"type": "string", "description": "Your name"}},
            "required": ["name"]
        }
    }))
    .map_err(|e| ErrorData::internal_error(format!("elicitation params: {e}"), None))
}

/// What `ask` says to the user's `answer` (an elicitation result).
fn greeting(answer: &Value) -> Result<CallToolResult, ErrorData> {
    let said = match answer["action"].as_str() {
        Some("accept") => match answer["content"]["name"].as_str() {
            Some(name) => format!("hello {name}"),
            None => return Err(ErrorData::invalid_params("accepted without a name", None)),
        },
        Some("decline") => "you declined".to_owned(),
        Some("cancel") => "you cancelled".to_owned(),
        _ => {
            return Err(ErrorData::invalid_params(
                format!("not an answer: {answer}"),
                None,
            ));
        }
    };
    Ok(CallToolResult::success(vec![ContentBlock::text(said)]))
}
