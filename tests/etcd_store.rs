//! `--store etcd`: the blocklist in an etcd cluster of the test's own. A killed writer
//! loses nothing it acknowledged and a replica takes over; a paused or deposed writer is
//! fenced; a cluster that goes away makes writes 503 until it is back.
//!
//! Built with the `etcd` feature only (`cargo test --features etcd`): its client's build
//! needs `protoc`.
#![cfg(feature = "etcd")]

mod common;

use std::time::{Duration, Instant};

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::json;

/// The lease the tests' writers hold: a dead writer holds the prefix this long.
const LEASE_SECS: u64 = 2;

/// Flags of a daemon on `cluster`, under `prefix`, with a call deadline of 1 s.
fn on_etcd(cluster: &EtcdCluster, prefix: &str) -> Vec<String> {
    cluster.daemon_flags(prefix, LEASE_SECS, 1_000)
}

/// `flags` with `extra` after them.
fn with(mut flags: Vec<String>, extra: &[&str]) -> Vec<String> {
    flags.extend(extra.iter().map(|f| (*f).to_owned()));
    flags
}

/// Starts daemon number `n` of the test with `flags`.
fn spawn(ws: &Workspace, flags: &[String], n: usize) -> Starting {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let log = ws.tmp.path().join(format!("daemon-{n}.log"));
    Daemon::spawn(&ws.data_dir(), &log, &flags)
}

async fn add(d: &Daemon, kind: &str, id: &str) -> StatusCode {
    let (status, body) = d
        .post(
            &format!("/blocklist/{kind}"),
            json!([item(id, "MARK_BLOCKED", "c")]),
        )
        .await;
    assert!(
        status == StatusCode::CREATED || status == StatusCode::SERVICE_UNAVAILABLE,
        "{status} {body}"
    );
    status
}

/// Waits for `replica` to take over and serve as the writer, at
/// most `limit`: how long it took.
async fn takes_over(replica: &Daemon, limit: Duration) -> Duration {
    replica
        .writer_within(limit)
        .await
        .unwrap_or_else(|readiness| {
            panic!(
                "the replica did not take over within {limit:?} ({readiness}); its log:\n{}",
                replica.log_text()
            )
        })
}

/// A writer killed with SIGKILL: the replica, ready as a replica meanwhile, takes over within the
/// lease and 2 s, with every acknowledged change (items, a registration,
/// a keyed write that replays, the feed from its start), and writes on from there.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_writer_loses_nothing_and_the_replica_takes_over() {
    let Some(cluster) = EtcdCluster::start(1, "etcd_store killed writer") else {
        return;
    };
    let ws = Workspace::new();
    let writer = spawn(&ws, &on_etcd(&cluster, "/t/"), 1).listening();
    for i in 0..20 {
        assert_eq!(
            add(&writer, "nodes", &format!("n{i}")).await,
            StatusCode::CREATED
        );
    }
    let (status, body) = writer
        .call(
            Method::PUT,
            "/taskmanagers/tm-1",
            Some(json!({"node": "n1"})),
        )
        .await;
    assert!(status.is_success(), "{status} {body}");
    let keyed = |d: &Daemon| {
        d.client
            .post(d.url("/blocklist/taskmanagers"))
            .header("idempotency-key", "retry-1")
            .json(&json!([item("tm-9", "MARK_BLOCKED", "keyed")]))
            .send()
    };
    let first = keyed(&writer).await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let first_body = first.text().await.unwrap();
    let before = writer.export().await;
    let revision = writer.revision().await;

    let replica = spawn(&ws, &on_etcd(&cluster, "/t/"), 2).listening();
    eventually("the replica says it follows", || async {
        replica.log_text().contains("serving as a replica")
    })
    .await;
    let (status, readiness) = replica.get("/readyz").await;
    assert_eq!(status, StatusCode::OK, "{readiness}");
    assert_eq!(readiness["store"], "replica", "{readiness}");

    let mirror_of = |pid: u32| {
        let prefix = format!("blocklistd-mirror.{pid}.");
        std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(&prefix))
    };
    let killed = writer.pid();
    assert!(
        mirror_of(killed),
        "the writer keeps its mirror in the temp dir"
    );
    writer.kill9();
    let took = takes_over(&replica, Duration::from_secs(LEASE_SECS + 4)).await;
    let next = replica;
    assert!(
        !mirror_of(killed),
        "the killed writer's mirror is left behind"
    );
    eprintln!("takeover after kill -9: {took:?}");
    assert!(
        took <= Duration::from_secs(LEASE_SECS + 2),
        "took {took:?}, more than the lease and 2 s"
    );
    assert_eq!(
        next.export().await,
        before,
        "the new writer's state differs"
    );
    assert_eq!(next.revision().await, revision);
    let again = keyed(&next).await.unwrap();
    assert_eq!(again.status(), StatusCode::CREATED);
    assert_eq!(
        again
            .headers()
            .get("idempotent-replayed")
            .map(|v| v.to_str().unwrap()),
        Some("true")
    );
    assert_eq!(again.text().await.unwrap(), first_body);
    let mut feed = Watch::open(&next, Some(0), None).await.expect("the feed");
    assert_consecutive(&feed.take(revision as usize).await, 0);
    let (status, written) = revision_of(
        &next,
        Method::POST,
        "/blocklist/nodes",
        Some(json!([item("after", "MARK_BLOCKED", "c")])),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        written,
        revision + 1,
        "revisions go on from the last acknowledged"
    );
}

