//! The one place where A2A error kinds become JSON-RPC codes, HTTP statuses, gRPC status
//! codes and `ErrorInfo`, and back.

use http::StatusCode;
use mew_cards::{A2aError, ErrorKind};
use serde_json::{Value, json};

/// The `ErrorInfo` domain of A2A errors.
pub(crate) const ERROR_DOMAIN: &str = "a2a-protocol.org";
/// The type URL of `google.rpc.ErrorInfo` details.
pub(crate) const ERROR_INFO_TYPE: &str = "type.googleapis.com/google.rpc.ErrorInfo";

/// The A2A operations by their names, which JSON-RPC methods and gRPC paths share.
pub(crate) const METHODS: &[&str] = &[
    "SendMessage",
    "SendStreamingMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
    "GetExtendedAgentCard",
];

/// The protocol version header.
pub const VERSION_HEADER: &str = "A2A-Version";
/// The extensions header.
pub const EXTENSIONS_HEADER: &str = "A2A-Extensions";
/// The HTTP+JSON media type.
pub const A2A_JSON: &str = "application/a2a+json";

/// The JSON-RPC error code of a kind.
pub fn jsonrpc_code(kind: ErrorKind) -> i64 {
    match kind {
        ErrorKind::TaskNotFound => -32001,
        ErrorKind::TaskNotCancelable => -32002,
        ErrorKind::PushNotificationNotSupported => -32003,
        ErrorKind::UnsupportedOperation => -32004,
        ErrorKind::ContentTypeNotSupported => -32005,
        ErrorKind::InvalidAgentResponse => -32006,
        ErrorKind::ExtendedAgentCardNotConfigured => -32007,
        ErrorKind::ExtensionSupportRequired => -32008,
        ErrorKind::VersionNotSupported => -32009,
        ErrorKind::ParseError => -32700,
        ErrorKind::InvalidRequest => -32600,
        ErrorKind::MethodNotFound => -32601,
        ErrorKind::InvalidParams => -32602,
        ErrorKind::Internal => -32603,
    }
}

/// The kind of a JSON-RPC error code.
pub fn kind_from_jsonrpc_code(code: i64) -> Option<ErrorKind> {
    ErrorKind::ALL
        .iter()
        .copied()
        .find(|k| jsonrpc_code(*k) == code)
}

