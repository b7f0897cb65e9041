//! The polling driver: the original list-every-second loop done right. Each tick lists the metadata
//! of the parents and starts reconciles for the parents whose inputs (the parent and its children, by
//! resourceVersion) changed since their last good reconcile, or whose resync is due, a few at a time. The
//! children samplectl labels are followed by the process's shared watch of them (the hub's, cached as
//! the watch driver caches them) rather than listed every tick: at rest a watch costs nothing, so an idle
//! tick costs one metadata list, no more bytes than the original loop's list of whole objects. Whole
//! parents are read only for the reconciles: each kept between ticks (as compact JSON, with its version)
//! and read again with one GET only when its version changed. A tick does not wait for the reconciles it
//! started: one slow parent (or hook) holds one slot, not the next tick, and a parent whose reconcile is
//! still running is not started again. Failures back off per parent; a parent blocked by someone else's
//! object is looked at again with a backoff of its own, capped at
//! [`CONFLICT_RECHECK_MAX`](crate::controller::engine::backoff::CONFLICT_RECHECK_MAX), rather than costing a request every
//! tick. Both backoffs live in the context's one store. `--once` lists the children instead (a pass
//! needs no watch), and again for each further pass over the parents that wrote and are not Ready yet.
//!
//! Memory stays bounded by the parents kept, not by a tick: lists are taken a page at a time (whole
//! objects go into the cache as their page comes, metadata is looked at and dropped), and the parents
//! to reconcile wait in a queue of small entries (uid, place, version) that `--concurrency` workers take
//! from, rather than each as a task holding its metadata. The workers go on while a tick lists. A parent no longer listed (deleted, or moved to another shard member)
//! is forgotten by every store.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::watcher;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::cluster::read::pages;
use crate::cluster::scope;
use crate::controller::drive::cache::Cache;
use crate::controller::drive::changes::parent_print;
use crate::controller::drive::owners::{Child, Owners, observed, take_in};
use crate::controller::drive::place::{Place, place};
use crate::controller::drive::watch::hub::Hub;
use crate::controller::drive::{Concluded, PASSES, conclude};
use crate::controller::engine::request::{Failed, bounded};
use crate::controller::engine::{Context, LOOK_AHEAD, ReconcileError};
use crate::controller::rules::next::{Done, Outcome};

