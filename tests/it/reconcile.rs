//! `samplectl reconcile` on the local cluster: the same scenarios against both drivers, each in its own
//! namespace with its own controller process, checked with the built kubectl.

use std::time::Duration;

use crate::support::{Background, Namespace, apply_sample, eventually, kubectl, kubectl_json, samplectl};
use serde_json::{Value, json};

#[derive(Clone, Copy, Debug)]
enum Driver {
    Poll,
    Watch,
}

impl Driver {
    fn start(self, ns: &str) -> Background {
        let mut args = vec!["reconcile", "-n", ns];
        if let Driver::Watch = self {
            args.push("--watch");
        }
        Background::start(&args)
    }

    fn once(self, ns: &str) -> crate::support::Run {
        let mut args = vec!["reconcile", "-n", ns, "--once"];
        if let Driver::Watch = self {
            args.push("--watch");
        }
        samplectl(&args)
    }
}

const SOON: Duration = Duration::from_secs(20);
/// kube-controller-manager's garbage collector notices a new CRD only at its next 30 s discovery resync.
const GC: Duration = Duration::from_secs(90);

fn setup(prefix: &str) -> Namespace {
    samplectl(&["install-crd"]).success();
    Namespace::new(prefix)
}

fn get(ns: &str, kind: &str, name: &str) -> Option<Value> {
    let run = kubectl(&["get", kind, name, "-n", ns, "-o", "json", "--ignore-not-found"]).success();
    (!run.stdout.trim().is_empty()).then(|| serde_json::from_str(&run.stdout).unwrap())
}

fn ready(sample: &Value) -> Option<&Value> {
    sample["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")
}

/// Waits until the Sample's status reports `status` for its current generation.
fn wait_ready(ns: &str, name: &str, status: &str) -> Value {
    eventually(SOON, &format!("{ns}/{name} Ready={status}"), || {
        let sample = get(ns, "sample", name).ok_or("no Sample")?;
        let observed = sample["status"]["observedGeneration"] == sample["metadata"]["generation"];
        match ready(&sample) {
            Some(c) if c["status"] == status && observed => Ok(sample.clone()),
            _ => Err(format!("status: {}", sample["status"])),
        }
    })
}

fn wait_configmap(ns: &str, name: &str, test_string: &str) -> Value {
    eventually(SOON, &format!("ConfigMap {ns}/{name} holding {test_string:?}"), || {
        let cm = get(ns, "configmap", name).ok_or("no ConfigMap")?;
        if cm["data"]["testString"] == test_string { Ok(cm) } else { Err(format!("data: {}", cm["data"])) }
    })
}

fn events(ns: &str, sample: &str) -> Vec<(String, String)> {
    let list = kubectl_json(&["get", "events.events.k8s.io", "-n", ns]);
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["regarding"]["name"] == sample && e["regarding"]["kind"] == "Sample")
        .map(|e| (e["type"].as_str().unwrap().to_owned(), e["reason"].as_str().unwrap().to_owned()))
        .collect()
}

