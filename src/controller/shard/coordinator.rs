//! The ring's coordinator: one member at a time (elected by the Lease named after the ring) decides
//! which member each parent belongs to and writes it in the parent's labels, following the members'
//! Leases and a metadata watch of every parent type the process reconciles.
//!
//! - A parent with no member's label gets the one the ring gives it, as soon as the watch shows it.
//! - A parent whose member is live but is no longer the ring's choice is drained: the drain label names
//!   the new member, and the old one lets go (see `member`); once its label is gone, the first case
//!   applies.
//! - A parent whose member is gone (its Lease released, or not renewed for a lease duration as seen by
//!   this coordinator's clock, or never seen in a lease duration since this coordinator started) is
//!   labelled for the new member at once: a member stops writing within its renew deadline of failing to
//!   renew, which is shorter.
//!
//! Every write is a merge patch guarded by the resourceVersion the decision was made on, so two
//! coordinators (an old one not yet aware it lost its Lease) can never undo each other, and a parent
//! that changed in between is decided again from the watch's newer copy.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{SelectAll, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::cluster::scope;
use crate::controller::drive::place::{Place, place};
use crate::controller::drive::watch::hub::Hub;
use crate::controller::engine::Context;
use crate::controller::engine::request::bounded;
use crate::controller::rules::ring::Ring;
use crate::controller::rules::shard::{RING_LABEL, drain_label, lease_prefix, member_label};

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
    /// The member its label names.
    pub member: Option<String>,
    /// The member it is being moved to.
    pub drain: Option<String>,
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
        }
    }
}

/// A write the coordinator makes to a parent's labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Label it for this member (and drop any drain label): it has none, or its member is gone.
    Assign(String),
    /// Ask its member to let go of it, for this one.
    Drain(String),
    /// The move is off (the ring changed back): drop the drain label.
    Stay,
}

/// What to write to `parent`, if anything, given the ring of live members and whether a member that is
/// not live is surely stopped (`gone`).
pub fn decide(parent: &Parent, ring: &Ring, gone: impl Fn(&str) -> bool) -> Option<Step> {
    let wanted = ring.owner(&parent.uid)?;
    match &parent.member {
        None if !parent.taken => None,
        None => Some(Step::Assign(wanted.to_owned())),
        Some(member) if member == wanted => parent.drain.is_some().then_some(Step::Stay),
        Some(member) if ring.members().iter().any(|m| m == member) => {
            (parent.drain.as_deref() != Some(wanted)).then(|| Step::Drain(wanted.to_owned()))
        }
        Some(member) if gone(member) => Some(Step::Assign(wanted.to_owned())),
        // Not live, not yet surely stopped: wait for its Lease to run out.
        Some(_) => None,
    }
}

/// The merge patch that makes `step`, guarded by `version`.
fn patch(step: &Step, ring: &str, version: &str) -> Value {
    let labels = match step {
        Step::Assign(member) => json!({member_label(ring): member, drain_label(ring): Value::Null}),
        Step::Drain(member) => json!({drain_label(ring): member}),
        Step::Stay => json!({drain_label(ring): Value::Null}),
    };
    json!({"metadata": {"resourceVersion": version, "labels": labels}})
}

/// The members as their Leases show them, each Lease's record judged by this coordinator's own clock
/// (as leader election judges a Lease): live while its record changes at least once a lease duration.
#[derive(Debug)]
pub struct Members {
    started: Instant,
    lease_duration: Duration,
    /// Per member: its Lease's last record (holder, renew time, duration) and when it was seen to change.
    seen: HashMap<String, (Record, Instant)>,
}

type Record = (Option<String>, Option<MicroTime>, Option<i32>);

impl Members {
    pub fn new(lease_duration: Duration, now: Instant) -> Self {
        Members { started: now, lease_duration, seen: HashMap::new() }
    }

