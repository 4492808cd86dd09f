//! Streamed listings: big listings arrive in chunks and parse as exactly what was stored,
//! listing while writers run still converges with the feed, and a failure mid-body cuts
//! the body off instead of ending it well-formed.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const MB: &str = "MARK_BLOCKED";
const EVAC: &str = "MARK_BLOCKED_AND_EVACUATE_TASKS";
const PERMANENT: i64 = i64::MAX;

/// Adds `n` items `{prefix}{i:06}` in batches of 10,000; every third evacuates, and the
/// cause names the item. Returns what each should look like (without `startTimestamp`).
async fn bulk_add(d: &Daemon, kind: &str, prefix: &str, n: usize) -> BTreeMap<String, Value> {
    let mut expected = BTreeMap::new();
    let ids: Vec<String> = (0..n).map(|i| format!("{prefix}{i:06}")).collect();
    for batch in ids.chunks(10_000) {
        let items: Vec<Value> = batch
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let action = if i % 3 == 0 { EVAC } else { MB };
                let cause = format!("cause of {id}");
                expected.insert(
                    id.clone(),
                    json!({"id": id, "action": action, "endTimestamp": PERMANENT, "cause": cause}),
                );
                item(id, action, &cause)
            })
            .collect();
        let (status, body) = d
            .post(&format!("/blocklist/{kind}"), Value::Array(items))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    expected
}

/// Checks that `list` holds exactly the `expected` items in id order, each with exactly the
/// FLIP-224 fields (plus `taskManagers` for nodes) and a start in `[from, to]`, and the
/// provenance of one report at its start from `unknown`, and a revision.
fn assert_exact(list: &Value, expected: &BTreeMap<String, Value>, node: bool, from: i64, to: i64) {
    let list = list.as_array().expect("an array");
    assert_eq!(list.len(), expected.len());
    for (got, (id, want)) in list.iter().zip(expected) {
        let mut got = got.as_object().expect("an object").clone();
        assert_eq!(got.len(), if node { 11 } else { 10 }, "{got:?}");
        let start = got.remove("startTimestamp").and_then(|s| s.as_i64());
        assert!(
            start.is_some_and(|s| (from..=to).contains(&s)),
            "{id}: {start:?}"
        );
        let provenance = [
            "source",
            "reportCount",
            "firstReportTimestamp",
            "lastReportTimestamp",
        ]
        .map(|field| got.remove(field).unwrap_or(Value::Null));
        assert_eq!(
            provenance,
            [json!("unknown"), json!(1), json!(start), json!(start)],
            "{id}"
        );
        let revision = got.remove("revision").and_then(|r| r.as_u64());
        assert!(revision.is_some_and(|r| r >= 1), "{id}: {revision:?}");
        got.remove("taskManagers");
        assert_eq!(&Value::Object(got), want, "in id order");
    }
}

