//! Evacuation against a real kube-apiserver and a real daemon: a node blocked with
//! `MARK_BLOCKED_AND_EVACUATE_TASKS` loses exactly its work through the Eviction API, at
//! the pace asked, a PodDisruptionBudget's refusals wait and are honoured, an unblock or a
//! downgrade stops it, a task manager's evacuation evicts its pod, and a storm of
//! evacuating nodes keeps the cluster-wide pace and the bound on nodes emptied at once.
//!
//! No kubelet runs: the test plays its part ([`Kubelets`], [`let_go`]) — an evicted pod
//! keeps Kubernetes' default grace period and stays terminating until the test deletes
//! it. No disruption controller runs: the test writes each budget's status
//! ([`allow_disruptions`]); the API server decrements it on each eviction itself.

#[path = "../../../tests/common/mod.rs"]
mod common;
mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use support::workload::*;
use support::*;

const EVACUATE: &str = "MARK_BLOCKED_AND_EVACUATE_TASKS";

/// The bridge of one test, running: its daemon, the process (bind `_bridge` where it is
/// taken apart: dropped, it kills the bridge), its probes and its log.
struct Started {
    daemon: Daemon,
    _bridge: Running,
    probes: String,
    log: std::path::PathBuf,
}

/// A daemon started with `daemon_args`, and the bridge (as `user`, one of the named
/// administrators, or the administrator) with `flags` after [`FEED_ONLY`], once it has
/// registered `taskmanagers` task managers.
async fn start(
    kube: &KubeApiServer,
    ws: &mut Workspace,
    daemon_args: &[&str],
    flags: &[&str],
    user: Option<&str>,
    taskmanagers: usize,
) -> Started {
    let daemon = ws.start(daemon_args);
    let log = ws.tmp.path().join("bridge.log");
    let flags = [FEED_ONLY, flags].concat();
    let kubeconfig = match user {
        Some(user) => kube.kubeconfig_of(user),
        None => kube.kubeconfig("admin", ADMIN_TOKEN),
    };
    let (bridge, probes) = spawn_bridge_as(&kubeconfig, &daemon.url(""), &flags, &log);
    eventually("the bridge registered the task managers", || {
        registered(&daemon, taskmanagers)
    })
    .await;
    Started {
        daemon,
        _bridge: bridge,
        probes,
        log,
    }
}

