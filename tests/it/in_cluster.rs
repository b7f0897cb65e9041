//! Running the controller as it runs inside a cluster: the manifests, their RBAC (with the
//! ServiceAccount's own token), leader election between replicas, and the health and metrics endpoints.

use std::time::{Duration, Instant};

use crate::support::hang::HangingProxy;
use crate::support::{
    Background, Namespace, apply_sample, established, eventually, free_port, http_get, kubectl, kubectl_json,
    sample_ready, samplectl, samplectl_bare,
};
use serde_json::json;

const SA: &str = "system:serviceaccount:samplectl-system:samplectl";

fn wait_ready(ns: &str, name: &str, within: Duration) {
    eventually(
        within,
        &format!("{ns}/{name} Ready"),
        || if sample_ready(ns, name) { Ok(()) } else { Err(String::new()) },
    );
}

/// The namespace, ServiceAccount and RBAC from manifests/, applied for real (the Deployment needs an image
/// this machine cannot build).
pub(crate) fn install_rbac() {
    samplectl(&["install-crd"]).success();
    for file in ["namespace", "serviceaccount", "rbac", "admission-policy"] {
        kubectl(&["apply", "-f", &format!("manifests/controller/{file}.yaml")]).success();
    }
}

#[test]
fn every_manifest_passes_server_side_dry_run() {
    let _cluster = crate::support::shared();
    install_rbac();
    let run = kubectl(&["apply", "-k", "manifests/", "--dry-run=server"]).success();
    for object in [
        "customresourcedefinition.apiextensions.k8s.io/samples.example.com",
        "serviceaccount/samplectl",
        "clusterrole.rbac.authorization.k8s.io/samplectl-controller",
        "role.rbac.authorization.k8s.io/samplectl-leader-election",
        "clusterrole.rbac.authorization.k8s.io/samplectl-metrics-reader",
        "validatingadmissionpolicy.admissionregistration.k8s.io/samplectl-configmaps",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/samplectl-configmaps",
        "deployment.apps/samplectl",
        "poddisruptionbudget.policy/samplectl",
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
    let _cluster = crate::support::shared();
    install_rbac();
    let ns = Namespace::new("rbac");
    // The ServiceAccount's own token, from the TokenRequest API.
    let token = kubectl(&["create", "token", "samplectl", "-n", "samplectl-system"]).success().stdout.trim().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = crate::support::token_kubeconfig(dir.path(), "sa", &token);
    let as_sa = |args: &[&str]| {
        let mut all = vec!["--kubeconfig", kubeconfig.to_str().unwrap()];
        all.extend_from_slice(args);
        samplectl_bare(&all)
    };

    apply_sample(&ns.0, "one", "one");
    kubectl(&["create", "configmap", "two", "-n", &ns.0, "--from-literal=someone=else"]).success();
    apply_sample(&ns.0, "two", "two");
    // Both drivers, and leader election, with nothing but the ServiceAccount's permissions.
    let run = as_sa(&["reconcile", "-n", &ns.0, "--once"]);
    assert_eq!(run.code, 1, "one Sample has a conflict, nothing else fails: {run:#?}");
    assert!(!run.stderr.contains("Forbidden"), "{run:#?}");
    assert!(sample_ready(&ns.0, "one"));
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
        ("create", "tokenreviews.authentication.k8s.io"),
        ("create", "subjectaccessreviews.authorization.k8s.io"),
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

const POLICY_REFUSAL: &str = "ValidatingAdmissionPolicy 'samplectl-configmaps' with binding 'samplectl-configmaps' denied request: samplectl may only write ConfigMaps labelled app.kubernetes.io/managed-by=samplectl;";

#[test]
fn the_api_server_refuses_the_controller_any_configmap_that_is_not_its_own() {
    let _cluster = crate::support::shared();
    install_rbac();
    let ns = Namespace::new("policy");
    let token = kubectl(&["create", "token", "samplectl", "-n", "samplectl-system"]).success().stdout.trim().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = crate::support::token_kubeconfig(dir.path(), "sa", &token);
    let kubeconfig = kubeconfig.to_str().unwrap();
    let kubectl_as_sa = |args: &[&str]| {
        let mut all = vec!["--kubeconfig", kubeconfig];
        all.extend_from_slice(args);
        kubectl(&all)
    };
    // A new policy takes a moment to reach the API server's admission chain; a dry run goes through
    // admission without writing anything.
    eventually(Duration::from_secs(20), "the policy in force", || {
        let run = kubectl_as_sa(&["create", "configmap", "probe", "-n", &ns.0, "--dry-run=server"]);
        if run.code == 1 && run.stderr.contains(POLICY_REFUSAL) { Ok(()) } else { Err(format!("{run:#?}")) }
    });

    // Creating an unlabelled ConfigMap, or one labelled by someone else.
    let run = kubectl_as_sa(&["create", "configmap", "mine-now", "-n", &ns.0]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(
        run.stderr.contains(POLICY_REFUSAL) && run.stderr.contains(&format!("{}/mine-now would not be", ns.0)),
        "{run:#?}"
    );
    let other = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"helm-owned","namespace":"{}","labels":{{"app.kubernetes.io/managed-by":"Helm"}}}}}}"#,
        ns.0
    );
    let file = dir.path().join("other.json");
    std::fs::write(&file, other).unwrap();
    let run = kubectl_as_sa(&["create", "-f", file.to_str().unwrap()]);
    assert!(run.code == 1 && run.stderr.contains(POLICY_REFUSAL), "{run:#?}");

    // Taking over someone else's ConfigMap by labelling it, or patching it in any other way.
    kubectl(&["create", "configmap", "foreign", "-n", &ns.0, "--from-literal=owner=someone"]).success();
    let run = kubectl_as_sa(&["label", "configmap", "foreign", "-n", &ns.0, "app.kubernetes.io/managed-by=samplectl"]);
    assert!(run.code == 1 && run.stderr.contains(&format!("{}/foreign is not", ns.0)), "{run:#?}");
    let run = kubectl_as_sa(&[
        "patch",
        "configmap",
        "foreign",
        "-n",
        &ns.0,
        "--type=merge",
        "-p",
        r#"{"data":{"testString":"taken"}}"#,
    ]);
    assert!(run.code == 1 && run.stderr.contains(POLICY_REFUSAL), "{run:#?}");
    let data = kubectl_json(&["get", "configmap", "foreign", "-n", &ns.0]);
    assert_eq!(data["data"], json!({"owner": "someone"}), "the foreign ConfigMap is untouched");

    // The controller, with the same token, still does all of its work under the policy.
    apply_sample(&ns.0, "one", "one");
    apply_sample(&ns.0, "foreign", "foreign");
    let run = samplectl_bare(&["--kubeconfig", kubeconfig, "reconcile", "-n", &ns.0, "--once"]);
    assert_eq!(run.code, 1, "only the Sample whose name is taken is not Ready: {run:#?}");
    assert!(run.stderr.contains("ConfigMapConflict") && !run.stderr.contains("denied request"), "{run:#?}");
    assert!(sample_ready(&ns.0, "one"));
    let managed = kubectl_json(&["get", "configmap", "one", "-n", &ns.0]);
    assert_eq!(managed["metadata"]["labels"]["app.kubernetes.io/managed-by"], "samplectl");

    // And it cannot let go of its own ConfigMap either: the label stays.
    let run = kubectl_as_sa(&["label", "configmap", "one", "-n", &ns.0, "app.kubernetes.io/managed-by-"]);
    assert!(run.code == 1 && run.stderr.contains(&format!("{}/one would not be", ns.0)), "{run:#?}");
    // Others are not affected: the cluster admin (the test's own user) writes as before.
    kubectl(&["label", "configmap", "foreign", "-n", &ns.0, "team=a"]).success();
}

