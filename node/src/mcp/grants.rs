//! The unattended OAuth grants of HTTP MCP servers: tokens got without a user signing in.
//!
//! - `grant: client_credentials` with a `private_key`: the client authenticates with an
//!   assertion it signs (`private_key_jwt`, RFC 7523 §2.2; SEP-1046). With a `client_secret`
//!   the grant is the SDK's ([`super::oauth::client_credentials`]).
//! - `grant: jwt_bearer`: a workload's identity token from its platform is the grant itself
//!   (RFC 7523 §2.1; SEP-1933, workload identity federation). A refusal is reported, never
//!   retried with the same token or another grant.
//! - `grant: enterprise`: the user's ID token from the enterprise identity provider is
//!   exchanged there for an identity assertion grant (ID-JAG, RFC 8693), and that at the
//!   server's authorization server for its token (SEP-990). The exchanges are the SDK's
//!   (`rmcp::transport::auth::enterprise`).
//!
//! Each puts the token in the server's [`VaultEntry`] and returns an authorization manager
//! that presents it; a connection that finds it refused gets a new one (as for client
//! credentials). The first two grants are one form POST each, written here: the SDK's
//! `private_key_jwt` brings a second major version of `jsonwebtoken` into the tree (the node
//! uses 12, the SDK's feature 11), and it has no JWT-bearer grant of its own.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rmcp::transport::auth::enterprise::{
    EmaAuthorizationServer, EmaClientAuthentication, EmaExchangeRequest,
};
use rmcp::transport::auth::{
    AuthorizationManager, AuthorizationMetadata, CredentialStore, OAuthTokenResponse,
    StoredCredentials,
};
use serde_json::{Value, json};

use super::oauth::{VaultEntry, challenge, describe, discover, http_client};
use crate::config::mcp::{McpOAuth, McpOAuthGrant};

/// The `client_assertion_type` of a JWT client assertion (RFC 7523 §2.2).
const JWT_ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
/// The grant type of a JWT authorization grant (RFC 7523 §2.1).
const JWT_BEARER_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// How long a client assertion Mew signs is valid: one token request.
const ASSERTION_LIFETIME: Duration = Duration::from_secs(300);
/// The most of a token endpoint's answer that is read.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// The authorization manager of the server at `url` with a new token of its unattended
/// `oauth.grant` (any but `client_credentials` with a secret), kept in `entry`.
pub(super) async fn unattended(
    url: &str,
    entry: VaultEntry,
    oauth: &McpOAuth,
    timeout: Duration,
) -> Result<AuthorizationManager, String> {
    let challenge = challenge(url, timeout).await?;
    let (mut manager, metadata) = discover(url, challenge.as_deref(), None).await?;
    let scopes = scopes(oauth, challenge.as_deref(), url);
    let (client_id, answer) = match oauth.grant {
        McpOAuthGrant::ClientCredentials => {
            let client_id = oauth.client_id.clone().unwrap_or_default();
            let answer = private_key_jwt(url, &metadata, oauth, &client_id, &scopes, timeout)
                .await
                .map_err(|why| format!("the client credentials grant failed: {why}"))?;
            (client_id, answer)
        }
        McpOAuthGrant::JwtBearer => {
            let answer = jwt_bearer(url, &metadata, oauth, &scopes, timeout)
                .await
                .map_err(|why| format!("the JWT bearer grant failed: {why}"))?;
            (oauth.client_id.clone().unwrap_or_default(), answer)
        }
        McpOAuthGrant::Enterprise => {
            let answer = enterprise(url, &metadata, oauth, &scopes)
                .await
                .map_err(|why| format!("the enterprise grant failed: {why}"))?;
            (oauth.client_id.clone().unwrap_or_default(), answer)
        }
        McpOAuthGrant::AuthorizationCode => {
            return Err("a user signs in to this server: it has no unattended grant".to_owned());
        }
    };
    let token: OAuthTokenResponse = serde_json::from_value(answer)
        .map_err(|err| format!("the token endpoint's answer is not a token: {err}"))?;
    let granted = token_scopes(&token).unwrap_or(scopes);
    let credentials = StoredCredentials::new(client_id, Some(token), granted, Some(now()))
        .with_issuer(metadata.issuer.clone());
    entry
        .save(credentials)
        .await
        .map_err(|err| format!("cannot keep the token: {}", describe(&err)))?;
    manager.set_metadata(metadata);
    manager.set_credential_store(entry);
    manager
        .initialize_from_store()
        .await
        .map_err(|err| format!("cannot use the new token: {}", describe(&err)))?;
    Ok(manager)
}

