//! A controller object's hook made callable: its address (a `url`, or a Service's `name.namespace:port`
//! and `path`, as metacontroller builds it), its timeout (10 s unless given; metacontroller's default),
//! its version (v1 unless given) and how strictly its answers are read (strictly for v2, unless
//! `responseUnMarshallMode` says otherwise).

use std::time::Duration;

use anyhow::{Result, anyhow, bail};

use super::api::{self, HookVersion, UnmarshallMode};
use crate::controller::sync::Version;
use crate::controller::sync::hook::{Address, Hook};
use crate::controller::sync::security::{Auth, CaSource, Secured, Security, ValueRef};

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a controller object's hooks are made callable with: its `endpointConfigs`, the client that reads
/// the Secrets and ConfigMaps they name, and whether Services are reached through the API server's
/// proxy (outside the cluster, see [`outside`]).
pub struct Reach<'a> {
    pub client: &'a kube::Client,
    pub endpoints: &'a [api::EndpointConfig],
    pub proxy: bool,
}

/// `hooks.<which>` made a [`Hook`].
pub fn callable(which: &str, hook: &api::HookSpec, reach: &Reach) -> Result<Hook> {
    let proxy = reach.proxy.then_some(reach.client);
    let Some(webhook) = &hook.webhook else {
        bail!("hooks.{which} has no webhook: samplectl calls hooks over HTTP, as metacontroller does");
    };
    let url = address(webhook).map_err(|why| anyhow!("hooks.{which}.webhook: {why}"))?;
    let target = match (&webhook.url, &webhook.service, &webhook.path, proxy) {
        (None, Some(service), Some(path), Some(client)) => Address::ServiceProxy {
            client: client.clone(),
            path: proxy_path(service, path),
            shown: format!("{url} (through the API server's service proxy)"),
        },
        _ => Address::url(&url).map_err(|why| anyhow!("hooks.{which}.webhook: {why}"))?,
    };
    let timeout = match webhook.timeout.as_deref() {
        None => DEFAULT_TIMEOUT,
        Some(text) => match crate::duration::parse(text) {
            // metacontroller takes a timeout that is not positive as its default.
            Ok(timeout) if timeout.is_zero() => DEFAULT_TIMEOUT,
            Ok(timeout) => timeout,
            Err(why) => bail!("hooks.{which}.webhook.timeout: {why}"),
        },
    };
    let security = security(webhook, reach.endpoints, &url).map_err(|why| anyhow!("hooks.{which}.webhook: {why}"))?;
    let version = match hook.version.unwrap_or_default() {
        HookVersion::V1 => Version::V1,
        HookVersion::V2 => Version::V2,
    };
    let strict = match webhook.response_unmarshall_mode {
        Some(UnmarshallMode::Strict) => true,
        Some(UnmarshallMode::Loose) => false,
        None => version == Version::V2,
    };
    let hook = Hook::versioned(target, timeout, version, strict)?;
    Ok(match security {
        Some(security) => hook.secured(Secured::new(reach.client.clone(), security)),
        None => hook,
    })
}

