//! How a webhook is reached securely, as a controller object's `caBundle`, `clientTLS`, `authorization`
//! and `basicAuth` say (on the webhook itself, or in the `endpointConfigs` entry for its host): the CA
//! to trust besides the system's, a client certificate, and an `Authorization` header. The Secrets and
//! ConfigMaps they name are read when the hook is first called and again once [`REREAD`] has passed, so a
//! rotated token or certificate is taken up without a restart.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};

use crate::certificates;

/// The HTTPS-or-HTTP connector every URL hook is called through (a close without close_notify ending
/// the stream, as in Go: `close_notify.rs`).
pub type Https = super::close_notify::Lenient;

/// The TCP connector under a hook client: with TCP_NODELAY, as Go's net package sets it, so that a
/// request written in two parts (a TLS record each) does not wait for the hook's delayed ACK.
pub fn tcp() -> hyper_util::client::legacy::connect::HttpConnector {
    let mut tcp = hyper_util::client::legacy::connect::HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp
}

/// The system's CAs.
fn system_roots() -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    roots
}

type ClientBuilder = rustls::ConfigBuilder<rustls::ClientConfig, rustls::client::WantsClientCert>;

/// A client trusting `roots`, its servers verified by webpki with Go's words for a missing
/// subjectAltName (`certificates::server_verifier`).
fn client_builder(roots: rustls::RootCertStore) -> Result<ClientBuilder, String> {
    Ok(rustls::ClientConfig::builder_with_provider(certificates::provider())
        .with_safe_default_protocol_versions()
        .map_err(|err| err.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(certificates::server_verifier(roots)?))
}

/// The connector of a URL hook with no security settings: the system's CAs, no client certificate.
pub fn plain_https() -> Result<Https, String> {
    let config = client_builder(system_roots())?.with_no_client_auth();
    Ok(connector(config))
}

fn connector(config: rustls::ClientConfig) -> Https {
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp());
    super::close_notify::Lenient(https)
}

/// How long what was read from the cluster is used before it is read again.
pub const REREAD: Duration = Duration::from_secs(30);

/// Where a value lives: a key of a Secret or of a ConfigMap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueRef {
    pub namespace: String,
    pub name: String,
    pub key: String,
}

impl ValueRef {
    /// `Secret ns/name key "k"`, for messages.
    fn secret(&self) -> String {
        format!("Secret {}/{} key {:?}", self.namespace, self.name, self.key)
    }

    fn config_map(&self) -> String {
        format!("ConfigMap {}/{} key {:?}", self.namespace, self.name, self.key)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaSource {
    Inline(String),
    Secret(ValueRef),
    ConfigMap(ValueRef),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// `Authorization: <scheme> <the Secret's value>` (Bearer unless given).
    Header { scheme: String, secret: ValueRef },
    /// `Authorization: Basic base64(username:password)`, from two keys of one Secret.
    Basic { username: ValueRef, password: ValueRef },
}

/// What a webhook's security settings name, resolved from the cluster at call time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Security {
    pub ca: Option<CaSource>,
    /// The certificate and private key of a client certificate, from one Secret.
    pub client_tls: Option<(ValueRef, ValueRef)>,
    pub auth: Option<Auth>,
}

/// What a call needs: an HTTP client trusting the CA (with the client certificate), and the header.
pub struct SecuredClient {
    pub http: Client<Https, Full<Bytes>>,
    pub header: Option<String>,
}

/// A webhook's security, with the client reading what it names and what was read last.
pub struct Secured {
    client: kube::Client,
    security: Security,
    read: Mutex<Option<(Instant, Arc<SecuredClient>)>>,
}

impl Secured {
    pub fn new(client: kube::Client, security: Security) -> Self {
        Secured { client, security, read: Mutex::new(None) }
    }

