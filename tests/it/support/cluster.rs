//! The local cluster: started once per test run (never the user's kubeconfig), shared by the tests that
//! only read and write in namespaces of their own, and held alone by the tests that restart it, delete the
//! Sample CRD or count cluster-wide requests. Also kubeconfig variants for tests of who may do what, and
//! etcd reached straight past the API server.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use serde_json::Value;

use super::process::{Run, kubectl};

pub struct Cluster {
    pub kubeconfig: PathBuf,
}

pub(super) fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub(super) fn local_cluster_script() -> PathBuf {
    repo().join("scripts/local-cluster")
}

/// Starts the local cluster if it is not running, once per test run. Never builds it: building takes
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

/// `scripts/local-cluster ARGS` with extra environment, as it ran.
pub fn local_cluster_with(args: &[&str], envs: &[(&str, &str)]) -> Run {
    Run::from(
        Command::new(local_cluster_script())
            .args(args)
            .envs(envs.iter().copied())
            .output()
            .expect("run scripts/local-cluster"),
    )
}

/// `scripts/local-cluster ARGS` (`restart apiserver`, `restart etcd`), which must succeed.
#[track_caller]
pub fn local_cluster(args: &[&str]) -> Run {
    let run = local_cluster_with(args, &[]);
    assert_eq!(run.code, 0, "scripts/local-cluster {args:?}:\n{run:#?}");
    run
}

/// Tests run side by side in one binary. Most share the cluster; the few that restart it, delete the
/// Sample CRD or count requests across the whole cluster hold it alone. std's RwLock lets a waiting
/// writer in before new readers, so an exclusive test waits only for the tests already running.
static CLUSTER_LOCK: RwLock<()> = RwLock::new(());

thread_local! {
    /// Whether this test thread holds the cluster, so that a test that forgot to is told so.
    static HOLDS: Cell<bool> = const { Cell::new(false) };
}

/// The cluster shared with other tests, for as long as this lives: take it first in every test that
/// uses the cluster, once.
pub struct Shared(#[allow(dead_code)] RwLockReadGuard<'static, ()>);

/// The cluster alone, for as long as this lives.
pub struct Exclusive(#[allow(dead_code)] RwLockWriteGuard<'static, ()>);

pub fn shared() -> Shared {
    cluster();
    let guard = CLUSTER_LOCK.read().unwrap_or_else(|e| e.into_inner());
    HOLDS.set(true);
    Shared(guard)
}

pub fn exclusive() -> Exclusive {
    cluster();
    let guard = CLUSTER_LOCK.write().unwrap_or_else(|e| e.into_inner());
    HOLDS.set(true);
    Exclusive(guard)
}

impl Drop for Shared {
    fn drop(&mut self) {
        HOLDS.set(false);
    }
}

impl Drop for Exclusive {
    fn drop(&mut self) {
        HOLDS.set(false);
    }
}

/// A namespace of the test's own, deleted (without waiting) when the test ends.
pub struct Namespace(pub String);

impl Namespace {
    #[track_caller]
    pub fn new(prefix: &str) -> Self {
        assert!(HOLDS.get(), "take `support::shared()` (or `exclusive()`) at the start of the test first");
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let name = format!("{prefix}-{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
        kubectl(&["create", "namespace", &name]).success();
        Namespace(name)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = kubectl(&["delete", "namespace", &self.0, "--wait=false"]);
    }
}

/// A kubeconfig whose server refuses every connection (port 1 on this machine), in `dir`.
pub fn refusing_kubeconfig(dir: &Path) -> PathBuf {
    let path = dir.join("refusing.kubeconfig");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n\
         contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: x}}]\n\
         current-context: c\n",
    )
    .unwrap();
    path
}

/// Writes a copy of the cluster's kubeconfig with `edit` applied to its text, for tests of bad configs.
pub fn kubeconfig_variant(dir: &Path, name: &str, edit: impl Fn(&str) -> String) -> PathBuf {
    let text = std::fs::read_to_string(&cluster().kubeconfig).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, edit(&text)).unwrap();
    path
}

/// A kubeconfig for a user the cluster knows only by a client certificate signed by its CA, with no
/// RBAC bindings at all: every request but discovery is Forbidden.
pub fn user_kubeconfig(dir: &Path, user: &str) -> PathBuf {
    cert_kubeconfig(dir, user, Signer::ClusterCa, 1)
}

/// Who signs a test client certificate.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Signer {
    ClusterCa,
    /// A CA the API server has never heard of.
    ForeignCa,
}

