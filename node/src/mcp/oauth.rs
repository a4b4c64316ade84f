//! OAuth 2.1 for HTTP MCP servers: the SDK's authorization flow, with tokens kept encrypted
//! in the data directory.
//!
//! The flow itself is the SDK's (rmcp's `auth`): discovery (protected resource metadata from
//! the server's `WWW-Authenticate` challenge or its well-known paths, authorization server
//! metadata, the 2025-03-26 fallbacks), client registration (a pre-registered client, a client
//! ID metadata document, or dynamic registration, in that order), PKCE, resource indicators,
//! the `iss` check of RFC 9207, scope selection from the challenge, refresh before expiry and
//! once more when the server rejects a token. This module adds what the SDK leaves to its
//! user: where tokens live ([`Vault`]) and the browser round trip of `mew mcp login`
//! ([`login`]).
//!
//! # Where tokens live
//!
//! `<data_dir>/mcp-oauth/` (owner-only), one file per server and principal, sealed with
//! AES-256-GCM under a random key created there on first use (`key`, owner-only). The server's
//! name, its URL and the principal are the sealed data's associated data: a file copied to
//! another server's name, or left behind when the server's URL changed, does not open, and is
//! taken as no token. A copy of a token file alone reveals nothing.

use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::digest::{SHA256, digest};
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationRequest, AuthorizationSession, CredentialStore,
    OAuthClientConfig, StoredCredentials, WWWAuthenticateParams,
};
use tokio::sync::oneshot;

use crate::config::mcp::McpOAuth;
use crate::tools::write_atomic;

/// The directory under the data directory.
pub(crate) const DIR: &str = "mcp-oauth";
/// The key file in it.
const KEY_FILE: &str = "key";
/// The principal of the node's own tokens: those `mew mcp login` gets, used for every task.
pub(crate) const NODE_PRINCIPAL: &str = "";
/// The client name given in dynamic client registration.
const CLIENT_NAME: &str = "Mew";
/// The path of the loopback callback.
const CALLBACK_PATH: &str = "/callback";

/// The sealed token files of one data directory.
pub(crate) struct Vault {
    dir: PathBuf,
    /// Read (or created) on first use, so a node that never signs in writes nothing.
    key: OnceLock<LessSafeKey>,
    /// Serializes the key's creation within this process.
    creating: Mutex<()>,
    /// What was read, by sealed file and what it is bound to, with the file's stamp then: a
    /// file rewritten since (by a sign-in of this process or of `mew mcp login`) is read again.
    read: Mutex<std::collections::HashMap<String, Read>>,
}

/// A file's content as read, with the file's stamp then.
type Read = (Option<FileStamp>, Option<StoredCredentials>);

/// What tells a file's versions apart: atomic writes replace the file (a new inode).
type FileStamp = (Option<std::time::SystemTime>, u64, u64);

fn stamp(path: &Path) -> io::Result<Option<FileStamp>> {
    match std::fs::metadata(path) {
        #[cfg(unix)]
        Ok(meta) => Ok(Some((
            meta.modified().ok(),
            meta.len(),
            std::os::unix::fs::MetadataExt::ino(&meta),
        ))),
        #[cfg(not(unix))]
        Ok(meta) => Ok(Some((meta.modified().ok(), meta.len(), 0))),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err),
    }
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vault").field("dir", &self.dir).finish()
    }
}

impl Vault {
    /// The vault of `data_dir` (nothing is read or written yet).
    pub(crate) fn new(data_dir: &Path) -> Self {
        Self {
            dir: data_dir.join(DIR),
            key: OnceLock::new(),
            creating: Mutex::new(()),
            read: Mutex::default(),
        }
    }

