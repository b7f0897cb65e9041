//! A rolling CompositeController's sync: the parent's ControllerRevisions read, the sync hook asked once
//! per revision, the rollout moved one step on (`rules::rolling`), and the revisions written back before
//! any child is, so that what each child should be is on record before it is acted on (metacontroller's
//! order). Revisions are the parent's like its children: created with its controller reference,
//! updated with their resourceVersion, deleted with their uid as preconditions.

use std::collections::BTreeMap;

use futures::future::join_all;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams, Preconditions};
use serde_json::{Value, json};

use super::request::{Failed, bounded};
use super::{Context, ReconcileError, failure, key, now, uid};
use crate::cluster::resolve::Resolved;
use crate::cluster::scope;
use crate::controller::rules::FIELD_MANAGER;
use crate::controller::rules::children::{CONTROLLER_UID, ChildKey, Observed, controlled_by};
use crate::controller::rules::rolling::{
    API_GROUP_LABEL, Claims, RESOURCE_LABEL, Revision, Rollout, apply_patch, merged, patch_of, revision_name,
    set_updated, still_claims,
};
use crate::controller::sync::{Answer, Inputs, RelatedObjects};

/// A controller whose children roll: how, and the ControllerRevision type its history is kept in.
pub struct Rolling {
    pub rollout: Rollout,
    pub revisions: Resolved,
    /// With `generateSelector`, new revisions carry the `controller-uid` label (else the parent's
    /// `spec.template.metadata.labels`), as metacontroller labels them.
    pub generated_selector: bool,
}

/// One ControllerRevision as read: the object, and the claims it held then.
struct Stored {
    object: DynamicObject,
    claims: Vec<Claims>,
}

impl Context {
    /// The answer and the children to write for `parent`, its rollout moved one step on and recorded.
    /// Says whether a ControllerRevision was written.
    pub(super) async fn sync_rolling(
        &self,
        rolling: &Rolling,
        parent: &DynamicObject,
        children: &Observed,
        related: &RelatedObjects,
        finalizing: bool,
    ) -> Result<(Answer, BTreeMap<ChildKey, Value>, bool), ReconcileError> {
        let object = key(parent);
        let namespace = parent.metadata.namespace.clone().unwrap_or_default();
        let api = scope::dynamic(self.client.clone(), &rolling.revisions.ar, Some(&namespace));
        let parent_ar = &self.definition.family.parent.ar;
        let selector = format!("{API_GROUP_LABEL}={},{RESOURCE_LABEL}={}", parent_ar.group, parent_ar.plural);
        let listed = bounded(api.list(&ListParams::default().labels(&selector)))
            .await
            .map_err(|f| failure(&object, "listing its ControllerRevisions", f))?;
        let parent_uid = uid(parent);
        let paths = &rolling.rollout.field_paths;
        let parent_value = serde_json::to_value(parent).unwrap_or(Value::Null);
        let latest_patch = patch_of(&parent_value, paths);

        // The latest revision (the parent as it is) first; each older one materialised as the parent
        // with that revision's fields.
        let mut parents = vec![parent.clone()];
        let mut stored: Vec<Option<Stored>> = vec![None];
        let mut revisions = vec![Revision::default()];
        let mut unwanted = Vec::new();
        for item in listed.items.into_iter().filter(|r| controlled_by(&r.metadata, &parent_uid)) {
            let claims = Claims::from_value(&item.data["children"]);
            let patch = item.data.get("parentPatch").cloned().unwrap_or(json!({}));
            if patch == latest_patch {
                // Two records of the latest: the last one read is kept, as metacontroller keeps it.
                if let Some(earlier) = stored[0].replace(Stored { object: item, claims: claims.clone() }) {
                    unwanted.push(earlier.object);
                }
                revisions[0].claims = claims;
                continue;
            }
            let mut older = parent_value.clone();
            apply_patch(&mut older, &patch, paths);
            let older: DynamicObject = serde_json::from_value(older).map_err(|err| ReconcileError {
                object: object.clone(),
                action: "reading its ControllerRevisions".into(),
                message: format!(
                    "revision {} does not fit the parent: {err}",
                    item.metadata.name.as_deref().unwrap_or("")
                ),
            })?;
            parents.push(older);
            revisions.push(Revision { claims: claims.clone(), desired: BTreeMap::new() });
            stored.push(Some(Stored { object: item, claims }));
        }
        let latest_name = match &stored[0] {
            Some(latest) => latest.object.metadata.name.clone().unwrap_or_default(),
            None => revision_name(&parent_ar.plural, &parent_ar.group, &parent_uid, &latest_patch),
        };

        let now = now();
        let calls = parents.iter().map(|p| {
            let inputs = Inputs { parent: p, children, related, finalizing };
            self.definition.sync.call(&self.definition.family, inputs, &now)
        });
        let mut answers = Vec::with_capacity(parents.len());
        for answer in join_all(calls).await {
            answers.push(answer.map_err(|problem| self.sync_failed(parent, problem))?);
        }
        let mut order = Vec::new();
        for (position, (revision, answer)) in revisions.iter_mut().zip(&answers).enumerate() {
            let desired = self.desired_children(parent, answer)?;
            if position == 0 {
                order = desired.iter().map(|(key, _)| key.clone()).collect();
            }
            revision.desired = desired.into_iter().collect();
        }

        let standing = rolling.rollout.step(&mut revisions, &order, children, &namespace, &latest_name);
        match standing.reason {
            "RolloutProgressing" => tracing::info!(outcome = "rollout", "{object}: rollout: {}", standing.message),
            _ => tracing::debug!("{object}: rollout: {}: {}", standing.reason, standing.message),
        }
        let desired = merged(&revisions, &rolling.rollout, &namespace);
        let mut status = answers[0].status.clone().unwrap_or(json!({}));
        set_updated(&mut status, &standing);
        let answer = Answer {
            status: Some(status),
            children: answers[0].children.clone(),
            resync_after: answers.iter().filter_map(|a| a.resync_after).filter(|d| !d.is_zero()).min(),
            finalized: answers.iter().all(|a| a.finalized),
            ..Answer::default()
        };

        let wrote = self
            .record(rolling, &api, parent, (&revisions, &stored, unwanted), (&latest_name, &latest_patch))
            .await
            .map_err(|f| failure(&object, "writing its ControllerRevisions", f))?;
        Ok((answer, desired, wrote))
    }

