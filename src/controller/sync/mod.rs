//! What says what a parent wants: the built-in Sample sync (`sample`) or a hook (`hook`), both in the terms
//! of metacontroller's sync hooks, so the engine has one path for both. A CompositeController's request
//! holds the parent, the children it controls (keyed `<Kind>.<apiVersion>`, then by name), the related
//! objects its customize hook asked for, and whether it is being finalized; a DecoratorController's holds
//! the decorated object and its attachments instead. An answer holds the desired status and children
//! (attachments), for a decorator the labels and annotations of the object itself, an optional one-time
//! resync, and for finalizing whether cleaning up is done. Building requests and reading answers is pure.

mod close_notify;
pub mod graph;
pub mod hook;
mod process;
pub mod sample;
pub mod security;
pub mod shell_hook;

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::DynamicObject;
use serde_json::{Map, Value, json};

use crate::controller::rules::FIELD_MANAGER;
pub use crate::controller::rules::Version;
use crate::controller::rules::children::{Family, Observed};
use crate::controller::rules::graph::applyset;
use crate::controller::rules::related::{RelatedRule, object_key};
use crate::controller::rules::status::Style;
use hook::Hook;

/// A controller's sync.
pub enum Syncer {
    /// Samples: [`sample::sync`].
    Sample,
    Hook(Box<Hooks>),
    /// A ResourceGraphDefinition's instances: [`graph::GraphSync`].
    Graph(Box<graph::GraphSync>),
}

/// A hook controller's hooks, with the controller object every request carries.
pub struct Hooks {
    pub sync: Hook,
    /// Called instead of `sync` while the parent is being finalized; `sync` is called then when absent.
    pub finalize: Option<Hook>,
    /// Asked, once per generation of a parent, which other objects its sync requests should carry.
    pub customize: Option<Hook>,
    pub controller: Value,
    pub shape: Shape,
}

/// Which of metacontroller's controllers the hooks are written for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Shape {
    /// A CompositeController's: `parent` and `children` in the request, `children` in the answer, and the
    /// status always written (with `observedGeneration`).
    #[default]
    Composite,
    /// A DecoratorController's: `object` and `attachments`, answered `attachments`, `labels` and
    /// `annotations` for the object itself, and a status written only when one is answered.
    Decorator,
    /// A ResourceGraphDefinition instance's: children in the answer, labels for the instance itself, and
    /// the status written whole as answered (kro's, with no `observedGeneration` added).
    Graph,
}

impl Shape {
    fn children_field(self) -> &'static str {
        match self {
            Shape::Composite => "children",
            Shape::Decorator => "attachments",
            Shape::Graph => "children",
        }
    }
}

/// The objects a customize hook asked for, by type (`<Kind>.<apiVersion>`, every type asked for present
/// even when nothing matched).
pub type RelatedObjects = BTreeMap<String, Vec<DynamicObject>>;

impl Syncer {
    /// How it is named in messages: "the Sample sync", "hook ./sync.sh".
    pub fn name(&self) -> String {
        match self {
            Syncer::Sample => "the Sample sync".into(),
            Syncer::Hook(hooks) => format!("hook {}", hooks.sync.target),
            Syncer::Graph(graph) => graph.name(),
        }
    }

    /// How long one call may take, on top of the engine's own deadline.
    pub fn timeout(&self) -> Duration {
        match self {
            Syncer::Sample | Syncer::Graph(_) => Duration::ZERO,
            Syncer::Hook(hooks) => {
                let sync = hooks.finalize.iter().map(|f| f.timeout).fold(hooks.sync.timeout, Duration::max);
                sync + hooks.customize.as_ref().map_or(Duration::ZERO, |c| c.timeout)
            }
        }
    }

    /// The field managers its writes are made under: the children's, and the parent's labels and
    /// annotations'. A graph's are kro's, so that a cluster moving between kro and samplectl keeps one
    /// owner per field and an apply can still drop what the other wrote.
    pub fn field_managers(&self) -> (&'static str, &'static str) {
        match self {
            Syncer::Graph(_) => (applyset::CHILD_MANAGER, applyset::PARENT_MANAGER),
            Syncer::Sample | Syncer::Hook(_) => (FIELD_MANAGER, FIELD_MANAGER),
        }
    }

