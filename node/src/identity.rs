//! The node's identity: one Ed25519 signing key (JWS `EdDSA`), created on first start and kept
//! in the data directory as `node-key.pem` (PKCS#8, readable by its owner only).
//!
//! Ed25519 rather than ES256: its signatures are deterministic, so signing every card at start
//! draws no randomness (seeding the process's random generator costs tens of milliseconds),
//! and it is one of the two algorithms the A2A specification names for cards.
//!
//! The key signs what the node says about itself to others: its agent cards (detached JWS),
//! the JWTs it presents to peers, and the JWTs on its push notifications. Receivers verify
//! them against the node's JWKS, served at `/.well-known/jwks.json`. The key id (`kid`) is the
//! RFC 7638 thumbprint of the public key, so it changes exactly when the key does.

pub(crate) mod signing;

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use aws_lc_rs::signature::Ed25519KeyPair;
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use jsonwebtoken::jwk::{Jwk, JwkSet, KeyAlgorithm, PublicKeyUse, ThumbprintHash};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::Serialize;

/// The file in the data directory that holds the key.
pub(crate) const KEY_FILE: &str = "node-key.pem";

/// The path of the node's JWKS, under the node's base URL.
pub(crate) const JWKS_PATH: &str = "/.well-known/jwks.json";

/// The algorithm of every signature the node makes.
pub(crate) const ALGORITHM: Algorithm = Algorithm::EdDSA;

/// The node's signing key and its public half as a JWK.
pub(crate) struct NodeKey {
    /// The key, parsed once: cards are signed with it directly.
    pair: Ed25519KeyPair,
    /// The same key for `jsonwebtoken`'s JWTs.
    encoding: EncodingKey,
    jwk: Jwk,
    kid: String,
    path: PathBuf,
}

