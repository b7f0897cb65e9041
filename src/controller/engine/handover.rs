//! Letting go of a parent the shard coordinator is moving to another member (see `rules::shard`): the
//! children this member wrote are relabelled for the new member first, so that its watch has them when
//! the parent arrives, then both sharding labels come off the parent, guarded by the resourceVersion
//! read. The coordinator labels the parent for the new member only after that.

use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use super::request::bounded;
use super::{Context, Done, Outcome, ReconcileError, failure, key, uid};
use crate::controller::rules::children::{Observed, controlled_by};
use crate::controller::rules::shard::{Member, drain_label};

impl Context {
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
            if !controlled_by(&child.metadata, &uid(parent)) || !member.holds(&child.metadata) {
                continue;
            }
            let patch =
                json!({"metadata": {"resourceVersion": child.metadata.resource_version, "labels": {&label: to}}});
            let api = self.child_api(child_key.kind, &child_key.namespace);
            match bounded(api.patch(&child_key.name, &PatchParams::default(), &Patch::Merge(&patch))).await {
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
        match bounded(self.parent_api(parent).patch(name, &PatchParams::default(), &Patch::Merge(&patch))).await {
            Ok(_) => tracing::info!(controller = self.name, "{object}: handed over to shard member {to}"),
            // Changed since it was read: the watch (or the next tick) brings the new version, and this
            // member lets go of it then if it is still its own and still being moved.
            Err(failed) if matches!(failed.status(), Some(404 | 409)) => {}
            Err(failed) => return Err(failure(&object, "handing it over to the next shard member", failed)),
        }
        Ok(Done { outcome: Outcome::Ignored, resync_after: None, wrote: true })
    }
}