/// A writer stopped (SIGSTOP) past its lease: the replica takes over; resumed, the old
/// writer's own write, if it still tries one, is refused by the fence (503) and is nowhere;
/// once it noticed, it sends writes and reads on to the new writer.
#[tokio::test(flavor = "multi_thread")]
async fn a_paused_writer_is_fenced() {
    let Some(cluster) = EtcdCluster::start(1, "etcd_store paused writer") else {
        return;
    };
    let ws = Workspace::new();
    let old = spawn(&ws, &on_etcd(&cluster, "/t/"), 1).listening();
    assert_eq!(add(&old, "nodes", "before").await, StatusCode::CREATED);
    signal(old.pid(), "-STOP");
    let new = spawn(&ws, &on_etcd(&cluster, "/t/"), 2).listening();
    takes_over(&new, Duration::from_secs(LEASE_SECS + 4)).await;
    signal(old.pid(), "-CONT");
    let first = add(&old, "nodes", "from-the-paused").await;
    assert_eq!(
        add(&new, "nodes", "from-the-new").await,
        StatusCode::CREATED
    );
    eventually(
        "the deposed writer sends writes on to the new one",
        || async { add(&old, "nodes", "through-the-old").await == StatusCode::CREATED },
    )
    .await;
    let mut expected = vec!["before", "from-the-new", "through-the-old"];
    if first == StatusCode::CREATED {
        // Sent on to the new writer already: applied there, once.
        expected.push("from-the-paused");
        expected.sort_unstable();
    }
    let listed = ids(&new.listing().await["blockedNodes"]);
    assert_eq!(
        listed, expected,
        "the first write through the old was {first}"
    );
    let (status, _) = old.get("/blocklist/nodes/from-the-paused").await;
    assert_eq!(
        status == StatusCode::OK,
        first == StatusCode::CREATED,
        "the deposed writer's reads are the new writer's"
    );
    // The deposed daemon never says it is the writer: a candidate that is not ready (a
    // load balancer sends its requests elsewhere) until it has stepped down to a replica,
    // which is ready again. The new writer is ready as the writer.
    let (status, body) = old.get("/readyz").await;
    assert!(
        matches!(
            (status, body["etcd"].as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, Some("not the writer"))
                | (StatusCode::OK, Some("replica"))
        ),
        "{status} {body}"
    );
    eventually(
        "the deposed writer steps down to a ready replica",
        || async {
            let (status, body) = old.get("/readyz").await;
            status == StatusCode::OK && body["etcd"] == "replica"
        },
    )
    .await;
    let (status, body) = new.get("/readyz").await;
    assert_eq!(
        (status, &body["etcd"]),
        (StatusCode::OK, &json!("writer")),
        "{body}"
    );
}

