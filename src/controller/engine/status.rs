//! Writing a parent's status: what `rules::status` decides should be there, written only when it would
//! change something, in the sync's style, with a log line and, when not Ready, a Warning Event.

use kube::api::DynamicObject;
use serde_json::Value;

use super::events::Kind;
use super::request::Failed;
use super::{Context, key, now, uid};
use crate::controller::rules::shard::guarded;
use crate::controller::rules::status::{Readiness, Written, desired, patch, summary};

impl Context {
    /// Writes the parent's status when it differs from what the parent holds: the sync's status (with
    /// `observedGeneration` where asked), and a problem with the children (a conflict, a failed write) in `Ready`.
    /// Returns the status the parent has now, and whether it was written.
    pub(super) async fn write_status(
        &self,
        parent: &DynamicObject,
        answered: Option<Value>,
        problem: Option<&Readiness>,
        observed_generation: bool,
    ) -> Result<(Value, bool), Failed> {
        let parent_uid = uid(parent);
        let generation = parent.metadata.generation.unwrap_or_default();
        let current = parent.data.get("status").cloned().unwrap_or(Value::Null);
        let status = desired(answered, &current, problem, (generation, observed_generation), &now());
        let version = parent.metadata.resource_version.clone().unwrap_or_default();
        if !self.memory.written.needs_write(&parent_uid, &status, &current, &version) {
            return Ok((current, false));
        }
        let name = parent.metadata.name.as_deref().unwrap_or_default();
        let ns = parent.metadata.namespace.as_deref();
        let ar = &self.definition.family.parent.ar;
        let (body, params) = patch(self.sync().status_style(), (&ar.api_version, &ar.kind), (ns, name), &status);
        let body = match &self.writer.member {
            Some(member) => guarded(body, member, &version),
            None => body,
        };
        let stored = self.fenced(&self.parent_api(parent)).patch_status(name, &params, &body).await?;
        self.memory.wrote(&parent_uid, stored.metadata.resource_version.as_deref());
        let stored = stored.data.get("status").cloned().unwrap_or(Value::Null);
        self.memory.written.remember(&parent_uid, Written::new(version, &status, &stored));
        let object = key(parent);
        match summary(&status) {
            Some(readiness) => {
                let flag = if readiness.ready { "True" } else { "False" };
                tracing::info!(
                    namespace = ns,
                    name,
                    outcome = "status",
                    ready = readiness.ready,
                    reason = readiness.reason.as_str(),
                    "{object}: status Ready={flag} ({}: {})",
                    readiness.reason,
                    readiness.message
                );
                if !readiness.ready {
                    self.event(parent, Kind::Warning, &readiness.reason, readiness.message.clone());
                }
            }
            None => tracing::info!(namespace = ns, name, outcome = "status", "{object}: status written"),
        }
        Ok((status, true))
    }
}
