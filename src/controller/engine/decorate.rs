//! A DecoratorController's writes to the object it decorates: the labels and annotations its hook
//! answered, in one merge patch guarded by the object's resourceVersion (a conflict means the object
//! moved on, and its next version is synced again), written only when they differ.

use kube::api::{DynamicObject, Patch, PatchParams};

use super::request::Failed;
use super::{Context, key, uid};
use crate::controller::rules::decorate::metadata_patch;
use crate::controller::sync::Answer;

impl Context {
    /// Makes `parent` say the labels and annotations `answer` holds. Returns whether it wrote.
    pub(super) async fn decorate(&self, parent: &DynamicObject, answer: &Answer) -> Result<bool, Failed> {
        let Some(patch) = metadata_patch(&parent.metadata, &answer.labels, &answer.annotations) else {
            return Ok(false);
        };
        let name = parent.metadata.name.as_deref().unwrap_or_default();
        let manager = self.definition.sync.field_managers().1;
        let params = PatchParams { field_manager: Some(manager.into()), ..PatchParams::default() };
        let written = self.fenced(&self.parent_api(parent)).patch(name, &params, &Patch::Merge(&patch)).await?;
        self.memory.wrote(&uid(parent), written.metadata.resource_version.as_deref());
        let object = key(parent);
        tracing::info!(
            namespace = parent.metadata.namespace.as_deref(),
            name,
            outcome = "decorated",
            "{object}: labels and annotations written"
        );
        Ok(true)
    }
}