pub struct Poll {
    pub ctx: Arc<Context>,
    /// The process's shared watches, which follow the children.
    pub hub: Arc<Hub>,
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

/// Metadata is small (a few hundred bytes an object): its lists come in larger pages, so that an idle
/// tick over a few thousand parents is one request, as the original loop's was.
const METADATA_PAGE: u32 = 5000;

/// Every object `api` lists, page by page, each page bounded by the request timeout.
async fn list_all(api: &Api<DynamicObject>, lp: ListParams) -> Result<Vec<DynamicObject>, Failed> {
    pages(lp.limit(PAGE), |lp| async move { bounded(api.list(&lp)).await })
        .try_fold(Vec::new(), |mut items, page| async move {
            items.extend(page.items);
            Ok(items)
        })
        .await
}

/// More parents changed since they were read than this: they are listed whole again rather than read
/// one GET at a time.
const GET_AT_MOST: usize = 20;

/// The metadata of every object `api` lists, page by page, each page bounded by the request timeout.
async fn list_metadata(api: &Api<DynamicObject>, lp: ListParams) -> Result<Vec<ObjectMeta>, Failed> {
    pages(lp.limit(METADATA_PAGE), |lp| async move { bounded(api.list_metadata(&lp)).await })
        .try_fold(Vec::new(), |mut items, page| async move {
            items.extend(page.items.into_iter().map(|item| item.metadata));
            Ok(items)
        })
        .await
}

/// One reconcile, as it ended: the parent's uid and place, and the fingerprint of the inputs it started
/// from.
type Finished = (String, Place, u64, Result<Done, ReconcileError>);

/// A parent waiting for a worker: all a reconcile needs to find it (whole, in the cache or with a GET),
/// and the fingerprint of the inputs it was queued for.
struct Waiting {
    uid: String,
    place: Place,
    version: Option<String>,
    print: u64,
}

/// Keeps `object` (without its managed fields, which no reconcile reads) in `cache`.
fn keep(cache: &Cache<DynamicObject>, object: &mut DynamicObject) {
    object.metadata.managed_fields = None;
    cache.apply(object);
}

/// The children samplectl labels, by type: each type's cache and which parent controls each child.
/// Filled by the hub's watches (or, for `--once`, by one list of each type).
struct Children {
    caches: Vec<Cache<DynamicObject>>,
    owners: Arc<Mutex<Owners>>,
    /// Whether each type's cache holds its first full list.
    listed: watch::Receiver<Vec<bool>>,
    /// The tasks that take each watch's events into `owners`; dropped with the driver, and with them
    /// the readers of the hub's feeds.
    _followers: JoinSet<()>,
}

/// Takes the events of child type `kind`'s watch into `owners`, after its cache has taken them in.
async fn follow(
    ctx: Arc<Context>,
    kind: usize,
    events: impl Stream<Item = watcher::Event<DynamicObject>>,
    owners: Arc<Mutex<Owners>>,
    listed: watch::Sender<Vec<bool>>,
) {
    futures::pin_mut!(events);
    while let Some(event) = events.next().await {
        let (object, deleted) = match event {
            watcher::Event::Apply(object) | watcher::Event::InitApply(object) => (object, false),
            watcher::Event::Delete(object) => (object, true),
            watcher::Event::InitDone => {
                listed.send_modify(|listed| listed[kind] = true);
                continue;
            }
            watcher::Event::Init => continue,
        };
        take_in(&owners, &ctx.definition.family, kind, &object.metadata, deleted);
    }
}

/// The parent at `at` (of the parents' type), whole: as kept when it was read at `version`, else read
/// now (`None` when it is gone).
async fn read(
    ctx: &Context,
    parents: &Cache<DynamicObject>,
    at: &Place,
    version: Option<&str>,
) -> Result<Option<DynamicObject>, Failed> {
    if parents.has_version(at, version)
        && let Some(object) = parents.get(at)
    {
        return Ok(Some(object));
    }
    let namespace = Some(&*at.namespace).filter(|ns| !ns.is_empty());
    let api = scope::dynamic(ctx.client().clone(), &ctx.definition.family.parent.ar, namespace);
    let Some(mut object) = bounded(api.get_opt(&at.name)).await? else { return Ok(None) };
    keep(parents, &mut object);
    Ok(Some(object))
}

/// The driver's state across ticks.
struct State {
    /// The parents being reconciled or waiting for a worker.
    running: HashSet<String>,
    workers: Workers,
    /// For each parent (by uid) whose last reconcile went through: the fingerprint of its inputs then,
    /// and when it is due again regardless.
    synced: HashMap<String, (u64, Instant)>,
    /// Whole parents read for reconciles, kept between ticks.
    parents: Cache<DynamicObject>,
    children: Arc<Children>,
    /// For `--once`: the parents found not Ready.
    not_ready: Vec<String>,
    /// For `--once` after its first pass: the only parents (by uid) to look at again.
    only: Option<HashSet<String>>,
    /// The uids the last tick listed: one no longer listed (deleted, or moved to another shard member) is
    /// forgotten by every store of the context.
    known: HashSet<String>,
}

impl State {
    fn new(workers: Workers, parents: Cache<DynamicObject>, children: Arc<Children>) -> Self {
        State {
            running: HashSet::new(),
            workers,
            synced: HashMap::new(),
            parents,
            children,
            not_ready: Vec::new(),
            known: HashSet::new(),
            only: None,
        }
    }
}

/// A parent's inputs, by version: the parent, each child it controls (by type, place and version), and
/// each related object its customize hook asked for.
fn fingerprint(parent: &ObjectMeta, ignore_status: bool, children: &[(Child, u64)], related: &[String]) -> u64 {
    let mut hasher = DefaultHasher::new();
    parent_print(parent, ignore_status).hash(&mut hasher);
    children.hash(&mut hasher);
    related.hash(&mut hasher);
    hasher.finish()
}

/// The metadata of every object of each related type in use, by type key (`Kind.apiVersion`).
async fn list_related(ctx: &Context) -> Result<HashMap<String, Vec<ObjectMeta>>, Failed> {
    let types = ctx.memory().related().types().borrow().clone();
    let mut listed = HashMap::new();
    for resolved in types {
        let metas =
            list_metadata(&scope::dynamic(ctx.client().clone(), &resolved.ar, None), ListParams::default()).await?;
        listed.insert(format!("{}.{}", resolved.ar.kind, resolved.ar.api_version), metas);
    }
    Ok(listed)
}

/// Reads the parent whole (as kept, or with a GET when it changed) and its children from their caches,
/// and reconciles it.
async fn reconcile(
    ctx: &Context,
    parents: &Cache<DynamicObject>,
    children: &Children,
    (at, version): (&Place, Option<&str>),
    slots: &Semaphore,
) -> Result<Done, ReconcileError> {
    let reading = |failed: Failed| ReconcileError {
        object: at.to_string(),
        action: "reading it".into(),
        message: failed.message(),
    };
    // Deleted since the list: nothing to do.
    let gone = Done { outcome: Outcome::Ignored, resync_after: None, wrote: false };
    let Some(whole_parent) = read(ctx, parents, at, version).await.map_err(reading)? else { return Ok(gone) };
    // A parent taken in waits for the look for its children without a slot (`Context::look`).
    let looked = ctx.look(&whole_parent).await?;
    let Ok(_slot) = slots.acquire().await else { return Ok(gone) };
    ctx.reconcile(&whole_parent, observed(&children.owners, &children.caches, at), looked).await
}

impl Poll {
    fn parents_api(&self) -> Api<DynamicObject> {
        scope::dynamic(self.ctx.client().clone(), &self.ctx.definition.family.parent.ar, self.namespace.as_deref())
    }

