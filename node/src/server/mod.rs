//! The node's HTTP surface: the front agent at `/`, each role under `/agents/{role}/`,
//! the list of role cards at `/agents`, and health, readiness and status endpoints.

pub(crate) mod agent;

use std::sync::Arc;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use mew_cards::AgentCard;
use mew_transport::{AgentTransport, ServerOptions, router_with};
use serde_json::{Value, json};

/// One published role: its name, its agent, and its card.
pub(crate) struct PublishedRole {
    pub(crate) name: String,
    pub(crate) agent: Arc<dyn AgentTransport>,
    pub(crate) card: AgentCard,
}

/// Builds the node's router.
///
/// `status` is what `GET /status` reports (roles loaded, problems found);
/// it is computed once, at start.
pub(crate) fn app(
    front: Arc<dyn AgentTransport>,
    roles: &[PublishedRole],
    status: Value,
    options: &ServerOptions,
) -> Router {
    let cards: Vec<&AgentCard> = roles.iter().map(|r| &r.card).collect();
    let agents = json_body(&json!({ "agents": cards }));
    let status = json_body(&status);
    let mut app = Router::new()
        .route("/agents", get(move || async move { agents.clone() }))
        .route(
            "/healthz",
            get(|| async { json_body(&json!({ "status": "ok" })) }),
        )
        .route(
            "/readyz",
            get(|| async { json_body(&json!({ "status": "ready" })) }),
        )
        .route("/status", get(move || async move { status.clone() }));
    for role in roles {
        app = app.nest(
            &format!("/agents/{}", role.name),
            router_with(role.agent.clone(), options.clone()),
        );
    }
    app.merge(router_with(front, options.clone()))
}

/// A JSON response body, serialized once.
#[derive(Clone)]
struct JsonBody(Arc<[u8]>);

fn json_body(value: &impl serde::Serialize) -> JsonBody {
    JsonBody(
        serde_json::to_vec(value)
            .unwrap_or_else(|_| b"{}".to_vec())
            .into(),
    )
}

impl IntoResponse for JsonBody {
    fn into_response(self) -> axum::response::Response {
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            self.0.to_vec(),
        )
            .into_response()
    }
}
