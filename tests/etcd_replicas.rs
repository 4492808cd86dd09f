//! Three daemons on one prefix of a three-member etcd cluster, written through all three
//! while the writer is killed: nothing acknowledged is lost, nothing is applied twice, and
//! writes resume within the lease and the election.
//!
//! Built with the `etcd` feature only (`cargo test --features etcd`): its client's build
//! needs `protoc`.
#![cfg(feature = "etcd")]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use reqwest::StatusCode;
use serde_json::json;

const LEASE_SECS: u64 = 2;
const WRITERS_PER_DAEMON: usize = 2;

fn spawn(ws: &Workspace, flags: &[String], n: usize) -> Daemon {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let log = ws.tmp.path().join(format!("daemon-{n}.log"));
    Daemon::spawn(&ws.data_dir(), &log, &flags).listening()
}

/// What the load saw: each acknowledged id with when it was acknowledged.
#[derive(Default)]
struct Acknowledged {
    at: BTreeMap<String, Instant>,
}

/// Adds `w{task}-{n}` for n = 0, 1, … through `urls[first]`, each with its id as its
/// `Idempotency-Key`, until `stop`: a 503 is retried with the same key, a connection that
/// fails moves the writer to the next daemon and retries there, as a client behind a load
/// balancer would. Every other answer fails the test.
async fn write_load(
    task: usize,
    urls: Vec<String>,
    first: usize,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Acknowledged>>,
) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut target = first;
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        let id = format!("w{task}-{n}");
        let started = Instant::now();
        loop {
            let sent = client
                .post(format!("{}/blocklist/nodes", urls[target]))
                .header("idempotency-key", &id)
                .json(&json!([item(&id, "MARK_BLOCKED", "load")]))
                .send()
                .await;
            match sent {
                Ok(answer) if answer.status() == StatusCode::CREATED => break,
                Ok(answer) if answer.status() == StatusCode::SERVICE_UNAVAILABLE => {}
                Ok(answer) => panic!(
                    "{id} through {}: {} {}",
                    urls[target],
                    answer.status(),
                    answer.text().await.unwrap_or_default()
                ),
                Err(_) => target = (target + 1) % urls.len(),
            }
            assert!(started.elapsed() < DEADLINE, "{id} never acknowledged");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        acked.lock().unwrap().at.insert(id, Instant::now());
        n += 1;
    }
}

/// The writer killed (SIGKILL) under adds spread over the three daemons, two standbys of
/// which send theirs on to it: every acknowledged add is in the blocklist afterwards, each
/// once in the feed, which reads the same through both survivors; the first add
/// acknowledged after the kill comes within the lease and 2 s.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_writer_under_load_through_every_daemon_loses_nothing() {
    let Some(cluster) = EtcdCluster::start(3, "etcd_replicas killed writer") else {
        return;
    };
    let ws = Workspace::new();
    let mut flags = cluster.daemon_flags("/t/", LEASE_SECS, 1_000);
    flags.extend(["--forward-wait-ms".to_owned(), "3000".to_owned()]);
    let writer = spawn(&ws, &flags, 0);
    writer
        .ready_within(DEADLINE)
        .await
        .expect("the first daemon writes");
    let standbys = [spawn(&ws, &flags, 1), spawn(&ws, &flags, 2)];
    for standby in &standbys {
        eventually("the standby says it waits", || async {
            standby.log_text().contains("waiting as a standby")
        })
        .await;
    }
    let urls: Vec<String> = [&writer, &standbys[0], &standbys[1]]
        .iter()
        .map(|d| d.url(""))
        .collect();

    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Acknowledged::default()));
    let load: Vec<_> = (0..3 * WRITERS_PER_DAEMON)
        .map(|task| {
            tokio::spawn(write_load(
                task,
                urls.clone(),
                task % 3,
                stop.clone(),
                acked.clone(),
            ))
        })
        .collect();
    eventually("writes are acknowledged", || async {
        acked.lock().unwrap().at.len() >= 50
    })
    .await;
    writer.kill9();
    let killed = Instant::now();
    let before = acked.lock().unwrap().at.len();
    eventually("writes resume after the kill", || async {
        acked
            .lock()
            .unwrap()
            .at
            .values()
            .any(|at| *at > killed + Duration::from_millis(100))
    })
    .await;
    let resumed = acked
        .lock()
        .unwrap()
        .at
        .values()
        .filter(|at| **at > killed)
        .min()
        .copied()
        .unwrap()
        - killed;
    eprintln!(
        "writes resumed {resumed:?} after the writer's kill -9 ({before} acknowledged before it)"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::SeqCst);
    for task in load {
        task.await.expect("a load task failed");
    }
    assert!(
        resumed <= Duration::from_secs(LEASE_SECS + 2),
        "writes resumed {resumed:?} after the kill: more than the lease and 2 s"
    );

    let acked: BTreeSet<String> = acked.lock().unwrap().at.keys().cloned().collect();
    let mut feeds = Vec::new();
    for survivor in &standbys {
        let listing = survivor.listing().await;
        let listed: BTreeSet<String> = ids(&listing["blockedNodes"]).into_iter().collect();
        let missing: Vec<_> = acked.difference(&listed).collect();
        assert!(missing.is_empty(), "acknowledged and lost: {missing:?}");
        let revision = listing["revision"].as_u64().unwrap();
        let mut watch = Watch::open(survivor, Some(0), None)
            .await
            .expect("the feed");
        let events = watch.take(revision as usize).await;
        assert_consecutive(&events, 0);
        let added: Vec<String> = events
            .iter()
            .filter(|e| e.event == "added")
            .map(|e| e.data["id"].as_str().unwrap().to_owned())
            .collect();
        let once: BTreeSet<&String> = added.iter().collect();
        assert_eq!(once.len(), added.len(), "an add applied twice");
        assert_eq!(
            added.iter().cloned().collect::<BTreeSet<_>>(),
            listed,
            "the feed and the listing differ"
        );
        feeds.push(
            events
                .iter()
                .map(|e| (e.id, e.event.clone(), e.data.clone()))
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(feeds[0], feeds[1], "the two survivors' feeds differ");
}
