//! The polling driver: the original list-every-second loop done right. Each tick lists the parents and
//! the children samplectl manages (by label, for every child type), and starts reconciles for the
//! parents whose inputs (the parent and its children, by resourceVersion) changed since their last good
//! reconcile, or whose resync is due, a few at a time. A tick does not wait for the reconciles it
//! started: one slow parent (or hook) holds one slot, not the next tick, and a parent whose reconcile is
//! still running is not started again. Failures back off per parent; a parent blocked by someone else's
//! object is looked at again with a backoff of its own, capped at
//! [`CONFLICT_RECHECK_MAX`](crate::controller::engine::backoff::CONFLICT_RECHECK_MAX), rather than costing a request every
//! tick. Both backoffs live in the context's one store.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject, ListParams};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::cluster::read::pages;
use crate::cluster::scope;
use crate::controller::drive::changes::parent_print;
use crate::controller::engine::request::{Failed, bounded};
use crate::controller::engine::{Context, Done, FINALIZE_RECHECK, Outcome, ReconcileError, key, uid};
use crate::controller::rules::children::{Observed, controller_of, managed_selector};

pub struct Poll {
    pub ctx: Arc<Context>,
    pub namespace: Option<String>,
    pub interval: Duration,
    pub concurrency: usize,
    /// How long a parent whose inputs did not change goes before it is synced again anyway.
    pub resync: Duration,
}

/// What a `--once` pass found: how many parents, and the ones not Ready with why.
#[derive(Debug, Default, Clone)]
pub struct Pass {
    pub parents: usize,
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

/// One reconcile, as it ended, with the fingerprint of the inputs it started from.
type Finished = (DynamicObject, u64, Result<Done, ReconcileError>);

/// The driver's state across ticks.
struct State {
    running: HashSet<String>,
    tasks: JoinSet<Finished>,
    slots: Arc<Semaphore>,
    /// For each parent (by uid) whose last reconcile went through: the fingerprint of its inputs then,
    /// and when it is due again regardless.
    synced: HashMap<String, (u64, Instant)>,
    /// For `--once`: the parents found not Ready.
    not_ready: Vec<String>,
}

/// A parent's inputs, by version: the parent, each child it controls, and each related object its
/// customize hook asked for.
fn fingerprint(parent: &DynamicObject, ignore_status: bool, children: &Observed, related: &[String]) -> u64 {
    let mut hasher = DefaultHasher::new();
    parent_print(&parent.metadata, ignore_status).hash(&mut hasher);
    for (key, child) in children {
        key.hash(&mut hasher);
        child.metadata.resource_version.hash(&mut hasher);
    }
    related.hash(&mut hasher);
    hasher.finish()
}

/// The metadata of every object of each related type in use, by type key (`Kind.apiVersion`).
async fn list_related(ctx: &Context) -> Result<HashMap<String, Vec<ObjectMeta>>, Failed> {
    let types = ctx.related.types().borrow().clone();
    let mut listed = HashMap::new();
    for resolved in types {
        let api = scope::dynamic_metadata(ctx.client.clone(), &resolved.ar, None);
        let metas = pages(ListParams::default().limit(PAGE), |lp| {
            let api = api.clone();
            async move { bounded(api.list_metadata(&lp)).await }
        })
        .try_fold(Vec::new(), |mut items, page| async move {
            items.extend(page.items.into_iter().map(|item| item.metadata));
            Ok(items)
        })
        .await?;
        listed.insert(format!("{}.{}", resolved.ar.kind, resolved.ar.api_version), metas);
    }
    Ok(listed)
}

impl Poll {
    fn parents_api(&self) -> Api<DynamicObject> {
        scope::dynamic(self.ctx.client.clone(), &self.ctx.family.parent.ar, self.namespace.as_deref())
    }

    fn children_api(&self, kind: usize) -> Api<DynamicObject> {
        let child = &self.ctx.family.children[kind];
        let namespace = self.namespace.as_deref().filter(|_| child.namespaced && self.ctx.family.parent.namespaced);
        scope::dynamic(self.ctx.client.clone(), &child.ar, namespace)
    }