    /// How the status it answers is written: the Sample CRD declares every field of its status, so it is
    /// applied; a hook's replaces the parent's whole, as metacontroller writes it.
    pub fn status_style(&self) -> Style {
        match self {
            Syncer::Sample => Style::Apply,
            Syncer::Hook(_) | Syncer::Graph(_) => Style::Replace,
        }
    }

    pub fn shape(&self) -> Shape {
        match self {
            Syncer::Sample => Shape::Composite,
            Syncer::Hook(hooks) => hooks.shape,
            Syncer::Graph(_) => Shape::Graph,
        }
    }

    /// The version of the sync hook's requests (the Sample sync reads v1's).
    pub fn version(&self) -> Version {
        match self {
            Syncer::Sample => Version::V1,
            // An external reference may name an object in any namespace, as a v2 hook's related rules may.
            Syncer::Graph(_) => Version::V2,
            Syncer::Hook(hooks) => hooks.sync.version,
        }
    }

    /// The related objects `parent` wants, as its customize hook answers; `None` without such a hook.
    pub async fn customize(&self, parent: &DynamicObject) -> Option<Result<Vec<RelatedRule>, String>> {
        if let Syncer::Graph(graph) = self {
            let rules = graph.related_rules(parent);
            return (!rules.is_empty()).then_some(Ok(rules));
        }
        let Syncer::Hook(hooks) = self else { return None };
        let hook = hooks.customize.as_ref()?;
        let request = json!({"controller": hooks.controller, "parent": without_managed_fields(parent)});
        let answer = hook.call(&display(parent), &request, parse_customize).await;
        Some(answer.map_err(|problem| format!("customize hook {} {problem}", hook.target)))
    }

    /// What `parent` wants, given the children it controls and the objects its customize hook asked for.
    pub async fn call(&self, family: &Family, inputs: Inputs<'_>, now: &str) -> Result<Answer, String> {
        match self {
            Syncer::Sample => Ok(sample::sync(inputs.parent, inputs.children, now)),
            Syncer::Graph(graph) => Ok(graph::off_the_runtime(|| graph.call(inputs, now))),
            Syncer::Hook(hooks) => {
                let hook = match (&hooks.finalize, inputs.finalizing) {
                    (Some(finalize), true) => finalize,
                    _ => &hooks.sync,
                };
                let request = request(&hooks.controller, family, &inputs, hook.version, hooks.shape);
                let shape = hooks.shape;
                hook.call(&display(inputs.parent), &request, |body, strict| parse_answer(body, strict, shape))
                    .await
                    .map_err(|problem| format!("hook {} {problem}", hook.target))
            }
        }
    }
}

/// What one sync request is made of.
pub struct Inputs<'a> {
    pub parent: &'a DynamicObject,
    pub children: &'a Observed,
    pub related: &'a RelatedObjects,
    pub finalizing: bool,
}

fn display(parent: &DynamicObject) -> String {
    match parent.metadata.namespace.as_deref() {
        Some(ns) => format!("{ns}/{}", parent.metadata.name.as_deref().unwrap_or_default()),
        None => parent.metadata.name.clone().unwrap_or_default(),
    }
}

/// An object as a sync is given it: JSON, without its managed fields.
pub(crate) fn without_managed_fields(object: &DynamicObject) -> Value {
    let mut object = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Some(metadata) = object["metadata"].as_object_mut() {
        metadata.remove("managedFields");
    }
    object
}

