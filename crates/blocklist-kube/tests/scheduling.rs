//! The cluster obeys what an alert says, shown by the real kube-scheduler rather than by an
//! assertion on a taint: an alert delivered to the daemon's Alertmanager webhook blocks a
//! Node, the bridge taints it, and new task manager pods are placed on the other Nodes by
//! the scheduler itself; the evacuating action evicts the task manager running there and
//! its replacement lands elsewhere; once the alert resolves the taint goes and the next
//! pods may land there again.
//!
//! The alert is posted as Alertmanager posts it (`tests/alert_loop.rs` proves that path
//! with real Prometheus and Alertmanager processes). No kubelet and no controllers run: the
//! test marks the Nodes ready, lets evicted pods go, and creates the replacement a
//! `ReplicaSet` would.

#[path = "../../../tests/common/mod.rs"]
mod common;
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use support::scheduling::*;
use support::workload::*;
use support::*;

const NODES: [&str; 3] = ["n1", "n2", "n3"];

/// A delivery of one alert of `node` (Alertmanager's payload, version 4).
fn alert(status: &str, node: &str) -> Value {
    let ends = if status == "firing" {
        "0001-01-01T00:00:00Z"
    } else {
        "2026-12-07T06:00:00Z"
    };
    json!({"version": "4", "status": status, "receiver": "blocklist", "groupKey": "{}:{}",
        "truncatedAlerts": 0, "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
        "externalURL": "http://alertmanager", "alerts": [{
            "status": status,
            "labels": {"alertname": "NodeDiskErrors", "node": node, "blocklist_kind": "node",
                "blocklist_action": "evacuate"},
            "annotations": {"summary": format!("disk errors on {node}")},
            "startsAt": "2026-12-07T05:00:00Z", "endsAt": ends,
            "generatorURL": "http://prometheus/graph", "fingerprint": "d1sk"}]})
}

/// Waits until `check` holds, polling every 100 ms, for at most `within`.
async fn until(what: &str, within: Duration, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates pending task manager pods `prefix-0..n` and waits until the scheduler placed
/// every one; the Node of each.
async fn place(kube: &KubeApiServer, prefix: &str, n: usize) -> Vec<String> {
    for i in 0..n {
        create_pending_pod(
            kube,
            "flink",
            &format!("{prefix}-{i}"),
            &taskmanager_labels(),
        );
    }
    let mut placed = Vec::new();
    until("the scheduler places every pod", DEADLINE, || {
        placed = (0..n)
            .filter_map(|i| bound_node(kube, "flink", &format!("{prefix}-{i}")))
            .collect();
        placed.len() == n
    })
    .await;
    placed
}

#[tokio::test(flavor = "multi_thread")]
async fn an_alert_keeps_new_work_off_its_node_and_moves_the_running_work_away() {
    let test = "an_alert_keeps_new_work_off_its_node_and_moves_the_running_work_away";
    let Some(kube) = KubeApiServer::start(test) else {
        return;
    };
    let kube = Arc::new(kube);
    for node in NODES {
        create_schedulable_node(&kube, node);
    }
    create_namespace(&kube, "flink");
    // A task manager already running on n1.
    taskmanager(&kube, "tm-running", "n1");
    let _kubelets = Kubelets::start(&kube);

    let mut ws = Workspace::new();
    let daemon = ws.start(&[]);
    let log = ws.tmp.path().join("bridge.log");
    let flags = [
        FEED_ONLY,
        &["--namespace", "flink", "--evictions-per-minute", "600"],
    ]
    .concat();
    let (_bridge, _) = spawn_bridge(&kube, &daemon.url(""), &flags, &log);
    let Some(_scheduler) = start_scheduler(&kube, &ws.tmp.path().join("scheduler.log"), test)
    else {
        return;
    };
    // Before any alert, the scheduler places work (on the Nodes with the least of it).
    place(&kube, "warmup", 3).await;

    // The alert fires: n1 is blocked with evacuation and tainted.
    let (status, body) = daemon
        .post("/webhooks/alertmanager", alert("firing", "n1"))
        .await;
    assert_eq!(
        (status, body["alerts"][0]["outcome"].clone()),
        (StatusCode::OK, json!("blocked")),
        "{body}"
    );
    until("the bridge taints n1", DEADLINE, || {
        taints(&kube, "n1").1.is_some()
    })
    .await;
    // The task manager running there is evicted, and its replacement placed elsewhere.
    until("the running task manager is evicted", DEADLINE, || {
        evicted(&kube).contains(&"flink/tm-running".to_owned())
    })
    .await;
    let replacement = place(&kube, "replacement", 1).await;
    assert_ne!(replacement[0], "n1", "the replacement lands elsewhere");
    // New work goes to the other Nodes only, however much of it.
    let during = place(&kube, "during", 9).await;
    assert!(
        !during.contains(&"n1".to_owned()),
        "n1 is blocked: {during:?}"
    );
    assert!(
        during.contains(&"n2".to_owned()) && during.contains(&"n3".to_owned()),
        "{during:?}"
    );

    // The alert resolves: the taint goes, and n1 takes new work again.
    let (_, body) = daemon
        .post("/webhooks/alertmanager", alert("resolved", "n1"))
        .await;
    assert_eq!(body["alerts"][0]["outcome"], "retracted", "{body}");
    until("the bridge untaints n1", DEADLINE, || {
        taints(&kube, "n1").1.is_none()
    })
    .await;
    let after = place(&kube, "after", 9).await;
    assert!(
        after.contains(&"n1".to_owned()),
        "n1 takes work again: {after:?}"
    );
}
