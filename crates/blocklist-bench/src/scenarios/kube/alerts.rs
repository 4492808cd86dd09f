//! `alerts` (not part of `all`): the alert loop with the real parts, measured. A scrape
//! target the bench flips, Debian's Prometheus scraping and evaluating every second,
//! Alertmanager 0.31.1 (built from `tests/servers/alertmanager-0.31`) posting to a fresh
//! daemon's webhook, the bridge tainting Nodes of a real kube-apiserver, and a watcher of
//! the Nodes (as kube-scheduler is one) noting when each taint comes and goes. Figures:
//! - metric change → Node tainted (and untainted), over [`FLIPS`] flips, and of that the
//!   part from the daemon's commit (its feed's event) to the taint;
//! - the webhook answering a delivery of [`GROUP`] alerts that changes nothing (a
//!   `repeat_interval`'s re-send), p50/p99 over [`REPEATS`] deliveries;
//! - a resolve storm: [`STORM`] alerts resolved in one delivery, until every taint is gone.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::report::{Role, Row, Target};
use crate::server::free_port;

use super::super::Bench;
use super::cluster::{
    built, log, ms, percentile, spawn_bridge, until_seen, wait_ready, watch_taints, Cluster,
    Killed, Seen,
};

/// Metric flips (0 → 1, then back) timed end to end.
const FLIPS: usize = 20;
/// Alerts in the delivery the webhook answers again and again, and how often.
const GROUP: usize = 100;
const REPEATS: usize = 500;
/// Alerts resolved at once.
const STORM: usize = 1_000;

impl Bench {
    pub(in crate::scenarios) async fn alerts(&mut self) -> Result<Vec<Row>, String> {
        let dir = self.fresh_dir("alerts");
        let cluster = Cluster::start(&dir, false).await?;
        let nodes: Vec<Value> = (0..STORM)
            .map(|i| json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("n{i:04}")}}))
            .collect();
        cluster.create_all("/api/v1/nodes", nodes).await?;
        let (daemon, _) = self.fresh_daemon("alerts-daemon").await?;
        let base = format!("http://{}", daemon.addr);
        let http = reqwest::Client::new();
        let (bridge, probes) = spawn_bridge(
            &cluster.kubeconfig,
            &base,
            &["--resync", "3600", "--max-tainted-nodes-percent", "100"],
            &dir,
            "blocklist-kube.log",
        )?;
        wait_ready(&http, &probes).await?;
        let seen = watch_taints(&cluster).await?;

        let (flip, commit) = self.flips(&dir, &base, &seen).await?;
        let repeats = repeated_deliveries(&http, &base).await?;
        let (storm, storm_answered) = resolve_storm(&http, &base, &seen).await?;
        drop(bridge);
        drop(daemon);

        let mut row = Row::new("alerts", Role::Ours);
        row.ops = FLIPS as u64;
        row.p50_ms = Some(percentile(&flip, 0.5));
        row.p99_ms = Some(percentile(&flip, 0.99));
        let figures = [
            ("metric_to_taint_p90_ms", percentile(&flip, 0.9)),
            ("metric_to_taint_max_ms", percentile(&flip, 1.0)),
            ("commit_to_taint_p50_ms", percentile(&commit, 0.5)),
            ("commit_to_taint_p99_ms", percentile(&commit, 0.99)),
            ("repeat_delivery_p50_ms", percentile(&repeats, 0.5)),
            ("repeat_delivery_p99_ms", percentile(&repeats, 0.99)),
            ("resolve_storm_s", storm.as_secs_f64()),
            ("resolve_storm_answered_ms", ms(storm_answered)),
        ];
        for (name, value) in figures {
            row.extra.insert(name.into(), value);
        }
        row.targets = vec![
            Target {
                what: "metric change → Node tainted p99 ≤ 3 s".into(),
                met: Some(percentile(&flip, 0.99) <= 3_000.0),
            },
            Target {
                what: "webhook received → taint p99 ≤ 50 ms".into(),
                met: Some(percentile(&commit, 0.99) <= 50.0),
            },
            Target {
                what: format!("a delivery of {GROUP} unchanged alerts answered p99 ≤ 20 ms"),
                met: Some(percentile(&repeats, 0.99) <= 20.0),
            },
            Target {
                what: format!("{STORM} alerts resolved in one delivery: every taint gone ≤ 5 s"),
                met: Some(storm <= Duration::from_secs(5)),
            },
        ];
        row.add_note(&format!(
            "{FLIPS} flips with scrape and evaluation every 1 s, group_wait 0 s, \
             group_interval 1 s; commit → taint is the daemon's feed event to the Node's \
             watch; {REPEATS} deliveries of {GROUP} firing alerts already stored; \
             {STORM} Nodes tainted by {STORM} alerts, then resolved in one delivery"
        ));
        Ok(vec![row])
    }

    /// Flips the target's metric [`FLIPS`] times up and down: each up's time to the Node's
    /// taint, and the part of it from the daemon's commit (its feed event) to the taint.
    async fn flips(
        &self,
        dir: &Path,
        base: &str,
        seen: &Seen,
    ) -> Result<(Vec<Duration>, Vec<Duration>), String> {
        let target = Scraped::start().await?;
        let am_port = free_port()?;
        let _alertmanager = start_alertmanager(dir, am_port, base)?;
        let (_prometheus, prometheus) = start_prometheus(dir, target.port, am_port)?;
        scraping(&prometheus).await?;
        let events = follow_feed(base).await?;
        let node = "n0000";
        let (mut flips, mut commits) = (Vec::new(), Vec::new());
        for flip in 0..FLIPS {
            // Up: the alert fires, at a point of Prometheus' 1 s cycles spread over the
            // flips (each flip lands the same time after the last untaint otherwise, and
            // the cycle's phase would decide the figure).
            let spread = u64::try_from(flip * 379 % 1000).unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(500 + spread)).await;
            let at = Instant::now();
            target.set(1.0);
            let tainted = until_seen(seen, node, true, at)
                .await
                .map_err(|e| format!("flip {flip}: {e}"))?;
            flips.push(tainted.saturating_duration_since(at));
            let committed = events.lock().map_err(|_| "poisoned")?.get(&flip).copied();
            if let Some(committed) = committed {
                commits.push(tainted.saturating_duration_since(committed));
            }
            // Down: it resolves, and the taint goes.
            let at = Instant::now();
            target.set(0.0);
            until_seen(seen, node, false, at)
                .await
                .map_err(|e| format!("flip {flip} back: {e}"))?;
        }
        Ok((flips, commits))
    }
}

