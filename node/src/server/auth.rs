//! Inbound authentication and access: API keys and JWT bearer tokens (HS256 with a shared
//! secret, or public keys from a JWKS file or URL), checked in front of every A2A operation,
//! then the role access rules of `auth.roles` (403). The public cards, `/agents`, `/healthz`
//! and `/readyz` stay public. A caller that passes gets its principal attached to the request
//! as [`Principal`], which the transport router carries into `CallContext::principal`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use mew_cards::{
    ApiKeySecurityScheme, HttpAuthSecurityScheme, SecurityRequirement, SecurityScheme, StringList,
};
use mew_transport::{GrpcRefusal, Principal};
use serde::Deserialize;
use serde_json::json;
use tracing::warn;

use crate::config::{AuthConfig, JwtConfig};

/// The header an API key may come in (it may also come as a bearer token).
pub(crate) const API_KEY_HEADER: &str = "X-API-Key";
/// The card's name of the API key scheme.
const API_KEY_SCHEME: &str = "apiKey";
/// The card's name of the JWT bearer scheme.
const BEARER_SCHEME: &str = "bearer";
/// How often the keys of `auth.jwt.jwks_url` are fetched again.
const JWKS_REFRESH: Duration = Duration::from_secs(600);
/// The least time between two fetches caused by tokens naming an unknown key.
const JWKS_MIN_INTERVAL: Duration = Duration::from_secs(30);
/// How long one fetch of the JWKS may take.
const JWKS_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest JWKS document read.
const JWKS_MAX_BYTES: usize = 1 << 20;

/// In `auth.roles`, the entry that admits any authenticated caller.
const ANY_PRINCIPAL: &str = "*";

/// Whether `principal` may use `role` under the access rules `roles` (`auth.roles`): a role
/// not listed admits everyone.
fn admits(roles: &BTreeMap<String, Vec<String>>, role: &str, principal: &str) -> bool {
    roles
        .get(role)
        .is_none_or(|allowed| allowed.iter().any(|p| p == ANY_PRINCIPAL || p == principal))
}

/// The configured schemes (with their secrets read from the environment) and access rules.
pub(crate) struct Authenticator {
    /// Each key's value and the principal it authenticates.
    keys: Vec<(String, String)>,
    /// How JWTs are verified.
    jwt: Option<Jwt>,
    /// The access rules (`auth.roles`).
    rules: AuthConfig,
    /// The role the front agent (`/`) runs.
    default_role: String,
    /// The roles served under `/agents/{role}`; any other path under `/agents/` reaches the
    /// front agent (as a tenant). Replaced when role files change.
    served_roles: std::sync::RwLock<Vec<String>>,
    /// The dashboard's sessions: browsers that signed in with one of the credentials above.
    sessions: super::session::Sessions,
}

/// JWT verification: the keys and one validation per accepted algorithm (jsonwebtoken wants
/// every algorithm of a validation to be of the key's family, so each gets its own).
struct Jwt {
    keys: JwtKeys,
    validations: Vec<(Algorithm, Validation)>,
}

enum JwtKeys {
    /// The HS256 shared secret.
    Secret(DecodingKey),
    /// Public keys from a JWKS.
    Set(KeySet),
}

/// The public keys of a JWKS; those of a URL are swapped whole on each successful fetch.
struct KeySet {
    keys: RwLock<Arc<[PublicKey]>>,
    /// Where the set is fetched from, for `jwks_url`.
    remote: Option<Remote>,
}

struct Remote {
    url: String,
    client: reqwest::Client,
    /// When the last fetch started; held while fetching, so one fetch runs at a time.
    last_fetch: tokio::sync::Mutex<Option<Instant>>,
}

/// One verification key of a JWKS.
struct PublicKey {
    kid: Option<String>,
    /// The key's own `alg`, when it names one: tokens must use it.
    alg: Option<Algorithm>,
    key: DecodingKey,
}

/// The claims Mew reads from a JWT; `iss`, `aud` and `exp` are checked by the validation.
#[derive(Deserialize)]
struct Claims {
    sub: String,
}

