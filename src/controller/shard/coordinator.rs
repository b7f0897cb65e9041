//! The ring's coordinator: one member at a time (elected by the Lease named after the ring) decides
//! which member each parent belongs to and writes it in the parent's labels, following the members'
//! Leases and a metadata watch of every parent type the process reconciles.
//!
//! The ring hashes members' names, so that a member restarted under its name gets the same share; the
//! labels name incarnations (the process holding each member's Lease, `rules::shard`).
//!
//! - A parent with no member's label gets the incarnation holding the Lease of the member the ring gives
//!   it, as soon as the watch shows it.
//! - A parent whose incarnation is live but is no longer the ring's choice is drained: the drain label
//!   names the new incarnation, and the old one lets go (`engine::handover`); once its label is gone, the
//!   first case applies.
//! - A parent whose incarnation is gone (its Lease released or now held by another process, or not
//!   renewed for a lease duration as seen by this coordinator's clock, or never seen in a lease duration
//!   since this coordinator started) is labelled for the new one at once: a process stops writing at its
//!   renew deadline, which is shorter, and a new process of the same member name is a new incarnation,
//!   so it gets nothing of the old one's before this move.
//!
//! It decides only on a view of the Leases read within the last retry period: after any longer gap in
//! its own loop (a freeze, a slow list), it reads them again first, so that a member that joined or
//! renewed meanwhile is never taken for gone.
//!
//! Every write is a merge patch guarded by the resourceVersion the decision was made on, so two
//! coordinators (an old one not yet aware it lost its Lease) can never undo each other, and a parent
//! that changed in between is decided again from the watch's newer copy; and none is sent once the
//! coordinator's own Lease is past its renew deadline (its `fence`).

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{SelectAll, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, ApiResource, ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::cluster::scope;
use crate::controller::drive::place::{Place, place};
use crate::controller::drive::watch::hub::Hub;
use crate::controller::engine::fence::Fence;
use crate::controller::engine::request::{Failed, Fenced, bounded};
use crate::controller::rules::adoption::{ANNOTATION, Adoptions, Published};
use crate::controller::rules::ring::Ring;
use crate::controller::rules::shard::{RING_LABEL, drain_label, lease_prefix, member_label};
use crate::controller::shard::controllers::{Controller, Controllers, Set, Shares};
use crate::controller::shard::renewals::{Record, Renewals, record_of};

/// How many times a retry period the ring's Leases are listed while a member is silent.
pub const HURRY: u32 = 4;

/// How many renewals in a row (one every retry period) a member misses before the others get ready to
/// serve its parents, if its renew deadline has not come first. Getting ready is a watch, not a write,
/// so it need not wait for the member to have stopped itself: at 100,000 Samples the watch of a third
/// of them took 10 s to list, and began only at the renew deadline, 10 s after the last renewal.
const SILENT_AFTER_RENEWALS: u32 = 3;

/// How many label writes the coordinator has in flight at once (a join moves about 1/N of the parents).
const WRITES: usize = 32;

/// How many lease durations a member must have been gone before its Lease is deleted (once no parent
/// names it): a minute with the default 15 s.
const FORGET_AFTER_LEASES: u32 = 4;

/// The field manager of the coordinator's label writes, so that an audit log (the request's URI) and the
/// objects' managed fields tell them from the members' own writes.
pub const FIELD_MANAGER: &str = "samplectl-shard-coordinator";

/// What the coordinator knows of a parent: enough to decide, from its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parent {
    pub uid: String,
    pub version: String,
    /// Its controller takes it (its selectors select it, or it carries the controller's finalizer):
    /// a parent it does not take is not labelled, but one labelled already still moves with the ring.
    pub taken: bool,
    /// The incarnation its label names.
    pub member: Option<String>,
    /// The incarnation it is being moved to.
    pub drain: Option<String>,
    /// When the coordinator's watch showed it like this.
    pub seen: Instant,
    /// The turn of the live members and records (`Coordinator::run`'s epoch) in which it was found to
    /// need nothing: no move, and no member to give up. That holds until the parent, the live members
    /// or the records change, so the pass each retry period leaves it out until then.
    pub settled: Option<u64>,
}

impl Parent {
    fn of(meta: &ObjectMeta, ring: &str, taken: bool) -> Self {
        let label = |key: String| meta.labels.as_ref().and_then(|l| l.get(&key)).cloned();
        Parent {
            uid: meta.uid.clone().unwrap_or_default(),
            version: meta.resource_version.clone().unwrap_or_default(),
            taken,
            member: label(member_label(ring)),
            drain: label(drain_label(ring)),
            seen: Instant::now(),
            settled: None,
        }
    }
}

/// A write the coordinator makes to a parent's labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Move {
    /// Label it for this incarnation (and drop any drain label): it has none, or its own is gone.
    Assign(String),
    /// Ask its incarnation to let go of it, for this one.
    Drain(String),
    /// The move is off (the ring changed back): drop the drain label.
    Stay,
}

/// The ring of live members, and the incarnation holding each one's Lease.
#[derive(Debug, Default)]
pub struct View {
    pub ring: Ring,
    pub holders: HashMap<String, String>,
}

impl View {
    fn live(&self, incarnation: &str) -> bool {
        self.holders.values().any(|h| h == incarnation)
    }
}

/// What to write to `parent`, if anything, given the live members and the adoption records.
///
/// A parent labelled for an incarnation out of the ring waits until that incarnation has a record
/// (made by the coordinator's loop once it is surely stopped), and is then labelled for whom the
/// records lead to, if that one is live: that member is serving it already, and is drained as any
/// live member if the ring wants the parent elsewhere.
pub fn decide(parent: &Parent, view: &View, adoptions: &Adoptions) -> Option<Move> {
    let wanted = view.holders.get(view.ring.owner(&parent.uid)?)?;
    match &parent.member {
        None if !parent.taken => None,
        None => Some(Move::Assign(wanted.to_owned())),
        Some(member) if member == wanted => parent.drain.is_some().then_some(Move::Stay),
        Some(member) if view.live(member) => {
            (parent.drain.as_deref() != Some(wanted)).then(|| Move::Drain(wanted.to_owned()))
        }
        Some(member) => {
            let adopter = adoptions.resolve(member, &parent.uid)?;
            (adopter != member && view.live(adopter)).then(|| Move::Assign(adopter.to_owned()))
        }
    }
}

