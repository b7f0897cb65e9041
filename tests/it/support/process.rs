//! Running things: samplectl (in the foreground, or in the background as a controller or a watch),
//! the built kubectl as the independent witness, and waiting for a condition without a fixed sleep.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

use super::cluster::{cluster, local_cluster_script};

/// An empty HOME for child processes, so nothing can fall back to the user's ~/.kube/config.
fn empty_home() -> &'static Path {
    static HOME: OnceLock<tempfile::TempDir> = OnceLock::new();
    HOME.get_or_init(|| tempfile::tempdir().unwrap()).path()
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

/// The built kubectl run straight, with only `args` (no `--kubeconfig` in front, since kubectl takes no
/// flags before a plugin's name) and `envs` added: for `kubectl samplectl ...` and kubectl's `__complete`.
pub fn kubectl_plain(args: &[&str], envs: &[(&str, &std::ffi::OsStr)]) -> Run {
    let bin_dir = local_cluster_with_cache(&["bin-dir"]);
    Run::from(
        Command::new(Path::new(bin_dir.trim()).join("kubectl"))
            .args(args)
            .env_remove("KUBECONFIG")
            .env("HOME", empty_home())
            .envs(envs.iter().copied())
            .output()
            .expect("run kubectl"),
    )
}

fn local_cluster_with_cache(args: &[&str]) -> String {
    let out = Command::new(local_cluster_script())
        .args(args)
        .env("XDG_CACHE_HOME", binary_cache())
        .output()
        .expect("run scripts/local-cluster");
    assert!(out.status.success(), "scripts/local-cluster {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The empty HOME every child process gets, for tests that run a program of their own (bash).
pub fn home_for_children() -> &'static Path {
    empty_home()
}

fn binary_cache() -> PathBuf {
    match std::env::var_os("XDG_CACHE_HOME") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache"),
    }
}

/// samplectl against the local cluster with its stdout (and stderr) on a pseudo-terminal `columns` wide,
/// as a person at a terminal runs it (through util-linux `script`): what the terminal was sent, line ends
/// as `\n`.
pub fn samplectl_on_terminal(columns: u16, args: &[&str]) -> String {
    let quote = |arg: &str| format!("'{}'", arg.replace('\'', r"'\''"));
    let kubeconfig = cluster().kubeconfig.to_str().unwrap().to_owned();
    let command: Vec<String> = [env!("CARGO_BIN_EXE_samplectl"), "--kubeconfig", &kubeconfig]
        .into_iter()
        .chain(args.iter().copied())
        .map(quote)
        .collect();
    let out = Command::new("script")
        .args(["-qec", &format!("stty cols {columns} rows 50; exec {}", command.join(" ")), "/dev/null"])
        .env_remove("KUBECONFIG")
        .env("HOME", empty_home())
        .env("NO_COLOR", "1")
        .output()
        .expect("run script");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n")
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
    spawn_piped(Command::new(env!("CARGO_BIN_EXE_samplectl")).args(args))
}

/// `command` started as samplectl is in every test: no KUBECONFIG or RUST_LOG of the user's, an empty
/// HOME, stdout and stderr piped.
fn spawn_piped(command: &mut Command) -> std::process::Child {
    command
        .env_remove("KUBECONFIG")
        .env_remove("RUST_LOG")
        .env("HOME", empty_home())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start samplectl")
}

/// A running `samplectl watch` (or `kubectl get -w`) whose stdout lines arrive on a channel.
pub struct Watcher {
    pub child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Watcher {
    pub fn start(args: &[&str]) -> Self {
        Self::of(samplectl_spawn(args))
    }

    /// The built kubectl against the local cluster, in the background: the witness for a watch.
    pub fn kubectl(args: &[&str]) -> Self {
        cluster();
        let child = Command::new(local_cluster_script())
            .arg("kubectl")
            .args(args)
            .env("XDG_CACHE_HOME", binary_cache())
            .env("HOME", empty_home())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start kubectl");
        Self::of(child)
    }

    fn of(mut child: std::process::Child) -> Self {
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
                panic!("no line from the watch ({err}); its stderr:\n{stderr}");
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

    /// samplectl as the first process of a PID namespace of its own (as in a container with no init),
    /// through util-linux's `unshare`; `child` is unshare, whose one child is samplectl.
    pub fn start_as_pid_one(args: &[&str]) -> Self {
        let kubeconfig = cluster().kubeconfig.to_str().unwrap();
        let mut command = Command::new("unshare");
        command.args(["--pid", "--fork", "--kill-child", env!("CARGO_BIN_EXE_samplectl"), "--kubeconfig", kubeconfig]);
        Self::of(spawn_piped(command.args(args)))
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
