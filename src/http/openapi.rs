//! The `OpenAPI` 3 description of the REST API, generated from the code with utoipa, served at
//! `GET /openapi.json` and checked in as `docs/openapi.json` (`tests/openapi.rs` fails when
//! the two drift; `UPDATE_OPENAPI=1 cargo test --test openapi` rewrites the file).
//!
//! Each handler carries its own `#[utoipa::path]`, and each resource module the schemas of
//! its requests and responses; the reusable error responses are in [`super::error`], the
//! `{id}` parameter is [`super::extract::IdPath`], the `Idempotency-Key` of every write
//! is added by [`IdempotencyDoc`]. This module only gathers them into the document, and
//! serves it.

use std::sync::LazyLock;

use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::RefOr;
use utoipa::{Modify, OpenApi};

use super::add_request::AtMostOne;
use super::error::{
    BadId, Forbidden, Internal, PayloadTooLarge, RequestTimeout, Unauthorized, Unavailable,
    UnsupportedMediaType,
};
use super::idempotency::IdempotencyDoc;
use super::paging::{BadPage, ExpiredPage, PageDoc};
use super::update::UpdateRules;
use super::{
    alertmanager, allowlist, blocklist, check, detectors, enforcement, events, ops, policy,
    provenance, selector, taskmanagers, update,
};

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
            and /metrics never do. Each token has a role: `reader` (reads only; a change \
            answers **403**), `enforcer` (reads, enforcement statuses and task manager \
            registrations: what a bridge such as blocklist-kube reports from its cluster), \
            `writer` (every read and change but the admin ones) or `admin` (everything: changing the policy or the allowlist, `?force=true`, \
            `?holdOff=` and an unblock by selector with `all=true` need it).",
        license(name = "Apache-2.0"),
    ),
    paths(
        blocklist::list_all,
        blocklist::export,
        blocklist::list_task_managers,
        blocklist::add_task_managers,
        blocklist::get_task_manager,
        blocklist::remove_task_manager,
        selector::remove_task_managers,
        blocklist::list_nodes,
        blocklist::add_nodes,
        blocklist::get_node,
        blocklist::remove_node,
        selector::remove_nodes,
        update::update_task_manager,
        update::update_node,
        provenance::task_manager_history,
        provenance::node_history,
        detectors::retract_task_managers,
        detectors::retract_nodes,
        alertmanager::receive,
        check::check_many,
        check::check_task_manager,
        check::check_node,
        events::watch,
        policy::get_policy,
        policy::put_policy,
        policy::status,
        allowlist::list_all,
        allowlist::list_kind,
        allowlist::get_entry,
        allowlist::put_entry,
        allowlist::remove_entry,
        taskmanagers::list,
        taskmanagers::register_many,
        taskmanagers::get_one,
        taskmanagers::register,
        taskmanagers::unregister,
        enforcement::list,
        enforcement::report,
        ops::healthz,
        ops::readyz,
        ops::metrics,
        openapi_json,
    ),
    components(responses(
        BadId,
        Unauthorized,
        Forbidden,
        RequestTimeout,
        PayloadTooLarge,
        UnsupportedMediaType,
        Internal,
        Unavailable,
        BadPage,
        ExpiredPage,
    )),
    modifiers(&BearerScheme, &OpenItem, &AtMostOne, &UpdateRules, &IdempotencyDoc, &PageDoc),
    tags(
        (name = "blocklist", description = "Blocked task managers and nodes"),
        (name = "check", description = "Is a task manager or node blocked (directly or via its node)?"),
        (name = "events", description = "The change feed"),
        (name = "membership", description = "Which task manager runs on which node"),
        (name = "policy", description = "The guardrails: caps, the evacuation rate, durations"),
        (name = "allowlist", description = "Ids that may never be blocked"),
        (name = "enforcement", description = "What enforcers (a bridge acting on the blocklist in a cluster) report they did about blocked items"),
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
            "A token from `--token-file` (one per line; any listed token is accepted). Its \
             role there (`reader`, `enforcer`, `writer` or `admin`) decides what it may do."
                .into(),
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The document and the hand-kept route list of the router (`super::routes::ROUTES`) name the
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
        let routed: BTreeSet<(String, String)> = super::super::routes::ROUTES
            .iter()
            .map(|(m, p)| (m.to_string(), p.to_string()))
            .collect();
        assert_eq!(
            documented, routed,
            "docs vs router: add the route to ROUTES in src/http/routes.rs and a #[utoipa::path] \
             to its handler (listed in ApiDoc)"
        );
    }

    /// Every write takes `Idempotency-Key`, marks its replayed successes and documents the
    /// reused key's 422; no read does.
    #[test]
    fn every_write_documents_its_idempotency_key() {
        let doc: serde_json::Value = serde_json::from_str(document()).unwrap();
        for (method, path) in super::super::routes::ROUTES {
            let operation = &doc["paths"][path][method.to_lowercase()];
            let takes_key = operation["parameters"]
                .as_array()
                .is_some_and(|ps| ps.iter().any(|p| p["name"] == "Idempotency-Key"));
            let write = *method != "GET" && *path != "/blocklist/check";
            assert_eq!(takes_key, write, "{method} {path}");
            if !write {
                continue;
            }
            let responses = operation["responses"].as_object().unwrap();
            for (status, response) in responses {
                if status.starts_with('2') {
                    assert!(
                        response["headers"].get("Idempotent-Replayed").is_some(),
                        "{method} {path} {status}"
                    );
                }
            }
            let unprocessable = responses["422"]["description"].as_str().unwrap();
            assert!(
                unprocessable.contains("Idempotency-Key was first used for a different request"),
                "{method} {path}: {unprocessable}"
            );
        }
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