/// The scrape target: `/metrics` with the gauge `node_disk_errors{node="n0000"}`.
struct Scraped {
    port: u16,
    value: Arc<Mutex<f64>>,
    task: tokio::task::JoinHandle<()>,
}

impl Scraped {
    async fn start() -> Result<Scraped, String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| e.to_string())?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let value = Arc::new(Mutex::new(0.0));
        let served = value.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let value = *served.lock().expect("the value");
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let body = format!("node_disk_errors{{node=\"n0000\"}} {value}\n");
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(answer.as_bytes()).await;
                });
            }
        });
        Ok(Scraped { port, value, task })
    }

    fn set(&self, value: f64) {
        *self.value.lock().expect("the value") = value;
    }
}

impl Drop for Scraped {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Prometheus, and its URL.
fn start_prometheus(dir: &Path, target: u16, am: u16) -> Result<(Killed, String), String> {
    let dir = dir.join("prometheus");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let rules = "groups:\n- name: bench\n  rules:\n  - alert: NodeDiskErrors\n    \
                 expr: node_disk_errors > 0\n    labels: {blocklist_kind: node}\n";
    let config = [
        "global: {scrape_interval: 1s, evaluation_interval: 1s}".to_owned(),
        "rule_files: [rules.yml]".to_owned(),
        format!("alerting: {{alertmanagers: [{{static_configs: [{{targets: ['127.0.0.1:{am}']}}]}}]}}"),
        "scrape_configs:".to_owned(),
        format!("- {{job_name: flip, honor_labels: true, static_configs: [{{targets: ['127.0.0.1:{target}']}}]}}"),
    ]
    .join("\n");
    std::fs::write(dir.join("rules.yml"), rules).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("prometheus.yml"), config).map_err(|e| e.to_string())?;
    let port = free_port()?;
    let child = Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg(format!("--web.external-url=http://127.0.0.1:{port}/"))
        .arg("--rules.alert.resend-delay=1s")
        .stdout(Stdio::null())
        .stderr(log(&dir, "prometheus.log")?)
        .spawn()
        .map_err(|e| format!("prometheus (Debian: prometheus): {e}"))?;
    Ok((Killed(child), format!("http://127.0.0.1:{port}")))
}

