//! Two bridges, one actor, against a real kube-apiserver: the replicas elect a leader
//! through a Lease; a leader killed mid-evacuation is replaced within the lease, which
//! finishes the evacuation with no pod evicted twice; a leader paused past its lease
//! writes nothing once resumed; a leader stopped cleanly hands the Lease over at once.
//! Each bridge is an administrator of its own name, so the API server's audit log says
//! who wrote what.

#[path = "../../../tests/common/mod.rs"]
mod common;
mod support;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use support::workload::*;
use support::*;

/// Seconds a lease lasts in these tests.
const LEASE: u64 = 4;

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

fn signal(bridge: &Running, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &bridge.0.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

/// Bridge `user` (one of the named administrators) against `daemon`, with a lease of
/// `lease` seconds.
fn start(
    kube: &KubeApiServer,
    daemon: &Daemon,
    user: &str,
    lease: u64,
    ws: &Workspace,
) -> (Running, String) {
    let log = ws.tmp.path().join(format!("{user}.log"));
    let lease = lease.to_string();
    let flags = [
        FEED_ONLY,
        &[
            "--lease-duration",
            &lease,
            "--identity",
            user,
            "--evictions-per-minute",
            "120",
        ],
    ]
    .concat();
    spawn_bridge_as(&kube.kubeconfig_of(user), &daemon.url(""), &flags, &log)
}

async fn leads(probes: &str) -> bool {
    bridge_metric(probes, "blocklist_kube_leader").await == 1.0
}

/// The writes `user` made that the API server accepted, with when they were received.
fn writes_by(kube: &KubeApiServer, user: &str) -> Vec<(f64, Value)> {
    kube.audit()
        .into_iter()
        .filter(|e| e["user"]["username"] == user)
        .filter(|e| {
            e["responseStatus"]["code"]
                .as_u64()
                .is_some_and(|c| c < 300)
        })
        .map(|e| {
            (
                seconds(e["requestReceivedTimestamp"].as_str().unwrap_or_default()),
                e,
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_leader_is_replaced_within_the_lease_and_a_paused_one_writes_nothing() {
    let Some(kube) = KubeApiServer::start("blocklist-kube leader") else {
        return;
    };
    let kube = Arc::new(kube);
    create_namespace(&kube, "flink");
    for (node, pods) in [("n1", 8), ("n2", 3)] {
        create_node(&kube, node, &json!([]));
        for i in 1..=pods {
            taskmanager(&kube, &format!("{node}-tm-{i}"), node);
        }
    }
    let _kubelets = Kubelets::start(&kube);
    let mut ws = Workspace::new();
    let daemon = ws.start(CAPS_OPEN);
    let (mut a, a_probes) = start(&kube, &daemon, "bridge-a", LEASE, &ws);
    eventually("bridge-a leads", || async { leads(&a_probes).await }).await;
    let (b, b_probes) = start(&kube, &daemon, "bridge-b", LEASE, &ws);
    eventually("bridge-b is ready, as a follower", || ready(&b_probes)).await;
    assert!(!leads(&b_probes).await, "one leader");

    let (status, body) = daemon
        .post(
            "/blocklist/nodes",
            json!([item("n1", "MARK_BLOCKED_AND_EVACUATE_TASKS", "psu")]),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let by = |user: &str| {
        evictions(&kube)
            .into_iter()
            .filter(|e| e.user == user && e.code == 201)
            .count()
    };
    eventually("bridge-a evicting", || async { by("bridge-a") >= 2 }).await;
    assert_eq!(by("bridge-b"), 0, "the follower evicts nothing");

    // kill -9 the leader mid-evacuation.
    let _ = a.0.kill();
    let _ = a.0.wait();
    let killed = now();
    eventually("bridge-b finishes the evacuation", || async {
        pods(&kube).iter().all(|p| p.node != "n1")
    })
    .await;
    let resumed = evictions(&kube)
        .into_iter()
        .find(|e| e.user == "bridge-b" && e.code == 201)
        .expect("bridge-b evicted")
        .at;
    println!(
        "evictions resumed {:.2} s after the leader was killed",
        resumed - killed
    );
    assert!(
        resumed - killed <= (LEASE + 2) as f64,
        "evictions resumed {:.2} s after the kill; the lease is {LEASE} s",
        resumed - killed
    );
    let mut per_pod: BTreeMap<String, usize> = BTreeMap::new();
    for e in evictions(&kube).into_iter().filter(|e| e.code == 201) {
        *per_pod.entry(e.pod).or_default() += 1;
    }
    assert_eq!(per_pod.len(), 8, "{per_pod:?}");
    assert!(
        per_pod.values().all(|n| *n == 1),
        "a pod evicted twice: {per_pod:?}"
    );

    // SIGSTOP the leader past its lease; another takes over; the paused one, resumed,
    // writes nothing.
    let (_c, c_probes) = start(&kube, &daemon, "bridge-c", LEASE, &ws);
    eventually("bridge-c ready", || ready(&c_probes)).await;
    signal(&b, "-STOP");
    let stopped = now();
    eventually("bridge-c leads", || async { leads(&c_probes).await }).await;
    let (status, body) = daemon
        .post(
            "/blocklist/nodes",
            json!([item("n2", "MARK_BLOCKED_AND_EVACUATE_TASKS", "fan")]),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    eventually("bridge-c evacuates n2", || async {
        pods(&kube).iter().all(|p| p.node != "n2")
    })
    .await;
    // n3 blocked and unblocked meanwhile: the paused one finds both events on its feed
    // when it resumes, the first of which a replica that still thought it led would act on.
    create_node(&kube, "n3", &json!([]));
    daemon
        .post(
            "/blocklist/nodes",
            json!([item("n3", "MARK_BLOCKED", "disk")]),
        )
        .await;
    eventually("n3 tainted", || async { taints(&kube, "n3").1.is_some() }).await;
    daemon.delete("/blocklist/nodes/n3").await;
    eventually("n3 untainted", || async { taints(&kube, "n3").1.is_none() }).await;
    signal(&b, "-CONT");
    let resumed = now();
    // The resumed one reads the feed's events it missed and its timers fire: give it time
    // to (wrongly) act, then look.
    eventually("bridge-b answers again", || async {
        !leads(&b_probes).await
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let late: Vec<Value> = writes_by(&kube, "bridge-b")
        .into_iter()
        .filter(|(at, _)| *at >= stopped)
        .map(|(_, e)| e)
        .collect();
    assert!(
        late.is_empty(),
        "bridge-b wrote after it was paused (resumed at {resumed}): {late:#?}"
    );
    assert!(
        evictions(&kube)
            .iter()
            .all(|e| e.user != "bridge-b" || !e.pod.starts_with("n2")),
        "n2 is bridge-c's"
    );
}

/// A leader stopped cleanly (SIGTERM) hands the Lease over: another replica leads long
/// before the lease would have run out.
#[tokio::test(flavor = "multi_thread")]
async fn a_leader_stopped_cleanly_hands_the_lease_over_at_once() {
    let Some(kube) = KubeApiServer::start("blocklist-kube release") else {
        return;
    };
    let mut ws = Workspace::new();
    let daemon = ws.start(&[]);
    let (a, a_probes) = start(&kube, &daemon, "bridge-a", 60, &ws);
    eventually("bridge-a leads", || async { leads(&a_probes).await }).await;
    let (_b, b_probes) = start(&kube, &daemon, "bridge-b", 60, &ws);
    eventually("bridge-b is ready, as a follower", || ready(&b_probes)).await;
    signal(&a, "-TERM");
    let stopped = std::time::Instant::now();
    eventually("bridge-b leads", || async { leads(&b_probes).await }).await;
    assert!(
        stopped.elapsed() < Duration::from_secs(15),
        "took {:?}; the lease is 60 s",
        stopped.elapsed()
    );
    let log = std::fs::read_to_string(ws.tmp.path().join("bridge-a.log")).unwrap_or_default();
    assert!(log.contains("the lease was released"), "{log}");
}
