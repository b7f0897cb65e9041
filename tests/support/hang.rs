//! A TCP proxy in front of the API server that hangs chosen requests: any connection whose request
//! bytes contain a pattern stops forwarding in both directions and is held open, as a half-open
//! connection or a wedged server would. The API server speaks TLS, so the proxy sits behind `kubectl
//! proxy` (plain HTTP, the cluster's credentials), where request lines and bodies can be read.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Background, cluster, free_port};

pub struct HangingProxy {
    pub port: u16,
    patterns: Arc<Mutex<Vec<Vec<u8>>>>,
    /// Connections hung so far.
    pub hung: Arc<std::sync::atomic::AtomicUsize>,
    _kubectl_proxy: std::process::Child,
    stop: Arc<AtomicBool>,
}

impl HangingProxy {
    pub fn start() -> Self {
        let upstream = free_port();
        let kubectl_proxy = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/local-cluster"))
            .args(["kubectl", "proxy", &format!("--port={upstream}"), "--address=127.0.0.1"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start kubectl proxy");
        super::eventually(Duration::from_secs(20), "kubectl proxy is listening", || {
            TcpStream::connect(("127.0.0.1", upstream)).map(drop).map_err(|e| e.to_string())
        });
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let patterns: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let hung = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, h, s) = (patterns.clone(), hung.clone(), stop.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else { continue };
                let frozen = Arc::new(AtomicBool::new(false));
                let (client2, server2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (p, h, f) = (p.clone(), h.clone(), frozen.clone());
                std::thread::spawn(move || pump(client, server, Some((p, h)), f));
                std::thread::spawn(move || pump(server2, client2, None, frozen));
            }
        });
        HangingProxy { port, patterns, hung, _kubectl_proxy: kubectl_proxy, stop }
    }

    /// From now on, hang every connection whose requests contain `pattern`.
    pub fn hang_requests_containing(&self, pattern: &str) {
        self.patterns.lock().unwrap().push(pattern.as_bytes().to_vec());
    }

    /// A kubeconfig that reaches the cluster through this proxy.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("through-proxy.kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster:\n    server: http://127.0.0.1:{}\n\
             contexts:\n- name: proxy\n  context:\n    cluster: proxy\n    user: nobody\n    namespace: default\n\
             users:\n- name: nobody\n  user: {{}}\ncurrent-context: proxy\n",
            self.port
        );
        std::fs::write(&path, text).unwrap();
        cluster();
        path
    }

    /// samplectl through this proxy, in the background.
    pub fn samplectl(&self, dir: &Path, args: &[&str]) -> Background {
        let kubeconfig = self.kubeconfig(dir);
        let mut all = vec!["--kubeconfig", kubeconfig.to_str().unwrap()];
        all.extend_from_slice(args);
        Background::start_bare(&all)
    }
}

impl Drop for HangingProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self._kubectl_proxy.kill();
        let _ = self._kubectl_proxy.wait();
    }
}

/// Copies `from` to `to` until either closes; once the connection is frozen, reads go on (so the sender
/// never sees an error) but nothing more is forwarded. `watch` looks for the patterns in what passes.
type Watch = (Arc<Mutex<Vec<Vec<u8>>>>, Arc<std::sync::atomic::AtomicUsize>);

fn pump(mut from: TcpStream, mut to: TcpStream, watch: Option<Watch>, frozen: Arc<AtomicBool>) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some((patterns, hung)) = &watch
            && !frozen.load(Ordering::Relaxed)
            && patterns.lock().unwrap().iter().any(|p| buf[..n].windows(p.len()).any(|w| w == p.as_slice()))
        {
            frozen.store(true, Ordering::Relaxed);
            hung.fetch_add(1, Ordering::Relaxed);
        }
        if frozen.load(Ordering::Relaxed) {
            continue;
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    if !frozen.load(Ordering::Relaxed) {
        let _ = to.shutdown(std::net::Shutdown::Write);
    }
}