/// The incarnation `parent`'s adoption records end at when it is out of the ring and has no record
/// yet: the one the coordinator records once it is surely stopped.
fn unrecorded<'a>(parent: &'a Parent, view: &View, adoptions: &'a Adoptions) -> Option<&'a str> {
    let end = adoptions.resolve(parent.member.as_deref()?, &parent.uid)?;
    (!view.live(end)).then_some(end)
}

/// The merge patch that makes `the_move`, guarded by `version`.
fn patch(the_move: &Move, ring: &str, version: &str) -> Value {
    let labels = match the_move {
        Move::Assign(member) => json!({member_label(ring): member, drain_label(ring): Value::Null}),
        Move::Drain(member) => json!({drain_label(ring): member}),
        Move::Stay => json!({drain_label(ring): Value::Null}),
    };
    json!({"metadata": {"resourceVersion": version, "labels": labels}})
}

/// The members as their Leases show them, each Lease's record judged by this coordinator's own clock
/// (as leader election judges a Lease): live while it has a holder and its record changes at least once
/// a lease duration. A member is its Lease's name (after `<ring>.`); the holder is an incarnation.
///
/// Whether an incarnation is gone is judged from lists *sent* late enough, never from the time alone: a
/// coordinator that froze, or whose lists come late, has seen no renewal meanwhile, and by the clock
/// alone would take live members for gone.
#[derive(Debug)]
pub struct Members {
    started: Instant,
    lease_duration: Duration,
    /// Per member: its Lease's last record (holder, renew time, duration) and when it was seen to change.
    seen: HashMap<String, (Record, Instant)>,
    /// Incarnations seen to hold a Lease and then let it go or lose it to another: stopped for good.
    ended: HashMap<String, Instant>,
    /// When the latest list taken in was sent: the Leases were at least as recent as that.
    listed: Option<Instant>,
}

impl Members {
    pub fn new(lease_duration: Duration, now: Instant) -> Self {
        Members { started: now, lease_duration, seen: HashMap::new(), ended: HashMap::new(), listed: None }
    }

    /// Takes in the ring's Leases as a list sent at `sent` showed them, at `now`: per member, its record.
    /// A Lease no longer listed keeps its last record, and so runs out like one not renewed; once run
    /// out, it is forgotten. (The coordinator deletes a Lease only once its member is long gone: kept,
    /// its holder would be silent for ever in every member, and the ring failing over for ever.)
    ///
    /// `sighted` tells when a record new to this list was first seen before it (by the watch of the
    /// ring's Leases, `Renewals`): the record was written by then, so its renewal is dated from then. A
    /// renewal dated from the list that brings it is dated up to a retry period late, and the member
    /// given up that much later.
    pub fn observe_sighted(
        &mut self,
        leases: impl IntoIterator<Item = (String, Record)>,
        sent: Instant,
        now: Instant,
        sighted: impl Fn(&str, &Record) -> Option<Instant>,
    ) {
        let mut listed = HashSet::new();
        for (member, record) in leases {
            listed.insert(member.clone());
            let record = (record.0.filter(|h| !h.is_empty()), record.1, record.2);
            let since = sighted(&member, &record).map_or(now, |at| at.min(now));
            let entry = self.seen.entry(member).or_insert_with(|| (record.clone(), since));
            if entry.0 != record {
                if let Some(before) = entry.0.0.as_ref().filter(|before| record.0.as_ref() != Some(before)) {
                    self.ended.insert(before.clone(), now);
                }
                *entry = (record, since);
            }
        }
        self.listed = self.listed.max(Some(sent));
        let unlisted: Vec<String> =
            self.seen.keys().filter(|m| !listed.contains(*m) && !self.live(m, now)).cloned().collect();
        for member in unlisted {
            self.seen.remove(&member);
        }
        // An incarnation ended long ago would be judged gone by the rule for the never seen anyway.
        let forget = self.lease_duration * FORGET_AFTER_LEASES;
        self.ended.retain(|_, at| now.duration_since(*at) < forget);
    }

    /// `observe_sighted` with no sightings: every record dated from the list that brings it.
    #[cfg(test)]
    fn observe(&mut self, leases: impl IntoIterator<Item = (String, Record)>, sent: Instant, now: Instant) {
        self.observe_sighted(leases, sent, now, |_, _| None);
    }

    /// When the latest list taken in was sent.
    pub fn listed(&self) -> Option<Instant> {
        self.listed
    }

    fn duration(&self, record: &Record) -> Duration {
        record.2.map_or(self.lease_duration, |s| Duration::from_secs(s.max(0) as u64))
    }

    /// Whether `member`'s Lease is held and was renewed within its duration.
    pub fn live(&self, member: &str, now: Instant) -> bool {
        self.seen
            .get(member)
            .is_some_and(|(record, since)| record.0.is_some() && now.duration_since(*since) <= self.duration(record))
    }

    /// Whether `incarnation`, named on a parent the watch showed at `named`, has surely stopped:
    /// - it was seen to release its Lease, or to lose it to another process;
    /// - or its Lease shows the same renewal in a list sent more than its duration after that renewal
    ///   was first seen: it missed its renew deadline (shorter) and stopped, and, since a process that
    ///   lost its Lease never takes it back, that list shows its last renewal;
    /// - or it holds no Lease in a list sent after the parent was seen naming it, and a lease duration
    ///   after this coordinator started (it held one when it was labelled, and holds none now).
    pub fn gone(&self, incarnation: &str, named: Instant) -> bool {
        if self.ended.contains_key(incarnation) {
            return true;
        }
        let Some(listed) = self.listed else { return false };
        match self.seen.values().find(|(record, _)| record.0.as_deref() == Some(incarnation)) {
            Some((record, since)) => listed.checked_duration_since(*since).is_some_and(|d| d > self.duration(record)),
            None => listed > named && listed.duration_since(self.started) > self.lease_duration,
        }
    }

