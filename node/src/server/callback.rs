//! `POST /mew/v1/delegations`: where `mew send`, run by a command role's program, asks the
//! node to delegate for the program's task (see [`crate::agent::callback`]).
//!
//! The request carries the turn's token in `X-Mew-Task-Token` and a JSON body
//! `{"target": "peer/role" | "role" | "URL", "text": "..."}`; the answer is
//! `{"answer": "...", "failed": bool}` once the child ended, 401 for a token no running turn
//! holds, 403 when the chain would be too deep, 400 for a body that is not that.

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use crate::agent::callback::{CALLBACK_PATH, CommandDelegations, Refused, TOKEN_HEADER};

/// The largest body taken, in bytes: a message, not a file.
const MAX_BODY: usize = 1 << 20;

/// What a program asks for.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DelegationRequest {
    /// A local role, `peer/role`, or an agent's URL.
    target: String,
    /// The child's message.
    text: String,
}

/// The route, over `delegations`.
pub(crate) fn router(delegations: Arc<CommandDelegations>) -> Router {
    Router::new()
        .route(CALLBACK_PATH, post(delegate))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(delegations)
}

/// Delegates for the turn whose token the request carries, and answers with the child's answer.
async fn delegate(
    State(delegations): State<Arc<CommandDelegations>>,
    headers: HeaderMap,
    body: Result<Json<DelegationRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Some(token) = headers.get(TOKEN_HEADER).and_then(|v| v.to_str().ok()) else {
        return refusal(
            StatusCode::UNAUTHORIZED,
            format!("{TOKEN_HEADER} is missing: only a command role's program may delegate here"),
        );
    };
    let Json(request) = match body {
        Ok(body) => body,
        Err(rejection) => return refusal(StatusCode::BAD_REQUEST, rejection.body_text()),
    };
    match delegations.send(token, &request.target, request.text).await {
        Ok(output) => Json(json!({
            "answer": output.text_content(),
            "failed": output.is_error,
        }))
        .into_response(),
        Err(refused @ Refused::UnknownToken) => {
            refusal(StatusCode::UNAUTHORIZED, refused.to_string())
        }
        Err(refused @ Refused::TooDeep(_)) => refusal(StatusCode::FORBIDDEN, refused.to_string()),
    }
}

/// An error answer: `{"error": message}` with `status`.
fn refusal(status: StatusCode, message: String) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}
