//! The HTTP server: serves any `AgentTransport` over JSON-RPC, HTTP+JSON and the well-known card.

mod card;
mod jsonrpc;
mod rest;

pub use rest::method_not_allowed;

use crate::client::Binding;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Response, StatusCode, header};
use axum::routing::{get, post};
use bytes::Bytes;
use futures_util::StreamExt;
use mew_cards::{A2aError, ErrorKind};

use crate::agent::{AgentTransport, CallContext, EventStream, Principal};
use crate::wire::{EXTENSIONS_HEADER, VERSION_HEADER};

/// How the server behaves; the defaults suit most agents.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// The most bytes of request bodies one router reads and parses at once: a request
    /// reserves its `Content-Length` (or `max_body_bytes` when it sends none) until its body
    /// is parsed, and waits for room (at most `body_timeout`) when others hold it.
    pub max_inflight_body_bytes: usize,
    /// The time a client has to send a whole request body (and to find room for it);
    /// beyond it the request is answered 408 (503 when there was no room).
    pub body_timeout: Duration,
    /// `Cache-Control: max-age` of the well-known card.
    pub card_max_age: Duration,
    /// Interval of SSE keep-alive comments on idle streams.
    pub keep_alive: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            max_body_bytes: 10 * 1024 * 1024,
            max_inflight_body_bytes: 32 * 1024 * 1024,
            body_timeout: Duration::from_secs(60),
            card_max_age: Duration::from_secs(300),
            keep_alive: Duration::from_secs(15),
        }
    }
}

/// What one response of the A2A bindings answered, attached to it as a response extension:
/// the binding, the operation (when the request named one the binding knows) and the A2A
/// outcome. An application that serves the router reads it, in a middleware, to measure or log
/// its requests without parsing their bodies again. A stream's outcome is that of its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Served {
    /// The binding the request came through.
    pub binding: Binding,
    /// The A2A operation by its JSON-RPC method name (`SendMessage`, `GetTask`, ...), also on
    /// HTTP+JSON; `None` when the request named no operation the binding knows.
    pub method: Option<&'static str>,
    /// `Ok` for a result, or the kind of the error answered.
    pub outcome: Result<(), ErrorKind>,
}

impl Served {
    /// Attaches `self` to `response`.
    pub(crate) fn attach(self, mut response: Response<Body>) -> Response<Body> {
        response.extensions_mut().insert(self);
        response
    }

    /// Names the operation of a response that has a [`Served`] already.
    pub(crate) fn name(method: &'static str, mut response: Response<Body>) -> Response<Body> {
        if let Some(served) = response.extensions_mut().get_mut::<Served>() {
            served.method = Some(method);
        }
        response
    }
}

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) agent: Arc<dyn AgentTransport>,
    pub(crate) options: Arc<ServerOptions>,
    pub(crate) card: Arc<card::CardCache>,
    /// Room for request bodies being read and parsed, in KiB.
    pub(crate) bodies: Arc<tokio::sync::Semaphore>,
}

/// Request bodies are budgeted in units of this many bytes.
const BODY_UNIT: usize = 1024;

/// Serves `agent` with default options: see [`router_with`].
pub fn router(agent: Arc<dyn AgentTransport>) -> Router {
    router_with(agent, ServerOptions::default())
}

/// Serves `agent`: its card at `/.well-known/agent-card.json`, JSON-RPC at
/// `/`, and HTTP+JSON at `/message:send`, `/tasks/...` and the rest of the
/// binding's paths, each also under `/{tenant}/`.
///
/// The router is relative: nest it to serve an agent under a prefix.
pub fn router_with(agent: Arc<dyn AgentTransport>, options: ServerOptions) -> Router {
    let units = options.max_inflight_body_bytes.div_ceil(BODY_UNIT).max(1);
    let shared = Shared {
        agent,
        bodies: Arc::new(tokio::sync::Semaphore::new(
            units.min(tokio::sync::Semaphore::MAX_PERMITS),
        )),
        options: Arc::new(options),
        card: Arc::new(card::CardCache::default()),
    };
    let rest = rest::routes();
    Router::new()
        .route("/.well-known/agent-card.json", get(card::well_known))
        .route("/", post(jsonrpc::handle))
        .merge(rest.clone())
        .nest("/{tenant}", rest)
        .fallback(rest::not_found)
        .method_not_allowed_fallback(rest::method_not_allowed)
        .with_state(shared)
}

