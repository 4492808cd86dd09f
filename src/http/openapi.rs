//! The OpenAPI 3 description of the REST API, generated from the code with utoipa, served at
//! `GET /openapi.json` and checked in as `docs/openapi.json` (`tests/openapi.rs` fails when
//! the two drift; `UPDATE_OPENAPI=1 cargo test --test openapi` rewrites the file).
//!
//! Each handler carries its own `#[utoipa::path]`; this module holds what they share: the
//! document itself, the reusable error responses, the path parameter, and schemas of the
//! request bodies. Those bodies are parsed by hand in [`crate::validate`] (lenient numbers
//! and booleans, every error named), not by serde, so their schemas are documentation-only
//! types that are never built.

use std::sync::LazyLock;

use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use serde::Serialize;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{KnownFormat, RefOr, SchemaFormat};
use utoipa::{IntoParams, Modify, OpenApi, ToResponse, ToSchema};

use super::error::ErrorBody;
use super::{blocklist, check, events, ops, taskmanagers};

/// The name of the bearer security scheme in the document (the operations' `security(...)`
/// spell it out: the macro takes only a literal).
const BEARER: &str = "bearerAuth";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "blocklistd",
        version = env!("CARGO_PKG_VERSION"),
        description = "A persistent FLIP-224 blocklist daemon: block task managers and nodes \
            over REST. The prose contract is docs/api.md.\n\n\
            Every error response, 4xx or 5xx, has the body `{\"errors\": [\"…\"]}`. Any \
            request may also get **404** (no such endpoint), **405** (the endpoint exists \
            but not with this method; the `Allow` header lists those that do), and **503** \
            (over `--max-connections`; the connection is closed).\n\n\
            With `--token-file`, POST/PUT/DELETE need `Authorization: Bearer <token>`; reads \
            (GET, and POST /blocklist/check) need it only with `--auth-reads`; the probes \
            and /metrics never do.",
        license(name = "Apache-2.0"),
    ),
    paths(
        blocklist::list_all,
        blocklist::export,
        blocklist::list_task_managers,
        blocklist::add_task_managers,
        blocklist::get_task_manager,
        blocklist::remove_task_manager,
        blocklist::list_nodes,
        blocklist::add_nodes,
        blocklist::get_node,
        blocklist::remove_node,
        check::check_many,
        check::check_task_manager,
        check::check_node,
        events::watch,
        taskmanagers::list,
        taskmanagers::register_many,
        taskmanagers::get_one,
        taskmanagers::register,
        taskmanagers::unregister,
        ops::healthz,
        ops::readyz,
        ops::metrics,
        openapi_json,
    ),
    components(responses(
        BadId,
        Unauthorized,
        RequestTimeout,
        PayloadTooLarge,
        UnsupportedMediaType,
        Internal,
        Unavailable,
    )),
    modifiers(&BearerScheme, &OpenItem),
    tags(
        (name = "blocklist", description = "Blocked task managers and nodes"),
        (name = "check", description = "Is a task manager or node blocked (directly or via its node)?"),
        (name = "events", description = "The change feed"),
        (name = "membership", description = "Which task manager runs on which node"),
        (name = "operations", description = "Probes, metrics and this document"),
    ),
)]
pub struct ApiDoc;

/// Adds the bearer scheme that `security(...)` on the operations refers to.
struct BearerScheme;

impl Modify for BearerScheme {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let mut http = Http::new(HttpAuthScheme::Bearer);
        http.description = Some(
            "A token from `--token-file` (one per line; any listed token is accepted).".into(),
        );
        components.add_security_scheme(BEARER, SecurityScheme::Http(http));
    }
}

/// Drops `additionalProperties: false` from `Item`. The derive takes it from serde's
/// `deny_unknown_fields`, which is there for `import`'s parsing; but node entries and
/// `blockedBy` elements extend `Item` (`allOf`) with `taskManagers` and `kind`, which that
/// would forbid.
struct OpenItem;

impl Modify for OpenItem {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let item = openapi
            .components
            .as_mut()
            .and_then(|c| c.schemas.get_mut("Item"));
        if let Some(RefOr::T(Schema::Object(item))) = item {
            item.additional_properties = None;
        }
    }
}

/// The document as served and checked in: pretty JSON with a trailing newline. Built once.
pub fn document() -> &'static str {
    static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
        let mut json = ApiDoc::openapi()
            .to_pretty_json()
            .expect("the OpenAPI document serializes");
        json.push('\n');
        json
    });
    &DOCUMENT
}

