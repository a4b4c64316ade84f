//! DPoP (RFC 9449): access tokens bound to a key of Mew's, so a token that leaks is of no use
//! without the key.
//!
//! The client holds an ES256 (P-256) key pair ([`DpopKey`]) and signs a short JWT, a *proof*,
//! for every request that uses or asks for a token: it names the request's method and URL, and,
//! with an access token, the token's hash. The authorization server binds the tokens it issues
//! to the key's thumbprint; the resource server (the MCP server) takes a token only with a
//! proof made by that key.
//!
//! - Token requests (including refreshes) go through [`DpopOAuthHttp`], a wrapper around the
//!   SDK's OAuth HTTP client that adds the proof.
//! - The MCP requests themselves carry `Authorization: DPoP <token>` and a proof with the
//!   token's hash ([`DpopKey::request_headers`], [`DpopState::request_headers`]).
//!
//! # Nonces
//!
//! A server may insist that proofs carry a nonce it chose (RFC 9449 §8, §9). It says so with
//! an error and gives the nonce in its `DPoP-Nonce` response header: the authorization server
//! answers a token request with `400 {"error":"use_dpop_nonce"}`
//! ([`token_error_asks_for_nonce`]), the resource server answers with `401` and
//! `WWW-Authenticate: DPoP error="use_dpop_nonce"` ([`asks_for_nonce`]). The client keeps the
//! last nonce each server gave and sends the request once more with a proof that carries it.
//! [`DpopOAuthHttp`] does this by itself for the authorization server; for the resource server,
//! [`resource_nonce`] learns the nonce and [`DpopState`] keeps it for the transport.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::digest::{SHA256, digest};
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use rmcp::transport::auth::{
    OAuthHttpClient, OAuthHttpClientError, OAuthHttpClientFuture, OAuthHttpRequest,
};

/// The request header that carries a proof.
pub(crate) const DPOP: HeaderName = HeaderName::from_static("dpop");
/// The response header that carries a server's nonce.
pub(crate) const DPOP_NONCE: HeaderName = HeaderName::from_static("dpop-nonce");
/// The error code of a server that wants a (new) nonce in the proof.
pub(crate) const USE_DPOP_NONCE: &str = "use_dpop_nonce";

/// The longest nonce kept: a server's nonce is a short opaque string, and one that is not
/// would be copied into every proof.
const MAX_NONCE_LEN: usize = 512;
/// The most authorization servers (origins) whose nonces one [`DpopOAuthHttp`] keeps. One
/// authorization manager talks to very few; the bound only keeps a misbehaving one from
/// growing the map.
const MAX_NONCE_ORIGINS: usize = 32;
/// How long the resent token request may take when the SDK names no timeout (the SDK's own
/// default).
const RETRY_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest answer to a resent token request that is read (the SDK's own bound).
const MAX_RETRY_RESPONSE_BYTES: usize = 1024 * 1024;
/// The JSON-RPC request [`resource_nonce`] sends: a `ping` changes nothing on the server.
const NONCE_PING: &str = r#"{"jsonrpc":"2.0","id":"dpop-nonce","method":"ping"}"#;

/// An HTTP request as rmcp's OAuth client hands it over (`oauth2::HttpRequest`).
type HttpRequest = http::Request<Vec<u8>>;
/// An HTTP response as rmcp's OAuth client takes it back (`oauth2::HttpResponse`).
type HttpResponse = http::Response<Vec<u8>>;

/// The DPoP key pair: ES256, that is ECDSA on P-256 with SHA-256.
///
/// The key must live as long as the tokens bound to it (a refresh token issued to a public
/// client is bound to it too, RFC 9449 §5), so the caller keeps [`Self::pkcs8`] with the
/// tokens, sealed, and reads it back with [`Self::from_pkcs8`].
pub(crate) struct DpopKey {
    /// The key pair, which signs.
    pair: EcdsaKeyPair,
    /// The private key as PKCS#8 v1 DER, for the caller to store.
    pkcs8: Vec<u8>,
    /// The public point's x coordinate, base64url without padding (as the JWK has it).
    x: String,
    /// The public point's y coordinate, base64url without padding.
    y: String,
}

impl std::fmt::Debug for DpopKey {
    // Only the public key's thumbprint: the private key stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpopKey")
            .field("thumbprint", &self.thumbprint())
            .finish_non_exhaustive()
    }
}

impl DpopKey {
    /// A new random key pair.
    pub(crate) fn generate() -> Result<Self, String> {
        let document =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
                .map_err(|_| "cannot generate a DPoP key".to_owned())?;
        Self::from_pkcs8(document.as_ref())
    }

