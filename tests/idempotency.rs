//! `Idempotency-Key` on writes: the same key with the same request replays the first answer
//! (status, body, revision) with `Idempotent-Replayed: true` and applies nothing again, also
//! after `kill -9`; with another request it is refused (422) and writes nothing; two at once
//! apply once; a refusal is not kept; a key past `--idempotency-retention` is forgotten.
//! Every write takes one: adds, unblocks (one item, or by selector), `PATCH`, the
//! allowlist, the policy and registrations.
// The record layouts are read and rewritten here byte by byte, as migrations/ describes them.
#![allow(clippy::big_endian_bytes, clippy::little_endian_bytes)]

mod common;

use std::sync::Arc;

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// A response as the comparisons need it: status, the exact body bytes, and the headers
/// that matter.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answer {
    status: StatusCode,
    body: Vec<u8>,
    revision: Option<String>,
    content_type: Option<String>,
    etag: Option<String>,
    replayed: Option<String>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The answer without the replay mark: what a replay must repeat exactly.
    fn first(&self) -> (StatusCode, &[u8], Option<&str>, Option<&str>, Option<&str>) {
        (
            self.status,
            &self.body,
            self.revision.as_deref(),
            self.content_type.as_deref(),
            self.etag.as_deref(),
        )
    }

    fn is_replay(&self) -> bool {
        self.replayed.as_deref() == Some("true")
    }
}

async fn send(
    d: &Daemon,
    method: Method,
    path: &str,
    key: Option<&str>,
    body: Option<&Value>,
) -> Answer {
    send_with(d, method, path, key, &[], body).await
}

/// [`send`] with more headers (`If-Match`, `Blocklist-Source`).
async fn send_with(
    d: &Daemon,
    method: Method,
    path: &str,
    key: Option<&str>,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> Answer {
    let mut request = d.client.request(method, d.url(path));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.expect("request");
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let (revision, content_type, etag, replayed) = (
        header("x-blocklist-revision"),
        header("content-type"),
        header("etag"),
        header("idempotent-replayed"),
    );
    Answer {
        status: response.status(),
        revision,
        content_type,
        etag,
        replayed,
        body: response.bytes().await.unwrap().to_vec(),
    }
}

/// Every event in the log, oldest first (the log keeps them all in these tests).
async fn events(d: &Daemon) -> Vec<FeedEvent> {
    let head = d.revision().await;
    let mut watch = Watch::open(d, Some(0), None).await.expect("a watch");
    watch.take(usize::try_from(head).unwrap()).await
}

/// The events of `kind` about `id`.
fn of(events: &[FeedEvent], kind: &str, id: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.data["kind"] == kind && e.data["id"] == id)
        .map(|e| e.event.clone())
        .collect()
}

#[tokio::test]
async fn an_acknowledged_add_replays_after_kill_9() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let add = json!([item("n1", "MARK_BLOCKED", "disk")]);
    let first = send(
        &d,
        Method::POST,
        "/blocklist/nodes",
        Some("add-1"),
        Some(&add),
    )
    .await;
    assert_eq!(first.status, StatusCode::CREATED, "{first:?}");
    assert!(!first.is_replay(), "{first:?}");
    // A merging add answers 202 with the merged items: a body to keep byte for byte.
    let merge = json!([{"id": "n1", "action": "MARK_BLOCKED_AND_EVACUATE_TASKS",
                        "cause": "smart", "allowMerge": true}]);
    let merged = send(
        &d,
        Method::POST,
        "/blocklist/nodes",
        Some("merge-1"),
        Some(&merge),
    )
    .await;
    assert_eq!(merged.status, StatusCode::ACCEPTED, "{merged:?}");
    assert_eq!(merged.json()[0]["cause"], "disk,smart");
    d.kill9();

    let d = ws.start(&[]);
    let again = send(
        &d,
        Method::POST,
        "/blocklist/nodes",
        Some("add-1"),
        Some(&add),
    )
    .await;
    assert_eq!(again.first(), first.first(), "{again:?}");
    assert!(again.is_replay(), "{again:?}");
    let again = send(
        &d,
        Method::POST,
        "/blocklist/nodes",
        Some("merge-1"),
        Some(&merge),
    )
    .await;
    assert_eq!(again.first(), merged.first(), "{again:?}");
    assert!(again.is_replay(), "{again:?}");
    // Applied once each: a second merge would have added the cause again… it is a set, but
    // the event would be there.
    assert_eq!(of(&events(&d).await, "node", "n1"), ["added", "merged"]);
    // Without the key the same add is a new request: a conflict.
    let fresh = send(&d, Method::POST, "/blocklist/nodes", None, Some(&add)).await;
    assert_eq!(fresh.status, StatusCode::CONFLICT, "{fresh:?}");
    assert_eq!(
        d.metric("blocklist_idempotent_replays_total").await,
        2.0,
        "replays counted"
    );
    assert!(d.scrape().await.contains(
        "# HELP blocklist_idempotent_replays_total Writes answered from an Idempotency-Key's \
         record"
    ));
}

