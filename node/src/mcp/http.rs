//! The HTTP client under the SDK's Streamable HTTP transport: reqwest, plus one fix.
//!
//! Some servers answer a request they cannot place with a JSON-RPC error that has no `id`
//! (server-everything and others built from the TypeScript SDK's example answer a session id
//! they do not know with `400 {"error": {"message": "Bad Request: No valid session ID
//! provided"}}`, where the spec says 404). The SDK cannot match such an error to its request,
//! so the call would wait out its whole timeout. This client instead:
//!
//! - takes an id-less error to a request sent in a session as the session being gone, which
//!   makes the SDK open a new session and send the request again, once (as for a 404);
//! - gives an id-less error to any other request the request's id, so the call fails at once
//!   with the server's message.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, RequestId, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::Sse;

/// reqwest, with id-less errors placed (see the module docs), keeping the server's last
/// authorization challenge; with `dpop`, the token goes as a DPoP-bound one.
#[derive(Clone)]
pub(super) struct HttpClient {
    pub(super) client: reqwest::Client,
    pub(super) challenge: Challenge,
    /// The key the connection's tokens are bound to, and the server's last nonce.
    pub(super) dpop: Option<Arc<super::dpop::DpopState>>,
}

/// The `WWW-Authenticate` header of a server's last 401 or 403, kept for a new authorization
/// (the SDK reports it to its caller, which for a tool call is a task of the SDK's own).
#[derive(Clone, Default)]
pub(super) struct Challenge(Arc<std::sync::Mutex<Option<String>>>);