    fn child_namespace(&self, kind: usize) -> Option<&str> {
        let family = &self.ctx.definition.family;
        self.namespace.as_deref().filter(|_| family.children[kind].namespaced && family.parent.namespaced)
    }

    /// The children, followed by the hub's watches; for `once`, listed once.
    async fn children(&self, once: bool) -> Result<Children, Failed> {
        let kinds = self.ctx.definition.family.children.len();
        let owners = Arc::new(Mutex::new(Owners::default()));
        let (listed, listed_rx) = watch::channel(vec![once; kinds]);
        let mut followers = JoinSet::new();
        let mut caches = Vec::new();
        for kind in 0..kinds {
            let ar = &self.ctx.definition.family.children[kind].ar;
            if once {
                let cache = Cache::default();
                let api = scope::dynamic(self.ctx.client().clone(), ar, self.child_namespace(kind));
                for mut child in list_all(&api, ListParams::default().labels(&self.ctx.child_labels())).await? {
                    keep(&cache, &mut child);
                    take_in(&owners, &self.ctx.definition.family, kind, &child.metadata, false);
                }
                caches.push(cache);
            } else {
                let (cache, events) = self.hub.objects(ar, self.child_namespace(kind), &self.ctx.child_labels());
                followers.spawn(follow(self.ctx.clone(), kind, events, owners.clone(), listed.clone()));
                caches.push(cache);
            }
        }
        Ok(Children { caches, owners, listed: listed_rx, _followers: followers })
    }

    /// A shard member's stray list, every resync: the parents it names are due at once (the tick that
    /// follows queues them), and their reconcile looks for their children.
    async fn strays(&self, state: &mut State) {
        if self.ctx.member().is_none() {
            return;
        }
        let kinds = self.ctx.definition.family.children.len();
        let namespaces: Vec<Option<String>> = (0..kinds).map(|k| self.child_namespace(k).map(str::to_owned)).collect();
        match self.ctx.strays(&namespaces).await {
            Ok(uids) => state.synced.retain(|uid, _| !uids.contains(uid)),
            Err(message) => tracing::warn!(controller = self.ctx.definition.name, "{message}"),
        }
    }

