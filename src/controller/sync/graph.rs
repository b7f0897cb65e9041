//! The sync of a ResourceGraphDefinition's instances: the engine's inputs (the instance, the children
//! it controls, the objects its external references name) put to `rules::graph::instance::decide`, and
//! its decision returned as an answer the engine writes with its safe writes. The external references
//! are the instance's related objects: asked for as a customize hook would ask, so the engine reads them
//! at each reconcile, watches their type, and syncs the instance again when one changes.

use std::collections::HashMap;

use kube::api::DynamicObject;
use serde_json::Value;

use super::{Answer, Inputs, RelatedObjects, without_managed_fields};
use crate::controller::rules::graph::cel::Scope;
use crate::controller::rules::graph::expr;
use crate::controller::rules::graph::instance::{Origin, decide};
use crate::controller::rules::graph::rgd::{Graph, Source};
use crate::controller::rules::related::RelatedRule;
use crate::controller::rules::selector::LabelSelector;

/// One external reference's type, as discovery names it.
#[derive(Debug, Clone)]
pub struct ExternalType {
    pub id: String,
    pub api_version: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
}

pub struct GraphSync {
    pub graph: Graph,
    pub origin: Origin,
    pub external: Vec<ExternalType>,
}

/// A string of an external reference, its expressions (reading the instance only) evaluated.
fn rendered(text: &str, schema: &Value) -> Option<String> {
    match expr::template(text).ok()? {
        None => Some(text.to_owned()),
        Some(template) => match Scope::new(vec![("schema", schema)]).render(&template).ok()? {
            Value::String(s) => Some(s),
            other => Some(other.to_string()),
        },
    }
}

/// Runs `work` (an instance's expressions) where it cannot hold up the runtime's other tasks (Lease
/// renewals, probes, other controllers): on a multi-threaded runtime its worker hands them to another
/// thread first. Each expression is bounded (`rules::graph::cost`); this keeps even a bounded one from
/// standing in anyone's way.
pub fn off_the_runtime<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|runtime| runtime.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}

impl GraphSync {
    pub fn name(&self) -> String {
        format!("the graph of ResourceGraphDefinition {:?}", self.origin.rgd_name)
    }

    /// The objects the instance's external references name: by name (in the reference's namespace, or
    /// the instance's), or by label selector (in the reference's namespace, or all of them).
    pub fn related_rules(&self, parent: &DynamicObject) -> Vec<RelatedRule> {
        self.rules(parent).into_iter().map(|(_, rule)| rule).collect()
    }

    fn rules(&self, parent: &DynamicObject) -> Vec<(&ExternalType, RelatedRule)> {
        let schema = without_managed_fields(parent);
        let instance_namespace = parent.metadata.namespace.clone().unwrap_or_default();
        self.external
            .iter()
            .filter_map(|t| {
                let Source::External { name, namespace, selector } = &self.graph.node(&t.id)?.source else {
                    return None;
                };
                let namespace = match namespace {
                    Some(ns) => rendered(ns, &schema)?,
                    None if name.is_some() && t.namespaced => instance_namespace.clone(),
                    None => String::new(),
                };
                let names = match name {
                    Some(name) => vec![rendered(name, &schema)?],
                    None => Vec::new(),
                };
                let label_selector =
                    selector.as_ref().and_then(|s| serde_json::from_value::<LabelSelector>(s.clone()).ok());
                Some((
                    t,
                    RelatedRule {
                        api_version: t.api_version.clone(),
                        resource: t.plural.clone(),
                        label_selector,
                        namespace_selector: None,
                        namespace: if t.namespaced { namespace } else { String::new() },
                        names,
                    },
                ))
            })
            .collect()
    }

    /// What the instance should be, given what the engine observed.
    pub fn call(&self, inputs: Inputs<'_>, now: &str) -> Answer {
        let instance = without_managed_fields(inputs.parent);
        let children: Vec<Value> = inputs.children.values().map(without_managed_fields).collect();
        let external = self.external_objects(inputs.parent, inputs.related);
        let decision = decide(&self.graph, &self.origin, &instance, &children, &external, inputs.finalizing, now);
        Answer {
            status: Some(decision.status),
            children: decision.children,
            labels: decision.labels,
            annotations: decision.annotations,
            resync_after: None,
            finalized: decision.finalized,
        }
    }

    fn external_objects(&self, parent: &DynamicObject, related: &RelatedObjects) -> HashMap<String, Vec<Value>> {
        let mut found = HashMap::new();
        for (t, rule) in self.rules(parent) {
            let type_key = format!("{}.{}", t.kind, t.api_version);
            let objects = related.get(&type_key).map(Vec::as_slice).unwrap_or_default();
            let selected: Vec<Value> = objects
                .iter()
                .filter(|o| {
                    rule.names.is_empty() || rule.names.iter().any(|n| Some(n.as_str()) == o.metadata.name.as_deref())
                })
                .filter(|o| {
                    rule.namespace.is_empty() || o.metadata.namespace.as_deref() == Some(rule.namespace.as_str())
                })
                .filter(|o| {
                    let empty = Default::default();
                    rule.label_selector.as_ref().is_none_or(|s| s.matches(o.metadata.labels.as_ref().unwrap_or(&empty)))
                })
                .map(without_managed_fields)
                .collect();
            found.insert(t.id.clone(), selected);
        }
        found
    }
}