    /// The key pair stored as `der` (PKCS#8 v1, as [`Self::pkcs8`] gives it); an error when it
    /// is not a P-256 private key.
    pub(crate) fn from_pkcs8(der: &[u8]) -> Result<Self, String> {
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der)
            .map_err(|err| format!("the DPoP key is not a P-256 PKCS#8 private key: {err}"))?;
        // The public key is the uncompressed SEC 1 point: 0x04, then x and y, 32 bytes each.
        let (x, y) = match pair.public_key().as_ref().split_first() {
            Some((4, coordinates)) if coordinates.len() == 64 => coordinates.split_at(32),
            _ => {
                return Err(
                    "the DPoP key's public point is not an uncompressed P-256 point".into(),
                );
            }
        };
        let (x, y) = (URL_SAFE_NO_PAD.encode(x), URL_SAFE_NO_PAD.encode(y));
        Ok(Self {
            pair,
            pkcs8: der.to_vec(),
            x,
            y,
        })
    }

    /// The private key as PKCS#8 v1 DER, to be stored (sealed) with the tokens bound to it.
    pub(crate) fn pkcs8(&self) -> &[u8] {
        &self.pkcs8
    }

    /// The public key as a JWK (`kty`, `crv`, `x`, `y`; never the private `d`), as a proof's
    /// header carries it.
    pub(crate) fn jwk(&self) -> serde_json::Value {
        serde_json::json!({
            "kty": "EC",
            "crv": "P-256",
            "x": self.x,
            "y": self.y,
        })
    }

    /// The public key's JWK thumbprint (RFC 7638, SHA-256, base64url without padding): what
    /// the authorization server binds tokens to (`cnf.jkt`), and what an authorization request
    /// may name as `dpop_jkt` (RFC 9449 §10).
    pub(crate) fn thumbprint(&self) -> String {
        thumbprint_of(&self.x, &self.y)
    }

    /// A DPoP proof for a `method` request to `url`: a JWT signed with this key, whose header
    /// carries the public key and whose claims name the request (`htm`, `htu`: the URL without
    /// its query and fragment, RFC 9449 §4.2), the time (`iat`), a fresh `jti`, the hash of
    /// `access_token` (`ath`) when the request presents one, and `nonce` when the server gave
    /// one.
    ///
    /// The JWS is put together here rather than with jsonwebtoken's `encode`: the key pair is
    /// aws-lc-rs's anyway (jsonwebtoken neither generates keys nor holds one that can also give
    /// its public point), so it signs directly, and the header is exactly the three members
    /// RFC 9449 asks for. A compact JWS is three base64url parts joined by dots.
    pub(crate) fn proof(
        &self,
        method: &str,
        url: &str,
        access_token: Option<&str>,
        nonce: Option<&str>,
    ) -> Result<String, String> {
        let iat = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_err(|_| "the system clock is before 1970; cannot date a DPoP proof".to_owned())?
            .as_secs();
        let header = serde_json::json!({
            "typ": "dpop+jwt",
            "alg": "ES256",
            "jwk": self.jwk(),
        });
        let mut claims = serde_json::Map::new();
        claims.insert("jti".to_owned(), jti()?.into());
        claims.insert("htm".to_owned(), method.into());
        claims.insert("htu".to_owned(), htu(url)?.into());
        claims.insert("iat".to_owned(), iat.into());
        if let Some(token) = access_token {
            claims.insert("ath".to_owned(), ath(token).into());
        }
        if let Some(nonce) = nonce {
            claims.insert("nonce".to_owned(), nonce.into());
        }
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(serde_json::Value::Object(claims).to_string())
        );
        // The FIXED algorithm gives the JWS form of an ES256 signature (RFC 7518 §3.4): r and s
        // as 32 bytes each, not DER.
        let signature = self
            .pair
            .sign(&SystemRandom::new(), signing_input.as_bytes())
            .map_err(|_| "cannot sign a DPoP proof".to_owned())?;
        Ok(format!(
            "{signing_input}.{}",
            URL_SAFE_NO_PAD.encode(signature.as_ref())
        ))
    }

    /// The headers of a request to a resource server (an MCP request) with `access_token`:
    /// `Authorization: DPoP <token>` and `DPoP: <proof>`, the proof naming the token's hash and
    /// `nonce` when the server gave one. A proof is good for one request: make new headers for
    /// every request.
    pub(crate) fn request_headers(
        &self,
        method: &str,
        url: &str,
        access_token: &str,
        nonce: Option<&str>,
    ) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
        let proof = self.proof(method, url, Some(access_token), nonce)?;
        let mut authorization = HeaderValue::from_str(&format!("DPoP {access_token}"))
            .map_err(|_| "the access token cannot be sent in a header".to_owned())?;
        authorization.set_sensitive(true);
        let proof = HeaderValue::from_str(&proof)
            .map_err(|_| "the DPoP proof cannot be sent in a header".to_owned())?;
        Ok(vec![
            (http::header::AUTHORIZATION, authorization),
            (DPOP, proof),
        ])
    }
}

/// The RFC 7638 thumbprint of the P-256 public key with coordinates `x` and `y` (base64url):
/// the SHA-256 of the JWK's required members in lexicographic order, without whitespace.
/// Written out rather than through jsonwebtoken's `Jwk::thumbprint`, which would need the
/// coordinates parsed into its JWK type first and returns an error no P-256 key can cause.
fn thumbprint_of(x: &str, y: &str) -> String {
    let members = format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#);
    URL_SAFE_NO_PAD.encode(digest(&SHA256, members.as_bytes()))
}

/// The `ath` claim of `access_token`: the base64url SHA-256 of its ASCII bytes.
fn ath(access_token: &str) -> String {
    URL_SAFE_NO_PAD.encode(digest(&SHA256, access_token.as_bytes()))
}

/// A fresh `jti`: a random (version 4) UUID, 122 random bits, as unique as RFC 9449 §4.2 asks.
/// Built from aws-lc-rs's random bytes because the workspace's `uuid` has only its `v7`
/// feature (`Uuid::new_v4` needs `v4`); `Builder::from_random_bytes` sets the version and
/// variant bits.
fn jti() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    aws_lc_rs::rand::fill(&mut bytes).map_err(|_| "no randomness for a DPoP proof".to_owned())?;
    Ok(uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .to_string())
}

/// The `htu` claim for `url`: the URL without its query and fragment (RFC 9449 §4.2).
fn htu(url: &str) -> Result<String, String> {
    let mut parsed = reqwest::Url::parse(url)
        .map_err(|err| format!("cannot make a DPoP proof for a URL that does not parse: {err}"))?;
    parsed.set_query(None);
    parsed.set_fragment(None);
    Ok(parsed.into())
}

/// The nonce of a `DPoP-Nonce` header in `headers`, when there is one that can be a nonce:
/// non-empty, at most [`MAX_NONCE_LEN`] characters of RFC 9449's `NQCHAR` (printable ASCII but
/// `"` and `\`).
pub(crate) fn nonce_header(headers: &HeaderMap) -> Option<String> {
    let nonce = headers.get(DPOP_NONCE)?.to_str().ok()?;
    let valid = !nonce.is_empty()
        && nonce.len() <= MAX_NONCE_LEN
        && nonce
            .bytes()
            .all(|byte| matches!(byte, 0x21 | 0x23..=0x5b | 0x5d..=0x7e));
    valid.then(|| nonce.to_owned())
}

/// Whether a token endpoint's answer (`status`, JSON `body`) asks for a DPoP nonce: `400` with
/// `"error": "use_dpop_nonce"` (RFC 9449 §8).
pub(crate) fn token_error_asks_for_nonce(status: StatusCode, body: &[u8]) -> bool {
    status == StatusCode::BAD_REQUEST
        && serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|body| {
                body.get("error")
                    .and_then(|error| error.as_str())
                    .map(|error| error == USE_DPOP_NONCE)
            })
            .unwrap_or(false)
}

/// Whether a resource server's `WWW-Authenticate` header asks for a DPoP nonce: it holds a
/// `DPoP` challenge with `error="use_dpop_nonce"` (RFC 9449 §9).
pub(crate) fn asks_for_nonce(www_authenticate: &str) -> bool {
    challenges(www_authenticate).iter().any(|(scheme, params)| {
        scheme.eq_ignore_ascii_case("dpop")
            && params
                .iter()
                .any(|(name, value)| name.eq_ignore_ascii_case("error") && value == USE_DPOP_NONCE)
    })
}

/// Whether a resource server's `WWW-Authenticate` header offers the `DPoP` scheme: it takes
/// DPoP-bound tokens (RFC 9449 §7.1).
pub(crate) fn offers_dpop(www_authenticate: &str) -> bool {
    challenges(www_authenticate)
        .iter()
        .any(|(scheme, _)| scheme.eq_ignore_ascii_case("dpop"))
}

