//! The change feed: revisions, list-then-watch, reconnects across kill -9, retention, slow
//! watchers, many watchers, replay inside a transaction's chunks. Logs of older schema
//! versions: tests/upgrade.rs.

mod common;

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const MB: &str = "MARK_BLOCKED";
const EVAC: &str = "MARK_BLOCKED_AND_EVACUATE_TASKS";

#[tokio::test]
async fn list_then_watch_sees_exactly_the_changes_in_order() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    d.post("/blocklist/nodes", json!([item("before", MB, "old")]))
        .await;
    let (status, list_rev) = revision_of(&d, Method::GET, "/blocklist", None).await;
    assert_eq!(status, StatusCode::OK);
    let listing = d.listing().await;
    assert_eq!(
        listing["revision"],
        json!(list_rev),
        "body and header agree"
    );
    assert_eq!(list_rev, 1);
    assert_eq!(
        revision_of(&d, Method::GET, "/blocklist/nodes", None)
            .await
            .1,
        list_rev
    );

    let mut watch = Watch::open(&d, Some(list_rev), None).await.unwrap();
    let (s, r1) = revision_of(
        &d,
        Method::POST,
        "/blocklist/taskmanagers",
        Some(json!([item("tm", MB, "a")])),
    )
    .await;
    assert_eq!((s, r1), (StatusCode::CREATED, 2));
    let mut merge = item("tm", EVAC, "b");
    merge["allowMerge"] = json!(true);
    assert_eq!(
        revision_of(
            &d,
            Method::POST,
            "/blocklist/taskmanagers",
            Some(json!([merge]))
        )
        .await,
        (StatusCode::ACCEPTED, 3)
    );
    assert_eq!(
        revision_of(&d, Method::DELETE, "/blocklist/taskmanagers/tm", None).await,
        (StatusCode::OK, 4)
    );
    assert_eq!(
        revision_of(
            &d,
            Method::PUT,
            "/taskmanagers/tm-9",
            Some(json!({"node": "n1"}))
        )
        .await,
        (StatusCode::CREATED, 5)
    );
    assert_eq!(
        revision_of(&d, Method::DELETE, "/taskmanagers/tm-9", None).await,
        (StatusCode::OK, 6)
    );
    // Refused requests change nothing and emit nothing.
    assert_eq!(
        d.post("/blocklist/nodes", json!([item("before", MB, "again")]))
            .await
            .0,
        StatusCode::CONFLICT
    );
    let mut short = item("n-short", MB, "c");
    short["timeout"] = json!(300);
    assert_eq!(
        revision_of(&d, Method::POST, "/blocklist/nodes", Some(json!([short]))).await,
        (StatusCode::CREATED, 7)
    );

    let events = watch.take(7).await;
    assert_consecutive(&events, list_rev);
    assert_eq!(
        summary(&events),
        pairs(&[
            ("added", "tm"),
            ("merged", "tm"),
            ("removed", "tm"),
            ("registered", "tm-9"),
            ("unregistered", "tm-9"),
            ("added", "n-short"),
            ("expired", "n-short")
        ])
    );
    assert_eq!(events[0].data["kind"], "taskmanager");
    assert_eq!(events[1].data["action"], EVAC);
    assert_eq!(events[1].data["cause"], "a,b");
    assert_eq!(
        events[2].data["cause"], "a,b",
        "removed carries the item as it was"
    );
    assert_eq!(events[3].data, json!({"id": "tm-9", "node": "n1"}));
    assert_eq!(events[6].data["kind"], "node");
    assert_eq!(
        events[6].data["endTimestamp"],
        events[5].data["endTimestamp"]
    );
}

#[tokio::test]
async fn re_adding_over_an_unswept_expired_item_emits_expired_then_added() {
    let mut ws = Workspace::new();
    let d = ws.start(&["--sweep-interval-ms", "3600000"]);
    let mut short = item("n", MB, "old");
    short["timeout"] = json!(200);
    d.post("/blocklist/nodes", json!([short])).await;
    let mut watch = Watch::open(&d, Some(1), None).await.unwrap();
    eventually("the item to expire", || async {
        d.get("/blocklist/nodes/n").await.0 == StatusCode::NOT_FOUND
    })
    .await;
    assert_eq!(
        d.post("/blocklist/nodes", json!([item("n", MB, "new")]))
            .await
            .0,
        StatusCode::CREATED
    );
    let events = watch.take(2).await;
    assert_eq!(summary(&events), pairs(&[("expired", "n"), ("added", "n")]));
    assert_eq!(
        (
            events[0].data["cause"].clone(),
            events[1].data["cause"].clone()
        ),
        (json!("old"), json!("new"))
    );
    assert_consecutive(&events, 1);
}

