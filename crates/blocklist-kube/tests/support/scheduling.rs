//! The real kube-scheduler beside the test's API server (built from the same
//! `k8s.io/kubernetes` module), Nodes it can place pods on, and pods it places: no kubelet
//! and no node lifecycle controller run, so the test writes what they would.

use std::process::{Command, Stdio};

use serde_json::{json, Value};

use super::{create, create_node, merge_patch, node, Running};
use crate::common::*;

/// The scheduler against `kube`, as the administrator, its log in `log`; `None` (after the
/// skip-or-fail rule) when it cannot be built.
pub fn start_scheduler(kube: &KubeApiServer, log: &std::path::Path, test: &str) -> Option<Running> {
    let dir = match build_server("kube-1.37") {
        Ok(dir) => dir,
        Err(why) => {
            available(&why, false, test);
            return None;
        }
    };
    let kubeconfig = kube.kubeconfig("scheduler", ADMIN_TOKEN);
    let child = Command::new(dir.join("kube-scheduler"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--authentication-kubeconfig")
        .arg(&kubeconfig)
        .arg("--authorization-kubeconfig")
        .arg(&kubeconfig)
        .args(["--leader-elect=false", "--bind-address", "127.0.0.1"])
        .args(["--secure-port", &free_port().to_string()])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("scheduler log"))
        .spawn()
        .expect("start kube-scheduler");
    Some(Running(child))
}

/// A Node the scheduler places pods on: room for them (`allocatable`) and `Ready`, written
/// through the status subresource as a kubelet would, and without the not-ready taint the
/// API server's admission puts on every new Node (the node lifecycle controller takes it
/// off in a cluster).
pub fn create_schedulable_node(kube: &KubeApiServer, name: &str) {
    create_node(kube, name, &json!([]));
    let room = json!({"cpu": "16", "memory": "64Gi", "pods": "110"});
    let status = json!({"status": {"capacity": room, "allocatable": room, "conditions": [
        {"type": "Ready", "status": "True", "reason": "KubeletReady",
         "lastHeartbeatTime": now_rfc3339(), "lastTransitionTime": now_rfc3339()}]}});
    merge_patch(kube, &format!("/api/v1/nodes/{name}/status"), &status)
        .unwrap_or_else(|| panic!("Node {name}'s status"));
    let taints = node(kube, name)["spec"]["taints"].clone();
    let kept: Vec<Value> = taints
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["key"] != "node.kubernetes.io/not-ready")
        .cloned()
        .collect();
    merge_patch(
        kube,
        &format!("/api/v1/nodes/{name}"),
        &json!({"spec": {"taints": kept}}),
    )
    .unwrap_or_else(|| panic!("Node {name}'s taints"));
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// A pod `namespace/name` with `labels` and no Node: the scheduler's to place.
pub fn create_pending_pod(kube: &KubeApiServer, namespace: &str, name: &str, labels: &Value) {
    let body = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "flink",
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}});
    create(
        kube,
        &format!("/api/v1/namespaces/{namespace}/pods"),
        &body.to_string(),
    );
}

/// The Node the scheduler bound pod `namespace/name` to, once it did.
pub fn bound_node(kube: &KubeApiServer, namespace: &str, name: &str) -> Option<String> {
    let text = kube.curl(&[
        "-sf",
        &format!("{}/api/v1/namespaces/{namespace}/pods/{name}", kube.url),
    ])?;
    let pod: Value = serde_json::from_str(&text).ok()?;
    pod["spec"]["nodeName"]
        .as_str()
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
}
