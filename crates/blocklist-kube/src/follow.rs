//! Following the daemon's change feed, so a block reaches its Node as soon as it is
//! durable: list-then-watch (a full reconcile's listing gives the revision to watch
//! from; its Nodes are marked while the feed is followed, so a block never waits for a
//! long reconcile: [`crate::reconcile`]), each node event applied to its Node, a broken
//! stream resumed from the last event's id
//! (`Last-Event-ID`: no gap, no repeat, whichever daemon of a prefix answers), and a 410
//! (the revision is older than the daemon keeps) or every `resync` a full reconcile
//! again. Task manager events go to the pods' labels ([`crate::pods`]).

use std::time::{Duration, Instant};

use blocklist::enforcer::ItemEvent;
use blocklist::sse::{SseEvent, SseParser};

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
        let Some(events) = events else {
            return Ok(Ended::Resync);
        };
        bridge.metrics.feed_alive();
        for event in events {
            Box::pin(apply(bridge, labels, &event)).await;
            if let Some(id) = event.id {
                *revision = id;
                bridge
                    .metrics
                    .feed_revision
                    .set(i64::try_from(id).unwrap_or(i64::MAX));
            }
        }
    }
}

/// Applies an item's event: a node's to its Node, a task manager's to its pod's label;
/// every other event is not the bridge's.
async fn apply(bridge: &Bridge, labels: &Labels, event: &SseEvent) {
    let Some(ItemEvent { kind, block, id }) = ItemEvent::of(event) else {
        return;
    };
    match kind.as_str() {
        "node" => {}
        "taskmanager" => {
            labels.set(bridge, &id, block.as_ref()).await;
            if block.as_ref().is_some_and(Block::evacuates) {
                bridge.wake_evacuation();
            }
            return;
        }
        _ => return,
    }
    bridge.desired.set(&id, block.clone());
    if block.is_none() {
        bridge.conditions.ended(&id);
    }
    if block.as_ref().is_some_and(Block::evacuates) {
        bridge.wake_evacuation(); // an upgrade of a Node tainted already
    }
    let wanted = block.as_ref();
    let node = bridge.nodes.get_opt(&id).await;
    bridge.metrics.api("get", &node);
    match node {
        Ok(Some(node)) => {
            let untainted = wanted.is_none() && bridge.marking.carries(&node);
            nodes::apply(bridge, node, Why::Blocklist).await;
            if untainted {
                Box::pin(retry_held(bridge)).await;
            }
        }
        Ok(None) => {
            tracing::info!(node = %id, "the blocklist names a node that is not a Node of this cluster");
            bridge.record(&id, wanted, &Ok(nodes::Outcome::Missing));
        }
        Err(e) => {
            tracing::warn!(node = %id, error = %e, "could not read the Node; the next resync retries");
            bridge.record(&id, wanted, &Err(e.to_string()));
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