fn lifecycle(driver: Driver) {
    let ns = setup(&format!("rc-life-{driver:?}").to_lowercase());
    let _controller = driver.start(&ns.0);

    apply_sample(&ns.0, "s1", "first");
    let cm = wait_configmap(&ns.0, "s1", "first");
    let sample = wait_ready(&ns.0, "s1", "True");
    assert_eq!(cm["metadata"]["labels"]["app.kubernetes.io/managed-by"], "samplectl");
    assert_eq!(cm["metadata"]["labels"]["samples.example.com/name"], "s1");
    let owner = &cm["metadata"]["ownerReferences"][0];
    assert_eq!(owner["uid"], sample["metadata"]["uid"]);
    assert_eq!((owner["kind"].as_str(), owner["apiVersion"].as_str()), (Some("Sample"), Some("example.com/v1alpha1")));
    assert_eq!((owner["controller"].as_bool(), owner["blockOwnerDeletion"].as_bool()), (Some(true), Some(true)));
    assert_eq!(ready(&sample).unwrap()["reason"], "ConfigMapReady");
    eventually(SOON, "a ConfigMapCreated event", || {
        let seen = events(&ns.0, "s1");
        if seen.contains(&("Normal".into(), "ConfigMapCreated".into())) { Ok(()) } else { Err(format!("{seen:?}")) }
    });

    // A new testString: the ConfigMap follows, and so does observedGeneration.
    apply_sample(&ns.0, "s1", "second");
    wait_configmap(&ns.0, "s1", "second");
    let sample = wait_ready(&ns.0, "s1", "True");
    assert_eq!(sample["metadata"]["generation"], 2);

    // Self-healing: a deleted child comes back, a hand edit is reverted.
    kubectl(&["delete", "configmap", "s1", "-n", &ns.0]).success();
    wait_configmap(&ns.0, "s1", "second");
    kubectl(&["patch", "configmap", "s1", "-n", &ns.0, "--type=merge", "-p", r#"{"data":{"testString":"by hand"}}"#])
        .success();
    wait_configmap(&ns.0, "s1", "second");

    // Deleting the Sample removes the ConfigMap through garbage collection, not through samplectl.
    kubectl(&["delete", "sample", "s1", "-n", &ns.0]).success();
    eventually(GC, "the ConfigMap garbage-collected", || match get(&ns.0, "configmap", "s1") {
        None => Ok(()),
        Some(_) => Err("still there".to_owned()),
    });
}

#[test]
fn lifecycle_poll() {
    let _cluster = crate::support::shared();
    lifecycle(Driver::Poll);
}

#[test]
fn lifecycle_watch() {
    let _cluster = crate::support::shared();
    lifecycle(Driver::Watch);
}

fn foreign_configmap(driver: Driver) {
    let ns = setup(&format!("rc-foreign-{driver:?}").to_lowercase());
    kubectl(&["create", "configmap", "taken", "-n", &ns.0, "--from-literal=mine=yes"]).success();
    let before = kubectl(&["get", "configmap", "taken", "-n", &ns.0, "-o", "json"]).success().stdout;
    let _controller = driver.start(&ns.0);

    apply_sample(&ns.0, "taken", "wants this name");
    let sample = wait_ready(&ns.0, "taken", "False");
    let condition = ready(&sample).unwrap();
    assert_eq!(condition["reason"], "ConfigMapConflict");
    assert!(condition["message"].as_str().unwrap().contains("not controlled by this Sample"), "{condition}");
    eventually(SOON, "a Warning event", || {
        let seen = events(&ns.0, "taken");
        if seen.contains(&("Warning".into(), "ConfigMapConflict".into())) { Ok(()) } else { Err(format!("{seen:?}")) }
    });
    std::thread::sleep(Duration::from_secs(2)); // a few more passes or resyncs
    let after = kubectl(&["get", "configmap", "taken", "-n", &ns.0, "-o", "json"]).success().stdout;
    assert_eq!(after, before, "a ConfigMap samplectl does not control is untouched, byte for byte");

    // --once names the Sample that is not Ready, and why.
    let once = driver.once(&ns.0);
    assert_eq!(once.code, 1, "{once:#?}");
    let expected = format!("error: 1 Sample is not Ready: {}/taken (ConfigMapConflict)", ns.0);
    assert!(once.stderr.contains(&expected), "{once:#?}");

    // The ConfigMap's owner deletes it: the Sample gets its own within seconds (the watch driver hears
    // of the delete; the poll driver looks again within its capped recheck backoff).
    kubectl(&["delete", "configmap", "taken", "-n", &ns.0]).success();
    wait_ready(&ns.0, "taken", "True");
    wait_configmap(&ns.0, "taken", "wants this name");
}

/// Every name the API server takes for a Sample works, the longest (253 characters) included: label
/// values stop at 63, so such a ConfigMap goes without the name label instead of failing every write.
fn longest_name(driver: Driver) {
    let ns = setup(&format!("rc-long-{driver:?}").to_lowercase());
    let _controller = driver.start(&ns.0);
    let name = "a".repeat(253);
    apply_sample(&ns.0, &name, "long");
    wait_ready(&ns.0, &name, "True");
    let cm = wait_configmap(&ns.0, &name, "long");
    assert_eq!(cm["metadata"]["labels"], json!({"app.kubernetes.io/managed-by": "samplectl"}));
    let short = "b".repeat(63);
    apply_sample(&ns.0, &short, "short");
    let cm = wait_configmap(&ns.0, &short, "short");
    assert_eq!(cm["metadata"]["labels"]["samples.example.com/name"], short.as_str());
}

#[test]
fn longest_name_poll() {
    let _cluster = crate::support::shared();
    longest_name(Driver::Poll);
}

#[test]
fn longest_name_watch() {
    let _cluster = crate::support::shared();
    longest_name(Driver::Watch);
}

/// A ConfigMap orphaned by `kubectl delete sample --cascade=orphan` is kept, as the user asked: a new
/// Sample of that name does not adopt it (samplectl writes only what it controls) and says so; deleting
/// the orphan lets the Sample make its own. A Sample deleted and at once created again waits for the
/// garbage collector to remove its predecessor's ConfigMap, then gets its own.
fn orphans_and_successors(driver: Driver) {
    let ns = setup(&format!("rc-orphan-{driver:?}").to_lowercase());
    let _controller = driver.start(&ns.0);
    apply_sample(&ns.0, "kept", "first");
    wait_configmap(&ns.0, "kept", "first");
    kubectl(&["delete", "sample", "kept", "-n", &ns.0, "--cascade=orphan"]).success();
    eventually(GC, "the orphaned ConfigMap loses its owner", || {
        let cm = get(&ns.0, "configmap", "kept").ok_or("the orphan was deleted")?;
        if cm["metadata"]["ownerReferences"].is_null() { Ok(()) } else { Err(cm.to_string()) }
    });
    let orphan = kubectl(&["get", "configmap", "kept", "-n", &ns.0, "-o", "json"]).success().stdout;
    apply_sample(&ns.0, "kept", "second");
    let sample = wait_ready(&ns.0, "kept", "False");
    let condition = ready(&sample).unwrap();
    assert_eq!(condition["reason"], "ConfigMapConflict");
    assert!(condition["message"].as_str().unwrap().contains("without an owner"), "{condition}");
    let after = kubectl(&["get", "configmap", "kept", "-n", &ns.0, "-o", "json"]).success().stdout;
    assert_eq!(after, orphan, "the orphan is untouched");
    kubectl(&["delete", "configmap", "kept", "-n", &ns.0]).success();
    wait_ready(&ns.0, "kept", "True");
    wait_configmap(&ns.0, "kept", "second");

    // Deleted and created again at once: the new Sample ends up owning a ConfigMap of its own.
    kubectl(&["delete", "sample", "kept", "-n", &ns.0, "--wait=false"]).success();
    apply_sample(&ns.0, "kept", "third");
    let uid = get(&ns.0, "sample", "kept").unwrap()["metadata"]["uid"].clone();
    eventually(GC, "the successor owns its ConfigMap", || {
        let cm = get(&ns.0, "configmap", "kept").ok_or("no ConfigMap")?;
        let sample = get(&ns.0, "sample", "kept").ok_or("no Sample")?;
        let owned = cm["metadata"]["ownerReferences"][0]["uid"] == uid && cm["data"]["testString"] == "third";
        if owned && ready(&sample).is_some_and(|c| c["status"] == "True") { Ok(()) } else { Err(cm.to_string()) }
    });
}

#[test]
fn orphans_and_successors_poll() {
    let _cluster = crate::support::shared();
    orphans_and_successors(Driver::Poll);
}

#[test]
fn orphans_and_successors_watch() {
    let _cluster = crate::support::shared();
    orphans_and_successors(Driver::Watch);
}

#[test]
fn foreign_configmap_poll() {
    let _cluster = crate::support::shared();
    foreign_configmap(Driver::Poll);
}

#[test]
fn foreign_configmap_watch() {
    let _cluster = crate::support::shared();
    foreign_configmap(Driver::Watch);
}

/// Once converged, a pass writes nothing: --once on a converged namespace sends reads only, and no read
/// of a single ConfigMap, since each driver's own copy (a list, a watch cache) shows nothing to do.
fn converged_costs_no_writes(driver: Driver) {
    let ns = setup(&format!("rc-idle-{driver:?}").to_lowercase());
    for i in 0..5 {
        apply_sample(&ns.0, &format!("s{i}"), &format!("value {i}"));
    }
    let first = driver.once(&ns.0).success();
    assert!(first.stderr.contains("configmap created"), "{first:#?}");
    let again = driver.once(&ns.0).success();
    let totals = again.stderr.lines().find(|l| l.contains("requests sent:")).expect("totals are printed");
    assert!(totals.contains("(0 writes)"), "{totals}");
    assert!(!totals.contains("get configmaps"), "{totals}");
    let actions: Vec<&str> =
        again.stderr.lines().filter(|l| l.contains(": configmap ") || l.contains(": status ")).collect();
    assert!(actions.is_empty(), "nothing logged when nothing changes: {actions:?}");
}

#[test]
fn converged_costs_no_writes_poll() {
    let _cluster = crate::support::shared();
    converged_costs_no_writes(Driver::Poll);
}

#[test]
fn converged_costs_no_writes_watch() {
    let _cluster = crate::support::shared();
    converged_costs_no_writes(Driver::Watch);
}

/// The state a driver leaves, without what differs between namespaces (uids, times, the namespace).
fn end_state(ns: &str) -> Value {
    let cms = kubectl_json(&["get", "configmaps", "-n", ns, "-l", "app.kubernetes.io/managed-by=samplectl"]);
    let samples = kubectl_json(&["get", "samples", "-n", ns]);
    let cms: Vec<Value> = cms["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|cm| {
            let owner = &cm["metadata"]["ownerReferences"][0];
            json!([
                cm["metadata"]["name"],
                cm["data"],
                cm["metadata"]["labels"],
                owner["kind"],
                owner["name"],
                owner["controller"]
            ])
        })
        .collect();
    let samples: Vec<Value> = samples["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let c = ready(s).cloned().unwrap_or_default();
            let message = c["message"].as_str().unwrap_or_default().replace(ns, "NS");
            json!([s["metadata"]["name"], s["status"]["observedGeneration"], c["status"], c["reason"], message])
        })
        .collect();
    json!({"configmaps": cms, "samples": samples})
}

