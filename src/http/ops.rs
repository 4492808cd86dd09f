//! What the cluster's machinery asks: probes and metrics (the per-request measurements
//! behind them are [`super::observe`]).

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use super::error::Result;
use super::openapi::{Health, Readiness, Unavailable};
use super::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
}

/// Liveness: the process answers
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    responses((status = 200, description = "Alive", body = Health)),
)]
pub(super) async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// Readiness: the store is open, its committer runs, and the sweeper runs
///
/// Migrations ran before the listener opened.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    responses(
        (status = 200, description = "Ready", body = Readiness),
        (status = 503, description = "Not ready: the committer or the sweeper stopped", body = Readiness),
    ),
)]
pub(super) async fn readyz(State(state): State<AppState>) -> Response {
    let committer = state.store.committer_alive();
    let sweeper = !state.sweeper.is_finished();
    let body = json!({
        "status": if committer && sweeper { "ready" } else { "not ready" },
        "store": "open",
        "committer": if committer { "running" } else { "stopped" },
        "sweeper": if sweeper { "running" } else { "stopped" },
        "revision": state.store.revision(),
    });
    let status = if committer && sweeper {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

/// Prometheus metrics
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    responses(
        (status = 200, description = "The OpenMetrics text exposition", body = String,
            content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8"),
        (status = 503, response = Unavailable),
    ),
)]
pub(super) async fn metrics(State(state): State<AppState>) -> Result<Response> {
    let metrics = state.metrics.clone();
    let text = state
        .blocking(move |store| Ok(metrics.render(store)))
        .await?;
    Ok((
        [(
            CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response())
}
