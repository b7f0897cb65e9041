//! Putting the controller's finalizer on a parent and taking it off, each conditioned so that a concurrent
//! change to the parent's finalizers (another controller's) is never lost.

use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::json;

use super::request::Failed;
use super::{Context, uid};
use crate::controller::rules::shard::guarded;

impl Context {
    /// Adds the finalizer, as a merge patch conditioned on the resourceVersion read: a 409 is retried
    /// with backoff, from a fresh read.
    pub(super) async fn add_finalizer(&self, parent: &DynamicObject) -> Result<DynamicObject, Failed> {
        let mut finalizers: Vec<String> = parent.metadata.finalizers.clone().unwrap_or_default();
        finalizers.push(self.definition.finalizer.name.clone());
        let patch =
            json!({"metadata": {"resourceVersion": parent.metadata.resource_version, "finalizers": finalizers}});
        let name = parent.metadata.name.as_deref().unwrap_or_default();
        let mut updated =
            self.fenced(&self.parent_api(parent)).patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        updated.metadata.managed_fields = None;
        self.memory.wrote(&uid(parent), updated.metadata.resource_version.as_deref());
        Ok(updated)
    }

    /// Removes the finalizer with a JSON patch that first tests it is still where it was read, so that
    /// whatever else happened to the parent since (a status written a moment ago, other finalizers
    /// added), only this entry goes; if it moved, the patch fails and is retried from a fresh read.
    pub(super) async fn remove_finalizer(&self, parent: &DynamicObject) -> Result<(), Failed> {
        let name = &self.definition.finalizer.name;
        let Some(at) = parent.metadata.finalizers.iter().flatten().position(|f| f == name) else {
            return Ok(());
        };
        let path = format!("/metadata/finalizers/{at}");
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": path, "value": name},
            {"op": "remove", "path": path},
        ]))
        .expect("a well-formed JSON patch");
        // A shard member's test of its own label comes first: once the parent was moved, it is not its.
        let patch = match &self.writer.member {
            Some(member) => guarded(Patch::Json(patch), member, ""),
            None => Patch::Json(patch),
        };
        let parent_name = parent.metadata.name.as_deref().unwrap_or_default();
        match self.fenced(&self.parent_api(parent)).patch(parent_name, &PatchParams::default(), &patch).await {
            Ok(_) => Ok(()),
            // Already gone: the parent was deleted once the last finalizer went.
            Err(failed) if failed.status() == Some(404) => Ok(()),
            Err(failed) => Err(failed),
        }
    }
}
