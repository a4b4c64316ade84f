//! The credentials this node presents to a peer (`peers.NAME.auth`): an API key or a bearer
//! token from the environment, or a JWT the node mints and signs with its own key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use mew_transport::{ClientOptions, Credentials};
use reqwest::header::{AUTHORIZATION, HeaderName, HeaderValue};
use serde::Serialize;

use crate::config::{PeerAuth, PeerJwt};
use crate::identity::{JWKS_PATH, NodeKey};

/// What outbound credentials are made from: the environment secrets are read from, and the
/// node's key and names for the JWTs it mints.
#[derive(Clone, Debug)]
pub(crate) struct Outbound {
    /// The environment the node runs with.
    pub(crate) env: Arc<HashMap<String, String>>,
    /// The node's signing key.
    pub(crate) key: Arc<NodeKey>,
    /// The node's public URL: the `iss` of its JWTs, and where its JWKS is.
    pub(crate) issuer: String,
    /// The node's name: the `sub` of its JWTs.
    pub(crate) subject: String,
}

impl Outbound {
    /// `options` with the credentials `auth` describes, or why they cannot be had (a variable
    /// that is unset or empty).
    pub(crate) fn apply(
        &self,
        peer: &str,
        auth: &PeerAuth,
        mut options: ClientOptions,
    ) -> Result<ClientOptions, String> {
        let secret = |name: &str| match self.env.get(name) {
            Some(value) if !value.is_empty() => Ok(value.clone()),
            _ => Err(format!(
                "peers.{peer}.auth: the environment variable {name} is not set or empty"
            )),
        };
        let header = |value: String| {
            HeaderValue::from_str(&value).map(|mut value| {
                value.set_sensitive(true);
                value
            })
        };
        match auth {
            PeerAuth::ApiKeyEnv(name) => {
                let value = header(secret(name)?).map_err(|_| {
                    format!("peers.{peer}.auth: the key in {name} is not a valid header value")
                })?;
                options
                    .headers
                    .insert(HeaderName::from_static("x-api-key"), value);
            }
            PeerAuth::BearerEnv(name) => {
                let value = header(format!("Bearer {}", secret(name)?)).map_err(|_| {
                    format!("peers.{peer}.auth: the token in {name} is not a valid header value")
                })?;
                options.headers.insert(AUTHORIZATION, value);
            }
            PeerAuth::Jwt(jwt) => {
                options.credentials = Some(Arc::new(MintedJwt {
                    outbound: self.clone(),
                    jwt: jwt.clone(),
                    current: Mutex::new(None),
                }));
            }
        }
        Ok(options)
    }
}

/// JWTs minted for one peer; each is reused until half its lifetime has passed.
#[derive(Debug)]
struct MintedJwt {
    outbound: Outbound,
    jwt: PeerJwt,
    /// The token in use and when it stops being handed out.
    current: Mutex<Option<(HeaderValue, SystemTime)>>,
}

/// The claims of a minted JWT.
#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    sub: &'a str,
    aud: &'a str,
    iat: u64,
    exp: u64,
    jti: String,
}

impl MintedJwt {
    fn mint(&self, now: SystemTime) -> Result<HeaderValue, String> {
        let iat = now
            .duration_since(UNIX_EPOCH)
            .map_err(|_| "the clock is before 1970".to_owned())?
            .as_secs();
        let claims = Claims {
            iss: &self.outbound.issuer,
            sub: &self.outbound.subject,
            aud: &self.jwt.audience,
            iat,
            exp: iat + self.jwt.ttl.as_secs().max(1),
            jti: uuid::Uuid::now_v7().to_string(),
        };
        let jku = format!("{}{JWKS_PATH}", self.outbound.issuer);
        let token = self
            .outbound
            .key
            .sign_jwt(&claims, Some(&jku))
            .map_err(|e| format!("cannot mint a JWT: {e:#}"))?;
        let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| "a minted JWT is not a valid header value".to_owned())?;
        value.set_sensitive(true);
        Ok(value)
    }
}

