//! What a DecoratorController does to the object it decorates, decided without a cluster: the
//! annotation that marks its attachments as its own, and the labels and annotations its hook answers,
//! turned into the one patch that makes the object say them (or nothing, when it already does).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value, json};

/// On every attachment: the name of the DecoratorController that made it (metacontroller's own key, so
/// either engine recognises the other's attachments).
pub const DECORATOR_ANNOTATION: &str = "metacontroller.k8s.io/decorator-controller";

/// The JSON merge patch that sets `labels` and `annotations` (a `None` value removes the key) on the
/// object `meta` describes, guarded by its resourceVersion; `None` when it already says all of them.
pub fn metadata_patch(
    meta: &ObjectMeta,
    labels: &BTreeMap<String, Option<String>>,
    annotations: &BTreeMap<String, Option<String>>,
) -> Option<Value> {
    let changes = |current: Option<&BTreeMap<String, String>>, wanted: &BTreeMap<String, Option<String>>| {
        let empty = BTreeMap::new();
        let current = current.unwrap_or(&empty);
        wanted
            .iter()
            .filter(|(key, value)| current.get(*key) != value.as_ref())
            .map(|(key, value)| (key.clone(), value.clone().map_or(Value::Null, Value::String)))
            .collect::<Map<String, Value>>()
    };
    let labels = changes(meta.labels.as_ref(), labels);
    let annotations = changes(meta.annotations.as_ref(), annotations);
    if labels.is_empty() && annotations.is_empty() {
        return None;
    }
    let mut metadata = json!({"resourceVersion": meta.resource_version});
    if !labels.is_empty() {
        metadata["labels"] = Value::Object(labels);
    }
    if !annotations.is_empty() {
        metadata["annotations"] = Value::Object(annotations);
    }
    Some(json!({ "metadata": metadata }))
}

/// Whether the object `meta` describes is an attachment of the decorator `controller` (another
/// decorator's attachments of the same object are not its).
pub fn made_by(meta: &ObjectMeta, controller: &str) -> bool {
    meta.annotations.as_ref().and_then(|a| a.get(DECORATOR_ANNOTATION)).is_some_and(|c| c == controller)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn updates(pairs: &[(&str, Option<&str>)]) -> BTreeMap<String, Option<String>> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.map(str::to_owned))).collect()
    }

    #[test]
    fn only_what_differs_is_patched_and_nulls_remove() {
        let meta = ObjectMeta {
            resource_version: Some("7".into()),
            labels: Some(BTreeMap::from([("keep".into(), "1".into()), ("drop".into(), "x".into())])),
            ..ObjectMeta::default()
        };
        let none = BTreeMap::new();
        assert_eq!(metadata_patch(&meta, &updates(&[("keep", Some("1")), ("absent", None)]), &none), None);
        let patch = metadata_patch(&meta, &updates(&[("keep", Some("2")), ("drop", None)]), &none).unwrap();
        assert_eq!(patch, json!({"metadata": {"resourceVersion": "7", "labels": {"keep": "2", "drop": null}}}));
        let patch = metadata_patch(&meta, &none, &updates(&[("note", Some("hi"))])).unwrap();
        assert_eq!(patch, json!({"metadata": {"resourceVersion": "7", "annotations": {"note": "hi"}}}));
    }

    #[test]
    fn an_attachment_is_the_decorator_s_that_made_it() {
        let meta = |annotations: Option<BTreeMap<String, String>>| ObjectMeta { annotations, ..ObjectMeta::default() };
        let by = |name: &str| Some(BTreeMap::from([(DECORATOR_ANNOTATION.to_owned(), name.to_owned())]));
        assert!(made_by(&meta(by("deco")), "deco"));
        assert!(!made_by(&meta(by("other")), "deco"));
        assert!(!made_by(&meta(None), "deco"));
    }
}