/// A kubeconfig whose client certificate for `user` is signed by `signer` and valid for `days` (a
/// negative number makes it expired).
pub fn cert_kubeconfig(dir: &Path, user: &str, signer: Signer, days: i32) -> PathBuf {
    let pki = cluster().kubeconfig.parent().unwrap().join("pki");
    let path = |name: &str| dir.join(name).to_str().unwrap().to_owned();
    let (key, csr, crt, ext) = (path("user.key"), path("user.csr"), path("user.crt"), path("client.ext"));
    // The extensions make it an X.509 v3 certificate; rustls rejects the v1 certificates openssl makes without.
    std::fs::write(
        &ext,
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n",
    )
    .unwrap();
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl").args(args).output().expect("run openssl");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let (ca, ca_key) = match signer {
        Signer::ClusterCa => (pki.join("ca.crt").display().to_string(), pki.join("ca.key").display().to_string()),
        Signer::ForeignCa => {
            let (ca, ca_key) = (path("foreign-ca.crt"), path("foreign-ca.key"));
            openssl(
                &["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", &ca_key, "-out", &ca, "-days", "1"]
                    .into_iter()
                    .chain(["-subj", "/CN=foreign-ca", "-addext", "basicConstraints=critical,CA:TRUE"])
                    .chain(["-addext", "keyUsage=critical,keyCertSign"])
                    .collect::<Vec<_>>(),
            );
            (ca, ca_key)
        }
    };
    let serial = path("ca.srl");
    let subject = format!("/CN={user}");
    let days = days.to_string();
    openssl(&["req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", &subject]);
    openssl(
        &["x509", "-req", "-in", &csr, "-CA", &ca, "-CAkey", &ca_key, "-CAcreateserial", "-CAserial", &serial]
            .into_iter()
            .chain(["-days", &days, "-extfile", &ext, "-out", &crt])
            .collect::<Vec<_>>(),
    );
    kubeconfig_variant(dir, &format!("{user}.kubeconfig"), |text| {
        let mut out = String::new();
        for line in text.lines() {
            if line.trim_start().starts_with("client-certificate:") {
                out.push_str(&format!("    client-certificate: {crt}\n"));
            } else if line.trim_start().starts_with("client-key:") {
                out.push_str(&format!("    client-key: {key}\n"));
            } else {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    })
}

/// A request to etcd's JSON gateway, straight past the API server.
fn etcd_post(path: &str, body: &str) -> Value {
    let ports = std::fs::read_to_string(cluster().kubeconfig.parent().unwrap().join("ports")).unwrap();
    let port = ports.lines().find_map(|l| l.strip_prefix("ETCD_PORT=")).expect("ETCD_PORT in the ports file");
    let out = Command::new("curl")
        .args(["-sS", "-X", "POST", &format!("http://127.0.0.1:{port}{path}"), "-d", body])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Compacts etcd at its current revision, so every older resourceVersion is gone for good.
pub fn compact_etcd() {
    // A range request (any key, base64) reports the current revision.
    let revision = etcd_post("/v3/kv/range", r#"{"key":"Zm9v"}"#)["header"]["revision"].as_str().unwrap().to_owned();
    etcd_post("/v3/kv/compaction", &format!(r#"{{"revision":"{revision}","physical":true}}"#));
}

/// Writes a key no resource lives under, moving etcd's revision on as the writes of a busy cluster's
/// other clients do: a watch resumed across an API server restart then finds its resourceVersion older
/// than the new server's watch cache, and gets 410 Gone.
pub fn bump_etcd_revision() {
    // Key "/samplectl-tests/bump", value "x", both base64.
    etcd_post("/v3/kv/put", r#"{"key":"L3NhbXBsZWN0bC10ZXN0cy9idW1w","value":"eA=="}"#);
}

/// A copy of the cluster's kubeconfig whose user authenticates with `token` instead of the admin
/// certificate.
pub fn token_kubeconfig(dir: &Path, name: &str, token: &str) -> PathBuf {
    kubeconfig_variant(dir, name, |text| {
        let mut out = String::new();
        for line in text.lines() {
            match line {
                "  user:" => out.push_str(&format!("  user:\n    token: {token}\n")),
                l if l.contains("client-certificate:") || l.contains("client-key:") => {}
                l => out.push_str(&format!("{l}\n")),
            }
        }
        out
    })
}

/// The sum of a metric from the API server's /metrics over the series `wanted` picks by their text (such
/// as those containing `verb="LIST"`): what the server itself counted, whichever client caused it.
pub fn apiserver_metric(name: &str, wanted: impl Fn(&str) -> bool) -> f64 {
    let metrics = kubectl(&["get", "--raw", "/metrics"]).success().stdout;
    let prefix = format!("{name}{{");
    metrics
        .lines()
        .filter(|l| l.starts_with(&prefix) && wanted(l))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
