//! The polling driver: the original list-every-second loop done right. Each tick lists the Samples and
//! the ConfigMaps samplectl manages (by label), decides without further requests which Samples differ
//! from what they want, and reconciles only those, a few at a time, skipping any still backing off.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, ListParams};
use tokio::sync::watch;
use tokio::time::Instant;

use super::sample::{ChildAction, desired_status, managed_selector, plan};
use super::{Context, Outcome};

pub struct Poll {
    pub ctx: Arc<Context>,
    pub namespace: Option<String>,
    pub interval: Duration,
    pub concurrency: usize,
}

/// What one pass found: how many Samples, how many Ready, and how many reconciles failed.
#[derive(Debug, Default, Clone, Copy)]
pub struct Pass {
    pub samples: usize,
    pub not_ready: usize,
    pub failed: usize,
}

const PAGE: u32 = 500;

/// How long one request of a pass may take. kube sets no read timeout, so without this a frozen API
/// server (one that accepts connections but never answers) would hold a pass forever.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one Sample's reconcile (a few requests) may take before it counts as failed.
const RECONCILE_TIMEOUT: Duration = Duration::from_secs(30);

async fn list_all<K>(api: &Api<K>, lp: ListParams) -> anyhow::Result<Vec<K>>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut lp = lp.limit(PAGE);
    let mut items = Vec::new();
    loop {
        let page = tokio::time::timeout(REQUEST_TIMEOUT, api.list(&lp))
            .await
            .map_err(|_| anyhow::anyhow!("the API server did not answer within {}s", REQUEST_TIMEOUT.as_secs()))??;
        items.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => lp = lp.continue_token(&token),
            None => return Ok(items),
        }
    }
}

impl Poll {
    fn apis(&self) -> (Api<DynamicObject>, Api<ConfigMap>) {
        let client = self.ctx.client.clone();
        let ar = &self.ctx.samples.ar;
        match &self.namespace {
            Some(ns) => (Api::namespaced_with(client.clone(), ns, ar), Api::namespaced(client, ns)),
            None => (Api::all_with(client.clone(), ar), Api::all(client)),
        }
    }

    /// One full pass. `retry_at` holds the Samples backing off after failures (by uid).
    pub async fn pass(
        &self,
        retry_at: &mut HashMap<String, Instant>,
        stop: &watch::Receiver<bool>,
    ) -> anyhow::Result<Pass> {
        let (samples_api, configmaps_api) = self.apis();
        let samples = list_all(&samples_api, ListParams::default()).await?;
        let configmaps = list_all(&configmaps_api, ListParams::default().labels(&managed_selector())).await?;
        let mut children: HashMap<(String, String), ConfigMap> = configmaps
            .into_iter()
            .map(|cm| {
                ((cm.metadata.namespace.clone().unwrap_or_default(), cm.metadata.name.clone().unwrap_or_default()), cm)
            })
            .collect();

        let now = Instant::now();
        let mut pass = Pass { samples: samples.len(), ..Pass::default() };
        let mut work = Vec::new();
        for sample in samples {
            let uid = sample.metadata.uid.clone().unwrap_or_default();
            let child = children.remove(&(
                sample.metadata.namespace.clone().unwrap_or_default(),
                sample.metadata.name.clone().unwrap_or_default(),
            ));
            if sample.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let planned = plan(&sample, &self.ctx.samples.ar, child.as_ref());
            let converged = child.is_some()
                && planned.child == ChildAction::None
                && desired_status(&sample, &self.ctx.samples.ar, &planned.readiness, "").is_none();
            if converged {
                pass.not_ready += usize::from(!planned.readiness.ready);
                continue;
            }
            if retry_at.get(&uid).is_some_and(|at| *at > now) {
                pass.not_ready += 1;
                continue;
            }
            work.push((sample, child));
        }

        self.ctx.metrics.backlog.set(work.len() as i64);
        // Stop taking new Samples once shutdown is asked for; those already started finish.
        let results: Vec<_> = futures::stream::iter(work)
            .take_while(|_| futures::future::ready(!*stop.borrow()))
            .map(|(sample, child)| async move {
                let result =
                    match tokio::time::timeout(RECONCILE_TIMEOUT, self.ctx.reconcile(&sample, child.as_ref())).await {
                        Ok(result) => result.map_err(|e| e.to_string()),
                        Err(_) => Err(format!("reconcile did not finish within {}s", RECONCILE_TIMEOUT.as_secs())),
                    };
                (sample, result)
            })
            .buffer_unordered(self.concurrency.max(1))
            .collect()
            .await;
        for (sample, result) in results {
            let uid = sample.metadata.uid.clone().unwrap_or_default();
            match result {
                Ok(Outcome::Ready) => {
                    retry_at.remove(&uid);
                }
                Ok(Outcome::NotReady) => {
                    retry_at.remove(&uid);
                    pass.not_ready += 1;
                }
                Ok(Outcome::Deleting) => {}
                Err(err) => {
                    let delay = self.ctx.failed(&sample);
                    tracing::warn!(error = %err, "{err}; retrying in {}s", delay.as_secs());
                    retry_at.insert(uid, Instant::now() + delay);
                    pass.not_ready += 1;
                    pass.failed += 1;
                }
            }
        }
        Ok(pass)
    }

    /// Passes every `interval` until `stop` turns true. With `once`, one pass and its result.
    pub async fn run(&self, once: bool, mut stop: watch::Receiver<bool>) -> anyhow::Result<Option<Pass>> {
        let mut retry_at = HashMap::new();
        loop {
            let started = Instant::now();
            let pass = self.pass(&mut retry_at, &stop).await;
            if pass.is_ok() {
                self.ctx.health.synced.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            match pass {
                Ok(pass) if once => return Ok(Some(pass)),
                Ok(pass) => tracing::debug!(samples = pass.samples, not_ready = pass.not_ready, "pass done"),
                Err(err) if once => return Err(err),
                Err(err) => tracing::warn!("cannot list Samples and their ConfigMaps: {err:#}"),
            }
            if *stop.borrow() {
                return Ok(None);
            }
            tokio::select! {
                () = tokio::time::sleep_until(started + self.interval) => {}
                _ = stop.wait_for(|stopped| *stopped) => return Ok(None),
            }
        }
    }
}
