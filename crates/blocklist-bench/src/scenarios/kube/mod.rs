//! `kube` (not part of `all`): the Kubernetes bridge (`blocklist-kube`, the binary next to
//! this one) at the scale of a large cluster, against a real kube-apiserver (1.37, built
//! from `tests/servers/kube-1.37` by `tests/servers/build`) on an etcd 3.6 member of its
//! own, and a fresh daemon. 5,000 Nodes with 1,000 blocked and 10,000 task manager pods;
//! the bridge starts, and 20 blocks come while its first full reconcile marks the Nodes;
//! then 200 blocks at 20 a second, and 200 Node conditions turned sick at 20 a second (the
//! bridge told to block on them after a 1 s hold), while a watcher of the Nodes (as
//! kube-scheduler is one) notes when each taint shows. Figures: block → taint seen (in the
//! steady state, and during the first reconcile), condition counted → taint seen, the
//! first full reconcile's time and writes, the membership's time, the steady state's
//! writes (before and after the conditions) and the bridge's RSS. The writes are the API server's own count
//! (`apiserver_request_total`, PATCH on nodes).

mod alerts;
// Its process helpers serve the `flink` scenario too.
pub(super) mod cluster;
mod evacuation;
mod signals;

use std::time::{Duration, Instant};

use serde_json::json;

use crate::procstat;
use crate::report::{Role, Row, Target};

use super::Bench;
use cluster::{
    block_nodes, ms, percentile, registered, spawn_bridge, tainted_after, wait_ready, watch_taints,
    Cluster,
};

const NODES: usize = 5_000;
const BLOCKED: usize = 1_000;
const PODS: usize = 10_000;
/// Blocks a second while block → taint is measured, and how many.
const RATE: u64 = 20;
const TIMED_BLOCKS: usize = 200;
/// Blocks acknowledged during the first reconcile.
const EARLY_BLOCKS: usize = 20;
/// Node conditions turned sick, at [`RATE`] a second.
const CONDITIONS: usize = 200;
/// How long the steady state is watched for writes.
const STEADY: Duration = Duration::from_secs(30);

