//! A customize hook's `relatedResources`, decided without a cluster: what one rule asks for (names, a
//! namespace, a label selector, a namespace selector, in the combinations metacontroller allows), where
//! its objects are listed, whether an object is one of them, and how the `related` field of a sync
//! request keys them. The engine lists and the drivers trigger in these terms, so reading related objects
//! and re-syncing a parent when one changes agree on what "related" means.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::Version;
use super::selector::LabelSelector;

/// One entry of a customize answer's `relatedResources`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RelatedRule {
    pub api_version: String,
    pub resource: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
}

/// How a rule selects, as metacontroller classifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// A label selector (or nothing: every object of the type).
    Labels,
    /// A label selector within one namespace.
    NamespaceAndLabels,
    /// Objects (matching the label selector, if any) in the namespaces the namespace selector takes.
    NamespaceSelector,
    /// Names, a namespace, or both.
    NamespaceAndNames,
}

/// Where the parent a rule was answered for stands, and the shape of the sync requests it feeds.
#[derive(Debug, Clone, Copy)]
pub struct Asker<'a> {
    /// The parent's namespace; `None` for a cluster-scoped parent.
    pub namespace: Option<&'a str>,
    pub version: Version,
}

impl Asker<'_> {
    /// A v1 hook of a namespaced parent sees only its own namespace, as metacontroller's v1 keys cannot
    /// tell two namespaces apart.
    fn confined(&self) -> Option<&str> {
        self.namespace.filter(|_| self.version == Version::V1)
    }
}

impl RelatedRule {
    /// How the rule selects, or why it cannot: names with a selector, or a namespace with a namespace
    /// selector, ask for two things at once.
    pub fn selection(&self) -> Result<Selection, String> {
        let names = !self.names.is_empty();
        let namespace = !self.namespace.is_empty();
        if names && (self.label_selector.is_some() || self.namespace_selector.is_some()) {
            return Err(format!("{}: names cannot be combined with labelSelector or namespaceSelector", self.what()));
        }
        if namespace && self.namespace_selector.is_some() {
            return Err(format!("{}: namespace cannot be combined with namespaceSelector", self.what()));
        }
        for (field, selector) in
            [("labelSelector", &self.label_selector), ("namespaceSelector", &self.namespace_selector)]
        {
            if let Some(selector) = selector {
                selector.check().map_err(|why| format!("{}: {field}: {why}", self.what()))?;
            }
        }
        Ok(match (self.namespace_selector.is_some(), self.label_selector.is_some(), namespace, names) {
            (true, ..) => Selection::NamespaceSelector,
            (false, true, true, _) => Selection::NamespaceAndLabels,
            (false, _, true, _) | (false, _, _, true) => Selection::NamespaceAndNames,
            _ => Selection::Labels,
        })
    }

    /// `configmaps (v1)`, for messages.
    pub fn what(&self) -> String {
        format!("related {} ({})", self.resource, self.api_version)
    }

    /// The namespace its objects are listed in (`None`: every namespace, or a cluster-scoped type), or
    /// why the rule cannot be used for this parent.
    pub fn list_namespace(&self, asker: Asker, namespaced: bool) -> Result<Option<String>, String> {
        let selection = self.selection()?;
        if !namespaced {
            return match selection {
                Selection::NamespaceSelector => {
                    Err(format!("{}: namespaceSelector needs a namespaced resource", self.what()))
                }
                _ => Ok(None),
            };
        }
        if let Some(own) = asker.confined() {
            if !self.namespace.is_empty() && self.namespace != own {
                return Err(format!(
                    "{}: namespace {} is not the parent's namespace {own}, and a v1 hook of a namespaced parent \
                     sees only its own",
                    self.what(),
                    self.namespace
                ));
            }
            if selection == Selection::NamespaceSelector {
                return Err(format!("{}: namespaceSelector needs a v2 hook or a cluster-scoped parent", self.what()));
            }
            return Ok(Some(own.to_owned()));
        }
        Ok((!self.namespace.is_empty()).then(|| self.namespace.clone()))
    }

