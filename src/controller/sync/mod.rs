//! What says what a parent wants: the built-in Sample sync (`sample`) or a hook (`hook`), both in the terms
//! of metacontroller's CompositeController sync hook, so the engine has one path for both. A request
//! holds the parent, the children it controls (keyed `<Kind>.<apiVersion>`, then by name) and whether it
//! is being finalized; an answer holds the desired status and children, an optional one-time resync, and
//! for finalizing whether cleaning up is done. Building requests and reading answers is pure.

pub mod hook;
pub mod sample;

use std::time::Duration;

use kube::api::DynamicObject;
use serde_json::{Map, Value, json};

use crate::controller::rules::children::{Family, Observed};
use crate::controller::rules::status::Style;
use hook::Hook;

/// A controller's sync.
pub enum Syncer {
    /// Samples: [`sample::sync`].
    Sample,
    Hook(Box<Hooks>),
}

/// A hook controller's hooks, with the controller object every request carries.
pub struct Hooks {
    pub sync: Hook,
    /// Called instead of `sync` while the parent is being finalized; `sync` is called then when absent.
    pub finalize: Option<Hook>,
    pub controller: Value,
}

/// The shape of a hook's requests and answers, as metacontroller's `hooks.*.version`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Version {
    /// Objects keyed relative to the parent: `name`, or `namespace/name` for a namespaced object of a
    /// cluster-scoped parent.
    #[default]
    V1,
    /// Objects keyed uniformly: `namespace/name` for every namespaced object, `name` otherwise.
    V2,
}

impl Syncer {
    /// How it is named in messages: "the Sample sync", "hook ./sync.sh".
    pub fn name(&self) -> String {
        match self {
            Syncer::Sample => "the Sample sync".into(),
            Syncer::Hook(hooks) => format!("hook {}", hooks.sync.target),
        }
    }

    /// How long one call may take, on top of the engine's own deadline.
    pub fn timeout(&self) -> Duration {
        match self {
            Syncer::Sample => Duration::ZERO,
            Syncer::Hook(hooks) => hooks.finalize.iter().map(|f| f.timeout).fold(hooks.sync.timeout, Duration::max),
        }
    }

    /// How the status it answers is written: the Sample CRD declares every field of its status, so it is
    /// applied; a hook's replaces the parent's whole, as metacontroller writes it.
    pub fn status_style(&self) -> Style {
        match self {
            Syncer::Sample => Style::Apply,
            Syncer::Hook(_) => Style::Replace,
        }
    }

    /// What `parent` wants, given the children it controls.
    pub async fn call(
        &self,
        family: &Family,
        parent: &DynamicObject,
        children: &Observed,
        finalizing: bool,
        now: &str,
    ) -> Result<Answer, String> {
        match self {
            Syncer::Sample => Ok(sample::sync(parent, children, now)),
            Syncer::Hook(hooks) => {
                let hook = match (&hooks.finalize, finalizing) {
                    (Some(finalize), true) => finalize,
                    _ => &hooks.sync,
                };
                let request = request(&hooks.controller, family, parent, children, finalizing, hook.version);
                let object = match parent.metadata.namespace.as_deref() {
                    Some(ns) => format!("{ns}/{}", parent.metadata.name.as_deref().unwrap_or_default()),
                    None => parent.metadata.name.clone().unwrap_or_default(),
                };
                hook.call(&object, &request).await.map_err(|problem| format!("hook {} {problem}", hook.target))
            }
        }
    }
}

/// What a sync answered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answer {
    /// The status to write, replacing the parent's (`observedGeneration` is added). `None`: the answer
    /// had none, which metacontroller also takes as an empty status.
    pub status: Option<Value>,
    /// Every child the parent should have; those it controls and are not here are deleted.
    pub children: Vec<Value>,
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

