//! The stray list: children labelled for no live member of the ring.
//!
//! A member looks for the children of a parent it takes in whatever member they name, and once more a
//! while later (`handover.rs`). What can still come after that is a child create sent by a process that
//! froze past its Lease and then went on: the coordinator gave up on its incarnation, so the child is
//! labelled for an incarnation no Lease names as live. One list per stray list, of every child carrying
//! a parent's uid and a member label naming none of the live incarnations, finds them; the parents among
//! them that this process holds are looked for again at their next reconcile, which deletes or relabels
//! the child as any look does. The API server answers the list with a pass over every child of the kind
//! (it has no index on labels), as it does a look of 100 parents: a driver makes one every resync, where
//! looking again for every parent's children cost a member one such pass per 100 parents it held.
//!
//! A child counted as a stray by mistake costs one look at its parent, never a write of its own; one
//! missed is found by a later list. So the list is made only on a view of the Leases read within a
//! renew deadline and with no member being failed over (`Adopting::live`): mid-failover, the gone
//! member's children are labelled for it by design, and its adopters look for them anyway.

use std::collections::{BTreeSet, HashSet};
use std::time::Instant;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ListParams;

use super::Context;
use super::request::bounded;
use crate::cluster::scope;
use crate::controller::rules::children::controlled_by;
use crate::controller::rules::shard::{PARENT_LABEL, member_label};

/// The label selector of the children written for a parent in `ring` by the controller `managed`
/// selects, labelled for a member incarnation not among `live`.
fn selector(managed: &str, ring: &str, live: &BTreeSet<String>) -> String {
    let label = member_label(ring);
    let live: Vec<&str> = live.iter().map(String::as_str).collect();
    format!("{managed},{PARENT_LABEL},{label},{label} notin ({})", live.join(","))
}

/// The uid of the parent a child listed as a stray is for, if a look would do something with it: one
/// being deleted, or that its labelled parent does not control, a look leaves alone, and counted it
/// would have its parent looked for at every resync.
fn stray_of(child: &ObjectMeta) -> Option<String> {
    let parent = child.labels.as_ref()?.get(PARENT_LABEL)?;
    (child.deletion_timestamp.is_none() && controlled_by(child, parent)).then(|| parent.clone())
}

impl Context {
    /// Lists the children labelled for no live member of the ring (those of kind `k` in `namespaces[k]`,
    /// every namespace when `None`), and has the parents among them that this process holds looked for
    /// again at their next reconcile; returns those parents' uids. Lists nothing outside a member's own
    /// context, or while `Adopting::live` has no answer.
    pub async fn strays(&self, namespaces: &[Option<String>]) -> Result<HashSet<String>, String> {
        let (Some(member), Some(adopting)) = (&self.writer.member, &self.writer.adopting) else {
            return Ok(HashSet::new());
        };
        let live = match adopting.adopter {
            true => None,
            false => adopting.live(),
        };
        let Some(live) = live else { return Ok(HashSet::new()) };
        let family = &self.definition.family;
        let selector = selector(&family.managed_selector(), &member.ring, &live);
        let sent = Instant::now();
        let mut parents = HashSet::new();
        for (kind, child) in family.children.iter().enumerate() {
            let namespace = namespaces.get(kind).cloned().flatten();
            let api = scope::dynamic(self.client.clone(), &child.ar, namespace.as_deref());
            let listed =
                bounded(api.list_metadata(&ListParams::default().labels(&selector))).await.map_err(|failed| {
                    format!(
                        "cannot list the {} labelled for no live shard member: {}",
                        child.ar.plural,
                        failed.message()
                    )
                })?;
            parents.extend(listed.items.into_iter().filter_map(|child| stray_of(&child.metadata)));
        }
        let mut swept = self.memory.swept.lock().unwrap_or_else(|e| e.into_inner());
        parents.retain(|uid| match swept.get_mut(uid) {
            Some(held) => {
                held.stray = held.stray.max(Some(sent));
                true
            }
            // Not this process's, or not taken in yet (its first reconcile looks anyway).
            None => false,
        });
        if !parents.is_empty() {
            tracing::info!(
                controller = self.definition.name,
                ring = member.ring,
                "{} {} have children labelled for no live shard member: looking for them again",
                parents.len(),
                family.parent.ar.plural
            );
        }
        Ok(parents)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_a_child_its_labelled_parent_controls_and_not_being_deleted_counts() {
        let child = |owner: &str, deleting: bool| {
            let meta = json!({
                "name": "c",
                "labels": {PARENT_LABEL: "p1"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "K", "name": "p", "uid": owner, "controller": true}],
                "deletionTimestamp": deleting.then_some("2026-11-28T00:00:00Z"),
            });
            serde_json::from_value::<ObjectMeta>(meta).unwrap()
        };
        assert_eq!(stray_of(&child("p1", false)).as_deref(), Some("p1"));
        assert_eq!(stray_of(&child("p2", false)), None, "controlled by another parent than its label names");
        assert_eq!(stray_of(&child("p1", true)), None, "being deleted");
        assert_eq!(stray_of(&ObjectMeta::default()), None, "no parent label");
    }

    #[test]
    fn the_selector_names_every_live_incarnation_and_needs_both_labels() {
        let live = BTreeSet::from(["m1_a".to_owned(), "m0_b".to_owned()]);
        assert_eq!(
            selector("samplectl.io/managed-by=samples", "samples", &live),
            "samplectl.io/managed-by=samples,parent.shard.samplectl.io/uid,shard.samplectl.io/samples,\
             shard.samplectl.io/samples notin (m0_b,m1_a)"
        );
    }
}