    /// Writes the revisions as the step left them: the latest created or updated, older ones updated
    /// while they still claim a child and deleted once they claim none.
    async fn record(
        &self,
        rolling: &Rolling,
        api: &Api<DynamicObject>,
        parent: &DynamicObject,
        (revisions, stored, unwanted): (&[Revision], &[Option<Stored>], Vec<DynamicObject>),
        (latest_name, latest_patch): (&str, &Value),
    ) -> Result<bool, Failed> {
        let mut wrote = false;
        let mut gone = unwanted;
        for (revision, stored) in revisions.iter().zip(stored).skip(1) {
            if let Some(stored) = stored
                && !still_claims(revision)
            {
                gone.push(stored.object.clone());
            }
        }
        for revision in gone {
            let params = DeleteParams {
                preconditions: Some(Preconditions { uid: revision.metadata.uid.clone(), resource_version: None }),
                ..DeleteParams::background()
            };
            match self.fenced(api).delete(revision.metadata.name.as_deref().unwrap_or_default(), &params).await {
                Ok(_) => wrote = true,
                Err(failed) if failed.status() == Some(404) => {}
                Err(failed) => return Err(failed),
            }
        }
        for (position, (revision, stored)) in revisions.iter().zip(stored).enumerate() {
            match stored {
                Some(stored) if stored.claims == revision.claims => {}
                Some(_) if position > 0 && !still_claims(revision) => {}
                Some(stored) => {
                    let mut changed = stored.object.clone();
                    changed.data["children"] = Claims::to_value(&revision.claims);
                    let name = changed.metadata.name.clone().unwrap_or_default();
                    let params = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..PostParams::default() };
                    self.fenced(api).replace(&name, &params, &changed).await?;
                    wrote = true;
                }
                None => {
                    let body = self.new_revision(rolling, parent, latest_name, latest_patch, &revision.claims);
                    let params = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..PostParams::default() };
                    self.fenced(api).create(&params, &body).await?;
                    wrote = true;
                }
            }
        }
        Ok(wrote)
    }

    fn new_revision(
        &self,
        rolling: &Rolling,
        parent: &DynamicObject,
        name: &str,
        patch: &Value,
        claims: &[Claims],
    ) -> DynamicObject {
        let parent_ar = &self.definition.family.parent.ar;
        let mut labels = match rolling.generated_selector {
            true => json!({ CONTROLLER_UID: uid(parent) }),
            false => match &parent.data["spec"]["template"]["metadata"]["labels"] {
                Value::Object(labels) => Value::Object(labels.clone()),
                _ => json!({}),
            },
        };
        labels[API_GROUP_LABEL] = parent_ar.group.clone().into();
        labels[RESOURCE_LABEL] = parent_ar.plural.clone().into();
        let owner = json!({
            "apiVersion": parent_ar.api_version,
            "kind": parent_ar.kind,
            "name": parent.metadata.name,
            "uid": uid(parent),
            "controller": true,
            "blockOwnerDeletion": true,
        });
        let ar = &rolling.revisions.ar;
        let body = json!({
            "apiVersion": ar.api_version,
            "kind": ar.kind,
            "metadata": {
                "name": name,
                "namespace": parent.metadata.namespace,
                "labels": labels,
                "ownerReferences": [owner],
            },
            "parentPatch": patch,
            "children": Claims::to_value(claims),
        });
        serde_json::from_value(body).expect("a ControllerRevision built from JSON reads back")
    }
}
