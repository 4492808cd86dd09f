//! Three daemons on one prefix of a three-member etcd cluster, and a daemon's failures: the
//! writer killed or paused under load through all three (nothing acknowledged is lost,
//! nothing is applied twice, writes resume within the lease and the election, reads never
//! show less than an acknowledged write), and a guardrail storm across a failover. etcd's
//! own failures are `etcd_replicas_outages.rs`'s.
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

const WRITERS_PER_DAEMON: usize = 2;

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
    let client = trusting_daemons()
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

/// The writer killed (SIGKILL) under adds spread over the three daemons, two replicas of
/// which send theirs on to it: every acknowledged add is in the blocklist afterwards, each
/// once in the feed, which reads the same through both survivors; the first add
/// acknowledged after the kill comes within the lease and 2 s.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_writer_under_load_through_every_daemon_loses_nothing() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let Some((_cluster, _ws, writer, replicas)) = writer_and_replicas(
        "etcd_replicas killed writer",
        &["--forward-wait-ms", "3000"],
    )
    .await
    else {
        return;
    };
    let urls: Vec<String> = [&writer, &replicas[0], &replicas[1]]
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
    for survivor in &replicas {
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

/// The forwarded requests a daemon counts, whatever their outcome.
async fn forwarded(d: &Daemon) -> f64 {
    let text = d.scrape().await;
    ["answered", "no_writer", "failed"]
        .iter()
        .map(|outcome| {
            metric(
                &text,
                &format!(
                    "blocklist_forwarded_request_duration_seconds_count{{outcome=\"{outcome}\"}}"
                ),
            )
        })
        .sum()
}

/// Every write acknowledged by the writer is in the next read through either replica (the
/// read barrier), and the replicas serve reads — single, batch, listing and feed —
/// themselves: a subscriber moving from one to the other resumes exactly, and reads go on,
/// unchanged, while the writer is stopped (SIGSTOP) past its lease. One replica takes
/// over; resumed, the old writer's reads are the new writer's at once, and each daemon's
/// metrics name the new writer and count the terms it won and lost; the old writer then
/// steps down to a replica.
#[tokio::test(flavor = "multi_thread")]
async fn replicas_read_their_own_state_never_older_than_an_acknowledged_write() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let Some((_cluster, _ws, writer, replicas)) =
        writer_and_replicas("etcd_replicas reads", &[]).await
    else {
        return;
    };

    for i in 0..200 {
        let id = format!("n{i}");
        add_acknowledged(&writer, &id).await;
        let replica = &replicas[i % 2];
        let (status, body) = replica.get(&format!("/blocklist/nodes/{id}")).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "{id} acknowledged, then read: {body}"
        );
        let (status, verdicts) = replica
            .post("/blocklist/check", json!({"nodes": [id]}))
            .await;
        assert_eq!(status, StatusCode::OK, "{verdicts}");
        assert_eq!(verdicts["nodes"][0]["blocked"], true, "{verdicts}");
    }
    for replica in &replicas {
        assert_eq!(
            forwarded(replica).await,
            0.0,
            "a read was sent to the writer"
        );
    }

    // A subscriber that moves from one replica to the other with Last-Event-ID resumes
    // with neither a gap nor a duplicate, and goes on live.
    let head = replicas[0].revision().await;
    let mut first = Watch::open(&replicas[0], Some(0), None)
        .await
        .expect("the feed");
    assert_consecutive(&first.take(100).await, 0);
    drop(first);
    let mut second = Watch::open(&replicas[1], None, Some(100))
        .await
        .expect("the feed resumed");
    assert_consecutive(&second.take((head - 100) as usize).await, 100);
    add_acknowledged(&writer, "live").await;
    let live = second.take(1).await;
    assert_consecutive(&live, head);
    assert_eq!(live[0].data["id"], "live");

    signal(writer.pid(), "-STOP");
    let paused = Instant::now();
    for replica in &replicas {
        let started = Instant::now();
        let listing = replica.listing().await;
        assert_eq!(ids(&listing["blockedNodes"]).len(), 201);
        let (status, _) = replica.get("/blocklist/check/nodes/n7").await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "reads through a replica took {:?} with the writer paused",
            started.elapsed()
        );
    }
    let new = loop {
        let mut writing = None;
        for (n, replica) in replicas.iter().enumerate() {
            let (status, body) = replica.get("/readyz").await;
            if status == StatusCode::OK && body["etcd"] == "writer" {
                writing = Some(n);
            }
        }
        if let Some(n) = writing {
            break n;
        }
        assert!(paused.elapsed() < DEADLINE, "no replica took over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!(
        "replica {new} took over {:?} after the writer's SIGSTOP",
        paused.elapsed()
    );
    add_acknowledged(&replicas[1 - new], "after-the-pause").await;
    signal(writer.pid(), "-CONT");
    let (status, body) = writer.get("/blocklist/nodes/after-the-pause").await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the resumed writer answered from its own state: {body}"
    );
    // Each daemon counts its own terms: the old writer won one and lost it, the new one
    // won one it still holds, the third won none.
    let elections = |text: &str| {
        ["won", "lost"].map(|outcome| {
            metric(
                text,
                &format!("blocklist_etcd_elections_total{{outcome=\"{outcome}\"}}"),
            )
        })
    };
    // And each names the new writer.
    let named = format!(
        "blocklist_etcd_writer{{name=\"blocklistd pid {} at ",
        replicas[new].pid()
    );
    for daemon in [&writer, &replicas[0], &replicas[1]] {
        eventually("every daemon names the new writer", || async {
            daemon.scrape().await.lines().any(|l| l.starts_with(&named))
        })
        .await;
    }
    assert_eq!(
        elections(&writer.scrape().await),
        [1.0, 1.0],
        "the old writer"
    );
    assert_eq!(
        elections(&replicas[new].scrape().await),
        [1.0, 0.0],
        "the new writer"
    );
    assert_eq!(
        elections(&replicas[1 - new].scrape().await),
        [0.0, 0.0],
        "the third"
    );

    // The old writer steps down to a replica: ready again, reads served from its own
    // followed state, writes sent on to the new writer.
    eventually("the old writer serves as a replica", || async {
        let (status, body) = writer.get("/readyz").await;
        status == StatusCode::OK && body["store"] == "replica"
    })
    .await;
    let sent_on = forwarded(&writer).await;
    add_acknowledged(&writer, "through-the-old-writer").await;
    let (status, body) = writer.get("/blocklist/nodes/through-the-old-writer").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        forwarded(&writer).await,
        sent_on + 1.0,
        "the old writer sent on its write, and served its read itself"
    );
}

