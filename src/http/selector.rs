//! `DELETE /blocklist/taskmanagers`, `DELETE /blocklist/nodes`: unblock every item of a kind
//! that a selector picks (`?source=`, `?cause=`, `?all=true`), in one transaction, or none
//! when more match than `--max-batch`.

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::response::Response;
use axum::routing::delete;
use axum::{Json, Router};
use serde::Serialize;
use utoipa::{IntoParams, ToSchema};

use super::caller::{Caller, Role};
use super::error::{ApiError, ErrorBody, Forbidden, Internal, Result, Unauthorized, Unavailable};
use super::extract::{boolean, query_param, DryRun};
use super::idempotency::Key;
use super::provenance::{ReasonParam, RequestSource, SourceHeader};
use super::state::AppState;
use crate::model::{validate_source, Item, Kind, MAX_CAUSE_BYTES};
use crate::provenance::{Selector, Unblock};
use crate::store::SelectedOutcome;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/blocklist/taskmanagers", delete(remove_task_managers))
        .route("/blocklist/nodes", delete(remove_nodes))
}

/// The selector of an unblock by selector: its query parameters, checked, and the
/// parameters' documentation.
#[derive(Debug, Clone, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SelectorParams {
    /// Items whose source (the first report's: who blocked it) is exactly this: 1–128 bytes
    /// of UTF-8 without control characters.
    #[param(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    source: Option<String>,
    /// Items whose cause (all its merged causes, comma-joined) contains this text: 1 byte to
    /// 1 KiB of UTF-8.
    #[param(min_length = 1, max_length = 1024)]
    cause: Option<String>,
    /// `true`: every item of the kind (admin tokens only). Default `false`.
    all: Option<bool>,
}

impl<S: Send + Sync> FromRequestParts<S> for SelectorParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let mut errors = Vec::new();
        let source = query_param(parts, state, "source").await?;
        if let Some(Err(e)) = source.as_deref().map(validate_source) {
            errors.push(format!("source: {e}"));
        }
        let cause = query_param(parts, state, "cause").await?;
        match cause.as_deref() {
            Some("") => errors.push("cause: must not be empty".to_owned()),
            Some(c) if c.len() > MAX_CAUSE_BYTES => errors.push(format!(
                "cause: is {} bytes long; the limit is {MAX_CAUSE_BYTES} bytes",
                c.len()
            )),
            _ => {}
        }
        let all = match query_param(parts, state, "all").await? {
            Some(value) => match boolean("all", &value) {
                Ok(all) => Some(all),
                Err(ApiError::BadRequest(mut e)) => {
                    errors.append(&mut e);
                    None
                }
                Err(e) => return Err(e),
            },
            None => None,
        };
        if !errors.is_empty() {
            return Err(ApiError::BadRequest(errors));
        }
        Ok(SelectorParams { source, cause, all })
    }
}

impl SelectorParams {
    /// The selector; a 400 when it has no part (an unblock by selector never defaults to
    /// everything).
    fn into_selector(self) -> Result<Selector> {
        let selector = Selector {
            source: self.source,
            cause: self.cause,
            all: self.all == Some(true),
        };
        if selector.is_empty() {
            return Err(ApiError::bad_request(
                "query: give a selector: source=, cause= and/or all=true (to unblock one \
                 item, DELETE its own path)",
            ));
        }
        Ok(selector)
    }
}

/// The answer to an unblock by selector.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct SelectedRemoval {
    /// How many items were removed (would be, in a dry run).
    count: usize,
    /// Those items, as they were, sorted by id.
    removed: Vec<Item>,
}

async fn remove_selected(
    State(state): State<AppState>,
    kind: Kind,
    caller: &Caller,
    (dry, selector, reason, RequestSource(source)): (
        DryRun,
        SelectorParams,
        ReasonParam,
        RequestSource,
    ),
    key: Key,
) -> Result<Response> {
    let selector = selector.into_selector()?;
    if selector.all {
        caller.require(Role::Admin, "an unblock of every item of a kind (all=true)")?;
    }
    let limit = state.limits.max_batch;
    let unblock = Unblock {
        source: Some(source),
        reason: reason.into_reason(),
    };
    let key = key.render(
        dry,
        move |outcome: &SelectedOutcome, revision| match outcome {
            SelectedOutcome::Removed(removed) => Some(selected(dry, removed.clone(), revision)),
            SelectedOutcome::OverLimit { .. } => None,
        },
    );
    let (outcome, revision) = state
        .store
        .with_mode(dry.mode())
        .keyed(key)
        .remove_selected(kind, selector, unblock, limit)
        .await?;
    match outcome {
        SelectedOutcome::Removed(removed) => Ok(selected(dry, removed, revision)),
        SelectedOutcome::OverLimit { matched } => Err(ApiError::PayloadTooLarge(format!(
            "{matched} {} match; the limit is {limit} per request; narrow the selector \
             (nothing was removed)",
            match kind {
                Kind::TaskManager => "task managers",
                Kind::Node => "nodes",
            }
        ))),
    }
}

/// The answer to an unblock by selector within its limit: the items it removed.
fn selected(dry: DryRun, removed: Vec<Item>, revision: u64) -> Response {
    let count = removed.len();
    dry.written(revision, Json(SelectedRemoval { count, removed }))
}

macro_rules! selector_handler {
    ($name:ident, $kind:expr, $path:literal, $doc:literal) => {
        #[doc = $doc]
        #[doc = ""]
        #[doc = "Every active item of the kind that the selector picks — `source=` (its first report's source is exactly this), `cause=` (its cause contains this), `all=true` (every one; admin tokens only), combined with AND, at least one given — is removed in one transaction, each with its `removed` event and a past block that keeps `reason` and the caller's source; or, when more than `--max-batch` match, none is."]
        #[utoipa::path(
            delete,
            path = $path,
            tag = "blocklist",
            params(SelectorParams, DryRun, ReasonParam, SourceHeader),
            responses(
                (status = 200, description = "The items removed (durably), sorted by id: none when none matched", body = SelectedRemoval,
                    headers(("X-Blocklist-Revision" = u64, description = "The revision of the last removal (the current one when none matched)"))),
                (status = 400, description = "No selector, or a malformed one (or a bad reason)", body = ErrorBody),
                (status = 401, response = Unauthorized),
                (status = 403, response = Forbidden),
                (status = 413, description = "More items match than `--max-batch`: the message says how many; nothing was removed", body = ErrorBody),
                (status = 500, response = Internal),
                (status = 503, response = Unavailable),
            ),
            security(("bearerAuth" = [])),
        )]
        pub(super) async fn $name(
            state: State<AppState>,
            caller: Caller,
            dry: DryRun,
            selector: SelectorParams,
            reason: ReasonParam,
            source: RequestSource,
            key: Key,
        ) -> Response {
            dry.answer(
                remove_selected(state, $kind, &caller, (dry, selector, reason, source), key).await,
            )
        }
    };
}

selector_handler!(
    remove_task_managers,
    Kind::TaskManager,
    "/blocklist/taskmanagers",
    "Unblock the task managers a selector picks"
);
selector_handler!(
    remove_nodes,
    Kind::Node,
    "/blocklist/nodes",
    "Unblock the nodes a selector picks"
);
