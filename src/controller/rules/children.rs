//! A parent's children, decided without a cluster: which child types a controller may manage, how a
//! desired child is checked and marked as the parent's (its namespace, the managed-by label, a controller
//! owner reference), whether an existing object already holds what is desired, whose an existing object
//! is, and why one that is not the parent's is left alone. Whatever syncs (the built-in Sample sync or a
//! hook), every child goes through here: one way children are applied, adopted, refused and deleted.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DynamicObject, TypeMeta};
use serde_json::{Map, Value, json};

use super::decorate::DECORATOR_ANNOTATION;
use super::selector::LabelSelector;
use super::shard::{Member, PARENT_LABEL};
use crate::cluster::resolve::Resolved;

pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "samplectl";
/// The managed-by value of a graph's children, kro's: what tools select kro's objects by, and what
/// kro's children carry when a cluster moves from kro to samplectl.
pub const MANAGED_BY_KRO: &str = "kro";

/// One child object: its type (an index into the controller's child types), namespace (empty when
/// cluster-scoped) and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChildKey {
    pub kind: usize,
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for ChildKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.namespace.as_str() {
            "" => write!(f, "{}", self.name),
            ns => write!(f, "{ns}/{}", self.name),
        }
    }
}

/// The children a parent has, as a driver or a write last saw them.
pub type Observed = BTreeMap<ChildKey, DynamicObject>;

/// The parent a controller reconciles and the child types it may manage.
#[derive(Debug, Clone)]
pub struct Family {
    pub parent: Resolved,
    pub children: Vec<Resolved>,
    /// kro's way: every child is owned by kro's instance labels (`OWNER_UID_LABEL` and the others) and
    /// `app.kubernetes.io/managed-by: kro`, never by an owner reference, so it may live anywhere (another
    /// namespace than a namespaced parent's, or cluster-scoped below one).
    pub label_owned: bool,
}

/// The labels that own a child an owner reference cannot reach, beside `app.kubernetes.io/managed-by:
/// samplectl`: kro's instance labels, which name the parent's uid, name, namespace and type.
pub const OWNER_UID_LABEL: &str = "kro.run/instance-id";
pub const OWNER_NAME_LABEL: &str = "kro.run/instance-name";
pub const OWNER_NAMESPACE_LABEL: &str = "kro.run/instance-namespace";
pub const OWNER_KIND_LABEL: &str = "kro.run/instance-kind";
pub const OWNER_GROUP_LABEL: &str = "kro.run/instance-group";

/// The parent that controls an object: its name, uid, and (when owned by label, maybe elsewhere) its
/// namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Controller<'a> {
    pub name: &'a str,
    pub uid: &'a str,
    pub namespace: Option<&'a str>,
}

/// The parent of `parent`'s type that controls `meta`'s object: by controller owner reference, or by
/// the managed-by label with the owner labels naming a parent of that type.
pub fn controller_of<'a>(meta: &'a ObjectMeta, parent: &Resolved) -> Option<Controller<'a>> {
    let by_reference = meta
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true) && r.kind == parent.ar.kind && r.api_version == parent.ar.api_version)
        .map(|r| Controller { name: r.name.as_str(), uid: r.uid.as_str(), namespace: None });
    by_reference.or_else(|| {
        let labels = meta.labels.as_ref()?;
        let of_type = labels.get(OWNER_KIND_LABEL) == Some(&parent.ar.kind)
            && labels.get(OWNER_GROUP_LABEL).map(String::as_str).unwrap_or_default() == parent.ar.group;
        (managed(meta) && of_type).then_some(())?;
        Some(Controller {
            name: labels.get(OWNER_NAME_LABEL)?,
            uid: labels.get(OWNER_UID_LABEL)?,
            namespace: labels.get(OWNER_NAMESPACE_LABEL).map(String::as_str),
        })
    })
}

/// Whether the managed-by label says samplectl, or kro (whose children name their instance's uid,
/// which no other parent has).
fn managed(meta: &ObjectMeta) -> bool {
    meta.labels.as_ref().and_then(|l| l.get(MANAGED_BY_LABEL)).is_some_and(|v| v == MANAGED_BY || v == MANAGED_BY_KRO)
}