/// A lone writer paused past its lease (a stalled VM, a long GC) finds the writer key
/// gone and nobody to take it: it steps down and wins the key again as a replica would,
/// and writes on with everything it acknowledged before.
#[tokio::test(flavor = "multi_thread")]
async fn a_lone_writer_paused_past_its_lease_writes_again() {
    let Some(cluster) = EtcdCluster::start(1, "etcd_store lone paused writer") else {
        return;
    };
    let ws = Workspace::new();
    let alone = spawn(&ws, &on_etcd(&cluster, "/t/"), 1).listening();
    assert_eq!(add(&alone, "nodes", "before").await, StatusCode::CREATED);
    signal(alone.pid(), "-STOP");
    tokio::time::sleep(Duration::from_secs(LEASE_SECS + 2)).await;
    signal(alone.pid(), "-CONT");
    eventually("the lone writer to write again", || async {
        add(&alone, "nodes", "after").await == StatusCode::CREATED
    })
    .await;
    assert_eq!(
        ids(&alone.listing().await["blockedNodes"]),
        ["after", "before"]
    );
    let (status, body) = alone.get("/readyz").await;
    assert_eq!(
        (status, &body["etcd"]),
        (StatusCode::OK, &json!("writer")),
        "{body}"
    );
}

/// The fence itself, without the lease's help: another owner of the writer key (made by
/// hand, as a writer elected after this one's lease ended would) while this writer's lease
/// lives. Its next write is refused by etcd's compare of the key's create revision.
#[tokio::test(flavor = "multi_thread")]
async fn a_write_after_the_writer_key_changed_hands_is_refused() {
    let Some(cluster) = EtcdCluster::start(1, "etcd_store fence") else {
        return;
    };
    let ws = Workspace::new();
    let writer = spawn(&ws, &on_etcd(&cluster, "/t/"), 1).listening();
    assert_eq!(add(&writer, "nodes", "kept").await, StatusCode::CREATED);
    cluster.etcdctl(&["del", "/t/writer"]);
    cluster.etcdctl(&["put", "/t/writer", "someone else"]);
    assert_eq!(
        add(&writer, "nodes", "fenced").await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let log = cluster.etcdctl(&["get", "--prefix", "/t/log/"]);
    assert!(!log.contains("fenced"), "a fenced write reached the log");
    // Its key back (the other owner gone): the writer wins it again and writes on.
    cluster.etcdctl(&["del", "/t/writer"]);
    eventually("the writer writes again", || async {
        add(&writer, "nodes", "again").await == StatusCode::CREATED
    })
    .await;
    assert_eq!(
        ids(&writer.listing().await["blockedNodes"]),
        ["again", "kept"]
    );
}

/// The whole cluster killed under a running writer: writes answer 503 within the call
/// deadline, nothing is lost, and once etcd is back the daemon writes again by itself.
#[tokio::test(flavor = "multi_thread")]
async fn writes_fail_fast_while_etcd_is_down_and_resume_by_themselves() {
    let Some(mut cluster) = EtcdCluster::start(1, "etcd_store etcd down") else {
        return;
    };
    let ws = Workspace::new();
    let writer = spawn(&ws, &on_etcd(&cluster, "/t/"), 1).listening();
    assert_eq!(add(&writer, "nodes", "before").await, StatusCode::CREATED);
    cluster.kill_all();
    let begun = Instant::now();
    assert_eq!(
        add(&writer, "nodes", "while-down").await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert!(
        begun.elapsed() < Duration::from_secs(5),
        "took {:?}",
        begun.elapsed()
    );
    cluster.restart_all();
    eventually("writes succeed again", || async {
        add(&writer, "nodes", "after").await == StatusCode::CREATED
    })
    .await;
    let listed = ids(&writer.listing().await["blockedNodes"]);
    assert!(listed.contains(&"before".to_owned()) && listed.contains(&"after".to_owned()));
}

/// Two prefixes on one cluster are two blocklists.
#[tokio::test(flavor = "multi_thread")]
async fn two_prefixes_are_two_blocklists() {
    let Some(cluster) = EtcdCluster::start(1, "etcd_store prefixes") else {
        return;
    };
    let ws = Workspace::new();
    let a = spawn(&ws, &on_etcd(&cluster, "/a/"), 1).listening();
    let b = spawn(&ws, &on_etcd(&cluster, "/b/"), 2).listening();
    assert_eq!(add(&a, "nodes", "only-a").await, StatusCode::CREATED);
    assert_eq!(
        ids(&b.listing().await["blockedNodes"]),
        Vec::<String>::new()
    );
    assert_eq!(ids(&a.listing().await["blockedNodes"]), ["only-a"]);
    let keys = cluster.etcdctl(&["get", "--prefix", "/", "--keys-only"]);
    assert!(
        keys.lines()
            .filter(|k| !k.is_empty())
            .all(|k| k.starts_with("/a/") || k.starts_with("/b/") || k.starts_with("/harness/")),
        "{keys}"
    );
}

/// Groups larger than one etcd request go in parts, and the log is folded into one key
/// per stored key as it grows; a new writer rebuilt from the folded state and the entries
/// after it holds exactly what the old one acknowledged.
#[tokio::test(flavor = "multi_thread")]
async fn large_groups_and_a_folded_log_restore_exactly() {
    let Some(cluster) = EtcdCluster::start(1, "etcd_store folded log") else {
        return;
    };
    let ws = Workspace::new();
    let small = [
        "--etcd-max-request-bytes",
        "65536",
        "--etcd-fold-entries",
        "5",
        "--etcd-max-txn-ops",
        "16",
    ];
    let flags = with(on_etcd(&cluster, "/t/"), &small);
    let writer = spawn(&ws, &flags, 1).listening();
    // One add of 2,000 items with long causes: far more than 64 KiB of writes.
    let cause = "x".repeat(200);
    let batch: Vec<_> = (0..2_000)
        .map(|i| item(&format!("big-{i}"), "MARK_BLOCKED", &cause))
        .collect();
    let (status, body) = writer.post("/blocklist/nodes", json!(batch)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let parts = cluster.etcdctl(&["get", "--prefix", "/t/log/", "--keys-only"]);
    assert!(
        parts
            .lines()
            .any(|k| k.starts_with("/t/log/") && k.matches('/').count() == 4),
        "the big group went as one request: {parts}"
    );
    for i in 0..30 {
        assert_eq!(
            add(&writer, "taskmanagers", &format!("tm-{i}")).await,
            StatusCode::CREATED
        );
    }
    let (status, _) = writer.delete("/blocklist/taskmanagers/tm-3").await;
    assert!(status.is_success());
    eventually("the log is folded", || async {
        cluster
            .etcdctl(&["get", "/t/applied", "--print-value-only"])
            .trim()
            .parse::<u64>()
            .is_ok_and(|n| n >= 5)
    })
    .await;
    let before = writer.export().await;
    writer.kill9();
    let next = spawn(&ws, &flags, 2).listening();
    takes_over(&next, Duration::from_secs(LEASE_SECS + 4)).await;
    assert_eq!(next.export().await, before, "the rebuilt state differs");
    let log = cluster.etcdctl(&["get", "--prefix", "/t/log/", "--keys-only"]);
    let applied: u64 = cluster
        .etcdctl(&["get", "/t/applied", "--print-value-only"])
        .trim()
        .parse()
        .unwrap();
    let first_left = log
        .lines()
        .filter_map(|k| k.strip_prefix("/t/log/"))
        .filter_map(|k| k.split('/').next()?.parse::<u64>().ok())
        .min();
    assert!(
        first_left.is_none_or(|n| n > applied),
        "entries up to {applied} are folded: {log}"
    );
    // The entries the new writer rebuilt from but were not folded yet are folded with its
    // own: a third writer, rebuilt after its folds, holds everything too.
    assert!(
        first_left.is_some(),
        "the test needs entries left unfolded at the kill"
    );
    let last_left = log
        .lines()
        .filter_map(|k| {
            k.strip_prefix("/t/log/")?
                .split('/')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .max()
        .unwrap();
    for i in 0..12 {
        assert_eq!(
            add(&next, "nodes", &format!("later-{i}")).await,
            StatusCode::CREATED
        );
    }
    eventually("the new writer folds past what it rebuilt from", || async {
        cluster
            .etcdctl(&["get", "/t/applied", "--print-value-only"])
            .trim()
            .parse::<u64>()
            .is_ok_and(|n| n > last_left)
    })
    .await;
    let before = next.export().await;
    next.kill9();
    let third = spawn(&ws, &flags, 3).listening();
    takes_over(&third, Duration::from_secs(LEASE_SECS + 4)).await;
    assert_eq!(
        third.export().await,
        before,
        "the state rebuilt after the second writer's folds differs"
    );
}

/// One member of three killed, then another restarted, under a stream of writes: every
/// write is acknowledged (the client skips the dead member), none is answered 503.
#[tokio::test(flavor = "multi_thread")]
async fn a_dead_member_of_three_costs_no_write() {
    let Some(mut cluster) = EtcdCluster::start(3, "etcd_store dead member") else {
        return;
    };
    let ws = Workspace::new();
    // A call deadline of 5 s: an etcd leader's loss takes its election, 1–2 s with etcd's
    // default timeouts and up to 3 s on a loaded machine (3.4.23's), past the default 3 s
    // deadline; a 2 s lease would not outlive it either.
    let flags = cluster.daemon_flags("/t/", 8, 5_000);
    let writer = spawn(&ws, &flags, 1).listening();
    assert_eq!(add(&writer, "nodes", "before").await, StatusCode::CREATED);
    let mut refused = Vec::new();
    for round in 0..3 {
        cluster.kill(round);
        for i in 0..40 {
            let id = format!("r{round}-{i}");
            if add(&writer, "nodes", &id).await != StatusCode::CREATED {
                refused.push(id);
            }
        }
        cluster.restart_all();
    }
    assert!(
        refused.is_empty(),
        "refused with one member of three down: {refused:?}\n{}",
        writer.log_text()
    );
}

/// A fold's transactions fit etcd's request limit as well as its operation limit: keys of
/// long values, many to a transaction by count alone, would make one etcd refuses every
/// time, and the log would never be folded.
#[tokio::test(flavor = "multi_thread")]
async fn a_fold_of_large_values_fits_the_request_limit() {
    let Some(cluster) = EtcdCluster::start_with(
        1,
        &["--max-request-bytes", "65536"],
        "etcd_store fold request limit",
    ) else {
        return;
    };
    let ws = Workspace::new();
    let flags = with(
        on_etcd(&cluster, "/t/"),
        &[
            "--etcd-max-request-bytes",
            "65536",
            "--etcd-fold-entries",
            "1",
        ],
    );
    let writer = spawn(&ws, &flags, 1).listening();
    // 300 items of 1,000-byte causes: 128 of them (--etcd-max-txn-ops) are twice the limit.
    let cause = "x".repeat(1_000);
    let batch: Vec<_> = (0..300)
        .map(|i| item(&format!("long-{i}"), "MARK_BLOCKED", &cause))
        .collect();
    assert_eq!(
        writer.post("/blocklist/nodes", json!(batch)).await.0,
        StatusCode::CREATED
    );
    assert_eq!(add(&writer, "nodes", "next").await, StatusCode::CREATED);
    eventually("the log is folded", || async {
        let entries = cluster.etcdctl(&["get", "--prefix", "/t/log/", "--keys-only"]);
        let applied = cluster.etcdctl(&["get", "/t/applied", "--print-value-only"]);
        applied.trim().parse::<u64>().is_ok_and(|n| n >= 2)
            && entries.lines().filter(|k| !k.is_empty()).count() <= 2
    })
    .await;
    assert!(
        !writer.log_text().contains("folding the log failed"),
        "{}",
        writer.log_text()
    );
}

/// Folding runs on the store's etcd runtime beside the next entries' puts: under
/// concurrent writes, with a fold after every entry, every write is still answered 201.
#[tokio::test(flavor = "multi_thread")]
async fn writes_go_on_while_the_log_is_folded() {
    let Some(cluster) = EtcdCluster::start(1, "etcd_store folding under load") else {
        return;
    };
    let ws = Workspace::new();
    let flags = with(on_etcd(&cluster, "/t/"), &["--etcd-fold-entries", "1"]);
    let writer = spawn(&ws, &flags, 1).listening();
    let writer = std::sync::Arc::new(writer);
    let tasks: Vec<_> = (0..32)
        .map(|w| {
            let writer = writer.clone();
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                for i in 0..20 {
                    statuses.push(add(&writer, "nodes", &format!("w{w}-{i}")).await);
                }
                statuses
            })
        })
        .collect();
    for task in tasks {
        let statuses = tokio::time::timeout(DEADLINE, task)
            .await
            .expect("the writes hung")
            .unwrap();
        assert!(
            statuses.iter().all(|s| *s == StatusCode::CREATED),
            "{statuses:?}"
        );
    }
    assert_eq!(ids(&writer.listing().await["blockedNodes"]).len(), 640);
}

/// etcd past its space quota (its NOSPACE alarm): a write is answered 503 with what an
/// operator must do, and what was acknowledged before reads again once the store rebuilt.
/// While the alarm stays raised, neither a client's write nor the sweeper's retries make
/// reads fail (a refused write would otherwise rebuild the store, 503s meanwhile), and
/// once it is disarmed writes take again.
#[tokio::test(flavor = "multi_thread")]
async fn etcd_out_of_space_is_a_503_that_says_so() {
    let Some(cluster) = EtcdCluster::start_with(
        1,
        &["--quota-backend-bytes", "4194304"],
        "etcd_store nospace",
    ) else {
        return;
    };
    let ws = Workspace::new();
    let writer = spawn(&ws, &on_etcd(&cluster, "/t/"), 1).listening();
    assert_eq!(add(&writer, "nodes", "before").await, StatusCode::CREATED);
    let mut short = item("short", "MARK_BLOCKED", "c");
    short["timeout"] = json!(3_000);
    assert_eq!(
        writer.post("/blocklist/nodes", json!([short])).await.0,
        StatusCode::CREATED
    );
    let cause = "x".repeat(1_000);
    let mut answer = None;
    for round in 0..200 {
        let batch: Vec<_> = (0..500)
            .map(|i| item(&format!("fill-{round}-{i}"), "MARK_BLOCKED", &cause))
            .collect();
        let (status, body) = writer.post("/blocklist/nodes", json!(batch)).await;
        if status != StatusCode::CREATED {
            answer = Some((status, body));
            break;
        }
    }
    let (status, body) = answer.expect("etcd took 100 MB under a 4 MiB quota");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let message = body["errors"][0].as_str().unwrap();
    assert!(
        message.contains("space quota is exceeded (NOSPACE alarm)"),
        "{message}"
    );
    // Once rebuilt from what etcd holds (the failed write's mirror is dropped), reads answer.
    let deadline = Instant::now() + DEADLINE;
    while writer.get("/blocklist/nodes/before").await.0 != StatusCode::OK {
        assert!(
            Instant::now() < deadline,
            "what was acknowledged does not read again; log:\n{}",
            writer.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // /readyz says it, and is ready: reads are served, and no daemon could write.
    let (status, body) = writer.get("/readyz").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let etcd = body["etcd"].as_str().unwrap_or_default();
    assert!(etcd.contains("NOSPACE alarm"), "{body}");
    assert_eq!(writer.metric("blocklist_etcd_nospace").await, 1.0);

    // Under the raised alarm: a refused write, and `short` falling due (the sweeper tries
    // to announce it every second), while every read is answered.
    let (status, body) = writer
        .post(
            "/blocklist/nodes",
            json!([item("refused", "MARK_BLOCKED", "c")]),
        )
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let (status, body) = writer.get("/blocklist/nodes/before").await;
        assert_eq!(
            status,
            StatusCode::OK,
            "a read failed under the alarm: {body}\n{}",
            writer.log_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        writer.get("/blocklist/nodes/short").await.0,
        StatusCode::NOT_FOUND,
        "a due item reads as gone, announced or not"
    );

    // Disarmed (after room was made): writes take again, and `short` is announced.
    cluster.etcdctl(&["compact", &etcd_revision(&cluster).to_string()]);
    cluster.etcdctl(&["defrag"]);
    cluster.etcdctl(&["alarm", "disarm"]);
    eventually("a write takes after the alarm is disarmed", || async {
        add(&writer, "nodes", "after").await == StatusCode::CREATED
    })
    .await;
    let (status, body) = writer.get("/readyz").await;
    assert_eq!(
        (status, &body["etcd"]),
        (StatusCode::OK, &json!("writer")),
        "{body}"
    );
    assert_eq!(writer.metric("blocklist_etcd_nospace").await, 0.0);
    assert!(
        writer
            .metric(r#"blocklist_commit_failures_total{stage="transaction"}"#)
            .await
            >= 1.0,
        "the refused write is a failed commit"
    );
}

/// The cluster's current revision, as `etcdctl endpoint status` shows it.
fn etcd_revision(cluster: &EtcdCluster) -> u64 {
    let status = cluster.etcdctl(&["endpoint", "status", "-w", "json"]);
    let status: serde_json::Value = serde_json::from_str(&status).expect("etcdctl's JSON");
    status[0]["Status"]["header"]["revision"]
        .as_u64()
        .expect("a revision")
}