/// The challenges of a `WWW-Authenticate` header: each one's scheme and `name=value`
/// parameters.
///
/// Parsed here because rmcp's `WWWAuthenticateParams` ignores the challenges' schemes and
/// reads only the first `error=` of the whole header, so in `Bearer error="invalid_token",
/// DPoP error="use_dpop_nonce"` it would see only the Bearer error. This reads the header as
/// RFC 9110 §11.6.1 writes it: challenges of a scheme and its `name=value` parameters (token
/// or quoted string), separated by commas; anything it does not understand is skipped.
fn challenges(www_authenticate: &str) -> Vec<(String, Vec<(String, String)>)> {
    let bytes = www_authenticate.as_bytes();
    let is_tchar = |byte: u8| byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte);
    let skip_spaces = |mut at: usize| {
        while bytes
            .get(at)
            .is_some_and(|byte| *byte == b' ' || *byte == b'\t')
        {
            at += 1;
        }
        at
    };
    let mut found: Vec<(String, Vec<(String, String)>)> = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        at = skip_spaces(at);
        let start = at;
        while bytes.get(at).is_some_and(|byte| is_tchar(*byte)) {
            at += 1;
        }
        // Every byte counted is ASCII, so the slices below fall on character boundaries.
        let token = www_authenticate.get(start..at).unwrap_or_default();
        if token.is_empty() {
            // A comma, or something out of place: step over it.
            at += 1;
            continue;
        }
        let after = skip_spaces(at);
        if bytes.get(after) != Some(&b'=') {
            // A token not followed by `=` starts a new challenge: it is the scheme.
            found.push((token.to_owned(), Vec::new()));
            continue;
        }
        at = skip_spaces(after + 1);
        let value = if bytes.get(at) == Some(&b'"') {
            let mut value = String::new();
            at += 1;
            while let Some(&byte) = bytes.get(at) {
                at += 1;
                match byte {
                    b'"' => break,
                    b'\\' => {
                        if let Some(&escaped) = bytes.get(at) {
                            value.push(char::from(escaped));
                            at += 1;
                        }
                    }
                    _ => value.push(char::from(byte)),
                }
            }
            value
        } else {
            let start = at;
            while bytes.get(at).is_some_and(|byte| is_tchar(*byte)) {
                at += 1;
            }
            www_authenticate
                .get(start..at)
                .unwrap_or_default()
                .to_owned()
        };
        if let Some((_, params)) = found.last_mut() {
            params.push((token.to_owned(), value));
        }
    }
    found
}

/// Whether `request` is a token request (RFC 6749 §3.2: a POST whose form body has a
/// `grant_type`): those get a proof. Client registration (a JSON body), metadata (GET) and
/// the like go as they are.
fn is_token_request(request: &HttpRequest) -> bool {
    request.method() == http::Method::POST
        && std::str::from_utf8(request.body())
            .is_ok_and(|body| body.split('&').any(|pair| pair.starts_with("grant_type=")))
}

/// The origin (`scheme://authority`) of `uri`, which a server's nonce is kept under.
fn origin(uri: &http::Uri) -> String {
    format!(
        "{}://{}",
        uri.scheme_str().unwrap_or_default(),
        uri.authority().map(|a| a.as_str()).unwrap_or_default()
    )
    .to_ascii_lowercase()
}

/// A copy of `request`: rmcp's requests are `http::Request`s, which are not `Clone`.
fn copy(request: &HttpRequest) -> HttpRequest {
    let mut copy = http::Request::new(request.body().clone());
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    copy
}

/// The nonce to send a token request again with, when `response` asks for one: a `400
/// use_dpop_nonce` with a `DPoP-Nonce` header other than `sent` (the nonce the request had;
/// sending the same one again would only be refused again).
fn nonce_to_retry_with(response: &HttpResponse, sent: Option<&str>) -> Option<String> {
    if !token_error_asks_for_nonce(response.status(), response.body()) {
        return None;
    }
    nonce_header(response.headers()).filter(|nonce| Some(nonce.as_str()) != sent)
}

/// rmcp's OAuth HTTP client with DPoP: every token request (authorization code, refresh,
/// client credentials) gets a proof for its method and URL, with the last nonce its
/// authorization server gave. An answer `400 use_dpop_nonce` with a new nonce is kept, and
/// the request sent once more with a proof that carries it. Every `DPoP-Nonce` header of any
/// answer updates the nonce kept for that server. Other requests (metadata, registration) go
/// through `inner` as they are.
///
/// Give it to `AuthorizationManager::new_with_oauth_http_client`.
///
/// The resent request does not go through `inner`: rmcp's `OAuthHttpRequest` has no public
/// constructor and is not `Clone`, so each request the SDK makes can be given to `inner` once
/// only. It goes through a reqwest client of this wrapper's (no redirects, as the SDK's own
/// token requests; bounded as the SDK bounds them; see [`Self::with_retry_client`]) to the URL
/// `inner` just reached.
pub(crate) struct DpopOAuthHttp {
    /// The SDK's client (or another): every request goes through it first.
    inner: Arc<dyn OAuthHttpClient>,
    /// The key that signs the proofs.
    key: Arc<DpopKey>,
    /// Sends a token request again with a nonce.
    retry: reqwest::Client,
    /// The last nonce of each server, by origin.
    nonces: Mutex<HashMap<String, String>>,
}

impl std::fmt::Debug for DpopOAuthHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpopOAuthHttp")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl DpopOAuthHttp {
    /// `inner` with proofs made by `key`; token requests sent again with a nonce go through a
    /// new reqwest client without redirects.
    pub(crate) fn new(inner: Arc<dyn OAuthHttpClient>, key: Arc<DpopKey>) -> Result<Self, String> {
        let retry = reqwest::Client::builder()
            .timeout(RETRY_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|err| format!("cannot make the DPoP HTTP client: {err}"))?;
        Ok(Self {
            inner,
            key,
            retry,
            nonces: Mutex::default(),
        })
    }

    /// Sends token requests again (with a nonce) through `client` instead: one with the
    /// network policy (proxy, resolver, TLS) that `inner` applies. It should not follow
    /// redirects, as the SDK follows none for token requests.
    pub(crate) fn with_retry_client(mut self, client: reqwest::Client) -> Self {
        self.retry = client;
        self
    }

    /// The last nonce the server of `url` gave, if any.
    #[cfg(test)]
    pub(crate) fn nonce_for(&self, url: &str) -> Option<String> {
        let uri: http::Uri = url.parse().ok()?;
        self.nonces().get(&origin(&uri)).cloned()
    }

    /// The nonces, by origin.
    fn nonces(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.nonces.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps the nonce of `response`'s `DPoP-Nonce` header, if it has one, for the server of
    /// `uri`.
    fn keep_nonce(&self, uri: &http::Uri, response: &HttpResponse) {
        let Some(nonce) = nonce_header(response.headers()) else {
            return;
        };
        let origin = origin(uri);
        let mut nonces = self.nonces();
        if nonces.len() >= MAX_NONCE_ORIGINS && !nonces.contains_key(&origin) {
            nonces.clear();
        }
        nonces.insert(origin, nonce);
    }

    /// Adds a proof for `request` to it, carrying `nonce`.
    fn add_proof(&self, request: &mut HttpRequest, nonce: Option<&str>) -> Result<(), String> {
        let proof = self.key.proof(
            request.method().as_str(),
            &request.uri().to_string(),
            None,
            nonce,
        )?;
        let proof = HeaderValue::from_str(&proof)
            .map_err(|_| "the DPoP proof cannot be sent in a header".to_owned())?;
        request.headers_mut().insert(DPOP, proof);
        Ok(())
    }

    /// Sends `request` through [`Self::retry`], bounded by `timeout`, and reads its answer as
    /// the SDK's client would.
    async fn resend(
        &self,
        request: HttpRequest,
        timeout: Option<Duration>,
    ) -> Result<HttpResponse, OAuthHttpClientError> {
        send(&self.retry, request, timeout).await
    }
}