/// Why a request is refused.
enum Refusal {
    /// 401: no valid credentials.
    Unauthenticated(&'static str),
    /// 403: the principal may not use the role.
    Forbidden(String),
}

impl Authenticator {
    /// The authenticator for `config`, or `None` when no scheme is configured; `default_role`
    /// is the role the front agent runs, `served_roles` those under `/agents/`. Reads the secrets from `env` and a `jwks_file`; fails
    /// when a variable named in the configuration is unset or empty, or the file is not a
    /// usable JWKS. The keys of a `jwks_url` are fetched by [`Authenticator::start`].
    pub(crate) fn from_config(
        config: &AuthConfig,
        default_role: &str,
        served_roles: &[String],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Option<Self>> {
        if !config.is_enabled() {
            return Ok(None);
        }
        let secret = |name: &str, what: &str| -> anyhow::Result<String> {
            match env(name) {
                Some(value) if !value.is_empty() => Ok(value),
                _ => bail!("{what}: the environment variable {name} is not set or empty"),
            }
        };
        let mut keys = Vec::new();
        for key in &config.api_keys {
            let value = secret(
                &key.key_env,
                &format!("auth.api_keys: the key of `{}`", key.name),
            )?;
            keys.push((value, key.name.clone()));
        }
        let jwt = match &config.jwt {
            None => None,
            Some(jwt) => Some(Jwt::from_config(jwt, &secret)?),
        };
        Ok(Some(Self {
            keys,
            jwt,
            rules: AuthConfig {
                roles: config.roles.clone(),
                ..AuthConfig::default()
            },
            default_role: default_role.to_owned(),
            served_roles: std::sync::RwLock::new(served_roles.to_vec()),
            sessions: super::session::Sessions::new(
                env(super::session::SECRET_ENV)
                    .filter(|s| !s.is_empty())
                    .as_deref(),
            )?,
        }))
    }

    /// Fetches the keys of `auth.jwt.jwks_url`, if configured (a failure is logged: tokens
    /// fail until a later fetch succeeds), then keeps refetching them every ten minutes in
    /// the background for as long as the authenticator lives.
    pub(crate) async fn start(self: &Arc<Self>) {
        if self.remote().is_none() {
            return;
        }
        self.refresh(true).await;
        let weak: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(JWKS_REFRESH).await;
                let Some(this) = weak.upgrade() else { return };
                this.refresh(true).await;
            }
        });
    }

    fn key_set(&self) -> Option<&KeySet> {
        match &self.jwt {
            Some(Jwt {
                keys: JwtKeys::Set(set),
                ..
            }) => Some(set),
            _ => None,
        }
    }

    fn remote(&self) -> Option<&Remote> {
        self.key_set().and_then(|set| set.remote.as_ref())
    }

    /// Fetches the remote key set (unless `forced`, at most once per [`JWKS_MIN_INTERVAL`]);
    /// a failure keeps the keys there are and is logged.
    async fn refresh(&self, forced: bool) {
        let Some(set) = self.key_set() else { return };
        let Some(remote) = &set.remote else { return };
        let mut last = remote.last_fetch.lock().await;
        if !forced && last.is_some_and(|at| at.elapsed() < JWKS_MIN_INTERVAL) {
            return;
        }
        *last = Some(Instant::now());
        match remote.fetch().await {
            Ok(keys) => {
                if let Ok(mut slot) = set.keys.write() {
                    *slot = keys.into();
                }
            }
            Err(error) => warn!(
                url = %remote.url,
                "auth.jwt.jwks_url: cannot fetch the keys, keeping the previous ones: {error:#}"
            ),
        }
    }

    /// The schemes and requirements the node's cards advertise: any one scheme suffices.
    pub(crate) fn card_security(
        config: &AuthConfig,
    ) -> (BTreeMap<String, SecurityScheme>, Vec<SecurityRequirement>) {
        let mut schemes = BTreeMap::new();
        let mut requirements = Vec::new();
        let require = |name: &str| SecurityRequirement {
            schemes: BTreeMap::from([(name.to_owned(), StringList::default())]),
        };
        if !config.api_keys.is_empty() {
            schemes.insert(
                API_KEY_SCHEME.to_owned(),
                SecurityScheme::ApiKey(ApiKeySecurityScheme {
                    description: "An API key in the X-API-Key header (or as a bearer token)"
                        .to_owned(),
                    location: "header".to_owned(),
                    name: API_KEY_HEADER.to_owned(),
                }),
            );
            requirements.push(require(API_KEY_SCHEME));
        }
        if config.jwt.is_some() {
            schemes.insert(
                BEARER_SCHEME.to_owned(),
                SecurityScheme::HttpAuth(HttpAuthSecurityScheme {
                    description: "A JWT bearer token".to_owned(),
                    scheme: "Bearer".to_owned(),
                    bearer_format: "JWT".to_owned(),
                }),
            );
            requirements.push(require(BEARER_SCHEME));
        }
        (schemes, requirements)
    }

    /// The principal the request's credentials name, or why there is none. A request may
    /// carry several credentials (an API key and a bearer token, say) only when every one
    /// is valid and all name the same principal: it is never served as one of several.
    async fn authenticate(&self, headers: &HeaderMap) -> Result<String, &'static str> {
        let mut principal: Option<String> = None;
        let keys = headers.get_all(API_KEY_HEADER).iter().map(|key| {
            key.to_str()
                .ok()
                .and_then(|key| self.api_key(key))
                .ok_or("the API key is not valid")
        });
        for found in keys.collect::<Vec<_>>() {
            merge_principal(&mut principal, found?)?;
        }
        for authorization in headers.get_all(header::AUTHORIZATION) {
            merge_principal(&mut principal, self.bearer(authorization).await?)?;
        }
        principal.ok_or("credentials are required")
    }

    /// The principal of one `Authorization` header: `Bearer` with an API key or a JWT.
    async fn bearer(&self, authorization: &HeaderValue) -> Result<String, &'static str> {
        let token = authorization
            .to_str()
            .ok()
            .and_then(|value| {
                let (scheme, token) = value.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
            .ok_or("the Authorization header must be `Bearer <token>`")?;
        if let Some(principal) = self.api_key(token) {
            return Ok(principal);
        }
        let Some(jwt) = &self.jwt else {
            return Err("the bearer token is not valid");
        };
        let header =
            jsonwebtoken::decode_header(token).map_err(|_| "the bearer token is not valid")?;
        let validation = jwt
            .validations
            .iter()
            .find(|(alg, _)| *alg == header.alg)
            .map(|(_, validation)| validation)
            .ok_or("the token's signing algorithm is not accepted")?;
        let verified = match &jwt.keys {
            JwtKeys::Secret(key) => jsonwebtoken::decode::<Claims>(token, key, validation),
            JwtKeys::Set(set) => {
                let mut keys = set.current();
                let mut found = pick(&keys, header.kid.as_deref(), header.alg);
                if matches!(found, Err(KeyMiss::Unknown)) && set.remote.is_some() {
                    self.refresh(false).await;
                    keys = set.current();
                    found = pick(&keys, header.kid.as_deref(), header.alg);
                }
                let key = found.map_err(KeyMiss::reason)?;
                jsonwebtoken::decode::<Claims>(token, &key.key, validation)
            }
        };
        match verified {
            Ok(data) if !data.claims.sub.is_empty() => Ok(data.claims.sub),
            Ok(_) => Err("the token has no subject"),
            Err(error) => match error.kind() {
                jsonwebtoken::errors::ErrorKind::ExpiredSignature => Err("the token has expired"),
                _ => Err("the bearer token is not valid"),
            },
        }
    }

    /// The principal a credential typed into the dashboard's sign-in names: an API key or a
    /// JWT, checked as in a request's headers.
    pub(crate) async fn sign_in(&self, credential: &str) -> Result<String, &'static str> {
        let credential = credential.trim();
        if credential.is_empty() {
            return Err("credentials are required");
        }
        if let Some(principal) = self.api_key(credential) {
            return Ok(principal);
        }
        let bearer = HeaderValue::from_str(&format!("Bearer {credential}"))
            .map_err(|_| "the credential is not an API key or a token of this node")?;
        self.bearer(&bearer).await
    }

    /// The dashboard's sessions.
    pub(crate) fn sessions(&self) -> &super::session::Sessions {
        &self.sessions
    }

    /// The principal of API key `key`, compared in constant time.
    fn api_key(&self, key: &str) -> Option<String> {
        let mut found = None;
        for (value, principal) in &self.keys {
            if constant_time_eq(value.as_bytes(), key.as_bytes()) {
                found = Some(principal.clone());
            }
        }
        found
    }

    /// Serves `roles` under `/agents/{role}` from now on.
    pub(crate) fn set_served_roles(&self, roles: Vec<String>) {
        *self
            .served_roles
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = roles;
    }

    /// Whether `principal` may call `path`: the operations of a restricted role (under
    /// `/agents/{role}`, or the front agent's for the default role) admit only its principals.
    fn check_access(&self, path: &str, principal: &str) -> Result<(), Refusal> {
        if self.rules.roles.is_empty() {
            return Ok(());
        }
        let served = self
            .served_roles
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match role_of(path, &self.default_role, &served) {
            Some(role) if !admits(&self.rules.roles, role, principal) => Err(Refusal::Forbidden(
                format!("`{principal}` may not use the role `{role}`"),
            )),
            _ => Ok(()),
        }
    }

    /// Whether `principal` may use the agent of a gRPC `tenant` (a role's name; empty for the
    /// front agent): the rule [`Self::check_access`] applies to the role's path, since a gRPC
    /// request names its role in its body, not its path.
    pub(crate) fn check_tenant(&self, tenant: &str, principal: &str) -> Result<(), String> {
        let path = if tenant.is_empty() {
            "/".to_owned()
        } else {
            format!("/agents/{tenant}")
        };
        match self.check_access(&path, principal) {
            Ok(()) => Ok(()),
            Err(Refusal::Forbidden(reason)) => Err(reason),
            Err(Refusal::Unauthenticated(reason)) => Err(reason.to_owned()),
        }
    }

    /// Every check of one request: the principal, or why it is refused.
    async fn admit(&self, path: &str, headers: &HeaderMap) -> Result<String, Refusal> {
        let principal = self
            .authenticate(headers)
            .await
            .map_err(Refusal::Unauthenticated)?;
        self.check_access(path, &principal)?;
        Ok(principal)
    }
}

/// Adds the principal of one more credential of a request: the first sets it, any other
/// must name the same principal.
fn merge_principal(principal: &mut Option<String>, found: String) -> Result<(), &'static str> {
    match principal {
        Some(known) if *known != found => {
            Err("the request carries credentials of different principals; send one")
        }
        Some(_) => Ok(()),
        None => {
            *principal = Some(found);
            Ok(())
        }
    }
}

