//! Node conditions as blocks, against a real kube-apiserver and a real daemon: the test
//! writes conditions to the Nodes' status as node-problem-detector would (the status
//! subresource, a strategic merge by type), and the bridge reports a condition held past
//! its hold with its `detector` token, retracts it when it clears, leaves another source's
//! block alone, is capped by the daemon's guardrails in a storm, converges under a new
//! leader without reporting twice, and changes nothing while the daemon is down.

#[path = "../../../tests/common/mod.rs"]
mod common;
mod support;

use std::time::{Duration, SystemTime};

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use support::*;

const SOURCE: &str = "blocklist-kube/condition/";

/// Writes condition `kind` of Node `node` as `status`, transitioned now.
fn set_condition(kube: &KubeApiServer, node: &str, kind: &str, status: &str) {
    let now = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let patch = json!({"status": {"conditions": [{
        "type": kind, "status": status, "reason": format!("{kind}Seen"),
        "message": format!("{kind} on {node}"), "lastTransitionTime": now,
        "lastHeartbeatTime": now,
    }]}});
    kube.curl(&[
        "-sf",
        "-XPATCH",
        "-H",
        "Content-Type: application/strategic-merge-patch+json",
        "-d",
        &patch.to_string(),
        &format!("{}/api/v1/nodes/{node}/status", kube.url),
    ])
    .unwrap_or_else(|| panic!("{node}'s condition {kind}"));
}

/// `GET /blocklist/nodes/{id}` as `token` (none: an open daemon).
async fn item(daemon: &Daemon, token: Option<&str>, id: &str) -> (StatusCode, Value) {
    as_token(
        daemon,
        token,
        Method::GET,
        &format!("/blocklist/nodes/{id}"),
        None,
    )
    .await
}

async fn as_token(
    daemon: &Daemon,
    token: Option<&str>,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| vec![("Authorization", a)])
        .unwrap_or_default();
    let (status, _, body) = request(daemon, method, path, &headers, body).await;
    (status, body)
}

