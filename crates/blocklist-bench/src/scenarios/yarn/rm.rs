//! A stand-in for a ResourceManager of 1,000 NodeManagers, for the `yarn` scenario's scale
//! figures only (a `MiniYARNCluster` of that many NodeManagers does not fit two cores; the
//! bridge's tests run against a real one). It answers the calls `blocklist-yarn` makes as
//! Hadoop 3.4.3's `/ws/v1/cluster` does — the same paths, the same JSON, `user.name` taken
//! — holds the labels and each NodeManager's partition, and notes when each NodeManager's
//! partition changed and how many writes came. It answers in microseconds where a real
//! ResourceManager takes 4–16 ms a call (YARN.md), which the figures say.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

#[derive(Default)]
pub(super) struct Held {
    pub(super) labels: BTreeSet<String>,
    /// Each NodeManager's partition (`host:port` → label).
    pub(super) partitions: BTreeMap<String, Option<String>>,
    /// When each NodeManager last changed partition.
    pub(super) changed: BTreeMap<String, Instant>,
    pub(super) writes: u64,
}

pub(super) type Rm = Arc<Mutex<Held>>;

/// The id of NodeManager `i`: one per host, `h0000:8041` on.
pub(super) fn node(i: usize) -> String {
    format!("h{i:04}:8041")
}

/// Serves a ResourceManager of `nodes` NodeManagers on a loopback port: its URL.
pub(super) async fn start(nodes: usize) -> Result<(String, Rm), String> {
    let held: Rm = Arc::new(Mutex::new(Held {
        partitions: (0..nodes).map(|i| (node(i), None)).collect(),
        ..Held::default()
    }));
    let app = Router::new()
        .route("/ws/v1/cluster/nodes", get(nodes_answer))
        .route("/ws/v1/cluster/get-node-labels", get(labels_answer))
        .route("/ws/v1/cluster/add-node-labels", post(add_labels))
        .route("/ws/v1/cluster/replace-node-to-labels", post(replace))
        // No application runs: the shape of none.
        .route(
            "/ws/v1/cluster/apps",
            get(|| async { Json(json!({"apps": {}})) }),
        )
        .with_state(held.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((format!("http://{addr}"), held))
}

fn lock(rm: &Rm) -> std::sync::MutexGuard<'_, Held> {
    rm.lock().expect("never poisoned")
}

async fn nodes_answer(State(rm): State<Rm>) -> Json<Value> {
    let held = lock(&rm);
    let nodes: Vec<Value> = held
        .partitions
        .iter()
        .map(|(id, label)| {
            let host = id.split(':').next().unwrap_or_default();
            let mut node = json!({"id": id, "nodeHostName": host, "state": "RUNNING"});
            if let Some(label) = label {
                node["nodeLabels"] = json!([label]);
            }
            node
        })
        .collect();
    Json(json!({"nodes": {"node": nodes}}))
}

async fn labels_answer(State(rm): State<Rm>) -> Json<Value> {
    let held = lock(&rm);
    let infos: Vec<Value> = held
        .labels
        .iter()
        .map(|name| json!({"name": name, "exclusivity": "true"}))
        .collect();
    // One label comes as an object, none as `{}`: as YARN answers.
    Json(match infos.len() {
        0 => json!({}),
        1 => json!({"nodeLabelInfo": infos[0]}),
        _ => json!({"nodeLabelInfo": infos}),
    })
}

async fn add_labels(State(rm): State<Rm>, Json(body): Json<Value>) -> Json<Value> {
    let mut held = lock(&rm);
    held.writes += 1;
    for info in body["nodeLabelInfo"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        if let Some(name) = info["name"].as_str() {
            held.labels.insert(name.to_owned());
        }
    }
    Json(Value::Null)
}

async fn replace(State(rm): State<Rm>, Json(body): Json<Value>) -> Json<Value> {
    let mut held = lock(&rm);
    held.writes += 1;
    let now = Instant::now();
    for entry in body["nodeToLabels"].as_array().cloned().unwrap_or_default() {
        let Some(id) = entry["nodeId"].as_str() else {
            continue;
        };
        let label = entry["labels"][0].as_str().map(str::to_owned);
        if label.as_ref().is_some_and(|l| !held.labels.contains(l)) {
            continue; // YARN refuses a label it does not have
        }
        if held.partitions.insert(id.to_owned(), label).is_some() {
            held.changed.insert(id.to_owned(), now);
        }
    }
    Json(Value::Null)
}
