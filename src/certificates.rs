//! TLS material read as Go's crypto/tls reads it, so that the certificates users make for Go programs
//! (metacontroller, shell-operator, the API server) work here too. rustls verifies with webpki, which
//! refuses X.509 v1 certificates outright, even where nothing about them needs verifying: rustls checks
//! that a key matches its certificate by parsing the certificate with webpki, so a v1 client
//! certificate (what `openssl x509 -req` makes without an extension file) could not even be presented.
//! Here the key is matched against the certificate's public key with a parser that reads any version,
//! as Go's `tls.X509KeyPair` does. Peers are still verified by webpki, unchanged; a server certificate
//! it refuses for want of a subjectAltName gets Go's own explanation.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{CertificateError, DigitallySignedStruct, Error, OtherError, RootCertStore, SignatureScheme};

/// The crypto provider kube's rustls already links.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates of a PEM file, in order; other PEM blocks are skipped, as Go skips them.
pub fn chain(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|err| format!("the certificate is not PEM: {err}"))?;
    if certs.is_empty() {
        return Err("failed to find any PEM data in certificate input".into());
    }
    Ok(certs)
}

/// A certificate chain and its private key (PKCS#1, PKCS#8 or SEC1 PEM) as one, any X.509 version,
/// refused as Go refuses them when the key is not the certificate's.
pub fn certified_key(cert_pem: &[u8], key_pem: &[u8]) -> Result<Arc<CertifiedKey>, String> {
    let chain = chain(cert_pem)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|err| match err {
        rustls::pki_types::pem::Error::NoItemsFound => "failed to find any PEM data in key input".to_owned(),
        err => format!("the private key is not PEM: {err}"),
    })?;
    let signing =
        provider().key_provider.load_private_key(key).map_err(|err| format!("failed to parse private key: {err}"))?;
    let (_, leaf) =
        x509_parser::parse_x509_certificate(&chain[0]).map_err(|err| format!("failed to parse certificate: {err}"))?;
    if let Some(public) = signing.public_key()
        && public.as_ref() != leaf.tbs_certificate.subject_pki.raw
    {
        return Err("private key does not match public key".into());
    }
    Ok(Arc::new(CertifiedKey::new(chain, signing)))
}

/// The CAs of a PEM bundle as trust anchors (v1 ones too). As Go's `AppendCertsFromPEM`, a certificate
/// that cannot be read is skipped; a bundle with none at all is refused.
pub fn add_bundle(roots: &mut RootCertStore, pem: &[u8]) -> Result<usize, String> {
    let certs = chain(pem)?;
    let (added, _) = roots.add_parsable_certificates(certs);
    match added {
        0 => Err("holds no certificate that can be used as a CA".into()),
        n => Ok(n),
    }
}

/// Verifies servers with webpki against `roots`, saying as Go says why a certificate without
/// subjectAltNames is refused (Go stopped reading the Common Name in 1.15).
pub fn server_verifier(roots: RootCertStore) -> Result<Arc<dyn ServerCertVerifier>, String> {
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|err| err.to_string())?;
    Ok(Arc::new(GoNames(webpki)))
}

#[derive(Debug)]
struct GoNames(Arc<WebPkiServerVerifier>);

/// Go's refusal of a server certificate that names no host in a subjectAltName.
#[derive(Debug)]
struct NoSubjectAltNames(String);

impl std::fmt::Display for NoSubjectAltNames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NoSubjectAltNames {}

/// When webpki refuses `cert` for `host` and the certificate has no subjectAltName extension, Go's words
/// for it: it relies on the legacy Common Name, or it is valid for no name at all.
fn legacy_name(cert: &[u8], host: &str) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).ok()?;
    if parsed.subject_alternative_name().ok().flatten().is_some() {
        return None;
    }
    let common = parsed.subject().iter_common_name().next().and_then(|cn| cn.as_str().ok()).unwrap_or_default();
    Some(match common.eq_ignore_ascii_case(host) {
        true => "x509: certificate relies on legacy Common Name field, use SANs instead".to_owned(),
        false => format!("x509: certificate is not valid for any names, but wanted to match {host}"),
    })
}

