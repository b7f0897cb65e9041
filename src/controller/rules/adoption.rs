//! Adoption: how a gone member's parents are served again without a write to each of them first.
//!
//! When the coordinator gives up on an incarnation (its Lease released, taken by another process, or run
//! out), it records which members were live then: the gone incarnation's parents are shared among them
//! by the same consistent hash the ring uses, over that record's members. The records are published in
//! one place, the annotation [`ANNOTATION`] of the coordinator's Lease, written only by the renewals of
//! whoever holds that Lease (an update guarded by resourceVersion), so that every member reads one
//! sequence of records and none is written by two coordinators. A member serves the parents still
//! labelled for a gone incarnation that the records resolve to itself, from a watch of that label,
//! as soon as it reads the record; the coordinator relabels them for their adopter afterwards, at its
//! own pace, and retires the record once no parent carries the label.
//!
//! Why no two members ever serve one parent: records are only added (until retired, below) and never
//! changed, and resolution follows them from the parent's label to the first incarnation without a
//! record. A member that has not read the latest records yet resolves a parent either to the same
//! incarnation or to one that is gone (which writes nothing: its fence closed at its renew deadline,
//! before the coordinator gave up on it). The coordinator labels an adopted parent only for its
//! adopter, whom it then drains as any live member when the ring wants the parent elsewhere.
//!
//! Retiring a record takes it from the members' view; a member acts on a record only while its view of
//! them was read within a renew deadline, and the coordinator does not decide again on a retired label
//! for a lease duration after the retirement was written.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use super::ring::Ring;

/// The coordinator Lease's annotation holding the records, as JSON: each gone incarnation with the
/// live members (name to incarnation) it was given to.
pub const ANNOTATION: &str = "adoptions.shard.samplectl.io";

/// The records as a member last read them from the coordinator's Lease, and when that read was sent;
/// with the incarnations whose Leases that member has seen go unrenewed past a renew deadline, whose
/// parents it gets ready to serve (by watching their label) before any record names them, and the
/// incarnations holding a Lease renewed within its duration (a child labelled for any other is a stray,
/// `engine::strays`).
#[derive(Debug, Clone, Default)]
pub struct Published {
    pub adoptions: Arc<Adoptions>,
    pub read: Option<Instant>,
    pub silent: BTreeSet<String>,
    pub live: BTreeSet<String>,
}

/// One gone incarnation's parents, given to the members live when it went.
#[derive(Debug, Clone)]
pub struct Record {
    /// By member name, the incarnation that held its Lease then.
    pub members: BTreeMap<String, String>,
    ring: Ring,
}

impl PartialEq for Record {
    fn eq(&self, other: &Self) -> bool {
        self.members == other.members
    }
}

impl Record {
    pub fn new(members: BTreeMap<String, String>) -> Self {
        let names: Vec<&String> = members.keys().collect();
        Record { ring: Ring::new(&names), members }
    }

    /// The incarnation this record gives the parent with `uid` to.
    fn owner(&self, uid: &str) -> Option<&str> {
        self.members.get(self.ring.owner(uid)?).map(String::as_str)
    }
}

/// Every record in force, by gone incarnation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Adoptions {
    records: BTreeMap<String, Record>,
}

impl Adoptions {
    /// The records from the annotation's value; none when it is missing or cannot be read (a record
    /// never read is never acted on, which is the safe side).
    pub fn parse(value: Option<&str>) -> Self {
        let parsed: BTreeMap<String, BTreeMap<String, String>> =
            value.and_then(|v| serde_json::from_str(v).ok()).unwrap_or_default();
        Adoptions { records: parsed.into_iter().map(|(gone, members)| (gone, Record::new(members))).collect() }
    }

