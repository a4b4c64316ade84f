//! Inbound authentication: API keys and JWT bearer tokens, checked in front of every A2A
//! operation. The public cards, `/agents`, `/healthz` and `/readyz` stay public. A caller that
//! passes gets its principal attached to the request as [`Principal`], which the transport
//! router carries into `CallContext::principal`.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{Context, bail};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use mew_cards::{
    ApiKeySecurityScheme, HttpAuthSecurityScheme, SecurityRequirement, SecurityScheme, StringList,
};
use mew_transport::Principal;
use serde::Deserialize;
use serde_json::json;

use crate::config::AuthConfig;

/// The header an API key may come in (it may also come as a bearer token).
pub(crate) const API_KEY_HEADER: &str = "X-API-Key";
/// The card's name of the API key scheme.
const API_KEY_SCHEME: &str = "apiKey";
/// The card's name of the JWT bearer scheme.
const BEARER_SCHEME: &str = "bearer";

/// The configured schemes, with their secrets read from the environment.
pub(crate) struct Authenticator {
    /// Each key's value and the principal it authenticates.
    keys: Vec<(String, String)>,
    /// The JWT secret and the checks made on every token.
    jwt: Option<(DecodingKey, Validation)>,
}

/// The claims Mew reads from a JWT; `iss`, `aud` and `exp` are checked by the validation.
#[derive(Deserialize)]
struct Claims {
    sub: String,
}

impl Authenticator {
    /// The authenticator for `config`, or `None` when no scheme is configured. Fails when an
    /// environment variable named in the configuration is unset or empty.
    pub(crate) fn from_config(
        config: &AuthConfig,
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
            Some(jwt) => {
                let value = secret(&jwt.secret_env, "auth.jwt.secret_env: the HS256 secret")?;
                let algorithms = jwt
                    .algorithms
                    .iter()
                    .map(|name| name.parse::<Algorithm>())
                    .collect::<Result<Vec<_>, _>>()
                    .context("auth.jwt.algorithms")?;
                let mut validation = Validation::new(Algorithm::HS256);
                validation.algorithms = algorithms;
                validation.set_issuer(&[&jwt.issuer]);
                validation.set_audience(&[&jwt.audience]);
                validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
                validation.validate_exp = true;
                let key = DecodingKey::from_secret(value.as_bytes())
                    .context("auth.jwt.secret_env: the HS256 secret")?;
                Some((key, validation))
            }
        };
        Ok(Some(Self { keys, jwt }))
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