    /// Whether the object `meta` describes (of the rule's type, `namespaced` or not) is one the rule
    /// selects for this parent. `namespace_labels` gives a namespace's labels, for a namespace selector;
    /// `None` from it counts as a match (the drivers ask this to know whom to trigger, and a trigger too
    /// many costs one reconcile that writes nothing).
    pub fn selects(
        &self,
        asker: Asker,
        namespaced: bool,
        meta: &ObjectMeta,
        namespace_labels: impl Fn(&str) -> Option<BTreeMap<String, String>>,
    ) -> bool {
        let Ok(namespace) = self.list_namespace(asker, namespaced) else {
            return false;
        };
        let object_ns = meta.namespace.as_deref().unwrap_or_default();
        if namespace.is_some_and(|ns| ns != object_ns) {
            return false;
        }
        let empty = BTreeMap::new();
        if let Some(selector) = &self.label_selector
            && !selector.matches(meta.labels.as_ref().unwrap_or(&empty))
        {
            return false;
        }
        if let Some(selector) = &self.namespace_selector
            && let Some(labels) = namespace_labels(object_ns)
            && !selector.matches(&labels)
        {
            return false;
        }
        self.names.is_empty() || self.names.iter().any(|n| Some(n) == meta.name.as_ref())
    }
}

