//! The work on a test's Nodes, through the real API server: pods bound to Nodes, the
//! kubelet's part played by the test (no kubelet runs), PodDisruptionBudgets with the
//! status the disruption controller would write (it does not run either), and the
//! evictions the API server's audit log recorded.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::{create, merge_patch};
use crate::common::*;

/// The labels of a Flink task manager's pod (the bridge's default selectors).
pub fn taskmanager_labels() -> Value {
    json!({"type": "flink-native-kubernetes", "component": "taskmanager", "app": "job"})
}

/// A task manager's pod `flink/name` on `node`.
pub fn taskmanager(kube: &KubeApiServer, name: &str, node: &str) {
    create_pod(
        kube,
        "flink",
        name,
        node,
        &taskmanager_labels(),
        &json!({}),
        &json!({}),
    );
}

pub fn create_namespace(kube: &KubeApiServer, name: &str) {
    let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    create(kube, "/api/v1/namespaces", &body.to_string());
}

/// Creates pod `namespace/name` bound to `node`, with `labels`, `metadata` and `spec` merged
/// in (owner references, annotations, tolerations), and marks it running and ready as a
/// kubelet would (a pending pod is evicted without asking its budget).
pub fn create_pod(
    kube: &KubeApiServer,
    namespace: &str,
    name: &str,
    node: &str,
    labels: &Value,
    metadata: &Value,
    spec: &Value,
) {
    let mut meta = json!({"name": name, "labels": labels});
    merge(&mut meta, metadata);
    let mut pod_spec =
        json!({"nodeName": node, "containers": [{"name": "main", "image": "flink"}]});
    merge(&mut pod_spec, spec);
    let body = json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec});
    create(
        kube,
        &format!("/api/v1/namespaces/{namespace}/pods"),
        &body.to_string(),
    );
    let status = json!({"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True"}]}});
    merge_patch(
        kube,
        &format!("/api/v1/namespaces/{namespace}/pods/{name}/status"),
        &status,
    )
    .unwrap_or_else(|| panic!("marking {namespace}/{name} running"));
}

fn merge(into: &mut Value, from: &Value) {
    if let (Some(into), Some(from)) = (into.as_object_mut(), from.as_object()) {
        for (k, v) in from {
            into.insert(k.clone(), v.clone());
        }
    }
}

/// A pod as listed: `(namespace, name, node, terminating)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub namespace: String,
    pub name: String,
    pub node: String,
    pub terminating: bool,
}

/// Every pod of the cluster.
pub fn pods(kube: &KubeApiServer) -> Vec<Listed> {
    let text = kube
        .curl(&["-sf", &format!("{}/api/v1/pods", kube.url)])
        .expect("the pods");
    let list: Value = serde_json::from_str(&text).expect("JSON");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| Listed {
            namespace: p["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .into(),
            name: p["metadata"]["name"].as_str().unwrap_or_default().into(),
            node: p["spec"]["nodeName"].as_str().unwrap_or_default().into(),
            terminating: !p["metadata"]["deletionTimestamp"].is_null(),
        })
        .collect()
}

/// The kubelet's last step for pod `namespace/name`: its containers stopped, it is gone
/// (deleted with no grace left).
pub fn let_go(kube: &KubeApiServer, namespace: &str, name: &str) {
    kube.curl(&[
        "-s",
        "-XDELETE",
        "-H",
        "Content-Type: application/json",
        "-d",
        r#"{"gracePeriodSeconds": 0}"#,
        &format!("{}/api/v1/namespaces/{namespace}/pods/{name}", kube.url),
    ]);
}