    /// For how long `member`'s Lease, seen, has surely been without a live holder.
    pub fn gone_for(&self, member: &str, now: Instant) -> Option<Duration> {
        let (record, since) = self.seen.get(member)?;
        let stopped = match record.0.is_some() {
            true => *since + self.duration(record),
            false => *since,
        };
        now.checked_duration_since(stopped).filter(|_| !self.live(member, now))
    }

    /// The incarnations holding a Lease that has not been seen renewed for longer than `after`.
    pub fn silent(&self, after: Duration, now: Instant) -> BTreeSet<String> {
        self.seen
            .values()
            .filter(|(_, since)| now.duration_since(*since) > after)
            .filter_map(|(record, _)| record.0.clone())
            .collect()
    }

    /// The incarnation that last held `member`'s Lease, as seen.
    pub fn holder(&self, member: &str) -> Option<&str> {
        self.seen.get(member).and_then(|(record, _)| record.0.as_deref())
    }

    /// Stops following a member whose Lease was deleted.
    pub fn forget(&mut self, member: &str) {
        self.seen.remove(member);
    }

    /// The incarnations holding a Lease renewed within its duration.
    pub fn live_holders(&self, now: Instant) -> BTreeSet<String> {
        self.seen.keys().filter(|m| self.live(m, now)).filter_map(|m| self.holder(m)).map(str::to_owned).collect()
    }

    /// The live members' ring, and who holds each one's Lease.
    pub fn view(&self, now: Instant) -> View {
        let live: Vec<&String> = self.seen.keys().filter(|m| self.live(m, now)).collect();
        let holders = live.iter().filter_map(|m| Some(((*m).clone(), self.holder(m)?.to_owned()))).collect();
        View { ring: Ring::new(&live), holders }
    }
}

/// The coordinator's settings.
pub struct Coordinator {
    pub client: Client,
    pub hub: Arc<Hub>,
    pub ring: String,
    pub lease_namespace: String,
    pub lease_duration: Duration,
    /// Past this long unrenewed, a member's Lease is silent whatever the retry period (`silent_after`).
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    /// The controllers the process runs, each with the namespace it reconciles (all when `None`), as
    /// they are now: a controller object started later is followed from then on.
    pub controllers: Controllers,
    /// Open while this replica holds the coordinator's Lease, until the renew deadline.
    pub fence: Fence,
    /// The adoption records as every list of the ring's Leases shows them, for this member's contexts.
    pub records: watch::Sender<Published>,
    /// The records this coordinator wants written, for a term of its Lease: its renewals write them.
    pub publish: watch::Sender<Option<(u64, String)>>,
    /// When each Lease's latest record was first seen, by a watch of the ring's Leases.
    pub renewals: Renewals,
}

/// A parent of one controller: the controller's id in the set, and the parent's place.
type Key = (u64, Place);

/// The parents' metadata of every controller followed.
type Feeds = SelectAll<futures::stream::BoxStream<'static, (u64, watcher::Event<ObjectMeta>)>>;

/// A controller whose parents are followed, until `_stop` is dropped.
struct Followed {
    shares: Arc<dyn Shares>,
    _stop: oneshot::Sender<()>,
}

/// The ring's Leases as listed (by member: record and resourceVersion), the adoption records on the
/// coordinator's Lease, and when the list was sent.
type Listing = (Vec<(String, Record, String)>, Adoptions, Instant);

impl Coordinator {
    /// Lists the ring's Leases: by member, each one's record and resourceVersion, and when the list was
    /// sent. A future of its own, so that the coordinator's loop runs it beside its watches (a loop busy
    /// with a request stops reading its feeds, and a full feed holds up every reader of the hub).
    fn list_leases(&self) -> impl Future<Output = anyhow::Result<Listing>> + Send + use<> {
        let api: Api<Lease> = scope::api(self.client.clone(), Some(&self.lease_namespace));
        let lp = ListParams::default().labels(&format!("{RING_LABEL}={}", self.ring));
        let prefix = lease_prefix(&self.ring);
        async move {
            let sent = Instant::now();
            let leases = bounded(api.list(&lp)).await?;
            let adoptions = leases
                .items
                .iter()
                .find(|lease| lease.metadata.name.as_deref() == Some(prefix.trim_end_matches('.')))
                .and_then(|lease| lease.metadata.annotations.as_ref()?.get(ANNOTATION))
                .map(|value| Adoptions::parse(Some(value)))
                .unwrap_or_default();
            let leases = leases
                .items
                .iter()
                .filter_map(|lease| {
                    let (member, record) = record_of(lease, &prefix)?;
                    Some((member, record, lease.metadata.resource_version.clone().unwrap_or_default()))
                })
                .collect();
            Ok((leases, adoptions, sent))
        }
    }

    /// Takes in the ring's Leases as listed, and shows this member's contexts the adoption records;
    /// returns each Lease's resourceVersion, by member, and the records.
    fn take(&self, members: &mut Members, (leases, adoptions, sent): Listing) -> (Vec<(String, String)>, Adoptions) {
        let versions = leases.iter().map(|(member, _, version)| (member.clone(), version.clone())).collect();
        let leases = leases.into_iter().map(|(member, record, _)| (member, record));
        members.observe_sighted(leases, sent, Instant::now(), |member, record| self.renewals.sighted(member, record));
        let silent = members.silent(self.silent_after(), Instant::now());
        let live = members.live_holders(Instant::now());
        self.records.send_if_modified(|published| {
            published.read = published.read.max(Some(sent.into_std()));
            // Who is live matters only to the stray lists, which read it when they run: no news for the
            // watchers of the records.
            published.live = live;
            let changed = *published.adoptions != adoptions || published.silent != silent;
            if changed {
                if *published.adoptions != adoptions {
                    tracing::info!(ring = self.ring, "the ring's adoption records: {}", adoptions.describe());
                }
                published.adoptions = Arc::new(adoptions.clone());
                published.silent = silent;
            }
            changed
        });
        (versions, adoptions)
    }

