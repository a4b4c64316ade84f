//! The `tls:` section: HTTPS for the node's server (`mew up`) and for its A2A clients (peers,
//! delegation by URL, `mew send`, `mew tasks`, `mew card`, `mew peers`, `mew bench`).
//!
//! ```yaml
//! tls:
//!   cert_file: certs/node.pem         # server certificate chain (PEM); with key_file, `mew up` serves HTTPS
//!   key_file: certs/node-key.pem      # its private key (PEM: PKCS#8, SEC1 or PKCS#1)
//!   client_ca_file: certs/ca.pem      # require client certificates signed by this CA (mutual TLS)
//!   ca_file: certs/ca.pem             # clients: a CA (or several, PEM) trusted besides the system roots
//!   client_cert_file: certs/me.pem    # clients: a certificate chain presented to servers that ask
//!   client_key_file: certs/me-key.pem # and its private key
//! ```
//!
//! Every key is optional. `cert_file` and `key_file` go together, as do `client_cert_file` and
//! `client_key_file`; `client_ca_file` needs the server pair. Relative paths are against the
//! project directory, `~` is the home directory. With the server pair set, the default
//! `node.public_url` is `https://{host}:{port}`. The server re-reads the certificate and key
//! when their files change, so a renewed certificate needs no restart.
//!
//! Resolving checks only the keys; the files are read when the server or a client is built,
//! and a missing or malformed file is an error that names it.

use std::path::{Path, PathBuf};

use mew_transport::TlsOptions;
use serde::{Deserialize, Serialize};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::{ConfigError, LoadedConfig};

/// `tls:` — certificates for serving HTTPS and for the node's HTTPS clients; every path
/// absolute.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct TlsConfig {
    /// The server's certificate chain, PEM; set together with `key_file`.
    pub cert_file: Option<PathBuf>,
    /// The server's private key, PEM.
    pub key_file: Option<PathBuf>,
    /// When set, clients must present a certificate chained to this CA (mutual TLS).
    pub client_ca_file: Option<PathBuf>,
    /// Certificates clients trust besides the system roots.
    pub ca_file: Option<PathBuf>,
    /// The certificate chain clients present to servers that ask for one; set together with
    /// `client_key_file`.
    pub client_cert_file: Option<PathBuf>,
    /// The private key of `client_cert_file`.
    pub client_key_file: Option<PathBuf>,
}

/// The server side of [`TlsConfig`]: the certificate pair and, for mutual TLS, the client CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTls {
    /// The certificate chain, PEM.
    pub cert_file: PathBuf,
    /// Its private key, PEM.
    pub key_file: PathBuf,
    /// The CA client certificates must chain to, if any.
    pub client_ca_file: Option<PathBuf>,
}

impl TlsConfig {
    /// The server's files, when `mew up` serves HTTPS.
    pub fn server(&self) -> Option<ServerTls> {
        Some(ServerTls {
            cert_file: self.cert_file.clone()?,
            key_file: self.key_file.clone()?,
            client_ca_file: self.client_ca_file.clone(),
        })
    }

    /// The options of the node's HTTPS clients: reads `ca_file` and the client certificate
    /// and key, and checks that they hold what they should. Errors name the file.
    pub fn client_options(&self) -> Result<TlsOptions, String> {
        let extra_roots_pem = match &self.ca_file {
            Some(path) => {
                let pem = read(path).map_err(|e| format!("tls.ca_file: {e}"))?;
                certificates(&pem, path).map_err(|e| format!("tls.ca_file: {e}"))?;
                Some(pem)
            }
            None => None,
        };
        let identity_pem = match (&self.client_cert_file, &self.client_key_file) {
            (Some(cert_file), Some(key_file)) => {
                let chain = read(cert_file)
                    .and_then(|pem| certificates(&pem, cert_file))
                    .map_err(|e| format!("tls.client_cert_file: {e}"))?;
                let key = read(key_file)
                    .and_then(|pem| private_key(&pem, key_file))
                    .map_err(|e| format!("tls.client_key_file: {e}"))?;
                // Written again with nothing but the chain and the key: reqwest refuses other
                // sections it knows (a public key beside the private one, for instance).
                let mut pem = String::new();
                for cert in &chain {
                    pem.push_str(&pem_section("CERTIFICATE", cert));
                }
                let (label, der) = match &key {
                    PrivateKeyDer::Pkcs8(der) => ("PRIVATE KEY", der.secret_pkcs8_der()),
                    PrivateKeyDer::Sec1(der) => ("EC PRIVATE KEY", der.secret_sec1_der()),
                    PrivateKeyDer::Pkcs1(der) => ("RSA PRIVATE KEY", der.secret_pkcs1_der()),
                    _ => {
                        return Err(format!(
                            "tls.client_key_file: {}: an unsupported kind of private key",
                            key_file.display()
                        ));
                    }
                };
                pem.push_str(&pem_section(label, der));
                Some(pem.into_bytes())
            }
            _ => None,
        };
        Ok(TlsOptions {
            extra_roots_pem,
            identity_pem,
        })
    }
}