/// Whether the object `meta` describes is controlled by the parent with this uid: its controller owner
/// reference, or the managed-by label with the owner uid label.
pub fn controlled_by(meta: &ObjectMeta, parent_uid: &str) -> bool {
    meta.owner_references.iter().flatten().any(|r| r.controller == Some(true) && r.uid == parent_uid)
        || (managed(meta)
            && meta.labels.as_ref().and_then(|l| l.get(OWNER_UID_LABEL)).is_some_and(|uid| uid == parent_uid))
}

impl Family {
    /// The managed-by value this family's children carry.
    pub fn managed_by(&self) -> &'static str {
        if self.label_owned { MANAGED_BY_KRO } else { MANAGED_BY }
    }

    /// The label selector for every child of this family's kind of controller.
    pub fn managed_selector(&self) -> String {
        format!("{MANAGED_BY_LABEL}={}", self.managed_by())
    }

    /// The key of an object of child type `kind`.
    pub fn key(&self, kind: usize, meta: &ObjectMeta) -> ChildKey {
        ChildKey {
            kind,
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
        }
    }

    /// Gives every child its type from its child type, where it has none: a list's items come without
    /// theirs (a built-in kind's do), a watch's with it, and what a sync reads of a child (a hook's
    /// request, a graph's inventory of kinds) must not depend on how the driver read it.
    pub fn typed(&self, children: &mut Observed) {
        for (key, child) in children.iter_mut() {
            if child.types.as_ref().is_none_or(|t| t.api_version.is_empty() || t.kind.is_empty()) {
                let ar = &self.children[key.kind].ar;
                child.types = Some(TypeMeta { api_version: ar.api_version.clone(), kind: ar.kind.clone() });
            }
        }
    }

    /// `ConfigMap.v1`, `Deployment.apps/v1`: how metacontroller's protocol names a child type.
    pub fn type_key(&self, kind: usize) -> String {
        let ar = &self.children[kind].ar;
        format!("{}.{}", ar.kind, ar.api_version)
    }

    /// Why this parent and these child types cannot work together, if they cannot: a namespaced parent
    /// cannot own a cluster-scoped child (the garbage collector would treat the owner as missing and
    /// delete the child).
    pub fn mismatch(&self) -> Option<String> {
        if self.label_owned {
            return None;
        }
        let cluster_child = self.children.iter().find(|c| !c.namespaced)?;
        self.parent.namespaced.then(|| {
            format!(
                "{} is namespaced and {} is not: a cluster-scoped object cannot be owned by a namespaced one",
                self.parent.qualified_plural(),
                cluster_child.qualified_plural()
            )
        })
    }

    /// Checks one desired child from a sync answer and marks it as the parent's: the child type must be
    /// one the controller manages, a namespaced parent's children live in its namespace (given or not),
    /// a cluster-scoped parent's namespaced children must say where. The managed-by label and a
    /// controller owner reference are added; fields only the server sets (uid, resourceVersion, status,
    /// ...) are dropped, so a hook may answer with the children it was sent.
    pub fn own(&self, parent: &DynamicObject, desired: &Value) -> Result<(ChildKey, Value), String> {
        let Some(object) = desired.as_object() else {
            return Err(format!("a child must be an object, not {}", json_type(desired)));
        };
        let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
        let kind_name = object.get("kind").and_then(Value::as_str).unwrap_or_default();
        let name = desired["metadata"]["name"].as_str().unwrap_or_default();
        if api_version.is_empty() || kind_name.is_empty() || name.is_empty() {
            return Err("a child needs apiVersion, kind and metadata.name".into());
        }
        let what = format!("{kind_name} {name}");
        let Some(kind) = self.children.iter().position(|c| c.ar.api_version == api_version && c.ar.kind == kind_name)
        else {
            let named = self.children.iter().map(|c| format!("{}.{}", c.ar.kind, c.ar.api_version)).collect::<Vec<_>>();
            return Err(format!(
                "child {what} is a {kind_name}.{api_version}, which is not a --child type (they are: {})",
                named.join(", ")
            ));
        };
        let parent_ns = parent.metadata.namespace.clone().unwrap_or_default();
        let given = desired["metadata"]["namespace"].as_str().filter(|ns| !ns.is_empty());
        let namespace = match (self.children[kind].namespaced, self.parent.namespaced, given) {
            (true, true, Some(ns)) if self.label_owned => ns.to_owned(),
            (false, _, None) => String::new(),
            (false, _, Some(ns)) => return Err(format!("child {what} is cluster-scoped but names namespace {ns}")),
            (true, true, None) => parent_ns.clone(),
            (true, true, Some(ns)) if ns == parent_ns => parent_ns.clone(),
            (true, true, Some(ns)) => {
                return Err(format!(
                    "child {what} is in namespace {ns}, not in its parent's namespace {parent_ns}; a parent owns \
                     children only in its own namespace"
                ));
            }
            (true, false, Some(ns)) => ns.to_owned(),
            (true, false, None) => {
                return Err(format!("child {what} needs metadata.namespace: its parent is cluster-scoped"));
            }
        };

        let mut body = desired.clone();
        body.as_object_mut().expect("checked above").remove("status");
        let metadata =
            body["metadata"].as_object_mut().ok_or_else(|| format!("child {what}: metadata is not an object"))?;
        for server_set in [
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
            "selfLink",
        ] {
            metadata.remove(server_set);
        }
        if namespace.is_empty() {
            metadata.remove("namespace");
        } else {
            metadata.insert("namespace".into(), namespace.clone().into());
        }
        let labels = metadata.entry("labels").or_insert_with(|| Value::Object(Map::new()));
        if labels.is_null() {
            *labels = Value::Object(Map::new());
        }
        let Some(labels) = labels.as_object_mut() else {
            return Err(format!("child {what}: metadata.labels is not an object"));
        };
        labels.insert(MANAGED_BY_LABEL.into(), self.managed_by().into());
        // Owner references a hook gives are kept, but only samplectl names the controller.
        let mut owners: Vec<Value> = metadata
            .get("ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|r| r["controller"] != true && r["uid"] != parent.metadata.uid.as_deref().unwrap_or_default())
            .cloned()
            .collect();
        // An owner reference reaches a child in the parent's namespace, or any child of a cluster-scoped
        // parent; the others, and all of a graph's (as kro writes them), are owned by their labels.
        let reachable = !self.parent.namespaced || (self.children[kind].namespaced && namespace == parent_ns);
        if reachable && !self.label_owned {
            owners.push(json!({
                "apiVersion": self.parent.ar.api_version,
                "kind": self.parent.ar.kind,
                "name": parent.metadata.name.as_deref().unwrap_or_default(),
                "uid": parent.metadata.uid.as_deref().unwrap_or_default(),
                "controller": true,
                "blockOwnerDeletion": true,
            }));
        } else {
            let labels = metadata["labels"].as_object_mut().expect("made an object above");
            labels.insert(OWNER_UID_LABEL.into(), parent.metadata.uid.clone().unwrap_or_default().into());
            labels.insert(OWNER_NAME_LABEL.into(), parent.metadata.name.clone().unwrap_or_default().into());
            if self.parent.namespaced {
                labels.insert(OWNER_NAMESPACE_LABEL.into(), parent_ns.clone().into());
            }
            labels.insert(OWNER_KIND_LABEL.into(), self.parent.ar.kind.clone().into());
            labels.insert(OWNER_GROUP_LABEL.into(), self.parent.ar.group.clone().into());
        }
        if owners.is_empty() {
            metadata.remove("ownerReferences");
        } else {
            metadata.insert("ownerReferences".into(), Value::Array(owners));
        }
        Ok((ChildKey { kind, namespace, name: name.to_owned() }, body))
    }
}

