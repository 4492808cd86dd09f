//! The `OpenAPI` document: what the daemon serves at `GET /openapi.json` is what is checked in
//! as `docs/openapi.json`, and it describes the routes the daemon really serves.
//!
//! To regenerate the checked-in file after an API change:
//! `UPDATE_OPENAPI=1 cargo test --test openapi`.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;

use common::*;
use reqwest::StatusCode;
use serde_json::Value;

fn checked_in() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/openapi.json")
}

/// The (method, path template) pairs of the document's operations.
fn operations(doc: &Value) -> BTreeSet<(String, String)> {
    doc["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .expect("a path item")
                .keys()
                // A path item may also hold `parameters`, `summary`, …: keep the methods.
                .map(|key| key.to_uppercase())
                .filter(|method| METHODS.contains(&method.as_str()))
                .map(move |method| (method, path.clone()))
        })
        .collect()
}

/// The methods probed on every documented path. (HEAD is left out: axum answers it wherever
/// GET is routed.)
const METHODS: &[&str] = &["GET", "POST", "PUT", "DELETE", "PATCH"];

#[tokio::test]
async fn the_served_document_is_the_checked_in_one() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let resp = d.client.get(d.url("/openapi.json")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let served = resp.text().await.unwrap();
    // The library's copy is the daemon's: the unit test over ROUTES covers the same document.
    assert_eq!(served, blocklistd::http::openapi_document());

    if std::env::var_os("UPDATE_OPENAPI").is_some_and(|v| v == "1") {
        std::fs::write(checked_in(), &served).expect("write docs/openapi.json");
        return;
    }
    let file = std::fs::read_to_string(checked_in()).unwrap_or_default();
    // Compared as JSON values so that a reformatted file (line endings, say) is no drift; the
    // file is written byte for byte as served, so normally the texts are equal too.
    let on_disk: Value = serde_json::from_str(&file).unwrap_or(Value::Null);
    let served: Value = serde_json::from_str(&served).expect("the served document is JSON");
    assert!(
        on_disk == served,
        "docs/openapi.json differs from what GET /openapi.json serves (or is missing). \
         Regenerate it with `UPDATE_OPENAPI=1 cargo test --test openapi` and commit it."
    );
}

/// Whether a response is the router's own "no such route / method" answer rather than a
/// handler's (a handler's 404 names the missing item, never "no such endpoint").
async fn unrouted(resp: reqwest::Response) -> Option<String> {
    let status = resp.status();
    // Only the head matters; dropping the body also ends a watch stream.
    if status == StatusCode::METHOD_NOT_ALLOWED {
        return Some("405".into());
    }
    if status == StatusCode::NOT_FOUND {
        let body = resp.text().await.unwrap_or_default();
        if body.contains("no such endpoint") {
            return Some(format!("404 {body}"));
        }
    }
    None
}

/// The document covers the router, probed over HTTP: on every documented path, each
/// documented method reaches a handler (not the router's 404/405 fallbacks), and every other
/// method gets the 405 fallback, so no served method is missing from the document. Paths
/// outside the document cannot be probed (axum cannot list its routes); `http::ROUTES`, the
/// hand-kept list beside the router, closes that gap: a unit test holds it equal to the
/// document, and it is probed here too.
///
/// The probes carry no body (and the add/registration routes need a JSON one), and `{id}` is
/// an id nothing has: they cannot change anything.
#[tokio::test]
async fn the_document_covers_what_the_daemon_serves() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let (status, doc) = d.get("/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    let documented = operations(&doc);
    assert!(documented.len() > 20, "{documented:?}");
    let routes: BTreeSet<(String, String)> = blocklistd::http::ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(documented, routes, "the document vs http::ROUTES");

    let paths: BTreeSet<&String> = documented.iter().map(|(_, p)| p).collect();
    let mut problems = Vec::new();
    for path in paths {
        let concrete = path.replace("{id}", "no-such-id");
        for method in METHODS {
            let is_documented = documented.contains(&(method.to_string(), path.clone()));
            let resp = d
                .client
                .request(method.parse().unwrap(), d.url(&concrete))
                .send()
                .await
                .unwrap();
            match (is_documented, unrouted(resp).await) {
                (true, Some(answer)) => {
                    problems.push(format!("{method} {path} is documented but got {answer}"));
                }
                (false, None) => problems.push(format!(
                    "{method} {path} is served but not in the document (nor in http::ROUTES)"
                )),
                _ => {}
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// Every query parameter has a default (each extractor takes its parameter as optional), so
/// none may be documented as required: a client following the document would send what no
/// call needs, and a contract checker takes a call without it for a schema violation.
#[test]
fn no_query_parameter_is_documented_as_required() {
    let doc: Value = serde_json::from_str(blocklistd::http::openapi_document()).unwrap();
    let mut required = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("a path item") {
            let parameters = operation["parameters"].as_array().into_iter().flatten();
            for parameter in parameters {
                if parameter["in"] == "query" && parameter["required"] == true {
                    let name = parameter["name"].as_str().unwrap_or_default();
                    required.push(format!("{method} {path} ?{name}"));
                }
            }
        }
    }
    assert!(required.is_empty(), "documented as required: {required:?}");
}