impl Bench {
    pub(super) async fn kube(&mut self) -> Result<Vec<Row>, String> {
        let dir = self.fresh_dir("kube");
        let cluster = Cluster::start(&dir, false).await?;
        let made = Instant::now();
        let nodes = (0..NODES)
            .map(|i| json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("n{i:04}")}}))
            .collect();
        cluster.create_all("/api/v1/nodes", nodes).await?;
        let flink = json!({"type": "flink-native-kubernetes", "component": "taskmanager"});
        let pods = (0..PODS)
            .map(|i| {
                json!({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": format!("tm-{i:05}"), "labels": flink},
                       "spec": {"nodeName": format!("n{:04}", i % NODES),
                                "containers": [{"name": "tm", "image": "flink"}]}})
            })
            .collect();
        cluster
            .create_all("/api/v1/namespaces/default/pods", pods)
            .await?;
        eprintln!(
            "blocklist-bench: kube: {NODES} Nodes and {PODS} pods made in {:?}",
            made.elapsed()
        );

        let (daemon, _) = self.fresh_daemon("kube-daemon").await?;
        let base = format!("http://{}", daemon.addr);
        let http = reqwest::Client::new();
        let step = NODES / BLOCKED;
        let blocked: Vec<String> = (0..BLOCKED).map(|i| format!("n{:04}", i * step)).collect();
        block_nodes(&http, &base, &blocked, "MARK_BLOCKED", "bench").await?;

        // The watcher: from now on, each Node's taint and when it came.
        let seen = watch_taints(&cluster).await?;
        let patches = cluster.node_patches().await?;
        let started = Instant::now();
        let condition = format!("{},hold={}s", signals::CONDITION, signals::HOLD.as_secs());
        let (bridge, probes) = spawn_bridge(
            &cluster.kubeconfig,
            &base,
            &[
                "--resync",
                "3600",
                "--max-tainted-nodes-percent",
                "100",
                "--condition",
                &condition,
            ],
            &dir,
            "blocklist-kube.log",
        )?;
        let early_ids: Vec<String> = (0..EARLY_BLOCKS)
            .map(|i| format!("n{:04}", i * step + 2))
            .collect();
        let (early, early_in_reconcile) =
            signals::during_reconcile(&http, &base, &probes, &seen, &early_ids, RATE).await?;
        wait_ready(&http, &probes).await?;
        let reconcile = started.elapsed();
        // Each early block is one patch too, whoever of the feed and the reconcile made it.
        #[expect(clippy::cast_precision_loss, reason = "twenty")]
        let reconcile_writes = cluster.node_patches().await? - patches - early_ids.len() as f64;
        loop {
            let registered = registered(&http, &base).await?;
            if registered == PODS {
                break;
            }
            if started.elapsed() > Duration::from_secs(120) {
                return Err(format!(
                    "{registered} of {PODS} task managers registered in 2 minutes"
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let membership = started.elapsed();
        let quiet = cluster.node_patches().await?;
        tokio::time::sleep(STEADY).await;
        let steady_writes = cluster.node_patches().await? - quiet;

        let mut sent = Vec::with_capacity(TIMED_BLOCKS);
        let mut tick = tokio::time::interval(Duration::from_millis(1000 / RATE));
        for i in 0..TIMED_BLOCKS {
            tick.tick().await;
            let id = format!("n{:04}", i * step + 1);
            let at = Instant::now();
            block_nodes(
                &http,
                &base,
                std::slice::from_ref(&id),
                "MARK_BLOCKED",
                "latency",
            )
            .await?;
            sent.push((id, at));
        }
        let mut latencies = tainted_after(&seen, &sent).await?;
        latencies.sort();
        let at = |p: f64| {
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                clippy::cast_precision_loss,
                reason = "an index into 200"
            )]
            let i = ((latencies.len() - 1) as f64 * p).round() as usize;
            ms(latencies[i])
        };
        let condition_ids: Vec<String> = (0..CONDITIONS)
            .map(|i| format!("n{:04}", i * step + 3))
            .collect();
        let sick = signals::conditions(&cluster, &seen, &condition_ids, RATE).await?;
        let reported_mean =
            signals::mean_ms(&http, &probes, "blocklist_kube_condition_to_report_seconds").await;
        let quiet = cluster.node_patches().await?;
        tokio::time::sleep(STEADY / 2).await;
        let sick_steady_writes = cluster.node_patches().await? - quiet;
        let rss_mb = procstat::rss_bytes(bridge.0.id()).map_or(0.0, |b| {
            #[expect(clippy::cast_precision_loss, reason = "megabytes")]
            let mb = b as f64 / 1_048_576.0;
            mb
        });
        drop(bridge);
        drop(daemon);

        let mut row = Row::new("kube", Role::Ours);
        row.p50_ms = Some(at(0.5));
        row.p99_ms = Some(at(0.99));
        row.ops = TIMED_BLOCKS as u64;
        row.extra.insert("block_to_taint_max_ms".into(), at(1.0));
        row.extra
            .insert("reconcile_s".into(), reconcile.as_secs_f64());
        row.extra
            .insert("reconcile_writes".into(), reconcile_writes);
        row.extra
            .insert("membership_s".into(), membership.as_secs_f64());
        row.extra.insert(
            "steady_writes_per_min".into(),
            steady_writes * 60.0 / STEADY.as_secs_f64(),
        );
        row.extra.insert("bridge_rss_mb".into(), rss_mb);
        row.extra.insert(
            "early_block_to_taint_p50_ms".into(),
            percentile(&early, 0.5),
        );
        row.extra.insert(
            "early_block_to_taint_p99_ms".into(),
            percentile(&early, 0.99),
        );
        row.extra.insert(
            "early_blocks_in_reconcile".into(),
            early_in_reconcile as f64,
        );
        row.extra
            .insert("condition_to_taint_p50_ms".into(), percentile(&sick, 0.5));
        row.extra
            .insert("condition_to_taint_p99_ms".into(), percentile(&sick, 0.99));
        row.extra
            .insert("condition_to_taint_max_ms".into(), percentile(&sick, 1.0));
        row.extra
            .insert("condition_to_report_mean_ms".into(), reported_mean);
        row.extra.insert(
            "steady_writes_per_min_with_conditions_held".into(),
            sick_steady_writes * 60.0 / (STEADY / 2).as_secs_f64(),
        );
        row.targets = vec![
            Target {
                what: "block → taint seen p99 ≤ 100 ms".into(),
                met: Some(at(0.99) <= 100.0),
            },
            Target {
                what: format!("reconcile ≤ 10 s with one write per differing Node ({BLOCKED})"),
                #[expect(clippy::cast_precision_loss, reason = "a thousand")]
                met: Some(
                    reconcile <= Duration::from_secs(10) && reconcile_writes == BLOCKED as f64,
                ),
            },
            Target {
                what: "0 writes a minute in a steady state".into(),
                met: Some(steady_writes == 0.0),
            },
            Target {
                what: format!(
                    "block during the first reconcile → taint seen p99 ≤ 100 ms \
                     ({early_in_reconcile} of {EARLY_BLOCKS} acknowledged before it ended)"
                ),
                met: Some(percentile(&early, 0.99) <= 100.0),
            },
            Target {
                what: "condition counted → taint seen p99 ≤ 200 ms".into(),
                met: Some(percentile(&sick, 0.99) <= 200.0),
            },
            Target {
                what: "0 writes a minute with the conditions held".into(),
                met: Some(sick_steady_writes == 0.0),
            },
            Target {
                what: "bridge RSS ≤ 100 MB".into(),
                met: Some(rss_mb <= 100.0),
            },
            Target {
                what: format!("{PODS} task managers registered ≤ 10 s"),
                met: Some(membership <= Duration::from_secs(10)),
            },
        ];
        row.add_note(&format!(
            "{NODES} Nodes, {BLOCKED} blocked, {PODS} pods; {TIMED_BLOCKS} blocks at {RATE}/s; \
             reconcile {:.1} s with {reconcile_writes} Node patches, membership {:.1} s, \
             {steady_writes} patches in {} s of steady state, bridge RSS {rss_mb:.0} MiB; \
             {EARLY_BLOCKS} blocks during the first reconcile; {CONDITIONS} Node conditions \
             at {RATE}/s held {} s ({sick_steady_writes} patches in {} s after them)",
            reconcile.as_secs_f64(),
            membership.as_secs_f64(),
            STEADY.as_secs(),
            signals::HOLD.as_secs(),
            (STEADY / 2).as_secs(),
        ));
        Ok(vec![row])
    }
}
