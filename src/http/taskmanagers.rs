//! `/taskmanagers`: which task manager runs on which node.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use super::error::{
    ApiError, BadId, ErrorBody, Forbidden, Internal, PayloadTooLarge, RequestTimeout, Result,
    Unauthorized, Unavailable, UnsupportedMediaType,
};
use super::extract::{DryRun, IdPath};
use super::idempotency::{Key, KeyedBody};
use super::paging::{BadPage, ExpiredPage, PageParams, Paging};
use super::reply::{with_revision, Empty};
use super::schema;
use super::state::AppState;
use crate::listing::Listing;
use crate::model::Id;
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

/// A task manager and the node it runs on.
// `deny_unknown_fields` states, as `additionalProperties: false`, that a batch element
// with another field is refused.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct Registration {
    /// The task manager.
    #[schema(value_type = Id)]
    id: String,
    /// The node it runs on.
    #[schema(value_type = Id)]
    node: String,
}

/// Every registration
///
/// With `limit`, in pages (see `GET /blocklist`).
#[utoipa::path(
    get,
    path = "/taskmanagers",
    tag = "membership",
    operation_id = "list_registrations",
    params(PageParams),
    responses(
        (status = 200, description = "Every registration (or, with `limit`, a page of them), sorted by id", body = [Registration],
            headers(("X-Blocklist-Revision" = u64, description = "The revision this listing reflects (in pages: the walk's, read before its first page)"))),
        (status = 400, response = BadPage),
        (status = 401, response = Unauthorized),
        (status = 410, response = ExpiredPage),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security((), ("bearerAuth" = [])),
)]
pub(super) async fn list(State(state): State<AppState>, Paging(page): Paging) -> Result<Response> {
    if let Some(page) = page {
        let now = state.store.now();
        return state
            .paged(&page, |_| {
                Listing::new(now)
                    .text("[")
                    .registrations(registration_json, b",")
                    .text("]")
            })
            .await;
    }
    let (all, revision) = state
        .listing(super::super::store::Store::registrations)
        .await?;
    let all: Vec<Registration> = all
        .into_iter()
        .map(|(id, node)| Registration { id, node })
        .collect();
    Ok(with_revision(revision, Json(all)))
}

/// Writes a registration as a JSON array element, as [`Registration`] serializes.
fn registration_json(id: &str, node: &str, out: &mut Vec<u8>) {
    let registration = Registration {
        id: id.to_owned(),
        node: node.to_owned(),
    };
    serde_json::to_writer(out, &registration).expect("registrations serialize");
}

/// The node a task manager runs on
#[utoipa::path(
    get,
    path = "/taskmanagers/{id}",
    tag = "membership",
    operation_id = "get_registration",
    params(IdPath),
    responses(
        (status = 200, description = "The registration", body = Registration),
        (status = 400, response = BadId),
        (status = 401, response = Unauthorized),
        (status = 404, description = "Not registered", body = ErrorBody),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security((), ("bearerAuth" = [])),
)]
pub(super) async fn get_one(
    State(state): State<AppState>,
    IdPath(id): IdPath,
) -> Result<Json<Registration>> {
    let (store, read_id) = (state.store.clone(), id.clone());
    match state
        .store
        .read_durably(move |seen| store.node_of(&read_id, seen))
        .await?
    {
        Some(node) => Ok(Json(Registration { id, node })),
        None => Err(not_registered(&id)),
    }
}

// The request bodies are parsed by hand (`validate::registration`, `validate::registrations`:
// every error named), so `RegistrationBody` and `RegistrationBatch` only document them;
// `Serialize` is derived on the first so that the serde attributes the schema derive reads
// are accepted.

/// The body of `PUT /taskmanagers/{id}`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RegistrationBody {
    /// The node the task manager runs on.
    #[schema(value_type = Id)]
    node: String,
}

