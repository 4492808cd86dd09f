//! `/blocklist/check`: the effective blocked-or-not answer, one id or a whole slot offer.

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;

use super::error::Result;
use super::extract::{IdPath, JsonBody};
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
async fn check_task_manager(
    State(state): State<AppState>,
    IdPath(id): IdPath,
) -> Result<Json<Verdict>> {
    Ok(Json(check::task_manager(&state.store, &id, now_ms())?))
}

async fn check_node(State(state): State<AppState>, IdPath(id): IdPath) -> Result<Json<Verdict>> {
    Ok(Json(check::node(&state.store, &id, now_ms())?))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Verdicts {
    task_managers: Vec<Verdict>,
    nodes: Vec<Verdict>,
}

async fn check_many(
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
