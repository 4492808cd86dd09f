//! The bridge's own HTTP: `/healthz` (the process answers), `/readyz` (the first full
//! reconcile finished: every Node carries what the blocklist says), `/metrics`
//! (Prometheus' text format).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;

use crate::bridge::Bridge;

pub fn router(bridge: Arc<Bridge>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(bridge)
}

async fn readyz(State(bridge): State<Arc<Bridge>>) -> impl IntoResponse {
    if bridge.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ready\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the first full reconcile has not finished\n",
        )
    }
}

async fn metrics(State(bridge): State<Arc<Bridge>>) -> impl IntoResponse {
    bridge.metrics.leader.set(i64::from(bridge.leader.acting()));
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        bridge.metrics.render(),
    )
}

/// Serves the router on `listener` for as long as the bridge runs.
pub async fn run(listener: TcpListener, bridge: Arc<Bridge>) {
    if let Err(e) = axum::serve(listener, router(bridge)).await {
        tracing::error!(error = %e, "the bridge's HTTP server stopped");
    }
}
