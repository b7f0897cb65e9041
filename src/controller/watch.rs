//! The watch-driven driver: kube-runtime's Controller over the Samples (as DynamicObject, with the
//! discovered ApiResource so owner references match), fed by three watches: the Samples, the ConfigMaps
//! samplectl labels (cached, as controller-runtime caches them, so reconciling a converged Sample sends no
//! request), and the metadata of every other ConfigMap (not cached), so that deleting a ConfigMap that
//! blocks a Sample brings that Sample back at once. Bounded concurrency, per-object exponential backoff
//! on errors, and a periodic resync.
//!
//! The triggers are made here rather than with kube's `applied_objects` / `owns_stream`, because those
//! lose objects: kube's reflector buffers a relist and swaps it into the store only at its end, while
//! `applied_objects` triggers each relisted object at once; the Controller looks each trigger up in the
//! store, and an object created while the watch was down is not there yet, so its reconcile ends as
//! "object not found" and nothing triggers it again. After an API server restart that lost hundreds of a
//! thousand Samples. Here an object is triggered only once the store holds it: a watch event after the
//! store has applied it, and after a relist every object the new store holds (as kube's shared-store path
//! does). bench/UPSTREAM.md describes the fix to offer kube-runtime.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject, PartialObjectMeta};
use kube::discovery::ApiResource;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use tokio::sync::watch;

use super::engine::{Context, Outcome, ReconcileError};
use super::health::Health;
use super::sample::{MANAGED_BY, MANAGED_BY_LABEL, managed_selector};
use crate::cluster::scope;

pub struct Watch {
    pub ctx: Arc<Context>,
    pub namespace: Option<String>,
    pub concurrency: u16,
    pub resync: Duration,
}

type SampleRef = ObjectRef<DynamicObject>;

/// For `--once`: the Samples of the first full list, and how each one's first reconcile went.
#[derive(Default)]
struct Once {
    /// `None` until the Samples have been listed.
    pending: Mutex<Option<HashSet<SampleRef>>>,
    not_ready: Mutex<Vec<String>>,
}

struct Shared {
    ctx: Arc<Context>,
    resync: Duration,
    children: Store<ConfigMap>,
}

/// Says, once per outage, that a watch was cut and is being reopened, and when it is back; the errors
/// between (every failed reconnect) go to the debug log. It also tells /healthz and /readyz when the API
/// server did not answer.
struct Outage {
    what: &'static str,
    down: bool,
    health: Arc<Health>,
}

impl Outage {
    fn new(what: &'static str, health: &Arc<Health>) -> Self {
        Outage { what, down: false, health: health.clone() }
    }

    fn failed(&mut self, err: &watcher::Error) {
        match err {
            watcher::Error::InitialListFailed(e)
            | watcher::Error::WatchStartFailed(e)
            | watcher::Error::WatchFailed(e) => self.health.failed(e),
            // An ERROR event (410 Expired, ...) is the server answering.
            watcher::Error::WatchError(_) => {}
            _ => self.health.unreachable(),
        }
        if !std::mem::replace(&mut self.down, true) {
            tracing::warn!("the watch of {} was cut ({}); reconnecting", self.what, watch_error(err));
        }
        tracing::debug!("watch of {}: {err}", self.what);
    }

    fn listed(&mut self) {
        if std::mem::replace(&mut self.down, false) {
            tracing::info!("the watch of {} is back, and every {} has been looked at again", self.what, self.what);
        }
    }
}

/// A watcher error in words, without kube's Debug dump of the underlying error.
fn watch_error(err: &watcher::Error) -> String {
    match err {
        watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) => {
            crate::error::describe(e)
        }
        watcher::Error::WatchError(status) if status.code == 410 => "its resourceVersion expired".into(),
        watcher::Error::WatchError(status) => status.message.clone(),
        other => other.to_string(),
    }
}

/// The Sample that controls `meta`'s object, if one does.
fn owner(meta: &ObjectMeta, ar: &ApiResource) -> Option<(SampleRef, String)> {
    let owner = meta
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true) && r.kind == ar.kind && r.api_version == ar.api_version)?;
    let reference = ObjectRef::new_with(&owner.name, ar.clone()).within(meta.namespace.as_deref().unwrap_or_default());
    Some((reference, owner.uid.clone()))
}

/// The Sample named like the ConfigMap `meta` describes, if there is one.
fn same_name(meta: &ObjectMeta, store: &Store<DynamicObject>, ar: &ApiResource) -> Option<SampleRef> {
    let name = meta.name.as_deref().unwrap_or_default();
    let sample = ObjectRef::new_with(name, ar.clone()).within(meta.namespace.as_deref().unwrap_or_default());
    store.get(&sample).map(|_| sample)
}

fn every_sample(store: &Store<DynamicObject>, ar: &ApiResource) -> Vec<SampleRef> {
    store.state().iter().map(|s| ObjectRef::from_obj_with(s.as_ref(), ar.clone())).collect()
}