/// The kubelets of the cluster, played by a thread: every pod marked for deletion (an
/// eviction's) is let go at once. Stopped on drop.
pub struct Kubelets {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Kubelets {
    pub fn start(kube: &Arc<KubeApiServer>) -> Kubelets {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (kube, stop) = (kube.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    for pod in pods(&kube).into_iter().filter(|p| p.terminating) {
                        let_go(&kube, &pod.namespace, &pod.name);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        };
        Kubelets {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Kubelets {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One eviction the API server answered, from its audit log.
#[derive(Debug, Clone)]
pub struct Eviction {
    pub user: String,
    pub namespace: String,
    pub pod: String,
    pub code: u16,
    /// When the request was received, seconds since the epoch.
    pub at: f64,
    pub dry_run: bool,
}

/// Every eviction asked so far, in order.
pub fn evictions(kube: &KubeApiServer) -> Vec<Eviction> {
    kube.audit()
        .into_iter()
        .filter(|e| e["objectRef"]["subresource"] == "eviction" && e["verb"] == "create")
        .map(|e| Eviction {
            user: e["user"]["username"].as_str().unwrap_or_default().into(),
            namespace: e["objectRef"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .into(),
            pod: e["objectRef"]["name"].as_str().unwrap_or_default().into(),
            code: e["responseStatus"]["code"]
                .as_u64()
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or_default(),
            at: seconds(e["requestReceivedTimestamp"].as_str().unwrap_or_default()),
            dry_run: e["requestURI"]
                .as_str()
                .unwrap_or_default()
                .contains("dryRun"),
        })
        .collect()
}

/// The pods evicted (201), as `namespace/name`, in order.
pub fn evicted(kube: &KubeApiServer) -> Vec<String> {
    evictions(kube)
        .into_iter()
        .filter(|e| e.code == 201)
        .map(|e| format!("{}/{}", e.namespace, e.pod))
        .collect()
}

/// An RFC 3339 timestamp as seconds since the epoch.
pub fn seconds(rfc3339: &str) -> f64 {
    humantime::parse_rfc3339_weak(rfc3339.trim_end_matches('Z'))
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Asserts `all` kept a pace of one eviction per `spacing` seconds, as the API server
/// received them (the way from the bridge adds its jitter, up to [`JITTER`]): no two
/// closer than `spacing` less the jitter, and no window of ten paces holds more than ten
/// (and one for the jitter).
pub fn assert_paced(all: &[Eviction], spacing: f64) {
    for pair in all.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(
            gap >= spacing - JITTER,
            "two evictions {gap:.3} s apart, the pace is {spacing:.3} s: {pair:?}"
        );
    }
    for (i, first) in all.iter().enumerate() {
        let within = all[i..]
            .iter()
            .take_while(|e| e.at < first.at + 10.0 * spacing)
            .count();
        assert!(
            within <= 11,
            "{within} evictions within ten paces ({:.3} s) from {first:?}",
            10.0 * spacing
        );
    }
}

/// How much later than the one before an eviction may reach the API server on a loaded
/// test machine.
pub const JITTER: f64 = 0.04;

/// A PodDisruptionBudget `name` over the pods labelled `app=<app>` in `namespace`, with
/// its status written as the disruption controller would: `allowed` disruptions now.
pub fn create_budget(kube: &KubeApiServer, namespace: &str, name: &str, app: &str) {
    let body = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": app}}}});
    create(
        kube,
        &format!("/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"),
        &body.to_string(),
    );
}

/// Writes budget `name`'s status: `allowed` disruptions now, no pod disrupted (the
/// disruption controller's answer once the evicted pods are gone).
pub fn allow_disruptions(
    kube: &KubeApiServer,
    namespace: &str,
    name: &str,
    allowed: i64,
    healthy: i64,
) {
    let url = format!(
        "{}/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{name}",
        kube.url
    );
    let text = kube.curl(&["-sf", &url]).expect("the budget");
    let budget: Value = serde_json::from_str(&text).expect("JSON");
    let status = json!({"status": {
        "observedGeneration": budget["metadata"]["generation"],
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": (healthy - allowed).max(0),
        "expectedPods": healthy,
        "disruptedPods": null,
    }});
    let answer = kube
        .curl(&[
            "-s",
            "-XPATCH",
            "-H",
            "Content-Type: application/merge-patch+json",
            "-d",
            &status.to_string(),
            &format!("{url}/status"),
        ])
        .unwrap_or_default();
    let answer: Value = serde_json::from_str(&answer).unwrap_or_default();
    assert_eq!(
        answer["kind"], "PodDisruptionBudget",
        "writing the budget's status: {answer}"
    );
}

/// The daemon's share caps opened (its guardrails are tested on their own; here the bridge's
/// second line is).
pub const CAPS_OPEN: &[&str] = &[
    "--max-blocked-nodes-percent",
    "100",
    "--max-blocked-taskmanagers-percent",
    "100",
    "--max-evacuating-nodes-percent",
    "100",
];
