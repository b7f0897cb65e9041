//! `scripts/local-cluster`, the interface the other tests, the demo and CI stand on.

use crate::support::{Namespace, cluster, kubectl, local_cluster_with};

/// Holds the cluster alone: restarting the API server would disturb anything running beside it.
#[test]
fn up_is_idempotent_and_restart_keeps_port_and_data() {
    let _cluster = crate::support::exclusive();
    let kubeconfig = cluster().kubeconfig.to_str().unwrap().to_owned();

    let again = local_cluster_with(&["up", "--no-build"], &[]).success();
    assert!(again.stderr.contains("already running"), "{again:#?}");
    let env = local_cluster_with(&["env"], &[]).success();
    assert_eq!(env.stdout, format!("export KUBECONFIG={kubeconfig}\n"));
    let status = local_cluster_with(&["status"], &[]).success();
    for component in ["etcd", "kube-apiserver", "kube-controller-manager"] {
        assert!(status.stdout.lines().any(|l| l.starts_with(component) && l.contains("running")), "{status:#?}");
    }
    let server = |text: &str| text.lines().find(|l| l.contains("server: ")).map(str::to_owned);
    let server_before = server(&std::fs::read_to_string(&kubeconfig).unwrap());

    let ns = Namespace::new("local-cluster");
    kubectl(&["create", "configmap", "survivor", "-n", &ns.0, "--from-literal=k=v"]).success();
    let restart = local_cluster_with(&["restart", "apiserver"], &[]).success();
    assert!(restart.stderr.contains("kube-apiserver restarted"), "{restart:#?}");
    assert_eq!(server(&std::fs::read_to_string(&kubeconfig).unwrap()), server_before, "same port");
    let data = kubectl(&["get", "configmap", "survivor", "-n", &ns.0, "-o=jsonpath={.data.k}"]).success();
    assert_eq!(data.stdout, "v", "same data");
}

#[test]
fn a_failed_start_shows_the_log_and_stops_what_it_started() {
    let _cluster = crate::support::shared();
    cluster(); // only to be sure the binaries exist
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("broken");
    let state = state.to_str().unwrap();
    let envs = [("SAMPLECTL_CLUSTER_DIR", state), ("SAMPLECTL_APISERVER_ARGS", "--no-such-flag")];
    let run = local_cluster_with(&["up", "--no-build"], &envs);
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(run.stderr.contains("kube-apiserver exited during start-up"), "{run:#?}");
    assert!(run.stderr.contains("unknown flag: --no-such-flag"), "the log tail is shown: {run:#?}");
    // etcd had started; it must not be left behind.
    let status = local_cluster_with(&["status"], &[("SAMPLECTL_CLUSTER_DIR", state)]);
    assert_eq!(status.code, 1, "{status:#?}");
    assert!(status.stdout.contains("etcd                      stopped"), "{status:#?}");
    local_cluster_with(&["down"], &[("SAMPLECTL_CLUSTER_DIR", state)]).success();
    assert!(!std::path::Path::new(state).exists());
}