/// The scopes to ask for: the configured ones, else those the server's challenge names.
fn scopes(oauth: &McpOAuth, challenge: Option<&str>, url: &str) -> Vec<String> {
    if !oauth.scopes.is_empty() {
        return oauth.scopes.clone();
    }
    challenge
        .zip(reqwest::Url::parse(url).ok())
        .and_then(|(challenge, base)| {
            rmcp::transport::auth::WWWAuthenticateParams::parse(challenge, &base).scope
        })
        .map(|scope| scope.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The scopes a token's answer says were granted.
fn token_scopes(token: &OAuthTokenResponse) -> Option<Vec<String>> {
    use oauth2::TokenResponse as _;
    token
        .scopes()
        .map(|scopes| scopes.iter().map(|scope| scope.to_string()).collect())
}

/// Seconds since the epoch.
fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// The audience of an assertion for the authorization server of `metadata`: its issuer
/// (RFC 7523 §3 allows the issuer or the token endpoint; the issuer is what servers check
/// most widely), or the token endpoint when the metadata names no issuer.
fn audience(metadata: &AuthorizationMetadata) -> String {
    metadata
        .issuer
        .clone()
        .unwrap_or_else(|| metadata.token_endpoint.clone())
}

/// Checks that the token endpoint is https, or http on a loopback address: credentials and
/// assertions never go over plain HTTP to another host.
fn check_endpoint(endpoint: &str) -> Result<(), String> {
    let url = reqwest::Url::parse(endpoint)
        .map_err(|err| format!("the token endpoint {endpoint:?} is not a URL: {err}"))?;
    let host = url.host_str().unwrap_or_default();
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if url.scheme() == "https" || (url.scheme() == "http" && loopback) {
        Ok(())
    } else {
        Err(format!(
            "the token endpoint {endpoint} is neither https nor on this machine"
        ))
    }
}

/// A `client_credentials` token request authenticated by an assertion signed with the
/// configured `private_key` (`private_key_jwt`).
async fn private_key_jwt(
    url: &str,
    metadata: &AuthorizationMetadata,
    oauth: &McpOAuth,
    client_id: &str,
    scopes: &[String],
    timeout: Duration,
) -> Result<Value, String> {
    if let Some(methods) = metadata
        .additional_fields
        .get("token_endpoint_auth_methods_supported")
        .and_then(Value::as_array)
        && !methods.iter().any(|method| method == "private_key_jwt")
    {
        return Err("the authorization server does not take private_key_jwt".to_owned());
    }
    let pem = oauth.private_key.as_deref().unwrap_or_default();
    let algorithm = oauth.signing_algorithm.as_deref().unwrap_or("ES256");
    let assertion = client_assertion(pem, algorithm, client_id, &audience(metadata))?;
    let mut form = vec![
        ("grant_type", "client_credentials".to_owned()),
        ("client_id", client_id.to_owned()),
        ("client_assertion_type", JWT_ASSERTION_TYPE.to_owned()),
        ("client_assertion", assertion),
        ("resource", url.to_owned()),
    ];
    if !scopes.is_empty() {
        form.push(("scope", scopes.join(" ")));
    }
    token_request(&metadata.token_endpoint, &form, None, timeout).await
}

/// A client assertion (RFC 7523 §3): issued by and about the client, for `audience`, valid
/// for one request, signed with `pem` by `algorithm`.
fn client_assertion(
    pem: &str,
    algorithm: &str,
    client_id: &str,
    audience: &str,
) -> Result<String, String> {
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    use tokio_rustls::rustls::pki_types::PrivateKeyDer;
    use tokio_rustls::rustls::pki_types::pem::PemObject as _;
    let algorithm: Algorithm = algorithm
        .parse()
        .map_err(|_| format!("{algorithm} is not a signing algorithm"))?;
    let not_a_key =
        |why: &str| format!("`oauth.private_key` is not a {algorithm:?} private key: {why}");
    // The PEM is read by rustls' parser (in the tree for `tls:`), not jsonwebtoken's, whose
    // PEM feature brings an ASN.1 crate for what rustls already does.
    let key =
        PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|err| not_a_key(&err.to_string()))?;
    let key = match (algorithm, &key) {
        (Algorithm::ES256 | Algorithm::ES384, PrivateKeyDer::Pkcs8(der)) => {
            EncodingKey::from_ec_der(der.secret_pkcs8_der())
        }
        (Algorithm::EdDSA, PrivateKeyDer::Pkcs8(der)) => {
            EncodingKey::from_ed_der(der.secret_pkcs8_der())
        }
        (
            Algorithm::RS256 | Algorithm::RS384 | Algorithm::RS512 | Algorithm::PS256,
            PrivateKeyDer::Pkcs1(der),
        ) => EncodingKey::from_rsa_der(der.secret_pkcs1_der()),
        (Algorithm::RS256 | Algorithm::RS384 | Algorithm::RS512 | Algorithm::PS256, _) => {
            return Err(not_a_key(
                "an RSA key is read in PKCS#1 (BEGIN RSA PRIVATE KEY)",
            ));
        }
        _ => return Err(not_a_key("expected a PKCS#8 key (BEGIN PRIVATE KEY)")),
    };
    let issued = now();
    let claims = json!({
        "iss": client_id,
        "sub": client_id,
        "aud": audience,
        "iat": issued,
        "exp": issued + ASSERTION_LIFETIME.as_secs(),
        "jti": uuid::Uuid::now_v7().to_string(),
    });
    jsonwebtoken::encode(&Header::new(algorithm), &claims, &key)
        .map_err(|err| not_a_key(&err.to_string()))
}

/// A JWT-bearer token request with the workload's token as the grant; the client, when one is
/// configured, names itself (it has no secret: the token is the credential).
async fn jwt_bearer(
    url: &str,
    metadata: &AuthorizationMetadata,
    oauth: &McpOAuth,
    scopes: &[String],
    timeout: Duration,
) -> Result<Value, String> {
    let assertion = oauth
        .assertion
        .as_ref()
        .ok_or("no `assertion` is configured")?
        .read()?;
    let mut form = vec![
        ("grant_type", JWT_BEARER_GRANT.to_owned()),
        ("assertion", assertion),
        ("resource", url.to_owned()),
    ];
    if let Some(client_id) = &oauth.client_id {
        form.push(("client_id", client_id.clone()));
    }
    if !scopes.is_empty() {
        form.push(("scope", scopes.join(" ")));
    }
    token_request(&metadata.token_endpoint, &form, None, timeout).await
}

/// The enterprise exchange (see the module docs), by the SDK: the identity provider's client
/// and the server's (`client_id` with `client_secret`, HTTP Basic) each authenticate as
/// configured.
async fn enterprise(
    url: &str,
    metadata: &AuthorizationMetadata,
    oauth: &McpOAuth,
    scopes: &[String],
) -> Result<Value, String> {
    let idp = oauth.idp.as_ref().ok_or("no `idp` is configured")?;
    let id_token = idp.id_token.read()?;
    let authentication = |secret: &Option<String>| match secret {
        Some(secret) => {
            EmaClientAuthentication::ClientSecretBasic(oauth2::ClientSecret::new(secret.clone()))
        }
        None => EmaClientAuthentication::None,
    };
    let provider = EmaAuthorizationServer::new(&idp.issuer, &idp.token_endpoint, &idp.client_id)
        .with_client_authentication(authentication(&idp.client_secret));
    let issuer = metadata
        .issuer
        .clone()
        .ok_or("the server's authorization server names no issuer")?;
    let resource_server = EmaAuthorizationServer::new(
        issuer,
        &metadata.token_endpoint,
        oauth.client_id.clone().unwrap_or_default(),
    )
    .with_client_authentication(authentication(&oauth.client_secret));
    let http = rmcp::transport::auth::default_oauth_http_client().map_err(|err| describe(&err))?;
    let token = EmaExchangeRequest::new_with_id_token(provider, resource_server, url, &id_token)
        .with_scopes(scopes.iter().cloned())
        .exchange(&http, &http)
        .await
        .map_err(|err| err.to_string())?;
    let mut answer = json!({
        "access_token": token.access_token.secret(),
        "token_type": "Bearer",
    });
    if let Some(expires) = token.expires_in {
        answer["expires_in"] = json!(expires.as_secs());
    }
    if !token.scopes.is_empty() {
        let mut granted: Vec<&String> = token.scopes.iter().collect();
        granted.sort();
        answer["scope"] = json!(
            granted
                .iter()
                .map(|scope| scope.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    Ok(answer)
}

/// One form POST to a token endpoint, with `dpop`'s proof header when given; its JSON answer,
/// or the server's error (`error` and `error_description`) as the message.
pub(super) async fn token_request(
    endpoint: &str,
    form: &[(&str, String)],
    dpop: Option<String>,
    timeout: Duration,
) -> Result<Value, String> {
    check_endpoint(endpoint)?;
    let client = http_client(timeout)?;
    let mut request = client
        .post(endpoint)
        .header("accept", "application/json")
        .form(form);
    if let Some(proof) = dpop {
        request = request.header("dpop", proof);
    }
    let mut response = request
        .send()
        .await
        .map_err(|err| format!("cannot reach {endpoint}: {}", super::connect::chain(&err)))?;
    let status = response.status();
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|err| format!("{endpoint}: {}", super::connect::chain(&err)))?
    {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(format!(
                "{endpoint} answered more than {MAX_ANSWER_BYTES} bytes"
            ));
        }
        body.extend_from_slice(&chunk);
    }
    let answer: Option<Value> = serde_json::from_slice(&body).ok();
    if !status.is_success() {
        let field = |name: &str| {
            answer
                .as_ref()
                .and_then(|answer| answer.get(name))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        return Err(match (field("error"), field("error_description")) {
            (Some(error), Some(description)) => {
                format!("{endpoint} refused it ({status}): {error}: {description}")
            }
            (Some(error), None) => format!("{endpoint} refused it ({status}): {error}"),
            _ => format!("{endpoint} answered {status}"),
        });
    }
    answer
        .filter(|answer| answer.get("access_token").is_some_and(Value::is_string))
        .ok_or_else(|| format!("{endpoint} answered without an access token"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A P-256 key in PKCS#8 PEM, made for the test.
    fn ec_key() -> (String, Vec<u8>) {
        use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref()).unwrap();
        use base64::Engine as _;
        let body = base64::engine::general_purpose::STANDARD.encode(pkcs8.as_ref());
        let pem = format!("-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----\n");
        (pem, pair.public_key().as_ref().to_vec())
    }

    #[test]
    fn a_client_assertion_is_signed_by_the_key_for_the_issuer_and_one_request() {
        let (pem, public) = ec_key();
        let assertion = client_assertion(&pem, "ES256", "client-1", "https://as.example").unwrap();
        let key = jsonwebtoken::DecodingKey::from_ec_der(&public);
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
        validation.set_audience(&["https://as.example"]);
        let claims = jsonwebtoken::decode::<Value>(&assertion, &key, &validation)
            .unwrap()
            .claims;
        assert_eq!(claims["iss"], "client-1");
        assert_eq!(claims["sub"], "client-1");
        let lifetime = claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap();
        assert_eq!(lifetime, ASSERTION_LIFETIME.as_secs());
        let other = client_assertion(&pem, "ES256", "client-1", "https://as.example").unwrap();
        let jti = |token: &str| {
            jsonwebtoken::decode::<Value>(token, &key, &validation)
                .unwrap()
                .claims["jti"]
                .clone()
        };
        assert_ne!(jti(&assertion), jti(&other), "each assertion is new");
    }

    #[test]
    fn a_key_that_is_not_the_algorithms_is_refused_with_the_reason() {
        let (pem, _) = ec_key();
        let err = client_assertion(&pem, "RS256", "c", "https://as.example").unwrap_err();
        assert!(err.contains("is not a RS256 private key"), "{err}");
        let err = client_assertion("not a key", "ES256", "c", "https://as.example").unwrap_err();
        assert!(err.contains("is not a ES256 private key"), "{err}");
        let err = client_assertion(&pem, "HS1", "c", "https://as.example").unwrap_err();
        assert!(err.contains("HS1 is not a signing algorithm"), "{err}");
    }

    #[test]
    fn credentials_go_only_to_https_or_this_machine() {
        assert!(check_endpoint("https://as.example/token").is_ok());
        assert!(check_endpoint("http://127.0.0.1:9/token").is_ok());
        assert!(check_endpoint("http://localhost:9/token").is_ok());
        assert!(check_endpoint("http://[::1]:9/token").is_ok());
        let err = check_endpoint("http://as.example/token").unwrap_err();
        assert!(err.contains("neither https nor on this machine"), "{err}");
    }
}