impl Jwt {
    fn from_config(
        config: &JwtConfig,
        secret: &dyn Fn(&str, &str) -> anyhow::Result<String>,
    ) -> anyhow::Result<Self> {
        let algorithms = config
            .algorithms
            .iter()
            .map(|name| name.parse::<Algorithm>())
            .collect::<Result<Vec<_>, _>>()
            .context("auth.jwt.algorithms")?;
        let validations = algorithms
            .iter()
            .map(|alg| {
                let mut validation = Validation::new(*alg);
                validation.set_issuer(&[&config.issuer]);
                validation.set_audience(&[&config.audience]);
                validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
                validation.validate_exp = true;
                (*alg, validation)
            })
            .collect();
        let keys = if let Some(name) = &config.secret_env {
            let value = secret(name, "auth.jwt.secret_env: the HS256 secret")?;
            JwtKeys::Secret(
                DecodingKey::from_secret(value.as_bytes())
                    .context("auth.jwt.secret_env: the HS256 secret")?,
            )
        } else if let Some(file) = &config.jwks_file {
            JwtKeys::Set(KeySet {
                keys: RwLock::new(read_jwks_file(file)?.into()),
                remote: None,
            })
        } else if let Some(url) = &config.jwks_url {
            let client = reqwest::Client::builder()
                .timeout(JWKS_TIMEOUT)
                .build()
                .context("auth.jwt.jwks_url: cannot build the HTTP client")?;
            JwtKeys::Set(KeySet {
                keys: RwLock::new(Arc::from(Vec::new())),
                remote: Some(Remote {
                    url: url.clone(),
                    client,
                    last_fetch: tokio::sync::Mutex::new(None),
                }),
            })
        } else {
            bail!("auth.jwt: give one of secret_env, jwks_file and jwks_url");
        };
        Ok(Self { keys, validations })
    }
}

impl KeySet {
    fn current(&self) -> Arc<[PublicKey]> {
        match self.keys.read() {
            Ok(keys) => keys.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

impl Remote {
    async fn fetch(&self) -> anyhow::Result<Vec<PublicKey>> {
        let mut response = self
            .client
            .get(&self.url)
            .header(header::ACCEPT, "application/json")
            .send()
            .await?
            .error_for_status()?;
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            body.extend_from_slice(&chunk);
            if body.len() > JWKS_MAX_BYTES {
                bail!("the key set is larger than {JWKS_MAX_BYTES} bytes");
            }
        }
        let (keys, problems) = parse_jwks(&body)?;
        for problem in problems {
            warn!(url = %self.url, "auth.jwt.jwks_url: {problem}");
        }
        Ok(keys)
    }
}

/// Why no key verifies a token.
#[derive(Debug, PartialEq, Eq)]
enum KeyMiss {
    /// No key has the token's `kid` (or, without one, the set is empty).
    Unknown,
    /// The token has no `kid` and the set has several keys.
    Ambiguous,
    /// The key is for another algorithm.
    WrongAlgorithm,
}

impl KeyMiss {
    fn reason(self) -> &'static str {
        match self {
            Self::Unknown => "the token's key is not known",
            Self::Ambiguous => "the token names no key (kid) and there are several",
            Self::WrongAlgorithm => "the token's algorithm is not its key's",
        }
    }
}

/// The key of `keys` a token with `kid` and `alg` is verified with.
fn pick<'k>(
    keys: &'k [PublicKey],
    kid: Option<&str>,
    alg: Algorithm,
) -> Result<&'k PublicKey, KeyMiss> {
    let key = match kid {
        Some(kid) => keys
            .iter()
            .find(|key| key.kid.as_deref() == Some(kid))
            .ok_or(KeyMiss::Unknown)?,
        None => match keys {
            [] => return Err(KeyMiss::Unknown),
            [only] => only,
            _ => return Err(KeyMiss::Ambiguous),
        },
    };
    match key.alg {
        Some(own) if own != alg => Err(KeyMiss::WrongAlgorithm),
        _ => Ok(key),
    }
}

fn read_jwks_file(file: &Path) -> anyhow::Result<Vec<PublicKey>> {
    let what = || format!("auth.jwt.jwks_file: {}", file.display());
    let text = std::fs::read(file).with_context(what)?;
    let (keys, problems) = parse_jwks(&text).with_context(what)?;
    for problem in problems {
        warn!(file = %file.display(), "auth.jwt.jwks_file: {problem}");
    }
    Ok(keys)
}

/// The signature keys of a JWKS document, and why any other key was skipped. Symmetric keys
/// (`oct`), encryption keys and keys for HMAC or unknown algorithms are skipped; a set with
/// no usable key is an error.
fn parse_jwks(text: &[u8]) -> anyhow::Result<(Vec<PublicKey>, Vec<String>)> {
    #[derive(Deserialize)]
    struct Document {
        keys: Vec<serde_json::Value>,
    }
    let document: Document =
        serde_json::from_slice(text).context("not a JWKS (a JSON object with `keys`)")?;
    let mut keys = Vec::new();
    let mut problems = Vec::new();
    for (index, value) in document.keys.into_iter().enumerate() {
        match public_key(value) {
            Ok(key) => keys.push(key),
            Err(problem) => problems.push(format!("key {index} skipped: {problem}")),
        }
    }
    if keys.is_empty() {
        bail!(
            "the key set has no usable signature key ({})",
            problems.join("; ")
        );
    }
    Ok((keys, problems))
}

fn public_key(value: serde_json::Value) -> Result<PublicKey, String> {
    let jwk: Jwk = serde_json::from_value(value).map_err(|e| format!("not a JWK: {e}"))?;
    let kid = jwk.common.key_id.clone();
    let name = kid
        .as_deref()
        .map(|kid| format!("`{kid}`"))
        .unwrap_or_default();
    if matches!(jwk.common.public_key_use, Some(ref use_) if *use_ != PublicKeyUse::Signature) {
        return Err(format!("{name} is not a signature key"));
    }
    if matches!(
        jwk.algorithm,
        AlgorithmParameters::OctetKey(_) | AlgorithmParameters::Other(_)
    ) {
        return Err(format!("{name} is not a public key (RSA, EC or OKP)"));
    }
    let alg = match jwk.common.key_algorithm {
        None => None,
        Some(alg) => match alg.to_string().parse::<Algorithm>() {
            Ok(Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) | Err(_) => {
                return Err(format!(
                    "{name} is for the algorithm {alg}, not a signature one"
                ));
            }
            Ok(alg) => Some(alg),
        },
    };
    let key = DecodingKey::from_jwk(&jwk).map_err(|e| format!("{name}: {e}"))?;
    Ok(PublicKey { kid, alg, key })
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The role whose operations `path` reaches: `/agents/{role}/...` is that role's when it is
/// one of `served`, the node's own probes and lists are none, and everything else (tenant
/// paths such as `/agents/tasks` included) is the front agent's, which runs `default_role`.
fn role_of<'p>(path: &'p str, default_role: &'p str, served: &[String]) -> Option<&'p str> {
    let mut segments = path.strip_prefix('/').unwrap_or(path).split('/');
    match (segments.next(), segments.next()) {
        (Some("agents"), Some(role)) if served.iter().any(|name| name == role) => Some(role),
        (Some("agents" | "healthz" | "readyz" | "status"), None | Some("")) => None,
        // The dashboard's own API reaches tasks through the role rules of the operations
        // the browser calls; its node-wide views answer with the caller's own tasks.
        (Some("ui"), _) => None,
        // A gRPC call names its role in its `tenant`: the service checks it
        // (`Authenticator::check_tenant`).
        (Some(service), _) if is_grpc_service(service) => None,
        _ => Some(default_role),
    }
}

/// Whether `path` is served without credentials: the public cards (the node's and each
/// role's), the node's JWKS, the list of role cards, the health and readiness probes, the
/// dashboard's page and files, and its sign-in (`/ui/session`).
fn is_public(method: &Method, path: &str) -> bool {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    if segments == ["ui", "session"] {
        return true;
    }
    if method != Method::GET && method != Method::HEAD {
        return false;
    }
    match segments.as_slice() {
        ["ui", "api", ..] => false,
        ["ui"] | ["ui", _] => true,
        segments => matches!(
            segments,
            ["healthz" | "readyz" | "agents"]
                | [".well-known", "agent-card.json" | "jwks.json"]
                | ["agents", _, ".well-known", "agent-card.json"]
        ),
    }
}

/// Whether the first segment of a path is the gRPC service's.
fn is_grpc_service(segment: &str) -> bool {
    mew_transport::GRPC_SERVICE_PATH.trim_matches('/') == segment
}

/// How a refusal is answered: in the shape of the request's binding.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    JsonRpc,
    Rest,
    Grpc,
}

