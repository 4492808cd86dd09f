//! `/blocklist`: add, merge, remove and read blocked task managers and nodes.

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;

use super::error::{ApiError, Result};
use super::extract::{IdPath, JsonBody};
use super::{with_revision, AppState};
use crate::clock::now_ms;
use crate::model::{Item, Kind};
use crate::store::{self, AddOutcome, Store};
use crate::{backup, validate};

pub fn router() -> Router<AppState> {
    let mut router = Router::new()
        .route("/blocklist", get(list_all))
        .route("/blocklist/export", get(export));
    for kind in Kind::ALL {
        router = router
            .route(
                &format!("/blocklist/{}", kind.plural()),
                get(move |state| list(state, kind)).post(move |state, body| add(state, kind, body)),
            )
            .route(
                &format!("/blocklist/{}/{{id}}", kind.plural()),
                get(move |state, id| get_one(state, kind, id))
                    .delete(move |state, id| remove(state, kind, id)),
            );
    }
    router
}

/// A node entry: the item plus the task managers registered on the node.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NodeEntry {
    #[serde(flatten)]
    item: Item,
    task_managers: Vec<String>,
}

/// Node entries for these node items: one index prefix scan per node.
fn node_entries(store: &Store, items: Vec<Item>) -> store::Result<Vec<NodeEntry>> {
    items
        .into_iter()
        .map(|item| {
            let task_managers = store.task_managers_on(&item.id)?;
            Ok(NodeEntry {
                item,
                task_managers,
            })
        })
        .collect()
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Blocklist {
    blocked_task_managers: Vec<Item>,
    blocked_nodes: Vec<NodeEntry>,
    /// The revision this listing reflects: watch the feed from here.
    revision: u64,
}

async fn list_all(State(state): State<AppState>) -> Result<Response> {
    let (blocklist, revision) = state
        .listing(|store| {
            let now = now_ms();
            Ok(Blocklist {
                blocked_task_managers: store.list(Kind::TaskManager, now)?,
                blocked_nodes: node_entries(store, store.list(Kind::Node, now)?)?,
                revision: store.revision(),
            })
        })
        .await?;
    Ok(with_revision(
        revision,
        Json(Blocklist {
            revision,
            ..blocklist
        }),
    ))
}

async fn list(State(state): State<AppState>, kind: Kind) -> Result<Response> {
    let (body, revision) = state
        .listing(move |store| {
            let items = store.list(kind, now_ms())?;
            Ok(match kind {
                Kind::TaskManager => Json(items).into_response(),
                Kind::Node => Json(node_entries(store, items)?).into_response(),
            })
        })
        .await?;
    Ok(with_revision(revision, body))
}

/// Every active item and registration as JSON lines (the format `blocklistd import` reads).
async fn export(State(state): State<AppState>) -> Result<Response> {
    let (text, revision) = state
        .listing(|store| backup::export(store, now_ms()))
        .await?;
    Ok(with_revision(
        revision,
        ([(CONTENT_TYPE, "application/x-ndjson")], text),
    ))
}

async fn get_one(
    State(state): State<AppState>,
    kind: Kind,
    IdPath(id): IdPath,
) -> Result<Response> {
    let Some(block) = state.store.get(kind, &id, now_ms())? else {
        return Err(not_blocked(kind, &id));
    };
    let item = Item::new(id, block);
    Ok(match kind {
        Kind::TaskManager => Json(item).into_response(),
        Kind::Node => Json(node_entries(&state.store, vec![item])?.pop()).into_response(),
    })
}

async fn add(
    State(state): State<AppState>,
    kind: Kind,
    JsonBody(body): JsonBody,
) -> Result<Response> {
    let now = now_ms();
    let items = validate::add_batch(&body, now, state.limits.max_batch)?;
    let (outcome, revision) = state.store.add(kind, items, now).await?;
    match outcome {
        AddOutcome::Written { merged } if merged.is_empty() => {
            Ok(with_revision(revision, StatusCode::CREATED))
        }
        AddOutcome::Written { merged } => Ok(with_revision(
            revision,
            (StatusCode::ACCEPTED, Json(merged)),
        )),
        AddOutcome::Conflict(conflicts) => Err(ApiError::Conflict(
            conflicts
                .into_iter()
                .map(|(index, id)| {
                    format!(
                        "items[{index}] (id {id:?}): {} {id:?} is already blocked and allowMerge \
                         is false; nothing of the batch was written",
                        kind.singular()
                    )
                })
                .collect(),
        )),
    }
}

async fn remove(State(state): State<AppState>, kind: Kind, IdPath(id): IdPath) -> Result<Response> {
    match state.store.remove(kind, id.clone()).await? {
        (Some(_), revision) => Ok(with_revision(revision, Json(serde_json::json!({})))),
        (None, _) => Err(not_blocked(kind, &id)),
    }
}

fn not_blocked(kind: Kind, id: &str) -> ApiError {
    ApiError::NotFound(format!("{} {id:?} is not blocked", kind.singular()))
}