    /// Takes in the ring's Leases as listed at `now`: per member (the Lease's name after `<ring>.`),
    /// its record. A Lease no longer listed keeps its last record, and so runs out like one not renewed.
    pub fn observe(&mut self, leases: impl IntoIterator<Item = (String, Record)>, now: Instant) {
        for (member, record) in leases {
            let entry = self.seen.entry(member).or_insert_with(|| (record.clone(), now));
            if entry.0 != record {
                *entry = (record, now);
            }
        }
    }

    fn duration(&self, record: &Record) -> Duration {
        record.2.map_or(self.lease_duration, |s| Duration::from_secs(s.max(0) as u64))
    }

    /// Whether `member` holds its Lease and renewed it within its duration.
    pub fn live(&self, member: &str, now: Instant) -> bool {
        self.seen.get(member).is_some_and(|(record, since)| {
            record.0.as_deref() == Some(member) && now.duration_since(*since) <= self.duration(record)
        })
    }

    /// Whether `member` has surely stopped: it released its Lease, or has not renewed it for its
    /// duration, or was never seen in a lease duration since this coordinator started.
    pub fn gone(&self, member: &str, now: Instant) -> bool {
        match self.seen.get(member) {
            Some((record, since)) => {
                record.0.as_deref() != Some(member) || now.duration_since(*since) > self.duration(record)
            }
            None => now.duration_since(self.started) > self.lease_duration,
        }
    }

    /// For how long `member`, seen, has surely been stopped (see [`Members::gone`]).
    pub fn gone_for(&self, member: &str, now: Instant) -> Option<Duration> {
        let (record, since) = self.seen.get(member)?;
        let stopped = match record.0.as_deref() == Some(member) {
            true => *since + self.duration(record),
            false => *since,
        };
        now.checked_duration_since(stopped).filter(|_| self.gone(member, now))
    }

    /// Stops following a member whose Lease was deleted.
    pub fn forget(&mut self, member: &str) {
        self.seen.remove(member);
    }

    /// The live members' ring.
    pub fn ring(&self, now: Instant) -> Ring {
        let live: Vec<&String> = self.seen.keys().filter(|m| self.live(m, now)).collect();
        Ring::new(&live)
    }
}

/// The coordinator's settings.
pub struct Coordinator {
    pub client: Client,
    pub hub: Arc<Hub>,
    pub ring: String,
    pub lease_namespace: String,
    pub lease_duration: Duration,
    pub retry_period: Duration,
    /// The controllers the process runs, each with the namespace it reconciles (all when `None`).
    pub controllers: Vec<(Arc<Context>, Option<String>)>,
}

type Key = (usize, Place);

impl Coordinator {
    /// The ring's Leases, by member: each one's record and resourceVersion.
    async fn leases(&self) -> anyhow::Result<Vec<(String, Record, String)>> {
        let api: Api<Lease> = scope::api(self.client.clone(), Some(&self.lease_namespace));
        let lp = ListParams::default().labels(&format!("{RING_LABEL}={}", self.ring));
        let prefix = lease_prefix(&self.ring);
        let leases = bounded(api.list(&lp)).await?;
        Ok(leases
            .items
            .into_iter()
            .filter_map(|lease| {
                let member = lease.metadata.name.as_deref()?.strip_prefix(&prefix)?.to_owned();
                let version = lease.metadata.resource_version.unwrap_or_default();
                let spec = lease.spec.unwrap_or_default();
                Some((member, (spec.holder_identity, spec.renew_time, spec.lease_duration_seconds), version))
            })
            .collect())
    }

