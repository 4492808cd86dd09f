//! Expiry: due items vanish for every reader at once, the sweeper announces them expired
//! when their deadline comes (including those that came due while the daemon was down) and
//! deletes their storage (item and index entry together) once writers let it; an announced
//! item is never announced again, by a restart or a write.

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
        // Long enough that the merge below surely lands before they are due (a 202).
        .map(|i| timed(&format!("tm-{i}"), 2_000, "short"))
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

    eventually("48 items to be swept and reclaimed", || async {
        d.swept().await == 48 && d.reclaimed().await == 48
    })
    .await;
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
    // The sweeper then sleeps towards an hour away (capped at 60 s, longer than DEADLINE).
    let late_end = now_ms() + 3_600_000;
    let late =
        json!({"id": "late", "action": "MARK_BLOCKED", "cause": "c", "endTimestamp": late_end});
    assert_eq!(
        d.post("/blocklist/nodes", json!([late])).await.0,
        StatusCode::CREATED
    );
    eventually("the sweeper to sleep on the late deadline", || async {
        let at = d
            .metric("blocklist_sweeper_next_deadline_timestamp_seconds")
            .await;
        (at - late_end as f64 / 1000.0).abs() < 0.001
    })
    .await;
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
    eventually(
        "the due item to be swept and reclaimed after start",
        || async { d.swept().await == 1 && d.reclaimed().await == 1 },
    )
    .await;
    assert!(d.terminate().success());
    let (problems, sizes) = ws.inspect();
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(sizes, (1, 0));
}

/// Holds reclaiming off, so announced items stay on disk.
const NO_RECLAIM: [&str; 4] = ["--reclaim-idle-ms", "3600000", "--reclaim-min-rate", "0"];

