//! One full reconcile: the blocked nodes read from the daemon first (a daemon that cannot
//! be read changes nothing in the cluster), then every Node made to carry its block, or
//! nothing of the bridge's: Nodes to untaint first (so they make room under the ceiling),
//! then the blocked ones oldest change first (so the ceiling keeps the earliest blocks).
//! What the blocklist wants ([`crate::desired`]) is replaced as soon as it is read, but on
//! the first pass: then once every Node is marked.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

use kube::api::ListParams;

use crate::bridge::Bridge;
use crate::desired::{Known, Versions};
use crate::events::Why;
use crate::marking::Block;
use crate::nodes::{self, Outcome};

/// How a reconcile went, Node by Node.
#[derive(Debug, Default)]
pub struct Counts {
    pub written: usize,
    pub unchanged: usize,
    /// Blocked ids that name no Node.
    pub missing: usize,
    /// Blocked Nodes not tainted: the ceiling.
    pub held_back: usize,
    /// The revision of the daemon's listing: the feed resumes after it.
    pub revision: u64,
}

/// One full reconcile (see the module's text).
pub async fn reconcile(bridge: &Bridge) -> Result<Counts, String> {
    let started = Instant::now();
    let (blocks, revision) = bridge.daemon.blocked("nodes").await?;
    let blocks: HashMap<String, Block> = blocks.into_iter().map(|b| (b.id.clone(), b)).collect();
    // Once the bridge knows the blocklist, the Nodes' watch acts on it while this pass runs:
    // it must act on this listing, not an older one (a replica that comes to lead
    // reconciles with what it knew as a follower, which may predate the last events).
    if bridge.desired.known() {
        bridge.desired.replace(blocks.clone());
    }
    let list = bridge.nodes.list(&ListParams::default()).await;
    bridge.metrics.api("list", &list);
    let list = list.map_err(|e| format!("listing Nodes: {e}"))?;
    let marking = &bridge.marking;
    let listed: Versions = list
        .items
        .iter()
        .map(|node| {
            (
                node.metadata.name.clone().unwrap_or_default(),
                node.metadata.resource_version.clone(),
            )
        })
        .collect();
    bridge.ceiling.replace(list.items.iter().map(|node| {
        (
            node.metadata.name.clone().unwrap_or_default(),
            marking.carries(node),
        )
    }));
    let mut counts = Counts {
        revision,
        ..Counts::default()
    };
    let mut nodes: Vec<_> = list
        .items
        .into_iter()
        .map(|node| {
            let block = blocks.get(node.metadata.name.as_deref().unwrap_or_default());
            (block.map(|b| b.revision), node, block)
        })
        .collect();
    nodes.sort_by(|a, b| (a.0, &a.1.metadata.name).cmp(&(b.0, &b.1.metadata.name)));
    for (_, node, block) in nodes {
        match nodes::apply(bridge, node, block, Why::Blocklist).await {
            Outcome::Written => counts.written += 1,
            Outcome::Unchanged => counts.unchanged += 1,
            Outcome::Missing => counts.missing += 1,
            Outcome::HeldBack(_) => counts.held_back += 1,
        }
    }
    // Blocked ids with no Node: counted and reported, never retried in a loop (a Node
    // created later is marked by the Nodes' watch).
    let names: std::collections::HashSet<String> = bridge.ceiling.names();
    for (id, block) in &blocks {
        if !names.contains(id) {
            counts.missing += 1;
            bridge.record(id, Some(block), &Ok(Outcome::Missing));
        }
    }
    if counts.missing > 0 {
        tracing::info!(
            missing = counts.missing,
            "blocked ids that name no Node of this cluster"
        );
    }
    bridge.reporter.resend_all(|id| blocks.contains_key(id));
    // Every Node marked: from now on the Nodes' watch acts too, starting with the Nodes it
    // saw while this first pass ran that changed after its listing (created since, or
    // patched: by this pass, which a read shows, or by someone else).
    bridge.desired.replace(blocks);
    for (name, version) in bridge.desired.take_deferred() {
        if listed.get(&name) == Some(&version) {
            continue;
        }
        let node = bridge.nodes.get_opt(&name).await;
        bridge.metrics.api("get", &node);
        if let (Ok(Some(node)), Known::Block(block)) = (node, bridge.desired.of(&name)) {
            nodes::apply(bridge, node, block.as_ref(), Why::Drift).await;
        }
    }
    bridge.metrics.reconciles.inc();
    bridge
        .metrics
        .reconcile_seconds
        .observe(started.elapsed().as_secs_f64());
    bridge.ready.store(true, Ordering::SeqCst);
    Ok(counts)
}