#[tokio::test]
async fn the_same_key_with_another_request_is_refused_and_writes_nothing() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let add = json!([item("n1", "MARK_BLOCKED", "disk")]);
    let first = send(&d, Method::POST, "/blocklist/nodes", Some("k"), Some(&add)).await;
    assert_eq!(first.status, StatusCode::CREATED, "{first:?}");
    let before = (d.listing().await, d.revision().await);
    let other_body = json!([item("n2", "MARK_BLOCKED", "disk")]);
    let other_cause = json!([item("n1", "MARK_BLOCKED", "disks")]);
    for (method, path, body) in [
        (Method::POST, "/blocklist/nodes", Some(&other_body)),
        (Method::POST, "/blocklist/nodes", Some(&other_cause)),
        (Method::POST, "/blocklist/taskmanagers", Some(&add)),
        (Method::POST, "/blocklist/nodes?force=false", Some(&add)),
        (Method::DELETE, "/blocklist/nodes/n1", None),
        (
            Method::PUT,
            "/allowlist/nodes/n2",
            Some(&json!({"comment": "db"})),
        ),
    ] {
        let answer = send(&d, method.clone(), path, Some("k"), body).await;
        assert_eq!(
            answer.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{method} {path}: {answer:?}"
        );
        let message = answer.json()["errors"][0].as_str().unwrap().to_owned();
        assert!(
            message.starts_with("Idempotency-Key \"k\": was first used for a different request"),
            "{message}"
        );
        assert!(!answer.is_replay());
    }
    assert_eq!((d.listing().await, d.revision().await), before);
    // The same request still replays.
    let again = send(&d, Method::POST, "/blocklist/nodes", Some("k"), Some(&add)).await;
    assert!(again.is_replay(), "{again:?}");
    assert_eq!(again.first(), first.first());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_with_one_key_apply_once() {
    let mut ws = Workspace::new();
    let d = Arc::new(ws.start(&[]));
    for round in 0..8 {
        let id = format!("n{round}");
        let key = format!("together-{round}");
        let add = json!([item(&id, "MARK_BLOCKED", "disk")]);
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let one = |d: Arc<Daemon>, barrier: Arc<tokio::sync::Barrier>| {
            let (key, add) = (key.clone(), add.clone());
            async move {
                barrier.wait().await;
                send(&d, Method::POST, "/blocklist/nodes", Some(&key), Some(&add)).await
            }
        };
        let (a, b) = tokio::join!(
            tokio::spawn(one(d.clone(), barrier.clone())),
            tokio::spawn(one(d.clone(), barrier.clone()))
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a.first(), b.first(), "round {round}: {a:?} vs {b:?}");
        assert_eq!(a.status, StatusCode::CREATED, "round {round}: {a:?}");
        assert_eq!(
            u8::from(a.is_replay()) + u8::from(b.is_replay()),
            1,
            "round {round}: one applied, one replayed: {a:?} {b:?}"
        );
    }
    let events = events(&d).await;
    for round in 0..8 {
        assert_eq!(of(&events, "node", &format!("n{round}")), ["added"]);
    }
    assert_eq!(events.len(), 8);
}