/// The security a webhook at `url` is called with: its own fields if it has any, else the
/// `endpointConfigs` entry for its host (`host` or `host:port`, the scheme's port implied), as
/// metacontroller picks it; `None` when neither says anything. What metacontroller refuses is refused.
pub fn security(
    webhook: &api::Webhook,
    endpoints: &[api::EndpointConfig],
    url: &str,
) -> Result<Option<Security>, String> {
    let own = webhook.ca_bundle.is_some()
        || webhook.client_tls.is_some()
        || webhook.authorization.is_some()
        || webhook.basic_auth.is_some();
    let (ca, tls, auth, basic, place) = if own {
        (&webhook.ca_bundle, &webhook.client_tls, &webhook.authorization, &webhook.basic_auth, String::new())
    } else {
        let Some(config) = endpoint_for(url, endpoints) else { return Ok(None) };
        let place = format!("the endpointConfigs entry for {}: ", config.host);
        (&config.ca_bundle, &config.client_tls, &config.authorization, &config.basic_auth, place)
    };
    if auth.is_some() && basic.is_some() {
        return Err(format!("{place}authorization and basicAuth are mutually exclusive"));
    }
    let ca = match ca {
        None => None,
        Some(bundle) => {
            let key = |r: &api::KeyRef| ValueRef {
                namespace: r.namespace.clone(),
                name: r.name.clone(),
                key: r.key.clone().unwrap_or_else(|| "ca.crt".into()),
            };
            match (&bundle.inline, &bundle.secret_ref, &bundle.config_map_ref) {
                (Some(pem), None, None) => Some(CaSource::Inline(pem.clone())),
                (None, Some(at), None) => Some(CaSource::Secret(key(at))),
                (None, None, Some(at)) => Some(CaSource::ConfigMap(key(at))),
                (None, None, None) => {
                    return Err(format!("{place}caBundle names none of inline, secretRef or configMapRef"));
                }
                _ => return Err(format!("{place}caBundle must have exactly one of inline, secretRef or configMapRef")),
            }
        }
    };
    let in_secret = |r: &api::SecretRef, key: Option<&String>, default: &str| ValueRef {
        namespace: r.namespace.clone(),
        name: r.name.clone(),
        key: key.cloned().unwrap_or_else(|| default.to_owned()),
    };
    let client_tls = tls.as_ref().map(|t| {
        (
            in_secret(&t.secret_ref, t.cert_key.as_ref(), "tls.crt"),
            in_secret(&t.secret_ref, t.private_key_key.as_ref(), "tls.key"),
        )
    });
    let auth = match (auth, basic) {
        (Some(a), _) => {
            let scheme = a.type_.as_deref().map(str::trim).filter(|t| !t.is_empty()).unwrap_or("Bearer");
            if scheme.eq_ignore_ascii_case("basic") {
                return Err(format!("{place}authorization type {scheme:?} is not supported; use basicAuth instead"));
            }
            let r = &a.secret_ref;
            let secret = ValueRef { namespace: r.namespace.clone(), name: r.name.clone(), key: r.key.clone() };
            Some(Auth::Header { scheme: scheme.to_owned(), secret })
        }
        (None, Some(b)) => Some(Auth::Basic {
            username: in_secret(&b.secret_ref, b.username_key.as_ref(), "username"),
            password: in_secret(&b.secret_ref, b.password_key.as_ref(), "password"),
        }),
        (None, None) => None,
    };
    Ok(Some(Security { ca, client_tls, auth }))
}

/// The `endpointConfigs` entry whose host is the URL's, as metacontroller matches it: the host as
/// written, or with the scheme's default port made explicit (or left out).
fn endpoint_for<'a>(url: &str, endpoints: &'a [api::EndpointConfig]) -> Option<&'a api::EndpointConfig> {
    let uri: http::Uri = url.parse().ok()?;
    let host = uri.host()?;
    let default_port = match uri.scheme_str() {
        Some("https") => 443,
        _ => 80,
    };
    let written = match uri.port_u16() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    };
    let canonical = format!("{host}:{}", uri.port_u16().unwrap_or(default_port));
    endpoints.iter().find(|c| {
        c.host.eq_ignore_ascii_case(&written)
            || c.host.eq_ignore_ascii_case(&canonical)
            || (uri.port_u16() == Some(default_port) && c.host.eq_ignore_ascii_case(host))
    })
}

/// Whether samplectl runs outside a cluster's pods, where a Service's DNS name does not resolve: the
/// kubelet sets `KUBERNETES_SERVICE_HOST` in every container.
pub fn outside() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_none()
}

/// The API server's proxy path for a Service's `path`: `https:NAME:PORT` for https, `NAME:PORT` for http.
fn proxy_path(service: &api::ServiceReference, path: &str) -> String {
    let port = service.port.unwrap_or(80);
    let scheme = match service.protocol.as_deref() {
        Some("https") => "https:",
        _ => "",
    };
    let path = if path.starts_with('/') { path.to_owned() } else { format!("/{path}") };
    format!("/api/v1/namespaces/{}/services/{scheme}{}:{port}/proxy{path}", service.namespace, service.name)
}

