//! A CompositeController made a [`Definition`]: its parent and child types resolved through discovery,
//! its hooks made callable, its finalizer (metacontroller's name for it, so either engine finishes what
//! the other started), its parent selector and resync period. What samplectl cannot run as written is
//! refused with the field that says it.

use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};

use super::api::{CompositeController, Method};
use super::flags::check;
use super::hooks::{Reach, callable, outside};
use crate::cluster::client::Connection;
use crate::cluster::resolve::{Gvr, Resolved, resolve_gvr};
use crate::controller::engine::{Definition, Rolling};
use crate::controller::rules::children::{Adoption, Family, Update};
use crate::controller::rules::finalizer::{Finalizer, metacontroller_finalizer};
use crate::controller::rules::rolling::{ConditionCheck, RollingType, Rollout};
use crate::controller::rules::selector::ParentSelector;
use crate::controller::sync::{Hooks, Shape, Syncer};

pub async fn define(conn: &Connection, cc: &CompositeController) -> Result<Definition> {
    let spec = &cc.spec;
    let (api_version, resource) = (&spec.parent_resource.api_version, &spec.parent_resource.resource);
    let parent = resolve(conn, api_version, resource, "spec.parentResource").await?;
    let entries = spec
        .child_resources
        .iter()
        .map(|c| (c.api_version.as_str(), c.resource.as_str(), c.update_strategy.as_ref().and_then(|s| s.method)));
    let (children, updates) = child_types(conn, "spec.childResources", entries, None).await?;
    let family = Family { parent, children, label_owned: false };
    check(&family)?;
    let rolling = rolling(conn, cc, &family).await?;

    let hooks = spec.hooks.as_ref().ok_or_else(|| anyhow!("spec.hooks: no hooks defined"))?;
    for (which, hook) in [("preUpdateChild", &hooks.pre_update_child), ("postUpdateChild", &hooks.post_update_child)] {
        if hook.is_some() {
            // metacontroller accepts these and never calls them; so does samplectl, saying so.
            tracing::warn!(
                controller = cc.metadata.name,
                "spec.hooks.{which} is never called (nor is it by metacontroller)"
            );
        }
    }
    let sync =
        hooks.sync.as_ref().ok_or_else(|| anyhow!("spec.hooks.sync: a CompositeController needs a sync hook"))?;
    let reach = Reach { client: &conn.client, endpoints: &spec.endpoint_configs, proxy: outside() };
    let sync = callable("sync", sync, &reach)?;
    let finalize = hooks.finalize.as_ref().map(|hook| callable("finalize", hook, &reach)).transpose()?;
    let customize = hooks.customize.as_ref().map(|hook| callable("customize", hook, &reach)).transpose()?;
    let selector = spec.parent_resource.label_selector.clone();
    if let Some(selector) = &selector {
        selector.check().map_err(|why| anyhow!("spec.parentResource.labelSelector: {why}"))?;
    }
    let controller = serde_json::to_value(cc).context("cannot write the controller object as JSON")?;
    Ok(Definition {
        name: cc.metadata.name.clone(),
        finalizer: Finalizer {
            name: metacontroller_finalizer("CompositeController", &cc.metadata.name),
            enabled: finalize.is_some(),
        },
        family,
        sync: Syncer::Hook(Box::new(Hooks { sync, finalize, customize, controller, shape: Shape::Composite })),
        selector: ParentSelector { labels: selector, annotations: None },
        resync: resync(spec.resync_period_seconds),
        updates,
        adoption: Some(match spec.generate_selector {
            Some(true) => Adoption::ControllerUid,
            _ => Adoption::ParentSelector,
        }),
        rolling,
        ignore_status_changes: spec.parent_resource.ignore_status_changes == Some(true),
    })
}

