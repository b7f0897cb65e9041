//! The watch-driven driver: kube-runtime's Controller over the parents (as DynamicObject, with the
//! discovered ApiResource so owner references match), fed by a watch of the parents and, for each child
//! type, two more: the children samplectl labels (cached, as controller-runtime caches them, so
//! reconciling a converged parent sends no request), and the metadata of every other object of that type
//! (not cached), so that deleting an object that blocks a parent brings that parent back at once.
//! Bounded concurrency, per-object exponential backoff on errors, and a periodic resync.
//!
//! The triggers are made here rather than with kube's `applied_objects` / `owns_stream`, because those
//! lose objects: kube's reflector buffers a relist and swaps it into the store only at its end, while
//! `applied_objects` triggers each relisted object at once; the Controller looks each trigger up in the
//! store, and an object created while the watch was down is not there yet, so its reconcile ends as
//! "object not found" and nothing triggers it again. After an API server restart that lost hundreds of a
//! thousand Samples. Here an object is triggered only once the store holds it: a watch event after the
//! store has applied it, and after a relist every object the new store holds (as kube's shared-store path
//! does). bench/UPSTREAM.md describes the fix to offer kube-runtime.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{StreamExt, stream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::{Api, DynamicObject, PartialObjectMeta};
use kube::discovery::ApiResource;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

use super::children::{ChildKey, Family, MANAGED_BY, MANAGED_BY_LABEL, Observed, controller_of, managed_selector};
use super::engine::{Context, Done, Outcome, ReconcileError, uid};
use super::health::Health;
use crate::cluster::scope;

pub struct Watch {
    pub ctx: Arc<Context>,
    pub namespace: Option<String>,
    pub concurrency: u16,
    pub resync: Duration,
}

type ParentRef = ObjectRef<DynamicObject>;
type Triggers = BoxStream<'static, ParentRef>;

/// For `--once`: the parents of the first full list, and how each one's first reconcile went.
#[derive(Default)]
struct Once {
    /// `None` until the parents have been listed.
    pending: Mutex<Option<HashSet<ParentRef>>>,
    not_ready: Mutex<Vec<String>>,
}

/// Which cached children each parent (by uid) controls, kept in step with the child stores: updated
/// on each watch event after its store has applied it, rebuilt from the store after each relist.
#[derive(Default)]
struct Owners {
    owner_of: HashMap<ChildKey, (String, ParentRef)>,
    children_of: HashMap<String, BTreeSet<ChildKey>>,
}

impl Owners {
    /// Records `key`'s controller (or none); returns the parent that controlled it before, if another.
    fn set(&mut self, key: &ChildKey, owner: Option<(String, ParentRef)>) -> Option<ParentRef> {
        let before = self.owner_of.remove(key);
        if let Some((uid, _)) = &before
            && let Some(keys) = self.children_of.get_mut(uid)
        {
            keys.remove(key);
            if keys.is_empty() {
                self.children_of.remove(uid);
            }
        }
        if let Some((uid, parent)) = owner {
            self.children_of.entry(uid.clone()).or_default().insert(key.clone());
            self.owner_of.insert(key.clone(), (uid.clone(), parent));
            if before.as_ref().is_some_and(|(old, _)| *old == uid) {
                return None;
            }
        }
        before.map(|(_, parent)| parent)
    }

    fn clear_kind(&mut self, kind: usize) {
        let keys: Vec<ChildKey> = self.owner_of.keys().filter(|k| k.kind == kind).cloned().collect();
        for key in keys {
            self.set(&key, None);
        }
    }
}

struct Shared {
    ctx: Arc<Context>,
    resync: Duration,
    stores: Vec<Store<DynamicObject>>,
    owners: Arc<Mutex<Owners>>,
}

