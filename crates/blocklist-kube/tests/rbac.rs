//! The bridge with exactly the rights its RBAC grants (the chart's, `charts/blocklistd`, as
//! `helm template` renders it), against a real kube-apiserver that enforces them.

#[path = "../../../tests/common/mod.rs"]
mod common;
mod support;

use std::process::Command;

use common::*;
use kube::api::Api;
use reqwest::StatusCode;
use serde_json::json;
use support::*;

/// Creates the objects of the chart's rendering (its default values) of the kinds `kinds`,
/// each at its endpoint ([`ENDPOINTS`]), in the namespace `blocklist`; the others are left
/// out. `None` (after the skip-or-fail rule) without `helm`.
fn apply_chart(kube: &KubeApiServer, kinds: &[&str], test: &str) -> Option<()> {
    create(
        kube,
        "/api/v1/namespaces",
        r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"blocklist"}}"#,
    );
    let objects = rendered(None, test)?;
    let mut applied = Vec::new();
    for object in &objects {
        let kind = object["kind"].as_str().expect("a kind");
        if !kinds.contains(&kind) {
            continue;
        }
        let (_, path) = ENDPOINTS
            .iter()
            .find(|(k, _)| *k == kind)
            .expect("an endpoint for each kind");
        create(kube, &path.replace("{ns}", NAMESPACE), &object.to_string());
        applied.push(kind);
    }
    applied.sort_unstable();
    applied.dedup();
    assert_eq!(applied.len(), kinds.len(), "{applied:?}");
    Some(())
}

/// The bridge with exactly the rights of its RBAC (the chart's) does
/// its whole job — its Lease, taints, Events, membership, the label on a blocked task
/// manager's pod, evictions — and cannot do more (create or delete a Node, delete a pod,
/// write a Lease outside its namespace).
#[tokio::test(flavor = "multi_thread")]
async fn the_bridge_does_its_job_with_only_the_rights_its_rbac_grants() {
    let Some(kube) = KubeApiServer::start("blocklist-kube rbac") else {
        return;
    };
    let kinds = [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    ];
    if apply_chart(
        &kube,
        &kinds,
        "the_bridge_does_its_job_with_only_the_rights_its_rbac_grants",
    )
    .is_none()
    {
        return;
    }
    create_node(&kube, "n1", &json!([]));
    let pods: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(client(&kube).await, "default");
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "job-taskmanager-1-1",
                     "labels": {"type": "flink-native-kubernetes", "component": "taskmanager"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "tm", "image": "flink"}]},
    }))
    .expect("a pod");
    pods.create(&kube::api::PostParams::default(), &pod)
        .await
        .expect("create the pod");
    let mut ws = Workspace::new();
    let daemon = ws.start(&[]);
    let log = ws.tmp.path().join("bridge.log");
    let flags = [FEED_ONLY, &["--lease-namespace", "blocklist"]].concat();
    let (bridge, probes) = spawn_bridge_as(
        &kube.kubeconfig("bridge", BRIDGE_TOKEN),
        &daemon.url(""),
        &flags,
        &log,
    );
    eventually("the bridge leads", || async {
        bridge_metric(&probes, "blocklist_kube_leader").await == 1.0
    })
    .await;
    let (status, body) = daemon
        .post(
            "/blocklist/nodes",
            json!([item("n1", "MARK_BLOCKED", "disk")]),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    eventually("n1 tainted, with its Event", || async {
        taints(&kube, "n1").1.is_some() && event_reasons(&kube, "n1").contains(&"Blocked".into())
    })
    .await;
    eventually("the pod registered", || async {
        daemon.get("/taskmanagers/job-taskmanager-1-1").await.0 == StatusCode::OK
    })
    .await;
    daemon
        .post(
            "/blocklist/taskmanagers",
            json!([item("job-taskmanager-1-1", "MARK_BLOCKED", "slow")]),
        )
        .await;
    eventually("the blocked task manager's pod labelled", || async {
        let pod = pods.get("job-taskmanager-1-1").await.expect("the pod");
        pod.metadata.labels.is_some_and(|l| l.contains_key(KEY))
    })
    .await;
    let (status, body) = daemon
        .call(
            reqwest::Method::PATCH,
            "/blocklist/nodes/n1",
            Some(json!({"action": "MARK_BLOCKED_AND_EVACUATE_TASKS"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    eventually("the task manager's pod evicted", || async {
        let pod = pods.get_opt("job-taskmanager-1-1").await.expect("the pod");
        pod.is_none_or(|p| p.metadata.deletion_timestamp.is_some())
    })
    .await;
    drop(bridge);

    // And no more: the same token cannot delete or create a Node.
    let as_bridge = |method: &str, path: &str, body: &str| {
        let output = Command::new("curl")
            .arg("--cacert")
            .arg(&kube.ca_file)
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", method])
            .args(["-H", &format!("Authorization: Bearer {BRIDGE_TOKEN}")])
            .args(["-H", "Content-Type: application/json", "-d", body])
            .arg(format!("{}{path}", kube.url))
            .output()
            .expect("curl");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    assert_eq!(as_bridge("DELETE", "/api/v1/nodes/n1", ""), "403");
    let node = r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"n2"}}"#;
    assert_eq!(as_bridge("POST", "/api/v1/nodes", node), "403");
    assert_eq!(
        as_bridge(
            "DELETE",
            "/api/v1/namespaces/default/pods/job-taskmanager-1-1",
            ""
        ),
        "403"
    );
    let lease = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"x"}}"#;
    assert_eq!(
        as_bridge(
            "POST",
            "/apis/coordination.k8s.io/v1/namespaces/default/leases",
            lease
        ),
        "403"
    );
}
