//! `RemoteAgent`: `AgentTransport` over HTTP, speaking JSON-RPC, HTTP+JSON or gRPC as the card
//! offers and the caller prefers.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use mew_cards::{
    AgentCard, AgentInterface, CancelTaskRequest, GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest, GetTaskRequest, ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse, ListTasksRequest, ListTasksResponse, PROTOCOL_VERSION,
    SendMessageRequest, SendMessageResponse, StreamResponse, SubscribeToTaskRequest, Task,
    TaskPushNotificationConfig, WELL_KNOWN_CARD_PATH, binding,
};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::agent::{AgentTransport, CallContext, Error, EventStream};
use crate::grpc::GrpcAgent;
use crate::sse::{SseDecoder, SseEvent};
use crate::wire::{
    A2A_JSON, EXTENSIONS_HEADER, VERSION_HEADER, parse_jsonrpc_error, parse_rest_error,
};

/// The protocol bindings of A2A that the client speaks and the server serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    /// JSON-RPC 2.0.
    JsonRpc,
    /// HTTP+JSON.
    HttpJson,
    /// gRPC (`lf.a2a.v1.A2AService` over HTTP/2).
    Grpc,
}

impl Binding {
    /// The card's name of this binding.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::JsonRpc => binding::JSONRPC,
            Self::HttpJson => binding::HTTP_JSON,
            Self::Grpc => binding::GRPC,
        }
    }

    fn from_card(name: &str) -> Option<Self> {
        match name {
            binding::JSONRPC => Some(Self::JsonRpc),
            binding::HTTP_JSON => Some(Self::HttpJson),
            binding::GRPC => Some(Self::Grpc),
            _ => None,
        }
    }
}

/// How a [`RemoteAgent`] connects.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Use this binding instead of the card's first supported one.
    pub binding: Option<Binding>,
    /// Time allowed to open a connection.
    pub connect_timeout: Duration,
    /// Time allowed for a whole non-streaming call (a blocking send waits for the task).
    pub request_timeout: Duration,
    /// Time a stream may stay silent (servers send keep-alives) before it is abandoned.
    pub idle_timeout: Duration,
    /// Headers sent with every request (credentials, for instance).
    pub headers: HeaderMap,
    /// Extra trusted roots and a client certificate for HTTPS.
    pub tls: TlsOptions,
    /// Credentials computed per request (a short-lived token, for instance), added after
    /// `headers`.
    pub credentials: Option<Arc<dyn Credentials>>,
    /// Headers of the context a call is made from, asked for on every request as it is
    /// sent (the W3C trace context of the calling span, for instance).
    pub context_headers: Option<Arc<dyn ContextHeaders>>,
}

/// Adds the headers of the caller's context to a request, where it is sent from: called
/// inside the caller's task, so it may read what is current there (a tracing span).
pub trait ContextHeaders: Send + Sync + std::fmt::Debug {
    /// Adds this context's headers to `headers`.
    fn add_to(&self, headers: &mut HeaderMap);
}

/// Supplies credentials per request, for tokens that expire: a source is asked before every
/// call and may hand out a cached value until it nears its end.
pub trait Credentials: Send + Sync + std::fmt::Debug {
    /// The headers to send with the next request.
    fn headers(&self) -> Result<Vec<(HeaderName, HeaderValue)>, String>;
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            binding: None,
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(300),
            idle_timeout: Duration::from_secs(120),
            headers: HeaderMap::new(),
            tls: TlsOptions::default(),
            credentials: None,
            context_headers: None,
        }
    }
}

/// HTTPS settings beyond the defaults: the system's trust store stays trusted, these roots are
/// trusted besides it, and the identity is presented to servers that ask for a client
/// certificate (mutual TLS).
#[derive(Clone, Default)]
pub struct TlsOptions {
    /// Root certificates (PEM, one or more) trusted besides the system roots.
    pub extra_roots_pem: Option<Vec<u8>>,
    /// A certificate chain and its private key (PEM, PKCS#8, SEC1 or PKCS#1), presented to
    /// servers that ask for a client certificate.
    pub identity_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The identity holds a private key: say only whether there is one.
        f.debug_struct("TlsOptions")
            .field(
                "extra_roots_pem",
                &self.extra_roots_pem.as_ref().map(Vec::len),
            )
            .field("identity_pem", &self.identity_pem.is_some())
            .finish()
    }
}

