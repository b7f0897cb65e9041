//! Counts the requests samplectl itself sends, by verb and resource, through a layer around the kube
//! client: what polling costs next to watching, seen from the client's side.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use http::{Method, Request, header::CONTENT_TYPE};

/// Shared tallies; cloning shares them.
#[derive(Clone, Default, Debug)]
pub struct RequestCounter(Arc<Mutex<BTreeMap<(String, String), u64>>>);

impl RequestCounter {
    pub fn record<B>(&self, req: &Request<B>) {
        let content_type = req.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
        let key = classify(req.method(), req.uri().path(), req.uri().query().unwrap_or_default(), content_type);
        *self.0.lock().unwrap_or_else(|e| e.into_inner()).entry(key).or_default() += 1;
    }

    pub fn snapshot(&self) -> Tally {
        Tally(self.0.lock().unwrap_or_else(|e| e.into_inner()).clone())
    }
}

/// When the API server last answered any request with a status below 500 (a watch counts when it is
/// opened): whether it is within reach, for /healthz and /readyz. Cloning shares it.
#[derive(Clone, Default, Debug)]
pub struct LastAnswer(Arc<Mutex<Option<Instant>>>);

impl LastAnswer {
    pub fn record(&self, status: http::StatusCode) {
        if !status.is_server_error() {
            *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        }
    }

    pub fn get(&self) -> Option<Instant> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Request counts by (verb, resource), for printing and for differences over time.
#[derive(Clone, Default, Debug, PartialEq, Eq)]
pub struct Tally(pub BTreeMap<(String, String), u64>);

impl Tally {
    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }

    /// Requests that change something on the server.
    pub fn writes(&self) -> u64 {
        self.0.iter().filter(|((verb, _), _)| is_write(verb)).map(|(_, n)| n).sum()
    }

    /// What happened since `earlier`.
    pub fn since(&self, earlier: &Tally) -> Tally {
        let mut diff = BTreeMap::new();
        for (key, &n) in &self.0 {
            let before = earlier.0.get(key).copied().unwrap_or(0);
            if n > before {
                diff.insert(key.clone(), n - before);
            }
        }
        Tally(diff)
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} requests ({} writes)", self.total(), self.writes())?;
        let parts: Vec<String> = self.0.iter().map(|((verb, resource), n)| format!("{verb} {resource} {n}")).collect();
        if !parts.is_empty() {
            write!(f, ": {}", parts.join(", "))?;
        }
        Ok(())
    }
}

fn is_write(verb: &str) -> bool {
    matches!(verb, "create" | "update" | "patch" | "apply" | "delete" | "deletecollection")
}

/// The API verb and resource of a request, as the API server's metrics name them: `list configmaps`,
/// `apply samples/status`, `watch samples`, `get discovery`.
pub fn classify(method: &Method, path: &str, query: &str, content_type: &str) -> (String, String) {
    let segments: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => &[][..],
    };
    // A namespaced path carries `namespaces/NS` before the resource; `namespaces/NS` alone is a namespace.
    let rest = match rest {
        ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let (resource, named) = match rest {
        [] => return (method.as_str().to_lowercase(), "discovery".to_owned()),
        [resource] => (resource.to_string(), false),
        [resource, _name] => (resource.to_string(), true),
        [resource, _name, sub, ..] => (format!("{resource}/{sub}"), true),
    };
    let watching = super::deadline::is_watch(query);
    let verb = match *method {
        Method::GET if watching => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH if content_type.starts_with("application/apply-patch") => "apply",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => return (method.as_str().to_lowercase(), resource),
    };
    (verb.to_owned(), resource)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(method: Method, path: &str, query: &str, ct: &str) -> (String, String) {
        classify(&method, path, query, ct)
    }

    fn pair(verb: &str, resource: &str) -> (String, String) {
        (verb.to_owned(), resource.to_owned())
    }

    #[test]
    fn requests_are_named_like_the_api_server_names_them() {
        assert_eq!(c(Method::GET, "/apis/example.com/v1alpha1/samples", "limit=500", ""), pair("list", "samples"));
        assert_eq!(
            c(Method::GET, "/api/v1/namespaces/ns/configmaps", "labelSelector=x", ""),
            pair("list", "configmaps")
        );
        assert_eq!(c(Method::GET, "/api/v1/namespaces/ns/configmaps/a", "", ""), pair("get", "configmaps"));
        assert_eq!(
            c(Method::GET, "/apis/example.com/v1alpha1/samples", "watch=true&resourceVersion=5", ""),
            pair("watch", "samples")
        );
        assert_eq!(
            c(
                Method::PATCH,
                "/api/v1/namespaces/ns/configmaps/a",
                "fieldManager=samplectl",
                "application/apply-patch+yaml"
            ),
            pair("apply", "configmaps")
        );
        assert_eq!(
            c(
                Method::PATCH,
                "/apis/example.com/v1alpha1/namespaces/ns/samples/a/status",
                "",
                "application/apply-patch+yaml"
            ),
            pair("apply", "samples/status")
        );
        assert_eq!(
            c(Method::PATCH, "/apis/events.k8s.io/v1/namespaces/ns/events/e", "", "application/merge-patch+json"),
            pair("patch", "events")
        );
        assert_eq!(c(Method::POST, "/apis/events.k8s.io/v1/namespaces/ns/events", "", ""), pair("create", "events"));
        assert_eq!(c(Method::GET, "/api/v1/namespaces/default", "", ""), pair("get", "namespaces"));
        assert_eq!(c(Method::GET, "/api/v1/namespaces", "", ""), pair("list", "namespaces"));
        assert_eq!(c(Method::GET, "/apis/example.com/v1alpha1", "", ""), pair("get", "discovery"));
        assert_eq!(
            c(Method::DELETE, "/api/v1/namespaces/ns/configmaps", "", ""),
            pair("deletecollection", "configmaps")
        );
    }

    #[test]
    fn tallies_total_writes_and_differences() {
        let counter = RequestCounter::default();
        let req = |method: Method, uri: &str| Request::builder().method(method).uri(uri).body(()).unwrap();
        counter.record(&req(Method::GET, "/api/v1/namespaces/ns/configmaps"));
        let first = counter.snapshot();
        counter.record(&req(Method::GET, "/api/v1/namespaces/ns/configmaps"));
        counter.record(&req(Method::POST, "/apis/events.k8s.io/v1/namespaces/ns/events"));
        let second = counter.snapshot();
        assert_eq!((second.total(), second.writes()), (3, 1));
        let diff = second.since(&first);
        assert_eq!(diff.to_string(), "2 requests (1 writes): create events 1, list configmaps 1");
    }
}