    /// How long a member's Lease may go unrenewed before this member gets ready to serve its parents:
    /// [`SILENT_AFTER_RENEWALS`] retry periods, or the renew deadline if that is sooner.
    fn silent_after(&self) -> Duration {
        (self.retry_period * SILENT_AFTER_RENEWALS).min(self.renew_deadline)
    }

    /// Whether the ring's Leases are to be listed again, the last list having been sent at `last` (set
    /// to now when they are): every retry period, and `HURRY` times as often while a member has gone
    /// unrenewed past a renew deadline, so that its end is seen, and its record read, sooner.
    pub fn list_due(&self, last: &mut Option<Instant>) -> bool {
        let hurry = !self.records.borrow().silent.is_empty();
        let every = if hurry { self.retry_period / HURRY } else { self.retry_period };
        let now = Instant::now();
        // A tick can come a little early: what is due within a few milliseconds is due.
        let due = last.is_none_or(|at| now + Duration::from_millis(5) >= at + every);
        if due {
            *last = Some(now);
        }
        due
    }

    /// Lists the ring's Leases and takes them in (a standby following them, with nothing else to do).
    pub async fn observe(&self, members: &mut Members) -> anyhow::Result<Vec<(String, String)>> {
        let listing = self.list_leases().await?;
        Ok(self.take(members, listing).0)
    }

    /// The Leases to delete, with the resourceVersion each was listed at: of members gone for
    /// `FORGET_AFTER_LEASES` lease durations whose last holder no parent names any more (a
    /// Deployment's pods get new names, so each one that died would leave its Lease behind for good).
    fn forgettable(
        &self,
        members: &Members,
        parents: &HashMap<Key, Parent>,
        versions: Vec<(String, String)>,
    ) -> Vec<(String, String)> {
        let (now, after) = (Instant::now(), self.lease_duration * FORGET_AFTER_LEASES);
        let mut forgotten = versions.into_iter().filter(|(member, _)| members.gone_for(member, now) >= Some(after));
        let Some(first) = forgotten.next() else { return Vec::new() };
        let named: HashSet<&str> =
            parents.values().flat_map(|p| p.member.iter().chain(&p.drain)).map(String::as_str).collect();
        std::iter::once(first)
            .chain(forgotten)
            .filter(|(member, _)| !members.holder(member).is_some_and(|holder| named.contains(holder)))
            .collect()
    }

    /// Deletes a member's Lease, guarded by the resourceVersion listed, so that a member that came back
    /// in between keeps its Lease; the member, when it went.
    fn forget(&self, (member, version): (String, String)) -> impl Future<Output = Option<String>> + Send + use<> {
        let api: Api<Lease> = scope::api(self.client.clone(), Some(&self.lease_namespace));
        let (name, ring, fence) = (lease_prefix(&self.ring) + &member, self.ring.clone(), self.fence.clone());
        async move {
            let params = kube::api::DeleteParams {
                preconditions: Some(kube::api::Preconditions { resource_version: Some(version), uid: None }),
                ..Default::default()
            };
            match Fenced::new(api, &fence).delete(&name, &params).await {
                Ok(()) => {
                    tracing::info!(ring, "deleted the Lease of {member}, gone and holding nothing");
                    Some(member)
                }
                Err(failed) if matches!(failed.status(), Some(404 | 409)) || matches!(failed, Failed::Fenced) => None,
                Err(failed) => {
                    tracing::warn!(ring, "cannot delete the Lease {name}: {}", failed.message());
                    None
                }
            }
        }
    }

