//! A member of a shard ring: the labels by which the coordinator hands it parents, and the names that
//! can be used. The protocol they serve, carried out by `shard::coordinator` and `engine::handover`:
//!
//! A parent belongs to the member incarnation named by its label `shard.samplectl.io/<ring>`: the
//! member's name and the per-process id of the process that holds the member's Lease (`m1_k3x9qa`), the
//! same string as the Lease's holder. A member watches only the parents (and the children) carrying its
//! own incarnation there, so a process restarted under the same member name starts with nothing: the
//! parents of the one before it are moved as any gone member's are, and only then labelled for it.
//!
//! To move a parent from a live member, the coordinator first adds `drain.shard.samplectl.io/<ring>`
//! naming the new incarnation. The old member then starts no reconcile of it (one in flight ends first:
//! its queue never runs a parent twice at a time), relabels the children it wrote for the new member,
//! and lets go by removing both labels from the parent, an update guarded by the resourceVersion it
//! read. Only then does the coordinator label the parent for the new member, so no two members ever
//! write for one parent at overlapping times. A member's own writes to a parent are guarded too (by the
//! resourceVersion read, or by a JSON patch that first tests the parent still carries its incarnation),
//! so a late one fails once the parent was moved.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, Patch};
use serde_json::Value;

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

/// The label on every child a shard member writes, naming its parent's uid: whoever owns the parent
/// next finds the children by it, whatever member label they carry (one that died before relabelling
/// them, or a late write of one that froze).
pub const PARENT_LABEL: &str = "parent.shard.samplectl.io/uid";

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
    /// This process as the member: the value of the member label on what is its own, and its Lease's
    /// holder identity.
    pub incarnation: String,
}

/// The longest member name kept whole in an incarnation: a label value holds 63 characters, and the
/// incarnation adds '_' and the process's id.
fn kept(name: &str, id: &str) -> String {
    let room = 63usize.saturating_sub(id.len() + 1);
    let kept: String = name.chars().take(room).collect();
    kept.trim_end_matches(|c: char| !c.is_ascii_alphanumeric()).to_owned()
}

impl Member {
    /// Member `name` of `ring`, as the process whose id is `id`.
    pub fn new(ring: String, name: String, id: &str) -> Self {
        let incarnation = format!("{}_{id}", kept(&name, id));
        Member { ring, name, incarnation }
    }

    pub fn label(&self) -> String {
        member_label(&self.ring)
    }

    /// The label selector of what is this member's.
    pub fn selector(&self) -> String {
        format!("{}={}", self.label(), self.incarnation)
    }

    /// A JSON patch operation that fails unless the object still carries this member's label: put
    /// before a member's own change to a parent, so that the API server refuses it once the parent
    /// was moved, however late it arrives.
    pub fn test_op(&self) -> serde_json::Value {
        let key = self.label().replace('~', "~0").replace('/', "~1");
        serde_json::json!({"op": "test", "path": format!("/metadata/labels/{key}"), "value": self.incarnation})
    }

    /// The name of this member's Lease.
    pub fn lease(&self) -> String {
        lease_prefix(&self.ring) + &self.name
    }

    /// Whether the object `meta` describes is labelled for this member.
    pub fn marked(&self, meta: &ObjectMeta) -> bool {
        meta.labels.as_ref().and_then(|l| l.get(&self.label())) == Some(&self.incarnation)
    }

    /// The member this parent is being moved to, when it is this member's and being moved.
    pub fn drained_to<'a>(&self, meta: &'a ObjectMeta) -> Option<&'a str> {
        if !self.marked(meta) {
            return None;
        }
        meta.labels.as_ref()?.get(&drain_label(&self.ring)).map(String::as_str)
    }
}

/// Whether a copy of a parent at `version` was read before a write of this process left the parent at
/// `written` (both resourceVersions): a member's own release of it (`handover`), or any write the engine
/// made (`Memory::behind_own_write`). A driver's copy can lag behind such a write, and what is decided
/// from it is out of date: after a release, a child's write would not be refused by any guard.
/// Versions that are not numbers are not compared.
pub fn read_before(version: Option<&str>, written: &str) -> bool {
    match (version.and_then(|v| v.parse::<u64>().ok()), written.parse::<u64>()) {
        (Some(copy), Ok(written)) => copy < written,
        _ => false,
    }
}

/// A member's write to its parent made one the API server refuses once the parent was moved: a JSON
/// patch first tests the member's label; an apply (which cannot test) carries the resourceVersion the
/// member read, which any move changes. A merge patch is returned as it is: the engine's carry their
/// resourceVersion already.
pub fn guarded(patch: Patch<Value>, member: &Member, version: &str) -> Patch<Value> {
    match patch {
        Patch::Json(operations) => {
            let mut all = vec![member.test_op()];
            all.extend(operations.0.iter().filter_map(|op| serde_json::to_value(op).ok()));
            match serde_json::from_value(Value::Array(all)) {
                Ok(guarded) => Patch::Json(guarded),
                Err(_) => Patch::Json(operations),
            }
        }
        Patch::Apply(mut body) => {
            body["metadata"]["resourceVersion"] = version.into();
            Patch::Apply(body)
        }
        other => other,
    }
}