    /// The sealing key, created (owner-only) on first use.
    fn key(&self) -> io::Result<&LessSafeKey> {
        if let Some(key) = self.key.get() {
            return Ok(key);
        }
        let _creating = self.creating.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(key) = self.key.get() {
            return Ok(key);
        }
        create_private_dir(&self.dir)?;
        let path = self.dir.join(KEY_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                let mut bytes = vec![0u8; AES_256_GCM.key_len()];
                aws_lc_rs::rand::fill(&mut bytes).map_err(|_| io::Error::other("no randomness"))?;
                let mut options = std::fs::OpenOptions::new();
                options.write(true).create_new(true);
                #[cfg(unix)]
                std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
                let mut file = options.open(&path)?;
                file.write_all(&bytes)?;
                file.sync_all()?;
                bytes
            }
            Err(err) => return Err(err),
        };
        let key = UnboundKey::new(&AES_256_GCM, &bytes).map_err(|_| {
            io::Error::other(format!(
                "{} is not a token key (32 bytes); remove it and sign in again",
                path.display()
            ))
        })?;
        Ok(self.key.get_or_init(|| LessSafeKey::new(key)))
    }

    /// The file of `server`'s tokens for `principal`.
    fn path(&self, server: &str, principal: &str) -> PathBuf {
        let who = if principal == NODE_PRINCIPAL {
            "node".to_owned()
        } else {
            // Principals are arbitrary text (a JWT's subject); their hash names the file.
            let hash = digest(&SHA256, principal.as_bytes());
            hash.as_ref()[..16]
                .iter()
                .map(|byte| format!("{byte:02x}"))
                .collect()
        };
        self.dir.join(server).join(format!("{who}.token"))
    }

    /// The tokens of `server` at `url` for `principal`; `None` when there are none, or when
    /// the file was sealed for another server, URL or principal (see the module docs).
    pub(crate) fn load(
        &self,
        server: &str,
        url: &str,
        principal: &str,
    ) -> io::Result<Option<StoredCredentials>> {
        let path = self.path(server, principal);
        let plain = self.open(&path, &associated(server, url, principal), server)?;
        Ok(plain.and_then(|plain| serde_json::from_slice(&plain).ok()))
    }

    /// The sealed file at `path`, opened with `aad`; `None` when there is none or it does not
    /// open (sealed for something else, or damaged).
    fn open(&self, path: &Path, aad: &str, server: &str) -> io::Result<Option<Vec<u8>>> {
        let mut sealed = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(err),
        };
        if sealed.len() < NONCE_LEN {
            return Ok(None);
        }
        let key = self.key()?;
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&sealed[..NONCE_LEN]);
        let body = &mut sealed[NONCE_LEN..];
        let Ok(plain) = key.open_in_place(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad.as_bytes()),
            body,
        ) else {
            tracing::warn!(
                server,
                "{} does not open for this server's URL; sign in again",
                path.display()
            );
            return Ok(None);
        };
        Ok(Some(plain.to_vec()))
    }

    /// Seals `plain` with `aad` and writes it to `path` (atomically: the old file or the new
    /// one, never half).
    fn seal(&self, path: &Path, aad: &str, mut plain: Vec<u8>) -> io::Result<()> {
        let key = self.key()?;
        let mut nonce = [0u8; NONCE_LEN];
        aws_lc_rs::rand::fill(&mut nonce).map_err(|_| io::Error::other("no randomness"))?;
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad.as_bytes()),
            &mut plain,
        )
        .map_err(|_| io::Error::other("cannot seal the tokens"))?;
        if let Some(dir) = path.parent() {
            create_private_dir(dir)?;
        }
        let mut sealed = nonce.to_vec();
        sealed.extend_from_slice(&plain);
        write_atomic(path, &sealed)
    }

    /// The DPoP key of `server` at `url` for `principal` (the key its tokens are bound to),
    /// sealed beside its tokens; made on first use.
    pub(crate) fn dpop_key(
        &self,
        server: &str,
        url: &str,
        principal: &str,
    ) -> io::Result<super::dpop::DpopKey> {
        let path = self.path(server, principal).with_extension("dpop");
        let aad = format!("dpop\0{}", associated(server, url, principal));
        // The sealing key first: it takes `creating` itself.
        self.key()?;
        let _creating = self.creating.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(pkcs8) = self.open(&path, &aad, server)?
            && let Ok(key) = super::dpop::DpopKey::from_pkcs8(&pkcs8)
        {
            return Ok(key);
        }
        let key = super::dpop::DpopKey::generate().map_err(io::Error::other)?;
        self.seal(&path, &aad, key.pkcs8().to_vec())?;
        Ok(key)
    }

    /// [`Self::load`], kept until the file changes.
    fn read(
        &self,
        server: &str,
        url: &str,
        principal: &str,
    ) -> io::Result<Option<StoredCredentials>> {
        let now = stamp(&self.path(server, principal))?;
        let bound = associated(server, url, principal);
        let mut read = self.read.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((seen, credentials)) = read.get(&bound)
            && *seen == now
        {
            return Ok(credentials.clone());
        }
        let credentials = self.load(server, url, principal)?;
        read.insert(bound, (now, credentials.clone()));
        Ok(credentials)
    }

    /// Seals and writes `credentials` (atomically: the old file or the new one, never half).
    pub(crate) fn save(
        &self,
        server: &str,
        url: &str,
        principal: &str,
        credentials: &StoredCredentials,
    ) -> io::Result<()> {
        let body = serde_json::to_vec(credentials).map_err(io::Error::other)?;
        let path = self.path(server, principal);
        self.seal(&path, &associated(server, url, principal), body)
    }

    /// Removes `server`'s tokens for `principal` (and the DPoP key they were bound to);
    /// whether there were any.
    pub(crate) fn remove(&self, server: &str, principal: &str) -> io::Result<bool> {
        let path = self.path(server, principal);
        match std::fs::remove_file(path.with_extension("dpop")) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(err),
        }
        match std::fs::remove_file(path) {
            Ok(()) => Ok(true),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// The SDK's view of `server`'s tokens for `principal`.
    pub(crate) fn entry(self: &Arc<Self>, server: &str, url: &str, principal: &str) -> VaultEntry {
        VaultEntry {
            vault: self.clone(),
            server: server.to_owned(),
            url: url.to_owned(),
            principal: principal.to_owned(),
        }
    }
}

