//! Three daemons on one prefix of a three-member etcd cluster, and etcd's failures as they
//! see them: a member and then the leader killed under load (no request fails beyond the
//! bounded retries), a replica cut off from etcd (503, never stale data), quorum lost (503
//! everywhere, recovered by itself). A daemon's own failures are `etcd_replicas.rs`'s.
//!
//! Built with the `etcd` feature only (`cargo test --features etcd`): its client's build
//! needs `protoc`.
#![cfg(feature = "etcd")]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::json;

/// How long a request of the member test may take, its retries of 503 included: the
/// daemons' etcd call deadline (3 s), which outlasts an etcd leader's election, and as much
/// again for the retry that follows it.
const RETRY_BUDGET: Duration = Duration::from_secs(6);

/// One request of the member test's load: when it began, how long it took until its
/// final answer, and how many 503s it retried on the way.
struct Request {
    started: Instant,
    took: Duration,
    retried: usize,
}

/// Sends `make()` until its answer is not a 503, recording the request in `log`; panics
/// on any other failure (no daemon dies in the test, so a connection that fails is one).
async fn until_answered(
    log: &Mutex<Vec<Request>>,
    what: &str,
    make: impl Fn() -> reqwest::RequestBuilder,
    wanted: StatusCode,
) {
    let started = Instant::now();
    let mut retried = 0;
    loop {
        let answer = make()
            .send()
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let status = answer.status();
        if status == wanted {
            break;
        }
        let body = answer.text().await.unwrap_or_default();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{what}: {body}");
        retried += 1;
        assert!(
            started.elapsed() < DEADLINE,
            "{what} never answered: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    log.lock().unwrap().push(Request {
        started,
        took: started.elapsed(),
        retried,
    });
}

