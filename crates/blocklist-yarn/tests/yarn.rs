//! `blocklist-yarn` against a real ResourceManager (Hadoop 3.4.3's `MiniYARNCluster`, node
//! labels on, NodeManagers on hosts of their own: `tests/common/yarn.rs`) and a real daemon,
//! on sled or on etcd (`BLOCKLISTD_TEST_STORE`). Where containers go is the scheduler's
//! decision, read from an application master that asks for them.
//!
//! The ResourceManager's own answers carry the JSON forms the bridge must read: one label
//! comes as an object, none as `{}`, a node without a label has no `nodeLabels`
//! (`crate::shape`'s unit tests have every form).
//!
//! Each test has a cluster of its own (about 320 MB and seconds of CPU to start); they take
//! turns ([`CLUSTER`]) so that two do not start at once on a small machine.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// One cluster at a time.
static CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Four NodeManagers: two on `worker-a`, one each on `worker-b` and `worker-c`.
const HOSTS: [&str; 4] = [
    "worker-a=127.0.0.2",
    "worker-a=127.0.0.2",
    "worker-b=127.0.0.3",
    "worker-c=127.0.0.4",
];

/// `blocklist-yarn` for `yarn` (unless `extra` names another ResourceManager) and the daemon
/// at `daemon` (`http://…`), reading the ResourceManager every 300 ms (the containers too),
/// no ceiling unless `extra` sets one.
fn bridge(dir: &Path, yarn: &Yarn, daemon: &str, extra: &[&str]) -> Sidecar {
    let mut args: Vec<String> = Vec::new();
    if !extra.contains(&"--resourcemanager") {
        args.extend(["--resourcemanager".to_owned(), yarn.rest.clone()]);
    }
    args.extend(
        [
            "--user",
            YARN_ADMIN,
            "--daemon",
            daemon,
            "--listen",
            "127.0.0.1:0",
            "--poll",
            "300ms",
            "--membership-poll",
            "300ms",
        ]
        .map(str::to_owned),
    );
    if !extra.contains(&"--max-labelled-nodes-percent") {
        args.extend(["--max-labelled-nodes-percent".to_owned(), "100".to_owned()]);
    }
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    Sidecar::spawn(
        Path::new(env!("CARGO_BIN_EXE_blocklist-yarn")),
        dir,
        "bridge",
        &args,
        "info,blocklist_yarn=debug",
    )
}

/// The partition of every NodeManager of `host`.
fn partitions_of(yarn: &Yarn, host: &str) -> Vec<Option<String>> {
    yarn.partitions()
        .into_iter()
        .filter(|(id, _)| id.starts_with(&format!("{host}:")))
        .map(|(_, p)| p)
        .collect()
}

/// Whether every NodeManager of `host` is in `partition` (`None`: the default one).
fn in_partition(yarn: &Yarn, host: &str, partition: Option<&str>) -> bool {
    let all = partitions_of(yarn, host);
    !all.is_empty() && all.iter().all(|p| p.as_deref() == partition)
}

/// The bridge's status of node `id` in the daemon: `(state, detail)`.
async fn status(daemon: &Daemon, id: &str) -> Option<(String, String)> {
    let (code, body) = daemon.get(&format!("/blocklist/nodes/{id}")).await;
    if code != StatusCode::OK {
        return None;
    }
    let s = &body["enforcement"]["blocklist-yarn"];
    Some((
        s["state"].as_str()?.to_owned(),
        s["detail"].as_str().unwrap_or_default().to_owned(),
    ))
}

async fn block(daemon: &Daemon, id: &str, action: &str) {
    let (code, body) = daemon
        .post("/blocklist/nodes", json!([item(id, action, "disk errors")]))
        .await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
}

async fn unblock(daemon: &Daemon, id: &str) {
    let (code, body) = daemon.delete(&format!("/blocklist/nodes/{id}")).await;
    assert_eq!(code, StatusCode::OK, "{body}");
}

