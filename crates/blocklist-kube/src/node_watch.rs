//! A watch of the Nodes, so a Node that drifts from its block is put right at once: a
//! Node created after its block gets its taint, and a taint or annotation of the bridge's
//! removed or changed by hand is put back (to unblock, remove the item from the
//! blocklist). A Node that already matches costs no write: the bridge's own patches come
//! back as events that change nothing.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;

use crate::desired::{Desired, Known};
use crate::events::{Events, Why};
use crate::marking::{self, Marking};
use crate::nodes;

/// Follows the Nodes for as long as the bridge runs.
pub async fn run(api: Api<Node>, marking: &Marking, desired: &Desired, events: &Events) {
    let stream = watcher::watcher(api.clone(), watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        let node = match event {
            Ok(Event::Apply(node) | Event::InitApply(node)) => node,
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "the Nodes' watch failed; it resumes");
                continue;
            }
        };
        let name = node.metadata.name.clone().unwrap_or_default();
        let Known::Block(block) = desired.of(&name) else {
            continue;
        };
        if marking::patch(&node, marking, block.as_ref()).is_none() {
            continue;
        }
        tracing::info!(node = %name, "the Node does not carry what the blocklist says; putting it right");
        if let Err(e) = nodes::apply(
            &api,
            marking,
            node,
            block.as_ref(),
            Some((events, Why::Drift)),
        )
        .await
        {
            tracing::warn!(node = %name, error = %e, "could not mark the Node; the next resync retries");
        }
    }
}
