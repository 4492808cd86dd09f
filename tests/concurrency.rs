//! Concurrency: merges are linearizable, add-without-merge races have one winner, adds
//! racing the sweeper never break the index or resurrect an expired item, and writers
//! racing both phases of expiry keep the change feed consistent with the store.

mod common;

use std::collections::BTreeSet;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_merges_into_one_id_lose_nothing() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let url = d.url("/blocklist/nodes");
    let client = reqwest::Client::new();
    let start = now_ms();
    let mut tasks = Vec::new();
    for c in 0..32 {
        let (client, url) = (client.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let mut ends = Vec::new();
            for n in 0..10 {
                let end = start + 3_600_000 + c * 1000 + n;
                let action = if c == 17 && n == 3 {
                    "MARK_BLOCKED_AND_EVACUATE_TASKS"
                } else {
                    "MARK_BLOCKED"
                };
                let body = json!([{"id": "hot", "action": action, "cause": format!("c{c}-{n}"),
                                   "endTimestamp": end, "allowMerge": true}]);
                let status = client.post(&url).json(&body).send().await.unwrap().status();
                assert!(
                    status == StatusCode::CREATED || status == StatusCode::ACCEPTED,
                    "{status}"
                );
                ends.push((status, end));
            }
            ends
        }));
    }
    let mut created = 0;
    let mut max_end = 0;
    for t in tasks {
        for (status, end) in t.await.unwrap() {
            created += usize::from(status == StatusCode::CREATED);
            max_end = max_end.max(end);
        }
    }
    assert_eq!(
        created, 1,
        "exactly one request created the item; the rest merged"
    );
    let (_, hot) = d.get("/blocklist/nodes/hot").await;
    let causes: BTreeSet<&str> = hot["cause"].as_str().unwrap().split(',').collect();
    assert_eq!(causes.len(), 320, "no cause lost");
    assert_eq!(hot["endTimestamp"], json!(max_end));
    assert_eq!(hot["action"], "MARK_BLOCKED_AND_EVACUATE_TASKS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_adds_without_merge_have_exactly_one_winner() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let client = reqwest::Client::new();
    for round in 0..5 {
        let id = format!("contested-{round}");
        let tasks: Vec<_> = (0..40)
            .map(|c| {
                let (client, url) = (client.clone(), d.url("/blocklist/taskmanagers"));
                let body = json!([item(&id, "MARK_BLOCKED", &format!("client-{c}"))]);
                tokio::spawn(
                    async move { client.post(&url).json(&body).send().await.unwrap().status() },
                )
            })
            .collect();
        let mut statuses = Vec::new();
        for t in tasks {
            statuses.push(t.await.unwrap());
        }
        assert_eq!(
            statuses
                .iter()
                .filter(|s| **s == StatusCode::CREATED)
                .count(),
            1,
            "{statuses:?}"
        );
        assert_eq!(
            statuses
                .iter()
                .filter(|s| **s == StatusCode::CONFLICT)
                .count(),
            39
        );
        let (_, stored) = d.get(&format!("/blocklist/taskmanagers/{id}")).await;
        assert!(
            !stored["cause"].as_str().unwrap().contains(','),
            "the winner's item, unmerged"
        );
    }
}

/// Re-adds (no merge) racing the moment their ids' old items come due: each is refused (409)
/// while the old item blocks and written (201) once it is due. What was written must
/// survive the sweeper that announces and reclaims the old items at the same moment; what
/// was refused must leave the old item to expire; no old item comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adds_racing_the_sweeper_keep_the_index_whole_and_never_resurrect() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let client = reqwest::Client::new();
    let mut written: BTreeSet<String> = BTreeSet::new();
    for round in 0..5 {
        // 100 fresh items due in 150 ms.
        let end = now_ms() + 150;
        let batch: Vec<Value> = (0..100)
            .map(|i| json!({"id": format!("r{round}-{i}"), "action": "MARK_BLOCKED", "cause": format!("old-{round}"), "endTimestamp": end}))
            .collect();
        assert_eq!(
            d.post("/blocklist/nodes", Value::Array(batch)).await.0,
            StatusCode::CREATED
        );
        // The re-adds go out spread over the 20 ms around the moment the old items are due.
        let tasks: Vec<_> = (0..100)
            .map(|i| {
                let (client, url) = (client.clone(), d.url("/blocklist/nodes"));
                let id = format!("r{round}-{i}");
                let body = json!([{"id": id, "action": "MARK_BLOCKED", "cause": format!("new-{round}"), "timeout": 600_000}]);
                let at = end - 10 + i / 5;
                tokio::spawn(async move {
                    while now_ms() < at {
                        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                    }
                    (id, client.post(&url).json(&body).send().await.unwrap().status())
                })
            })
            .collect();
        for t in tasks {
            let (id, status) = t.await.unwrap();
            match status {
                StatusCode::CREATED => {
                    written.insert(id);
                }
                StatusCode::CONFLICT => {}
                other => panic!("{id}: {other}"),
            }
        }
    }
    // Sent up to 10 ms after the old items came due, some re-adds must have been written.
    assert!(!written.is_empty(), "no re-add raced the expiry");
    // Every old item has ended exactly once — announced by the sweeper, or by the write
    // over it that the sweeper had not reached — and its storage is reclaimed.
    let expired = r#"blocklist_changes_total{event="expired"}"#;
    eventually("all 500 old items expired and reclaimed", || async {
        d.metric(expired).await >= 500.0 && d.metric("blocklist_unreclaimed_items").await == 0.0
    })
    .await;
    assert_eq!(d.metric(expired).await, 500.0, "an old item expired twice");
    // Exactly the written re-adds are there, as written: none lost to the sweeper, no old
    // item back.
    let nodes = d.get("/blocklist/nodes").await.1;
    let listed: BTreeSet<String> = nodes
        .as_array()
        .unwrap()
        .iter()
        .map(|node| {
            let id = node["id"].as_str().unwrap();
            let round = id[1..].split('-').next().unwrap();
            assert_eq!(node["cause"], format!("new-{round}"), "resurrected: {node}");
            id.to_owned()
        })
        .collect();
    assert_eq!(listed, written);
    d.kill9();
    let (problems, _) = ws.inspect();
    assert!(problems.is_empty(), "{problems:?}");
}