/// The containers the daemon holds as task managers, by node.
async fn members(daemon: &Daemon) -> BTreeMap<String, usize> {
    let (_, all) = daemon.get("/taskmanagers").await;
    let mut by_node = BTreeMap::new();
    for r in all.as_array().cloned().unwrap_or_default() {
        if r["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("container_"))
        {
            *by_node
                .entry(r["node"].as_str().unwrap().to_owned())
                .or_insert(0) += 1;
        }
    }
    by_node
}

#[tokio::test(flavor = "multi_thread")]
async fn a_blocked_node_gets_no_new_container_and_gets_them_again_after_the_unblock() {
    let test = "a_blocked_node_gets_no_new_container_and_gets_them_again_after_the_unblock";
    let _turn = CLUSTER.lock().await;
    let Some(mut yarn) = Yarn::start(&HOSTS, test) else {
        return;
    };
    let mut ws = Workspace::new();
    let daemon = ws.start(&[]);
    let bridge = bridge(ws.tmp.path(), &yarn, &daemon.url(""), &[]);
    eventually("the bridge ready", || bridge.ready()).await;

    // Blocked: its NodeManager in the bridge's partition, which the bridge made.
    block(&daemon, "worker-c", "MARK_BLOCKED").await;
    eventually("worker-c labelled", || async {
        in_partition(&yarn, "worker-c", Some("blocklisted"))
    })
    .await;
    eventually("enforced", || async {
        status(&daemon, "worker-c")
            .await
            .is_some_and(|(s, d)| s == "enforced" && d.contains("worker-c:"))
    })
    .await;
    // The scheduler places nothing there: 12 containers of 1 GiB on the other three
    // NodeManagers of 4 GiB.
    let placed = yarn.ask(12);
    let hosts = Yarn::per_host(&placed);
    assert_eq!(hosts.get("worker-c"), None, "{placed}");
    assert_eq!(hosts.values().sum::<u64>(), 12, "{placed}");

    // Membership: each container a task manager on its host.
    eventually("the containers registered", || async {
        members(&daemon).await.values().sum::<usize>() == 12
    })
    .await;
    let by_node = members(&daemon).await;
    assert_eq!(
        by_node.keys().collect::<Vec<_>>(),
        ["worker-a", "worker-b"],
        "{by_node:?}"
    );
    assert_eq!(yarn.command("release")["released"], 12);
    eventually("the containers unregistered", || async {
        members(&daemon).await.is_empty()
    })
    .await;

    // Two NodeManagers on one host: a block of the host takes both.
    block(&daemon, "worker-a", "MARK_BLOCKED").await;
    eventually("both of worker-a labelled", || async {
        partitions_of(&yarn, "worker-a").len() == 2
            && in_partition(&yarn, "worker-a", Some("blocklisted"))
    })
    .await;
    // A host YARN does not know: no target.
    block(&daemon, "worker-z", "MARK_BLOCKED").await;
    eventually("worker-z no target", || async {
        status(&daemon, "worker-z")
            .await
            .is_some_and(|(s, _)| s == "noTarget")
    })
    .await;

    // Unblocked: back in the default partition, and given containers again.
    unblock(&daemon, "worker-c").await;
    unblock(&daemon, "worker-a").await;
    eventually("all back", || async {
        yarn.partitions().values().all(Option::is_none)
    })
    .await;
    let placed = yarn.ask(12);
    let hosts = Yarn::per_host(&placed);
    assert!(hosts.get("worker-c").is_some_and(|n| *n > 0), "{placed}");
    assert!(
        bridge
            .metric("blocklist_yarn_block_to_label_seconds_count")
            .await
            >= 2.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_of_another_partition_returns_to_it_also_across_a_restart_of_the_bridge() {
    let test = "a_node_of_another_partition_returns_to_it_also_across_a_restart_of_the_bridge";
    let _turn = CLUSTER.lock().await;
    let Some(yarn) = Yarn::start(&HOSTS, test) else {
        return;
    };
    // worker-b serves the exclusive partition `gpu`.
    let gpu = yarn
        .partitions()
        .into_keys()
        .find(|id| id.starts_with("worker-b:"))
        .unwrap();
    assert_eq!(
        yarn.post(
            "/add-node-labels",
            r#"{"nodeLabelInfo":[{"name":"gpu","exclusivity":true}]}"#
        ),
        "200"
    );
    assert_eq!(
        yarn.post(
            "/replace-node-to-labels",
            &json!({"nodeToLabels": [{"nodeId": gpu, "labels": ["gpu"]}]}).to_string()
        ),
        "200"
    );
    let mut ws = Workspace::new();
    let daemon = ws.start(&[]);
    let first = bridge(ws.tmp.path(), &yarn, &daemon.url(""), &[]);
    block(&daemon, "worker-b", "MARK_BLOCKED").await;
    eventually("worker-b in blocklisted-gpu", || async {
        in_partition(&yarn, "worker-b", Some("blocklisted-gpu"))
    })
    .await;
    eventually("enforced, saying where it came from", || async {
        status(&daemon, "worker-b")
            .await
            .is_some_and(|(s, d)| s == "enforced" && d.contains("from partition gpu"))
    })
    .await;

    // The bridge dies; the block ends meanwhile; the next bridge knows where it goes back.
    first.kill9();
    unblock(&daemon, "worker-b").await;
    let second = bridge(ws.tmp.path(), &yarn, &daemon.url(""), &[]);
    eventually("worker-b back in gpu", || async {
        in_partition(&yarn, "worker-b", Some("gpu"))
    })
    .await;
    assert!(yarn
        .partitions()
        .iter()
        .filter(|(id, _)| !id.starts_with("worker-b:"))
        .all(|(_, p)| p.is_none()));

    // A bridge killed once everything converged, and its successor: nothing to write.
    block(&daemon, "worker-c", "MARK_BLOCKED").await;
    eventually("worker-c labelled", || async {
        in_partition(&yarn, "worker-c", Some("blocklisted"))
    })
    .await;
    second.kill9();
    let third = bridge(ws.tmp.path(), &yarn, &daemon.url(""), &[]);
    eventually("the third ready", || third.ready()).await;
    tokio::time::sleep(Duration::from_secs(2)).await; // several passes
    let scrape = third.scrape().await;
    for call in ["add-node-labels", "replace-node-to-labels"] {
        for outcome in ["ok", "error"] {
            let series =
                format!("blocklist_yarn_rm_writes_total{{call=\"{call}\",outcome=\"{outcome}\"}}");
            assert_eq!(
                metric(&scrape, &series),
                0.0,
                "{series}:\n{}",
                third.log_text()
            );
        }
    }
    assert!(metric(&scrape, "blocklist_yarn_passes_total{outcome=\"ok\"}") >= 3.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ceiling_the_dry_run_a_restarted_resourcemanager_and_an_unreachable_daemon() {
    let test = "the_ceiling_the_dry_run_a_restarted_resourcemanager_and_an_unreachable_daemon";
    let _turn = CLUSTER.lock().await;
    let Some(mut yarn) = Yarn::start(&HOSTS, test) else {
        return;
    };
    let mut ws = Workspace::new();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let daemon = ws.start(&["--listen", &listen]);
    let url = daemon.url("");

    // The ceiling: 50% of four NodeManagers is two; worker-a has two, worker-b waits.
    let capped = bridge(
        ws.tmp.path(),
        &yarn,
        &url,
        &["--max-labelled-nodes-percent", "50"],
    );
    block(&daemon, "worker-a", "MARK_BLOCKED").await;
    eventually("worker-a labelled", || async {
        in_partition(&yarn, "worker-a", Some("blocklisted"))
    })
    .await;
    block(&daemon, "worker-b", "MARK_BLOCKED").await;
    eventually("worker-b held back", || async {
        status(&daemon, "worker-b")
            .await
            .is_some_and(|(s, _)| s == "heldBack")
    })
    .await;
    assert!(in_partition(&yarn, "worker-b", None));
    // An unblock makes room.
    unblock(&daemon, "worker-a").await;
    eventually("worker-b labelled once there is room", || async {
        in_partition(&yarn, "worker-b", Some("blocklisted"))
            && in_partition(&yarn, "worker-a", None)
    })
    .await;
    capped.kill9();

    // The dry run: reported, nothing written.
    let dry = bridge(ws.tmp.path(), &yarn, &url, &["--dry-run"]);
    block(&daemon, "worker-c", "MARK_BLOCKED").await;
    eventually("worker-c dry run", || async {
        status(&daemon, "worker-c")
            .await
            .is_some_and(|(s, d)| s == "dryRun" && d.starts_with("would be"))
    })
    .await;
    assert!(in_partition(&yarn, "worker-c", None));
    dry.kill9();

    // The ResourceManager restarted: the labels are in its store; the bridge goes on.
    let bridge = bridge(ws.tmp.path(), &yarn, &url, &[]);
    eventually("worker-c labelled", || async {
        in_partition(&yarn, "worker-c", Some("blocklisted"))
    })
    .await;
    let restarted = yarn.restart_rm();
    assert_eq!(restarted["restarted"], true, "{restarted}");
    assert!(in_partition(&yarn, "worker-c", Some("blocklisted")));
    unblock(&daemon, "worker-c").await;
    eventually("worker-c back after the restart", || async {
        in_partition(&yarn, "worker-c", None)
    })
    .await;

    // The daemon unreachable: a label taken off by hand is not put back from what the
    // bridge last knew; once the daemon answers again, it is.
    let worker_b = yarn
        .partitions()
        .into_keys()
        .find(|id| id.starts_with("worker-b:"))
        .unwrap();
    daemon.kill9();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        yarn.post(
            "/replace-node-to-labels",
            &json!({"nodeToLabels": [{"nodeId": worker_b, "labels": []}]}).to_string()
        ),
        "200"
    );
    tokio::time::sleep(Duration::from_secs(3)).await; // ten polls
    assert!(
        in_partition(&yarn, "worker-b", None),
        "{}",
        bridge.log_text()
    );
    let _daemon = ws.start(&["--listen", &listen]);
    eventually("worker-b labelled again", || async {
        in_partition(&yarn, "worker-b", Some("blocklisted"))
    })
    .await;
}

/// A proxy in front of the ResourceManager that forwards every request but changes the
/// body of each label write into a form the ResourceManager answers 200 and ignores (the
/// wrapper `{"<name>Info": …}`, as YARN.md records): a write accepted and not applied.
async fn lying_proxy(rest: String) -> String {
    use axum::body::Bytes;
    use axum::http::{Method, Uri};
    let client = reqwest::Client::new();
    let app = axum::Router::new().fallback(move |method: Method, uri: Uri, body: Bytes| {
        let client = client.clone();
        let rest = rest.clone();
        async move {
            let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
            let body = if method == Method::POST
                && (path.contains("/replace-node-to-labels") || path.contains("/add-node-labels"))
            {
                let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                Bytes::from(json!({ "ignoredInfo": value }).to_string())
            } else {
                body
            };
            let answer = client
                .request(method, format!("{rest}{path}"))
                .header("Content-Type", "application/json")
                .header("Accept", "application/json")
                .body(body)
                .send()
                .await
                .expect("the ResourceManager answers");
            let status = answer.status();
            (status, answer.bytes().await.unwrap_or_default())
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_the_resourcemanager_accepted_and_did_not_apply_is_reported_failed() {
    let test = "a_write_the_resourcemanager_accepted_and_did_not_apply_is_reported_failed";
    let _turn = CLUSTER.lock().await;
    let Some(yarn) = Yarn::start(&HOSTS, test) else {
        return;
    };
    let mut ws = Workspace::new();
    let daemon = ws.start(&[]);
    let proxy = lying_proxy(yarn.rest.clone()).await;
    let lied_to = bridge(
        ws.tmp.path(),
        &yarn,
        &daemon.url(""),
        &["--resourcemanager", &proxy],
    );
    block(&daemon, "worker-c", "MARK_BLOCKED").await;
    eventually("failed: the label was not added", || async {
        status(&daemon, "worker-c").await.is_some_and(|(s, d)| {
            s == "failed" && d.contains("blocklisted") && d.contains("is not")
        })
    })
    .await;
    assert!(in_partition(&yarn, "worker-c", None));
    // With the label there, the move is the write that is ignored.
    assert_eq!(
        yarn.post(
            "/add-node-labels",
            r#"{"nodeLabelInfo":[{"name":"blocklisted","exclusivity":true}]}"#
        ),
        "200"
    );
    eventually("failed: the move not applied", || async {
        status(&daemon, "worker-c").await.is_some_and(|(s, d)| {
            s == "failed" && d.contains("answered worker-c:") && d.contains("default partition")
        })
    })
    .await;
    assert!(
        in_partition(&yarn, "worker-c", None),
        "{}",
        lied_to.log_text()
    );
    // Straight to the ResourceManager, it goes through.
    lied_to.kill9();
    let _honest = bridge(ws.tmp.path(), &yarn, &daemon.url(""), &[]);
    eventually("enforced", || async {
        status(&daemon, "worker-c")
            .await
            .is_some_and(|(s, _)| s == "enforced")
            && in_partition(&yarn, "worker-c", Some("blocklisted"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_evacuation_stops_the_nodes_containers_one_at_a_time_and_they_come_back_elsewhere() {
    let test =
        "an_evacuation_stops_the_nodes_containers_one_at_a_time_and_they_come_back_elsewhere";
    let _turn = CLUSTER.lock().await;
    let Some(mut yarn) = Yarn::start(&HOSTS, test) else {
        return;
    };
    let mut ws = Workspace::new();
    let daemon = ws.start(&[]);
    let bridge = bridge(
        ws.tmp.path(),
        &yarn,
        &daemon.url(""),
        &["--evictions-per-minute", "120"],
    );
    let placed = yarn.ask(12);
    assert_eq!(
        Yarn::per_host(&placed).get("worker-c"),
        Some(&3),
        "{placed}"
    );
    block(&daemon, "worker-c", "MARK_BLOCKED_AND_EVACUATE_TASKS").await;
    let started = std::time::Instant::now();
    loop {
        let status = yarn.command("status");
        let running = status["running"].as_object().expect("running");
        if running.keys().all(|node| !node.starts_with("worker-c:")) {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "worker-c's containers not stopped: {status}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        bridge
            .metric("blocklist_yarn_evacuations_total{outcome=\"stopped\"}")
            .await,
        3.0
    );
    // Paced: at 120 a minute, half a second apart (the log's times of each request).
    let asked: Vec<f64> = bridge
        .log_text()
        .lines()
        .filter(|l| l.contains("container asked to stop"))
        .map(|l| {
            let time = l.split_whitespace().next().unwrap();
            let clock = time.split('T').nth(1).unwrap().trim_end_matches('Z');
            clock
                .split(':')
                .map(|part| part.parse::<f64>().unwrap())
                .fold(0.0, |seconds, part| seconds * 60.0 + part)
        })
        .collect();
    assert_eq!(asked.len(), 3, "{}", bridge.log_text());
    for pair in asked.windows(2) {
        assert!(pair[1] - pair[0] >= 0.45, "not paced: {asked:?}");
    }
    // The scheduler places their replacements elsewhere.
    let again = yarn.ask(3);
    assert_eq!(Yarn::per_host(&again).get("worker-c"), None, "{again}");
    assert_eq!(again["pending"], 0, "{again}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_https_resourcemanager_is_reached_verified_with_its_ca_and_not_without() {
    let test = "an_https_resourcemanager_is_reached_verified_with_its_ca_and_not_without";
    let _turn = CLUSTER.lock().await;
    let Some(yarn) = Yarn::start_https(&HOSTS, test) else {
        return;
    };
    assert!(yarn.rest.starts_with("https://"), "{}", yarn.rest);
    let ca = yarn.ca.clone().expect("the CA");
    let mut ws = Workspace::new();
    let daemon = ws.start(&[]);
    // Without the CA, the certificate is not trusted: nothing is read, nothing written.
    let untrusting = bridge(ws.tmp.path(), &yarn, &daemon.url(""), &[]);
    block(&daemon, "worker-c", "MARK_BLOCKED").await;
    eventually("passes failing", || async {
        untrusting
            .metric("blocklist_yarn_passes_total{outcome=\"error\"}")
            .await
            >= 2.0
    })
    .await;
    assert!(!untrusting.ready().await);
    assert!(in_partition(&yarn, "worker-c", None));
    assert!(
        untrusting.log_text().contains("certificate"),
        "{}",
        untrusting.log_text()
    );
    untrusting.kill9();
    // With it, the block goes through.
    let ca = ca.to_string_lossy();
    let trusting = bridge(
        ws.tmp.path(),
        &yarn,
        &daemon.url(""),
        &["--resourcemanager-cacert", &ca],
    );
    eventually("worker-c labelled over https", || async {
        in_partition(&yarn, "worker-c", Some("blocklisted"))
    })
    .await;
    eventually("ready", || trusting.ready()).await;
}
