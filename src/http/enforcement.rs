//! `/enforcement`: what enforcers report they did about blocked items
//! ([`crate::enforcement`]). An enforcer writes under its own name; with a token file, a
//! token of role `enforcer` that has a name writes only under that name.

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::response::Response;
use axum::routing::{get, put};
use axum::{Json, Router};
use serde::Serialize;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::{Ref, RefOr};
use utoipa::{IntoParams, PartialSchema, ToSchema};

use super::caller::{Caller, Role};
use super::error::{
    ApiError, ErrorBody, Forbidden, Internal, PayloadTooLarge, RequestTimeout, Result,
    Unauthorized, Unavailable, UnsupportedMediaType,
};
use super::extract::{path_param, DryRun};
use super::idempotency::KeyedBody;
use super::reply::with_revision;
use super::schema;
use super::state::AppState;
use crate::enforcement::{self, EnforcementState, EnforcementStatus};
use crate::model::{Id, Kind};
use crate::store::ReportOutcome;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/enforcement", get(list))
        .route("/enforcement/{enforcer}", put(report))
}

/// The `{enforcer}` of a path: the enforcer's name, checked.
#[derive(IntoParams)]
#[into_params(names("enforcer"), parameter_in = Path)]
pub struct EnforcerPath(
    /// The enforcer's name: 1 to 253 ASCII letters, digits, `-`, `_` and `.`.
    #[param(pattern = r"^[A-Za-z0-9._-]{1,253}$")]
    pub String,
);

impl<S: Send + Sync> FromRequestParts<S> for EnforcerPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let name = path_param(parts, state, "enforcer").await?;
        enforcement::validate_enforcer(&name)
            .map_err(|why| ApiError::bad_request(format!("enforcer in the path: {why}")))?;
        Ok(EnforcerPath(name))
    }
}

/// One enforcer's status of one blocked item.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct StatusEntry {
    kind: Kind,
    #[schema(value_type = Id)]
    id: String,
    /// The enforcer's name.
    enforcer: String,
    #[serde(flatten)]
    status: EnforcementStatus,
}

/// Every enforcement status
///
/// Of every item blocked now, each enforcer's last report; an item's statuses go when its
/// block ends.
#[utoipa::path(
    get,
    path = "/enforcement",
    tag = "enforcement",
    responses(
        (status = 200, description = "Every status, by kind, id and enforcer", body = [StatusEntry],
            headers(("X-Blocklist-Revision" = u64, description = "The revision this listing reflects"))),
        (status = 401, response = Unauthorized),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security((), ("bearerAuth" = [])),
)]
pub(super) async fn list(State(state): State<AppState>) -> Result<Response> {
    let (all, revision) = state.listing(crate::store::Store::all_statuses).await?;
    let entries: Vec<StatusEntry> = all
        .into_iter()
        .flat_map(|(kind, id, statuses)| {
            statuses
                .into_iter()
                .map(move |(enforcer, status)| StatusEntry {
                    kind,
                    id: id.clone(),
                    enforcer,
                    status,
                })
        })
        .collect();
    Ok(with_revision(revision, Json(entries)))
}

/// One element of `PUT /enforcement/{enforcer}` (parsed by hand: `enforcement::reports`).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct StatusReport {
    kind: Kind,
    #[schema(value_type = Id)]
    id: String,
    state: EnforcementState,
    /// At most 1024 characters.
    #[schema(max_length = 1024)]
    detail: Option<String>,
    /// The item's `revision` the enforcer acted on.
    #[schema(minimum = 0)]
    observed_revision: Option<u64>,
}

/// The body of `PUT /enforcement/{enforcer}`.
pub(super) struct StatusReports;

impl PartialSchema for StatusReports {
    fn schema() -> RefOr<Schema> {
        schema::batch(
            &Ref::from_schema_name(StatusReport::name()).into(),
            "A non-empty array of status reports, or `{\"items\": [...]}`. Atomic.",
        )
    }
}

impl ToSchema for StatusReports {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((StatusReport::name().into(), StatusReport::schema()));
    }
}

/// What a report did.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct ReportSummary {
    /// Statuses added or changed.
    stored: usize,
    /// Reports equal to the stored status (nothing written).
    unchanged: usize,
    /// Reports about items not blocked now (`kind/id`), not stored: the block ended
    /// before the report came.
    not_blocked: Vec<String>,
}

fn summary(outcome: &ReportOutcome) -> ReportSummary {
    ReportSummary {
        stored: outcome.stored,
        unchanged: outcome.unchanged,
        not_blocked: outcome
            .not_blocked
            .iter()
            .map(|(kind, id)| format!("{}/{id}", kind.singular()))
            .collect(),
    }
}

/// Report what an enforcer did
///
/// Stores each status of an item blocked now under the enforcer's name; a status never
/// changes the block, its revision or its `ETag`, and emits no event. A token of role
/// `enforcer` with a name reports only under that name.
#[utoipa::path(
    put,
    path = "/enforcement/{enforcer}",
    tag = "enforcement",
    params(EnforcerPath, DryRun),
    request_body(content = StatusReports, content_type = "application/json"),
    responses(
        (status = 200, description = "Stored", body = ReportSummary,
            headers(("X-Blocklist-Revision" = u64, description = "The revision the reports were stored at"))),
        (status = 400, description = "Malformed: every problem of every element", body = ErrorBody),
        (status = 401, response = Unauthorized),
        (status = 403, response = Forbidden),
        (status = 408, response = RequestTimeout),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security(("bearerAuth" = [])),
)]
pub(super) async fn report(
    State(state): State<AppState>,
    EnforcerPath(enforcer): EnforcerPath,
    caller: Caller,
    dry: DryRun,
    KeyedBody(key, body): KeyedBody,
) -> Response {
    dry.answer(
        async {
            if let (Role::Enforcer, Some(name)) = (caller.role, &caller.name) {
                if *name != enforcer {
                    return Err(ApiError::Forbidden(format!(
                        "the enforcer token {name:?} reports only under its own name, not {enforcer:?}"
                    )));
                }
            }
            let reports = enforcement::reports(&body, state.limits.max_batch)?;
            let key = key.render(dry, move |outcome: &ReportOutcome, revision| {
                Some(dry.written(revision, Json(summary(outcome))))
            });
            let writer = state.store.with_mode(dry.mode()).keyed(key);
            let (outcome, revision) = writer.report_enforcement(enforcer, reports).await?;
            Ok::<_, ApiError>(dry.written(revision, Json(summary(&outcome))))
        }
        .await,
    )
}