/// Sends `request` through `client`, bounded by `timeout`, and reads its answer (at most
/// [`MAX_RETRY_RESPONSE_BYTES`]) as the SDK's OAuth client does.
async fn send(
    client: &reqwest::Client,
    request: HttpRequest,
    timeout: Option<Duration>,
) -> Result<HttpResponse, OAuthHttpClientError> {
    let mut request = reqwest::Request::try_from(request)?;
    *request.timeout_mut() = Some(timeout.unwrap_or(RETRY_TIMEOUT));
    let mut response = client.execute(request).await?;
    let status = response.status();
    let version = response.version();
    let headers = std::mem::take(response.headers_mut());
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if chunk.len() > MAX_RETRY_RESPONSE_BYTES - body.len() {
            return Err(format!(
                "the authorization server's answer is larger than {MAX_RETRY_RESPONSE_BYTES} \
                 bytes"
            )
            .into());
        }
        body.extend_from_slice(&chunk);
    }
    let mut answer = http::Response::new(body);
    *answer.status_mut() = status;
    *answer.version_mut() = version;
    *answer.headers_mut() = headers;
    Ok(answer)
}

/// The OAuth HTTP client of the DPoP flow of the MCP server at `base_url`: proofs by `key`
/// over a client that keeps the SDK's address rule (see [`Guarded`]).
pub(crate) fn oauth_http(
    base_url: &str,
    key: Arc<DpopKey>,
) -> Result<Arc<dyn OAuthHttpClient>, String> {
    let guarded = Guarded::new(base_url)?;
    let stop = guarded.stop.clone();
    Ok(Arc::new(
        DpopOAuthHttp::new(Arc::new(guarded), key)?.with_retry_client(stop),
    ))
}

/// The most redirects a discovery request follows (reqwest's own default).
const MAX_REDIRECTS: usize = 10;

/// An OAuth HTTP client with the SDK's rule for the addresses of discovered servers: a
/// loopback or private address only when the MCP server's own URL names one (`localhost`, a
/// loopback or private IP), never a link-local or other reserved one.
///
/// Written here because the SDK keeps its own filtering client private: it builds one only
/// inside `AuthorizationManager::new`, and a client that adds proofs must be handed over whole
/// (`AuthorizationManager::new_with_oauth_http_client`).
struct Guarded {
    /// Follows redirects (discovery).
    follow: reqwest::Client,
    /// Follows none (token requests).
    stop: reqwest::Client,
}

impl Guarded {
    fn new(base_url: &str) -> Result<Self, String> {
        let base = reqwest::Url::parse(base_url).map_err(|err| format!("{base_url}: {err}"))?;
        let host = base.host_str().unwrap_or_default();
        let named = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .ok();
        let resolver = Arc::new(AddressRule {
            loopback: host.eq_ignore_ascii_case("localhost")
                || named.is_some_and(|ip| ip.is_loopback()),
            private: named
                .is_some_and(|ip| crate::ssrf::forbidden(ip) == Some("a private address")),
        });
        let client = |policy| {
            reqwest::Client::builder()
                .timeout(RETRY_TIMEOUT)
                .redirect(policy)
                .dns_resolver(resolver.clone())
                .build()
                .map_err(|err| format!("cannot make the OAuth HTTP client: {err}"))
        };
        Ok(Self {
            follow: client(reqwest::redirect::Policy::limited(MAX_REDIRECTS))?,
            stop: client(reqwest::redirect::Policy::none())?,
        })
    }
}

impl OAuthHttpClient for Guarded {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            let client = match request.redirect_policy {
                rmcp::transport::auth::OAuthHttpRedirectPolicy::Stop => &self.stop,
                _ => &self.follow,
            };
            send(client, request.request, request.timeout).await
        })
    }
}

/// Which addresses a name may resolve to (see [`Guarded`]).
struct AddressRule {
    /// The server's URL names a loopback address (or `localhost`).
    loopback: bool,
    /// It names a private address.
    private: bool,
}

impl AddressRule {
    fn allows(&self, ip: std::net::IpAddr) -> bool {
        match crate::ssrf::forbidden(ip) {
            None => true,
            Some("a loopback address") => self.loopback,
            Some("a private address") => self.private || self.loopback,
            Some(_) => false,
        }
    }
}

impl reqwest::dns::Resolve for AddressRule {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let loopback = self.loopback;
        let private = self.private;
        Box::pin(async move {
            let rule = AddressRule { loopback, private };
            let host = name.as_str().to_owned();
            let found: Vec<std::net::SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|addr| rule.allows(addr.ip()))
                .collect();
            if found.is_empty() {
                return Err(format!(
                    "{host} has no address this MCP server's authorization may use (a loopback \
                     or private one needs a server at such an address)"
                )
                .into());
            }
            let addrs: reqwest::dns::Addrs = Box::new(found.into_iter());
            Ok(addrs)
        })
    }
}

impl OAuthHttpClient for DpopOAuthHttp {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            let mut request = request;
            let uri = request.request.uri().clone();
            if !is_token_request(&request.request) {
                let response = self.inner.execute(request).await?;
                self.keep_nonce(&uri, &response);
                return Ok(response);
            }
            let timeout = request.timeout;
            let sent = self.nonces().get(&origin(&uri)).cloned();
            let mut again = copy(&request.request);
            self.add_proof(&mut request.request, sent.as_deref())?;
            let response = self.inner.execute(request).await?;
            self.keep_nonce(&uri, &response);
            let Some(nonce) = nonce_to_retry_with(&response, sent.as_deref()) else {
                return Ok(response);
            };
            tracing::debug!(
                "the authorization server at {} asks for a DPoP nonce; sending the token \
                 request again with it",
                origin(&uri)
            );
            self.add_proof(&mut again, Some(&nonce))?;
            let response = self.resend(again, timeout).await?;
            self.keep_nonce(&uri, &response);
            Ok(response)
        })
    }
}

