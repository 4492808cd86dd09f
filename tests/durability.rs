//! Durability and process behaviour: nothing acknowledged is lost to kill -9, batches are
//! all-or-nothing, clean shutdown, one daemon per data dir, refusing a foreign dir (and a
//! newer schema: tests/upgrade.rs).

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

const BATCH: usize = 5;
const HOT_IDS: usize = 4;

/// What the writers were told (acknowledged) and what they tried, per crash round.
#[derive(Default)]
struct Ledger {
    /// Add batches answered 201.
    batches: Vec<Vec<String>>,
    /// Every add batch sent, answered or not.
    attempted: Vec<Vec<String>>,
    /// Causes merged into hot ids, answered 202.
    merges: Vec<(String, String)>,
    /// Deletes answered 200, and every delete sent.
    deleted: BTreeSet<String>,
    delete_attempted: BTreeSet<String>,
    /// Registrations answered 201.
    registered: Vec<(String, String)>,
}

/// A kill delay that differs from run to run and round to round, 300–1000 ms.
fn random_delay(round: u64) -> Duration {
    let nanos = u64::from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos(),
    );
    Duration::from_millis(300 + (nanos / 1000 + round * 211) % 700)
}

/// One writer's loop of adds, merges, deletes and registrations until the daemon dies.
async fn writer(d_url: String, round: u64, w: usize, ledger: Arc<Mutex<Ledger>>) {
    let client = reqwest::Client::new();
    let mut mine: Vec<String> = Vec::new();
    for n in 0.. {
        let request = match n % 5 {
            2 => {
                let hot = format!("hot-{}", n % HOT_IDS);
                let cause = format!("r{round}w{w}n{n}");
                let mut it = item(&hot, "MARK_BLOCKED", &cause);
                it["allowMerge"] = json!(true);
                client
                    .post(format!("{d_url}/blocklist/taskmanagers"))
                    .json(&json!([it]))
            }
            3 if !mine.is_empty() => {
                let id = mine.remove(0);
                ledger.lock().unwrap().delete_attempted.insert(id.clone());
                client.delete(format!("{d_url}/blocklist/taskmanagers/{id}"))
            }
            4 => {
                let tm = format!("tm-r{round}-w{w}-n{n}");
                client
                    .put(format!("{d_url}/taskmanagers/{tm}"))
                    .json(&json!({"node": format!("node-{w}")}))
            }
            _ => {
                let ids: Vec<String> = (0..BATCH)
                    .map(|i| format!("r{round}-w{w}-n{n}-{i}"))
                    .collect();
                ledger.lock().unwrap().attempted.push(ids.clone());
                let items: Vec<Value> =
                    ids.iter().map(|id| item(id, "MARK_BLOCKED", "c")).collect();
                client
                    .post(format!("{d_url}/blocklist/taskmanagers"))
                    .json(&items)
            }
        };
        let Ok(resp) = request.send().await else {
            return; // the daemon is gone
        };
        let status = resp.status();
        let url = resp.url().path().to_owned();
        let mut ledger = ledger.lock().unwrap();
        match (n % 5, status) {
            (2, StatusCode::CREATED | StatusCode::ACCEPTED) => {
                ledger
                    .merges
                    .push((format!("hot-{}", n % HOT_IDS), format!("r{round}w{w}n{n}")));
            }
            (3, StatusCode::OK) => {
                let id = url.rsplit('/').next().unwrap().to_owned();
                ledger.deleted.insert(id);
            }
            (4, StatusCode::CREATED) => {
                ledger
                    .registered
                    .push((format!("tm-r{round}-w{w}-n{n}"), format!("node-{w}")));
            }
            (_, StatusCode::CREATED) => {
                let ids = ledger
                    .attempted
                    .iter()
                    .rev()
                    .find(|b| b[0] == format!("r{round}-w{w}-n{n}-0"))
                    .cloned()
                    .unwrap();
                mine.push(ids[0].clone());
                ledger.batches.push(ids);
            }
            (op, status) => panic!("op {op} got {status}"),
        }
    }
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

    for round in 0..4u64 {
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let writers: Vec<_> = (0..16)
            .map(|w| tokio::spawn(writer(d.url(""), round, w, ledger.clone())))
            .collect();
        tokio::time::sleep(random_delay(round)).await;
        d.kill9();
        for w in writers {
            w.await.expect("writer");
        }

        // Offline, before the restart: the store's invariants hold.
        let dir = ws.data_dir();
        let out = std::process::Command::new(&*BIN)
            .args(["check".as_ref(), "--data-dir".as_ref(), dir.as_os_str()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "round {round}: check failed:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );

        d = ws.start(&[]);
        let list = d.get("/blocklist/taskmanagers").await.1;
        let present: BTreeSet<String> = ids(&list).into_iter().collect();
        let ledger = std::mem::take(&mut *ledger.lock().unwrap());
        assert!(
            ledger.batches.len() > 5,
            "round {round}: only {} batches acknowledged",
            ledger.batches.len()
        );
        for id in ledger.batches.iter().flatten() {
            if ledger.deleted.contains(id) {
                assert!(
                    !present.contains(id),
                    "round {round}: acknowledged delete of {id} undone"
                );
            } else if !ledger.delete_attempted.contains(id) {
                assert!(
                    present.contains(id),
                    "round {round}: acknowledged {id} lost"
                );
            }
        }
        for batch in &ledger.attempted {
            let untouched: Vec<&String> = batch
                .iter()
                .filter(|id| !ledger.delete_attempted.contains(*id))
                .collect();
            let n = untouched.iter().filter(|id| present.contains(**id)).count();
            assert!(
                n == 0 || n == untouched.len(),
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
        let registrations = d.get("/taskmanagers").await.1;
        for (tm, node) in &ledger.registered {
            assert!(
                registrations
                    .as_array()
                    .unwrap()
                    .contains(&json!({"id": tm, "node": node})),
                "round {round}: acknowledged registration of {tm} lost"
            );
        }
        assert_eq!(d.get("/blocklist/nodes/before").await.0, StatusCode::OK);
    }
    d.kill9();
    let (problems, _) = ws.inspect();
    assert!(problems.is_empty(), "{problems:?}");
}

/// A supervisor may signal the moment it reads the address line; the handlers must already
/// be installed then (before they were, about 4 in 10 such starts died of the signal).
#[tokio::test]
async fn sigterm_right_after_the_address_line_still_exits_0() {
    let mut ws = Workspace::new();
    for run in 0..10 {
        let exit = ws.start(&[]).terminate();
        assert!(exit.success(), "run {run}: {exit:?}");
    }
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
    // "Well under a second" is the bench's `restart` to measure; here only a start that
    // grew out of all proportion fails (generous for a loaded 2-core CI).
    assert!(
        started.elapsed() < Duration::from_secs(5),
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
    let stderr = refused_start(&dir);
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
    let stderr = refused_start(&dir);
    assert!(stderr.contains("not a blocklistd data dir"), "{stderr}");
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["notes.txt"]);
}
