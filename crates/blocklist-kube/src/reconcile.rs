//! One full reconcile, in two steps. [`list`]: the blocked nodes read from the daemon
//! first (a daemon that cannot be read changes nothing in the cluster), what the
//! blocklist wants ([`crate::desired`]) replaced by them, then every Node listed. From
//! then on the feed's events may be applied ([`crate::follow`]) while [`mark`] makes every
//! Node carry its block, or nothing of the bridge's: Nodes to untaint first (so they make
//! room under the ceiling), then the blocked ones oldest change first (so the ceiling
//! keeps the earliest blocks). Both write what the blocklist wants *at the moment of
//! writing*, and a Node one of them changed is a 409 for the other, which recomputes
//! ([`crate::nodes`]): a block acknowledged during a long reconcile reaches its Node as
//! fast as in the steady state, and an older block never overwrites it.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

use k8s_openapi::api::core::v1::Node;
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

/// What [`list`] read: the daemon's node items at `revision`, and every Node.
pub struct Listing {
    started: Instant,
    blocks: HashMap<String, Block>,
    /// The revision of the daemon's listing: the feed resumes after it.
    pub revision: u64,
    nodes: Vec<Node>,
}

/// One full reconcile: [`list`], then [`mark`] (without the feed between them).
pub async fn reconcile(bridge: &Bridge) -> Result<Counts, String> {
    let listing = list(bridge).await?;
    Ok(Box::pin(mark(bridge, listing)).await)
}

/// Reads the daemon's node items (which the bridge then wants: the feed's events apply
/// from here) and lists every Node (the ceiling counts them).
pub async fn list(bridge: &Bridge) -> Result<Listing, String> {
    let started = Instant::now();
    let (blocks, revision) = bridge.daemon.blocked("nodes").await?;
    let blocks: HashMap<String, Block> = blocks.into_iter().map(|b| (b.id.clone(), b)).collect();
    // A replica that comes to lead reconciles with what it knew as a follower, which may
    // predate the last events: this listing replaces it.
    bridge.desired.replace(blocks.clone());
    bridge.conditions.listed(&blocks, bridge.leader.acting());
    let list = bridge.nodes.list(&ListParams::default()).await;
    bridge.metrics.api("list", &list);
    let list = list.map_err(|e| format!("listing Nodes: {e}"))?;
    let marking = &bridge.marking;
    bridge.ceiling.replace(list.items.iter().map(|node| {
        (
            node.metadata.name.clone().unwrap_or_default(),
            marking.carries(node),
        )
    }));
    Ok(Listing {
        started,
        blocks,
        revision,
        nodes: list.items,
    })
}

/// Makes every Node of `listing` carry what the blocklist wants of it.
pub async fn mark(bridge: &Bridge, listing: Listing) -> Counts {
    let Listing {
        started,
        blocks,
        revision,
        nodes,
    } = listing;
    let listed: Versions = nodes
        .iter()
        .map(|node| {
            (
                node.metadata.name.clone().unwrap_or_default(),
                node.metadata.resource_version.clone(),
            )
        })
        .collect();
    let mut counts = Counts {
        revision,
        ..Counts::default()
    };
    let mut nodes: Vec<_> = nodes
        .into_iter()
        .map(|node| {
            let block = blocks.get(node.metadata.name.as_deref().unwrap_or_default());
            (block.map(|b| b.revision), node)
        })
        .collect();
    nodes.sort_by(|a, b| (a.0, &a.1.metadata.name).cmp(&(b.0, &b.1.metadata.name)));
    for (_, node) in nodes {
        match nodes::apply(bridge, node, Why::Blocklist).await {
            Outcome::Written => counts.written += 1,
            Outcome::Unchanged => counts.unchanged += 1,
            Outcome::Missing => counts.missing += 1,
            Outcome::HeldBack(_) => counts.held_back += 1,
        }
    }
    // Blocked ids with no Node: counted and reported, never retried in a loop (a Node
    // created later is marked by the Nodes' watch).
    // What the blocklist wants now: the feed may have changed the listing's meanwhile.
    let names: std::collections::HashSet<String> = bridge.ceiling.names();
    for id in blocks.keys().filter(|id| !names.contains(*id)) {
        if let Known::Block(Some(block)) = bridge.desired.of(id) {
            counts.missing += 1;
            bridge.record(id, Some(&block), &Ok(Outcome::Missing));
        }
    }
    if counts.missing > 0 {
        tracing::info!(
            missing = counts.missing,
            "blocked ids that name no Node of this cluster"
        );
    }
    bridge
        .reporter
        .resend_all(|id| matches!(bridge.desired.of(id), Known::Block(Some(_))));
    // Every Node marked: from now on the Nodes' watch acts too, starting with the Nodes it
    // saw while this first pass ran that changed after its listing (created since, or
    // patched: by this pass, which a read shows, or by someone else).
    for (name, version) in bridge.desired.take_deferred() {
        if listed.get(&name) == Some(&version) {
            continue;
        }
        let node = bridge.nodes.get_opt(&name).await;
        bridge.metrics.api("get", &node);
        if let Ok(Some(node)) = node {
            nodes::apply(bridge, node, Why::Drift).await;
        }
    }
    bridge.metrics.reconciles.inc();
    bridge
        .metrics
        .reconcile_seconds
        .observe(started.elapsed().as_secs_f64());
    bridge.ready.store(true, Ordering::SeqCst);
    counts
}