impl TlsOptions {
    /// The same trust (the system roots and these) and identity for a gRPC connection.
    pub(crate) fn grpc(&self) -> tonic::transport::ClientTlsConfig {
        use tonic::transport::{Certificate, ClientTlsConfig, Identity};
        let mut config = ClientTlsConfig::new().with_native_roots();
        if let Some(pem) = &self.extra_roots_pem {
            config = config.ca_certificate(Certificate::from_pem(pem));
        }
        if let Some(pem) = &self.identity_pem {
            // One PEM holds the chain and the key: each side reads its own blocks.
            config = config.identity(Identity::from_pem(pem, pem));
        }
        config
    }

    /// Adds these roots and this identity to `builder`; the system roots stay trusted.
    pub fn configure(
        &self,
        mut builder: reqwest::ClientBuilder,
    ) -> Result<reqwest::ClientBuilder, reqwest::Error> {
        if let Some(pem) = &self.extra_roots_pem {
            builder = builder.tls_certs_merge(reqwest::Certificate::from_pem_bundle(pem)?);
        }
        if let Some(pem) = &self.identity_pem {
            builder = builder.identity(reqwest::Identity::from_pem(pem)?);
        }
        Ok(builder)
    }
}

/// An agent reached over HTTP.
#[derive(Clone, Debug)]
pub struct RemoteAgent {
    inner: Arc<Inner>,
    /// The gRPC client, when the interface in use is gRPC's: every call goes through it.
    grpc: Option<Arc<GrpcAgent>>,
}

#[derive(Debug)]
struct Inner {
    http: reqwest::Client,
    card: AgentCard,
    binding: Binding,
    /// The interface URL without a trailing slash.
    url: String,
    tenant: String,
    request_timeout: Duration,
    credentials: Option<Arc<dyn Credentials>>,
    context_headers: Option<Arc<dyn ContextHeaders>>,
}

fn transport_error(what: &str, error: reqwest::Error) -> Error {
    Error::Transport {
        message: format!("{what}: {error}"),
        source: Some(Box::new(error)),
    }
}

/// Builds the HTTP client every call of one agent shares.
fn http_client(options: &ClientOptions) -> Result<reqwest::Client, Error> {
    let mut headers = options.headers.clone();
    headers.insert(
        HeaderName::from_static("a2a-version"),
        HeaderValue::from_static(PROTOCOL_VERSION),
    );
    let builder = reqwest::Client::builder()
        .connect_timeout(options.connect_timeout)
        .read_timeout(options.idle_timeout)
        .default_headers(headers)
        .redirect(reqwest::redirect::Policy::none());
    options
        .tls
        .configure(builder)
        .and_then(reqwest::ClientBuilder::build)
        .map_err(|e| transport_error("cannot build the HTTP client", e))
}

/// Fetches and parses the card published under `base_url` (or at a URL ending in `.json`).
pub async fn fetch_card(base_url: &str, options: &ClientOptions) -> Result<AgentCard, Error> {
    let http = http_client(options)?;
    let request = fetch_card_using(&http, base_url);
    tokio::time::timeout(options.request_timeout, request)
        .await
        .map_err(|_| Error::transport(format!("fetching the card under {base_url} timed out")))?
}

async fn fetch_card_using(http: &reqwest::Client, base_url: &str) -> Result<AgentCard, Error> {
    let url = if base_url.ends_with(".json") {
        base_url.to_owned()
    } else {
        format!("{}/{WELL_KNOWN_CARD_PATH}", base_url.trim_end_matches('/'))
    };
    let response = http
        .get(&url)
        .header(VERSION_HEADER, PROTOCOL_VERSION)
        .send()
        .await
        .map_err(|e| transport_error(&format!("cannot fetch the card at {url}"), e))?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(|e| transport_error("cannot read the card", e))?;
    if !status.is_success() {
        return Err(Error::transport(format!(
            "fetching the card at {url} answered HTTP {status}"
        )));
    }
    serde_json::from_slice(&body)
        .map_err(|e| Error::decode(format!("the card at {url} is not a valid agent card: {e}")))
}