/// One PEM section.
fn pem_section(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut text = format!("-----BEGIN {label}-----\n");
    for line in body.as_bytes().chunks(64) {
        text.push_str(&String::from_utf8_lossy(line));
        text.push('\n');
    }
    text.push_str("-----END ");
    text.push_str(label);
    text.push_str("-----\n");
    text
}

/// Reads a certificate or key file.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|error| format!("cannot read {}: {error}", path.display()))
}

/// The certificates of a PEM file, at least one.
pub(crate) fn certificates(
    pem: &[u8],
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("{}: not PEM certificates: {error}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{}: no certificate (expected PEM `BEGIN CERTIFICATE` sections)",
            path.display()
        ));
    }
    Ok(certs)
}

/// The first private key of a PEM file.
pub(crate) fn private_key(pem: &[u8], path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|error| {
        format!(
            "{}: no private key (expected PEM PKCS#8, SEC1 or PKCS#1): {error}",
            path.display()
        )
    })
}

impl LoadedConfig {
    /// `tls:`, with the paths made absolute and the pairs checked.
    pub(super) fn resolve_tls(
        &self,
        home: Option<&Path>,
        project: &Path,
    ) -> Result<TlsConfig, ConfigError> {
        let settings = &self.settings.tls;
        let path = |key: &str, value: &Option<PathBuf>| {
            value
                .as_deref()
                .map(|value| self.path(&format!("tls.{key}"), value, home, project))
                .transpose()
        };
        let config = TlsConfig {
            cert_file: path("cert_file", &settings.cert_file)?,
            key_file: path("key_file", &settings.key_file)?,
            client_ca_file: path("client_ca_file", &settings.client_ca_file)?,
            ca_file: path("ca_file", &settings.ca_file)?,
            client_cert_file: path("client_cert_file", &settings.client_cert_file)?,
            client_key_file: path("client_key_file", &settings.client_key_file)?,
        };
        let pair = |first: (&str, bool), second: (&str, bool)| match (first.1, second.1) {
            (true, false) => Err(self.tls_error(
                second.0,
                format!(
                    "missing: `tls.{}` is set, so `tls.{}` must be too",
                    first.0, second.0
                ),
            )),
            (false, true) => Err(self.tls_error(
                first.0,
                format!(
                    "missing: `tls.{}` is set, so `tls.{}` must be too",
                    second.0, first.0
                ),
            )),
            _ => Ok(()),
        };
        pair(
            ("cert_file", config.cert_file.is_some()),
            ("key_file", config.key_file.is_some()),
        )?;
        pair(
            ("client_cert_file", config.client_cert_file.is_some()),
            ("client_key_file", config.client_key_file.is_some()),
        )?;
        if config.client_ca_file.is_some() && config.cert_file.is_none() {
            return Err(self.tls_error(
                "cert_file",
                "missing: `tls.client_ca_file` asks clients for certificates, which needs the \
                 server to serve HTTPS: set `tls.cert_file` and `tls.key_file`"
                    .to_owned(),
            ));
        }
        Ok(config)
    }

    /// An error about `tls.{key}`, blamed on the layer that set it or, for a missing key, on
    /// a layer that set another `tls.` key.
    fn tls_error(&self, key: &str, message: String) -> ConfigError {
        let key = format!("tls.{key}");
        let set = |origin: &&super::Origin| !matches!(origin, super::Origin::Default);
        let origin = (self.origins.get(&key).filter(set))
            .or_else(|| {
                (self.origins.iter())
                    .filter(|(k, _)| k.starts_with("tls."))
                    .map(|(_, origin)| origin)
                    .find(set)
            })
            .cloned()
            .unwrap_or(super::Origin::Default);
        ConfigError::Resolve {
            origin,
            key,
            message,
        }
    }
}

