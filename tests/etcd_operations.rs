//! Operating an etcd prefix (`--store etcd`): a clean stop hands the prefix over at once,
//! and the offline tools (`check`, `export`, `import`) work on a prefix no daemon writes.
//!
//! Built with the `etcd` feature only (`cargo test --features etcd`): its client's build
//! needs `protoc`.
#![cfg(feature = "etcd")]

mod common;

use std::ffi::OsStr;
use std::time::{Duration, Instant};

use common::*;
use reqwest::StatusCode;
use serde_json::json;

/// Longer than any wait a test here allows for a hand-over: one taken at once is not the
/// lease running out.
const LONG_LEASE_SECS: u64 = 15;

fn spawn(ws: &Workspace, flags: &[String], n: usize) -> Starting {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let log = ws.tmp.path().join(format!("daemon-{n}.log"));
    Daemon::spawn(&ws.data_dir(), &log, &flags)
}

/// The offline tool `args` with `flags`: its exit, stdout and stderr, and how long it took.
fn tool(flags: &[String], args: &[&str]) -> (bool, String, String, Duration) {
    let started = Instant::now();
    let mut all: Vec<&OsStr> = flags.iter().map(OsStr::new).collect();
    all.extend(args.iter().map(OsStr::new));
    let out = blocklistd(&all);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        started.elapsed(),
    )
}

/// SIGTERM: the writer revokes its lease as it stops, and the replica takes over at once
/// rather than after the lease.
#[tokio::test(flavor = "multi_thread")]
async fn a_clean_stop_hands_the_prefix_over_at_once() {
    let Some(cluster) = EtcdCluster::start(1, "etcd_operations clean stop") else {
        return;
    };
    let ws = Workspace::new();
    let flags = cluster.daemon_flags("/t/", LONG_LEASE_SECS, 1_000);
    let writer = spawn(&ws, &flags, 1).listening();
    let (status, body) = writer
        .post("/blocklist/nodes", json!([item("n1", "MARK_BLOCKED", "c")]))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let replica = spawn(&ws, &flags, 2).listening();
    eventually("the replica says it follows", || async {
        replica.log_text().contains("serving as a replica")
    })
    .await;
    let stopped = Instant::now();
    assert!(writer.terminate().success());
    if let Err(readiness) = replica.writer_within(Duration::from_secs(3)).await {
        panic!(
            "no hand-over within 3 s ({readiness}); log:\n{}",
            replica.log_text()
        );
    }
    assert!(
        stopped.elapsed() < Duration::from_secs(LONG_LEASE_SECS),
        "waited out the lease"
    );
    assert_eq!(replica.get("/blocklist/nodes/n1").await.0, StatusCode::OK);
}

/// `check` and `export` on a prefix: after a `kill -9` they wait out the dead writer's
/// lease; while a daemon writes it they fail naming it; on an empty prefix they fail and
/// write nothing. `import` into another prefix makes a store a daemon serves the same.
/// `salvage` (a damaged data dir's files) is refused.
#[tokio::test(flavor = "multi_thread")]
async fn offline_tools_work_on_a_prefix_no_daemon_writes() {
    let Some(cluster) = EtcdCluster::start(1, "etcd_operations offline tools") else {
        return;
    };
    let ws = Workspace::new();
    let flags = cluster.daemon_flags("/t/", 2, 1_000);
    let writer = spawn(&ws, &flags, 1).listening();
    let items: Vec<_> = (0..50)
        .map(|i| item(&format!("n{i}"), "MARK_BLOCKED", "c"))
        .collect();
    assert_eq!(
        writer.post("/blocklist/nodes", json!(items)).await.0,
        StatusCode::CREATED
    );
    let listed = writer.listing().await;

    let (ok, _, stderr, _) = tool(&flags, &["check"]);
    assert!(!ok, "check beside a live writer");
    assert!(
        stderr.contains("a daemon writes etcd prefix /t/ (blocklistd pid"),
        "{stderr}"
    );
    assert_eq!(
        writer.get("/blocklist/nodes/n1").await.0,
        StatusCode::OK,
        "the writer still serves"
    );

    writer.kill9();
    let (ok, stdout, stderr, took) = tool(&flags, &["check"]);
    assert!(ok, "{stdout}{stderr}");
    assert!(
        stdout.contains("etcd prefix /t/: 50 items")
            && stdout.contains("ok: every invariant holds"),
        "{stdout}"
    );
    assert!(took < Duration::from_secs(2 + 3), "check took {took:?}");

    let (ok, exported, stderr, _) = tool(&flags, &["export", "--quiet"]);
    assert!(ok, "{stderr}");
    let file = ws.tmp.path().join("export.jsonl");
    std::fs::write(&file, &exported).unwrap();

    let empty = cluster.daemon_flags("/nothing/", 2, 1_000);
    let (ok, _, stderr, _) = tool(&empty, &["check"]);
    assert!(!ok);
    assert!(
        stderr.contains("the prefix /nothing/ holds no blocklistd store"),
        "{stderr}"
    );
    assert!(
        cluster
            .etcdctl(&["get", "--prefix", "--keys-only", "/nothing/log/"])
            .trim()
            .is_empty(),
        "check wrote a store"
    );

    let other = cluster.daemon_flags("/other/", 2, 1_000);
    let (ok, _, stderr, _) = tool(&other, &["import", "--quiet", file.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    let copy = spawn(&ws, &other, 2).listening();
    // The same items, each with its times and cause (their revisions are the new store's).
    let fields = |listing: &serde_json::Value| -> Vec<String> {
        let items = listing["blockedNodes"].as_array().unwrap();
        items
            .iter()
            .map(|i| {
                let mut i = i.clone();
                i.as_object_mut().unwrap().remove("revision");
                i.to_string()
            })
            .collect()
    };
    let (copied, first) = (fields(&copy.listing().await), fields(&listed));
    assert_eq!(copied.len(), 50);
    assert!(
        copied == first,
        "the imported prefix serves other items: {:?} vs {:?}",
        copied.first(),
        first.first()
    );
    drop(copy);

    let (ok, _, stderr, _) = tool(&flags, &["salvage"]);
    assert!(!ok);
    assert!(
        stderr.contains("salvage reads a damaged data dir"),
        "{stderr}"
    );
}