/// The child types that roll and how, with the ControllerRevision type their history is kept in; `None`
/// when none rolls.
async fn rolling(conn: &Connection, cc: &CompositeController, family: &Family) -> Result<Option<Rolling>> {
    let spec = &cc.spec;
    let mut types = Vec::new();
    for (index, child) in spec.child_resources.iter().enumerate() {
        let Some(strategy) = &child.update_strategy else { continue };
        let in_place = match strategy.method {
            Some(Method::RollingInPlace) => true,
            Some(Method::RollingRecreate) => false,
            _ => continue,
        };
        if !family.parent.namespaced {
            bail!(
                "spec.childResources[{index}].updateStrategy.method: {:?} needs a namespaced parent: a rollout's \
                 ControllerRevisions live in the parent's namespace (metacontroller cannot roll a cluster-scoped \
                 parent's children either)",
                strategy.method.unwrap_or_default()
            );
        }
        let checks = strategy.status_checks.iter().flat_map(|c| &c.conditions);
        let checks = checks
            .map(|c| ConditionCheck { type_: c.type_.clone(), status: c.status.clone(), reason: c.reason.clone() })
            .collect();
        let ar = &family.children[index].ar;
        types.push((index, ar.group.clone(), ar.kind.clone(), RollingType { in_place, checks }));
    }
    if types.is_empty() {
        return Ok(None);
    }
    let revisions =
        resolve(conn, "metacontroller.k8s.io/v1alpha1", "controllerrevisions", "rolling updates").await.context(
            "a rolling update keeps its history in metacontroller's ControllerRevisions; install their CRD with \
             `samplectl install-crd --metacontroller`",
        )?;
    let field_paths = match &spec.parent_resource.revision_history {
        Some(history) if !history.field_paths.is_empty() => history.field_paths.clone(),
        _ => vec!["spec".to_owned()],
    };
    Ok(Some(Rolling {
        rollout: Rollout { types, field_paths },
        revisions,
        generated_selector: spec.generate_selector == Some(true),
    }))
}

/// A controller's child (or attachment) types under `list` (`spec.childResources`), each resolved
/// through discovery and given once, with its update method; a rolling method is refused when
/// `refuse_rolling` says why, and otherwise writes a child as its non-rolling twin does.
pub(super) async fn child_types<'a>(
    conn: &Connection,
    list: &str,
    entries: impl Iterator<Item = (&'a str, &'a str, Option<Method>)>,
    refuse_rolling: Option<&str>,
) -> Result<(Vec<Resolved>, Vec<Update>)> {
    let (mut types, mut updates): (Vec<Resolved>, Vec<Update>) = (Vec::new(), Vec::new());
    for (i, (api_version, resource, method)) in entries.enumerate() {
        let field = format!("{list}[{i}]");
        let resolved = resolve(conn, api_version, resource, &field).await?;
        if types.iter().any(|c| c.ar.api_version == resolved.ar.api_version && c.ar.kind == resolved.ar.kind) {
            bail!("{field}: {} is given twice", resolved.qualified_plural());
        }
        let method = method.unwrap_or_default();
        updates.push(match method {
            Method::OnDelete => Update::OnDelete,
            Method::Recreate => Update::Recreate,
            Method::InPlace => Update::InPlace,
            Method::RollingRecreate | Method::RollingInPlace if let Some(why) = refuse_rolling => {
                bail!("{field}.updateStrategy.method: {method:?} {why}")
            }
            Method::RollingRecreate => Update::Recreate,
            Method::RollingInPlace => Update::InPlace,
        });
        types.push(resolved);
    }
    Ok((types, updates))
}

/// `resyncPeriodSeconds`: metacontroller raises a period under a second to one second.
pub(super) fn resync(seconds: Option<i32>) -> Option<Duration> {
    seconds.map(|s| Duration::from_secs(u64::try_from(s.max(1)).unwrap_or(1)))
}

/// The type `apiVersion` and `resource` name, through discovery; `field` says where they were given.
pub(super) async fn resolve(conn: &Connection, api_version: &str, resource: &str, field: &str) -> Result<Resolved> {
    let gvr = Gvr::parse(&format!("{api_version}/{resource}")).map_err(|why| anyhow!("{field}: {why}"))?;
    resolve_gvr(&conn.client, &gvr).await.with_context(|| field.to_owned())
}
