//! Every request the engine sends is bounded in time and fails in words: kube sets no read timeout, so
//! without a bound a request on a half-open connection (or to a frozen API server) would never end and
//! would hold its concurrency slot for good.
//!
//! And every write goes through [`Fenced`], the one type that can send one: it asks its gate (the
//! process's fence, or a context's `Writer`) right before the request leaves. kube's own write methods
//! are refused by clippy (`clippy.toml`'s `disallowed-methods`) everywhere else, and `scripts/write-paths`
//! (run by `scripts/test`) fails the build if an exception appears outside the short list it names, so a
//! write that skips the fence cannot be written by mistake.

use std::fmt::Debug;
use std::time::Duration;

use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// What a write asks right before it is sent: whether this process may still write.
pub trait Gate: Sync {
    fn open(&self) -> bool;
}

/// An `Api` whose writes each pass the gate, then run with [`REQUEST_TIMEOUT`]. Reads go through
/// [`Fenced::reads`], unchanged.
pub struct Fenced<'a, K> {
    api: Api<K>,
    gate: &'a dyn Gate,
}

#[allow(clippy::disallowed_methods)] // the one place kube's write methods are called
impl<'a, K> Fenced<'a, K>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    pub fn new(api: Api<K>, gate: &'a dyn Gate) -> Self {
        Fenced { api, gate }
    }

    pub fn reads(&self) -> &Api<K> {
        &self.api
    }

    async fn send<T>(&self, request: impl Future<Output = kube::Result<T>>) -> Result<T, Failed> {
        if !self.gate.open() {
            return Err(Failed::Fenced);
        }
        bounded(request).await
    }

    pub async fn create(&self, params: &PostParams, object: &K) -> Result<K, Failed>
    where
        K: Serialize,
    {
        self.send(self.api.create(params, object)).await
    }

    pub async fn replace(&self, name: &str, params: &PostParams, object: &K) -> Result<K, Failed>
    where
        K: Serialize,
    {
        self.send(self.api.replace(name, params, object)).await
    }

    pub async fn patch<P: Serialize + Debug>(
        &self,
        name: &str,
        params: &PatchParams,
        patch: &Patch<P>,
    ) -> Result<K, Failed> {
        self.send(self.api.patch(name, params, patch)).await
    }

    pub async fn patch_status<P: Serialize + Debug>(
        &self,
        name: &str,
        params: &PatchParams,
        patch: &Patch<P>,
    ) -> Result<K, Failed> {
        self.send(self.api.patch_status(name, params, patch)).await
    }

    pub async fn patch_subresource<P: Serialize + Debug>(
        &self,
        subresource: &str,
        name: &str,
        params: &PatchParams,
        patch: &Patch<P>,
    ) -> Result<K, Failed> {
        self.send(self.api.patch_subresource(subresource, name, params, patch)).await
    }

    pub async fn replace_subresource(
        &self,
        subresource: &str,
        name: &str,
        params: &PostParams,
        body: &impl Serialize,
    ) -> Result<K, Failed> {
        self.send(self.api.replace_subresource(subresource, name, params, body)).await
    }

    /// Deleted, or being deleted (finalizers or a foreground deletion still to run).
    pub async fn delete(&self, name: &str, params: &DeleteParams) -> Result<(), Failed> {
        self.send(self.api.delete(name, params)).await.map(drop)
    }
}

/// How long one request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs one request with [`REQUEST_TIMEOUT`].
pub async fn bounded<T>(request: impl Future<Output = kube::Result<T>>) -> Result<T, Failed> {
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(Failed::Api(err)),
        Err(_) => Err(Failed::TimedOut),
    }
}

/// A request that did not succeed.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.message())]
pub enum Failed {
    Api(kube::Error),
    TimedOut,
    /// Not sent: this process's Lease was not renewed within its renew deadline (`fence`).
    Fenced,
}

impl Failed {
    /// For /healthz: no answer, or a 5xx (a 4xx is the server refusing, not being away).
    pub fn out_of_reach(&self) -> bool {
        match self {
            Failed::Api(err) => crate::error::out_of_reach(err),
            Failed::TimedOut => true,
            Failed::Fenced => false,
        }
    }

    pub fn status(&self) -> Option<u16> {
        match self {
            Failed::Api(err) => crate::error::status_code(err),
            Failed::TimedOut | Failed::Fenced => None,
        }
    }

    /// As Go's client words it: what the API server said, without kubectl's `Error from server` frame.
    pub fn go_message(&self) -> String {
        match self {
            Failed::Api(kube::Error::Api(status)) => status.message.clone(),
            other => other.message(),
        }
    }

    pub fn message(&self) -> String {
        match self {
            Failed::Api(err) => crate::error::describe(err),
            Failed::TimedOut => format!("the API server did not answer within {}s", REQUEST_TIMEOUT.as_secs()),
            Failed::Fenced => "not sent: this process's Lease was not renewed within its renew deadline".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{DeleteParams, Patch, PatchParams, PostParams};

    use super::*;
    use crate::controller::engine::fence::Fence;

    /// A client whose every request is counted and answered with one ConfigMap.
    fn counting() -> (kube::Client, Arc<AtomicUsize>) {
        let sent = Arc::new(AtomicUsize::new(0));
        let counter = sent.clone();
        let service = tower::service_fn(move |_request: http::Request<kube::client::Body>| {
            counter.fetch_add(1, Ordering::SeqCst);
            let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"n"}}"#;
            async move {
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(body.as_bytes().to_vec()))
                        .unwrap(),
                )
            }
        });
        (kube::Client::new(service, "n"), sent)
    }

    /// Every write of a closed fence fails as fenced without a request leaving; once open, each leaves.
    #[tokio::test]
    async fn a_write_leaves_only_through_an_open_fence() {
        let (client, sent) = counting();
        let fence = Fence::closed();
        let api = Fenced::new(crate::cluster::scope::api::<ConfigMap>(client, Some("n")), &fence);
        let object = ConfigMap {
            metadata: kube::api::ObjectMeta { name: Some("c".into()), ..Default::default() },
            ..Default::default()
        };
        let patch = Patch::Merge(serde_json::json!({}));
        let params = (PostParams::default(), PatchParams::default());
        let tries = || async {
            [
                api.create(&params.0, &object).await.map(drop),
                api.replace("c", &params.0, &object).await.map(drop),
                api.patch("c", &params.1, &patch).await.map(drop),
                api.patch_status("c", &params.1, &patch).await.map(drop),
                api.patch_subresource("scale", "c", &params.1, &patch).await.map(drop),
                api.replace_subresource("scale", "c", &params.0, &serde_json::json!({})).await.map(drop),
                api.delete("c", &DeleteParams::default()).await,
            ]
        };
        for result in tries().await {
            assert!(matches!(result, Err(Failed::Fenced)), "{result:?}");
        }
        assert_eq!(sent.load(Ordering::SeqCst), 0, "nothing left a closed fence");
        api.reads().get("c").await.expect("a read is not fenced");
        assert_eq!(sent.load(Ordering::SeqCst), 1);

        fence.open_until(std::time::Instant::now() + Duration::from_secs(60));
        for result in tries().await {
            assert!(result.is_ok(), "{result:?}");
        }
        assert_eq!(sent.load(Ordering::SeqCst), 8, "each write left once the fence opened");
    }
}