/// The interface of the card to call: the first that speaks A2A 1.x over the forced binding,
/// or, when none is forced, over one of the HTTP bindings (gRPC when the card offers nothing
/// else: a caller asks for it by forcing it).
fn pick_interface(
    card: &AgentCard,
    forced: Option<Binding>,
) -> Result<(Binding, &AgentInterface), Error> {
    let speakable = || {
        card.supported_interfaces
            .iter()
            .filter(|i| i.protocol_version.split('.').next() == Some("1"))
            .filter_map(|i| Some((Binding::from_card(&i.protocol_binding)?, i)))
    };
    let chosen = match forced {
        Some(forced) => speakable().find(|(b, _)| *b == forced),
        None => speakable()
            .find(|(b, _)| *b != Binding::Grpc)
            .or_else(|| speakable().next()),
    };
    chosen.ok_or_else(|| {
        let offered: Vec<String> = card
            .supported_interfaces
            .iter()
            .map(|i| {
                format!(
                    "{} {} (A2A {})",
                    i.protocol_binding, i.url, i.protocol_version
                )
            })
            .collect();
        let wanted = forced.map_or("JSONRPC, HTTP+JSON or GRPC".to_owned(), |b| {
            b.as_str().to_owned()
        });
        Error::transport(format!(
            "agent {:?} offers no {wanted} interface for A2A 1.0; it offers: {}",
            card.name,
            if offered.is_empty() {
                "none".to_owned()
            } else {
                offered.join(", ")
            }
        ))
    })
}

impl RemoteAgent {
    /// Fetches the card under `base_url` and connects with default options.
    pub async fn resolve(base_url: &str) -> Result<Self, Error> {
        Self::resolve_with(base_url, ClientOptions::default()).await
    }

    /// Fetches the card under `base_url` (or at a URL ending in `.json`) and connects.
    pub async fn resolve_with(base_url: &str, options: ClientOptions) -> Result<Self, Error> {
        let http = http_client(&options)?;
        let card = fetch_card_using(&http, base_url).await?;
        Self::build(http, card, &options)
    }

    /// Connects to the agent a card describes.
    pub fn from_card(card: AgentCard, options: ClientOptions) -> Result<Self, Error> {
        let http = http_client(&options)?;
        Self::build(http, card, &options)
    }

    fn build(
        http: reqwest::Client,
        card: AgentCard,
        options: &ClientOptions,
    ) -> Result<Self, Error> {
        let (binding, interface) = pick_interface(&card, options.binding)?;
        let url = interface.url.trim_end_matches('/').to_owned();
        let tenant = interface.tenant.clone();
        let request_timeout = options.request_timeout;
        let grpc = match binding {
            Binding::Grpc => Some(Arc::new(GrpcAgent::new(card.clone(), interface, options)?)),
            Binding::JsonRpc | Binding::HttpJson => None,
        };
        Ok(Self {
            grpc,
            inner: Arc::new(Inner {
                http,
                card,
                binding,
                url,
                tenant,
                request_timeout,
                credentials: options.credentials.clone(),
                context_headers: options.context_headers.clone(),
            }),
        })
    }

    /// The binding in use.
    pub fn binding(&self) -> Binding {
        self.inner.binding
    }

    /// The interface URL in use.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// The card this client was built from.
    pub fn agent_card(&self) -> &AgentCard {
        &self.inner.card
    }
}

/// A request under way: method, path (HTTP+JSON) or method name (JSON-RPC), and body.
struct Call<'a> {
    jsonrpc_method: &'static str,
    rest_method: Method,
    rest_path: String,
    rest_query: Vec<(&'static str, String)>,
    body: Option<&'a (dyn erased::Body + Sync)>,
}

/// Object-safe serialization of request bodies.
mod erased {
    pub(crate) trait Body {
        fn to_json(&self) -> Result<Vec<u8>, serde_json::Error>;
    }

    impl<T: serde::Serialize> Body for T {
        fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
            serde_json::to_vec(self)
        }
    }
}

impl Inner {
    fn tenant_prefix(&self, tenant: &str) -> String {
        let tenant = if tenant.is_empty() {
            &self.tenant
        } else {
            tenant
        };
        if tenant.is_empty() {
            String::new()
        } else {
            format!("/{tenant}")
        }
    }