/// Writers racing both phases of expiry — announcing, and reclaiming with no pause
/// required — on a small pool of ids: the change feed replayed from the start never
/// contradicts itself (no `added` over a present item, no `merged`, `removed` or `expired`
/// of an absent one, so no item is announced twice or resurrected), ends where the listing
/// is, and the store is whole and fully reclaimed afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_racing_announce_and_reclaim_keep_the_feed_consistent() {
    race_the_sweeper(
        &["--reclaim-idle-ms", "0", "--reclaim-min-rate", "100000"],
        true,
    )
    .await;
}

/// The same with reclaiming held off, so writes keep meeting announced items still stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_over_announced_unreclaimed_items_keep_the_feed_consistent() {
    race_the_sweeper(
        &["--reclaim-idle-ms", "3600000", "--reclaim-min-rate", "0"],
        false,
    )
    .await;
}

async fn race_the_sweeper(flags: &[&str], reclaims: bool) {
    let mut ws = Workspace::new();
    let d = ws.start(flags);
    let client = reqwest::Client::new();
    let until = now_ms() + 2_500;
    let mut tasks = Vec::new();
    for w in 0..8u64 {
        let (client, base) = (client.clone(), d.url("/blocklist/nodes"));
        tasks.push(tokio::spawn(async move {
            let mut seed = w * 7919 + 1;
            let mut next = move |n: u64| {
                seed = seed
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (seed >> 33) % n
            };
            while now_ms() < until {
                let id = format!("n{}", next(40));
                let status = match next(10) {
                    0 => client.delete(format!("{base}/{id}")).send().await,
                    k => {
                        let mut body = json!({"id": id, "action": "MARK_BLOCKED",
                            "cause": format!("w{w}"), "allowMerge": k % 2 == 0});
                        // Mostly short, so they come due all the time; some permanent.
                        if k != 9 {
                            body["timeout"] = json!(20 + next(200));
                        }
                        client.post(&base).json(&json!([body])).send().await
                    }
                }
                .unwrap()
                .status();
                assert!(
                    [200, 201, 202, 204, 404, 409].contains(&status.as_u16()),
                    "{status}"
                );
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Quiet: every short item is due; wait for the sweeper to announce (and reclaim) them.
    let listed = |v: &Value| -> BTreeSet<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|i| i["id"].as_str().unwrap().to_owned())
            .collect()
    };
    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    eventually(
        "the sweeper to announce (and reclaim) everything due",
        || async {
            let counted = d
                .metric(r#"blocklist_items{kind="node",action="MARK_BLOCKED"}"#)
                .await;
            let listing = listed(&d.get("/blocklist/nodes").await.1);
            let unreclaimed = d.metric("blocklist_unreclaimed_items").await;
            counted as usize == listing.len() && (unreclaimed == 0.0 || !reclaims)
        },
    )
    .await;
    let (_, revision) = revision_of(&d, reqwest::Method::GET, "/blocklist/nodes", None).await;
    let listing = listed(&d.get("/blocklist/nodes").await.1);
    let events = Watch::open(&d, Some(0), None)
        .await
        .unwrap()
        .take(revision as usize)
        .await;
    assert_consecutive(&events, 0);
    let mut present = BTreeSet::new();
    for e in &events {
        let id = e.data["id"].as_str().unwrap().to_owned();
        let ok = match e.event.as_str() {
            "added" => present.insert(id.clone()),
            "merged" => present.contains(&id),
            "removed" | "expired" => present.remove(&id),
            other => panic!("unexpected event {other}"),
        };
        assert!(
            ok,
            "revision {}: {} {id} contradicts the feed so far",
            e.id, e.event
        );
    }
    assert_eq!(present, listing, "the feed replayed is the listing");
    assert!(d.terminate().success());
    let (problems, (items, expiry)) = ws.inspect();
    assert!(problems.is_empty(), "{problems:?}");
    if reclaims {
        assert_eq!(
            (items, expiry),
            (listing.len(), 0),
            "only permanent items are left"
        );
    } else {
        assert!(
            items > listing.len() && expiry > 0,
            "announced items are still stored"
        );
    }
}