    /// Lists the parents' metadata a page at a time and queues each parent whose inputs changed (or
    /// whose resync is due) and that is neither running nor waiting. When none is kept yet or many
    /// changed since they were read, they are then listed whole, a page at a time, into the cache, so
    /// that their reconciles need no GET each. Returns how many parents there are.
    async fn tick(&self, state: &mut State, once: bool) -> anyhow::Result<usize> {
        let related = list_related(&self.ctx).await?;
        let api = self.parents_api();
        let lp = ListParams::default().labels(&self.ctx.parent_labels());
        let now = Instant::now();
        let mut present: HashSet<String> = HashSet::new();
        let mut listed: HashSet<Place> = HashSet::new();
        let mut unread = 0;
        // Queued once the parents are kept whole (below), so that no worker GETs one the list brings.
        let mut due = Vec::new();
        let mut metadata = std::pin::pin!(pages(lp.clone().limit(METADATA_PAGE), |lp| {
            let api = &api;
            async move { bounded(api.list_metadata(&lp)).await }
        }));
        while let Some(page) = metadata.try_next().await? {
            for item in page.items {
                let mut parent = item.metadata;
                parent.managed_fields = None;
                let (uid, at) = (parent.uid.clone().unwrap_or_default(), place(&parent));
                unread += usize::from(!state.parents.has_version(&at, parent.resource_version.as_deref()));
                present.insert(uid.clone());
                listed.insert(at.clone());
                due.extend(self.due(state, &parent, uid, at, &related, (now, once)));
            }
        }
        state.parents.retain(|at| listed.contains(at));
        if unread > GET_AT_MOST {
            let mut objects = std::pin::pin!(pages(lp.limit(PAGE), |lp| {
                let api = &api;
                async move { bounded(api.list(&lp)).await }
            }));
            while let Some(page) = objects.try_next().await? {
                for mut object in page.items {
                    keep(&state.parents, &mut object);
                }
            }
        }
        self.ctx.memory().retain(&present);
        state.synced.retain(|uid, _| present.contains(uid));
        let departed: Vec<String> = state.known.difference(&present).cloned().collect();
        state.known = present;
        for uid in departed {
            // One still being reconciled is forgotten at a later tick, once it has finished.
            if state.running.contains(&uid) {
                state.known.insert(uid);
            } else {
                self.ctx.memory().forget(&uid);
            }
        }
        self.ctx.metrics().backlog.set(due.len() as i64);
        due.into_iter().for_each(|waiting| state.workers.queue(waiting));
        Ok(listed.len())
    }

    /// The parent `parent` (at `at`, with `uid`) as a reconcile to queue, if it is due: its inputs
    /// changed since its last good reconcile, or its resync is due, and it is neither running nor
    /// waiting, nor in its failure backoff (unless it is being drained to another shard member, which it
    /// lets go of at once).
    fn due(
        &self,
        state: &mut State,
        parent: &ObjectMeta,
        uid: String,
        at: Place,
        related: &HashMap<String, Vec<ObjectMeta>>,
        (now, once): (Instant, bool),
    ) -> Option<Waiting> {
        self.ctx.memory().seen(&uid, parent.resource_version.as_deref());
        if state.running.contains(&uid) || state.only.as_ref().is_some_and(|only| !only.contains(&uid)) {
            return None;
        }
        let children = &state.children;
        let inputs: Vec<(Child, u64)> = {
            let owners = children.owners.lock().unwrap_or_else(|e| e.into_inner());
            let mine = owners.children_of(&at);
            mine.iter()
                .filter_map(|child| Some((child.clone(), children.caches[child.kind].version(&child.place)?)))
                .collect()
        };
        let print = fingerprint(
            parent,
            self.ctx.definition.ignore_status_changes,
            &inputs,
            &self.ctx.memory().related().versions_for(&uid, related),
        );
        if let Some((last, due)) = state.synced.get(&uid)
            && *last == print
            && now < *due
        {
            return None;
        }
        let drained = self.ctx.member().is_some_and(|member| member.drained_to(parent).is_some());
        if !once && !drained && self.ctx.memory().waiting(&uid, now) {
            return None;
        }
        state.running.insert(uid.clone());
        Some(Waiting { uid, place: at, version: parent.resource_version.clone(), print })
    }

