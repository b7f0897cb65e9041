//! TLS for shell-operator's webhooks (`from_files`), and for `/metrics` with `--metrics-secure`: the certificate and key from `--metrics-cert-dir` (`tls.crt`,
//! `tls.key`, as a Kubernetes TLS Secret mounts them), or, without one, a self-signed certificate made at
//! start-up, as controller-runtime does. Prometheus scrapes with `insecure_skip_verify` or the CA of the
//! given certificate; the token check is what keeps the metrics private either way.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow};
use rustls::ServerConfig;
use rustls::sign::{CertifiedKey, SingleCertAndKey};

use crate::certificates;

pub fn server_config(cert_dir: Option<&Path>) -> Result<Arc<ServerConfig>> {
    let key = match cert_dir {
        Some(dir) => read_pair(&dir.join("tls.crt"), &dir.join("tls.key"))?,
        None => {
            let names = vec!["localhost".to_owned(), "samplectl-metrics".to_owned()];
            let made = rcgen::generate_simple_self_signed(names).context("cannot make a certificate")?;
            certificates::certified_key(made.cert.pem().as_bytes(), made.signing_key.serialize_pem().as_bytes())
                .map_err(|err| anyhow!("cannot make a certificate: {err}"))?
        }
    };
    build(key, &[])
}

/// A server's configuration from its certificate chain and key files, read as Go reads them (any X.509
/// version; PKCS#1, PKCS#8 or SEC1 keys); with `client_cas`, a client must show a certificate one of
/// them signed, as Go's `RequireAndVerifyClientCert`.
pub fn from_files(cert: &Path, key: &Path, client_cas: &[PathBuf]) -> Result<Arc<ServerConfig>> {
    build(read_pair(cert, key)?, client_cas)
}

fn read_pair(crt: &Path, key: &Path) -> Result<Arc<CertifiedKey>> {
    let cert_pem = std::fs::read(crt).with_context(|| format!("cannot read the certificate {}", crt.display()))?;
    let key_pem = std::fs::read(key).with_context(|| format!("cannot read the private key {}", key.display()))?;
    certificates::certified_key(&cert_pem, &key_pem)
        .map_err(|err| anyhow!("the certificate {} and key {}: {err}", crt.display(), key.display()))
}

fn build(key: Arc<CertifiedKey>, client_cas: &[PathBuf]) -> Result<Arc<ServerConfig>> {
    let provider = certificates::provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?;
    let builder = match client_cas {
        [] => builder.with_no_client_auth(),
        paths => {
            let mut roots = rustls::RootCertStore::empty();
            for path in paths {
                let pem =
                    std::fs::read(path).with_context(|| format!("cannot read the client CA {}", path.display()))?;
                certificates::add_bundle(&mut roots, &pem)
                    .map_err(|err| anyhow!("the client CA {}: {err}", path.display()))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .context("the client CAs do not make a verifier")?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(Arc::new(SingleCertAndKey::from(key)));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_is_made_when_none_is_given() {
        assert!(server_config(None).is_ok());
    }

    #[test]
    fn a_mounted_tls_secret_is_used() {
        let dir = tempfile::tempdir().unwrap();
        let made = rcgen::generate_simple_self_signed(vec!["metrics.example".to_owned()]).unwrap();
        std::fs::write(dir.path().join("tls.crt"), made.cert.pem()).unwrap();
        std::fs::write(dir.path().join("tls.key"), made.signing_key.serialize_pem()).unwrap();
        assert!(server_config(Some(dir.path())).is_ok());

        std::fs::write(dir.path().join("tls.key"), "not a key").unwrap();
        let err = format!("{:#}", server_config(Some(dir.path())).unwrap_err());
        assert!(err.ends_with("tls.key: failed to find any PEM data in key input"), "{err}");
        std::fs::remove_file(dir.path().join("tls.key")).unwrap();
        let err = format!("{:#}", server_config(Some(dir.path())).unwrap_err());
        assert!(err.starts_with("cannot read the private key"), "{err}");
        let err = format!("{:#}", server_config(Some(&dir.path().join("missing"))).unwrap_err());
        assert!(err.starts_with("cannot read the certificate"), "{err}");
    }
}
