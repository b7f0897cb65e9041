//! A controller object's hook made callable: its address (a `url`, or a Service's `name.namespace:port`
//! and `path`, as metacontroller builds it), its timeout (10 s unless given; metacontroller's default),
//! its version (v1 unless given) and how strictly its answers are read (strictly for v2, unless
//! `responseUnMarshallMode` says otherwise).

use std::time::Duration;

use anyhow::{Result, anyhow, bail};

use super::api::{self, HookVersion, UnmarshallMode};
use crate::controller::sync::Version;
use crate::controller::sync::hook::{Hook, Target};

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// `hooks.<which>` made a [`Hook`]. `proxy`: the client to reach a `service` hook through the API
/// server's service proxy with, when samplectl runs outside the cluster (see [`outside`]).
pub fn callable(which: &str, hook: &api::Hook, proxy: Option<&kube::Client>) -> Result<Hook> {
    let Some(webhook) = &hook.webhook else {
        bail!("hooks.{which} has no webhook: samplectl calls hooks over HTTP, as metacontroller does");
    };
    let url = address(webhook).map_err(|why| anyhow!("hooks.{which}.webhook: {why}"))?;
    let target = match (&webhook.url, &webhook.service, &webhook.path, proxy) {
        (None, Some(service), Some(path), Some(client)) => Target::ServiceProxy {
            client: client.clone(),
            path: proxy_path(service, path),
            shown: format!("{url} (through the API server's service proxy)"),
        },
        _ => Target::url(&url).map_err(|why| anyhow!("hooks.{which}.webhook: {why}"))?,
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
    if webhook.ca_bundle.is_some()
        || webhook.client_tls.is_some()
        || webhook.authorization.is_some()
        || webhook.basic_auth.is_some()
    {
        bail!(
            "hooks.{which}.webhook: caBundle, clientTLS, authorization and basicAuth are not run yet (samplectl issue 26)"
        );
    }
    let version = match hook.version.unwrap_or_default() {
        HookVersion::V1 => Version::V1,
        HookVersion::V2 => Version::V2,
    };
    let strict = match webhook.response_unmarshall_mode {
        Some(UnmarshallMode::Strict) => true,
        Some(UnmarshallMode::Loose) => false,
        None => version == Version::V2,
    };
    Hook::versioned(target, timeout, version, strict)
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
    use crate::controller::define::api::{ServiceReference, Webhook};

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

    #[test]
    fn versions_timeouts_and_strictness() {
        let hook = |version: Option<HookVersion>, timeout: Option<&str>, mode: Option<UnmarshallMode>| api::Hook {
            version,
            webhook: Some(Webhook {
                url: Some("http://127.0.0.1:9/sync".into()),
                timeout: timeout.map(str::to_owned),
                response_unmarshall_mode: mode,
                ..Webhook::default()
            }),
        };
        let v1 = callable("sync", &hook(None, None, None), None).unwrap();
        assert_eq!((v1.version, v1.strict, v1.timeout), (Version::V1, false, DEFAULT_TIMEOUT));
        let v2 = callable("sync", &hook(Some(HookVersion::V2), Some("1m30s"), None), None).unwrap();
        assert_eq!((v2.version, v2.strict, v2.timeout), (Version::V2, true, Duration::from_secs(90)));
        let loose =
            callable("sync", &hook(Some(HookVersion::V2), Some("0s"), Some(UnmarshallMode::Loose)), None).unwrap();
        assert_eq!((loose.strict, loose.timeout), (false, DEFAULT_TIMEOUT));
        let err = callable("finalize", &hook(None, Some("soon"), None), None).err().unwrap().to_string();
        assert!(err.starts_with("hooks.finalize.webhook.timeout: invalid duration"), "{err}");
        let err = callable("sync", &api::Hook::default(), None).err().unwrap().to_string();
        assert!(err.contains("hooks.sync has no webhook"), "{err}");
    }
}
