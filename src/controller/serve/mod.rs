//! What the controller serves: `/healthz` and `/readyz` over plain HTTP for the kubelet's probes
//! (`health`), and `/metrics` for Prometheus (`metrics`), either plain or, with `--metrics-secure`, over
//! TLS (`tls`) to callers the API server says may read it (`metrics_access`).

pub mod health;
pub mod http;
pub mod inflight;
pub mod metrics;
pub mod metrics_access;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::Router;
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;

use health::Health;
use metrics::Metrics;
use metrics_access::{Decision, MetricsAccess, bearer};

/// Where the controllers report: the probes' state and the metrics, shared by everything a process runs.
#[derive(Clone)]
pub struct Serving {
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
}

async fn bind(addr: SocketAddr, what: &str) -> Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr} for {what}"))
}

pub async fn serve_health(addr: SocketAddr, health: Arc<Health>) -> Result<()> {
    let live = health.clone();
    let app = Router::new()
        .route(
            "/healthz",
            get(move || {
                let health = live.clone();
                async move {
                    match health.alive() {
                        Ok(()) => (StatusCode::OK, "ok".to_owned()),
                        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
                    }
                }
            }),
        )
        .route(
            "/readyz",
            get(move || {
                let health = health.clone();
                async move {
                    match health.ready() {
                        true => (StatusCode::OK, health.ready_words()),
                        false => (StatusCode::SERVICE_UNAVAILABLE, "not ready"),
                    }
                }
            }),
        );
    let app = app.layer(axum::extract::DefaultBodyLimit::max(SMALL_BODY));
    let listener = bind(addr, "health probes").await?;
    tracing::info!("health probes on http://{}", listener.local_addr()?);
    tokio::spawn(http::serve(listener, None, app, std::future::pending()));
    Ok(())
}

/// Who may read /metrics when it is served over HTTPS.
pub struct Secure {
    pub tls: Arc<rustls::ServerConfig>,
    pub access: Arc<MetricsAccess>,
}

/// The probes and `/metrics` are read with GETs: a body is never needed.
const SMALL_BODY: usize = 64 << 10;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

pub async fn serve_metrics(addr: SocketAddr, metrics: Arc<Metrics>, secure: Option<Secure>) -> Result<()> {
    let listener = bind(addr, "metrics").await?;
    let Some(secure) = secure else {
        let app = Router::new().route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                async move { ([("content-type", OPENMETRICS)], metrics.render()) }
            }),
        );
        let app = app.layer(axum::extract::DefaultBodyLimit::max(SMALL_BODY));
        tracing::info!("metrics on http://{}/metrics", listener.local_addr()?);
        tokio::spawn(http::serve(listener, None, app, std::future::pending()));
        return Ok(());
    };
    let access = secure.access;
    let app = Router::new().route(
        "/metrics",
        get(move |headers: HeaderMap| {
            let (metrics, access) = (metrics.clone(), access.clone());
            async move {
                let token = bearer(headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok()));
                match access.decide(token).await {
                    Ok(Decision::Allowed) => ([("content-type", OPENMETRICS)], metrics.render()).into_response(),
                    Ok(Decision::Unauthenticated) => (StatusCode::UNAUTHORIZED, "Unauthorized").into_response(),
                    Ok(Decision::Busy) => (StatusCode::TOO_MANY_REQUESTS, "Too Many Requests").into_response(),
                    Ok(Decision::Forbidden(user)) => (
                        StatusCode::FORBIDDEN,
                        format!("Forbidden (user={user}, verb=get, resource=, subresource=, path=/metrics)"),
                    )
                        .into_response(),
                    Err(err) => {
                        // The API server's words stay in the log: the caller is not authenticated yet.
                        let why = crate::error::describe(&err);
                        tracing::warn!("metrics: cannot check a scraper's token: {why}");
                        (StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error").into_response()
                    }
                }
            }
        }),
    );
    tracing::info!(
        "metrics on https://{}/metrics (a token allowed to get /metrics is required)",
        listener.local_addr()?
    );
    let app = app.layer(axum::extract::DefaultBodyLimit::max(SMALL_BODY));
    tokio::spawn(http::serve(listener, Some(secure.tls), app, std::future::pending()));
    Ok(())
}
