//! Following the daemon's change feed, so a block reaches its Node as soon as it is
//! durable: list-then-watch (a full reconcile's listing gives the revision to watch
//! from; its Nodes are marked while the feed is followed, so a block never waits for a
//! long reconcile: [`crate::reconcile`]), the node events that arrived together applied
//! to their Nodes as one burst (several Nodes at once), a broken stream resumed from the
//! last event's id
//! (`Last-Event-ID`: no gap, no repeat, whichever daemon of a prefix answers), and a 410
//! (the revision is older than the daemon keeps) or every `resync` a full reconcile
//! again. Task manager events go to the pods' labels ([`crate::pods`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use blocklist::enforcer::ItemEvent;
use blocklist::sse::{SseEvent, SseParser};
use futures::stream::{self, StreamExt};

use crate::bridge::Bridge;
use crate::daemon::FeedError;
use crate::desired::Known;
use crate::events::Why;
use crate::marking::Block;
use crate::nodes;
use crate::pods::Labels;
use crate::reconcile;

/// How long after a failure (the daemon or the API server unreachable) the bridge tries
/// again.
const PAUSE: Duration = Duration::from_secs(1);

/// Follows the feed for as long as the bridge runs. A replica that comes to lead
/// reconciles at once (as a follower it wrote nothing).
pub async fn run(bridge: &Bridge, labels: &Labels, resync: Duration) {
    let mut leading = bridge.leader.subscribe();
    bridge.leader.decided().await;
    loop {
        leading.borrow_and_update();
        // The full listing gives the revision the feed resumes after.
        let listing = match reconcile::list(bridge).await {
            Ok(listing) => listing,
            Err(e) => {
                // Nothing is changed in the cluster from what the bridge cannot see.
                tracing::warn!(error = %e, "reconcile failed; nothing changed");
                tokio::time::sleep(PAUSE).await;
                continue;
            }
        };
        let revision = listing.revision;
        bridge
            .metrics
            .feed_revision
            .set(i64::try_from(revision).unwrap_or(i64::MAX));
        let resync_at = Instant::now() + resync;
        let marking = async {
            let counts = Box::pin(reconcile::mark(bridge, listing)).await;
            tracing::info!(?counts, "reconciled");
            if let Err(e) = labels.reconcile(bridge).await {
                tracing::warn!(error = %e, "could not label the blocked task managers' pods; the next resync retries");
            }
        };
        // The feed is followed while the Nodes are marked; the next listing waits for both.
        tokio::join!(
            marking,
            feed(bridge, labels, revision, resync_at, &mut leading)
        );
    }
}

/// Follows the feed from after `revision` until the resync is due, this replica comes to
/// lead, or the daemon no longer keeps the feed from there.
async fn feed(
    bridge: &Bridge,
    labels: &Labels,
    mut revision: u64,
    resync_at: Instant,
    leading: &mut tokio::sync::watch::Receiver<bool>,
) {
    while Instant::now() < resync_at {
        match Box::pin(follow(bridge, labels, &mut revision, resync_at, leading)).await {
            Ok(Ended::Resync) => {}
            Ok(Ended::Leading) => {
                tracing::info!("leading now: reconciling");
                return;
            }
            Err(FeedError::Gone) => {
                tracing::warn!(
                    revision,
                    "the daemon no longer keeps the feed from here; listing again"
                );
                return;
            }
            Err(FeedError::Other(e)) => {
                tracing::warn!(error = %e, revision, "the feed broke; resuming");
                tokio::time::sleep(PAUSE).await;
            }
        }
    }
}

/// Why a stream was left without a failure.
enum Ended {
    /// Time for the resync.
    Resync,
    /// This replica came to lead.
    Leading,
}