/// What a sealed file is bound to.
fn associated(server: &str, url: &str, principal: &str) -> String {
    format!("mew mcp oauth\0{server}\0{url}\0{principal}")
}

/// Creates `dir` (and its parents) readable by its owner only.
fn create_private_dir(dir: &Path) -> io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// One server's tokens for one principal, as the SDK's credential store. The SDK reads them
/// before every request: the vault keeps what it read (see [`Vault::read`]).
#[derive(Clone)]
pub(crate) struct VaultEntry {
    vault: Arc<Vault>,
    server: String,
    url: String,
    principal: String,
}

impl VaultEntry {
    /// Whether there is an access token.
    pub(crate) fn has_token(&self) -> io::Result<bool> {
        Ok(self
            .read()?
            .is_some_and(|credentials| credentials.token_response.is_some()))
    }

    fn read(&self) -> io::Result<Option<StoredCredentials>> {
        self.vault.read(&self.server, &self.url, &self.principal)
    }

    /// The DPoP key its tokens are bound to (see [`Vault::dpop_key`]).
    pub(crate) fn dpop_key(&self) -> io::Result<Arc<super::dpop::DpopKey>> {
        self.vault
            .dpop_key(&self.server, &self.url, &self.principal)
            .map(Arc::new)
    }

    /// Whether its stored token is DPoP-bound (its `token_type` is `DPoP`).
    fn holds_dpop_token(&self) -> bool {
        self.read().ok().flatten().is_some_and(|credentials| {
            serde_json::to_value(&credentials.token_response)
                .ok()
                .and_then(|token| {
                    token
                        .get("token_type")
                        .and_then(|kind| kind.as_str())
                        .map(|kind| kind.eq_ignore_ascii_case("dpop"))
                })
                .unwrap_or(false)
        })
    }
}

/// The DPoP key the tokens of `entry` are (to be) bound to, when they are: `oauth.dpop`, a
/// server whose `challenge` offers the DPoP scheme, or a stored DPoP-bound token.
pub(crate) fn dpop_key(
    entry: &VaultEntry,
    oauth: &McpOAuth,
    challenge: Option<&str>,
) -> Result<Option<Arc<super::dpop::DpopKey>>, String> {
    let wanted =
        oauth.dpop || challenge.is_some_and(super::dpop::offers_dpop) || entry.holds_dpop_token();
    if !wanted {
        return Ok(None);
    }
    entry
        .dpop_key()
        .map(Some)
        .map_err(|err| format!("cannot keep the DPoP key: {err}"))
}

/// A new authorization manager of the server at `url`; with `dpop`, its token requests carry
/// proofs of that key (see [`super::dpop`]).
async fn new_manager(
    url: &str,
    dpop: Option<Arc<super::dpop::DpopKey>>,
) -> Result<AuthorizationManager, String> {
    match dpop {
        None => AuthorizationManager::new(url).await,
        Some(key) => {
            let http = super::dpop::oauth_http(url, key)?;
            AuthorizationManager::new_with_oauth_http_client(url, http).await
        }
    }
    .map_err(|err| describe(&err))
}

fn store_error(err: io::Error) -> AuthError {
    AuthError::CredentialStoreError(format!("the MCP token store: {err}"))
}

#[async_trait::async_trait]
impl CredentialStore for VaultEntry {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        self.read().map_err(store_error)
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        self.vault
            .save(&self.server, &self.url, &self.principal, &credentials)
            .map_err(store_error)?;
        Ok(())
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.vault
            .remove(&self.server, &self.principal)
            .map_err(store_error)?;
        Ok(())
    }
}

/// An SDK error, in a sentence.
pub(super) fn describe(err: &AuthError) -> String {
    super::connect::chain(err)
}

/// The authorization manager of the server at `url`, keeping its tokens in `entry`. When there
/// are tokens, the server's authorization metadata is discovered (so they can be refreshed)
/// and the client they were issued to is configured, with the configured secret.
pub(super) async fn manager(
    url: &str,
    entry: VaultEntry,
    oauth: &McpOAuth,
    dpop: Option<Arc<super::dpop::DpopKey>>,
) -> Result<AuthorizationManager, String> {
    let mut manager = new_manager(url, dpop).await?;
    let has_token = entry.has_token().map_err(|err| err.to_string())?;
    manager.set_credential_store(entry);
    if has_token {
        let ready = manager
            .initialize_from_store()
            .await
            .map_err(|err| format!("cannot use its stored token: {}", describe(&err)))?;
        if ready && let (Some(id), Some(secret)) = (&oauth.client_id, &oauth.client_secret) {
            manager
                .configure_client(
                    OAuthClientConfig::new(id.clone(), url.to_owned())
                        .with_client_secret(secret.clone()),
                )
                .map_err(|err| describe(&err))?;
        }
    }
    Ok(manager)
}

