//! Disk bytes per item: a fixed, realistic blocklist loaded over HTTP takes no more of the
//! disk than its budgets. Sizes, not timings (those stay in the bench, docs/benchmarks.md):
//! the bytes of live keys and values the requests leave are exact, so their budget is
//! tight and fails a change that makes any stored value or tree larger; the allocated size
//! of the data dir also depends on how sled's flushes fell (what one flush rewrites of a
//! leaf), so its budget carries the spread measured between runs.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

const ITEMS: usize = 50_000;

/// Every tenth item is reported this many more times (merges), as a detector that keeps
/// firing does: its report ring, its merged events and its rewritten value are on disk too.
const REPEATS: usize = 3;

/// The budget of live bytes (keys and values of every tree) per item after loading
/// [`ITEMS`] (80% task managers, 20% nodes, causes of 20–120 bytes, ends 1–6 h away, 1,000
/// per POST, a tenth merged [`REPEATS`] more times). Exact for a given layout: schema 8
/// leaves 415 bytes per item (items 135, events 177, reports 52, expiry 49), schema 7
/// (format-3 items, format-5 chunks) 487 (items 161, events 224). The budget leaves a few
/// bytes for a field a later change may need, and fails a change that gives back a fifth of
/// what schema 8 won.
const LIVE_BYTES_PER_ITEM_BUDGET: u64 = 430;

/// The budget of allocated disk (`st_blocks` of the data dir) per item, for the same load,
/// after a clean stop. Schema 8 measured 1,332–1,436 bytes over five runs, schema 7
/// 1,510–1,638, the build before provenance and guardrails 1,226: sled's log holds several
/// superseded copies of each leaf a small transaction rewrote, and how many depends on how
/// the flushes fell. The budget is schema 8's worst run plus 15%: a backstop for a write
/// pattern that rewrites more, where the live bytes above do not move.
const DISK_BYTES_PER_ITEM_BUDGET: u64 = 1_650;

const CAUSES: [&str; 8] = [
    "heartbeat timeout from JobManager after 50000 ms",
    "task failures: 5 in 60 s (java.io.IOException: No space left on device)",
    "slow node: p99 task duration 4.2x the job median",
    "disk /data3 unhealthy (SMART 187 reallocated sectors)",
    "network: 12% packet loss to 10.0.3.0/24 measured by the detector over 5 minutes",
    "OOM killed",
    "exit code 137 three times in a row",
    "manual block by the on-call engineer while the rack is inspected",
];

fn tm_id(i: usize) -> String {
    format!("container_e42_1700000000000_{:04}_01_{:06}", i % 97, i)
}

fn node_id(i: usize) -> String {
    format!("worker-{i}.rack-{}.prod.example.com", i % 40)
}

/// The add element of item `i` in its `round`-th report (0: the first).
fn element(i: usize, id: &str, round: usize) -> Value {
    let action = if i.is_multiple_of(7) {
        "MARK_BLOCKED_AND_EVACUATE_TASKS"
    } else {
        "MARK_BLOCKED"
    };
    let hours = 1 + (i % 5) as i64;
    let timeout = hours * 3_600_000 + (i % 3_600) as i64 * 1_000 + round as i64 * 60_000;
    let mut e = json!({"id": id, "action": action, "timeout": timeout,
        "cause": CAUSES[(i + round) % CAUSES.len()]});
    if round > 0 {
        e["allowMerge"] = json!(true);
    }
    e
}

async fn post_all(d: &Daemon, kind: &str, ids: &[(usize, String)], round: usize) {
    for batch in ids.chunks(1_000) {
        let body: Vec<Value> = batch.iter().map(|(i, id)| element(*i, id, round)).collect();
        let (status, answer) = d
            .post(&format!("/blocklist/{kind}"), Value::Array(body))
            .await;
        let expected = if round == 0 {
            StatusCode::CREATED
        } else {
            StatusCode::ACCEPTED
        };
        assert_eq!(status, expected, "{kind} round {round}: {answer}");
    }
}

/// Allocated bytes (`st_blocks`) of every file under `dir`.
fn allocated(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        total += meta.blocks() * 512;
        if meta.is_dir() {
            total += allocated(&entry.path());
        }
    }
    total
}

#[tokio::test]
async fn a_realistic_blocklist_takes_at_most_its_budget_of_disk_per_item() {
    let mut ws = Workspace::new();
    let dir = ws.data_dir();
    let d = ws.start(&[]);
    let nodes = ITEMS / 5;
    let tms: Vec<(usize, String)> = (0..ITEMS - nodes).map(|i| (i, tm_id(i))).collect();
    let ns: Vec<(usize, String)> = (0..nodes).map(|i| (i, node_id(i))).collect();
    post_all(&d, "taskmanagers", &tms, 0).await;
    post_all(&d, "nodes", &ns, 0).await;
    let every_tenth = |ids: &[(usize, String)]| -> Vec<(usize, String)> {
        ids.iter().filter(|(i, _)| i % 10 == 0).cloned().collect()
    };
    for round in 1..=REPEATS {
        post_all(&d, "taskmanagers", &every_tenth(&tms), round).await;
        post_all(&d, "nodes", &every_tenth(&ns), round).await;
    }

    // The daemon holds what was sent: the test cannot pass by storing nothing.
    let listing = d.listing().await;
    let listed = listing["blockedTaskManagers"].as_array().unwrap().len()
        + listing["blockedNodes"].as_array().unwrap().len();
    assert_eq!(listed, ITEMS);
    let (_, merged) = d.get(&format!("/blocklist/nodes/{}", ns[0].1)).await;
    assert_eq!(merged["reportCount"], json!(1 + REPEATS), "{merged}");
    assert!(d.terminate().success());
    // Allocated first: opening the database to read it may write.
    let disk = allocated(&dir) / ITEMS as u64;
    let trees = live_bytes(&dir);
    let live = trees.iter().map(|(_, bytes)| bytes).sum::<u64>() / ITEMS as u64;
    for (tree, bytes) in &trees {
        eprintln!("  {tree}: {} bytes per item", bytes / ITEMS as u64);
    }
    eprintln!(
        "live keys and values: {live} bytes per item (budget {LIVE_BYTES_PER_ITEM_BUDGET}); \
         disk: {disk} bytes per item (budget {DISK_BYTES_PER_ITEM_BUDGET})"
    );
    assert!(
        live <= LIVE_BYTES_PER_ITEM_BUDGET,
        "the trees hold {live} bytes of keys and values per item, over the budget of \
         {LIVE_BYTES_PER_ITEM_BUDGET}: a stored value or a tree grew (docs/benchmarks.md, \
         \"Disk\")"
    );
    assert!(
        disk <= DISK_BYTES_PER_ITEM_BUDGET,
        "the data dir takes {disk} bytes per item, over the budget of \
         {DISK_BYTES_PER_ITEM_BUDGET}: a value or a write pattern grew (docs/benchmarks.md, \
         \"Disk\")"
    );
}

/// The bytes of every key and value of each tree of the database in `dir`.
fn live_bytes(dir: &Path) -> Vec<(String, u64)> {
    let db = open_sled(dir);
    db.tree_names()
        .into_iter()
        .map(|name| {
            let bytes = db
                .open_tree(&name)
                .unwrap()
                .iter()
                .map(|entry| {
                    let (key, value) = entry.unwrap();
                    (key.len() + value.len()) as u64
                })
                .sum();
            (String::from_utf8_lossy(&name).into_owned(), bytes)
        })
        .collect()
}