#[tokio::test]
async fn a_key_past_retention_is_forgotten_and_its_record_pruned() {
    let mut ws = Workspace::new();
    let d = ws.start(&["--idempotency-retention", "3s"]);
    let add = json!([item("n1", "MARK_BLOCKED", "disk")]);
    let first = send(
        &d,
        Method::POST,
        "/blocklist/nodes",
        Some("short"),
        Some(&add),
    )
    .await;
    assert_eq!(first.status, StatusCode::CREATED, "{first:?}");
    let again = send(
        &d,
        Method::POST,
        "/blocklist/nodes",
        Some("short"),
        Some(&add),
    )
    .await;
    assert!(again.is_replay(), "within the retention: {again:?}");
    // Past it the retry is a new request: n1 is blocked, no allowMerge, so a conflict.
    let start = std::time::Instant::now();
    loop {
        let retry = send(
            &d,
            Method::POST,
            "/blocklist/nodes",
            Some("short"),
            Some(&add),
        )
        .await;
        if retry.status == StatusCode::CONFLICT {
            assert!(!retry.is_replay(), "{retry:?}");
            break;
        }
        assert!(retry.is_replay(), "{retry:?}");
        assert!(start.elapsed() < DEADLINE, "the key was never forgotten");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        start.elapsed() >= std::time::Duration::from_secs(2),
        "kept for the retention"
    );
    // Any commit prunes what is past retention.
    let other = json!([item("n2", "MARK_BLOCKED", "disk")]);
    let written = send(&d, Method::POST, "/blocklist/nodes", None, Some(&other)).await;
    assert_eq!(written.status, StatusCode::CREATED);
    assert!(d.terminate().success());
    assert_eq!(ws.tree_entries(&["idempotency"]), [0]);
    assert_check_passes(&ws.data_dir());
}

#[tokio::test]
async fn a_conflict_is_not_kept_and_the_retry_applies_once_it_can() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let add = json!([item("n1", "MARK_BLOCKED", "disk")]);
    assert_eq!(
        d.post("/blocklist/nodes", add.clone()).await.0,
        StatusCode::CREATED
    );
    let refused = send(&d, Method::POST, "/blocklist/nodes", Some("c"), Some(&add)).await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{refused:?}");
    assert_eq!(d.delete("/blocklist/nodes/n1").await.0, StatusCode::OK);
    let applied = send(&d, Method::POST, "/blocklist/nodes", Some("c"), Some(&add)).await;
    assert_eq!(applied.status, StatusCode::CREATED, "{applied:?}");
    assert!(!applied.is_replay());
    let replayed = send(&d, Method::POST, "/blocklist/nodes", Some("c"), Some(&add)).await;
    assert!(replayed.is_replay(), "{replayed:?}");
    assert_eq!(replayed.first(), applied.first());
}

#[tokio::test]
async fn a_delete_replays_and_deletes_nothing_again() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let add = json!([item("n1", "MARK_BLOCKED", "disk")]);
    assert_eq!(
        d.post("/blocklist/nodes", add.clone()).await.0,
        StatusCode::CREATED
    );
    let first = send(&d, Method::DELETE, "/blocklist/nodes/n1", Some("del"), None).await;
    assert_eq!(first.status, StatusCode::OK, "{first:?}");
    // Blocked again by someone else: the retry of the delete must not unblock it.
    assert_eq!(d.post("/blocklist/nodes", add).await.0, StatusCode::CREATED);
    let again = send(&d, Method::DELETE, "/blocklist/nodes/n1", Some("del"), None).await;
    assert!(again.is_replay(), "{again:?}");
    assert_eq!(again.first(), first.first());
    assert_eq!(d.get("/blocklist/nodes/n1").await.0, StatusCode::OK);
    // A 404 is not kept: the same key on a delete that found nothing is answered afresh.
    let missing = send(
        &d,
        Method::DELETE,
        "/blocklist/nodes/n9",
        Some("del-9"),
        None,
    )
    .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let missing = send(
        &d,
        Method::DELETE,
        "/blocklist/nodes/n9",
        Some("del-9"),
        None,
    )
    .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(!missing.is_replay());
}