/// What kind of JSON value this is, for messages: "a number", "a list".
pub fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// What is done to an existing child that differs from what its parent wants (metacontroller's
/// `updateStrategy.method`, for the non-rolling methods).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Update {
    /// Left as it is; put back as wanted only once someone else deletes it.
    OnDelete,
    /// Deleted, and created as wanted once it is gone.
    Recreate,
    /// Updated where it stands (samplectl's own controllers, and `--hook`).
    #[default]
    InPlace,
}

/// What to do about one desired child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildAction {
    /// Already as desired.
    None,
    Create,
    Update,
    /// An object of that name that this parent does not control: left alone.
    Conflict,
    /// An orphan of that name that the parent's selector takes: made the parent's, then looked at again.
    Adopt,
}

/// The label metacontroller's `generateSelector` puts on each child: the parent's uid.
pub const CONTROLLER_UID: &str = "controller-uid";

/// Which orphans a parent may adopt, as metacontroller's CompositeController claims them; samplectl's own
/// controllers (the Sample controller, `--hook`) adopt nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adoption {
    /// `generateSelector`: each child is labelled `controller-uid: <the parent's uid>`, and an orphan with
    /// that label is adopted.
    ControllerUid,
    /// The parent's own `spec.selector`; a parent without one adopts nothing.
    ParentSelector,
}