/// How an object is keyed within its type in a request's `children`, `attachments` or `related`: v1
/// keys relative to the parent (`namespace/name` only for a namespaced object of a cluster-scoped
/// parent), v2 uniformly (`namespace/name` for every namespaced object).
pub fn object_key(version: Version, parent_namespaced: bool, namespace: &str, name: &str) -> String {
    match (version, parent_namespaced, namespace) {
        (_, _, "") => name.to_owned(),
        (Version::V1, true, _) => name.to_owned(),
        (Version::V1, false, ns) | (Version::V2, _, ns) => format!("{ns}/{name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(value: serde_json::Value) -> RelatedRule {
        serde_json::from_value(value).unwrap()
    }

    fn meta(ns: Option<&str>, name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            namespace: ns.map(str::to_owned),
            name: Some(name.into()),
            labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..ObjectMeta::default()
        }
    }

    const V1_IN_A: Asker = Asker { namespace: Some("a"), version: Version::V1 };
    const V2_IN_A: Asker = Asker { namespace: Some("a"), version: Version::V2 };
    const CLUSTER: Asker = Asker { namespace: None, version: Version::V1 };

    #[test]
    fn rules_are_classified_as_metacontroller_classifies_them() {
        let base = serde_json::json!({"apiVersion": "v1", "resource": "configmaps"});
        let with = |extra: serde_json::Value| {
            let mut r = base.clone();
            r.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            rule(r)
        };
        assert_eq!(with(serde_json::json!({})).selection(), Ok(Selection::Labels));
        let labels = serde_json::json!({"matchLabels": {"a": "b"}});
        assert_eq!(with(serde_json::json!({"labelSelector": labels})).selection(), Ok(Selection::Labels));
        assert_eq!(
            with(serde_json::json!({"labelSelector": labels, "namespace": "x"})).selection(),
            Ok(Selection::NamespaceAndLabels)
        );
        assert_eq!(
            with(serde_json::json!({"namespaceSelector": labels})).selection(),
            Ok(Selection::NamespaceSelector)
        );
        assert_eq!(with(serde_json::json!({"names": ["n"]})).selection(), Ok(Selection::NamespaceAndNames));
        assert_eq!(with(serde_json::json!({"namespace": "x"})).selection(), Ok(Selection::NamespaceAndNames));
        let err = with(serde_json::json!({"names": ["n"], "labelSelector": labels})).selection().unwrap_err();
        assert!(err.contains("names cannot be combined"), "{err}");
        let err = with(serde_json::json!({"namespace": "x", "namespaceSelector": labels})).selection().unwrap_err();
        assert!(err.contains("namespace cannot be combined with namespaceSelector"), "{err}");
        let bad = serde_json::json!({"matchExpressions": [{"key": "a", "operator": "Near"}]});
        assert!(with(serde_json::json!({"labelSelector": bad})).selection().unwrap_err().contains("labelSelector"));
    }

    #[test]
    fn a_v1_namespaced_parent_sees_its_own_namespace_only() {
        let labels = rule(serde_json::json!({"apiVersion": "v1", "resource": "configmaps"}));
        assert_eq!(labels.list_namespace(V1_IN_A, true), Ok(Some("a".into())));
        assert_eq!(labels.list_namespace(V2_IN_A, true), Ok(None));
        assert_eq!(labels.list_namespace(CLUSTER, true), Ok(None));
        assert_eq!(labels.list_namespace(V1_IN_A, false), Ok(None), "cluster-scoped types are everywhere");
        let elsewhere = rule(serde_json::json!({"apiVersion": "v1", "resource": "secrets", "namespace": "b"}));
        assert!(elsewhere.list_namespace(V1_IN_A, true).unwrap_err().contains("not the parent's namespace a"));
        assert_eq!(elsewhere.list_namespace(V2_IN_A, true), Ok(Some("b".into())));
        let by_ns = rule(serde_json::json!({"apiVersion": "v1", "resource": "secrets", "namespaceSelector": {}}));
        assert!(by_ns.list_namespace(V1_IN_A, true).unwrap_err().contains("needs a v2 hook"));
        assert_eq!(by_ns.list_namespace(V2_IN_A, true), Ok(None));
        assert!(by_ns.list_namespace(CLUSTER, false).unwrap_err().contains("needs a namespaced resource"));
    }

    #[test]
    fn objects_are_selected_by_namespace_labels_and_names() {
        let none = |_: &str| None;
        let by_label = rule(serde_json::json!({
            "apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"app": "x"}},
        }));
        assert!(by_label.selects(V1_IN_A, true, &meta(Some("a"), "c", &[("app", "x")]), none));
        assert!(!by_label.selects(V1_IN_A, true, &meta(Some("b"), "c", &[("app", "x")]), none), "v1: own namespace");
        assert!(by_label.selects(V2_IN_A, true, &meta(Some("b"), "c", &[("app", "x")]), none), "v2: anywhere");
        assert!(!by_label.selects(V2_IN_A, true, &meta(Some("a"), "c", &[("app", "y")]), none));

        let by_name = rule(serde_json::json!({"apiVersion": "v1", "resource": "secrets", "names": ["s", "t"]}));
        assert!(by_name.selects(CLUSTER, true, &meta(Some("z"), "t", &[]), none));
        assert!(!by_name.selects(CLUSTER, true, &meta(Some("z"), "u", &[]), none));

        let by_ns = rule(serde_json::json!({
            "apiVersion": "v1", "resource": "secrets", "namespaceSelector": {"matchLabels": {"team": "red"}},
        }));
        let red = |ns: &str| (ns == "r").then(|| BTreeMap::from([("team".to_owned(), "red".to_owned())]));
        assert!(by_ns.selects(CLUSTER, true, &meta(Some("r"), "s", &[]), red));
        let known_blue = |_: &str| Some(BTreeMap::from([("team".to_owned(), "blue".to_owned())]));
        assert!(!by_ns.selects(CLUSTER, true, &meta(Some("b"), "s", &[]), known_blue));
        assert!(by_ns.selects(CLUSTER, true, &meta(Some("b"), "s", &[]), none), "unknown labels: triggered");
    }

    #[test]
    fn objects_are_keyed_as_each_version_keys_them() {
        assert_eq!(object_key(Version::V1, true, "a", "c"), "c");
        assert_eq!(object_key(Version::V1, false, "a", "c"), "a/c");
        assert_eq!(object_key(Version::V2, true, "a", "c"), "a/c");
        assert_eq!(object_key(Version::V2, true, "", "c"), "c");
        assert_eq!(object_key(Version::V1, false, "", "c"), "c");
    }
}