/// The bridge's status of node `id` in the daemon: its detail.
async fn status_detail(daemon: &Daemon, kind: &str, id: &str) -> String {
    let (_, body) = daemon.get(&format!("/blocklist/{kind}/{id}")).await;
    body["enforcement"]["blocklist-kube"]["detail"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn block(daemon: &Daemon, kind: &str, id: &str, action: &str) {
    let (status, body) = daemon
        .post(
            &format!("/blocklist/{kind}"),
            json!([item(id, action, "test")]),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

/// Pods of `node` not yet gone, by name.
fn names_on(kube: &KubeApiServer, node: &str) -> BTreeSet<String> {
    pods(kube)
        .into_iter()
        .filter(|p| p.node == node)
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_blocked_with_evacuation_loses_exactly_its_work_at_the_pace() {
    let Some(kube) = KubeApiServer::start("blocklist-kube evacuation") else {
        return;
    };
    let kube = Arc::new(kube);
    create_node(&kube, "n1", &json!([]));
    create_node(&kube, "n2", &json!([]));
    create_namespace(&kube, "flink");
    create_namespace(&kube, "other");
    let tm = taskmanager_labels();
    for name in ["tm-1", "tm-2", "tm-3"] {
        taskmanager(&kube, name, "n1");
    }
    taskmanager(&kube, "tm-4", "n2");
    let daemon_set = json!({"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
        "name": "agent", "uid": "6f1f7d3c-0000-4000-8000-000000000001", "controller": true}]});
    create_pod(&kube, "flink", "agent", "n1", &tm, &daemon_set, &json!({}));
    let mirror = json!({"annotations": {"kubernetes.io/config.mirror": "abc"}});
    create_pod(&kube, "flink", "static", "n1", &tm, &mirror, &json!({}));
    let tolerates = json!({"tolerations": [{"key": KEY, "operator": "Exists"}]});
    create_pod(
        &kube,
        "flink",
        "tolerant",
        "n1",
        &tm,
        &json!({}),
        &tolerates,
    );
    create_pod(
        &kube,
        "flink",
        "web",
        "n1",
        &json!({"app": "web"}),
        &json!({}),
        &json!({}),
    );
    create_pod(&kube, "other", "tm-x", "n1", &tm, &json!({}), &json!({}));
    let _kubelets = Kubelets::start(&kube);

    let mut ws = Workspace::new();
    // Every pod of flink the task managers' selector matches is registered.
    let flags = ["--namespace", "flink", "--evictions-per-minute", "120"];
    let Started {
        daemon,
        probes,
        log,
        _bridge,
    } = start(&kube, &mut ws, &[], &flags, None, 7).await;

    block(&daemon, "nodes", "n1", EVACUATE).await;
    eventually("n1's work evicted and gone", || async {
        evicted(&kube).len() == 3 && names_on(&kube, "n1").len() == 5
    })
    .await;
    eventually("n1's status says it is evacuated", || async {
        status_detail(&daemon, "nodes", "n1")
            .await
            .contains("evacuated at")
    })
    .await;
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        evicted(&kube).into_iter().collect::<BTreeSet<_>>(),
        ["flink/tm-1", "flink/tm-2", "flink/tm-3"]
            .map(String::from)
            .into(),
        "{}",
        log_text()
    );
    assert_eq!(
        names_on(&kube, "n1"),
        ["flink/agent", "flink/static", "flink/tolerant", "flink/web", "other/tm-x"]
            .map(String::from)
            .into(),
        "the DaemonSet's, the mirror, the tolerating, the unmatched pods and those of another namespace stay"
    );
    assert_eq!(names_on(&kube, "n2"), ["flink/tm-4".to_owned()].into());
    assert_paced(&evictions(&kube), 0.5);
    let annotation = &node(&kube, "n1")["metadata"]["annotations"]["blocklistd.io/evacuation"];
    assert!(
        annotation
            .as_str()
            .is_some_and(|a| a.starts_with("evacuated at ")),
        "{annotation}"
    );
    assert!(event_reasons(&kube, "n1").contains(&"Evacuated".to_owned()));
    eventually("an Evicted Event on each evicted pod", || async {
        events_about(&kube, "flink", "Pod")
            .iter()
            .filter(|(_, r)| r == "Evicted")
            .count()
            == 3
    })
    .await;
    assert_eq!(
        bridge_metric(
            &probes,
            r#"blocklist_kube_evictions_total{outcome="evicted"}"#
        )
        .await,
        3.0
    );
}

/// A budget that allows one disruption at a time: the bridge's evictions wait on its 429s
/// and go on as the test lets each evicted pod go; never two of its pods are disrupted at
/// once, and the bridge deletes nothing itself.
#[tokio::test(flavor = "multi_thread")]
async fn a_budget_allowing_one_disruption_is_never_violated() {
    let Some(kube) = KubeApiServer::start("blocklist-kube budget") else {
        return;
    };
    create_node(&kube, "n1", &json!([]));
    create_namespace(&kube, "flink");
    for i in 1..=4 {
        taskmanager(&kube, &format!("tm-{i}"), "n1");
    }
    create_budget(&kube, "flink", "job", "job");
    allow_disruptions(&kube, "flink", "job", 1, 4);
    let mut ws = Workspace::new();
    let flags = ["--namespace", "flink", "--evictions-per-minute", "6000"];
    let Started {
        daemon,
        probes,
        log,
        _bridge,
    } = start(&kube, &mut ws, &[], &flags, Some("bridge-a"), 4).await;
    block(&daemon, "nodes", "n1", EVACUATE).await;

    let mut saw_waiting = false;
    for left in (0..4).rev() {
        // One pod evicted, and the budget's next refusal seen: the bridge waits on it.
        let refusals = evictions(&kube).iter().filter(|e| e.code == 429).count();
        eventually("one pod evicted", || async {
            pods(&kube).iter().any(|p| p.terminating)
        })
        .await;
        if left > 0 {
            eventually("the budget refuses the next eviction", || async {
                evictions(&kube).iter().filter(|e| e.code == 429).count() > refusals
            })
            .await;
            saw_waiting |= status_detail(&daemon, "nodes", "n1")
                .await
                .contains("waiting on a budget");
        }
        let terminating: Vec<Listed> = pods(&kube).into_iter().filter(|p| p.terminating).collect();
        assert_eq!(
            terminating.len(),
            1,
            "the budget allows one disruption: {terminating:?}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        // The kubelet finishes it; the disruption controller allows the next.
        let_go(&kube, "flink", &terminating[0].name);
        allow_disruptions(&kube, "flink", "job", 1, left);
    }
    eventually("n1 is empty", || async { names_on(&kube, "n1").is_empty() }).await;
    eventually("n1's status says it is evacuated", || async {
        status_detail(&daemon, "nodes", "n1")
            .await
            .contains("evacuated at")
    })
    .await;
    assert!(saw_waiting, "the status said pods waited on the budget");
    assert!(
        bridge_metric(
            &probes,
            r#"blocklist_kube_evictions_total{outcome="budget-refused"}"#
        )
        .await
            >= 3.0
    );
    assert!(events_about(&kube, "flink", "Pod")
        .iter()
        .any(|(_, r)| r == "EvictionWaiting"));
    let by_bridge = |verb: &str| {
        kube.audit()
            .into_iter()
            .filter(|e| e["user"]["username"] == "bridge-a" && e["verb"] == verb)
            .filter(|e| e["objectRef"]["resource"] == "pods")
            .count()
    };
    assert_eq!(by_bridge("delete"), 0, "the bridge never deletes a pod");
    assert_eq!(evicted(&kube).len(), 4);
}

/// An unblock, and a downgrade to `MARK_BLOCKED`, stop a node's evacuation: no eviction
/// of its pods after the change's revision reached the bridge.
#[tokio::test(flavor = "multi_thread")]
async fn unblocking_or_downgrading_stops_the_evacuation() {
    let Some(kube) = KubeApiServer::start("blocklist-kube stop") else {
        return;
    };
    let kube = Arc::new(kube);
    create_namespace(&kube, "flink");
    for node in ["n1", "n2"] {
        create_node(&kube, node, &json!([]));
        for i in 1..=6 {
            taskmanager(&kube, &format!("{node}-tm-{i}"), node);
        }
    }
    let _kubelets = Kubelets::start(&kube);
    let mut ws = Workspace::new();
    let flags = [
        "--evictions-per-minute",
        "60",
        "--max-evacuating-nodes",
        "2",
    ];
    let Started {
        daemon,
        probes,
        _bridge,
        ..
    } = start(&kube, &mut ws, CAPS_OPEN, &flags, None, 12).await;
    block(&daemon, "nodes", "n1", EVACUATE).await;
    block(&daemon, "nodes", "n2", EVACUATE).await;
    let of = |node: &str| {
        let prefix = format!("flink/{node}-");
        evicted(&kube)
            .into_iter()
            .filter(|p| p.starts_with(&prefix))
            .count()
    };
    eventually("evictions on both nodes", || async {
        of("n1") >= 1 && of("n2") >= 1
    })
    .await;

    // n1 downgraded, n2 unblocked.
    let (status, body) = daemon
        .call(
            reqwest::Method::PATCH,
            "/blocklist/nodes/n1",
            Some(json!({"action": "MARK_BLOCKED"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = daemon.delete("/blocklist/nodes/n2").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let revision = daemon.revision().await;
    #[expect(clippy::cast_precision_loss, reason = "a small revision")]
    let revision = revision as f64;
    eventually("the changes reached the bridge", || async {
        bridge_metric(&probes, "blocklist_kube_feed_revision").await >= revision
    })
    .await;
    let (n1, n2) = (of("n1"), of("n2"));
    assert!(n1 + n2 < 12, "the evacuations were stopped midway");
    // Three paces of the evictions' rate: none comes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        (of("n1"), of("n2")),
        (n1, n2),
        "no eviction after the change"
    );
    assert_eq!(taints(&kube, "n1").1.as_deref(), Some("MARK_BLOCKED"));
    eventually("n1's progress annotation is taken off", || async {
        node(&kube, "n1")["metadata"]["annotations"]["blocklistd.io/evacuation"].is_null()
    })
    .await;
}

/// A task manager blocked with evacuation has its pod evicted; one blocked with
/// `MARK_BLOCKED` keeps it.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_manager_blocked_with_evacuation_loses_its_pod_and_only_then() {
    let Some(kube) = KubeApiServer::start("blocklist-kube tm evacuation") else {
        return;
    };
    let kube = Arc::new(kube);
    create_node(&kube, "n1", &json!([]));
    create_namespace(&kube, "flink");
    taskmanager(&kube, "job-taskmanager-1-1", "n1");
    taskmanager(&kube, "job-taskmanager-1-2", "n1");
    let _kubelets = Kubelets::start(&kube);
    let mut ws = Workspace::new();
    let Started {
        daemon, _bridge, ..
    } = start(&kube, &mut ws, &[], &[], None, 2).await;
    block(
        &daemon,
        "taskmanagers",
        "job-taskmanager-1-2",
        "MARK_BLOCKED",
    )
    .await;
    block(&daemon, "taskmanagers", "job-taskmanager-1-1", EVACUATE).await;
    eventually("the evacuated task manager's pod is gone", || async {
        !names_on(&kube, "n1").contains("flink/job-taskmanager-1-1")
    })
    .await;
    // The other was labelled blocked after its block (the feed's order), so the bridge
    // has seen both.
    let labelled = || {
        kube.curl(&[
            "-sf",
            &format!(
                "{}/api/v1/namespaces/flink/pods/job-taskmanager-1-2",
                kube.url
            ),
        ])
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .is_some_and(|p| p["metadata"]["labels"][KEY] == "MARK_BLOCKED")
    };
    eventually("the other task manager's pod is labelled", || async {
        labelled()
    })
    .await;
    assert_eq!(evicted(&kube), ["flink/job-taskmanager-1-1".to_owned()]);
    assert!(names_on(&kube, "n1").contains("flink/job-taskmanager-1-2"));
}

/// A storm: 100 nodes blocked with evacuation at once (the daemon's caps forced open).
/// The evictions keep the cluster-wide pace, and never more than `--max-evacuating-nodes`
/// nodes are being emptied at once (a node is being emptied from its first eviction to
/// its last).
#[tokio::test(flavor = "multi_thread")]
async fn a_storm_of_evacuations_keeps_the_pace_and_the_bound_on_nodes() {
    let Some(kube) = KubeApiServer::start("blocklist-kube storm") else {
        return;
    };
    let kube = Arc::new(kube);
    create_namespace(&kube, "flink");
    const NODES: usize = 100;
    for n in 0..NODES {
        create_node(&kube, &format!("s{n:03}"), &json!([]));
        for i in 0..2 {
            taskmanager(&kube, &format!("s{n:03}-tm-{i}"), &format!("s{n:03}"));
        }
    }
    let _kubelets = Kubelets::start(&kube);
    let mut ws = Workspace::new();
    let flags = [
        "--evictions-per-minute",
        "1200",
        "--max-evacuating-nodes",
        "3",
    ];
    let Started {
        daemon, _bridge, ..
    } = start(&kube, &mut ws, CAPS_OPEN, &flags, None, 2 * NODES).await;
    let items: Vec<Value> = (0..NODES)
        .map(|n| item(&format!("s{n:03}"), EVACUATE, "storm"))
        .collect();
    let (status, body) = daemon.post("/blocklist/nodes", json!(items)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // 200 evictions at 20 a second: about 10 s.
    let started = Instant::now();
    while evicted(&kube).len() < 2 * NODES {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{} of {} evicted",
            evicted(&kube).len(),
            2 * NODES
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let all = evictions(&kube);
    assert_paced(&all, 60.0 / 1200.0);
    // Each node's span, from its first eviction to its last: at most 3 overlap.
    let mut spans: std::collections::BTreeMap<String, (f64, f64)> =
        std::collections::BTreeMap::new();
    for e in all.iter().filter(|e| e.code == 201) {
        let node = e.pod.split("-tm-").next().unwrap_or_default().to_owned();
        let span = spans.entry(node).or_insert((e.at, e.at));
        span.1 = e.at;
    }
    for (node, (start, _)) in &spans {
        let open = spans
            .values()
            .filter(|(s, e)| s <= start && start <= e)
            .count();
        assert!(
            open <= 3,
            "{open} nodes being emptied when {node} started: {spans:?}"
        );
    }
}