/// This document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    responses(
        (status = 200, description = "The OpenAPI 3 document (the same as docs/openapi.json)",
            body = Object, content_type = "application/json"),
        (status = 401, response = Unauthorized),
    ),
    security((), ("bearerAuth" = [])),
)]
pub(super) async fn openapi_json() -> impl IntoResponse {
    ([(CONTENT_TYPE, "application/json")], document())
}

// ---- Reusable responses -------------------------------------------------------------------
// Newtypes over the error body, so that an operation lists a shared failure in one line.
// Documentation only: the handlers answer with `ApiError`.

/// The `{id}` in the path breaks the id rules (empty, over 256 bytes, a control character,
/// or not valid percent-encoded UTF-8).
#[derive(ToResponse)]
#[allow(dead_code)]
pub struct BadId(ErrorBody);

/// `--token-file` is set and this request carries no valid `Authorization: Bearer` token
/// (mutations always need one; reads only with `--auth-reads`).
#[derive(ToResponse)]
#[response(headers(("WWW-Authenticate" = String, description = "`Bearer realm=\"blocklistd\"`")))]
#[allow(dead_code)]
pub struct Unauthorized(ErrorBody);

/// The body did not arrive within `--body-timeout-ms`.
#[derive(ToResponse)]
#[allow(dead_code)]
pub struct RequestTimeout(ErrorBody);

/// The body is over `--max-body-bytes`, or holds more than `--max-batch` elements (ids, for a
/// check).
#[derive(ToResponse)]
#[allow(dead_code)]
pub struct PayloadTooLarge(ErrorBody);

/// `Content-Type` is not `application/json` (or `application/*+json`).
#[derive(ToResponse)]
#[allow(dead_code)]
pub struct UnsupportedMediaType(ErrorBody);

/// A stored value does not decode (details in the daemon's log).
#[derive(ToResponse)]
#[allow(dead_code)]
pub struct Internal(ErrorBody);

/// The store is unavailable (disk full, I/O error, reopening after a storage fault, shutting
/// down). Retry later. A write answered 503 was not acknowledged, and may or may not have
/// been applied: re-read before retrying, or retry an add with allowMerge.
#[derive(ToResponse)]
#[allow(dead_code)]
pub struct Unavailable(ErrorBody);

// ---- Parameters ---------------------------------------------------------------------------

/// The `{id}` path segment of every single-resource route.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct IdParam {
    /// The id, percent-encoded (`a%2Fb` for `a/b`): 1–256 bytes of UTF-8 without control
    /// characters; `/`, spaces, `%` and non-ASCII are fine. (`maxLength` counts characters,
    /// so it is only an upper bound of the byte limit.)
    #[param(min_length = 1, max_length = 256)]
    id: String,
}

// ---- Documentation-only body schemas ------------------------------------------------------
// Field names and optionality mirror `crate::validate`, which rejects any other field.
// `Serialize` is derived only so that serde's attributes (`untagged`, `rename_all`,
// `deny_unknown_fields`), which the schema derive reads, are accepted by the compiler.

/// One element of an add request.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)]
pub struct AddElement {
    /// The id to block: 1–256 bytes of UTF-8 without control characters.
    #[schema(min_length = 1, max_length = 256)]
    id: String,
    action: crate::model::Action,
    /// Why: 1 byte to 1 KiB of UTF-8.
    #[schema(min_length = 1, max_length = 1024)]
    cause: String,
    /// The item ends this many ms after the request arrives (> 0). At most one of
    /// `timeout` and `endTimestamp`; neither means permanent.
    #[schema(schema_with = lenient_timeout)]
    timeout: Option<i64>,
    /// The item ends at this unix ms, which must be in the future.
    #[schema(schema_with = lenient_end)]
    end_timestamp: Option<i64>,
    /// Merge into an active item with the same id instead of a 409. Default false.
    #[schema(schema_with = lenient_allow_merge)]
    allow_merge: Option<bool>,
    /// Alias of `allowMerge` (give one or the other, not both).
    #[schema(schema_with = lenient_merge_on_conflict)]
    merge_on_conflict: Option<bool>,
}

/// The body of an add: a non-empty array of elements, or `{"items": [...]}`. Validated whole
/// and applied atomically, or not at all.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum AddRequest {
    #[schema(title = "Elements")]
    Array(Vec<AddElement>),
    #[schema(title = "Wrapped")]
    Wrapped {
        #[schema(min_items = 1)]
        items: Vec<AddElement>,
    },
}

/// The body of `PUT /taskmanagers/{id}`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct RegistrationBody {
    /// The node the task manager runs on (id rules apply).
    #[schema(min_length = 1, max_length = 256)]
    node: String,
}

