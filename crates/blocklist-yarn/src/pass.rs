//! One pass: the ResourceManager read, the plan ([`crate::plan`]) made against the blocked
//! nodes, its labels and moves written, what was written read back, and the statuses that
//! changed reported to the daemon. A pass runs when the feed brings a change, and every
//! `--poll` (a NodeManager that appears, a partition changed by hand).
//!
//! Nothing is written from what was not read: with the ResourceManager unreachable the pass
//! ends before its first write; with the blocked nodes not current (the daemon unreachable)
//! it does not start. A write the ResourceManager answers 200 without applying it (a body it
//! ignored) is found by the read back and reported `failed`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use blocklist::enforcer::{Block, Status};

use crate::bridge::Bridge;
use crate::plan::{plan, ItemStatus, Move, NodeManager};

/// What a pass did, for the log.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub labelled: usize,
    pub returned: usize,
    pub failed: usize,
    pub held_back: usize,
    pub no_target: usize,
}

/// Runs passes for as long as the bridge runs.
pub async fn run(bridge: &Bridge) {
    loop {
        if let Some(blocked) = bridge.blocked() {
            let started = Instant::now();
            match pass(bridge, &blocked).await {
                Ok(counts) => {
                    bridge.metrics.pass(started.elapsed(), true);
                    // A pass that wrote or failed says so; one that found nodes held back or
                    // absent, as the last did, is every --poll: not worth a line each time.
                    if counts.labelled + counts.returned + counts.failed > 0 {
                        tracing::info!(?counts, "pass");
                    } else if counts != Counts::default() {
                        tracing::debug!(?counts, "pass");
                    }
                    bridge
                        .ready
                        .store(true, std::sync::atomic::Ordering::SeqCst);
                }
                Err(e) => {
                    bridge.metrics.pass(started.elapsed(), false);
                    tracing::warn!(error = %e, "pass failed; nothing more written, retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
        bridge.woken().await;
    }
}

/// One pass against `blocked`.
pub async fn pass(bridge: &Bridge, blocked: &BTreeMap<String, Block>) -> Result<Counts, String> {
    let (nodes, labels) = read(bridge).await?;
    let mut plan = plan(blocked, &nodes, &labels, &bridge.settings);
    let mut failures: BTreeMap<String, String> = BTreeMap::new();

    if !plan.labels.is_empty() {
        let wanted: Vec<String> = plan.labels.iter().cloned().collect();
        let added = bridge.rm.add_labels(&wanted).await;
        bridge.metrics.write("add-node-labels", added.is_ok());
        if let Err(e) = added {
            for label in &wanted {
                failures.insert(label.clone(), e.clone());
            }
        }
        let now: BTreeSet<String> = bridge
            .rm
            .labels()
            .await?
            .into_iter()
            .map(|l| l.name)
            .collect();
        for label in &wanted {
            if !now.contains(label) && !failures.contains_key(label) {
                failures.insert(
                    label.clone(),
                    format!("the ResourceManager answered the label {label} added, and it is not"),
                );
            }
        }
        // A move into a label that is not there would fail the whole request: those moves
        // are left out, and their NodeManagers' blocks fail with the label's reason.
        let (kept, dropped): (Vec<Move>, Vec<Move>) = plan
            .moves
            .drain(..)
            .partition(|m| m.to.as_ref().is_none_or(|to| !failures.contains_key(to)));
        for m in dropped {
            let why = failures[m.to.as_ref().expect("a label")].clone();
            failures.insert(m.node, why);
        }
        plan.moves = kept;
    }

    let mut confirmed: Vec<&Move> = Vec::new();
    if !plan.moves.is_empty() {
        let moves: Vec<(String, Option<String>)> = plan
            .moves
            .iter()
            .map(|m| (m.node.clone(), m.to.clone()))
            .collect();
        let written = bridge.rm.move_nodes(&moves).await;
        let error = written.as_ref().err().cloned();
        bridge
            .metrics
            .write("replace-node-to-labels", written.is_ok());
        // Read back: the ResourceManager's word is what it holds now.
        let after: BTreeMap<String, Option<String>> = bridge
            .rm
            .nodes()
            .await?
            .into_iter()
            .map(|n| (n.id, n.partition))
            .collect();
        for m in &plan.moves {
            if after.get(&m.node) == Some(&m.to) {
                confirmed.push(m);
                continue;
            }
            let why = error.clone().unwrap_or_else(|| {
                format!(
                    "the ResourceManager answered {} moved to {}, and it is in {}",
                    m.node,
                    partition_name(m.to.as_deref()),
                    partition_name(after.get(&m.node).cloned().flatten().as_deref()),
                )
            });
            failures.insert(m.node.clone(), why);
        }
    }

    let mut counts = Counts::default();
    let now_ms = blocklistd::clock::now_ms();
    for m in &confirmed {
        if bridge.settings.partitions.ours(m.to.as_deref()) {
            counts.labelled += 1;
            // From the block's last report to its NodeManager confirmed in the partition.
            let host = nodes.iter().find(|n| n.id == m.node).map(|n| &n.host);
            if let Some(block) = blocked
                .values()
                .find(|b| Some(&b.id) == host || b.id == m.node)
            {
                bridge
                    .metrics
                    .block_to_label(now_ms - block.last_report_timestamp);
            }
        } else {
            counts.returned += 1;
        }
    }
    for (node, why) in &plan.stuck {
        tracing::warn!(
            node,
            why,
            "a NodeManager the blocklist no longer names stays in the bridge's partition"
        );
    }
    bridge
        .metrics
        .gauges(&nodes, &plan.stuck, &confirmed, &bridge.settings);

    for status in &mut plan.statuses {
        if let Some(why) = status.targets.iter().find_map(|t| failures.get(t)) {
            status.state = "failed";
            status.detail = why.clone();
        }
        match status.state {
            "failed" => counts.failed += 1,
            "heldBack" => counts.held_back += 1,
            "noTarget" => counts.no_target += 1,
            _ => {}
        }
    }
    *bridge.enforced.lock().expect("never poisoned") = plan
        .statuses
        .iter()
        .filter(|s| s.state == "enforced")
        .map(|s| (s.id.clone(), s.targets.clone()))
        .collect();
    report(bridge, &plan.statuses).await;
    Ok(counts)
}

/// The NodeManagers and the cluster's labels.
async fn read(bridge: &Bridge) -> Result<(Vec<NodeManager>, BTreeSet<String>), String> {
    let (nodes, labels) = tokio::join!(bridge.rm.nodes(), bridge.rm.labels());
    bridge.metrics.read(nodes.is_ok() && labels.is_ok());
    let labels = labels?.into_iter().map(|l| l.name).collect();
    Ok((nodes?, labels))
}

fn partition_name(partition: Option<&str>) -> String {
    partition.map_or_else(
        || "the default partition".to_owned(),
        |p| format!("partition {p}"),
    )
}

/// Reports the statuses that changed since they were last reported; one the daemon did not
/// take is reported again at the next pass.
async fn report(bridge: &Bridge, statuses: &[ItemStatus]) {
    let changed: Vec<Status> = {
        let reported = bridge.reported.lock().expect("never poisoned");
        statuses
            .iter()
            .filter(|s| reported.get(&s.id) != Some(&(s.state, s.detail.clone(), s.revision)))
            .map(|s| Status {
                kind: "node",
                id: s.id.clone(),
                state: s.state,
                detail: Some(s.detail.clone()),
                observed_revision: Some(s.revision),
            })
            .collect()
    };
    let mut reported = BTreeMap::new();
    for s in statuses {
        reported.insert(s.id.clone(), (s.state, s.detail.clone(), s.revision));
    }
    if changed.is_empty() {
        *bridge.reported.lock().expect("never poisoned") = reported;
        return;
    }
    match bridge.daemon.report(&bridge.name, &changed).await {
        Ok(()) => *bridge.reported.lock().expect("never poisoned") = reported,
        Err(e) => tracing::warn!(error = %e, "could not report to the daemon; the next pass does"),
    }
}
