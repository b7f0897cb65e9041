//! The polling driver: the original list-every-second loop done right. Each tick lists the Samples and
//! the ConfigMaps samplectl manages (by label), decides without further requests which Samples differ
//! from what they want, and starts reconciles for those, a few at a time. A tick does not wait for the
//! reconciles it started: one slow Sample holds one slot, not the next tick, and a Sample whose
//! reconcile is still running is not started again. Failures back off per Sample; a Sample blocked by
//! someone else's ConfigMap is looked at again with a backoff of its own, capped at
//! [`CONFLICT_RECHECK_MAX`](super::backoff::CONFLICT_RECHECK_MAX), rather than costing a request every
//! tick. Both backoffs live in the context's one store.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, ListParams};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::engine::{Context, Failed, Outcome, ReconcileError, bounded, key, uid};
use super::sample::{ChildAction, desired_status, managed_selector, plan};
use crate::cluster::read::pages;
use crate::cluster::scope;

pub struct Poll {
    pub ctx: Arc<Context>,
    pub namespace: Option<String>,
    pub interval: Duration,
    pub concurrency: usize,
}

/// What a `--once` pass found: how many Samples, and the ones not Ready with why.
#[derive(Debug, Default, Clone)]
pub struct Pass {
    pub samples: usize,
    pub not_ready: Vec<String>,
}

const PAGE: u32 = 500;

/// Every object `api` lists, page by page, each page bounded by the request timeout.
async fn list_all<K>(api: &Api<K>, lp: ListParams) -> Result<Vec<K>, Failed>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    pages(lp.limit(PAGE), |lp| async move { bounded(api.list(&lp)).await })
        .try_fold(Vec::new(), |mut items, page| async move {
            items.extend(page.items);
            Ok(items)
        })
        .await
}

/// One reconcile, as it ended.
type Done = (DynamicObject, Result<Outcome, ReconcileError>);

/// The driver's state across ticks.
struct State {
    running: HashSet<String>,
    tasks: JoinSet<Done>,
    slots: Arc<Semaphore>,
    /// For `--once`: the Samples found not Ready.
    not_ready: Vec<String>,
}

impl Poll {
    fn apis(&self) -> (Api<DynamicObject>, Api<ConfigMap>) {
        let (client, namespace) = (self.ctx.client.clone(), self.namespace.as_deref());
        (scope::dynamic(client.clone(), &self.ctx.samples.ar, namespace), scope::api(client, namespace))
    }

    /// Lists, and starts a reconcile for each Sample that differs from what it wants and is neither
    /// running nor waiting. Returns how many Samples there are.
    async fn tick(&self, state: &mut State, once: bool) -> anyhow::Result<usize> {
        let (samples_api, configmaps_api) = self.apis();
        // A list made after a write has seen it: what was remembered about earlier writes is moot.
        self.ctx.relisted();
        let samples = list_all(&samples_api, ListParams::default()).await?;
        let configmaps = list_all(&configmaps_api, ListParams::default().labels(&managed_selector())).await?;
        let mut children: HashMap<(String, String), ConfigMap> = configmaps
            .into_iter()
            .map(|cm| {
                ((cm.metadata.namespace.clone().unwrap_or_default(), cm.metadata.name.clone().unwrap_or_default()), cm)
            })
            .collect();

        let now = Instant::now();
        let count = samples.len();
        let present: HashSet<String> = samples.iter().map(uid).collect();
        self.ctx.backoff.retain(&present);
        let mut started = 0;
        for sample in samples {
            let uid = uid(&sample);
            let child = children.remove(&(
                sample.metadata.namespace.clone().unwrap_or_default(),
                sample.metadata.name.clone().unwrap_or_default(),
            ));
            if sample.metadata.deletion_timestamp.is_some() || state.running.contains(&uid) {
                continue;
            }
            let planned = plan(&sample, &self.ctx.samples.ar, child.as_ref());
            let converged = child.is_some()
                && planned.child == ChildAction::None
                && desired_status(&sample, &self.ctx.samples.ar, &planned.readiness, "").is_none();
            if converged {
                self.ctx.backoff.clear(&uid);
                if once && !planned.readiness.ready {
                    state.not_ready.push(format!("{} ({})", key(&sample), planned.readiness.reason));
                }
                continue;
            }
            if !once && self.ctx.backoff.waiting(&uid, now) {
                continue;
            }
            state.running.insert(uid);
            started += 1;
            let (ctx, slots) = (self.ctx.clone(), state.slots.clone());
            state.tasks.spawn(async move {
                let _slot = slots.acquire_owned().await.expect("the semaphore is never closed");
                let result = ctx.reconcile(&sample, child.as_ref()).await;
                (sample, result)
            });
        }
        self.ctx.metrics.backlog.set(started);
        Ok(count)
    }

    fn finished(&self, state: &mut State, (sample, result): Done, once: bool) {
        let uid = uid(&sample);
        state.running.remove(&uid);
        let not_ready = match result {
            Ok(Outcome::Ready | Outcome::Deleting) => {
                self.ctx.backoff.clear(&uid);
                None
            }
            Ok(Outcome::NotReady(reason)) => {
                self.ctx.backoff.clear(&uid);
                Some(reason)
            }
            Ok(Outcome::Conflict) => {
                self.ctx.backoff.conflicted(&uid);
                Some("ConfigMapConflict".to_owned())
            }
            Err(err) => {
                let delay = self.ctx.failed(&sample);
                tracing::warn!("{err}; retrying in {}s", delay.as_secs());
                Some(format!("{}: {}", err.action, err.message))
            }
        };
        if let (true, Some(reason)) = (once, not_ready) {
            state.not_ready.push(format!("{} ({reason})", key(&sample)));
        }
    }

    /// Ticks every `interval` until `stop` turns true, then lets the reconciles already running finish.
    /// With `once`, one tick, and the result once its reconciles are done.
    pub async fn run(&self, once: bool, mut stop: watch::Receiver<bool>) -> anyhow::Result<Option<Pass>> {
        let mut state = State {
            running: HashSet::new(),
            tasks: JoinSet::new(),
            slots: Arc::new(Semaphore::new(self.concurrency.max(1))),
            not_ready: Vec::new(),
        };
        loop {
            let started = Instant::now();
            let tick = self.tick(&mut state, once).await;
            if tick.is_ok() {
                self.ctx.health.synced.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            if let Err(err) = &tick
                && err.downcast_ref::<Failed>().is_none_or(Failed::out_of_reach)
            {
                self.ctx.health.unreachable();
            }
            match tick {
                Ok(samples) if once => {
                    while let Some(done) = state.tasks.join_next().await {
                        self.finished(&mut state, done?, true);
                    }
                    return Ok(Some(Pass { samples, not_ready: std::mem::take(&mut state.not_ready) }));
                }
                Ok(samples) => tracing::debug!(samples, running = state.running.len(), "tick done"),
                Err(err) if once => return Err(err),
                Err(err) => tracing::warn!("cannot list Samples and their ConfigMaps: {err:#}"),
            }
            let next = tokio::time::sleep_until(started + self.interval);
            tokio::pin!(next);
            loop {
                tokio::select! {
                    () = &mut next => break,
                    Some(done) = state.tasks.join_next() => self.finished(&mut state, done?, false),
                    _ = stop.wait_for(|stopped| *stopped) => {
                        // Reconciles already running finish (each is bounded by its own timeout).
                        while let Some(done) = state.tasks.join_next().await {
                            self.finished(&mut state, done?, false);
                        }
                        return Ok(None);
                    }
                }
            }
        }
    }
}