fn candidate_args<'a>(ns: &'a str, identity: &'a str) -> Vec<&'a str> {
    vec![
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
    ]
}

fn candidate(ns: &str, identity: &str) -> Background {
    Background::start(&candidate_args(ns, identity))
}

/// A candidate whose every request goes through `proxy`.
fn candidate_through(
    proxy: &HangingProxy,
    dir: &std::path::Path,
    ns: &str,
    identity: &str,
    more: &[&str],
) -> Background {
    let mut args = candidate_args(ns, identity);
    args.extend_from_slice(more);
    proxy.samplectl(dir, &args)
}

fn exit_code(process: &mut Background, within: Duration) -> Option<i32> {
    eventually(within, "the process exits", || match process.child.try_wait().unwrap() {
        Some(status) => Ok(status.code()),
        None => Err(process.stderr()),
    })
}

/// Someone else takes the Lease (as a partitioned leader would find on its return).
fn steal_the_lease(ns: &str) {
    let now = k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
    let patch = json!({"spec": {"holderIdentity": "thief", "renewTime": now, "leaseDurationSeconds": 60}}).to_string();
    kubectl(&["patch", "lease", "samplectl-leader", "-n", ns, "--type=merge", "-p", &patch]).success();
}

fn a_request_hangs(proxy: &HangingProxy, process: &Background) {
    eventually(Duration::from_secs(10), "a request hangs", || {
        if proxy.hung.load(std::sync::atomic::Ordering::Relaxed) > 0 { Ok(()) } else { Err(process.stderr()) }
    });
}

