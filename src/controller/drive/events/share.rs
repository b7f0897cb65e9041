//! A shard member's share of the hooks' `kubernetes` bindings (`--shard-ring` with `--hooks-dir`).
//!
//! Each binding's objects are parents of the ring: the coordinator labels each for a member, and a
//! member's watches select its own label, so that its hooks see only its share, in their events,
//! Synchronization runs and snapshots. Moving an object off a live member is drained as for any parent,
//! with one difference: the member hands the object straight to the member the drain label names (one
//! write, guarded by the resourceVersion it read), rather than dropping its label for the coordinator to
//! relabel. The object is never without an owner, so its deletion always reaches one member's hooks.
//!
//! Letting go, once the drain label is seen:
//! - the object leaves the member's snapshots at once, and no run started from then on carries an event
//!   of it (its deletion excepted, below);
//! - the runs already started (which may have read it) are waited for: each run holds the generation it
//!   started in, and a release waits for every run of an earlier generation;
//! - then the object is relabelled for its next member, through the member's fence.
//!
//! The watch says a move-out as it says a deletion (`DELETED`, with the object as it was before), so a
//! `DELETED` of an object this member was letting go is looked up: gone (or still this member's, having
//! left the binding's selectors) is a deletion for the hooks; labelled for another member is a move, and
//! says nothing. A watch lagging behind the release cannot bring the object back: copies older than the
//! drain are ignored.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

use crate::cluster::scope;
use crate::controller::engine::fence::Fence;
use crate::controller::engine::request::{Fenced, bounded};
use crate::controller::rules::shard::{Member, Shares, drain_label, read_before};

/// How a binding's objects join the ring's controllers (the coordinator labels them from then on), with
/// the namespace they are in (all when `None`).
pub type Join = Box<dyn Fn(Arc<dyn Shares>, Option<String>) + Send + Sync>;

/// How long an object let go of is remembered, to tell its `DELETED` events from watches behind the
/// release from a deletion.
const REMEMBER: Duration = Duration::from_secs(600);

/// How many releases are in flight at once (a join moves about 1/N of the objects).
const WRITES: usize = 32;

/// An object of a binding, across bindings: its resource and place.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Held {
    pub group: String,
    pub plural: String,
    pub namespace: String,
    pub name: String,
}

impl Held {
    pub fn of(ar: &ApiResource, namespace: &str, name: &str) -> Self {
        Held { group: ar.group.clone(), plural: ar.plural.clone(), namespace: namespace.into(), name: name.into() }
    }
}

/// What a watch's copy of an object means for the member's hooks.
#[derive(Debug, PartialEq, Eq)]
pub enum Seen {
    /// The member's, as usual.
    Ours,
    /// The member's again, its move called off: events of it may have been left to the next member
    /// meanwhile, so this copy is an event whatever its checksum.
    Back,
    /// Being let go of: out of the snapshots, and no event.
    Leaving,
    /// Older than what the member knows of it already (a watch behind another): ignored.
    Stale,
}

/// What a `DELETED` of an object means.
#[derive(Debug, PartialEq, Eq)]
pub enum Gone {
    /// It was deleted, or left the binding's selectors while it was the member's.
    Deleted,
    /// It was handed to another member.
    Moved,
}

struct Leaving {
    /// The resourceVersion the drain was seen at (or later, as seen).
    version: String,
    /// The member it goes to.
    to: String,
    /// Once let go of: the version the release made, and when.
    released: Option<(String, Instant)>,
    /// A release is queued or under way.
    sending: bool,
}

#[derive(Default)]
struct Inner {
    leaving: HashMap<Held, Leaving>,
    /// Bumped by each batch of releases; runs hold the one they started in.
    generation: u64,
    /// How many runs are under way, by the generation they started in.
    running: BTreeMap<u64, usize>,
}

/// An object to let go of, as its newest copy seen says (its version and next member are in `leaving`).
struct Release {
    held: Held,
    ar: ApiResource,
}

/// The member's share: what it is letting go of, and the runs that may still read it.
pub struct Share {
    pub member: Member,
    ring: Join,
    /// The bindings already in the ring, so that two bindings of the same objects label them once.
    joined: Mutex<HashSet<String>>,
    inner: Mutex<Inner>,
    ended: Notify,
    releases: mpsc::UnboundedSender<Release>,
    queued: Mutex<Option<mpsc::UnboundedReceiver<Release>>>,
    /// Told which objects a batch let go of (their events still queued are dropped).
    on_release: std::sync::OnceLock<OnRelease>,
}

/// What is told of the objects a batch of releases let go of.
pub type OnRelease = Box<dyn Fn(&HashSet<Held>) + Send + Sync>;

