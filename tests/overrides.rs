//! What operators do to the guardrails, against the real binary with a token file: force a
//! write past them, keep ids off the blocklist (the allowlist, the hold-off of an unblock),
//! and read and replace the policy. All of it stored, in the feed, and admin-only.

mod common;

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const ADMIN: &str = "admin-token-0123";
const WRITER: &str = "detector-token-0123";

/// A daemon with an admin token named `alice` and a plain (writer) token.
fn start(ws: &mut Workspace, extra: &[&str]) -> Daemon {
    let path = ws.tmp.path().join("tokens");
    std::fs::write(
        &path,
        format!("{ADMIN} name=alice role=admin\n{WRITER} name=detector\n"),
    )
    .unwrap();
    let path = path.to_string_lossy().into_owned();
    let mut args = vec!["--token-file", path.as_str()];
    args.extend_from_slice(extra);
    ws.start(&args)
}

/// Sends `method path` with `token` and an optional body: status, `Retry-After`, body.
async fn call(
    d: &Daemon,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Option<u64>, Value) {
    let mut req = d.client.request(method, d.url(path)).bearer_auth(token);
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    let text = resp.text().await.unwrap();
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap()
    };
    (status, retry_after, body)
}

fn block(id: &str) -> Value {
    json!([{"id": id, "action": "MARK_BLOCKED", "cause": "detector", "timeout": 3_600_000}])
}