/// The request for one parent. Every child type is present, empty or not; a child is keyed as `version`
/// says.
pub fn request(
    controller: &Value,
    family: &Family,
    parent: &DynamicObject,
    children: &Observed,
    finalizing: bool,
    version: Version,
) -> Value {
    let mut by_type: Map<String, Value> =
        (0..family.children.len()).map(|kind| (family.type_key(kind), Value::Object(Map::new()))).collect();
    for (key, child) in children {
        let name = match (version, family.parent.namespaced, key.namespace.as_str()) {
            (_, _, "") => key.name.clone(),
            (Version::V1, true, _) => key.name.clone(),
            (Version::V1, false, ns) | (Version::V2, _, ns) => format!("{ns}/{}", key.name),
        };
        let mut object = serde_json::to_value(child).unwrap_or(Value::Null);
        if let Some(metadata) = object["metadata"].as_object_mut() {
            metadata.remove("managedFields");
        }
        by_type[&family.type_key(key.kind)][name] = object;
    }
    let mut parent = serde_json::to_value(parent).unwrap_or(Value::Null);
    if let Some(metadata) = parent["metadata"].as_object_mut() {
        metadata.remove("managedFields");
    }
    json!({
        "controller": controller,
        "parent": parent,
        "children": by_type,
        "related": {},
        "finalizing": finalizing,
    })
}

/// Reads a hook's answer. Anything but an object with the fields in their types is refused whole, so a
/// half-understood answer never changes anything. `strict` (a v2 hook's default, as metacontroller's)
/// also refuses a field the answer does not have, rather than ignoring it.
pub fn parse_answer(body: &[u8], strict: bool) -> Result<Answer, String> {
    let value: Value = serde_json::from_slice(body).map_err(|err| {
        let start = String::from_utf8_lossy(&body[..body.len().min(80)]).into_owned();
        if body.iter().all(u8::is_ascii_whitespace) {
            "answered nothing (an empty body)".to_owned()
        } else {
            format!("answered invalid JSON ({err}): {start:?}")
        }
    })?;
    let Value::Object(mut answer) = value else {
        return Err("answered JSON that is not an object".into());
    };
    let status = match answer.remove("status") {
        None | Some(Value::Null) => None,
        Some(status @ Value::Object(_)) => Some(status),
        Some(_) => return Err("answered a status that is not an object".into()),
    };
    let children = match answer.remove("children") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(children)) => children,
        Some(_) => return Err("answered children that are not a list".into()),
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
    Ok(Answer { status, children, resync_after, finalized })
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
        let request = request(&controller, &family, &parent, &children, true, Version::V1);
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
        let v1 = request(&json!({}), &namespaced, &parent, &children, false, Version::V1);
        assert!(v1["children"]["ConfigMap.v1"]["c"].is_object());
        assert!(v1["children"]["ClusterRole.rbac.authorization.k8s.io/v1"]["c"].is_object());
        let v2 = request(&json!({}), &namespaced, &parent, &children, false, Version::V2);
        assert!(v2["children"]["ConfigMap.v1"]["a/c"].is_object());
        assert!(v2["children"]["ClusterRole.rbac.authorization.k8s.io/v1"]["c"].is_object());
        assert_eq!(v2["related"], json!({}));
    }

    #[test]
    fn a_strict_answer_has_only_known_fields() {
        let body = br#"{"status": {}, "labels": {"a": "b"}}"#;
        assert!(parse_answer(body, false).is_ok(), "loose: ignored");
        let err = parse_answer(body, true).unwrap_err();
        assert!(err.contains(r#"answered unknown field "labels""#), "{err}");
        assert!(parse_answer(br#"{"children": [], "finalized": false}"#, true).is_ok());
    }

    #[test]
    fn answers_are_read_whole_or_refused() {
        let answer =
            parse_answer(br#"{"status": {"n": 1}, "children": [{"kind": "X"}], "resyncAfterSeconds": 1.5}"#, false)
                .unwrap();
        assert_eq!(answer.status, Some(json!({"n": 1})));
        assert_eq!(answer.children.len(), 1);
        assert_eq!(answer.resync_after, Some(Duration::from_millis(1500)));
        assert!(!answer.finalized);
        assert_eq!(parse_answer(b"{}", false).unwrap(), Answer::default());
        assert!(parse_answer(br#"{"finalized": true, "status": null}"#, false).unwrap().finalized);
        assert_eq!(parse_answer(br#"{"resyncAfterSeconds": -1}"#, false).unwrap().resync_after, None);

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
            let err = parse_answer(body, false).unwrap_err();
            assert!(err.contains(error), "{body:?}: {err}");
        }
    }
}