/// The sources of the live reports holding Node `id`'s block (empty: not blocked).
async fn holders(daemon: &Daemon, token: Option<&str>, id: &str) -> Vec<String> {
    let (status, item) = item(daemon, token, id).await;
    if status != StatusCode::OK {
        return Vec::new();
    }
    match item["liveReports"].as_array() {
        Some(live) => live
            .iter()
            .map(|r| r["source"].as_str().unwrap_or_default().to_owned())
            .collect(),
        None => vec![item["source"].as_str().unwrap_or_default().to_owned()],
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_condition_held_past_its_hold_blocks_and_its_clearing_retracts() {
    let Some(kube) = KubeApiServer::start("blocklist-kube conditions") else {
        return;
    };
    for n in ["n1", "n2", "n3", "n4"] {
        create_node(&kube, n, &json!([]));
    }
    let mut ws = Workspace::new();
    let tokens = ws.tmp.path().join("tokens");
    std::fs::write(
        &tokens,
        "enforcer-token name=blocklist-kube role=enforcer\n\
         detector-token name=blocklist-kube role=detector\n\
         ops-token name=ops role=writer\n",
    )
    .unwrap();
    let daemon = ws.start(&["--token-file", tokens.to_str().unwrap()]);
    let (enforcer, detector) = (ws.tmp.path().join("enf"), ws.tmp.path().join("det"));
    std::fs::write(&enforcer, "enforcer-token\n").unwrap();
    std::fs::write(&detector, "detector-token\n").unwrap();
    let ops = Some("ops-token");

    // n3 is blocked by an operator first.
    let (status, body) = as_token(
        &daemon,
        ops,
        Method::POST,
        "/blocklist/nodes",
        Some(json!([item_json("n3", "MARK_BLOCKED", "psu")])),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    let log = ws.tmp.path().join("bridge.log");
    let flags = [
        FEED_ONLY,
        &[
            "--token-file",
            enforcer.to_str().unwrap(),
            "--detector-token-file",
            detector.to_str().unwrap(),
            "--condition",
            "KernelDeadlock,hold=2s",
            "--condition",
            "ReadonlyFilesystem,hold=2s,action=evacuate",
        ],
    ]
    .concat();
    let (_bridge, probes) = spawn_bridge(&kube, &daemon.url(""), &flags, &log);
    eventually("the bridge to be ready", || ready(&probes)).await;

    set_condition(&kube, "n1", "KernelDeadlock", "True");
    set_condition(&kube, "n2", "KernelDeadlock", "True");
    set_condition(&kube, "n3", "KernelDeadlock", "True");
    set_condition(&kube, "n4", "KernelDeadlock", "True");
    set_condition(&kube, "n4", "ReadonlyFilesystem", "True");
    // n2's clears before its hold ends: a blip, which blocks nothing.
    set_condition(&kube, "n2", "KernelDeadlock", "False");

    let kernel = format!("{SOURCE}KernelDeadlock");
    let readonly = format!("{SOURCE}ReadonlyFilesystem");
    eventually("n1 to be blocked by its condition and tainted", || async {
        holders(&daemon, ops, "n1").await == [kernel.clone()] && taints(&kube, "n1").1.is_some()
    })
    .await;
    let (_, n1) = item(&daemon, ops, "n1").await;
    assert!(
        n1["cause"]
            .as_str()
            .unwrap()
            .starts_with("KernelDeadlock=True (KernelDeadlockSeen): KernelDeadlock on n1"),
        "{n1}"
    );
    let details = &n1["liveReports"][0]["details"];
    assert_eq!(details["condition"], "KernelDeadlock", "{n1}");
    assert!(details["lastTransitionTime"].is_string(), "{n1}");
    eventually("n4 to be held by both conditions", || async {
        let held = holders(&daemon, ops, "n4").await;
        held.contains(&kernel) && held.contains(&readonly)
    })
    .await;
    assert_eq!(
        item(&daemon, ops, "n4").await.1["action"],
        "MARK_BLOCKED_AND_EVACUATE_TASKS"
    );
    eventually(
        "n3 to be held by the operator and the condition",
        || async { holders(&daemon, ops, "n3").await == ["ops".to_owned(), kernel.clone()] },
    )
    .await;
    assert_eq!(item(&daemon, ops, "n2").await.0, StatusCode::NOT_FOUND);
    eventually("the Event on n1", || async {
        event_reasons(&kube, "n1").contains(&"ConditionBlocked".to_owned())
    })
    .await;

    // Cleared: retracted. n1's block ends, n3's operator block stays, n4 needs both.
    set_condition(&kube, "n1", "KernelDeadlock", "False");
    set_condition(&kube, "n3", "KernelDeadlock", "False");
    set_condition(&kube, "n4", "KernelDeadlock", "False");
    eventually("n1's block to end and its taint to go", || async {
        item(&daemon, ops, "n1").await.0 == StatusCode::NOT_FOUND && taints(&kube, "n1").1.is_none()
    })
    .await;
    eventually("n3 to be the operator's alone", || async {
        holders(&daemon, ops, "n3").await == ["ops"]
    })
    .await;
    assert_eq!(taints(&kube, "n3").1.as_deref(), Some("MARK_BLOCKED"));
    eventually(
        "n4 to be held by the read-only filesystem alone",
        || async { holders(&daemon, ops, "n4").await == [readonly.clone()] },
    )
    .await;
    set_condition(&kube, "n4", "ReadonlyFilesystem", "False");
    eventually("n4's block to end", || async {
        item(&daemon, ops, "n4").await.0 == StatusCode::NOT_FOUND
    })
    .await;
    let (_, history) = item(&daemon, ops, "n1/history").await;
    assert_eq!(history[0]["ended"]["how"], "retracted", "{history}");
    eventually("the Event on n1", || async {
        event_reasons(&kube, "n1").contains(&"ConditionCleared".to_owned())
    })
    .await;
    assert_eq!(
        bridge_metric(
            &probes,
            r#"blocklist_kube_condition_reports_total{condition="KernelDeadlock",outcome="reported"}"#
        )
        .await,
        3.0,
        "n1, n3, n4: n2's blip reported nothing"
    );
}

/// An add element (merging into what is there).
fn item_json(id: &str, action: &str, cause: &str) -> Value {
    json!({"id": id, "action": action, "cause": cause, "allowMerge": true})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_storm_is_capped_a_new_leader_reports_nothing_twice_and_an_unreachable_daemon_changes_nothing(
) {
    let Some(kube) = KubeApiServer::start("blocklist-kube condition storm") else {
        return;
    };
    let names: Vec<String> = (0..10).map(|i| format!("n{i}")).collect();
    for n in &names {
        create_node(&kube, n, &json!([]));
    }
    let mut ws = Workspace::new();
    let daemon = ws.start(&[]);
    let (_, mut policy) = as_token(&daemon, None, Method::GET, "/policy", None).await;
    policy["nodes"]["maxBlocked"] = json!(3);
    let (status, body) = as_token(&daemon, None, Method::PUT, "/policy", Some(policy)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let start = |user: &str| {
        let log = ws.tmp.path().join(format!("{user}.log"));
        let flags = [
            FEED_ONLY,
            &[
                "--lease-duration",
                "4",
                "--identity",
                user,
                "--condition",
                "KernelDeadlock,hold=1s",
            ],
        ]
        .concat();
        spawn_bridge_as(&kube.kubeconfig_of(user), &daemon.url(""), &flags, &log)
    };
    let (a, a_probes) = start("bridge-a");
    eventually("bridge-a leads", || async {
        bridge_metric(&a_probes, "blocklist_kube_leader").await == 1.0
    })
    .await;
    let (_b, b_probes) = start("bridge-b");
    eventually("bridge-b is ready", || ready(&b_probes)).await;

    // A bad kernel on 7 of the 10 Nodes: the daemon's cap (3) decides, visibly.
    for n in &names[..7] {
        set_condition(&kube, n, "KernelDeadlock", "True");
    }
    let refused =
        r#"blocklist_kube_condition_reports_total{condition="KernelDeadlock",outcome="refused"}"#;
    eventually("3 blocked and 4 refused", || async {
        bridge_metric(&a_probes, refused).await == 4.0 && blocked(&daemon).await.len() == 3
    })
    .await;
    eventually("each refusal an Event on its Node", || async {
        let refusals = names[..7]
            .iter()
            .filter(|n| event_reasons(&kube, n).contains(&"ConditionRefused".to_owned()))
            .count();
        refusals == 4
    })
    .await;
    // Refusals are not asked again in a loop.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(bridge_metric(&a_probes, refused).await, 4.0);

    // The leader killed: the new one converges on the same 3, reporting nothing twice.
    drop(a);
    eventually("bridge-b leads", || async {
        bridge_metric(&b_probes, "blocklist_kube_leader").await == 1.0
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let held = blocked(&daemon).await;
    assert_eq!(held.len(), 3, "{held:?}");
    for block in &held {
        let id = block["id"].as_str().unwrap();
        let (_, item) = item(&daemon, None, id).await;
        assert_eq!(item["reportCount"], 1, "one report each: {item}");
        assert!(taints(&kube, id).1.is_some(), "{id} tainted");
    }

    // The daemon down: a cleared condition and a new one change nothing on the Nodes.
    // (Paused, not killed, so it comes back at the same address; on etcd, past its 2 s
    // lease, so it comes back as a candidate that steps down and wins the key again.)
    daemon_down_and_back(&kube, &daemon, held[0]["id"].as_str().unwrap()).await;
    for n in &names[..10] {
        set_condition(&kube, n, "KernelDeadlock", "False");
    }
    eventually("every block to end", || async {
        blocked(&daemon).await.is_empty()
    })
    .await;
}

/// Pauses the daemon, clears `blocked_id`'s condition and makes n9's, sees nothing change
/// on the Nodes, resumes it and sees the retraction catch up.
async fn daemon_down_and_back(kube: &KubeApiServer, daemon: &Daemon, blocked_id: &str) {
    signal(daemon.pid(), "-STOP");
    set_condition(kube, blocked_id, "KernelDeadlock", "False");
    set_condition(kube, "n9", "KernelDeadlock", "True");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(taints(kube, blocked_id).1.is_some(), "still tainted");
    assert!(taints(kube, "n9").1.is_none(), "not tainted");
    // Back: the retraction catches up.
    signal(daemon.pid(), "-CONT");
    eventually("the cleared Node to be unblocked and untainted", || async {
        item(daemon, None, blocked_id).await.0 == StatusCode::NOT_FOUND
            && taints(kube, blocked_id).1.is_none()
    })
    .await;
}

/// The node items the daemon holds.
async fn blocked(daemon: &Daemon) -> Vec<Value> {
    let (_, list) = as_token(daemon, None, Method::GET, "/blocklist/nodes", None).await;
    list.as_array().cloned().unwrap_or_default()
}
