//! `yarn` (not part of `all`): the YARN bridge (`blocklist-yarn`, the binary next to this
//! one) at the scale of a large cluster, against a stand-in ResourceManager of 1,000
//! NodeManagers ([`rm`]: the bridge's tests run against a real one, which does not fit two
//! cores at this size) and a fresh daemon. 500 nodes are blocked before the bridge starts
//! (its first pass labels them); then the steady state is watched for writes; then 200
//! blocks come at 20 a second, each timed from its request to its NodeManager's partition
//! changed in the ResourceManager. Figures: block → labelled, the first pass's time and
//! writes, the steady state's writes and the bridge's RSS.

mod rm;

use std::time::{Duration, Instant};

use crate::procstat;
use crate::report::{Role, Row};

use super::kube::cluster::{block_nodes, ms, percentile, spawn_sibling, wait_ready};
use super::Bench;

const NODES: usize = 1_000;
const BLOCKED: usize = 500;
/// Blocks a second while block → labelled is measured, and how many.
const RATE: u64 = 20;
const TIMED_BLOCKS: usize = 200;
/// How long the steady state is watched for writes.
const STEADY: Duration = Duration::from_secs(30);

impl Bench {
    pub(super) async fn yarn(&mut self) -> Result<Vec<Row>, String> {
        let dir = self.fresh_dir("yarn");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let (url, held) = rm::start(NODES).await?;
        let (daemon, _) = self.fresh_daemon("yarn-daemon").await?;
        let base = format!("http://{}", daemon.addr);
        let http = reqwest::Client::new();
        // Every other host blocked; the others are timed later.
        let host = |i: usize| rm::node(i).split(':').next().unwrap_or_default().to_owned();
        let blocked: Vec<String> = (0..BLOCKED).map(|i| host(i * 2)).collect();
        block_nodes(&http, &base, &blocked, "MARK_BLOCKED", "bench").await?;

        let started = Instant::now();
        let (bridge, probes) = spawn_sibling(
            "blocklist-yarn",
            &[
                "--resourcemanager",
                &url,
                "--user",
                "bench",
                "--daemon",
                &base,
                "--max-labelled-nodes-percent",
                "100",
                "--resync",
                "3600",
            ],
            &dir,
            "blocklist-yarn.log",
        )?;
        wait_ready(&http, &probes).await?;
        let reconcile = started.elapsed();
        let (labelled, reconcile_writes) = {
            let held = held.lock().expect("never poisoned");
            let labelled = held.partitions.values().filter(|p| p.is_some()).count();
            (labelled, held.writes)
        };
        if labelled != BLOCKED {
            return Err(format!(
                "{labelled} of {BLOCKED} NodeManagers labelled at /readyz"
            ));
        }
        let writes = || held.lock().expect("never poisoned").writes;
        let quiet = writes();
        tokio::time::sleep(STEADY).await;
        let steady_writes = writes() - quiet;

        let mut sent = Vec::with_capacity(TIMED_BLOCKS);
        let mut tick = tokio::time::interval(Duration::from_millis(1000 / RATE));
        for i in 0..TIMED_BLOCKS {
            tick.tick().await;
            let id = host(i * 2 + 1);
            let at = Instant::now();
            block_nodes(
                &http,
                &base,
                std::slice::from_ref(&id),
                "MARK_BLOCKED",
                "latency",
            )
            .await?;
            sent.push((rm::node(i * 2 + 1), at));
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        let latencies = loop {
            let done: Option<Vec<Duration>> = {
                let held = held.lock().expect("never poisoned");
                sent.iter()
                    .map(|(node, at)| {
                        held.changed
                            .get(node)
                            .map(|seen| seen.saturating_duration_since(*at))
                    })
                    .collect()
            };
            if let Some(all) = done {
                break all;
            }
            if Instant::now() > deadline {
                return Err("the timed blocks were not all labelled in 30 s".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let rss_mb = procstat::rss_bytes(bridge.0.id()).map_or(0.0, |b| {
            #[expect(clippy::cast_precision_loss, reason = "megabytes")]
            let mb = b as f64 / 1_048_576.0;
            mb
        });
        drop(bridge);
        drop(daemon);

        let mut row = Row::new("yarn", Role::Ours);
        row.p50_ms = Some(percentile(&latencies, 0.5));
        row.p99_ms = Some(percentile(&latencies, 0.99));
        row.ops = TIMED_BLOCKS as u64;
        row.extra.insert(
            "block_to_label_max_ms".into(),
            latencies.iter().copied().max().map_or(0.0, ms),
        );
        row.extra
            .insert("reconcile_s".into(), reconcile.as_secs_f64());
        #[expect(clippy::cast_precision_loss, reason = "a few writes")]
        row.extra
            .insert("reconcile_writes".into(), reconcile_writes as f64);
        #[expect(clippy::cast_precision_loss, reason = "a few writes")]
        row.extra.insert(
            "steady_writes_per_min".into(),
            steady_writes as f64 * 60.0 / STEADY.as_secs_f64(),
        );
        row.extra.insert("bridge_rss_mb".into(), rss_mb);
        row.note = format!(
            "{NODES} NodeManagers (a stand-in ResourceManager answering in microseconds), {BLOCKED} blocked at start, {TIMED_BLOCKS} blocks at {RATE}/s"
        );
        Ok(vec![row])
    }
}
