//! The built-in sync: what one Sample wants, decided without a cluster, in the same terms a hook answers
//! in (`sync::Answer`): a ConfigMap of its name holding `testString`, and a status whose `Ready`
//! condition says so. The engine does the rest (writes, conflicts, deletes) exactly as for a hook.

use kube::api::DynamicObject;
use serde_json::{Value, json};

use super::Answer;
use crate::controller::rules::children::{Observed, json_type};
use crate::controller::rules::status::{Readiness, set_ready};

/// Names the Sample a ConfigMap belongs to, so `kubectl get cm -l samples.example.com/name=x` finds it.
pub const SAMPLE_LABEL: &str = "samples.example.com/name";
pub const DATA_KEY: &str = "testString";

/// The reason of a Sample's Ready condition when its ConfigMap holds its testString.
pub const READY_REASON: &str = "ConfigMapReady";

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
        Some(other) => TestString::Invalid(json_type(other)),
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

/// The ConfigMap a Sample wants: only the fields samplectl owns. The engine adds the managed-by label and
/// the owner reference. The Sample's name is a label only when it fits in one: a longer name would make
/// every write fail (422), and the controller finds children by their owner reference, never by it.
pub fn desired_configmap(sample: &DynamicObject, value: &str) -> Value {
    let mut labels = json!({});
    if name(sample).len() <= LABEL_VALUE_MAX {
        labels[SAMPLE_LABEL] = name(sample).into();
    }
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": name(sample), "labels": labels },
        "data": { DATA_KEY: value },
    })
}

/// The built-in sync. A Sample whose testString is unusable keeps the children it has, untouched (they
/// are answered back as they are), and says why in its status.
pub fn sync(sample: &DynamicObject, children: &Observed, now: &str) -> Answer {
    let generation = sample.metadata.generation.unwrap_or_default();
    let current = &sample.data["status"];
    let mut status = json!({});
    let children = match test_string(sample) {
        TestString::Value(value) => {
            let message = format!("ConfigMap {}/{} holds testString", namespace(sample), name(sample));
            set_ready(&mut status, current, &Readiness::ready(READY_REASON, message), generation, now);
            vec![desired_configmap(sample, &value)]
        }
        TestString::Invalid(what) => {
            let why = Readiness::not_ready("InvalidTestString", format!("testString must be a string, not {what}"));
            set_ready(&mut status, current, &why, generation, now);
            children.values().filter_map(|child| serde_json::to_value(child).ok()).collect()
        }
    };
    Answer { status: Some(status), children, ..Answer::default() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::rules::status::ready_condition;

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

    #[test]
    fn a_sample_wants_a_configmap_holding_its_test_string() {
        let answer = sync(&sample(json!({"testString": "hello"})), &Observed::new(), "2026-01-01T00:00:00Z");
        let cm = &answer.children[0];
        assert_eq!(cm["metadata"]["labels"][SAMPLE_LABEL], "s");
        assert_eq!(cm["data"][DATA_KEY], "hello");
        let status = answer.status.unwrap();
        assert_eq!(status["observedGeneration"], 2);
        let ready = ready_condition(&status).unwrap();
        assert_eq!((ready["status"].as_str(), ready["reason"].as_str()), (Some("True"), Some(READY_REASON)));
        assert_eq!(ready["message"], "ConfigMap ns/s holds testString");
    }

    #[test]
    fn test_string_missing_is_empty_and_non_strings_are_invalid() {
        assert_eq!(test_string(&sample(json!({}))), TestString::Value(String::new()));
        assert_eq!(test_string(&sample(json!({"testString": "x"}))), TestString::Value("x".into()));
        assert_eq!(test_string(&sample(json!({"testString": 5}))), TestString::Invalid("a number"));
        let answer = sync(&sample(json!({"testString": [1]})), &Observed::new(), "2026-01-01T00:00:00Z");
        assert!(answer.children.is_empty(), "nothing is created for an unusable Sample");
        let status = answer.status.unwrap();
        let ready = ready_condition(&status).unwrap();
        assert_eq!((ready["status"].as_str(), ready["reason"].as_str()), (Some("False"), Some("InvalidTestString")));
    }

    #[test]
    fn a_long_name_is_no_label() {
        let long = "s".repeat(64);
        let mut s = sample(json!({"testString": "x"}));
        s.metadata.name = Some(long);
        assert_eq!(desired_configmap(&s, "x")["metadata"]["labels"], json!({}));
    }
}