    fn request(
        &self,
        ctx: &CallContext,
        call: &Call<'_>,
        streaming: bool,
    ) -> Result<reqwest::RequestBuilder, Error> {
        let builder = match self.binding {
            Binding::JsonRpc => {
                let params: Box<RawValue> = match call.body {
                    Some(body) => body
                        .to_json()
                        .ok()
                        .and_then(|b| RawValue::from_string(String::from_utf8(b).ok()?).ok()),
                    None => RawValue::from_string("{}".to_owned()).ok(),
                }
                .ok_or_else(|| Error::decode("cannot serialize the request"))?;
                let envelope = Envelope {
                    jsonrpc: "2.0",
                    id: uuid_like_id(),
                    method: call.jsonrpc_method,
                    params: &params,
                };
                let body = serde_json::to_vec(&envelope)
                    .map_err(|e| Error::decode(format!("cannot serialize the request: {e}")))?;
                self.http
                    .post(&self.url)
                    .header(CONTENT_TYPE, "application/json")
                    .body(body)
            }
            // gRPC calls never come here: they go through the gRPC client.
            Binding::HttpJson | Binding::Grpc => {
                let url = format!("{}{}", self.url, call.rest_path);
                let mut builder = self
                    .http
                    .request(call.rest_method.clone(), url)
                    .query(&call.rest_query);
                if let Some(body) = call.body {
                    let bytes = body
                        .to_json()
                        .map_err(|e| Error::decode(format!("cannot serialize the request: {e}")))?;
                    builder = builder.header(CONTENT_TYPE, A2A_JSON).body(bytes);
                }
                builder
            }
        };
        let mut builder = if ctx.extensions.is_empty() {
            builder
        } else {
            builder.header(EXTENSIONS_HEADER, ctx.extensions.join(","))
        };
        if streaming && let Some(id) = ctx.last_event_id {
            builder = builder.header("last-event-id", id.to_string());
        }
        if let Some(credentials) = &self.credentials {
            let headers = credentials
                .headers()
                .map_err(|e| Error::transport(format!("cannot get credentials: {e}")))?;
            for (name, value) in headers {
                builder = builder.header(name, value);
            }
        }
        if let Some(context) = &self.context_headers {
            let mut headers = HeaderMap::new();
            context.add_to(&mut headers);
            builder = builder.headers(headers);
        }
        Ok(if streaming {
            builder.header(ACCEPT, "text/event-stream")
        } else {
            builder.timeout(self.request_timeout)
        })
    }

    async fn unary<T: DeserializeOwned>(
        &self,
        ctx: &CallContext,
        call: Call<'_>,
    ) -> Result<T, Error> {
        let response = self
            .request(ctx, &call, false)?
            .send()
            .await
            .map_err(|e| transport_error(&format!("{} failed", call.jsonrpc_method), e))?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| {
            transport_error(
                &format!("{} failed while reading the answer", call.jsonrpc_method),
                e,
            )
        })?;
        match self.binding {
            Binding::JsonRpc => decode_jsonrpc(status, &body),
            Binding::HttpJson | Binding::Grpc if status.is_success() => {
                serde_json::from_slice(&body)
                    .map_err(|e| Error::decode(format!("{}: {e}", call.jsonrpc_method)))
            }
            Binding::HttpJson | Binding::Grpc => {
                Err(Error::Protocol(parse_rest_error(status, &body)))
            }
        }
    }

    /// Opens the stream of `call`, which ends after the item `ends` says is the last.
    async fn stream(
        &self,
        ctx: &CallContext,
        call: Call<'_>,
        ends: fn(&StreamResponse) -> bool,
    ) -> Result<EventStream, Error> {
        let response = self
            .request(ctx, &call, true)?
            .send()
            .await
            .map_err(|e| transport_error(&format!("{} failed", call.jsonrpc_method), e))?;
        let status = response.status();
        let is_sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !is_sse || !status.is_success() {
            // An error (or a single answer) before the stream started.
            let body = response
                .bytes()
                .await
                .map_err(|e| transport_error("cannot read the answer", e))?;
            let single: StreamResponse = match self.binding {
                Binding::JsonRpc => decode_jsonrpc(status, &body)?,
                Binding::HttpJson | Binding::Grpc if status.is_success() => {
                    serde_json::from_slice(&body)
                        .map_err(|e| Error::decode(format!("{}: {e}", call.jsonrpc_method)))?
                }
                Binding::HttpJson | Binding::Grpc => {
                    return Err(Error::Protocol(parse_rest_error(status, &body)));
                }
            };
            return Ok(EventStream::once(Ok(single)));
        }
        let binding = self.binding;
        let bytes = response.bytes_stream();
        let state = (bytes, SseDecoder::default(), false);
        Ok(EventStream::numbered(futures_util::stream::unfold(
            state,
            move |(mut bytes, mut decoder, done)| async move {
                if done {
                    return None;
                }
                loop {
                    match decoder.next_event() {
                        Ok(Some(event)) => {
                            let item = decode_event(binding, &event);
                            let last = item.as_ref().map_or(true, ends);
                            let id = event.id.as_deref().and_then(|id| id.parse().ok());
                            let item = item.map(|decoded| (id, decoded));
                            return Some((item, (bytes, decoder, last)));
                        }
                        Ok(None) => {}
                        Err(e) => {
                            let error =
                                Error::decode(format!("the event stream is malformed: {e}"));
                            return Some((Err(error), (bytes, decoder, true)));
                        }
                    }
                    match bytes.next().await {
                        Some(Ok(chunk)) => decoder.push(&chunk),
                        Some(Err(e)) => {
                            return Some((
                                Err(transport_error("the event stream broke", e)),
                                (bytes, decoder, true),
                            ));
                        }
                        None => return None,
                    }
                }
            },
        )))
    }
}