#[test]
fn poll_and_watch_reach_the_same_end_state() {
    let _cluster = crate::support::shared();
    let namespaces = [setup("rc-same-poll"), Namespace::new("rc-same-watch")];
    let controllers = [Driver::Poll.start(&namespaces[0].0), Driver::Watch.start(&namespaces[1].0)];
    for ns in &namespaces {
        kubectl(&["create", "configmap", "c", "-n", &ns.0, "--from-literal=foreign=yes"]).success();
        for name in ["a", "b", "c"] {
            apply_sample(&ns.0, name, &format!("{name} one"));
        }
        apply_sample(&ns.0, "b", "b two");
        kubectl(&["delete", "sample", "a", "-n", &ns.0]).success();
        apply_sample(&ns.0, "d", "");
    }
    for ns in &namespaces {
        wait_ready(&ns.0, "b", "True");
        wait_ready(&ns.0, "c", "False");
        wait_ready(&ns.0, "d", "True");
        wait_configmap(&ns.0, "b", "b two");
        wait_configmap(&ns.0, "d", "");
    }
    eventually(GC, "the same end state", || {
        let (poll, watch) = (end_state(&namespaces[0].0), end_state(&namespaces[1].0));
        if poll == watch { Ok(()) } else { Err(format!("poll: {poll}\nwatch: {watch}")) }
    });
    drop(controllers);
}

