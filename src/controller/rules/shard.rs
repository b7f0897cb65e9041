//! A member of a shard ring: the labels by which the coordinator hands it parents, and the names that
//! can be used. The protocol they serve, carried out by `shard::coordinator` and `engine::handover`:
//!
//! A parent belongs to the member named by its label `shard.samplectl.io/<ring>`; the member watches only
//! the parents (and the children) carrying its own name there. To move a parent, the coordinator first
//! adds `drain.shard.samplectl.io/<ring>` naming the new member. The old member then starts no reconcile
//! of it (one in flight ends first: its queue never runs a parent twice at a time), relabels the
//! children it wrote for the new member, and lets go by removing both labels from the parent, an update
//! guarded by the resourceVersion it read. Only then does the coordinator label the parent for the new
//! member, so no two members ever write for one parent at overlapping times.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The domain of samplectl's sharding labels.
pub const DOMAIN: &str = "shard.samplectl.io";

/// The label that names a parent's (or a child's) member in `ring`.
pub fn member_label(ring: &str) -> String {
    format!("{DOMAIN}/{ring}")
}

/// The label that names the member a parent is being moved to.
pub fn drain_label(ring: &str) -> String {
    format!("drain.{DOMAIN}/{ring}")
}

/// What every member's Lease name in `ring` begins with (the coordinator's is the ring's name alone).
pub fn lease_prefix(ring: &str) -> String {
    format!("{ring}.")
}

/// The label on every member's Lease, naming its ring.
pub const RING_LABEL: &str = "shard.samplectl.io/ring";

/// Whether `ring` can be a ring's name: it names the coordinator's Lease and begins each member's
/// (`<ring>.<member>`), and is the name part of the label keys, so at most 63 lower-case letters, digits
/// and '-', alphanumeric at both ends; without a '.', so that no two rings' Leases can share a name.
pub fn check_ring(ring: &str) -> Result<(), String> {
    if label_name(ring) && ring.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
        Ok(())
    } else {
        Err(format!(
            "--shard-ring {ring:?} is not a valid ring name: at most 63 lower-case letters, digits or '-', \
             starting and ending with a letter or digit"
        ))
    }
}

/// Whether `member` can be a member's name: a label value, and a Lease's name once the ring's is put
/// before it (lower case, so that it is a DNS subdomain too).
pub fn check_member(member: &str) -> Result<(), String> {
    let dns = member.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    if label_name(member) && dns {
        Ok(())
    } else {
        Err(format!(
            "the shard member name {member:?} cannot be used: at most 63 lower-case letters, digits, '-' or '.', \
             starting and ending with a letter or digit (set --shard-member, or POD_NAME)"
        ))
    }
}

fn label_name(name: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    name.len() <= 63
        && edge(name.chars().next())
        && edge(name.chars().last())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// This replica in its ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub ring: String,
    pub name: String,
}

impl Member {
    pub fn label(&self) -> String {
        member_label(&self.ring)
    }

    /// The label selector of what is this member's.
    pub fn selector(&self) -> String {
        format!("{}={}", self.label(), self.name)
    }

    /// The name of this member's Lease.
    pub fn lease(&self) -> String {
        lease_prefix(&self.ring) + &self.name
    }

    /// Whether the object `meta` describes is labelled for this member.
    pub fn holds(&self, meta: &ObjectMeta) -> bool {
        meta.labels.as_ref().and_then(|l| l.get(&self.label())) == Some(&self.name)
    }

    /// The member this parent is being moved to, when it is this member's and being moved.
    pub fn drained_to<'a>(&self, meta: &'a ObjectMeta) -> Option<&'a str> {
        if !self.holds(meta) {
            return None;
        }
        meta.labels.as_ref()?.get(&drain_label(&self.ring)).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(labels: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn a_member_holds_and_lets_go_only_of_what_is_labelled_for_it() {
        let me = Member { ring: "samples".into(), name: "a".into() };
        assert_eq!(me.selector(), "shard.samplectl.io/samples=a");
        assert_eq!(me.lease(), "samples.a");
        assert!(me.holds(&meta(&[("shard.samplectl.io/samples", "a")])));
        assert!(!me.holds(&meta(&[("shard.samplectl.io/samples", "b")])));
        assert!(!me.holds(&meta(&[("shard.samplectl.io/other", "a")])));
        assert_eq!(me.drained_to(&meta(&[("shard.samplectl.io/samples", "a")])), None);
        let draining = meta(&[("shard.samplectl.io/samples", "a"), ("drain.shard.samplectl.io/samples", "b")]);
        assert_eq!(me.drained_to(&draining), Some("b"));
        let someone_elses = meta(&[("shard.samplectl.io/samples", "c"), ("drain.shard.samplectl.io/samples", "b")]);
        assert_eq!(me.drained_to(&someone_elses), None);
    }

    #[test]
    fn ring_and_member_names_must_fit_in_labels_and_lease_names() {
        assert!(check_ring("samples").is_ok());
        assert!(check_ring("samples-2").is_ok());
        for bad in ["", "-a", "a/b", "Samples", "a.b", "a_b", &"r".repeat(64)] {
            assert!(check_ring(bad).is_err(), "{bad:?}");
        }
        assert!(check_member("samplectl-7d9f-x2").is_ok());
        for bad in ["Pod", "a_b", "-a", "", &"m".repeat(64)] {
            assert!(check_member(bad).is_err(), "{bad:?}");
        }
    }
}