    /// Coordinates until `stop` turns true, judging the members' Leases by what `members` has seen of
    /// them: a replica follows them from its start, also while another one coordinates, so that when it
    /// takes over it already knows how long each has been silent (a member that died with the old
    /// coordinator is given up on a lease duration after it died, not after the takeover).
    ///
    /// `term` is the term of the coordinator's Lease it coordinates in: the adoption records it makes
    /// are written by that term's renewals only.
    pub async fn run(&self, members: &mut Members, term: u64, mut stop: watch::Receiver<bool>) {
        let mut feeds = Feeds::new();
        let mut parents: HashMap<Key, Parent> = HashMap::new();
        let mut set = self.controllers.follow();
        let mut followed: HashMap<u64, Followed> = HashMap::new();
        let now = set.borrow_and_update().clone();
        self.follow(&now, &mut followed, &mut feeds, &mut parents);
        // The parents to decide, in order, each once; a pass is queued every retry period when none is
        // under way, since members run out with time alone. It leaves out the parents settled in this
        // epoch, which turns whenever the live members or the records change: what `decide` and
        // `unrecorded` read, besides the parent. (At 100,000 parents a pass over all of them took a
        // tenth of a second, every retry period, with nothing to do.)
        let mut pending = Pending::default();
        let mut epoch: u64 = 0;
        let mut writing: HashSet<Key> = HashSet::new();
        let mut writes: JoinSet<(Key, Result<(), String>)> = JoinSet::new();
        // The Lease list under way (at most one), and the Lease deletions.
        let mut listing: JoinSet<anyhow::Result<Listing>> = JoinSet::new();
        let mut forgetting: JoinSet<Option<String>> = JoinSet::new();
        // The live members, as the Leases last read show them.
        let mut view: Option<View> = None;
        // The adoption records, as the first list of this term found them and as decided since (`None`
        // until that list), and when each was made or retired.
        let (mut adoptions_now, mut records): (Option<Adoptions>, Records) = (None, Records::default());
        // The controllers whose parents have been listed once.
        let mut listed_once: HashSet<u64> = HashSet::new();
        let mut tick = tokio::time::interval(self.retry_period / HURRY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_list = None;
        // When the loop last turned, and, after it stood still, the time a list must be sent after.
        let (mut last_turn, mut fresh_after) = (Instant::now(), None);
        loop {
            let mut decide_all = false;
            tokio::select! {
                _ = tick.tick() => {
                    if listing.is_empty() && self.list_due(&mut last_list) {
                        listing.spawn(self.list_leases());
                    }
                }
                Some(listed) = listing.join_next() => {
                    match listed.map_err(anyhow::Error::from).and_then(|l| l).map(|l| self.take(members, l)) {
                        Ok((versions, listed_records)) => {
                            let adoptions = adoptions_now.get_or_insert(listed_records);
                            let complete = followed.keys().all(|id| listed_once.contains(id));
                            if records.retire(adoptions, &parents, complete, self.lease_duration) {
                                self.publish_records(term, adoptions);
                                epoch += 1;
                            }
                            // Whether a parent names a Lease's holder is known only from complete lists
                            // (the parents come in as they are listed).
                            if forgetting.is_empty() && complete {
                                for lease in self.forgettable(members, &parents, versions) {
                                    forgetting.spawn(self.forget(lease));
                                }
                            }
                            let next = members.view(Instant::now());
                            let changed = view.as_ref().is_none_or(|v| v.holders != next.holders);
                            if changed {
                                tracing::info!(ring = self.ring, "shard ring members: {}", describe(&next));
                                epoch += 1;
                            }
                            view = Some(next);
                            decide_all = changed || pending.is_empty();
                        }
                        Err(err) => tracing::warn!(
                            ring = self.ring,
                            "cannot list the ring's Leases: {}",
                            crate::error::describe_any(&err)
                        ),
                    }
                }
                Some(Ok(Some(member))) = forgetting.join_next() => members.forget(&member),
                Ok(()) = set.changed() => {
                    let now = set.borrow_and_update().clone();
                    self.follow(&now, &mut followed, &mut feeds, &mut parents);
                }
                Some((id, event)) = feeds.next() => match event {
                    watcher::Event::Apply(meta) | watcher::Event::InitApply(meta) => {
                        // A controller stopped since: its feed's last events are of no use.
                        if let Some(controller) = followed.get(&id) {
                            let key = (id, place(&meta));
                            let taken = controller.shares.takes(&meta);
                            parents.insert(key.clone(), Parent::of(&meta, &self.ring, taken));
                            pending.first(key);
                        }
                    }
                    watcher::Event::Delete(meta) => {
                        parents.remove(&(id, place(&meta)));
                    }
                    watcher::Event::InitDone => {
                        listed_once.insert(id);
                        decide_all = true;
                    }
                    watcher::Event::Init => {}
                },
                Some(done) = writes.join_next(), if !writes.is_empty() => {
                    if let Ok((key, result)) = done {
                        writing.remove(&key);
                        if let Err(message) = result {
                            tracing::warn!(ring = self.ring, "cannot label {}: {message}", key.1);
                        }
                    }
                }
                () = async { drop(stop.wait_for(|s| *s).await) } => return,
            }
            if decide_all {
                pending.all(parents.iter().filter(|(_, p)| p.settled != Some(epoch)).map(|(key, _)| key));
            }
            // The loop turns at least once a retry period (its tick): a longer gap since the last turn
            // (beyond a retry period of slack) means this process froze or its loop was held up, and
            // nothing is decided again before the ring's Leases are read anew.
            let now = Instant::now();
            if now.duration_since(last_turn) > 2 * self.retry_period {
                tracing::info!(ring = self.ring, "the coordinator's loop stood still; reading the ring again first");
                fresh_after = Some(now);
                if listing.is_empty() {
                    tick.reset_immediately();
                }
            }
            last_turn = now;
            if fresh_after.is_some_and(|after| members.listed().is_none_or(|listed| listed < after)) {
                continue;
            }
            fresh_after = None;
            // Nothing is decided before the ring's Leases were read once.
            let (Some(view), Some(adoptions)) = (&view, adoptions_now.as_mut()) else { continue };
            while writing.len() < WRITES {
                let Some(key) = pending.pop() else { break };
                let (Some(parent), Some(controller)) = (parents.get(&key), followed.get(&key.0)) else { continue };
                if writing.contains(&key) {
                    continue;
                }
                // A parent of an incarnation surely stopped and not recorded yet: its parents are given to
                // the live members now, all at once, and served by them before any is relabelled.
                let gone = unrecorded(parent, view, adoptions);
                let settles = gone.is_none();
                if let Some(gone) = gone
                    && records.may_record(gone)
                    && members.gone(gone, parent.seen)
                {
                    let gone = gone.to_owned();
                    if records.record(adoptions, &gone, view) {
                        self.publish_records(term, adoptions);
                        epoch += 1;
                        tracing::info!(ring = self.ring, "{gone} is gone; its parents go to {}", describe(view));
                    }
                }
                // Adopted parents are relabelled only once their adopters have had a lease duration to read
                // the record and catch up: the relabelling (a write per parent and per child, and a list
                // per parent when its adopter takes it in) would compete with them for the API server.
                if controller.shares.adopts()
                    && parent.member.as_deref().is_some_and(|m| records.fresh(m, self.lease_duration))
                {
                    continue;
                }
                let Some(the_move) = decide(parent, view, adoptions) else {
                    if settles {
                        parents.entry(key).and_modify(|p| p.settled = Some(epoch));
                    }
                    continue;
                };
                writing.insert(key.clone());
                let ar = controller.shares.resource().clone();
                writes.spawn(self.write(key, ar, the_move, parent.version.clone()));
            }
        }
    }

    /// Has the renewals of the coordinator's Lease in `term` write `adoptions`.
    fn publish_records(&self, term: u64, adoptions: &Adoptions) {
        self.publish.send_replace(Some((term, adoptions.to_annotation())));
    }

    /// Follows the parents of the controllers in `now` not followed yet, and stops following (and
    /// forgets the parents of) those no longer in it.
    fn follow(
        &self,
        now: &Set,
        followed: &mut HashMap<u64, Followed>,
        feeds: &mut Feeds,
        parents: &mut HashMap<Key, Parent>,
    ) {
        let gone: Vec<u64> = followed.keys().filter(|id| !now.contains_key(id)).copied().collect();
        for id in &gone {
            followed.remove(id);
        }
        if !gone.is_empty() {
            parents.retain(|(id, _), _| !gone.contains(id));
        }
        let new: Vec<(&u64, &Controller)> = now.iter().filter(|(id, _)| !followed.contains_key(id)).collect();
        for (id, (shares, namespace)) in new {
            let (ar, namespace) = (shares.resource(), namespace.as_deref());
            let (labels, fields) = shares.watched();
            // The hub's metadata feeds keep no annotations; a controller that selects by them is fed whole
            // objects.
            let events = match shares.needs_annotations() {
                true => self.hub.objects_with_fields(ar, namespace, &labels, &fields).1.map(metadata).boxed(),
                false => self.hub.metadata_with_fields(ar, namespace, &labels, &fields).map(metadata).boxed(),
            };
            let (stop, stopped) = oneshot::channel();
            let id = *id;
            feeds.push(events.take_until(stopped).map(move |event| (id, event)).boxed());
            followed.insert(id, Followed { shares: shares.clone(), _stop: stop });
        }
    }

    /// Makes `the_move` on the parent at `key` (of the type `ar`), as it was at `version`.
    fn write(
        &self,
        key: Key,
        ar: ApiResource,
        the_move: Move,
        version: String,
    ) -> impl Future<Output = (Key, Result<(), String>)> + use<> {
        let namespace = Some(&*key.1.namespace).filter(|ns| !ns.is_empty());
        let api = scope::dynamic(self.client.clone(), &ar, namespace);
        let body = patch(&the_move, &self.ring, &version);
        let ring = self.ring.clone();
        let fence = self.fence.clone();
        async move {
            let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..PatchParams::default() };
            let result = match Fenced::new(api, &fence).patch(&key.1.name, &params, &Patch::Merge(&body)).await {
                Ok(_) => {
                    tracing::debug!(ring, "{}: {the_move:?}", key.1);
                    Ok(())
                }
                // Changed or gone since: the watch brings what it is now, and it is decided again.
                Err(failed) if matches!(failed.status(), Some(404 | 409)) => Ok(()),
                Err(Failed::Fenced) => {
                    Err("not sent: the coordinator's Lease was not renewed within its renew deadline".into())
                }
                Err(failed) => Err(failed.message()),
            };
            (key, result)
        }
    }
}

