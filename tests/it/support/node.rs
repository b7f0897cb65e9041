//! The cluster with a real node (`scripts/local-cluster up --node`), for the tests that run samplectl
//! as its users deploy it: the image built from the Dockerfile's stages (`scripts/image`) holding the
//! samplectl these tests were built with, and the shipped manifests applied unchanged. A cluster of its
//! own (target/node-cluster), beside the shared one, started once per test run. The manifests name
//! their namespace, so the tests that apply them hold the node one at a time.

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, MutexGuard, OnceLock};

use super::cluster::{local_cluster_script, repo};
use super::process::Run;

pub struct Node {
    pub kubeconfig: PathBuf,
    _alone: MutexGuard<'static, ()>,
}

fn state() -> PathBuf {
    repo().join("target/node-cluster")
}

/// The node cluster, started and given the image once, held by this test alone while it lives.
pub fn node() -> Node {
    static STARTED: OnceLock<PathBuf> = OnceLock::new();
    static ALONE: Mutex<()> = Mutex::new(());
    let alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let kubeconfig = STARTED.get_or_init(|| {
        let up = Command::new(local_cluster_script())
            .args(["up", "--node", "--no-build"])
            .env("SAMPLECTL_CLUSTER_DIR", state())
            .output()
            .expect("run scripts/local-cluster");
        assert!(
            up.status.success(),
            "the node cluster did not start (`scripts/local-cluster build --node` builds what it needs, as root; \
             scripts/test does):\n{}",
            String::from_utf8_lossy(&up.stderr)
        );
        let image = Command::new(repo().join("scripts/image"))
            .args(["--binary", env!("CARGO_BIN_EXE_samplectl")])
            .env("SAMPLECTL_CLUSTER_DIR", state())
            .output()
            .expect("run scripts/image");
        assert!(image.status.success(), "scripts/image:\n{}", String::from_utf8_lossy(&image.stderr));
        state().join("kubeconfig")
    });
    Node { kubeconfig: kubeconfig.clone(), _alone: alone }
}

impl Node {
    /// The built kubectl against the node cluster.
    pub fn kubectl(&self, args: &[&str]) -> Run {
        let bin = Command::new(local_cluster_script()).arg("bin-dir").output().expect("scripts/local-cluster bin-dir");
        let kubectl = PathBuf::from(String::from_utf8(bin.stdout).unwrap().trim()).join("kubectl");
        Run::from(
            Command::new(kubectl)
                .arg("--kubeconfig")
                .arg(&self.kubeconfig)
                .args(args)
                .current_dir(repo())
                .output()
                .expect("run kubectl"),
        )
    }

    /// `kubectl ... -o json`, parsed.
    #[track_caller]
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.kubectl(&all).success().stdout).expect("kubectl gave JSON")
    }

    /// The API server's audit log, one JSON object a line (the writes to Samples, ConfigMaps, Leases).
    pub fn audit(&self) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(state().join("audit.log")).unwrap_or_default();
        text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect()
    }
}