#[tokio::test]
async fn a_forced_write_passes_the_caps_only_for_an_admin_and_says_so() {
    let mut ws = Workspace::new();
    let d = start(&mut ws, &["--max-blocked-nodes", "1"]);
    let nodes = "/blocklist/nodes";
    assert_eq!(
        call(&d, WRITER, Method::POST, nodes, Some(block("n1")))
            .await
            .0,
        StatusCode::CREATED
    );
    let refused = call(&d, WRITER, Method::POST, nodes, Some(block("n2"))).await;
    assert_eq!(refused.0, StatusCode::TOO_MANY_REQUESTS, "{}", refused.2);
    // A detector's token may not force.
    let forced_path = "/blocklist/nodes?force=true";
    let (status, _, body) = call(&d, WRITER, Method::POST, forced_path, Some(block("n2"))).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["errors"][0].as_str().unwrap().contains("admin"),
        "{body}"
    );
    let mut watch = Watch::open(&d, None, None).await.unwrap();
    let (status, _, body) = call(&d, ADMIN, Method::POST, forced_path, Some(block("n2"))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let item = d.get("/blocklist/nodes/n2").await.1;
    let forced = &item["forced"];
    assert_eq!(forced["guards"], json!(["max-items"]), "{item}");
    assert_eq!(forced["by"], "alice");
    assert!(forced["at"].as_i64().unwrap() > 0);
    // The feed's event carries it too; an unforced block carries none.
    let event = watch.next().await.unwrap();
    assert_eq!(
        (event.event.as_str(), &event.data["forced"]),
        ("added", forced)
    );
    assert!(d.get("/blocklist/nodes/n1").await.1.get("forced").is_none());
    // Force never passes the allowlist.
    let (status, _, body) = call(
        &d,
        ADMIN,
        Method::PUT,
        "/allowlist/nodes/n3",
        Some(json!({"comment": "the database"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, _, body) = call(&d, ADMIN, Method::POST, forced_path, Some(block("n3"))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    // Restarted after kill -9, the forced block still says so.
    d.kill9();
    let d = start(&mut ws, &["--max-blocked-nodes", "1"]);
    assert_eq!(d.get("/blocklist/nodes/n2").await.1["forced"], *forced);
}

#[tokio::test]
async fn an_allowlisted_id_is_refused_inside_a_batch_and_nothing_of_it_is_written() {
    let mut ws = Workspace::new();
    let d = start(&mut ws, &[]);
    // An existing block of the id is lifted by the entry.
    assert_eq!(
        call(
            &d,
            WRITER,
            Method::POST,
            "/blocklist/nodes",
            Some(block("db-1"))
        )
        .await
        .0,
        StatusCode::CREATED
    );
    let (status, _, body) = call(
        &d,
        ADMIN,
        Method::PUT,
        "/allowlist/nodes/db-",
        Some(json!({"comment": "databases", "prefix": true})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["entry"]["addedBy"], "alice");
    assert_eq!(ids(&body["unblocked"]), ["db-1"]);
    assert_eq!(
        d.get("/blocklist/nodes/db-1").await.0,
        StatusCode::NOT_FOUND
    );
    // A detector cannot change the allowlist.
    let (status, _, _) = call(
        &d,
        WRITER,
        Method::PUT,
        "/allowlist/nodes/x",
        Some(json!({"comment": "c"})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    let before = d.export().await;
    let batch = json!([
        {"id": "web-1", "action": "MARK_BLOCKED", "cause": "c"},
        {"id": "db-7", "action": "MARK_BLOCKED", "cause": "c"},
        {"id": "web-2", "action": "MARK_BLOCKED", "cause": "c"},
    ]);
    let (status, _, body) = call(&d, WRITER, Method::POST, "/blocklist/nodes", Some(batch)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["errors"].as_array().unwrap().len(), 1, "{body}");
    let error = body["errors"][0].as_str().unwrap();
    assert!(
        error.starts_with("items[1] (id \"db-7\"): allowlist: node \"db-7\" is on the allowlist (the prefix entry \"db-\": \"databases\", added by alice)"),
        "{error}"
    );
    assert_eq!(d.export().await, before, "nothing of the batch was written");

    // Listed, removed, and then the id may be blocked again.
    let listed = d.get("/allowlist").await.1;
    assert_eq!(listed["entries"][0]["id"], "db-");
    assert_eq!(d.get("/allowlist/nodes/db-").await.1["prefix"], true);
    let (status, _, body) = call(&d, ADMIN, Method::DELETE, "/allowlist/nodes/db-", None).await;
    assert_eq!(
        (status, &body["comment"]),
        (StatusCode::OK, &json!("databases"))
    );
    assert_eq!(d.get("/allowlist/nodes/db-").await.0, StatusCode::NOT_FOUND);
    assert_eq!(
        call(
            &d,
            WRITER,
            Method::POST,
            "/blocklist/nodes",
            Some(block("db-7"))
        )
        .await
        .0,
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn an_unblock_with_a_hold_off_cannot_be_undone_by_the_detector_until_it_ends() {
    let mut ws = Workspace::new();
    let d = start(&mut ws, &[]);
    let tms = "/blocklist/taskmanagers";
    assert_eq!(
        call(&d, WRITER, Method::POST, tms, Some(block("tm-1")))
            .await
            .0,
        StatusCode::CREATED
    );
    // Only an admin may hold off; a bad duration is a 400 naming it.
    let path = "/blocklist/taskmanagers/tm-1?holdOff=2s";
    assert_eq!(
        call(&d, WRITER, Method::DELETE, path, None).await.0,
        StatusCode::FORBIDDEN
    );
    let (status, _, body) = call(
        &d,
        ADMIN,
        Method::DELETE,
        "/blocklist/taskmanagers/tm-1?holdOff=soon",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["errors"][0].as_str().unwrap().starts_with("holdOff:"));
    let mut watch = Watch::open(&d, None, None).await.unwrap();
    let (status, _, body) = call(&d, ADMIN, Method::DELETE, path, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let until = body["holdOff"]["endTimestamp"].as_i64().unwrap();
    assert_eq!(body["holdOff"]["addedBy"], "alice");
    // One transaction: the removal, then the entry.
    let events = watch.take(2).await;
    assert_eq!(
        summary(&events),
        pairs(&[("removed", "tm-1"), ("allowlisted", "tm-1")])
    );
    // The detector tries again at once: refused until the hold-off ends.
    let (status, retry_after, body) =
        call(&d, WRITER, Method::POST, tms, Some(block("tm-1"))).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(matches!(retry_after, Some(1..=2)), "{retry_after:?}");
    // It ends through the sweeper, with an event; then the block goes in.
    let event = watch.next().await.unwrap();
    assert_eq!(event.event, "allowlist-expired");
    assert!(now_ms() >= until);
    assert_eq!(
        call(&d, WRITER, Method::POST, tms, Some(block("tm-1")))
            .await
            .0,
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn the_policy_is_read_and_replaced_by_an_admin_stored_and_in_the_feed() {
    let mut ws = Workspace::new();
    let d = start(&mut ws, &[]);
    let (status, policy) = d.get("/policy").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        policy,
        json!({
            "nodes": {"maxBlockedPercent": 50, "maxEvacuatingPercent": 20, "maxBlocked": null, "evacuations": null},
            "taskManagers": {"maxBlockedPercent": 50, "maxEvacuatingPercent": null, "maxBlocked": null, "evacuations": null},
            "minRegistered": 10,
            "maxBlockDurationSecs": null,
            "permanentBlocksAllowed": true,
            "escalation": null,
        })
    );
    let mut wanted = policy.clone();
    wanted["nodes"]["maxBlocked"] = json!(1);
    wanted["taskManagers"]["evacuations"] = json!({"perMinute": 60, "burst": 10});
    wanted["escalation"] = json!({"factor": 3, "maxSecs": 600, "windowSecs": 3600});
    assert_eq!(
        call(&d, WRITER, Method::PUT, "/policy", Some(wanted.clone()))
            .await
            .0,
        StatusCode::FORBIDDEN
    );
    // Every field is required (but the escalation, off when absent), and each problem is
    // named.
    let mut partial = wanted.clone();
    partial.as_object_mut().unwrap().remove("minRegistered");
    let (status, _, body) = call(&d, ADMIN, Method::PUT, "/policy", Some(partial)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["errors"][0]
            .as_str()
            .unwrap()
            .contains("minRegistered"),
        "{body}"
    );
    let mut bad = wanted.clone();
    bad["nodes"]["maxBlockedPercent"] = json!(150);
    let (status, _, body) = call(&d, ADMIN, Method::PUT, "/policy", Some(bad)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["errors"][0]
            .as_str()
            .unwrap()
            .contains("nodes.maxBlockedPercent"),
        "{body}"
    );

    let mut watch = Watch::open(&d, None, None).await.unwrap();
    let (status, _, body) = call(&d, ADMIN, Method::PUT, "/policy", Some(wanted.clone())).await;
    assert_eq!((status, &body), (StatusCode::OK, &wanted));
    let event = watch.next().await.unwrap();
    assert_eq!((event.event.as_str(), &event.data), ("policy", &wanted));
    // In force at once.
    call(
        &d,
        WRITER,
        Method::POST,
        "/blocklist/nodes",
        Some(block("n1")),
    )
    .await;
    let refused = call(
        &d,
        WRITER,
        Method::POST,
        "/blocklist/nodes",
        Some(block("n2")),
    )
    .await;
    assert_eq!(refused.0, StatusCode::TOO_MANY_REQUESTS, "{}", refused.2);

    // Stored: kept across kill -9; a flag at start replaces its field only, as a change.
    d.kill9();
    let d = start(&mut ws, &["--max-blocked-nodes", "5"]);
    let mut expected = wanted.clone();
    expected["nodes"]["maxBlocked"] = json!(5);
    assert_eq!(d.get("/policy").await.1, expected);
    let mut watch = Watch::open(&d, Some(0), None).await.unwrap();
    let mut last = None;
    while let Some(event) =
        tokio::time::timeout(std::time::Duration::from_millis(500), watch.next())
            .await
            .ok()
            .flatten()
    {
        if event.event == "policy" {
            last = Some(event.data);
        }
    }
    assert_eq!(last, Some(expected));
}

#[tokio::test]
async fn the_policy_and_the_allowlist_travel_in_an_export_and_an_import() {
    let mut ws = Workspace::new();
    let d = start(&mut ws, &["--max-blocked-taskmanagers", "9"]);
    let end = now_ms() + 3_600_000;
    for (id, body) in [
        ("db-", json!({"comment": "databases", "prefix": true})),
        ("n-7", json!({"comment": "spare", "endTimestamp": end})),
    ] {
        let (status, _, body) = call(
            &d,
            ADMIN,
            Method::PUT,
            &format!("/allowlist/nodes/{id}"),
            Some(body),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let policy = d.get("/policy").await.1;
    let entries = d.get("/allowlist").await.1["entries"].clone();
    let file = ws.tmp.path().join("export.jsonl");
    std::fs::write(&file, d.export().await).unwrap();
    d.kill9();

    let fresh = ws.tmp.path().join("restored");
    import_into(&fresh, &file);
    let log = ws.tmp.path().join("restored.log");
    let d = Daemon::start(&fresh, &log, &[]);
    assert_eq!(d.get("/policy").await.1, policy);
    assert_eq!(policy["taskManagers"]["maxBlocked"], 9);
    assert_eq!(d.get("/allowlist").await.1["entries"], entries);
    // And the entries are in force.
    let (status, body) = d.post("/blocklist/nodes", block("db-primary")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
}