/// A run under way, from its start (taken before it reads any object) to its end.
pub struct Using<'a> {
    share: &'a Share,
    generation: u64,
}

impl Drop for Using<'_> {
    fn drop(&mut self) {
        let mut inner = self.share.lock();
        if let Some(count) = inner.running.get_mut(&self.generation) {
            *count -= 1;
            if *count == 0 {
                inner.running.remove(&self.generation);
            }
        }
        drop(inner);
        self.share.ended.notify_waiters();
    }
}

/// One binding's objects as the ring's coordinator finds them.
struct BindingShares {
    ar: ApiResource,
    labels: String,
    fields: String,
    names: Vec<String>,
}

impl Shares for BindingShares {
    fn resource(&self) -> &ApiResource {
        &self.ar
    }
    fn watched(&self) -> (String, String) {
        (self.labels.clone(), self.fields.clone())
    }
    fn takes(&self, meta: &ObjectMeta) -> bool {
        self.names.is_empty() || meta.name.as_ref().is_some_and(|name| self.names.contains(name))
    }
}

impl Share {
    pub fn new(member: Member, ring: Join) -> Self {
        let (releases, queued) = mpsc::unbounded_channel();
        Share {
            member,
            ring,
            joined: Mutex::default(),
            inner: Mutex::default(),
            ended: Notify::new(),
            releases,
            queued: Mutex::new(Some(queued)),
            on_release: std::sync::OnceLock::new(),
        }
    }

    /// Has `told` called with the objects each batch of releases let go of.
    pub fn on_release(&self, told: OnRelease) {
        let _ = self.on_release.set(told);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A binding's label selector with this member's label added: its watches see only its share.
    pub fn selector(&self, labels: &str) -> String {
        match labels.is_empty() {
            true => self.member.selector(),
            false => format!("{labels},{}", self.member.selector()),
        }
    }

    /// Has the coordinator label the objects of a binding: of `ar`, in `namespace` (all when `None`),
    /// with these label and field selectors, and these names (any when empty).
    pub fn join(&self, ar: &ApiResource, namespace: Option<&str>, labels: &str, fields: &str, names: &[String]) {
        let key = format!("{}/{}|{namespace:?}|{labels}|{fields}|{names:?}", ar.group, ar.plural);
        if !self.joined.lock().unwrap_or_else(|e| e.into_inner()).insert(key) {
            return;
        }
        let shares =
            BindingShares { ar: ar.clone(), labels: labels.into(), fields: fields.into(), names: names.to_vec() };
        (self.ring)(Arc::new(shares), namespace.map(str::to_owned));
    }

    /// What a watch's copy of an object (at `meta`) means; a drain seen for the first time queues its
    /// release.
    pub fn seen(&self, held: &Held, ar: &ApiResource, meta: &ObjectMeta) -> Seen {
        let version = meta.resource_version.clone().unwrap_or_default();
        let drained = self.member.drained_to(meta).filter(|to| *to != self.member.incarnation).map(str::to_owned);
        let mut inner = self.lock();
        let Some(leaving) = inner.leaving.get_mut(held) else {
            let Some(to) = drained else { return Seen::Ours };
            let release = Release { held: held.clone(), ar: ar.clone() };
            inner.leaving.insert(held.clone(), Leaving { version, to, released: None, sending: true });
            drop(inner);
            let _ = self.releases.send(release);
            return Seen::Leaving;
        };
        let known = leaving.released.as_ref().map_or(&leaving.version, |(v, _)| v);
        // Not newer than what is known: the same copy, or one a watch behind brings.
        if version == *known || read_before(Some(&version), known) {
            return match leaving.released {
                Some(_) => Seen::Stale,
                None if version == leaving.version => Seen::Leaving,
                None => Seen::Stale,
            };
        }
        match drained {
            // Still (or again) being moved, in a newer copy: the release under way sends this copy's
            // version, or goes again if it was refused.
            Some(to) if leaving.released.is_none() => {
                leaving.version = version;
                leaving.to = to;
                if !leaving.sending {
                    leaving.sending = true;
                    drop(inner);
                    let _ = self.releases.send(Release { held: held.clone(), ar: ar.clone() });
                }
                Seen::Leaving
            }
            // The move is off, or the object came back after its release (and may be drained again).
            _ => {
                let called_off = leaving.released.is_none();
                inner.leaving.remove(held);
                drop(inner);
                match self.seen(held, ar, meta) {
                    Seen::Ours if called_off => Seen::Back,
                    seen => seen,
                }
            }
        }
    }

    /// Whether the object is being let go of (or was): out of the snapshots, no event of it runs, and a
    /// `DELETED` of it is looked at to tell a move from a deletion.
    pub fn leaving(&self, held: &Held) -> bool {
        self.lock().leaving.contains_key(held)
    }

    /// A deletion of the object, told by the look after its `DELETED`: the member forgets it.
    pub fn forget(&self, held: &Held) {
        self.lock().leaving.remove(held);
    }

    /// Marks a run as under way until the guard is dropped.
    pub fn enter(&self) -> Using<'_> {
        let mut inner = self.lock();
        let generation = inner.generation;
        *inner.running.entry(generation).or_default() += 1;
        Using { share: self, generation }
    }