/// What a sync answered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answer {
    /// The status to write. `None`: the answer had none, which a CompositeController takes as an empty
    /// status (`observedGeneration` is added) and a DecoratorController as "leave it as it is".
    pub status: Option<Value>,
    /// Every child (attachment) the parent should have; those it controls and are not here are deleted.
    pub children: Vec<Value>,
    /// A decorator's labels and annotations for the object itself: a value sets the key, `None` removes it.
    pub labels: BTreeMap<String, Option<String>>,
    pub annotations: BTreeMap<String, Option<String>>,
    /// Look at this parent again after this long, once.
    pub resync_after: Option<Duration>,
    /// While finalizing: cleaning up is done, the finalizer may go.
    pub finalized: bool,
}

/// The `controller` field of a request: the CompositeController samplectl's flags amount to, so a hook
/// written for metacontroller that reads it finds what it expects.
pub fn controller_object(family: &Family, name: &str) -> Value {
    let rule = |r: &crate::cluster::resolve::Resolved| json!({"apiVersion": r.ar.api_version, "resource": r.ar.plural});
    json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1",
        "kind": "CompositeController",
        "metadata": {"name": name},
        "spec": {
            "parentResource": rule(&family.parent),
            "childResources": family.children.iter().map(rule).collect::<Vec<_>>(),
        },
    })
}

/// The request for one parent. Every child type (and every related type asked for) is present, empty or
/// not; objects are keyed as `version` says.
pub fn request(controller: &Value, family: &Family, inputs: &Inputs, version: Version, shape: Shape) -> Value {
    let parent_namespaced = family.parent.namespaced;
    let key = |object: &DynamicObject| {
        let meta = &object.metadata;
        let (ns, name) = (meta.namespace.as_deref().unwrap_or_default(), meta.name.as_deref().unwrap_or_default());
        object_key(version, parent_namespaced, ns, name)
    };
    let mut by_type: Map<String, Value> =
        (0..family.children.len()).map(|kind| (family.type_key(kind), Value::Object(Map::new()))).collect();
    for (child_key, child) in inputs.children {
        // Typed by the engine (`Family::typed`): metacontroller's hooks find the type on every object.
        by_type[&family.type_key(child_key.kind)][key(child)] = without_managed_fields(child);
    }
    let mut related = Map::new();
    for (type_key, objects) in inputs.related {
        let group: Map<String, Value> = objects.iter().map(|o| (key(o), without_managed_fields(o))).collect();
        related.insert(type_key.clone(), Value::Object(group));
    }
    let root = match shape {
        Shape::Composite | Shape::Graph => "parent",
        Shape::Decorator => "object",
    };
    json!({
        "controller": controller,
        root: without_managed_fields(inputs.parent),
        shape.children_field(): by_type,
        "related": related,
        "finalizing": inputs.finalizing,
    })
}

/// Reads a sync hook's answer. Anything but an object with the fields in their types is refused whole,
/// so a half-understood answer never changes anything. `strict` (a v2 hook's default, as
/// metacontroller's) also refuses a field the answer does not have, rather than ignoring it.
pub fn parse_answer(body: &[u8], strict: bool, shape: Shape) -> Result<Answer, String> {
    let mut answer = json_object(body)?;
    let status = match answer.remove("status") {
        None | Some(Value::Null) => None,
        Some(status @ Value::Object(_)) => Some(status),
        Some(_) => return Err("answered a status that is not an object".into()),
    };
    let field = shape.children_field();
    let children = match answer.remove(field) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(children)) => children,
        Some(_) => return Err(format!("answered {field} that are not a list")),
    };
    let (labels, annotations) = match shape {
        Shape::Composite | Shape::Graph => Default::default(),
        Shape::Decorator => (string_updates(&mut answer, "labels")?, string_updates(&mut answer, "annotations")?),
    };
    let resync_after = match answer.remove("resyncAfterSeconds") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => match n.as_f64() {
            Some(s) if s > 0.0 && s.is_finite() => Some(Duration::from_secs_f64(s.min(86_400.0 * 365.0))),
            // Zero or less asks for nothing, as metacontroller reads it.
            _ => None,
        },
        Some(_) => return Err("answered a resyncAfterSeconds that is not a number".into()),
    };
    let finalized = match answer.remove("finalized") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => b,
        Some(_) => return Err("answered a finalized that is not true or false".into()),
    };
    if strict && let Some(unknown) = answer.keys().next() {
        return Err(format!("answered unknown field {unknown:?} (its answers are read strictly)"));
    }
    Ok(Answer { status, children, labels, annotations, resync_after, finalized })
}