/// One stream from after `revision` until it ends, fails, `until`, or this replica comes
/// to lead; `revision` follows every event applied.
async fn follow(
    bridge: &Bridge,
    labels: &Labels,
    revision: &mut u64,
    until: Instant,
    leading: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<Ended, FeedError> {
    let mut response = bridge.daemon.feed(*revision).await?;
    let mut parser = SseParser::default();
    loop {
        let events = tokio::select! {
            events = bridge.daemon.next_events(&mut response, &mut parser, until) => events?,
            Ok(()) = leading.changed() => {
                if *leading.borrow_and_update() {
                    return Ok(Ended::Leading);
                }
                continue;
            }
        };
        let Some(mut events) = events else {
            return Ok(Ended::Resync);
        };
        let rest = bridge
            .daemon
            .ready_events(&mut response, &mut parser, &mut events, BURST);
        bridge.metrics.feed_alive();
        Box::pin(apply_burst(bridge, labels, &events)).await;
        if let Some(id) = events.iter().filter_map(|event| event.id).max() {
            *revision = id;
            bridge
                .metrics
                .feed_revision
                .set(i64::try_from(id).unwrap_or(i64::MAX));
        }
        rest?;
    }
}

/// How many of the feed's events received already are read and applied as one burst.
const BURST: usize = 1024;

/// How many Nodes a burst of the feed's events is written to at once. Each is a round trip
/// to the API server (a read, a patch): one at a time, the 1,000 untaints of an alert
/// storm's resolve took 4.4–6 s.
const NODES_AT_ONCE: usize = 16;

/// Applies a burst of the feed's events (what one read of the stream brought): a task
/// manager's to its pod's label, in order; a node's first to what the bridge wants of it
/// ([`crate::desired`], in the feed's order), then to its Node, up to [`NODES_AT_ONCE`]
/// Nodes at a time, each once (a patch writes the newest block wanted). Every other event
/// is not the bridge's. A taint taken off lets the Nodes the ceiling held back be tried
/// again, once the burst is written.
async fn apply_burst(bridge: &Bridge, labels: &Labels, events: &[SseEvent]) {
    let mut nodes = Vec::new();
    for ItemEvent { kind, block, id } in events.iter().filter_map(ItemEvent::of) {
        match kind.as_str() {
            "node" => {
                want(bridge, &id, block.as_ref());
                nodes.push((id, block));
            }
            "taskmanager" => {
                labels.set(bridge, &id, block.as_ref()).await;
                if block.as_ref().is_some_and(Block::evacuates) {
                    bridge.wake_evacuation();
                }
            }
            _ => {}
        }
    }
    let untainted = stream::iter(latest(nodes))
        .map(|(id, block)| async move { Box::pin(mark(bridge, &id, block.as_ref())).await })
        .buffer_unordered(NODES_AT_ONCE)
        .fold(false, |any, untainted| async move { any || untainted })
        .await;
    if untainted {
        Box::pin(retry_held(bridge)).await;
    }
}

/// Node `id` is to carry `block` now (nothing of the bridge's once it is `None`).
fn want(bridge: &Bridge, id: &str, block: Option<&Block>) {
    bridge.desired.set(id, block.cloned());
    if block.is_none() {
        bridge.conditions.ended(id);
    }
    if block.is_some_and(Block::evacuates) {
        bridge.wake_evacuation(); // an upgrade of a Node tainted already
    }
}

/// Each node of `events` (`(node, block)` in the feed's order) once, in the order it first
/// appears, with its last block.
fn latest(events: Vec<(String, Option<Block>)>) -> Vec<(String, Option<Block>)> {
    let mut nodes: Vec<(String, Option<Block>)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for (id, block) in events {
        match index.get(&id) {
            Some(&at) => nodes[at].1 = block,
            None => {
                index.insert(id.clone(), nodes.len());
                nodes.push((id, block));
            }
        }
    }
    nodes
}

/// Makes Node `id` carry what the bridge wants of it (`wanted`, or newer): whether that
/// took the bridge's taint off.
async fn mark(bridge: &Bridge, id: &str, wanted: Option<&Block>) -> bool {
    let node = bridge.nodes.get_opt(id).await;
    bridge.metrics.api("get", &node);
    match node {
        Ok(Some(node)) => {
            let untainted = wanted.is_none() && bridge.marking.carries(&node);
            nodes::apply(bridge, node, Why::Blocklist).await;
            untainted
        }
        Ok(None) => {
            tracing::info!(node = %id, "the blocklist names a node that is not a Node of this cluster");
            bridge.record(id, wanted, &Ok(nodes::Outcome::Missing));
            false
        }
        Err(e) => {
            tracing::warn!(node = %id, error = %e, "could not read the Node; the next resync retries");
            bridge.record(id, wanted, &Err(e.to_string()));
            false
        }
    }
}

/// A taint came off: the Nodes the ceiling held back are tried again, by name, while there
/// is room.
async fn retry_held(bridge: &Bridge) {
    for name in bridge.ceiling.held() {
        let Known::Block(Some(_)) = bridge.desired.of(&name) else {
            continue;
        };
        let node = bridge.nodes.get_opt(&name).await;
        bridge.metrics.api("get", &node);
        let Ok(Some(node)) = node else {
            continue;
        };
        if let nodes::Outcome::HeldBack(_) = nodes::apply(bridge, node, Why::Blocklist).await {
            return; // no room left
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked(revision: u64) -> Block {
        Block {
            action: "MARK_BLOCKED".into(),
            revision,
            ..Block::default()
        }
    }

    #[test]
    fn a_burst_names_each_node_once_in_the_order_it_first_appears_with_its_last_block() {
        let burst = vec![
            ("n1".to_owned(), Some(blocked(1))),
            ("n2".to_owned(), Some(blocked(2))),
            ("n1".to_owned(), None),
            ("n3".to_owned(), None),
            ("n2".to_owned(), None),
            ("n1".to_owned(), Some(blocked(6))),
        ];
        let nodes: Vec<(String, Option<u64>)> = latest(burst)
            .into_iter()
            .map(|(id, block)| (id, block.map(|b| b.revision)))
            .collect();
        assert_eq!(
            nodes,
            [
                ("n1".to_owned(), Some(6)),
                ("n2".to_owned(), None),
                ("n3".to_owned(), None)
            ]
        );
    }
}
