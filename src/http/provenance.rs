//! Provenance over HTTP: who a request reports as (`Blocklist-Source`), why an unblock was
//! made (`?reason=`), and an id's past blocks (`GET /blocklist/{kind}/{id}/history`).

use axum::extract::{FromRef, FromRequestParts, State};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use utoipa::IntoParams;

use super::caller::{Caller, TokenCheck};
use super::error::{ApiError, ErrorBody, Internal, Result, Unauthorized, Unavailable};
use super::extract::{query_param, IdPath};
use super::paging::{ExpiredPage, PageParams, Paging};
use super::state::AppState;
use crate::listing::Resume;
use crate::model::{validate_source, Kind, UNKNOWN_SOURCE};
use crate::provenance::{validate_reason, PastBlock};

/// The header a mutating request names its source in.
pub const SOURCE_HEADER: &str = "blocklist-source";

/// Who a mutating request reports as: its `Blocklist-Source` header; without one, the name
/// of its token; without that, `unknown`. An add element's own `source` field wins over it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestSource(pub String);

impl<S> FromRequestParts<S> for RequestSource
where
    S: Send + Sync,
    TokenCheck: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        if let Some(value) = parts.headers.get(SOURCE_HEADER) {
            let source = value.to_str().map_err(|_| {
                ApiError::bad_request(
                    "Blocklist-Source: must be visible ASCII (a header cannot carry UTF-8 \
                     reliably; use an element's \"source\" field for other text)"
                        .to_owned(),
                )
            })?;
            validate_source(source)
                .map_err(|e| ApiError::bad_request(format!("Blocklist-Source: {e}")))?;
            return Ok(RequestSource(source.to_owned()));
        }
        let Ok(caller) = Caller::from_request_parts(parts, state).await;
        Ok(RequestSource(
            caller.name.unwrap_or_else(|| UNKNOWN_SOURCE.to_owned()),
        ))
    }
}

/// The `Blocklist-Source` header, for the `OpenAPI` document ([`RequestSource`] reads it).
#[derive(IntoParams)]
#[into_params(parameter_in = Header)]
#[expect(dead_code, reason = "documents the header RequestSource reads")]
pub struct SourceHeader {
    /// Who makes this request (a component or a person, e.g. `speculative-execution`,
    /// `operator:alice`): 1–128 bytes of visible ASCII. Without it, the token's name, else
    /// `unknown`.
    #[param(
        rename = "Blocklist-Source",
        min_length = 1,
        max_length = 128,
        pattern = "^[\\x21-\\x7e]([\\x20-\\x7e]*[\\x21-\\x7e])?$"
    )]
    source: Option<String>,
}

/// `?reason=` on an unblock: why, kept with the past block.
#[derive(Debug, Clone, Default, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReasonParam {
    /// Why the item is removed: up to 1 KiB of UTF-8, kept in the id's history.
    #[param(max_length = 1024)]
    reason: Option<String>,
}

impl ReasonParam {
    pub fn into_reason(self) -> Option<String> {
        self.reason
    }
}

impl<S: Send + Sync> FromRequestParts<S> for ReasonParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let reason = query_param(parts, state, "reason").await?;
        if let Some(reason) = &reason {
            validate_reason(reason).map_err(|e| ApiError::bad_request(format!("reason: {e}")))?;
        }
        Ok(ReasonParam { reason })
    }
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/blocklist/taskmanagers/{id}/history",
            get(task_manager_history),
        )
        .route("/blocklist/nodes/{id}/history", get(node_history))
}

async fn history(state: &AppState, kind: Kind, id: &str, page: Paging) -> Result<Response> {
    let (store, id) = (state.store.clone(), id.to_owned());
    let Some(page) = page.0 else {
        let past = state
            .store
            .read_durably(move |seen| store.past_blocks(kind, &id, seen))
            .await?;
        return Ok(Json(past).into_response());
    };
    // A page resumes below the number of the last past block the page before listed.
    let start = page.start(&state.store)?;
    let before = match start.resume {
        None
        | Some(Resume {
            scan: 0,
            after: None,
        }) => None,
        Some(Resume {
            scan: 0,
            after: Some(n),
        }) => Some(n.parse::<u64>().map_err(|_| page.malformed())?),
        Some(_) => return Err(page.malformed()),
    };
    let limit = page.limit;
    let (past, more) = state
        .store
        .read_durably(move |seen| store.past_blocks_page(kind, &id, before, limit, seen))
        .await?;
    let next = more.then(|| Resume {
        scan: 0,
        after: past.last().map(|(n, _)| n.to_string()),
    });
    let past: Vec<&PastBlock> = past.iter().map(|(_, past)| past).collect();
    let body = serde_json::to_vec(&past).expect("past blocks serialize");
    Ok(page.answer(body, start.revision, next))
}

/// A task manager's past blocks
///
/// Newest first: each block it had that ended (expired or removed), as it was then, with how
/// it ended. Kept for `--history-retention-secs`, at most `--history-per-id` per id; an id
/// never blocked has none.
#[utoipa::path(
    get,
    path = "/blocklist/taskmanagers/{id}/history",
    tag = "blocklist",
    params(IdPath, PageParams),
    responses(
        (status = 200, description = "Past blocks, newest first (or, with `limit`, a page of them)", body = [PastBlock],
            headers(("X-Blocklist-Revision" = u64, description = "With `limit`: the walk's revision, read before its first page"))),
        (status = 400, description = "Bad id, limit or continue", body = ErrorBody),
        (status = 401, response = Unauthorized),
        (status = 410, response = ExpiredPage),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security((), ("bearerAuth" = [])),
)]
pub(super) async fn task_manager_history(
    State(state): State<AppState>,
    IdPath(id): IdPath,
    page: Paging,
) -> Result<Response> {
    history(&state, Kind::TaskManager, &id, page).await
}

/// A node's past blocks
///
/// As for a task manager: newest first, bounded by age and count.
#[utoipa::path(
    get,
    path = "/blocklist/nodes/{id}/history",
    tag = "blocklist",
    params(IdPath, PageParams),
    responses(
        (status = 200, description = "Past blocks, newest first (or, with `limit`, a page of them)", body = [PastBlock],
            headers(("X-Blocklist-Revision" = u64, description = "With `limit`: the walk's revision, read before its first page"))),
        (status = 400, description = "Bad id, limit or continue", body = ErrorBody),
        (status = 401, response = Unauthorized),
        (status = 410, response = ExpiredPage),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security((), ("bearerAuth" = [])),
)]
pub(super) async fn node_history(
    State(state): State<AppState>,
    IdPath(id): IdPath,
    page: Paging,
) -> Result<Response> {
    history(&state, Kind::Node, &id, page).await
}
