//! The watch-driven driver: a work queue over the parents (`queue`), fed by a watch of the parents
//! and, for each child type, two more: the children samplectl labels (cached, as controller-runtime
//! caches them, so reconciling a converged parent sends no request), and the metadata of every other
//! object of that type (not cached), so that deleting an object that blocks a parent brings that parent
//! back at once. Every watch and cache comes from the process's `hub`. Bounded concurrency, per-parent
//! backoff on errors, a sync's own resync, and a periodic sweep of every parent.
//!
//! An object is triggered only once its cache holds it (a watch event after the cache has taken it in,
//! and after a relist every parent), because a trigger that runs ahead of the cache reads an old or
//! missing object; kube-runtime's `applied_objects` did that, and after an API server restart lost
//! hundreds of a thousand Samples (bench/UPSTREAM.md). The queue is samplectl's own rather than
//! kube-runtime's `Controller` for two reasons found at 100,000 parents: its scheduler keeps an entry,
//! with a copy of the type, for every parent it is to look at again (the resync), and it has one lane,
//! so a Sample created during the first sweep waited for the whole sweep.

pub mod hub;
mod once;
mod queue;
mod triggers;

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{BoxStream, SelectAll};
use futures::{Stream, StreamExt, stream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DynamicObject;
use kube::runtime::watcher;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::cluster::resolve::Resolved;
use crate::controller::drive::cache::Cache;
use crate::controller::drive::changes::parent_print;
use crate::controller::drive::conclude;
use crate::controller::drive::owners::{Owners, observed, take_in};
use crate::controller::drive::place::{Place, place};
use crate::controller::engine::{Context, LOOK_AHEAD};
use crate::controller::rules::adoption::Published;
use crate::controller::rules::children::{Family, MANAGED_BY_LABEL, Observed};
use crate::controller::rules::next::{Done, Outcome};
use crate::controller::rules::status;
use hub::Hub;
use once::Once;
use queue::{Lane, Queue};
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

/// Parents to reconcile, a batch at a time (a relist's is every parent), and in which lane.
type Triggers = BoxStream<'static, (Vec<Place>, Lane)>;
type WatchEvent = watcher::Event<DynamicObject>;

/// What a reconcile reads: the parents' and children's caches and which children each parent controls.
struct Shared {
    ctx: Arc<Context>,
    parents: Cache<DynamicObject>,
    children: Vec<Cache<DynamicObject>>,
    owners: Arc<Mutex<Owners>>,
}

impl Shared {
    fn children_of(&self, parent: &Place) -> Observed {
        observed(&self.owners, &self.children, parent)
    }
}

fn places(parents: &[(String, String)]) -> Vec<Place> {
    parents.iter().map(|(ns, name)| Place::new(ns, name)).collect()
}

impl Watch {
    fn child_namespace(&self, kind: usize) -> Option<&str> {
        let family = &self.ctx.definition.family;
        self.namespace.as_deref().filter(|_| family.children[kind].namespaced && family.parent.namespaced)
    }

    /// The parents blocked by the object of child type `kind` that `meta` describes.
    fn blocked(ctx: &Context, family: &Family, kind: usize, meta: &ObjectMeta) -> Vec<Place> {
        places(&ctx.memory().blocked_by(&family.key(kind, meta)))
    }

    /// The triggers from child type `kind`'s labelled objects, cached in the hub and indexed by owner. A
    /// change to one triggers its parent (and the one that controlled it before, if the controller
    /// changed); an orphan, the parents it blocks. A relist triggers every parent, because a child
    /// deleted while the watch was down may have left nothing behind but its absence.
    fn labelled_children(
        &self,
        kind: usize,
        events: impl Stream<Item = WatchEvent> + Send + 'static,
        parents: &Cache<DynamicObject>,
        owners: &Arc<Mutex<Owners>>,
        listed: &watch::Sender<Vec<bool>>,
    ) -> Triggers {
        let (ctx, family, parents, owners, listed) =
            (self.ctx.clone(), self.ctx.definition.family.clone(), parents.clone(), owners.clone(), listed.clone());
        let started = Instant::now();
        triggers(events, move |seen| {
            let (object, deleted, listing) = match seen {
                Seen::Applied(object) => (object, false, false),
                Seen::Deleted(object) => (object, true, false),
                Seen::Listing(object) => (object, false, true),
                Seen::Listed => {
                    listed.send_modify(|listed| listed[kind] = true);
                    // An adopter's children are listed after its parents (`run`): said once through.
                    if listed.borrow().iter().all(|listed| *listed) && ctx.children_complete(true) {
                        tracing::info!(
                            controller = ctx.definition.name,
                            "listed the children of the {} ({}) in {:.1}s",
                            family.parent.ar.plural,
                            ctx.parent_labels(),
                            started.elapsed().as_secs_f64()
                        );
                    }
                    return parents.places();
                }
            };
            let (owner, before) = take_in(&owners, &family, kind, &object.metadata, deleted);
            if listing {
                return Vec::new();
            }
            let mut triggers: Vec<Place> = before.into_iter().collect();
            match owner {
                Some(parent) => triggers.push(parent),
                None => triggers.extend(Self::blocked(&ctx, &family, kind, &object.metadata)),
            }
            triggers
        })
    }

    /// The triggers from every other object of child type `kind`, by metadata only and not kept: one
    /// that appears or goes away where a parent's child would be changes whether that parent is blocked.
    fn other_objects(&self, kind: usize, parents: &Cache<DynamicObject>) -> Triggers {
        let (ctx, family, parents) = (self.ctx.clone(), self.ctx.definition.family.clone(), parents.clone());
        let unlabelled = format!("{MANAGED_BY_LABEL}!={}", family.managed_by());
        let events = self.hub.metadata(&family.children[kind].ar, self.child_namespace(kind), &unlabelled);
        triggers(events, move |seen| match seen {
            Seen::Applied(meta) | Seen::Deleted(meta) => Self::blocked(&ctx, &family, kind, &meta.metadata),
            Seen::Listing(_) => Vec::new(),
            Seen::Listed => parents.places(),
        })
    }

    /// The triggers from the objects customize hooks asked for: a metadata watch of each related type,
    /// started when a parent first asks for it. A change triggers every parent whose rules select the
    /// object as it is now or as it was before (its labels may have taken it out); a relist, every parent
    /// with a rule on the type, since an object deleted while the watch was down leaves no event.
    fn related(&self) -> Triggers {
        let (ctx, hub) = (self.ctx.clone(), self.hub.clone());
        let types = self.ctx.memory().related().types();
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

    /// The parents themselves, each triggered once the cache holds it (see the module's comment); they
    /// start flowing once every child cache has its first full list (`gate`), or every early reconcile
    /// would miss in it and write (or read) its children through the API server instead. An adopter's
    /// are not held back: its parents are listed before their children (`run`).
    fn parents(
        &self,
        (cache, events): (Cache<DynamicObject>, impl Stream<Item = WatchEvent> + Send + 'static),
        once: Option<Arc<Once>>,
        gate: Option<watch::Receiver<Vec<bool>>>,
        unserved: Option<Arc<Unserved>>,
    ) -> Triggers {
        let (ctx, started) = (self.ctx.clone(), Instant::now());
        // With ignoreStatusChanges, what each parent last was, to tell a status write from a change.
        let ignore_status = ctx.definition.ignore_status_changes;
        let print = |parent: &DynamicObject| {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            (parent_print(&parent.metadata, true), &parent.metadata.uid).hash(&mut hasher);
            hasher.finish()
        };
        let mut prints: HashMap<Place, u64> = HashMap::new();
        let parents = triggers(events, move |seen| match seen {
            Seen::Applied(parent) => {
                let at = place(&parent.metadata);
                // A reconcile put off until this copy of its own write arrived is due, status or not.
                let due = ctx.memory().seen(
                    parent.metadata.uid.as_deref().unwrap_or_default(),
                    parent.metadata.resource_version.as_deref(),
                );
                if let Some(unserved) = &unserved {
                    unserved.add(at.clone());
                }
                let unchanged = ignore_status && {
                    let now = print(&parent);
                    prints.insert(at.clone(), now) == Some(now)
                };
                match unchanged && !due {
                    true => Vec::new(),
                    false => vec![at],
                }
            }
            Seen::Listing(parent) => {
                if ignore_status {
                    prints.insert(place(&parent.metadata), print(&parent));
                }
                // Changed before this watch began: while its member was dying, or before this one
                // started serving for it.
                if let Some(unserved) = unserved.as_ref().filter(|_| status::unanswered(&parent)) {
                    unserved.add(place(&parent.metadata));
                }
                Vec::new()
            }
            Seen::Deleted(parent) => {
                prints.remove(&place(&parent.metadata));
                ctx.memory().forget(parent.metadata.uid.as_deref().unwrap_or_default());
                Vec::new()
            }
            Seen::Listed => {
                let all = cache.places();
                // Said for the first list; an adopter's names the gone label, and waits for its record.
                let first = match &unserved {
                    Some(unserved) => !unserved.listed.send_replace(true),
                    None => !ctx.has_listed(),
                };
                if first {
                    let (plural, took) = (&ctx.definition.family.parent.ar.plural, started.elapsed().as_secs_f64());
                    match &unserved {
                        Some(_) => tracing::info!(
                            controller = ctx.definition.name,
                            "listed {} {plural} ({}) in {took:.1}s; their children next",
                            all.len(),
                            ctx.parent_labels()
                        ),
                        None => tracing::info!(
                            controller = ctx.definition.name,
                            "listed {} {plural} and their children in {took:.1}s; looking at each",
                            all.len()
                        ),
                    }
                }
                // /readyz: this replica has seen every parent.
                ctx.listed();
                if let Some(once) = &once {
                    once.listed(&all);
                }
                all
            }
        });
        match gate {
            Some(mut listed) => stream::once(async move {
                let _ = listed.wait_for(|listed| listed.iter().all(|l| *l)).await;
                parents
            })
            .flatten()
            .boxed(),
            None => parents,
        }
    }

    /// Runs until `stop` turns true; with `once`, until every parent of the first full list has been
    /// reconciled once, and then returns the ones that are not Ready.
    pub async fn run(&self, once: bool, stop: watch::Receiver<bool>) -> kube::Result<Option<Vec<String>>> {
        let family = self.ctx.definition.family.clone();
        let parents_feed = self.hub.objects(&family.parent.ar, self.namespace.as_deref(), &self.ctx.parent_labels());
        let parents = parents_feed.0.clone();
        let owners = Arc::new(Mutex::new(Owners::default()));
        let tracker = once.then(|| Arc::new(Once::new()));
        let (listed, listed_rx) = watch::channel(vec![false; family.children.len()]);
        let adopter = self.ctx.adopting().filter(|a| a.adopter);
        let unserved = adopter.map(|_| Arc::new(Unserved::default()));

        let mut triggers: Vec<Triggers> = Vec::new();
        let mut records = None;
        match (adopter, &unserved) {
            // An adopter lists the silent member's parents before their children, so that the parents
            // changed meanwhile are known (and served, each looking for its own children, as soon as
            // the record comes) without waiting behind a list of all their children too: at 100,000
            // Samples the two lists side by side took 14 to 16 s, where the record comes after 17 s.
            (Some(adopting), Some(unserved)) => {
                let _ = self.ctx.children_complete(family.children.is_empty());
                let mut parent_triggers = self.parents(parents_feed, None, None, Some(unserved.clone()));
                let mut stopped = stop.clone();
                // What the parents' list triggers goes nowhere: nothing is reconciled before the
                // records say so, and the children's list triggers every parent when it is through.
                while !*unserved.listed.borrow() {
                    tokio::select! {
                        next = parent_triggers.next() => if next.is_none() { break },
                        _ = stopped.wait_for(|s| *s) => return Ok(None),
                    }
                }
                triggers.push(parent_triggers);
                let records_read = adopting.records.clone();
                records = Some(records_changed(records_read, parents.clone(), unserved.clone(), listed_rx.clone()));
            }
            _ => triggers.push(self.parents(parents_feed, tracker.clone(), Some(listed_rx.clone()), None)),
        }
        let mut children = Vec::new();
        for kind in 0..family.children.len() {
            let (cache, events) =
                self.hub.objects(&family.children[kind].ar, self.child_namespace(kind), &self.ctx.child_labels());
            children.push(cache);
            triggers.push(self.labelled_children(kind, events, &parents, &owners, &listed));
            triggers.push(self.other_objects(kind, &parents));
        }
        triggers.push(self.related());
        // Nothing is reconciled before every child cache holds its first full list: the shared parent
        // cache fills on its own, so a conflict watch's or one child type's first list could otherwise
        // trigger parents whose children are not cached yet (and they would be created again). What is
        // dropped here is not lost: once all are listed, the parents' stream triggers every parent. Only
        // an adopter's records go ahead: its reconciles look for their own children until then.
        let all_listed = listed_rx;
        let gated = stream::select_all(triggers)
            .filter(move |_| futures::future::ready(all_listed.borrow().iter().all(|listed| *listed)));
        let triggers = match records {
            Some(records) => stream::select(gated, records).boxed(),
            None => gated.boxed(),
        };

        let shared = Arc::new(Shared { ctx: self.ctx.clone(), parents, children, owners });
        let stray_namespaces = (0..family.children.len()).map(|k| self.child_namespace(k).map(str::to_owned)).collect();
        let concurrency = usize::from(self.concurrency.max(1));
        let work = Work { shared, resync: self.resync, concurrency, stray_namespaces };
        work.run(triggers, tracker.clone(), stop).await;
        Ok(tracker.map(|t| t.not_ready()))
    }
}

/// What an adopter knows of the parents nobody served: the ones its watch saw change since the records
/// last changed, and those its list showed with a change no reconcile answered (`status::unanswered`:
/// changed while their member was dying, before this watch began); and whether that list is done.
#[derive(Default)]
struct Unserved {
    changed: Mutex<HashSet<Place>>,
    listed: watch::Sender<bool>,
}

impl Unserved {
    fn add(&self, place: Place) {
        self.changed.lock().unwrap_or_else(|e| e.into_inner()).insert(place);
    }

    fn take(&self, keep: bool) -> Vec<Place> {
        let mut changed = self.changed.lock().unwrap_or_else(|e| e.into_inner());
        match keep {
            true => changed.iter().cloned().collect(),
            false => changed.drain().collect(),
        }
    }
}

/// An adopter's triggers from the adoption records: a new record may give it parents it held back. The
/// unserved ones come first, so that a change made to a gone member's parent is answered about when
/// the record is read, not after a sweep of all it held; every other is looked at once after, as in a
/// sweep (most are as their gone member left them, but it may have died halfway through one).
///
/// Only the records count, from when this watch began: the same channel also says which members are
/// silent, which changes what this member gets ready for, not what it serves (and a change of it
/// would send the unserved, spent, before the record they wait for). Nothing is sent before the
/// parents are listed, since the unserved are known only once their list is through. The unserved
/// go ahead of the children's list (each reconcile looks for its own children meanwhile); the sweep
/// only once the children are listed too (`children`), and until then the end of their list, which
/// triggers every parent, is the sweep. So a record read first is acted on then; and once at the
/// start (a record may be older than this watch, whose lists then sweep every parent) the unserved are
/// sent ahead, kept for the next record.
fn records_changed(
    mut records: watch::Receiver<Published>,
    parents: Cache<DynamicObject>,
    unserved: Arc<Unserved>,
    children: watch::Receiver<Vec<bool>>,
) -> Triggers {
    let listed = unserved.listed.subscribe();
    let seen = records.borrow_and_update().adoptions.clone();
    stream::unfold((records, listed, seen, true), move |(mut records, mut listed, mut seen, start)| {
        let (parents, unserved, children) = (parents.clone(), unserved.clone(), children.clone());
        async move {
            if !start {
                loop {
                    records.changed().await.ok()?;
                    let now = records.borrow_and_update().adoptions.clone();
                    if *now != *seen {
                        seen = now;
                        break;
                    }
                }
            }
            listed.wait_for(|listed| *listed).await.ok()?;
            let mut batches = vec![(unserved.take(start), Lane::Change)];
            if !start && children.borrow().iter().all(|listed| *listed) {
                batches.push((parents.places(), Lane::Sweep));
            }
            Some((stream::iter(batches), (records, listed, seen, false)))
        }
    })
    .flatten()
    .boxed()
}

/// When a parent whose reconcile panicked is tried again.
const PANIC_RETRY: Duration = Duration::from_secs(30);

/// How one reconcile ended, for the queue: when to look at the parent again, and whether it is Ready.
struct Ended {
    place: Place,
    /// Look again after this long (a retry, a sync's resync, a finalizer's recheck); otherwise at the
    /// next change or sweep.
    again: Option<Duration>,
    /// Not Ready, and why (`--once` names it).
    not_ready: Option<String>,
    /// It wrote something (`--once` looks again at a parent that did and is not Ready).
    wrote: bool,
    /// It was not looked at yet, only put off (another context of the member held it, or the copy was
    /// behind a write of this process): `--once` does not count it.
    put_off: bool,
}

/// The queue and the reconciles it starts.
struct Work {
    shared: Arc<Shared>,
    resync: Duration,
    concurrency: usize,
    /// Where each child type's stray list looks (`Context::strays`).
    stray_namespaces: Vec<Option<String>>,
}

impl Work {
    /// Whether the parent at `place` first looks for its children, and may start past the slots. Only a
    /// shard member's ever does: an unsharded controller decodes no parent from the cache to ask.
    fn looks_first(&self, place: &Place) -> bool {
        let ctx = &self.shared.ctx;
        ctx.member().is_some() && self.shared.parents.get(place).is_some_and(|parent| ctx.looks_first(&parent))
    }

    /// A shard member's stray list, made with each sweep (`Context::strays` lists nothing in an adopter's
    /// context).
    fn strays(&self, strays: &mut JoinSet<Result<HashSet<String>, String>>) {
        let ctx = &self.shared.ctx;
        if ctx.member().is_none() || !strays.is_empty() {
            return;
        }
        let (ctx, namespaces) = (ctx.clone(), self.stray_namespaces.clone());
        strays.spawn(async move { ctx.strays(&namespaces).await });
    }

    /// The places of the parents with these uids.
    fn places_of(&self, uids: &HashSet<String>) -> Vec<Place> {
        let parents = &self.shared.parents;
        let of = |place: &Place| {
            parents.get(place).is_some_and(|p| p.metadata.uid.as_ref().is_some_and(|u| uids.contains(u)))
        };
        parents.places().into_iter().filter(of).collect()
    }

    /// Takes triggers into the queue and runs up to `concurrency` reconciles from it, until `stop` (or,
    /// with `once`, until every parent of the first list was reconciled); then lets those running end.
    async fn run(&self, mut triggers: Triggers, once: Option<Arc<Once>>, mut stop: watch::Receiver<bool>) {
        let mut queue = Queue::default();
        let mut running = JoinSet::new();
        let slots = Arc::new(Semaphore::new(self.concurrency));
        // Which parent each running reconcile is for, should one panic.
        let mut running_for: HashMap<tokio::task::Id, Place> = HashMap::new();
        let mut done = once.as_ref().map(|t| t.done());
        let finished = async move {
            match done.as_mut() {
                Some(done) => drop(done.wait_for(|d| *d).await),
                None => std::future::pending().await,
            }
        };
        tokio::pin!(finished);
        let mut sweep = tokio::time::interval_at(Instant::now() + self.resync, self.resync);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut triggers_open = true;
        let (started, mut swept) = (Instant::now(), false);
        let mut strays = JoinSet::new();
        loop {
            let next_due = queue.wake(Instant::now());
            // Past `concurrency`, only a parent that first looks for its children is started: it waits
            // for its look without a slot, in the queue's order.
            while let Some(place) = queue.peek()
                && (running.len() < self.concurrency
                    || running.len() < self.concurrency + LOOK_AHEAD && self.looks_first(place))
            {
                let place = place.clone();
                queue.next();
                let task = running.spawn(reconcile(self.shared.clone(), place.clone(), slots.clone()));
                running_for.insert(task.id(), place);
            }
            if !swept && running.is_empty() && self.shared.ctx.has_listed() {
                swept = true;
                let plural = &self.shared.ctx.definition.family.parent.ar.plural;
                let (count, took) = (self.shared.parents.len(), started.elapsed().as_secs_f64());
                tracing::info!(
                    controller = self.shared.ctx.definition.name,
                    "all {count} {plural} looked at, {took:.1}s after the start"
                );
            }
            self.shared.ctx.metrics().backlog.set(i64::try_from(queue.waiting()).unwrap_or(i64::MAX));
            let wake = async {
                match next_due {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                trigger = triggers.next(), if triggers_open => match trigger {
                    Some((places, lane)) => for place in places {
                        crate::controller::stages::reached_by("queued", &place.namespace, &place.name);
                        queue.add(place, lane);
                    },
                    None => triggers_open = false,
                },
                Some(ended) = running.join_next_with_id() => {
                    let Ended { place, again, not_ready, wrote, put_off } = match ended {
                        Ok((id, ended)) => {
                            running_for.remove(&id);
                            ended
                        }
                        // A bug, not the parent's doing: said, and retried as a failure.
                        Err(err) => {
                            let Some(place) = running_for.remove(&err.id()) else { continue };
                            tracing::error!("{place}: the reconcile panicked ({err}); retrying in {}s", PANIC_RETRY.as_secs());
                            let not_ready = Some("the reconcile panicked".into());
                            Ended { place, again: Some(PANIC_RETRY), not_ready, wrote: false, put_off: false }
                        }
                    };
                    queue.done(&place);
                    if let Some(after) = again {
                        queue.add_after(place.clone(), after, Instant::now());
                    }
                    if let Some(once) = once.as_ref().filter(|_| !put_off) {
                        once.finished(&place, not_ready, wrote);
                    }
                }
                () = wake => {}
                _ = sweep.tick() => {
                    for place in self.shared.parents.places() {
                        queue.add(place, Lane::Sweep);
                    }
                    self.strays(&mut strays);
                }
                Some(found) = strays.join_next() => match found {
                    Ok(Ok(uids)) if !uids.is_empty() => for place in self.places_of(&uids) {
                        queue.add(place, Lane::Sweep);
                    },
                    Ok(Err(message)) => tracing::warn!(controller = self.shared.ctx.definition.name, "{message}"),
                    _ => {}
                },
                () = &mut finished => break,
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        // Reconciles already running finish (each is bounded by its own deadline).
        while running.join_next().await.is_some() {}
    }
}

/// Reconciles the parent at `place` from the caches once it has one of the `slots`, and says when to
/// look at it again. A parent that first looks for its children (`Context::look`) waits for that
/// without a slot, and is then reconciled from the caches as they are.
async fn reconcile(shared: Arc<Shared>, place: Place, slots: Arc<Semaphore>) -> Ended {
    let ended = |again, not_ready, wrote| Ended { place: place.clone(), again, not_ready, wrote, put_off: false };
    // Deleted after it was triggered: nothing left to do.
    let Some(mut parent) = shared.parents.get(&place) else { return ended(None, None, false) };
    crate::controller::stages::reached("started", &parent.metadata);
    let ctx = &shared.ctx;
    let looked = match ctx.look(&parent).await {
        Ok(looked) => looked,
        Err(failed) => {
            let concluded = conclude(ctx, parent.metadata.uid.as_deref().unwrap_or_default(), &Err(failed));
            return ended(concluded.again, concluded.not_ready, false);
        }
    };
    let Ok(_slot) = slots.acquire().await else { return ended(None, None, false) };
    if looked.is_some() {
        let Some(now) = shared.parents.get(&place) else { return ended(None, None, false) };
        parent = now;
    }
    let children = shared.children_of(&place);
    let result = ctx.reconcile(&parent, children, looked).await;
    let concluded = conclude(ctx, parent.metadata.uid.as_deref().unwrap_or_default(), &result);
    let put_off = matches!(result, Ok(Done { outcome: Outcome::Ignored, resync_after: Some(_), .. }));
    Ended { put_off, ..ended(concluded.again, concluded.not_ready, result.as_ref().is_ok_and(|done| done.wrote)) }
}

/// The triggers from one related type's metadata watch, across the cluster.
fn related_watch(ctx: &Arc<Context>, hub: &Arc<Hub>, resolved: &Resolved) -> Triggers {
    let events = hub.metadata(&resolved.ar, None, "");
    let (ctx, resolved) = (ctx.clone(), resolved.clone());
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
                let mut parents = ctx.memory().related().parents_of(&resolved, Some(&meta));
                if let Some(old) = before.remove(&id) {
                    parents.extend(ctx.memory().related().parents_of(&resolved, Some(&old)));
                }
                if !deleted {
                    before.insert(id, kept(&meta));
                }
                parents
            }
            None => ctx.memory().related().parents_of(&resolved, None),
        };
        let mut parents = places(&parents);
        parents.dedup();
        parents
    })
}

#[cfg(test)]
mod tests {
    use kube::api::ApiResource;

    use super::*;

    fn batch(next: Option<(Vec<Place>, Lane)>) -> (Vec<String>, Lane) {
        let (places, lane) = next.expect("a batch");
        let mut names: Vec<String> = places.iter().map(|p| p.name.to_string()).collect();
        names.sort();
        (names, lane)
    }

    #[tokio::test]
    async fn an_adopter_looks_at_the_unserved_first_once_listed_and_sweeps_once_the_children_are_too() {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let parents = Cache::default();
        for name in ["a", "b", "c"] {
            parents.apply(&DynamicObject::new(name, &ar).within("ns"));
        }
        let unserved = Arc::new(Unserved::default());
        unserved.add(Place::new("ns", "b"));
        let (records, read) = watch::channel(Published::default());
        let (children, children_read) = watch::channel(vec![false]);
        let mut triggers = records_changed(read, parents, unserved.clone(), children_read);
        let quiet = Duration::from_millis(50);
        assert!(tokio::time::timeout(quiet, triggers.next()).await.is_err(), "nothing before the list is through");

        unserved.listed.send_replace(true);
        assert_eq!(batch(triggers.next().await), (vec!["b".to_owned()], Lane::Change));
        assert!(tokio::time::timeout(quiet, triggers.next()).await.is_err(), "no sweep at the start");

        // A member goes silent, or the records are read again: nothing to serve yet, the unserved kept.
        records.send_modify(|published| {
            published.silent.insert("x_1".into());
        });
        assert!(tokio::time::timeout(quiet, triggers.next()).await.is_err(), "the records did not change");

        // A record comes: the unserved first (kept from the start until now), then every parent.
        let record = |gone: &'static str| {
            move |published: &mut Published| {
                let mut adoptions = (*published.adoptions).clone();
                adoptions.add(gone, std::collections::BTreeMap::from([("m".to_owned(), "m_1".to_owned())]));
                published.adoptions = Arc::new(adoptions);
            }
        };
        // A record comes while the children are still being listed: the unserved at once (each looks
        // for its own children), and no sweep (the end of the children's list triggers every parent).
        records.send_modify(record("x_1"));
        assert_eq!(batch(triggers.next().await), (vec!["b".to_owned()], Lane::Change));
        assert!(tokio::time::timeout(quiet, triggers.next()).await.is_err(), "no sweep before the children");

        // Another once they are: the unserved first (none left), then every parent.
        children.send_replace(vec![true]);
        unserved.add(Place::new("ns", "c"));
        records.send_modify(record("y_1"));
        assert_eq!(batch(triggers.next().await), (vec!["c".to_owned()], Lane::Change));
        assert_eq!(batch(triggers.next().await), (vec!["a".into(), "b".into(), "c".into()], Lane::Sweep));
        records.send_modify(record("z_1"));
        assert_eq!(batch(triggers.next().await), (Vec::new(), Lane::Change), "the unserved were taken");
        assert_eq!(batch(triggers.next().await).1, Lane::Sweep);
    }
}
