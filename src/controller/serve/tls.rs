//! TLS for shell-operator's webhooks (`from_files`), and for `/metrics` with `--metrics-secure`: the certificate and key from `--metrics-cert-dir` (`tls.crt`,
//! `tls.key`, as a Kubernetes TLS Secret mounts them), or, without one, a self-signed certificate made at
//! start-up, as controller-runtime does. Prometheus scrapes with `insecure_skip_verify` or the CA of the
//! given certificate; the token check is what keeps the metrics private either way.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// A slow or broken client may not hold the listener up for longer than this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

pub fn server_config(cert_dir: Option<&Path>) -> Result<Arc<ServerConfig>> {
    let (certs, key) = match cert_dir {
        Some(dir) => read_pair(&dir.join("tls.crt"), &dir.join("tls.key"))?,
        None => {
            let names = vec!["localhost".to_owned(), "samplectl-metrics".to_owned()];
            let made = rcgen::generate_simple_self_signed(names).context("cannot make a certificate")?;
            let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(made.signing_key.serialize_der()));
            (vec![made.cert.der().clone()], key)
        }
    };
    build(certs, key, &[])
}

/// A server's configuration from its certificate chain and key (PKCS#1, PKCS#8 or SEC1, as Go reads
/// them); with `client_cas`, a client must show a certificate one of them signed, as Go's
/// `RequireAndVerifyClientCert`.
pub fn from_files(cert: &Path, key: &Path, client_cas: &[PathBuf]) -> Result<Arc<ServerConfig>> {
    let (certs, key) = read_pair(cert, key)?;
    build(certs, key, client_cas)
}

fn read_pair(crt: &Path, key: &Path) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let certs = CertificateDer::pem_file_iter(crt)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("cannot read the certificate {}", crt.display()))?;
    if certs.is_empty() {
        bail!("cannot read the certificate {}: no PEM certificate in it", crt.display());
    }
    let key =
        PrivateKeyDer::from_pem_file(key).with_context(|| format!("cannot read the private key {}", key.display()))?;
    Ok((certs, key))
}

fn build(
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    client_cas: &[PathBuf],
) -> Result<Arc<ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?;
    let builder = match client_cas {
        [] => builder.with_no_client_auth(),
        paths => {
            let mut roots = rustls::RootCertStore::empty();
            for path in paths {
                let certs = CertificateDer::pem_file_iter(path)
                    .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                    .with_context(|| format!("cannot read the client CA {}", path.display()))?;
                let (added, _) = roots.add_parsable_certificates(certs);
                if added == 0 {
                    bail!("cannot read the client CA {}: no usable certificate in it", path.display());
                }
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .context("the client CAs do not make a verifier")?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config =
        builder.with_single_cert(certs, key).context("the certificate and key do not make a TLS configuration")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A TCP listener whose connections are TLS, for `axum::serve`.
pub struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
}

impl TlsListener {
    pub fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> Self {
        TlsListener { tcp, acceptor: TlsAcceptor::from(config) }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (stream, addr) = axum::serve::Listener::accept(&mut self.tcp).await;
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, self.acceptor.accept(stream)).await {
                Ok(Ok(tls)) => return (tls, addr),
                Ok(Err(err)) => tracing::debug!("TLS handshake with {addr} failed: {err}"),
                Err(_) => tracing::debug!("TLS handshake with {addr} timed out"),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
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
        assert!(err.starts_with("cannot read the private key"), "{err}");
        let err = format!("{:#}", server_config(Some(&dir.path().join("missing"))).unwrap_err());
        assert!(err.starts_with("cannot read the certificate"), "{err}");
    }
}