/// Reads a customize hook's answer: its `relatedResources`, each rule checked.
pub fn parse_customize(body: &[u8], strict: bool) -> Result<Vec<RelatedRule>, String> {
    let mut answer = json_object(body)?;
    let rules = answer.remove("relatedResources").unwrap_or(Value::Null);
    if strict && let Some(unknown) = answer.keys().next() {
        return Err(format!("answered unknown field {unknown:?} (its answers are read strictly)"));
    }
    let rules: Vec<RelatedRule> = match rules {
        Value::Null => Vec::new(),
        rules => serde_json::from_value(rules)
            .map_err(|err| format!("answered relatedResources that cannot be read: {err}"))?,
    };
    for rule in &rules {
        if rule.api_version.is_empty() || rule.resource.is_empty() {
            return Err("answered a related resource without apiVersion and resource".into());
        }
        rule.selection().map_err(|why| format!("answered {why}"))?;
    }
    Ok(rules)
}

fn json_object(body: &[u8]) -> Result<Map<String, Value>, String> {
    let value: Value = serde_json::from_slice(body).map_err(|err| {
        let start = String::from_utf8_lossy(&body[..body.len().min(80)]).into_owned();
        if body.iter().all(u8::is_ascii_whitespace) {
            "answered nothing (an empty body)".to_owned()
        } else {
            format!("answered invalid JSON ({err}): {start:?}")
        }
    })?;
    match value {
        Value::Object(answer) => Ok(answer),
        _ => Err("answered JSON that is not an object".into()),
    }
}

/// A decorator's `labels` or `annotations`: strings to set, nulls to remove.
fn string_updates(answer: &mut Map<String, Value>, field: &str) -> Result<BTreeMap<String, Option<String>>, String> {
    match answer.remove(field) {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map
            .into_iter()
            .map(|(key, value)| match value {
                Value::String(s) => Ok((key, Some(s))),
                Value::Null => Ok((key, None)),
                _ => Err(format!("answered {field} whose {key:?} is not a string or null")),
            })
            .collect(),
        Some(_) => Err(format!("answered {field} that are not an object")),
    }
}

#[cfg(test)]
mod tests {
    use kube::discovery::ApiResource;

    use super::*;
    use crate::cluster::resolve::Resolved;
    use crate::controller::rules::children::ChildKey;

    fn resolved(api_version: &str, kind: &str, plural: &str, namespaced: bool) -> Resolved {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        Resolved {
            ar: ApiResource {
                group: group.into(),
                version: version.into(),
                api_version: api_version.into(),
                kind: kind.into(),
                plural: plural.into(),
            },
            namespaced,
            verbs: Vec::new(),
            subresources: Vec::new(),
        }
    }