    /// The client and header to call with, read again once [`REREAD`] has passed.
    pub async fn resolved(&self) -> Result<Arc<SecuredClient>, String> {
        if let Some((at, resolved)) = &*self.read.lock().unwrap_or_else(|e| e.into_inner())
            && at.elapsed() < REREAD
        {
            return Ok(resolved.clone());
        }
        let resolved = Arc::new(self.resolve().await?);
        *self.read.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), resolved.clone()));
        Ok(resolved)
    }

    async fn resolve(&self) -> Result<SecuredClient, String> {
        let mut roots = system_roots();
        if let Some(ca) = &self.security.ca {
            let (pem, from) = match ca {
                CaSource::Inline(pem) => (pem.clone().into_bytes(), "caBundle".to_owned()),
                CaSource::Secret(at) => {
                    (self.secret_value(at, "caBundle").await?, format!("caBundle: {}", at.secret()))
                }
                CaSource::ConfigMap(at) => (self.configmap_value(at).await?, format!("caBundle: {}", at.config_map())),
            };
            certificates::add_bundle(&mut roots, &pem).map_err(|err| format!("{from}: {err}"))?;
        }
        let builder = client_builder(roots)?;
        let config = match &self.security.client_tls {
            None => builder.with_no_client_auth(),
            Some((cert_at, key_at)) => {
                let cert = self.secret_value(cert_at, "clientTLS").await?;
                let key = self.secret_value(key_at, "clientTLS").await?;
                let certified = certificates::certified_key(&cert, &key)
                    .map_err(|err| format!("clientTLS: {} and key {:?}: {err}", cert_at.secret(), key_at.key))?;
                builder.with_client_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(certified)))
            }
        };
        let https = connector(config);
        let header = match &self.security.auth {
            None => None,
            Some(Auth::Header { scheme, secret }) => {
                let value = self.secret_value(secret, "authorization").await?;
                Some(format!("{scheme} {}", String::from_utf8_lossy(&value).trim()))
            }
            Some(Auth::Basic { username, password }) => {
                let user = self.secret_value(username, "basicAuth").await?;
                let pass = self.secret_value(password, "basicAuth").await?;
                let (user, pass) = (String::from_utf8_lossy(&user), String::from_utf8_lossy(&pass));
                if user.contains(':') {
                    return Err("basicAuth: the username must not contain ':'".into());
                }
                let encoded =
                    base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", user.trim(), pass.trim()));
                Some(format!("Basic {encoded}"))
            }
        };
        Ok(SecuredClient { http: Client::builder(TokioExecutor::new()).build(https), header })
    }

    async fn secret_value(&self, at: &ValueRef, field: &str) -> Result<Vec<u8>, String> {
        let api: kube::Api<Secret> = crate::cluster::scope::api(self.client.clone(), Some(&at.namespace));
        let secret = api.get(&at.name).await.map_err(|err| {
            format!("{field}: cannot read Secret {}/{}: {}", at.namespace, at.name, crate::error::describe(&err))
        })?;
        let value = secret.data.and_then(|mut data| data.remove(&at.key)).map(|v| v.0);
        match value {
            Some(value) if !value.is_empty() => Ok(value),
            _ => Err(format!("{field}: Secret {}/{} has no key {:?}", at.namespace, at.name, at.key)),
        }
    }

    async fn configmap_value(&self, at: &ValueRef) -> Result<Vec<u8>, String> {
        let api: kube::Api<ConfigMap> = crate::cluster::scope::api(self.client.clone(), Some(&at.namespace));
        let map = api.get(&at.name).await.map_err(|err| {
            format!("caBundle: cannot read ConfigMap {}/{}: {}", at.namespace, at.name, crate::error::describe(&err))
        })?;
        match map.data.and_then(|mut data| data.remove(&at.key)) {
            Some(value) if !value.is_empty() => Ok(value.into_bytes()),
            _ => Err(format!("caBundle: ConfigMap {}/{} has no key {:?}", at.namespace, at.name, at.key)),
        }
    }
}