#[tokio::test]
async fn a_big_listing_is_streamed_in_chunks_and_is_exactly_what_is_stored() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let from = now_ms();
    let tms = bulk_add(&d, "taskmanagers", "tm-", 25_000).await;
    let nodes = bulk_add(&d, "nodes", "node-", 15_000).await;
    let to = now_ms();
    // Two task managers on one node (listed sorted), one on another.
    let registrations = json!([{"id": "w-2", "node": "node-000007"}, {"id": "w-1", "node": "node-000007"},
               {"id": "w-3", "node": "node-014999"}]);
    let (status, _) = d
        .call(Method::PUT, "/taskmanagers", Some(registrations))
        .await;
    assert_eq!(status, StatusCode::CREATED);

    // Streamed: chunked framing, no length, and more than one piece on the wire.
    let resp = d.send(Method::GET, "/blocklist", None).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let headers = resp.headers().clone();
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(headers["transfer-encoding"], "chunked");
    assert!(headers.get("content-length").is_none());
    let revision: u64 = headers["x-blocklist-revision"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut resp = resp;
    let (mut body, mut pieces) = (Vec::new(), 0);
    while let Some(piece) = resp.chunk().await.expect("a complete body") {
        body.extend_from_slice(&piece);
        pieces += 1;
    }
    assert!(pieces > 1, "{pieces} piece(s)");
    let all: Value = serde_json::from_slice(&body).expect("the listing is one JSON document");
    assert_eq!(
        all.as_object().unwrap().len(),
        3,
        "exactly blockedTaskManagers, blockedNodes and revision"
    );
    assert_eq!(all["revision"], json!(revision), "body and header agree");
    assert_eq!(revision, 40_000 + 3);
    assert_exact(&all["blockedTaskManagers"], &tms, false, from, to);
    assert_exact(&all["blockedNodes"], &nodes, true, from, to);
    let entry = |id: &str| {
        all["blockedNodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["id"] == id)
            .unwrap()["taskManagers"]
            .clone()
    };
    assert_eq!(entry("node-000007"), json!(["w-1", "w-2"]));
    assert_eq!(entry("node-014999"), json!(["w-3"]));
    assert_eq!(entry("node-000000"), json!([]));

    // The per-kind listings are the same arrays.
    let (status, list) = d.get("/blocklist/taskmanagers").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list, all["blockedTaskManagers"]);
    let (status, list) = d.get("/blocklist/nodes").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list, all["blockedNodes"]);

    // The export: every item, then every registration, one JSON object per line.
    let resp = d.send(Method::GET, "/blocklist/export", None).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    assert_eq!(resp.headers()["transfer-encoding"], "chunked");
    let text = resp.text().await.expect("a complete body");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    // The policy line, then the items, then the registrations.
    assert_eq!(lines[0]["type"], "policy");
    let lines = &lines[1..];
    assert_eq!(lines.len(), 40_000 + 3);
    let mut exported_items = lines[..40_000].iter().map(|l| {
        let mut l = l.clone();
        let kind = l.as_object_mut().unwrap().remove("kind").unwrap();
        assert_eq!(
            l.as_object_mut().unwrap().remove("type"),
            Some(json!("item"))
        );
        (kind, l)
    });
    for (kind, list) in [
        ("taskmanager", &all["blockedTaskManagers"]),
        ("node", &all["blockedNodes"]),
    ] {
        for listed in list.as_array().unwrap() {
            let (k, mut line) = exported_items.next().unwrap();
            assert_eq!(k, kind);
            let mut listed = listed.clone();
            listed.as_object_mut().unwrap().remove("taskManagers");
            line.as_object_mut().unwrap().remove("taskManagers");
            // An export's item line also carries the item's kept reports.
            assert!(line.as_object_mut().unwrap().remove("reports").is_some());
            assert_eq!(line, listed);
        }
    }
    assert_eq!(
        lines[40_000..],
        [
            json!({"type": "registration", "id": "w-1", "node": "node-000007"}),
            json!({"type": "registration", "id": "w-2", "node": "node-000007"}),
            json!({"type": "registration", "id": "w-3", "node": "node-014999"}),
        ]
    );

    // HEAD: the headers, no body.
    let resp = d.send(Method::HEAD, "/blocklist", None).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["x-blocklist-revision"], "40003");
    assert!(resp.bytes().await.unwrap().is_empty());
    assert_eq!(d.get("/healthz").await.0, StatusCode::OK);
}

#[tokio::test]
async fn a_small_listing_is_sent_whole_with_a_length() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    d.post("/blocklist/nodes", json!([item("n1", MB, "disk")]))
        .await;
    let resp = d.send(Method::GET, "/blocklist", None).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers().get("transfer-encoding").is_none());
    assert!(resp.headers().get("content-length").is_some());
    let body = resp.text().await.unwrap();
    let start = serde_json::from_str::<Value>(&body).unwrap()["blockedNodes"][0]["startTimestamp"]
        .as_i64()
        .unwrap();
    assert_eq!(
        zero_starts(&body, start),
        r#"{"blockedTaskManagers":[],"blockedNodes":[{"id":"n1","action":"MARK_BLOCKED","startTimestamp":0,"endTimestamp":9223372036854775807,"cause":"disk","source":"unknown","reportCount":1,"firstReportTimestamp":0,"lastReportTimestamp":0,"revision":1,"taskManagers":[]}],"revision":1}"#
    );
}

