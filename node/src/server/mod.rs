//! The node's HTTP surface: the front agent at `/`, each role under `/agents/{role}/`,
//! the list of role cards at `/agents`, and health, readiness and status endpoints.

pub(crate) mod agent;
pub(crate) mod auth;
pub(crate) mod callback;
pub(crate) mod listen;
pub(crate) mod mcp_oauth;
pub(crate) mod metrics;
pub(crate) mod observe;
pub(crate) mod session;
pub(crate) mod tls;
pub(crate) mod ui;

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

/// Whether the node should get traffic: `Err` with the reason when not (it is stopping, or its
/// task store does not answer). `/readyz` answers 503 then; `/healthz` (liveness) does not ask.
pub(crate) type Readiness =
    Arc<dyn Fn() -> futures_util::future::BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// What `/status` says: the node's fixed facts, and what changes while it runs (the replicas
/// of a shared task store).
pub(crate) type StatusSource =
    Arc<dyn Fn() -> futures_util::future::BoxFuture<'static, Value> + Send + Sync>;

/// What wraps every request the router serves: authentication (when on) outside, then the
/// span that observes the request (it knows whether the caller authenticated).
pub(crate) struct Guards {
    pub(crate) auth: Option<Arc<auth::Authenticator>>,
    pub(crate) observe: observe::Observe,
}

/// The node's own routes beside the agents': what `/status` and `/readyz` report, and the
/// dashboard (`/ui`).
pub(crate) struct NodeRoutes {
    pub(crate) status: StatusSource,
    pub(crate) ready: Readiness,
    pub(crate) dashboard: Router,
}

/// Builds the node's router.
///
/// `node.status` is what `GET /status` reports (roles loaded, problems found). With
/// `guards.auth`, every request but the public cards, the probes and the dashboard's page
/// must authenticate. `jwks` is the node's key set, served at [`crate::identity::JWKS_PATH`]
/// for verifiers of its signed cards.
pub(crate) fn app(
    front: Arc<dyn AgentTransport>,
    roles: &[PublishedRole],
    jwks: &jsonwebtoken::jwk::JwkSet,
    options: &ServerOptions,
    guards: Guards,
    node: NodeRoutes,
) -> Router {
    let NodeRoutes {
        status,
        ready,
        dashboard,
    } = node;
    let cards: Vec<&AgentCard> = roles.iter().map(|r| &r.card).collect();
    let agents = json_body(&json!({ "agents": cards }));
    let mut app = Router::new()
        .route("/agents", get(move || async move { agents.clone() }))
        .route(
            "/healthz",
            get(|| async { json_body(&json!({ "status": "ok" })) }),
        )
        .route(
            "/readyz",
            get(move || {
                let ready = ready.clone();
                async move {
                    match ready().await {
                        Ok(()) => json_body(&json!({ "status": "ready" })).into_response(),
                        Err(reason) => {
                            let mut response =
                                json_body(&json!({ "status": "unready", "reason": reason }))
                                    .into_response();
                            *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                            response
                        }
                    }
                }
            }),
        )
        .route(
            "/status",
            get(move || {
                let status = status.clone();
                async move { json_body(&status().await) }
            }),
        )
        .route(crate::identity::JWKS_PATH, get(jwks_handler(jwks)));
    for role in roles {
        app = app.nest(
            &format!("/agents/{}", role.name),
            router_with(role.agent.clone(), options.clone()),
        );
    }
    let tenants = RoleTenants {
        front: front.clone(),
        roles: roles
            .iter()
            .map(|role| (role.name.clone(), role.agent.clone()))
            .collect(),
        auth: guards.auth.clone(),
    };
    // Every answer of the node is an A2A error when it is not a success, 405s included.
    let app = app
        .merge(mew_transport::grpc_router_with(Arc::new(tenants), options))
        .merge(dashboard)
        .merge(router_with(front, options.clone()))
        .method_not_allowed_fallback(mew_transport::method_not_allowed)
        .layer(axum::middleware::from_fn(metrics::measure))
        .layer(axum::middleware::from_fn_with_state(
            guards.observe,
            observe::observe,
        ));
    let app = match guards.auth {
        Some(auth) => app.layer(axum::middleware::from_fn_with_state(auth, auth::require)),
        None => app,
    };
    // Before authentication: a browser at the root is sent to the dashboard, which signs in.
    app.layer(axum::middleware::from_fn(ui::browser_root))
}

/// The agents of the node's gRPC endpoint: the front agent for the empty tenant, each role
/// under its name (the `tenant` of its card's `GRPC` interface), with the access rules of
/// `auth.roles` that the HTTP bindings apply by path.
struct RoleTenants {
    front: Arc<dyn AgentTransport>,
    roles: std::collections::HashMap<String, Arc<dyn AgentTransport>>,
    auth: Option<Arc<auth::Authenticator>>,
}

impl mew_transport::Tenants for RoleTenants {
    fn agent(
        &self,
        tenant: &str,
        principal: Option<&mew_transport::Principal>,
    ) -> Result<Arc<dyn AgentTransport>, mew_transport::TenantRefusal> {
        let agent = if tenant.is_empty() {
            self.front.clone()
        } else {
            self.roles
                .get(tenant)
                .cloned()
                .ok_or(mew_transport::TenantRefusal::Unknown)?
        };
        if !tenant.is_empty() {
            observe::record_role(tenant);
        }
        if let (Some(auth), Some(principal)) = (&self.auth, principal) {
            auth.check_tenant(tenant, &principal.0)
                .map_err(mew_transport::TenantRefusal::Forbidden)?;
        }
        Ok(agent)
    }
}

/// Serves `/agents/R/` as `/agents/R` (and any path with one trailing slash
/// as the path without it), before routing: nested routers only match the
/// bare prefix, and clients write both.
pub(crate) fn strip_trailing_slash(mut request: axum::extract::Request) -> axum::extract::Request {
    let path = request.uri().path();
    if path.len() > 1 && path.ends_with('/') {
        let trimmed = path.trim_end_matches('/');
        let trimmed = if trimmed.is_empty() { "/" } else { trimmed };
        let rebuilt = match request.uri().query() {
            Some(query) => format!("{trimmed}?{query}"),
            None => trimmed.to_owned(),
        };
        if let Ok(uri) = rebuilt.parse() {
            *request.uri_mut() = uri;
        }
    }
    request
}

/// Serves the node's JWKS: public, cacheable for five minutes.
fn jwks_handler(
    jwks: &jsonwebtoken::jwk::JwkSet,
) -> impl Fn() -> std::future::Ready<axum::response::Response> + Clone + Send + 'static {
    let body = json_body(jwks);
    move || {
        let mut response = body.clone().into_response();
        response.headers_mut().insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("max-age=300"),
        );
        std::future::ready(response)
    }
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