/// The etcd leader, once the members name one.
fn leader(cluster: &EtcdCluster) -> usize {
    let started = Instant::now();
    loop {
        if let Some(leader) = cluster.leader() {
            return leader;
        }
        assert!(started.elapsed() < DEADLINE, "etcd has no leader");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One etcd member killed (a follower) and brought back, then the etcd leader killed,
/// under adds through every daemon and checks through both replicas: every request is
/// answered within the bounded retries, every acknowledged add is there, and once etcd has
/// a leader again no request waits on the dead member (no daemon's client keeps calling
/// it).
#[tokio::test(flavor = "multi_thread")]
async fn a_dead_etcd_member_then_a_dead_leader_fail_no_request() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let ws = Workspace::new();
    // A call deadline of 3 s outlasts an etcd leader's election (1–2 s); the lease
    // outlasts the deadline, so that no writer change adds to the test.
    let Some((mut cluster, flags)) = tls_cluster(&ws, "etcd_replicas_outages members", 5, 3_000)
    else {
        return;
    };
    let (writer, replicas) = three_daemons(&ws, &flags).await;
    add_acknowledged(&writer, "before").await;
    let daemons = [&writer, &replicas[0], &replicas[1]];
    let urls: Vec<String> = daemons.iter().map(|d| d.url("")).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(Vec::new()));
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let mut load = Vec::new();
    for task in 0..10 {
        let (stop, log, acknowledged) = (stop.clone(), log.clone(), acknowledged.clone());
        // Six add through the three daemons, four check through the replicas.
        let url = if task < 6 {
            urls[task % 3].clone()
        } else {
            urls[1 + task % 2].clone()
        };
        load.push(tokio::spawn(async move {
            let client = trusting_daemons().timeout(DEADLINE).build().unwrap();
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                if task < 6 {
                    let id = format!("w{task}-{n}");
                    let make = || {
                        client
                            .post(format!("{url}/blocklist/nodes"))
                            .header("idempotency-key", &id)
                            .json(&json!([item(&id, "MARK_BLOCKED", "load")]))
                    };
                    until_answered(&log, &id, make, StatusCode::CREATED).await;
                    acknowledged.lock().unwrap().push(id);
                } else {
                    let make = || client.get(format!("{url}/blocklist/check/nodes/before"));
                    until_answered(&log, "a check", make, StatusCode::OK).await;
                }
                n += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let follower = (tokio::task::block_in_place(|| leader(&cluster)) + 1) % 3;
    cluster.kill(follower);
    tokio::time::sleep(Duration::from_secs(2)).await;
    tokio::task::block_in_place(|| cluster.restart_all());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let leader = tokio::task::block_in_place(|| leader(&cluster));
    cluster.kill(leader);
    let leader_killed = Instant::now();
    tokio::time::sleep(Duration::from_secs(6)).await;
    stop.store(true, Ordering::SeqCst);
    for task in load {
        task.await.expect("a load task failed");
    }

    let log = std::mem::take(&mut *log.lock().unwrap());
    let slowest = log.iter().map(|r| r.took).max().unwrap_or_default();
    let retried = log.iter().filter(|r| r.retried > 0).count();
    eprintln!(
        "{} requests: {retried} retried a 503, the slowest took {slowest:?}",
        log.len()
    );
    assert!(
        slowest <= RETRY_BUDGET,
        "a request took {slowest:?}, retries included"
    );
    // By then etcd has a new leader and the daemons' clients have left the dead member.
    let settled = leader_killed + Duration::from_secs(3);
    let after: Vec<&Request> = log.iter().filter(|r| r.started >= settled).collect();
    assert!(!after.is_empty(), "no request after etcd settled");
    for request in &after {
        assert!(
            request.retried == 0 && request.took < Duration::from_secs(1),
            "{:?} after the leader's kill a request took {:?} ({} retries): a daemon still \
             calls the dead member",
            request.started - leader_killed,
            request.took,
            request.retried
        );
    }
    let acknowledged = std::mem::take(&mut *acknowledged.lock().unwrap());
    for replica in &replicas {
        let listed = ids(&replica.listing().await["blockedNodes"]);
        let missing: Vec<&String> = acknowledged
            .iter()
            .filter(|id| !listed.contains(id))
            .collect();
        assert!(missing.is_empty(), "acknowledged and lost: {missing:?}");
    }
}

/// A replica whose traffic to etcd is dropped (its endpoints through a proxy the test cuts)
/// stops answering reads — 503 within a bounded time, never an older state — while the
/// other replica and the writer go on; healed, it catches up by itself.
#[tokio::test(flavor = "multi_thread")]
async fn a_replica_cut_off_from_etcd_answers_503_not_stale_data() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let ws = Workspace::new();
    let Some((cluster, flags)) = tls_cluster(&ws, "etcd_replicas partition", LEASE_SECS, 1_000)
    else {
        return;
    };
    let writer = spawn_numbered(&ws, &flags, 0);
    writer
        .writer_within(DEADLINE)
        .await
        .expect("the first daemon writes");
    let mut proxies = Vec::new();
    for member in cluster.endpoints().split(',') {
        proxies.push(Proxy::start(member).await);
    }
    let through_proxies: Vec<&str> = proxies.iter().map(|p| p.url.as_str()).collect();
    let mut cut_flags = flags.clone();
    let endpoints = cut_flags
        .iter()
        .position(|f| f == "--etcd-endpoints")
        .unwrap();
    cut_flags[endpoints + 1] = through_proxies.join(",");
    let cut = spawn_numbered(&ws, &cut_flags, 1);
    let other = spawn_numbered(&ws, &flags, 2);
    add_acknowledged(&writer, "before").await;
    for replica in [&cut, &other] {
        replica
            .ready_within(DEADLINE)
            .await
            .expect("a current replica");
        assert_eq!(
            replica.get("/blocklist/nodes/before").await.0,
            StatusCode::OK
        );
    }

    for proxy in &proxies {
        proxy.cut();
    }
    add_acknowledged(&writer, "during").await;
    let started = Instant::now();
    let (status, body) = cut.get("/blocklist/nodes/during").await;
    let took = started.elapsed();
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "a read through the cut-off replica: {body}"
    );
    eprintln!("the cut-off replica answered 503 in {took:?}: {body}");
    assert!(took < Duration::from_secs(4), "it took {took:?} to answer");
    let (status, readiness) = cut.get("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{readiness}");
    assert_eq!(readiness["etcd"], "replica, not current", "{readiness}");
    assert_eq!(other.get("/blocklist/nodes/during").await.0, StatusCode::OK);
    assert_eq!(
        writer.get("/blocklist/nodes/during").await.0,
        StatusCode::OK
    );

    for proxy in &proxies {
        proxy.heal();
    }
    eventually("the healed replica serves what it missed", || async {
        cut.get("/blocklist/nodes/during").await.0 == StatusCode::OK
    })
    .await;
    assert_eq!(cut.get("/readyz").await.0, StatusCode::OK);
}

/// Two of three etcd members stopped: writes and reads answer 503 on every daemon (once the
/// writer's lease has run out), `/readyz` fails, nothing is acknowledged; the members back,
/// everything recovers by itself: one daemon writes, both answer reads (the one that lost
/// the election, if it was the writer, through the new writer), and a write answered 503
/// meanwhile, retried with its key, is applied once.
#[tokio::test(flavor = "multi_thread")]
async fn quorum_lost_is_503_everywhere_and_recovers_by_itself() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let ws = Workspace::new();
    let Some((mut cluster, flags)) = tls_cluster(&ws, "etcd_replicas quorum", LEASE_SECS, 1_000)
    else {
        return;
    };
    let writer = spawn_numbered(&ws, &flags, 0);
    writer
        .writer_within(DEADLINE)
        .await
        .expect("the first daemon writes");
    let replica = spawn_numbered(&ws, &flags, 1);
    replica
        .ready_within(DEADLINE)
        .await
        .expect("a current replica");
    add_acknowledged(&writer, "before").await;

    cluster.kill(1);
    cluster.kill(2);
    let lost = Instant::now();
    let lost_add = |id: &'static str| {
        (
            [("Idempotency-Key", id)],
            Some(json!([item(id, "MARK_BLOCKED", "c")])),
        )
    };
    for (daemon, id) in [(&writer, "lost-w"), (&replica, "lost-r")] {
        let (headers, body) = lost_add(id);
        let (status, _, body) =
            request(daemon, Method::POST, "/blocklist/nodes", &headers, body).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    }
    eventually("reads answer 503 everywhere", || async {
        let mut all = true;
        for daemon in [&writer, &replica] {
            all &= daemon.get("/blocklist/nodes/before").await.0 == StatusCode::SERVICE_UNAVAILABLE
                && daemon.get("/readyz").await.0 == StatusCode::SERVICE_UNAVAILABLE;
        }
        all
    })
    .await;
    eprintln!(
        "reads answered 503 everywhere {:?} after quorum was lost",
        lost.elapsed()
    );
    let (_, body) = replica.get("/blocklist/nodes/before").await;
    assert!(
        body["errors"][0]
            .as_str()
            .unwrap_or_default()
            .contains("etcd"),
        "the message names etcd: {body}"
    );

    cluster.restart_all();
    add_acknowledged(&replica, "after").await;
    eventually("a daemon writes again", || async {
        let mut writing = false;
        for daemon in [&writer, &replica] {
            writing |= daemon.get("/readyz").await.1["etcd"] == "writer";
        }
        writing
    })
    .await;
    for daemon in [&writer, &replica] {
        eventually("reads recover", || async {
            daemon.get("/blocklist/nodes/after").await.0 == StatusCode::OK
        })
        .await;
    }
    // A write answered 503 may or may not have taken effect (etcd may commit its entry once
    // quorum is back): retried with its key, it is applied exactly once.
    for (daemon, id) in [(&writer, "lost-w"), (&replica, "lost-r")] {
        let (headers, body) = lost_add(id);
        let started = Instant::now();
        loop {
            let (status, _, answer) = request(
                daemon,
                Method::POST,
                "/blocklist/nodes",
                &headers,
                body.clone(),
            )
            .await;
            if status == StatusCode::CREATED {
                break;
            }
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{id}: {answer}");
            assert!(started.elapsed() < DEADLINE, "{id} never applied: {answer}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let listed = ids(&replica.listing().await["blockedNodes"]);
    assert_eq!(listed, ["after", "before", "lost-r", "lost-w"]);
    for id in ["lost-r", "lost-w"] {
        let (_, item) = replica.get(&format!("/blocklist/nodes/{id}")).await;
        assert_eq!(
            item["reports"].as_array().map(Vec::len),
            Some(1),
            "{id} applied more than once: {item}"
        );
    }
}