/// The caller's context from the request headers and the principal an
/// authenticating layer attached to the request, if any.
pub(crate) fn call_context(headers: &HeaderMap, principal: Option<Principal>) -> CallContext {
    let extensions = headers
        .get_all(EXTENSIONS_HEADER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .collect();
    // An id this server did not send (not a number) is ignored, as SSE lets a server do:
    // the stream starts with a snapshot.
    let last_event_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok());
    CallContext {
        principal: principal.map(|p| p.0),
        extensions,
        last_event_id,
    }
}

/// Checks the declared protocol version: header first, then the query
/// parameter; none at all means 0.3. Major and minor must be 1.0.
pub(crate) fn check_version(headers: &HeaderMap, query: Option<&str>) -> Result<(), A2aError> {
    let from_query = || {
        query?.split('&').find_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            key.eq_ignore_ascii_case(VERSION_HEADER)
                .then(|| value.to_owned())
        })
    };
    let declared = headers
        .get(VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .or_else(from_query);
    let Some(declared) = declared else {
        return Err(A2aError::new(
            ErrorKind::VersionNotSupported,
            "this agent speaks A2A 1.0; the request has no A2A-Version header, which means 0.3",
        ));
    };
    let mut parts = declared.split('.');
    let (major, minor) = (parts.next(), parts.next());
    if major == Some("1") && minor == Some("0") {
        Ok(())
    } else {
        Err(A2aError::new(
            ErrorKind::VersionNotSupported,
            format!("this agent speaks A2A 1.0; the request asked for version {declared:?}"),
        ))
    }
}

/// True when the request's `Content-Type` is one of `accepted` (parameters ignored).
pub(crate) fn content_type_is(headers: &HeaderMap, accepted: &[&str]) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .is_some_and(|media| accepted.contains(&media.as_str()))
}

/// A request body read whole, holding its share of the router's body budget until it is
/// dropped: drop it once the request is parsed.
pub(crate) struct ReadBody {
    pub(crate) bytes: Bytes,
    _room: tokio::sync::OwnedSemaphorePermit,
}

/// Reads a whole body of at most `max_body_bytes`, within `body_timeout`, after reserving
/// room for it (its `Content-Length`, or the limit when it has none) in the router's budget.
pub(crate) async fn read_body(
    shared: &Shared,
    headers: &HeaderMap,
    body: Body,
) -> Result<ReadBody, BodyError> {
    let options = &shared.options;
    let limit = options.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Err(BodyError::TooLarge(limit));
    }
    let reserve = declared
        .unwrap_or(limit)
        .min(options.max_inflight_body_bytes);
    let units = u32::try_from(reserve.div_ceil(BODY_UNIT).max(1)).unwrap_or(u32::MAX);
    // A zero timeout is none.
    let deadline = (!options.body_timeout.is_zero())
        .then(|| tokio::time::Instant::now() + options.body_timeout);
    let room = within(deadline, shared.bodies.clone().acquire_many_owned(units))
        .await
        .map_err(|_| BodyError::Busy)?
        .map_err(|_| BodyError::Busy)?;
    match within(deadline, axum::body::to_bytes(body, limit)).await {
        Err(_) => Err(BodyError::TooSlow(options.body_timeout)),
        Ok(Ok(bytes)) => Ok(ReadBody { bytes, _room: room }),
        Ok(Err(error)) => {
            let too_large = std::error::Error::source(&error)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            Err(if too_large {
                BodyError::TooLarge(limit)
            } else {
                BodyError::Broken
            })
        }
    }
}

/// Runs `future` until `deadline`, if there is one.
async fn within<F: std::future::Future>(
    deadline: Option<tokio::time::Instant>,
    future: F,
) -> Result<F::Output, tokio::time::error::Elapsed> {
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, future).await,
        None => Ok(future.await),
    }
}

/// Why a body could not be read.
pub(crate) enum BodyError {
    TooLarge(usize),
    /// It did not arrive whole within the body timeout.
    TooSlow(Duration),
    /// Other requests' bodies held the router's budget for the whole body timeout.
    Busy,
    Broken,
}

