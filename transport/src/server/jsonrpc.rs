//! The JSON-RPC 2.0 binding: one `POST` endpoint, blocking methods as JSON, streaming methods as SSE.

use axum::body::Body;
use axum::extract::{Extension, RawQuery, State};
use axum::http::{HeaderMap, Response, StatusCode};
use mew_cards::{A2aError, ErrorKind, StreamResponse};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use super::{
    Served, Shared, call_context, check_version, content_type_is, json_response, read_body,
    sse_response,
};
use crate::Binding;
use crate::agent::Principal;
use crate::wire::{A2A_JSON, jsonrpc_error_object};

/// The envelope fields, with `params` kept raw so it is parsed once, into its own type.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<&'a str>,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(default)]
    method: Option<String>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

/// A request id as it came: a string, a number or null, echoed back verbatim.
type Id = Box<RawValue>;

fn null_id() -> Id {
    RawValue::from_string("null".to_owned()).unwrap_or_else(|_| unreachable_null())
}

#[allow(clippy::unwrap_used)] // "null" is valid JSON: this cannot fail
fn unreachable_null() -> Id {
    RawValue::from_string("null".to_owned()).unwrap()
}

/// Renders a JSON-RPC success or error response.
fn render<T: serde::Serialize>(id: &RawValue, outcome: Result<&T, &A2aError>) -> String {
    #[derive(serde::Serialize)]
    struct Success<'a, T> {
        jsonrpc: &'static str,
        id: &'a RawValue,
        result: T,
    }
    #[derive(serde::Serialize)]
    struct Failure<'a> {
        jsonrpc: &'static str,
        id: &'a RawValue,
        error: serde_json::Value,
    }
    let rendered = match outcome {
        Ok(result) => serde_json::to_string(&Success {
            jsonrpc: "2.0",
            id,
            result,
        }),
        Err(error) => serde_json::to_string(&Failure {
            jsonrpc: "2.0",
            id,
            error: jsonrpc_error_object(error),
        }),
    };
    rendered.unwrap_or_else(|e| {
        let error = A2aError::internal(format!("cannot serialize the response: {e}"));
        format!(
            r#"{{"jsonrpc":"2.0","id":{},"error":{}}}"#,
            id.get(),
            jsonrpc_error_object(&error)
        )
    })
}

fn respond(status: StatusCode, body: String) -> Response<Body> {
    json_response(status, "application/json", body.into_bytes())
}

fn error_response(status: StatusCode, id: &RawValue, error: &A2aError) -> Response<Body> {
    served(Err(error.kind)).attach(respond(status, render::<()>(id, Err(error))))
}

/// The answer of a unary method: its result or its error.
fn answer<T: serde::Serialize>(id: &RawValue, outcome: Result<&T, &A2aError>) -> Response<Body> {
    let kind = outcome.map(|_| ()).map_err(|e| e.kind);
    served(kind).attach(respond(StatusCode::OK, render(id, outcome)))
}

/// What a response of this binding served; the method is named once it is known.
fn served(outcome: Result<(), ErrorKind>) -> Served {
    Served {
        binding: Binding::JsonRpc,
        method: None,
        outcome,
    }
}

fn params<T: DeserializeOwned + Default>(raw: Option<&RawValue>) -> Result<T, A2aError> {
    match raw {
        None => Ok(T::default()),
        Some(raw) => serde_json::from_str(raw.get())
            .map_err(|e| A2aError::invalid_params(format!("invalid params: {e}"))),
    }
}

