//! Enforcement statuses (`/enforcement`): an enforcer reports what it did about blocked
//! items under its own name; a status never changes the block; it goes with the block; the
//! `enforcer` role may report and register task managers, and nothing else.

mod common;

use std::time::{Duration, Instant};

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const MB: &str = "MARK_BLOCKED";

fn status(kind: &str, id: &str, state: &str) -> Value {
    json!({"kind": kind, "id": id, "state": state})
}

async fn report(d: &Daemon, enforcer: &str, body: Value) -> (StatusCode, Value) {
    d.call(Method::PUT, &format!("/enforcement/{enforcer}"), Some(body))
        .await
}

/// The `ETag` and revision of a node item, and its `enforcement`.
async fn node(d: &Daemon, id: &str) -> (String, u64, Value) {
    let (status, headers, body) =
        request(d, Method::GET, &format!("/blocklist/nodes/{id}"), &[], None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    (
        headers["etag"].to_str().unwrap().to_owned(),
        body["revision"].as_u64().unwrap(),
        body.get("enforcement").cloned().unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn a_status_shows_with_its_item_changes_nothing_of_it_and_goes_with_it() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    d.post(
        "/blocklist/nodes",
        json!([item("n1", MB, "disk"), item("n2", MB, "disk")]),
    )
    .await;
    let (etag, revision, none) = node(&d, "n1").await;
    assert_eq!(none, Value::Null, "no status yet");
    let feed_revision = d.revision().await;

    let mut tainted = status("node", "n1", "enforced");
    tainted["detail"] = json!("taint blocklistd.io/blocked=MARK_BLOCKED:NoSchedule");
    tainted["observedRevision"] = json!(revision);
    let (code, body) = report(
        &d,
        "kube-a",
        json!([tainted, status("node", "gone", "enforced")]),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"stored": 1, "unchanged": 0, "notBlocked": ["node/gone"]})
    );
    let (etag_after, revision_after, statuses) = node(&d, "n1").await;
    assert_eq!(
        (etag_after, revision_after),
        (etag, revision),
        "the block is unchanged"
    );
    assert_eq!(
        d.revision().await,
        feed_revision,
        "no event, no new revision"
    );
    let since = statuses["kube-a"]["since"].as_i64().unwrap();
    assert_eq!(statuses["kube-a"]["state"], "enforced");
    assert_eq!(statuses["kube-a"]["observedRevision"], revision);

    // The same report again writes nothing and keeps `since`; a second enforcer sits beside.
    let (_, body) = report(&d, "kube-a", json!([tainted])).await;
    assert_eq!(body["unchanged"], 1);
    report(&d, "other", json!([status("node", "n1", "dryRun")])).await;
    let (_, _, statuses) = node(&d, "n1").await;
    assert_eq!(statuses["kube-a"]["since"], since);
    assert_eq!(statuses["other"]["state"], "dryRun");
    let listed = d.get("/enforcement").await.1;
    let names: Vec<(&str, &str)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["id"].as_str().unwrap(), e["enforcer"].as_str().unwrap()))
        .collect();
    assert_eq!(names, [("n1", "kube-a"), ("n1", "other")], "{listed}");

    // The block ends: its statuses go; a new block of the id starts without them.
    assert_eq!(d.delete("/blocklist/nodes/n1").await.0, StatusCode::OK);
    assert_eq!(d.get("/enforcement").await.1, json!([]));
    d.post("/blocklist/nodes", json!([item("n1", MB, "again")]))
        .await;
    assert_eq!(node(&d, "n1").await.2, Value::Null);

    // An expiry drops them too.
    d.post(
        "/blocklist/nodes",
        json!([{"id": "short", "action": MB, "cause": "c", "timeout": 300}]),
    )
    .await;
    report(&d, "kube-a", json!([status("node", "short", "enforced")])).await;
    assert_eq!(d.get("/enforcement").await.1.as_array().unwrap().len(), 1);
    let deadline = Instant::now() + DEADLINE;
    while d.get("/enforcement").await.1 != json!([]) {
        assert!(
            Instant::now() < deadline,
            "the expired block's status stays"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // What is left passes `blocklistd check` (every status is a stored item's, and decodes).
    report(&d, "kube-a", json!([status("node", "n1", "enforced")])).await;
    let dir = d.data_dir.clone();
    assert!(d.terminate().success());
    if !on_etcd() {
        assert_check_passes(&dir);
    }
}

#[tokio::test]
async fn a_bad_report_names_the_element_and_field_and_writes_nothing() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    d.post("/blocklist/nodes", json!([item("n1", MB, "disk")]))
        .await;
    let (code, body) = report(
        &d,
        "kube-a",
        json!([status("node", "n1", "enforced"), {"kind": "node", "id": "n1", "state": "done"}]),
    )
    .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    let errors = body["errors"].to_string();
    assert!(
        errors.contains("items[1] (id \\\"n1\\\").state: one of"),
        "{errors}"
    );
    assert_eq!(d.get("/enforcement").await.1, json!([]), "nothing written");
    let (code, body) = report(&d, "a%2Fb", json!([status("node", "n1", "enforced")])).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert!(
        body["errors"][0]
            .as_str()
            .unwrap()
            .contains("enforcer in the path"),
        "{body}"
    );
}

#[tokio::test]
async fn the_enforcer_role_reports_and_registers_and_nothing_else() {
    let mut ws = Workspace::new();
    let tokens = ws.tmp.path().join("tokens");
    std::fs::write(
        &tokens,
        "admin-token role=admin\nbridge-token name=kube-a role=enforcer\n",
    )
    .unwrap();
    let d = ws.start(&["--token-file", tokens.to_str().unwrap()]);
    let as_ = |token: &'static str, method: Method, path: &str, body: Value| {
        let request = d
            .client
            .request(method, d.url(path))
            .bearer_auth(token)
            .json(&body);
        async move {
            let response = request.send().await.unwrap();
            let status = response.status();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let (code, _) = as_(
        "admin-token",
        Method::POST,
        "/blocklist/nodes",
        json!([item("n1", MB, "c")]),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED);

    let (code, body) = as_(
        "bridge-token",
        Method::PUT,
        "/enforcement/kube-a",
        json!([status("node", "n1", "enforced")]),
    )
    .await;
    assert_eq!((code, body["stored"].clone()), (StatusCode::OK, json!(1)));
    let (code, _) = as_(
        "bridge-token",
        Method::PUT,
        "/taskmanagers",
        json!([{"id": "tm-1", "node": "n1"}]),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED);

    // Under another enforcer's name, a block, an unblock: refused, and nothing changed.
    let (code, body) = as_(
        "bridge-token",
        Method::PUT,
        "/enforcement/kube-b",
        json!([status("node", "n1", "failed")]),
    )
    .await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{body}");
    assert!(body["errors"][0]
        .as_str()
        .unwrap()
        .contains("only under its own name"));
    let (code, body) = as_(
        "bridge-token",
        Method::POST,
        "/blocklist/nodes",
        json!([item("n2", MB, "c")]),
    )
    .await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["errors"][0]
            .as_str()
            .unwrap()
            .contains("this token's role is enforcer"),
        "{body}"
    );
    let (code, _) = as_(
        "bridge-token",
        Method::DELETE,
        "/blocklist/nodes/n1",
        Value::Null,
    )
    .await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert_eq!(ids(&d.get("/blocklist/nodes").await.1), ["n1"]);
    let all = d.get("/enforcement").await.1;
    assert_eq!(all.as_array().unwrap().len(), 1, "{all}");
    assert_eq!(all[0]["enforcer"], "kube-a");
}
