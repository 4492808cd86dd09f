//! `/allowlist`: ids that may never be blocked. Reads are open like every read; changes
//! need an admin token.

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::caller::{Caller, Role};
use super::error::{
    ApiError, BadId, ErrorBody, Forbidden, Internal, Result, Unauthorized, Unavailable,
    UnsupportedMediaType,
};
use super::extract::{path_param, DryRun, IdPath};
use super::idempotency::{Key, KeyedBody};
use super::reply::with_revision;
use super::state::AppState;
use crate::allowlist::{Entry, MAX_COMMENT_BYTES, MAX_PREFIX_ENTRIES};
use crate::model::{Item, Kind};
use crate::store::{AllowOutcome, MAX_UNBLOCKED};
use crate::validate;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/allowlist", get(list_all))
        .route("/allowlist/{kind}", get(list_kind))
        .route(
            "/allowlist/{kind}/{id}",
            get(get_entry).put(put_entry).delete(remove_entry),
        )
}

/// Every allowlist entry in force.
#[derive(Serialize, ToSchema)]
pub(super) struct Allowlist {
    /// The revision this listing reflects.
    revision: u64,
    entries: Vec<Entry>,
}

/// The answer to a put: the entry, and the blocks it lifted.
#[derive(Serialize, ToSchema)]
pub(super) struct PutAnswer {
    entry: Entry,
    /// The active items the entry covers, removed in the same transaction (`removed`
    /// events): an id on the allowlist is never blocked.
    unblocked: Vec<Item>,
}

/// The body of a put. Parsed by hand (`parse_put`), so this only documents it.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct PutBody {
    /// Why the ids must never be blocked (1 to 1024 bytes).
    comment: String,
    /// `true`: the entry covers every id starting with the path's id. Default `false`.
    prefix: Option<bool>,
    /// How long the entry applies, in ms from now (at most one of `timeout` and
    /// `endTimestamp`; neither: until removed).
    timeout: Option<i64>,
    /// Unix ms when the entry stops applying.
    end_timestamp: Option<i64>,
}

/// The kind of a path's `{kind}`: `taskmanagers` or `nodes` (404 otherwise: no such
/// resource).
pub(super) struct KindPath(Kind);

impl<S: Send + Sync> FromRequestParts<S> for KindPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self> {
        let segment = path_param(parts, state, "kind").await?;
        Kind::ALL
            .into_iter()
            .find(|kind| kind.plural() == segment)
            .map(KindPath)
            .ok_or_else(|| {
                ApiError::NotFound(format!(
                    "no such kind {segment:?}; the allowlist has taskmanagers and nodes"
                ))
            })
    }
}

/// Every allowlist entry in force
#[utoipa::path(
    get,
    path = "/allowlist",
    tag = "allowlist",
    responses(
        (status = 200, description = "Every entry in force, by kind and id", body = Allowlist,
            headers(("X-Blocklist-Revision" = u64, description = "The revision this listing reflects"))),
        (status = 401, response = Unauthorized),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security((), ("bearerAuth" = [])),
)]
pub(super) async fn list_all(State(state): State<AppState>) -> Result<Response> {
    let now = state.store.now();
    let (entries, revision) = state
        .listing(move |store| store.stored_allowlist(None, now))
        .await?;
    Ok(with_revision(
        revision,
        Json(Allowlist { revision, entries }),
    ))
}

/// The allowlist entries of one kind
#[utoipa::path(
    get,
    path = "/allowlist/{kind}",
    tag = "allowlist",
    params(("kind" = String, Path, description = "`taskmanagers` or `nodes`")),
    responses(
        (status = 200, description = "The kind's entries in force, by id", body = [Entry],
            headers(("X-Blocklist-Revision" = u64, description = "The revision this listing reflects"))),
        (status = 401, response = Unauthorized),
        (status = 404, description = "No such kind", body = ErrorBody),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security((), ("bearerAuth" = [])),
)]
pub(super) async fn list_kind(
    State(state): State<AppState>,
    KindPath(kind): KindPath,
) -> Result<Response> {
    let now = state.store.now();
    let (entries, revision) = state
        .listing(move |store| store.stored_allowlist(Some(kind), now))
        .await?;
    Ok(with_revision(revision, Json(entries)))
}