impl Adoption {
    /// The selector an orphan must match to be adopted by `parent`: none while the parent is being
    /// deleted, as Kubernetes' ControllerRef rules say.
    pub fn selector(self, parent: &DynamicObject) -> Option<LabelSelector> {
        if parent.metadata.deletion_timestamp.is_some() {
            return None;
        }
        match self {
            Adoption::ControllerUid => {
                let uid = parent.metadata.uid.clone().unwrap_or_default();
                Some(LabelSelector { match_labels: [(CONTROLLER_UID.to_owned(), uid)].into(), ..Default::default() })
            }
            Adoption::ParentSelector => {
                let selector: LabelSelector = serde_json::from_value(parent.data["spec"]["selector"].clone()).ok()?;
                // An empty selector would take every orphan: metacontroller refuses it too.
                let empty = selector.match_labels.is_empty() && selector.match_expressions.is_empty();
                (!empty && selector.check().is_ok()).then_some(selector)
            }
        }
    }
}

/// What samplectl adds to every desired child besides the parent's label and controller reference.
#[derive(Debug, Default, Clone, Copy)]
pub struct Marks<'a> {
    /// The parent's uid as the `controller-uid` label, where the hook did not set it (metacontroller's
    /// adoption by that label).
    pub controller_uid: bool,
    /// In a shard ring, this member's label and the parent's uid.
    pub member: Option<&'a Member>,
    /// A DecoratorController's name, on its attachments.
    pub decorator: Option<&'a str>,
}

/// The children a sync answered, each checked and made the parent's (`Family::own`) and marked, in the
/// answer's order; the whole answer is refused, with the reason, if one of them cannot be, or one is
/// answered twice.
pub fn desired_children(
    family: &Family,
    parent: &DynamicObject,
    answered: &[Value],
    marks: Marks<'_>,
) -> Result<Vec<(ChildKey, Value)>, String> {
    let parent_uid = parent.metadata.uid.clone().unwrap_or_default();
    let mut desired: Vec<(ChildKey, Value)> = Vec::new();
    for child in answered {
        let (key, mut body) =
            family.own(parent, child).map_err(|problem| format!("answered a child samplectl refuses: {problem}"))?;
        let labels = &mut body["metadata"]["labels"];
        if marks.controller_uid && labels.get(CONTROLLER_UID).is_none() {
            labels[CONTROLLER_UID] = parent_uid.clone().into();
        }
        if let Some(member) = marks.member {
            labels[member.label()] = member.incarnation.clone().into();
            labels[PARENT_LABEL] = parent_uid.clone().into();
        }
        if let Some(decorator) = marks.decorator {
            body["metadata"]["annotations"][DECORATOR_ANNOTATION] = decorator.into();
        }
        if desired.iter().any(|(seen, _)| *seen == key) {
            return Err(format!("answered {} {key} twice", family.children[key.kind].ar.kind));
        }
        desired.push((key, body));
    }
    Ok(desired)
}

