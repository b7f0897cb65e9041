//! The HTTP stack under the kube client: kube's own (`ClientBuilder::try_from`), rebuilt so that every
//! connection to the API server has TCP_NODELAY set.
//!
//! kube 5 opens its sockets with Nagle's algorithm on (kube-rs/kube#2056). A request written on a new
//! connection right after the TLS handshake's last message then waits for the server's delayed ACK, 40 ms
//! on Linux: a reaction that needed one more connection (a status write and an Event in flight beside a
//! create) took 42 ms instead of 2. Go's net package, which client-go, controller-runtime and
//! metacontroller use, turns Nagle off on every socket; so does this.
//!
//! The stack is kube's, from its public parts (`ConfigExt`) and in its order: the base URI, gzip
//! decompression, kube's retry policy when the config asks for it, authentication, the config's extra
//! headers (the User-Agent), and kube's connect, read and write timeouts. Left out: kube's tracing layer,
//! whose log target samplectl switches off anyway (`logging.rs`), and the expiry of exec-plugin client
//! certificates (`Client::valid_until`), which kube only records for its callers and nothing here reads. A
//! kubeconfig with a `proxy-url` keeps kube's own stack, which knows proxies.

use http::{Request, Response};
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder, ConfigExt, DynBody};
use tower::retry::RetryLayer;
use tower::util::BoxService;
use tower::{BoxError, ServiceBuilder, ServiceExt as _};
use tower_http::ServiceExt as _;
use tower_http::decompression::DecompressionLayer;

/// The service kube's own builder makes, so that either can be used.
pub type Stack = BoxService<Request<Body>, Response<Box<DynBody>>, BoxError>;

/// A client builder for `config`, as kube's `ClientBuilder::try_from(config)` makes one, with TCP_NODELAY.
pub fn client_builder(config: kube::Config) -> kube::Result<ClientBuilder<Stack>> {
    if config.proxy_url.is_some() {
        return ClientBuilder::try_from(config);
    }
    let mut connector = TimeoutConnector::new(config.rustls_https_connector_with_connector(tcp())?);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let client: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Builder::new(TokioExecutor::new()).build(connector);
    let gzip = DecompressionLayer::new().no_br().no_deflate().no_zstd().gzip(!config.disable_compression);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .layer(gzip)
        .option_layer(config.default_retry.then(|| RetryLayer::new(RetryPolicy::server_retry())))
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(client)
        .map_response_body(|body| Box::new(http_body_util::BodyExt::map_err(body, BoxError::from)) as Box<DynBody>)
        .boxed();
    Ok(ClientBuilder::new(service, config.default_namespace))
}

/// The TCP connector under TLS: any scheme (TLS decides), and no Nagle.
fn tcp() -> HttpConnector {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connections_are_opened_with_nagles_algorithm_off() {
        use tower::Service;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let accepted = tokio::spawn(async move { listener.accept().await.unwrap() });
        let connection = tcp().call(format!("https://{address}").parse().unwrap()).await.unwrap();
        assert!(connection.inner().nodelay().unwrap());
        drop(accepted.await.unwrap());
    }

    /// What kube's own stack would send, this one sends: the User-Agent and extra headers, the bearer
    /// token, gzip asked for, and the base URI's path in front of the request's.
    #[tokio::test]
    #[allow(clippy::disallowed_methods)] // a test of the transport itself
    async fn requests_go_out_as_kubes_own_stack_sends_them() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buffer = [0u8; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = socket.read(&mut buffer).await.unwrap();
                request.extend_from_slice(&buffer[..n]);
            }
            let body = r#"{"kind":"Status","apiVersion":"v1","status":"Success"}"#;
            let answer = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            socket.write_all(answer.as_bytes()).await.unwrap();
            String::from_utf8(request).unwrap()
        });
        let mut config = kube::Config::new(format!("http://{address}/prefix").parse().unwrap());
        config.auth_info.token = Some("s3cret".to_string().into());
        config.headers.push((http::header::USER_AGENT, http::HeaderValue::from_static("samplectl/test")));
        let client: kube::Client = client_builder(config).unwrap().build();
        let request = Request::get("/version").body(Vec::new()).unwrap();
        let answer: serde_json::Value = client.request(request).await.unwrap();
        assert_eq!(answer["status"], "Success");
        let request = server.await.unwrap();
        let lines: Vec<String> = request.lines().map(str::to_lowercase).collect();
        assert_eq!(lines[0], "get /prefix/version http/1.1");
        for header in ["user-agent: samplectl/test", "authorization: bearer s3cret", "accept-encoding: gzip"] {
            assert!(lines.iter().any(|l| l == header), "{header} not in {lines:?}");
        }
    }
}
