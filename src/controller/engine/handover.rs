//! A parent changing hands in a shard ring (see `rules::shard`).
//!
//! Letting go of a parent the coordinator is moving to another member: the children this member wrote
//! are relabelled for the new member first, so that its watch has them when the parent arrives, then
//! both sharding labels come off the parent, guarded by the resourceVersion read. The coordinator labels
//! the parent for the new member only after that. From then on this process writes nothing for the
//! parent from a copy read before its release (a driver's cache can lag behind it by a moment): the
//! parent's own writes would be refused by their guard, but a child's would not.
//!
//! Taking a parent in: a member's watch of children sees only those labelled for it, and a member that
//! died (or an earlier process of the same name) left its children labelled for itself. So the first
//! reconcile of a parent in this process also lists the children labelled with the parent's uid,
//! whatever member they name (many parents to a list: `take_in.rs`): the ones the sync still wants are
//! relabelled as they are written, the others deleted (each with its uid and resourceVersion as
//! preconditions), so none is left behind. A child create the old member sent just before it stopped can
//! still arrive after this (the one write no precondition can fence), labelled for the old member. One
//! from a live member (or one that died, sent before it did) arrives within the API server's request
//! timeout, so the member looks once more at its first reconcile [`LOOK_AGAIN_AFTER`] after the first
//! look (a resync's, at the latest); one from a process frozen past its Lease can come at any time, but
//! is labelled for an incarnation no longer live, which the member's stray list (`strays.rs`) finds
//! whenever it comes, and the parent is looked for again then. Looking again every 10 minutes instead
//! cost the API server a pass over every child of the namespace per 100 parents held: at 100,000
//! Samples 5 to 7 such lists a second for a minute in every ten, and a member killed during that minute
//! was served again 4 s later than one killed outside it.
//!
//! A driver may have that look made before the reconcile has a slot (`look`, then `reconcile` with what
//! it found), so that parents waiting for a list do not hold the slots: with each look holding one, a
//! list asked for no more parents than `--concurrency`, and a member taking in 66,000 parents at 100,000
//! took in 12 a second. The look claims the parent first and the claim is held until the reconcile
//! ends, so no other context of this process writes its children in between; the old writer was
//! fenced before the parent was labelled for this member, which the look saw.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use super::adopting::{Claim, Serves};
use super::memory::Swept;
use super::take_in::Found;
use super::{Context, Done, Outcome, RECONCILE_TIMEOUT, ReconcileError, failure, key, uid};
use crate::controller::rules::children::{ChildKey, Observed, controlled_by};
use crate::controller::rules::shard::{Member, drain_label, read_before};

/// How long after taking a parent in a member looks for its children once more, whatever their member
/// label: past a late write of the member before, which the API server ends within its request timeout
/// (a minute).
pub const LOOK_AGAIN_AFTER: Duration = Duration::from_secs(120);

/// How many parents past `--concurrency` a driver lets wait for their look (`Context::look`): two lists'
/// worth, so that one list is being answered while the parents of the last are reconciled.
pub const LOOK_AHEAD: usize = 2 * super::take_in::BATCH;

/// A parent claimed and its children looked for whatever member they name (`Context::look`), for the
/// reconcile that follows.
pub struct Looked {
    uid: String,
    claim: Option<Claim>,
    found: Vec<Found>,
    /// When the look was asked for.
    since: Instant,
}

impl Looked {
    /// The claim, the children found and when they were asked for, if this look is `parent`'s.
    pub(super) fn of(self, parent: &DynamicObject) -> Option<(Option<Claim>, Vec<Found>, Instant)> {
        (self.uid == uid(parent)).then_some((self.claim, self.found, self.since))
    }
}

impl Context {
    /// Whether the next reconcile of `parent` first looks for its children whatever member they name:
    /// the first in this process of a parent labelled for its member (and not being moved away), one
    /// [`LOOK_AGAIN_AFTER`] after, and one whenever a stray list shows one of its children. An adopter's
    /// context finds the children by the gone label's watch, and looks for them only until that watch has
    /// listed them all (`children_complete`); the whole look is made once the parent is labelled for this
    /// member.
    pub fn looks_first(&self, parent: &DynamicObject) -> bool {
        let Some(member) = &self.writer.member else { return false };
        if self.writer.adopting.as_ref().is_some_and(|a| a.adopter) {
            return self.children_partial.load(Ordering::Relaxed) && member.marked(&parent.metadata);
        }
        if !member.marked(&parent.metadata) || member.drained_to(&parent.metadata).is_some() {
            return false;
        }
        let swept = self.memory.swept.lock().unwrap_or_else(|e| e.into_inner()).get(&uid(parent)).copied();
        match swept {
            None => true,
            // A look again is a pass over every child of the namespace in the API server. It waits while a
            // member is failed over, so that the failover's lists have the API server; a child it would
            // find then is found a few minutes later.
            Some(swept) => {
                swept.due(LOOK_AGAIN_AFTER) && !self.writer.adopting.as_ref().is_some_and(|a| a.failing_over())
            }
        }
    }