/// What to do about the object `existing` of a desired child's name, if any. An orphan (no controller
/// at all, not being deleted) is adopted when `adopt` (the parent's selector, when the parent may adopt)
/// matches its labels, as Kubernetes' ControllerRef rules allow; any other object the parent does not
/// control is a conflict.
pub fn action(
    existing: Option<&DynamicObject>,
    desired: &Value,
    parent_uid: &str,
    adopt: Option<&LabelSelector>,
) -> ChildAction {
    match existing {
        None => ChildAction::Create,
        Some(existing) if !controlled_by(&existing.metadata, parent_uid) => {
            let meta = &existing.metadata;
            let orphan = !meta.owner_references.iter().flatten().any(|r| r.controller == Some(true));
            let empty = BTreeMap::new();
            let selected = adopt.is_some_and(|s| s.matches(meta.labels.as_ref().unwrap_or(&empty)));
            match orphan && selected && meta.deletion_timestamp.is_none() {
                true => ChildAction::Adopt,
                false => ChildAction::Conflict,
            }
        }
        Some(existing) => {
            // Items of a list carry no apiVersion and kind; the type is the one asked for anyway.
            let existing = serde_json::to_value(existing).unwrap_or(Value::Null);
            let mut desired = desired.clone();
            if let Some(fields) = desired.as_object_mut() {
                fields.remove("apiVersion");
                fields.remove("kind");
            }
            if satisfies(&existing, &desired) { ChildAction::None } else { ChildAction::Update }
        }
    }
}

/// Whether `existing` already holds every field `desired` sets, as server-side apply would leave it:
/// maps may hold more (others' labels and keys are theirs), lists must match item by item, and the
/// owner references need only include the desired ones.
pub fn satisfies(existing: &Value, desired: &Value) -> bool {
    fn within(existing: &Value, desired: &Value, path: &[&str]) -> bool {
        match (existing, desired) {
            (Value::Object(e), Value::Object(d)) => d.iter().all(|(k, dv)| {
                let mut path = path.to_vec();
                path.push(k);
                match e.get(k) {
                    Some(ev) => within(ev, dv, &path),
                    None => dv.is_null(),
                }
            }),
            (Value::Array(e), Value::Array(d)) if path == ["metadata", "ownerReferences"] => {
                d.iter().all(|dv| e.iter().any(|ev| within(ev, dv, &[])))
            }
            (Value::Array(e), Value::Array(d)) => {
                e.len() == d.len() && e.iter().zip(d).all(|(ev, dv)| within(ev, dv, &[]))
            }
            (Value::Number(e), Value::Number(d)) => e.as_f64() == d.as_f64(),
            (e, d) => e == d,
        }
    }
    within(existing, desired, &[])
}

/// Why an object of a desired child's name is not the parent's, in words that say what to do about it.
pub fn conflict_message(
    existing: &ObjectMeta,
    key: &ChildKey,
    kind: &str,
    parent: &DynamicObject,
    family: &Family,
) -> String {
    let controller = existing.owner_references.iter().flatten().find(|r| r.controller == Some(true));
    let labelled = managed(existing);
    let parent_kind = &family.parent.ar.kind;
    let parent_name = parent.metadata.name.as_deref().unwrap_or_default();
    match controller {
        Some(owner)
            if owner.kind == *parent_kind
                && owner.api_version == family.parent.ar.api_version
                && owner.name == parent_name =>
        {
            format!(
                "{kind} {key} belongs to an earlier {parent_kind} of this name (uid {}); it is replaced once garbage \
                 collection has deleted it",
                owner.uid
            )
        }
        Some(owner) => {
            format!("{kind} {key} exists and is controlled by {} {}; samplectl leaves it alone", owner.kind, owner.name)
        }
        None if labelled => format!(
            "{kind} {key} was left behind without an owner (an orphaning delete?); samplectl does not adopt it: \
             delete it to have it recreated"
        ),
        None => format!("{kind} {key} exists and is not controlled by this {parent_kind}; samplectl leaves it alone"),
    }
}

#[cfg(test)]
mod tests {
    use kube::discovery::ApiResource;

    use super::*;

