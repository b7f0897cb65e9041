//! What every integration test needs: the local cluster (started once per test binary, never the user's
//! kubeconfig), a namespace of its own, and runners for samplectl and the built kubectl as a witness.

#![allow(dead_code)] // each test file uses a different part of this module

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::Value;

pub mod hang;

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

/// The Sample resource, for tests that talk to the API server through kube directly.
pub fn sample_resource() -> kube::discovery::ApiResource {
    kube::discovery::ApiResource {
        group: "example.com".into(),
        version: "v1alpha1".into(),
        api_version: "example.com/v1alpha1".into(),
        kind: "Sample".into(),
        plural: "samples".into(),
    }
}

/// A namespace of the test's own, deleted (without waiting) when the test ends.
pub struct Namespace(pub String);

impl Namespace {
    pub fn new(prefix: &str) -> Self {
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

/// Writes a copy of the cluster's kubeconfig with `edit` applied to its text, for tests of bad configs.
pub fn kubeconfig_variant(dir: &Path, name: &str, edit: impl Fn(&str) -> String) -> PathBuf {
    let text = std::fs::read_to_string(&cluster().kubeconfig).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, edit(&text)).unwrap();
    path
}

/// samplectl against the local cluster, running in the background with stdout and stderr piped.
pub fn samplectl_spawn(args: &[&str]) -> std::process::Child {
    let kubeconfig = cluster().kubeconfig.to_str().unwrap();
    let mut all = vec!["--kubeconfig", kubeconfig];
    all.extend_from_slice(args);
    samplectl_spawn_bare(&all)
}

/// samplectl with only the arguments given, in the background with stdout and stderr piped.
pub fn samplectl_spawn_bare(args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_samplectl"))
        .args(args)
        .env_remove("KUBECONFIG")
        .env_remove("RUST_LOG")
        .env("HOME", empty_home())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start samplectl")
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

/// The columns of a kubectl-style table: header cells and each row's cells, split where two or more
/// spaces separate them (single spaces occur inside headers such as TEST STRING).
pub fn table(text: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let split = |line: &str| -> Vec<String> {
        line.split("  ").map(str::trim).filter(|c| !c.is_empty()).map(str::to_owned).collect()
    };
    let mut lines = text.lines();
    let header = lines.next().map(split).unwrap_or_default();
    (header, lines.map(split).collect())
}

/// A running `samplectl watch` whose stdout lines arrive on a channel.
pub struct Watcher {
    pub child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Watcher {
    pub fn start(args: &[&str]) -> Self {
        let mut child = samplectl_spawn(args);
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Watcher { child, lines }
    }

    /// The next line, or a panic with what the watcher said on stderr if none comes in time.
    #[track_caller]
    pub fn next_line(&mut self, within: std::time::Duration) -> String {
        match self.lines.recv_timeout(within) {
            Ok(line) => line,
            Err(err) => {
                let _ = self.child.kill();
                let mut stderr = String::new();
                use std::io::Read;
                let _ = self.child.stderr.take().unwrap().read_to_string(&mut stderr);
                panic!("no line from samplectl watch ({err}); its stderr:\n{stderr}");
            }
        }
    }

    /// Lines that arrive within `within`, without waiting for more.
    pub fn lines_within(&mut self, within: std::time::Duration) -> Vec<String> {
        let deadline = std::time::Instant::now() + within;
        let mut lines = Vec::new();
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => lines.push(line),
                Err(_) => break,
            }
        }
        lines
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill").arg(format!("-{signal}")).arg(self.child.id().to_string()).status().unwrap();
        assert!(status.success());
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Watcher {
    /// Ends the watcher and returns what it logged.
    pub fn stop_and_stderr(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut stderr = String::new();
        use std::io::Read;
        let _ = self.child.stderr.take().unwrap().read_to_string(&mut stderr);
        stderr
    }
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

/// kubectl's `-o json` output, parsed.
pub fn kubectl_json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let run = kubectl(&all).success();
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}

/// Polls `check` every 200 ms until it returns `Some`, or panics after `within` with the last state.
#[track_caller]
pub fn eventually<T>(within: std::time::Duration, what: &str, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = std::time::Instant::now() + within;
    loop {
        match check() {
            Ok(value) => return value,
            Err(last) if std::time::Instant::now() >= deadline => panic!("{what}: not true after {within:?}; {last}"),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(200)),
        }
    }
}

/// A `samplectl` process running in the background (a controller), stopped when dropped. Its stderr is
/// drained as it comes, so a chatty controller never blocks on a full pipe.
pub struct Background {
    pub child: std::process::Child,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Background {
    pub fn start(args: &[&str]) -> Self {
        Self::of(samplectl_spawn(args))
    }

    /// samplectl with only the arguments given (its own --kubeconfig among them).
    pub fn start_bare(args: &[&str]) -> Self {
        Self::of(samplectl_spawn_bare(args))
    }

    fn of(mut child: std::process::Child) -> Self {
        drop(child.stdout.take());
        let pipe = child.stderr.take().unwrap();
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = stderr.clone();
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut text = sink.lock().unwrap();
                text.push_str(&line);
                text.push('\n');
            }
        });
        Background { child, stderr, reader: Some(reader) }
    }

    /// What it has logged so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Sends a signal and waits up to `within` for the exit: the exit code (None if it had to be killed)
    /// and everything it logged.
    pub fn stop(mut self, signal: &str, within: std::time::Duration) -> (Option<i32>, String) {
        // It may have exited already (a leader that lost its Lease does).
        let _ = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .stderr(std::process::Stdio::null())
            .status();
        let deadline = std::time::Instant::now() + within;
        let code = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status.code();
            }
            if std::time::Instant::now() >= deadline {
                let _ = self.child.kill();
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        (code, self.stderr())
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
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

/// A plain HTTP GET on loopback: the status code and the body (enough for probes and /metrics).
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Some((code, body))
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
