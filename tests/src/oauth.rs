//! An MCP server behind OAuth 2.1, with its own authorization server, in one process: the
//! hermetic server of [`crate::mcp`] at `/mcp`, answering 401 with a `WWW-Authenticate`
//! challenge to any request without a token it issued; protected resource metadata (RFC
//! 9728), authorization server metadata (RFC 8414), dynamic client registration (RFC 7591),
//! an authorization endpoint that approves at once (the user's click) and redirects with the
//! code, `state` and `iss` (RFC 9207), and a token endpoint for the code (with its PKCE
//! verifier checked, S256 only), for refresh tokens, and for the client credentials grant of
//! one confidential client ([`MACHINE_CLIENT`], with HTTP Basic or the request body), and a
//! revocation endpoint (RFC 7009).
//!
//! It is as strict as the flow needs: a code is good once, for the client and redirect URI it
//! was issued to; a redirect URI must be one the client registered; a token or refresh token
//! it revoked is refused. Counters tell the tests what happened (sign-ins, refreshes).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::{Form, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::mcp::{Options, TestServer, http_router};

/// The confidential client of the client credentials grant: its id and secret.
pub const MACHINE_CLIENT: (&str, &str) = ("machine", "machine-secret");

/// What the authorization server knows.
#[derive(Default)]
struct Books {
    /// Registered clients and their redirect URIs.
    clients: HashMap<String, Vec<String>>,
    /// Codes not used yet.
    codes: HashMap<String, Code>,
    /// Access tokens the resource takes.
    access: HashSet<String>,
    /// Refresh tokens the token endpoint takes.
    refresh: HashSet<String>,
}

struct Code {
    client_id: String,
    redirect_uri: String,
    challenge: String,
    resource: Option<String>,
}

struct Shared {
    base: String,
    books: Mutex<Books>,
    next: AtomicU64,
    sign_ins: AtomicUsize,
    refreshes: AtomicUsize,
    client_grants: AtomicUsize,
    revocations: AtomicUsize,
}

impl Shared {
    fn books(&self) -> std::sync::MutexGuard<'_, Books> {
        self.books.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn fresh(&self, kind: &str) -> String {
        format!("{kind}-{}", self.next.fetch_add(1, Ordering::SeqCst))
    }

    fn resource(&self) -> String {
        format!("{}/mcp", self.base)
    }

    fn resource_metadata(&self) -> String {
        format!("{}/.well-known/oauth-protected-resource/mcp", self.base)
    }
}

/// The protected server, served until dropped.
pub struct ProtectedMcpServer {
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl Drop for ProtectedMcpServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl ProtectedMcpServer {
    /// Serves it on a free loopback port.
    pub async fn start() -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let shared = Arc::new(Shared {
            base,
            books: Mutex::default(),
            next: AtomicU64::new(1),
            sign_ins: AtomicUsize::new(0),
            refreshes: AtomicUsize::new(0),
            client_grants: AtomicUsize::new(0),
            revocations: AtomicUsize::new(0),
        });
        let stop = CancellationToken::new();
        let mcp = http_router(
            TestServer::new(Options::default()),
            Arc::new(LocalSessionManager::default()),
            stop.child_token(),
        )
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            require_token,
        ));
        let app = Router::new()
            .route(
                "/.well-known/oauth-protected-resource/mcp",
                get(resource_metadata),
            )
            .route(
                "/.well-known/oauth-authorization-server",
                get(server_metadata),
            )
            .route("/register", post(register))
            .route("/authorize", get(authorize))
            .route("/token", post(token))
            .route("/revoke", post(revoke))
            .with_state(shared.clone())
            .merge(mcp);
        let token = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(token.cancelled_owned())
                .await;
        });
        Ok(Self { shared, stop })
    }

    /// The MCP endpoint.
    pub fn url(&self) -> String {
        self.shared.resource()
    }

    /// How many codes were exchanged for tokens: completed sign-ins.
    pub fn sign_ins(&self) -> usize {
        self.shared.sign_ins.load(Ordering::SeqCst)
    }

    /// How many refresh tokens were exchanged.
    pub fn refreshes(&self) -> usize {
        self.shared.refreshes.load(Ordering::SeqCst)
    }

    /// How many revocations of a token it issued the revocation endpoint took.
    pub fn revocations(&self) -> usize {
        self.shared.revocations.load(Ordering::SeqCst)
    }

    /// Whether any refresh token it issued is still good.
    pub fn has_refresh_tokens(&self) -> bool {
        !self.shared.books().refresh.is_empty()
    }

    /// How many tokens the client credentials grant gave.
    pub fn client_grants(&self) -> usize {
        self.shared.client_grants.load(Ordering::SeqCst)
    }

    /// Revokes every access token issued so far (refresh tokens stay good), as an expiry
    /// would.
    pub fn revoke_access_tokens(&self) {
        self.shared.books().access.clear();
    }

    /// Revokes every token issued so far, refresh tokens too: only a new sign-in helps.
    pub fn revoke_everything(&self) {
        let mut books = self.shared.books();
        books.access.clear();
        books.refresh.clear();
    }
}

