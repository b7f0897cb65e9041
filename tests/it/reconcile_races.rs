//! Reconcile when others act at the same time: a second controller without leader election, users editing
//! the ConfigMap underneath it, and Samples whose testString is not a string.

use std::time::Duration;

use crate::support::{Background, Namespace, all_ready, apply, eventually, kubectl, kubectl_json, sample, samplectl};
use serde_json::json;

fn actions(log: &str) -> usize {
    log.lines().filter(|l| l.contains(": configmap ") || l.contains(": status ")).count()
}

#[test]
fn two_controllers_without_election_agree_and_settle() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    let ns = Namespace::new("two-controllers");
    let poll = Background::start(&["reconcile", "-n", &ns.0]);
    let watch = Background::start(&["reconcile", "-n", &ns.0, "--watch"]);
    for i in 0..20 {
        apply(&ns.0, &sample(&format!("s{i:02}"), &format!("first {i}")));
    }
    for i in (0..20).step_by(3) {
        apply(&ns.0, &sample(&format!("s{i:02}"), &format!("second {i}")));
    }
    eventually(Duration::from_secs(60), "all 20 Ready", || all_ready(&ns.0, 20));

    // Exactly one ConfigMap per Sample, holding the current value.
    let cms = kubectl_json(&["get", "configmaps", "-n", &ns.0, "-l", "app.kubernetes.io/managed-by=samplectl"]);
    let items = cms["items"].as_array().unwrap();
    assert_eq!(items.len(), 20);
    for cm in items {
        let i: usize = cm["metadata"]["name"].as_str().unwrap()[1..].parse().unwrap();
        let want = if i.is_multiple_of(3) { format!("second {i}") } else { format!("first {i}") };
        assert_eq!(cm["data"]["testString"], want.as_str());
        assert_eq!(cm["metadata"]["ownerReferences"].as_array().unwrap().len(), 1);
    }
    // No flapping: once converged, neither writes anything more.
    std::thread::sleep(Duration::from_secs(2));
    let (poll_before, watch_before) = (actions(&poll.stderr()), actions(&watch.stderr()));
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(actions(&poll.stderr()), poll_before, "the poll controller kept writing:\n{}", poll.stderr());
    assert_eq!(actions(&watch.stderr()), watch_before, "the watch controller kept writing:\n{}", watch.stderr());
}

#[test]
fn user_edits_to_the_configmap_are_undone_but_their_own_keys_stay() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    let ns = Namespace::new("user-edits");
    let _controller = Background::start(&["reconcile", "-n", &ns.0, "--watch"]);
    apply(&ns.0, &sample("s", "the value"));
    eventually(Duration::from_secs(20), "Ready", || all_ready(&ns.0, 1));
    // Many quick edits by hand, racing the controller: each changes samplectl's key and adds one of the
    // user's own.
    for i in 0..30 {
        let patch = json!({"data": {"testString": format!("edit {i}"), format!("note-{i}"): "mine"}}).to_string();
        kubectl(&["patch", "configmap", "s", "-n", &ns.0, "--type=merge", "-p", &patch]).success();
    }
    eventually(Duration::from_secs(20), "the value restored", || {
        let cm = kubectl_json(&["get", "configmap", "s", "-n", &ns.0]);
        if cm["data"]["testString"] == "the value" { Ok(cm) } else { Err(cm["data"].to_string()) }
    });
    std::thread::sleep(Duration::from_secs(1));
    let cm = kubectl_json(&["get", "configmap", "s", "-n", &ns.0]);
    assert_eq!(cm["data"]["testString"], "the value");
    for i in 0..30 {
        assert_eq!(cm["data"][format!("note-{i}")], "mine", "a key the user owns is never removed");
    }
}

/// A user changes a Sample many times in quick succession while each driver reconciles it, so samplectl
/// keeps computing its writes from copies that are already stale when they land. It still ends with the
/// last value and the last generation, and never fails a write along the way: server-side apply sends
/// no resourceVersion, so a concurrent edit cannot make it a 409 Conflict.
#[test]
fn rapid_edits_to_a_sample_end_with_its_last_value() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    let runs: Vec<(Namespace, Background)> = [&[][..], &["--watch"][..]]
        .into_iter()
        .map(|driver| {
            let ns = Namespace::new("sample-edits");
            let mut args = vec!["reconcile", "-n", &ns.0];
            args.extend_from_slice(driver);
            let controller = Background::start(&args);
            (ns, controller)
        })
        .collect();
    for (ns, _) in &runs {
        apply(&ns.0, &sample("s", "edit 0"));
    }
    for i in 1..30 {
        for (ns, _) in &runs {
            let patch = json!({"testString": format!("edit {i}")}).to_string();
            kubectl(&["patch", "sample", "s", "-n", &ns.0, "--type=merge", "-p", &patch]).success();
        }
    }
    for (ns, controller) in &runs {
        eventually(Duration::from_secs(20), "the last edit reconciled", || {
            let s = kubectl_json(&["get", "sample", "s", "-n", &ns.0]);
            let cm = kubectl_json(&["get", "configmap", "s", "-n", &ns.0]);
            let current = s["status"]["observedGeneration"] == s["metadata"]["generation"]
                && s["status"]["conditions"][0]["status"] == "True";
            if current && cm["data"]["testString"] == "edit 29" {
                Ok(())
            } else {
                Err(format!("generation {} status {} data {}", s["metadata"]["generation"], s["status"], cm["data"]))
            }
        });
        let log = controller.stderr();
        assert!(!log.contains("WARN"), "a write failed while the Sample was being edited:\n{log}");
    }
}