impl ServerCertVerifier for GoNames {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now).map_err(|err| {
            let by_name = matches!(
                err,
                Error::InvalidCertificate(
                    CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
                )
            );
            // webpki reads no v1 certificate (its refusal is an `Other` error), and a v1 certificate has no
            // subjectAltName: Go would refuse it for its name too.
            let v1 = matches!(&err, Error::InvalidCertificate(CertificateError::Other(_)))
                && x509_parser::parse_x509_certificate(end_entity)
                    .is_ok_and(|(_, c)| c.version() == x509_parser::x509::X509Version::V1);
            match (by_name || v1).then(|| legacy_name(end_entity, &server_name.to_str())).flatten() {
                Some(said) => {
                    Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(NoSubjectAltNames(said)))))
                }
                None => err,
            }
        })
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Made with openssl 3.0 as metacontroller's webhook-auth example makes them: an EC CA with
    // `req -x509`, and a client certificate signed with `x509 -req` and no extension file (X.509 v1).
    const CA: &str = include_str!("../tests/fixtures/tls/ca.crt");
    const V1_CERT: &str = include_str!("../tests/fixtures/tls/client-v1.crt");
    const V1_KEY: &str = include_str!("../tests/fixtures/tls/client-v1.key");
    const SERVER_CN_ONLY: &str = include_str!("../tests/fixtures/tls/server-cn-only.crt");

    #[test]
    fn a_v1_client_certificate_and_its_key_are_taken_as_go_takes_them() {
        let key = certified_key(V1_CERT.as_bytes(), V1_KEY.as_bytes()).unwrap();
        assert_eq!(key.cert.len(), 1);
        // rustls alone refuses it: what this module is for.
        let ours = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(RootCertStore::empty());
        let err = ours.with_client_auth_cert(chain(V1_CERT.as_bytes()).unwrap(), {
            PrivateKeyDer::from_pem_slice(V1_KEY.as_bytes()).unwrap()
        });
        assert!(err.is_err(), "rustls now reads v1 certificates: this module may go");
    }

    #[test]
    fn a_key_that_is_not_the_certificates_is_refused() {
        let other = rcgen::KeyPair::generate().unwrap();
        let err = certified_key(V1_CERT.as_bytes(), other.serialize_pem().as_bytes()).unwrap_err();
        assert_eq!(err, "private key does not match public key");
        assert_eq!(
            certified_key(b"", V1_KEY.as_bytes()).unwrap_err(),
            "failed to find any PEM data in certificate input"
        );
        assert_eq!(certified_key(V1_CERT.as_bytes(), b"").unwrap_err(), "failed to find any PEM data in key input");
    }

    #[test]
    fn bundles_take_several_cas_and_v1_ones() {
        let mut roots = RootCertStore::empty();
        let made = rcgen::generate_simple_self_signed(vec!["other.example".to_owned()]).unwrap();
        let bundle = format!("{}{CA}", made.cert.pem());
        assert_eq!(add_bundle(&mut roots, bundle.as_bytes()).unwrap(), 2);
        assert!(add_bundle(&mut roots, b"no pem here").is_err());
    }

    #[test]
    fn a_server_certificate_with_only_a_common_name_is_refused_in_gos_words() {
        let (_, cn_only) = rustls::pki_types::pem::PemObject::from_pem_slice(SERVER_CN_ONLY.as_bytes())
            .map(|c: CertificateDer<'static>| ((), c))
            .unwrap();
        assert_eq!(
            legacy_name(&cn_only, "127.0.0.1").as_deref(),
            Some("x509: certificate relies on legacy Common Name field, use SANs instead")
        );
        assert_eq!(
            legacy_name(&cn_only, "example.com").as_deref(),
            Some("x509: certificate is not valid for any names, but wanted to match example.com")
        );
        let with_names = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
        assert_eq!(legacy_name(with_names.cert.der(), "127.0.0.1"), None);
    }

    #[test]
    fn the_verifier_says_why_a_certificate_without_names_is_refused() {
        let mut roots = RootCertStore::empty();
        add_bundle(&mut roots, CA.as_bytes()).unwrap();
        let verifier = server_verifier(roots).unwrap();
        let verify = |pem: &str, host: &'static str| {
            let leaf = chain(pem.as_bytes()).unwrap().remove(0);
            let name = ServerName::try_from(host).unwrap();
            verifier.verify_server_cert(&leaf, &[], &name, &[], UnixTime::now()).unwrap_err().to_string()
        };
        // A v3 certificate naming 127.0.0.1 in its Common Name only, and a v1 one (webpki reads no v1).
        assert!(verify(SERVER_CN_ONLY, "127.0.0.1").contains("relies on legacy Common Name field"));
        assert!(verify(V1_CERT, "metacontroller").contains("relies on legacy Common Name field"));
        assert!(verify(SERVER_CN_ONLY, "127.0.0.2").contains("not valid for any names, but wanted to match 127.0.0.2"));
        // Other refusals are webpki's own: a certificate with names, from an unknown CA.
        let stranger = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap().cert.pem();
        let said = verify(&stranger, "127.0.0.1");
        assert!(said.contains("UnknownIssuer"), "{said}");
    }
}
