//! The HTTP server: serves any `AgentTransport` over JSON-RPC, HTTP+JSON and the well-known card.

mod card;
mod jsonrpc;
mod rest;

pub use rest::method_not_allowed;

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
    /// `Cache-Control: max-age` of the well-known card.
    pub card_max_age: Duration,
    /// Interval of SSE keep-alive comments on idle streams.
    pub keep_alive: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            max_body_bytes: 10 * 1024 * 1024,
            card_max_age: Duration::from_secs(300),
            keep_alive: Duration::from_secs(15),
        }
    }
}

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) agent: Arc<dyn AgentTransport>,
    pub(crate) options: Arc<ServerOptions>,
    pub(crate) card: Arc<card::CardCache>,
}

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
    let shared = Shared {
        agent,
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
    CallContext {
        principal: principal.map(|p| p.0),
        extensions,
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

/// Reads a whole body up to `limit` bytes.
pub(crate) async fn read_body(body: Body, limit: usize) -> Result<Bytes, BodyError> {
    match axum::body::to_bytes(body, limit).await {
        Ok(bytes) => Ok(bytes),
        Err(error) => {
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

/// Why a body could not be read.
pub(crate) enum BodyError {
    TooLarge(usize),
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
    let frames = end_after_last(stream, ends).map(move |item| {
        let data = frame(item.map_err(crate::Error::into_a2a));
        Ok::<_, std::convert::Infallible>(Event::default().data(data))
    });
    Sse::new(frames)
        .keep_alive(KeepAlive::new().interval(keep_alive))
        .into_response()
}

/// Ends a stream after its first error or after the item that `ends` says is the last.
fn end_after_last(
    stream: EventStream,
    ends: fn(&mew_cards::StreamResponse) -> bool,
) -> EventStream {
    Box::pin(futures_util::stream::unfold(
        (stream, false),
        move |(mut stream, done)| async move {
            if done {
                return None;
            }
            let item = stream.next().await?;
            let last = match &item {
                Ok(event) => ends(event),
                Err(_) => true,
            };
            Some((item, (stream, last)))
        },
    ))
}