impl BodyError {
    pub(crate) fn into_a2a(self) -> (StatusCode, A2aError) {
        match self {
            Self::TooLarge(limit) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                A2aError::new(
                    ErrorKind::InvalidRequest,
                    format!("the request body is larger than {limit} bytes"),
                ),
            ),
            Self::TooSlow(limit) => (
                StatusCode::REQUEST_TIMEOUT,
                A2aError::new(
                    ErrorKind::InvalidRequest,
                    format!(
                        "the request body did not arrive within {} s",
                        limit.as_secs_f64()
                    ),
                ),
            ),
            Self::Busy => (
                StatusCode::SERVICE_UNAVAILABLE,
                A2aError::new(
                    ErrorKind::Internal,
                    "the agent is reading as many request bodies as it takes at once; try again",
                ),
            ),
            Self::Broken => (
                StatusCode::BAD_REQUEST,
                A2aError::new(
                    ErrorKind::InvalidRequest,
                    "the request body could not be read",
                ),
            ),
        }
    }
}

/// A JSON response with the given status and media type.
pub(crate) fn json_response(
    status: StatusCode,
    media: &'static str,
    body: Vec<u8>,
) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(media),
    );
    response
}

/// Turns an event stream into an SSE response that ends after the item `ends` says is the
/// last (or an error); `frame` renders each item's `data:`.
pub(crate) fn sse_response<F>(
    stream: EventStream,
    keep_alive: Duration,
    ends: fn(&mew_cards::StreamResponse) -> bool,
    frame: F,
) -> Response<Body>
where
    F: Fn(Result<mew_cards::StreamResponse, A2aError>) -> String + Send + Sync + 'static,
{
    use axum::response::IntoResponse;
    use axum::response::sse::{Event, KeepAlive, Sse};
    let frames = end_after_last(stream, ends).map(move |(item, id)| {
        let data = frame(item.map_err(crate::Error::into_a2a));
        let event = Event::default().data(data);
        Ok::<_, std::convert::Infallible>(match id {
            Some(id) => event.id(id.to_string()),
            None => event,
        })
    });
    Sse::new(frames)
        .keep_alive(KeepAlive::new().interval(keep_alive))
        .into_response()
}