#[tokio::test]
async fn reconnecting_with_last_event_id_after_kill_9_gives_no_gap_and_no_duplicate() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let mut watch = Watch::open(&d, None, None).await.unwrap();
    for i in 0..10 {
        let body = json!([item(&format!("tm-{i}"), MB, "c")]);
        assert_eq!(
            d.post("/blocklist/taskmanagers", body).await.0,
            StatusCode::CREATED
        );
    }
    let seen = watch.take(4).await;
    assert_consecutive(&seen, 0);
    drop(watch);
    d.kill9();

    let d = ws.start(&[]);
    for i in 10..15 {
        let body = json!([item(&format!("tm-{i}"), MB, "c")]);
        assert_eq!(
            d.post("/blocklist/taskmanagers", body).await.0,
            StatusCode::CREATED
        );
    }
    // The header wins over a stale ?since=, as on a browser EventSource reconnect.
    let mut watch = Watch::open(&d, Some(0), Some(seen[3].id)).await.unwrap();
    let rest = watch.take(11).await;
    assert_consecutive(&rest, 4);
    let ids: Vec<String> = rest
        .iter()
        .map(|e| e.data["id"].as_str().unwrap().to_owned())
        .collect();
    let expected: Vec<String> = (4..15).map(|i| format!("tm-{i}")).collect();
    assert_eq!(ids, expected);
    d.kill9();
    let (problems, _) = ws.inspect();
    assert!(problems.is_empty(), "{problems:?}");
}

