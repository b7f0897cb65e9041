//! What one Sample wants, decided without a cluster: its ConfigMap, whether the one that exists already
//! matches, and its status. The drivers fetch, call this, and write only what it says differs.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::DynamicObject;
use kube::discovery::ApiResource;
use serde_json::{Value, json};

pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "samplectl";
/// Names the Sample a ConfigMap belongs to, so `kubectl get cm -l samples.example.com/name=x` finds it.
pub const SAMPLE_LABEL: &str = "samples.example.com/name";
pub const DATA_KEY: &str = "testString";
pub const READY: &str = "Ready";

/// The label selector for every ConfigMap samplectl manages.
pub fn managed_selector() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY}")
}

/// A Sample's `testString`. A Sample without one holds the empty string: the schema allows leaving it
/// out, and its ConfigMap then carries `testString: ""` rather than no key, so that samplectl owns the
/// key in every case and a hand-made value never makes it flap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TestString {
    Value(String),
    /// Not a string: possible only where the CRD has no schema for it. Reported, never guessed at.
    Invalid(&'static str),
}

pub fn test_string(sample: &DynamicObject) -> TestString {
    match sample.data.get(DATA_KEY) {
        None | Some(Value::Null) => TestString::Value(String::new()),
        Some(Value::String(s)) => TestString::Value(s.clone()),
        Some(Value::Bool(_)) => TestString::Invalid("a boolean"),
        Some(Value::Number(_)) => TestString::Invalid("a number"),
        Some(Value::Array(_)) => TestString::Invalid("a list"),
        Some(Value::Object(_)) => TestString::Invalid("an object"),
    }
}

fn name(sample: &DynamicObject) -> &str {
    sample.metadata.name.as_deref().unwrap_or_default()
}

fn namespace(sample: &DynamicObject) -> &str {
    sample.metadata.namespace.as_deref().unwrap_or_default()
}

/// Label values stop at 63 characters; Sample names go up to 253.
const LABEL_VALUE_MAX: usize = 63;

/// The labels of a Sample's ConfigMap. The Sample's name is a label only when it fits in one: a longer
/// name would make every write fail (422), and the controller selects children by the managed-by label
/// and their owner reference, never by this one.
fn child_labels(sample: &DynamicObject) -> Value {
    let mut labels = json!({ MANAGED_BY_LABEL: MANAGED_BY });
    if name(sample).len() <= LABEL_VALUE_MAX {
        labels[SAMPLE_LABEL] = name(sample).into();
    }
    labels
}

/// The ConfigMap a Sample wants, as a server-side apply body: only the fields samplectl owns.
pub fn desired_configmap(sample: &DynamicObject, ar: &ApiResource, value: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name(sample),
            "namespace": namespace(sample),
            "labels": child_labels(sample),
            "ownerReferences": [{
                "apiVersion": ar.api_version,
                "kind": ar.kind,
                "name": name(sample),
                "uid": sample.metadata.uid.as_deref().unwrap_or_default(),
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "data": { DATA_KEY: value },
    })
}

/// Whether the Sample (by uid) is the ConfigMap's controller.
pub fn controlled_by(cm: &ConfigMap, sample_uid: &str) -> bool {
    cm.metadata.owner_references.iter().flatten().any(|r| r.controller == Some(true) && r.uid == sample_uid)
}