/// The body of `PUT /taskmanagers`: a non-empty array of registrations, or
/// `{"items": [...]}`. Atomic; a later element for the same id wins.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum RegistrationBatch {
    #[schema(title = "Elements")]
    Array(Vec<taskmanagers::Registration>),
    #[schema(title = "Wrapped")]
    Wrapped {
        #[schema(min_items = 1)]
        items: Vec<taskmanagers::Registration>,
    },
}

/// The body of `POST /blocklist/check`: either list may be absent or null. At most
/// `--max-batch` ids in all.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)]
pub struct CheckRequest {
    task_managers: Option<Vec<String>>,
    nodes: Option<Vec<String>>,
}

/// The body of a successful DELETE: an empty object.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct Empty {}

/// Liveness: always `{"status": "ok"}` while the process answers.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct Health {
    #[schema(pattern = "^ok$")]
    status: String,
}

/// Readiness of the store, its committer and the sweeper.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct Readiness {
    /// `ready` when the committer and the sweeper run, else `not ready`.
    #[schema(schema_with = ready_status)]
    status: String,
    /// Always `open`: the listener opens only after the store did.
    store: String,
    /// `running` or `stopped`.
    committer: String,
    /// `running` or `stopped`.
    sweeper: String,
    /// The current revision.
    revision: u64,
}

fn ready_status() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["ready", "not ready"]))
        .description(Some(
            "`ready` when the committer and the sweeper run, else `not ready`",
        ))
        .into()
}

/// An integer that may also be sent as a decimal string; `null` counts as absent.
fn lenient_integer(description: &str) -> RefOr<Schema> {
    OneOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64))),
        )
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some("^[+-]?[0-9]+$")),
        )
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .description(Some(description))
        .into()
}

/// A boolean that may also be sent as the string `"true"` or `"false"`; `null` counts as
/// absent.
fn lenient_boolean(description: &str) -> RefOr<Schema> {
    OneOfBuilder::new()
        .item(ObjectBuilder::new().schema_type(Type::Boolean))
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(["true", "false"])),
        )
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .description(Some(description))
        .into()
}

fn lenient_timeout() -> RefOr<Schema> {
    lenient_integer(
        "The item ends this many ms after the request arrives (> 0). A JSON integer or a \
         decimal string. At most one of `timeout` and `endTimestamp`; neither means permanent.",
    )
}

fn lenient_end() -> RefOr<Schema> {
    lenient_integer(
        "The item ends at this unix ms, which must be in the future. A JSON integer or a \
         decimal string.",
    )
}

fn lenient_allow_merge() -> RefOr<Schema> {
    lenient_boolean(
        "Merge into an active item with the same id instead of answering 409. Default false.",
    )
}

fn lenient_merge_on_conflict() -> RefOr<Schema> {
    lenient_boolean("Alias of `allowMerge` (give one or the other, not both).")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The document and the hand-kept route list of the router (`super::ROUTES`) name the
    /// same (method, path) pairs: a route added to one and not the other fails here.
    #[test]
    fn the_document_covers_every_route() {
        let doc: serde_json::Value = serde_json::from_str(document()).unwrap();
        let documented: BTreeSet<(String, String)> = doc["paths"]
            .as_object()
            .unwrap()
            .iter()
            .flat_map(|(path, item)| {
                item.as_object()
                    .unwrap()
                    .keys()
                    // A path item may also hold `parameters`, `summary`, …: keep the methods.
                    .filter(|key| {
                        [
                            "get", "put", "post", "delete", "patch", "head", "options", "trace",
                        ]
                        .contains(&key.as_str())
                    })
                    .map(move |method| (method.to_uppercase(), path.clone()))
            })
            .collect();
        let routed: BTreeSet<(String, String)> = super::super::ROUTES
            .iter()
            .map(|(m, p)| (m.to_string(), p.to_string()))
            .collect();
        assert_eq!(
            documented, routed,
            "docs vs router: add the route to ROUTES in src/http/mod.rs and a #[utoipa::path] \
             to its handler (listed in ApiDoc)"
        );
    }

    /// `NodeEntry` and `BlockedBy` extend `Item` with `allOf`: `Item` must stay open.
    #[test]
    fn item_can_be_extended() {
        let doc: serde_json::Value = serde_json::from_str(document()).unwrap();
        let item = &doc["components"]["schemas"]["Item"];
        assert_eq!(item["type"], "object");
        assert!(item.get("additionalProperties").is_none(), "{item}");
    }
}
