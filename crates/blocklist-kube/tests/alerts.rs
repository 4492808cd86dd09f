//! The bridge's side of the alerting rules (`charts/blocklistd/files/alerts.yaml`, group
//! `blocklist-kube`): a real bridge's `/metrics`, against a real kube-apiserver and daemon,
//! once it has tainted a blocked node and evacuated it, has series for every selector of
//! the group's rules (`evictions_total{outcome="evicted"}` appears with the first eviction),
//! and none of the rules fires on it. The rules' own tests are the daemon's
//! `tests/alerts.rs`.

#[path = "../../../tests/common/mod.rs"]
mod common;
mod support;

use std::sync::Arc;

use common::*;
use reqwest::StatusCode;
use serde_json::json;
use support::workload::*;
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_real_bridges_metrics_feed_the_rules_and_fire_nothing_while_it_is_healthy() {
    let test = "a_real_bridges_metrics_feed_the_rules_and_fire_nothing_while_it_is_healthy";
    if !have_promtool(test) {
        return;
    }
    let Some(kube) = KubeApiServer::start("blocklist-kube alerts") else {
        return;
    };
    let kube = Arc::new(kube);
    create_node(&kube, "n1", &json!([]));
    create_node(&kube, "n2", &json!([]));
    create_namespace(&kube, "flink");
    taskmanager(&kube, "tm-1", "n1");
    let _kubelets = Kubelets::start(&kube);

    let mut ws = Workspace::new();
    let daemon = ws.start(&[]);
    let log = ws.tmp.path().join("bridge.log");
    let flags = [
        FEED_ONLY,
        &["--namespace", "flink", "--evictions-per-minute", "120"],
    ]
    .concat();
    let (_bridge, probes) = spawn_bridge(&kube, &daemon.url(""), &flags, &log);
    eventually("the bridge is ready, leads and registered tm-1", || async {
        ready(&probes).await
            && bridge_metric(&probes, "blocklist_kube_leader").await == 1.0
            && registered(&daemon, 1).await
    })
    .await;

    let (status, body) = daemon
        .post(
            "/blocklist/nodes",
            json!([item("n1", "MARK_BLOCKED_AND_EVACUATE_TASKS", "alerts")]),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let evicted = r#"blocklist_kube_evictions_total{outcome="evicted"}"#;
    eventually("n1 tainted and emptied of tm-1", || async {
        bridge_metric(&probes, evicted).await == 1.0
            && bridge_metric(&probes, "blocklist_kube_nodes_tainted").await == 1.0
            && bridge_metric(&probes, "blocklist_kube_nodes_evacuating").await == 0.0
            && !pods(&kube).iter().any(|p| p.name == "tm-1")
    })
    .await;

    // The feed's idle gauge reads 0 until its first byte (an alert's case): this bridge
    // has heard the feed, and a scrape in the millisecond of a byte is taken again.
    let start = std::time::Instant::now();
    let scrape = loop {
        let text = reqwest::get(format!("{probes}/metrics"))
            .await
            .expect("the bridge's /metrics")
            .text()
            .await
            .expect("its text");
        let idle = text
            .lines()
            .find_map(|l| l.strip_prefix("blocklist_kube_feed_idle_seconds "))
            .and_then(|v| v.parse::<f64>().ok());
        if idle.is_some_and(|idle| idle > 0.0) {
            break text;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "feed_idle_seconds stays {idle:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    feed_through_the_rules(&scrape, "blocklist-kube", "blocklist-kube", &[], test);
}