    /// The annotation's value.
    pub fn to_annotation(&self) -> String {
        let out: BTreeMap<&str, &BTreeMap<String, String>> =
            self.records.iter().map(|(gone, record)| (gone.as_str(), &record.members)).collect();
        serde_json::to_string(&out).unwrap_or_default()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// "none", or "m1_x to m0_y, m2_z; ..." for the log.
    pub fn describe(&self) -> String {
        if self.records.is_empty() {
            return "none".into();
        }
        let one = |(gone, record): (&String, &Record)| {
            format!("{gone} to {}", record.members.values().cloned().collect::<Vec<_>>().join(", "))
        };
        self.records.iter().map(one).collect::<Vec<_>>().join("; ")
    }

    pub fn has(&self, incarnation: &str) -> bool {
        self.records.contains_key(incarnation)
    }

    pub fn gone(&self) -> impl Iterator<Item = &str> {
        self.records.keys().map(String::as_str)
    }

    /// Records that `gone`'s parents go to `members` (name to incarnation); a record is never replaced.
    pub fn add(&mut self, gone: &str, members: BTreeMap<String, String>) -> bool {
        if self.records.contains_key(gone) || members.is_empty() {
            return false;
        }
        self.records.insert(gone.to_owned(), Record::new(members));
        true
    }

    pub fn retire(&mut self, gone: &str) -> bool {
        self.records.remove(gone).is_some()
    }

    /// Who serves the parent with `uid` labelled for `label`: the label itself when it has no record,
    /// otherwise whom the records lead to from it. `None` only for records that lead in a circle or
    /// nowhere (never written so, but never trusted either).
    pub fn resolve<'a>(&'a self, label: &'a str, uid: &str) -> Option<&'a str> {
        let mut at = label;
        for _ in 0..=self.records.len() {
            match self.records.get(at) {
                None => return Some(at),
                Some(record) => at = record.owner(uid)?,
            }
        }
        None
    }

    /// The gone labels whose parents may resolve to `incarnation` (through any number of records): the
    /// labels whose watch a member needs.
    pub fn reaching(&self, incarnation: &str) -> BTreeSet<String> {
        // Who each record's members are reached from, walked back from `incarnation`.
        let mut from: HashMap<&str, Vec<&str>> = HashMap::new();
        for (gone, record) in &self.records {
            for adopter in record.members.values() {
                from.entry(adopter.as_str()).or_default().push(gone.as_str());
            }
        }
        let mut found = BTreeSet::new();
        let mut next = vec![incarnation];
        while let Some(at) = next.pop() {
            for gone in from.get(at).into_iter().flatten() {
                if found.insert((*gone).to_owned()) {
                    next.push(gone);
                }
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(m, i)| ((*m).to_owned(), (*i).to_owned())).collect()
    }

    fn uids() -> Vec<String> {
        (0..2000).map(|i| format!("uid-{i:05}")).collect()
    }

    #[test]
    fn a_gone_members_parents_are_shared_by_the_hash_over_the_members_live_then() {
        let mut adoptions = Adoptions::default();
        assert!(adoptions.add("a_1", members(&[("b", "b_1"), ("c", "c_1")])));
        let ring = Ring::new(&["b", "c"]);
        for uid in uids() {
            let want = if ring.owner(&uid) == Some("b") { "b_1" } else { "c_1" };
            assert_eq!(adoptions.resolve("a_1", &uid), Some(want));
            assert_eq!(adoptions.resolve("b_1", &uid), Some("b_1"), "a label without a record is its own");
        }
        assert!(!adoptions.add("a_1", members(&[("d", "d_1")])), "a record is never replaced");
        assert!(!adoptions.add("x_1", BTreeMap::new()), "nobody to give it to");
    }

    #[test]
    fn a_later_record_only_moves_what_a_gone_adopter_had() {
        let mut before = Adoptions::default();
        before.add("a_1", members(&[("b", "b_1"), ("c", "c_1")]));
        let mut after = before.clone();
        after.add("b_1", members(&[("c", "c_1"), ("d", "d_1")]));
        for uid in uids() {
            let (old, new) = (before.resolve("a_1", &uid).unwrap(), after.resolve("a_1", &uid).unwrap());
            // Seen by two members at once, the two views name one live incarnation at most.
            assert!(old == new || old == "b_1", "{uid}: {old} then {new}");
            assert_ne!(new, "b_1");
        }
    }

    #[test]
    fn records_in_a_circle_resolve_to_nobody() {
        let mut adoptions = Adoptions::default();
        adoptions.add("a_1", members(&[("b", "b_1")]));
        adoptions.add("b_1", members(&[("a", "a_1")]));
        assert_eq!(adoptions.resolve("a_1", "u"), None);
    }

    #[test]
    fn a_member_watches_every_label_that_can_lead_to_it() {
        let mut adoptions = Adoptions::default();
        adoptions.add("a_1", members(&[("b", "b_1"), ("c", "c_1")]));
        adoptions.add("b_1", members(&[("c", "c_1"), ("d", "d_1")]));
        adoptions.add("e_1", members(&[("c", "c_1")]));
        let labels = |i: &str| adoptions.reaching(i).into_iter().collect::<Vec<_>>();
        assert_eq!(labels("d_1"), ["a_1", "b_1"]);
        assert_eq!(labels("c_1"), ["a_1", "b_1", "e_1"]);
        assert!(labels("f_1").is_empty());
    }

    #[test]
    fn the_annotation_round_trips_and_a_bad_one_counts_as_none() {
        let mut adoptions = Adoptions::default();
        adoptions.add("a_1", members(&[("b", "b_1"), ("c", "c_1")]));
        let text = adoptions.to_annotation();
        assert_eq!(text, r#"{"a_1":{"b":"b_1","c":"c_1"}}"#);
        assert_eq!(Adoptions::parse(Some(&text)), adoptions);
        assert!(Adoptions::parse(Some("{not json")).is_empty());
        assert!(Adoptions::parse(None).is_empty());
        assert!(adoptions.retire("a_1") && adoptions.is_empty());
    }
}
