//! Expiry: due items vanish for every reader at once, the sweeper deletes them (item and
//! index entry together) when their deadline comes, including those that came due while
//! the daemon was down.

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

fn timed(id: &str, timeout_ms: i64, cause: &str) -> Value {
    json!({"id": id, "action": "MARK_BLOCKED", "cause": cause, "timeout": timeout_ms})
}

#[tokio::test]
async fn due_items_vanish_for_readers_before_the_sweeper_runs() {
    let mut ws = Workspace::new();
    // The sweeper passes once at start, then not again for an hour.
    let d = ws.start(&["--sweep-interval-ms", "3600000"]);
    // One absolute end for all, so they come due together; far enough ahead that both
    // posts land before it on a loaded machine (a past end is refused with 400).
    let end = now_ms() + 2_000;
    let at =
        |id: &str| json!({"id": id, "action": "MARK_BLOCKED", "cause": id, "endTimestamp": end});
    assert_eq!(
        d.post("/blocklist/taskmanagers", json!([at("t1"), at("t2")]))
            .await
            .0,
        StatusCode::CREATED
    );
    assert_eq!(
        d.post(
            "/blocklist/nodes",
            json!([at("n1"), item("perm", "MARK_BLOCKED", "p")])
        )
        .await
        .0,
        StatusCode::CREATED
    );
    assert_eq!(d.get("/blocklist/taskmanagers/t1").await.0, StatusCode::OK);

    eventually("t1 to expire for readers", || async {
        d.get("/blocklist/taskmanagers/t1").await.0 == StatusCode::NOT_FOUND
    })
    .await;
    assert_eq!(d.get("/blocklist/nodes/n1").await.0, StatusCode::NOT_FOUND);
    assert_eq!(d.get("/blocklist/taskmanagers").await.1, json!([]));
    assert_eq!(ids(&d.listing().await["blockedNodes"]), ["perm"]);
    assert_eq!(
        d.delete("/blocklist/nodes/n1").await.0,
        StatusCode::NOT_FOUND
    );

    // Re-adding an expired id without allowMerge is a new item: 201, fresh start and cause.
    let before = now_ms();
    let (status, _) = d
        .post(
            "/blocklist/taskmanagers",
            json!([timed("t1", 3_600_000, "second")]),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, t1) = d.get("/blocklist/taskmanagers/t1").await;
    assert_eq!(t1["cause"], "second", "not merged with the expired item");
    assert!(t1["startTimestamp"].as_i64().unwrap() >= before);
    assert_eq!(d.swept().await, 0, "the sweeper has not run");
    d.kill9();

    // Offline: t2 is still on disk (nobody swept it), and the index agrees with the items.
    let (problems, (items, expiry)) = ws.inspect();
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        (items, expiry),
        (3, 2),
        "t1 (re-added), t2 (due, unswept), perm"
    );
}

#[tokio::test]
async fn the_sweeper_deletes_due_items_and_keeps_extended_ones() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let batch: Vec<Value> = (0..50)
        .map(|i| timed(&format!("tm-{i}"), 400, "short"))
        .collect();
    assert_eq!(
        d.post("/blocklist/taskmanagers", Value::Array(batch))
            .await
            .0,
        StatusCode::CREATED
    );
    // Extend two of them by merging a later end before they are due.
    let mut longer = timed("tm-7", 3_600_000, "longer");
    longer["allowMerge"] = json!(true);
    let mut forever = item("tm-8", "MARK_BLOCKED", "forever");
    forever["allowMerge"] = json!(true);
    assert_eq!(
        d.post("/blocklist/taskmanagers", json!([longer, forever]))
            .await
            .0,
        StatusCode::ACCEPTED
    );

    eventually("48 items to be swept", || async { d.swept().await == 48 }).await;
    assert_eq!(
        ids(&d.get("/blocklist/taskmanagers").await.1),
        ["tm-7", "tm-8"]
    );
    assert!(d.terminate().success());
    let (problems, sizes) = ws.inspect();
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        sizes,
        (2, 1),
        "tm-7 indexed at its new end, tm-8 permanent and unindexed"
    );
}

#[tokio::test]
async fn an_earlier_deadline_wakes_the_sweeper() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    // The sweeper now sleeps towards an hour away (capped at 60 s, longer than DEADLINE).
    assert_eq!(
        d.post("/blocklist/nodes", json!([timed("late", 3_600_000, "c")]))
            .await
            .0,
        StatusCode::CREATED
    );
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(
        d.post("/blocklist/nodes", json!([timed("soon", 200, "c")]))
            .await
            .0,
        StatusCode::CREATED
    );
    eventually("the earlier item to be swept", || async {
        d.get("/blocklist/nodes/soon").await.0 == StatusCode::NOT_FOUND && d.swept().await == 1
    })
    .await;
    assert_eq!(d.get("/blocklist/nodes/late").await.0, StatusCode::OK);
}

#[tokio::test]
async fn items_that_came_due_while_down_are_swept_after_start() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let end = now_ms() + 500;
    let body = json!([{"id": "gone", "action": "MARK_BLOCKED", "cause": "c", "endTimestamp": end},
                      item("stays", "MARK_BLOCKED", "c")]);
    assert_eq!(
        d.post("/blocklist/nodes", body).await.0,
        StatusCode::CREATED
    );
    d.kill9();
    while now_ms() <= end + 50 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let d = ws.start(&[]);
    assert_eq!(
        d.get("/blocklist/nodes/gone").await.0,
        StatusCode::NOT_FOUND
    );
    eventually("the due item to be swept after start", || async {
        d.swept().await == 1
    })
    .await;
    assert!(d.terminate().success());
    let (problems, sizes) = ws.inspect();
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(sizes, (1, 0));
}
