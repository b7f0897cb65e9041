//! kro's instance state machine, path by path: each path of conformance/data/kro-states.yaml run under
//! `samplectl reconcile --from-cluster --watch`, and the instance's `state` and conditions (type,
//! status, reason, message, in order) held to what kro v0.9.4's own controller wrote on the same path
//! (conformance/data/kro-states.expected.json, recorded by `scripts/conformance states --record`, which
//! also checks the recording against a running kro), or, where the file lists a difference with its
//! reason, to samplectl's own outcome listed there. Each outcome must be reached and then held.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Background, Namespace, apply, eventually, kubectl, kubectl_json};

const GROUP: &str = "states.samplectl.test";
const SOON: Duration = Duration::from_secs(60);
/// How long an outcome reached must stay the same: longer than the engine's retry of a failed write.
const HELD: Duration = Duration::from_secs(4);

fn data(file: &str) -> String {
    let path = format!("{}/conformance/data/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn paths() -> Vec<Value> {
    let file: Value = serde_yaml::from_str(&data("kro-states.yaml")).expect("kro-states.yaml");
    file["paths"].as_array().expect("paths").clone()
}

/// What samplectl must write on a path: kro's outcome, or samplectl's own where a difference is listed.
fn expected(name: &str) -> Value {
    let file: Value = serde_json::from_str(&data("kro-states.expected.json")).expect("kro-states.expected.json");
    match file["differences"].get(name) {
        Some(listed) => listed["samplectl"].clone(),
        None => file["kro"][name].clone(),
    }
}

/// The state and the conditions, with the namespace written as `<namespace>` and the ApplySet id as
/// `applyset-<id>-v1`, as the harness writes them.
fn outcome(object: Option<&Value>, namespace: &str) -> Value {
    let Some(object) = object else { return json!({"state": null, "conditions": []}) };
    let words = regex::Regex::new(&format!(r"{}\b", regex::escape(namespace))).unwrap();
    // An instance's ApplySet id is a hash of its namespace among others.
    let applyset = regex::Regex::new(r"applyset-[A-Za-z0-9_-]{43}-v1").unwrap();
    let conditions: Vec<Value> = object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
            let message = applyset.replace_all(&s("message"), "applyset-<id>-v1").into_owned();
            json!([s("type"), s("status"), s("reason"), words.replace_all(&message, "<namespace>")])
        })
        .collect();
    json!({"state": object["status"]["state"], "conditions": conditions})
}

