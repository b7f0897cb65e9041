//! A DecoratorController made [`Definition`]s, one per decorated resource: each type resolved through
//! discovery (a built-in kind, a CRD, cluster-scoped or not), its label and annotation selectors, the
//! attachment types and their update methods, the hooks (sync, finalize, customize) in the decorator's
//! shape, and metacontroller's finalizer name for it. What samplectl cannot run as written is refused
//! with the field that says it.

use anyhow::{Context, Result, anyhow, bail};

use super::api::DecoratorController;
use super::composite::{child_types, resolve, resync};
use super::hooks::{Reach, callable, outside};
use crate::cluster::client::Connection;
use crate::controller::engine::Definition;
use crate::controller::rules::children::Family;
use crate::controller::rules::finalizer::{Finalizer, metacontroller_finalizer};
use crate::controller::rules::selector::ParentSelector;
use crate::controller::sync::{Hooks, Shape, Syncer};

pub async fn define(conn: &Connection, dc: &DecoratorController) -> Result<Vec<Definition>> {
    let spec = &dc.spec;
    if spec.resources.is_empty() {
        bail!("spec.resources: a DecoratorController needs at least one resource to decorate");
    }
    let entries = spec
        .attachments
        .iter()
        .map(|a| (a.api_version.as_str(), a.resource.as_str(), a.update_strategy.as_ref().and_then(|s| s.method)));
    // metacontroller's DecoratorController has no rolling updates either.
    let (attachments, updates) =
        child_types(conn, "spec.attachments", entries, Some("is for a CompositeController's children only")).await?;
    let hooks = spec.hooks.as_ref().ok_or_else(|| anyhow!("spec.hooks: no hooks defined"))?;
    let controller = serde_json::to_value(dc).context("cannot write the controller object as JSON")?;
    let name = &dc.metadata.name;
    let reach = Reach { client: &conn.client, endpoints: &spec.endpoint_configs, proxy: outside() };

    let mut definitions = Vec::new();
    for (i, resource) in spec.resources.iter().enumerate() {
        let field = format!("spec.resources[{i}]");
        let parent = resolve(conn, &resource.api_version, &resource.resource, &field).await?;
        if definitions.iter().any(|d: &Definition| {
            d.family.parent.ar.api_version == parent.ar.api_version && d.family.parent.ar.kind == parent.ar.kind
        }) {
            bail!("{field}: {} is given twice", parent.qualified_plural());
        }
        let family = Family { parent, children: attachments.clone(), label_owned: false };
        if let Some(why) = family.mismatch() {
            bail!("{field}: cannot attach these types: {why}");
        }
        if let Some(selector) = &resource.label_selector {
            selector.check().map_err(|why| anyhow!("{field}.labelSelector: {why}"))?;
        }
        if let Some(selector) = &resource.annotation_selector {
            selector.check().map_err(|why| anyhow!("{field}.annotationSelector: {why}"))?;
        }
        // Each resource gets hooks of its own (they are cheap: a URL and a client).
        let sync =
            hooks.sync.as_ref().ok_or_else(|| anyhow!("spec.hooks.sync: a DecoratorController needs a sync hook"))?;
        let sync = callable("sync", sync, &reach)?;
        let finalize = hooks.finalize.as_ref().map(|hook| callable("finalize", hook, &reach)).transpose()?;
        let customize = hooks.customize.as_ref().map(|hook| callable("customize", hook, &reach)).transpose()?;
        definitions.push(Definition {
            name: name.clone(),
            finalizer: Finalizer {
                name: metacontroller_finalizer("DecoratorController", name),
                enabled: finalize.is_some(),
            },
            family,
            sync: Syncer::Hook(Box::new(Hooks {
                sync,
                finalize,
                customize,
                controller: controller.clone(),
                shape: Shape::Decorator,
            })),
            selector: ParentSelector {
                labels: resource.label_selector.clone(),
                annotations: resource.annotation_selector.clone(),
            },
            resync: resync(spec.resync_period_seconds),
            updates: updates.clone(),
            // A decorator adopts nothing: its attachments are the ones it made (its annotation says so).
            adoption: None,
            rolling: None,
            ignore_status_changes: resource.ignore_status_changes == Some(true),
        });
    }
    Ok(definitions)
}