impl Credentials for MintedJwt {
    fn headers(&self) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
        let now = SystemTime::now();
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let value = match &*current {
            Some((value, renew_at)) if now < *renew_at => value.clone(),
            _ => {
                let value = self.mint(now)?;
                let renew_at = now + self.jwt.ttl / 2;
                *current = Some((value.clone(), renew_at));
                value
            }
        };
        Ok(vec![(AUTHORIZATION, value)])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Duration;

    use jsonwebtoken::{Algorithm, DecodingKey, Validation};

    use super::*;

    fn outbound(dir: &std::path::Path, env: &[(&str, &str)]) -> Outbound {
        Outbound {
            env: Arc::new(
                env.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            key: Arc::new(NodeKey::load_or_create(dir).unwrap()),
            issuer: "https://a.example".to_owned(),
            subject: "node-a".to_owned(),
        }
    }

    fn headers(options: &ClientOptions) -> Vec<(HeaderName, HeaderValue)> {
        let mut all: Vec<_> = options
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if let Some(credentials) = &options.credentials {
            all.extend(credentials.headers().unwrap());
        }
        all
    }

    #[test]
    fn keys_and_tokens_come_from_the_environment_and_a_missing_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let outbound = outbound(dir.path(), &[("B_KEY", "k-123"), ("B_TOKEN", "t-456")]);
        let key = outbound
            .apply(
                "b",
                &PeerAuth::ApiKeyEnv("B_KEY".into()),
                ClientOptions::default(),
            )
            .unwrap();
        assert_eq!(
            headers(&key),
            [(
                HeaderName::from_static("x-api-key"),
                HeaderValue::from_static("k-123")
            )]
        );
        let bearer = outbound
            .apply(
                "b",
                &PeerAuth::BearerEnv("B_TOKEN".into()),
                ClientOptions::default(),
            )
            .unwrap();
        assert_eq!(
            headers(&bearer),
            [(AUTHORIZATION, HeaderValue::from_static("Bearer t-456"))]
        );
        let error = outbound
            .apply(
                "b",
                &PeerAuth::BearerEnv("UNSET_VAR".into()),
                ClientOptions::default(),
            )
            .unwrap_err();
        assert!(
            error.contains("peers.b.auth") && error.contains("UNSET_VAR"),
            "{error}"
        );
    }

    #[test]
    fn a_minted_jwt_verifies_against_the_node_key_and_is_reused_until_half_its_life() {
        let dir = tempfile::tempdir().unwrap();
        let outbound = outbound(dir.path(), &[]);
        let auth = PeerAuth::Jwt(PeerJwt {
            audience: "node-b".to_owned(),
            ttl: Duration::from_secs(300),
        });
        let options = outbound
            .apply("b", &auth, ClientOptions::default())
            .unwrap();
        let first = headers(&options);
        assert_eq!(first, headers(&options), "reused while fresh");
        let value = first[0].1.to_str().unwrap();
        let token = value.strip_prefix("Bearer ").unwrap();
        let header = jsonwebtoken::decode_header(token).unwrap();
        assert_eq!(header.kid.as_deref(), Some(outbound.key.kid()));
        assert_eq!(
            header.jku.as_deref(),
            Some("https://a.example/.well-known/jwks.json")
        );
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.set_issuer(&["https://a.example"]);
        validation.set_audience(&["node-b"]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let decoding = DecodingKey::from_jwk(outbound.key.jwk()).unwrap();
        let claims = jsonwebtoken::decode::<serde_json::Value>(token, &decoding, &validation)
            .unwrap()
            .claims;
        assert_eq!(claims["sub"], "node-a");
        assert_eq!(
            claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(),
            300
        );
        validation.set_audience(&["someone-else"]);
        assert!(jsonwebtoken::decode::<serde_json::Value>(token, &decoding, &validation).is_err());
    }
}
