//! `/blocklist/check`: the effective blocked-or-not answer, one id or a whole slot offer.

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use utoipa::ToSchema;

use super::error::{ErrorBody, Result};
use super::extract::{IdPath, JsonBody};
use super::openapi::{
    BadId, CheckRequest, IdParam, Internal, PayloadTooLarge, RequestTimeout, Unauthorized,
    Unavailable, UnsupportedMediaType,
};
use super::AppState;
use crate::check::{self, Verdict};
use crate::clock::now_ms;
use crate::validate;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/blocklist/check", post(check_many))
        .route(
            "/blocklist/check/taskmanagers/{id}",
            get(check_task_manager),
        )
        .route("/blocklist/check/nodes/{id}", get(check_node))
}

// Single checks are point reads served on the async worker: they are the hottest path, and
// a hop to the blocking pool would cost more than the reads themselves.

/// Is this task manager blocked?
///
/// Blocked if it is blocked itself or its node is. Expired items never count.
#[utoipa::path(
    get,
    path = "/blocklist/check/taskmanagers/{id}",
    tag = "check",
    params(IdParam),
    responses(
        (status = 200, description = "The verdict", body = Verdict),
        (status = 400, response = BadId),
        (status = 401, response = Unauthorized),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security((), ("bearerAuth" = [])),
)]
pub(super) async fn check_task_manager(
    State(state): State<AppState>,
    IdPath(id): IdPath,
) -> Result<Json<Verdict>> {
    Ok(Json(check::task_manager(&state.store, &id, now_ms())?))
}

/// Is this node blocked?
#[utoipa::path(
    get,
    path = "/blocklist/check/nodes/{id}",
    tag = "check",
    params(IdParam),
    responses(
        (status = 200, description = "The verdict (never with `node`)", body = Verdict),
        (status = 400, response = BadId),
        (status = 401, response = Unauthorized),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security((), ("bearerAuth" = [])),
)]
pub(super) async fn check_node(
    State(state): State<AppState>,
    IdPath(id): IdPath,
) -> Result<Json<Verdict>> {
    Ok(Json(check::node(&state.store, &id, now_ms())?))
}

/// One verdict per id, in request order.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct Verdicts {
    task_managers: Vec<Verdict>,
    nodes: Vec<Verdict>,
}

/// Check many task managers and nodes at once
///
/// A read, despite the POST: open without a token unless `--auth-reads`.
#[utoipa::path(
    post,
    path = "/blocklist/check",
    tag = "check",
    request_body(content = CheckRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The verdicts", body = Verdicts),
        (status = 400, description = "Malformed, or a bad id (named: `taskManagers[3] (id \"…\"): …`)", body = ErrorBody),
        (status = 401, response = Unauthorized),
        (status = 408, response = RequestTimeout),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security((), ("bearerAuth" = [])),
)]
pub(super) async fn check_many(
    State(state): State<AppState>,
    JsonBody(body): JsonBody,
) -> Result<Json<Verdicts>> {
    let request = validate::check_request(&body, state.limits.max_batch)?;
    let verdicts = state
        .blocking(move |store| {
            let now = now_ms();
            Ok(Verdicts {
                task_managers: request
                    .task_managers
                    .iter()
                    .map(|id| check::task_manager(store, id, now))
                    .collect::<Result<_, _>>()?,
                nodes: request
                    .nodes
                    .iter()
                    .map(|id| check::node(store, id, now))
                    .collect::<Result<_, _>>()?,
            })
        })
        .await?;
    Ok(Json(verdicts))
}
