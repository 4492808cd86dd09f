//! `kube-evacuation` (not part of `all`): the bridge's evacuation against a real
//! kube-apiserver and a fresh daemon, the kubelets played by the bench (a pod marked for
//! deletion is deleted at once), every eviction timed by the API server's audit log.
//!
//! - **One node**: 30 task managers' pods, no budget, a pace that does not bind: from the
//!   block acknowledged to no pod left on the node.
//! - **A storm**: 100 nodes of 2 pods each blocked with evacuation at once, at a pace of
//!   600 evictions a minute and 10 nodes at a time: the most evictions in any 10 s window,
//!   against the 100 the pace allows.
//! - **Failover**: two bridges, one node of 20 pods evacuating at 120 a minute, the leader
//!   killed (SIGKILL) midway: from the kill to the other bridge's first eviction, against
//!   the lease (5 s).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::report::{Role, Row, Target};

use super::super::Bench;
use super::cluster::{block_nodes, get_text, ms, registered, spawn_bridge, wait_ready, Cluster};

const ONE_NODE_PODS: usize = 30;
const STORM_NODES: usize = 100;
const STORM_PODS_PER_NODE: usize = 2;
const STORM_PER_MINUTE: u32 = 600;
const STORM_MAX_NODES: u32 = 10;
const FAILOVER_PODS: usize = 20;
const LEASE_S: u64 = 5;
const EVACUATE: &str = "MARK_BLOCKED_AND_EVACUATE_TASKS";