/// Whether an existing ConfigMap already holds everything `desired` asks for.
pub fn up_to_date(cm: &ConfigMap, desired: &Value) -> bool {
    let labels = cm.metadata.labels.clone().unwrap_or_default();
    let labels_ok = desired["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str());
    let data: BTreeMap<String, String> = cm.data.clone().unwrap_or_default();
    let data_ok =
        desired["data"].as_object().into_iter().flatten().all(|(k, v)| data.get(k).map(String::as_str) == v.as_str());
    let owner = &desired["metadata"]["ownerReferences"][0];
    let owner_ok = cm.metadata.owner_references.iter().flatten().any(|r| {
        r.uid == owner["uid"]
            && r.api_version == owner["apiVersion"]
            && r.kind == owner["kind"]
            && r.controller == Some(true)
            && r.block_owner_deletion == Some(true)
    });
    labels_ok && data_ok && owner_ok
}

/// What to do about the child.
#[derive(Debug, Clone, PartialEq)]
pub enum ChildAction {
    /// Already as wanted.
    None,
    Create(Value),
    Update(Value),
    /// A ConfigMap of that name that this Sample does not control: left alone.
    Conflict,
    /// The Sample itself is unusable; nothing is written to the child.
    Invalid,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    pub ready: bool,
    pub reason: String,
    pub message: String,
}

impl Readiness {
    pub fn ready(message: impl Into<String>) -> Self {
        Readiness { ready: true, reason: "ConfigMapReady".into(), message: message.into() }
    }

    pub fn not_ready(reason: &str, message: impl Into<String>) -> Self {
        Readiness { ready: false, reason: reason.into(), message: message.into() }
    }
}

pub struct Plan {
    pub child: ChildAction,
    /// How the Sample stands once the child action has succeeded.
    pub readiness: Readiness,
}

pub fn plan(sample: &DynamicObject, ar: &ApiResource, child: Option<&ConfigMap>) -> Plan {
    let cm_name = format!("{}/{}", namespace(sample), name(sample));
    let value = match test_string(sample) {
        TestString::Value(value) => value,
        TestString::Invalid(what) => {
            return Plan {
                child: ChildAction::Invalid,
                readiness: Readiness::not_ready(
                    "InvalidTestString",
                    format!("testString must be a string, not {what}"),
                ),
            };
        }
    };
    let desired = desired_configmap(sample, ar, &value);
    let uid = sample.metadata.uid.as_deref().unwrap_or_default();
    let ready = Readiness::ready(format!("ConfigMap {cm_name} holds testString"));
    match child {
        None => Plan { child: ChildAction::Create(desired), readiness: ready },
        Some(cm) if !controlled_by(cm, uid) => Plan {
            child: ChildAction::Conflict,
            readiness: Readiness::not_ready("ConfigMapConflict", conflict_message(cm, &cm_name, ar)),
        },
        Some(cm) if up_to_date(cm, &desired) => Plan { child: ChildAction::None, readiness: ready },
        Some(_) => Plan { child: ChildAction::Update(desired), readiness: ready },
    }
}

/// Why a ConfigMap of the Sample's name is not this Sample's, in words that say what to do about it.
fn conflict_message(cm: &ConfigMap, cm_name: &str, ar: &ApiResource) -> String {
    let controller = cm.metadata.owner_references.iter().flatten().find(|r| r.controller == Some(true));
    let labelled =
        cm.metadata.labels.as_ref().and_then(|l| l.get(MANAGED_BY_LABEL)).map(String::as_str) == Some(MANAGED_BY);
    let name = cm.metadata.name.as_deref().unwrap_or_default();
    match controller {
        Some(owner) if owner.kind == ar.kind && owner.api_version == ar.api_version && owner.name == name => format!(
            "ConfigMap {cm_name} belongs to an earlier {} of this name (uid {}); it is replaced once garbage \
             collection has deleted it",
            ar.kind, owner.uid
        ),
        Some(owner) => format!(
            "ConfigMap {cm_name} exists and is controlled by {} {}; samplectl leaves it alone",
            owner.kind, owner.name
        ),
        None if labelled => format!(
            "ConfigMap {cm_name} was left behind without an owner (an orphaning delete?); samplectl does not \
             adopt it: delete it to have it recreated"
        ),
        None => format!("ConfigMap {cm_name} exists and is not controlled by this Sample; samplectl leaves it alone"),
    }
}

/// The Ready condition as the Sample's status holds it now, if any.
fn current_ready(sample: &DynamicObject) -> Option<&Value> {
    sample.data["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == READY)
}

/// The status to write, or `None` when the Sample's status already says this. `lastTransitionTime` moves
/// only when the condition's status flips, so a converged Sample's status never changes.
pub fn desired_status(sample: &DynamicObject, ar: &ApiResource, readiness: &Readiness, now: &str) -> Option<Value> {
    let generation = sample.metadata.generation.unwrap_or_default();
    let status = if readiness.ready { "True" } else { "False" };
    let current = current_ready(sample);
    let unchanged = sample.data["status"]["observedGeneration"] == generation
        && current.is_some_and(|c| {
            c["status"] == status
                && c["reason"] == readiness.reason.as_str()
                && c["message"] == readiness.message.as_str()
                && c["observedGeneration"] == generation
        });
    if unchanged {
        return None;
    }
    let transition = match current {
        Some(c) if c["status"] == status => c["lastTransitionTime"].as_str().unwrap_or(now),
        _ => now,
    };
    Some(json!({
        "apiVersion": ar.api_version,
        "kind": ar.kind,
        "metadata": { "name": name(sample), "namespace": namespace(sample) },
        "status": {
            "observedGeneration": generation,
            "conditions": [{
                "type": READY,
                "status": status,
                "reason": readiness.reason,
                "message": readiness.message,
                "lastTransitionTime": transition,
                "observedGeneration": generation,
            }],
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ar() -> ApiResource {
        ApiResource {
            group: "example.com".into(),
            version: "v1alpha1".into(),
            api_version: "example.com/v1alpha1".into(),
            kind: "Sample".into(),
            plural: "samples".into(),
        }
    }

    fn sample(extra: Value) -> DynamicObject {
        let mut object = json!({
            "apiVersion": "example.com/v1alpha1",
            "kind": "Sample",
            "metadata": {"name": "s", "namespace": "ns", "uid": "uid-1", "generation": 2},
        });
        for (k, v) in extra.as_object().unwrap() {
            object[k] = v.clone();
        }
        serde_json::from_value(object).unwrap()
    }

    fn cm_from(desired: &Value) -> ConfigMap {
        serde_json::from_value(desired.clone()).unwrap()
    }

    #[test]
    fn desired_configmap_carries_labels_owner_and_data() {
        let s = sample(json!({"testString": "hello"}));
        let cm = desired_configmap(&s, &ar(), "hello");
        assert_eq!(cm["metadata"]["labels"][MANAGED_BY_LABEL], "samplectl");
        assert_eq!(cm["metadata"]["labels"][SAMPLE_LABEL], "s");
        assert_eq!(cm["metadata"]["namespace"], "ns");
        let owner = &cm["metadata"]["ownerReferences"][0];
        assert_eq!((owner["kind"].as_str(), owner["uid"].as_str()), (Some("Sample"), Some("uid-1")));
        assert_eq!((owner["controller"].as_bool(), owner["blockOwnerDeletion"].as_bool()), (Some(true), Some(true)));
        assert_eq!(cm["data"][DATA_KEY], "hello");
    }

    #[test]
    fn test_string_missing_is_empty_and_non_strings_are_invalid() {
        assert_eq!(test_string(&sample(json!({}))), TestString::Value(String::new()));
        assert_eq!(test_string(&sample(json!({"testString": "x"}))), TestString::Value("x".into()));
        assert_eq!(test_string(&sample(json!({"testString": 5}))), TestString::Invalid("a number"));
        let p = plan(&sample(json!({"testString": [1]})), &ar(), None);
        assert_eq!(p.child, ChildAction::Invalid);
        assert_eq!(p.readiness.reason, "InvalidTestString");
        assert!(!p.readiness.ready);
    }

    #[test]
    fn plan_creates_updates_leaves_alone_or_reports_conflict() {
        let s = sample(json!({"testString": "v2"}));
        let desired = desired_configmap(&s, &ar(), "v2");
        assert!(matches!(plan(&s, &ar(), None).child, ChildAction::Create(_)));

        let same = cm_from(&desired);
        let p = plan(&s, &ar(), Some(&same));
        assert_eq!(p.child, ChildAction::None);
        assert!(p.readiness.ready);

        let mut edited = same.clone();
        edited.data.as_mut().unwrap().insert(DATA_KEY.into(), "typed by hand".into());
        assert!(matches!(plan(&s, &ar(), Some(&edited)).child, ChildAction::Update(_)));
        let mut unlabelled = same.clone();
        unlabelled.metadata.labels = None;
        assert!(matches!(plan(&s, &ar(), Some(&unlabelled)).child, ChildAction::Update(_)));
        let mut extra_key = same.clone();
        extra_key.data.as_mut().unwrap().insert("other".into(), "someone else's".into());
        assert_eq!(plan(&s, &ar(), Some(&extra_key)).child, ChildAction::None, "keys others own are theirs");

        let mut foreign = same.clone();
        foreign.metadata.owner_references = None;
        let p = plan(&s, &ar(), Some(&foreign));
        assert_eq!(p.child, ChildAction::Conflict);
        assert_eq!(p.readiness.reason, "ConfigMapConflict");
        let mut other_owner = same;
        other_owner.metadata.owner_references.as_mut().unwrap()[0].uid = "uid-of-an-older-sample".into();
        assert_eq!(plan(&s, &ar(), Some(&other_owner)).child, ChildAction::Conflict);
    }

    #[test]
    fn status_is_written_only_when_it_changes() {
        let ready = Readiness::ready("ConfigMap ns/s holds testString");
        let fresh = sample(json!({"testString": "x"}));
        let written = desired_status(&fresh, &ar(), &ready, "2026-01-01T00:00:00Z").expect("a first status");
        assert_eq!(written["status"]["observedGeneration"], 2);
        let condition = &written["status"]["conditions"][0];
        assert_eq!(
            (condition["status"].as_str(), condition["reason"].as_str()),
            (Some("True"), Some("ConfigMapReady"))
        );

        let converged = sample(json!({"testString": "x", "status": written["status"].clone()}));
        assert_eq!(desired_status(&converged, &ar(), &ready, "2026-01-02T00:00:00Z"), None);

        // Same status, new message: written, but the transition time stays.
        let other = Readiness::ready("another message");
        let updated = desired_status(&converged, &ar(), &other, "2026-01-02T00:00:00Z").unwrap();
        assert_eq!(updated["status"]["conditions"][0]["lastTransitionTime"], "2026-01-01T00:00:00Z");
        // A flip moves it.
        let failing = Readiness::not_ready("ConfigMapConflict", "taken");
        let flipped = desired_status(&converged, &ar(), &failing, "2026-01-03T00:00:00Z").unwrap();
        assert_eq!(flipped["status"]["conditions"][0]["lastTransitionTime"], "2026-01-03T00:00:00Z");
        assert_eq!(flipped["status"]["conditions"][0]["status"], "False");

        // A new generation is observed even when nothing else changed.
        let mut edited = converged.clone();
        edited.metadata.generation = Some(3);
        let observed = desired_status(&edited, &ar(), &ready, "2026-01-04T00:00:00Z").unwrap();
        assert_eq!(observed["status"]["observedGeneration"], 3);
        assert_eq!(observed["status"]["conditions"][0]["lastTransitionTime"], "2026-01-01T00:00:00Z");
    }
}