    #[test]
    fn a_request_keys_children_as_metacontroller_does() {
        let family = Family {
            parent: resolved("example.com/v1", "Widget", "widgets", false),
            children: vec![
                resolved("v1", "ConfigMap", "configmaps", true),
                resolved("apps/v1", "Deployment", "deployments", true),
            ],
            label_owned: false,
        };
        let parent: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "managedFields": [{"manager": "x"}]}, "spec": {"n": 1},
        }))
        .unwrap();
        let child: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "a"}, "data": {"k": "v"},
        }))
        .unwrap();
        let children = Observed::from([(ChildKey { kind: 0, namespace: "a".into(), name: "c".into() }, child)]);
        let controller = controller_object(&family, "samplectl");
        let request = request(
            &controller,
            &family,
            &Inputs { parent: &parent, children: &children, related: &RelatedObjects::new(), finalizing: true },
            Version::V1,
            Shape::Composite,
        );
        assert_eq!(request["children"]["ConfigMap.v1"]["a/c"]["data"]["k"], "v");
        assert_eq!(request["children"]["Deployment.apps/v1"], json!({}));
        assert_eq!(request["parent"]["spec"]["n"], 1);
        assert!(request["parent"]["metadata"].get("managedFields").is_none());
        assert_eq!(request["finalizing"], true);
        assert_eq!(
            request["controller"]["spec"]["childResources"][1],
            json!({"apiVersion": "apps/v1", "resource": "deployments"})
        );
    }

    #[test]
    fn v1_keys_relative_to_the_parent_and_v2_by_namespace_always() {
        let namespaced = Family {
            parent: resolved("example.com/v1", "Widget", "widgets", true),
            children: vec![
                resolved("v1", "ConfigMap", "configmaps", true),
                resolved("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", false),
            ],
            label_owned: false,
        };
        let parent: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "a"},
        }))
        .unwrap();
        let object = |kind: &str, namespace: Option<&str>| -> DynamicObject {
            serde_json::from_value(json!({"kind": kind, "metadata": {"name": "c", "namespace": namespace}})).unwrap()
        };
        let children = Observed::from([
            (ChildKey { kind: 0, namespace: "a".into(), name: "c".into() }, object("ConfigMap", Some("a"))),
            (ChildKey { kind: 1, namespace: String::new(), name: "c".into() }, object("ClusterRole", None)),
        ]);
        let v1 = request(
            &json!({}),
            &namespaced,
            &Inputs { parent: &parent, children: &children, related: &RelatedObjects::new(), finalizing: false },
            Version::V1,
            Shape::Composite,
        );
        assert!(v1["children"]["ConfigMap.v1"]["c"].is_object());
        assert!(v1["children"]["ClusterRole.rbac.authorization.k8s.io/v1"]["c"].is_object());
        let v2 = request(
            &json!({}),
            &namespaced,
            &Inputs { parent: &parent, children: &children, related: &RelatedObjects::new(), finalizing: false },
            Version::V2,
            Shape::Composite,
        );
        assert!(v2["children"]["ConfigMap.v1"]["a/c"].is_object());
        assert!(v2["children"]["ClusterRole.rbac.authorization.k8s.io/v1"]["c"].is_object());
        assert_eq!(v2["related"], json!({}));
    }

    #[test]
    fn a_strict_answer_has_only_known_fields() {
        let body = br#"{"status": {}, "labels": {"a": "b"}}"#;
        assert!(parse_answer(body, false, Shape::Composite).is_ok(), "loose: ignored");
        let err = parse_answer(body, true, Shape::Composite).unwrap_err();
        assert!(err.contains(r#"answered unknown field "labels""#), "{err}");
        assert!(parse_answer(br#"{"children": [], "finalized": false}"#, true, Shape::Composite).is_ok());
    }

    #[test]
    fn a_decorators_answer_sets_and_removes_labels_and_annotations() {
        let body =
            br#"{"labels": {"a": "1", "b": null}, "annotations": {"c": "x"}, "attachments": [{}], "status": null}"#;
        let answer = parse_answer(body, true, Shape::Decorator).unwrap();
        assert_eq!(answer.labels, BTreeMap::from([("a".into(), Some("1".into())), ("b".into(), None)]));
        assert_eq!(answer.annotations, BTreeMap::from([("c".into(), Some("x".into()))]));
        assert_eq!((answer.children.len(), answer.status), (1, None));
        let err = parse_answer(br#"{"labels": {"a": 1}}"#, false, Shape::Decorator).unwrap_err();
        assert!(err.contains(r#"labels whose "a" is not a string or null"#), "{err}");
        let err = parse_answer(br#"{"children": []}"#, true, Shape::Decorator).unwrap_err();
        assert!(err.contains(r#"unknown field "children""#), "{err}");
        let err = parse_answer(br#"{"labels": {}}"#, true, Shape::Composite).unwrap_err();
        assert!(err.contains(r#"unknown field "labels""#), "{err}");
    }

    #[test]
    fn customize_answers_are_rules_checked_one_by_one() {
        let rules = parse_customize(
            br#"{"relatedResources": [{"apiVersion": "v1", "resource": "secrets", "names": ["a"]}]}"#,
            true,
        )
        .unwrap();
        assert_eq!(rules[0].names, vec!["a".to_owned()]);
        assert!(parse_customize(b"{}", true).unwrap().is_empty());
        let err = parse_customize(br#"{"relatedResources": [{"resource": "secrets"}]}"#, false).unwrap_err();
        assert!(err.contains("missing field `apiVersion`"), "{err}");
        let err = parse_customize(br#"{"relatedResources": [{"apiVersion": "v1", "resource": ""}]}"#, false);
        assert!(err.unwrap_err().contains("without apiVersion and resource"));
        let err = parse_customize(br#"{"related": []}"#, true).unwrap_err();
        assert!(err.contains(r#"unknown field "related""#), "{err}");
        let err = parse_customize(br#"{"relatedResources": {}}"#, false).unwrap_err();
        assert!(err.starts_with("answered relatedResources that cannot be read: "), "{err}");
    }

    #[test]
    fn a_decorators_request_names_the_object_and_its_attachments() {
        let family = Family {
            parent: resolved("v1", "Secret", "secrets", true),
            children: vec![resolved("v1", "ConfigMap", "configmaps", true)],
            label_owned: false,
        };
        let parent: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "a"},
        }))
        .unwrap();
        let child: DynamicObject =
            serde_json::from_value(json!({"metadata": {"name": "c", "namespace": "a"}})).unwrap();
        let mut children = Observed::from([(ChildKey { kind: 0, namespace: "a".into(), name: "c".into() }, child)]);
        // A listed child, typed as the engine types every child before a sync reads it.
        family.typed(&mut children);
        let related = RelatedObjects::from([("Secret.v1".to_owned(), Vec::new())]);
        let inputs = Inputs { parent: &parent, children: &children, related: &related, finalizing: false };
        let request = request(&json!({}), &family, &inputs, Version::V1, Shape::Decorator);
        assert_eq!(request["object"]["metadata"]["name"], "s");
        assert!(request.get("parent").is_none() && request.get("children").is_none());
        let attachment = &request["attachments"]["ConfigMap.v1"]["c"];
        assert_eq!((attachment["kind"].as_str(), attachment["apiVersion"].as_str()), (Some("ConfigMap"), Some("v1")));
        assert_eq!(request["related"], json!({"Secret.v1": {}}));
    }

    #[test]
    fn answers_are_read_whole_or_refused() {
        let answer = parse_answer(
            br#"{"status": {"n": 1}, "children": [{"kind": "X"}], "resyncAfterSeconds": 1.5}"#,
            false,
            Shape::Composite,
        )
        .unwrap();
        assert_eq!(answer.status, Some(json!({"n": 1})));
        assert_eq!(answer.children.len(), 1);
        assert_eq!(answer.resync_after, Some(Duration::from_millis(1500)));
        assert!(!answer.finalized);
        assert_eq!(parse_answer(b"{}", false, Shape::Composite).unwrap(), Answer::default());
        assert!(parse_answer(br#"{"finalized": true, "status": null}"#, false, Shape::Composite).unwrap().finalized);
        assert_eq!(parse_answer(br#"{"resyncAfterSeconds": -1}"#, false, Shape::Composite).unwrap().resync_after, None);

        for (body, error) in [
            (&b""[..], "answered nothing"),
            (b"  \n", "answered nothing"),
            (b"{\"children\": [", "answered invalid JSON"),
            (b"[]", "not an object"),
            (br#"{"status": "ok"}"#, "a status that is not an object"),
            (br#"{"children": {}}"#, "children that are not a list"),
            (br#"{"resyncAfterSeconds": "5"}"#, "not a number"),
            (br#"{"finalized": "yes"}"#, "not true or false"),
        ] {
            let err = parse_answer(body, false, Shape::Composite).unwrap_err();
            assert!(err.contains(error), "{body:?}: {err}");
        }
    }
}