/// Writes other than the Lease's: what a replica did as a leader.
fn work_writes(proxy: &HangingProxy) -> Vec<(Instant, String)> {
    proxy.writes.lock().unwrap().iter().filter(|(_, line)| !line.contains("/leases")).cloned().collect()
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
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    let ns = Namespace::new("leader");
    let a = candidate(&ns.0, "a");
    logged(&a, "leading as a", Duration::from_secs(20));
    let b = candidate(&ns.0, "b");
    logged(&b, "waiting for the lease", Duration::from_secs(20));
    for name in ["s1", "s2"] {
        apply_sample(&ns.0, name, name);
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
    apply_sample(&ns.0, "s3", "s3");
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
    apply_sample(&ns.0, "s4", "s4");
    wait_ready(&ns.0, "s4", Duration::from_secs(20));
}

/// A leader whose Lease requests hang (a connection to a wedged API server; its other requests go on)
/// steps down at its renew deadline, before the standby can take the Lease, and exits 1. Every write
/// either of them sends goes through a proxy that notes when it passed: the old leader's last write is
/// earlier than the new leader's first.
#[test]
fn a_leader_whose_renewals_hang_stops_writing_before_the_standby_starts() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    let ns = Namespace::new("renew-hangs");
    let dir = tempfile::tempdir().unwrap();
    let (to_a, to_b) = (HangingProxy::start(), HangingProxy::start());
    let mut a = candidate_through(&to_a, dir.path(), &ns.0, "a", &[]);
    logged(&a, "leading as a", Duration::from_secs(20));
    let b = candidate_through(&to_b, dir.path(), &ns.0, "b", &[]);
    logged(&b, "waiting for the lease", Duration::from_secs(20));

    // Samples keep coming throughout, so that whoever leads always has something to write.
    let creating = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let creator = {
        let (ns, creating) = (ns.0.clone(), creating.clone());
        std::thread::spawn(move || {
            let mut i = 0;
            while creating.load(std::sync::atomic::Ordering::Relaxed) {
                apply_sample(&ns, &format!("s{i:03}"), &format!("s{i:03}"));
                i += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            i
        })
    };
    std::thread::sleep(Duration::from_secs(2));
    to_a.hang_requests_containing("/leases/samplectl-leader");
    let hung_at = Instant::now();

    let code = exit_code(&mut a, Duration::from_secs(20));
    let stepped_down = hung_at.elapsed();
    let took_over = logged(&b, "leading as b", Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(3));
    creating.store(false, std::sync::atomic::Ordering::Relaxed);
    let created = creator.join().unwrap();

    let (_, log_a) = a.stop("KILL", Duration::from_secs(1));
    assert_eq!(code, Some(1), "{log_a}");
    assert!(log_a.contains("could not renew the lease"), "{log_a}");
    assert!(log_a.contains("error: lost the leader lease; stopped reconciling"), "{log_a}");
    // The renew deadline is 4 s, counted from the last renewal sent (at most a retry period, 1 s, earlier).
    assert!(stepped_down < Duration::from_secs(6), "stepped down {stepped_down:?} after its renewals began to hang");
    let (a_writes, b_writes) = (work_writes(&to_a), work_writes(&to_b));
    let a_last = a_writes.iter().map(|(at, _)| *at).max().expect("the first leader wrote");
    let b_first = b_writes.iter().map(|(at, _)| *at).min().expect("the new leader wrote");
    assert!(
        a_last < b_first,
        "the old leader wrote {:?} after the new leader's first write ({:?} after the hang began)",
        a_last - b_first,
        b_first - hung_at
    );
    assert!(took_over - hung_at > Duration::from_secs(4), "the standby waited for the lease to expire");
    for i in 0..created {
        wait_ready(&ns.0, &format!("s{i:03}"), Duration::from_secs(30));
    }
}

/// A leader that finds someone else holding the Lease stops at once with exit 1, and aborts what is in
/// flight rather than finishing it: a reconcile whose requests hang (for up to their 10 s deadline) does
/// not keep the old leader running.
#[test]
fn losing_the_lease_abandons_a_hung_reconcile() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    let ns = Namespace::new("lease-abort");
    let dir = tempfile::tempdir().unwrap();
    let proxy = HangingProxy::start();
    proxy.hang_requests_containing("hang-me");
    let mut leader = candidate_through(&proxy, dir.path(), &ns.0, "x", &[]);
    logged(&leader, "leading as x", Duration::from_secs(20));
    apply_sample(&ns.0, "hang-me", "hang-me");
    a_request_hangs(&proxy, &leader);
    steal_the_lease(&ns.0);
    let stolen = Instant::now();
    let code = exit_code(&mut leader, Duration::from_secs(20));
    let gone = stolen.elapsed();
    let (_, log) = leader.stop("KILL", Duration::from_secs(1));
    // One retry period (1 s) to notice, then at once: not the hung request's 10 s deadline.
    assert!(gone < Duration::from_secs(4), "exited {gone:?} after the lease was taken:\n{log}");
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("lost the leader lease; abandoning the work in flight"), "{log}");
    assert!(log.contains("error: lost the leader lease; stopped reconciling"), "{log}");
}

