//! The whole alert loop with the real parts: a scrape target the test flips, Debian's
//! Prometheus evaluating alerting rules every second, Alertmanager (0.31.1 built from its Go
//! module; Debian's 0.25 in a smaller pass) posting to the daemon's webhook with a
//! `detector` token, and the daemon blocking and unblocking what the alerts name.

mod common;

use std::time::Duration;

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const RULES: &str = r"groups:
- name: nodes
  rules:
  - alert: NodeDiskErrors
    expr: node_disk_errors > 0
    labels: {blocklist_kind: node, severity: critical}
    annotations: {summary: 'disk errors on {{ $labels.node }}'}
  - alert: NodeECCErrors
    expr: node_ecc_errors > 0
    labels: {blocklist_kind: node, blocklist_action: evacuate}
    annotations: {summary: 'ECC errors on {{ $labels.node }}'}
";

const OPERATOR: &str = "op-token";

/// The daemon, the target, Prometheus and Alertmanager of one test.
struct Loop {
    ws: Workspace,
    d: Option<Daemon>,
    port: u16,
    exporter: Exporter,
    _prometheus: Server,
    alertmanager: Server,
}

impl Loop {
    /// Everything started, Alertmanager grouping by `group_by` and repeating every
    /// `repeat_interval`; `None` when a part is missing here (skipped).
    async fn start(
        release: AlertmanagerRelease,
        group_by: &str,
        repeat_interval: &str,
        test: &str,
    ) -> Option<Loop> {
        let binary = alertmanager_binary(release, test)?;
        let mut ws = Workspace::new();
        let tokens = ws.tmp.path().join("tokens");
        std::fs::write(
            &tokens,
            format!(
                "am-token name=alertmanager role=detector\n{OPERATOR} name=operator role=admin\n"
            ),
        )
        .unwrap();
        let am_token = ws.tmp.path().join("am-token");
        std::fs::write(&am_token, "am-token").unwrap();
        let port = free_port();
        let d = start_daemon(&mut ws, port);
        let exporter = Exporter::start().await;
        let am_addr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let webhook = format!("http://127.0.0.1:{port}/webhooks/alertmanager");
        let dir = ws.tmp.path().to_owned();
        let mut alertmanager = alertmanager(
            &binary,
            &dir,
            am_addr,
            &webhook,
            &am_token,
            group_by,
            repeat_interval,
        );
        let mut prometheus = prometheus(&dir, exporter.addr, am_addr, RULES, test)?;
        alertmanager.ready("/-/ready").await;
        prometheus.ready("/-/ready").await;
        Some(Loop {
            ws,
            d: Some(d),
            port,
            exporter,
            _prometheus: prometheus,
            alertmanager,
        })
    }

    fn d(&self) -> &Daemon {
        self.d.as_ref().expect("the daemon runs")
    }

    /// Sets the disk errors (`disk`) or ECC errors of `node`.
    fn flip(&self, metric: &str, node: &str, value: f64) {
        self.exporter
            .set(&format!("{metric}{{node=\"{node}\"}}"), value);
    }

    async fn node(&self, id: &str) -> (StatusCode, Value) {
        self.d().get(&format!("/blocklist/nodes/{id}")).await
    }

