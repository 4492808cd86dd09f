//! What the bridge's tests share: the bridge run as a process, Nodes made and read
//! through the real API server, and its own counts of the requests it answered.

#![allow(dead_code)] // Each test file uses its own part.

pub mod scheduling;
pub mod workload;

use std::process::Command;

use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{json, Value};

use crate::common::*;

pub const KEY: &str = "blocklistd.io/blocked";

/// A running bridge, killed on drop (a failed test must not leave it behind).
pub struct Running(pub std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `blocklist-kube --once` against `daemon`, as the administrator.
pub fn bridge_once(kube: &KubeApiServer, daemon: &Daemon) {
    bridge_once_with(kube, daemon, &[]);
}

/// [`bridge_once`] with `extra` flags.
pub fn bridge_once_with(kube: &KubeApiServer, daemon: &Daemon, extra: &[&str]) {
    let kubeconfig = kube.kubeconfig("admin", ADMIN_TOKEN);
    let output = Command::new(env!("CARGO_BIN_EXE_blocklist-kube"))
        .args([
            "--once",
            "--listen",
            "127.0.0.1:0",
            "--max-tainted-nodes-percent",
            "100",
            "--daemon",
            &daemon.url(""),
        ])
        .args(extra)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output()
        .expect("run blocklist-kube");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

pub fn node(kube: &KubeApiServer, name: &str) -> Value {
    let text = kube
        .curl(&["-sf", &format!("{}/api/v1/nodes/{name}", kube.url)])
        .expect("the Node");
    serde_json::from_str(&text).expect("JSON")
}

pub fn create_node(kube: &KubeApiServer, name: &str, taints: &Value) {
    let body = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                      "spec": {"taints": taints}});
    create(kube, "/api/v1/nodes", &body.to_string());
}

/// The taints of Node `name` other than the bridge's, and the bridge's value (if any).
pub fn taints(kube: &KubeApiServer, name: &str) -> (Vec<Value>, Option<String>) {
    let node = node(kube, name);
    let all = node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ours = all
        .iter()
        .find(|t| t["key"] == KEY)
        .map(|t| t["value"].as_str().unwrap_or_default().to_owned());
    (all.into_iter().filter(|t| t["key"] != KEY).collect(), ours)
}

/// The reasons of the Events about Node `name` (a Node's Events are in `default`).
pub fn event_reasons(kube: &KubeApiServer, name: &str) -> Vec<String> {
    events_about(kube, "default", "Node")
        .into_iter()
        .filter(|(about, _)| about == name)
        .map(|(_, reason)| reason)
        .collect()
}