#[derive(Serialize)]
struct Envelope<'a> {
    jsonrpc: &'static str,
    id: String,
    method: &'static str,
    params: &'a RawValue,
}

/// A request id unique within this process.
fn uuid_like_id() -> String {
    mew_cards::MessageId::generate().to_string()
}

fn decode_jsonrpc<T: DeserializeOwned>(status: StatusCode, body: &[u8]) -> Result<T, Error> {
    /// `result` is kept raw so that a present `null` (a delete's answer) differs from an absent one.
    #[derive(serde::Deserialize)]
    struct Response<'a> {
        #[serde(borrow, default, deserialize_with = "present")]
        result: Option<&'a RawValue>,
        #[serde(default)]
        error: Option<Value>,
    }
    fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
        <&RawValue as serde::Deserialize>::deserialize(d).map(Some)
    }
    let response: Response<'_> = serde_json::from_slice(body).map_err(|e| {
        if status.is_success() {
            Error::decode(format!("not a JSON-RPC response: {e}"))
        } else {
            let shown = String::from_utf8_lossy(&body[..body.len().min(200)]);
            Error::transport(format!("HTTP {status}: {shown}"))
        }
    })?;
    match (response.result, response.error) {
        (_, Some(error)) => Err(Error::Protocol(parse_jsonrpc_error(&error))),
        (Some(result), None) => serde_json::from_str(result.get())
            .map_err(|e| Error::decode(format!("unexpected JSON-RPC result: {e}"))),
        (None, None) => Err(Error::decode(
            "a JSON-RPC response with neither result nor error",
        )),
    }
}

fn decode_event(binding: Binding, event: &SseEvent) -> Result<StreamResponse, Error> {
    match binding {
        Binding::JsonRpc => decode_jsonrpc(StatusCode::OK, event.data.as_bytes()),
        Binding::HttpJson | Binding::Grpc => {
            let value: Value = serde_json::from_str(&event.data)
                .map_err(|e| Error::decode(format!("an event is not JSON: {e}")))?;
            if event.event.as_deref() == Some("error") || value.get("error").is_some() {
                let status = value
                    .pointer("/error/code")
                    .and_then(Value::as_u64)
                    .and_then(|c| StatusCode::from_u16(u16::try_from(c).ok()?).ok())
                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                return Err(Error::Protocol(parse_rest_error(
                    status,
                    event.data.as_bytes(),
                )));
            }
            serde_json::from_value(value)
                .map_err(|e| Error::decode(format!("an event is not a StreamResponse: {e}")))
        }
    }
}

fn rest_task_path(prefix: &str, id: &str, suffix: &str) -> String {
    format!("{prefix}/tasks/{}{suffix}", urlencode(id))
}

/// Percent-encodes a path segment.
fn urlencode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn history_query(n: Option<i32>) -> Vec<(&'static str, String)> {
    n.map(|n| vec![("historyLength", n.to_string())])
        .unwrap_or_default()
}

#[async_trait]
impl AgentTransport for RemoteAgent {
    async fn card(&self) -> Result<AgentCard, Error> {
        Ok(self.inner.card.clone())
    }