    fn resolved(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Resolved {
        let api_version = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
        Resolved {
            ar: ApiResource {
                group: group.into(),
                version: version.into(),
                api_version,
                kind: kind.into(),
                plural: plural.into(),
            },
            namespaced,
            verbs: Vec::new(),
            subresources: Vec::new(),
        }
    }

    fn family(parent_namespaced: bool) -> Family {
        Family {
            parent: resolved("example.com", "v1", "Widget", "widgets", parent_namespaced),
            children: vec![
                resolved("", "v1", "ConfigMap", "configmaps", true),
                resolved("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", false),
            ],
            label_owned: false,
        }
    }

    fn parent(namespace: Option<&str>) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": namespace, "uid": "uid-w", "generation": 1},
        }))
        .unwrap()
    }

    #[test]
    fn a_listed_child_is_given_its_type_and_a_watched_one_keeps_its_own() {
        let family = family(true);
        let listed: DynamicObject = serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap();
        let watched: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r"},
        }))
        .unwrap();
        let key = |kind, name: &str| ChildKey { kind, namespace: String::new(), name: name.into() };
        let mut children = Observed::from([(key(0, "c"), listed), (key(1, "r"), watched)]);
        family.typed(&mut children);
        let types = |name| {
            let t = children.values().find(|c| c.metadata.name.as_deref() == Some(name)).unwrap().types.clone();
            t.map(|t| (t.api_version, t.kind)).unwrap()
        };
        assert_eq!(types("c"), ("v1".to_owned(), "ConfigMap".to_owned()));
        assert_eq!(types("r"), ("rbac.authorization.k8s.io/v1".to_owned(), "ClusterRole".to_owned()));
    }

    /// kro's family, whose children an owner reference cannot always reach: all of them are owned by
    /// label, found again by those labels, and only with a managed-by label.
    #[test]
    fn a_graphs_children_are_owned_by_label() {
        let mut family = family(true);
        family.label_owned = true;
        assert_eq!(family.mismatch(), None, "a cluster-scoped child type is fine");
        let w = parent(Some("a"));
        let (key, elsewhere) = family
            .own(&w, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "b"}}))
            .unwrap();
        assert_eq!(key.namespace, "b");
        assert!(elsewhere["metadata"].get("ownerReferences").is_none(), "{elsewhere}");
        assert_eq!(elsewhere["metadata"]["labels"][OWNER_UID_LABEL], "uid-w");
        assert_eq!(elsewhere["metadata"]["labels"][OWNER_NAMESPACE_LABEL], "a");
        assert_eq!(elsewhere["metadata"]["labels"][MANAGED_BY_LABEL], MANAGED_BY_KRO);
        let meta: ObjectMeta = serde_json::from_value(elsewhere["metadata"].clone()).unwrap();
        assert!(controlled_by(&meta, "uid-w") && !controlled_by(&meta, "uid-x"));
        let controller = controller_of(&meta, &family.parent).unwrap();
        assert_eq!((controller.name, controller.uid, controller.namespace), ("w", "uid-w", Some("a")));
        let mut unmanaged = meta.clone();
        unmanaged.labels.as_mut().unwrap().remove(MANAGED_BY_LABEL);
        assert!(!controlled_by(&unmanaged, "uid-w") && controller_of(&unmanaged, &family.parent).is_none());

        let (_, here) =
            family.own(&w, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})).unwrap();
        assert!(here["metadata"].get("ownerReferences").is_none(), "in its namespace too, as kro: {here}");
        assert_eq!(here["metadata"]["labels"][OWNER_UID_LABEL], "uid-w");
        let (key, cluster) = family
            .own(&w, &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r"}}))
            .unwrap();
        assert_eq!(key.namespace, "");
        assert!(cluster["metadata"].get("ownerReferences").is_none());
        assert!(
            family
                .own(&w, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "b"}}))
                .is_ok()
        );
        family.label_owned = false;
        assert!(
            family
                .own(&w, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "b"}}))
                .is_err()
        );
    }

    fn object(value: Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_desired_child_is_placed_labelled_and_owned() {
        let f = family(true);
        let desired = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "uid": "stale", "resourceVersion": "9", "labels": {"app": "x"},
                          "ownerReferences": [{"apiVersion": "v1", "kind": "Other", "name": "o", "uid": "o1", "controller": true}]},
            "data": {"k": "v"}, "status": {"ignored": true},
        });
        let (key, body) = f.own(&parent(Some("ns")), &desired).unwrap();
        assert_eq!(key, ChildKey { kind: 0, namespace: "ns".into(), name: "c".into() });
        assert_eq!(body["metadata"]["namespace"], "ns");
        assert_eq!(body["metadata"]["labels"], json!({"app": "x", MANAGED_BY_LABEL: MANAGED_BY}));
        assert_eq!(
            body["metadata"]["ownerReferences"].as_array().unwrap().len(),
            1,
            "only samplectl names the controller"
        );
        assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], "uid-w");
        assert!(body["metadata"].get("uid").is_none() && body["metadata"].get("resourceVersion").is_none());
        assert!(body.get("status").is_none());
        assert_eq!(f.type_key(0), "ConfigMap.v1");
    }

    #[test]
    fn children_of_unnamed_types_or_other_namespaces_are_refused() {
        let f = family(true);
        let p = parent(Some("ns"));
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
        let err = f.own(&p, &secret).unwrap_err();
        assert!(
            err.contains("Secret.v1, which is not a --child type (they are: ConfigMap.v1, ClusterRole.rbac"),
            "{err}"
        );
        let elsewhere =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "other"}});
        assert!(f.own(&p, &elsewhere).unwrap_err().contains("not in its parent's namespace ns"));
        let same = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}});
        assert!(f.own(&p, &same).is_ok());
        assert!(
            f.own(&p, &json!({"kind": "ConfigMap"})).unwrap_err().contains("needs apiVersion, kind and metadata.name")
        );
        assert!(f.own(&p, &json!("text")).unwrap_err().contains("not a string"));
        assert!(f.mismatch().unwrap().contains("cannot be owned by a namespaced one"));

        let cluster = family(false);
        assert_eq!(cluster.mismatch(), None);
        let p = parent(None);
        let unplaced = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        assert!(cluster.own(&p, &unplaced).unwrap_err().contains("needs metadata.namespace"));
        let placed = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "a"}});
        assert_eq!(cluster.own(&p, &placed).unwrap().0.namespace, "a");
        let role =
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r"}});
        assert_eq!(cluster.own(&p, &role).unwrap().0, ChildKey { kind: 1, namespace: String::new(), name: "r".into() });
    }

    #[test]
    fn an_existing_child_is_left_updated_or_refused() {
        let f = family(true);
        let p = parent(Some("ns"));
        let desired = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"a": "1"}},
                             "data": {"k": "v"}, "spec": {"list": [{"x": 1}], "n": 1}});
        let (_, body) = f.own(&p, &desired).unwrap();
        assert_eq!(action(None, &body, "uid-w", None), ChildAction::Create);

        let mut stored = body.clone();
        stored.as_object_mut().unwrap().remove("apiVersion");
        stored["metadata"]["uid"] = "c1".into();
        stored["metadata"]["labels"]["theirs"] = "y".into();
        stored["data"]["extra"] = "someone else's".into();
        stored["spec"]["list"][0]["defaulted"] = true.into();
        stored["spec"]["n"] = json!(1.0);
        stored["metadata"]["ownerReferences"].as_array_mut().unwrap().insert(0, json!({"uid": "x", "kind": "Y"}));
        assert_eq!(action(Some(&object(stored.clone())), &body, "uid-w", None), ChildAction::None);

        let mut edited = stored.clone();
        edited["data"]["k"] = "typed by hand".into();
        assert_eq!(action(Some(&object(edited)), &body, "uid-w", None), ChildAction::Update);
        let mut longer = stored.clone();
        longer["spec"]["list"].as_array_mut().unwrap().push(json!({"x": 2}));
        assert_eq!(action(Some(&object(longer)), &body, "uid-w", None), ChildAction::Update);

        let mut foreign = stored;
        foreign["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "example.com/v1", "kind": "Widget", "name": "w", "uid": "old", "controller": true}]);
        let foreign = object(foreign);
        assert_eq!(action(Some(&foreign), &body, "uid-w", None), ChildAction::Conflict);
        let key = ChildKey { kind: 0, namespace: "ns".into(), name: "c".into() };
        let why = conflict_message(&foreign.metadata, &key, "ConfigMap", &p, &f);
        assert!(why.contains("ConfigMap ns/c belongs to an earlier Widget of this name (uid old)"), "{why}");
    }

    #[test]
    fn the_adoption_selector_comes_from_the_uid_or_the_parents_own_selector() {
        let parent = |spec: Value, deleting: bool| {
            let mut p = json!({"metadata": {"name": "w", "uid": "uid-w"}, "spec": spec});
            if deleting {
                p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
            }
            object(p)
        };
        let by_uid = Adoption::ControllerUid.selector(&parent(json!({}), false)).unwrap();
        assert_eq!(by_uid.match_labels["controller-uid"], "uid-w");
        let own = json!({"selector": {"matchLabels": {"app": "web"}}});
        assert_eq!(Adoption::ParentSelector.selector(&parent(own.clone(), false)).unwrap().match_labels["app"], "web");
        assert_eq!(Adoption::ParentSelector.selector(&parent(own, true)), None, "a deleting parent adopts nothing");
        assert_eq!(Adoption::ParentSelector.selector(&parent(json!({}), false)), None);
        assert_eq!(Adoption::ParentSelector.selector(&parent(json!({"selector": {}}), false)), None);
    }

    #[test]
    fn only_an_orphan_the_selector_takes_is_adopted() {
        let body = json!({"metadata": {"name": "c"}});
        let selector = LabelSelector {
            match_labels: [("controller-uid".to_owned(), "uid-w".to_owned())].into(),
            ..Default::default()
        };
        let orphan = |labels: Value, owners: Value, deleting: bool| {
            let mut o = json!({"metadata": {"name": "c", "labels": labels, "ownerReferences": owners}});
            if deleting {
                o["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
            }
            object(o)
        };
        let matching = json!({"controller-uid": "uid-w"});
        assert_eq!(
            action(Some(&orphan(matching.clone(), json!([]), false)), &body, "uid-w", Some(&selector)),
            ChildAction::Adopt
        );
        // A non-controller owner does not stop an adoption.
        let shared = json!([{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u"}]);
        assert_eq!(
            action(Some(&orphan(matching.clone(), shared, false)), &body, "uid-w", Some(&selector)),
            ChildAction::Adopt
        );
        let not_orphan = json!([{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u", "controller": true}]);
        for (existing, why) in [
            (orphan(matching.clone(), not_orphan, false), "someone else's"),
            (orphan(json!({"controller-uid": "other"}), json!([]), false), "not selected"),
            (orphan(matching.clone(), json!([]), true), "being deleted"),
        ] {
            assert_eq!(action(Some(&existing), &body, "uid-w", Some(&selector)), ChildAction::Conflict, "{why}");
        }
        assert_eq!(
            action(Some(&orphan(matching, json!([]), false)), &body, "uid-w", None),
            ChildAction::Conflict,
            "no adoption"
        );
    }

    #[test]
    fn an_answer_is_marked_whole_or_refused_whole() {
        let f = family(true);
        let p = parent(Some("ns"));
        let cm = |name: &str, labels: Value| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                                                    "metadata": {"name": name, "labels": labels}})
        };
        let member = Member::new("ring".into(), "m1".into(), "abc123");
        let marks = Marks { controller_uid: true, member: Some(&member), decorator: Some("deco") };
        let answered = [cm("b", json!({})), cm("a", json!({CONTROLLER_UID: "set-by-the-hook"}))];
        let desired = desired_children(&f, &p, &answered, marks).unwrap();
        let names: Vec<&str> = desired.iter().map(|(key, _)| key.name.as_str()).collect();
        assert_eq!(names, ["b", "a"], "in the answer's order");
        let labels = &desired[0].1["metadata"]["labels"];
        assert_eq!(labels[CONTROLLER_UID], "uid-w");
        assert_eq!(labels[member.label()], "m1_abc123");
        assert_eq!(labels[PARENT_LABEL], "uid-w");
        assert_eq!(desired[0].1["metadata"]["annotations"][DECORATOR_ANNOTATION], "deco");
        assert_eq!(desired[1].1["metadata"]["labels"][CONTROLLER_UID], "set-by-the-hook", "the hook's own kept");

        let plain = desired_children(&f, &p, &answered[..1], Marks::default()).unwrap();
        let labels = plain[0].1["metadata"]["labels"].as_object().unwrap();
        assert_eq!(labels.keys().collect::<Vec<_>>(), [MANAGED_BY_LABEL], "{labels:?}");
        assert!(plain[0].1["metadata"].get("annotations").is_none());

        let twice = desired_children(&f, &p, &[cm("a", json!({})), cm("a", json!({}))], Marks::default());
        assert_eq!(twice.unwrap_err(), "answered ConfigMap ns/a twice");
        let refused = desired_children(&f, &p, &[cm("a", json!({})), json!("text")], Marks::default());
        assert_eq!(refused.unwrap_err(), "answered a child samplectl refuses: a child must be an object, not a string");
    }
}