/// Lets through a request with a bearer token the server issued; answers 401 with the
/// challenge otherwise.
async fn require_token(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: Next,
) -> Response {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::to_owned);
    let known = token.is_some_and(|token| shared.books().access.contains(&token));
    if known {
        return next.run(request).await;
    }
    let challenge = format!(
        "Bearer error=\"invalid_token\", resource_metadata=\"{}\"",
        shared.resource_metadata()
    );
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, challenge)],
        "a token is needed",
    )
        .into_response()
}

async fn resource_metadata(State(shared): State<Arc<Shared>>) -> Json<Value> {
    Json(json!({
        "resource": shared.resource(),
        "authorization_servers": [shared.base],
        "bearer_methods_supported": ["header"],
    }))
}

async fn server_metadata(State(shared): State<Arc<Shared>>) -> Json<Value> {
    let base = &shared.base;
    Json(json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": format!("{base}/token"),
        "registration_endpoint": format!("{base}/register"),
        "revocation_endpoint": format!("{base}/revoke"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none", "client_secret_basic", "client_secret_post"],
        "authorization_response_iss_parameter_supported": true,
    }))
}

fn refused(status: StatusCode, error: &str, description: &str) -> Response {
    (
        status,
        Json(json!({"error": error, "error_description": description})),
    )
        .into_response()
}