fn shape_of(request: &Request) -> Shape {
    let grpc = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    if grpc {
        Shape::Grpc
    } else if is_jsonrpc(request.method(), request.uri().path()) {
        Shape::JsonRpc
    } else {
        Shape::Rest
    }
}

/// Whether `path` is a JSON-RPC endpoint (the node's root or a role's).
fn is_jsonrpc(method: &Method, path: &str) -> bool {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    method == Method::POST && matches!(segments.as_slice(), [""] | ["agents", _])
}

/// The middleware: lets public paths through, authenticates everything else and applies the
/// role access rules.
pub(crate) async fn require(
    State(auth): State<Arc<Authenticator>>,
    mut request: Request,
    next: Next,
) -> Response {
    if is_public(request.method(), request.uri().path()) {
        return next.run(request).await;
    }
    // A browser of the dashboard: its session cookie, when the request carries no other
    // credential (one that does is judged by that credential alone, as any client).
    let headers = request.headers();
    if !headers.contains_key(API_KEY_HEADER)
        && !headers.contains_key(header::AUTHORIZATION)
        && let Some(session) = auth.sessions.of(headers)
    {
        let shape = shape_of(&request);
        let session = match session {
            Ok(session) => session,
            Err(reason) => return refuse(shape, Refusal::Unauthenticated(reason)),
        };
        let safe = matches!(*request.method(), Method::GET | Method::HEAD);
        if !safe && !super::session::csrf_matches(headers, &session) {
            return refuse(
                shape,
                Refusal::Forbidden(format!(
                    "a request of a dashboard session must repeat its CSRF token in {}",
                    super::session::CSRF_HEADER
                )),
            );
        }
        if let Err(refusal) = auth.check_access(request.uri().path(), &session.principal) {
            return refuse(shape, refusal);
        }
        request
            .extensions_mut()
            .insert(Principal(session.principal));
        return next.run(request).await;
    }
    match auth.admit(request.uri().path(), request.headers()).await {
        Ok(principal) => {
            request.extensions_mut().insert(Principal(principal));
            next.run(request).await
        }
        Err(refusal) => refuse(shape_of(&request), refusal),
    }
}

/// Lets a request through only when it authenticates (no role rule applies): the rule of a
/// path outside the roles, such as `/metrics`; 401 otherwise, as [`require`] answers.
pub(crate) async fn authenticated(auth: &Authenticator, request: Request, next: Next) -> Response {
    match auth.authenticate(request.headers()).await {
        Ok(_) => next.run(request).await,
        Err(reason) => refuse(Shape::Rest, Refusal::Unauthenticated(reason)),
    }
}

/// 401 with `WWW-Authenticate`, or 403, with an error body in the binding's shape; for gRPC,
/// the status `UNAUTHENTICATED` or `PERMISSION_DENIED` (a trailers-only answer).
fn refuse(shape: Shape, refusal: Refusal) -> Response {
    if shape == Shape::Grpc {
        return mew_transport::grpc_refusal(match refusal {
            Refusal::Unauthenticated(reason) => {
                GrpcRefusal::Unauthenticated(format!("unauthenticated: {reason}"))
            }
            Refusal::Forbidden(reason) => {
                GrpcRefusal::PermissionDenied(format!("forbidden: {reason}"))
            }
        });
    }
    let jsonrpc = shape == Shape::JsonRpc;
    let (status, name, message) = match refusal {
        Refusal::Unauthenticated(reason) => (
            StatusCode::UNAUTHORIZED,
            "UNAUTHENTICATED",
            format!("unauthenticated: {reason}"),
        ),
        Refusal::Forbidden(reason) => (
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            format!("forbidden: {reason}"),
        ),
    };
    let body = if jsonrpc {
        json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": { "code": -32600, "message": message },
        })
    } else {
        json!({
            "error": { "code": status.as_u16(), "status": name, "message": message },
        })
    };
    let mut response = (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"mew\""),
        );
    }
    response
}

