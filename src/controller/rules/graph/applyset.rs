//! kro's ApplySet marks (KEP-3659, as kro's main branch writes them): the instance is the parent of an
//! ApplySet whose id is a hash of its name, namespace, kind and group; every child says it is part of
//! it; the instance lists the group-kinds and the namespaces beyond its own that its children are in.
//! samplectl finds its children by their instance labels, not by this inventory; it writes the marks so
//! that what tools read is what kro writes, and so that a cluster can move back to kro, which refuses a
//! parent whose inventory is not kro's (`ValidateParentInventory`).

use std::collections::BTreeSet;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use sha2::{Digest, Sha256};

pub const ID_LABEL: &str = "applyset.kubernetes.io/id";
pub const PART_OF_LABEL: &str = "applyset.kubernetes.io/part-of";
pub const TOOLING_ANNOTATION: &str = "applyset.kubernetes.io/tooling";
pub const GROUP_KINDS_ANNOTATION: &str = "applyset.kubernetes.io/contains-group-kinds";
pub const NAMESPACES_ANNOTATION: &str = "applyset.kubernetes.io/additional-namespaces";
pub const HASH_ANNOTATION: &str = "internal.kro.run/applyset-inventory-hash";
/// kro's field managers: its children's server-side applies, and the instance's inventory.
pub const CHILD_MANAGER: &str = "kro.run/applyset";
pub const PARENT_MANAGER: &str = "kro.run/applyset-parent";

fn digest(text: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(text.as_bytes()))
}

/// The ApplySet id of an instance: `applyset-<base64url(sha256(name.namespace.kind.group))>-v1`.
pub fn id(name: &str, namespace: &str, kind: &str, group: &str) -> String {
    format!("applyset-{}-v1", digest(&[name, namespace, kind, group].join(".")))
}

/// Why an object of a child's name cannot be the child, in kro's words, when the object says it is
/// part of another ApplySet than the one `desired` (a graph's child) names; `None` otherwise.
pub fn conflict(
    existing: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    desired: &Value,
) -> Option<String> {
    let wanted = desired["metadata"]["labels"][PART_OF_LABEL].as_str()?;
    let current = existing.labels.as_ref()?.get(PART_OF_LABEL).filter(|c| !c.is_empty() && *c != wanted)?;
    // Go's GroupVersionKind.String(): `group/version, Kind=Kind`, the group empty for the core one.
    let api_version = desired["apiVersion"].as_str().unwrap_or_default();
    let gvk = match api_version.contains('/') {
        true => format!("{api_version}, Kind={}", desired["kind"].as_str().unwrap_or_default()),
        false => format!("/{api_version}, Kind={}", desired["kind"].as_str().unwrap_or_default()),
    };
    let name = existing.name.as_deref().unwrap_or_default();
    let place = match existing.namespace.as_deref().filter(|n| !n.is_empty()) {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_owned(),
    };
    Some(format!(
        "resource belongs to a different ApplySet: {place} ({gvk}) belongs to ApplySet {current:?}, cannot reassign to \
         {wanted:?}"
    ))
}

/// What an instance's children span: `Kind` (core) or `Kind.group`, and the namespaces other than
/// the instance's own.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Inventory {
    group_kinds: BTreeSet<String>,
    namespaces: BTreeSet<String>,
}

impl Inventory {
    /// Counts in one child. `namespace` is where it lives, `None` when its kind is cluster-scoped.
    pub fn add(&mut self, api_version: &str, kind: &str, namespace: Option<&str>, parent_namespace: &str) {
        let group_kind = match api_version.split_once('/') {
            Some((group, _)) => format!("{kind}.{group}"),
            None => kind.to_owned(),
        };
        self.group_kinds.insert(group_kind);
        if let Some(namespace) = namespace.filter(|ns| *ns != parent_namespace) {
            self.namespaces.insert(namespace.to_owned());
        }
    }

    /// Counts in a child as its body says, `namespaced` telling its kind's scope.
    pub fn add_object(&mut self, object: &Value, namespaced: bool, parent_namespace: &str) {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let kind = object["kind"].as_str().unwrap_or_default();
        // A namespaced child without a namespace is made in the instance's (kro: in `default` when
        // the instance is cluster-scoped).
        let namespace = namespaced.then(|| match object["metadata"]["namespace"].as_str() {
            Some(ns) if !ns.is_empty() => ns,
            _ if parent_namespace.is_empty() => "default",
            _ => parent_namespace,
        });
        self.add(api_version, kind, namespace, parent_namespace);
    }