/// SIGTERM finishes the work in flight, but only for --shutdown-timeout: a reconcile whose requests hang
/// is abandoned then, the Lease is still released, and the exit status says the drain was cut short.
#[test]
fn sigterm_waits_for_the_work_in_flight_no_longer_than_the_shutdown_timeout() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    let ns = Namespace::new("drain");
    let dir = tempfile::tempdir().unwrap();
    let proxy = HangingProxy::start();
    proxy.hang_requests_containing("hang-me");
    let leader = candidate_through(&proxy, dir.path(), &ns.0, "x", &["--shutdown-timeout", "2s"]);
    logged(&leader, "leading as x", Duration::from_secs(20));
    apply_sample(&ns.0, "hang-me", "hang-me");
    a_request_hangs(&proxy, &leader);
    let told = Instant::now();
    let (code, log) = leader.stop("TERM", Duration::from_secs(8));
    let took = told.elapsed();
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains("error: the work in flight did not finish within --shutdown-timeout (2s); abandoned it"),
        "{log}"
    );
    assert!(log.contains("released the lease"), "{log}");
    assert!(took < Duration::from_secs(5), "stopped after {took:?}:\n{log}");
    let lease = kubectl_json(&["get", "lease", "samplectl-leader", "-n", &ns.0]);
    assert!(lease["spec"]["holderIdentity"].is_null(), "{lease}");
}

/// /healthz fails once this replica has not been able to read or renew its Lease for longer than the
/// lease duration, so that the kubelet restarts it, and /readyz fails as soon as it cannot.
#[test]
fn healthz_fails_when_the_lease_cannot_be_reached_for_a_lease_duration() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    let ns = Namespace::new("healthz");
    let dir = tempfile::tempdir().unwrap();
    let leader = candidate(&ns.0, "a");
    logged(&leader, "leading as a", Duration::from_secs(20));
    let proxy = HangingProxy::start();
    let port = free_port();
    let standby = candidate_through(&proxy, dir.path(), &ns.0, "b", &["--health-addr", &format!("127.0.0.1:{port}")]);
    logged(&standby, "waiting for the lease", Duration::from_secs(20));
    eventually(Duration::from_secs(10), "/readyz ok", || match http_get(port, "/readyz") {
        Some((200, _)) => Ok(()),
        other => Err(format!("{other:?}")),
    });
    proxy.hang_requests_containing("/leases/samplectl-leader");
    let hung_at = Instant::now();
    eventually(Duration::from_secs(10), "/readyz fails", || match http_get(port, "/readyz") {
        Some((503, _)) => Ok(()),
        other => Err(format!("{other:?}")),
    });
    assert_eq!(http_get(port, "/healthz"), Some((200, "ok".to_owned())), "not yet a lease duration");
    let (body, failed_at) =
        eventually(Duration::from_secs(20), "/healthz fails", || match http_get(port, "/healthz") {
            Some((503, body)) => Ok((body, Instant::now())),
            other => Err(format!("{other:?}")),
        });
    assert!(body.starts_with("the Lease has not been renewed or read for"), "{body}");
    // The lease duration (6 s) after the first attempt that hung, which began up to a retry period (1 s)
    // after the hang, and that attempt is cut off at the renew deadline (4 s).
    let after = failed_at - hung_at;
    assert!(after > Duration::from_secs(6) && after < Duration::from_secs(14), "/healthz failed after {after:?}");
    drop(standby);
    drop(leader);
}

