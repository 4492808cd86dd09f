//! `/taskmanagers`: which task manager runs on which node.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;

use super::error::{ApiError, Result};
use super::extract::{IdPath, JsonBody};
use super::{with_revision, AppState};
use crate::store::Registered;
use crate::validate;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/taskmanagers", get(list).put(register_many))
        .route(
            "/taskmanagers/{id}",
            get(get_one).put(register).delete(unregister),
        )
}

#[derive(Serialize)]
struct Registration {
    id: String,
    node: String,
}

async fn list(State(state): State<AppState>) -> Result<Json<Vec<Registration>>> {
    let all = state.blocking(|store| store.registrations()).await?;
    Ok(Json(
        all.into_iter()
            .map(|(id, node)| Registration { id, node })
            .collect(),
    ))
}

async fn get_one(State(state): State<AppState>, IdPath(id): IdPath) -> Result<Json<Registration>> {
    match state.store.node_of(&id)? {
        Some(node) => Ok(Json(Registration { id, node })),
        None => Err(not_registered(&id)),
    }
}

async fn register(
    State(state): State<AppState>,
    IdPath(id): IdPath,
    JsonBody(body): JsonBody,
) -> Result<Response> {
    let node = validate::registration(&body)?;
    let (results, revision) = state
        .store
        .register(vec![(id.clone(), node.clone())])
        .await?;
    let status = match results.first() {
        Some(Registered::Created) => StatusCode::CREATED,
        _ => StatusCode::OK,
    };
    Ok(with_revision(
        revision,
        (status, Json(Registration { id, node })),
    ))
}

/// Counts of what a batch registration did.
#[derive(Serialize, Default)]
struct Summary {
    created: usize,
    moved: usize,
    unchanged: usize,
}

async fn register_many(
    State(state): State<AppState>,
    JsonBody(body): JsonBody,
) -> Result<Response> {
    let pairs = validate::registrations(&body, state.limits.max_batch)?;
    let mut summary = Summary::default();
    let (results, revision) = state.store.register(pairs).await?;
    for result in results {
        match result {
            Registered::Created => summary.created += 1,
            Registered::Moved => summary.moved += 1,
            Registered::Unchanged => summary.unchanged += 1,
        }
    }
    let status = if summary.created > 0 {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(with_revision(revision, (status, Json(summary))))
}

async fn unregister(State(state): State<AppState>, IdPath(id): IdPath) -> Result<Response> {
    match state.store.unregister(id.clone()).await? {
        (Some(_), revision) => Ok(with_revision(revision, Json(serde_json::json!({})))),
        (None, _) => Err(not_registered(&id)),
    }
}

fn not_registered(id: &str) -> ApiError {
    ApiError::NotFound(format!("taskmanager {id:?} is not registered"))
}