    async fn send_message(
        &self,
        ctx: &CallContext,
        request: SendMessageRequest,
    ) -> Result<SendMessageResponse, Error> {
        if let Some(grpc) = &self.grpc {
            return grpc.send_message(ctx, request).await;
        }
        let prefix = self.inner.tenant_prefix(&request.tenant);
        let call = Call {
            jsonrpc_method: "SendMessage",
            rest_method: Method::POST,
            rest_path: format!("{prefix}/message:send"),
            rest_query: Vec::new(),
            body: Some(&request),
        };
        self.inner.unary(ctx, call).await
    }

    async fn send_streaming_message(
        &self,
        ctx: &CallContext,
        request: SendMessageRequest,
    ) -> Result<EventStream, Error> {
        if let Some(grpc) = &self.grpc {
            return grpc.send_streaming_message(ctx, request).await;
        }
        let prefix = self.inner.tenant_prefix(&request.tenant);
        let call = Call {
            jsonrpc_method: "SendStreamingMessage",
            rest_method: Method::POST,
            rest_path: format!("{prefix}/message:stream"),
            rest_query: Vec::new(),
            body: Some(&request),
        };
        self.inner
            .stream(ctx, call, StreamResponse::ends_stream)
            .await
    }

    async fn get_task(&self, ctx: &CallContext, request: GetTaskRequest) -> Result<Task, Error> {
        if let Some(grpc) = &self.grpc {
            return grpc.get_task(ctx, request).await;
        }
        let prefix = self.inner.tenant_prefix(&request.tenant);
        let call = Call {
            jsonrpc_method: "GetTask",
            rest_method: Method::GET,
            rest_path: rest_task_path(&prefix, request.id.as_str(), ""),
            rest_query: history_query(request.history_length),
            body: (self.inner.binding == Binding::JsonRpc).then_some(&request as _),
        };
        self.inner.unary(ctx, call).await
    }

    async fn list_tasks(
        &self,
        ctx: &CallContext,
        request: ListTasksRequest,
    ) -> Result<ListTasksResponse, Error> {
        if let Some(grpc) = &self.grpc {
            return grpc.list_tasks(ctx, request).await;
        }
        let prefix = self.inner.tenant_prefix(&request.tenant);
        let mut query = history_query(request.history_length);
        if !request.context_id.is_empty() {
            query.push(("contextId", request.context_id.to_string()));
        }
        if request.status != mew_cards::TaskState::Unspecified {
            query.push(("status", request.status.as_str().to_owned()));
        }
        if let Some(n) = request.page_size {
            query.push(("pageSize", n.to_string()));
        }
        if !request.page_token.is_empty() {
            query.push(("pageToken", request.page_token.clone()));
        }
        if let Some(ts) = request.status_timestamp_after {
            query.push(("statusTimestampAfter", ts.to_string()));
        }
        if let Some(include) = request.include_artifacts {
            query.push(("includeArtifacts", include.to_string()));
        }
        let call = Call {
            jsonrpc_method: "ListTasks",
            rest_method: Method::GET,
            rest_path: format!("{prefix}/tasks"),
            rest_query: query,
            body: (self.inner.binding == Binding::JsonRpc).then_some(&request as _),
        };
        self.inner.unary(ctx, call).await
    }

    async fn cancel_task(
        &self,
        ctx: &CallContext,
        request: CancelTaskRequest,
    ) -> Result<Task, Error> {
        if let Some(grpc) = &self.grpc {
            return grpc.cancel_task(ctx, request).await;
        }
        let prefix = self.inner.tenant_prefix(&request.tenant);
        let call = Call {
            jsonrpc_method: "CancelTask",
            rest_method: Method::POST,
            rest_path: rest_task_path(&prefix, request.id.as_str(), ":cancel"),
            rest_query: Vec::new(),
            body: Some(&request),
        };
        self.inner.unary(ctx, call).await
    }

    async fn subscribe_to_task(
        &self,
        ctx: &CallContext,
        request: SubscribeToTaskRequest,
    ) -> Result<EventStream, Error> {
        if let Some(grpc) = &self.grpc {
            return grpc.subscribe_to_task(ctx, request).await;
        }
        let prefix = self.inner.tenant_prefix(&request.tenant);
        let call = Call {
            jsonrpc_method: "SubscribeToTask",
            rest_method: Method::POST,
            rest_path: rest_task_path(&prefix, request.id.as_str(), ":subscribe"),
            rest_query: Vec::new(),
            body: (self.inner.binding == Binding::JsonRpc).then_some(&request as _),
        };
        self.inner
            .stream(ctx, call, StreamResponse::ends_subscription)
            .await
    }

