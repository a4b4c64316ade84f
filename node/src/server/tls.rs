//! HTTPS for `mew up`: the rustls server configuration, with the certificate re-read when its
//! files change and, optionally, client certificates required (mutual TLS). The accept loop
//! (`super::listen`) runs each handshake in the connection's own task, so a slow or broken
//! client never holds up the others.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};
use tracing::{info, warn};

use crate::config::ServerTls;
use crate::config::tls::{certificates, private_key, read};

/// How often, at most, the certificate's files are checked for changes.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The rustls provider of the whole workspace (reqwest's too): aws-lc-rs.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider())
}

/// The server's TLS configuration: the certificate from `tls.cert_file` and `tls.key_file`
/// (re-read when they change), and with `tls.client_ca_file` a verifier that requires a
/// client certificate chained to that CA. Errors name the file.
pub(crate) fn server_config(tls: &ServerTls) -> Result<ServerConfig, String> {
    server_config_checking(tls, CHECK_EVERY)
}

fn server_config_checking(tls: &ServerTls, check_every: Duration) -> Result<ServerConfig, String> {
    let provider = provider();
    let resolver = Arc::new(ReloadingCert::load(
        &tls.cert_file,
        &tls.key_file,
        provider.clone(),
        check_every,
    )?);
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("cannot set up TLS: {error}"))?;
    let builder = match &tls.client_ca_file {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(&read(path)?, path)? {
                roots.add(cert).map_err(|error| {
                    format!("{}: not a CA certificate: {error}", path.display())
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|error| format!("{}: cannot verify clients: {error}", path.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(resolver);
    // The server speaks HTTP/1.1 only.
    // HTTP/2 (gRPC, and any client that prefers it) or HTTP/1.1, as the client offers.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The server certificate, re-read when the modification time of its certificate or key file
/// changes (checked at most every `check_every`, during a handshake). A new pair that cannot
/// be read, or whose key does not match, leaves the old one in use, with a warning.
struct ReloadingCert {
    cert_file: PathBuf,
    key_file: PathBuf,
    provider: Arc<CryptoProvider>,
    check_every: Duration,
    state: Mutex<CertState>,
}

struct CertState {
    key: Arc<CertifiedKey>,
    /// The modification times of the certificate and key files when last read.
    modified: (Option<SystemTime>, Option<SystemTime>),
    checked: Instant,
}

impl fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .finish_non_exhaustive()
    }
}

impl ReloadingCert {
    fn load(
        cert_file: &Path,
        key_file: &Path,
        provider: Arc<CryptoProvider>,
        check_every: Duration,
    ) -> Result<Self, String> {
        let modified = modified(cert_file, key_file);
        let key = certified_key(cert_file, key_file, &provider)?;
        Ok(Self {
            cert_file: cert_file.to_owned(),
            key_file: key_file.to_owned(),
            provider,
            check_every,
            state: Mutex::new(CertState {
                key: Arc::new(key),
                modified,
                checked: Instant::now(),
            }),
        })
    }

    /// The current certificate, re-read first if it is time to check and the files changed.
    fn current(&self) -> Arc<CertifiedKey> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.checked.elapsed() >= self.check_every {
            state.checked = Instant::now();
            let modified = modified(&self.cert_file, &self.key_file);
            if modified != state.modified {
                // Remembered even when the new files are broken: warn once per change.
                state.modified = modified;
                match certified_key(&self.cert_file, &self.key_file, &self.provider) {
                    Ok(key) => {
                        info!(cert = %self.cert_file.display(), "TLS certificate reloaded");
                        state.key = Arc::new(key);
                    }
                    Err(error) => {
                        warn!(%error, "the TLS certificate changed but cannot be used; keeping the previous one");
                    }
                }
            }
        }
        state.key.clone()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

fn modified(cert_file: &Path, key_file: &Path) -> (Option<SystemTime>, Option<SystemTime>) {
    let time = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    (time(cert_file), time(key_file))
}

/// Reads a certificate chain and its key, and checks that they match.
fn certified_key(
    cert_file: &Path,
    key_file: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, String> {
    let chain = certificates(&read(cert_file)?, cert_file)?;
    let key = private_key(&read(key_file)?, key_file)?;
    CertifiedKey::from_der(chain, key, provider).map_err(|error| {
        format!(
            "{} with {}: {error}",
            cert_file.display(),
            key_file.display()
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::fs::File;
    use std::time::UNIX_EPOCH;

    use std::net::SocketAddr;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio_rustls::TlsConnector;
    use tokio_rustls::rustls::ClientConfig;
    use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

    use super::*;

    /// Test certificates: a CA, two server certificates for 127.0.0.1 signed by it, and a
    /// client certificate.
    struct Certs {
        dir: tempfile::TempDir,
    }

    impl Certs {
        fn new() -> Self {
            let dir = tempfile::TempDir::new().unwrap();
            let pki = mew_tests::tls::TestPki::new().unwrap();
            pki.write(dir.path()).unwrap();
            Self { dir }
        }

        fn path(&self, name: &str) -> PathBuf {
            self.dir.path().join(name)
        }

        fn server(&self, client_ca: bool) -> ServerTls {
            ServerTls {
                cert_file: self.path("server.pem"),
                key_file: self.path("server-key.pem"),
                client_ca_file: client_ca.then(|| self.path("ca.pem")),
            }
        }

        fn ca(&self) -> CertificateDer<'static> {
            certificates(&read(&self.path("ca.pem")).unwrap(), Path::new("ca.pem"))
                .unwrap()
                .remove(0)
        }
    }

    /// An HTTPS server (the node's own accept loop) that answers every request with `ok\n`.
    async fn serve(config: ServerConfig) -> SocketAddr {
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = tcp.local_addr().unwrap();
        let app = axum::Router::new().route("/", axum::routing::get(|| async { "ok\n" }));
        crate::server::listen::spawn_for_test(tcp, Some(config), app);
        address
    }

    fn client(certs: &Certs, identity: bool) -> TlsConnector {
        let mut roots = RootCertStore::empty();
        roots.add(certs.ca()).unwrap();
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let config = if identity {
            let chain = certificates(
                &read(&certs.path("client.pem")).unwrap(),
                Path::new("client.pem"),
            )
            .unwrap();
            let key = private_key(
                &read(&certs.path("client-key.pem")).unwrap(),
                Path::new("client-key.pem"),
            )
            .unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        } else {
            builder.with_no_client_auth()
        };
        TlsConnector::from(Arc::new(config))
    }

    /// Connects, asks for `/`, and returns the server's certificate and the answer's body; an
    /// error if the handshake or the exchange fails.
    async fn fetch(
        address: SocketAddr,
        connector: &TlsConnector,
    ) -> std::io::Result<(CertificateDer<'static>, String)> {
        let tcp = TcpStream::connect(address).await?;
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let mut stream = connector.connect(name, tcp).await?;
        let cert = stream.get_ref().1.peer_certificates().unwrap()[0].clone();
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await?;
        let mut text = String::new();
        stream.read_to_string(&mut text).await?;
        // The body of the answer.
        let body = text.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
        Ok((cert, body))
    }

    fn server_cert(certs: &Certs) -> CertificateDer<'static> {
        certificates(&read(&certs.path("server.pem")).unwrap(), Path::new("s")).unwrap()[0].clone()
    }

    fn set_modified(path: &Path, seconds: u64) {
        File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(UNIX_EPOCH + Duration::from_secs(seconds))
            .unwrap();
    }

    #[tokio::test]
    async fn serves_and_reloads_a_changed_certificate() {
        let certs = Certs::new();
        let config = server_config_checking(&certs.server(false), Duration::ZERO).unwrap();
        let address = serve(config).await;
        let connector = client(&certs, false);
        let first = server_cert(&certs);
        let (seen, text) = fetch(address, &connector).await.unwrap();
        assert_eq!(seen, first);
        assert_eq!(text, "ok\n");

        // A new certificate and key, with new modification times: the next handshake has it.
        let pki = mew_tests::tls::TestPki::new().unwrap();
        std::fs::write(certs.path("ca.pem"), pki.ca_pem()).unwrap();
        let (cert, key) = pki.server_pem();
        std::fs::write(certs.path("server.pem"), cert).unwrap();
        std::fs::write(certs.path("server-key.pem"), key).unwrap();
        set_modified(&certs.path("server.pem"), 1_000_000);
        set_modified(&certs.path("server-key.pem"), 1_000_000);
        let second = server_cert(&certs);
        assert_ne!(first, second);
        let connector = client(&certs, false);
        let (seen, _) = fetch(address, &connector).await.unwrap();
        assert_eq!(seen, second);

        // A broken key keeps the previous pair in use.
        std::fs::write(certs.path("server-key.pem"), "not a key\n").unwrap();
        set_modified(&certs.path("server-key.pem"), 2_000_000);
        let (seen, text) = fetch(address, &connector).await.unwrap();
        assert_eq!(seen, second);
        assert_eq!(text, "ok\n");
    }

    #[tokio::test]
    async fn a_stalled_handshake_does_not_block_others() {
        let certs = Certs::new();
        let address = serve(server_config(&certs.server(false)).unwrap()).await;
        // Connects and says nothing.
        let _silent = TcpStream::connect(address).await.unwrap();
        // Not TLS at all.
        let mut garbage = TcpStream::connect(address).await.unwrap();
        garbage.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let (_, text) = fetch(address, &client(&certs, false)).await.unwrap();
        assert_eq!(text, "ok\n");
    }

    #[tokio::test]
    async fn mutual_tls_requires_a_client_certificate() {
        let certs = Certs::new();
        let address = serve(server_config(&certs.server(true)).unwrap()).await;
        let (_, text) = fetch(address, &client(&certs, true)).await.unwrap();
        assert_eq!(text, "ok\n");
        // Without one, the server ends the connection: the handshake or the first read fails.
        assert!(fetch(address, &client(&certs, false)).await.is_err());
    }

    #[test]
    fn bad_files_are_errors_naming_them() {
        let certs = Certs::new();
        let missing = certs.path("missing.pem");
        let mut tls = certs.server(false);
        tls.key_file = missing.clone();
        let error = server_config(&tls).unwrap_err();
        assert!(error.contains(&missing.display().to_string()), "{error}");

        // A key that is not the certificate's.
        let mut tls = certs.server(false);
        tls.key_file = certs.path("client-key.pem");
        let error = server_config(&tls).unwrap_err();
        assert!(error.contains("server.pem"), "{error}");

        let mut tls = certs.server(true);
        tls.client_ca_file = Some(certs.path("server-key.pem"));
        let error = server_config(&tls).unwrap_err();
        assert!(error.contains("server-key.pem"), "{error}");
        assert!(error.contains("no certificate"), "{error}");
    }
}
