//! `samplectl reconcile` with many Samples, one of which can never succeed, and the API server's own view
//! of what a converged cluster costs. A file of its own so that no other test's requests blur the API
//! server's counts.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::{Background, Namespace, eventually, kubectl, kubectl_json, samplectl};

const SAMPLES: usize = 500;

/// A ValidatingAdmissionPolicy that refuses ConfigMaps named `poison` in namespaces labelled for it: the
/// Sample `poison` then fails on every attempt, as a Sample can in real life.
const POISON_POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: samplectl-test-poison}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE", "UPDATE"], resources: ["configmaps"]}
  validations:
  - {expression: "object.metadata.name != 'poison'", message: "no poison here"}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: samplectl-test-poison}
spec:
  policyName: samplectl-test-poison
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {samplectl-test: poison}
"#;

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

fn samples_manifest(n: usize) -> String {
    let mut docs: Vec<String> = (0..n)
        .map(|i| format!("apiVersion: example.com/v1alpha1\nkind: Sample\nmetadata:\n  name: s-{i:04}\ntestString: \"value {i}\"\n"))
        .collect();
    docs.push("apiVersion: example.com/v1alpha1\nkind: Sample\nmetadata:\n  name: poison\ntestString: \"x\"\n".into());
    docs.join("---\n")
}

fn ready_counts(ns: &str) -> BTreeMap<String, usize> {
    let list = kubectl_json(&["get", "samples", "-n", ns]);
    let mut counts = BTreeMap::new();
    for sample in list["items"].as_array().unwrap() {
        let condition = sample["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
            .map(|c| format!("{}/{}", c["status"].as_str().unwrap_or("?"), c["reason"].as_str().unwrap_or("?")))
            .unwrap_or_else(|| "none".into());
        *counts.entry(condition).or_default() += 1;
    }
    counts
}

/// Server-side applies to Samples and ConfigMaps as the API server counts them. samplectl writes them
/// only by apply; the counters cannot tell clients apart, and the garbage collector and namespace
/// controller are still deleting earlier tests' objects (DELETE) while this one measures.
fn server_writes() -> u64 {
    crate::support::apiserver_metric("apiserver_request_total", |series| {
        (series.contains(r#"resource="configmaps""#) || series.contains(r#"resource="samples""#))
            && series.contains(r#"verb="APPLY""#)
    }) as u64
}

#[test]
fn many_samples_converge_past_a_failing_one_and_then_cost_no_writes() {
    let _cluster = crate::support::exclusive();
    samplectl(&["install-crd"]).success();
    let dir = tempfile::tempdir().unwrap();
    kubectl(&["apply", "-f", &write(dir.path(), "policy.yaml", POISON_POLICY)]).success();
    let manifest = write(dir.path(), "samples.yaml", &samples_manifest(SAMPLES));

    for driver in ["poll", "watch"] {
        let ns = Namespace::new(&format!("rc-scale-{driver}"));
        kubectl(&["label", "namespace", &ns.0, "samplectl-test=poison"]).success();
        eventually(Duration::from_secs(30), "the admission policy in force", || {
            let run = kubectl(&["create", "configmap", "poison", "-n", &ns.0]);
            if run.code == 0 {
                kubectl(&["delete", "configmap", "poison", "-n", &ns.0]).success();
            }
            if run.stderr.contains("no poison here") { Ok(()) } else { Err(run.stderr) }
        });
        kubectl(&["create", "-n", &ns.0, "-f", &manifest, "-o", "name"]).success();

        let mut args = vec!["reconcile", "-n", &ns.0];
        if driver == "watch" {
            args.push("--watch");
        }
        let controller = Background::start(&args);
        let counts = eventually(Duration::from_secs(240), &format!("{driver}: {SAMPLES} Samples Ready"), || {
            let counts = ready_counts(&ns.0);
            let ready = counts.get("True/ConfigMapReady").copied().unwrap_or(0);
            let poison = counts.get("False/ApplyFailed").copied().unwrap_or(0);
            if ready == SAMPLES && poison == 1 { Ok(counts) } else { Err(format!("{counts:?}")) }
        });
        assert_eq!(counts.len(), 2, "{counts:?}");

        // Converged (but for the poison Sample, which backs off): the server sees no applies to Samples or
        // ConfigMaps beyond the poison Sample's retries.
        std::thread::sleep(Duration::from_secs(2));
        let before = server_writes();
        std::thread::sleep(Duration::from_secs(5));
        let writes = server_writes() - before;
        let (code, log) = controller.stop("TERM", Duration::from_secs(10));
        assert_eq!(code, Some(0), "{log}");
        let retries = log.lines().filter(|l| l.contains("no poison here")).count();
        assert!(writes <= 3, "{driver}: {writes} writes in 5 s while converged; the log:\n{}", tail(&log));
        assert!(retries < 12, "{driver}: the failing Sample backs off, {retries} attempts:\n{}", tail(&log));
    }
    kubectl(&["delete", "-f", &write(dir.path(), "policy.yaml", POISON_POLICY)]).success();
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