    /// Deletes the Leases of members gone for `FORGET_AFTER_LEASES` lease durations that no parent names any more (a Deployment's
    /// pods get new names, so each one that died would leave its Lease behind for good), each guarded by
    /// the resourceVersion listed, so that a member that came back in between keeps its Lease.
    async fn forget_gone(&self, members: &mut Members, parents: &HashMap<Key, Parent>, versions: &[(String, String)]) {
        let (now, after) = (Instant::now(), self.lease_duration * FORGET_AFTER_LEASES);
        let forgotten: Vec<&(String, String)> =
            versions.iter().filter(|(member, _)| members.gone_for(member, now) >= Some(after)).collect();
        if forgotten.is_empty() {
            return;
        }
        let named: HashSet<&str> =
            parents.values().flat_map(|p| p.member.iter().chain(&p.drain)).map(String::as_str).collect();
        let api: Api<Lease> = scope::api(self.client.clone(), Some(&self.lease_namespace));
        for (member, version) in forgotten {
            if named.contains(member.as_str()) {
                continue;
            }
            let params = kube::api::DeleteParams {
                preconditions: Some(kube::api::Preconditions { resource_version: Some(version.clone()), uid: None }),
                ..Default::default()
            };
            let name = lease_prefix(&self.ring) + member;
            match bounded(api.delete(&name, &params)).await {
                Ok(_) => {
                    tracing::info!(ring = self.ring, "deleted the Lease of {member}, gone and holding nothing");
                    members.forget(member);
                }
                Err(failed) if matches!(failed.status(), Some(404 | 409)) => {}
                Err(failed) => tracing::warn!(ring = self.ring, "cannot delete the Lease {name}: {}", failed.message()),
            }
        }
    }

    /// Takes in the ring's Leases as they are now; returns each one's resourceVersion, by member.
    pub async fn observe(&self, members: &mut Members) -> anyhow::Result<Vec<(String, String)>> {
        let leases = self.leases().await?;
        let versions = leases.iter().map(|(member, _, version)| (member.clone(), version.clone())).collect();
        members.observe(leases.into_iter().map(|(member, record, _)| (member, record)), Instant::now());
        Ok(versions)
    }