    /// The principal the request's credentials name, or why there is none.
    fn authenticate(&self, headers: &HeaderMap) -> Result<String, &'static str> {
        if let Some(key) = headers.get(API_KEY_HEADER) {
            let key = key.to_str().map_err(|_| "the API key is not valid")?;
            return self.api_key(key).ok_or("the API key is not valid");
        }
        let Some(authorization) = headers.get(header::AUTHORIZATION) else {
            return Err("credentials are required");
        };
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
        let Some((key, validation)) = &self.jwt else {
            return Err("the bearer token is not valid");
        };
        match jsonwebtoken::decode::<Claims>(token, key, validation) {
            Ok(data) if !data.claims.sub.is_empty() => Ok(data.claims.sub),
            Ok(_) => Err("the token has no subject"),
            Err(error) => match error.kind() {
                jsonwebtoken::errors::ErrorKind::ExpiredSignature => Err("the token has expired"),
                _ => Err("the bearer token is not valid"),
            },
        }
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
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether `path` is served without credentials: the public cards (the node's and each
/// role's), the list of role cards, and the health and readiness probes.
fn is_public(method: &Method, path: &str) -> bool {
    if method != Method::GET && method != Method::HEAD {
        return false;
    }
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    matches!(
        segments.as_slice(),
        ["healthz" | "readyz" | "agents"]
            | [".well-known", "agent-card.json"]
            | ["agents", _, ".well-known", "agent-card.json"]
    )
}

/// Whether `path` is a JSON-RPC endpoint (the node's root or a role's).
fn is_jsonrpc(method: &Method, path: &str) -> bool {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    method == Method::POST && matches!(segments.as_slice(), [""] | ["agents", _])
}

/// The middleware: lets public paths through, authenticates everything else.
pub(crate) async fn require(
    State(auth): State<Arc<Authenticator>>,
    mut request: Request,
    next: Next,
) -> Response {
    if is_public(request.method(), request.uri().path()) {
        return next.run(request).await;
    }
    match auth.authenticate(request.headers()) {
        Ok(principal) => {
            request.extensions_mut().insert(Principal(principal));
            next.run(request).await
        }
        Err(reason) => unauthorized(is_jsonrpc(request.method(), request.uri().path()), reason),
    }
}

/// 401 with `WWW-Authenticate` and an error body in the binding's shape.
fn unauthorized(jsonrpc: bool, reason: &str) -> Response {
    let message = format!("unauthenticated: {reason}");
    let body = if jsonrpc {
        json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": { "code": -32600, "message": message },
        })
    } else {
        json!({
            "error": { "code": 401, "status": "UNAUTHENTICATED", "message": message },
        })
    };
    let mut response = (
        StatusCode::UNAUTHORIZED,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"mew\""),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_cards_and_probes_are_public() {
        for path in [
            "/.well-known/agent-card.json",
            "/agents/coder/.well-known/agent-card.json",
            "/healthz",
            "/readyz",
            "/agents",
        ] {
            assert!(is_public(&Method::GET, path), "{path}");
        }
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
        ] {
            assert!(!is_public(&Method::GET, path), "{path}");
        }
        assert!(!is_public(&Method::POST, "/.well-known/agent-card.json"));
    }

    fn authenticator() -> Authenticator {
        let config = AuthConfig {
            api_keys: vec![crate::config::ApiKeyConfig {
                name: "alice".to_owned(),
                key_env: "KEY".to_owned(),
            }],
            jwt: Some(crate::config::JwtConfig {
                secret_env: "SECRET".to_owned(),
                issuer: "iss".to_owned(),
                audience: "aud".to_owned(),
                algorithms: vec!["HS256".to_owned()],
            }),
            allow_unauthenticated: false,
        };
        let env = |name: &str| match name {
            "KEY" => Some("k-123".to_owned()),
            "SECRET" => Some("s-456".to_owned()),
            _ => None,
        };
        Authenticator::from_config(&config, &env).unwrap().unwrap()
    }

    fn jwt(claims: serde_json::Value, secret: &str, algorithm: Algorithm) -> String {
        jsonwebtoken::encode(
            &jsonwebtoken::Header::new(algorithm),
            &claims,
            &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()).unwrap(),
        )
        .unwrap()
    }

    fn check(name: &'static str, value: &str) -> Result<String, &'static str> {
        let mut headers = HeaderMap::new();
        headers.insert(name, HeaderValue::from_str(value).unwrap());
        authenticator().authenticate(&headers)
    }

    #[test]
    fn api_keys_and_tokens_name_the_principal() {
        let exp = jsonwebtoken::get_current_timestamp() + 600;
        let good = jwt(
            json!({"sub": "carol", "iss": "iss", "aud": "aud", "exp": exp}),
            "s-456",
            Algorithm::HS256,
        );
        assert_eq!(check("x-api-key", "k-123"), Ok("alice".to_owned()));
        assert_eq!(
            check("authorization", "Bearer k-123"),
            Ok("alice".to_owned())
        );
        assert_eq!(
            check("authorization", &format!("Bearer {good}")),
            Ok("carol".to_owned())
        );
        assert!(authenticator().authenticate(&HeaderMap::new()).is_err());
        assert!(check("x-api-key", "k-12").is_err());
        assert!(check("authorization", "Basic k-123").is_err());
    }

    #[test]
    fn bad_tokens_are_refused() {
        let now = jsonwebtoken::get_current_timestamp();
        for (claims, secret, algorithm) in [
            (
                json!({"sub": "c", "iss": "iss", "aud": "aud", "exp": now - 3600}),
                "s-456",
                Algorithm::HS256,
            ),
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
            (
                json!({"sub": "c", "iss": "iss", "aud": "aud", "exp": now + 600}),
                "wrong",
                Algorithm::HS256,
            ),
            (
                json!({"sub": "c", "iss": "iss", "aud": "aud", "exp": now + 600}),
                "s-456",
                Algorithm::HS384,
            ),
        ] {
            let token = jwt(claims.clone(), secret, algorithm);
            assert!(
                check("authorization", &format!("Bearer {token}")).is_err(),
                "{claims} {secret} {algorithm:?}"
            );
        }
    }

    #[test]
    fn a_missing_secret_is_an_error() {
        let config = AuthConfig {
            api_keys: vec![crate::config::ApiKeyConfig {
                name: "alice".to_owned(),
                key_env: "KEY".to_owned(),
            }],
            ..AuthConfig::default()
        };
        let error = Authenticator::from_config(&config, &|_| None)
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
}