/// Register a task manager on a node (or move it)
#[utoipa::path(
    put,
    path = "/taskmanagers/{id}",
    tag = "membership",
    params(IdPath, DryRun),
    request_body(content = RegistrationBody, content_type = "application/json"),
    responses(
        (status = 201, description = "New", body = Registration,
            headers(("X-Blocklist-Revision" = u64, description = "The revision of the change"))),
        (status = 200, description = "Moved or unchanged", body = Registration,
            headers(("X-Blocklist-Revision" = u64, description = "The revision of the change"))),
        (status = 400, description = "Bad id or body", body = ErrorBody),
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
pub(super) async fn register(
    State(state): State<AppState>,
    IdPath(id): IdPath,
    dry: DryRun,
    KeyedBody(key, body): KeyedBody,
) -> Response {
    dry.answer(
        async {
            let node = validate::registration(&body)?;
            let (kept_id, kept_node) = (id.clone(), node.clone());
            let key = key.render(dry, move |results: &Vec<Registered>, revision| {
                Some(registered(
                    dry,
                    results,
                    kept_id.clone(),
                    kept_node.clone(),
                    revision,
                ))
            });
            let (results, revision) = state
                .store
                .with_mode(dry.mode())
                .keyed(key)
                .register(vec![(id.clone(), node.clone())])
                .await?;
            Ok::<_, ApiError>(registered(dry, &results, id, node, revision))
        }
        .await,
    )
}

/// The answer to a registration: 201 when it is new, 200 when moved or unchanged.
fn registered(
    dry: DryRun,
    results: &[Registered],
    id: String,
    node: String,
    revision: u64,
) -> Response {
    let status = match results.first() {
        Some(Registered::Created) => StatusCode::CREATED,
        _ => StatusCode::OK,
    };
    dry.written(revision, (status, Json(Registration { id, node })))
}

/// The body of `PUT /taskmanagers`.
pub(super) struct RegistrationBatch;

impl PartialSchema for RegistrationBatch {
    fn schema() -> RefOr<Schema> {
        schema::batch(
            &Ref::from_schema_name(Registration::name()).into(),
            "A non-empty array of registrations, or `{\"items\": [...]}`. Atomic; a later \
             element for the same id wins.",
        )
    }
}

impl ToSchema for RegistrationBatch {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((Registration::name().into(), Registration::schema()));
    }
}

/// Counts of what a batch registration did.
#[derive(Serialize, Default, ToSchema)]
pub(super) struct Summary {
    /// Task managers that were not registered before.
    created: usize,
    /// Task managers that moved to another node.
    moved: usize,
    /// Task managers already registered on that node.
    unchanged: usize,
}

/// Register many task managers at once
///
/// Atomic: any bad element and nothing is written. A later element for the same id wins.
#[utoipa::path(
    put,
    path = "/taskmanagers",
    tag = "membership",
    params(DryRun),
    request_body(content = RegistrationBatch, content_type = "application/json"),
    responses(
        (status = 201, description = "At least one registration was new", body = Summary,
            headers(("X-Blocklist-Revision" = u64, description = "The revision of the request's last change"))),
        (status = 200, description = "None was new", body = Summary,
            headers(("X-Blocklist-Revision" = u64, description = "The revision of the request's last change"))),
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
pub(super) async fn register_many(
    State(state): State<AppState>,
    dry: DryRun,
    KeyedBody(key, body): KeyedBody,
) -> Response {
    dry.answer(
        async {
            let pairs = validate::registrations(&body, state.limits.max_batch)?;
            let key = key.render(dry, move |results: &Vec<Registered>, revision| {
                Some(summarized(dry, results, revision))
            });
            let writer = state.store.with_mode(dry.mode()).keyed(key);
            let (results, revision) = writer.register(pairs).await?;
            Ok::<_, ApiError>(summarized(dry, &results, revision))
        }
        .await,
    )
}

/// The answer to a batch registration: its counts, 201 when one was new, else 200.
fn summarized(dry: DryRun, results: &[Registered], revision: u64) -> Response {
    let mut summary = Summary::default();
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
    dry.written(revision, (status, Json(summary)))
}

/// Unregister a task manager
#[utoipa::path(
    delete,
    path = "/taskmanagers/{id}",
    tag = "membership",
    params(IdPath, DryRun),
    responses(
        (status = 200, description = "Unregistered (durably)", body = Empty,
            headers(("X-Blocklist-Revision" = u64, description = "The revision of the change"))),
        (status = 400, response = BadId),
        (status = 401, response = Unauthorized),
        (status = 403, response = Forbidden),
        (status = 404, description = "Not registered", body = ErrorBody),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security(("bearerAuth" = [])),
)]
pub(super) async fn unregister(
    State(state): State<AppState>,
    IdPath(id): IdPath,
    dry: DryRun,
    key: Key,
) -> Response {
    let key = key.render(dry, move |node: &Option<String>, revision| {
        node.as_ref().map(|_| dry.written(revision, Json(Empty {})))
    });
    let unregistered = state
        .store
        .with_mode(dry.mode())
        .keyed(key)
        .unregister(id.clone())
        .await;
    dry.answer(match unregistered {
        Ok((Some(_), revision)) => Ok(dry.written(revision, Json(Empty {}))),
        Ok((None, _)) => Err(not_registered(&id)),
        Err(e) => Err(e.into()),
    })
}

fn not_registered(id: &str) -> ApiError {
    ApiError::NotFound(format!("taskmanager {id:?} is not registered"))
}