// ---- As written in files ----

/// `tls:` as written.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct TlsSettings {
    pub(crate) cert_file: Option<PathBuf>,
    pub(crate) key_file: Option<PathBuf>,
    pub(crate) client_ca_file: Option<PathBuf>,
    pub(crate) ca_file: Option<PathBuf>,
    pub(crate) client_cert_file: Option<PathBuf>,
    pub(crate) client_key_file: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use tempfile::TempDir;

    use super::*;
    use crate::config::Config;

    use crate::config::test_project as project;

    fn load(text: &str) -> (TempDir, Result<Config, ConfigError>) {
        let (dir, _, sources) = project(text);
        let config = Config::load(&sources).and_then(|loaded| loaded.resolve());
        (dir, config)
    }

    #[test]
    fn nothing_by_default() {
        let (_dir, config) = load("");
        let config = config.unwrap();
        assert_eq!(config.tls, TlsConfig::default());
        assert_eq!(config.tls.server(), None);
        assert!(config.node.public_url.starts_with("http://"));
        let options = config.tls.client_options().unwrap();
        assert!(options.extra_roots_pem.is_none() && options.identity_pem.is_none());
    }

    #[test]
    fn paths_resolve_against_the_project_and_home() {
        let (dir, config) = load(
            "tls:\n  cert_file: certs/node.pem\n  key_file: /srv/certs/node-key.pem\n  \
             client_ca_file: certs/ca.pem\n  ca_file: ~/ca.pem\n  \
             client_cert_file: certs/me.pem\n  client_key_file: certs/me-key.pem\n",
        );
        let tls = config.unwrap().tls;
        let project = std::path::absolute(dir.path()).unwrap();
        assert_eq!(
            tls,
            TlsConfig {
                cert_file: Some(project.join("certs/node.pem")),
                key_file: Some(PathBuf::from("/srv/certs/node-key.pem")),
                client_ca_file: Some(project.join("certs/ca.pem")),
                ca_file: Some(dir.path().join("home").join("ca.pem")),
                client_cert_file: Some(project.join("certs/me.pem")),
                client_key_file: Some(project.join("certs/me-key.pem")),
            }
        );
        assert_eq!(
            tls.server(),
            Some(ServerTls {
                cert_file: project.join("certs/node.pem"),
                key_file: PathBuf::from("/srv/certs/node-key.pem"),
                client_ca_file: Some(project.join("certs/ca.pem")),
            })
        );
    }

    #[test]
    fn serving_https_makes_the_default_public_url_https() {
        let (_dir, config) = load(
            "node:\n  host: 127.0.0.1\n  port: 8443\ntls:\n  cert_file: /srv/c.pem\n  \
             key_file: /srv/k.pem\n",
        );
        let mut config = config.unwrap();
        assert_eq!(config.node.public_url, "https://127.0.0.1:8443");
        config.node.bound_to("127.0.0.1:9443".parse().unwrap());
        assert_eq!(config.node.public_url, "https://127.0.0.1:9443");

        // A configured public URL stays as it is; a client CA alone changes nothing.
        let (_dir, config) = load(
            "node:\n  public_url: http://proxy.example\ntls:\n  cert_file: /srv/c.pem\n  \
             key_file: /srv/k.pem\n",
        );
        assert_eq!(config.unwrap().node.public_url, "http://proxy.example");
        let (_dir, config) = load("tls:\n  ca_file: /srv/ca.pem\n");
        assert!(config.unwrap().node.public_url.starts_with("http://"));
    }

    #[test]
    fn half_pairs_are_errors_naming_the_missing_key() {
        for (text, key) in [
            ("tls:\n  cert_file: /srv/c.pem\n", "tls.key_file"),
            ("tls:\n  key_file: /srv/k.pem\n", "tls.cert_file"),
            (
                "tls:\n  client_cert_file: /srv/c.pem\n",
                "tls.client_key_file",
            ),
            (
                "tls:\n  client_key_file: /srv/k.pem\n",
                "tls.client_cert_file",
            ),
            ("tls:\n  client_ca_file: /srv/ca.pem\n", "tls.cert_file"),
        ] {
            let (dir, config) = load(text);
            let error = config.unwrap_err();
            let ConfigError::Resolve {
                key: got,
                message,
                origin,
            } = &error
            else {
                panic!("{text}: expected a resolve error, got {error:?}");
            };
            assert_eq!(got, key, "{text}");
            assert!(message.starts_with("missing"), "{text}: {message}");
            let shown = origin.to_string();
            assert!(
                shown.contains(&dir.path().join(".mew/config.yaml").display().to_string()),
                "{text}: {shown}"
            );
        }
    }

    #[test]
    fn an_unknown_key_is_an_error() {
        let (_dir, config) = load("tls:\n  certificate: /srv/c.pem\n");
        let error = config.unwrap_err();
        assert!(
            error.to_string().contains("unknown key tls.certificate"),
            "{error}"
        );
    }

    #[test]
    fn config_show_reads_back() {
        let (_dir, config) =
            load("tls:\n  cert_file: /srv/c.pem\n  key_file: /srv/k.pem\n  ca_file: /srv/ca.pem\n");
        let config = config.unwrap();
        let section = serde_yaml_ng::to_string(&config.tls).unwrap();
        let (_dir, reread) = load(&format!(
            "tls:\n{}",
            section
                .lines()
                .map(|line| format!("  {line}\n"))
                .collect::<String>()
        ));
        assert_eq!(reread.unwrap().tls, config.tls);
    }

    #[test]
    fn client_files_are_read_and_checked() {
        let dir = TempDir::new().unwrap();
        let missing = dir.path().join("missing.pem");
        let not_pem = dir.path().join("not.pem");
        std::fs::write(&not_pem, "hello\n").unwrap();
        let config = TlsConfig {
            ca_file: Some(missing.clone()),
            ..TlsConfig::default()
        };
        let error = config.client_options().unwrap_err();
        assert!(error.contains(&missing.display().to_string()), "{error}");
        let config = TlsConfig {
            ca_file: Some(not_pem.clone()),
            ..TlsConfig::default()
        };
        let error = config.client_options().unwrap_err();
        assert!(error.contains(&not_pem.display().to_string()), "{error}");
        assert!(error.starts_with("tls.ca_file: "), "{error}");
        assert!(error.contains("no certificate"), "{error}");
        let config = TlsConfig {
            client_cert_file: Some(not_pem.clone()),
            client_key_file: Some(not_pem.clone()),
            ..TlsConfig::default()
        };
        let error = config.client_options().unwrap_err();
        assert!(error.starts_with("tls.client_cert_file: "), "{error}");
    }

    #[test]
    fn the_client_identity_is_the_chain_and_the_key_alone() {
        let dir = TempDir::new().unwrap();
        mew_tests::tls::TestPki::new()
            .unwrap()
            .write(dir.path())
            .unwrap();
        // A key file with its public key too.
        let key = std::fs::read_to_string(dir.path().join("client-key.pem")).unwrap();
        std::fs::write(
            dir.path().join("client-key.pem"),
            format!(
                "-----BEGIN PUBLIC KEY-----\nBggqhkjOPQMBBw==\n-----END PUBLIC KEY-----\n{key}"
            ),
        )
        .unwrap();
        let config = TlsConfig {
            ca_file: Some(dir.path().join("ca.pem")),
            client_cert_file: Some(dir.path().join("client.pem")),
            client_key_file: Some(dir.path().join("client-key.pem")),
            ..TlsConfig::default()
        };
        let options = config.client_options().unwrap();
        let identity = String::from_utf8(options.identity_pem.clone().unwrap()).unwrap();
        assert!(
            identity.starts_with("-----BEGIN CERTIFICATE-----\n"),
            "{identity}"
        );
        assert!(
            identity.contains("-----BEGIN PRIVATE KEY-----\n"),
            "{identity}"
        );
        assert!(!identity.contains("PUBLIC KEY"), "{identity}");
        let builder = options.configure(reqwest::Client::builder()).unwrap();
        builder.build().unwrap();
    }
}
