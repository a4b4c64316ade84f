//! `TestPki`: a certificate authority made at test time, with a server certificate for
//! 127.0.0.1 and localhost and a client certificate (mutual TLS), as PEM.

use std::path::Path;

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

/// A fresh CA and the certificates it issued, each with its private key.
#[derive(Debug)]
pub struct TestPki {
    ca: CertifiedIssuer<'static, KeyPair>,
    server: (String, String),
    client: (String, String),
}

impl TestPki {
    /// A new CA ("Mew Test CA"), a server certificate for `127.0.0.1`, `::1` and `localhost`,
    /// and a client certificate whose common name is `mew-test-client`.
    pub fn new() -> anyhow::Result<Self> {
        let mut params = CertificateParams::default();
        params.distinguished_name = name("Mew Test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate()?)
            .context("cannot make the test CA")?;
        let server = issue(
            &ca,
            "mew-test-server",
            &["127.0.0.1", "::1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        let client = issue(
            &ca,
            "mew-test-client",
            &["mew-test-client"],
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        Ok(Self { ca, server, client })
    }

    /// The CA's certificate, PEM.
    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    /// The server certificate and its key, PEM.
    pub fn server_pem(&self) -> (&str, &str) {
        (&self.server.0, &self.server.1)
    }

    /// The client certificate and its key, PEM.
    pub fn client_pem(&self) -> (&str, &str) {
        (&self.client.0, &self.client.1)
    }

    /// Writes `ca.pem`, `server.pem`, `server-key.pem`, `client.pem` and `client-key.pem`
    /// into `dir`.
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        for (file, text) in [
            ("ca.pem", self.ca_pem().as_str()),
            ("server.pem", &self.server.0),
            ("server-key.pem", &self.server.1),
            ("client.pem", &self.client.0),
            ("client-key.pem", &self.client.1),
        ] {
            let path = dir.join(file);
            std::fs::write(&path, text)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        Ok(())
    }
}

fn name(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    name
}

/// A certificate for `names` signed by `ca`, and its key, PEM.
fn issue(
    ca: &CertifiedIssuer<'static, KeyPair>,
    common_name: &str,
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> anyhow::Result<(String, String)> {
    let mut params =
        CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
            .with_context(|| format!("bad names for {common_name}"))?;
    params.distinguished_name = name(common_name);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate()?;
    let cert = params
        .signed_by(&key, ca)
        .with_context(|| format!("cannot sign the certificate of {common_name}"))?;
    Ok((cert.pem(), key.serialize_pem()))
}