#[test]
fn sigint_ends_the_controller_promptly_with_exit_0() {
    let _cluster = crate::support::shared();
    let ns = setup("rc-signal");
    apply_sample(&ns.0, "s", "x");
    for driver in [Driver::Poll, Driver::Watch] {
        let controller = driver.start(&ns.0);
        wait_ready(&ns.0, "s", "True");
        std::thread::sleep(Duration::from_millis(500));
        let (code, stderr) = controller.stop("INT", Duration::from_secs(5));
        assert_eq!(code, Some(0), "{driver:?} did not exit 0 within 5 s:\n{stderr}");
        assert!(stderr.contains("requests sent:"), "{stderr}");
    }
}

#[test]
fn observe_mode_reports_changes_and_writes_nothing() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("rc-observe");
    for driver in [Driver::Poll, Driver::Watch] {
        let mut args = vec!["reconcile", "--gvr", "v1/configmaps", "-n", &ns.0];
        if let Driver::Watch = driver {
            args.push("--watch");
        }
        let observer = Background::start(&args);
        eventually(SOON, "the observer is running", || {
            let log = observer.stderr();
            if log.contains("observing configmaps") { Ok(()) } else { Err(log) }
        });
        std::thread::sleep(Duration::from_millis(1500));
        kubectl(&["create", "configmap", "watched", "-n", &ns.0, "--from-literal=k=1"]).success();
        eventually(SOON, "added", || {
            observer.stderr().contains("watched: added").then_some(()).ok_or(observer.stderr())
        });
        kubectl(&["label", "configmap", "watched", "-n", &ns.0, "x=y"]).success();
        eventually(SOON, "changed", || {
            observer.stderr().contains("watched: changed").then_some(()).ok_or(observer.stderr())
        });
        kubectl(&["delete", "configmap", "watched", "-n", &ns.0]).success();
        eventually(SOON, "removed", || {
            observer.stderr().contains("watched: removed").then_some(()).ok_or(observer.stderr())
        });
        let (code, stderr) = observer.stop("TERM", Duration::from_secs(5));
        assert_eq!(code, Some(0), "{stderr}");
        let totals = stderr.lines().find(|l| l.contains("requests sent:")).unwrap();
        assert!(totals.contains("(0 writes)"), "{totals}");
    }
}

