//! A shard member serving a gone incarnation's parents before they are relabelled for it
//! (`rules::adoption`). Each controller of a member runs one context for its own label and, for each
//! gone label the records lead to it from, one more whose member label is the gone incarnation's: it
//! watches that label's parents and children, writes under it (its guard tests that label, and its
//! children keep it), and reconciles only the parents the records, as read within a renew deadline,
//! resolve to this member.
//!
//! A parent can be in two of this process's contexts for a moment: the coordinator relabels an adopted
//! parent for its adopter, and the adopter's own watch may show that before the gone label's watch
//! shows it leaving. So every reconcile of a member claims the parent's uid first (one at a time per
//! process), and an adopter's context does not reconcile a copy older than one its own context already
//! reconciled.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::controller::rules::adoption::Published;

/// What the member's contexts share about adoption.
#[derive(Debug, Default)]
struct Shared {
    /// The uids being reconciled by any context of this process.
    busy: HashSet<String>,
    /// For each parent an adopter's context reconciled, the newest resourceVersion any context of
    /// this process reconciled it at.
    newest: HashMap<String, u64>,
}

/// A member's view of adoption, in each of its contexts.
#[derive(Debug, Clone)]
pub struct Adopting {
    /// The records as last read, with when that read was sent.
    pub records: watch::Receiver<Published>,
    /// How long a read of the records is acted on: the renew deadline.
    pub fresh_for: Duration,
    /// This process's own incarnation.
    pub own: String,
    /// Set in an adopter's context: it serves for a gone label, not its own.
    pub adopter: bool,
    shared: Arc<Mutex<Shared>>,
}

/// Whether an adopter's context serves a parent now.
#[derive(Debug, PartialEq, Eq)]
pub enum Serves {
    Yes,
    /// The records give it to another member (or to a gone one not recorded yet).
    NotOurs,
    /// The records were not read within a renew deadline: nothing is decided on them.
    Stale,
    /// This process reconciled a newer copy of it already (its own context has it now).
    Behind,
}

/// A claim on one parent for one reconcile; let go when dropped.
pub struct Claim {
    shared: Arc<Mutex<Shared>>,
    uid: String,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.shared.lock().unwrap_or_else(|e| e.into_inner()).busy.remove(&self.uid);
    }
}

fn number(version: Option<&str>) -> Option<u64> {
    version?.parse().ok()
}

impl Adopting {
    pub fn new(records: watch::Receiver<Published>, fresh_for: Duration, own: String) -> Self {
        Adopting { records, fresh_for, own, adopter: false, shared: Arc::default() }
    }

    /// The same, for an adopter's context.
    pub fn for_adopter(&self) -> Self {
        Adopting { adopter: true, ..self.clone() }
    }

    /// Whether the records in hand were read within a renew deadline.
    pub fn fresh(&self) -> bool {
        self.records.borrow().read.is_some_and(|read| read.elapsed() < self.fresh_for)
    }

    /// Whether an adopter's context serving for `label` reconciles the parent with `uid` at `version`.
    pub fn serves(&self, label: &str, uid: &str, version: Option<&str>) -> Serves {
        {
            let published = self.records.borrow();
            if published.read.is_none_or(|read| read.elapsed() >= self.fresh_for) {
                return Serves::Stale;
            }
            if published.adoptions.resolve(label, uid) != Some(self.own.as_str()) {
                return Serves::NotOurs;
            }
        }
        let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        match (shared.newest.get(uid), number(version)) {
            (Some(newest), Some(version)) if *newest > version => Serves::Behind,
            _ => Serves::Yes,
        }
    }

    /// Whether a member of the ring is being failed over: the records as read show a member silent, or a
    /// gone one whose parents are not all relabelled yet. What only keeps things tidy waits meanwhile
    /// (`handover::looks_first`), so that the lists and writes of a failover have the API server.
    pub fn failing_over(&self) -> bool {
        let published = self.records.borrow();
        !published.silent.is_empty() || !published.adoptions.is_empty()
    }