/// `POST /`: one JSON-RPC request.
pub(crate) async fn handle(
    State(shared): State<Shared>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    principal: Option<Extension<Principal>>,
    body: Body,
) -> Response<Body> {
    let null = null_id();
    if !content_type_is(&headers, &["application/json", A2A_JSON]) {
        let error = A2aError::new(
            ErrorKind::InvalidRequest,
            "JSON-RPC requests must have Content-Type: application/json",
        );
        return error_response(StatusCode::UNSUPPORTED_MEDIA_TYPE, &null, &error);
    }
    let body = match read_body(&shared, &headers, body).await {
        Ok(body) => body,
        Err(error) => {
            let (status, error) = error.into_a2a();
            return error_response(status, &null, &error);
        }
    };
    let text = match std::str::from_utf8(&body.bytes) {
        Ok(text) => text,
        Err(_) => {
            let error = A2aError::new(ErrorKind::ParseError, "the request body is not UTF-8");
            return error_response(StatusCode::OK, &null, &error);
        }
    };
    // A batch is an array of requests; serde would also read an array as the envelope's fields
    // in order, so it is turned away before.
    if text.trim_start().starts_with('[') {
        let error = A2aError::new(
            ErrorKind::InvalidRequest,
            "JSON-RPC batches (an array of requests) are not supported: send each request alone",
        );
        return error_response(StatusCode::OK, &null, &error);
    }
    let envelope: Envelope<'_> = match serde_json::from_str(text) {
        Ok(envelope) => envelope,
        Err(e) if e.is_syntax() || e.is_eof() => {
            let error = A2aError::new(ErrorKind::ParseError, format!("invalid JSON: {e}"));
            return error_response(StatusCode::OK, &null, &error);
        }
        Err(e) => {
            let error = A2aError::new(
                ErrorKind::InvalidRequest,
                format!("not a JSON-RPC 2.0 request: {e}"),
            );
            return error_response(StatusCode::OK, &null, &error);
        }
    };
    // Owned: the answer names the id after the body is gone.
    let owned_id: Box<RawValue> = match envelope.id {
        Some(id)
            if matches!(
                id.get().as_bytes().first(),
                Some(b'"' | b'-' | b'0'..=b'9' | b'n')
            ) =>
        {
            id.to_owned()
        }
        _ => {
            let error = A2aError::new(
                ErrorKind::InvalidRequest,
                "a request needs an id (string or number)",
            );
            return error_response(StatusCode::OK, &null, &error);
        }
    };
    let id: &RawValue = &owned_id;
    let method = match (envelope.jsonrpc, envelope.method.as_deref()) {
        (Some("2.0"), Some(method)) => method,
        (Some("2.0"), None) => {
            let error = A2aError::new(ErrorKind::InvalidRequest, "the request has no method");
            return error_response(StatusCode::OK, id, &error);
        }
        _ => {
            let error = A2aError::new(ErrorKind::InvalidRequest, "jsonrpc must be \"2.0\"");
            return error_response(StatusCode::OK, id, &error);
        }
    };
    let Some(name) = known(method) else {
        let error = A2aError::new(ErrorKind::MethodNotFound, format!("no method {method:?}"));
        return error_response(StatusCode::OK, id, &error);
    };
    if let Err(error) = check_version(&headers, query.as_deref()) {
        return Served::name(name, error_response(StatusCode::OK, id, &error));
    }
    let ctx = call_context(&headers, principal.map(|Extension(p)| p));
    let agent = &shared.agent;
    let raw = envelope.params;
    // The request is parsed, then the body (and its room in the router's budget) goes:
    // a blocking send may wait long for its task.
    macro_rules! call {
        ($method:ident) => {
            match params(raw) {
                Ok(request) => {
                    drop(body);
                    agent
                        .$method(&ctx, request)
                        .await
                        .map_err(crate::Error::into_a2a)
                }
                Err(error) => Err(error),
            }
        };
    }
    macro_rules! unary {
        ($method:ident) => {{
            let outcome = call!($method);
            answer(id, outcome.as_ref())
        }};
    }
    let response = match method {
        "SendMessage" => unary!(send_message),
        "GetTask" => unary!(get_task),
        "ListTasks" => unary!(list_tasks),
        "CancelTask" => unary!(cancel_task),
        "CreateTaskPushNotificationConfig" => unary!(create_task_push_notification_config),
        "GetTaskPushNotificationConfig" => unary!(get_task_push_notification_config),
        "ListTaskPushNotificationConfigs" => unary!(list_task_push_notification_configs),
        "DeleteTaskPushNotificationConfig" => {
            let outcome = call!(delete_task_push_notification_config);
            answer(id, outcome.as_ref().map(|()| &serde_json::Value::Null))
        }
        "GetExtendedAgentCard" => unary!(get_extended_agent_card),
        "SendStreamingMessage" => stream(
            &shared,
            id,
            StreamResponse::ends_stream,
            call!(send_streaming_message),
        ),
        "SubscribeToTask" => stream(
            &shared,
            id,
            StreamResponse::ends_subscription,
            call!(subscribe_to_task),
        ),
        _ => {
            let error = A2aError::new(ErrorKind::MethodNotFound, format!("no method {method:?}"));
            error_response(StatusCode::OK, id, &error)
        }
    };
    Served::name(name, response)
}

/// The method's name as the binding knows it, if it does.
fn known(method: &str) -> Option<&'static str> {
    crate::wire::METHODS
        .iter()
        .copied()
        .find(|known| *known == method)
}

/// A streaming method's answer: an SSE stream of JSON-RPC responses with the request's id,
/// or a plain error response when the stream could not start.
fn stream(
    shared: &Shared,
    id: &RawValue,
    ends: fn(&StreamResponse) -> bool,
    outcome: Result<crate::EventStream, A2aError>,
) -> Response<Body> {
    match outcome {
        Err(error) => error_response(StatusCode::OK, id, &error),
        Ok(events) => {
            let id: Id = id.to_owned();
            let response = sse_response(
                events,
                shared.options.keep_alive,
                ends,
                move |item: Result<StreamResponse, A2aError>| render(&id, item.as_ref()),
            );
            served(Ok(())).attach(response)
        }
    }
}
