//! A TCP proxy in front of the API server that hangs chosen requests: any connection whose request
//! bytes contain a pattern stops forwarding in both directions and is held open, as a half-open
//! connection or a wedged server would. The API server speaks TLS, so the proxy sits behind `kubectl
//! proxy` (plain HTTP, the cluster's credentials), where request lines and bodies can be read.
//!
//! It can also end a watch the way the API server does when the watch's resourceVersion has been
//! compacted away (a 410 Expired ERROR event), so that one watcher relists while the others go on, and
//! refuse chosen requests as invalid (422), as an API server without a feature refuses its parameters.
//!
//! And it can cut a client off and let it through later (`hold_everything_after`): from the first
//! request containing a pattern, nothing more reaches the server, on any connection, until released;
//! then every request held goes on, however long its sender has given up on it (or died), as requests
//! a network partition or a frozen process held come back.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Background, cluster, free_port};

pub struct HangingProxy {
    pub port: u16,
    patterns: Arc<Mutex<Vec<Vec<u8>>>>,
    expiries: Arc<Mutex<Vec<Expiry>>>,
    refusals: Arc<Mutex<Vec<Vec<u8>>>>,
    /// Requests refused so far.
    pub refused: Arc<std::sync::atomic::AtomicUsize>,
    connections: Arc<Mutex<Vec<Connection>>>,
    /// Connections hung so far.
    pub hung: Arc<std::sync::atomic::AtomicUsize>,
    /// Every write request forwarded (not hung), with when it passed and its request line.
    pub writes: Arc<Mutex<Vec<(Instant, String)>>>,
    hold: Arc<Hold>,
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
        let expiries: Arc<Mutex<Vec<Expiry>>> = Arc::default();
        let refusals: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (rp, rc) = (refusals.clone(), refused.clone());
        let connections: Arc<Mutex<Vec<Connection>>> = Arc::default();
        let hung = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let writes: Arc<Mutex<Vec<(Instant, String)>>> = Arc::default();
        let (p, e, c, h, s) = (patterns.clone(), expiries.clone(), connections.clone(), hung.clone(), stop.clone());
        let w = writes.clone();
        let hold: Arc<Hold> = Arc::default();
        let hd = hold.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else { continue };
                let frozen = Arc::new(AtomicBool::new(false));
                let last_request = Arc::new(Mutex::new(Vec::new()));
                let open = Arc::new(AtomicBool::new(true));
                c.lock().unwrap().retain(|c| c.open.load(Ordering::Relaxed));
                c.lock().unwrap().push(Connection {
                    client: client.try_clone().unwrap(),
                    server: server.try_clone().unwrap(),
                    last_request: last_request.clone(),
                    open: open.clone(),
                });
                let (client2, server2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let requests = Requests {
                    patterns: p.clone(),
                    expiries: e.clone(),
                    refusals: rp.clone(),
                    refused: rc.clone(),
                    hung: h.clone(),
                    last_request,
                    writes: w.clone(),
                    hold: hd.clone(),
                };
                let f = frozen.clone();
                let open2 = open.clone();
                std::thread::spawn(move || {
                    pump(client, server, Some(requests), f);
                    open.store(false, Ordering::Relaxed);
                });
                std::thread::spawn(move || {
                    pump(server2, client2, None, frozen);
                    open2.store(false, Ordering::Relaxed);
                });
            }
        });
        HangingProxy {
            port,
            patterns,
            expiries,
            refusals,
            refused,
            connections,
            hung,
            writes,
            hold,
            _kubectl_proxy: kubectl_proxy,
            stop,
        }
    }

    /// Holds the next request that contains every one of `parts` until the returned `Expiry` is released,
    /// then answers it as the API server answers a watch whose resourceVersion is too old: a 410 Expired
    /// ERROR event, and the end of the stream. Only that one request is held; the watcher's relist after
    /// it goes through.
    pub fn expire_next_request_containing(&self, parts: &[&str]) -> Expiry {
        let expiry = Expiry {
            parts: parts.iter().map(|p| p.as_bytes().to_vec()).collect(),
            released: Arc::default(),
            held: Arc::default(),
        };
        self.expiries.lock().unwrap().push(expiry.clone());
        expiry
    }

    /// How many open connections have a latest request that contains every one of `parts`. A connection
    /// idle in the client's pool still counts: its latest request may be a watch the server ended early
    /// (under load it can refuse a new watch with "Too large resource version"), which the client then
    /// opened again on another connection.
    pub fn connections_containing(&self, parts: &[&str]) -> usize {
        let connections = self.connections.lock().unwrap();
        connections
            .iter()
            .filter(|c| c.open.load(Ordering::Relaxed))
            .filter(|c| parts.iter().all(|p| contains(&c.last_request.lock().unwrap(), p.as_bytes())))
            .count()
    }

    /// Closes every open connection whose latest request contains every one of `parts`, as a network
    /// blip would: the client sees its stream end. Closed connections are forgotten on the way.
    pub fn cut_connections_containing(&self, parts: &[&str]) -> usize {
        let mut cut = 0;
        self.connections.lock().unwrap().retain(|c| {
            if !c.open.load(Ordering::Relaxed) {
                return false;
            }
            let request = c.last_request.lock().unwrap();
            if !parts.iter().all(|p| contains(&request, p.as_bytes())) {
                return true;
            }
            let _ = c.client.shutdown(std::net::Shutdown::Both);
            let _ = c.server.shutdown(std::net::Shutdown::Both);
            cut += 1;
            false
        });
        cut
    }

    /// From now on, answer every request that contains `pattern` with 422 Invalid, without passing it on.
    pub fn refuse_requests_containing(&self, pattern: &str) {
        self.refusals.lock().unwrap().push(pattern.as_bytes().to_vec());
    }

    /// From now on, hang every connection whose requests contain `pattern`.
    pub fn hang_requests_containing(&self, pattern: &str) {
        self.patterns.lock().unwrap().push(pattern.as_bytes().to_vec());
    }

    /// From now on, let new requests containing `pattern` through; connections already hung stay hung.
    pub fn stop_hanging(&self, pattern: &str) {
        self.patterns.lock().unwrap().retain(|p| p != pattern.as_bytes());
    }

    /// From the first request containing `pattern` on, holds every request on every connection (that
    /// one included) until `release_held`; returns at once.
    pub fn hold_everything_after(&self, pattern: &str) {
        *self.hold.trigger.lock().unwrap() = Some(pattern.as_bytes().to_vec());
    }

    /// Whether requests are being held.
    pub fn holding(&self) -> bool {
        self.hold.holding.load(Ordering::Relaxed)
    }

    /// Lets every held request go on to the server, and stops holding.
    pub fn release_held(&self) {
        self.hold.holding.store(false, Ordering::Relaxed);
        *self.hold.trigger.lock().unwrap() = None;
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

/// A request held by `expire_next_request_containing`.
#[derive(Clone)]
pub struct Expiry {
    parts: Vec<Vec<u8>>,
    released: Arc<AtomicBool>,
    held: Arc<AtomicBool>,
}

impl Expiry {
    /// Whether the request has arrived and is being held.
    pub fn held(&self) -> bool {
        self.held.load(Ordering::Relaxed)
    }

    /// Answers the held request (or the next one, if it has not come yet) with 410 Expired.
    pub fn release(&self) {
        self.released.store(true, Ordering::Relaxed);
    }
}

/// `hold_everything_after`'s state, shared by every connection.
#[derive(Default)]
struct Hold {
    trigger: Mutex<Option<Vec<u8>>>,
    holding: AtomicBool,
}

struct Connection {
    client: TcpStream,
    server: TcpStream,
    last_request: Arc<Mutex<Vec<u8>>>,
    /// Until either direction's pump ends.
    open: Arc<AtomicBool>,
}

/// What the client-to-server pump looks for in the requests that pass.
struct Requests {
    patterns: Arc<Mutex<Vec<Vec<u8>>>>,
    expiries: Arc<Mutex<Vec<Expiry>>>,
    refusals: Arc<Mutex<Vec<Vec<u8>>>>,
    refused: Arc<std::sync::atomic::AtomicUsize>,
    hung: Arc<std::sync::atomic::AtomicUsize>,
    last_request: Arc<Mutex<Vec<u8>>>,
    writes: Arc<Mutex<Vec<(Instant, String)>>>,
    hold: Arc<Hold>,
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

const INVALID: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"refused by the test proxy","reason":"Invalid","code":422}"#;

const EXPIRED: &str = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (2)","reason":"Expired","code":410}}"#;

/// Copies `from` to `to` until either closes; once the connection is frozen, reads go on (so the sender
/// never sees an error) but nothing more is forwarded. `requests` looks for the patterns in what passes.
fn pump(mut from: TcpStream, mut to: TcpStream, requests: Option<Requests>, frozen: Arc<AtomicBool>) {
    let mut buf = [0u8; 16 * 1024];
    let mut held = false;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(r) = &requests
            && r.refusals.lock().unwrap().iter().any(|p| contains(&buf[..n], p))
        {
            r.refused.fetch_add(1, Ordering::Relaxed);
            let answer = format!(
                "HTTP/1.1 422 Unprocessable Entity\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{INVALID}",
                INVALID.len()
            );
            if from.write_all(answer.as_bytes()).is_err() {
                break;
            }
            continue;
        }
        if let Some(r) = &requests {
            if r.hold.trigger.lock().unwrap().as_ref().is_some_and(|p| contains(&buf[..n], p)) {
                r.hold.holding.store(true, Ordering::Relaxed);
            }
            // Held here, bytes and all, until released: the sender's later bytes wait in the socket.
            while r.hold.holding.load(Ordering::Relaxed) {
                held = true;
                std::thread::sleep(Duration::from_millis(10));
            }
            *r.last_request.lock().unwrap() = buf[..n].to_vec();
            let expiry = {
                let mut expiries = r.expiries.lock().unwrap();
                let found = expiries.iter().position(|e| e.parts.iter().all(|p| contains(&buf[..n], p)));
                found.map(|i| expiries.remove(i))
            };
            if let Some(expiry) = expiry {
                expiry.held.store(true, Ordering::Relaxed);
                while !expiry.released.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(10));
                }
                let _ = from.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{EXPIRED}\n"
                    )
                    .as_bytes(),
                );
                let _ = from.shutdown(std::net::Shutdown::Both);
                let _ = to.shutdown(std::net::Shutdown::Both);
                break;
            }
        }
        if let Some(r) = &requests
            && !frozen.load(Ordering::Relaxed)
            && r.patterns.lock().unwrap().iter().any(|p| contains(&buf[..n], p))
        {
            frozen.store(true, Ordering::Relaxed);
            r.hung.fetch_add(1, Ordering::Relaxed);
        }
        if frozen.load(Ordering::Relaxed) {
            continue;
        }
        if let Some(r) = &requests
            && [&b"POST "[..], b"PUT ", b"PATCH ", b"DELETE "].iter().any(|m| buf[..n].starts_with(m))
        {
            let line = buf[..n].split(|b| *b == b'\r').next().unwrap_or_default();
            r.writes.lock().unwrap().push((Instant::now(), String::from_utf8_lossy(line).into_owned()));
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    // A held request's sender may be gone by the time it goes on: the server still gets to answer it
    // (an API server cancels a request whose connection closes), as it would a frozen sender's.
    if held {
        std::thread::sleep(Duration::from_secs(10));
    }
    if !frozen.load(Ordering::Relaxed) {
        let _ = to.shutdown(std::net::Shutdown::Write);
    }
}
