//! The loop closed: what the bridge did is in the daemon (each blocked node's status under
//! the bridge's name), its ceiling holds back taints past its share of the cluster, its dry
//! run writes nothing and says so, and a daemon it cannot reach changes nothing — against a
//! real kube-apiserver and a real daemon.

#[path = "../../../tests/common/mod.rs"]
mod common;
mod support;

use std::time::Duration;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use support::*;

/// The bridge's statuses in the daemon: `(id, state)`, sorted.
async fn statuses(daemon: &Daemon) -> Vec<(String, String)> {
    let all = daemon.get("/enforcement").await.1;
    let mut out: Vec<(String, String)> = all
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["enforcer"] == "blocklist-kube")
        .map(|e| {
            (
                e["id"].as_str().unwrap_or_default().to_owned(),
                e["state"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

/// One series of the bridge's `/metrics`.
async fn metric(bridge: &str, name: &str) -> f64 {
    let text = reqwest::get(format!("{bridge}/metrics"))
        .await
        .expect("the bridge's metrics")
        .text()
        .await
        .expect("text");
    text.lines()
        .find(|l| l.split([' ', '{']).next() == Some(name))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

/// The bridge's requests to the API server so far, every verb and code.
async fn api_requests(bridge: &str) -> f64 {
    let text = reqwest::get(format!("{bridge}/metrics"))
        .await
        .expect("the bridge's metrics")
        .text()
        .await
        .expect("text");
    text.lines()
        .filter(|l| l.starts_with("blocklist_kube_api_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn ready(bridge: &str) -> bool {
    reqwest::get(format!("{bridge}/readyz"))
        .await
        .is_ok_and(|r| r.status() == StatusCode::OK)
}

/// 10 Nodes, 7 blocked with the daemon's own caps forced past: at most 5 (the default 50 %)
/// carry the taint, the other 2 are `heldBack` in the daemon with an Event on the Node and
/// a metric; unblocking a tainted one makes room for a held one.
#[tokio::test(flavor = "multi_thread")]
async fn the_ceiling_holds_back_taints_past_its_share_and_the_statuses_say_so() {
    let Some(kube) = KubeApiServer::start("blocklist-kube ceiling") else {
        return;
    };
    for i in 0..10 {
        create_node(&kube, &format!("n{i}"), &json!([]));
    }
    let mut ws = Workspace::new();
    let daemon = ws.start(&[]);
    let log = ws.tmp.path().join("bridge.log");
    let (_bridge, probes) = spawn_bridge(&kube, &daemon.url(""), &["--resync", "3600"], &log);
    eventually("the bridge is ready", || ready(&probes)).await;

    let blocks: Vec<Value> = (0..7)
        .map(|i| item(&format!("n{i}"), "MARK_BLOCKED", "disk"))
        .collect();
    let (status, body) = daemon
        .post("/blocklist/nodes?force=true", Value::Array(blocks))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    eventually("7 statuses: 5 enforced, 2 held back", || async {
        let all = statuses(&daemon).await;
        let count = |state: &str| all.iter().filter(|(_, s)| s == state).count();
        all.len() == 7 && count("enforced") == 5 && count("heldBack") == 2
    })
    .await;
    let tainted: Vec<String> = (0..10)
        .map(|i| format!("n{i}"))
        .filter(|n| taints(&kube, n).1.is_some())
        .collect();
    assert_eq!(tainted.len(), 5, "{tainted:?}");
    let held: Vec<String> = statuses(&daemon)
        .await
        .into_iter()
        .filter(|(_, s)| s == "heldBack")
        .map(|(id, _)| id)
        .collect();
    for id in &held {
        assert!(
            event_reasons(&kube, id).contains(&"TaintHeldBack".to_owned()),
            "{id}"
        );
        let detail = daemon.get(&format!("/blocklist/nodes/{id}")).await.1;
        let why = detail["enforcement"]["blocklist-kube"]["detail"].to_string();
        assert!(why.contains("5 of the cluster's 10 Nodes"), "{why}");
    }
    assert!(metric(&probes, "blocklist_kube_ceiling_refusals_total").await >= 2.0);
    assert_eq!(metric(&probes, "blocklist_kube_nodes_tainted").await, 5.0);
    assert!(std::fs::read_to_string(&log)
        .unwrap()
        .contains("the ceiling holds back a taint"));

    // An unblock frees a place: the first held one (by name) takes it.
    let (status, _) = daemon
        .delete(&format!("/blocklist/nodes/{}", tainted[0]))
        .await;
    assert_eq!(status, StatusCode::OK);
    let first_held = held[0].clone();
    eventually("the first held node tainted", || async {
        taints(&kube, &first_held).1.is_some()
    })
    .await;
    assert_eq!(
        (0..10)
            .filter(|i| taints(&kube, &format!("n{i}")).1.is_some())
            .count(),
        5
    );
}

/// Each blocked node's status in the daemon: `enforced` with the taint, `noTarget` for an
/// id no Node has (counted, and not retried while nothing changes) — until a Node of that
/// name appears and is tainted; the probes and the metrics answer.
#[tokio::test(flavor = "multi_thread")]
async fn the_daemon_shows_what_the_bridge_did_with_each_blocked_node() {
    let Some(kube) = KubeApiServer::start("blocklist-kube statuses") else {
        return;
    };
    create_node(&kube, "n1", &json!([]));
    create_node(&kube, "n2", &json!([]));
    let mut ws = Workspace::new();
    let daemon = ws.start(&[]);
    let log = ws.tmp.path().join("bridge.log");
    let (_bridge, probes) = spawn_bridge(&kube, &daemon.url(""), FEED_ONLY, &log);
    let health = reqwest::get(format!("{probes}/healthz"))
        .await
        .expect("healthz");
    assert_eq!(health.status(), StatusCode::OK);
    eventually("the bridge is ready", || ready(&probes)).await;
    daemon
        .post(
            "/blocklist/nodes",
            json!([
                item("n1", "MARK_BLOCKED", "disk"),
                item("ghost", "MARK_BLOCKED", "net")
            ]),
        )
        .await;
    eventually("n1 enforced, ghost without a Node", || async {
        statuses(&daemon).await
            == [
                ("ghost".to_owned(), "noTarget".to_owned()),
                ("n1".to_owned(), "enforced".to_owned()),
            ]
    })
    .await;
    // The id without a Node is counted, not retried: the bridge is quiet until something
    // changes (a second without a single request to the API server).
    assert_eq!(metric(&probes, "blocklist_kube_nodes_missing").await, 1.0);
    let requests = api_requests(&probes).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        api_requests(&probes).await,
        requests,
        "requests while nothing changed"
    );
    let n1 = daemon.get("/blocklist/nodes/n1").await.1;
    let status = &n1["enforcement"]["blocklist-kube"];
    assert_eq!(
        status["detail"],
        "taint blocklistd.io/blocked=MARK_BLOCKED:NoSchedule"
    );
    assert_eq!(status["observedRevision"], n1["revision"]);
    assert!(metric(&probes, "blocklist_kube_taints_applied_total").await >= 1.0);
    assert!(metric(&probes, "blocklist_kube_feed_revision").await >= 1.0);

    create_node(&kube, "ghost", &json!([]));
    eventually("ghost tainted once it exists", || async {
        statuses(&daemon)
            .await
            .contains(&("ghost".to_owned(), "enforced".to_owned()))
    })
    .await;
    assert_eq!(taints(&kube, "ghost").1.as_deref(), Some("MARK_BLOCKED"));

    // An unblock: the status goes with the block (the daemon drops it), the taint comes off.
    daemon.delete("/blocklist/nodes/n1").await;
    eventually("n1 untainted", || async { taints(&kube, "n1").1.is_none() }).await;
    assert_eq!(
        statuses(&daemon).await,
        [("ghost".to_owned(), "enforced".to_owned())]
    );
}

/// `--dry-run`: the patches are the API server's dry runs (checked, not stored), so no Node
/// changes, and the statuses say `dryRun`.
#[tokio::test(flavor = "multi_thread")]
async fn a_dry_run_writes_nothing_and_the_statuses_say_so() {
    let Some(kube) = KubeApiServer::start("blocklist-kube dry run statuses") else {
        return;
    };
    create_node(&kube, "n1", &json!([]));
    let mut ws = Workspace::new();
    let daemon = ws.start(&[]);
    daemon
        .post(
            "/blocklist/nodes",
            json!([item("n1", "MARK_BLOCKED", "disk")]),
        )
        .await;
    let before = node(&kube, "n1")["metadata"]["resourceVersion"].clone();
    bridge_once_with(&kube, &daemon, &["--dry-run"]);
    assert_eq!(
        node(&kube, "n1")["metadata"]["resourceVersion"],
        before,
        "the Node is as it was"
    );
    assert_eq!(taints(&kube, "n1").1, None);
    assert_eq!(
        statuses(&daemon).await,
        [("n1".to_owned(), "dryRun".to_owned())]
    );
}

/// A daemon the bridge cannot reach changes nothing: a taint the bridge put stays, and the
/// bridge is not ready (no full reconcile).
#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_out_of_reach_changes_nothing_in_the_cluster() {
    let Some(kube) = KubeApiServer::start("blocklist-kube no daemon") else {
        return;
    };
    create_node(
        &kube,
        "n1",
        &json!([{"key": KEY, "value": "MARK_BLOCKED", "effect": "NoSchedule"}]),
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let url = format!("http://{}", closed.local_addr().expect("its address"));
    drop(closed);
    let ws = Workspace::new();
    let log = ws.tmp.path().join("bridge.log");
    let (_bridge, probes) = spawn_bridge(&kube, &url, &["--resync", "1"], &log);
    eventually("the bridge tried the daemon", || async {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("reconcile failed; nothing changed"))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(taints(&kube, "n1").1.as_deref(), Some("MARK_BLOCKED"));
    let readyz = reqwest::get(format!("{probes}/readyz"))
        .await
        .expect("readyz");
    assert_eq!(readyz.status(), StatusCode::SERVICE_UNAVAILABLE);
}