    /// Claims `parent` and looks for its children (`take_in`) ahead of its reconcile, which is then given
    /// the result; `None` when its reconcile makes no such look, or another context of this process is
    /// reconciling it.
    pub async fn look(&self, parent: &DynamicObject) -> Result<Option<Looked>, ReconcileError> {
        if !self.looks_first(parent) || self.released_since(parent) {
            return Ok(None);
        }
        // An adopter looks only for the parents the records give this member; the others are skipped.
        if self.serves(parent).is_some_and(|serves| serves != Serves::Yes) {
            return Ok(None);
        }
        let parent_uid = uid(parent);
        let claim = match &self.writer.adopting {
            Some(adopting) => match adopting.claim(&parent_uid, parent.metadata.resource_version.as_deref()) {
                Some(claim) => Some(claim),
                None => return Ok(None),
            },
            None => None,
        };
        let since = Instant::now();
        let found = match tokio::time::timeout(RECONCILE_TIMEOUT, self.children_of(parent)).await {
            Ok(found) => found?,
            Err(_) => {
                let message = format!("did not finish within {}s", RECONCILE_TIMEOUT.as_secs());
                return Err(ReconcileError { object: key(parent), action: "looking for its children".into(), message });
            }
        };
        Ok(Some(Looked { uid: parent_uid, claim, found, since }))
    }

    async fn children_of(&self, parent: &DynamicObject) -> Result<Vec<Found>, ReconcileError> {
        let namespace = parent.metadata.namespace.as_deref().unwrap_or_default();
        self.lookups.children_of(namespace, &uid(parent)).await.map_err(|(action, message)| ReconcileError {
            object: key(parent),
            action,
            message,
        })
    }

    /// `children` with every child of `parent` labelled with its uid added, when `looks_first` (`found`
    /// when a look was made ahead); and whether it looked.
    pub(super) async fn take_in(
        &self,
        parent: &DynamicObject,
        children: Observed,
        found: Option<Vec<Found>>,
    ) -> Result<(Observed, bool), ReconcileError> {
        let parent_uid = uid(parent);
        let found = match found {
            Some(found) => found,
            None if self.looks_first(parent) => self.children_of(parent).await?,
            None => return Ok((children, false)),
        };
        let mut children = children;
        for (kind, found) in found {
            if !controlled_by(&found.metadata, &parent_uid) {
                continue;
            }
            let place = ChildKey {
                kind,
                namespace: found.metadata.namespace.clone().unwrap_or_default(),
                name: found.metadata.name.clone().unwrap_or_default(),
            };
            // The newer copy: the driver's is this member's own and usually as recent, but an adopter's
            // watch may still be listing (its copy from before the look's list).
            let listed = found.metadata.resource_version.as_deref().unwrap_or_default();
            match children.get(&place) {
                Some(held) if !read_before(held.metadata.resource_version.as_deref(), listed) => {}
                _ => drop(children.insert(place, found)),
            }
        }
        Ok((children, true))
    }

    /// A reconcile of `parent` that looked for all its children (`take_in`), started at `since`, went
    /// through: they are all known now.
    pub(super) fn taken_in(&self, parent: &DynamicObject, since: Instant) {
        let mut swept = self.memory.swept.lock().unwrap_or_else(|e| e.into_inner());
        swept.entry(uid(parent)).and_modify(|swept| swept.looked(since)).or_insert(Swept {
            taken: since,
            last: since,
            stray: None,
        });
    }

    /// Whether this process handed `parent` over after the copy in hand was read (a driver's copy can
    /// lag behind the process's own release). A copy as new as the release, or newer, ends the memory.
    pub(super) fn released_since(&self, parent: &DynamicObject) -> bool {
        let mut released = self.memory.released.lock().unwrap_or_else(|e| e.into_inner());
        let Some(at) = released.get(&uid(parent)) else { return false };
        let before = read_before(parent.metadata.resource_version.as_deref(), at);
        if !before {
            released.remove(&uid(parent));
        }
        before
    }

    pub(super) async fn hand_over(
        &self,
        member: &Member,
        parent: &DynamicObject,
        children: &Observed,
        to: &str,
    ) -> Result<Done, ReconcileError> {
        let object = key(parent);
        let label = member.label();
        for (child_key, child) in children {
            if !controlled_by(&child.metadata, &uid(parent)) || !member.marked(&child.metadata) {
                continue;
            }
            let patch =
                json!({"metadata": {"resourceVersion": child.metadata.resource_version, "labels": {&label: to}}});
            let api = self.child_api(child_key.kind, &child_key.namespace);
            match self.fenced(&api).patch(&child_key.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                // Changed or gone since it was read: the new member finds it as it is and puts it right.
                Err(failed) if matches!(failed.status(), Some(404 | 409)) => {}
                Err(failed) => return Err(failure(&object, "relabelling its children for the next member", failed)),
                Ok(_) => {}
            }
        }
        let patch = json!({"metadata": {
            "resourceVersion": parent.metadata.resource_version,
            "labels": {&label: Value::Null, drain_label(&member.ring): Value::Null},
        }});
        let name = parent.metadata.name.as_deref().unwrap_or_default();
        match self.fenced(&self.parent_api(parent)).patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(released) => {
                let version = released.metadata.resource_version.unwrap_or_default();
                self.memory.released.lock().unwrap_or_else(|e| e.into_inner()).insert(uid(parent), version);
                // Should it come back, another member will have written for it: taken in afresh.
                self.memory.swept.lock().unwrap_or_else(|e| e.into_inner()).remove(&uid(parent));
                tracing::info!(controller = self.definition.name, "{object}: handed over to shard member {to}");
            }
            // Changed since it was read: the watch (or the next tick) brings the new version, and this
            // member lets go of it then if it is still its own and still being moved.
            Err(failed) if matches!(failed.status(), Some(404 | 409)) => {}
            Err(failed) => return Err(failure(&object, "handing it over to the next shard member", failed)),
        }
        Ok(Done { outcome: Outcome::Ignored, resync_after: None, wrote: true })
    }
}