    /// Looks at an object a watch said `DELETED` of while it was being let go of.
    pub async fn look(&self, client: &kube::Client, ar: &ApiResource, held: &Held) -> Gone {
        // Let go of by this member itself: its DELETED is the move.
        if self.lock().leaving.get(held).is_some_and(|l| l.released.is_some()) {
            return Gone::Moved;
        }
        let namespace = Some(held.namespace.as_str()).filter(|ns| !ns.is_empty());
        let api = scope::dynamic(client.clone(), ar, namespace);
        for attempt in 0..5u32 {
            match bounded(api.get_opt(&held.name)).await {
                Ok(None) => break,
                Ok(Some(object)) if self.member.marked(&object.metadata) => break,
                Ok(Some(object)) => {
                    // Moved by another write than this member's release: remembered as let go of at
                    // that version, so that a watch behind it cannot bring it back.
                    let version = object.metadata.resource_version.unwrap_or_default();
                    if let Some(leaving) = self.lock().leaving.get_mut(held) {
                        leaving.released.get_or_insert((version, Instant::now()));
                    }
                    return Gone::Moved;
                }
                Err(failed) => {
                    tracing::warn!("cannot read {} {}: {}", ar.kind, held.name, failed.message());
                    tokio::time::sleep(Duration::from_millis(200) * 2u32.pow(attempt)).await;
                }
            }
        }
        // Gone, or left the selectors while it was this member's, or it could not be read: the hooks are
        // told, as a deletion told twice does less harm than one never told.
        self.forget(held);
        Gone::Deleted
    }

    /// Lets go of the objects drained off this member, until the process ends: each batch once every run
    /// started before it is over, each object relabelled for its next member if it is still as its drain
    /// was seen.
    pub async fn release(self: Arc<Self>, client: kube::Client, fence: Fence) {
        let Some(mut queued) = self.queued.lock().unwrap_or_else(|e| e.into_inner()).take() else { return };
        while let Some(first) = queued.recv().await {
            let mut batch = vec![first];
            while let Ok(more) = queued.try_recv() {
                batch.push(more);
            }
            let generation = {
                let mut inner = self.lock();
                inner.leaving.retain(|_, l| l.released.as_ref().is_none_or(|(_, at)| at.elapsed() < REMEMBER));
                inner.generation += 1;
                inner.generation
            };
            loop {
                let ended = self.ended.notified();
                if self.lock().running.range(..generation).next().is_none() {
                    break;
                }
                ended.await;
            }
            let released: HashSet<Held> = futures::stream::iter(batch)
                .map(|release| self.send(&client, &fence, release))
                .buffer_unordered(WRITES)
                .filter_map(|released| async move { released })
                .collect()
                .await;
            if let Some(told) = self.on_release.get()
                && !released.is_empty()
            {
                told(&released);
            }
        }
    }