/// Warns about each role of `auth.roles` that `known` does not name.
pub(crate) fn warn_unknown_roles(config: &AuthConfig, known: &dyn Fn(&str) -> bool) {
    for role in config.roles.keys().filter(|role| !known(role)) {
        warn!("auth.roles: there is no role `{role}`; its rule has no effect");
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use base64::Engine as _;
    use jsonwebtoken::EncodingKey;
    use tower::ServiceExt as _;

    use super::*;
    use crate::config::{ApiKeyConfig, JwtConfig};

    // Test keys, generated once for these tests only: the private halves as PKCS#8 (EC,
    // Ed25519) or PKCS#1 (RSA) DER in base64, the public halves as JWKs without `kid`.
    const ES_A_DER: &str = concat!(
        "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg2+xj3Mll3JJM/f/5oT3Wuy9eo2BN",
        "jRnSaRSkV/x53X2hRANCAAR8ZUKcF458DAHJ0mfjjRos6L45V+xtn7jNuGg7dwwFOBzLudU8tbkP",
        "Y67N/NNzoEbzgXIGV4S1i2B8RLWg/IHa",
    );
    const ES_A_JWK: &str = concat!(
        "{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"fGVCnBeOfAwBydJn440aLOi-OVfsbZ-4zbhoO3cMBTg\",",
        "\"y\":\"HMu51Ty1uQ9jrs3803OgRvOBcgZXhLWLYHxEtaD8gdo\"}",
    );
    const ES_B_DER: &str = concat!(
        "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgQfduJZ11yjpoudeQpSQj+ySg9T8y",
        "dAurq9j+ZzgOml2hRANCAARLtQJvUSzaNWuUGA9m5tpfSKE8MUkBaYU+yaHSypkSLl6rOOMYAsWt",
        "lxaVctaDK9BOwhOM+GtDL/KwlfZTfH/9",
    );
    const ES_B_JWK: &str = concat!(
        "{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"S7UCb1Es2jVrlBgPZubaX0ihPDFJAWmFPsmh0sqZEi4\",",
        "\"y\":\"Xqs44xgCxa2XFpVy1oMr0E7CE4z4a0Mv8rCV9lN8f_0\"}",
    );
    const RS_DER: &str = concat!(
        "MIIEpAIBAAKCAQEAvVKbVoMyZD8P8gSEuBvYud+Ar3JQxX7joTd0qG8D9NATf+UUdxM1KRxlKXh9",
        "NHgMkt1lE7V6NA9pg185AifZEa9Cb5asheHzOXPdwEHBz5BD5pWgyoGuKxiwzy4e37YBCkptPLZb",
        "ALjpTrA1bmkI68iXWWTS5TB8tkrTcTW+xYVQV8h1VSMVroNvNL8KrLwbxJnIJ3Lhu2CyVhMLIGc9",
        "tunRwv302mA8BFlr8YKU1wID6AWqFO4Iy2WbxG6cqBIGdfC+zyIjf0mG99pNHc6vy/VhwyDcpOP7",
        "qClcrOe17rwSwrjwdguLOFD9semyZg6KymIQQMo+zmfstTX+RjP+/wIDAQABAoIBAFZkBxlLpeeD",
        "tVGBSVS/9D4hJJYqynvMoq+y4AtqGTqR5owCazvI6oW3fNwXLL8QFuC/oTuEoN53t/SoM5ntuApv",
        "WJgV/+TaDcSGQEbWWsvN74YdejFeSq1Ex43K5HC+GyxoeP9u0Qj72A69rqwSxuzc7F9w+CF4ZjhC",
        "3ch3t3Vmzpup++LpufA1tFjl2HBPVVocPOSacln6uH8bH2MHPVAFpkKeqiJMAZt+DDvbykLdwSHq",
        "HCaqVOYJFksb9DK/JmHFXqDgWuh2Dugul5pS/u5F/W5T+aL8iaNn6DHjIeBLIfPC9oRtWxeCOsDV",
        "/VeTI16fSpVmSNeUUJ7u/3Kgu8kCgYEA4jyWQfB+zYYkpzwOYkZLkOCSD8SlIzuf9L47uUhUuqiS",
        "Ls807eHm5th5UY3ipiW+GlOWKr+h3NUFuxpUxoZ8DwQqveGEafLtqpGLajM3dWJ7IRp0/+Kcv7Xk",
        "cJrXiifQfINZ6OrnlV8HPieHc+TrLTdWDZsOCWM6772N5DZfvkcCgYEA1jrLr7yTkJu7XDsMQAgb",
        "acwPgGT3buSnCvQ7OzWVfGGLYqmCGUTA6iwFBHZ3Oz7wJmC9+kcy6f1EA+oBdnAsx+NsDqGRCk/e",
        "JlmZs3Ip4qL+r+xDpkpAuRXnxbwqlOBxVc54XH0BFMy5HHUvtylK447WkQ8l2E84gjO5JpE9/YkC",
        "gYEA0zvss76gNrekK314lKu7zJbR6eUap035qOOiEfqGGg5hB1GywtWk6S9//vSyhZ1B5YTb9igd",
        "Mnq3sh4Av6g71y111vrkzqPi4tqoSE1v36tG+f6g9XaaEqn7lGQPEdDg6hEedso11pL2yULRRxWb",
        "vAkp0ORQc9Vx5vyeqlFWjesCgYAf5AjGVHAzKrutcyzTq2FJUpNMLbuXynoDa3AV1Fg4d9zkBw/S",
        "6yU8tujYTTpam3fsfqJJS6gMpSMm4gLtuq0v5G8Fjo+k1Vbgpp321JvfnRwE3EsFyi/wXY5vJR/B",
        "ode9SksomYM7sW4tClTcE02OqojOd07O8Jwc5c4+K4jq4QKBgQCL7nCHIQTiyFDRTFc+xydcDUGV",
        "KJBD4PdGXMEbHs/FPNyzw453S1F0ZLlaSE0XQ7ZaS/UCFJ+mxxzGPyDniaByNVzUeNLIDF1Lcpd5",
        "0iodqdbq20U1ndecfpBrrEsIlXJoIhKnUFACuOxRbNVAxGitse38KJ9COU5SFIUW1iT5+A==",
    );
    const RS_JWK: &str = concat!(
        "{\"kty\":\"RSA\",\"n\":\"vVKbVoMyZD8P8gSEuBvYud-Ar3JQxX7joTd0qG8D9NATf-UUdxM1KRxlKX",
        "h9NHgMkt1lE7V6NA9pg185AifZEa9Cb5asheHzOXPdwEHBz5BD5pWgyoGuKxiwzy4e37YBCkptPL",
        "ZbALjpTrA1bmkI68iXWWTS5TB8tkrTcTW-xYVQV8h1VSMVroNvNL8KrLwbxJnIJ3Lhu2CyVhMLIG",
        "c9tunRwv302mA8BFlr8YKU1wID6AWqFO4Iy2WbxG6cqBIGdfC-zyIjf0mG99pNHc6vy_VhwyDcpO",
        "P7qClcrOe17rwSwrjwdguLOFD9semyZg6KymIQQMo-zmfstTX-RjP-_w\",\"e\":\"AQAB\"}",
    );
    const ED_DER: &str = "MC4CAQAwBQYDK2VwBCIEIENejtD+6UbE4bZOBZHqT2EfOmVkEaovf/dbm48SWF7e";
    const ED_JWK: &str = concat!(
        "{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"x\":\"96vd4gldPZMLwEFY6IbFYIudEvfNSdkaj9_Q90fxvs",
        "A\"}",
    );

    #[test]
    fn listed_roles_admit_their_principals_and_unlisted_roles_everyone() {
        let roles = BTreeMap::from([
            (
                "reviewer".to_owned(),
                vec!["alice".to_owned(), "bob".to_owned()],
            ),
            ("open".to_owned(), vec![ANY_PRINCIPAL.to_owned()]),
        ]);
        assert!(admits(&roles, "reviewer", "bob"));
        assert!(!admits(&roles, "reviewer", "carol"));
        assert!(admits(&roles, "open", "carol"));
        assert!(admits(&roles, "unlisted", "carol"));
    }

    #[test]
    fn only_cards_probes_and_the_dashboards_page_are_public() {
        for path in [
            "/.well-known/agent-card.json",
            "/agents/coder/.well-known/agent-card.json",
            "/.well-known/jwks.json",
            "/healthz",
            "/readyz",
            "/agents",
            "/ui",
            "/ui/app.js",
            "/ui/session",
        ] {
            assert!(is_public(&Method::GET, path), "{path}");
        }
        // The dashboard's sign-in takes credentials; its API wants them.
        assert!(is_public(&Method::POST, "/ui/session"));
        assert!(!is_public(&Method::POST, "/ui"));
        for path in [
            "/",
            "/tasks",
            "/tasks/abc",
            "/t1/tasks",
            "/status",
            "/agents/coder",
            "/agents/coder/tasks",
            "/agents/coder/t1/.well-known/agent-card.json",
            "/t1/tasks/.well-known/agent-card.json",
            "/agents/coder/.well-known/jwks.json",
            "/extendedAgentCard",
            "/agents/coder/extendedAgentCard",
            "/ui/api/events",
            "/ui/api/node",
            "/ui/api/tasks/abc/tree",
        ] {
            assert!(!is_public(&Method::GET, path), "{path}");
        }
        assert!(!is_public(&Method::POST, "/.well-known/agent-card.json"));
    }

    fn hs256_config() -> AuthConfig {
        AuthConfig {
            api_keys: vec![ApiKeyConfig {
                name: "alice".to_owned(),
                key_env: "KEY".to_owned(),
            }],
            jwt: Some(JwtConfig {
                secret_env: Some("SECRET".to_owned()),
                jwks_file: None,
                jwks_url: None,
                issuer: "iss".to_owned(),
                audience: "aud".to_owned(),
                algorithms: vec!["HS256".to_owned()],
            }),
            ..AuthConfig::default()
        }
    }

    fn env(name: &str) -> Option<String> {
        match name {
            "KEY" => Some("k-123".to_owned()),
            "SECRET" => Some("s-456".to_owned()),
            _ => None,
        }
    }

    fn authenticator() -> Authenticator {
        Authenticator::from_config(&hs256_config(), "front", &[], &env)
            .unwrap()
            .unwrap()
    }

    fn jwt(claims: serde_json::Value, secret: &str, algorithm: Algorithm) -> String {
        jsonwebtoken::encode(
            &jsonwebtoken::Header::new(algorithm),
            &claims,
            &EncodingKey::from_secret(secret.as_bytes()).unwrap(),
        )
        .unwrap()
    }

    fn claims(sub: &str, exp: u64) -> serde_json::Value {
        json!({"sub": sub, "iss": "iss", "aud": "aud", "exp": exp})
    }

    fn in_ten_minutes() -> u64 {
        jsonwebtoken::get_current_timestamp() + 600
    }

    fn bearer(token: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
        );
        headers
    }

    async fn check(name: &'static str, value: &str) -> Result<String, &'static str> {
        let mut headers = HeaderMap::new();
        headers.insert(name, HeaderValue::from_str(value).unwrap());
        authenticator().authenticate(&headers).await
    }

    #[tokio::test]
    async fn api_keys_and_tokens_name_the_principal() {
        let good = jwt(claims("carol", in_ten_minutes()), "s-456", Algorithm::HS256);
        assert_eq!(check("x-api-key", "k-123").await, Ok("alice".to_owned()));
        assert_eq!(
            check("authorization", "Bearer k-123").await,
            Ok("alice".to_owned())
        );
        assert_eq!(
            check("authorization", &format!("Bearer {good}")).await,
            Ok("carol".to_owned())
        );
        assert!(
            authenticator()
                .authenticate(&HeaderMap::new())
                .await
                .is_err()
        );
        assert!(check("x-api-key", "k-12").await.is_err());
        assert!(check("authorization", "Basic k-123").await.is_err());
    }

    #[tokio::test]
    async fn two_credentials_must_name_one_principal() {
        let carol = jwt(claims("carol", in_ten_minutes()), "s-456", Algorithm::HS256);
        let alice = jwt(claims("alice", in_ten_minutes()), "s-456", Algorithm::HS256);
        let both = |key: &str, token: &str| {
            let mut headers = bearer(token);
            headers.insert("x-api-key", HeaderValue::from_str(key).unwrap());
            headers
        };
        let auth = authenticator();
        // An API key of alice's and a token of carol's: refused, never served as either.
        let refused = auth.authenticate(&both("k-123", &carol)).await;
        let shown = format!("{refused:?}");
        assert!(
            refused.is_err_and(|why: &str| why.contains("different principals")),
            "{shown}"
        );
        // A valid key with an invalid token, or the other way round: refused.
        assert!(
            auth.authenticate(&both("k-123", "not-a-token"))
                .await
                .is_err()
        );
        assert!(auth.authenticate(&both("k-12", &alice)).await.is_err());
        // Two API keys of different principals in one header name: refused.
        let mut twice = HeaderMap::new();
        twice.append("x-api-key", HeaderValue::from_static("k-123"));
        twice.append("x-api-key", HeaderValue::from_static("nope"));
        assert!(auth.authenticate(&twice).await.is_err());
        // Two credentials of one principal are fine.
        assert_eq!(
            auth.authenticate(&both("k-123", &alice)).await,
            Ok("alice".to_owned())
        );
    }

    #[tokio::test]
    async fn bad_tokens_are_refused() {
        let now = jsonwebtoken::get_current_timestamp();
        for (claims, secret, algorithm) in [
            (claims("c", now - 3600), "s-456", Algorithm::HS256),
            (
                json!({"sub": "c", "iss": "other", "aud": "aud", "exp": now + 600}),
                "s-456",
                Algorithm::HS256,
            ),
            (
                json!({"sub": "c", "iss": "iss", "aud": "other", "exp": now + 600}),
                "s-456",
                Algorithm::HS256,
            ),
            (
                json!({"sub": "c", "iss": "iss", "aud": "aud"}),
                "s-456",
                Algorithm::HS256,
            ),
            (
                json!({"iss": "iss", "aud": "aud", "exp": now + 600}),
                "s-456",
                Algorithm::HS256,
            ),
            (claims("c", now + 600), "wrong", Algorithm::HS256),
            (claims("c", now + 600), "s-456", Algorithm::HS384),
        ] {
            let token = jwt(claims.clone(), secret, algorithm);
            assert!(
                check("authorization", &format!("Bearer {token}"))
                    .await
                    .is_err(),
                "{claims} {secret} {algorithm:?}"
            );
        }
    }

    #[test]
    fn a_missing_secret_is_an_error() {
        let config = AuthConfig {
            api_keys: vec![ApiKeyConfig {
                name: "alice".to_owned(),
                key_env: "KEY".to_owned(),
            }],
            ..AuthConfig::default()
        };
        let error = Authenticator::from_config(&config, "front", &[], &|_| None)
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("KEY is not set"), "{error}");
    }

    #[test]
    fn jsonrpc_endpoints_are_the_roots() {
        assert!(is_jsonrpc(&Method::POST, "/"));
        assert!(is_jsonrpc(&Method::POST, "/agents/coder"));
        assert!(!is_jsonrpc(&Method::POST, "/message:send"));
        assert!(!is_jsonrpc(&Method::GET, "/"));
    }

    // ---- Public keys ----

    fn der(text: &str) -> Vec<u8> {
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap()
    }

    /// A JWK with `kid` (and `alg`, when given) added.
    fn jwk(text: &str, kid: &str, alg: Option<&str>) -> serde_json::Value {
        let mut jwk: serde_json::Value = serde_json::from_str(text).unwrap();
        jwk["kid"] = json!(kid);
        if let Some(alg) = alg {
            jwk["alg"] = json!(alg);
        }
        jwk
    }

    fn jwks(keys: &[serde_json::Value]) -> String {
        json!({ "keys": keys }).to_string()
    }

    /// The set used below: an ES256 key, an RS256 key without `alg`, an EdDSA key.
    fn three_keys() -> String {
        jwks(&[
            jwk(ES_A_JWK, "es-1", Some("ES256")),
            jwk(RS_JWK, "rs-1", None),
            jwk(ED_JWK, "ed-1", Some("EdDSA")),
        ])
    }

    /// A token for `claims`, signed with `key` under `algorithm`, naming `kid`.
    fn signed(
        claims: &serde_json::Value,
        algorithm: Algorithm,
        kid: Option<&str>,
        key: &EncodingKey,
    ) -> String {
        let mut header = jsonwebtoken::Header::new(algorithm);
        header.kid = kid.map(str::to_owned);
        jsonwebtoken::encode(&header, claims, key).unwrap()
    }

    fn es_a() -> EncodingKey {
        EncodingKey::from_ec_der(&der(ES_A_DER))
    }

    fn jwks_config(file: Option<PathBuf>, url: Option<String>) -> AuthConfig {
        AuthConfig {
            jwt: Some(JwtConfig {
                secret_env: None,
                jwks_file: file,
                jwks_url: url,
                issuer: "iss".to_owned(),
                audience: "aud".to_owned(),
                algorithms: ["ES256", "ES384", "RS256", "PS384", "EdDSA"]
                    .map(str::to_owned)
                    .to_vec(),
            }),
            ..AuthConfig::default()
        }
    }

    /// An authenticator with the JWKS `set` in a file.
    fn with_jwks_file(set: &str) -> anyhow::Result<Authenticator> {
        let dir = tempfile::TempDir::new().unwrap();
        let file = dir.path().join("jwks.json");
        std::fs::write(&file, set).unwrap();
        Ok(
            Authenticator::from_config(&jwks_config(Some(file), None), "front", &[], &env)?
                .unwrap(),
        )
    }

    #[tokio::test]
    async fn tokens_signed_with_the_keys_of_a_jwks_file_are_accepted() {
        let auth = with_jwks_file(&three_keys()).unwrap();
        let claims = claims("dave", in_ten_minutes());
        for (algorithm, kid, key) in [
            (Algorithm::ES256, "es-1", es_a()),
            (
                Algorithm::RS256,
                "rs-1",
                EncodingKey::from_rsa_der(&der(RS_DER)),
            ),
            (
                Algorithm::PS384,
                "rs-1",
                EncodingKey::from_rsa_der(&der(RS_DER)),
            ),
            (
                Algorithm::EdDSA,
                "ed-1",
                EncodingKey::from_ed_der(&der(ED_DER)),
            ),
        ] {
            let token = signed(&claims, algorithm, Some(kid), &key);
            assert_eq!(
                auth.authenticate(&bearer(&token)).await,
                Ok("dave".to_owned()),
                "{algorithm:?}"
            );
        }
    }

    #[tokio::test]
    async fn jwks_tokens_with_a_wrong_key_kid_or_algorithm_are_refused() {
        let auth = with_jwks_file(&three_keys()).unwrap();
        let now = jsonwebtoken::get_current_timestamp();
        let good = claims("dave", now + 600);
        let es_b = EncodingKey::from_ec_der(&der(ES_B_DER));
        for (what, token, reason) in [
            (
                "another key under a known kid",
                signed(&good, Algorithm::ES256, Some("es-1"), &es_b),
                "the bearer token is not valid",
            ),
            (
                "an unknown kid",
                signed(&good, Algorithm::ES256, Some("es-9"), &es_a()),
                "the token's key is not known",
            ),
            (
                "no kid with several keys",
                signed(&good, Algorithm::ES256, None, &es_a()),
                "the token names no key (kid) and there are several",
            ),
            (
                "HS256 against public keys",
                {
                    let mut header = jsonwebtoken::Header::new(Algorithm::HS256);
                    header.kid = Some("es-1".to_owned());
                    let secret = EncodingKey::from_secret(ES_A_JWK.as_bytes()).unwrap();
                    jsonwebtoken::encode(&header, &good, &secret).unwrap()
                },
                "the token's signing algorithm is not accepted",
            ),
            (
                "ES256 for a key that says EdDSA",
                signed(&good, Algorithm::ES256, Some("ed-1"), &es_a()),
                "the token's algorithm is not its key's",
            ),
            (
                "an EC signature under the RSA key's kid",
                signed(&good, Algorithm::ES256, Some("rs-1"), &es_a()),
                "the bearer token is not valid",
            ),
            (
                "an expired token",
                signed(
                    &claims("dave", now - 3600),
                    Algorithm::ES256,
                    Some("es-1"),
                    &es_a(),
                ),
                "the token has expired",
            ),
            (
                "another issuer",
                signed(
                    &json!({"sub": "d", "iss": "x", "aud": "aud", "exp": now + 600}),
                    Algorithm::ES256,
                    Some("es-1"),
                    &es_a(),
                ),
                "the bearer token is not valid",
            ),
        ] {
            assert_eq!(
                auth.authenticate(&bearer(&token)).await,
                Err(reason),
                "{what}"
            );
        }
    }

    #[tokio::test]
    async fn a_token_without_kid_uses_the_only_key() {
        let auth = with_jwks_file(&jwks(&[jwk(ES_A_JWK, "es-1", None)])).unwrap();
        let token = signed(
            &claims("erin", in_ten_minutes()),
            Algorithm::ES256,
            None,
            &es_a(),
        );
        assert_eq!(
            auth.authenticate(&bearer(&token)).await,
            Ok("erin".to_owned())
        );
    }

    #[test]
    fn algorithms_limit_the_accepted_tokens() {
        let dir = tempfile::TempDir::new().unwrap();
        let file = dir.path().join("jwks.json");
        std::fs::write(&file, three_keys()).unwrap();
        let mut config = jwks_config(Some(file), None);
        if let Some(jwt) = &mut config.jwt {
            jwt.algorithms = vec!["RS256".to_owned()];
        }
        let auth = Authenticator::from_config(&config, "front", &[], &env)
            .unwrap()
            .unwrap();
        let token = signed(
            &claims("dave", in_ten_minutes()),
            Algorithm::ES256,
            Some("es-1"),
            &es_a(),
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert_eq!(
            runtime.block_on(auth.authenticate(&bearer(&token))),
            Err("the token's signing algorithm is not accepted")
        );
    }

    #[test]
    fn a_bad_jwks_file_is_an_error_naming_it() {
        for (text, message) in [
            ("not json", "not a JWKS"),
            (r#"{"keys": []}"#, "no usable signature key"),
            (
                r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "h"}]}"#,
                "`h` is not a public key",
            ),
        ] {
            let error = with_jwks_file(text).err().unwrap();
            let shown = format!("{error:#}");
            assert!(shown.contains("auth.jwt.jwks_file"), "{shown}");
            assert!(shown.contains("jwks.json"), "{shown}");
            assert!(shown.contains(message), "{text}: {shown}");
        }
        let missing = jwks_config(Some(PathBuf::from("/srv/none/jwks.json")), None);
        let error = Authenticator::from_config(&missing, "front", &[], &env)
            .err()
            .unwrap();
        assert!(
            format!("{error:#}").contains("/srv/none/jwks.json"),
            "{error:#}"
        );
    }

    #[test]
    fn unusable_keys_are_skipped() {
        let set = json!({ "keys": [
            {"kty": "oct", "k": "c2VjcmV0", "kid": "h"},
            {"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA", "kid": "enc", "use": "enc"},
            {"kty": "RSA", "n": "AQAB", "e": "AQAB", "kid": "h2", "alg": "HS256"},
            jwk(ES_A_JWK, "es-1", None),
        ]});
        let (keys, problems) = parse_jwks(set.to_string().as_bytes()).unwrap();
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].kid.as_deref(), Some("es-1"));
        assert_eq!(problems.len(), 3, "{problems:?}");
    }

    /// A JWKS server on a local port whose answer the test can change.
    struct JwksServer {
        url: String,
        body: Arc<std::sync::Mutex<Option<String>>>,
        fetches: Arc<AtomicUsize>,
    }

    impl JwksServer {
        async fn start(set: String) -> Self {
            let body = Arc::new(std::sync::Mutex::new(Some(set)));
            let fetches = Arc::new(AtomicUsize::new(0));
            let (served, counted) = (body.clone(), fetches.clone());
            let app = axum::Router::new().route(
                "/jwks.json",
                axum::routing::get(move || {
                    let (served, counted) = (served.clone(), counted.clone());
                    async move {
                        counted.fetch_add(1, Ordering::SeqCst);
                        match served.lock().unwrap().clone() {
                            Some(set) => (StatusCode::OK, set),
                            None => (StatusCode::INTERNAL_SERVER_ERROR, String::new()),
                        }
                    }
                }),
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}/jwks.json", listener.local_addr().unwrap());
            tokio::spawn(async move { axum::serve(listener, app).await });
            Self { url, body, fetches }
        }

        fn serve(&self, set: Option<String>) {
            *self.body.lock().unwrap() = set;
        }

        fn fetches(&self) -> usize {
            self.fetches.load(Ordering::SeqCst)
        }
    }

    #[tokio::test]
    async fn a_jwks_url_is_fetched_again_for_an_unknown_kid_at_most_every_30_s() {
        let server = JwksServer::start(jwks(&[jwk(ES_A_JWK, "es-1", None)])).await;
        let auth = Arc::new(
            Authenticator::from_config(
                &jwks_config(None, Some(server.url.clone())),
                "f",
                &[],
                &env,
            )
            .unwrap()
            .unwrap(),
        );
        auth.start().await;
        assert_eq!(server.fetches(), 1);
        let good = claims("fay", in_ten_minutes());
        let es_b = EncodingKey::from_ec_der(&der(ES_B_DER));
        let first = signed(&good, Algorithm::ES256, Some("es-1"), &es_a());
        let rotated = signed(&good, Algorithm::ES256, Some("es-2"), &es_b);
        assert_eq!(
            auth.authenticate(&bearer(&first)).await,
            Ok("fay".to_owned())
        );
        assert_eq!(server.fetches(), 1, "a known kid fetches nothing");

        // The issuer rotates in a second key; the last fetch was less than 30 s ago.
        server.serve(Some(jwks(&[
            jwk(ES_A_JWK, "es-1", None),
            jwk(ES_B_JWK, "es-2", None),
        ])));
        assert_eq!(
            auth.authenticate(&bearer(&rotated)).await,
            Err("the token's key is not known")
        );
        assert_eq!(server.fetches(), 1, "no fetch within 30 s of the last");

        // 30 s later, an unknown kid fetches the set again.
        let remote = auth.remote().unwrap();
        *remote.last_fetch.lock().await = Instant::now().checked_sub(JWKS_MIN_INTERVAL);
        assert_eq!(
            auth.authenticate(&bearer(&rotated)).await,
            Ok("fay".to_owned())
        );
        assert_eq!(server.fetches(), 2);

        // A failed fetch keeps the keys there are.
        server.serve(None);
        auth.refresh(true).await;
        assert_eq!(server.fetches(), 3);
        assert_eq!(
            auth.authenticate(&bearer(&first)).await,
            Ok("fay".to_owned())
        );
        assert_eq!(
            auth.authenticate(&bearer(&rotated)).await,
            Ok("fay".to_owned())
        );
    }

    #[tokio::test]
    async fn an_unreachable_jwks_url_refuses_tokens_without_failing() {
        let url = "http://127.0.0.1:9/jwks.json".to_owned();
        let auth = Arc::new(
            Authenticator::from_config(&jwks_config(None, Some(url)), "f", &[], &env)
                .unwrap()
                .unwrap(),
        );
        auth.start().await;
        let token = signed(
            &claims("g", in_ten_minutes()),
            Algorithm::ES256,
            Some("es-1"),
            &es_a(),
        );
        assert_eq!(
            auth.authenticate(&bearer(&token)).await,
            Err("the token's key is not known")
        );
    }

    // ---- Role access ----

    #[test]
    fn paths_belong_to_roles() {
        let served = ["rev".to_owned(), "open".to_owned()];
        for (path, role) in [
            ("/", Some("front")),
            ("/message:send", Some("front")),
            ("/tasks/t1", Some("front")),
            ("/t1/tasks", Some("front")),
            ("/extendedAgentCard", Some("front")),
            ("/agents/rev", Some("rev")),
            ("/agents/rev/", Some("rev")),
            ("/agents/rev/message:send", Some("rev")),
            ("/agents/rev/t1/tasks", Some("rev")),
            // Not a served role: the front agent, with the tenant `agents`.
            ("/agents/tasks", Some("front")),
            ("/agents/message:send", Some("front")),
            ("/agents/ghost/tasks", Some("front")),
            ("//agents/rev/tasks", Some("front")),
            ("/agents", None),
            ("/agents/", None),
            ("/status", None),
            ("/healthz", None),
        ] {
            assert_eq!(role_of(path, "front", &served), role, "{path}");
        }
    }

    fn restricted() -> Authenticator {
        let mut config = hs256_config();
        config.roles = BTreeMap::from([
            ("rev".to_owned(), vec!["bob".to_owned()]),
            ("front".to_owned(), vec!["carol".to_owned()]),
            ("open".to_owned(), vec!["*".to_owned()]),
        ]);
        let served = ["rev", "open", "other"].map(str::to_owned);
        Authenticator::from_config(&config, "front", &served, &env)
            .unwrap()
            .unwrap()
    }

    #[test]
    fn restricted_roles_admit_only_their_principals() {
        let auth = restricted();
        assert!(auth.check_access("/agents/rev/message:send", "bob").is_ok());
        assert!(
            auth.check_access("/agents/rev/message:send", "alice")
                .is_err()
        );
        assert!(auth.check_access("/agents/open/tasks", "alice").is_ok());
        assert!(auth.check_access("/agents/other/tasks", "alice").is_ok());
        assert!(auth.check_access("/", "alice").is_err());
        assert!(auth.check_access("/tasks", "carol").is_ok());
        assert!(auth.check_access("/status", "alice").is_ok());
        // A tenant path under /agents/ reaches the front agent, and so its role's rule.
        assert!(auth.check_access("/agents/tasks", "alice").is_err());
        assert!(auth.check_access("/agents/message:send", "carol").is_ok());
    }

    #[tokio::test]
    async fn a_forbidden_role_is_403_in_the_bindings_shape() {
        let reached = Arc::new(AtomicUsize::new(0));
        let counter = reached.clone();
        let handler = move || {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                "ok"
            }
        };
        let app = axum::Router::new()
            .route("/agents/rev", axum::routing::post(handler.clone()))
            .route("/agents/rev/tasks", axum::routing::get(handler.clone()))
            .route("/agents/other/tasks", axum::routing::get(handler))
            .layer(axum::middleware::from_fn_with_state(
                Arc::new(restricted()),
                require,
            ));
        let call = |method: Method, path: &str, key: &str| {
            axum::http::Request::builder()
                .method(method)
                .uri(path)
                .header("x-api-key", key)
                .body(axum::body::Body::empty())
                .unwrap()
        };
        for (request, jsonrpc) in [
            (call(Method::POST, "/agents/rev", "k-123"), true),
            (call(Method::GET, "/agents/rev/tasks", "k-123"), false),
        ] {
            let response = app.clone().oneshot(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::FORBIDDEN);
            assert!(response.headers().get(header::WWW_AUTHENTICATE).is_none());
            let body = axum::body::to_bytes(response.into_body(), 1 << 16)
                .await
                .unwrap();
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let message = body["error"]["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("`alice` may not use the role `rev`"),
                "{body}"
            );
            if jsonrpc {
                assert_eq!(body["jsonrpc"], "2.0", "{body}");
            } else {
                assert_eq!(body["error"]["status"], "PERMISSION_DENIED", "{body}");
            }
        }
        assert_eq!(reached.load(Ordering::SeqCst), 0);
        let response = app
            .clone()
            .oneshot(call(Method::GET, "/agents/other/tasks", "k-123"))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let response = app
            .oneshot(call(Method::GET, "/agents/rev/tasks", "wrong"))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(reached.load(Ordering::SeqCst), 1);
    }
}
