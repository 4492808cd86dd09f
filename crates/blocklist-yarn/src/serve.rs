//! The bridge's own HTTP: `/healthz` (the process answers), `/readyz` (a pass finished
//! with the daemon's blocks current: the ResourceManager holds what the blocklist says),
//! `/metrics` (Prometheus' text format).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;

use crate::bridge::Bridge;

/// Serves the probes and the metrics on `listener` for as long as the bridge runs.
pub async fn run(listener: TcpListener, bridge: Arc<Bridge>) {
    let router = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(|State(bridge): State<Arc<Bridge>>| async move {
                if bridge.ready.load(Ordering::SeqCst) {
                    (StatusCode::OK, "ready\n")
                } else {
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        "not ready: no pass has finished with the daemon's blocks in hand\n",
                    )
                }
            }),
        )
        .route(
            "/metrics",
            get(|State(bridge): State<Arc<Bridge>>| async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    bridge.metrics.render(),
                )
            }),
        )
        .with_state(bridge);
    if let Err(e) = axum::serve(listener, router).await {
        tracing::error!(error = %e, "the bridge's HTTP server stopped");
    }
}