    /// Relabels an object for its next member, as its newest copy was seen (a copy newer than the one a
    /// release was queued for may have come meanwhile).
    async fn send(&self, client: &kube::Client, fence: &Fence, release: Release) -> Option<Held> {
        let Release { held, ar } = release;
        let (version, to) = self
            .lock()
            .leaving
            .get(&held)
            .filter(|l| l.released.is_none())
            .map(|l| (l.version.clone(), l.to.clone()))?;
        let namespace = Some(held.namespace.as_str()).filter(|ns| !ns.is_empty());
        let api = scope::dynamic(client.clone(), &ar, namespace);
        let patch = json!({"metadata": {
            "resourceVersion": version,
            "labels": {self.member.label(): &to, drain_label(&self.member.ring): Value::Null},
        }});
        let result = Fenced::new(api, fence).patch(&held.name, &PatchParams::default(), &Patch::Merge(&patch)).await;
        let mut inner = self.lock();
        let leaving = inner.leaving.get_mut(&held)?;
        let mut released = None;
        let again = match result {
            Ok(object) => {
                let DynamicObject { metadata, .. } = object;
                leaving.released = Some((metadata.resource_version.unwrap_or_default(), Instant::now()));
                leaving.sending = false;
                tracing::info!("{}/{}: handed over to shard member {to}", held.namespace, held.name);
                released = Some(held.clone());
                None
            }
            // Changed since: sent again at once if a newer copy (still drained) came meanwhile, else when
            // it comes.
            Err(failed) if failed.status() == Some(409) => {
                leaving.sending = leaving.version != version;
                leaving.sending.then_some(Duration::ZERO)
            }
            // Gone: no longer being let go of, so that its DELETED is a deletion.
            Err(failed) if failed.status() == Some(404) => {
                inner.leaving.remove(&held);
                None
            }
            Err(failed) => {
                let why = failed.message();
                tracing::warn!("{}/{}: cannot hand it over to shard member {to}: {why}", held.namespace, held.name);
                Some(Duration::from_secs(1))
            }
        };
        drop(inner);
        if let Some(delay) = again {
            let releases = self.releases.clone();
            let held = held.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let _ = releases.send(Release { held, ar });
            });
        }
        released
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share() -> Share {
        Share::new(Member::new("r".into(), "a".into(), "1"), Box::new(|_, _| {}))
    }

    fn meta(version: &str, member: &str, drain: Option<&str>) -> ObjectMeta {
        let mut labels = std::collections::BTreeMap::from([("shard.samplectl.io/r".to_owned(), member.to_owned())]);
        if let Some(to) = drain {
            labels.insert("drain.shard.samplectl.io/r".into(), to.into());
        }
        ObjectMeta { resource_version: Some(version.into()), labels: Some(labels), ..ObjectMeta::default() }
    }

    fn ar() -> ApiResource {
        ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
    }

    #[test]
    fn a_drain_is_let_go_of_once_and_older_copies_cannot_bring_it_back() {
        let share = share();
        let held = Held::of(&ar(), "ns", "x");
        assert_eq!(share.seen(&held, &ar(), &meta("10", "a_1", None)), Seen::Ours);
        assert_eq!(share.seen(&held, &ar(), &meta("11", "a_1", Some("b_2"))), Seen::Leaving);
        // Another binding's watch of the same copy: leaving, and no second release.
        assert_eq!(share.seen(&held, &ar(), &meta("11", "a_1", Some("b_2"))), Seen::Leaving);
        // A watch behind: the copy before the drain is ignored.
        assert_eq!(share.seen(&held, &ar(), &meta("10", "a_1", None)), Seen::Stale);
        assert!(share.leaving(&held));
        let queued = share.queued.lock().unwrap().as_mut().unwrap().try_recv();
        assert!(queued.is_ok_and(|r| r.held == held));
        assert_eq!(share.lock().leaving[&held].version, "11");
        assert_eq!(share.lock().leaving[&held].to, "b_2");
        assert!(share.queued.lock().unwrap().as_mut().unwrap().try_recv().is_err());

        // Released at 12: nothing up to it counts; a later copy of its own (moved back) does.
        share.lock().leaving.get_mut(&held).unwrap().released = Some(("12".into(), Instant::now()));
        share.lock().leaving.get_mut(&held).unwrap().sending = false;
        assert_eq!(share.seen(&held, &ar(), &meta("11", "a_1", Some("b_2"))), Seen::Stale);
        assert_eq!(share.seen(&held, &ar(), &meta("12", "a_1", Some("b_2"))), Seen::Stale);
        assert_eq!(share.seen(&held, &ar(), &meta("20", "a_1", None)), Seen::Ours);
        assert!(!share.leaving(&held));
    }

    #[test]
    fn a_move_called_off_keeps_the_object_and_a_release_waits_for_runs_started_before_it() {
        let share = share();
        let held = Held::of(&ar(), "ns", "x");
        assert_eq!(share.seen(&held, &ar(), &meta("11", "a_1", Some("b_2"))), Seen::Leaving);
        assert_eq!(share.seen(&held, &ar(), &meta("12", "a_1", None)), Seen::Back);
        assert!(!share.leaving(&held));
        assert_eq!(share.seen(&held, &ar(), &meta("13", "a_1", None)), Seen::Ours);

        let before = share.enter();
        let generation = {
            let mut inner = share.lock();
            inner.generation += 1;
            inner.generation
        };
        let after = share.enter();
        assert!(share.lock().running.range(..generation).next().is_some());
        drop(after);
        assert!(share.lock().running.range(..generation).next().is_some());
        drop(before);
        assert!(share.lock().running.range(..generation).next().is_none());
    }
}