impl Watch {
    fn apis(&self) -> (Api<DynamicObject>, Api<ConfigMap>, Api<PartialObjectMeta<ConfigMap>>) {
        let (client, namespace) = (self.ctx.client.clone(), self.namespace.as_deref());
        (
            scope::dynamic(client.clone(), &self.ctx.samples.ar, namespace),
            scope::api(client.clone(), namespace),
            scope::api(client, namespace),
        )
    }

    /// Runs until `stop` turns true; with `once`, until every Sample of the first full list has been
    /// reconciled once, and then returns the ones that are not Ready.
    pub async fn run(&self, once: bool, stop: watch::Receiver<bool>) -> kube::Result<Option<Vec<String>>> {
        let ar = self.ctx.samples.ar.clone();
        let (samples_api, configmaps_api, others_api) = self.apis();
        let samples_writer = Writer::new(ar.clone());
        let samples = samples_writer.as_reader();
        let (children, children_writer) = reflector::store::<ConfigMap>();
        let tracker = once.then(|| Arc::new(Once::default()));
        let (done_tx, mut done_rx) = watch::channel(false);

        // The ConfigMaps samplectl labels, cached without managedFields (nothing reads them, and they are
        // much of each object's size). A change to one triggers its Sample; a relist triggers every
        // Sample, because a ConfigMap deleted while the watch was down leaves no event behind.
        let (children_listed, mut children_listed_rx) = watch::channel(false);
        let (ctx, store, ar_c) = (self.ctx.clone(), samples.clone(), ar.clone());
        let mut outage = Outage::new("ConfigMaps", &self.ctx.health);
        let child_triggers = watcher(configmaps_api, watcher::Config::default().labels(&managed_selector()))
            .default_backoff()
            .modify(|cm| cm.meta_mut().managed_fields = None)
            .reflect(children_writer)
            .filter_map(move |event| {
                let triggers = match event {
                    Err(err) => {
                        outage.failed(&err);
                        Vec::new()
                    }
                    Ok(watcher::Event::Apply(cm) | watcher::Event::Delete(cm)) => match owner(&cm.metadata, &ar_c) {
                        Some((sample, uid)) => {
                            ctx.child_seen(Some(&uid));
                            vec![sample]
                        }
                        // Labelled but owned by nothing (an orphan): it may block the Sample of its name.
                        None => same_name(&cm.metadata, &store, &ar_c).into_iter().collect(),
                    },
                    Ok(watcher::Event::InitDone) => {
                        outage.listed();
                        ctx.child_seen(None);
                        children_listed.send_replace(true);
                        every_sample(&store, &ar_c)
                    }
                    Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => Vec::new(),
                };
                futures::future::ready(Some(stream::iter(triggers)))
            })
            .flatten();

        // Every other ConfigMap, metadata only and not kept: one that appears or goes away under a
        // Sample's name changes whether that Sample is blocked. A relist triggers every Sample for the
        // same reason as above.
        let store = samples.clone();
        let ar_o = ar.clone();
        let mut outage = Outage::new("other ConfigMaps", &self.ctx.health);
        let unlabelled = format!("{MANAGED_BY_LABEL}!={MANAGED_BY}");
        let other_triggers = watcher(others_api, watcher::Config::default().labels(&unlabelled))
            .default_backoff()
            .filter_map(move |event| {
                let triggers = match event {
                    Err(err) => {
                        outage.failed(&err);
                        Vec::new()
                    }
                    Ok(watcher::Event::Apply(cm) | watcher::Event::Delete(cm)) => {
                        same_name(&cm.metadata, &store, &ar_o).into_iter().collect()
                    }
                    Ok(watcher::Event::InitDone) => {
                        outage.listed();
                        every_sample(&store, &ar_o)
                    }
                    Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => Vec::new(),
                };
                futures::future::ready(Some(stream::iter(triggers)))
            })
            .flatten();

        // The Samples. Each is triggered once the store holds it; see the module's comment.
        let (ctx, store, ar_s) = (self.ctx.clone(), samples.clone(), ar.clone());
        let health = self.ctx.health.clone();
        let once_tracker = tracker.clone();
        let done = done_tx.clone();
        let mut outage = Outage::new("Samples", &self.ctx.health);
        let sample_triggers = watcher(samples_api, watcher::Config::default())
            .default_backoff()
            .modify(|sample| sample.meta_mut().managed_fields = None)
            .reflect(samples_writer)
            .filter_map(move |event| {
                let triggers = match event {
                    Err(err) => {
                        outage.failed(&err);
                        Vec::new()
                    }
                    Ok(watcher::Event::Apply(sample)) => vec![ObjectRef::from_obj_with(&sample, ar_s.clone())],
                    Ok(watcher::Event::Delete(sample)) => {
                        ctx.sample_gone(sample.metadata.uid.as_deref().unwrap_or_default());
                        Vec::new()
                    }
                    Ok(watcher::Event::InitDone) => {
                        outage.listed();
                        // /readyz: this replica has seen every Sample.
                        health.synced.store(true, std::sync::atomic::Ordering::Relaxed);
                        let all = every_sample(&store, &ar_s);
                        if let Some(tracker) = &once_tracker {
                            let mut pending = tracker.pending.lock().unwrap_or_else(|e| e.into_inner());
                            if pending.is_none() {
                                *pending = Some(all.iter().cloned().collect());
                                if all.is_empty() {
                                    done.send_replace(true);
                                }
                            }
                        }
                        all
                    }
                    Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => Vec::new(),
                };
                futures::future::ready(Some(stream::iter(triggers)))
            })
            .flatten();
        // Samples start flowing once the ConfigMap cache has its first full list, or every early
        // reconcile would miss in it and write (or read) its ConfigMap through the API server instead.
        let sample_triggers = stream::once(async move {
            let _ = children_listed_rx.wait_for(|listed| *listed).await;
            sample_triggers
        })
        .flatten();
        let triggers = stream::select(stream::select(child_triggers, other_triggers), sample_triggers);

        let mut stop_on = stop.clone();
        let shutdown = async move {
            tokio::select! {
                _ = stop_on.wait_for(|s| *s) => {}
                _ = done_rx.wait_for(|d| *d) => {}
            }
        };
        let shared = Arc::new(Shared { ctx: self.ctx.clone(), resync: self.resync, children });
        // The Controller's own trigger stream is never used: every trigger comes through reconcile_on.
        let no_objects = stream::pending::<Result<DynamicObject, watcher::Error>>();
        Controller::for_stream_with(no_objects, samples, ar)
            .reconcile_on(triggers)
            .with_config(controller::Config::default().concurrency(self.concurrency))
            .graceful_shutdown_on(shutdown)
            .run(reconcile, error_policy, shared)
            .for_each(|result| {
                let tracker = tracker.clone();
                let done = done_tx.clone();
                async move {
                    let (object, not_ready) = match result {
                        Ok((object, _)) => (object, None),
                        Err(controller::Error::ReconcilerFailed(Failure::NotReady(reason), object)) => {
                            (*object, Some(reason))
                        }
                        Err(controller::Error::ReconcilerFailed(Failure::Reconcile(err), object)) => {
                            (*object, Some(format!("{}: {}", err.action, err.message)))
                        }
                        // Deleted after it was triggered: nothing left to do.
                        Err(controller::Error::ObjectNotFound(object)) => (*object, None),
                        Err(err) => {
                            tracing::warn!("controller: {err}");
                            return;
                        }
                    };
                    if let Some(tracker) = tracker {
                        let mut pending = tracker.pending.lock().unwrap_or_else(|e| e.into_inner());
                        let Some(pending) = pending.as_mut() else { return };
                        if let (true, Some(reason)) = (pending.remove(&object), not_ready) {
                            let namespace = object.namespace.as_deref().unwrap_or_default();
                            let line = format!("{namespace}/{} ({reason})", object.name);
                            tracker.not_ready.lock().unwrap_or_else(|e| e.into_inner()).push(line);
                        }
                        if pending.is_empty() {
                            done.send_replace(true);
                        }
                    }
                }
            })
            .await;
        Ok(tracker.map(|t| std::mem::take(&mut *t.not_ready.lock().unwrap_or_else(|e| e.into_inner()))))
    }
}

