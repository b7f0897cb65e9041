//! `samplectl watch` against changes made with the built kubectl.

use std::time::{Duration, Instant};

use crate::support::{Namespace, Watcher, event, kubectl, pair, samplectl, table, user_kubeconfig};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(20);

#[test]
fn changes_arrive_in_order_as_json_and_as_table() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("watch-order");
    // Once a watcher has printed the sentinel, its list is done and every later change reaches it.
    kubectl(&["create", "configmap", "sentinel", "-n", &ns.0]).success();
    let mut json = Watcher::start(&["watch", "--gvr", "v1/configmaps", "-n", &ns.0, "-o", "json"]);
    let mut rows = Watcher::start(&["watch", "cm", "-n", &ns.0]);
    assert_eq!(event(&json.next_line(WAIT)), pair("ADDED", "sentinel"));
    let (header, _) = table(&rows.next_line(WAIT));
    assert_eq!(header, ["EVENT", "NAME", "DATA", "AGE"]);
    assert!(rows.next_line(WAIT).starts_with("ADDED      sentinel   0"));

    kubectl(&["create", "configmap", "subject", "-n", &ns.0, "--from-literal=k=v"]).success();
    kubectl(&["label", "configmap", "subject", "-n", &ns.0, "changed=yes"]).success();
    kubectl(&["delete", "configmap", "subject", "-n", &ns.0]).success();

    let seen: Vec<_> = (0..3).map(|_| event(&json.next_line(WAIT))).collect();
    assert_eq!(seen, [pair("ADDED", "subject"), pair("MODIFIED", "subject"), pair("DELETED", "subject")]);
    let seen: Vec<Vec<String>> = (0..3).map(|_| table(&format!("H\n{}", rows.next_line(WAIT))).1.remove(0)).collect();
    let seen: Vec<_> = seen.iter().map(|r| (r[0].as_str(), r[1].as_str(), r[2].as_str())).collect();
    assert_eq!(seen, [("ADDED", "subject", "1"), ("MODIFIED", "subject", "1"), ("DELETED", "subject", "1")]);
    assert!(json.lines_within(Duration::from_millis(500)).is_empty(), "nothing printed twice");
}

#[test]
fn max_events_and_timeout_end_it_with_exit_0() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("watch-stop");
    for name in ["one", "two"] {
        kubectl(&["create", "configmap", name, "-n", &ns.0]).success();
    }
    let run = samplectl(&["watch", "cm", "-n", &ns.0, "-o", "name", "--max-events", "1"]).success();
    assert_eq!(run.stdout, "ADDED configmap/one\n");

    let run = samplectl(&["watch", "cm", "-n", &ns.0, "--watch-only", "--timeout", "1s"]).success();
    assert_eq!(run.stdout, "", "--watch-only prints no existing objects");

    let run = samplectl(&["watch", "cm", "two", "-n", &ns.0, "-o", "yaml", "--timeout", "1s"]).success();
    let docs: Vec<Value> =
        run.stdout.split("---\n").filter(|d| !d.is_empty()).map(|d| serde_yaml::from_str(d).unwrap()).collect();
    assert_eq!(docs.len(), 1, "only the named object: {}", run.stdout);
    assert_eq!(
        (docs[0]["type"].as_str(), docs[0]["object"]["metadata"]["name"].as_str()),
        (Some("ADDED"), Some("two"))
    );
}

#[test]
fn sigint_and_sigterm_end_it_promptly_with_exit_0() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("watch-signal");
    kubectl(&["create", "configmap", "sentinel", "-n", &ns.0]).success();
    for signal in ["INT", "TERM"] {
        let mut watcher = Watcher::start(&["watch", "cm", "-n", &ns.0, "-o", "name"]);
        assert_eq!(watcher.next_line(WAIT), "ADDED configmap/sentinel");
        let sent = Instant::now();
        watcher.signal(signal);
        let status = loop {
            if let Some(status) = watcher.child.try_wait().unwrap() {
                break status;
            }
            assert!(sent.elapsed() < Duration::from_secs(1), "SIG{signal} did not end the watch within a second");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(status.code(), Some(0), "SIG{signal}");
    }
}

#[test]
fn watch_errors_read_like_kubectl() {
    let _cluster = crate::support::shared();
    let dir = tempfile::tempdir().unwrap();
    let config = user_kubeconfig(dir.path(), "watch-nobody");
    let run = crate::support::samplectl_bare(&["--kubeconfig", config.to_str().unwrap(), "watch", "cm", "-A"]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert_eq!(
        run.stderr,
        "Error from server (Forbidden): configmaps is forbidden: User \"watch-nobody\" cannot list resource \
         \"configmaps\" in API group \"\" at the cluster scope\n"
    );
    let run = samplectl(&["watch", "--gvr", "v1/nothings"]);
    assert_eq!(
        (run.code, run.stderr.as_str()),
        (1, "error: the server doesn't have a resource type \"v1/nothings\"\n")
    );
    let run = samplectl(&["watch", "--gvr", "v1//x"]);
    assert_eq!(run.code, 2, "{run:#?}");
    let run = samplectl(&["watch", "cm", "--max-events", "0"]);
    assert_eq!(run.code, 2, "{run:#?}");
}