fn epoch_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The most of `times` (sorted, seconds) within any half-open window of `window` seconds.
fn most_within(times: &[f64], window: f64) -> usize {
    (0..times.len())
        .map(|i| {
            times[i..]
                .iter()
                .take_while(|t| **t < times[i] + window)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Until `check` holds, polling every 10 ms, for at most `limit`.
async fn until<F, Fut>(what: &str, limit: Duration, mut check: F) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, String>>,
{
    let started = Instant::now();
    while !check().await? {
        if started.elapsed() > limit {
            return Err(format!("{what}: not within {limit:?}"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

impl Bench {
    pub(in crate::scenarios) async fn kube_evacuation(&mut self) -> Result<Vec<Row>, String> {
        let dir = self.fresh_dir("kube-evacuation");
        let cluster = Cluster::start(&dir, true).await?;
        let kubelets = cluster.kubelets();
        let flink = json!({"type": "flink-native-kubernetes", "component": "taskmanager"});
        let mut nodes: Vec<(String, usize)> = vec![("e0".into(), ONE_NODE_PODS)];
        nodes.extend((0..STORM_NODES).map(|i| (format!("s{i:03}"), STORM_PODS_PER_NODE)));
        nodes.push(("f0".into(), FAILOVER_PODS));
        let node_objects = nodes
            .iter()
            .map(|(n, _)| json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}}))
            .collect();
        cluster.create_all("/api/v1/nodes", node_objects).await?;
        let pods: Vec<Value> = nodes
            .iter()
            .flat_map(|(node, count)| {
                let flink = flink.clone();
                (0..*count).map(move |i| {
                    json!({"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": format!("{node}-tm-{i}"), "labels": flink},
                           "spec": {"nodeName": node,
                                    "containers": [{"name": "tm", "image": "flink"}]}})
                })
            })
            .collect();
        let total_pods = pods.len();
        cluster
            .create_all("/api/v1/namespaces/default/pods", pods)
            .await?;

        let (daemon, _) = self.fresh_daemon("kube-evacuation-daemon").await?;
        let base = format!("http://{}", daemon.addr);
        let http = reqwest::Client::new();
        let evacuate = |ids: Vec<String>| {
            let (http, base) = (http.clone(), base.clone());
            async move { block_nodes(&http, &base, &ids, EVACUATE, "bench").await }
        };
        let common = ["--resync", "3600", "--max-tainted-nodes-percent", "100"];

        // One node, the pace not binding.
        let args = [
            &common[..],
            &["--evictions-per-minute", "60000", "--leader-elect", "false"],
        ]
        .concat();
        let (bridge, probes) =
            spawn_bridge(&cluster.kubeconfig, &base, &args, &dir, "one-node.log")?;
        wait_ready(&http, &probes).await?;
        until("every pod registered", Duration::from_secs(60), || async {
            Ok(registered(&http, &base).await? == total_pods)
        })
        .await?;
        evacuate(vec!["e0".into()]).await?;
        let acked = Instant::now();
        until("e0 empty", Duration::from_secs(60), || {
            cluster_empty(&cluster, "e0")
        })
        .await?;
        let one_node = acked.elapsed();
        drop(bridge);

        // The storm.
        let per_minute = STORM_PER_MINUTE.to_string();
        let max_nodes = STORM_MAX_NODES.to_string();
        let args = [
            &common[..],
            &[
                "--evictions-per-minute",
                &per_minute,
                "--max-evacuating-nodes",
                &max_nodes,
            ],
            &["--leader-elect", "false"],
        ]
        .concat();
        let (bridge, probes) = spawn_bridge(&cluster.kubeconfig, &base, &args, &dir, "storm.log")?;
        wait_ready(&http, &probes).await?;
        let since = epoch_s();
        evacuate((0..STORM_NODES).map(|i| format!("s{i:03}")).collect()).await?;
        let storm_started = Instant::now();
        let storm_pods = STORM_NODES * STORM_PODS_PER_NODE;
        let storm_limit =
            Duration::from_secs(storm_pods as u64 * 60 / u64::from(STORM_PER_MINUTE) + 60);
        until("the storm's pods evicted", storm_limit, || async {
            let done = cluster
                .evictions()
                .iter()
                .filter(|e| e.2 == 201 && e.1.starts_with('s') && e.3 >= since)
                .count();
            Ok(done >= storm_pods)
        })
        .await?;
        let storm_s = storm_started.elapsed().as_secs_f64();
        drop(bridge);
        let storm: Vec<f64> = cluster
            .evictions()
            .into_iter()
            .filter(|e| e.1.starts_with('s') && e.3 >= since)
            .map(|e| e.3)
            .collect();
        let most_per_10s = most_within(&storm, 10.0);
        let allowed_per_10s = STORM_PER_MINUTE as usize / 6;

        // Failover: two bridges, the leader killed midway.
        let lease = LEASE_S.to_string();
        let args = [
            &common[..],
            &["--evictions-per-minute", "120", "--lease-duration", &lease],
        ]
        .concat();
        let (mut a, a_probes) = spawn_bridge(
            &cluster.kubeconfig_named("bridge-a")?,
            &base,
            &args,
            &dir,
            "bridge-a.log",
        )?;
        wait_ready(&http, &a_probes).await?;
        until("bridge-a leads", Duration::from_secs(30), || {
            leads(&http, &a_probes)
        })
        .await?;
        let (b, b_probes) = spawn_bridge(
            &cluster.kubeconfig_named("bridge-b")?,
            &base,
            &args,
            &dir,
            "bridge-b.log",
        )?;
        wait_ready(&http, &b_probes).await?;
        evacuate(vec!["f0".into()]).await?;
        let by = |user: &str| {
            cluster
                .evictions()
                .into_iter()
                .filter(|e| e.0 == user && e.2 == 201 && e.1.starts_with("f0"))
                .map(|e| e.3)
                .collect::<Vec<f64>>()
        };
        until("bridge-a evicting", Duration::from_secs(30), || async {
            Ok(by("bridge-a").len() >= 3)
        })
        .await?;
        let _ = a.0.kill();
        let _ = a.0.wait();
        let killed = epoch_s();
        until("bridge-b evicting", Duration::from_secs(60), || async {
            Ok(!by("bridge-b").is_empty())
        })
        .await?;
        let failover_s = by("bridge-b")[0] - killed;
        until("f0 empty", Duration::from_secs(60), || {
            cluster_empty(&cluster, "f0")
        })
        .await?;
        drop(b);
        kubelets.abort();
        drop(daemon);

        let mut row = Row::new("kube-evacuation", Role::Ours);
        row.ops = (ONE_NODE_PODS + storm_pods + FAILOVER_PODS) as u64;
        row.extra.insert("one_node_empty_ms".into(), ms(one_node));
        #[expect(clippy::cast_precision_loss, reason = "small counts")]
        {
            row.extra
                .insert("storm_most_per_10s".into(), most_per_10s as f64);
            row.extra
                .insert("storm_allowed_per_10s".into(), allowed_per_10s as f64);
        }
        row.extra.insert("storm_s".into(), storm_s);
        row.extra.insert("failover_resumed_s".into(), failover_s);
        row.targets = vec![
            Target {
                what: format!("a node of {ONE_NODE_PODS} pods empty ≤ 2 s after the block is acknowledged"),
                met: Some(one_node <= Duration::from_secs(2)),
            },
            Target {
                what: format!(
                    "≤ {allowed_per_10s} evictions in every 10 s window ({STORM_PER_MINUTE}/min) under {STORM_NODES} evacuating nodes"
                ),
                met: Some(most_per_10s <= allowed_per_10s),
            },
            Target {
                what: format!("evictions resumed ≤ {} s after the leader's kill (lease {LEASE_S} s + 2 s)", LEASE_S + 2),
                #[expect(clippy::cast_precision_loss, reason = "seconds")]
                met: Some(failover_s <= (LEASE_S + 2) as f64),
            },
        ];
        row.add_note(&format!(
            "one node of {ONE_NODE_PODS} pods empty in {:.0} ms; storm: {storm_pods} evictions in {storm_s:.1} s, \
             at most {most_per_10s} in 10 s (the pace allows {allowed_per_10s}); failover: evictions resumed \
             {failover_s:.2} s after the kill (lease {LEASE_S} s)",
            ms(one_node)
        ));
        Ok(vec![row])
    }
}

async fn cluster_empty(cluster: &Cluster, node: &str) -> Result<bool, String> {
    Ok(cluster.pods_on(node).await? == 0)
}

async fn leads(http: &reqwest::Client, probes: &str) -> Result<bool, String> {
    let text = get_text(http, &format!("{probes}/metrics")).await?;
    Ok(text.lines().any(|l| l == "blocklist_kube_leader 1"))
}