    fn finished(&self, state: &mut State, (uid, place, print, result): Finished, once: bool) {
        state.running.remove(&uid);
        let Concluded { again, settled, not_ready } = conclude(&self.ctx, &uid, &result);
        // A stray list that came back while it ran: due at the next tick, so that its look is made.
        match settled && !self.ctx.memory().stray_found(&uid) {
            true => {
                let due = Instant::now() + again.map_or(self.resync, |after| after.min(self.resync));
                state.synced.insert(uid.clone(), (print, due));
            }
            false => drop(state.synced.remove(&uid)),
        }
        if let (true, Some(reason)) = (once, not_ready) {
            state.not_ready.push(format!("{place} ({reason})"));
        }
    }

    /// `--once`: every parent reconciled, then (its children listed afresh) again while it wrote
    /// something and is not Ready yet, as a graph whose next resource waits for the one just made, up
    /// to [`PASSES`] reconciles each. The result is where each rests.
    async fn run_once(&self) -> anyhow::Result<Pass> {
        let mut only = None;
        let mut parents = 0;
        let mut not_ready: Vec<(String, String)> = Vec::new();
        for pass in 1..=PASSES {
            let children = Arc::new(self.children(true).await?);
            let cache = Cache::default();
            let workers = Workers::start(self.concurrency.max(1), &self.ctx, &cache, &children);
            let mut state = State::new(workers, cache, children);
            state.only = only.take();
            let listed = self.tick(&mut state, true).await?;
            self.ctx.listed();
            if pass == 1 {
                parents = listed;
            }
            state.workers.close(false);
            let mut again = HashSet::new();
            while let Some((uid, at, _, result)) = state.workers.finished().await {
                let wrote = result.as_ref().is_ok_and(|done| done.wrote);
                let Concluded { not_ready: why, .. } = conclude(&self.ctx, &uid, &result);
                not_ready.retain(|(seen, _)| *seen != uid);
                match why {
                    Some(_) if wrote && pass < PASSES => drop(again.insert(uid)),
                    Some(why) => not_ready.push((uid, format!("{at} ({why})"))),
                    None => {}
                }
            }
            state.workers.check().await?;
            if again.is_empty() {
                break;
            }
            only = Some(again);
        }
        Ok(Pass { parents, not_ready: not_ready.into_iter().map(|(_, line)| line).collect() })
    }

