//! `/blocklist/check`: the effective blocked-or-not answer, one id or a whole slot offer.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use utoipa::ToSchema;

use super::error::{
    BadId, ErrorBody, Internal, PayloadTooLarge, RequestTimeout, Result, Unauthorized, Unavailable,
    UnsupportedMediaType,
};
use super::extract::{IdPath, JsonBody};
use super::state::AppState;
use crate::check::{Checked, Verdict};
use crate::model::Id;
use crate::store::StoreError;
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

/// A verdict's response: its JSON, which a kept verdict has ready.
fn verdict_json(checked: &Checked) -> Response {
    (
        [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        checked.json(),
    )
        .into_response()
}

// Single checks answer a kept verdict on the async worker (it reads nothing) and read a
// fresh one on the blocking pool (`Checker::task_manager`): a sled read waits out any
// transaction applying meanwhile, and must not hold up the requests queued behind it.

/// Is this task manager blocked?
///
/// Blocked if it is blocked itself or its node is. Expired items never count.
#[utoipa::path(
    get,
    path = "/blocklist/check/taskmanagers/{id}",
    tag = "check",
    params(IdPath),
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
) -> Result<Response> {
    let checked = state.checker.task_manager(&id, state.store.now()).await?;
    Ok(verdict_json(&checked))
}

/// Is this node blocked?
#[utoipa::path(
    get,
    path = "/blocklist/check/nodes/{id}",
    tag = "check",
    params(IdPath),
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
) -> Result<Response> {
    let checked = state.checker.node(&id, state.store.now()).await?;
    Ok(verdict_json(&checked))
}

/// The body of `POST /blocklist/check`: either list may be absent or null. At most
/// `--max-batch` ids in all.
// `check_many` parses its body by hand (`validate::check_request`, every error named), so
// this type only documents it; `Serialize` is derived so that the serde attributes the
// schema derive reads are accepted.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct CheckRequest {
    #[schema(value_type = Option<Vec<Id>>)]
    task_managers: Option<Vec<String>>,
    #[schema(value_type = Option<Vec<Id>>)]
    nodes: Option<Vec<String>>,
}

/// One verdict per id, in request order.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct Verdicts {
    #[schema(value_type = Vec<Verdict>)]
    task_managers: Vec<Arc<Checked>>,
    #[schema(value_type = Vec<Verdict>)]
    nodes: Vec<Arc<Checked>>,
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
    let request = Arc::new(validate::check_request(&body, state.limits.max_batch)?);
    let now = state.store.now();
    // Read on the blocking pool (many point reads), then wait once for whatever of it is
    // not durable yet; read again after a reopen in between.
    for _ in 0..4 {
        let checker = state.checker.clone();
        let ids = request.clone();
        let (task_managers, nodes, seen) = state
            .blocking(move |store| {
                let mut seen = store.seen();
                let task_managers = ids
                    .task_managers
                    .iter()
                    .map(|id| checker.task_manager_now(id, now, &mut seen))
                    .collect::<Result<Vec<_>, _>>()?;
                let nodes = ids
                    .nodes
                    .iter()
                    .map(|id| checker.node_now(id, now, &mut seen))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok((task_managers, nodes, seen))
            })
            .await?;
        if state.store.confirm(&seen).await? {
            let keep = |found| state.checker.keep(found);
            return Ok(Json(Verdicts {
                task_managers: task_managers.into_iter().map(keep).collect(),
                nodes: nodes.into_iter().map(keep).collect(),
            }));
        }
    }
    Err(StoreError::Reopening.into())
}
