//! Dashboard sessions: a browser signs in once with the node's own credentials (an API key or
//! a JWT) and then carries an HttpOnly cookie instead. The cookie holds a short JWT (HS256)
//! naming the principal, signed with the node's session key, with a CSRF token that every
//! state-changing request of the session must repeat in [`CSRF_HEADER`].
//!
//! The key is `MEW_SESSION_SECRET` when set (replicas behind one load balancer set the same
//! value, so a session works on each), else 32 random bytes made at start: sessions then end
//! with the process.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, HeaderValue, header};
use base64::Engine as _;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

/// The cookie of a dashboard session.
pub(crate) const COOKIE: &str = "mew_session";
/// The header a session's state-changing requests carry its CSRF token in.
pub(crate) const CSRF_HEADER: &str = "X-CSRF-Token";
/// How long a session lasts.
pub(crate) const TTL: Duration = Duration::from_secs(12 * 60 * 60);
/// The audience of session tokens: no other token of the node is one.
const AUDIENCE: &str = "mew-dashboard";
/// The environment variable that holds a session key shared by replicas.
pub(crate) const SECRET_ENV: &str = "MEW_SESSION_SECRET";
/// The shortest session key taken from [`SECRET_ENV`].
const MIN_SECRET_BYTES: usize = 32;

/// A signed-in browser: who it is and the token its state-changing requests repeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Session {
    pub(crate) principal: String,
    pub(crate) csrf: String,
    /// Unix seconds.
    pub(crate) expires: u64,
}

#[derive(Serialize, Deserialize)]
struct Claims {
    sub: String,
    aud: String,
    iat: u64,
    exp: u64,
    csrf: String,
}

/// The key sessions are signed and checked with.
pub(crate) struct Sessions {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
}

impl Sessions {
    /// Sessions signed with `secret` (the value of [`SECRET_ENV`], when set), else with a key
    /// made now.
    pub(crate) fn new(secret: Option<&str>) -> anyhow::Result<Self> {
        let key = match secret {
            Some(secret) if secret.len() >= MIN_SECRET_BYTES => secret.as_bytes().to_vec(),
            Some(_) => anyhow::bail!(
                "{SECRET_ENV} must be at least {MIN_SECRET_BYTES} bytes long (a random string, \
                 the same on every replica)"
            ),
            None => random_bytes::<32>()?.to_vec(),
        };
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_audience(&[AUDIENCE]);
        validation.set_required_spec_claims(&["exp", "aud", "sub"]);
        validation.leeway = 0;
        let bad = |e: jsonwebtoken::errors::Error| anyhow::anyhow!("the session key: {e}");
        Ok(Self {
            encoding: EncodingKey::from_secret(&key).map_err(bad)?,
            decoding: DecodingKey::from_secret(&key).map_err(bad)?,
            validation,
        })
    }

    /// A new session of `principal`, and its cookie's value.
    pub(crate) fn issue(&self, principal: &str) -> anyhow::Result<(Session, String)> {
        let now = unix_now();
        let csrf = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random_bytes::<24>()?);
        let claims = Claims {
            sub: principal.to_owned(),
            aud: AUDIENCE.to_owned(),
            iat: now,
            exp: now + TTL.as_secs(),
            csrf: csrf.clone(),
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(|e| anyhow::anyhow!("cannot sign a session: {e}"))?;
        Ok((
            Session {
                principal: principal.to_owned(),
                csrf,
                expires: claims.exp,
            },
            token,
        ))
    }

    /// The session a request's cookie holds: `None` without one, an error when it is not a
    /// valid session of this node (forged, expired, signed with another key).
    pub(crate) fn of(&self, headers: &HeaderMap) -> Option<Result<Session, &'static str>> {
        let token = cookie(headers, COOKIE)?;
        Some(
            jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
                .map(|data| Session {
                    principal: data.claims.sub,
                    csrf: data.claims.csrf,
                    expires: data.claims.exp,
                })
                .map_err(|_| "the session has expired or is not valid; sign in again"),
        )
    }
}