/// The body with the times equal to `start` (its start, its first and last report) as 0.
fn zero_starts(body: &str, start: i64) -> String {
    body.replace(&format!(":{start},"), ":0,")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_while_writers_run_then_watching_from_its_revision_converges() {
    let mut ws = Workspace::new();
    let d = Arc::new(ws.start(&[]));
    bulk_add(&d, "taskmanagers", "tm-", 20_000).await;

    // Writers add new items, merge into and remove old ones while the listings run.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (d, stop) = (d.clone(), stop.clone());
        tokio::spawn(async move {
            let mut round = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let added: Vec<Value> = (0..20)
                    .map(|i| item(&format!("w-{round:05}-{i:02}"), MB, "new"))
                    .collect();
                assert_eq!(
                    d.post("/blocklist/taskmanagers", Value::Array(added))
                        .await
                        .0,
                    StatusCode::CREATED
                );
                let mut merge = item(&format!("tm-{:06}", round * 7 % 20_000), EVAC, "again");
                merge["allowMerge"] = json!(true);
                d.post("/blocklist/taskmanagers", json!([merge])).await;
                d.delete(&format!(
                    "/blocklist/taskmanagers/tm-{:06}",
                    round * 13 % 20_000
                ))
                .await;
                round += 1;
            }
            round
        })
    };

    let mut listed = Vec::new();
    for _ in 0..3 {
        let (status, body) = d.get("/blocklist").await;
        assert_eq!(status, StatusCode::OK);
        listed.push(body);
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = writer.await.unwrap();
    assert!(rounds > 0);
    let last = d.listing().await;
    let head = last["revision"].as_u64().unwrap();

    for listing in listed {
        let revision = listing["revision"].as_u64().unwrap();
        let mut state: BTreeMap<String, Value> = listing["blockedTaskManagers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| (i["id"].as_str().unwrap().to_owned(), i.clone()))
            .collect();
        let mut watch = Watch::open(&d, Some(revision), None).await.unwrap();
        for event in watch.take((head - revision) as usize).await {
            let id = event.data["id"].as_str().unwrap().to_owned();
            let mut data = event.data.clone();
            data.as_object_mut().unwrap().remove("kind");
            match event.event.as_str() {
                "added" | "merged" => state.insert(id, data),
                "removed" | "expired" => state.remove(&id),
                other => panic!("unexpected event {other}"),
            };
        }
        let converged: Vec<&Value> = state.values().collect();
        let expected: Vec<&Value> = last["blockedTaskManagers"]
            .as_array()
            .unwrap()
            .iter()
            .collect();
        assert_eq!(
            converged, expected,
            "listing at {revision} + the feed up to {head} is the final state"
        );
    }
    let ids: BTreeSet<&str> = last["blockedTaskManagers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids.len(),
        last["blockedTaskManagers"].as_array().unwrap().len()
    );
}

/// Replaces the stored value of an item with bytes that do not decode (daemon stopped).
fn corrupt(ws: &Workspace, key: &[u8]) {
    let db = common::open_sled(ws.data_dir());
    db.open_tree("items")
        .unwrap()
        .insert(key, &[0xFF][..])
        .unwrap();
    db.flush().unwrap();
    drop(db);
    wait_until_unlocked(&ws.data_dir());
}

#[tokio::test]
async fn a_store_error_mid_body_cuts_the_body_off_and_before_it_is_a_500() {
    if skip_on_etcd("values corrupted in the data dir's sled database") {
        return;
    }
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    bulk_add(&d, "taskmanagers", "tm-", 5_000).await;
    d.post("/blocklist/nodes", json!([item("n1", MB, "disk")]))
        .await;
    assert!(d.terminate().success());
    // Sorted after 5,000 good task managers (several chunks), and before the only node.
    corrupt(&ws, b"Ttm-zzz");
    corrupt(&ws, b"N0-first");
    let d = ws.start(&[]);

    // Failing in the first chunk: an ordinary error answer.
    let (status, body) = d.get("/blocklist/nodes").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(body["errors"][0].is_string(), "{body}");

    // Failing later: the status and the first chunks went out; the body is cut off, never
    // completed as a shorter document.
    for path in ["/blocklist/taskmanagers", "/blocklist", "/blocklist/export"] {
        let resp = d.send(Method::GET, path, None).await;
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
        let mut resp = resp;
        let mut received = 0;
        let failed = loop {
            match resp.chunk().await {
                Ok(Some(piece)) => received += piece.len(),
                Ok(None) => break false,
                Err(_) => break true,
            }
        };
        assert!(
            failed,
            "{path}: the body ended normally after {received} bytes"
        );
        assert!(received > 0, "{path}");
    }
    eventually("the failure in the log", || async {
        d.log_text().contains("listing failed mid-body")
    })
    .await;
    // The daemon goes on serving.
    assert_eq!(d.get("/blocklist/check/nodes/n1").await.0, StatusCode::OK);
}