/// The records as this coordinator keeps them: when each was made (or found) and which were retired.
#[derive(Default)]
struct Records {
    since: HashMap<String, Instant>,
    retired: HashMap<String, Instant>,
}

impl Records {
    /// Whether `gone` may be recorded: not within a lease duration (and a retry period) of its record's
    /// retirement, while a member may still act on a view read before it.
    fn may_record(&self, gone: &str) -> bool {
        !self.retired.contains_key(gone)
    }

    /// Whether `gone`'s record was made (or found) less than `hold` ago.
    fn fresh(&self, gone: &str, hold: Duration) -> bool {
        self.since.get(gone).is_some_and(|since| since.elapsed() < hold)
    }

    /// Records that `gone`'s parents go to the live members of `view`.
    fn record(&mut self, adoptions: &mut Adoptions, gone: &str, view: &View) -> bool {
        let members = view.holders.iter().map(|(m, i)| (m.clone(), i.clone())).collect();
        let added = adoptions.add(gone, members);
        if added {
            self.since.insert(gone.to_owned(), Instant::now());
        }
        added
    }

    /// Retires the records no parent needs any more: none carries the label, every controller's parents
    /// were listed (`complete`), and the record is older than `FORGET_AFTER_LEASES` lease durations. A
    /// retired label is not recorded again for a lease duration after (see `may_record`). Whether any was.
    fn retire(
        &mut self,
        adoptions: &mut Adoptions,
        parents: &HashMap<Key, Parent>,
        complete: bool,
        lease_duration: Duration,
    ) -> bool {
        let now = Instant::now();
        self.retired.retain(|_, at| now.duration_since(*at) < 2 * lease_duration);
        if adoptions.is_empty() || !complete {
            return false;
        }
        let named: HashSet<&str> =
            parents.values().flat_map(|p| p.member.iter().chain(&p.drain)).map(String::as_str).collect();
        let mut old = |gone: &str| {
            let since = *self.since.entry(gone.to_owned()).or_insert(now);
            now.duration_since(since) > lease_duration * FORGET_AFTER_LEASES
        };
        let done: Vec<String> = adoptions.gone().filter(|g| !named.contains(g) && old(g)).map(str::to_owned).collect();
        for gone in &done {
            adoptions.retire(gone);
            self.since.remove(gone);
            self.retired.insert(gone.clone(), now);
        }
        !done.is_empty()
    }
}