async fn register(State(shared): State<Arc<Shared>>, Json(body): Json<Value>) -> Response {
    let uris: Vec<String> = body["redirect_uris"]
        .as_array()
        .map(|uris| {
            uris.iter()
                .filter_map(|uri| uri.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if uris.is_empty() {
        return refused(
            StatusCode::BAD_REQUEST,
            "invalid_redirect_uri",
            "no redirect_uris",
        );
    }
    let id = shared.fresh("client");
    shared.books().clients.insert(id.clone(), uris.clone());
    (
        StatusCode::CREATED,
        Json(json!({
            "client_id": id,
            "client_name": body["client_name"],
            "redirect_uris": uris,
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        })),
    )
        .into_response()
}

async fn authorize(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let field = |name: &str| query.get(name).cloned().unwrap_or_default();
    let (client_id, redirect_uri) = (field("client_id"), field("redirect_uri"));
    let registered = shared
        .books()
        .clients
        .get(&client_id)
        .is_some_and(|uris| uris.contains(&redirect_uri));
    if !registered {
        return refused(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "unknown client or redirect_uri",
        );
    }
    if field("response_type") != "code"
        || field("code_challenge_method") != "S256"
        || field("code_challenge").is_empty()
        || field("state").is_empty()
    {
        return refused(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "response_type=code, S256 PKCE and state are required",
        );
    }
    let code = shared.fresh("code");
    shared.books().codes.insert(
        code.clone(),
        Code {
            client_id,
            redirect_uri: redirect_uri.clone(),
            challenge: field("code_challenge"),
            resource: query.get("resource").cloned(),
        },
    );
    let Ok(mut target) = reqwest::Url::parse(&redirect_uri) else {
        return refused(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "bad redirect_uri",
        );
    };
    target
        .query_pairs_mut()
        .append_pair("code", &code)
        .append_pair("state", &field("state"))
        .append_pair("iss", &shared.base);
    Redirect::to(target.as_str()).into_response()
}

/// base64url(SHA-256(verifier)), the S256 challenge of RFC 7636.
fn s256(verifier: &str) -> String {
    let hash = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, verifier.as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hash.as_ref())
}

/// The client id and secret of a token request: HTTP Basic, else the body.
fn client_of(headers: &axum::http::HeaderMap, form: &HashMap<String, String>) -> (String, String) {
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Basic "))
        .and_then(|encoded| {
            base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()
        })
        .and_then(|decoded| String::from_utf8(decoded).ok());
    if let Some((id, secret)) = basic.as_deref().and_then(|pair| pair.split_once(':')) {
        return (id.to_owned(), secret.to_owned());
    }
    let field = |name: &str| form.get(name).cloned().unwrap_or_default();
    (field("client_id"), field("client_secret"))
}

async fn token(
    State(shared): State<Arc<Shared>>,
    headers: axum::http::HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let field = |name: &str| form.get(name).cloned().unwrap_or_default();
    match field("grant_type").as_str() {
        "client_credentials" => {
            let (id, secret) = client_of(&headers, &form);
            if (id.as_str(), secret.as_str()) != MACHINE_CLIENT {
                return refused(StatusCode::UNAUTHORIZED, "invalid_client", "unknown client");
            }
            if form
                .get("resource")
                .is_some_and(|r| *r != shared.resource())
            {
                return refused(
                    StatusCode::BAD_REQUEST,
                    "invalid_target",
                    "unknown resource",
                );
            }
            shared.client_grants.fetch_add(1, Ordering::SeqCst);
            let access = shared.fresh("access");
            shared.books().access.insert(access.clone());
            Json(json!({"access_token": access, "token_type": "Bearer", "expires_in": 3600}))
                .into_response()
        }
        "authorization_code" => {
            let Some(code) = shared.books().codes.remove(&field("code")) else {
                return refused(
                    StatusCode::BAD_REQUEST,
                    "invalid_grant",
                    "unknown or used code",
                );
            };
            if code.client_id != field("client_id")
                || code.redirect_uri != field("redirect_uri")
                || s256(&field("code_verifier")) != code.challenge
                || code.resource.is_some_and(|r| r != shared.resource())
            {
                return refused(
                    StatusCode::BAD_REQUEST,
                    "invalid_grant",
                    "client, redirect_uri, PKCE verifier or resource does not match",
                );
            }
            shared.sign_ins.fetch_add(1, Ordering::SeqCst);
            issue(&shared)
        }
        "refresh_token" => {
            if !shared.books().refresh.remove(&field("refresh_token")) {
                return refused(
                    StatusCode::BAD_REQUEST,
                    "invalid_grant",
                    "unknown refresh token",
                );
            }
            shared.refreshes.fetch_add(1, Ordering::SeqCst);
            issue(&shared)
        }
        other => refused(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            &format!("{other:?}"),
        ),
    }
}

/// RFC 7009: the token named is revoked (a refresh token with the access tokens of its
/// grant, which this server does not track apart: all of them); 200 for an unknown one too.
async fn revoke(
    State(shared): State<Arc<Shared>>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let token = form.get("token").cloned().unwrap_or_default();
    let mut books = shared.books();
    if books.refresh.remove(&token) {
        books.access.clear();
        shared.revocations.fetch_add(1, Ordering::SeqCst);
    } else if books.access.remove(&token) {
        shared.revocations.fetch_add(1, Ordering::SeqCst);
    }
    StatusCode::OK.into_response()
}

/// New access and refresh tokens (the refresh token rotates).
fn issue(shared: &Shared) -> Response {
    let (access, refresh) = (shared.fresh("access"), shared.fresh("refresh"));
    {
        let mut books = shared.books();
        books.access.insert(access.clone());
        books.refresh.insert(refresh.clone());
    }
    Json(json!({
        "access_token": access,
        "token_type": "Bearer",
        "expires_in": 3600,
        "refresh_token": refresh,
    }))
    .into_response()
}