impl std::fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeKey")
            .field("kid", &self.kid)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl NodeKey {
    /// The key in `data_dir`, created there (owner-only, written atomically) when absent. A file
    /// that exists but holds no P-256 PKCS#8 key is an error naming it; it is never replaced.
    pub(crate) fn load_or_create(data_dir: &Path) -> anyhow::Result<Self> {
        let path = data_dir.join(KEY_FILE);
        let der = match std::fs::read_to_string(&path) {
            Ok(pem) => pem_body(&pem, PEM_LABEL).ok_or_else(|| {
                anyhow::anyhow!(
                    "{}: not a private key in PKCS#8 PEM; move it away to let the node create a \
                     new key",
                    path.display()
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let der = generate()?;
                write_new(&path, &der)?;
                der
            }
            Err(e) => {
                return Err(e).with_context(|| format!("cannot read {}", path.display()));
            }
        };
        Self::from_pkcs8(&der, path)
    }

    fn from_pkcs8(der: &[u8], path: PathBuf) -> anyhow::Result<Self> {
        let pair = Ed25519KeyPair::from_pkcs8(der).map_err(|e| {
            anyhow::anyhow!(
                "{}: not an Ed25519 private key ({e}); move it away to let the node create a new \
                 key",
                path.display()
            )
        })?;
        // jsonwebtoken reads PKCS#8 v1 (the seed alone), whatever version the file holds.
        let v1 = pair
            .to_pkcs8v1()
            .map_err(|_| anyhow::anyhow!("cannot encode the node key"))?;
        let encoding = EncodingKey::from_ed_der(v1.as_ref());
        let mut jwk = Jwk::from_encoding_key(&encoding, ALGORITHM)
            .context("cannot derive the node key's public JWK")?;
        let kid = jwk
            .thumbprint(ThumbprintHash::SHA256)
            .context("cannot compute the node key's thumbprint")?;
        jwk.common.key_id = Some(kid.clone());
        jwk.common.public_key_use = Some(PublicKeyUse::Signature);
        jwk.common.key_algorithm = Some(KeyAlgorithm::EdDSA);
        Ok(Self {
            pair,
            encoding,
            jwk,
            kid,
            path,
        })
    }

    /// The key id: the RFC 7638 SHA-256 thumbprint of the public key.
    pub(crate) fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key as a JWK (with `kid`, `use: sig` and `alg: EdDSA`).
    pub(crate) fn jwk(&self) -> &Jwk {
        &self.jwk
    }

    /// The node's JWKS: its one public key.
    pub(crate) fn jwks(&self) -> JwkSet {
        JwkSet {
            keys: vec![self.jwk().clone()],
        }
    }

    /// A compact JWT of `claims`, signed with the node key, its header naming `kid` (and `jku`
    /// when given).
    pub(crate) fn sign_jwt<T: Serialize>(
        &self,
        claims: &T,
        jku: Option<&str>,
    ) -> anyhow::Result<String> {
        let mut header = Header::new(ALGORITHM);
        header.kid = Some(self.kid.clone());
        header.jku = jku.map(str::to_owned);
        jsonwebtoken::encode(&header, claims, &self.encoding).context("cannot sign a JWT")
    }

    /// A detached JWS over `payload` (RFC 7515 appendix F): the base64url protected header
    /// and the base64url signature over `protected.base64url(payload)`. `protected` is the
    /// header as a JSON object; `alg` and `kid` are set here, overriding whatever it holds.
    pub(crate) fn sign_detached(
        &self,
        mut protected: serde_json::Map<String, serde_json::Value>,
        payload: &[u8],
    ) -> anyhow::Result<DetachedJws> {
        protected.insert("alg".to_owned(), "EdDSA".into());
        protected.insert("kid".to_owned(), self.kid.clone().into());
        let header = serde_json::to_vec(&protected).context("cannot encode a JWS header")?;
        let protected = URL_SAFE_NO_PAD.encode(header);
        let input = format!("{protected}.{}", URL_SAFE_NO_PAD.encode(payload));
        let signature = self.pair.sign(input.as_bytes());
        Ok(DetachedJws {
            protected,
            signature: URL_SAFE_NO_PAD.encode(signature.as_ref()),
        })
    }
}

/// A detached JWS: the payload travels separately.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DetachedJws {
    /// The base64url-encoded protected header.
    pub(crate) protected: String,
    /// The base64url-encoded signature.
    pub(crate) signature: String,
}

/// A new key as PKCS#8 v1: a random seed from the operating system.
fn generate() -> anyhow::Result<Vec<u8>> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed)
        .map_err(|e| anyhow::anyhow!("no randomness for the node key: {e}"))?;
    let pair = Ed25519KeyPair::from_seed_unchecked(&seed)
        .map_err(|e| anyhow::anyhow!("cannot make the node key: {e}"))?;
    let der = pair
        .to_pkcs8v1()
        .map_err(|_| anyhow::anyhow!("cannot encode the node key"))?;
    Ok(der.as_ref().to_vec())
}

/// The PEM label of a PKCS#8 private key.
const PEM_LABEL: &str = "PRIVATE KEY";

/// The DER inside the first PEM block labelled `label`, or `None` when there is none or it is
/// not base64.
fn pem_body(pem: &str, label: &str) -> Option<Vec<u8>> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = pem.find(&begin)? + begin.len();
    let stop = start + pem[start..].find(&end)?;
    let body: String = pem[start..stop]
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    STANDARD.decode(body).ok()
}

/// `der` as a PEM block labelled `label`, in lines of 64 characters.
fn pem_encode(der: &[u8], label: &str) -> String {
    let body = STANDARD.encode(der);
    let mut pem = format!("-----BEGIN {label}-----\n");
    for line in body.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str(&format!("-----END {label}-----\n"));
    pem
}

