//! Durability and process behaviour: nothing acknowledged is lost to kill -9, batches are
//! all-or-nothing, clean shutdown, one daemon per data dir, refusing foreign and newer data.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

const BATCH: usize = 5;
const HOT_IDS: usize = 4;

/// What the writers were told: batches acknowledged (201) and merge causes acknowledged
/// (202) per hot id.
#[derive(Default)]
struct Ledger {
    batches: Vec<Vec<String>>,
    attempted: Vec<Vec<String>>,
    merges: Vec<(String, String)>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_kill_9_under_concurrent_writers() {
    let mut ws = Workspace::new();
    let mut d = ws.start(&[]);
    let seed = json!([item("before", "MARK_BLOCKED", "seed")]);
    assert_eq!(
        d.post("/blocklist/nodes", seed).await.0,
        StatusCode::CREATED
    );

    for round in 0..3 {
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let url = d.url("/blocklist/taskmanagers");
        let client = reqwest::Client::new();
        let mut writers = Vec::new();
        for w in 0..16 {
            let (ledger, url, client) = (ledger.clone(), url.clone(), client.clone());
            writers.push(tokio::spawn(async move {
                for n in 0.. {
                    // Every third request merges a unique cause into a hot id.
                    let (body, ids, merge) = if n % 3 == 2 {
                        let hot = format!("hot-{}", n % HOT_IDS);
                        let cause = format!("r{round}w{w}n{n}");
                        let mut it = item(&hot, "MARK_BLOCKED", &cause);
                        it["allowMerge"] = json!(true);
                        (json!([it]), vec![], Some((hot, cause)))
                    } else {
                        let ids: Vec<String> = (0..BATCH)
                            .map(|i| format!("r{round}-w{w}-n{n}-{i}"))
                            .collect();
                        let items: Vec<Value> =
                            ids.iter().map(|id| item(id, "MARK_BLOCKED", "c")).collect();
                        (Value::Array(items), ids, None)
                    };
                    ledger.lock().unwrap().attempted.push(ids.clone());
                    let Ok(resp) = client.post(&url).json(&body).send().await else {
                        return; // the daemon is gone
                    };
                    let status = resp.status();
                    let mut ledger = ledger.lock().unwrap();
                    match merge {
                        Some(m) if status.is_success() => ledger.merges.push(m),
                        None if status == StatusCode::CREATED => ledger.batches.push(ids),
                        _ => panic!("unexpected {status}"),
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
        d.kill9();
        for w in writers {
            w.await.expect("writer");
        }
        d = ws.start(&[]);

        let list = d.get("/blocklist/taskmanagers").await.1;
        let present: BTreeSet<String> = ids(&list).into_iter().collect();
        let ledger = std::mem::take(&mut *ledger.lock().unwrap());
        assert!(
            ledger.batches.len() > 10,
            "round {round}: only {} batches acknowledged",
            ledger.batches.len()
        );
        for batch in &ledger.batches {
            for id in batch {
                assert!(
                    present.contains(id),
                    "round {round}: acknowledged {id} lost"
                );
            }
        }
        for batch in &ledger.attempted {
            let n = batch.iter().filter(|id| present.contains(*id)).count();
            assert!(
                n == 0 || n == batch.len(),
                "round {round}: batch half-applied: {batch:?}"
            );
        }
        for (hot, cause) in &ledger.merges {
            let (_, item) = d.get(&format!("/blocklist/taskmanagers/{hot}")).await;
            let causes: Vec<&str> = item["cause"].as_str().unwrap().split(',').collect();
            assert!(
                causes.contains(&cause.as_str()),
                "round {round}: merged cause {cause} lost from {hot}"
            );
        }
        assert_eq!(d.get("/blocklist/nodes/before").await.0, StatusCode::OK);
    }
    d.kill9();
    let (problems, _) = ws.inspect();
    assert!(problems.is_empty(), "{problems:?}");
}

#[tokio::test]
async fn sigterm_exits_0_and_a_restart_keeps_everything() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let body = json!([item("a", "MARK_BLOCKED", "c"),
                      {"id": "b", "action": "MARK_BLOCKED_AND_EVACUATE_TASKS", "cause": "c", "timeout": 3_600_000}]);
    assert_eq!(
        d.post("/blocklist/nodes", body).await.0,
        StatusCode::CREATED
    );
    let before = d.listing().await;
    let status = d.terminate();
    assert_eq!(status.code(), Some(0));
    let started = Instant::now();
    let d = ws.start(&[]);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "start took {:?}",
        started.elapsed()
    );
    assert_eq!(d.listing().await, before);
}

#[tokio::test]
async fn a_second_daemon_on_the_same_dir_exits_at_once() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let dir = ws.data_dir();
    let started = Instant::now();
    let (status, stderr) = run_to_exit(&[
        "--listen".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--data-dir".as_ref(),
        dir.as_os_str(),
    ]);
    assert!(!status.success());
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(stderr.contains("in use by another process"), "{stderr}");
    // The first one is unharmed.
    assert_eq!(
        d.post("/blocklist/nodes", json!([item("x", "MARK_BLOCKED", "c")]))
            .await
            .0,
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn a_foreign_directory_is_refused_and_left_untouched() {
    let ws = Workspace::new();
    let dir = ws.data_dir();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), "mine").unwrap();
    let (status, stderr) = run_to_exit(&[
        "--listen".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--data-dir".as_ref(),
        dir.as_os_str(),
    ]);
    assert!(!status.success());
    assert!(stderr.contains("not a blocklistd data dir"), "{stderr}");
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["notes.txt"]);
}

#[tokio::test]
async fn a_newer_schema_is_refused() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    assert!(d.terminate().success());
    let dir = ws.data_dir();
    {
        let db = sled::open(&dir).unwrap();
        db.open_tree("meta")
            .unwrap()
            .insert("schema_version", &99u32.to_be_bytes())
            .unwrap();
        db.flush().unwrap();
    }
    let (status, stderr) = run_to_exit(&[
        "--listen".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--data-dir".as_ref(),
        dir.as_os_str(),
    ]);
    assert!(!status.success());
    assert!(stderr.contains("schema version 99"), "{stderr}");
}
