//! One full reconcile: the blocked nodes read from the daemon first (a daemon that cannot
//! be read changes nothing in the cluster), then every Node made to carry its block, or
//! nothing of the bridge's.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};

use crate::daemon::Daemon;
use crate::desired::Desired;
use crate::events::{Events, Why};
use crate::marking::{Block, Marking};
use crate::nodes::{self, Outcome};

/// How a reconcile went, Node by Node.
#[derive(Debug, Default)]
pub struct Counts {
    pub written: usize,
    pub unchanged: usize,
    /// Blocked ids that name no Node.
    pub missing: usize,
    /// The revision of the daemon's listing: the feed resumes after it.
    pub revision: u64,
}

/// One full reconcile: the blocked nodes read first (a daemon that cannot be read changes
/// nothing), then every Node made to carry its block or nothing of the bridge's.
pub async fn reconcile(
    daemon: &Daemon,
    nodes: &Api<Node>,
    marking: &Marking,
    desired: &Desired,
    events: Option<&Events>,
) -> Result<Counts, String> {
    let (blocks, revision) = daemon.blocked_nodes().await?;
    let blocks: HashMap<String, Block> = blocks.into_iter().map(|b| (b.id.clone(), b)).collect();
    desired.replace(blocks.clone());
    let list = nodes
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("listing Nodes: {e}"))?;
    let mut counts = Counts {
        revision,
        ..Counts::default()
    };
    let mut seen = 0;
    for node in list {
        let name = node.metadata.name.clone().unwrap_or_default();
        let block = blocks.get(&name);
        seen += usize::from(block.is_some());
        let told = events.map(|events| (events, Why::Blocklist));
        match nodes::apply(nodes, marking, node, block, told).await {
            Ok(Outcome::Written) => counts.written += 1,
            Ok(Outcome::Unchanged) => counts.unchanged += 1,
            Ok(Outcome::Missing) => {}
            Err(e) => tracing::warn!(node = %name, error = %e, "could not mark the Node"),
        }
    }
    counts.missing = blocks.len() - seen;
    Ok(counts)
}
