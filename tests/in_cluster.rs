//! Running the controller as it runs inside a cluster: the manifests, their RBAC (with the
//! ServiceAccount's own token), leader election between replicas, and the health and metrics endpoints.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::{
    Background, Namespace, eventually, free_port, http_get, kubectl, kubectl_json, samplectl, samplectl_bare,
};

const SA: &str = "system:serviceaccount:samplectl-system:samplectl";

fn apply_sample(ns: &str, name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.json");
    let doc =
        json!({"apiVersion": "example.com/v1alpha1", "kind": "Sample", "metadata": {"name": name}, "testString": name});
    std::fs::write(&file, doc.to_string()).unwrap();
    kubectl(&["apply", "-n", ns, "-f", file.to_str().unwrap()]).success();
}

fn ready(ns: &str, name: &str) -> bool {
    let run =
        kubectl(&["get", "sample", name, "-n", ns, r#"-o=jsonpath={.status.conditions[?(@.type=="Ready")].status}"#]);
    run.code == 0 && run.stdout == "True"
}

fn wait_ready(ns: &str, name: &str, within: Duration) {
    eventually(within, &format!("{ns}/{name} Ready"), || if ready(ns, name) { Ok(()) } else { Err(String::new()) });
}

/// The namespace, ServiceAccount and RBAC from manifests/, applied for real (the Deployment needs an image
/// this machine cannot build).
fn install_rbac() {
    samplectl(&["install-crd"]).success();
    for file in ["namespace", "serviceaccount", "rbac"] {
        kubectl(&["apply", "-f", &format!("manifests/controller/{file}.yaml")]).success();
    }
}

#[test]
fn every_manifest_passes_server_side_dry_run() {
    install_rbac();
    let run = kubectl(&["apply", "-k", "manifests/", "--dry-run=server"]).success();
    for object in [
        "customresourcedefinition.apiextensions.k8s.io/samples.example.com",
        "serviceaccount/samplectl",
        "clusterrole.rbac.authorization.k8s.io/samplectl-controller",
        "role.rbac.authorization.k8s.io/samplectl-leader-election",
        "deployment.apps/samplectl",
    ] {
        assert!(run.stdout.contains(object), "{object} missing from:\n{}", run.stdout);
    }
}

fn can_i(verb: &str, resource: &str, ns: &str) -> bool {
    let (resource, sub) = resource.split_once('/').map_or((resource, None), |(r, s)| (r, Some(s)));
    let mut args = vec!["auth", "can-i", verb, resource, "-n", ns, "--as", SA];
    let sub_flag = sub.map(|s| format!("--subresource={s}"));
    args.extend(sub_flag.as_deref());
    let run = kubectl(&args);
    run.stdout.trim() == "yes"
}

#[test]
fn rbac_is_enough_for_reconcile_and_no_more() {
    install_rbac();
    let ns = Namespace::new("rbac");
    // The ServiceAccount's own token, from the TokenRequest API.
    let token = kubectl(&["create", "token", "samplectl", "-n", "samplectl-system"]).success().stdout.trim().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = support::token_kubeconfig(dir.path(), "sa", &token);
    let as_sa = |args: &[&str]| {
        let mut all = vec!["--kubeconfig", kubeconfig.to_str().unwrap()];
        all.extend_from_slice(args);
        samplectl_bare(&all)
    };

    apply_sample(&ns.0, "one");
    kubectl(&["create", "configmap", "two", "-n", &ns.0, "--from-literal=someone=else"]).success();
    apply_sample(&ns.0, "two");
    // Both drivers, and leader election, with nothing but the ServiceAccount's permissions.
    let run = as_sa(&["reconcile", "-n", &ns.0, "--once"]);
    assert_eq!(run.code, 1, "one Sample has a conflict, nothing else fails: {run:#?}");
    assert!(!run.stderr.contains("Forbidden"), "{run:#?}");
    assert!(ready(&ns.0, "one"));
    kubectl(&["delete", "configmap", "one", "-n", &ns.0]).success();
    let run = as_sa(&[
        "reconcile",
        "-n",
        &ns.0,
        "--watch",
        "--once",
        "--leader-elect",
        "--leader-election-namespace",
        "samplectl-system",
    ]);
    assert!(!run.stderr.contains("Forbidden"), "{run:#?}");
    assert!(run.stderr.contains("leading as"), "{run:#?}");
    assert!(run.stderr.contains("configmap created"), "{run:#?}");
    let events = kubectl_json(&["get", "events.events.k8s.io", "-n", &ns.0]);
    assert!(events["items"].as_array().unwrap().iter().any(|e| e["reason"] == "ConfigMapConflict"));

    // What it needs, it has; what it does not need, the API server refuses.
    for (verb, resource) in [
        ("list", "samples.example.com"),
        ("watch", "samples.example.com"),
        ("patch", "samples.example.com/status"),
        ("create", "configmaps"),
        ("patch", "configmaps"),
        ("create", "events.events.k8s.io"),
    ] {
        assert!(can_i(verb, resource, &ns.0), "needs {verb} {resource}");
    }
    assert!(can_i("update", "leases.coordination.k8s.io", "samplectl-system"));
    for (verb, resource, where_) in [
        ("get", "secrets", ns.0.as_str()),
        ("delete", "samples.example.com", &ns.0),
        ("update", "samples.example.com", &ns.0),
        ("patch", "samples.example.com", &ns.0),
        ("delete", "configmaps", &ns.0),
        ("update", "configmaps", &ns.0),
        ("create", "deployments.apps", &ns.0),
        ("patch", "customresourcedefinitions.apiextensions.k8s.io", "default"),
        ("update", "leases.coordination.k8s.io", &ns.0),
    ] {
        assert!(!can_i(verb, resource, where_), "must not {verb} {resource} in {where_}");
    }
    let run = as_sa(&["list", "secrets", "-n", &ns.0]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(run.stderr.starts_with("Error from server (Forbidden): secrets is forbidden: User \"system:serviceaccount:samplectl-system:samplectl\""), "{run:#?}");
}

fn candidate(ns: &str, identity: &str) -> Background {
    Background::start(&[
        "reconcile",
        "-n",
        ns,
        "--watch",
        "--leader-elect",
        "--leader-election-namespace",
        ns,
        "--leader-election-identity",
        identity,
        "--lease-duration",
        "6s",
        "--renew-deadline",
        "4s",
        "--retry-period",
        "1s",
    ])
}

fn logged(process: &Background, what: &str, within: Duration) -> Instant {
    eventually(
        within,
        what,
        || if process.stderr().contains(what) { Ok(Instant::now()) } else { Err(process.stderr()) },
    )
}

#[test]
fn one_leader_reconciles_and_a_standby_takes_over() {
    samplectl(&["install-crd"]).success();
    let ns = Namespace::new("leader");
    let a = candidate(&ns.0, "a");
    logged(&a, "leading as a", Duration::from_secs(20));
    let b = candidate(&ns.0, "b");
    logged(&b, "waiting for the lease", Duration::from_secs(20));
    for name in ["s1", "s2"] {
        apply_sample(&ns.0, name);
        wait_ready(&ns.0, name, Duration::from_secs(20));
    }
    std::thread::sleep(Duration::from_secs(2));
    let standby_log = b.stderr();
    assert!(
        !standby_log.contains("configmap") && !standby_log.contains("status Ready"),
        "the standby wrote:\n{standby_log}"
    );

    // The leader dies without a word: the standby takes over once the lease expires.
    a.stop("KILL", Duration::from_secs(5));
    let killed = Instant::now();
    apply_sample(&ns.0, "s3");
    let took_over = logged(&b, "leading as b", Duration::from_secs(20));
    let gap = took_over - killed;
    assert!(gap < Duration::from_secs(6 + 4), "took over after {gap:?}; lease duration 6 s");
    wait_ready(&ns.0, "s3", Duration::from_secs(20));
    let cms = kubectl_json(&["get", "configmaps", "-n", &ns.0, "-l", "app.kubernetes.io/managed-by=samplectl"]);
    let names: Vec<&str> =
        cms["items"].as_array().unwrap().iter().map(|c| c["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["s1", "s2", "s3"], "one ConfigMap per Sample");

    // The leader is stopped properly: it releases the lease and the standby takes over within seconds.
    let c = candidate(&ns.0, "c");
    logged(&c, "waiting for the lease", Duration::from_secs(20));
    let (code, log) = b.stop("TERM", Duration::from_secs(10));
    let stopped = Instant::now();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("released the lease"), "{log}");
    let took_over = logged(&c, "leading as c", Duration::from_secs(20));
    assert!(took_over - stopped < Duration::from_secs(3), "took over {:?} after the release", took_over - stopped);
    apply_sample(&ns.0, "s4");
    wait_ready(&ns.0, "s4", Duration::from_secs(20));
}

#[test]
fn a_leader_that_loses_its_lease_stops_at_once() {
    samplectl(&["install-crd"]).success();
    let ns = Namespace::new("lease-lost");
    let leader = candidate(&ns.0, "x");
    logged(&leader, "leading as x", Duration::from_secs(20));
    // Someone else takes the Lease (as a partitioned leader would find on its return).
    let now = k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
    let patch = json!({"spec": {"holderIdentity": "thief", "renewTime": now, "leaseDurationSeconds": 60}}).to_string();
    kubectl(&["patch", "lease", "samplectl-leader", "-n", &ns.0, "--type=merge", "-p", &patch]).success();
    let mut leader = leader;
    let code = eventually(Duration::from_secs(10), "the leader exits", || match leader.child.try_wait().unwrap() {
        Some(status) => Ok(status.code()),
        None => Err(leader.stderr()),
    });
    let (_, log) = leader.stop("TERM", Duration::from_secs(1));
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("lost the leader lease; stopping at once"), "{log}");
    assert!(log.contains("error: lost the leader lease; stopped reconciling"), "{log}");
}

#[test]
fn health_and_metrics_answer_and_metrics_move() {
    samplectl(&["install-crd"]).success();
    let ns = Namespace::new("probes");
    let (health, metrics) = (free_port(), free_port());
    let controller = Background::start(&[
        "reconcile",
        "-n",
        &ns.0,
        "--watch",
        "--health-addr",
        &format!("127.0.0.1:{health}"),
        "--metrics-addr",
        &format!("127.0.0.1:{metrics}"),
    ]);
    eventually(Duration::from_secs(20), "/readyz ok", || match http_get(health, "/readyz") {
        Some((200, body)) if body == "ok" => Ok(()),
        other => Err(format!("{other:?}")),
    });
    assert_eq!(http_get(health, "/healthz"), Some((200, "ok".to_owned())));

    let count = |text: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with("samplectl_reconcile_total{result=\"ready\"}"))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0.0)
    };
    let (code, before) = http_get(metrics, "/metrics").unwrap();
    assert_eq!(code, 200);
    for name in [
        "samplectl_leader 1",
        "samplectl_reconcile_duration_seconds",
        "samplectl_api_requests_total{verb=\"watch\",resource=\"samples\"}",
    ] {
        assert!(before.contains(name), "{name} missing:\n{before}");
    }
    apply_sample(&ns.0, "m");
    wait_ready(&ns.0, "m", Duration::from_secs(20));
    eventually(Duration::from_secs(10), "samplectl_reconcile_total moves", || {
        let (_, after) = http_get(metrics, "/metrics").unwrap();
        if count(&after) > count(&before) { Ok(()) } else { Err(after) }
    });
    let (_, after) = http_get(metrics, "/metrics").unwrap();
    // A new Sample's ConfigMap is created with a POST (which fails if the name is taken), not applied.
    assert!(after.contains("samplectl_api_requests_total{verb=\"create\",resource=\"configmaps\"} 1"), "{after}");
    drop(controller);
}
