//! The watch-driven driver: kube-runtime's Controller over the Samples (as DynamicObject, with the
//! discovered ApiResource so owner references match), owning the ConfigMaps samplectl labels, so a
//! deleted or edited child brings its Sample back into the queue at once. Bounded concurrency, per-object
//! exponential backoff on errors, and a periodic resync.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use tokio::sync::watch;

use super::sample::managed_selector;
use super::{Context, Outcome, ReconcileError};

pub struct Watch {
    pub ctx: Arc<Context>,
    pub namespace: Option<String>,
    pub concurrency: u16,
    pub resync: Duration,
}

/// For `--once`: the Samples that existed at the start, and how each one's first reconcile went.
struct Once {
    pending: Mutex<HashSet<ObjectRef<DynamicObject>>>,
    not_ready: Mutex<usize>,
    done: watch::Sender<bool>,
}

struct Shared {
    ctx: Arc<Context>,
    resync: Duration,
}

impl Watch {
    /// Runs until `stop` turns true; with `once`, until every Sample that existed at the start has been
    /// reconciled once, and then returns how many of them are not Ready.
    pub async fn run(&self, once: bool, stop: watch::Receiver<bool>) -> kube::Result<Option<usize>> {
        let client = self.ctx.client.clone();
        let ar = self.ctx.samples.ar.clone();
        let (samples, configmaps): (Api<DynamicObject>, Api<ConfigMap>) = match &self.namespace {
            Some(ns) => (Api::namespaced_with(client.clone(), ns, &ar), Api::namespaced(client, ns)),
            None => (Api::all_with(client.clone(), &ar), Api::all(client)),
        };

        let (done_tx, mut done_rx) = watch::channel(false);
        // One list of the Samples up front: what --once must get through, and the point from which
        // /readyz reports this replica synced (the Controller's own store never says so to us).
        let listed = samples.list(&Default::default()).await?;
        self.ctx.health.synced.store(true, std::sync::atomic::Ordering::Relaxed);
        let once = if once {
            let pending: HashSet<_> = listed.items.iter().map(|s| ObjectRef::from_obj_with(s, ar.clone())).collect();
            if pending.is_empty() {
                return Ok(Some(0));
            }
            Some(Arc::new(Once { pending: Mutex::new(pending), not_ready: Mutex::new(0), done: done_tx }))
        } else {
            None
        };

        let mut stop_on = stop.clone();
        let shutdown = async move {
            tokio::select! {
                _ = stop_on.wait_for(|s| *s) => {}
                _ = done_rx.wait_for(|d| *d) => {}
            }
        };
        let shared = Arc::new(Shared { ctx: self.ctx.clone(), resync: self.resync });
        let tracker = once.clone();
        Controller::new_with(samples, watcher::Config::default(), ar)
            .owns(configmaps, watcher::Config::default().labels(&managed_selector()))
            .with_config(controller::Config::default().concurrency(self.concurrency))
            .graceful_shutdown_on(shutdown)
            .run(reconcile, error_policy, shared)
            .for_each(|result| {
                let tracker = tracker.clone();
                async move {
                    let (object, not_ready) = match result {
                        Ok((object, _)) => (object, false),
                        Err(controller::Error::ReconcilerFailed(_, object)) => (*object, true),
                        Err(controller::Error::ObjectNotFound(object)) => {
                            tracing::debug!("{object} is gone");
                            (*object, false)
                        }
                        Err(err) => {
                            tracing::warn!("controller: {err}");
                            return;
                        }
                    };
                    if let Some(tracker) = tracker {
                        let mut pending = tracker.pending.lock().unwrap_or_else(|e| e.into_inner());
                        if pending.remove(&object) {
                            *tracker.not_ready.lock().unwrap_or_else(|e| e.into_inner()) += usize::from(not_ready);
                        }
                        if pending.is_empty() {
                            let _ = tracker.done.send(true);
                        }
                    }
                }
            })
            .await;
        Ok(once.map(|o| *o.not_ready.lock().unwrap_or_else(|e| e.into_inner())))
    }
}

/// Not-Ready outcomes count as failures for `--once`, but are not errors: the Sample's status says why,
/// and the next change to it or its ConfigMap brings it back.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Reconcile(#[from] ReconcileError),
    #[error("not Ready")]
    NotReady,
}

async fn reconcile(sample: Arc<DynamicObject>, shared: Arc<Shared>) -> Result<Action, Failure> {
    match shared.ctx.reconcile(&sample, None).await? {
        Outcome::NotReady => Err(Failure::NotReady),
        Outcome::Ready | Outcome::Deleting => Ok(Action::requeue(shared.resync)),
    }
}

fn error_policy(sample: Arc<DynamicObject>, failure: &Failure, shared: Arc<Shared>) -> Action {
    match failure {
        Failure::NotReady => Action::requeue(shared.resync),
        Failure::Reconcile(err) => {
            let delay = shared.ctx.failed(&sample);
            tracing::warn!(error = %err, "{err}; retrying in {}s", delay.as_secs());
            Action::requeue(delay)
        }
    }
}
