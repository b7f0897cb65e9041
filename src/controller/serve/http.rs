//! The one loop under every port samplectl listens on (probes, `/metrics`, shell-operator's admission
//! and conversion webhooks), with the bounds the API server keeps on its own endpoints, so that a slow,
//! silent or hostile client costs one connection's worth and holds up no other:
//!
//! - each connection is handled on a task of its own, its TLS handshake included, within
//!   `HANDSHAKE_TIMEOUT`; the accept loop never waits on a client;
//! - a request's headers must arrive within `HEADER_READ_TIMEOUT` (the API server's
//!   `ReadHeaderTimeout`), which also ends a kept-alive connection left idle that long;
//! - a request is answered within `REQUEST_TIMEOUT`, its body read included, or gets a 503 (the API
//!   server waits 30 s at most for a webhook: an answer after that reaches nobody);
//! - at most `--max-connections` (2,048 by default, `crate::limits`) are open at once; past it a new
//!   connection is closed at once, rather than queued in the kernel's backlog behind the others.
//!
//! Body limits belong to each route (`DefaultBodyLimit`), sized from what its callers send.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::response::IntoResponse;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(32);
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(34);

/// Serves `app` on `listener` (over TLS with `tls`) until `stop` completes; connections already open
/// finish what they are doing, each within its bounds.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    app: Router,
    stop: impl Future<Output = ()> + Send,
) {
    serve_at_most(crate::limits::get().max_connections, listener, tls, app, stop).await
}

async fn serve_at_most(
    most: usize,
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    app: Router,
    stop: impl Future<Output = ()> + Send,
) {
    let tls = tls.map(TlsAcceptor::from);
    let open = Arc::new(Semaphore::new(most));
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            () = &mut stop => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) => {
                // Out of descriptors, most likely: wait a little rather than spin.
                tracing::debug!("accept failed: {err}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            tracing::debug!("{peer}: closed at once, {most} connections are open");
            continue;
        };
        let (tls, app) = (tls.clone(), app.clone());
        tokio::spawn(async move {
            let _permit = permit;
            connection(stream, tls, app).await;
        });
    }
}

async fn connection(stream: TcpStream, tls: Option<TlsAcceptor>, app: Router) {
    let _ = stream.set_nodelay(true);
    match tls {
        None => http1(TokioIo::new(stream), app).await,
        Some(acceptor) => match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
            Ok(Ok(tls)) => http1(TokioIo::new(tls), app).await,
            Ok(Err(err)) => tracing::debug!("TLS handshake failed: {err}"),
            Err(_) => tracing::debug!("TLS handshake did not finish within {HANDSHAKE_TIMEOUT:?}"),
        },
    }
}

async fn http1<I>(io: I, app: Router)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
        let app = app.clone();
        async move {
            let answer = tokio::time::timeout(REQUEST_TIMEOUT, app.oneshot(request.map(axum::body::Body::new))).await;
            Ok::<_, std::convert::Infallible>(match answer {
                Ok(Ok(response)) => response,
                Ok(Err(never)) => match never {},
                Err(_) => {
                    (hyper::StatusCode::SERVICE_UNAVAILABLE, "the request was not answered in time").into_response()
                }
            })
        }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(io, service)
        .await;
    if let Err(err) = served {
        tracing::debug!("connection ended: {err}");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A TLS server on a loopback port, and a client config that trusts it.
    async fn tls_server() -> (std::net::SocketAddr, Arc<rustls::ClientConfig>) {
        let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (crt, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        std::fs::write(&crt, made.cert.pem()).unwrap();
        std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
        let server = crate::controller::serve::tls::from_files(&crt, &key, &[]).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/healthz", get(|| async { "ok" }));
        tokio::spawn(serve(listener, Some(server), app, std::future::pending()));
        let mut roots = rustls::RootCertStore::empty();
        roots.add(made.cert.der().clone()).unwrap();
        let client = rustls::ClientConfig::builder_with_provider(crate::certificates::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        (addr, Arc::new(client))
    }

    async fn get_healthz(addr: std::net::SocketAddr, client: Arc<rustls::ClientConfig>) -> String {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut tls = tokio_rustls::TlsConnector::from(client).connect(name, tcp).await.unwrap();
        tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut answer = String::new();
        let _ = tls.read_to_string(&mut answer).await;
        answer
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn silent_connections_hold_up_no_other() {
        let (addr, client) = tls_server().await;
        // Connections that never start their handshake, as a neighbouring pod could open them. Before,
        // each held the accept loop for its whole handshake timeout, one after another.
        let mut silent = Vec::new();
        for _ in 0..50 {
            silent.push(TcpStream::connect(addr).await.unwrap());
        }
        let started = Instant::now();
        let answer = get_healthz(addr, client).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(started.elapsed() < HANDSHAKE_TIMEOUT, "answered before any silent handshake timed out");
        drop(silent);
    }

    /// Past the cap a new connection is closed at once; once one of those open goes, a new one is served.
    #[tokio::test]
    async fn past_the_cap_a_connection_is_closed_at_once() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/healthz", get(|| async { "ok" }));
        tokio::spawn(serve_at_most(2, listener, None, app, std::future::pending()));
        let held = [TcpStream::connect(addr).await.unwrap(), TcpStream::connect(addr).await.unwrap()];
        let ask = || async move {
            let mut tcp = TcpStream::connect(addr).await.unwrap();
            let _ = tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
            let mut answer = String::new();
            let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_string(&mut answer)).await;
            answer
        };
        // The two held may not be accepted yet when the third comes: it is refused once they are.
        let mut refused = false;
        for _ in 0..50 {
            if ask().await.is_empty() {
                refused = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(refused, "a third connection closed without an answer");
        drop(held);
        let mut answer = String::new();
        for _ in 0..50 {
            answer = ask().await;
            if answer.starts_with("HTTP/1.1 200") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(answer.starts_with("HTTP/1.1 200"), "served once one went: {answer:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_is_closed_at_its_handshake_deadline() {
        let (addr, _client) = tls_server().await;
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(HANDSHAKE_TIMEOUT * 2, silent.read(&mut byte)).await;
        assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "closed by the server: {read:?}");
    }
}
