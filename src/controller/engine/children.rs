//! Writing and deleting one parent's children so that no interleaving can take over or delete an object
//! that is not the parent's: a missing child is created with a POST, which fails if the name was taken in
//! the meantime; an existing one is updated or deleted only with its uid and resourceVersion as
//! preconditions, so that an object which changed hands (or just changed) since it was read is never
//! touched. Either refusal sends samplectl back to the API server for the object as it is, and the
//! decision (`rules::children::action`) is made again.

use std::collections::BTreeMap;

use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use serde_json::Value;

use super::request::{Failed, bounded};
use super::{Applied, Context, failure, key, place, uid};
use crate::controller::rules::child_write::{ChildWrite, look_again, next_write, owned_as_applied};
use crate::controller::rules::children::{ChildKey, Observed, Update, conflict_message, controlled_by};
use crate::controller::rules::graph::applyset as graph_applyset;
use crate::controller::rules::selector::LabelSelector;
use crate::controller::rules::status::Readiness;
use crate::controller::sync::Syncer;

/// What writing one child came to.
enum ChildOutcome {
    Unchanged,
    /// An orphan made the parent's (and then written as wanted, if it differed).
    Adopted,
    Created,
    Updated,
    /// Deleted, to be created as wanted once it is gone (`Recreate`).
    Deleted,
    /// An object of that name is not this parent's: why.
    Conflict(String),
}

impl Context {
    /// Whether the parent, read from the API server, is the one in hand (same uid) and not being deleted.
    async fn still_there(&self, parent: &DynamicObject) -> Result<bool, Failed> {
        let name = parent.metadata.name.as_deref().unwrap_or_default();
        let fresh = bounded(self.parent_api(parent).get_opt(name)).await?;
        Ok(fresh.is_some_and(|p| p.metadata.uid == parent.metadata.uid && p.metadata.deletion_timestamp.is_none()))
    }

    /// What is done to a child of type `kind` that differs from what its parent wants.
    fn update_of(&self, kind: usize) -> Update {
        self.definition.updates.get(kind).copied().unwrap_or_default()
    }

    /// Writes every desired child that differs from what the parent has, and deletes the children it
    /// controls and no longer wants. Goes on past a failure, so that one bad child does not hold up the
    /// others; the first failure is kept for the reconcile to report.
    pub(super) async fn apply_children(
        &self,
        parent: &DynamicObject,
        children: &Observed,
        desired: &BTreeMap<ChildKey, Value>,
    ) -> Applied {
        let object = key(parent);
        let parent_uid = uid(parent);
        let known_conflicts = self.memory.conflicts.of(&parent_uid);
        let adopt = self.definition.adoption.and_then(|adoption| adoption.selector(parent));
        let mut applied = Applied::default();
        for (key, body) in desired {
            let kind = self.definition.family.children[key.kind].ar.kind.clone();
            let mut seen = children.get(key).cloned();
            // Last time someone else's object was in the way: read it rather than send a create bound to fail.
            if seen.is_none() && known_conflicts.contains(key) {
                match bounded(self.child_api(key.kind, &key.namespace).get_opt(&key.name)).await {
                    Ok(found) => seen = found,
                    Err(failed) => {
                        applied.failure.get_or_insert(failure(&object, &format!("reading its {kind}"), failed));
                        continue;
                    }
                }
            }
            match self.write_child(parent, key, body, seen, adopt.as_ref()).await {
                Ok(ChildOutcome::Unchanged) => {}
                Ok(
                    outcome @ (ChildOutcome::Created
                    | ChildOutcome::Updated
                    | ChildOutcome::Deleted
                    | ChildOutcome::Adopted),
                ) => {
                    let word = match outcome {
                        ChildOutcome::Created => "created",
                        ChildOutcome::Adopted => "adopted",
                        ChildOutcome::Updated => "updated",
                        // To be recreated as wanted once it is gone.
                        _ => "deleted",
                    };
                    applied.wrote = true;
                    self.changed(parent, &kind, key, word);
                }
                Ok(ChildOutcome::Conflict(why)) => {
                    applied.conflicts.insert(key.clone());
                    applied.problem.get_or_insert(Readiness::not_ready(&format!("{kind}Conflict"), why));
                }
                Err((action, failed)) => {
                    let message = failed.message();
                    // Named as a Sample's ConfigMap always was: by name, unless it lives elsewhere.
                    let name = match key.namespace == parent.metadata.namespace.clone().unwrap_or_default() {
                        true => key.name.clone(),
                        false => key.to_string(),
                    };
                    applied.problem =
                        Some(Readiness::not_ready("ApplyFailed", format!("cannot write {kind} {name}: {message}")));
                    applied.refusal.get_or_insert(failed.go_message());
                    applied.failure.get_or_insert(super::ReconcileError { object: object.clone(), action, message });
                }
            }
        }
        for (key, child) in children {
            if desired.contains_key(key) {
                continue;
            }
            let kind = self.definition.family.children[key.kind].ar.kind.clone();
            match self.delete_child(&parent_uid, key, child).await {
                Ok(true) => {
                    applied.wrote = true;
                    self.changed(parent, &kind, key, "deleted");
                }
                Ok(false) => {}
                Err(failed) => {
                    applied.failure.get_or_insert(failure(&object, &format!("deleting its {kind}"), failed));
                }
            }
        }
        applied
    }

