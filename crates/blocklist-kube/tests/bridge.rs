//! The bridge against a real kube-apiserver and a real daemon: a blocked node gets the
//! bridge's taint and annotations and keeps every other taint, an unblocked one loses
//! exactly what the bridge wrote, a reconcile of a cluster that already matches makes no
//! write (counted by the API server itself, `apiserver_request_total`), a running bridge
//! follows the change feed, and the task managers' pods are the daemon's membership.

#[path = "../../../tests/common/mod.rs"]
mod common;
mod support;

use blocklist::client::TlsFiles;
use blocklist_kube::bridge::Bridge;
use blocklist_kube::daemon::Daemon as DaemonClient;
use blocklist_kube::events::Why;
use blocklist_kube::marking::{Block, Marking};
use blocklist_kube::nodes::{self, Outcome};
use common::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use reqwest::StatusCode;
use serde_json::{json, Value};
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn blocked_nodes_are_tainted_unblocked_ones_are_not_and_other_taints_stay() {
    let Some(kube) = KubeApiServer::start("blocklist-kube taints") else {
        return;
    };
    let foreign = json!({"key": "example.com/maintenance", "effect": "NoExecute"});
    create_node(&kube, "n1", &json!([]));
    create_node(&kube, "n2", &json!([foreign]));
    let n2_before = taints(&kube, "n2").0;
    let mut ws = Workspace::new();
    let daemon = ws.start(&[]);
    let (status, body) = daemon
        .post(
            "/blocklist/nodes",
            json!([item("n1", "MARK_BLOCKED", "disk")]),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    // A dry run changes nothing (the API server checks each patch and stores none).
    let patches = node_patches(&kube);
    bridge_once_with(&kube, &daemon, &["--dry-run"]);
    assert_eq!(taints(&kube, "n1").1, None);
    assert_eq!(
        node_patches(&kube),
        patches + 1.0,
        "one patch, sent as a dry run"
    );
    assert!(event_reasons(&kube, "n1").is_empty());

    bridge_once(&kube, &daemon);
    assert_eq!(taints(&kube, "n1").1.as_deref(), Some("MARK_BLOCKED"));
    let annotations = &node(&kube, "n1")["metadata"]["annotations"];
    assert_eq!(annotations["blocklistd.io/cause"], "disk", "{annotations}");
    assert_eq!(
        annotations["blocklistd.io/end"], "permanent",
        "{annotations}"
    );
    assert_eq!(taints(&kube, "n2"), (n2_before.clone(), None));

    let (status, body) = daemon
        .post(
            "/blocklist/nodes",
            json!([item("n2", "MARK_BLOCKED_AND_EVACUATE_TASKS", "net")]),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = daemon.delete("/blocklist/nodes/n1").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    bridge_once(&kube, &daemon);
    assert_eq!(taints(&kube, "n1").1, None);
    let annotations = &node(&kube, "n1")["metadata"]["annotations"];
    assert!(
        annotations
            .as_object()
            .is_none_or(|a| a.keys().all(|k| !k.starts_with("blocklistd.io/"))),
        "{annotations}"
    );
    assert_eq!(
        taints(&kube, "n2"),
        (
            n2_before,
            Some("MARK_BLOCKED_AND_EVACUATE_TASKS".to_owned())
        )
    );

    // Everything matches: a reconcile reads, and writes nothing.
    let patches = node_patches(&kube);
    bridge_once(&kube, &daemon);
    assert_eq!(node_patches(&kube), patches);
}

/// The race the resourceVersion is for, forced: another client adds a taint after the
/// bridge read the Node and before its patch. The patch is refused (409), the Node read
/// again, and both taints end up on it.
#[tokio::test(flavor = "multi_thread")]
async fn a_taint_added_between_the_bridges_read_and_its_patch_survives() {
    let Some(kube) = KubeApiServer::start("blocklist-kube race") else {
        return;
    };
    create_node(&kube, "n1", &json!([]));
    let api: Api<Node> = Api::all(client(&kube).await);
    let read = api.get("n1").await.expect("the Node");
    let other = json!({"spec": {"taints": [{"key": "example.com/other", "effect": "NoSchedule"}]}});
    merge_patch(&kube, "/api/v1/nodes/n1", &other).expect("the other client's patch");
    let conflicts = node_patches_answered(&kube, "409");
    let marking = Marking {
        taint_key: KEY.into(),
        annotation_prefix: "blocklistd.io/".into(),
        dry_run: false,
    };
    let block = Block {
        id: "n1".into(),
        action: "MARK_BLOCKED".into(),
        cause: "disk".into(),
        source: "test".into(),
        end_timestamp: i64::MAX,
        revision: 1,
        ..Block::default()
    };
    // No daemon: this bridge only patches.
    let daemon = DaemonClient::new(&["http://127.0.0.1:9".into()], None, &TlsFiles::default())
        .expect("a client");
    let bridge = Bridge::new("test".into(), daemon, &client(&kube).await, marking, 100);
    bridge
        .desired
        .replace(std::collections::HashMap::from([("n1".to_owned(), block)]));
    let outcome = nodes::apply(&bridge, read, Why::Blocklist).await;
    assert_eq!(outcome, Outcome::Written);
    assert_eq!(node_patches_answered(&kube, "409"), conflicts + 1.0);
    let (others, ours) = taints(&kube, "n1");
    assert_eq!(ours.as_deref(), Some("MARK_BLOCKED"));
    assert!(
        others.iter().any(|t| t["key"] == "example.com/other"),
        "{others:?}"
    );
}

/// The bridge running (not `--once`): a block reaches its Node through the change feed,
/// long before the resync (an hour here); a change in place (an upgrade to evacuation, a
/// downgrade) moves the taint's value and the annotations; an expiry takes the taint off;
/// a taint taken off by hand is put back, a Node
/// created after its block gets its taint, and an unblock takes the taint off as fast;
/// each is an Event on the Node.
#[tokio::test(flavor = "multi_thread")]
async fn a_running_bridge_follows_the_feed() {
    let Some(kube) = KubeApiServer::start("blocklist-kube feed") else {
        return;
    };
    create_node(&kube, "n1", &json!([]));
    let mut ws = Workspace::new();
    let daemon = ws.start(&[]);
    let log = ws.tmp.path().join("bridge.log");
    let (bridge, _) = spawn_bridge(&kube, &daemon.url(""), FEED_ONLY, &log);
    // Once it has made its first pass (nothing to do), it follows the feed.
    eventually("the bridge's first reconcile", || async {
        std::fs::read_to_string(&log).is_ok_and(|text| text.contains("reconciled"))
    })
    .await;
    let started = std::time::Instant::now();
    let (status, body) = daemon
        .post(
            "/blocklist/nodes",
            json!([item("n1", "MARK_BLOCKED", "disk")]),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    eventually("the taint is on n1", || async {
        taints(&kube, "n1").1.as_deref() == Some("MARK_BLOCKED")
    })
    .await;
    println!("block to taint: {:?}", started.elapsed());
    eventually("the Event that says who blocked n1", || async {
        event_reasons(&kube, "n1").contains(&"Blocked".to_owned())
    })
    .await;

    // Changed in place: the taint's value and the annotations follow, up and down.
    let annotation = |name: &str| {
        node(&kube, "n1")["metadata"]["annotations"][format!("blocklistd.io/{name}")].clone()
    };
    for (action, cause) in [
        ("MARK_BLOCKED_AND_EVACUATE_TASKS", "fan"),
        ("MARK_BLOCKED", "psu"),
    ] {
        let (status, body) = daemon
            .call(
                reqwest::Method::PATCH,
                "/blocklist/nodes/n1",
                Some(json!({"action": action, "cause": cause})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        eventually(
            "the taint and the annotations follow the change",
            || async {
                taints(&kube, "n1").1.as_deref() == Some(action)
                    && annotation("cause") == body["cause"]
            },
        )
        .await;
        assert_eq!(annotation("revision"), body["revision"].to_string());
    }

    // A block that expires: its taint goes within the sweeper's lag and the bridge's.
    create_node(&kube, "n2", &json!([]));
    daemon
        .post(
            "/blocklist/nodes",
            json!([{"id": "n2", "action": "MARK_BLOCKED", "cause": "brief", "timeout": 1500}]),
        )
        .await;
    eventually("n2 tainted", || async { taints(&kube, "n2").1.is_some() }).await;
    eventually("n2 untainted once its block expired", || async {
        taints(&kube, "n2").1.is_none()
    })
    .await;
    assert!(event_reasons(&kube, "n2").contains(&"Unblocked".to_owned()));

    // Taken off by hand while the block stands: put back.
    merge_patch(&kube, "/api/v1/nodes/n1", &json!({"spec": {"taints": []}}))
        .expect("the hand's patch");
    eventually("the taint is back on n1", || async {
        taints(&kube, "n1").1.as_deref() == Some("MARK_BLOCKED")
    })
    .await;
    eventually("the Event that says how to unblock n1", || async {
        event_reasons(&kube, "n1").contains(&"TaintRestored".to_owned())
    })
    .await;
    // A Node that appears after its block gets its taint.
    let (status, body) = daemon
        .post(
            "/blocklist/nodes",
            json!([item("n9", "MARK_BLOCKED", "late")]),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    create_node(&kube, "n9", &json!([]));
    eventually("the taint is on the new n9", || async {
        taints(&kube, "n9").1.as_deref() == Some("MARK_BLOCKED")
    })
    .await;
    eventually("n9's Event says blocked, not restored", || async {
        event_reasons(&kube, "n9") == ["Blocked"]
    })
    .await;

    let (status, body) = daemon.delete("/blocklist/nodes/n1").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    eventually("the taint is off n1", || async {
        taints(&kube, "n1").1.is_none()
    })
    .await;
    drop(bridge);
}

/// Membership from the pods: 200 task manager pods bound to 20 Nodes are registered with
/// the daemon on their Nodes, so its check of a task manager on a blocked Node says
/// blocked; a task manager blocked directly has its pod labelled until it is unblocked;
/// pods deleted are unregistered; a pod the selector does not match is not a task manager.
#[tokio::test(flavor = "multi_thread")]
async fn task_manager_pods_are_the_daemons_membership() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{DeleteParams, PostParams};

    let Some(kube) = KubeApiServer::start("blocklist-kube membership") else {
        return;
    };
    let client = client(&kube).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pod = |name: &str, node: &str, labels: Value| -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "tm", "image": "flink"}]},
        }))
        .expect("a pod")
    };
    let flink =
        json!({"type": "flink-native-kubernetes", "component": "taskmanager", "app": "job"});
    for i in 0..200 {
        let name = format!("job-taskmanager-1-{i}");
        let node = format!("n{}", i % 20);
        pods.create(&PostParams::default(), &pod(&name, &node, flink.clone()))
            .await
            .expect("create a pod");
    }
    pods.create(
        &PostParams::default(),
        &pod("not-a-tm", "n0", json!({"component": "jobmanager"})),
    )
    .await
    .expect("create a pod");

    let mut ws = Workspace::new();
    let daemon = ws.start(&[]);
    let log = ws.tmp.path().join("bridge.log");
    let (bridge, _) = spawn_bridge(
        &kube,
        &daemon.url(""),
        &[
            "--namespace",
            "default",
            "--max-tainted-nodes-percent",
            "100",
        ],
        &log,
    );
    eventually("200 task managers registered", || async {
        daemon
            .get("/taskmanagers")
            .await
            .1
            .as_array()
            .is_some_and(|a| a.len() == 200)
    })
    .await;
    let all = daemon.get("/taskmanagers").await.1;
    for registration in all.as_array().expect("a list") {
        let id = registration["id"].as_str().expect("an id");
        let i: usize = id
            .rsplit('-')
            .next()
            .and_then(|n| n.parse().ok())
            .expect("a number");
        assert_eq!(
            registration["node"],
            format!("n{}", i % 20),
            "{registration}"
        );
    }
    let (status, body) = daemon
        .post(
            "/blocklist/nodes",
            json!([item("n3", "MARK_BLOCKED", "disk")]),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, verdict) = daemon
        .get("/blocklist/check/taskmanagers/job-taskmanager-1-3")
        .await;
    assert_eq!(verdict["blocked"], true, "{verdict}");

    // A task manager blocked directly: its pod carries the bridge's label, until unblocked.
    let label = |pods: Api<Pod>| async move {
        let pod = pods.get("job-taskmanager-1-15").await.expect("the pod");
        pod.metadata.labels.and_then(|mut l| l.remove(KEY))
    };
    daemon
        .post(
            "/blocklist/taskmanagers",
            json!([item(
                "job-taskmanager-1-15",
                "MARK_BLOCKED_AND_EVACUATE_TASKS",
                "slow"
            )]),
        )
        .await;
    eventually("the blocked task manager's pod labelled", || async {
        label(pods.clone()).await.as_deref() == Some("MARK_BLOCKED_AND_EVACUATE_TASKS")
    })
    .await;
    daemon
        .delete("/blocklist/taskmanagers/job-taskmanager-1-15")
        .await;
    eventually("its label taken off", || async {
        label(pods.clone()).await.is_none()
    })
    .await;

    for i in 0..10 {
        pods.delete(
            &format!("job-taskmanager-1-{i}"),
            &DeleteParams::default().grace_period(0),
        )
        .await
        .expect("delete a pod");
    }
    eventually("the deleted pods unregistered", || async {
        daemon
            .get("/taskmanagers")
            .await
            .1
            .as_array()
            .is_some_and(|a| a.len() == 190)
    })
    .await;
    drop(bridge);
}

