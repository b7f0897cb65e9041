//! `/healthz` (the process is alive) and `/readyz` (connected to the API server, and either leading with
//! its caches synced or a healthy standby), and `/metrics`, served over plain HTTP for the kubelet's
//! probes and Prometheus.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;

use crate::metrics::Metrics;

#[derive(Default)]
pub struct Health {
    /// The first request to the API server succeeded.
    pub connected: AtomicBool,
    /// The driver has seen every Sample (poll: a full pass done; watch: the Samples listed at start-up).
    pub synced: AtomicBool,
    /// Waiting for the lease, with the election loop running: ready to take over.
    pub standby: AtomicBool,
}

impl Health {
    pub fn ready(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
            && (self.synced.load(Ordering::Relaxed) || self.standby.load(Ordering::Relaxed))
    }
}

async fn bind(addr: SocketAddr, what: &str) -> Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr} for {what}"))
}

pub async fn serve_health(addr: SocketAddr, health: Arc<Health>) -> Result<()> {
    let app = Router::new().route("/healthz", get(|| async { "ok" })).route(
        "/readyz",
        get(move || {
            let health = health.clone();
            async move {
                if health.ready() { (StatusCode::OK, "ok") } else { (StatusCode::SERVICE_UNAVAILABLE, "not ready") }
            }
        }),
    );
    let listener = bind(addr, "health probes").await?;
    tracing::info!("health probes on http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(())
}

pub async fn serve_metrics(addr: SocketAddr, metrics: Arc<Metrics>) -> Result<()> {
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let metrics = metrics.clone();
            async move {
                ([("content-type", "application/openmetrics-text; version=1.0.0; charset=utf-8")], metrics.render())
            }
        }),
    );
    let listener = bind(addr, "metrics").await?;
    tracing::info!("metrics on http://{}/metrics", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(())
}