/// A `PATCH` conditional on the item's `ETag`, acknowledged, then the daemon killed: the
/// retry with its key gets the first 200 (body, `ETag`, revision) back rather than the 412
/// its stale `If-Match` would now earn, and the update is applied once.
#[tokio::test]
async fn an_acknowledged_patch_replays_after_kill_9_and_applies_once() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let add = json!([item("n1", "MARK_BLOCKED", "disk")]);
    assert_eq!(d.post("/blocklist/nodes", add).await.0, StatusCode::CREATED);
    let read = send(&d, Method::GET, "/blocklist/nodes/n1", None, None).await;
    let tag = read.etag.clone().expect("an ETag");
    let patch = json!({"action": "MARK_BLOCKED_AND_EVACUATE_TASKS", "cause": "smart"});
    let if_match = [("If-Match", tag.as_str())];
    let first = send_with(
        &d,
        Method::PATCH,
        "/blocklist/nodes/n1",
        Some("patch-1"),
        &if_match,
        Some(&patch),
    )
    .await;
    assert_eq!(first.status, StatusCode::OK, "{first:?}");
    assert!(!first.is_replay(), "{first:?}");
    assert_eq!(first.json()["cause"], "disk,smart");
    assert_ne!(first.etag, read.etag, "a new state: {first:?}");
    let head = d.revision().await;
    d.kill9();

    let d = ws.start(&[]);
    let again = send_with(
        &d,
        Method::PATCH,
        "/blocklist/nodes/n1",
        Some("patch-1"),
        &if_match,
        Some(&patch),
    )
    .await;
    assert!(again.is_replay(), "{again:?}");
    assert_eq!(again.first(), first.first(), "{again:?}");
    assert_eq!(d.revision().await, head, "nothing applied again");
    assert_eq!(of(&events(&d).await, "node", "n1"), ["added", "updated"]);
    let (_, stored) = d.get("/blocklist/nodes/n1").await;
    assert_eq!(
        stored["reportCount"], 2,
        "one report for the add, one for the update"
    );
    // Without the key the same request is a new one, decided afresh: its tag is stale.
    let fresh = send_with(
        &d,
        Method::PATCH,
        "/blocklist/nodes/n1",
        None,
        &if_match,
        Some(&patch),
    )
    .await;
    assert_eq!(fresh.status, StatusCode::PRECONDITION_FAILED, "{fresh:?}");
    // The key with another update is refused, and writes nothing.
    let other = json!({"cause": "fans"});
    let reused = send_with(
        &d,
        Method::PATCH,
        "/blocklist/nodes/n1",
        Some("patch-1"),
        &if_match,
        Some(&other),
    )
    .await;
    assert_eq!(
        reused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{reused:?}"
    );
    // So is the same update under another condition, or reported by someone else: the
    // headers a write depends on are part of the request.
    for headers in [
        [("If-Match", "*"), ("Accept", "*/*")],
        [
            ("If-Match", tag.as_str()),
            ("Blocklist-Source", "operator:bob"),
        ],
    ] {
        let reused = send_with(
            &d,
            Method::PATCH,
            "/blocklist/nodes/n1",
            Some("patch-1"),
            &headers,
            Some(&patch),
        )
        .await;
        assert_eq!(
            reused.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{headers:?}: {reused:?}"
        );
    }
    assert_eq!(d.revision().await, head);
}

