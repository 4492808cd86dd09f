//! The loop on Kubernetes, every part real: a Flink 2.3 cluster whose task managers are
//! named as their pods (on Kubernetes a task manager's id is its pod's name), the Flink
//! watcher, the daemon, the bridge and the kube-apiserver. Tasks failing on one task
//! manager get it blocked by the watcher and its pod labelled by the bridge; with the
//! evacuating action, its pod is evicted, and only its.

#[path = "../../../tests/common/mod.rs"]
mod common;
mod support;

use std::sync::Arc;

use common::*;
use serde_json::{json, Value};
use support::workload::*;
use support::*;

fn label_of(kube: &KubeApiServer, pod: &str) -> Option<String> {
    kube.curl(&[
        "-sf",
        &format!("{}/api/v1/namespaces/flink/pods/{pod}", kube.url),
    ])
    .and_then(|t| serde_json::from_str::<Value>(&t).ok())
    .and_then(|p| p["metadata"]["labels"][KEY].as_str().map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_manager_failing_in_flink_has_its_pod_labelled_then_evicted() {
    let Some(harness) = flink_harness("the Flink loop on Kubernetes") else {
        return;
    };
    let Some(kube) = KubeApiServer::start("blocklist-kube and Flink") else {
        return;
    };
    let kube = Arc::new(kube);
    create_node(&kube, "n1", &json!([]));
    create_node(&kube, "n2", &json!([]));
    create_namespace(&kube, "flink");
    for (pod, node) in [
        ("tm-1", "n1"),
        ("tm-2", "n1"),
        ("tm-3", "n2"),
        ("tm-4", "n2"),
    ] {
        taskmanager(&kube, pod, node);
    }
    let _kubelets = Kubelets::start(&kube);
    let mut ws = Workspace::new();
    let daemon = ws.start(&[]);
    let log = ws.tmp.path().join("bridge.log");
    let flags = [FEED_ONLY, &["--namespace", "flink"]].concat();
    let (_bridge, _probes) = spawn_bridge(&kube, &daemon.url(""), &flags, &log);
    eventually("the bridge registered the four task managers", || {
        registered(&daemon, 4)
    })
    .await;

    let mut flink = Flink::start(
        &harness,
        &ws.tmp.path().join("flink"),
        &FlinkSpec::four(false),
    );
    let watcher = Watcher::start(ws.tmp.path(), &flink.url(), &daemon, &[]);
    flink.submit("disk", 4, &["tm-2"], "java.io.IOException", 2);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while label_of(&kube, "tm-2").as_deref() != Some("MARK_BLOCKED") {
        assert!(
            std::time::Instant::now() < deadline,
            "tm-2's pod is not labelled:\n{}\n{}",
            watcher.log_text(),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    for healthy in ["tm-1", "tm-3", "tm-4"] {
        assert_eq!(label_of(&kube, healthy), None, "{healthy}");
    }
    drop(watcher);

    // The same loop with the evacuating action: tm-3's pod is evicted, and only it.
    let watcher = Watcher::start(
        ws.tmp.path(),
        &flink.url(),
        &daemon,
        &["--action", "MARK_BLOCKED_AND_EVACUATE_TASKS"],
    );
    flink.submit("nic", 4, &["tm-3"], "java.io.IOException", 2);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !evicted(&kube).contains(&"flink/tm-3".to_owned()) {
        assert!(
            std::time::Instant::now() < deadline,
            "tm-3's pod is not evicted:\n{}\n{}",
            watcher.log_text(),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(evicted(&kube), ["flink/tm-3".to_owned()]);
}