/// Whether `headers` repeat the session's CSRF token (compared in constant time).
pub(crate) fn csrf_matches(headers: &HeaderMap, session: &Session) -> bool {
    headers
        .get(CSRF_HEADER)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|token| {
            token.len() == session.csrf.len()
                && token
                    .bytes()
                    .zip(session.csrf.bytes())
                    .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                    == 0
        })
}

/// The `Set-Cookie` value that stores `token` for the session's life (`Secure` when the node
/// serves TLS), or that clears it (`None`).
pub(crate) fn set_cookie(token: Option<&str>, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    let value = match token {
        Some(token) => format!(
            "{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
            TTL.as_secs()
        ),
        None => format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}"),
    };
    // Only base64url, digits and fixed text: always a valid header value.
    HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The value of the cookie `name` in a request's `Cookie` headers.
///
/// Written here rather than with a cookie crate: a request's cookies are `name=value` pairs
/// split by `;` (RFC 6265 §4.2), and this is the one place the node reads one.
fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find_map(|(key, value)| (key == name).then_some(value.trim_matches('"')))
}

fn random_bytes<const N: usize>() -> anyhow::Result<[u8; N]> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes)
        .map_err(|e| anyhow::anyhow!("no randomness for a session key: {e}"))?;
    Ok(bytes)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn with_cookie(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn an_issued_session_reads_back_and_a_forged_one_does_not() {
        let sessions = Sessions::new(None).unwrap();
        let (session, token) = sessions.issue("alice").unwrap();
        let headers = with_cookie(&format!("theme=dark; {COOKIE}={token}"));
        assert_eq!(sessions.of(&headers), Some(Ok(session.clone())));
        // Another node's key, or a changed token, is no session here.
        let other = Sessions::new(None).unwrap();
        assert!(matches!(other.of(&headers), Some(Err(_))));
        let forged = with_cookie(&format!("{COOKIE}={}x", token));
        assert!(matches!(sessions.of(&forged), Some(Err(_))));
        assert_eq!(sessions.of(&HeaderMap::new()), None);
    }

    #[test]
    fn replicas_with_one_secret_accept_each_others_sessions() {
        let secret = "0123456789abcdef0123456789abcdef";
        let (a, b) = (
            Sessions::new(Some(secret)).unwrap(),
            Sessions::new(Some(secret)).unwrap(),
        );
        let (session, token) = a.issue("bob").unwrap();
        let headers = with_cookie(&format!("{COOKIE}={token}"));
        assert_eq!(b.of(&headers), Some(Ok(session)));
        assert!(Sessions::new(Some("short")).is_err());
    }

    #[test]
    fn the_csrf_token_must_be_repeated_exactly() {
        let sessions = Sessions::new(None).unwrap();
        let (session, _) = sessions.issue("alice").unwrap();
        let mut headers = HeaderMap::new();
        assert!(!csrf_matches(&headers, &session));
        headers.insert(CSRF_HEADER, HeaderValue::from_static("nope"));
        assert!(!csrf_matches(&headers, &session));
        headers.insert(CSRF_HEADER, HeaderValue::from_str(&session.csrf).unwrap());
        assert!(csrf_matches(&headers, &session));
    }

    #[test]
    fn the_cookie_is_http_only_strict_and_secure_under_tls() {
        let set = set_cookie(Some("t"), true);
        let set = set.to_str().unwrap();
        for part in [
            "mew_session=t",
            "HttpOnly",
            "SameSite=Strict",
            "Secure",
            "Path=/",
        ] {
            assert!(set.contains(part), "{set}");
        }
        assert!(
            !set_cookie(Some("t"), false)
                .to_str()
                .unwrap()
                .contains("Secure")
        );
        assert!(
            set_cookie(None, false)
                .to_str()
                .unwrap()
                .contains("Max-Age=0")
        );
    }
}