impl Shared {
    fn children_of(&self, parent_uid: &str) -> Observed {
        let owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        let family = &self.ctx.family;
        owners
            .children_of
            .get(parent_uid)
            .into_iter()
            .flatten()
            .filter_map(|key| {
                let ar = &family.children[key.kind].ar;
                let mut reference = ObjectRef::new_with(&key.name, ar.clone());
                if !key.namespace.is_empty() {
                    reference = reference.within(&key.namespace);
                }
                self.stores[key.kind].get(&reference).map(|child| (key.clone(), (*child).clone()))
            })
            .collect()
    }
}

/// Says, once per outage, that a watch was cut and is being reopened, and when it is back; the errors
/// between (every failed reconnect) go to the debug log. It also tells /healthz and /readyz when the API
/// server did not answer.
struct Outage {
    what: String,
    down: bool,
    health: Arc<Health>,
}

impl Outage {
    fn new(what: String, health: &Arc<Health>) -> Self {
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

/// The parent that controls the object `meta` describes, if one of the parent's type does.
fn owner(meta: &ObjectMeta, family: &Family) -> Option<(String, ParentRef)> {
    let (name, uid) = controller_of(meta, &family.parent)?;
    let mut reference = ObjectRef::new_with(name, family.parent.ar.clone());
    if family.parent.namespaced {
        reference = reference.within(meta.namespace.as_deref().unwrap_or_default());
    }
    Some((uid.to_owned(), reference))
}

fn parent_ref(namespace: &str, name: &str, ar: &ApiResource) -> ParentRef {
    let reference = ObjectRef::new_with(name, ar.clone());
    if namespace.is_empty() { reference } else { reference.within(namespace) }
}

fn every_parent(store: &Store<DynamicObject>, ar: &ApiResource) -> Vec<ParentRef> {
    store.state().iter().map(|s| ObjectRef::from_obj_with(s.as_ref(), ar.clone())).collect()
}

impl Watch {
    fn child_namespace(&self, kind: usize) -> Option<&str> {
        let family = &self.ctx.family;
        self.namespace.as_deref().filter(|_| family.children[kind].namespaced && family.parent.namespaced)
    }

    fn child_api(&self, kind: usize) -> Api<DynamicObject> {
        scope::dynamic(self.ctx.client.clone(), &self.ctx.family.children[kind].ar, self.child_namespace(kind))
    }

    fn child_metadata_api(&self, kind: usize) -> Api<PartialObjectMeta<DynamicObject>> {
        let ar = &self.ctx.family.children[kind].ar;
        scope::dynamic_metadata(self.ctx.client.clone(), ar, self.child_namespace(kind))
    }

    /// The triggers from child type `kind`: its labelled objects, cached in `writer` and indexed by owner,
    /// and every other object of the type, by metadata only.
    fn child_triggers(
        &self,
        kind: usize,
        writer: Writer<DynamicObject>,
        parents: &Store<DynamicObject>,
        owners: &Arc<Mutex<Owners>>,
        listed: &watch::Sender<Vec<bool>>,
    ) -> (Triggers, Triggers) {
        let family = self.ctx.family.clone();
        let child = family.children[kind].clone();
        let store = writer.as_reader();

        // A change to a labelled child triggers its parent (and the one that controlled it before, if
        // the controller changed); an orphan, the parents it blocks. A relist triggers every parent,
        // because a child deleted while the watch was down leaves no event behind.
        let (ctx, parents_c, owners_c, listed_c) = (self.ctx.clone(), parents.clone(), owners.clone(), listed.clone());
        let mut outage = Outage::new(format!("{}s", child.ar.kind), &self.ctx.health);
        let fam = family.clone();
        let labelled = watcher(self.child_api(kind), watcher::Config::default().labels(&managed_selector()))
            .default_backoff()
            .modify(|child| child.meta_mut().managed_fields = None)
            .reflect(writer)
            .filter_map(move |event| {
                let triggers = match event {
                    Err(err) => {
                        outage.failed(&err);
                        Vec::new()
                    }
                    Ok(event @ (watcher::Event::Apply(_) | watcher::Event::Delete(_))) => {
                        let (object, deleted) = match event {
                            watcher::Event::Apply(o) => (o, false),
                            watcher::Event::Delete(o) => (o, true),
                            _ => unreachable!(),
                        };
                        let key = fam.key(kind, &object.metadata);
                        let owner = owner(&object.metadata, &fam);
                        let mut owners = owners_c.lock().unwrap_or_else(|e| e.into_inner());
                        let before = owners.set(&key, owner.clone().filter(|_| !deleted));
                        let mut triggers: Vec<ParentRef> = before.into_iter().collect();
                        match owner {
                            Some((_, parent)) => triggers.push(parent),
                            None => triggers.extend(
                                ctx.blocked_by(&key).iter().map(|(ns, name)| parent_ref(ns, name, &fam.parent.ar)),
                            ),
                        }
                        triggers
                    }
                    Ok(watcher::Event::InitDone) => {
                        outage.listed();
                        let mut owners = owners_c.lock().unwrap_or_else(|e| e.into_inner());
                        owners.clear_kind(kind);
                        for object in store.state() {
                            if let Some(owner) = owner(&object.metadata, &fam) {
                                owners.set(&fam.key(kind, &object.metadata), Some(owner));
                            }
                        }
                        listed_c.send_modify(|listed| listed[kind] = true);
                        every_parent(&parents_c, &fam.parent.ar)
                    }
                    Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => Vec::new(),
                };
                futures::future::ready(Some(stream::iter(triggers)))
            })
            .flatten()
            .boxed();

        // Every other object of the type, metadata only and not kept: one that appears or goes away where
        // a parent's child would be changes whether that parent is blocked.
        let (ctx, parents_o) = (self.ctx.clone(), parents.clone());
        let mut outage = Outage::new(format!("other {}s", child.ar.kind), &self.ctx.health);
        let unlabelled = format!("{MANAGED_BY_LABEL}!={MANAGED_BY}");
        let others = watcher(self.child_metadata_api(kind), watcher::Config::default().labels(&unlabelled))
            .default_backoff()
            .filter_map(move |event| {
                let triggers = match event {
                    Err(err) => {
                        outage.failed(&err);
                        Vec::new()
                    }
                    Ok(watcher::Event::Apply(meta) | watcher::Event::Delete(meta)) => {
                        let key = family.key(kind, &meta.metadata);
                        ctx.blocked_by(&key).iter().map(|(ns, name)| parent_ref(ns, name, &family.parent.ar)).collect()
                    }
                    Ok(watcher::Event::InitDone) => {
                        outage.listed();
                        every_parent(&parents_o, &family.parent.ar)
                    }
                    Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => Vec::new(),
                };
                futures::future::ready(Some(stream::iter(triggers)))
            })
            .flatten()
            .boxed();
        (labelled, others)
    }

    /// Runs until `stop` turns true; with `once`, until every parent of the first full list has been
    /// reconciled once, and then returns the ones that are not Ready.
    pub async fn run(&self, once: bool, stop: watch::Receiver<bool>) -> kube::Result<Option<Vec<String>>> {
        let family = self.ctx.family.clone();
        let ar = family.parent.ar.clone();
        let parents_api = scope::dynamic(self.ctx.client.clone(), &ar, self.namespace.as_deref());
        let parents_writer = Writer::new(ar.clone());
        let parents = parents_writer.as_reader();
        let owners = Arc::new(Mutex::new(Owners::default()));
        let tracker = once.then(|| Arc::new(Once::default()));
        let (done_tx, mut done_rx) = watch::channel(false);

        let (listed, mut listed_rx) = watch::channel(vec![false; family.children.len()]);
        let mut stores = Vec::new();
        let mut triggers: Vec<Triggers> = Vec::new();
        for kind in 0..family.children.len() {
            let writer = Writer::new(family.children[kind].ar.clone());
            stores.push(writer.as_reader());
            let (labelled, others) = self.child_triggers(kind, writer, &parents, &owners, &listed);
            triggers.push(labelled);
            triggers.push(others);
        }

        // The parents. Each is triggered once the store holds it; see the module's comment.
        let (ctx, store, ar_s) = (self.ctx.clone(), parents.clone(), ar.clone());
        let health = self.ctx.health.clone();
        let once_tracker = tracker.clone();
        let done = done_tx.clone();
        let mut outage = Outage::new(format!("{}s", family.parent.ar.kind), &self.ctx.health);
        let parent_triggers = watcher(parents_api, watcher::Config::default())
            .default_backoff()
            .modify(|parent| parent.meta_mut().managed_fields = None)
            .reflect(parents_writer)
            .filter_map(move |event| {
                let triggers = match event {
                    Err(err) => {
                        outage.failed(&err);
                        Vec::new()
                    }
                    Ok(watcher::Event::Apply(parent)) => vec![ObjectRef::from_obj_with(&parent, ar_s.clone())],
                    Ok(watcher::Event::Delete(parent)) => {
                        ctx.parent_gone(parent.metadata.uid.as_deref().unwrap_or_default());
                        Vec::new()
                    }
                    Ok(watcher::Event::InitDone) => {
                        outage.listed();
                        // /readyz: this replica has seen every parent.
                        health.synced.store(true, std::sync::atomic::Ordering::Relaxed);
                        let all = every_parent(&store, &ar_s);
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
        // Parents start flowing once every child cache has its first full list, or every early reconcile
        // would miss in it and write (or read) its children through the API server instead.
        let parent_triggers = stream::once(async move {
            let _ = listed_rx.wait_for(|listed| listed.iter().all(|l| *l)).await;
            parent_triggers
        })
        .flatten()
        .boxed();
        triggers.push(parent_triggers);
        let triggers = stream::select_all(triggers);

        let mut stop_on = stop.clone();
        let shutdown = async move {
            tokio::select! {
                _ = stop_on.wait_for(|s| *s) => {}
                _ = done_rx.wait_for(|d| *d) => {}
            }
        };
        let shared = Arc::new(Shared { ctx: self.ctx.clone(), resync: self.resync, stores, owners });
        // The Controller's own trigger stream is never used: every trigger comes through reconcile_on.
        let no_objects = stream::pending::<Result<DynamicObject, watcher::Error>>();
        Controller::for_stream_with(no_objects, parents, ar)
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
                        Err(controller::Error::ReconcilerFailed(Failure::NotReady(reason, _), object)) => {
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
                            let line = match object.namespace.as_deref() {
                                Some(ns) => format!("{ns}/{} ({reason})", object.name),
                                None => format!("{} ({reason})", object.name),
                            };
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

/// Not-Ready outcomes count as failures for `--once`, but are not errors: the parent's status says why,
/// and the next change to it or its children brings it back.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Reconcile(#[from] ReconcileError),
    #[error("not Ready ({0})")]
    NotReady(String, Option<Duration>),
}

fn next(resync: Duration, after: Option<Duration>) -> Action {
    Action::requeue(after.map_or(resync, |after| after.min(resync)))
}

async fn reconcile(parent: Arc<DynamicObject>, shared: Arc<Shared>) -> Result<Action, Failure> {
    let children = shared.children_of(&uid(&parent));
    let Done { outcome, resync_after, .. } = shared.ctx.reconcile(&parent, children).await?;
    match outcome {
        Outcome::NotReady(reason) | Outcome::Conflict(reason) => Err(Failure::NotReady(reason, resync_after)),
        Outcome::Finalizing => Ok(Action::requeue(resync_after.unwrap_or(super::engine::FINALIZE_RECHECK))),
        Outcome::Ready | Outcome::Deleting => Ok(next(shared.resync, resync_after)),
    }
}

fn error_policy(parent: Arc<DynamicObject>, failure: &Failure, shared: Arc<Shared>) -> Action {
    match failure {
        Failure::NotReady(_, after) => next(shared.resync, *after),
        Failure::Reconcile(err) => {
            let delay = shared.ctx.failed(&parent);
            tracing::warn!("{err}; retrying in {}s", delay.as_secs());
            Action::requeue(delay)
        }
    }
}