/// The Events in `namespace` about objects of `kind`: `(name, reason)` each.
pub fn events_about(kube: &KubeApiServer, namespace: &str, kind: &str) -> Vec<(String, String)> {
    let text = kube
        .curl(&[
            "-sf",
            &format!(
                "{}/apis/events.k8s.io/v1/namespaces/{namespace}/events",
                kube.url
            ),
        ])
        .expect("the Events");
    let list: Value = serde_json::from_str(&text).expect("JSON");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["regarding"]["kind"] == kind)
        .map(|e| {
            (
                e["regarding"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                e["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// A JSON merge patch of the object at the API server's `path`, as the administrator.
pub fn merge_patch(kube: &KubeApiServer, path: &str, patch: &Value) -> Option<String> {
    kube.curl(&[
        "-sf",
        "-XPATCH",
        "-H",
        "Content-Type: application/merge-patch+json",
        "-d",
        &patch.to_string(),
        &format!("{}{path}", kube.url),
    ])
}

/// Whether `daemon` holds `count` registered task managers.
pub async fn registered(daemon: &Daemon, count: usize) -> bool {
    daemon
        .get("/taskmanagers")
        .await
        .1
        .as_array()
        .is_some_and(|all| all.len() == count)
}

/// The PATCH requests on Nodes the API server has answered so far.
pub fn node_patches(kube: &KubeApiServer) -> f64 {
    node_patches_answered(kube, "")
}

/// The PATCH requests on Nodes the API server has answered so far with `code` (any code
/// when empty).
pub fn node_patches_answered(kube: &KubeApiServer, code: &str) -> f64 {
    let code = format!(r#"code="{code}""#);
    let text = kube
        .curl(&["-sf", &format!("{}/metrics", kube.url)])
        .expect("the API server's metrics");
    text.lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{")
                && l.contains(r#"resource="nodes""#)
                && l.contains(r#"verb="PATCH""#)
                && (code == r#"code="""# || l.contains(&code))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A client of the API server as the administrator.
pub async fn client(kube: &KubeApiServer) -> kube::Client {
    let file = Kubeconfig::read_from(kube.kubeconfig("admin", ADMIN_TOKEN)).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}

/// The bridge running as the administrator against `daemons` (comma-separated URLs) with
/// `extra` flags, its log in `log`; its probes' address once it printed it.
pub fn spawn_bridge(
    kube: &KubeApiServer,
    daemons: &str,
    extra: &[&str],
    log: &std::path::Path,
) -> (Running, String) {
    spawn_bridge_as(&kube.kubeconfig("admin", ADMIN_TOKEN), daemons, extra, log)
}

/// [`spawn_bridge`] with the credentials of `kubeconfig`.
pub fn spawn_bridge_as(
    kubeconfig: &std::path::Path,
    daemons: &str,
    extra: &[&str],
    log: &std::path::Path,
) -> (Running, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_blocklist-kube"))
        .args(["--listen", "127.0.0.1:0", "--daemon", daemons])
        .args(extra)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(log).expect("log"))
        .spawn()
        .expect("start blocklist-kube");
    let mut line = String::new();
    let stdout = child.stdout.take().expect("stdout");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)
        .expect("its address");
    let address = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("not an address: {line:?}"))
        .to_owned();
    (Running(child), format!("http://{address}"))
}

/// The flags of a bridge that only the feed moves (a resync an hour away) and no ceiling
/// holds back.
pub const FEED_ONLY: &[&str] = &["--resync", "3600", "--max-tainted-nodes-percent", "100"];

/// Creates the object `body` (JSON) at the API server's collection `path`.
pub fn create(kube: &KubeApiServer, path: &str, body: &str) {
    kube.curl(&[
        "-sf",
        "-XPOST",
        "-H",
        "Content-Type: application/json",
        "-d",
        body,
        &format!("{}{path}", kube.url),
    ])
    .unwrap_or_else(|| panic!("creating {body} at {path}"));
}

/// The bridge's metric `name` (a sample's value, labels included in `name`), 0 when absent.
pub async fn bridge_metric(probes: &str, name: &str) -> f64 {
    let Ok(response) = reqwest::get(format!("{probes}/metrics")).await else {
        return 0.0;
    };
    let text = response.text().await.unwrap_or_default();
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Whether the bridge at `probes` answers `/readyz` with 200 (its first reconcile done).
pub async fn ready(probes: &str) -> bool {
    reqwest::get(format!("{probes}/readyz"))
        .await
        .is_ok_and(|r| r.status() == reqwest::StatusCode::OK)
}

/// The collection of each kind the chart makes (`{ns}`: the namespace), so an object of a
/// new kind fails until it is listed here.
pub const ENDPOINTS: &[(&str, &str)] = &[
    ("Secret", "/api/v1/namespaces/{ns}/secrets"),
    ("ConfigMap", "/api/v1/namespaces/{ns}/configmaps"),
    ("ServiceAccount", "/api/v1/namespaces/{ns}/serviceaccounts"),
    ("Service", "/api/v1/namespaces/{ns}/services"),
    ("Deployment", "/apis/apps/v1/namespaces/{ns}/deployments"),
    ("StatefulSet", "/apis/apps/v1/namespaces/{ns}/statefulsets"),
    (
        "PodDisruptionBudget",
        "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
    ),
    (
        "ClusterRole",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    ),
    (
        "ClusterRoleBinding",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    ),
    (
        "Role",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    ),
    (
        "RoleBinding",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    ),
    (
        "NetworkPolicy",
        "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
    ),
    // The kinds of the CRDs `tests/crds/fetch` brings: cert-manager's, the Prometheus
    // Operator's.
    ("Issuer", "/apis/cert-manager.io/v1/namespaces/{ns}/issuers"),
    (
        "Certificate",
        "/apis/cert-manager.io/v1/namespaces/{ns}/certificates",
    ),
    (
        "PodMonitor",
        "/apis/monitoring.coreos.com/v1/namespaces/{ns}/podmonitors",
    ),
    (
        "PrometheusRule",
        "/apis/monitoring.coreos.com/v1/namespaces/{ns}/prometheusrules",
    ),
    (
        "AlertmanagerConfig",
        "/apis/monitoring.coreos.com/v1alpha1/namespaces/{ns}/alertmanagerconfigs",
    ),
];
