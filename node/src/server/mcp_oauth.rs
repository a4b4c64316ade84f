//! `GET /mew/v1/mcp/oauth/callback`: where an authorization server sends the browser back
//! after a user signed in to an MCP server a task asked for (see
//! [`crate::mcp::oauth::SignIns`]).
//!
//! The route takes no credentials of the node: the browser that comes back carries none. What
//! protects it is the flow's own: the `state` must be one the node handed out for a sign-in
//! that still waits (once, within its time), and the code is exchanged with the PKCE verifier
//! only the node holds. The answer is a short plain-text page for the user.

use std::sync::Arc;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::mcp::oauth::{NODE_CALLBACK_PATH, SignIns};

/// The longest query taken, in bytes: a code, a state and an issuer.
const MAX_QUERY: usize = 8 * 1024;

/// The route, over `sign_ins`.
pub(crate) fn router(sign_ins: Arc<SignIns>) -> Router {
    Router::new()
        .route(NODE_CALLBACK_PATH, get(callback))
        .with_state(sign_ins)
}

async fn callback(State(sign_ins): State<Arc<SignIns>>, RawQuery(query): RawQuery) -> Response {
    let query = query.unwrap_or_default();
    if query.len() > MAX_QUERY {
        return (
            StatusCode::URI_TOO_LONG,
            "The callback's query is too long.\n",
        )
            .into_response();
    }
    // An authorization server that refused says so in `error` (RFC 6749 4.1.2.1).
    let refused = reqwest::Url::parse(&format!("http://callback/?{query}"))
        .ok()
        .and_then(|url| {
            let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
            let error = pairs.iter().find(|(k, _)| k == "error")?.1.clone();
            let description = pairs
                .iter()
                .find(|(k, _)| k == "error_description")
                .map(|(_, v)| format!(": {v}"))
                .unwrap_or_default();
            Some(format!("{error}{description}"))
        });
    if let Some(refused) = refused {
        return (
            StatusCode::BAD_REQUEST,
            format!(
                "The sign-in was refused ({}). Ask the task to sign in again.\n",
                crate::tools::cut_chars(&refused, 500)
            ),
        )
            .into_response();
    }
    match sign_ins.complete(&query).await {
        Ok(server) => (
            StatusCode::OK,
            format!("Signed in to the MCP server {server}. You can close this window.\n"),
        )
            .into_response(),
        Err(why) => (
            StatusCode::BAD_REQUEST,
            format!("The sign-in did not complete: {why}\n"),
        )
            .into_response(),
    }
}