/// Adds node `id` (a one-hour block) through `urls[*target]` with its id as the
/// `Idempotency-Key`, retrying a 503 with the same key and moving to the next daemon when a
/// connection fails; the final status (201, or a guardrail's 429) and body.
async fn add_through(
    client: &reqwest::Client,
    urls: &[String],
    target: &mut usize,
    id: &str,
) -> (StatusCode, serde_json::Value) {
    let started = Instant::now();
    loop {
        let sent = client
            .post(format!("{}/blocklist/nodes", urls[*target]))
            .header("idempotency-key", id)
            .json(&json!([{"id": id, "action": "MARK_BLOCKED", "cause": "storm", "timeout": 3_600_000}]))
            .send()
            .await;
        match sent {
            Ok(answer) if answer.status() == StatusCode::SERVICE_UNAVAILABLE => {}
            Ok(answer) => {
                let status = answer.status();
                return (status, answer.json().await.unwrap_or_default());
            }
            Err(_) => *target = (*target + 1) % urls.len(),
        }
        assert!(started.elapsed() < DEADLINE, "{id} never answered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The guardrail storm across a failover: 200 nodes registered, 16 clients block all of
/// them through three daemons against the default cap of 50 % of the registered nodes, and
/// the writer is killed (SIGKILL) in the middle. Exactly the cap, 100, is admitted — the
/// new writer counts from etcd what the old one admitted — and the blocklist holds exactly
/// the admitted nodes.
#[tokio::test(flavor = "multi_thread")]
async fn a_guardrail_storm_across_a_failover_admits_exactly_the_cap() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let Some((_cluster, _ws, writer, replicas)) =
        writer_and_replicas("etcd_replicas storm", &[]).await
    else {
        return;
    };
    let registrations: Vec<_> = (0..200)
        .map(|node| json!({"id": format!("tm-{node:03}"), "node": format!("n{node:03}")}))
        .collect();
    let (status, body) = writer
        .call(
            reqwest::Method::PUT,
            "/taskmanagers",
            Some(serde_json::Value::Array(registrations)),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let urls: Vec<String> = [&writer, &replicas[0], &replicas[1]]
        .iter()
        .map(|d| d.url(""))
        .collect();
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut clients = Vec::new();
    for client_no in 0..16 {
        let (urls, answered) = (urls.clone(), answered.clone());
        clients.push(tokio::spawn(async move {
            let client = trusting_daemons()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap();
            let mut target = client_no % 3;
            let mut answers = Vec::new();
            for node in (client_no..200).step_by(16) {
                let id = format!("n{node:03}");
                let answer = add_through(&client, &urls, &mut target, &id).await;
                answered.fetch_add(1, Ordering::SeqCst);
                answers.push((id, answer));
            }
            answers
        }));
    }
    eventually("the storm is under way", || async {
        answered.load(Ordering::SeqCst) >= 40
    })
    .await;
    writer.kill9();
    let mut admitted = Vec::new();
    for client in clients {
        for (id, (status, body)) in client.await.expect("a storm client failed") {
            match status {
                StatusCode::CREATED => admitted.push(id),
                StatusCode::TOO_MANY_REQUESTS => {
                    let error = body["errors"][0].as_str().unwrap_or_default();
                    assert!(
                        error.contains("of 200 now, the cap is 100 (50%)"),
                        "{id}: {error}"
                    );
                }
                other => panic!("{id}: {other} {body}"),
            }
        }
    }
    admitted.sort();
    assert_eq!(admitted.len(), 100, "admitted: {admitted:?}");
    for survivor in &replicas {
        let listed = ids(&survivor.listing().await["blockedNodes"]);
        assert_eq!(listed, admitted, "the blocklist through a survivor");
    }
}
