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

pub mod hub;
mod once;
mod owners;
mod triggers;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{BoxStream, SelectAll};
use futures::{Stream, StreamExt, stream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DynamicObject;
use kube::discovery::ApiResource;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use tokio::sync::watch;

use crate::cluster::resolve::Resolved;
use crate::controller::drive::changes::parent_print;
use crate::controller::engine::{Context, Done, FINALIZE_RECHECK, Outcome, ReconcileError, uid};
use crate::controller::rules::children::{
    Family, MANAGED_BY, MANAGED_BY_LABEL, Observed, controller_of, managed_selector,
};
use hub::Hub;
use once::Once;
use owners::Owners;
use triggers::{Seen, triggers};

/// The watch driver's settings.
pub struct Watch {
    pub ctx: Arc<Context>,
    /// The process's shared watches of parents and labelled children.
    pub hub: Arc<Hub>,
    pub namespace: Option<String>,
    pub concurrency: u16,
    pub resync: Duration,
}

type ParentRef = ObjectRef<DynamicObject>;
type Triggers = BoxStream<'static, ParentRef>;
type WatchEvent = watcher::Event<DynamicObject>;

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

    /// The parents blocked by the object of child type `kind` that `meta` describes.
    fn blocked(ctx: &Context, family: &Family, kind: usize, meta: &ObjectMeta) -> Vec<ParentRef> {
        let key = family.key(kind, meta);
        ctx.conflicts.blocked_by(&key).iter().map(|(ns, name)| parent_ref(ns, name, &family.parent.ar)).collect()
    }

    /// The triggers from child type `kind`'s labelled objects, cached in `writer` and indexed by owner. A
    /// change to one triggers its parent (and the one that controlled it before, if the controller
    /// changed); an orphan, the parents it blocks. A relist triggers every parent, because a child
    /// deleted while the watch was down leaves no event behind.
    fn labelled_children(
        &self,
        kind: usize,
        (store, events): (Store<DynamicObject>, impl Stream<Item = WatchEvent> + Send + 'static),
        parents: &Store<DynamicObject>,
        owners: &Arc<Mutex<Owners>>,
        listed: &watch::Sender<Vec<bool>>,
    ) -> Triggers {
        let (ctx, family, parents, owners, listed) =
            (self.ctx.clone(), self.ctx.family.clone(), parents.clone(), owners.clone(), listed.clone());
        triggers(events, move |seen| {
            let (object, deleted) = match seen {
                Seen::Applied(object) => (object, false),
                Seen::Deleted(object) => (object, true),
                Seen::Listing(_) => return Vec::new(),
                Seen::Listed => {
                    let mut owners = owners.lock().unwrap_or_else(|e| e.into_inner());
                    owners.clear_kind(kind);
                    for object in store.state() {
                        if let Some(owner) = owner(&object.metadata, &family) {
                            owners.set(&family.key(kind, &object.metadata), Some(owner));
                        }
                    }
                    listed.send_modify(|listed| listed[kind] = true);
                    return every_parent(&parents, &family.parent.ar);
                }
            };
            let owner = owner(&object.metadata, &family);
            let key = family.key(kind, &object.metadata);
            let before = owners.lock().unwrap_or_else(|e| e.into_inner()).set(&key, owner.clone().filter(|_| !deleted));
            let mut triggers: Vec<ParentRef> = before.into_iter().collect();
            match owner {
                Some((_, parent)) => triggers.push(parent),
                None => triggers.extend(Self::blocked(&ctx, &family, kind, &object.metadata)),
            }
            triggers
        })
    }

    /// The triggers from every other object of child type `kind`, by metadata only and not kept: one
    /// that appears or goes away where a parent's child would be changes whether that parent is blocked.
    fn other_objects(&self, kind: usize, parents: &Store<DynamicObject>) -> Triggers {
        let (ctx, family, parents) = (self.ctx.clone(), self.ctx.family.clone(), parents.clone());
        let unlabelled = format!("{MANAGED_BY_LABEL}!={MANAGED_BY}");
        let events = self.hub.metadata(&family.children[kind].ar, self.child_namespace(kind), &unlabelled);
        triggers(events, move |seen| match seen {
            Seen::Applied(meta) | Seen::Deleted(meta) => Self::blocked(&ctx, &family, kind, &meta.metadata),
            Seen::Listing(_) => Vec::new(),
            Seen::Listed => every_parent(&parents, &family.parent.ar),
        })
    }

    /// The triggers from the objects customize hooks asked for: a metadata watch of each related type,
    /// started when a parent first asks for it. A change triggers every parent whose rules select the
    /// object as it is now or as it was before (its labels may have taken it out); a relist, every parent
    /// with a rule on the type, since an object deleted while the watch was down leaves no event.
    fn related(&self) -> Triggers {
        let (ctx, hub) = (self.ctx.clone(), self.hub.clone());
        let types = self.ctx.related.types();
        let state = (types, SelectAll::<Triggers>::new(), Vec::<Resolved>::new());
        stream::unfold(state, move |(mut types, mut watches, mut watching)| {
            let (ctx, hub) = (ctx.clone(), hub.clone());
            async move {
                loop {
                    let wanted = types.borrow_and_update().clone();
                    for resolved in wanted {
                        let known = watching
                            .iter()
                            .any(|w| w.ar.api_version == resolved.ar.api_version && w.ar.kind == resolved.ar.kind);
                        if !known {
                            watches.push(related_watch(&ctx, &hub, &resolved));
                            watching.push(resolved);
                        }
                    }
                    tokio::select! {
                        changed = types.changed() => if changed.is_err() { return None },
                        Some(trigger) = watches.next(), if !watches.is_empty() => {
                            return Some((trigger, (types, watches, watching)));
                        }
                    }
                }
            }
        })
        .boxed()
    }

    /// The parents themselves, each triggered once the store holds it (see the module's comment); they
    /// start flowing once every child cache has its first full list, or every early reconcile would miss
    /// in it and write (or read) its children through the API server instead.
    fn parents(
        &self,
        (store, events): (Store<DynamicObject>, impl Stream<Item = WatchEvent> + Send + 'static),
        once: Option<Arc<Once>>,
        mut listed: watch::Receiver<Vec<bool>>,
    ) -> Triggers {
        let (ctx, ar) = (self.ctx.clone(), self.ctx.family.parent.ar.clone());
        // With ignoreStatusChanges, what each parent last was, to tell a status write from a change.
        let ignore_status = ctx.ignore_status_changes;
        let mut prints: HashMap<String, u64> = HashMap::new();
        let parents = triggers(events, move |seen| match seen {
            Seen::Applied(parent) => {
                let unchanged = ignore_status && {
                    let print = parent_print(&parent.metadata, true);
                    prints.insert(uid(&parent), print) == Some(print)
                };
                match unchanged {
                    true => Vec::new(),
                    false => vec![ObjectRef::from_obj_with(&parent, ar.clone())],
                }
            }
            Seen::Listing(parent) => {
                if ignore_status {
                    prints.insert(uid(&parent), parent_print(&parent.metadata, true));
                }
                Vec::new()
            }
            Seen::Deleted(parent) => {
                prints.remove(&uid(&parent));
                ctx.parent_gone(parent.metadata.uid.as_deref().unwrap_or_default());
                Vec::new()
            }
            Seen::Listed => {
                // /readyz: this replica has seen every parent.
                ctx.listed();
                let all = every_parent(&store, &ar);
                if let Some(once) = &once {
                    once.listed(&all);
                }
                all
            }
        });
        stream::once(async move {
            let _ = listed.wait_for(|listed| listed.iter().all(|l| *l)).await;
            parents
        })
        .flatten()
        .boxed()
    }

    /// Runs until `stop` turns true; with `once`, until every parent of the first full list has been
    /// reconciled once, and then returns the ones that are not Ready.
    pub async fn run(&self, once: bool, stop: watch::Receiver<bool>) -> kube::Result<Option<Vec<String>>> {
        let family = self.ctx.family.clone();
        let ar = family.parent.ar.clone();
        let parents_feed = self.hub.objects(&ar, self.namespace.as_deref(), "");
        let parents = parents_feed.0.clone();
        let owners = Arc::new(Mutex::new(Owners::default()));
        let tracker = once.then(|| Arc::new(Once::new()));

        let (listed, listed_rx) = watch::channel(vec![false; family.children.len()]);
        let mut stores = Vec::new();
        let mut triggers: Vec<Triggers> = Vec::new();
        for kind in 0..family.children.len() {
            let feed = self.hub.objects(&family.children[kind].ar, self.child_namespace(kind), &managed_selector());
            stores.push(feed.0.clone());
            triggers.push(self.labelled_children(kind, feed, &parents, &owners, &listed));
            triggers.push(self.other_objects(kind, &parents));
        }
        triggers.push(self.related());
        let all_listed = listed_rx.clone();
        triggers.push(self.parents(parents_feed, tracker.clone(), listed_rx));
        // Nothing is reconciled before every child cache holds its first full list: the shared parent
        // cache fills on its own, so a conflict watch's or one child type's first list could otherwise
        // trigger parents whose children are not cached yet (and they would be created again). What is
        // dropped here is not lost: once all are listed, the parents' stream triggers every parent.
        let triggers = stream::select_all(triggers)
            .filter(move |_| futures::future::ready(all_listed.borrow().iter().all(|listed| *listed)));

        let mut stop_on = stop.clone();
        let mut done = tracker.as_ref().map(|t| t.done());
        let shutdown = async move {
            let finished = async {
                match done.as_mut() {
                    Some(done) => drop(done.wait_for(|d| *d).await),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = stop_on.wait_for(|s| *s) => {}
                () = finished => {}
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
                        return futures::future::ready(());
                    }
                };
                if let Some(tracker) = &tracker {
                    tracker.finished(&object, not_ready);
                }
                futures::future::ready(())
            })
            .await;
        Ok(tracker.map(|t| t.not_ready()))
    }
}

/// The triggers from one related type's metadata watch, across the cluster.
fn related_watch(ctx: &Arc<Context>, hub: &Arc<Hub>, resolved: &Resolved) -> Triggers {
    let events = hub.metadata(&resolved.ar, None, "");
    let (ctx, resolved) = (ctx.clone(), resolved.clone());
    let parent_ar = ctx.family.parent.ar.clone();
    // What each object looked like last (its place and labels), to trigger the parents that selected it
    // before a change; rebuilt by each relist.
    let mut before: HashMap<String, ObjectMeta> = HashMap::new();
    let mut relisted: HashMap<String, ObjectMeta> = HashMap::new();
    let kept = |meta: &ObjectMeta| ObjectMeta {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        labels: meta.labels.clone(),
        ..ObjectMeta::default()
    };
    triggers(events, move |seen| {
        let (meta, deleted) = match seen {
            Seen::Applied(meta) => (Some(meta.metadata), false),
            Seen::Deleted(meta) => (Some(meta.metadata), true),
            Seen::Listing(meta) => {
                relisted.insert(meta.metadata.uid.clone().unwrap_or_default(), kept(&meta.metadata));
                return Vec::new();
            }
            Seen::Listed => {
                before = std::mem::take(&mut relisted);
                (None, false)
            }
        };
        let parents = match meta {
            Some(meta) => {
                let id = meta.uid.clone().unwrap_or_default();
                let mut parents = ctx.related.parents_of(&resolved, Some(&meta));
                if let Some(old) = before.remove(&id) {
                    parents.extend(ctx.related.parents_of(&resolved, Some(&old)));
                }
                if !deleted {
                    before.insert(id, kept(&meta));
                }
                parents
            }
            None => ctx.related.parents_of(&resolved, None),
        };
        let mut parents: Vec<ParentRef> = parents.iter().map(|(ns, name)| parent_ref(ns, name, &parent_ar)).collect();
        parents.dedup();
        parents
    })
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
        Outcome::Finalizing => Ok(Action::requeue(resync_after.unwrap_or(FINALIZE_RECHECK))),
        Outcome::Ready | Outcome::Deleting => Ok(next(shared.resync, resync_after)),
        // Not this controller's until it changes.
        Outcome::Ignored => Ok(Action::await_change()),
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
