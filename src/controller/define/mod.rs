//! Where controllers come from, each made a [`Definition`] the engine runs: the flags (`--hook`,
//! `--child`, or the built-in Sample controller; `flags`), and metacontroller's controller objects read
//! from manifests (`api` for their fields, `load` for reading them, `composite` for a CompositeController,
//! `hooks` for a hook's address and protocol). Everything a definition needs from the cluster (its
//! types, through discovery) is resolved here, and everything that cannot work is refused here, before
//! anything is written.

pub mod api;
mod composite;
mod decorator;
mod flags;
pub mod graph;
mod hooks;
pub mod hooks_dir;
pub mod load;
mod revisions;

use std::collections::HashSet;
use std::path::PathBuf;

use anyhow::{Result, bail};

use super::engine::Definition;
use super::rules::graph::rgd::Features;
use crate::cluster::client::Connection;
pub use flags::{built_in, hooked};
use load::Object;

/// The definitions one controller object makes: one for a CompositeController, one per resource for a
/// DecoratorController.
pub async fn from_object(conn: &Connection, object: &Object, features: Features) -> Result<Vec<Definition>> {
    let what = format!("{} {:?}", object.kind(), object.name());
    let definitions = match object {
        Object::Composite(cc) => composite::define(conn, cc).await.map(|d| vec![d]),
        Object::Decorator(dc) => decorator::define(conn, dc).await,
        Object::Graph(rgd) => {
            graph::from_manifest(conn, rgd, features).await.map(|d| vec![d]).map_err(anyhow::Error::msg)
        }
    };
    definitions.map_err(|err| err.context(format!("cannot run {what}")))
}

/// Every controller the manifests at `paths` hold, resolved and checked: none of them runs unless all of
/// them can.
pub async fn from_manifests(conn: &Connection, paths: &[PathBuf], features: Features) -> Result<Vec<Definition>> {
    let objects = load::read(paths)?;
    if objects.is_empty() {
        let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        bail!("no CompositeController, DecoratorController or ResourceGraphDefinition found in {}", shown.join(", "));
    }
    let mut definitions = Vec::new();
    let mut parents: Vec<(String, crate::controller::rules::selector::ParentSelector, String)> = Vec::new();
    let mut names: HashSet<(&'static str, &str)> = HashSet::new();
    for object in &objects {
        let what = format!("{} {:?}", object.kind(), object.name());
        if !names.insert((object.kind(), object.name())) {
            bail!("{what} is given twice");
        }
        let defined = from_object(conn, object, features).await?;
        if let Object::Composite(_) = object {
            // Two composites that could take one parent would fight over its children and status; of one
            // parent type they may sit side by side only with selectors no parent satisfies both.
            // Decorators of one type may, each with its own attachments and keys.
            let (parent, selector) = (defined[0].family.parent.qualified_plural(), defined[0].selector.clone());
            if let Some((_, _, other)) = parents.iter().find(|(p, s, _)| *p == parent && !s.disjoint(&selector)) {
                bail!(
                    "{other} and {what} both reconcile {parent}; two CompositeControllers of one parent type must \
                     have label selectors that no parent can satisfy both"
                );
            }
            parents.push((parent, selector, what.clone()));
        }
        definitions.extend(defined);
    }
    Ok(definitions)
}