/// An unblock by selector that was acknowledged, then the daemon killed: its retry replays
/// the list it removed, and leaves alone a matching item blocked again since.
#[tokio::test]
async fn an_unblock_by_selector_replays_its_list() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let from = |id: &str, source: &str| json!({"id": id, "action": "MARK_BLOCKED", "cause": "disk", "source": source});
    let add = json!([
        from("n1", "det-a"),
        from("n2", "det-a"),
        from("n3", "det-b")
    ]);
    assert_eq!(d.post("/blocklist/nodes", add).await.0, StatusCode::CREATED);
    let path = "/blocklist/nodes?source=det-a&reason=flaky";
    let first = send(&d, Method::DELETE, path, Some("sel-1"), None).await;
    assert_eq!(first.status, StatusCode::OK, "{first:?}");
    let body = first.json();
    let removed: Vec<&str> = body["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["id"].as_str().unwrap())
        .collect();
    assert_eq!(removed, ["n1", "n2"]);
    assert_eq!(body["count"], 2, "{first:?}");
    d.kill9();

    let d = ws.start(&[]);
    // Blocked again by the same detector: the retry must not unblock it.
    let again_add = json!([from("n1", "det-a")]);
    assert_eq!(
        d.post("/blocklist/nodes", again_add).await.0,
        StatusCode::CREATED
    );
    let head = d.revision().await;
    let again = send(&d, Method::DELETE, path, Some("sel-1"), None).await;
    assert!(again.is_replay(), "{again:?}");
    assert_eq!(again.first(), first.first(), "the first list: {again:?}");
    assert_eq!(d.revision().await, head, "nothing removed again");
    assert_eq!(d.get("/blocklist/nodes/n1").await.0, StatusCode::OK);
    assert_eq!(d.get("/blocklist/nodes/n3").await.0, StatusCode::OK);
    let events = events(&d).await;
    assert_eq!(of(&events, "node", "n1"), ["added", "removed", "added"]);
    assert_eq!(of(&events, "node", "n2"), ["added", "removed"]);
    // The key on another selector is refused.
    let other = send(
        &d,
        Method::DELETE,
        "/blocklist/nodes?source=det-b",
        Some("sel-1"),
        None,
    )
    .await;
    assert_eq!(other.status, StatusCode::UNPROCESSABLE_ENTITY, "{other:?}");
    assert_eq!(d.get("/blocklist/nodes/n3").await.0, StatusCode::OK);
}

#[tokio::test]
async fn an_allowlist_put_replays() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let put = json!({"comment": "the database hosts"});
    let first = send(
        &d,
        Method::PUT,
        "/allowlist/nodes/db-1",
        Some("a"),
        Some(&put),
    )
    .await;
    assert_eq!(first.status, StatusCode::CREATED, "{first:?}");
    let head = d.revision().await;
    let again = send(
        &d,
        Method::PUT,
        "/allowlist/nodes/db-1",
        Some("a"),
        Some(&put),
    )
    .await;
    assert!(again.is_replay(), "{again:?}");
    // Byte for byte, `addedAt` included: without the key the put would answer 200 (replaced).
    assert_eq!(again.first(), first.first());
    assert_eq!(d.revision().await, head, "nothing applied");
}

#[tokio::test]
async fn a_policy_put_replays() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let (_, mut policy) = d.get("/policy").await;
    policy["minRegistered"] = json!(3);
    let first = send(&d, Method::PUT, "/policy", Some("p"), Some(&policy)).await;
    assert_eq!(first.status, StatusCode::OK, "{first:?}");
    // Someone changes it again; the retry of the first put must not undo that.
    let mut later = policy.clone();
    later["minRegistered"] = json!(5);
    let (status, _) = d.call(Method::PUT, "/policy", Some(later)).await;
    assert_eq!(status, StatusCode::OK);
    let again = send(&d, Method::PUT, "/policy", Some("p"), Some(&policy)).await;
    assert!(again.is_replay(), "{again:?}");
    assert_eq!(again.first(), first.first());
    assert_eq!(d.get("/policy").await.1["minRegistered"], 5);
}

