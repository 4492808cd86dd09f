//! `PATCH /blocklist/{kind}/{id}`: update an item in place — extend, shorten or make
//! permanent, raise or lower its action, append a cause — optionally conditional on its
//! `ETag` (`If-Match`).

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::Response;
use axum::routing::patch;
use axum::{Json, Router};
use serde_json::{json, Value};
use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{IntoParams, Modify};

use super::blocklist::{etag, not_blocked, refused};
use super::caller::Caller;
use super::error::{
    ApiError, ErrorBody, Forbidden, Internal, Result, Unauthorized, Unavailable,
    UnsupportedMediaType,
};
use super::extract::{DryRun, ForceParam, IdPath};
use super::idempotency::KeyedBody;
use super::provenance::{RequestSource, SourceHeader};
use super::schema;
use super::state::AppState;
use crate::model::{Item, Kind};
use crate::store::UpdateOutcome;
use crate::validate;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/blocklist/taskmanagers/{id}", patch(update_task_manager))
        .route("/blocklist/nodes/{id}", patch(update_node))
}

/// The `If-Match` header, for the `OpenAPI` document (the handler reads it from the
/// headers).
#[derive(IntoParams)]
#[into_params(parameter_in = Header)]
#[expect(dead_code, reason = "documents the header the handler reads")]
pub struct IfMatchHeader {
    /// Update only if the item is in this state: its `ETag` (as `GET` answered it), or `*`
    /// for any. With another tag nothing is written and the answer is 412.
    #[param(rename = "If-Match")]
    if_match: Option<String>,
}

/// The revisions `If-Match` accepts: `None` for no header or `*`; otherwise every strong
/// tag of ours it lists (none when it lists none: nothing matches, RFC 9110 §13.1.1).
fn if_match(headers: &HeaderMap) -> Option<Vec<u64>> {
    let values: Vec<&str> = headers
        .get_all(header::IF_MATCH)
        .iter()
        .map(|v| v.to_str().unwrap_or(""))
        .collect();
    if values.is_empty() || values.iter().any(|v| v.trim() == "*") {
        return None;
    }
    Some(
        values
            .iter()
            .flat_map(|v| v.split(','))
            .filter_map(|tag| {
                tag.trim()
                    .strip_prefix('"')?
                    .strip_suffix('"')?
                    .parse::<u64>()
                    .ok()
            })
            .collect(),
    )
}

async fn update(
    State(state): State<AppState>,
    kind: Kind,
    (caller, headers): (&Caller, &HeaderMap),
    IdPath(id): IdPath,
    (dry, force, RequestSource(source)): (DryRun, ForceParam, RequestSource),
    KeyedBody(key, body): KeyedBody,
) -> Result<Response> {
    let force = force.by(caller)?;
    let now = state.store.now();
    let change = validate::item_change(&body, now)?;
    let key = key.render(
        dry,
        move |outcome: &UpdateOutcome, revision| match outcome {
            UpdateOutcome::Updated(item) => Some(updated(dry, (**item).clone(), revision)),
            UpdateOutcome::NotFound
            | UpdateOutcome::Mismatch { .. }
            | UpdateOutcome::Refused(_) => None,
        },
    );
    let (outcome, revision) = state
        .store
        .with_mode(dry.mode())
        .keyed(key)
        .update(
            kind,
            id.clone(),
            change,
            if_match(headers),
            source,
            now,
            force,
        )
        .await?;
    match outcome {
        UpdateOutcome::Updated(item) => Ok(updated(dry, *item, revision)),
        UpdateOutcome::NotFound => Err(not_blocked(kind, &id)),
        UpdateOutcome::Mismatch { revision } => Err(ApiError::PreconditionFailed(format!(
            "If-Match: {} {id:?} is at {} now, not the state named; nothing was written \
             (read it again and retry with its ETag)",
            kind.singular(),
            etag(revision)
        ))),
        UpdateOutcome::Refused(refusals) => Err(refused(&state, kind, refusals, now).await),
    }
}

/// The answer to an update that found its item: the item as it is now, with its `ETag`.
fn updated(dry: DryRun, item: Item, revision: u64) -> Response {
    let tag = etag(item.revision);
    dry.written(revision, ([(header::ETAG, tag)], Json(item)))
}