/// What the ring shares of one controller: the objects the coordinator labels for members. A
/// controller API plugs into the ring by saying this of its parents, and by selecting its member's label
/// in its own watches.
pub trait Shares: Send + Sync {
    /// The parents' resource.
    fn resource(&self) -> &ApiResource;
    /// The label and field selectors of the coordinator's watch of them (empty: every object).
    fn watched(&self) -> (String, String) {
        Default::default()
    }
    /// Whether the controller takes the parent `meta` describes: one it does not take is not labelled,
    /// but one labelled already still moves with the ring.
    fn takes(&self, meta: &ObjectMeta) -> bool;
    /// Whether telling which parents it takes needs their annotations (the coordinator's watch is then
    /// of whole objects: metadata feeds keep none).
    fn needs_annotations(&self) -> bool {
        false
    }
    /// Whether members serve a gone member's parents by its adoption record before they are relabelled;
    /// if so, the coordinator holds off relabelling them for a lease duration, so as not to compete.
    fn adopts(&self) -> bool {
        false
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
    fn a_member_takes_and_lets_go_only_of_what_is_labelled_for_its_incarnation() {
        let me = Member::new("samples".into(), "a".into(), "x1");
        assert_eq!(me.incarnation, "a_x1");
        assert_eq!(me.selector(), "shard.samplectl.io/samples=a_x1");
        assert_eq!(me.lease(), "samples.a");
        assert!(me.marked(&meta(&[("shard.samplectl.io/samples", "a_x1")])));
        assert!(!me.marked(&meta(&[("shard.samplectl.io/samples", "a")])), "the name alone");
        assert!(!me.marked(&meta(&[("shard.samplectl.io/samples", "a_y2")])), "an earlier process of the name");
        assert!(!me.marked(&meta(&[("shard.samplectl.io/other", "a_x1")])));
        assert_eq!(me.drained_to(&meta(&[("shard.samplectl.io/samples", "a_x1")])), None);
        let draining = meta(&[("shard.samplectl.io/samples", "a_x1"), ("drain.shard.samplectl.io/samples", "b_z3")]);
        assert_eq!(me.drained_to(&draining), Some("b_z3"));
        let someone_elses =
            meta(&[("shard.samplectl.io/samples", "c_q4"), ("drain.shard.samplectl.io/samples", "b_z3")]);
        assert_eq!(me.drained_to(&someone_elses), None);
        assert_eq!(
            me.test_op(),
            serde_json::json!({"op": "test", "path": "/metadata/labels/shard.samplectl.io~1samples", "value": "a_x1"})
        );
    }

    #[test]
    fn a_members_writes_to_its_parent_are_refused_once_it_moved() {
        let me = Member::new("r".into(), "a".into(), "x1");
        let replace: json_patch::Patch =
            serde_json::from_value(serde_json::json!([{"op": "add", "path": "/status", "value": {"n": 1}}])).unwrap();
        let Patch::Json(ops) = guarded(Patch::Json(replace), &me, "9") else { panic!("still a JSON patch") };
        assert_eq!(
            serde_json::to_value(&ops).unwrap(),
            serde_json::json!([
                {"op": "test", "path": "/metadata/labels/shard.samplectl.io~1r", "value": "a_x1"},
                {"op": "add", "path": "/status", "value": {"n": 1}},
            ])
        );
        let apply = serde_json::json!({"metadata": {"name": "s"}, "status": {"n": 1}});
        let Patch::Apply(body) = guarded(Patch::Apply(apply), &me, "9") else { panic!("still an apply") };
        assert_eq!(body["metadata"], serde_json::json!({"name": "s", "resourceVersion": "9"}));
    }

    #[test]
    fn an_incarnation_fits_in_a_label_value_whatever_the_member_name() {
        let long = format!("{}-{}", "m".repeat(58), "abcd");
        let member = Member::new("r".into(), long.clone(), "k3x9qa");
        assert_eq!(member.incarnation.len(), 63);
        assert!(member.incarnation.starts_with(&"m".repeat(56)) && member.incarnation.ends_with("_k3x9qa"));
        // Cut where a '-' would end the name part: the value still starts and ends alphanumeric.
        let cut = Member::new("r".into(), format!("{}-b", "m".repeat(55)), "k3x9qa");
        assert_eq!(cut.incarnation, format!("{}_k3x9qa", "m".repeat(55)));
        assert_eq!(member.name, long, "the member's own name is kept whole for its Lease");
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

    #[test]
    fn a_copy_read_before_the_member_let_go_is_told_apart() {
        assert!(read_before(Some("41"), "42"), "the drained copy, before the release");
        assert!(read_before(Some("9"), "10"), "compared as numbers, not text");
        assert!(!read_before(Some("42"), "42"), "the release itself");
        assert!(!read_before(Some("57"), "42"), "labelled for this member again since");
        assert!(!read_before(Some("x"), "42") && !read_before(None, "42"));
    }
}