/// The authorization manager of the server at `url` with a new token of the client
/// credentials grant (SEP-1046): the client's configured `client_id` and `client_secret`, no
/// user. The token is kept in `entry`; a connection gets a new one.
pub(super) async fn client_credentials(
    url: &str,
    entry: VaultEntry,
    oauth: &McpOAuth,
    timeout: Duration,
) -> Result<AuthorizationManager, String> {
    let (Some(client_id), Some(client_secret)) = (&oauth.client_id, &oauth.client_secret) else {
        return Err(
            "the client credentials grant needs `client_id` and `client_secret`".to_owned(),
        );
    };
    let challenge = challenge(url, timeout).await?;
    let (mut manager, metadata) = discover(url, challenge.as_deref(), None).await?;
    manager.set_metadata(metadata);
    manager.set_credential_store(entry);
    let config = rmcp::transport::auth::ClientCredentialsConfig::ClientSecret {
        client_id: client_id.clone(),
        client_secret: client_secret.clone(),
        scopes: oauth.scopes.clone(),
        resource: Some(url.to_owned()),
    };
    manager
        .validate_client_credentials_metadata(&config)
        .and_then(|()| manager.configure_client_credentials(&config))
        .map_err(|err| describe(&err))?;
    manager
        .exchange_client_credentials(&config)
        .await
        .map_err(|err| format!("the client credentials grant failed: {}", describe(&err)))?;
    Ok(manager)
}

/// What [`revoke`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Revoked {
    /// The authorization server took the revocation of the grant.
    Done,
    /// Its metadata names no revocation endpoint.
    NotOffered,
    /// There was no token to revoke.
    NoToken,
}

/// Revokes the grant of `credentials` at the authorization server of the server at `url`
/// (RFC 7009), where its metadata names a revocation endpoint: the refresh token, which ends
/// the grant, else the access token. A confidential client (`oauth.client_secret`)
/// authenticates with HTTP Basic, a public one names itself in the body.
///
/// One form POST, written here: rmcp's flow has no revocation, and the `oauth2` crate's (in
/// the tree under rmcp) needs an HTTP client of its own reqwest version or an adapter longer
/// than this request.
pub(crate) async fn revoke(
    url: &str,
    credentials: &StoredCredentials,
    oauth: &McpOAuth,
    timeout: Duration,
) -> Result<Revoked, String> {
    let token = serde_json::to_value(&credentials.token_response).unwrap_or_default();
    let text = |field: &str| token.get(field).and_then(|v| v.as_str()).map(str::to_owned);
    let Some((token, hint)) = text("refresh_token")
        .map(|t| (t, "refresh_token"))
        .or_else(|| text("access_token").map(|t| (t, "access_token")))
    else {
        return Ok(Revoked::NoToken);
    };
    let challenge = challenge(url, timeout).await.ok().flatten();
    let (_, metadata) = discover(url, challenge.as_deref(), None).await?;
    let Some(endpoint) = metadata
        .additional_fields
        .get("revocation_endpoint")
        .and_then(|v| v.as_str())
    else {
        return Ok(Revoked::NotOffered);
    };
    let client = http_client(timeout)?;
    let mut form = vec![("token", token), ("token_type_hint", hint.to_owned())];
    let mut request = client.post(endpoint);
    match &oauth.client_secret {
        Some(secret) => request = request.basic_auth(&credentials.client_id, Some(secret)),
        None => form.push(("client_id", credentials.client_id.clone())),
    }
    let response = request
        .form(&form)
        .send()
        .await
        .map_err(|err| format!("cannot reach {endpoint}: {}", super::connect::chain(&err)))?;
    // RFC 7009 2.2: 200 whether or not the token was still valid.
    if response.status().is_success() {
        Ok(Revoked::Done)
    } else {
        Err(format!("{endpoint} answered {}", response.status()))
    }
}

/// A new authorization manager of the server at `url`, and its authorization server's
/// metadata, discovered from `challenge` (the server's 401 or 403) or the well-known places.
pub(super) async fn discover(
    url: &str,
    challenge: Option<&str>,
    dpop: Option<Arc<super::dpop::DpopKey>>,
) -> Result<
    (
        AuthorizationManager,
        rmcp::transport::auth::AuthorizationMetadata,
    ),
    String,
> {
    let manager = new_manager(url, dpop).await?;
    let resolution = manager
        .resolve_metadata_from_challenge(challenge)
        .await
        .map_err(|err| {
            format!(
                "cannot discover its authorization server: {}",
                describe(&err)
            )
        })?;
    Ok((manager, resolution.metadata))
}

/// The HTTP client of Mew's own OAuth requests: bounded by `timeout`, no redirects.
pub(super) fn http_client(timeout: Duration) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|err| super::connect::chain(&err))
}