    /// The instance's annotations saying this inventory, `tooling` naming the writer.
    pub fn annotations(&self, id: &str, tooling: &str) -> Vec<(&'static str, String)> {
        let group_kinds = self.group_kinds.iter().cloned().collect::<Vec<_>>().join(",");
        let namespaces = self.namespaces.iter().cloned().collect::<Vec<_>>().join(",");
        let hash = format!("sha256:{}", digest(&[id, &group_kinds, &namespaces].join("\0")));
        vec![
            (TOOLING_ANNOTATION, tooling.to_owned()),
            (GROUP_KINDS_ANNOTATION, group_kinds),
            (NAMESPACES_ANNOTATION, namespaces),
            (HASH_ANNOTATION, hash),
        ]
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn an_object_of_another_applyset_is_refused_in_kros_words() {
        let existing: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta = serde_json::from_value(
            serde_json::json!({"name": "web", "namespace": "team", "labels": {PART_OF_LABEL: "applyset-other-v1"}}),
        )
        .unwrap();
        let desired = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                                         "metadata": {"labels": {PART_OF_LABEL: "applyset-mine-v1"}}});
        assert_eq!(
            conflict(&existing, &desired).unwrap(),
            "resource belongs to a different ApplySet: team/web (/v1, Kind=ConfigMap) belongs to ApplySet \
             \"applyset-other-v1\", cannot reassign to \"applyset-mine-v1\""
        );
        let apps = serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
                                      "metadata": {"labels": {PART_OF_LABEL: "applyset-mine-v1"}}});
        assert!(conflict(&existing, &apps).unwrap().contains("(apps/v1, Kind=Deployment)"));
        // Of no ApplySet, or of this one: not kro's conflict.
        let unlabelled = serde_json::from_value(serde_json::json!({"name": "web"})).unwrap();
        assert_eq!(conflict(&unlabelled, &desired), None);
        let mine = serde_json::json!({"metadata": {"labels": {PART_OF_LABEL: "applyset-other-v1"}}});
        assert_eq!(conflict(&existing, &mine), None);
    }
    use super::*;
    use serde_json::json;

    // The expected values were computed independently, with Python's hashlib and base64 on kro's
    // formulas (applyset.ID and inventoryHash).
    #[test]
    fn the_id_hashes_name_namespace_kind_and_group() {
        assert_eq!(
            id("demo", "team-a", "WebApp", "kro.run"),
            "applyset-6cpHaKaQjpgi92a3cTkg6VJnc5KrlKZP1vfPCVxentE-v1"
        );
        assert_ne!(id("demo", "team-b", "WebApp", "kro.run"), id("demo", "team-a", "WebApp", "kro.run"));
    }

    #[test]
    fn the_inventory_lists_group_kinds_and_other_namespaces_sorted_and_hashed() {
        let mut inventory = Inventory::default();
        inventory.add_object(&json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {}}), true, "team-a");
        inventory.add_object(&json!({"apiVersion": "v1", "kind": "Service", "metadata": {}}), true, "team-a");
        inventory.add_object(
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "shared"}}),
            true,
            "team-a",
        );
        inventory.add_object(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {}}), false, "team-a");
        let id = id("demo", "team-a", "WebApp", "kro.run");
        let annotations = inventory.annotations(&id, "kro/samplectl-0.1.0");
        assert_eq!(
            annotations,
            vec![
                (TOOLING_ANNOTATION, "kro/samplectl-0.1.0".to_owned()),
                (GROUP_KINDS_ANNOTATION, "ConfigMap,Deployment.apps,Namespace,Service".to_owned()),
                (NAMESPACES_ANNOTATION, "shared".to_owned()),
                (HASH_ANNOTATION, "sha256:MsElwKUmWBU23p06rfIY7mGcYs4DDb5wkeCbZPjNOa4".to_owned()),
            ]
        );
    }

    #[test]
    fn a_cluster_scoped_instance_counts_default_as_another_namespace() {
        let mut inventory = Inventory::default();
        inventory.add_object(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}), true, "");
        let annotations = inventory.annotations("x", "kro/t");
        assert_eq!(annotations[2], (NAMESPACES_ANNOTATION, "default".to_owned()));
    }
}