#[tokio::test]
async fn announced_items_stay_expired_across_writes_and_restarts_until_reclaimed() {
    let mut ws = Workspace::new();
    let d = ws.start(&NO_RECLAIM);
    assert_eq!(
        d.post(
            "/blocklist/nodes",
            json!([item("keep", "MARK_BLOCKED", "c")])
        )
        .await
        .0,
        StatusCode::CREATED
    );
    let batch: Vec<Value> = (0..20)
        .map(|i| timed(&format!("a{i}"), 300, "short"))
        .collect();
    assert_eq!(
        d.post("/blocklist/nodes", Value::Array(batch)).await.0,
        StatusCode::CREATED
    );
    eventually("20 items to be announced", || async {
        d.swept().await == 20
    })
    .await;
    let mb = r#"blocklist_items{kind="node",action="MARK_BLOCKED"}"#;
    assert_eq!(d.metric(mb).await, 1.0, "announced items leave the counts");
    assert_eq!(d.reclaimed().await, 0);
    let unreclaimed = "blocklist_unreclaimed_items";
    assert_eq!(d.metric(unreclaimed).await, 20.0);
    // An announced item is gone for writers too: a delete finds nothing, a re-add is new.
    assert_eq!(
        d.delete("/blocklist/nodes/a0").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        d.post(
            "/blocklist/nodes",
            json!([item("a1", "MARK_BLOCKED", "again")])
        )
        .await
        .0,
        StatusCode::CREATED
    );
    assert_eq!(d.metric(mb).await, 2.0);
    assert_eq!(
        d.metric(unreclaimed).await,
        18.0,
        "a0 and a1's old storage went"
    );
    d.kill9();

    // On disk: the 18 untouched announced items and their entries, a1's new item, keep.
    let (problems, sizes) = ws.inspect();
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(sizes, (20, 18));
    let out = blocklistd(&[
        "check".as_ref(),
        "--data-dir".as_ref(),
        ws.data_dir().as_os_str(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("20 items (18 expired, storage not reclaimed yet)"),
        "{stdout}"
    );

    let d = ws.start(&NO_RECLAIM);
    assert_eq!(
        d.post(
            "/blocklist/nodes",
            json!([item("after", "MARK_BLOCKED", "c")])
        )
        .await
        .0,
        StatusCode::CREATED
    );
    assert_eq!(d.metric(mb).await, 3.0, "the counts survived the restart");
    assert_eq!(d.metric(unreclaimed).await, 18.0, "counted again at start");
    assert_eq!(d.swept().await, 0, "nothing is announced twice");
    let events = Watch::open(&d, Some(0), None).await.unwrap().take(43).await;
    assert_consecutive(&events, 0);
    let expired: std::collections::BTreeSet<String> = events
        .iter()
        .filter(|e| e.event == "expired")
        .map(|e| e.data["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(expired.len(), 20, "one expired event per item");
    assert_eq!(
        events.iter().filter(|e| e.event == "expired").count(),
        20,
        "{events:?}"
    );
    let last: Vec<(&str, &str)> = events[41..]
        .iter()
        .map(|e| (e.event.as_str(), e.data["id"].as_str().unwrap()))
        .collect();
    assert_eq!(last, [("added", "a1"), ("added", "after")]);
    d.kill9();

    // Reclaiming at its defaults: the daemon is idle, so all of it goes at once.
    let d = ws.start(&[]);
    eventually("the announced items to be reclaimed", || async {
        d.reclaimed().await == 18
    })
    .await;
    assert_eq!(d.swept().await, 0);
    assert_eq!(d.metric(unreclaimed).await, 0.0);
    assert!(d.terminate().success());
    let (problems, sizes) = ws.inspect();
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(sizes, (3, 0), "keep, a1 and after, all permanent");
}

/// The store itself, without HTTP: a write can commit after its end has come (validation
/// saw it in the future) and after the watermark passed its expiry key. Nothing would ever
/// announce it then, so the write does.
#[test]
fn a_write_whose_end_the_watermark_passed_announces_itself() {
    use blocklistd::model::{Action, EventType, Kind, NewItem};
    use blocklistd::store::{Store, StoreConfig};

    let ws = Workspace::new();
    let store = Store::open(&StoreConfig::new(ws.data_dir())).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let end = now_ms() + 50;
    let new = |id: &str, end: i64| NewItem {
        id: id.to_owned(),
        action: Action::MarkBlocked,
        end,
        cause: "c".to_owned(),
        allow_merge: false,
        source: "unknown".to_owned(),
        timeout: None,
        details: blocklistd::model::Details::new(),
    };
    let events = runtime.block_on(async {
        store
            .add(Kind::Node, vec![new("a", end), new("c", end)], end - 50)
            .await
            .unwrap();
        while now_ms() <= end {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let (announced, _) = store.announce(i64::MAX, 100).await.unwrap();
        assert_eq!(announced.len(), 2);
        // "b" sorts between the two announced keys: behind the watermark.
        let (_, before) = store
            .add(Kind::Node, vec![new("b", end)], end - 50)
            .await
            .unwrap();
        assert_eq!(store.item_counts(), [0; 4], "b came and went");
        assert_eq!(store.unreclaimed(), 3);
        let (announced, _) = store.announce(i64::MAX, 100).await.unwrap();
        assert!(
            announced.is_empty(),
            "b is not announced twice: {announced:?}"
        );
        // Over an announced item, a write is a plain add.
        let forever = blocklistd::model::PERMANENT;
        let (_, after) = store
            .add(Kind::Node, vec![new("b", forever)], now_ms())
            .await
            .unwrap();
        assert_eq!(store.item_counts()[2], 1);
        assert_eq!(
            store.unreclaimed(),
            2,
            "b's announced storage went with the write"
        );
        store.events_between(before - 2, after, 100).unwrap()
    });
    let summary: Vec<(EventType, String)> = events
        .iter()
        .map(|e| match &e.change {
            blocklistd::model::Change::Item { item, .. } => (e.event, item.id.clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        summary,
        [
            (EventType::Added, "b".to_owned()),
            (EventType::Expired, "b".to_owned()),
            (EventType::Added, "b".to_owned()),
        ]
    );
    assert_eq!(store.verify().unwrap(), Vec::<String>::new());
    store.shutdown().unwrap();
}