/// One allowlist entry
#[utoipa::path(
    get,
    path = "/allowlist/{kind}/{id}",
    tag = "allowlist",
    params(("kind" = String, Path, description = "`taskmanagers` or `nodes`"), IdPath),
    responses(
        (status = 200, description = "The entry", body = Entry),
        (status = 400, response = BadId),
        (status = 401, response = Unauthorized),
        (status = 404, description = "No such entry in force (or no such kind)", body = ErrorBody),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security((), ("bearerAuth" = [])),
)]
pub(super) async fn get_entry(
    State(state): State<AppState>,
    KindPath(kind): KindPath,
    IdPath(id): IdPath,
) -> Result<Json<Entry>> {
    let store = &state.store;
    store
        .allow_entry(kind, &id, store.now())
        .await?
        .map(Json)
        .ok_or_else(|| not_allowlisted(kind, &id))
}

/// Put an allowlist entry
///
/// The id (or, with `prefix`, every id starting with it) may not be blocked while the
/// entry applies: an add of it is refused whole (422; 429 with `Retry-After` while an
/// entry with an end applies). The active blocks it covers are removed in the same
/// transaction. Admin tokens only.
#[utoipa::path(
    put,
    path = "/allowlist/{kind}/{id}",
    tag = "allowlist",
    params(("kind" = String, Path, description = "`taskmanagers` or `nodes`"), IdPath, DryRun),
    request_body(content = PutBody, content_type = "application/json"),
    responses(
        (status = 201, description = "A new entry", body = PutAnswer,
            headers(("X-Blocklist-Revision" = u64, description = "The revision of the change"))),
        (status = 200, description = "The entry of that id was replaced", body = PutAnswer,
            headers(("X-Blocklist-Revision" = u64, description = "The revision of the change"))),
        (status = 400, description = "Malformed: every problem, naming its field", body = ErrorBody),
        (status = 401, response = Unauthorized),
        (status = 403, response = Forbidden),
        (status = 404, description = "No such kind", body = ErrorBody),
        (status = 415, response = UnsupportedMediaType),
        (status = 422, description = "Too many prefix entries, or it would lift too many blocks at once", body = ErrorBody),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security((), ("bearerAuth" = [])),
)]
pub(super) async fn put_entry(
    State(state): State<AppState>,
    caller: Caller,
    kind: Result<KindPath>,
    IdPath(id): IdPath,
    dry: DryRun,
    KeyedBody(key, body): KeyedBody,
) -> Response {
    let result = async {
        let KindPath(kind) = kind?;
        caller.require(Role::Admin, "changing the allowlist")?;
        let now = state.store.now();
        let entry = parse_put(kind, &id, &body, now, caller.name.clone())?;
        let kept = entry.clone();
        let key = key.render(dry, move |outcome: &AllowOutcome, revision| match outcome {
            AllowOutcome::Put {
                replaced,
                unblocked,
            } => Some(put(
                dry,
                kept.clone(),
                *replaced,
                unblocked.clone(),
                revision,
            )),
            AllowOutcome::TooManyPrefixes | AllowOutcome::TooManyUnblocked => None,
        });
        let writer = state.store.with_mode(dry.mode()).keyed(key);
        let (outcome, revision) = writer.put_allow(entry.clone()).await?;
        match outcome {
            AllowOutcome::Put {
                replaced,
                unblocked,
            } => Ok(put(dry, entry, replaced, unblocked, revision)),
            AllowOutcome::TooManyPrefixes => Err(ApiError::Unprocessable(vec![format!(
                "prefix: the allowlist holds {MAX_PREFIX_ENTRIES} prefix entries already, the \
                 most it may; remove one, or use exact entries"
            )])),
            AllowOutcome::TooManyUnblocked => Err(ApiError::Unprocessable(vec![format!(
                "prefix: the entry would lift more than {MAX_UNBLOCKED} blocks at once; remove \
                 some of them first, or use a longer prefix"
            )])),
        }
    }
    .await;
    dry.answer(result)
}