macro_rules! update_handler {
    ($name:ident, $kind:expr, $path:literal, $doc:literal) => {
        #[doc = $doc]
        #[doc = ""]
        #[doc = "Sets the end (`endTimestamp`, `timeout` or `permanent: true`; shorter is fine), the action (up or down) and/or appends a cause, in one change with one `updated` event: the resource is never unblocked in between. The updated block must pass the guardrails an add of it would (raising to evacuate counts against the caps and the rate; the duration cap applies)."]
        #[utoipa::path(
            patch,
            path = $path,
            tag = "blocklist",
            params(IdPath, DryRun, ForceParam, SourceHeader, IfMatchHeader),
            request_body(content = ItemUpdate, content_type = "application/json"),
            responses(
                (status = 200, description = "The item as it is now (unchanged when the update changed nothing)", body = Item,
                    headers(
                        ("ETag" = String, description = "The item's new ETag"),
                        ("X-Blocklist-Revision" = u64, description = "The revision of the change"))),
                (status = 400, description = "Malformed: every problem, naming its field", body = ErrorBody),
                (status = 401, response = Unauthorized),
                (status = 403, response = Forbidden),
                (status = 404, description = "Not blocked (or already expired)", body = ErrorBody),
                (status = 412, description = "If-Match named another state; nothing was written", body = ErrorBody),
                (status = 415, response = UnsupportedMediaType),
                (status = 422, description = "A guardrail refused the updated block for good", body = ErrorBody),
                (status = 429, description = "A guardrail refused the updated block for now", body = ErrorBody,
                    headers(("Retry-After" = u64, description = "Seconds until it could pass, when the daemon can tell"))),
                (status = 500, response = Internal),
                (status = 503, response = Unavailable),
            ),
            security(("bearerAuth" = [])),
        )]
        pub(super) async fn $name(
            state: State<AppState>,
            caller: Caller,
            headers: HeaderMap,
            id: IdPath,
            (dry, force, source): (DryRun, ForceParam, RequestSource),
            body: KeyedBody,
        ) -> Response {
            dry.answer(
                update(
                    state,
                    $kind,
                    (&caller, &headers),
                    id,
                    (dry, force, source),
                    body,
                )
                .await,
            )
        }
    };
}

update_handler!(
    update_task_manager,
    Kind::TaskManager,
    "/blocklist/taskmanagers/{id}",
    "Update a blocked task manager in place"
);
update_handler!(
    update_node,
    Kind::Node,
    "/blocklist/nodes/{id}",
    "Update a blocked node in place"
);

/// The body of an update, for the `OpenAPI` document (`validate::item_change` parses it, by
/// hand: lenient numbers and booleans as for an add, `null` as absent). What the derive
/// cannot state, [`UpdateRules`] adds.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct ItemUpdate {
    #[schema(schema_with = lenient_end)]
    end_timestamp: Option<i64>,
    #[schema(schema_with = lenient_timeout)]
    timeout: Option<i64>,
    #[schema(schema_with = lenient_permanent)]
    permanent: Option<bool>,
    action: Option<crate::model::Action>,
    /// A cause to append (merged as an add's is): 1 byte to 1 KiB of UTF-8, not only `,`
    /// separators.
    #[schema(min_length = 1, max_length = 1024, pattern = "[^,]")]
    cause: Option<String>,
}

fn lenient_end() -> RefOr<Schema> {
    schema::lenient_positive(
        i64::MAX,
        "The new end, unix ms, which must be in the future (9223372036854775807: permanent). \
         A JSON integer or a decimal string. At most one of `endTimestamp`, `timeout` and \
         `permanent: true`.",
    )
}

fn lenient_timeout() -> RefOr<Schema> {
    schema::lenient_positive(
        validate::MAX_TIMEOUT_MS,
        "The new end as ms from now: 1 to 10^18. A JSON integer or a decimal string.",
    )
}

fn lenient_permanent() -> RefOr<Schema> {
    schema::lenient_boolean(
        "`true`: the block never ends. `false` only beside `timeout` or `endTimestamp` (alone \
         it sets nothing).",
    )
}

/// Adds to the `ItemUpdate` schema the rules between its fields (`null` counting as
/// absent): at most one end (`endTimestamp`, `timeout`, `permanent: true`), `permanent:
/// false` only with a time, and something to change (`allOf` of a `not` and an `anyOf`).
pub(super) struct UpdateRules;

impl Modify for UpdateRules {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let update = openapi
            .components
            .as_mut()
            .and_then(|c| c.schemas.get_mut("ItemUpdate"));
        if let Some(RefOr::T(Schema::Object(update))) = update {
            update.extensions = Some(update_rules());
        }
    }
}

fn update_rules() -> Extensions {
    let given = |field: &str| json!({"required": [field], "properties": {field: {"not": {"type": "null"}}}});
    let permanent = |value: bool| {
        json!({"required": ["permanent"],
               "properties": {"permanent": {"enum": [value, value.to_string()]}}})
    };
    let with = |a: Value, b: Value| json!({"allOf": [a, b]});
    let timed = json!({"anyOf": [given("timeout"), given("endTimestamp")]});
    let refused = json!({"anyOf": [
        with(given("timeout"), given("endTimestamp")),
        with(permanent(true), timed.clone()),
        with(permanent(false), json!({"not": timed})),
    ]});
    let changes = json!([
        given("endTimestamp"),
        given("timeout"),
        permanent(true),
        given("action"),
        given("cause"),
    ]);
    // One keyword: `Extensions` is a `HashMap`, so two would be written in any order.
    Extensions::from_iter([("allOf", json!([{"not": refused}, {"anyOf": changes}]))])
}