/// Writes a new key file readable by its owner only: to a temporary file, synced, then renamed,
/// so a crash never leaves half a key behind.
fn write_new(path: &Path, der: &[u8]) -> anyhow::Result<()> {
    let pem = pem_encode(der, PEM_LABEL);
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let temporary = path.with_extension("pem.new");
    let write = || -> std::io::Result<()> {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&temporary)?;
        file.write_all(pem.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    };
    write().with_context(|| format!("cannot write the node key to {}", path.display()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use jsonwebtoken::{DecodingKey, Validation};

    use super::*;

    #[test]
    fn the_key_is_created_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let first = NodeKey::load_or_create(dir.path()).unwrap();
        let second = NodeKey::load_or_create(dir.path()).unwrap();
        assert_eq!(first.kid(), second.kid());
        assert_eq!(first.jwk(), second.jwk());
        let path = dir.path().join(KEY_FILE);
        let pem = std::fs::read_to_string(&path).unwrap();
        assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"), "{pem}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let other = tempfile::tempdir().unwrap();
        assert_ne!(
            NodeKey::load_or_create(other.path()).unwrap().kid(),
            first.kid()
        );
    }

    #[test]
    fn a_broken_key_file_is_an_error_naming_it_and_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEY_FILE);
        std::fs::write(&path, "not a key").unwrap();
        let error = NodeKey::load_or_create(dir.path()).unwrap_err().to_string();
        assert!(error.contains(KEY_FILE), "{error}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "not a key");
    }

    #[test]
    fn jwts_verify_against_the_jwks_and_name_the_kid() {
        let dir = tempfile::tempdir().unwrap();
        let key = NodeKey::load_or_create(dir.path()).unwrap();
        let claims = serde_json::json!({ "sub": "node", "exp": 4_000_000_000u64 });
        let token = key
            .sign_jwt(&claims, Some("https://node.example/.well-known/jwks.json"))
            .unwrap();
        let header = jsonwebtoken::decode_header(&token).unwrap();
        assert_eq!(header.kid.as_deref(), Some(key.kid()));
        assert_eq!(
            header.jku.as_deref(),
            Some("https://node.example/.well-known/jwks.json")
        );
        let jwks: JwkSet =
            serde_json::from_value(serde_json::to_value(key.jwks()).unwrap()).unwrap();
        let jwk = jwks.find(key.kid()).unwrap();
        let decoding = DecodingKey::from_jwk(jwk).unwrap();
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.required_spec_claims.clear();
        let decoded = jsonwebtoken::decode::<serde_json::Value>(&token, &decoding, &validation)
            .unwrap()
            .claims;
        assert_eq!(decoded["sub"], "node");
        let other = NodeKey::load_or_create(tempfile::tempdir().unwrap().path()).unwrap();
        let wrong = DecodingKey::from_jwk(other.jwk()).unwrap();
        assert!(jsonwebtoken::decode::<serde_json::Value>(&token, &wrong, &validation).is_err());
    }

    #[test]
    fn a_detached_signature_verifies_over_the_payload_only() {
        let dir = tempfile::tempdir().unwrap();
        let key = NodeKey::load_or_create(dir.path()).unwrap();
        let mut header = serde_json::Map::new();
        header.insert("typ".to_owned(), "JOSE".into());
        header.insert("alg".to_owned(), "none".into());
        let jws = key.sign_detached(header, b"{\"a\":1}").unwrap();
        let protected: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(&jws.protected).unwrap()).unwrap();
        assert_eq!(protected["alg"], "EdDSA", "alg cannot be overridden");
        assert_eq!(protected["kid"], key.kid());
        assert_eq!(protected["typ"], "JOSE");
        let decoding = DecodingKey::from_jwk(key.jwk()).unwrap();
        let input =
            |payload: &[u8]| format!("{}.{}", jws.protected, URL_SAFE_NO_PAD.encode(payload));
        assert!(
            jsonwebtoken::crypto::verify(
                &jws.signature,
                input(b"{\"a\":1}").as_bytes(),
                &decoding,
                ALGORITHM
            )
            .unwrap()
        );
        assert!(
            !jsonwebtoken::crypto::verify(
                &jws.signature,
                input(b"{\"a\":2}").as_bytes(),
                &decoding,
                ALGORITHM
            )
            .unwrap()
        );
    }
}