    /// Ticks every `interval` until `stop` turns true, then lets the reconciles already running finish.
    /// With `once`, the parents brought to rest (`run_once`) and where they rest.
    pub async fn run(&self, once: bool, mut stop: watch::Receiver<bool>) -> anyhow::Result<Option<Pass>> {
        if once {
            return self.run_once().await.map(Some);
        }
        let children = Arc::new(self.children(once).await?);
        // Nothing is reconciled before every child cache holds its first full list, or a reconcile
        // would miss its children in it and create them again. Until then the watches report their own
        // failures (the log, the probes).
        let mut listed = children.listed.clone();
        tokio::select! {
            _ = listed.wait_for(|listed| listed.iter().all(|l| *l)) => {}
            () = async { drop(stop.wait_for(|stopped| *stopped).await) } => return Ok(None),
        }
        let parents = Cache::default();
        let workers = Workers::start(self.concurrency.max(1), &self.ctx, &parents, &children);
        let mut state = State::new(workers, parents, children);
        let mut strays_due = Instant::now() + self.resync;
        loop {
            let started = Instant::now();
            if started >= strays_due {
                strays_due = started + self.resync;
                self.strays(&mut state).await;
            }
            let tick = self.tick(&mut state, once).await;
            if tick.is_ok() {
                self.ctx.listed();
            }
            if let Err(err) = &tick
                && err.downcast_ref::<Failed>().is_none_or(Failed::out_of_reach)
            {
                self.ctx.health().unreachable();
            }
            match tick {
                Ok(parents) if once => {
                    state.workers.close(false);
                    while let Some(done) = state.workers.finished().await {
                        self.finished(&mut state, done, true);
                    }
                    state.workers.check().await?;
                    return Ok(Some(Pass { parents, not_ready: std::mem::take(&mut state.not_ready) }));
                }
                Ok(parents) => tracing::debug!(parents, running = state.running.len(), "tick done"),
                Err(err) if once => return Err(err),
                Err(err) => tracing::warn!(
                    "cannot list {} and their children: {}",
                    self.ctx.definition.family.parent.qualified_plural(),
                    crate::error::describe_any(&err)
                ),
            }
            let next = tokio::time::sleep_until(started + self.interval);
            tokio::pin!(next);
            loop {
                tokio::select! {
                    () = &mut next => break,
                    Some(done) = state.workers.finished() => self.finished(&mut state, done, false),
                    // The guard wait_for returns must not live across the awaits below (the driver runs
                    // on a spawned task for --from-cluster).
                    () = async { drop(stop.wait_for(|stopped| *stopped).await) } => {
                        // Reconciles already running finish (each is bounded by its own timeout); none
                        // waiting starts.
                        state.workers.close(true);
                        while let Some(done) = state.workers.finished().await {
                            self.finished(&mut state, done, false);
                        }
                        state.workers.check().await?;
                        return Ok(None);
                    }
                }
            }
        }
    }
}

/// The workers that reconcile the parents the ticks queue, `--concurrency` at a time, each taking the
/// next waiting parent when it is done with one, whatever the tick is doing. A shard member has
/// [`LOOK_AHEAD`] more, which take the parents next in line while the others reconcile, so that the
/// parents it takes in wait for their looks together; a reconcile still needs one of the `--concurrency`
/// slots, handed out in the queue's order.
struct Workers {
    queue: Option<mpsc::UnboundedSender<Waiting>>,
    results: mpsc::UnboundedReceiver<Finished>,
    /// Once stopping, the parents still waiting are dropped rather than reconciled.
    stopping: Arc<AtomicBool>,
    tasks: JoinSet<()>,
}

impl Workers {
    fn start(count: usize, ctx: &Arc<Context>, parents: &Cache<DynamicObject>, children: &Arc<Children>) -> Self {
        let (queue, waiting) = mpsc::unbounded_channel::<Waiting>();
        let (done, results) = mpsc::unbounded_channel();
        let waiting = Arc::new(tokio::sync::Mutex::new(waiting));
        let stopping = Arc::new(AtomicBool::new(false));
        let mut tasks = JoinSet::new();
        let slots = Arc::new(Semaphore::new(count));
        let ahead = if ctx.member().is_some() { LOOK_AHEAD } else { 0 };
        for _ in 0..count + ahead {
            let (waiting, done, stopping, slots) = (waiting.clone(), done.clone(), stopping.clone(), slots.clone());
            let (ctx, parents, children) = (ctx.clone(), parents.clone(), children.clone());
            tasks.spawn(async move {
                loop {
                    let next = waiting.lock().await.recv().await;
                    let Some(Waiting { uid, place, version, print }) = next else { return };
                    if stopping.load(Ordering::Relaxed) {
                        continue;
                    }
                    let result = reconcile(&ctx, &parents, &children, (&place, version.as_deref()), &slots).await;
                    if done.send((uid, place, print, result)).is_err() {
                        return;
                    }
                }
            });
        }
        Workers { queue: Some(queue), results, stopping, tasks }
    }

    fn queue(&self, waiting: Waiting) {
        if let Some(queue) = &self.queue {
            let _ = queue.send(waiting);
        }
    }

    /// No more parents are queued; with `drop_waiting`, the ones waiting are not reconciled either.
    fn close(&mut self, drop_waiting: bool) {
        self.stopping.store(drop_waiting, Ordering::Relaxed);
        self.queue = None;
    }

    /// The next reconcile that ended; `None` once the workers have stopped (after `close`).
    async fn finished(&mut self) -> Option<Finished> {
        self.results.recv().await
    }

    /// Waits for the workers to end, and says if one of them failed.
    async fn check(&mut self) -> anyhow::Result<()> {
        while let Some(ended) = self.tasks.join_next().await {
            ended?;
        }
        Ok(())
    }
}