#[tokio::test]
async fn registrations_replay() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let put = json!({"node": "n1"});
    let first = send(&d, Method::PUT, "/taskmanagers/tm1", Some("r"), Some(&put)).await;
    assert_eq!(first.status, StatusCode::CREATED, "{first:?}");
    let again = send(&d, Method::PUT, "/taskmanagers/tm1", Some("r"), Some(&put)).await;
    assert!(again.is_replay(), "{again:?}");
    assert_eq!(again.first(), first.first());
    let gone = send(&d, Method::DELETE, "/taskmanagers/tm1", Some("u"), None).await;
    assert_eq!(gone.status, StatusCode::OK, "{gone:?}");
    let again = send(&d, Method::DELETE, "/taskmanagers/tm1", Some("u"), None).await;
    assert!(again.is_replay(), "{again:?}");
    assert_eq!(again.first(), gone.first());
}

#[tokio::test]
async fn dry_runs_neither_look_keys_up_nor_keep_them() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let add = json!([item("n1", "MARK_BLOCKED", "disk")]);
    let dry = send(
        &d,
        Method::POST,
        "/blocklist/nodes?dryRun=true",
        Some("d"),
        Some(&add),
    )
    .await;
    assert_eq!(dry.status, StatusCode::CREATED, "{dry:?}");
    let real = send(&d, Method::POST, "/blocklist/nodes", Some("d"), Some(&add)).await;
    assert_eq!(real.status, StatusCode::CREATED, "{real:?}");
    assert!(!real.is_replay(), "the dry run kept nothing: {real:?}");
    let dry = send(
        &d,
        Method::POST,
        "/blocklist/nodes?dryRun=true",
        Some("d"),
        Some(&add),
    )
    .await;
    assert_eq!(dry.status, StatusCode::CONFLICT, "decided afresh: {dry:?}");
}

#[tokio::test]
async fn a_malformed_key_is_refused() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let add = json!([item("n1", "MARK_BLOCKED", "disk")]);
    let long = "k".repeat(256);
    for key in ["", "two words", "ü", long.as_str(), "\"unterminated"] {
        let answer = send(&d, Method::POST, "/blocklist/nodes", Some(key), Some(&add)).await;
        assert_eq!(
            answer.status,
            StatusCode::BAD_REQUEST,
            "{key:?}: {answer:?}"
        );
        let message = answer.json()["errors"][0].as_str().unwrap().to_owned();
        assert!(message.starts_with("Idempotency-Key: "), "{message}");
    }
    assert_eq!(d.revision().await, 0, "nothing written");
    // The draft's form, a quoted string, names the same key as the bare one.
    let first = send(
        &d,
        Method::POST,
        "/blocklist/nodes",
        Some("\"q 1\""),
        Some(&add),
    )
    .await;
    assert_eq!(first.status, StatusCode::CREATED, "{first:?}");
    let again = send(
        &d,
        Method::POST,
        "/blocklist/nodes",
        Some("\"q 1\""),
        Some(&add),
    )
    .await;
    assert!(again.is_replay(), "{again:?}");
    let longest = "k".repeat(255);
    let answer = send(
        &d,
        Method::POST,
        "/blocklist/nodes",
        Some(&longest),
        Some(&add),
    )
    .await;
    assert_eq!(
        answer.status,
        StatusCode::CONFLICT,
        "a valid key: {answer:?}"
    );
}

/// 40 task managers with 400-byte causes, as a plain add, and as a merge of another cause
/// into them, whose 202 lists them merged: a body of over 32 KiB.
fn large_add(cause: char) -> Value {
    Value::Array(
        (0..40)
            .map(|i| {
                let mut item = item(
                    &format!("tm-{i:02}"),
                    "MARK_BLOCKED",
                    &cause.to_string().repeat(400),
                );
                item["allowMerge"] = json!(cause != 'a');
                item
            })
            .collect(),
    )
}