/// The HTTP status and `google.rpc.Code` name of a kind, for HTTP+JSON.
pub fn http_status(kind: ErrorKind) -> (StatusCode, &'static str) {
    match kind {
        ErrorKind::TaskNotFound | ErrorKind::MethodNotFound => (StatusCode::NOT_FOUND, "NOT_FOUND"),
        ErrorKind::TaskNotCancelable
        | ErrorKind::PushNotificationNotSupported
        | ErrorKind::UnsupportedOperation
        | ErrorKind::ExtendedAgentCardNotConfigured
        | ErrorKind::ExtensionSupportRequired
        | ErrorKind::VersionNotSupported => (StatusCode::BAD_REQUEST, "FAILED_PRECONDITION"),
        ErrorKind::ContentTypeNotSupported
        | ErrorKind::ParseError
        | ErrorKind::InvalidRequest
        | ErrorKind::InvalidParams => (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT"),
        ErrorKind::InvalidAgentResponse | ErrorKind::Internal => {
            (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL")
        }
    }
}

/// The gRPC status code of a kind (the spec's table; a method the service does not have is
/// gRPC's own `UNIMPLEMENTED`).
pub(crate) fn grpc_code(kind: ErrorKind) -> tonic::Code {
    use tonic::Code;
    match kind {
        ErrorKind::TaskNotFound => Code::NotFound,
        ErrorKind::MethodNotFound => Code::Unimplemented,
        ErrorKind::TaskNotCancelable
        | ErrorKind::PushNotificationNotSupported
        | ErrorKind::UnsupportedOperation
        | ErrorKind::ExtendedAgentCardNotConfigured
        | ErrorKind::ExtensionSupportRequired
        | ErrorKind::VersionNotSupported => Code::FailedPrecondition,
        ErrorKind::ContentTypeNotSupported
        | ErrorKind::ParseError
        | ErrorKind::InvalidRequest
        | ErrorKind::InvalidParams => Code::InvalidArgument,
        ErrorKind::InvalidAgentResponse | ErrorKind::Internal => Code::Internal,
    }
}

/// An A2A error as a gRPC status: the kind's code, the message, and an `ErrorInfo` detail
/// (`google.rpc.Status` in `grpc-status-details-bin`).
pub(crate) fn grpc_status(error: &A2aError) -> tonic::Status {
    use tonic_types::{ErrorDetails, StatusExt};
    let details = ErrorDetails::with_error_info(
        error.kind.reason(),
        ERROR_DOMAIN,
        std::collections::HashMap::new(),
    );
    tonic::Status::with_error_details(grpc_code(error.kind), error.message.clone(), details)
}

/// Reads a gRPC status: the A2A kind from its `ErrorInfo` of the A2A domain, or, without one,
/// from the code (a status gRPC itself answered, such as a message beyond the size limit).
/// `None` for `OK`.
pub(crate) fn parse_grpc_status(status: &tonic::Status) -> Option<A2aError> {
    use tonic::Code;
    use tonic_types::StatusExt;
    if status.code() == Code::Ok {
        return None;
    }
    let from_info = status
        .get_details_error_info()
        .filter(|info| info.domain == ERROR_DOMAIN)
        .and_then(|info| ErrorKind::from_reason(&info.reason));
    let kind = from_info.unwrap_or(match status.code() {
        Code::Unimplemented => ErrorKind::MethodNotFound,
        Code::NotFound => ErrorKind::TaskNotFound,
        Code::InvalidArgument | Code::OutOfRange | Code::ResourceExhausted => {
            ErrorKind::InvalidRequest
        }
        Code::FailedPrecondition => ErrorKind::UnsupportedOperation,
        _ => ErrorKind::Internal,
    });
    Some(A2aError::new(kind, status.message()))
}

/// The `ErrorInfo` detail of an error.
pub(crate) fn error_info(kind: ErrorKind) -> Value {
    json!({
        "@type": ERROR_INFO_TYPE,
        "reason": kind.reason(),
        "domain": ERROR_DOMAIN,
    })
}

/// The `error` member of a JSON-RPC response.
pub(crate) fn jsonrpc_error_object(error: &A2aError) -> Value {
    json!({
        "code": jsonrpc_code(error.kind),
        "message": error.message,
        "data": [error_info(error.kind)],
    })
}

/// The body of an HTTP+JSON error response.
pub(crate) fn rest_error_body(error: &A2aError) -> (StatusCode, Value) {
    let (status, code_name) = http_status(error.kind);
    let body = json!({
        "error": {
            "code": status.as_u16(),
            "status": code_name,
            "message": error.message,
            "details": [error_info(error.kind)],
        }
    });
    (status, body)
}

/// Finds the A2A reason in a list of `google.rpc` details.
fn reason_in(details: Option<&Value>) -> Option<ErrorKind> {
    details?.as_array()?.iter().find_map(|d| {
        let is_info = d.get("@type").and_then(Value::as_str) == Some(ERROR_INFO_TYPE);
        let reason = d.get("reason").and_then(Value::as_str)?;
        is_info.then(|| ErrorKind::from_reason(reason)).flatten()
    })
}

/// Reads the `error` member of a JSON-RPC response.
pub(crate) fn parse_jsonrpc_error(error: &Value) -> A2aError {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let kind = reason_in(error.get("data"))
        .or_else(|| {
            error
                .get("code")
                .and_then(Value::as_i64)
                .and_then(kind_from_jsonrpc_code)
        })
        .unwrap_or(ErrorKind::Internal);
    A2aError::new(kind, message)
}

/// Reads an HTTP+JSON error body, falling back on the HTTP status.
pub(crate) fn parse_rest_error(status: StatusCode, body: &[u8]) -> A2aError {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let error = parsed.as_ref().and_then(|v| v.get("error"));
    let message = error
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("HTTP {status}"));
    let kind = reason_in(error.and_then(|e| e.get("details"))).unwrap_or(match status {
        StatusCode::NOT_FOUND => ErrorKind::MethodNotFound,
        s if s.is_client_error() => ErrorKind::InvalidRequest,
        _ => ErrorKind::Internal,
    });
    A2aError::new(kind, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_through_every_binding() {
        for &kind in ErrorKind::ALL {
            let error = A2aError::new(kind, "boom");
            assert_eq!(parse_jsonrpc_error(&jsonrpc_error_object(&error)), error);
            let (status, body) = rest_error_body(&error);
            assert_eq!(parse_rest_error(status, body.to_string().as_bytes()), error);
            assert_eq!(kind_from_jsonrpc_code(jsonrpc_code(kind)), Some(kind));
            let status = grpc_status(&error);
            assert_eq!(status.code(), grpc_code(kind));
            assert_eq!(parse_grpc_status(&status), Some(error.clone()));
            // As it travels: the status in the response's headers (or trailers).
            let answer = status.into_http::<()>();
            let read =
                tonic::Status::from_header_map(answer.headers()).expect("a status is read back");
            assert_eq!(parse_grpc_status(&read), Some(error));
        }
    }
}