    /// Lists, and starts a reconcile for each parent whose inputs changed (or whose resync is due) and
    /// that is neither running nor waiting. Returns how many parents there are.
    async fn tick(&self, state: &mut State, once: bool) -> anyhow::Result<usize> {
        let parents = list_all(&self.parents_api(), ListParams::default()).await?;
        let family = &self.ctx.family;
        let mut children: HashMap<String, Observed> = HashMap::new();
        for kind in 0..family.children.len() {
            let listed = list_all(&self.children_api(kind), ListParams::default().labels(&managed_selector())).await?;
            for child in listed {
                if let Some((_, owner)) = controller_of(&child.metadata, &family.parent) {
                    children.entry(owner.to_owned()).or_default().insert(family.key(kind, &child.metadata), child);
                }
            }
        }

        let related = list_related(&self.ctx).await?;

        let now = Instant::now();
        let count = parents.len();
        let present: HashSet<String> = parents.iter().map(uid).collect();
        self.ctx.backoff.retain(&present);
        state.synced.retain(|uid, _| present.contains(uid));
        let mut started = 0;
        for parent in parents {
            let uid = uid(&parent);
            let observed = children.remove(&uid).unwrap_or_default();
            if state.running.contains(&uid) {
                continue;
            }
            let print = fingerprint(
                &parent,
                self.ctx.ignore_status_changes,
                &observed,
                &self.ctx.related.versions_for(&uid, &related),
            );
            if let Some((last, due)) = state.synced.get(&uid)
                && *last == print
                && now < *due
            {
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
                let result = ctx.reconcile(&parent, observed).await;
                (parent, print, result)
            });
        }
        self.ctx.metrics.backlog.set(started);
        Ok(count)
    }

    fn finished(&self, state: &mut State, (parent, print, result): Finished, once: bool) {
        let uid = uid(&parent);
        state.running.remove(&uid);
        // Only a reconcile that wrote nothing says that these inputs are what the parent wants: after a
        // write, the same inputs can come back (a child created, then deleted by someone else) and must
        // be looked at again.
        let synced = |state: &mut State, resync_after: Option<Duration>, wrote: bool| {
            if wrote {
                state.synced.remove(&uid);
            } else {
                let due = Instant::now() + resync_after.map_or(self.resync, |after| after.min(self.resync));
                state.synced.insert(uid.clone(), (print, due));
            }
        };
        let not_ready = match result {
            Ok(Done { outcome: Outcome::Ready | Outcome::Deleting | Outcome::Ignored, resync_after, wrote }) => {
                self.ctx.backoff.clear(&uid);
                synced(state, resync_after, wrote);
                None
            }
            Ok(Done { outcome: Outcome::NotReady(reason), resync_after, wrote }) => {
                self.ctx.backoff.clear(&uid);
                synced(state, resync_after, wrote);
                Some(reason)
            }
            Ok(Done { outcome: Outcome::Finalizing, resync_after, .. }) => {
                self.ctx.backoff.clear(&uid);
                let due = Instant::now() + resync_after.unwrap_or(FINALIZE_RECHECK);
                state.synced.insert(uid.clone(), (0, due));
                None
            }
            Ok(Done { outcome: Outcome::Conflict(reason), .. }) => {
                self.ctx.backoff.conflicted(&uid);
                state.synced.remove(&uid);
                Some(reason)
            }
            Err(err) => {
                let delay = self.ctx.failed(&parent);
                tracing::warn!("{err}; retrying in {}s", delay.as_secs());
                state.synced.remove(&uid);
                Some(format!("{}: {}", err.action, err.message))
            }
        };
        if let (true, Some(reason)) = (once, not_ready) {
            state.not_ready.push(format!("{} ({reason})", key(&parent)));
        }
    }

    /// Ticks every `interval` until `stop` turns true, then lets the reconciles already running finish.
    /// With `once`, one tick, and the result once its reconciles are done.
    pub async fn run(&self, once: bool, mut stop: watch::Receiver<bool>) -> anyhow::Result<Option<Pass>> {
        let mut state = State {
            running: HashSet::new(),
            tasks: JoinSet::new(),
            slots: Arc::new(Semaphore::new(self.concurrency.max(1))),
            synced: HashMap::new(),
            not_ready: Vec::new(),
        };
        loop {
            let started = Instant::now();
            let tick = self.tick(&mut state, once).await;
            if tick.is_ok() {
                self.ctx.listed();
            }
            if let Err(err) = &tick
                && err.downcast_ref::<Failed>().is_none_or(Failed::out_of_reach)
            {
                self.ctx.health.unreachable();
            }
            match tick {
                Ok(parents) if once => {
                    while let Some(done) = state.tasks.join_next().await {
                        self.finished(&mut state, done?, true);
                    }
                    return Ok(Some(Pass { parents, not_ready: std::mem::take(&mut state.not_ready) }));
                }
                Ok(parents) => tracing::debug!(parents, running = state.running.len(), "tick done"),
                Err(err) if once => return Err(err),
                Err(err) => tracing::warn!(
                    "cannot list {} and their children: {}",
                    self.ctx.family.parent.qualified_plural(),
                    crate::error::describe_any(&err)
                ),
            }
            let next = tokio::time::sleep_until(started + self.interval);
            tokio::pin!(next);
            loop {
                tokio::select! {
                    () = &mut next => break,
                    Some(done) = state.tasks.join_next() => self.finished(&mut state, done?, false),
                    // The guard wait_for returns must not live across the awaits below (the driver runs
                    // on a spawned task for --from-cluster).
                    () = async { drop(stop.wait_for(|stopped| *stopped).await) } => {
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