/// The `state` query parameter of `url`.
fn state_of(url: &str) -> Option<String> {
    reqwest::Url::parse(url).ok().and_then(|parsed| {
        parsed
            .query_pairs()
            .find(|(key, _)| key == "state")
            .map(|(_, value)| value.into_owned())
    })
}

/// The `WWW-Authenticate` challenge of the server at `url`, from one unauthenticated request
/// (a `ping`); `None` when it did not answer 401 or 403.
pub(crate) async fn challenge(url: &str, timeout: Duration) -> Result<Option<String>, String> {
    let client = http_client(timeout)?;
    let response = client
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","id":"mew-authorization-probe","method":"ping"}"#)
        .send()
        .await
        .map_err(|err| format!("cannot reach {url}: {}", super::connect::chain(&err)))?;
    if !matches!(response.status().as_u16(), 401 | 403) {
        return Ok(None);
    }
    Ok(Some(
        response
            .headers()
            .get("www-authenticate")
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
    ))
}

/// The scopes a new authorization asks for: the configured ones; and when the server asks
/// for more (a challenge naming scopes) after an earlier grant, those granted before as well,
/// so stepping up never loses a scope. Empty: let the SDK choose from the challenge and the
/// server's metadata.
fn scopes_to_ask(
    url: &str,
    configured: &[String],
    entry: &VaultEntry,
    challenge: Option<&str>,
) -> Vec<String> {
    let asked: Vec<String> = challenge
        .zip(reqwest::Url::parse(url).ok())
        .and_then(|(challenge, base)| WWWAuthenticateParams::parse(challenge, &base).scope)
        .map(|scope| scope.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default();
    let granted = entry
        .read()
        .ok()
        .flatten()
        .map(|credentials| credentials.granted_scopes)
        .unwrap_or_default();
    if asked.is_empty() || (granted.is_empty() && configured.is_empty()) {
        return configured.to_vec();
    }
    let mut scopes: Vec<String> = Vec::new();
    for scope in configured.iter().chain(&granted).chain(&asked) {
        if !scopes.contains(scope) {
            scopes.push(scope.clone());
        }
    }
    scopes
}

/// A new authorization of the server at `url` whose tokens go to `entry`, coming back to
/// `redirect_uri`: discovery from `challenge` (the server's 401 or 403), then registration
/// (pre-registered, metadata document, or dynamic) and the authorization URL with PKCE.
async fn session(
    url: &str,
    entry: &VaultEntry,
    oauth: &McpOAuth,
    challenge: Option<&str>,
    redirect_uri: &str,
) -> Result<AuthorizationSession, String> {
    let dpop = dpop_key(entry, oauth, challenge)?;
    let (mut manager, metadata) = discover(url, challenge, dpop).await?;
    manager.set_credential_store(entry.clone());
    manager.set_metadata(metadata);
    let mut request = AuthorizationRequest::new(redirect_uri.to_owned())
        .with_client_name(CLIENT_NAME)
        .with_initial_scope_selection();
    let scopes = scopes_to_ask(url, &oauth.scopes, entry, challenge);
    if !scopes.is_empty() {
        request = request.with_scopes(scopes);
    }
    if let Some(id) = &oauth.client_id {
        request = request.with_preregistered_client(id.clone());
        if let Some(secret) = &oauth.client_secret {
            request = request.with_client_secret(secret.clone());
        }
    }
    if let Some(document) = &oauth.client_metadata_url {
        request = request.with_client_metadata_url(document.clone());
    }
    AuthorizationSession::new(manager, request)
        .await
        .map_err(|(_, err)| describe(&err))
}

/// The path of the node's own callback, where a sign-in a task asked for comes back.
pub(crate) const NODE_CALLBACK_PATH: &str = "/mew/v1/mcp/oauth/callback";

/// How long a sign-in started by a task waits for its callback.
const SIGN_IN_WAIT: Duration = Duration::from_secs(15 * 60);

/// The most sign-ins that wait for their callback at once.
const MAX_SIGN_INS: usize = 64;

/// What the node does once a sign-in completed: the server connects again.
pub(crate) type AfterSignIn =
    Box<dyn FnOnce() -> futures_util::future::BoxFuture<'static, ()> + Send>;

/// Continues the interrupted task with the text, as its owner would (a sign-in it waited for
/// completed).
pub(crate) type Resumer = Arc<dyn Fn(mew_cards::TaskId, String) + Send + Sync>;

/// The sign-ins tasks asked their callers for, waiting for the authorization server to send
/// the browser back to the node's callback ([`NODE_CALLBACK_PATH`]). Only a node that serves
/// HTTP enables them ([`Self::enable`]); elsewhere a server that asks for authorization is
/// signed in to with `mew mcp login`.
#[derive(Default)]
pub(crate) struct SignIns {
    /// The callback's full URL, once the node serves.
    callback: OnceLock<String>,
    /// What continues a task whose sign-in completed.
    resumer: OnceLock<Resumer>,
    /// Whether a task may sign the node itself in (its tokens then act for every task): only
    /// where callers are not told apart.
    node_sign_ins: std::sync::atomic::AtomicBool,
    /// By the `state` of each authorization URL.
    pending: Mutex<std::collections::HashMap<String, PendingSignIn>>,
}

struct PendingSignIn {
    server: String,
    session: AuthorizationSession,
    started: std::time::Instant,
    task: Option<mew_cards::TaskId>,
    then: AfterSignIn,
}

impl std::fmt::Debug for SignIns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignIns")
            .field("callback", &self.callback.get())
            .finish_non_exhaustive()
    }
}