/// Waits until Prometheus has scraped the target and evaluated its rule once, so the first
/// flip is timed like the others, not from Prometheus' start.
async fn scraping(prometheus: &str) -> Result<(), String> {
    let http = reqwest::Client::new();
    let started = Instant::now();
    loop {
        let answer: Option<Value> = match http
            .get(format!("{prometheus}/api/v1/query?query=node_disk_errors"))
            .send()
            .await
        {
            Ok(r) => r.json().await.ok(),
            Err(_) => None,
        };
        let scraped = answer.is_some_and(|a| {
            a["data"]["result"]
                .as_array()
                .is_some_and(|r| !r.is_empty())
        });
        if scraped {
            // One more evaluation interval: the rule has seen the series.
            tokio::time::sleep(Duration::from_secs(2)).await;
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(60) {
            return Err("Prometheus did not scrape the target in 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn start_alertmanager(dir: &Path, port: u16, daemon: &str) -> Result<Killed, String> {
    let binary = built("alertmanager-0.31")?.join("alertmanager");
    let dir = dir.join("alertmanager");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let config = [
        "route: {receiver: blocklist, group_by: [alertname], group_wait: 0s, group_interval: 1s, repeat_interval: 1h}".to_owned(),
        "receivers:".to_owned(),
        format!("- {{name: blocklist, webhook_configs: [{{url: '{daemon}/webhooks/alertmanager', send_resolved: true}}]}}"),
    ]
    .join("\n");
    std::fs::write(dir.join("alertmanager.yml"), config).map_err(|e| e.to_string())?;
    let child = Command::new(binary)
        .arg(format!(
            "--config.file={}",
            dir.join("alertmanager.yml").display()
        ))
        .arg(format!("--storage.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg(format!("--web.external-url=http://127.0.0.1:{port}/"))
        .arg("--cluster.listen-address=")
        .stdout(Stdio::null())
        .stderr(log(&dir, "alertmanager.log")?)
        .spawn()
        .map_err(|e| format!("alertmanager: {e}"))?;
    Ok(Killed(child))
}

/// Follows the daemon's feed: when each `added` event of node n0000 arrived (the n-th
/// under key n).
async fn follow_feed(base: &str) -> Result<Arc<Mutex<HashMap<usize, Instant>>>, String> {
    let mut feed = reqwest::Client::new()
        .get(format!("{base}/blocklist/events"))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let arrivals: Arc<Mutex<HashMap<usize, Instant>>> = Arc::default();
    let shared = arrivals.clone();
    tokio::spawn(async move {
        let (mut text, mut added) = (String::new(), 0);
        while let Ok(Some(chunk)) = feed.chunk().await {
            let at = Instant::now();
            text.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = text.find("\n\n") {
                let event: String = text.drain(..end + 2).collect();
                if event.contains("event: added") && event.contains("\"id\":\"n0000\"") {
                    shared.lock().expect("the arrivals").insert(added, at);
                    added += 1;
                }
            }
        }
    });
    Ok(arrivals)
}

/// A delivery of `n` alerts of nodes `n0000…`, all `status`.
fn delivery(n: usize, status: &str, name: &str) -> Value {
    let alerts: Vec<Value> = (0..n)
        .map(|i| {
            json!({"status": status,
                "labels": {"alertname": name, "blocklist_kind": "node", "node": format!("n{i:04}")},
                "annotations": {"summary": "bench"}, "startsAt": "2026-12-07T05:00:00Z",
                "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "http://prometheus/graph",
                "fingerprint": format!("{name}-{i:04}")})
        })
        .collect();
    json!({"version": "4", "status": status, "receiver": "blocklist", "groupKey": "{}",
        "truncatedAlerts": 0, "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
        "externalURL": "http://alertmanager", "alerts": alerts})
}

async fn post(http: &reqwest::Client, base: &str, body: &Value) -> Result<Value, String> {
    let answer = http
        .post(format!("{base}/webhooks/alertmanager"))
        .json(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !answer.status().is_success() {
        return Err(format!("the webhook answered {}", answer.status()));
    }
    answer.json().await.map_err(|e| e.to_string())
}

/// A delivery of [`GROUP`] firing alerts, stored once, then delivered [`REPEATS`] times
/// more: each repeat's answer time.
async fn repeated_deliveries(http: &reqwest::Client, base: &str) -> Result<Vec<Duration>, String> {
    let body = delivery(GROUP, "firing", "Repeated");
    post(http, base, &body).await?;
    let mut times = Vec::with_capacity(REPEATS);
    for _ in 0..REPEATS {
        let at = Instant::now();
        let answer = post(http, base, &body).await?;
        times.push(at.elapsed());
        if answer["counts"]["repeated"] != GROUP {
            return Err(format!("a repeat changed something: {}", answer["counts"]));
        }
    }
    let resolved = delivery(GROUP, "resolved", "Repeated");
    post(http, base, &resolved).await?;
    Ok(times)
}

/// [`STORM`] alerts fire (one delivery) and taint their Nodes; then they resolve in one
/// delivery: the time until every taint is gone, and the daemon's part of it (until the
/// delivery was answered: every retraction durable).
async fn resolve_storm(
    http: &reqwest::Client,
    base: &str,
    seen: &Seen,
) -> Result<(Duration, Duration), String> {
    let start = Instant::now();
    post(http, base, &delivery(STORM, "firing", "Storm")).await?;
    for i in 0..STORM {
        until_seen(seen, &format!("n{i:04}"), true, start).await?;
    }
    let at = Instant::now();
    let answer = post(http, base, &delivery(STORM, "resolved", "Storm")).await?;
    let answered = at.elapsed();
    if answer["counts"]["retracted"] != STORM {
        return Err(format!("the resolve storm retracted {}", answer["counts"]));
    }
    let mut last = at;
    for i in 0..STORM {
        last = last.max(until_seen(seen, &format!("n{i:04}"), false, at).await?);
    }
    Ok((last.saturating_duration_since(at), answered))
}