    /// The incarnations of the ring live now (this one among them), as read within a renew deadline;
    /// `None` while a member is being failed over, or when the records in hand are older: a child
    /// labelled for none of them is a stray (`engine::strays`), and a set read late or mid-failover could
    /// miss one or name too many.
    pub fn live(&self) -> Option<BTreeSet<String>> {
        if !self.fresh() || self.failing_over() {
            return None;
        }
        let published = self.records.borrow();
        published.live.contains(&self.own).then(|| published.live.clone())
    }

    /// Claims the parent with `uid`, read at `version`, for one reconcile; `None` while another
    /// context of this process reconciles it.
    pub fn claim(&self, uid: &str, version: Option<&str>) -> Option<Claim> {
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        if !shared.busy.insert(uid.to_owned()) {
            return None;
        }
        if let Some(version) = number(version) {
            match shared.newest.get_mut(uid) {
                Some(newest) => *newest = (*newest).max(version),
                None if self.adopter => drop(shared.newest.insert(uid.to_owned(), version)),
                None => {}
            }
        }
        Some(Claim { shared: self.shared.clone(), uid: uid.to_owned() })
    }

    /// Forgets the versions noted for adopted parents, once the records lead to this member from no gone
    /// label and no member is silent (the same for every controller of the process).
    pub fn forget_adopted(&self) {
        self.shared.lock().unwrap_or_else(|e| e.into_inner()).newest.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Instant;

    use super::*;
    use crate::controller::rules::adoption::Adoptions;

    fn published(read: Option<Instant>) -> Published {
        let mut adoptions = Adoptions::default();
        adoptions.add("a_1", BTreeMap::from([("b".to_owned(), "b_1".to_owned())]));
        Published { adoptions: Arc::new(adoptions), read, ..Published::default() }
    }

    #[test]
    fn an_adopter_serves_only_on_fresh_records_that_lead_to_it() {
        let (tx, rx) = watch::channel(published(Some(Instant::now())));
        let own = Adopting::new(rx, Duration::from_secs(10), "b_1".into());
        let adopter = own.for_adopter();
        assert_eq!(adopter.serves("a_1", "u", Some("5")), Serves::Yes);
        assert_eq!(adopter.serves("x_1", "u", Some("5")), Serves::NotOurs, "no record: not this member's");
        tx.send_replace(published(Some(Instant::now() - Duration::from_secs(11))));
        assert_eq!(adopter.serves("a_1", "u", Some("5")), Serves::Stale);
        tx.send_replace(published(None));
        assert_eq!(adopter.serves("a_1", "u", Some("5")), Serves::Stale, "never read");
    }

    #[test]
    fn a_failover_lasts_from_a_silent_member_until_its_record_is_retired() {
        let (tx, rx) = watch::channel(Published::default());
        let own = Adopting::new(rx, Duration::from_secs(10), "b_1".into());
        assert!(!own.failing_over());
        tx.send_modify(|published| {
            published.silent.insert("a_1".into());
        });
        assert!(own.failing_over(), "a member silent");
        tx.send_replace(published(Some(Instant::now())));
        assert!(own.failing_over(), "its record read, its parents not all relabelled");
        tx.send_replace(Published::default());
        assert!(!own.failing_over(), "the record retired");
    }

    #[test]
    fn one_reconcile_at_a_time_and_never_an_adopted_copy_behind_the_own_one() {
        let (_tx, rx) = watch::channel(published(Some(Instant::now())));
        let own = Adopting::new(rx, Duration::from_secs(10), "b_1".into());
        let adopter = own.for_adopter();
        let claim = adopter.claim("u", Some("5")).expect("free");
        assert!(own.claim("u", Some("7")).is_none(), "the adopter's reconcile holds it");
        drop(claim);
        // The coordinator relabelled it: the own context reconciles the newer copy.
        drop(own.claim("u", Some("7")).expect("free again"));
        assert_eq!(adopter.serves("a_1", "u", Some("5")), Serves::Behind);
        assert_eq!(adopter.serves("a_1", "u", Some("8")), Serves::Yes);
        // Parents never adopted are not remembered.
        drop(own.claim("v", Some("3")));
        assert_eq!(adopter.serves("a_1", "v", Some("1")), Serves::Yes);
        own.forget_adopted();
        assert_eq!(adopter.serves("a_1", "u", Some("5")), Serves::Yes);
    }
}
