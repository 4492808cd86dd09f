//! The bridge's side of the alerting rules (`docs/deploy/alerts.yaml`, group
//! `blocklist-kube`): a real bridge's `/metrics`, against a real kube-apiserver and daemon,
//! has every metric the group's rules name, and none of them fires while it is healthy.
//! The rules' own tests are the daemon's `tests/alerts.rs`.

#[path = "../../../tests/common/mod.rs"]
mod common;
mod support;

use common::*;
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
    create_node(&kube, "n1", &serde_json::json!([]));
    let mut ws = Workspace::new();
    let daemon = ws.start(&[]);
    let log = ws.tmp.path().join("bridge.log");
    let (_bridge, probes) = spawn_bridge(&kube, &daemon.url(""), FEED_ONLY, &log);
    eventually("the bridge is ready and leads", || async {
        ready(&probes).await && bridge_metric(&probes, "blocklist_kube_leader").await == 1.0
    })
    .await;
    let scrape = reqwest::get(format!("{probes}/metrics"))
        .await
        .expect("the bridge's /metrics")
        .text()
        .await
        .expect("its text");
    feed_through_the_rules(&scrape, "blocklist-kube", "blocklist-kube", &[], test);
}