/// Three daemons on one etcd prefix, the bridge given all three: the writer killed, the
/// bridge goes on following another from where it was, and blocks and unblocks made
/// through the replicas reach the Nodes.
#[tokio::test(flavor = "multi_thread")]
async fn the_bridge_follows_another_daemon_when_the_writer_dies() {
    let Some(kube) = KubeApiServer::start("blocklist-kube failover") else {
        return;
    };
    let Some(cluster) = EtcdCluster::start(1, "blocklist-kube failover") else {
        return;
    };
    for name in ["n1", "n2"] {
        create_node(&kube, name, &json!([]));
    }
    let ws = Workspace::new();
    let flags = cluster.daemon_flags("/t/", LEASE_SECS, 1_000);
    let (writer, [first, second]) = three_daemons(&ws, &flags).await;
    let urls = [&writer, &first, &second].map(|d| d.url("")).join(",");
    let log = ws.tmp.path().join("bridge.log");
    let (bridge, _) = spawn_bridge(&kube, &urls, FEED_ONLY, &log);
    add_acknowledged(&writer, "n1").await;
    eventually("the taint is on n1", || async {
        taints(&kube, "n1").1.as_deref() == Some("MARK_BLOCKED")
    })
    .await;

    writer.kill9();
    add_acknowledged(&first, "n2").await;
    eventually(
        "the taint is on n2, blocked after the writer died",
        || async { taints(&kube, "n2").1.as_deref() == Some("MARK_BLOCKED") },
    )
    .await;
    loop {
        let (status, _) = second.delete("/blocklist/nodes/n1").await;
        if status == StatusCode::OK {
            break;
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    eventually("the taint is off n1", || async {
        taints(&kube, "n1").1.is_none()
    })
    .await;
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(log.contains("moving to the next"), "{log}");
    drop(bridge);
}

/// The bridge killed (-9) while blocks come and go, then started again: it converges, and
/// the pass after that writes nothing. The API server restarted under a running bridge:
/// it reconnects, and a block made meanwhile reaches its Node.
#[tokio::test(flavor = "multi_thread")]
async fn the_bridge_converges_after_its_own_kill_and_the_api_servers_restart() {
    let Some(mut kube) = KubeApiServer::start("blocklist-kube restarts") else {
        return;
    };
    for name in ["n1", "n2", "n3"] {
        create_node(&kube, name, &json!([]));
    }
    let mut ws = Workspace::new();
    let daemon = ws.start(&[]);
    let log = ws.tmp.path().join("bridge.log");
    let start = || spawn_bridge(&kube, &daemon.url(""), FEED_ONLY, &log).0;
    let bridge = start();
    let block = |id: &'static str| {
        let daemon = &daemon;
        async move {
            let (status, body) = daemon
                .post("/blocklist/nodes", json!([item(id, "MARK_BLOCKED", "c")]))
                .await;
            assert_eq!(status, StatusCode::CREATED, "{body}");
        }
    };
    block("n1").await;
    eventually("n1 tainted", || async { taints(&kube, "n1").1.is_some() }).await;

    drop(bridge); // SIGKILL
    block("n2").await;
    let (status, _) = daemon.delete("/blocklist/nodes/n1").await;
    assert_eq!(status, StatusCode::OK);
    let bridge = start();
    eventually("n1 untainted and n2 tainted", || async {
        taints(&kube, "n1").1.is_none() && taints(&kube, "n2").1.is_some()
    })
    .await;
    // Converged: a pass over everything writes nothing.
    let patches = node_patches(&kube);
    bridge_once(&kube, &daemon);
    assert_eq!(node_patches(&kube), patches);

    tokio::task::block_in_place(|| kube.restart());
    block("n3").await;
    eventually("n3 tainted after the API server's restart", || async {
        taints(&kube, "n3").1.is_some()
    })
    .await;
    drop(bridge);
}

/// A block acknowledged while the bridge's first full reconcile of a large cluster is
/// still marking its Nodes reaches its Node through the feed at once, not when that
/// reconcile ends (as at every leader change: the new leader's first reconcile).
#[tokio::test(flavor = "multi_thread")]
async fn a_block_during_the_first_reconcile_does_not_wait_for_it() {
    const NODES: usize = 1_200;
    const BLOCKED: usize = 1_000;
    let Some(kube) = KubeApiServer::start("blocklist-kube first reconcile") else {
        return;
    };
    let api: Api<Node> = Api::all(client(&kube).await);
    let names: Vec<String> = (0..NODES).map(|i| format!("n{i:04}")).collect();
    let made: Vec<_> = futures::stream::iter(names.iter().chain(&["late".to_owned()]))
        .map(|name| {
            let api = api.clone();
            let node: Node =
                serde_json::from_value(json!({"metadata": {"name": name}})).expect("a Node");
            async move { api.create(&kube::api::PostParams::default(), &node).await }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    assert!(made.iter().all(Result::is_ok), "every Node made");
    let mut ws = Workspace::new();
    let daemon = ws.start(&[]);
    let blocks: Vec<Value> = names[..BLOCKED]
        .iter()
        .map(|n| item(n, "MARK_BLOCKED", "disk"))
        .collect();
    let (status, body) = daemon.post("/blocklist/nodes", Value::Array(blocks)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    let log = ws.tmp.path().join("bridge.log");
    let (_bridge, probes) = spawn_bridge(&kube, &daemon.url(""), FEED_ONLY, &log);
    eventually("the first reconcile to taint blocked Nodes", || async {
        bridge_metric(&probes, "blocklist_kube_taints_applied_total").await >= 1.0
    })
    .await;
    // The Nodes not blocked when it listed were passed first: only the feed taints `late`.
    let (status, body) = daemon
        .post(
            "/blocklist/nodes",
            json!([item("late", "MARK_BLOCKED", "psu")]),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let acknowledged = std::time::Instant::now();
    eventually("late to be tainted", || async {
        taints(&kube, "late").1.is_some()
    })
    .await;
    let latency = acknowledged.elapsed();
    let marked = bridge_metric(&probes, "blocklist_kube_taints_applied_total").await;
    assert!(
        !ready(&probes).await,
        "late's taint waited for the reconcile to end: {latency:?} ({marked} tainted by then)"
    );
    eprintln!(
        "block → taint during the first reconcile: {latency:?} ({marked} of {BLOCKED} marked then)"
    );
    eventually("the first reconcile to end", || ready(&probes)).await;
    assert_eq!(
        bridge_metric(&probes, "blocklist_kube_nodes_tainted").await,
        (BLOCKED + 1) as f64
    );
}