    async fn create_task_push_notification_config(
        &self,
        ctx: &CallContext,
        request: TaskPushNotificationConfig,
    ) -> Result<TaskPushNotificationConfig, Error> {
        if let Some(grpc) = &self.grpc {
            return grpc
                .create_task_push_notification_config(ctx, request)
                .await;
        }
        let prefix = self.inner.tenant_prefix(&request.tenant);
        let call = Call {
            jsonrpc_method: "CreateTaskPushNotificationConfig",
            rest_method: Method::POST,
            rest_path: rest_task_path(
                &prefix,
                request.task_id.as_str(),
                "/pushNotificationConfigs",
            ),
            rest_query: Vec::new(),
            body: Some(&request),
        };
        self.inner.unary(ctx, call).await
    }

    async fn get_task_push_notification_config(
        &self,
        ctx: &CallContext,
        request: GetTaskPushNotificationConfigRequest,
    ) -> Result<TaskPushNotificationConfig, Error> {
        if let Some(grpc) = &self.grpc {
            return grpc.get_task_push_notification_config(ctx, request).await;
        }
        let prefix = self.inner.tenant_prefix(&request.tenant);
        let suffix = format!("/pushNotificationConfigs/{}", urlencode(&request.id));
        let call = Call {
            jsonrpc_method: "GetTaskPushNotificationConfig",
            rest_method: Method::GET,
            rest_path: rest_task_path(&prefix, request.task_id.as_str(), &suffix),
            rest_query: Vec::new(),
            body: (self.inner.binding == Binding::JsonRpc).then_some(&request as _),
        };
        self.inner.unary(ctx, call).await
    }

    async fn list_task_push_notification_configs(
        &self,
        ctx: &CallContext,
        request: ListTaskPushNotificationConfigsRequest,
    ) -> Result<ListTaskPushNotificationConfigsResponse, Error> {
        if let Some(grpc) = &self.grpc {
            return grpc.list_task_push_notification_configs(ctx, request).await;
        }
        let prefix = self.inner.tenant_prefix(&request.tenant);
        let mut query = Vec::new();
        if request.page_size != 0 {
            query.push(("pageSize", request.page_size.to_string()));
        }
        if !request.page_token.is_empty() {
            query.push(("pageToken", request.page_token.clone()));
        }
        let call = Call {
            jsonrpc_method: "ListTaskPushNotificationConfigs",
            rest_method: Method::GET,
            rest_path: rest_task_path(
                &prefix,
                request.task_id.as_str(),
                "/pushNotificationConfigs",
            ),
            rest_query: query,
            body: (self.inner.binding == Binding::JsonRpc).then_some(&request as _),
        };
        self.inner.unary(ctx, call).await
    }

    async fn delete_task_push_notification_config(
        &self,
        ctx: &CallContext,
        request: GetTaskPushNotificationConfigRequest,
    ) -> Result<(), Error> {
        if let Some(grpc) = &self.grpc {
            return grpc
                .delete_task_push_notification_config(ctx, request)
                .await;
        }
        let prefix = self.inner.tenant_prefix(&request.tenant);
        let suffix = format!("/pushNotificationConfigs/{}", urlencode(&request.id));
        let call = Call {
            jsonrpc_method: "DeleteTaskPushNotificationConfig",
            rest_method: Method::DELETE,
            rest_path: rest_task_path(&prefix, request.task_id.as_str(), &suffix),
            rest_query: Vec::new(),
            body: (self.inner.binding == Binding::JsonRpc).then_some(&request as _),
        };
        let _: Value = self.inner.unary(ctx, call).await?;
        Ok(())
    }

    async fn get_extended_agent_card(
        &self,
        ctx: &CallContext,
        request: GetExtendedAgentCardRequest,
    ) -> Result<AgentCard, Error> {
        if let Some(grpc) = &self.grpc {
            return grpc.get_extended_agent_card(ctx, request).await;
        }
        let prefix = self.inner.tenant_prefix(&request.tenant);
        let call = Call {
            jsonrpc_method: "GetExtendedAgentCard",
            rest_method: Method::GET,
            rest_path: format!("{prefix}/extendedAgentCard"),
            rest_query: Vec::new(),
            body: (self.inner.binding == Binding::JsonRpc).then_some(&request as _),
        };
        self.inner.unary(ctx, call).await
    }
}
