//! What the cluster's machinery asks: probes and metrics (the per-request measurements
//! behind them are [`super::observe`]).

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::ToSchema;

use super::error::{Result, Unavailable};
use super::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
}

/// Liveness: always `{"status": "ok"}` while the process answers.
#[derive(Serialize, ToSchema)]
pub(super) struct Health {
    #[schema(pattern = "^ok$")]
    status: &'static str,
}

/// Liveness: the process answers
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    responses((status = 200, description = "Alive", body = Health)),
)]
pub(super) async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// Readiness of the store, its committer and the sweeper.
#[derive(Serialize, ToSchema)]
pub(super) struct Readiness {
    /// `ready` when the committer and the sweeper run, else `not ready`.
    #[schema(schema_with = ready_status)]
    status: &'static str,
    /// Always `open`: the listener opens only after the store did.
    store: &'static str,
    /// `running` or `stopped`.
    committer: &'static str,
    /// `running` or `stopped`.
    sweeper: &'static str,
    /// The current revision.
    revision: u64,
}

fn ready_status() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["ready", "not ready"]))
        .description(Some(
            "`ready` when the committer and the sweeper run, else `not ready`",
        ))
        .into()
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
    let readiness = Readiness {
        status: if committer && sweeper {
            "ready"
        } else {
            "not ready"
        },
        store: "open",
        committer: if committer { "running" } else { "stopped" },
        sweeper: if sweeper { "running" } else { "stopped" },
        revision: state.store.revision(),
    };
    // Sent as a `serde_json::Value`, whose object keys are sorted (`committer` first): that
    // is this body's key order on the wire, while the struct keeps the documented order.
    let body = serde_json::to_value(readiness).expect("readiness serializes");
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
        .blocking(move |store| Ok(metrics.render(&store.gauges())))
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