/// Two keyed writes and their first answers: a small add under key `s`, and under key `l`
/// a merge into [`large_add`]'s task managers whose 202 is over 32 KiB.
struct Kept {
    small: Value,
    small_answer: Answer,
    large: Value,
    large_answer: Answer,
}

impl Kept {
    async fn write(d: &Daemon) -> Kept {
        let small = json!([item("n1", "MARK_BLOCKED", "disk")]);
        let small_answer = send(d, Method::POST, "/blocklist/nodes", Some("s"), Some(&small)).await;
        assert_eq!(small_answer.status, StatusCode::CREATED, "{small_answer:?}");
        let plain = large_add('a');
        let added = send(
            d,
            Method::POST,
            "/blocklist/taskmanagers",
            None,
            Some(&plain),
        )
        .await;
        assert_eq!(added.status, StatusCode::CREATED, "{added:?}");
        let large = large_add('b');
        let large_answer = send(
            d,
            Method::POST,
            "/blocklist/taskmanagers",
            Some("l"),
            Some(&large),
        )
        .await;
        assert_eq!(
            large_answer.status,
            StatusCode::ACCEPTED,
            "{large_answer:?}"
        );
        assert!(
            large_answer.body.len() > 4 * 8192,
            "{}",
            large_answer.body.len()
        );
        Kept {
            small,
            small_answer,
            large,
            large_answer,
        }
    }

    /// Both requests again: each answered as first, replayed.
    async fn assert_replayed(&self, d: &Daemon) {
        let small = send(
            d,
            Method::POST,
            "/blocklist/nodes",
            Some("s"),
            Some(&self.small),
        )
        .await;
        assert!(small.is_replay(), "{small:?}");
        assert_eq!(small.first(), self.small_answer.first());
        let large = send(
            d,
            Method::POST,
            "/blocklist/taskmanagers",
            Some("l"),
            Some(&self.large),
        )
        .await;
        assert!(large.is_replay(), "{large:?}");
        assert_eq!(large.first(), self.large_answer.first());
    }
}

/// The keys of the `idempotency` tree of a stopped daemon's data dir, by kind.
struct RecordKeys {
    /// `k` ++ key.
    heads: usize,
    /// `k` ++ key ++ `00` ++ n, as (key, n).
    chunks: Vec<(Vec<u8>, u32)>,
    /// `t` ++ …
    times: usize,
}

fn record_keys(dir: &std::path::Path) -> RecordKeys {
    let db = open_sled(dir);
    let records = db.open_tree("idempotency").unwrap();
    let (mut heads, mut chunks, mut times) = (0, Vec::new(), 0);
    for key in records.iter().keys() {
        let key = key.unwrap().to_vec();
        match key[0] {
            b'k' if key.contains(&0) => {
                let n = key.len() - 4;
                let number = u32::from_be_bytes(key[n..].try_into().unwrap());
                chunks.push((key[1..n - 1].to_vec(), number));
            }
            b'k' => heads += 1,
            _ => times += 1,
        }
    }
    drop((records, db));
    wait_until_unlocked(dir);
    RecordKeys {
        heads,
        chunks,
        times,
    }
}