    fn child_manager(&self) -> &'static str {
        self.definition.sync.field_managers().0
    }

    /// Makes the fields of a graph's child just created samplectl's applied ones (`rules::child_write::
    /// owned_as_applied`), as kro's children are from their start. A failure only means a later apply
    /// cannot drop what this create wrote: said in the log, not a failed reconcile.
    ///
    /// A hook's children are turned only before their first apply (`turned_before_apply`): most are
    /// never updated, and metacontroller's own creates leave them owned by their create too. The Sample
    /// sync always wants the same fields of its ConfigMap, so nothing it wrote ever needs dropping.
    async fn own_as_applied(&self, api: &kube::Api<DynamicObject>, created: &DynamicObject) {
        if !matches!(self.definition.sync, crate::controller::sync::Syncer::Graph(_)) {
            return;
        }
        let Some(patch) = owned_as_applied(created, self.child_manager()) else { return };
        let Ok(patch) = serde_json::from_value::<json_patch::Patch>(patch) else { return };
        let name = created.metadata.name.as_deref().unwrap_or_default();
        let patched = self.fenced(api).patch(name, &PatchParams::default(), &Patch::<()>::Json(patch)).await;
        if let Err(failed) = patched {
            tracing::debug!("{name}: its fields stay owned by its create: {}", failed.message());
        }
    }

    /// Before a hook's child is first applied: its fields still owned by its create are made samplectl's
    /// applied ones (`owned_as_applied`), so that the apply can drop what the sync no longer wants. The
    /// watch's copy carries no managed fields, so the child is read again; the turn is made only on a
    /// child the parent still controls, guarded by the version read. The copy read (or turned) comes back
    /// to decide on again; `None` when the child is gone.
    async fn turned_before_apply(
        &self,
        api: &kube::Api<DynamicObject>,
        name: &str,
        parent_uid: &str,
    ) -> Result<Option<DynamicObject>, Failed> {
        let Some(fresh) = bounded(api.get_opt(name)).await? else { return Ok(None) };
        let ours = controlled_by(&fresh.metadata, parent_uid) && fresh.metadata.deletion_timestamp.is_none();
        let Some(patch) = owned_as_applied(&fresh, self.child_manager()).filter(|_| ours) else {
            return Ok(Some(fresh));
        };
        let patch = serde_json::from_value::<json_patch::Patch>(patch).expect("owned_as_applied makes a JSON patch");
        self.fenced(api).patch(name, &PatchParams::default(), &Patch::<()>::Json(patch)).await.map(Some)
    }

    /// Writes one child: the copy in hand decides first (`rules::child_write`), then the live object at
    /// most twice (once more when it may be adopted), so that an object which changes under every
    /// attempt is left to the retry backoff rather than fought over.
    async fn write_child(
        &self,
        parent: &DynamicObject,
        key: &ChildKey,
        desired: &Value,
        seen: Option<DynamicObject>,
        adopt: Option<&LabelSelector>,
    ) -> Result<ChildOutcome, (String, Failed)> {
        let api = self.child_api(key.kind, &key.namespace);
        let parent_uid = uid(parent);
        let kind = &self.definition.family.children[key.kind].ar.kind;
        let (mut seen, mut adopted, mut turned) = (seen, false, false);
        let left = |adopted: bool| Ok(if adopted { ChildOutcome::Adopted } else { ChildOutcome::Unchanged });
        // One more for a hook's child, whose first update may begin with its turn (`turned_before_apply`).
        let attempts =
            if adopt.is_some() { 4 } else { 3 } + usize::from(matches!(self.definition.sync, Syncer::Hook(_)));
        for attempt in 0..attempts {
            let write = next_write(seen.as_ref(), desired, &parent_uid, adopt, self.update_of(key.kind));
            let result = match &write {
                ChildWrite::Leave => return left(adopted),
                ChildWrite::Refuse => {
                    let existing = seen.as_ref().expect("a refusal is of an object");
                    let why = graph_applyset::conflict(&existing.metadata, desired).unwrap_or_else(|| {
                        conflict_message(&existing.metadata, key, kind, parent, &self.definition.family)
                    });
                    return Ok(ChildOutcome::Conflict(why));
                }
                ChildWrite::Adopt(patch) => {
                    // The ControllerRef rules: adopt only for a parent that is, read from the API server
                    // now rather than from a cache that may be behind, still there and not being deleted.
                    let parent_kind = &self.definition.family.parent.ar.kind;
                    if !self.still_there(parent).await.map_err(|f| (format!("reading its {parent_kind}"), f))? {
                        return left(adopted);
                    }
                    match self.fenced(&api).patch(&key.name, &PatchParams::default(), &Patch::Merge(patch)).await {
                        Ok(now_ours) => {
                            (adopted, seen) = (true, Some(now_ours));
                            continue;
                        }
                        Err(failed) => Err(failed),
                    }
                }
                ChildWrite::Label(patch) => {
                    match self.fenced(&api).patch(&key.name, &PatchParams::default(), &Patch::Merge(patch)).await {
                        Ok(labelled) => {
                            seen = Some(labelled);
                            continue;
                        }
                        Err(failed) => Err(failed),
                    }
                }
                ChildWrite::Create => {
                    let object: DynamicObject = serde_json::from_value(desired.clone())
                        .map_err(|err| (format!("writing its {kind}"), Failed::Api(kube::Error::SerdeError(err))))?;
                    let params =
                        PostParams { field_manager: Some(self.child_manager().into()), ..PostParams::default() };
                    crate::controller::stages::reached("create sent", &object.metadata);
                    match self.fenced(&api).create(&params, &object).await {
                        Ok(created) => {
                            crate::controller::stages::reached("create answered", &created.metadata);
                            self.own_as_applied(&api, &created).await;
                            Ok(ChildOutcome::Created)
                        }
                        Err(failed) => Err(failed),
                    }
                }
                ChildWrite::Apply(_) | ChildWrite::Recreate(_)
                    if !turned && matches!(self.definition.sync, Syncer::Hook(_)) =>
                {
                    turned = true;
                    match self.turned_before_apply(&api, &key.name, &parent_uid).await {
                        // Decided again on the copy read or turned, applied next time round.
                        Ok(now) => {
                            seen = now;
                            continue;
                        }
                        Err(failed) => Err(failed),
                    }
                }
                ChildWrite::Recreate(body) => {
                    let existing = seen.as_ref().expect("a recreate is of an object");
                    let mut params = PatchParams::apply(self.child_manager()).force();
                    params.dry_run = true;
                    match self.fenced(&api).patch(&key.name, &params, &Patch::Apply(body)).await {
                        Ok(would_be) if same_object(existing, &would_be) => return left(adopted),
                        Ok(_) => {
                            return match self.delete_child(&parent_uid, key, existing).await {
                                Ok(true) => Ok(ChildOutcome::Deleted),
                                Ok(false) => Ok(ChildOutcome::Unchanged),
                                Err(failed) => Err((format!("deleting its {kind} to recreate it"), failed)),
                            };
                        }
                        // A stale copy: read again below.
                        Err(failed) => Err(failed),
                    }
                }
                ChildWrite::Apply(body) => {
                    let params = PatchParams::apply(self.child_manager()).force();
                    self.fenced(&api)
                        .patch(&key.name, &params, &Patch::Apply(body))
                        .await
                        .map(|_| ChildOutcome::Updated)
                }
            };
            match result {
                Ok(outcome) => return Ok(outcome),
                Err(failed) if attempt + 1 < attempts && look_again(&write, failed.status()) => {
                    if write == ChildWrite::Create {
                        self.memory.conflicts.note(&parent_uid, place(parent), key);
                    }
                    seen = bounded(api.get_opt(&key.name)).await.map_err(|f| (format!("reading its {kind}"), f))?;
                }
                Err(failed) => return Err((format!("writing its {kind}"), failed)),
            }
        }
        // Only an adoption, a labelling or a turn on the last attempt gets here; the write it may still
        // need comes with the next reconcile, which that write itself triggers.
        Ok(if adopted { ChildOutcome::Adopted } else { ChildOutcome::Updated })
    }

    /// Deletes a child the parent controls and no longer wants, only as it was read: if it changed since
    /// (perhaps into someone else's), it is read again and deleted only if still the parent's.
    async fn delete_child(&self, parent_uid: &str, key: &ChildKey, seen: &DynamicObject) -> Result<bool, Failed> {
        let api = self.child_api(key.kind, &key.namespace);
        let mut seen = seen.clone();
        for attempt in 0..2 {
            // Not ours, or already going (a finalizer of its own holds it): nothing to send.
            if !controlled_by(&seen.metadata, parent_uid) || seen.metadata.deletion_timestamp.is_some() {
                return Ok(false);
            }
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: seen.metadata.uid.clone(),
                    resource_version: seen.metadata.resource_version.clone(),
                }),
                ..DeleteParams::background()
            };
            match self.fenced(&api).delete(&key.name, &params).await {
                Ok(_) => return Ok(true),
                Err(failed) if failed.status() == Some(404) => return Ok(false),
                Err(failed) if failed.status() == Some(409) && attempt == 0 => {
                    match bounded(api.get_opt(&key.name)).await? {
                        Some(fresh) if fresh.metadata.uid == seen.metadata.uid => seen = fresh,
                        _ => return Ok(false),
                    }
                }
                Err(failed) => return Err(failed),
            }
        }
        Ok(false)
    }
}

/// Whether a server-side dry run of the wanted child left it as it is (what only the server keeps aside).
fn same_object(existing: &DynamicObject, would_be: &DynamicObject) -> bool {
    let comparable = |object: &DynamicObject| {
        let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
        if let Some(metadata) = value["metadata"].as_object_mut() {
            for kept_aside in ["resourceVersion", "managedFields", "generation"] {
                metadata.remove(kept_aside);
            }
        }
        // Items of a list carry no apiVersion and kind.
        if let Some(fields) = value.as_object_mut() {
            fields.remove("apiVersion");
            fields.remove("kind");
        }
        value
    };
    comparable(existing) == comparable(would_be)
}