/// Without leader election, the poll driver's lists tell /healthz whether the API server is in reach.
#[test]
fn healthz_fails_when_the_api_server_is_out_of_reach_for_a_lease_duration() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    let ns = Namespace::new("healthz-poll");
    let dir = tempfile::tempdir().unwrap();
    let proxy = HangingProxy::start();
    let port = free_port();
    let health = format!("127.0.0.1:{port}");
    let controller =
        proxy.samplectl(dir.path(), &["reconcile", "-n", &ns.0, "--health-addr", &health, "--lease-duration", "3s"]);
    eventually(Duration::from_secs(20), "/readyz ok", || match http_get(port, "/readyz") {
        Some((200, _)) => Ok(()),
        other => Err(format!("{other:?}\n{}", controller.stderr())),
    });
    // Every read from now on hangs until its 10 s deadline, as with a wedged API server.
    proxy.hang_requests_containing("GET /api");
    let body = eventually(Duration::from_secs(30), "/healthz fails", || match http_get(port, "/healthz") {
        Some((503, body)) => Ok(body),
        other => Err(format!("{other:?}")),
    });
    assert!(body.starts_with("the API server has been out of reach for"), "{body}");
    drop(controller);
}

/// `curl -sk` against the secure metrics endpoint: (status, body).
fn scrape(port: u16, token: Option<&str>) -> (u16, String) {
    let mut args = vec!["-sk".to_owned(), "-w".to_owned(), "\n%{http_code}".to_owned()];
    if let Some(token) = token {
        args.extend(["-H".to_owned(), format!("Authorization: Bearer {token}")]);
    }
    args.push(format!("https://127.0.0.1:{port}/metrics"));
    let out = std::process::Command::new("curl").args(&args).output().expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

/// With --metrics-secure, as the shipped Deployment runs it: HTTPS, and only callers whose token is
/// allowed `get` on /metrics (through the samplectl-metrics-reader ClusterRole) may read it. The controller
/// itself runs with its ServiceAccount's token, so its RBAC is shown to be enough for the checks.
#[test]
fn secure_metrics_are_served_only_to_callers_allowed_to_get_them() {
    let _cluster = crate::support::shared();
    install_rbac();
    let ns = Namespace::new("metrics-auth");
    for sa in ["scraper", "nosy"] {
        kubectl(&["create", "serviceaccount", sa, "-n", &ns.0]).success();
    }
    let binding = format!("{}-scraper", ns.0);
    kubectl(&[
        "create",
        "clusterrolebinding",
        &binding,
        "--clusterrole=samplectl-metrics-reader",
        &format!("--serviceaccount={}:scraper", ns.0),
    ])
    .success();
    let token = |sa: &str, ns: &str| kubectl(&["create", "token", sa, "-n", ns]).success().stdout.trim().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = crate::support::token_kubeconfig(dir.path(), "sa", &token("samplectl", "samplectl-system"));
    let port = free_port();
    let controller = Background::start_bare(&[
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "reconcile",
        "-n",
        &ns.0,
        "--watch",
        "--metrics-addr",
        &format!("127.0.0.1:{port}"),
        "--metrics-secure",
    ]);
    logged(&controller, "metrics on https://", Duration::from_secs(20));

    let (code, body) = scrape(port, None);
    assert_eq!((code, body.as_str()), (401, "Unauthorized"), "no token");
    let (code, _) = scrape(port, Some("not-a-token"));
    assert_eq!(code, 401, "a token the API server does not know");
    let (code, body) = scrape(port, Some(&token("nosy", &ns.0)));
    assert_eq!(code, 403, "{body}");
    assert!(body.contains(&format!("user=system:serviceaccount:{}:nosy", ns.0)), "{body}");
    let (code, body) = scrape(port, Some(&token("scraper", &ns.0)));
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("samplectl_leader 1"), "{body}");
    // Plain HTTP gets nothing.
    assert_eq!(http_get(port, "/metrics"), None);
    let log = controller.stderr();
    assert!(!log.contains("Forbidden"), "the controller's own RBAC covers the reviews:\n{log}");
    drop(controller);
    kubectl(&["delete", "clusterrolebinding", &binding]).success();
}