#[test]
fn json_logs_carry_namespace_name_and_outcome() {
    let _cluster = crate::support::shared();
    let ns = setup("rc-json");
    apply_sample(&ns.0, "s", "x");
    let run = samplectl(&["--log-format", "json", "reconcile", "-n", &ns.0, "--once"]).success();
    let lines: Vec<Value> =
        run.stderr.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    let actions: Vec<(&str, &str, &str)> = lines
        .iter()
        .filter(|l| l["outcome"].is_string())
        .map(|l| (l["namespace"].as_str().unwrap(), l["name"].as_str().unwrap(), l["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(actions, [(ns.0.as_str(), "s", "created"), (ns.0.as_str(), "s", "status")]);
}

#[test]
fn reconcile_usage_errors() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    let run = samplectl(&["reconcile", "--gvr", "nope"]);
    assert_eq!(run.code, 2, "{run:#?}");
    let run = samplectl(&["reconcile", "--interval", "fast"]);
    assert_eq!(run.code, 2, "{run:#?}");
    let run = samplectl(&["reconcile", "--concurrency", "0"]);
    assert_eq!(run.code, 2, "{run:#?}");
    // Values that would make a loop spin against the API server are refused with the smallest allowed.
    for (flag, value, min) in [
        ("--interval", "0", "100ms"),
        ("--interval", "10ms", "100ms"),
        ("--resync", "0s", "1s"),
        ("--retry-period", "0", "100ms"),
        ("--lease-duration", "500ms", "1s"),
        ("--renew-deadline", "0", "100ms"),
    ] {
        let run = samplectl(&["reconcile", flag, value]);
        assert_eq!(run.code, 2, "{flag} {value}: {run:#?}");
        let want = format!(
            "error: invalid value '{value}' for '{flag} <DURATION>': \"{value}\" is too short: the smallest value allowed is {min}"
        );
        assert!(run.stderr.starts_with(&want), "{flag} {value}: {run:#?}");
    }
    let run = samplectl(&["reconcile", "--leader-elect", "--lease-duration", "5s", "--renew-deadline", "10s"]);
    assert_eq!(
        (run.code, run.stderr.lines().next()),
        (2, Some("error: --renew-deadline must be shorter than --lease-duration"))
    );
    let run = samplectl(&["reconcile", "--gvr", "v1/configmaps", "--watch", "--once"]);
    assert_eq!(run.code, 2, "{run:#?}");
    assert!(run.stderr.contains("error: --once with --watch applies to Samples and hooks only"), "{run:#?}");
    let run = samplectl(&["reconcile", "--health-addr", "not-an-address"]);
    assert_eq!(run.code, 2, "{run:#?}");
    // A port already taken is a failure to start, reported with the address.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let run = samplectl(&["reconcile", "--once", "--metrics-addr", &addr]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(run.stderr.contains(&format!("error: cannot listen on {addr} for metrics")), "{run:#?}");
    // Secure metrics need an address to serve on, and a certificate that can be read.
    let run = samplectl(&["reconcile", "--metrics-secure"]);
    assert_eq!(run.code, 2, "{run:#?}");
    assert!(run.stderr.contains("the following required arguments were not provided"), "{run:#?}");
    assert!(run.stderr.contains("--metrics-addr <ADDR>"), "{run:#?}");
    let run = samplectl(&[
        "reconcile",
        "--once",
        "--metrics-addr",
        "127.0.0.1:0",
        "--metrics-secure",
        "--metrics-cert-dir",
        "/nonexistent",
    ]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(run.stderr.contains("error: cannot read the certificate /nonexistent/tls.crt"), "{run:#?}");
}

/// `--max-connections` caps the connections a port keeps open: with one held open and silent, the
/// probe port closes the next at once; once the held one goes, probes are answered again.
#[test]
fn max_connections_caps_each_port() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("rc-conns");
    let port = crate::support::free_port();
    let health = format!("127.0.0.1:{port}");
    let args = ["reconcile", "--gvr", "v1/configmaps", "-n", &ns.0, "--health-addr", &health, "--max-connections", "1"];
    let observer = Background::start(&args);
    eventually(SOON, "the probes answered", || match crate::support::http_get(port, "/healthz") {
        Some((200, _)) => Ok(()),
        other => Err(format!("{other:?}\n{}", observer.stderr())),
    });
    let held = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    eventually(SOON, "a second connection closed at once", || match crate::support::http_get(port, "/healthz") {
        None => Ok(()),
        other => Err(format!("{other:?}")),
    });
    drop(held);
    eventually(SOON, "the probes answered once the held connection went", || {
        match crate::support::http_get(port, "/healthz") {
            Some((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
}