/// A small answer is kept in its record's head (one key beside its time entry); an answer
/// of several 8 KiB chunks keeps the first in the head and the others under keys of their
/// own, numbered from 1. Both replay byte for byte after a restart, and `blocklistd check`
/// accepts them.
#[tokio::test]
async fn small_answers_are_one_key_and_large_ones_replay_whole() {
    if skip_on_etcd("the records' layout in sled's keys") {
        return;
    }
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let kept = Kept::write(&d).await;
    assert!(d.terminate().success());
    let RecordKeys {
        heads,
        chunks,
        times,
    } = record_keys(&ws.data_dir());
    assert_eq!((heads, times), (2, 2));
    assert!(chunks.len() >= 4, "{chunks:?}");
    let want: Vec<(Vec<u8>, u32)> = (1..=chunks.len() as u32)
        .map(|n| (b"l".to_vec(), n))
        .collect();
    assert_eq!(chunks, want);

    let d = ws.start(&[]);
    kept.assert_replayed(&d).await;
    assert!(d.terminate().success());
    assert_check_passes(&ws.data_dir());
}

/// Schema 8 kept a record as a head of format 1 (its fields alone) and every chunk of its
/// answer under a key of its own, numbered from 0 (migrations/0009-records-and-figures.md).
/// Such records, rewritten here byte by byte from the ones this binary wrote, replay after
/// the upgrade to schema 9 exactly as first answered, and `blocklistd check` accepts them.
#[tokio::test]
async fn records_of_schema_8_replay_after_the_upgrade() {
    if skip_on_etcd("a schema 8 data dir, upgraded") {
        return;
    }
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let kept = Kept::write(&d).await;
    assert!(d.terminate().success());
    let chunks = {
        let db = open_sled(ws.data_dir());
        let records = db.open_tree("idempotency").unwrap();
        let mut chunks = 0;
        for key in [&b"s"[..], b"l"] {
            let head_key = [&b"k"[..], key].concat();
            let chunk_key = |n: u32| [&head_key[..], &[0], &n.to_be_bytes()].concat();
            let head = records.get(&head_key).unwrap().unwrap();
            assert_eq!(head[0], 2, "a head of format 2");
            // The fields: `at` (a zigzag varint of nine bytes: 0xFD and eight), the 32
            // fingerprint bytes, `len` (a varint: one byte below 251, 0xFB and two, 0xFC and
            // four).
            assert_eq!(head[1], 0xFD);
            let len_at = 1 + 9 + 32;
            let (len, fields_end) = match head[len_at] {
                0xFC => (
                    u32::from_le_bytes(head[len_at + 1..len_at + 5].try_into().unwrap()) as usize,
                    len_at + 5,
                ),
                0xFB => (
                    usize::from(u16::from_le_bytes([head[len_at + 1], head[len_at + 2]])),
                    len_at + 3,
                ),
                byte => (usize::from(byte), len_at + 1),
            };
            let mut response = head[fields_end..].to_vec();
            assert_eq!(response.len(), len.min(8192));
            let mut n = 1;
            while let Some(chunk) = records.remove(chunk_key(n)).unwrap() {
                response.extend_from_slice(&chunk);
                n += 1;
            }
            assert_eq!(response.len(), len);
            records
                .insert(&head_key, [&[1], &head[1..fields_end]].concat())
                .unwrap();
            for (n, chunk) in (0..).zip(response.chunks(8192)) {
                records.insert(chunk_key(n), chunk).unwrap();
                chunks += 1;
            }
        }
        db.open_tree("meta")
            .unwrap()
            .insert("schema_version", &8u32.to_be_bytes())
            .unwrap();
        db.flush().unwrap();
        assert!(chunks >= 5, "{chunks}");
        chunks
    };
    wait_until_unlocked(&ws.data_dir());
    assert_eq!(
        record_keys(&ws.data_dir()).chunks.len(),
        chunks,
        "chunks from 0"
    );

    let d = ws.start(&[]);
    assert!(d.log_text().contains("upgraded the database schema"));
    kept.assert_replayed(&d).await;
    let other = send(
        &d,
        Method::POST,
        "/blocklist/nodes",
        Some("s"),
        Some(&kept.large),
    )
    .await;
    assert_eq!(other.status, StatusCode::UNPROCESSABLE_ENTITY, "{other:?}");
    assert!(d.terminate().success());
    assert_check_passes(&ws.data_dir());
}
