//! Whatever a Sample contains, reconcile writes only that Sample's own ConfigMap, in the Sample's own
//! namespace, with nothing but testString; and a Sample that is being deleted is left to garbage
//! collection.

use crate::support::{Namespace, create, kubectl, kubectl_json, samplectl};
use serde_json::{Value, json};

#[test]
fn a_sample_cannot_steer_writes_elsewhere() {
    // Alone: it checks that exactly one managed ConfigMap appeared anywhere in the cluster.
    let _cluster = crate::support::exclusive();
    samplectl(&["install-crd"]).success();
    let ns = Namespace::new("steer");
    let labels: serde_json::Map<String, Value> =
        (0..40).map(|i| (format!("example.com/label-{i}"), Value::from("v".repeat(63)))).collect();
    let sneaky = "{\"metadata\":{\"namespace\":\"kube-system\",\"name\":\"other\"}}\n---\nkind: Secret\n";
    create(
        &ns.0,
        &json!({
            "apiVersion": "example.com/v1alpha1", "kind": "Sample",
            "metadata": {"name": "odd.name-1", "labels": labels, "annotations": {"big": "x".repeat(100_000)}},
            "testString": sneaky,
            // Fields the schema does not know are pruned by the server; they must not matter either way.
            "namespace": "kube-system", "data": {"injected": "yes"}, "configMap": {"name": "other"},
        }),
    );
    let before = kubectl_json(&["get", "configmaps", "-A", "-l", "app.kubernetes.io/managed-by=samplectl"]);
    let before: Vec<Value> = before["items"].as_array().unwrap().iter().map(|c| c["metadata"]["uid"].clone()).collect();
    samplectl(&["reconcile", "-n", &ns.0, "--once"]).success();

    let cm = kubectl_json(&["get", "configmap", "odd.name-1", "-n", &ns.0]);
    assert_eq!(cm["data"], json!({"testString": sneaky}), "the text is data, nothing more");
    assert_eq!(
        cm["metadata"]["labels"],
        json!({"app.kubernetes.io/managed-by": "samplectl", "samples.example.com/name": "odd.name-1"})
    );
    assert!(cm["metadata"]["annotations"].is_null(), "nothing copied from the Sample's metadata");
    let after = kubectl_json(&["get", "configmaps", "-A", "-l", "app.kubernetes.io/managed-by=samplectl"]);
    let new: Vec<&Value> =
        after["items"].as_array().unwrap().iter().filter(|c| !before.contains(&c["metadata"]["uid"])).collect();
    assert_eq!(new.len(), 1, "exactly one new ConfigMap anywhere in the cluster: {new:?}");
    assert_eq!(new[0]["metadata"]["namespace"], ns.0.as_str());
    let secrets = kubectl(&["get", "secrets", "-n", &ns.0, "-o", "name"]).success();
    assert_eq!(secrets.stdout, "");
}

#[test]
fn a_sample_being_deleted_is_left_to_garbage_collection() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    let ns = Namespace::new("deleting");
    create(
        &ns.0,
        &json!({"apiVersion": "example.com/v1alpha1", "kind": "Sample",
               "metadata": {"name": "going", "finalizers": ["example.com/hold"]}, "testString": "x"}),
    );
    kubectl(&["delete", "sample", "going", "-n", &ns.0, "--wait=false"]).success();
    let run = samplectl(&["reconcile", "-n", &ns.0, "--once"]).success();
    assert!(run.stderr.contains("(0 writes)"), "{run:#?}");
    let cm = kubectl(&["get", "configmap", "going", "-n", &ns.0, "--ignore-not-found", "-o", "name"]).success();
    assert_eq!(cm.stdout, "", "no ConfigMap for a Sample on its way out");
    let sample = kubectl_json(&["get", "sample", "going", "-n", &ns.0]);
    assert!(sample["status"].is_null(), "no status written: {}", sample["status"]);
    kubectl(&["patch", "sample", "going", "-n", &ns.0, "--type=merge", "-p", r#"{"metadata":{"finalizers":null}}"#])
        .success();
}