/// The URL a webhook is called at: its `url` as given, or `<protocol>://<name>.<namespace>:<port><path>`
/// for a Service (`http` and port 80 unless given), as metacontroller writes it.
pub fn address(webhook: &api::Webhook) -> Result<String, String> {
    if let Some(url) = &webhook.url {
        return Ok(url.clone());
    }
    let (Some(service), Some(path)) = (&webhook.service, &webhook.path) else {
        return Err("must specify either a full 'url', or both 'service' and 'path'".into());
    };
    if service.name.is_empty() || service.namespace.is_empty() {
        return Err("'service' must specify both 'name' and 'namespace'".into());
    }
    let protocol = service.protocol.as_deref().unwrap_or("http");
    let port = service.port.unwrap_or(80);
    Ok(format!("{protocol}://{}.{}:{port}{path}", service.name, service.namespace))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::define::api::{EndpointConfig, ServiceReference, Webhook};

    fn service(port: Option<i32>, protocol: Option<&str>) -> Webhook {
        Webhook {
            service: Some(ServiceReference {
                name: "hooks".into(),
                namespace: "metacontroller".into(),
                port,
                protocol: protocol.map(str::to_owned),
            }),
            path: Some("/sync".into()),
            ..Webhook::default()
        }
    }

    #[test]
    fn a_service_becomes_the_url_metacontroller_calls() {
        assert_eq!(address(&service(None, None)).unwrap(), "http://hooks.metacontroller:80/sync");
        assert_eq!(address(&service(Some(8443), Some("https"))).unwrap(), "https://hooks.metacontroller:8443/sync");
        let url = Webhook { url: Some("http://127.0.0.1:9/x".into()), ..service(None, None) };
        assert_eq!(address(&url).unwrap(), "http://127.0.0.1:9/x", "a url wins");
        let no_path = Webhook { path: None, ..service(None, None) };
        assert!(address(&no_path).unwrap_err().contains("both 'service' and 'path'"));
        assert!(address(&Webhook::default()).unwrap_err().contains("either a full 'url'"));
    }

    #[test]
    fn out_of_the_cluster_a_service_is_reached_through_the_api_servers_proxy() {
        let plain = ServiceReference { name: "hooks".into(), namespace: "mc".into(), port: None, protocol: None };
        assert_eq!(proxy_path(&plain, "/sync"), "/api/v1/namespaces/mc/services/hooks:80/proxy/sync");
        let tls = ServiceReference { port: Some(8443), protocol: Some("https".into()), ..plain };
        assert_eq!(proxy_path(&tls, "sync"), "/api/v1/namespaces/mc/services/https:hooks:8443/proxy/sync");
    }

    fn offline() -> kube::Client {
        kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap()
    }

    fn endpoint(host: &str, extra: serde_json::Value) -> EndpointConfig {
        let mut value = serde_json::json!({"host": host});
        value.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn an_endpoint_config_is_picked_by_host_as_metacontroller_picks_it() {
        let token =
            serde_json::json!({"authorization": {"secretRef": {"name": "t", "namespace": "n", "key": "token"}}});
        let configs = [endpoint("hooks.example.com", token.clone()), endpoint("other:8443", token.clone())];
        let url = |u: &str| Webhook { url: Some(u.into()), ..Webhook::default() };
        for (address, picked) in [
            ("https://hooks.example.com/sync", true),
            ("https://hooks.example.com:443/sync", true),
            ("http://hooks.example.com:8080/sync", false),
            ("https://other:8443/x", true),
            ("https://other/x", false),
            ("http://elsewhere/x", false),
        ] {
            let found = security(&url(address), &configs, address).unwrap();
            assert_eq!(found.is_some(), picked, "{address}");
        }
        let found = security(&url("https://hooks.example.com/"), &configs, "https://hooks.example.com/").unwrap();
        let secret = ValueRef { namespace: "n".into(), name: "t".into(), key: "token".into() };
        assert_eq!(found.unwrap().auth, Some(Auth::Header { scheme: "Bearer".into(), secret }));
    }

    #[test]
    fn a_webhooks_own_security_wins_and_metacontrollers_refusals_hold() {
        let own: Webhook = serde_json::from_value(serde_json::json!({
            "url": "https://h/x",
            "caBundle": {"configMapRef": {"name": "ca", "namespace": "n"}},
            "clientTLS": {"secretRef": {"name": "c", "namespace": "n"}},
            "basicAuth": {"secretRef": {"name": "b", "namespace": "n"}, "usernameKey": "user"},
        }))
        .unwrap();
        let picked = security(&own, &[endpoint("h", serde_json::json!({}))], "https://h/x").unwrap().unwrap();
        let at = |name: &str, key: &str| ValueRef { namespace: "n".into(), name: name.into(), key: key.into() };
        assert_eq!(picked.ca, Some(CaSource::ConfigMap(at("ca", "ca.crt"))));
        assert_eq!(picked.client_tls, Some((at("c", "tls.crt"), at("c", "tls.key"))));
        assert_eq!(picked.auth, Some(Auth::Basic { username: at("b", "user"), password: at("b", "password") }));

        let refused = |extra: serde_json::Value, says: &str| {
            let mut value = serde_json::json!({"url": "https://h/x"});
            value.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            let webhook: Webhook = serde_json::from_value(value).unwrap();
            let err = security(&webhook, &[], "https://h/x").unwrap_err();
            assert!(err.contains(says), "{err}");
        };
        let secret = serde_json::json!({"name": "s", "namespace": "n", "key": "k"});
        refused(
            serde_json::json!({"authorization": {"secretRef": secret}, "basicAuth": {"secretRef": {"name": "s", "namespace": "n"}}}),
            "mutually exclusive",
        );
        refused(serde_json::json!({"authorization": {"type": "Basic", "secretRef": secret}}), "use basicAuth instead");
        refused(serde_json::json!({"caBundle": {}}), "names none of inline");
        refused(
            serde_json::json!({"caBundle": {"inline": "x", "secretRef": {"name": "s", "namespace": "n"}}}),
            "exactly one of",
        );
    }

    #[tokio::test]
    async fn versions_timeouts_and_strictness() {
        let client = offline();
        let reach = Reach { client: &client, endpoints: &[], proxy: false };
        let hook = |version: Option<HookVersion>, timeout: Option<&str>, mode: Option<UnmarshallMode>| api::HookSpec {
            version,
            webhook: Some(Webhook {
                url: Some("http://127.0.0.1:9/sync".into()),
                timeout: timeout.map(str::to_owned),
                response_unmarshall_mode: mode,
                ..Webhook::default()
            }),
        };
        let v1 = callable("sync", &hook(None, None, None), &reach).unwrap();
        assert_eq!((v1.version, v1.strict, v1.timeout), (Version::V1, false, DEFAULT_TIMEOUT));
        let v2 = callable("sync", &hook(Some(HookVersion::V2), Some("1m30s"), None), &reach).unwrap();
        assert_eq!((v2.version, v2.strict, v2.timeout), (Version::V2, true, Duration::from_secs(90)));
        let loose =
            callable("sync", &hook(Some(HookVersion::V2), Some("0s"), Some(UnmarshallMode::Loose)), &reach).unwrap();
        assert_eq!((loose.strict, loose.timeout), (false, DEFAULT_TIMEOUT));
        let err = callable("finalize", &hook(None, Some("soon"), None), &reach).err().unwrap().to_string();
        assert!(err.starts_with("hooks.finalize.webhook.timeout: invalid duration"), "{err}");
        let err = callable("sync", &api::HookSpec::default(), &reach).err().unwrap().to_string();
        assert!(err.contains("hooks.sync has no webhook"), "{err}");
    }
}