impl Challenge {
    /// The last challenge.
    pub(super) fn last(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Keeps the challenge of `result`, if it failed with one.
    fn keep<T>(&self, result: &Result<T, StreamableHttpError<reqwest::Error>>) {
        if let Err(err) = result
            && let Some(challenge) = err.auth_challenge()
        {
            *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(challenge.to_owned());
        }
    }
}

type PostResult = Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>;
type Headers = HashMap<HeaderName, HeaderValue>;

impl HttpClient {
    /// Sends a request with `send`, given the authorization header the SDK's client should
    /// send (the token, as `Bearer`) and the other headers. With DPoP, the token goes instead
    /// as `Authorization: DPoP` with a fresh proof for `method` and `uri` (and the server's
    /// nonce); a server that answers asking for a (new) nonce gets its nonce learned and the
    /// request once more.
    async fn send<T, F, Fut>(
        &self,
        method: &str,
        uri: &str,
        session_id: Option<&str>,
        auth_header: Option<String>,
        headers: Headers,
        send: F,
    ) -> Result<T, StreamableHttpError<reqwest::Error>>
    where
        F: Fn(Option<String>, Headers) -> Fut,
        Fut: std::future::Future<Output = Result<T, StreamableHttpError<reqwest::Error>>>,
    {
        let (Some(dpop), Some(token)) = (&self.dpop, auth_header.as_deref()) else {
            return send(auth_header, headers).await;
        };
        let bound = |mut headers: Headers| {
            let proof = dpop.request_headers(method, uri, token).map_err(|why| {
                StreamableHttpError::Auth(rmcp::transport::auth::AuthError::InternalError(why))
            })?;
            headers.extend(proof);
            Ok::<_, StreamableHttpError<reqwest::Error>>(headers)
        };
        let result = send(None, bound(headers.clone())?).await;
        match &result {
            Err(err)
                if err
                    .auth_challenge()
                    .is_some_and(super::dpop::asks_for_nonce)
                    && dpop
                        .learn_resource_nonce(&self.client, uri, token, session_id)
                        .await
                        .is_some() =>
            {
                send(None, bound(headers)?).await
            }
            _ => result,
        }
    }
}
type StreamResult =
    Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<reqwest::Error>>;

/// The id of `message` when it is a request.
fn request_id(message: &ClientJsonRpcMessage) -> Option<RequestId> {
    match message {
        ClientJsonRpcMessage::Request(request) => Some(request.id.clone()),
        _ => None,
    }
}

/// The W3C trace context of a tool call (its `_meta`, see `client.rs`) also as HTTP headers,
/// as proxies and servers that trace by headers read it. The SDK sends from a task of its
/// own, so the message is where the caller's context is.
fn with_trace_headers(
    message: &ClientJsonRpcMessage,
    mut headers: HashMap<HeaderName, HeaderValue>,
) -> HashMap<HeaderName, HeaderValue> {
    let ClientJsonRpcMessage::Request(request) = message else {
        return headers;
    };
    let rmcp::model::ClientRequest::CallToolRequest(call) = &request.request else {
        return headers;
    };
    let Some(meta) = &call.params.meta else {
        return headers;
    };
    for (name, value) in [
        ("traceparent", meta.get_traceparent()),
        ("tracestate", meta.get_tracestate()),
    ] {
        if let Some(value) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    headers
}

/// Places an id-less error answering the request `id` (see the module docs).
fn place(id: Option<RequestId>, in_session: bool, response: PostResult) -> PostResult {
    match response? {
        StreamableHttpPostResponse::Json(ServerJsonRpcMessage::Error(mut error), session)
            if error.id.is_none() =>
        {
            let Some(id) = id else {
                return Ok(StreamableHttpPostResponse::Json(
                    ServerJsonRpcMessage::Error(error),
                    session,
                ));
            };
            if in_session {
                tracing::debug!(
                    "the MCP server answered a request in its session with an error without an \
                     id ({}): taking the session as gone",
                    error.error.message
                );
                return Err(StreamableHttpError::SessionExpired);
            }
            error.id = Some(id);
            Ok(StreamableHttpPostResponse::Json(
                ServerJsonRpcMessage::Error(error),
                session,
            ))
        }
        other => Ok(other),
    }
}

impl StreamableHttpClient for HttpClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> PostResult {
        let id = request_id(&message);
        let in_session = session_id.is_some();
        let custom_headers = with_trace_headers(&message, custom_headers);
        let session = session_id.as_deref().map(str::to_owned);
        let response = self
            .send(
                "POST",
                &uri,
                session.as_deref(),
                auth_header,
                custom_headers,
                |auth, headers| {
                    self.client.post_message(
                        uri.clone(),
                        message.clone(),
                        session_id.clone(),
                        auth,
                        headers,
                    )
                },
            )
            .await;
        self.challenge.keep(&response);
        place(id, in_session, response)
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> PostResult {
        let id = request_id(&message);
        let in_session = session_id.is_some();
        let custom_headers = with_trace_headers(&message, custom_headers);
        let session = session_id.as_deref().map(str::to_owned);
        let response = self
            .send(
                "POST",
                &uri,
                session.as_deref(),
                auth_header,
                custom_headers,
                |auth, headers| {
                    self.client.post_message_with_max_sse_event_size(
                        uri.clone(),
                        message.clone(),
                        session_id.clone(),
                        auth,
                        headers,
                        max_sse_event_size,
                    )
                },
            )
            .await;
        self.challenge.keep(&response);
        place(id, in_session, response)
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> PostResult {
        let id = request_id(&message);
        let in_session = session_id.is_some();
        let custom_headers = with_trace_headers(&message, custom_headers);
        let session = session_id.as_deref().map(str::to_owned);
        let response = self
            .send(
                "POST",
                &uri,
                session.as_deref(),
                auth_header,
                custom_headers,
                |auth, headers| {
                    self.client.post_message_with_response_limits(
                        uri.clone(),
                        message.clone(),
                        session_id.clone(),
                        auth,
                        headers,
                        limits,
                    )
                },
            )
            .await;
        self.challenge.keep(&response);
        place(id, in_session, response)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<reqwest::Error>> {
        let session = session_id.to_string();
        self.send(
            "DELETE",
            &uri,
            Some(&session),
            auth_header,
            custom_headers,
            |auth, headers| {
                self.client
                    .delete_session(uri.clone(), session_id.clone(), auth, headers)
            },
        )
        .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> StreamResult {
        let session = session_id.as_deref().map(str::to_owned);
        self.send(
            "GET",
            &uri,
            session.as_deref(),
            auth_header,
            custom_headers,
            |auth, headers| {
                self.client.get_stream(
                    uri.clone(),
                    session_id.clone(),
                    last_event_id.clone(),
                    auth,
                    headers,
                )
            },
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> StreamResult {
        let session = session_id.as_deref().map(str::to_owned);
        self.send(
            "GET",
            &uri,
            session.as_deref(),
            auth_header,
            custom_headers,
            |auth, headers| {
                self.client.get_stream_with_max_sse_event_size(
                    uri.clone(),
                    session_id.clone(),
                    last_event_id.clone(),
                    auth,
                    headers,
                    max_sse_event_size,
                )
            },
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{ErrorCode, ErrorData, JsonRpcError};

    use super::*;

    fn idless() -> PostResult {
        Ok(StreamableHttpPostResponse::Json(
            ServerJsonRpcMessage::Error(JsonRpcError::new(
                None,
                ErrorData::new(ErrorCode(-32000), "Bad Request: No valid session ID", None),
            )),
            None,
        ))
    }

    #[test]
    fn an_idless_error_in_a_session_means_the_session_is_gone() {
        let placed = place(Some(RequestId::Number(7)), true, idless());
        assert!(matches!(placed, Err(StreamableHttpError::SessionExpired)));
    }

    #[test]
    fn an_idless_error_outside_a_session_gets_the_requests_id() {
        let placed = place(Some(RequestId::Number(7)), false, idless());
        let Ok(StreamableHttpPostResponse::Json(ServerJsonRpcMessage::Error(error), _)) = placed
        else {
            panic!("not an error: {placed:?}");
        };
        assert_eq!(error.id, Some(RequestId::Number(7)));
        // An answer to a notification stays as it is.
        let placed = place(None, true, idless());
        let Ok(StreamableHttpPostResponse::Json(ServerJsonRpcMessage::Error(error), _)) = placed
        else {
            panic!("not an error: {placed:?}");
        };
        assert_eq!(error.id, None);
    }
}
