//! The `kube` scenario's two timed signals beside its steady-state blocks: blocks
//! acknowledged while the bridge's first full reconcile is still marking the Nodes, and
//! Node conditions (written to the Nodes' status as node-problem-detector would) that the
//! bridge reports as a detector once held past their hold. Each is timed to its taint as a
//! watcher of the Nodes sees it.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;

use super::cluster::{block_nodes, get_text, tainted_after, Cluster, Seen};

/// The condition the bridge is told to block on (`--condition`), and its hold.
pub(super) const CONDITION: &str = "BenchKernelDeadlock";
pub(super) const HOLD: Duration = Duration::from_secs(1);

/// Blocks `ids` at `rate` a second once the bridge at `probes` has begun tainting in its
/// first reconcile; each one's time from acknowledgement to its taint seen, and how many
/// were acknowledged before that reconcile ended.
pub(super) async fn during_reconcile(
    http: &reqwest::Client,
    base: &str,
    probes: &str,
    seen: &Seen,
    ids: &[String],
    rate: u64,
) -> Result<(Vec<Duration>, usize), String> {
    let started = Instant::now();
    while metric(http, probes, "blocklist_kube_taints_applied_total").await < 1.0 {
        if started.elapsed() > Duration::from_secs(120) {
            return Err("the bridge's first reconcile tainted nothing in 2 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut sent = Vec::with_capacity(ids.len());
    let mut early = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(1000 / rate));
    for id in ids {
        tick.tick().await;
        let at = Instant::now();
        block_nodes(
            http,
            base,
            std::slice::from_ref(id),
            "MARK_BLOCKED",
            "early",
        )
        .await?;
        if !ready(http, probes).await {
            early += 1;
        }
        sent.push((id, at));
    }
    Ok((tainted_after(seen, &sent).await?, early))
}

/// Turns [`CONDITION`] sick on each of `ids` at `rate` a second (its
/// `lastTransitionTime` the current second, as the API server keeps it); each one's time
/// from the moment it counted (that time plus [`HOLD`]) to its taint seen.
pub(super) async fn conditions(
    cluster: &Cluster,
    seen: &Seen,
    ids: &[String],
    rate: u64,
) -> Result<Vec<Duration>, String> {
    let mut due = Vec::with_capacity(ids.len());
    let mut tick = tokio::time::interval(Duration::from_millis(1000 / rate));
    for id in ids {
        tick.tick().await;
        let (now, wall) = (Instant::now(), SystemTime::now());
        let since_epoch = wall.duration_since(UNIX_EPOCH).map_err(|e| e.to_string())?;
        let second = UNIX_EPOCH + Duration::from_secs(since_epoch.as_secs());
        let counts =
            now + HOLD.saturating_sub(Duration::from_nanos(u64::from(since_epoch.subsec_nanos())));
        let stamp = humantime::format_rfc3339_seconds(second).to_string();
        let patch = json!({"status": {"conditions": [{
            "type": CONDITION, "status": "True", "reason": "Bench", "message": "a bench's kernel",
            "lastTransitionTime": stamp, "lastHeartbeatTime": stamp,
        }]}});
        let url = format!("{}/api/v1/nodes/{id}/status", cluster.url);
        let answer = cluster
            .http
            .patch(&url)
            .header("Content-Type", "application/strategic-merge-patch+json")
            .body(patch.to_string())
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        if !answer.status().is_success() {
            return Err(format!("{url}: {}", answer.status()));
        }
        due.push((id, counts));
    }
    tainted_after(seen, &due).await
}

async fn ready(http: &reqwest::Client, probes: &str) -> bool {
    http.get(format!("{probes}/readyz"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}

/// The mean of the bridge's histogram `name` in ms: of the conditions, how much was the
/// bridge's part (counted → report acknowledged).
pub(super) async fn mean_ms(http: &reqwest::Client, probes: &str, name: &str) -> f64 {
    let sum = metric(http, probes, &format!("{name}_sum")).await;
    let count = metric(http, probes, &format!("{name}_count")).await;
    if count > 0.0 {
        sum * 1000.0 / count
    } else {
        0.0
    }
}

/// The bridge's metric `name` (0 when absent or unreadable).
async fn metric(http: &reqwest::Client, probes: &str, name: &str) -> f64 {
    let text = get_text(http, &format!("{probes}/metrics"))
        .await
        .unwrap_or_default();
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}