    /// Coordinates until `stop` turns true, judging the members' Leases by what `members` has seen of
    /// them: a replica follows them from its start, also while another one coordinates, so that when it
    /// takes over it already knows how long each has been silent (a member that died with the old
    /// coordinator is given up on a lease duration after it died, not after the takeover).
    pub async fn run(&self, members: &mut Members, mut stop: watch::Receiver<bool>) {
        let mut feeds = SelectAll::new();
        for (index, (ctx, namespace)) in self.controllers.iter().enumerate() {
            let (ar, namespace) = (&ctx.family.parent.ar, namespace.as_deref());
            // The hub's metadata feeds keep no annotations; a controller that selects by them is fed whole
            // objects.
            let events = match ctx.selects_by_annotations() {
                true => self.hub.objects(ar, namespace, "").1.map(metadata).boxed(),
                false => self.hub.metadata(ar, namespace, "").map(metadata).boxed(),
            };
            feeds.push(events.map(move |event| (index, event)));
        }
        let mut parents: HashMap<Key, Parent> = HashMap::new();
        // The parents to decide, in order; a full pass is queued every retry period when none is under
        // way, since members run out with time alone.
        let mut pending: VecDeque<Key> = VecDeque::new();
        let mut writing: HashSet<Key> = HashSet::new();
        let mut writes: JoinSet<(Key, Result<(), String>)> = JoinSet::new();
        let mut ring: Option<Ring> = None;
        let mut tick = tokio::time::interval(self.retry_period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let mut decide_all = false;
            tokio::select! {
                _ = tick.tick() => match self.observe(members).await {
                    Ok(versions) => {
                        let now = Instant::now();
                        self.forget_gone(members, &parents, &versions).await;
                        let next = members.ring(now);
                        let changed = ring.as_ref().is_none_or(|r| r.members() != next.members());
                        if changed {
                            tracing::info!(ring = self.ring, "shard ring members: {}", describe(&next));
                        }
                        ring = Some(next);
                        decide_all = changed || pending.is_empty();
                    }
                    Err(err) => tracing::warn!(
                        ring = self.ring,
                        "cannot list the ring's Leases: {}",
                        crate::error::describe_any(&err)
                    ),
                },
                Some((index, event)) = feeds.next() => match event {
                    watcher::Event::Apply(meta) | watcher::Event::InitApply(meta) => {
                        let key = (index, place(&meta));
                        let taken = self.controllers[index].0.takes(&meta);
                        parents.insert(key.clone(), Parent::of(&meta, &self.ring, taken));
                        pending.push_front(key);
                    }
                    watcher::Event::Delete(meta) => {
                        parents.remove(&(index, place(&meta)));
                    }
                    watcher::Event::InitDone => decide_all = true,
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
                pending = parents.keys().cloned().collect();
            }
            // Nothing is decided before the ring's Leases were read once.
            let Some(ring) = &ring else { continue };
            let now = Instant::now();
            while writing.len() < WRITES {
                let Some(key) = pending.pop_front() else { break };
                let Some(parent) = parents.get(&key) else { continue };
                if writing.contains(&key) {
                    continue;
                }
                let Some(step) = decide(parent, ring, |member| members.gone(member, now)) else { continue };
                writing.insert(key.clone());
                writes.spawn(self.write(key, step, parent.version.clone()));
            }
        }
    }

    /// Makes `step` on the parent at `key`, as it was at `version`.
    fn write(&self, key: Key, step: Step, version: String) -> impl Future<Output = (Key, Result<(), String>)> + use<> {
        let ar = &self.controllers[key.0].0.family.parent.ar;
        let namespace = Some(&*key.1.namespace).filter(|ns| !ns.is_empty());
        let api = scope::dynamic(self.client.clone(), ar, namespace);
        let body = patch(&step, &self.ring, &version);
        let ring = self.ring.clone();
        async move {
            let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..PatchParams::default() };
            let result = match bounded(api.patch(&key.1.name, &params, &Patch::Merge(&body))).await {
                Ok(_) => {
                    tracing::debug!(ring, "{}: {step:?}", key.1);
                    Ok(())
                }
                // Changed or gone since: the watch brings what it is now, and it is decided again.
                Err(failed) if matches!(failed.status(), Some(404 | 409)) => Ok(()),
                Err(failed) => Err(failed.message()),
            };
            (key, result)
        }
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

fn describe(ring: &Ring) -> String {
    match ring.members() {
        [] => "none".into(),
        members => members.join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parent(uid: &str, member: Option<&str>, drain: Option<&str>) -> Parent {
        let (member, drain) = (member.map(Into::into), drain.map(Into::into));
        Parent { uid: uid.into(), version: "7".into(), taken: true, member, drain }
    }

    /// A uid the ring of `members` gives to `wanted`.
    fn uid_for(ring: &Ring, wanted: &str) -> String {
        (0..).map(|i| format!("uid-{i}")).find(|uid| ring.owner(uid) == Some(wanted)).unwrap()
    }

    #[test]
    fn a_parent_moves_only_by_drain_from_a_live_member_and_at_once_from_a_gone_one() {
        let ring = Ring::new(&["a", "b"]);
        let uid = uid_for(&ring, "b");
        let never = |_: &str| false;
        let always = |_: &str| true;
        // Unlabelled: assigned.
        assert_eq!(decide(&parent(&uid, None, None), &ring, never), Some(Step::Assign("b".into())));
        // Where it belongs: nothing, or the drain called off.
        assert_eq!(decide(&parent(&uid, Some("b"), None), &ring, never), None);
        assert_eq!(decide(&parent(&uid, Some("b"), Some("a")), &ring, never), Some(Step::Stay));
        // On a live member that is no longer its: drained, once.
        assert_eq!(decide(&parent(&uid, Some("a"), None), &ring, never), Some(Step::Drain("b".into())));
        assert_eq!(decide(&parent(&uid, Some("a"), Some("b")), &ring, never), None);
        assert_eq!(decide(&parent(&uid, Some("a"), Some("c")), &ring, never), Some(Step::Drain("b".into())));
        // Even a live member said to be gone is drained: liveness comes first.
        assert_eq!(decide(&parent(&uid, Some("a"), None), &ring, always), Some(Step::Drain("b".into())));
        // On a member out of the ring: waited for until it is surely stopped, then taken.
        assert_eq!(decide(&parent(&uid, Some("dead"), None), &ring, never), None);
        assert_eq!(decide(&parent(&uid, Some("dead"), Some("b")), &ring, always), Some(Step::Assign("b".into())));
        // Not taken by its controller: not labelled, but moved if it is labelled already.
        let untaken = |member: Option<&str>| Parent { taken: false, ..parent(&uid, member, None) };
        assert_eq!(decide(&untaken(None), &ring, never), None);
        assert_eq!(decide(&untaken(Some("a")), &ring, never), Some(Step::Drain("b".into())));
        // No live member: nothing to do.
        assert_eq!(decide(&parent(&uid, None, None), &Ring::default(), always), None);
    }

    #[test]
    fn the_patches_are_guarded_by_the_version_read() {
        let assign = patch(&Step::Assign("b".into()), "r", "42");
        assert_eq!(
            assign,
            json!({"metadata": {"resourceVersion": "42", "labels": {
                "shard.samplectl.io/r": "b", "drain.shard.samplectl.io/r": null}}})
        );
        assert_eq!(
            patch(&Step::Drain("b".into()), "r", "1")["metadata"]["labels"],
            json!({"drain.shard.samplectl.io/r": "b"})
        );
        assert_eq!(patch(&Step::Stay, "r", "1")["metadata"]["labels"], json!({"drain.shard.samplectl.io/r": null}));
    }

    fn record(holder: Option<&str>, renewed: i64) -> Record {
        let at = k8s_openapi::jiff::Timestamp::from_second(renewed).unwrap();
        (holder.map(Into::into), Some(MicroTime(at)), Some(15))
    }

    #[test]
    fn members_are_live_while_renewing_and_gone_once_released_or_run_out() {
        let start = Instant::now();
        let later = |s: u64| start + Duration::from_secs(s);
        let mut members = Members::new(Duration::from_secs(15), start);
        members.observe([("a".into(), record(Some("a"), 1)), ("b".into(), record(Some("b"), 1))], start);
        assert_eq!(members.ring(later(1)).members(), ["a", "b"]);
        // a renews, b does not.
        members.observe([("a".into(), record(Some("a"), 11)), ("b".into(), record(Some("b"), 1))], later(10));
        assert!(members.live("b", later(15)) && !members.gone("b", later(15)));
        assert!(!members.live("b", later(16)) && members.gone("b", later(16)), "not renewed for its duration");
        assert_eq!(members.ring(later(16)).members(), ["a"]);
        // a releases its Lease (no holder): gone at once.
        members.observe([("a".into(), record(None, 17))], later(17));
        assert!(!members.live("a", later(17)) && members.gone("a", later(17)));
        // A member never seen is gone only a lease duration after the coordinator started.
        assert!(!members.gone("c", later(15)) && members.gone("c", later(16)));
        assert_eq!(members.gone_for("a", later(20)), Some(Duration::from_secs(3)), "released at 17");
        assert_eq!(members.gone_for("b", later(20)), Some(Duration::from_secs(5)), "ran out at 15");
        assert_eq!(members.gone_for("c", later(20)), None, "never seen");
        // A Lease no longer listed runs out like one not renewed.
        let mut members = Members::new(Duration::from_secs(15), start);
        members.observe([("d".into(), record(Some("d"), 1))], start);
        members.observe([], later(5));
        assert!(members.live("d", later(15)) && members.gone("d", later(16)));
    }
}
