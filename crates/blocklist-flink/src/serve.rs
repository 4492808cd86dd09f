//! The watcher's own HTTP: `/healthz` (the process answers), `/readyz` (every cluster's
//! last poll answered), `/metrics` (Prometheus' text format).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;

use crate::metrics::Metrics;

pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(render))
        .with_state(metrics)
}

async fn readyz(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    let unanswered = metrics.unanswered();
    if unanswered.is_empty() {
        (StatusCode::OK, "ready\n".to_owned())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "not ready: the last poll of {} did not answer\n",
                unanswered.join(", ")
            ),
        )
    }
}

async fn render(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        metrics.render(),
    )
}

/// Serves the router on `listener` for as long as the watcher runs.
pub async fn run(listener: TcpListener, metrics: Arc<Metrics>) {
    if let Err(e) = axum::serve(listener, router(metrics)).await {
        tracing::error!(error = %e, "the watcher's HTTP server stopped");
    }
}
