//! The objects tests make and look at: Samples, their readiness, kubectl tables, and log tails.

use serde_json::{Value, json};

use super::process::{kubectl, kubectl_json, samplectl};

/// The Sample resource, for tests that talk to the API server through kube directly.
pub fn sample_resource() -> kube::discovery::ApiResource {
    kube::discovery::ApiResource {
        group: "example.com".into(),
        version: "v1alpha1".into(),
        api_version: "example.com/v1alpha1".into(),
        kind: "Sample".into(),
        plural: "samples".into(),
    }
}

/// `samplectl install-crd`, which every test of Samples starts with (it is idempotent).
pub fn install_crd() {
    samplectl(&["install-crd"]).success();
}

/// Waits up to 30 s for each CRD (`crd/<name>`) to be Established. Not `kubectl wait`: a CRD is created
/// with `status.conditions` null, and kubectl wait fails at once, rather than waiting, if its first read
/// comes before the API server has set them (`.status.conditions accessor error: <nil> is of the type
/// <nil>`), as a loaded test run's sometimes does.
pub fn established(crds: &[&str]) {
    let jsonpath = r#"-o=jsonpath={.status.conditions[?(@.type=="Established")].status}"#;
    for crd in crds {
        super::eventually(std::time::Duration::from_secs(30), &format!("{crd} Established"), || {
            let run = kubectl(&["get", crd, jsonpath]);
            match run.stdout.trim() {
                "True" => Ok(()),
                other => Err(format!("Established is {other:?}; {}", run.stderr.trim())),
            }
        });
    }
}

/// A Sample manifest.
pub fn sample(name: &str, test_string: &str) -> Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "Sample", "metadata": {"name": name}, "testString": test_string})
}

fn through_file(verb: &[&str], ns: &str, doc: &Value) -> super::Run {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("object.json");
    std::fs::write(&file, doc.to_string()).unwrap();
    let mut args = verb.to_vec();
    args.extend(["-n", ns, "-f", file.to_str().unwrap()]);
    kubectl(&args)
}

/// `kubectl apply` of any manifest (a `List` for several), which must succeed.
pub fn apply(ns: &str, doc: &Value) {
    through_file(&["apply"], ns, doc).success();
}

/// `kubectl apply` that may fail (while the API server restarts), as it ran.
pub fn try_apply(ns: &str, doc: &Value) -> super::Run {
    through_file(&["apply"], ns, doc)
}

/// `kubectl create` without client-side validation, so unknown fields reach the server (which prunes
/// them), and a `List` of many objects is one command.
pub fn create(ns: &str, doc: &Value) {
    through_file(&["create", "--validate=false"], ns, doc).success();
}

pub fn apply_sample(ns: &str, name: &str, test_string: &str) {
    apply(ns, &sample(name, test_string));
}

/// The Sample's Ready condition says True for its current generation.
pub fn sample_ready(ns: &str, name: &str) -> bool {
    let run = kubectl(&["get", "sample", name, "-n", ns, "-o", "json"]);
    run.code == 0 && is_ready(&serde_json::from_str(&run.stdout).unwrap_or_default())
}

fn is_ready(sample: &Value) -> bool {
    let ready = sample["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "Ready");
    sample["status"]["observedGeneration"] == sample["metadata"]["generation"]
        && ready.is_some_and(|c| c["status"] == "True")
}

/// Exactly `n` Samples in `ns`, every one Ready for its generation.
pub fn all_ready(ns: &str, n: usize) -> Result<(), String> {
    let list = kubectl_json(&["get", "samples", "-n", ns]);
    let samples = list["items"].as_array().unwrap();
    let ready = samples.iter().filter(|s| is_ready(s)).count();
    if samples.len() == n && ready == n {
        Ok(())
    } else {
        Err(format!("{ready} of {} Samples Ready; want {n}", samples.len()))
    }
}

/// [`all_ready`], and exactly one managed ConfigMap per Sample, holding `expected(name)`.
pub fn converged(ns: &str, expected: impl Fn(&str) -> String, n: usize) -> Result<(), String> {
    all_ready(ns, n)?;
    let cms = kubectl_json(&["get", "configmaps", "-n", ns, "-l", "app.kubernetes.io/managed-by=samplectl"]);
    let cms = cms["items"].as_array().unwrap();
    let right = cms
        .iter()
        .filter(|c| c["data"]["testString"] == expected(c["metadata"]["name"].as_str().unwrap()).as_str())
        .count();
    if cms.len() == n && right == n {
        Ok(())
    } else {
        Err(format!("{} ConfigMaps, {right} with the current value", cms.len()))
    }
}

/// The columns of a kubectl-style table: header cells and each row's cells, split where two or more
/// spaces separate them (single spaces occur inside headers such as TEST STRING).
pub fn table(text: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let split = |line: &str| -> Vec<String> {
        line.split("  ").map(str::trim).filter(|c| !c.is_empty()).map(str::to_owned).collect()
    };
    let mut lines = text.lines();
    let header = lines.next().map(split).unwrap_or_default();
    (header, lines.map(split).collect())
}

/// A `samplectl watch -o json` line as (event type, object name).
pub fn event(line: &str) -> (String, String) {
    let event: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    (event["type"].as_str().unwrap().to_owned(), event["object"]["metadata"]["name"].as_str().unwrap().to_owned())
}

/// What [`event`] returns, for comparing with it.
pub fn pair(kind: &str, name: &str) -> (String, String) {
    (kind.to_owned(), name.to_owned())
}

/// The last `lines` lines of a log, for a failure message.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
