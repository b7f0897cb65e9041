//! What every integration test needs: the local cluster (started once per test binary, never the user's
//! kubeconfig), a namespace of its own, and runners for samplectl and the built kubectl as a witness.

#![allow(dead_code)] // each test file uses a different part of this module

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

pub struct Cluster {
    pub kubeconfig: PathBuf,
}

/// An empty HOME for child processes, so nothing can fall back to the user's ~/.kube/config.
fn empty_home() -> &'static Path {
    static HOME: OnceLock<tempfile::TempDir> = OnceLock::new();
    HOME.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn local_cluster_script() -> PathBuf {
    repo().join("scripts/local-cluster")
}

/// Starts the local cluster if it is not running, once per test binary. Never builds it: building takes
/// many minutes, so a missing build fails at once and names the command that builds it.
pub fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let out = Command::new(local_cluster_script()).args(["up", "--no-build"]).output().expect("run scripts/local-cluster");
        assert!(
            out.status.success(),
            "the local cluster is not available (build it with `scripts/local-cluster build`, or run `scripts/test`):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let env = Command::new(local_cluster_script()).arg("env").output().expect("run scripts/local-cluster env");
        let line = String::from_utf8(env.stdout).unwrap();
        let path = line.trim().strip_prefix("export KUBECONFIG=").expect("env prints export KUBECONFIG=...");
        Cluster { kubeconfig: PathBuf::from(path) }
    })
}

/// A finished command with its output as text.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from(out: Output) -> Self {
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    #[track_caller]
    pub fn success(self) -> Self {
        assert_eq!(self.code, 0, "command failed:\n{self:#?}");
        self
    }
}

/// samplectl with only the arguments given: no kubeconfig flag, KUBECONFIG unset, an empty HOME. For tests
/// of configuration errors, and of what needs no cluster.
pub fn samplectl_bare(args: &[&str]) -> Run {
    Run::from(
        Command::new(env!("CARGO_BIN_EXE_samplectl"))
            .args(args)
            .env_remove("KUBECONFIG")
            .env_remove("RUST_LOG")
            .env("HOME", empty_home())
            .output()
            .expect("run samplectl"),
    )
}

/// samplectl against the local cluster.
pub fn samplectl(args: &[&str]) -> Run {
    let kubeconfig = cluster().kubeconfig.to_str().unwrap();
    let mut all = vec!["--kubeconfig", kubeconfig];
    all.extend_from_slice(args);
    samplectl_bare(&all)
}

/// The built kubectl against the local cluster: the independent witness.
pub fn kubectl(args: &[&str]) -> Run {
    cluster();
    Run::from(
        Command::new(local_cluster_script())
            .arg("kubectl")
            .args(args)
            // The binary cache is found through the real HOME; kubectl's own discovery cache goes to the empty one.
            .env("XDG_CACHE_HOME", binary_cache())
            .env("HOME", empty_home())
            .output()
            .expect("run kubectl"),
    )
}

fn binary_cache() -> PathBuf {
    match std::env::var_os("XDG_CACHE_HOME") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache"),
    }
}

/// A namespace of the test's own, deleted (without waiting) when the test ends.
pub struct Namespace(pub String);

impl Namespace {
    pub fn new(prefix: &str) -> Self {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        kubectl(&["create", "namespace", &name]).success();
        Namespace(name)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = kubectl(&["delete", "namespace", &self.0, "--wait=false"]);
    }
}

/// Writes a copy of the cluster's kubeconfig with `edit` applied to its text, for tests of bad configs.
pub fn kubeconfig_variant(dir: &Path, name: &str, edit: impl Fn(&str) -> String) -> PathBuf {
    let text = std::fs::read_to_string(&cluster().kubeconfig).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, edit(&text)).unwrap();
    path
}