    /// Waits until `id`'s block is as `check` says.
    async fn until(&self, what: &str, id: &str, check: impl Fn(StatusCode, &Value) -> bool) {
        let logs = || format!("\nalertmanager:\n{}", self.alertmanager.log_text());
        let deadline = std::time::Instant::now() + DEADLINE;
        loop {
            let (status, item) = self.node(id).await;
            if check(status, &item) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: {status} {item}{}",
                logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn as_operator(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let auth = format!("Bearer {OPERATOR}");
        let (status, _, body) =
            request(self.d(), method, path, &[("Authorization", &auth)], body).await;
        (status, body)
    }

    async fn alerts(&self, outcome: &str, alertname: &str) -> f64 {
        let text = self.d().scrape().await;
        metric(
            &text,
            &format!("blocklist_alerts_total{{outcome=\"{outcome}\",alertname=\"{alertname}\"}}"),
        )
    }
}

fn start_daemon(ws: &mut Workspace, port: u16) -> Daemon {
    let tokens = ws.tmp.path().join("tokens");
    let listen = format!("127.0.0.1:{port}");
    ws.start(&[
        "--listen",
        &listen,
        "--token-file",
        tokens.to_str().unwrap(),
    ])
}

fn blocked(status: StatusCode, _: &Value) -> bool {
    status == StatusCode::OK
}

fn unblocked(status: StatusCode, _: &Value) -> bool {
    status == StatusCode::NOT_FOUND
}

async fn a_flip_blocks_and_the_flip_back_retracts(release: AlertmanagerRelease, test: &str) {
    let Some(l) = Loop::start(release, "'alertname'", "1h", test).await else {
        return;
    };
    l.flip("node_disk_errors", "n1", 0.0);
    l.flip("node_disk_errors", "n1", 3.0);
    l.until("the alert blocks n1", "n1", blocked).await;
    let (_, item) = l.node("n1").await;
    assert_eq!(item["action"], "MARK_BLOCKED", "{item}");
    assert_eq!(item["cause"], "NodeDiskErrors: disk errors on n1", "{item}");
    let source = item["source"].as_str().unwrap();
    assert!(source.starts_with("alertmanager/NodeDiskErrors/"), "{item}");
    let details = &item["liveReports"][0]["details"];
    assert_eq!(details["alertname"], "NodeDiskErrors", "{item}");
    assert!(
        details["generatorURL"]
            .as_str()
            .unwrap()
            .contains("/graph?g0.expr="),
        "{item}"
    );
    assert!(!details["fingerprint"].as_str().unwrap().is_empty());
    assert!(
        details["startsAt"].as_str().unwrap().starts_with("20"),
        "{item}"
    );

    l.flip("node_disk_errors", "n1", 0.0);
    l.until("the resolve retracts it", "n1", unblocked).await;
    let (_, past) = l.d().get("/blocklist/nodes/n1/history").await;
    assert_eq!(past[0]["ended"]["how"], "retracted", "{past}");
    assert_eq!(past[0]["ended"]["source"], source, "{past}");
}

#[tokio::test]
async fn alertmanager_0_31_a_flip_blocks_the_node_and_the_flip_back_retracts_it() {
    a_flip_blocks_and_the_flip_back_retracts(
        AlertmanagerRelease::Built,
        "alertmanager_0_31_a_flip_blocks_the_node_and_the_flip_back_retracts_it",
    )
    .await;
}

#[tokio::test]
async fn debians_alertmanager_0_25_a_flip_blocks_the_node_and_the_flip_back_retracts_it() {
    a_flip_blocks_and_the_flip_back_retracts(
        AlertmanagerRelease::Debian,
        "debians_alertmanager_0_25_a_flip_blocks_the_node_and_the_flip_back_retracts_it",
    )
    .await;
}

#[tokio::test]
async fn an_operators_block_survives_the_resolve_and_two_alerts_need_both_resolved() {
    let test = "an_operators_block_survives_the_resolve_and_two_alerts_need_both_resolved";
    let Some(l) = Loop::start(
        AlertmanagerRelease::Built,
        "'alertname', 'node'",
        "1h",
        test,
    )
    .await
    else {
        return;
    };
    let (status, body) = l
        .as_operator(
            Method::POST,
            "/blocklist/nodes",
            Some(json!([{"id": "n1", "action": "MARK_BLOCKED", "cause": "replace the disk"}])),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // n1: the operator and two alerts; n2: two alerts.
    for node in ["n1", "n2"] {
        l.flip("node_disk_errors", node, 1.0);
        l.flip("node_ecc_errors", node, 1.0);
    }
    let held = |n: usize| {
        move |s: StatusCode, item: &Value| {
            s == StatusCode::OK && item["liveReports"].as_array().map(Vec::len) == Some(n)
        }
    };
    l.until("both alerts and the operator hold n1", "n1", held(3))
        .await;
    l.until("both alerts hold n2", "n2", held(2)).await;
    let (_, n1) = l.node("n1").await;
    assert_eq!(
        n1["action"], "MARK_BLOCKED_AND_EVACUATE_TASKS",
        "the ECC rule's: {n1}"
    );

    for node in ["n1", "n2"] {
        l.flip("node_ecc_errors", node, 0.0);
    }
    l.until("the disk alert and the operator hold n1", "n1", held(2))
        .await;
    l.until("the disk alert holds n2", "n2", |s, item| {
        s == StatusCode::OK && item["action"] == "MARK_BLOCKED"
    })
    .await;
    let (_, n1) = l.node("n1").await;
    assert_eq!(n1["action"], "MARK_BLOCKED", "{n1}");

    for node in ["n1", "n2"] {
        l.flip("node_disk_errors", node, 0.0);
    }
    l.until("n2 is free once both resolved", "n2", unblocked)
        .await;
    l.until(
        "the operator's block of n1 stays, its own",
        "n1",
        |s, item| {
            s == StatusCode::OK
                && item.get("heldBy").is_none()
                && item["cause"] == "replace the disk"
        },
    )
    .await;
}

#[tokio::test]
async fn repeated_deliveries_change_nothing() {
    let test = "repeated_deliveries_change_nothing";
    // Alertmanager sends the firing group again every 2 s.
    let Some(l) = Loop::start(AlertmanagerRelease::Built, "'alertname'", "2s", test).await else {
        return;
    };
    l.flip("node_disk_errors", "n1", 1.0);
    l.until("the alert blocks n1", "n1", blocked).await;
    let at = l.d().revision().await;
    eventually(
        "Alertmanager delivers the same alert twice more",
        || async { l.alerts("repeated", "NodeDiskErrors").await >= 2.0 },
    )
    .await;
    assert_eq!(l.d().revision().await, at, "no new revision");
    let (_, item) = l.node("n1").await;
    assert_eq!(item["reportCount"], 1, "{item}");
}

#[tokio::test]
async fn a_storm_over_60_percent_of_the_nodes_is_capped() {
    let test = "a_storm_over_60_percent_of_the_nodes_is_capped";
    let Some(l) = Loop::start(AlertmanagerRelease::Built, "'alertname'", "1h", test).await else {
        return;
    };
    let registrations: Vec<Value> = (0..10)
        .map(|i| json!({"id": format!("tm-{i}"), "node": format!("n{i}")}))
        .collect();
    let (status, body) = l
        .as_operator(Method::PUT, "/taskmanagers", Some(json!(registrations)))
        .await;
    assert!(status.is_success(), "{body}");
    for i in 0..6 {
        l.flip("node_disk_errors", &format!("n{i}"), 1.0);
    }
    eventually("the storm is refused past the cap", || async {
        l.alerts("refused", "NodeDiskErrors").await >= 1.0
    })
    .await;
    let count = || async {
        l.d().listing().await["blockedNodes"]
            .as_array()
            .unwrap()
            .len()
    };
    eventually("five nodes blocked", || async { count().await == 5 }).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(count().await, 5, "and no more, however often it is sent");
    let (_, status) = l.d().get("/policy/status").await;
    assert_eq!(status["nodes"]["blockedShare"]["current"], 5, "{status}");
}

#[tokio::test]
async fn the_daemon_down_for_20_s_loses_no_alert() {
    let test = "the_daemon_down_for_20_s_loses_no_alert";
    let Some(mut l) = Loop::start(AlertmanagerRelease::Built, "'alertname'", "1h", test).await
    else {
        return;
    };
    l.flip("node_disk_errors", "n1", 1.0);
    l.until("the alert blocks n1", "n1", blocked).await;
    l.d.take().unwrap().terminate();
    // While it is down: n1 resolves, n2 fires.
    l.flip("node_disk_errors", "n1", 0.0);
    l.flip("node_disk_errors", "n2", 1.0);
    tokio::time::sleep(Duration::from_secs(20)).await;
    l.d = Some(start_daemon(&mut l.ws, l.port));
    l.until("n2's alert arrives", "n2", blocked).await;
    l.until("n1's resolve arrives", "n1", unblocked).await;
}

#[tokio::test]
async fn kill_9_mid_delivery_loses_nothing_acknowledged() {
    let test = "kill_9_mid_delivery_loses_nothing_acknowledged";
    let Some(mut l) = Loop::start(
        AlertmanagerRelease::Built,
        "'alertname', 'node'",
        "1h",
        test,
    )
    .await
    else {
        return;
    };
    let nodes: Vec<String> = (0..8).map(|i| format!("n{i}")).collect();
    for node in &nodes {
        l.flip("node_disk_errors", node, 1.0);
    }
    // Killed as soon as the first block is seen, while the other groups are on their way.
    let blocked_ids = |listing: &Value| -> Vec<String> { ids(&listing["blockedNodes"]) };
    let seen = loop {
        let seen = blocked_ids(&l.d().listing().await);
        if !seen.is_empty() {
            break seen;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    l.d.take().unwrap().kill9();
    l.d = Some(start_daemon(&mut l.ws, l.port));
    // What was shown before the kill is never taken back, and the rest arrives.
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let now = blocked_ids(&l.d().listing().await);
        for id in &seen {
            assert!(
                now.contains(id),
                "{id} was shown blocked before the kill: {now:?}"
            );
        }
        if now == nodes {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{now:?}\n{}",
            l.alertmanager.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