/// A watch event of objects as one of their metadata.
fn metadata<K: kube::Resource>(event: watcher::Event<K>) -> watcher::Event<ObjectMeta> {
    match event {
        watcher::Event::Apply(object) => watcher::Event::Apply(object.meta().clone()),
        watcher::Event::Delete(object) => watcher::Event::Delete(object.meta().clone()),
        watcher::Event::InitApply(object) => watcher::Event::InitApply(object.meta().clone()),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// The parents waiting to be decided, in order, each at most once.
#[derive(Default)]
struct Pending {
    order: VecDeque<Key>,
    queued: HashSet<Key>,
}

impl Pending {
    /// `key` to be decided before the others (a change the watch just showed), unless it waits already:
    /// it is decided on the parent as it is when its turn comes.
    fn first(&mut self, key: Key) {
        if self.queued.insert(key.clone()) {
            self.order.push_front(key);
        }
    }

    /// Every parent, to be decided again.
    fn all<'a>(&mut self, keys: impl Iterator<Item = &'a Key>) {
        self.order = keys.cloned().collect();
        self.queued = self.order.iter().cloned().collect();
    }

    fn pop(&mut self) -> Option<Key> {
        let key = self.order.pop_front()?;
        self.queued.remove(&key);
        Some(key)
    }

    fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

fn describe(view: &View) -> String {
    match view.ring.members() {
        [] => "none".into(),
        members => members.iter().map(|m| view.holders.get(m).unwrap_or(m).as_str()).collect::<Vec<_>>().join(", "),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn parent(uid: &str, member: Option<&str>, drain: Option<&str>) -> Parent {
        let (member, drain) = (member.map(Into::into), drain.map(Into::into));
        Parent { uid: uid.into(), version: "7".into(), taken: true, member, drain, seen: Instant::now(), settled: None }
    }

    /// Members `a` and `b`, held by the incarnations `a_1` and `b_1`.
    fn view() -> View {
        let holders = HashMap::from([("a".into(), "a_1".into()), ("b".into(), "b_1".into())]);
        View { ring: Ring::new(&["a", "b"]), holders }
    }

    /// A uid the ring of `view` gives to `wanted`.
    fn uid_for(view: &View, wanted: &str) -> String {
        (0..).map(|i| format!("uid-{i}")).find(|uid| view.ring.owner(uid) == Some(wanted)).unwrap()
    }

    #[test]
    fn a_parent_moves_only_by_drain_from_a_live_incarnation_and_by_record_from_a_gone_one() {
        let view = view();
        let uid = uid_for(&view, "b");
        let none = Adoptions::default();
        // Unlabelled: assigned to the incarnation holding b's Lease.
        assert_eq!(decide(&parent(&uid, None, None), &view, &none), Some(Move::Assign("b_1".into())));
        // Where it belongs: nothing, or the drain called off.
        assert_eq!(decide(&parent(&uid, Some("b_1"), None), &view, &none), None);
        assert_eq!(decide(&parent(&uid, Some("b_1"), Some("a_1")), &view, &none), Some(Move::Stay));
        // On a live incarnation that is no longer its: drained, once.
        assert_eq!(decide(&parent(&uid, Some("a_1"), None), &view, &none), Some(Move::Drain("b_1".into())));
        assert_eq!(decide(&parent(&uid, Some("a_1"), Some("b_1")), &view, &none), None);
        assert_eq!(decide(&parent(&uid, Some("a_1"), Some("c_1")), &view, &none), Some(Move::Drain("b_1".into())));
        // On an incarnation out of the ring: it waits for that incarnation's record.
        assert_eq!(decide(&parent(&uid, Some("dead_1"), None), &view, &none), None);
        assert_eq!(unrecorded(&parent(&uid, Some("dead_1"), None), &view, &none), Some("dead_1"));
        assert_eq!(unrecorded(&parent(&uid, Some("a_1"), None), &view, &none), None, "live");
        // Recorded: labelled for its adopter, who serves it already, even where the ring wants it
        // elsewhere (it is drained from there after).
        let mut records = Adoptions::default();
        records.add("dead_1", BTreeMap::from([("a".into(), "a_1".into())]));
        assert_eq!(
            decide(&parent(&uid, Some("dead_1"), Some("b_1")), &view, &records),
            Some(Move::Assign("a_1".into()))
        );
        assert_eq!(unrecorded(&parent(&uid, Some("dead_1"), None), &view, &records), None);
        // An adopter gone too: the parent waits for the adopter's own record.
        records.add("old_1", BTreeMap::from([("gone".into(), "gone_1".into())]));
        assert_eq!(decide(&parent(&uid, Some("old_1"), None), &view, &records), None);
        assert_eq!(unrecorded(&parent(&uid, Some("old_1"), None), &view, &records), Some("gone_1"));
        records.add("gone_1", BTreeMap::from([("b".into(), "b_1".into())]));
        assert_eq!(decide(&parent(&uid, Some("old_1"), None), &view, &records), Some(Move::Assign("b_1".into())));
        // Not taken by its controller: not labelled, but moved if it is labelled already.
        let untaken = |member: Option<&str>| Parent { taken: false, ..parent(&uid, member, None) };
        assert_eq!(decide(&untaken(None), &view, &none), None);
        assert_eq!(decide(&untaken(Some("a_1")), &view, &none), Some(Move::Drain("b_1".into())));
        // No live member: nothing to do.
        assert_eq!(decide(&parent(&uid, None, None), &View::default(), &none), None);
    }

    #[test]
    fn a_record_is_retired_once_no_parent_needs_it_and_not_made_again_for_a_while() {
        let lease = Duration::from_millis(20);
        let mut records = Records::default();
        let mut adoptions = Adoptions::default();
        assert!(records.record(&mut adoptions, "dead_1", &view()));
        assert!(!records.record(&mut adoptions, "dead_1", &view()), "made once");
        let key = (0, Place::new("ns", "p"));
        let named = HashMap::from([(key.clone(), parent("u", Some("dead_1"), None))]);
        let relabelled = HashMap::from([(key, parent("u", Some("a_1"), None))]);
        std::thread::sleep(lease * (FORGET_AFTER_LEASES + 1));
        assert!(!records.retire(&mut adoptions, &named, true, lease), "a parent still carries the label");
        assert!(!records.retire(&mut adoptions, &relabelled, false, lease), "some parents not listed yet");
        assert!(records.retire(&mut adoptions, &relabelled, true, lease));
        assert!(adoptions.is_empty() && !records.may_record("dead_1"));
        std::thread::sleep(lease * 2);
        records.retire(&mut adoptions, &relabelled, true, lease);
        assert!(records.may_record("dead_1"), "after the members' views of it have gone stale");
    }

    #[test]
    fn the_patches_are_guarded_by_the_version_read() {
        let assign = patch(&Move::Assign("b_1".into()), "r", "42");
        assert_eq!(
            assign,
            json!({"metadata": {"resourceVersion": "42", "labels": {
                "shard.samplectl.io/r": "b_1", "drain.shard.samplectl.io/r": null}}})
        );
        assert_eq!(
            patch(&Move::Drain("b_1".into()), "r", "1")["metadata"]["labels"],
            json!({"drain.shard.samplectl.io/r": "b_1"})
        );
        assert_eq!(patch(&Move::Stay, "r", "1")["metadata"]["labels"], json!({"drain.shard.samplectl.io/r": null}));
    }

    fn record(holder: Option<&str>, renewed: i64) -> Record {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
        let at = k8s_openapi::jiff::Timestamp::from_second(renewed).unwrap();
        (holder.map(Into::into), Some(MicroTime(at)), Some(15))
    }

    #[test]
    fn incarnations_are_gone_once_released_replaced_or_shown_unrenewed_by_a_list_sent_late_enough() {
        let start = Instant::now();
        let later = |s: u64| start + Duration::from_secs(s);
        let mut members = Members::new(Duration::from_secs(15), start);
        let listed = |members: &mut Members, leases: Vec<(&str, Record)>, at: Instant| {
            members.observe(leases.into_iter().map(|(m, r)| (m.to_owned(), r)), at, at)
        };
        listed(&mut members, vec![("a", record(Some("a_1"), 1)), ("b", record(Some("b_1"), 1))], start);
        assert_eq!(members.view(later(1)).ring.members(), ["a", "b"]);
        assert_eq!(members.view(later(1)).holders["a"], "a_1");
        // a renews, b does not.
        listed(&mut members, vec![("a", record(Some("a_1"), 11)), ("b", record(Some("b_1"), 1))], later(10));
        assert!(members.live("b", later(15)) && !members.gone("b_1", start));
        assert_eq!(members.silent(Duration::from_secs(10), later(10)), BTreeSet::new());
        assert_eq!(members.silent(Duration::from_secs(10), later(12)), BTreeSet::from(["b_1".to_owned()]));
        assert!(!members.live("b", later(16)), "not renewed for its duration: out of the ring");
        assert!(!members.gone("b_1", start), "but not gone before a list sent after its duration shows it so");
        listed(&mut members, vec![("a", record(Some("a_1"), 11)), ("b", record(Some("b_1"), 1))], later(16));
        assert!(members.gone("b_1", start));
        assert_eq!(members.view(later(16)).ring.members(), ["a"]);
        // A list sent before a freeze and taken in after it proves nothing more than when it was sent.
        let mut frozen = Members::new(Duration::from_secs(15), start);
        frozen.observe([("c".to_owned(), record(Some("c_1"), 1))], start, start);
        frozen.observe([("c".to_owned(), record(Some("c_1"), 1))], later(5), later(60));
        assert!(!frozen.gone("c_1", start), "its last list was sent 5 s after the renewal was seen");
        // a releases its Lease (no holder): a_1 gone at once.
        listed(&mut members, vec![("a", record(None, 17)), ("b", record(Some("b_1"), 1))], later(17));
        assert!(!members.live("a", later(17)) && members.gone("a_1", start));
        // A new process takes a's Lease: a is live again, as a_2; a_1 stays gone.
        listed(&mut members, vec![("a", record(Some("a_2"), 18)), ("b", record(Some("b_1"), 1))], later(18));
        assert!(members.live("a", later(18)) && !members.gone("a_2", start) && members.gone("a_1", start));
        assert_eq!(members.view(later(18)).holders["a"], "a_2");
        // Taken straight from one process by another (the first ran out): the first is gone at once.
        listed(&mut members, vec![("a", record(Some("a_3"), 40)), ("b", record(Some("b_1"), 1))], later(40));
        assert!(members.gone("a_2", start) && !members.gone("a_3", start));
        // An incarnation never seen holding is gone only once a list sent after the parent naming it was
        // seen shows it holding nothing, a lease duration after the coordinator started.
        assert!(members.gone("c_1", later(39)) && !members.gone("c_1", later(41)));
        let young = Members::new(Duration::from_secs(15), later(30));
        assert!(!young.gone("c_1", start), "nothing listed yet");
        assert_eq!(members.gone_for("b", later(20)), Some(Duration::from_secs(5)), "ran out at 15");
        assert_eq!(members.gone_for("a", later(41)), None, "held");
        // A Lease no longer listed runs out like one not renewed.
        let mut members = Members::new(Duration::from_secs(15), start);
        listed(&mut members, vec![("d", record(Some("d_1"), 1))], start);
        listed(&mut members, vec![], later(5));
        assert!(members.live("d", later(15)) && !members.live("d", later(16)));
        assert_eq!(members.silent(Duration::from_secs(10), later(15)), BTreeSet::from(["d_1".to_owned()]));
        listed(&mut members, vec![], later(16));
        assert!(members.gone("d_1", start));
        // Run out and no longer listed (its Lease deleted): forgotten, so silent no more.
        assert_eq!(members.silent(Duration::from_secs(10), later(16)), BTreeSet::new());
        assert_eq!(members.gone_for("d", later(20)), None);
        assert!(members.live_holders(later(16)).is_empty());
    }

    #[test]
    fn a_renewal_sighted_before_the_list_that_brings_it_is_dated_from_the_sighting() {
        let start = Instant::now();
        let later = |s: u64| start + Duration::from_secs(s);
        let (renewed, before) = (record(Some("b_1"), 2), record(Some("b_1"), 1));
        let sighted = |at: Instant| {
            let renewed = renewed.clone();
            move |member: &str, r: &Record| (member == "b" && *r == renewed).then_some(at)
        };
        let mut members = Members::new(Duration::from_secs(15), start);
        members.observe([("b".to_owned(), before.clone())], start, start);
        // The watch saw the renewal at 1; the list sent at 2 brings it.
        members.observe_sighted([("b".to_owned(), renewed.clone())], later(2), later(2), sighted(later(1)));
        assert!(members.live("b", later(16)) && !members.live("b", later(17)), "live until 16, not 17");
        members.observe([("b".to_owned(), renewed.clone())], later(17), later(17));
        assert!(members.gone("b_1", start), "a list sent 16 s after the sighting still shows it");
        // A sighting is never later than the list that brings the record (a watch behind the lists).
        let mut members = Members::new(Duration::from_secs(15), start);
        members.observe([("b".to_owned(), before)], start, start);
        members.observe_sighted([("b".to_owned(), renewed.clone())], later(2), later(2), sighted(later(5)));
        assert!(members.live("b", later(17)) && !members.live("b", later(18)));
        // A record already taken in keeps its date, whatever is sighted later.
        members.observe_sighted([("b".to_owned(), renewed.clone())], later(4), later(4), sighted(later(1)));
        assert!(members.live("b", later(17)));
    }

    #[test]
    fn a_parent_waits_once_however_often_it_changes() {
        let key = |name: &str| (0, Place::new("ns", name));
        let mut pending = Pending::default();
        pending.all([key("a"), key("b")].iter());
        pending.first(key("c"));
        pending.first(key("b"));
        pending.first(key("c"));
        let order: Vec<Key> = std::iter::from_fn(|| pending.pop()).collect();
        assert_eq!(order, [key("c"), key("a"), key("b")]);
        assert!(pending.is_empty());
    }
}
