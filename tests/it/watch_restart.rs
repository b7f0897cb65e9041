//! `samplectl watch` across kube-apiserver restarts. Each test holds the cluster alone: a restart would
//! disturb any test running beside it.

use std::time::Duration;

use crate::support::{Namespace, Watcher, compact_etcd, event, kubectl, local_cluster, pair};

#[test]
fn watch_survives_an_apiserver_restart_without_losing_or_repeating_changes() {
    let _cluster = crate::support::exclusive();
    let ns = Namespace::new("watch-restart");
    kubectl(&["create", "configmap", "before", "-n", &ns.0]).success();
    let mut watcher = Watcher::start(&["watch", "--gvr", "v1/configmaps", "-n", &ns.0, "-o", "json"]);
    assert_eq!(event(&watcher.next_line(Duration::from_secs(20))), pair("ADDED", "before"));

    local_cluster(&["restart", "apiserver"]);
    // Made while the watcher is still backing off and reconnecting.
    kubectl(&["create", "configmap", "during", "-n", &ns.0]).success();
    assert_eq!(event(&watcher.next_line(Duration::from_secs(60))), pair("ADDED", "during"));
    kubectl(&["create", "configmap", "after", "-n", &ns.0]).success();
    assert_eq!(event(&watcher.next_line(Duration::from_secs(20))), pair("ADDED", "after"));
    assert!(watcher.lines_within(Duration::from_secs(1)).is_empty(), "no change printed twice");
}

/// The watcher is paused while changes happen, etcd forgets their history and the API server restarts:
/// its resourceVersion is gone (410), so it relists and prints exactly what changed meanwhile.
#[test]
fn watch_relists_after_410_gone_and_prints_only_the_difference() {
    let _cluster = crate::support::exclusive();
    let ns = Namespace::new("watch-gone");
    for name in ["kept", "edited", "removed"] {
        kubectl(&["create", "configmap", name, "-n", &ns.0]).success();
    }
    let mut watcher = Watcher::start(&["-v", "watch", "--gvr", "v1/configmaps", "-n", &ns.0, "-o", "json"]);
    let mut initial: Vec<_> = (0..3).map(|_| event(&watcher.next_line(Duration::from_secs(20)))).collect();
    initial.sort();
    assert_eq!(initial, [pair("ADDED", "edited"), pair("ADDED", "kept"), pair("ADDED", "removed")]);

    // Paused, the watcher cannot read its stream; the first restart cuts that stream before any of the
    // changes below is sent on it, and the second one starts the server's watch cache after them.
    watcher.signal("STOP");
    local_cluster(&["restart", "apiserver"]);
    kubectl(&["label", "configmap", "edited", "-n", &ns.0, "changed=yes"]).success();
    kubectl(&["delete", "configmap", "removed", "-n", &ns.0]).success();
    kubectl(&["create", "configmap", "created", "-n", &ns.0]).success();
    kubectl(&["create", "configmap", "fleeting", "-n", &ns.0]).success();
    kubectl(&["delete", "configmap", "fleeting", "-n", &ns.0]).success();
    compact_etcd();
    local_cluster(&["restart", "apiserver"]);
    watcher.signal("CONT");

    let mut changes: Vec<_> = (0..3).map(|_| event(&watcher.next_line(Duration::from_secs(60)))).collect();
    changes.sort();
    assert_eq!(changes, [pair("ADDED", "created"), pair("DELETED", "removed"), pair("MODIFIED", "edited")]);
    let extra = watcher.lines_within(Duration::from_secs(1));
    assert!(extra.is_empty(), "kept is not printed again: {extra:?}");
    kubectl(&["create", "configmap", "later", "-n", &ns.0]).success();
    assert_eq!(event(&watcher.next_line(Duration::from_secs(20))), pair("ADDED", "later"), "watching again");
    let stderr = watcher.stop_and_stderr();
    assert!(stderr.contains("relisted after the watch expired"), "the 410 path was taken:\n{stderr}");
}
