//! Signed agent cards: the node's signature on every card it serves, and the verification of
//! any card's signatures against a JWKS (`mew card verify`).
//!
//! A signature is a detached JWS over the card's canonical form ([`mew_cards::canonical_card`]):
//! its protected header is `{"alg":"EdDSA","kid":…,"typ":"JOSE","jku":"<node>/.well-known/
//! jwks.json"}` and it is stored as `signatures: [{protected, signature}]`. A verifier takes
//! the key named by `kid` from a JWKS the user gives, or else from the header's `jku`, which
//! it only follows to the card's own origin: a card cannot vouch for itself through a key set
//! somewhere else.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use mew_cards::{AgentCard, AgentCardSignature, canonical_card};
use reqwest::Url;
use serde::Serialize;

use super::{JWKS_PATH, NodeKey};

/// The algorithms a card signature may use: asymmetric ones only (never `none`, never HS*).
pub(crate) const ALLOWED_ALGORITHMS: [Algorithm; 5] = [
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
    Algorithm::RS256,
    Algorithm::PS256,
];

/// The largest card `mew card verify` reads.
pub(crate) const CARD_MAX_BYTES: usize = 1024 * 1024;

/// The largest JWKS a verifier reads.
pub(crate) const JWKS_MAX_BYTES: usize = 256 * 1024;

/// How long fetching a card or a key set may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(15);

/// The URL of the JWKS of the node whose base URL is `public_url`.
pub(crate) fn jwks_url(public_url: &str) -> String {
    format!("{}{JWKS_PATH}", public_url.trim_end_matches('/'))
}

/// `card` with the node's signature added: a detached JWS over its canonical form whose
/// protected header names the key (`kid`) and where to find it (`jku`). A signature the card
/// already had from the same key is replaced; those of other keys are kept.
pub(crate) fn sign_card(
    key: &NodeKey,
    mut card: AgentCard,
    jku: &str,
) -> anyhow::Result<AgentCard> {
    card.signatures
        .retain(|signature| header_fields(&signature.protected).0.as_deref() != Some(key.kid()));
    let payload = canonical_card(&card).context("cannot canonicalize the card")?;
    let mut header = serde_json::Map::new();
    header.insert("typ".to_owned(), "JOSE".into());
    header.insert("jku".to_owned(), jku.into());
    let jws = key.sign_detached(header, &payload)?;
    card.signatures.push(AgentCardSignature {
        protected: jws.protected,
        signature: jws.signature,
        header: None,
    });
    Ok(card)
}

/// The protected header of a card signature, as far as verification needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Protected {
    pub(crate) alg: Algorithm,
    pub(crate) kid: String,
    pub(crate) jku: Option<String>,
}

/// What the protected header of one signature says, read leniently for the report: the
/// `kid`, `alg` and `jku` strings it holds, if any.
fn header_fields(protected: &str) -> (Option<String>, Option<String>, Option<String>) {
    let Ok(header) = decode_header_object(protected) else {
        return (None, None, None);
    };
    let field = |name: &str| header.get(name).and_then(|v| v.as_str()).map(str::to_owned);
    (field("kid"), field("alg"), field("jku"))
}

fn decode_header_object(
    protected: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let bytes = URL_SAFE_NO_PAD
        .decode(protected.trim_end_matches('='))
        .map_err(|e| format!("the protected header is not base64url: {e}"))?;
    match serde_json::from_slice(&bytes) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err("the protected header is not a JSON object".to_owned()),
        Err(e) => Err(format!("the protected header is not JSON: {e}")),
    }
}