/// The resource serving `kind`, as the CRD the engine made names it.
fn served(kind: &str) -> Result<String, String> {
    let crds = kubectl_json(&["get", "crd"]);
    crds["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["spec"]["group"] == GROUP && c["spec"]["names"]["kind"] == kind)
        .and_then(|c| c["metadata"]["name"].as_str().map(str::to_owned))
        .ok_or_else(|| format!("no CRD for {kind} yet"))
}

fn read(resource: &str, namespace: &str) -> Value {
    let run = kubectl(&["get", resource, "subject", "-n", namespace, "-o", "json", "--ignore-not-found"]).success();
    let object: Option<Value> = (!run.stdout.trim().is_empty()).then(|| serde_json::from_str(&run.stdout).unwrap());
    outcome(object.as_ref(), namespace)
}

/// The instance reaches `want` and holds it.
fn reaches(resource: &str, namespace: &str, want: &Value, run: &Background, phase: &str) {
    let show = |v: &Value| serde_json::to_string_pretty(v).unwrap();
    eventually(SOON, &format!("{phase}: kro's outcome"), || match read(resource, namespace) {
        got if got == *want => Ok(()),
        got => Err(format!("want {}\ngot {}\n{}", show(want), show(&got), run.stderr())),
    });
    let since = std::time::Instant::now();
    while since.elapsed() < HELD {
        let got = read(resource, namespace);
        assert_eq!(got, *want, "{phase}: the outcome reached was not held\n{}", run.stderr());
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn run_path(name: &str) {
    let _cluster = crate::support::shared();
    crate::support::samplectl(&["install-crd", "--kro"]).success();
    let path = paths().into_iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("no path {name}"));
    let want = expected(name);
    assert!(want.is_object(), "nothing recorded for {name}: run scripts/conformance states --record");
    let ns = Namespace::new(&format!("states-{name}"));
    let kind = path["kind"].as_str().unwrap();
    let rgd_name = format!("states-{name}");
    let rgd = json!({
        "apiVersion": "kro.run/v1alpha1", "kind": "ResourceGraphDefinition",
        "metadata": {"name": rgd_name, "labels": {"samplectl-test": ns.0}},
        "spec": {"schema": {"apiVersion": "v1alpha1", "kind": kind, "group": GROUP,
                            "spec": path.get("spec").cloned().unwrap_or(json!({}))},
                 "resources": path["resources"]},
    });
    apply("default", &rgd);
    let label = format!("samplectl-test={}", ns.0);
    let run = Background::start(&["reconcile", "--from-cluster", "--target-label-selector", &label, "--watch"]);
    let resource = eventually(SOON, "the instance CRD", || served(kind));
    crate::support::established(&[&format!("crd/{resource}")]);
    for object in path["before"].as_array().into_iter().flatten() {
        apply(&ns.0, object);
    }
    let given = &path["instance"];
    let mut instance = json!({"apiVersion": format!("{GROUP}/v1alpha1"), "kind": kind,
                              "metadata": {"name": "subject"}, "spec": given.get("spec").cloned().unwrap_or(json!({}))});
    if let Some(annotations) = given.get("annotations") {
        instance["metadata"]["annotations"] = annotations.clone();
    }
    eventually(SOON, "the instance created", || match crate::support::try_apply(&ns.0, &instance) {
        done if done.code == 0 => Ok(()),
        done => Err(done.stderr),
    });
    reaches(&resource, &ns.0, &want["settled"], &run, "settled");
    if let Some(then) = path.get("then") {
        let target = match then["delete"]["kind"].as_str() {
            Some("instance") => resource.clone(),
            other => other.unwrap().to_owned(),
        };
        kubectl(&["delete", &target, then["delete"]["name"].as_str().unwrap(), "-n", &ns.0, "--wait=false"]).success();
        reaches(&resource, &ns.0, &want["then"], &run, "then");
    }
    drop(run);
    let unfinalized = r#"{"metadata":{"finalizers":null}}"#;
    for what in ["configmaps", resource.as_str()] {
        let listed = kubectl(&["get", what, "-n", &ns.0, "-o", "name"]).success().stdout;
        for object in listed.split_whitespace() {
            let _ = kubectl(&["patch", object, "-n", &ns.0, "--type=merge", "-p", unfinalized]);
        }
    }
    kubectl(&["delete", "rgd", &rgd_name, "--wait=false", "--ignore-not-found"]).success();
    let _ = kubectl(&["patch", "rgd", &rgd_name, "--type=merge", "-p", unfinalized]);
}

macro_rules! paths {
    ($($test:ident => $name:literal),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                run_path($name);
            }
        )*

        /// A path added to the file without a test here would go unchecked.
        #[test]
        fn every_path_has_its_test() {
            let named: Vec<String> = paths().iter().map(|p| p["name"].as_str().unwrap().to_owned()).collect();
            assert_eq!(named, vec![$($name),*]);
        }
    };
}

paths! {
    every_child_ready_is_active => "active",
    a_readiness_never_met_is_in_progress => "readiness-never-met",
    data_not_there_yet_is_in_progress => "data-pending",
    a_child_refused_for_good_is_error => "refused-for-good",
    a_child_refused_for_now_is_error => "refused-for-now",
    a_missing_external_reference_is_in_progress => "external-missing",
    a_cel_error_at_run_time_is_error => "cel-error",
    a_child_another_applyset_holds_is_error => "held-by-another",
    a_child_no_applyset_holds_is_not_taken => "taken-unlabelled",
    a_child_being_deleted_is_in_progress => "child-terminating",
    a_deletion_a_finalizer_blocks_is_deleting => "deletion-blocked",
    a_suspended_instance_is_as_kro_says => "suspended",
}