/// Not-Ready outcomes count as failures for `--once`, but are not errors: the Sample's status says why,
/// and the next change to it or its ConfigMap brings it back.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Reconcile(#[from] ReconcileError),
    #[error("not Ready ({0})")]
    NotReady(String),
}

async fn reconcile(sample: Arc<DynamicObject>, shared: Arc<Shared>) -> Result<Action, Failure> {
    let child = ObjectRef::new(&sample.name_any()).within(&sample.namespace().unwrap_or_default());
    let child = shared.children.get(&child);
    match shared.ctx.reconcile(&sample, child.as_deref()).await? {
        Outcome::NotReady(reason) => Err(Failure::NotReady(reason)),
        Outcome::Conflict => Err(Failure::NotReady("ConfigMapConflict".into())),
        Outcome::Ready | Outcome::Deleting => Ok(Action::requeue(shared.resync)),
    }
}

fn error_policy(sample: Arc<DynamicObject>, failure: &Failure, shared: Arc<Shared>) -> Action {
    match failure {
        Failure::NotReady(_) => Action::requeue(shared.resync),
        Failure::Reconcile(err) => {
            let delay = shared.ctx.failed(&sample);
            tracing::warn!("{err}; retrying in {}s", delay.as_secs());
            Action::requeue(delay)
        }
    }
}