/// The nonce a resource server (the MCP server at `url`) wants in proofs, learned with one
/// request: a JSON-RPC `ping` with `access_token` and a proof without a nonce (and the session
/// `session_id`, when there is one). The nonce is the `DPoP-Nonce` header of a `401` whose
/// `WWW-Authenticate` asks for one ([`asks_for_nonce`]); `None` for any other answer, or none.
///
/// A request of its own, because the SDK's Streamable HTTP client reports a 401's
/// `WWW-Authenticate` header (so the transport can tell that a nonce is wanted) but not its
/// `DPoP-Nonce` header (so it cannot tell which). A `ping` has no effect on the server, so
/// sending it (even in the session) changes nothing there.
pub(crate) async fn resource_nonce(
    client: &reqwest::Client,
    url: &str,
    key: &DpopKey,
    access_token: &str,
    session_id: Option<&str>,
) -> Option<String> {
    let headers = match key.request_headers("POST", url, access_token, None) {
        Ok(headers) => headers,
        Err(err) => {
            tracing::debug!("cannot ask {url} for its DPoP nonce: {err}");
            return None;
        }
    };
    let mut request = client
        .post(url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json, text/event-stream")
        .body(NONCE_PING);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    if let Some(session_id) = session_id {
        request = request.header("mcp-session-id", session_id);
    }
    let response = match request.send().await {
        Ok(response) => response,
        Err(err) => {
            tracing::debug!(
                "cannot ask {url} for its DPoP nonce: {}",
                super::connect::chain(&err)
            );
            return None;
        }
    };
    if response.status() != StatusCode::UNAUTHORIZED {
        return None;
    }
    let asks = response
        .headers()
        .get_all(http::header::WWW_AUTHENTICATE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(asks_for_nonce);
    if asks {
        nonce_header(response.headers())
    } else {
        None
    }
}

/// The DPoP key of one connection and the nonce its resource server wants, shared by the
/// transport's requests.
#[derive(Debug)]
pub(crate) struct DpopState {
    /// The key that signs the proofs (the one the tokens are bound to).
    key: Arc<DpopKey>,
    /// The last nonce the resource server asked for.
    resource_nonce: Mutex<Option<String>>,
}

impl DpopState {
    /// The state of a connection whose tokens are bound to `key`; no nonce yet.
    pub(crate) fn new(key: Arc<DpopKey>) -> Self {
        Self {
            key,
            resource_nonce: Mutex::new(None),
        }
    }

    /// The key.
    #[cfg(test)]
    pub(crate) fn key(&self) -> &Arc<DpopKey> {
        &self.key
    }

    /// The last nonce the resource server asked for.
    pub(crate) fn resource_nonce(&self) -> Option<String> {
        self.nonce_slot().clone()
    }

    /// Keeps `nonce` as the resource server's.
    pub(crate) fn set_resource_nonce(&self, nonce: Option<String>) {
        *self.nonce_slot() = nonce;
    }

    /// The nonce, locked.
    fn nonce_slot(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.resource_nonce
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// [`DpopKey::request_headers`] with the kept nonce.
    pub(crate) fn request_headers(
        &self,
        method: &str,
        url: &str,
        access_token: &str,
    ) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
        let nonce = self.resource_nonce();
        self.key
            .request_headers(method, url, access_token, nonce.as_deref())
    }

    /// Learns the resource server's nonce ([`resource_nonce`]) and keeps it; `None` (and the
    /// kept nonce unchanged) when the server gave none.
    pub(crate) async fn learn_resource_nonce(
        &self,
        client: &reqwest::Client,
        url: &str,
        access_token: &str,
        session_id: Option<&str>,
    ) -> Option<String> {
        let nonce = resource_nonce(client, url, &self.key, access_token, session_id).await?;
        self.set_resource_nonce(Some(nonce.clone()));
        Some(nonce)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::response::IntoResponse as _;
    use jsonwebtoken::jwk::Jwk;
    use jsonwebtoken::{Algorithm, DecodingKey, Validation};
    use rmcp::transport::auth::{
        AuthorizationManager, AuthorizationMetadata, CredentialStore as _, InMemoryCredentialStore,
        OAuthClientConfig, StoredCredentials, default_oauth_http_client,
    };

    use super::*;

    /// The parts of a proof: its header as sent, and its claims once its signature checked
    /// out (by jsonwebtoken, against the JWK of its own header).
    fn verified(proof: &str) -> (serde_json::Value, serde_json::Value) {
        let parts: Vec<&str> = proof.split('.').collect();
        assert_eq!(parts.len(), 3, "a compact JWS: {proof}");
        let header: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
        assert_eq!(
            URL_SAFE_NO_PAD.decode(parts[2]).unwrap().len(),
            64,
            "an ES256 signature in JWS is r||s, 64 bytes, not DER"
        );
        let jwk: Jwk = serde_json::from_value(header["jwk"].clone()).unwrap();
        let key = DecodingKey::from_jwk(&jwk).unwrap();
        let mut validation = Validation::new(Algorithm::ES256);
        validation.required_spec_claims.clear();
        validation.validate_exp = false;
        validation.validate_aud = false;
        let claims = jsonwebtoken::decode::<serde_json::Value>(proof, &key, &validation)
            .unwrap()
            .claims;
        (header, claims)
    }

    /// The SHA-256 of `text`, base64url, computed here for the tests.
    fn sha256_b64(text: &str) -> String {
        URL_SAFE_NO_PAD.encode(digest(&SHA256, text.as_bytes()))
    }

    fn now() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    #[test]
    fn a_proof_is_an_es256_jwt_that_names_the_request_and_verifies_with_its_jwk() {
        let key = DpopKey::generate().unwrap();
        let url = "https://MCP.example.com:443/mcp/x?token=secret#frag";
        let proof = key
            .proof("POST", url, Some("access-token-1"), Some("nonce-1"))
            .unwrap();
        let (header, claims) = verified(&proof);

        assert_eq!(
            header,
            serde_json::json!({"typ": "dpop+jwt", "alg": "ES256", "jwk": key.jwk()})
        );
        let jwk = header["jwk"].as_object().unwrap();
        let mut members: Vec<&str> = jwk.keys().map(String::as_str).collect();
        members.sort_unstable();
        assert_eq!(members, ["crv", "kty", "x", "y"], "no private `d`");
        assert_eq!(jwk["kty"], "EC");
        assert_eq!(jwk["crv"], "P-256");
        for coordinate in ["x", "y"] {
            let bytes = URL_SAFE_NO_PAD
                .decode(jwk[coordinate].as_str().unwrap())
                .unwrap();
            assert_eq!(bytes.len(), 32);
        }

        let claims = claims.as_object().unwrap();
        let mut names: Vec<&str> = claims.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["ath", "htm", "htu", "iat", "jti", "nonce"]);
        assert_eq!(claims["htm"], "POST");
        // Without query and fragment; the URL's normal form (host in lower case, no default
        // port), which servers compare with (RFC 9449 §4.3).
        assert_eq!(claims["htu"], "https://mcp.example.com/mcp/x");
        assert_eq!(claims["ath"], sha256_b64("access-token-1"));
        assert_eq!(claims["nonce"], "nonce-1");
        let iat = claims["iat"].as_u64().unwrap();
        assert!(iat.abs_diff(now()) <= 5, "iat {iat} is now");
        let jti = uuid::Uuid::parse_str(claims["jti"].as_str().unwrap()).unwrap();
        assert_eq!(jti.get_version_num(), 4);

        // Without a token and a nonce: neither claim; and every proof has its own jti.
        let other = key
            .proof("GET", "http://127.0.0.1:8080/mcp", None, None)
            .unwrap();
        let (_, other) = verified(&other);
        assert!(other.get("ath").is_none() && other.get("nonce").is_none());
        assert_eq!(other["htm"], "GET");
        assert_eq!(other["htu"], "http://127.0.0.1:8080/mcp");
        assert_ne!(other["jti"], claims["jti"]);

        assert!(key.proof("POST", "not a url", None, None).is_err());
    }

    #[test]
    fn the_thumbprint_is_rfc_7638s() {
        let key = DpopKey::generate().unwrap();
        let jwk = key.jwk();
        // The required members, in lexicographic order, no whitespace.
        let members = format!(
            r#"{{"crv":"P-256","kty":"EC","x":"{}","y":"{}"}}"#,
            jwk["x"].as_str().unwrap(),
            jwk["y"].as_str().unwrap()
        );
        assert_eq!(key.thumbprint(), sha256_b64(&members));
        // jsonwebtoken's own implementation agrees.
        let parsed: Jwk = serde_json::from_value(jwk).unwrap();
        assert_eq!(
            key.thumbprint(),
            parsed
                .thumbprint(jsonwebtoken::jwk::ThumbprintHash::SHA256)
                .unwrap()
        );
        assert!(!format!("{key:?}").contains(&format!("{:?}", key.pkcs8())));
    }

    #[test]
    fn rfc_9449s_examples() {
        // §6.1: the example key and the `jkt` of the token bound to it.
        assert_eq!(
            thumbprint_of(
                "l8tFrhx-34tV3hRICRDY9zCkDlpBhF42UQUfWVAWBFs",
                "9VE4jf_Ok_o64zbTTlcuNJajHmt6v9TDVrU0CdvGRDA"
            ),
            "0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I"
        );
        // §7.1: the example access token and its `ath`.
        assert_eq!(
            ath("Kz~8mXK1EalYznwH-LC-1fBAo.4Ljp~zsPE_NeO.gxU"),
            "fUHyO2r2Z3DZ53EsNrWBb0xWXoaNy59IiKCAqksmQEo"
        );
    }

    #[test]
    fn a_stored_key_reads_back_as_the_same_key() {
        let key = DpopKey::generate().unwrap();
        let again = DpopKey::from_pkcs8(key.pkcs8()).unwrap();
        assert_eq!(again.jwk(), key.jwk());
        assert_eq!(again.thumbprint(), key.thumbprint());
        assert_eq!(again.pkcs8(), key.pkcs8());
        // What the stored key signs verifies with the first key's public key.
        let proof = again
            .proof("POST", "https://as.example/token", None, None)
            .unwrap();
        assert_eq!(verified(&proof).0["jwk"], key.jwk());
        // Two keys are two keys.
        assert_ne!(DpopKey::generate().unwrap().thumbprint(), key.thumbprint());

        assert!(DpopKey::from_pkcs8(b"not a key").is_err());
        let p384 = EcdsaKeyPair::generate_pkcs8(
            &aws_lc_rs::signature::ECDSA_P384_SHA384_FIXED_SIGNING,
            &SystemRandom::new(),
        )
        .unwrap();
        let err = DpopKey::from_pkcs8(p384.as_ref()).unwrap_err();
        assert!(err.contains("P-256"), "{err}");
    }

    #[test]
    fn resource_requests_carry_the_token_and_a_proof_of_it() {
        let state = DpopState::new(Arc::new(DpopKey::generate().unwrap()));
        let url = "https://mcp.example.com/mcp";
        let find = |headers: &[(HeaderName, HeaderValue)], name: &HeaderName| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.to_str().unwrap().to_owned())
                .unwrap()
        };

        let headers = state.request_headers("POST", url, "at-1").unwrap();
        assert_eq!(headers.len(), 2);
        assert_eq!(find(&headers, &http::header::AUTHORIZATION), "DPoP at-1");
        let (header, claims) = verified(&find(&headers, &DPOP));
        assert_eq!(header["jwk"], state.key().jwk());
        assert_eq!(claims["ath"], sha256_b64("at-1"));
        assert_eq!(claims["htu"], url);
        assert!(claims.get("nonce").is_none());

        state.set_resource_nonce(Some("rs-9".to_owned()));
        assert_eq!(state.resource_nonce().as_deref(), Some("rs-9"));
        let headers = state.request_headers("GET", url, "at-1").unwrap();
        let (_, claims) = verified(&find(&headers, &DPOP));
        assert_eq!(claims["nonce"], "rs-9");
        assert_eq!(claims["htm"], "GET");

        // A token that cannot be a header value is an error, not a panic.
        assert!(state.request_headers("POST", url, "bad\ntoken").is_err());
    }

    #[test]
    fn only_a_dpop_challenge_with_use_dpop_nonce_asks_for_a_nonce() {
        for asks in [
            r#"DPoP error="use_dpop_nonce", error_description="Resource server requires nonce in DPoP proof""#,
            r#"DPoP error=use_dpop_nonce"#,
            r#"dpop algs="ES256 PS256", error = "use_dpop_nonce""#,
            r#"Bearer realm="mcp", error="invalid_token", DPoP algs="ES256", error="use_dpop_nonce""#,
            r#"Basic realm="a\"b", DPoP error="use_dpop_nonce""#,
            // What is not understood (here bytes outside ASCII) is stepped over.
            "DPoP ä error=\"use_dpop_nonce\"ä",
        ] {
            assert!(asks_for_nonce(asks), "{asks}");
        }
        for not in [
            "",
            "DPoP",
            r#"Bearer error="use_dpop_nonce""#,
            r#"DPoP error="invalid_token", error_description="use_dpop_nonce""#,
            r#"DPoP error_description="error=use_dpop_nonce""#,
            r#"DPoP error="use_dpop_nonce_not""#,
            r#"DPoP error=""#,
            "DPoP error=",
            "=\"\\",
            "DPoP error=\"use_dpop_nonceä\"",
        ] {
            assert!(!asks_for_nonce(not), "{not}");
        }
    }

    #[test]
    fn a_challenge_of_the_dpop_scheme_offers_dpop_wherever_it_is_in_the_header() {
        for offers in [
            r#"DPoP resource_metadata="https://mcp.example/.well-known/x""#,
            "dpop",
            r#"Bearer realm="mcp", DPoP algs="ES256""#,
        ] {
            assert!(offers_dpop(offers), "{offers}");
        }
        for not in [
            r#"Bearer realm="DPoP""#,
            r#"Bearer error_description="use DPoP""#,
            "Bearer",
            "",
        ] {
            assert!(!offers_dpop(not), "{not}");
        }
    }

    #[test]
    fn nonces_come_from_the_dpop_nonce_header_and_errors_from_the_body() {
        let with = |nonce: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(DPOP_NONCE, HeaderValue::from_str(nonce).unwrap());
            headers
        };
        assert_eq!(
            nonce_header(&with("eyJ7S_zG.eyJH0-Z.HX4w-7v")).as_deref(),
            Some("eyJ7S_zG.eyJH0-Z.HX4w-7v")
        );
        assert_eq!(nonce_header(&HeaderMap::new()), None);
        assert_eq!(nonce_header(&with("")), None);
        assert_eq!(nonce_header(&with("has space")), None);
        assert_eq!(nonce_header(&with("quote\"")), None);
        assert_eq!(nonce_header(&with(&"n".repeat(MAX_NONCE_LEN + 1))), None);

        let asks = br#"{"error":"use_dpop_nonce","error_description":"Authorization server requires nonce in DPoP proof"}"#;
        assert!(token_error_asks_for_nonce(StatusCode::BAD_REQUEST, asks));
        assert!(!token_error_asks_for_nonce(StatusCode::UNAUTHORIZED, asks));
        assert!(!token_error_asks_for_nonce(
            StatusCode::BAD_REQUEST,
            br#"{"error":"invalid_grant"}"#
        ));
        assert!(!token_error_asks_for_nonce(
            StatusCode::BAD_REQUEST,
            b"use_dpop_nonce"
        ));
        assert!(!token_error_asks_for_nonce(
            StatusCode::BAD_REQUEST,
            br#"{"error":7}"#
        ));

        let answer = |status: StatusCode, nonce: Option<&str>| {
            let mut response = http::Response::new(asks.to_vec());
            *response.status_mut() = status;
            if let Some(nonce) = nonce {
                *response.headers_mut() = with(nonce);
            }
            response
        };
        let asking = answer(StatusCode::BAD_REQUEST, Some("n1"));
        assert_eq!(nonce_to_retry_with(&asking, None).as_deref(), Some("n1"));
        assert_eq!(
            nonce_to_retry_with(&asking, Some("n0")).as_deref(),
            Some("n1")
        );
        // The same nonce again, no nonce given, or no error: nothing to send again.
        assert_eq!(nonce_to_retry_with(&asking, Some("n1")), None);
        assert_eq!(
            nonce_to_retry_with(&answer(StatusCode::BAD_REQUEST, None), None),
            None
        );
        assert_eq!(
            nonce_to_retry_with(&answer(StatusCode::OK, Some("n1")), None),
            None
        );
    }

    #[test]
    fn only_token_requests_get_proofs() {
        let request = |method: http::Method, body: &str| {
            let mut request = http::Request::new(body.as_bytes().to_vec());
            *request.method_mut() = method;
            *request.uri_mut() = "https://as.example/token".parse().unwrap();
            request
        };
        for token in [
            "grant_type=refresh_token&refresh_token=r",
            "code=c&grant_type=authorization_code&redirect_uri=x",
            "grant_type=client_credentials",
        ] {
            assert!(
                is_token_request(&request(http::Method::POST, token)),
                "{token}"
            );
        }
        for other in [
            (
                http::Method::POST,
                r#"{"grant_types":["authorization_code"]}"#,
            ),
            (http::Method::POST, "token=t&token_type_hint=refresh_token"),
            (http::Method::POST, "my_grant_type=x"),
            (http::Method::GET, "grant_type=refresh_token"),
        ] {
            assert!(
                !is_token_request(&request(other.0.clone(), other.1)),
                "{other:?}"
            );
        }
        // The copy sent again is the same request.
        let mut original = request(http::Method::POST, "grant_type=client_credentials");
        original
            .headers_mut()
            .insert("authorization", HeaderValue::from_static("Basic abc"));
        let copied = copy(&original);
        assert_eq!(copied.method(), original.method());
        assert_eq!(copied.uri(), original.uri());
        assert_eq!(copied.headers(), original.headers());
        assert_eq!(copied.body(), original.body());
        assert_eq!(origin(copied.uri()), "https://as.example");
    }

    /// An OAuth HTTP client that records the `DPoP` header of each request it is given, and
    /// hands it to the SDK's default client.
    struct Recording {
        inner: Box<dyn OAuthHttpClient>,
        proofs: Mutex<Vec<Option<String>>>,
    }

    impl OAuthHttpClient for Recording {
        fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
            let proof = request
                .request
                .headers()
                .get(DPOP)
                .map(|value| value.to_str().unwrap().to_owned());
            self.proofs.lock().unwrap().push(proof);
            self.inner.execute(request)
        }
    }

    /// Serves `app` on a free loopback port; its base URL.
    async fn serve(app: axum::Router) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{address}")
    }

    /// The claims of a proof, unchecked (the server of a test only picks its answer by them).
    fn claims_of(proof: &str) -> serde_json::Value {
        let claims = proof.split('.').nth(1).unwrap();
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).unwrap()).unwrap()
    }

    #[tokio::test]
    async fn a_token_request_is_sent_again_with_the_nonce_the_authorization_server_asks_for() {
        // The authorization server wants its current nonce in every proof: it starts as `n1`,
        // and a token it issues comes with the next one, `n2`.
        let proofs: Arc<Mutex<Vec<String>>> = Arc::default();
        let current = Arc::new(Mutex::new("n1".to_owned()));
        let issued = Arc::new(AtomicUsize::new(0));
        let app = axum::Router::new().route(
            "/token",
            axum::routing::post({
                let (proofs, current, issued) = (proofs.clone(), current.clone(), issued.clone());
                move |headers: HeaderMap, body: String| async move {
                    assert!(body.contains("grant_type=refresh_token"), "{body}");
                    let proof = headers[DPOP].to_str().unwrap().to_owned();
                    proofs.lock().unwrap().push(proof.clone());
                    let mut current = current.lock().unwrap();
                    if claims_of(&proof)["nonce"] != *current {
                        let error = serde_json::json!({
                            "error": "use_dpop_nonce",
                            "error_description": "Authorization server requires nonce in DPoP proof",
                        });
                        return (
                            StatusCode::BAD_REQUEST,
                            [(DPOP_NONCE, current.clone())],
                            axum::Json(error),
                        )
                            .into_response();
                    }
                    *current = "n2".to_owned();
                    let n = issued.fetch_add(1, Ordering::SeqCst) + 1;
                    let token = serde_json::json!({
                        "access_token": format!("at-{n}"),
                        "token_type": "DPoP",
                        "expires_in": 3600,
                        "refresh_token": format!("rt-{n}"),
                    });
                    (StatusCode::OK, [(DPOP_NONCE, "n2".to_owned())], axum::Json(token))
                        .into_response()
                }
            }),
        );
        let base = serve(app).await;
        let token_endpoint = format!("{base}/token");

        let key = Arc::new(DpopKey::generate().unwrap());
        let recording = Arc::new(Recording {
            inner: Box::new(default_oauth_http_client().unwrap()),
            proofs: Mutex::default(),
        });
        let retry = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let dpop = Arc::new(
            DpopOAuthHttp::new(recording.clone(), key.clone())
                .unwrap()
                .with_retry_client(retry),
        );
        let mut manager =
            AuthorizationManager::new_with_oauth_http_client(format!("{base}/mcp"), dpop.clone())
                .await
                .unwrap();
        let metadata: AuthorizationMetadata = serde_json::from_value(serde_json::json!({
            "issuer": base,
            "authorization_endpoint": format!("{base}/authorize"),
            "token_endpoint": token_endpoint,
        }))
        .unwrap();
        manager.set_metadata(metadata);
        manager
            .configure_client(OAuthClientConfig::new(
                "client-1",
                "http://127.0.0.1/callback",
            ))
            .unwrap();
        let store = InMemoryCredentialStore::new();
        let token_response = serde_json::from_value(serde_json::json!({
            "access_token": "at-0",
            "token_type": "DPoP",
            "refresh_token": "rt-0",
            "expires_in": 3600,
        }))
        .unwrap();
        store
            .save(StoredCredentials::new(
                "client-1".to_owned(),
                Some(token_response),
                Vec::new(),
                Some(now()),
            ))
            .await
            .unwrap();
        manager.set_credential_store(store);

        // The first refresh: refused for want of a nonce, then sent again with it.
        let refreshed = manager.refresh_token().await.unwrap();
        assert_eq!(
            serde_json::to_value(&refreshed).unwrap()["access_token"],
            "at-1"
        );
        let seen = proofs.lock().unwrap().clone();
        assert_eq!(seen.len(), 2, "exactly two token requests");
        let (first_header, first) = verified(&seen[0]);
        let (second_header, second) = verified(&seen[1]);
        for (header, claims) in [(&first_header, &first), (&second_header, &second)] {
            assert_eq!(header["typ"], "dpop+jwt");
            assert_eq!(header["jwk"], key.jwk());
            assert_eq!(claims["htm"], "POST");
            assert_eq!(claims["htu"], token_endpoint.as_str());
            assert!(
                claims.get("ath").is_none(),
                "no access token in a token request"
            );
        }
        assert!(first.get("nonce").is_none());
        assert_eq!(second["nonce"], "n1");
        assert_ne!(first["jti"], second["jti"]);
        // The first went through the inner client, with its proof; the second could not.
        assert_eq!(
            *recording.proofs.lock().unwrap(),
            vec![Some(seen[0].clone())]
        );
        // The token's answer named the next nonce: it is kept.
        assert_eq!(dpop.nonce_for(&token_endpoint).as_deref(), Some("n2"));

        // The next refresh sends the kept nonce at once: one request.
        let refreshed = manager.refresh_token().await.unwrap();
        assert_eq!(
            serde_json::to_value(&refreshed).unwrap()["access_token"],
            "at-2"
        );
        let seen = proofs.lock().unwrap().clone();
        assert_eq!(seen.len(), 3);
        assert_eq!(verified(&seen[2]).1["nonce"], "n2");
        assert_eq!(recording.proofs.lock().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn the_resource_servers_nonce_comes_from_its_401_to_a_ping() {
        let seen: Arc<Mutex<Vec<(HeaderMap, String)>>> = Arc::default();
        let record = |answer: fn() -> axum::response::Response| {
            let seen = seen.clone();
            axum::routing::post(move |headers: HeaderMap, body: String| async move {
                seen.lock().unwrap().push((headers, body));
                answer()
            })
        };
        let app = axum::Router::new()
            .route(
                "/mcp",
                record(|| {
                    (
                        StatusCode::UNAUTHORIZED,
                        [
                            (
                                http::header::WWW_AUTHENTICATE,
                                r#"DPoP error="use_dpop_nonce", error_description="Resource server requires nonce in DPoP proof""#,
                            ),
                            (DPOP_NONCE, "rs1"),
                        ],
                    )
                        .into_response()
                }),
            )
            .route(
                "/expired",
                record(|| {
                    (
                        StatusCode::UNAUTHORIZED,
                        [
                            (http::header::WWW_AUTHENTICATE, r#"DPoP error="invalid_token""#),
                            (DPOP_NONCE, "rs2"),
                        ],
                    )
                        .into_response()
                }),
            )
            .route(
                "/open",
                record(|| ([(DPOP_NONCE, "rs3")], "{}").into_response()),
            );
        let base = serve(app).await;
        let client = reqwest::Client::new();
        let state = DpopState::new(Arc::new(DpopKey::generate().unwrap()));

        let nonce = state
            .learn_resource_nonce(
                &client,
                &format!("{base}/mcp?tenant=7"),
                "at-1",
                Some("s-1"),
            )
            .await;
        assert_eq!(nonce.as_deref(), Some("rs1"));
        assert_eq!(state.resource_nonce().as_deref(), Some("rs1"));

        let (headers, body) = seen.lock().unwrap()[0].clone();
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"jsonrpc": "2.0", "id": "dpop-nonce", "method": "ping"})
        );
        assert_eq!(headers["content-type"], "application/json");
        assert_eq!(headers["accept"], "application/json, text/event-stream");
        assert_eq!(headers["mcp-session-id"], "s-1");
        assert_eq!(headers["authorization"], "DPoP at-1");
        let (header, claims) = verified(headers[DPOP].to_str().unwrap());
        assert_eq!(header["jwk"], state.key().jwk());
        assert_eq!(claims["htm"], "POST");
        assert_eq!(claims["htu"], format!("{base}/mcp"));
        assert_eq!(claims["ath"], sha256_b64("at-1"));
        assert!(claims.get("nonce").is_none());

        // A 401 for another reason, or an answer that is not a 401: no nonce, and the kept
        // one stays.
        for path in ["expired", "open"] {
            let url = format!("{base}/{path}");
            assert_eq!(
                resource_nonce(&client, &url, state.key(), "at-1", None).await,
                None
            );
            assert_eq!(
                state
                    .learn_resource_nonce(&client, &url, "at-1", None)
                    .await,
                None
            );
        }
        assert_eq!(state.resource_nonce().as_deref(), Some("rs1"));
        {
            let seen = seen.lock().unwrap();
            assert_eq!(seen.len(), 5);
            assert!(seen[1].0.get("mcp-session-id").is_none());
        }
        // Nothing listens here: no nonce, no error.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let gone = format!("http://{}/mcp", closed.local_addr().unwrap());
        drop(closed);
        assert_eq!(
            resource_nonce(&client, &gone, state.key(), "at-1", None).await,
            None
        );
    }
}