#[tokio::test]
async fn since_outside_the_retained_log_is_410_and_bad_since_is_400() {
    let mut ws = Workspace::new();
    let d = ws.start(&["--events-retention-count", "5"]);
    for i in 0..20 {
        d.post("/blocklist/nodes", json!([item(&format!("n{i}"), MB, "c")]))
            .await;
    }
    let (status, body) = Watch::open(&d, Some(0), None).await.err().expect("410");
    assert_eq!(status, StatusCode::GONE);
    assert!(
        body["errors"][0].as_str().unwrap().contains("list again"),
        "{body}"
    );
    assert_eq!(
        Watch::open(&d, Some(10), None).await.err().map(|e| e.0),
        Some(StatusCode::GONE)
    );
    assert_eq!(
        Watch::open(&d, Some(99), None).await.err().map(|e| e.0),
        Some(StatusCode::GONE),
        "ahead of the daemon"
    );

    // The last five are kept: watching from 15 replays 16..=20.
    let mut watch = Watch::open(&d, Some(15), None).await.unwrap();
    assert_consecutive(&watch.take(5).await, 15);

    for bad in [
        "/blocklist/events?since=-1",
        "/blocklist/events?since=abc",
        "/blocklist/events?sinse=1",
    ] {
        let (status, body) = d.get(bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    d.kill9();
    let (problems, _) = ws.inspect();
    assert!(problems.is_empty(), "{problems:?}");
}

#[tokio::test]
async fn a_slow_watcher_is_disconnected_while_writers_go_on_and_can_resume() {
    let mut ws = Workspace::new();
    let d = ws.start(&["--events-max-lag", "1000", "--max-body-bytes", "4194304"]);
    // Opened and never read while the writes happen.
    let mut slow = Watch::open(&d, None, None).await.unwrap();
    // About 20 MB of events: more than socket buffers and queues can hold.
    let total = 20_000u64;
    // A watcher that keeps reading gets every event, bursts of 1,000 per commit included.
    // "Keeps reading" is made exact: the next burst is written only once it has read the
    // last one (on a loaded machine a reader task can otherwise fall a burst behind).
    let mut fast = Watch::open(&d, None, None).await.unwrap();
    let read_up_to = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let progress = read_up_to.clone();
    let fast = tokio::spawn(async move {
        let mut got = Vec::with_capacity(total as usize);
        while got.len() < total as usize {
            let event = fast.next().await.expect("the fast watcher is not cut off");
            progress.store(event.id, std::sync::atomic::Ordering::SeqCst);
            got.push(event);
        }
        got
    });
    let cause = "c".repeat(1000);
    for batch in 0..20 {
        let items: Vec<Value> = (0..1000)
            .map(|i| item(&format!("tm-{batch}-{i:04}"), MB, &cause))
            .collect();
        assert_eq!(
            d.post("/blocklist/taskmanagers", Value::Array(items))
                .await
                .0,
            StatusCode::CREATED
        );
        let written = (batch + 1) * 1000;
        eventually("the fast watcher to read the burst", || {
            let read = read_up_to.load(std::sync::atomic::Ordering::SeqCst);
            async move { read >= written }
        })
        .await;
    }
    // Now read: a prefix in order, then the end of the stream.
    let mut got = Vec::new();
    while let Some(event) = slow.next().await {
        got.push(event);
    }
    assert!(!got.is_empty());
    assert!(
        (got.len() as u64) < total,
        "the slow watcher was cut off, not buffered without bound"
    );
    assert_consecutive(&got, 0);
    assert_consecutive(&fast.await.unwrap(), 0);

    // It resumes where it stopped and gets the rest.
    let last = got.last().unwrap().id;
    let mut resumed = Watch::open(&d, None, Some(last)).await.unwrap();
    let rest = resumed.take((total - last) as usize).await;
    assert_consecutive(&rest, last);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_watchers_each_see_every_event_in_order() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let mut watches = Vec::new();
    for _ in 0..1000 {
        watches.push(Watch::open(&d, None, None).await.unwrap());
    }
    for i in 0..20 {
        d.post("/blocklist/nodes", json!([item(&format!("n{i}"), MB, "c")]))
            .await;
    }
    let readers: Vec<_> = watches
        .into_iter()
        .map(|mut w| tokio::spawn(async move { w.take(20).await }))
        .collect();
    for reader in readers {
        let events = reader.await.unwrap();
        assert_consecutive(&events, 0);
        assert_eq!(events[19].data["id"], "n19");
    }
}

#[tokio::test]
async fn idle_watch_streams_get_heartbeat_comments() {
    let mut ws = Workspace::new();
    let d = ws.start(&["--events-heartbeat-secs", "1"]);
    let mut resp = reqwest::Client::new()
        .get(d.url("/blocklist/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    // Nothing happens; within a few seconds a comment line (":") arrives all the same.
    let mut seen = Vec::new();
    let comment = tokio::time::timeout(DEADLINE, async {
        while let Some(chunk) = resp.chunk().await.unwrap() {
            seen.extend_from_slice(&chunk);
            if seen.starts_with(b":") || seen.windows(2).any(|w| w == b"\n:") {
                return true;
            }
        }
        false
    })
    .await
    .expect("a heartbeat in time");
    assert!(comment, "{:?}", String::from_utf8_lossy(&seen));
}

/// One request of 300 items is one transaction, whose events are stored together in
/// several chunks (schema 4). Replaying from any revision — before it, inside a chunk, at a
/// chunk's edge — gives exactly the revisions after it, once each and in order; and the
/// chunked log passes `blocklistd check`.
#[tokio::test]
async fn replay_from_inside_a_transaction_gives_exactly_what_follows() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let items: Vec<Value> = (0..300)
        .map(|i| item(&format!("n{i}"), MB, &"c".repeat(40)))
        .collect();
    assert_eq!(
        d.post("/blocklist/nodes", json!(items)).await.0,
        StatusCode::CREATED
    );
    d.post("/blocklist/nodes", json!([item("last", MB, "c")]))
        .await;
    for since in [0u64, 1, 57, 150, 299, 300] {
        let mut watch = Watch::open(&d, Some(since), None).await.unwrap();
        let events = watch.take((301 - since) as usize).await;
        assert_eq!(events.len() as u64, 301 - since, "since={since}");
        assert_consecutive(&events, since);
        assert_eq!(events.last().unwrap().data["id"], "last", "since={since}");
    }
    d.kill9();
    let (problems, _) = ws.inspect();
    assert!(problems.is_empty(), "{problems:?}");
}
