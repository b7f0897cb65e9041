//! The Sample CRD installed without a schema for testString, as an older or hand-made CRD might be: a
//! Sample whose testString is not a string is reported, never written out, and unexpected fields are
//! ignored. It holds the cluster alone because it swaps the cluster-wide CRD for the duration of the test.

use crate::support::{Namespace, kubectl, kubectl_json, samplectl};
use serde_json::{Value, json};

fn apply(ns: Option<&str>, doc: Value) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("o.json");
    std::fs::write(&file, doc.to_string()).unwrap();
    let mut args = vec!["apply", "-f", file.to_str().unwrap()];
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    kubectl(&args).success();
}

/// Puts the real CRD back however the test ends.
struct RestoreCrd;

impl Drop for RestoreCrd {
    fn drop(&mut self) {
        let run = samplectl(&["install-crd"]);
        assert!(run.code == 0 && run.stdout.ends_with(" configured\n"), "restoring the CRD: {run:#?}");
    }
}

#[test]
fn a_non_string_test_string_is_reported_and_nothing_is_written_for_it() {
    let _cluster = crate::support::exclusive();
    samplectl(&["install-crd"]).success();
    let mut crd = kubectl_json(&["get", "crd", "samples.example.com"]);
    crd["spec"]["versions"][0]["schema"] =
        json!({"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}});
    for key in ["status", "metadata"] {
        crd.as_object_mut().unwrap().remove(key);
    }
    crd["metadata"] = json!({"name": "samples.example.com"});
    apply(None, crd);
    let restore = RestoreCrd;

    let ns = Namespace::new("schemaless");
    let sample = |name: &str, value: Value| {
        json!({"apiVersion": "example.com/v1alpha1", "kind": "Sample", "metadata": {"name": name},
               "testString": value, "unexpected": {"deeply": ["nested", 1]}})
    };
    apply(Some(&ns.0), sample("number", json!(42)));
    apply(Some(&ns.0), sample("list", json!(["a"])));
    apply(Some(&ns.0), sample("text", json!("fine")));
    // More than a ConfigMap may hold (1 MiB of data): the API server refuses the ConfigMap.
    // (created, not applied: kubectl apply would copy it into an annotation, which may not be that big)
    let dir = tempfile::tempdir().unwrap();
    let huge = dir.path().join("huge.json");
    std::fs::write(&huge, sample("huge", json!("x".repeat(1024 * 1024 + 1))).to_string()).unwrap();
    kubectl(&["create", "-n", &ns.0, "-f", huge.to_str().unwrap()]).success();
    let run = samplectl(&["reconcile", "-n", &ns.0, "--once"]);

    assert_eq!(run.code, 1, "three Samples cannot be Ready: {run:#?}");
    // Counted and named, with why, in the order of their names.
    let n = &ns.0;
    let summary =
        format!("error: 3 Samples are not Ready: {n}/huge (writing its ConfigMap: Error from server (Invalid): ");
    assert!(run.stderr.contains(&summary), "{run:#?}");
    assert!(run.stderr.contains(&format!("{n}/list (InvalidTestString), {n}/number (InvalidTestString)")), "{run:#?}");
    let huge = kubectl_json(&["get", "sample", "huge", "-n", &ns.0]);
    let condition = &huge["status"]["conditions"][0];
    assert_eq!((condition["status"].as_str(), condition["reason"].as_str()), (Some("False"), Some("ApplyFailed")));
    let message = condition["message"].as_str().unwrap();
    // The server's message as kubectl prints it, with no Debug dump of kube's error.
    assert!(message.starts_with("cannot write ConfigMap huge: Error from server (Invalid): "), "{message}");
    assert!(message.contains("1048576") && !message.contains("Status {"), "{message}");
    for (name, what) in [("number", "a number"), ("list", "a list")] {
        let s = kubectl_json(&["get", "sample", name, "-n", &ns.0]);
        let condition = &s["status"]["conditions"][0];
        assert_eq!(
            (condition["status"].as_str(), condition["reason"].as_str()),
            (Some("False"), Some("InvalidTestString"))
        );
        assert_eq!(condition["message"], format!("testString must be a string, not {what}").as_str());
        let cm = kubectl(&["get", "configmap", name, "-n", &ns.0, "--ignore-not-found", "-o", "name"]).success();
        assert_eq!(cm.stdout, "", "no ConfigMap for {name}");
    }
    let cm = kubectl_json(&["get", "configmap", "text", "-n", &ns.0]);
    assert_eq!(cm["data"], json!({"testString": "fine"}), "unexpected fields are not copied anywhere");
    drop(restore);
    let restored = samplectl(&["install-crd"]).success();
    assert_eq!(restored.stdout, "customresourcedefinition.apiextensions.k8s.io/samples.example.com unchanged\n");
}