/// Each item with its event number, ending after the first error or after the item that
/// `ends` says is the last.
pub(crate) fn end_after_last(
    stream: EventStream,
    ends: fn(&mew_cards::StreamResponse) -> bool,
) -> impl futures_util::Stream<Item = (Result<mew_cards::StreamResponse, crate::Error>, Option<u64>)>
+ Send {
    futures_util::stream::unfold((stream, false), move |(mut stream, done)| async move {
        if done {
            return None;
        }
        let item = stream.next().await?;
        let last = match &item {
            Ok(event) => ends(event),
            Err(_) => true,
        };
        let id = stream.event_id();
        Some(((item, id), (stream, last)))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use async_trait::async_trait;
    use mew_cards::{
        AgentCard, CancelTaskRequest, GetTaskRequest, ListTasksRequest, ListTasksResponse,
        SendMessageRequest, SendMessageResponse, SubscribeToTaskRequest, Task,
    };

    use super::*;
    use crate::Error;

    /// An agent that is never called: these tests stop at the body.
    struct Unused;

    fn unused() -> Error {
        Error::transport("not called")
    }

    #[async_trait]
    impl AgentTransport for Unused {
        async fn card(&self) -> Result<AgentCard, Error> {
            Err(unused())
        }
        async fn send_message(
            &self,
            _: &CallContext,
            _: SendMessageRequest,
        ) -> Result<SendMessageResponse, Error> {
            Err(unused())
        }
        async fn send_streaming_message(
            &self,
            _: &CallContext,
            _: SendMessageRequest,
        ) -> Result<EventStream, Error> {
            Err(unused())
        }
        async fn get_task(&self, _: &CallContext, _: GetTaskRequest) -> Result<Task, Error> {
            Err(unused())
        }
        async fn list_tasks(
            &self,
            _: &CallContext,
            _: ListTasksRequest,
        ) -> Result<ListTasksResponse, Error> {
            Err(unused())
        }
        async fn cancel_task(&self, _: &CallContext, _: CancelTaskRequest) -> Result<Task, Error> {
            Err(unused())
        }
        async fn subscribe_to_task(
            &self,
            _: &CallContext,
            _: SubscribeToTaskRequest,
        ) -> Result<EventStream, Error> {
            Err(unused())
        }
    }

    fn shared(options: ServerOptions) -> Shared {
        let units = options.max_inflight_body_bytes.div_ceil(BODY_UNIT);
        Shared {
            agent: Arc::new(Unused),
            bodies: Arc::new(tokio::sync::Semaphore::new(units)),
            options: Arc::new(options),
            card: Arc::new(card::CardCache::default()),
        }
    }

    fn length(n: usize) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_LENGTH, n.to_string().parse().unwrap());
        headers
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_waits_for_room_and_is_busy_when_none_comes() {
        let shared = shared(ServerOptions {
            max_inflight_body_bytes: 4096,
            body_timeout: Duration::from_secs(5),
            ..ServerOptions::default()
        });
        // Others hold three of the four KiB: a 2 KiB body does not fit, a 1 KiB one does.
        let held = shared.bodies.clone().acquire_many_owned(3).await.unwrap();
        let small = read_body(&shared, &length(1024), Body::from(vec![b' '; 1024])).await;
        assert!(small.is_ok());
        let large = read_body(&shared, &length(2048), Body::from(vec![b' '; 2048])).await;
        let (status, error) = match large {
            Err(error) => error.into_a2a(),
            Ok(_) => panic!("a body beyond the room was read"),
        };
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(error.message.contains("try again"), "{}", error.message);
        // Once the room is given back, the same body is read.
        drop(held);
        let large = read_body(&shared, &length(2048), Body::from(vec![b' '; 2048])).await;
        assert_eq!(large.map(|body| body.bytes.len()).ok(), Some(2048));
    }

    /// What the router says it served for `request`.
    async fn served(request: axum::http::Request<Body>) -> Option<Served> {
        use tower::ServiceExt;
        let response = router(Arc::new(Unused)).oneshot(request).await.unwrap();
        response.extensions().get::<Served>().copied()
    }

    fn jsonrpc(method: &str) -> axum::http::Request<Body> {
        let body =
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{{"id":"t"}}}}"#);
        axum::http::Request::post("/")
            .header(header::CONTENT_TYPE, "application/json")
            .header(VERSION_HEADER, "1.0")
            .body(Body::from(body))
            .unwrap()
    }

    fn rest(method: &str, path: &str) -> axum::http::Request<Body> {
        axum::http::Request::builder()
            .method(method)
            .uri(path)
            .header(VERSION_HEADER, "1.0")
            .body(Body::empty())
            .unwrap()
    }

    #[tokio::test]
    async fn every_answer_of_both_bindings_says_what_it_served() {
        let served_as = |binding, method, outcome| {
            Some(Served {
                binding,
                method,
                outcome,
            })
        };
        // The agent fails every call: an internal error, answered under the method's name.
        let internal = Err(ErrorKind::Internal);
        // Push configs are default methods of the trait: the spec's "not supported".
        let no_push = Err(ErrorKind::PushNotificationNotSupported);
        assert_eq!(
            served(jsonrpc("GetTask")).await,
            served_as(Binding::JsonRpc, Some("GetTask"), internal)
        );
        assert_eq!(
            served(jsonrpc("NoSuchMethod")).await,
            served_as(Binding::JsonRpc, None, Err(ErrorKind::MethodNotFound))
        );
        let rest_cases = [
            ("GET", "/tasks/t", Some("GetTask"), internal),
            ("POST", "/tasks/t:cancel", Some("CancelTask"), internal),
            (
                "GET",
                "/tasks/t:subscribe",
                Some("SubscribeToTask"),
                internal,
            ),
            ("GET", "/tenant/tasks", Some("ListTasks"), internal),
            (
                "GET",
                "/tasks/t/pushNotificationConfigs/c",
                Some("GetTaskPushNotificationConfig"),
                no_push,
            ),
            (
                "DELETE",
                "/tasks/t/pushNotificationConfigs/c",
                Some("DeleteTaskPushNotificationConfig"),
                no_push,
            ),
            (
                "GET",
                "/nowhere/at/all",
                None,
                Err(ErrorKind::MethodNotFound),
            ),
        ];
        for (method, path, named, outcome) in rest_cases {
            assert_eq!(
                served(rest(method, path)).await,
                served_as(Binding::HttpJson, named, outcome),
                "{method} {path}"
            );
        }
        // The card is no A2A operation: it says nothing.
        assert_eq!(
            served(rest("GET", "/.well-known/agent-card.json")).await,
            None
        );
    }

    #[tokio::test]
    async fn a_declared_length_beyond_the_limit_is_refused_before_reading() {
        let shared = shared(ServerOptions {
            max_body_bytes: 100,
            ..ServerOptions::default()
        });
        let outcome = read_body(&shared, &length(101), Body::empty()).await;
        assert!(matches!(outcome, Err(BodyError::TooLarge(100))));
    }
}
