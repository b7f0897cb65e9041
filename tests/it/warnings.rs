//! The API server's warnings (here, a deprecated API version) printed on stderr as kubectl prints them,
//! once each, by every command, and never on stdout.

use crate::support::{Namespace, apply, established, eventually, kubectl, samplectl};
use serde_json::json;

const GROUP: &str = "warn.samplectl.example.com";
const WARNING: &str = "warn.samplectl.example.com/v1beta1 Widget is deprecated; use v1";

/// Deletes the test's CRD however the test ends.
struct DeleteCrd;

impl Drop for DeleteCrd {
    fn drop(&mut self) {
        let _ = kubectl(&["delete", "crd", &format!("widgets.{GROUP}"), "--wait=false"]);
    }
}

#[test]
fn a_deprecated_version_is_warned_about_once_as_kubectl_does() {
    let _cluster = crate::support::shared();
    let schema = json!({"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}});
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{GROUP}")},
        "spec": {"group": GROUP, "scope": "Namespaced",
                 "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
                 "versions": [
                    {"name": "v1beta1", "served": true, "storage": false, "deprecated": true,
                     "deprecationWarning": WARNING, "schema": schema},
                    {"name": "v1", "served": true, "storage": true, "schema": schema}]}
    });
    apply("default", &crd);
    let _delete = DeleteCrd;
    established(&[&format!("crd/widgets.{GROUP}")]);
    let ns = Namespace::new("warnings");
    for name in ["w1", "w2", "w3"] {
        apply(&ns.0, &json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Widget", "metadata": {"name": name}}));
    }
    let line = format!("Warning: {WARNING}");
    let gvr = format!("{GROUP}/v1beta1/widgets");

    // kubectl, the witness, prints the same line.
    let theirs = eventually(std::time::Duration::from_secs(20), "kubectl sees the deprecated version", || {
        let run = kubectl(&["get", &format!("widgets.v1beta1.{GROUP}"), "-n", &ns.0, "--chunk-size=1"]);
        if run.code == 0 && run.stderr.contains(&line) { Ok(run) } else { Err(format!("{run:#?}")) }
    });
    assert_eq!(theirs.stderr.lines().filter(|l| *l == line).count(), 1, "{theirs:#?}");

    // Three pages, three responses with the header: one line, on stderr only. By --gvr and by name.
    for args in [
        vec!["list", "--gvr", &gvr, "-n", &ns.0, "--chunk-size", "1"],
        vec!["list", "widgets.v1beta1.warn.samplectl.example.com", "-n", &ns.0, "-o", "json"],
        vec!["list", "--gvr", &gvr, "w1", "w2", "-n", &ns.0],
        vec!["watch", "--gvr", &gvr, "-n", &ns.0, "--timeout", "2s"],
        vec!["reconcile", "--gvr", &gvr, "-n", &ns.0, "--once"],
    ] {
        let run = samplectl(&args).success();
        assert_eq!(run.stderr.lines().filter(|l| *l == line).count(), 1, "{args:?}: {run:#?}");
        assert!(!run.stdout.contains("Warning"), "{args:?}: {run:#?}");
    }
    // The served, undeprecated version brings no warning.
    let run = samplectl(&["list", "--gvr", &format!("{GROUP}/v1/widgets"), "-n", &ns.0]).success();
    assert!(!run.stderr.contains("Warning"), "{run:#?}");
}