/// The answer to a put that stored its entry: 201 for a new one, 200 for a replaced one.
fn put(dry: DryRun, entry: Entry, replaced: bool, unblocked: Vec<Item>, revision: u64) -> Response {
    let status = if replaced {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    dry.written(revision, (status, Json(PutAnswer { entry, unblocked })))
}

/// Remove an allowlist entry
///
/// Admin tokens only.
#[utoipa::path(
    delete,
    path = "/allowlist/{kind}/{id}",
    tag = "allowlist",
    params(("kind" = String, Path, description = "`taskmanagers` or `nodes`"), IdPath, DryRun),
    responses(
        (status = 200, description = "The entry was in force and is removed (durably)", body = Entry,
            headers(("X-Blocklist-Revision" = u64, description = "The revision of the change"))),
        (status = 400, response = BadId),
        (status = 401, response = Unauthorized),
        (status = 403, response = Forbidden),
        (status = 404, description = "No such entry in force (or no such kind)", body = ErrorBody),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security((), ("bearerAuth" = [])),
)]
pub(super) async fn remove_entry(
    State(state): State<AppState>,
    caller: Caller,
    kind: Result<KindPath>,
    IdPath(id): IdPath,
    dry: DryRun,
    key: Key,
) -> Response {
    let result = async {
        let KindPath(kind) = kind?;
        caller.require(Role::Admin, "changing the allowlist")?;
        let key = key.render(dry, move |removed: &Option<Entry>, revision| {
            removed
                .as_ref()
                .map(|entry| dry.written(revision, Json(entry)))
        });
        let writer = state.store.with_mode(dry.mode()).keyed(key);
        match writer.remove_allow(kind, id.clone()).await? {
            (Some(entry), revision) => Ok(dry.written(revision, Json(entry))),
            (None, _) => Err(not_allowlisted(kind, &id)),
        }
    }
    .await;
    dry.answer(result)
}

fn not_allowlisted(kind: Kind, id: &str) -> ApiError {
    ApiError::NotFound(format!(
        "{} {id:?} has no allowlist entry in force",
        kind.singular()
    ))
}

/// The entry a put's body asks for, or every problem with it.
fn parse_put(
    kind: Kind,
    id: &str,
    body: &Value,
    now: i64,
    added_by: Option<String>,
) -> Result<Entry> {
    let Some(fields) = body.as_object() else {
        return Err(ApiError::bad_request(
            "the body must be a JSON object: {\"comment\": \"…\"}",
        ));
    };
    let mut errors = Vec::new();
    for name in fields.keys() {
        if !["comment", "prefix", "timeout", "endTimestamp"].contains(&name.as_str()) {
            errors.push(format!(
                ".{name}: unknown field (known fields: comment, prefix, timeout, endTimestamp)"
            ));
        }
    }
    let comment = match fields.get("comment") {
        Some(Value::String(c)) if c.is_empty() => {
            errors.push(".comment: must not be empty; say why the id must never be blocked".into());
            String::new()
        }
        Some(Value::String(c)) if c.len() > MAX_COMMENT_BYTES => {
            errors.push(format!(
                ".comment: is {} bytes long; the limit is {MAX_COMMENT_BYTES}",
                c.len()
            ));
            String::new()
        }
        Some(Value::String(c)) if c.chars().any(char::is_control) => {
            errors.push(".comment: must not contain control characters".into());
            String::new()
        }
        Some(Value::String(c)) => c.clone(),
        Some(_) => {
            errors.push(".comment: must be a string".into());
            String::new()
        }
        None => {
            errors.push(".comment: required; say why the id must never be blocked".into());
            String::new()
        }
    };
    let prefix = match fields.get("prefix") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            errors.push(".prefix: must be true or false".into());
            false
        }
    };
    let end = match validate::entry_end(fields, now) {
        Ok(end) => end,
        Err(mut problems) => {
            errors.append(&mut problems);
            None
        }
    };
    if !errors.is_empty() {
        return Err(ApiError::BadRequest(errors));
    }
    Ok(Entry {
        kind,
        id: id.to_owned(),
        prefix,
        comment,
        added_by,
        added_at: now,
        end_timestamp: end,
    })
}