/// Reads and checks a protected header: an allowed `alg`, a `kid`, no `crit` (no extension
/// is understood here, so RFC 7515 says to reject one).
pub(crate) fn parse_protected(protected: &str) -> Result<Protected, String> {
    let header = decode_header_object(protected)?;
    let alg = match header.get("alg") {
        Some(serde_json::Value::String(alg)) => alg.as_str(),
        Some(_) => return Err("the header's alg is not a string".to_owned()),
        None => return Err("the header names no alg".to_owned()),
    };
    let allowed = ALLOWED_ALGORITHMS
        .iter()
        .find(|candidate| format!("{candidate:?}") == alg)
        .copied()
        .ok_or_else(|| {
            format!(
                "the algorithm {alg:?} is not accepted (accepted: {})",
                ALLOWED_ALGORITHMS
                    .iter()
                    .map(|a| format!("{a:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?;
    if header.contains_key("crit") {
        return Err(
            "the header has critical extensions (crit), which are not understood".to_owned(),
        );
    }
    let kid = match header.get("kid") {
        Some(serde_json::Value::String(kid)) if !kid.is_empty() => kid.clone(),
        Some(_) => return Err("the header's kid is not a non-empty string".to_owned()),
        None => return Err("the header names no key (kid)".to_owned()),
    };
    let jku = match header.get("jku") {
        None => None,
        Some(serde_json::Value::String(jku)) => Some(jku.clone()),
        Some(_) => return Err("the header's jku is not a string".to_owned()),
    };
    Ok(Protected {
        alg: allowed,
        kid,
        jku,
    })
}

/// The JWKS URL `jku` when it may be followed for a card fetched from `card_url`: an http(s)
/// URL with the card's own origin (scheme, host and port).
pub(crate) fn allowed_jku(card_url: &str, jku: &str) -> Result<Url, String> {
    let card = Url::parse(card_url).map_err(|e| format!("the card URL {card_url:?}: {e}"))?;
    let keys =
        Url::parse(jku).map_err(|e| format!("the header's jku {jku:?} is not a URL: {e}"))?;
    if !matches!(keys.scheme(), "http" | "https") {
        return Err(format!("the header's jku {jku:?} is not an http(s) URL"));
    }
    if keys.origin() != card.origin() {
        return Err(format!(
            "the header's jku {jku} is not on the card's origin {}: a card cannot vouch for \
             itself through a foreign key set (pass --jwks to name the keys to trust)",
            card.origin().ascii_serialization()
        ));
    }
    Ok(keys)
}

/// Checks one signature over the card whose base64url canonical form is `payload`, with the
/// key of `keys` that its header names.
pub(crate) fn check_signature(
    signature: &AgentCardSignature,
    header: &Protected,
    payload: &str,
    keys: &JwkSet,
) -> Result<(), String> {
    let jwk = keys
        .keys
        .iter()
        .find(|jwk| jwk.common.key_id.as_deref() == Some(header.kid.as_str()))
        .ok_or_else(|| format!("the key set has no key {:?}", header.kid))?;
    usable_for(jwk, header.alg)?;
    let key = DecodingKey::from_jwk(jwk).map_err(|e| format!("the key is not usable: {e}"))?;
    let message = format!("{}.{payload}", signature.protected);
    match jsonwebtoken::crypto::verify(&signature.signature, message.as_bytes(), &key, header.alg) {
        Ok(true) => Ok(()),
        Ok(false) => Err("the signature does not match the card".to_owned()),
        Err(e) => Err(format!("the signature cannot be checked: {e}")),
    }
}

/// Whether `jwk` is a public signature key for `alg`.
fn usable_for(jwk: &Jwk, alg: Algorithm) -> Result<(), String> {
    if matches!(jwk.common.public_key_use, Some(ref use_) if *use_ != PublicKeyUse::Signature) {
        return Err("the key is not a signature key".to_owned());
    }
    if let Some(own) = jwk.common.key_algorithm
        && own.to_string() != format!("{alg:?}")
    {
        return Err(format!("the key is for {own}, the signature uses {alg:?}"));
    }
    let fits = match (&jwk.algorithm, alg) {
        (AlgorithmParameters::EllipticCurve(ec), Algorithm::ES256) => {
            ec.curve == EllipticCurve::P256
        }
        (AlgorithmParameters::EllipticCurve(ec), Algorithm::ES384) => {
            ec.curve == EllipticCurve::P384
        }
        (AlgorithmParameters::OctetKeyPair(okp), Algorithm::EdDSA) => {
            okp.curve == EllipticCurve::Ed25519
        }
        (AlgorithmParameters::RSA(_), Algorithm::RS256 | Algorithm::PS256) => true,
        _ => false,
    };
    if fits {
        Ok(())
    } else {
        Err(format!("the key's type does not fit the algorithm {alg:?}"))
    }
}

/// The outcome for one signature of a card.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct SignatureReport {
    /// The key id the header names.
    pub(crate) kid: Option<String>,
    /// The algorithm the header names.
    pub(crate) alg: Option<String>,
    /// Where the header says the key set is.
    pub(crate) jku: Option<String>,
    /// Whether the signature verifies.
    pub(crate) ok: bool,
    /// Why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
}

/// Verifies signatures over cards, fetching key sets over HTTP when a header's `jku` is
/// followed (once per URL).
pub(crate) struct Verifier {
    client: reqwest::Client,
    /// The keys the user named (`--jwks`): when set, `jku` is never followed.
    given: Option<JwkSet>,
    fetched: HashMap<Url, Result<JwkSet, String>>,
}

impl Verifier {
    /// A verifier that trusts `given` when set, else the keys each header's same-origin `jku`
    /// points to, fetched with `client` (see [`http_client`]).
    pub(crate) fn new(given: Option<JwkSet>, client: reqwest::Client) -> Self {
        Self {
            client,
            given,
            fetched: HashMap::new(),
        }
    }

    /// Checks every signature of `card`, fetched from `card_url`. A card without signatures
    /// gives no reports.
    pub(crate) async fn verify(
        &mut self,
        card: &AgentCard,
        card_url: &str,
    ) -> anyhow::Result<Vec<SignatureReport>> {
        if card.signatures.is_empty() {
            return Ok(Vec::new());
        }
        let canonical = canonical_card(card).context("the card has no canonical form")?;
        let payload = URL_SAFE_NO_PAD.encode(canonical);
        let mut reports = Vec::new();
        for signature in &card.signatures {
            let (kid, alg, jku) = header_fields(&signature.protected);
            let outcome = self.check_one(signature, &payload, card_url).await;
            reports.push(SignatureReport {
                kid,
                alg,
                jku,
                ok: outcome.is_ok(),
                error: outcome.err(),
            });
        }
        Ok(reports)
    }

    async fn check_one(
        &mut self,
        signature: &AgentCardSignature,
        payload: &str,
        card_url: &str,
    ) -> Result<(), String> {
        let header = parse_protected(&signature.protected)?;
        if let Some(keys) = &self.given {
            return check_signature(signature, &header, payload, keys);
        }
        let Some(jku) = &header.jku else {
            return Err("the header has no jku and no key set was given (--jwks)".to_owned());
        };
        let url = allowed_jku(card_url, jku)?;
        if !self.fetched.contains_key(&url) {
            let keys = fetch_jwks(&self.client, url.as_str()).await;
            self.fetched.insert(url.clone(), keys);
        }
        match self.fetched.get(&url) {
            Some(Ok(keys)) => check_signature(signature, &header, payload, keys),
            Some(Err(e)) => Err(e.clone()),
            None => Err(format!("no key set from {url}")),
        }
    }
}

/// The HTTP client for cards and key sets: bounded in time, never redirected, trusting the
/// configured roots (`tls:`) besides the system's.
pub(crate) fn http_client(tls: &mew_transport::TlsOptions) -> anyhow::Result<reqwest::Client> {
    let builder = reqwest::Client::builder()
        .timeout(FETCH_TIMEOUT)
        .connect_timeout(Duration::from_secs(5))
        .redirect(reqwest::redirect::Policy::none());
    tls.configure(builder)
        .and_then(reqwest::ClientBuilder::build)
        .context("cannot build the HTTP client")
}

/// `GET url`, expecting JSON of at most `max` bytes: the body.
pub(crate) async fn fetch_bytes(
    client: &reqwest::Client,
    url: &str,
    max: usize,
) -> anyhow::Result<Vec<u8>> {
    fetch_with(client.get(url), url, max).await
}

/// Sends `request` (a `GET url`, with whatever headers it carries), expecting JSON of at most
/// `max` bytes: the body.
pub(crate) async fn fetch_with(
    request: reqwest::RequestBuilder,
    url: &str,
    max: usize,
) -> anyhow::Result<Vec<u8>> {
    let mut response = request
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .with_context(|| format!("cannot fetch {url}"))?;
    let status = response.status();
    if !status.is_success() {
        bail!("{url} answered {status}");
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .with_context(|| format!("cannot read {url}"))?
    {
        body.extend_from_slice(&chunk);
        if body.len() > max {
            bail!("{url} is larger than {max} bytes");
        }
    }
    Ok(body)
}

/// The key set at `url`, or why there is none.
async fn fetch_jwks(client: &reqwest::Client, url: &str) -> Result<JwkSet, String> {
    let body = fetch_bytes(client, url, JWKS_MAX_BYTES)
        .await
        .map_err(|e| format!("{e:#}"))?;
    parse_jwks(&body).map_err(|e| format!("{url}: {e}"))
}

/// A JWKS document.
pub(crate) fn parse_jwks(bytes: &[u8]) -> Result<JwkSet, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("not a JWKS: {e}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use mew_cards::{CardOptions, RoleDefinition, front_card};

    use super::*;

    const BASE: &str = "https://node.example:8443";

    fn key() -> NodeKey {
        NodeKey::load_or_create(tempfile::tempdir().unwrap().path()).unwrap()
    }

    fn card() -> AgentCard {
        let roles: Vec<&RoleDefinition> = Vec::new();
        front_card(&roles, BASE, "coder", &CardOptions::default())
    }

    fn client() -> reqwest::Client {
        http_client(&mew_transport::TlsOptions::default()).unwrap()
    }

    fn payload(card: &AgentCard) -> String {
        URL_SAFE_NO_PAD.encode(canonical_card(card).unwrap())
    }

    fn header(fields: serde_json::Value) -> String {
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(&fields).unwrap())
    }

    #[test]
    fn a_signed_card_verifies_and_a_changed_one_does_not() {
        let key = key();
        let signed = sign_card(&key, card(), &jwks_url(BASE)).unwrap();
        assert_eq!(signed.signatures.len(), 1);
        // Signing again replaces the key's own signature, and keeps those of other keys.
        let other = self::key();
        let twice = sign_card(&other, signed.clone(), &jwks_url(BASE)).unwrap();
        let twice = sign_card(&key, twice, &jwks_url(BASE)).unwrap();
        assert_eq!(twice.signatures.len(), 2);
        // (ECDSA signatures are randomized: the same header, a fresh signature.)
        assert_eq!(
            twice.signatures[1].protected,
            signed.signatures[0].protected
        );
        assert_ne!(
            twice.signatures[0].protected,
            signed.signatures[0].protected
        );
        let signature = &signed.signatures[0];
        let protected = parse_protected(&signature.protected).unwrap();
        assert_eq!(protected.alg, Algorithm::EdDSA);
        assert_eq!(protected.kid, key.kid());
        assert_eq!(
            protected.jku.as_deref(),
            Some("https://node.example:8443/.well-known/jwks.json")
        );
        let header = decode_header_object(&signature.protected).unwrap();
        assert_eq!(header["typ"], "JOSE");
        let keys = key.jwks();
        assert_eq!(
            check_signature(signature, &protected, &payload(&signed), &keys),
            Ok(())
        );
        let mut changed = signed.clone();
        changed.description.push('!');
        let error = check_signature(signature, &protected, &payload(&changed), &keys).unwrap_err();
        assert!(error.contains("does not match"), "{error}");
        // The signatures themselves are not covered.
        let mut more = signed.clone();
        more.signatures.push(AgentCardSignature::default());
        assert_eq!(payload(&more), payload(&signed));
    }

    #[test]
    fn none_and_hmac_algorithms_are_refused() {
        for alg in ["none", "HS256", "HS512", "ES512", "RS512"] {
            let protected = header(serde_json::json!({ "alg": alg, "kid": "k" }));
            let error = parse_protected(&protected).unwrap_err();
            assert!(error.contains("not accepted"), "{alg}: {error}");
        }
        for alg in ["ES256", "ES384", "EdDSA", "RS256", "PS256"] {
            let protected = header(serde_json::json!({ "alg": alg, "kid": "k" }));
            assert!(parse_protected(&protected).is_ok(), "{alg}");
        }
        for (fields, why) in [
            (serde_json::json!({ "kid": "k" }), "no alg"),
            (serde_json::json!({ "alg": "ES256" }), "no key"),
            (
                serde_json::json!({ "alg": "ES256", "kid": "k", "crit": ["b64"] }),
                "crit",
            ),
        ] {
            let error = parse_protected(&header(fields)).unwrap_err();
            assert!(error.contains(why), "{error}");
        }
        assert!(parse_protected("!!!").unwrap_err().contains("base64url"));
        assert!(
            parse_protected(&header(serde_json::json!([1])))
                .unwrap_err()
                .contains("object")
        );
    }

    #[test]
    fn a_hmac_signature_over_a_node_card_fails_even_with_the_header_forged() {
        // A JWKS holding a symmetric key named like the node's is no help to a forger: HS256
        // is refused before any key is looked at.
        let key = key();
        let signed = sign_card(&key, card(), &jwks_url(BASE)).unwrap();
        let mut forged = signed.signatures[0].clone();
        forged.protected = header(serde_json::json!({ "alg": "HS256", "kid": key.kid() }));
        assert!(parse_protected(&forged.protected).is_err());
    }

    #[test]
    fn only_a_same_origin_jku_is_followed() {
        let card_url = "https://node.example:8443/agents/coder/.well-known/agent-card.json";
        assert!(allowed_jku(card_url, "https://node.example:8443/.well-known/jwks.json").is_ok());
        for foreign in [
            "https://evil.example:8443/.well-known/jwks.json",
            "http://node.example:8443/.well-known/jwks.json",
            "https://node.example/.well-known/jwks.json",
            "https://node.example:8444/.well-known/jwks.json",
        ] {
            let error = allowed_jku(card_url, foreign).unwrap_err();
            assert!(
                error.contains("cannot vouch for itself"),
                "{foreign}: {error}"
            );
        }
        // The default port is the same origin written either way.
        assert!(
            allowed_jku(
                "https://node.example/.well-known/agent-card.json",
                "https://node.example:443/.well-known/jwks.json"
            )
            .is_ok()
        );
        assert!(allowed_jku(card_url, "file:///srv/jwks.json").is_err());
        assert!(allowed_jku(card_url, "not a url").is_err());
    }

    #[test]
    fn a_wrong_kid_or_a_key_of_another_kind_fails() {
        let key = key();
        let signed = sign_card(&key, card(), &jwks_url(BASE)).unwrap();
        let signature = &signed.signatures[0];
        let mut protected = parse_protected(&signature.protected).unwrap();
        let payload = payload(&signed);
        // Another node's key set.
        let other = self::key();
        let error = check_signature(signature, &protected, &payload, &other.jwks()).unwrap_err();
        assert!(error.contains("no key"), "{error}");
        // The other key under our kid: the signature does not match.
        let mut impostor = other.jwk().clone();
        impostor.common.key_id = Some(key.kid().to_owned());
        let keys = JwkSet {
            keys: vec![impostor],
        };
        let error = check_signature(signature, &protected, &payload, &keys).unwrap_err();
        assert!(error.contains("does not match"), "{error}");
        // The header claims ES256 for an Ed25519 key (and the key says EdDSA).
        protected.alg = Algorithm::ES256;
        let error = check_signature(signature, &protected, &payload, &key.jwks()).unwrap_err();
        assert!(error.contains("EdDSA"), "{error}");
        let mut loose = key.jwk().clone();
        loose.common.key_algorithm = None;
        let error = check_signature(
            signature,
            &protected,
            &payload,
            &JwkSet { keys: vec![loose] },
        )
        .unwrap_err();
        assert!(error.contains("does not fit"), "{error}");
    }

    #[tokio::test]
    async fn a_given_key_set_is_used_and_a_card_without_jku_needs_one() {
        let key = key();
        let signed = sign_card(&key, card(), &jwks_url(BASE)).unwrap();
        let mut verifier = Verifier::new(Some(key.jwks()), client());
        let reports = verifier
            .verify(&signed, "https://elsewhere.example/card.json")
            .await
            .unwrap();
        assert_eq!(reports.len(), 1);
        assert!(reports[0].ok, "{reports:?}");
        assert_eq!(reports[0].kid.as_deref(), Some(key.kid()));
        assert_eq!(reports[0].alg.as_deref(), Some("EdDSA"));
        // Without --jwks a foreign jku is refused before any fetch.
        let mut verifier = Verifier::new(None, client());
        let reports = verifier
            .verify(&signed, "https://elsewhere.example/card.json")
            .await
            .unwrap();
        assert!(!reports[0].ok);
        assert!(
            reports[0]
                .error
                .as_deref()
                .unwrap()
                .contains("cannot vouch for itself")
        );
        assert!(
            verifier
                .verify(&card(), "https://elsewhere.example/card.json")
                .await
                .unwrap()
                .is_empty()
        );
    }
}
