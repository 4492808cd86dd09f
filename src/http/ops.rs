//! What the cluster's machinery asks: probes, metrics, and the per-request measurements
//! behind them.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use super::error::Result;
use super::openapi::{Health, Readiness, Unavailable};
use super::AppState;
use crate::metrics::{RejectLabels, RequestLabels};

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

/// The metric label of a method: the methods we serve by name, the rest as one.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        _ => "other",
    }
}

/// Middleware: times every request by route and status, counts refusals, and logs one line
/// per request at debug (never headers: they may hold a token).
pub async fn observe(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = method_label(req.method());
    // The route template, not the raw path: ids must not explode the label space.
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .and_then(|m| {
            super::ROUTES
                .iter()
                .find(|(_, path)| *path == m.as_str())
                .map(|(_, path)| *path)
        })
        .unwrap_or("unmatched");
    let response = next.run(req).await;
    let status = response.status().as_u16();
    let elapsed = started.elapsed();
    tracing::debug!(%method, %route, status, ?elapsed, "request");
    if status >= 400 {
        state
            .metrics
            .rejected
            .get_or_create(&RejectLabels { status })
            .inc();
    }
    state
        .metrics
        .request_seconds
        .get_or_create(&RequestLabels {
            method,
            route,
            status,
        })
        .observe(elapsed.as_secs_f64());
    response
}