impl SignIns {
    /// Lets tasks ask for sign-ins that come back to `node_url` (the node's public URL), and
    /// continues their tasks with `resumer`. `node_sign_ins`: whether a task may sign the node
    /// itself in (see [`Self::node_sign_ins`]).
    pub(crate) fn enable(&self, node_url: &str, resumer: Resumer, node_sign_ins: bool) {
        self.node_sign_ins
            .store(node_sign_ins, std::sync::atomic::Ordering::Relaxed);
        let _ = self.callback.set(format!(
            "{}{NODE_CALLBACK_PATH}",
            node_url.trim_end_matches('/')
        ));
        let _ = self.resumer.set(resumer);
    }

    /// Whether tasks may ask for sign-ins here.
    pub(crate) fn enabled(&self) -> bool {
        self.callback.get().is_some()
    }

    /// Whether a task may sign the node itself in: its tokens act for every task, so only
    /// where callers are not told apart (no `auth:`). A caller of a server with
    /// `oauth.per_caller` signs in for themselves anywhere.
    pub(crate) fn node_sign_ins(&self) -> bool {
        self.node_sign_ins
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn pending(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, PendingSignIn>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a sign-in to the server of `entry` for the task `task`: its tokens go to
    /// `entry`, and `then` runs once they are there. Returns the authorization URL for the
    /// user to open.
    pub(crate) async fn start(
        &self,
        entry: &VaultEntry,
        oauth: &McpOAuth,
        challenge: Option<&str>,
        task: Option<mew_cards::TaskId>,
        then: AfterSignIn,
    ) -> Result<String, String> {
        let Some(callback) = self.callback.get() else {
            return Err("this node takes no sign-ins (it does not serve HTTP)".to_owned());
        };
        {
            let mut pending = self.pending();
            pending.retain(|_, sign_in| sign_in.started.elapsed() < SIGN_IN_WAIT);
            if pending.len() >= MAX_SIGN_INS {
                return Err(format!(
                    "{MAX_SIGN_INS} sign-ins wait for their callers already; try again later"
                ));
            }
        }
        let session = session(&entry.url, entry, oauth, challenge, callback).await?;
        let address = session.get_authorization_url().to_owned();
        let state = state_of(&address).ok_or("the authorization URL has no state")?;
        self.pending().insert(
            state,
            PendingSignIn {
                server: entry.server.clone(),
                session,
                started: std::time::Instant::now(),
                task,
                then,
            },
        );
        Ok(address)
    }

    /// The authorization server sent the browser back with `query`: the code is exchanged for
    /// tokens, the server connects again, and the task that asked goes on. Returns the
    /// server's name.
    pub(crate) async fn complete(&self, query: &str) -> Result<String, String> {
        let Some(callback) = self.callback.get() else {
            return Err("this node takes no sign-ins".to_owned());
        };
        let address = format!("{callback}?{query}");
        let state = state_of(&address).ok_or("the callback has no state")?;
        let sign_in = self
            .pending()
            .remove(&state)
            .filter(|sign_in| sign_in.started.elapsed() < SIGN_IN_WAIT)
            .ok_or("no sign-in waits for this callback: it was used, or it expired")?;
        let PendingSignIn {
            server,
            session,
            task,
            then,
            ..
        } = sign_in;
        session
            .handle_callback_url(&address)
            .await
            .map_err(|err| format!("the authorization failed: {}", describe(&err)))?;
        then().await;
        if let (Some(task), Some(resumer)) = (task, self.resumer.get()) {
            resumer(task, format!("Signed in to the MCP server {server}."));
        }
        Ok(server)
    }
}

/// How the authorization URL reaches the user.
pub(crate) trait Browser: Send + Sync {
    /// Shows (or opens) `url`.
    fn open(&self, url: &str);
}

/// What [`login`] got.
#[derive(Debug)]
pub(crate) struct Granted {
    /// The scopes granted, as the token response says (or as requested).
    pub(crate) scopes: Vec<String>,
    /// Whether a refresh token came with it.
    pub(crate) refreshable: bool,
}

/// Signs in to the server `server` at `url`, as `mew mcp login` does: discovery from
/// `challenge` (the server's 401 or 403), registration, then the authorization URL is given to
/// `browser`, and the authorization server's redirect to a loopback listener (on
/// `oauth.callback_port`, or any free port) completes the flow. The tokens go to `entry`.
/// Bounded by `wait` for the user's part.
pub(crate) async fn login(
    url: &str,
    entry: VaultEntry,
    oauth: &McpOAuth,
    challenge: Option<&str>,
    browser: &dyn Browser,
    wait: Duration,
) -> Result<Granted, String> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", oauth.callback_port.unwrap_or(0)))
        .await
        .map_err(|err| format!("cannot listen for the authorization callback: {err}"))?;
    let port = listener
        .local_addr()
        .map_err(|err| format!("cannot listen for the authorization callback: {err}"))?
        .port();
    let redirect_uri = format!("http://127.0.0.1:{port}{CALLBACK_PATH}");
    let session = session(url, &entry, oauth, challenge, &redirect_uri).await?;

    let (sender, receiver) = oneshot::channel::<String>();
    let sender = Arc::new(Mutex::new(Some(sender)));
    let app = axum::Router::new().route(
        CALLBACK_PATH,
        axum::routing::get(move |uri: axum::http::Uri| {
            let sender = sender.clone();
            async move {
                if let Some(sender) = sender.lock().unwrap_or_else(PoisonError::into_inner).take() {
                    let _ = sender.send(uri.to_string());
                }
                axum::response::Html(
                    "<!doctype html><title>Mew</title><p>Signed in. You can close this window.",
                )
            }
        }),
    );
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await;
    });
    browser.open(session.get_authorization_url());
    let callback = tokio::time::timeout(wait, receiver).await;
    let _ = stop.send(());
    let _ = server.await;
    let path = match callback {
        Ok(Ok(path)) => path,
        Ok(Err(_)) => return Err("the callback listener stopped".to_owned()),
        Err(_) => {
            return Err(format!(
                "no answer from the authorization server within {wait:?}"
            ));
        }
    };
    session
        .handle_callback_url(&format!("http://127.0.0.1:{port}{path}"))
        .await
        .map_err(|err| format!("the authorization failed: {}", describe(&err)))?;
    let stored = entry.read().map_err(|err| err.to_string())?;
    let refreshable = stored
        .as_ref()
        .and_then(|credentials| serde_json::to_value(&credentials.token_response).ok())
        .is_some_and(|token| token.get("refresh_token").is_some_and(|t| !t.is_null()));
    Ok(Granted {
        scopes: stored
            .map(|credentials| credentials.granted_scopes)
            .unwrap_or_default(),
        refreshable,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    const URL: &str = "https://mcp.example.com/mcp";

    fn credentials(token: &str) -> StoredCredentials {
        let token_response = serde_json::from_value(serde_json::json!({
            "access_token": token,
            "token_type": "Bearer",
            "refresh_token": "refresh-1",
            "expires_in": 3600,
        }))
        .unwrap();
        StoredCredentials::new(
            "client-1".to_owned(),
            Some(token_response),
            vec!["read".to_owned()],
            Some(1),
        )
    }

    fn token_of(credentials: &StoredCredentials) -> serde_json::Value {
        serde_json::to_value(&credentials.token_response).unwrap()["access_token"].clone()
    }

    #[test]
    fn tokens_are_sealed_on_disk_and_open_only_for_their_server_url_and_principal() {
        let data = tempfile::tempdir().unwrap();
        let vault = Vault::new(data.path());
        assert!(vault.load("linear", URL, NODE_PRINCIPAL).unwrap().is_none());
        assert!(
            !data.path().join(DIR).exists(),
            "nothing is written before a token is"
        );
        vault
            .save(
                "linear",
                URL,
                NODE_PRINCIPAL,
                &credentials("secret-token-1"),
            )
            .unwrap();

        let file = data.path().join(DIR).join("linear").join("node.token");
        let bytes = std::fs::read(&file).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains("secret-token-1") && !text.contains("refresh-1"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&data.path().join(DIR)), 0o700);
            assert_eq!(mode(&data.path().join(DIR).join(KEY_FILE)), 0o600);
        }

        // A new vault over the same directory (a restarted node) opens it.
        let again = Vault::new(data.path());
        let loaded = again.load("linear", URL, NODE_PRINCIPAL).unwrap().unwrap();
        assert_eq!(token_of(&loaded), "secret-token-1");
        assert_eq!(loaded.granted_scopes, vec!["read".to_owned()]);

        // Another URL, another principal, or the file under another server's name: no token.
        assert!(
            again
                .load("linear", "https://evil.example.com/mcp", NODE_PRINCIPAL)
                .unwrap()
                .is_none()
        );
        assert!(again.load("linear", URL, "alice").unwrap().is_none());
        let other = data.path().join(DIR).join("notion");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::copy(&file, other.join("node.token")).unwrap();
        assert!(again.load("notion", URL, NODE_PRINCIPAL).unwrap().is_none());

        // Each principal has its own file.
        again
            .save("linear", URL, "alice", &credentials("alice-token"))
            .unwrap();
        let alice = again.load("linear", URL, "alice").unwrap().unwrap();
        assert_eq!(token_of(&alice), "alice-token");
        let node = again.load("linear", URL, NODE_PRINCIPAL).unwrap().unwrap();
        assert_eq!(token_of(&node), "secret-token-1");

        assert!(again.remove("linear", NODE_PRINCIPAL).unwrap());
        assert!(!again.remove("linear", NODE_PRINCIPAL).unwrap());
        assert!(again.load("linear", URL, NODE_PRINCIPAL).unwrap().is_none());
        assert!(again.load("linear", URL, "alice").unwrap().is_some());
    }

    #[test]
    fn a_dpop_key_is_sealed_beside_its_tokens_kept_across_restarts_and_removed_with_them() {
        let data = tempfile::tempdir().unwrap();
        let vault = Vault::new(data.path());
        let key = vault.dpop_key("linear", URL, "alice").unwrap();
        // Another process (a restart) reads the same key.
        let again = Vault::new(data.path());
        let read = again.dpop_key("linear", URL, "alice").unwrap();
        assert_eq!(read.thumbprint(), key.thumbprint());
        // Each principal and server has its own; the file holds no readable key.
        assert_ne!(
            again.dpop_key("linear", URL, "bob").unwrap().thumbprint(),
            key.thumbprint()
        );
        let file = again.path("linear", "alice").with_extension("dpop");
        let sealed = std::fs::read(&file).unwrap();
        assert!(!sealed.windows(key.pkcs8().len()).any(|w| w == key.pkcs8()));
        // Logging out removes it: a new sign-in binds its tokens to a new key.
        again
            .save("linear", URL, "alice", &credentials("t"))
            .unwrap();
        assert!(again.remove("linear", "alice").unwrap());
        assert!(!file.exists());
        assert_ne!(
            again.dpop_key("linear", URL, "alice").unwrap().thumbprint(),
            key.thumbprint()
        );
    }

    #[test]
    fn a_damaged_token_file_is_no_token_and_a_damaged_key_is_an_error() {
        let data = tempfile::tempdir().unwrap();
        let vault = Vault::new(data.path());
        vault
            .save("s", URL, NODE_PRINCIPAL, &credentials("t"))
            .unwrap();
        let file = data.path().join(DIR).join("s").join("node.token");
        let mut bytes = std::fs::read(&file).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&file, &bytes).unwrap();
        assert!(vault.load("s", URL, NODE_PRINCIPAL).unwrap().is_none());
        std::fs::write(&file, b"short").unwrap();
        assert!(vault.load("s", URL, NODE_PRINCIPAL).unwrap().is_none());

        let broken = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(broken.path().join(DIR)).unwrap();
        std::fs::write(broken.path().join(DIR).join(KEY_FILE), b"too short").unwrap();
        let err = Vault::new(broken.path())
            .save("s", URL, NODE_PRINCIPAL, &credentials("t"))
            .unwrap_err();
        assert!(err.to_string().contains("not a token key"), "{err}");
    }

    #[tokio::test]
    async fn the_sdk_store_writes_through_and_reads_what_it_saved() {
        let data = tempfile::tempdir().unwrap();
        let vault = Arc::new(Vault::new(data.path()));
        let entry = vault.entry("s", URL, NODE_PRINCIPAL);
        assert!(!entry.has_token().unwrap());
        entry.save(credentials("first")).await.unwrap();
        assert!(entry.has_token().unwrap());
        // Another entry for the same server (another connection) reads the file.
        let other = vault.entry("s", URL, NODE_PRINCIPAL);
        assert_eq!(token_of(&other.load().await.unwrap().unwrap()), "first");
        entry.clear().await.unwrap();
        assert!(entry.load().await.unwrap().is_none());
        assert!(vault.load("s", URL, NODE_PRINCIPAL).unwrap().is_none());
    }

    #[test]
    fn stepping_up_asks_for_the_granted_scopes_and_the_challenged_ones() {
        let data = tempfile::tempdir().unwrap();
        let vault = Arc::new(Vault::new(data.path()));
        let entry = vault.entry("s", URL, NODE_PRINCIPAL);
        let challenge = r#"Bearer error="insufficient_scope", scope="write""#;
        // No earlier grant: the SDK chooses (from the challenge) unless scopes are configured.
        assert!(scopes_to_ask(URL, &[], &entry, Some(challenge)).is_empty());
        assert_eq!(
            scopes_to_ask(URL, &["admin".to_owned()], &entry, Some(challenge)),
            vec!["admin".to_owned(), "write".to_owned()]
        );
        vault
            .save("s", URL, NODE_PRINCIPAL, &credentials("t"))
            .unwrap();
        let entry = vault.entry("s", URL, NODE_PRINCIPAL);
        assert_eq!(
            scopes_to_ask(URL, &[], &entry, Some(challenge)),
            vec!["read".to_owned(), "write".to_owned()]
        );
        // A challenge without scopes leaves the choice as configured.
        assert!(scopes_to_ask(URL, &[], &entry, Some("Bearer")).is_empty());
    }
}
