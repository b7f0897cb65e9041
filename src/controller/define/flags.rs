//! The controllers the command line defines: the built-in Sample controller, and `--hook` / `--hook-url`
//! with its `--child` types, one CompositeController in short.

use anyhow::{Result, bail};

use crate::cluster::client::Connection;
use crate::cluster::resolve::{Resolved, resolve_gvr};
use crate::controller::engine::Definition;
use crate::controller::rules::children::Family;
use crate::controller::rules::finalizer::{FINALIZER, Finalizer};
use crate::controller::rules::selector::ParentSelector;
use crate::controller::settings::HookSettings;
use crate::controller::sync::hook::Hook;
use crate::controller::sync::{Hooks, Shape, Syncer, controller_object};

/// The Sample controller: the built-in sync, with ConfigMaps as its one child type (a core type, known
/// without asking discovery).
pub fn built_in(samples: Resolved) -> Definition {
    let configmaps = Resolved {
        ar: kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        namespaced: true,
        verbs: Vec::new(),
        subresources: Vec::new(),
    };
    Definition {
        name: "samples".into(),
        family: Family { parent: samples, children: vec![configmaps], label_owned: false },
        sync: Syncer::Sample,
        finalizer: Finalizer { name: FINALIZER.into(), enabled: false },
        selector: ParentSelector::default(),
        resync: None,
        updates: Vec::new(),
        adoption: None,
        rolling: None,
        ignore_status_changes: false,
    }
}

/// A hook's controller: its child types resolved, and refused when they cannot work with the parent.
pub async fn hooked(conn: &Connection, parent: Resolved, hook: &HookSettings) -> Result<Definition> {
    let mut children: Vec<Resolved> = Vec::new();
    for gvr in &hook.children {
        let child = resolve_gvr(&conn.client, gvr).await?;
        if !children.iter().any(|c| c.ar.api_version == child.ar.api_version && c.ar.kind == child.ar.kind) {
            children.push(child);
        }
    }
    let family = Family { parent, children, label_owned: false };
    check(&family)?;
    let controller = controller_object(&family, "samplectl");
    let hooks = Hooks {
        sync: Hook::new(hook.target.clone(), hook.timeout)?.processes(hook.processes),
        finalize: None,
        customize: None,
        controller,
        shape: Shape::Composite,
    };
    Ok(Definition {
        name: "hook".into(),
        family,
        sync: Syncer::Hook(Box::new(hooks)),
        finalizer: Finalizer { name: FINALIZER.into(), enabled: hook.finalize },
        selector: ParentSelector::default(),
        resync: None,
        updates: Vec::new(),
        adoption: None,
        rolling: None,
        ignore_status_changes: false,
    })
}

/// What no hook controller can work with: a cluster-scoped child of a namespaced parent, or a parent
/// without a status subresource.
pub(super) fn check(family: &Family) -> Result<()> {
    if let Some(why) = family.mismatch() {
        bail!("cannot reconcile with these child types: {why}");
    }
    // Writing status to a parent without the subresource would bump its generation on every write and
    // sync forever (metacontroller refuses these too).
    if !family.parent.subresources.iter().any(|s| s == "status") {
        bail!(
            "{} has no status subresource: writing a hook's status to it would bump its generation and loop; add \
             `subresources: {{status: {{}}}}` to its CRD's version",
            family.parent.qualified_plural()
        );
    }
    Ok(())
}
