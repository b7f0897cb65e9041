//! The watch-driven driver: kube-runtime's Controller over the Samples (as DynamicObject, with the
//! discovered ApiResource so owner references match), owning the ConfigMaps samplectl labels, so a
//! deleted or edited child brings its Sample back into the queue at once. Both are cached (as
//! controller-runtime caches them), so reconciling a converged Sample sends no request. Bounded
//! concurrency, per-object exponential backoff on errors, and a periodic resync.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
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
    children: Store<ConfigMap>,
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

        // Two caches, as controller-runtime keeps them: the Samples, and the ConfigMaps samplectl labels,
        // so that a converged Sample is reconciled without a request. managedFields are dropped from both:
        // nothing here reads them, and they are much of each object's size.
        let (children, children_writer) = reflector::store::<ConfigMap>();
        // Readiness is signalled from the streams themselves, not with Store::wait_until_ready: kube's
        // store wakes only the last of several waiters, and the Controller is already one of them.
        let (children_listed, mut children_listed_rx) = watch::channel(false);
        let child_events = watcher(configmaps, watcher::Config::default().labels(&managed_selector()))
            .modify(|cm| cm.meta_mut().managed_fields = None)
            .reflect(children_writer)
            .inspect_ok(move |event| {
                if matches!(event, watcher::Event::InitDone) {
                    children_listed.send_replace(true);
                }
            })
            .touched_objects();
        let samples_writer = Writer::new(ar.clone());
        let synced = samples_writer.as_reader();
        let to_list = samples.clone();
        let health = self.ctx.health.clone();
        let sample_events = watcher(samples, watcher::Config::default())
            .modify(|sample| sample.meta_mut().managed_fields = None)
            .reflect(samples_writer)
            .inspect_ok(move |event| {
                if matches!(event, watcher::Event::InitDone) {
                    // /readyz: this replica has seen every Sample.
                    health.synced.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            })
            .applied_objects();
        // Samples start flowing once the ConfigMap cache has its first full list, or every early
        // reconcile would miss in it and read its ConfigMap from the API server instead.
        let sample_events = stream::once(async move {
            let _ = children_listed_rx.wait_for(|listed| *listed).await;
            sample_events
        })
        .flatten();

        let (done_tx, mut done_rx) = watch::channel(false);
        let once = if once {
            // The Samples that exist now are what --once must get through.
            let listed = to_list.list(&Default::default()).await?;
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
        let shared = Arc::new(Shared { ctx: self.ctx.clone(), resync: self.resync, children });
        let tracker = once.clone();
        Controller::for_stream_with(sample_events, synced, ar)
            .owns_stream(child_events)
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
    let child = ObjectRef::new(&sample.name_any()).within(&sample.namespace().unwrap_or_default());
    let child = shared.children.get(&child);
    match shared.ctx.reconcile(&sample, child.as_deref()).await? {
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
