//! A watch of the Nodes, so a Node that drifts from its block is put right at once: a
//! Node created after its block gets its taint, and a taint or annotation of the bridge's
//! removed or changed by hand is put back (to unblock, remove the item from the
//! blocklist). A Node that already matches costs no write: the bridge's own patches come
//! back as events that change nothing. Its conditions go to [`crate::conditions`].

use futures::StreamExt;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;

use crate::bridge::Bridge;
use crate::desired::Known;
use crate::events::Why;
use crate::marking;
use crate::nodes;

/// Follows the Nodes for as long as the bridge runs (the ceiling counts them here too).
pub async fn run(bridge: &Bridge) {
    let stream =
        watcher::watcher(bridge.nodes.clone(), watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        let node = match event {
            Ok(Event::Apply(node) | Event::InitApply(node)) => node,
            Ok(Event::Delete(node)) => {
                let name = node.metadata.name.as_deref().unwrap_or_default();
                bridge.ceiling.gone(name);
                bridge.conditions.gone(name);
                continue;
            }
            Ok(Event::Init) => {
                bridge.conditions.listing_started();
                continue;
            }
            Ok(Event::InitDone) => {
                bridge.conditions.listing_done();
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "the Nodes' watch failed; it resumes");
                continue;
            }
        };
        let name = node.metadata.name.clone().unwrap_or_default();
        bridge.conditions.seen(&node);
        bridge.ceiling.seen(&name, bridge.marking.carries(&node));
        let Known::Block(block) = bridge.desired.of_seen(&node) else {
            continue;
        };
        if marking::patch(&node, &bridge.marking, block.as_ref()).is_none() {
            continue;
        }
        tracing::info!(node = %name, "the Node does not carry what the blocklist says; putting it right");
        nodes::apply(bridge, node, Why::Drift).await;
    }
}