#[test]
fn health_and_metrics_answer_and_metrics_move() {
    let _cluster = crate::support::shared();
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
            .find(|l| l.starts_with("samplectl_reconcile_total{controller=\"samples\",result=\"ready\"}"))
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
    apply_sample(&ns.0, "m", "m");
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

/// manifests/metacontroller/: the engine's ServiceAccount, with the aggregated ClusterRole (the base
/// rules plus the example's own role for MyApps and their children), runs a CompositeController stored
/// in the cluster with `--from-cluster`; without the example's role, the same run is refused with
/// kubectl's words for it and exit 1.
#[test]
fn the_engine_manifests_run_a_stored_controller_with_their_own_rbac() {
    let _cluster = crate::support::shared();
    install_rbac();
    samplectl(&["install-crd", "--metacontroller"]).success();
    kubectl(&["apply", "-f", "examples/myapp/crd.yaml"]).success();
    established(&["crd/myapps.apps.example.com"]);
    let run = kubectl(&["apply", "-k", "manifests/metacontroller/", "--dry-run=server"]).success();
    assert!(run.stdout.contains("deployment.apps/samplectl-engine"), "{}", run.stdout);
    kubectl(&["apply", "-f", "manifests/metacontroller/rbac.yaml"]).success();

    let ns = Namespace::new("engine-rbac");
    let port = free_port();
    let hook =
        std::process::Command::new("python3").args(["examples/myapp/sync.py", "--serve", &port.to_string()]).spawn();
    let _hook = Stopped(hook.unwrap());
    let label = format!("engine-test={}", ns.0);
    let controller = std::fs::read_to_string("examples/myapp/controller.yaml").unwrap();
    let mut controller: serde_json::Value = serde_yaml::from_str(&controller).unwrap();
    controller["metadata"]["name"] = ns.0.clone().into();
    controller["metadata"]["labels"] = json!({"engine-test": ns.0});
    let url = controller["spec"]["hooks"]["sync"]["webhook"]["url"].as_str().unwrap().to_owned();
    controller["spec"]["hooks"]["sync"]["webhook"]["url"] =
        url.replace("127.0.0.1:8010", &format!("127.0.0.1:{port}")).into();
    crate::support::apply("default", &controller);
    kubectl(&["apply", "-n", &ns.0, "-f", "examples/myapp/myapp.yaml"]).success();

    let token =
        kubectl(&["create", "token", "samplectl-engine", "-n", "samplectl-system"]).success().stdout.trim().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = crate::support::token_kubeconfig(dir.path(), "engine", &token);
    let kubeconfig = kubeconfig.to_str().unwrap();
    let once = || {
        samplectl_bare(&[
            "--kubeconfig",
            kubeconfig,
            "reconcile",
            "--from-cluster",
            "--target-label-selector",
            &label,
            "-n",
            &ns.0,
            "--once",
        ])
    };
    // Converged as far as a cluster without kubelets goes: the MyApp stays Progressing (no Pods), which
    // `--once` reports with exit 1.
    let run = eventually(Duration::from_secs(30), "a run with the engine's aggregated role", || {
        let run = once();
        match run.stderr.contains("is not Ready") && !run.stderr.to_lowercase().contains("forbidden") {
            true => Ok(run),
            false => Err(format!("{run:#?}")),
        }
    });
    assert!(run.stderr.contains("engine-rbac") && run.stderr.contains("(Progressing)"), "{run:#?}");
    let deployment = kubectl_json(&["get", "deployment", "shop", "-n", &ns.0]);
    assert_eq!(deployment["metadata"]["ownerReferences"][0]["kind"], "MyApp");

    kubectl(&["delete", "clusterrole", "samplectl-engine-myapp"]).success();
    let refused = eventually(Duration::from_secs(30), "a run refused without the example's role", || {
        let run = once();
        match run.code {
            1 => Ok(run),
            _ => Err(format!("{run:#?}")),
        }
    });
    assert!(refused.stderr.contains("is forbidden"), "{refused:#?}");
    kubectl(&["apply", "-f", "manifests/metacontroller/rbac.yaml"]).success();
    kubectl(&["delete", "compositecontroller", &ns.0]).success();
}

/// A child process, killed when dropped (the test's hook, even when the test fails).
struct Stopped(std::process::Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const CRD_REFUSAL: &str = "ValidatingAdmissionPolicy 'samplectl-engine-crds' with binding 'samplectl-engine-crds' denied request: samplectl's engine may";

/// A CRD of one version, labelled as given, with `conversion` if any.
fn crd_file(
    dir: &std::path::Path,
    name: &str,
    labels: serde_json::Value,
    conversion: Option<serde_json::Value>,
) -> String {
    let (plural, group) = name.split_once('.').unwrap();
    let mut crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural.trim_end_matches('s'), "kind": "Thing", "listKind": "ThingList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    });
    if let Some(conversion) = conversion {
        crd["spec"]["conversion"] = conversion;
    }
    let file = dir.join(format!("{name}.json"));
    std::fs::write(&file, crd.to_string()).unwrap();
    file.display().to_string()
}

#[test]
fn the_api_server_refuses_the_engine_any_crd_kro_does_not_own() {
    let _cluster = crate::support::shared();
    install_rbac();
    for file in ["rbac", "admission-policy"] {
        kubectl(&["apply", "-f", &format!("manifests/metacontroller/{file}.yaml")]).success();
    }
    let token =
        kubectl(&["create", "token", "samplectl-engine", "-n", "samplectl-system"]).success().stdout.trim().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = crate::support::token_kubeconfig(dir.path(), "engine", &token);
    let kubeconfig = kubeconfig.to_str().unwrap();
    let as_engine = |args: &[&str]| {
        let mut all = vec!["--kubeconfig", kubeconfig];
        all.extend_from_slice(args);
        kubectl(&all)
    };
    let foreign = crd_file(dir.path(), "things.foreign.samplectl.test", json!({}), None);
    eventually(Duration::from_secs(20), "the policy in force", || {
        let run = as_engine(&["create", "-f", &foreign, "--dry-run=server"]);
        if run.code == 1 && run.stderr.contains(CRD_REFUSAL) { Ok(()) } else { Err(format!("{run:#?}")) }
    });
    let run = as_engine(&["create", "-f", &foreign, "--dry-run=server"]);
    assert!(
        run.stderr.contains("only write CRDs labelled kro.run/owned=true; things.foreign.samplectl.test would not be"),
        "{run:#?}"
    );

    // What the engine writes for an RGD goes through.
    let owned = json!({"kro.run/owned": "true", "kro.run/resource-graph-definition-name": "things"});
    let kros = crd_file(dir.path(), "things.kro.samplectl.test", owned.clone(), None);
    as_engine(&["create", "-f", &kros, "--dry-run=server"]).success();

    // Someone else's CRD: neither changed nor taken over by labelling it kro's.
    for patch in [r#"{"metadata":{"labels":{"x":"y"}}}"#, r#"{"metadata":{"labels":{"kro.run/owned":"true"}}}"#] {
        let run =
            as_engine(&["patch", "crd", "samples.example.com", "--type", "merge", "-p", patch, "--dry-run=server"]);
        assert_eq!(run.code, 1, "{run:#?}");
        assert!(run.stderr.contains("kro.run/owned=true; samples.example.com is not"), "{run:#?}");
    }
    // Nor a kro CRD pointed at a webhook.
    let conversion = json!({"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
        "clientConfig": {"url": "https://attacker.example/convert"}}});
    let hooked = crd_file(dir.path(), "hooks.kro.samplectl.test", owned, Some(conversion));
    let run = as_engine(&["create", "-f", &hooked, "--dry-run=server"]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(run.stderr.contains("may not point a CRD's conversion at a webhook; hooks.kro.samplectl.test"), "{run:#?}");
}
