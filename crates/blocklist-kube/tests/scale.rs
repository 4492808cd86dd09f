//! The bridge at the scale of a large cluster, measured (not asserted: speed is measured,
//! and docs/kubernetes.md's figures come from this run) against a real kube-apiserver and
//! a real daemon on this machine: 5,000 Nodes with 1,000 blocked and 10,000 task manager
//! pods, then blocks at 20 a second. Prints the full reconcile's time and writes, the
//! membership's time, the steady state's writes, block-to-taint latency as a watcher of
//! the Nodes sees it, and the bridge's memory.
//!
//! ```sh
//! cargo test --release -p blocklist-kube --features blocklistd/etcd --test scale -- --ignored --nocapture
//! ```

#[path = "../../../tests/common/mod.rs"]
mod common;
mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use serde_json::{json, Value};
use support::*;

const NODES: usize = 5_000;
const BLOCKED: usize = 1_000;
const PODS: usize = 10_000;
/// Blocks a second while latency is measured, and how many.
const RATE: u64 = 20;
const TIMED_BLOCKS: usize = 200;

/// Creates `objects` through `api`, 64 at a time.
async fn create_all<K>(api: &Api<K>, objects: Vec<K>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    futures::stream::iter(objects)
        .map(|object| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &object).await.map(drop) }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<()>>()
        .await
        .expect("created");
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at]
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a measurement of several minutes: run it by name with --ignored"]
async fn the_bridge_at_the_scale_of_a_large_cluster() {
    let Some(kube) = KubeApiServer::start("blocklist-kube scale") else {
        return;
    };
    let client = client(&kube).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let started = Instant::now();
    create_all(
        &nodes,
        (0..NODES)
            .map(|i| {
                serde_json::from_value(json!({"metadata": {"name": format!("n{i:04}")}}))
                    .expect("a Node")
            })
            .collect(),
    )
    .await;
    let flink = json!({"type": "flink-native-kubernetes", "component": "taskmanager"});
    create_all(
        &pods,
        (0..PODS)
            .map(|i| {
                serde_json::from_value(json!({
                    "metadata": {"name": format!("tm-{i:05}"), "labels": flink},
                    "spec": {"nodeName": format!("n{:04}", i % NODES),
                             "containers": [{"name": "tm", "image": "flink"}]},
                }))
                .expect("a pod")
            })
            .collect(),
    )
    .await;
    println!(
        "created {NODES} Nodes and {PODS} pods in {:?}",
        started.elapsed()
    );

    let mut ws = Workspace::new();
    let daemon = ws.start(&[]);
    let blocks: Vec<Value> = (0..BLOCKED)
        .map(|i| {
            item(
                &format!("n{:04}", i * (NODES / BLOCKED)),
                "MARK_BLOCKED",
                "scale",
            )
        })
        .collect();
    let (status, body) = daemon
        .post("/blocklist/nodes?force=true", Value::Array(blocks))
        .await;
    assert!(status.is_success(), "{body}");

    let patches = node_patches(&kube);
    let log = ws.tmp.path().join("bridge.log");
    let start = Instant::now();
    let (bridge, probes) = spawn_bridge(&kube, &daemon.url(""), FEED_ONLY, &log);
    loop {
        let ok = reqwest::get(format!("{probes}/readyz"))
            .await
            .is_ok_and(|r| r.status().is_success());
        if ok {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "not ready in 2 minutes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reconcile = start.elapsed();
    let written = node_patches(&kube) - patches;
    println!("full reconcile: {reconcile:?}, {written} Node patches for {BLOCKED} blocked Nodes");
    loop {
        let registered = daemon
            .get("/taskmanagers")
            .await
            .1
            .as_array()
            .map_or(0, Vec::len);
        if registered == PODS {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{registered} of {PODS} registered in 2 minutes"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "membership: {PODS} task managers registered {:?} after the bridge started",
        start.elapsed()
    );

    let quiet = node_patches(&kube);
    tokio::time::sleep(Duration::from_secs(30)).await;
    println!(
        "steady state: {} Node patches in 30 s",
        node_patches(&kube) - quiet
    );

    // A watcher of the Nodes, as kube-scheduler is: when each Node is first seen tainted.
    let seen: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let watch = {
        let seen = seen.clone();
        let nodes = nodes.clone();
        tokio::spawn(async move {
            let stream = watcher::watcher(nodes, watcher::Config::default());
            futures::pin_mut!(stream);
            while let Some(Ok(event)) = stream.next().await {
                if let watcher::Event::Apply(node) = event {
                    let tainted = node
                        .spec
                        .and_then(|s| s.taints)
                        .is_some_and(|t| t.iter().any(|t| t.key == KEY));
                    if tainted {
                        let name = node.metadata.name.unwrap_or_default();
                        seen.lock()
                            .expect("not poisoned")
                            .entry(name)
                            .or_insert_with(Instant::now);
                    }
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut sent: Vec<(String, Instant)> = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(1000 / RATE));
    for i in 0..TIMED_BLOCKS {
        tick.tick().await;
        let id = format!("n{:04}", i * (NODES / BLOCKED) + 1);
        let at = Instant::now();
        let (status, body) = daemon
            .post(
                "/blocklist/nodes?force=true",
                json!([item(&id, "MARK_BLOCKED", "latency")]),
            )
            .await;
        assert!(status.is_success(), "{body}");
        sent.push((id, at));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let done = {
            let seen = seen.lock().expect("not poisoned");
            sent.iter().all(|(id, _)| seen.contains_key(id))
        };
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every timed block reached its Node"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    watch.abort();
    let mut latencies: Vec<Duration> = {
        let seen = seen.lock().expect("not poisoned");
        sent.iter()
            .map(|(id, at)| seen[id].saturating_duration_since(*at))
            .collect()
    };
    latencies.sort();
    println!(
        "block → taint seen by a watcher, {RATE} blocks/s with {NODES} Nodes: p50 {:?}, p99 {:?}, max {:?}",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies[latencies.len() - 1]
    );
    println!(
        "bridge RSS with {NODES} Nodes and {PODS} pods watched: {} MiB",
        rss_kib(bridge.0.id()) / 1024
    );
}
