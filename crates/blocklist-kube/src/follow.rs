//! Following the daemon's change feed, so a block reaches its Node as soon as it is
//! durable: list-then-watch (a full [`reconcile`] gives the revision to watch from),
//! each node event applied to its Node, a broken stream resumed from the last event's id
//! (`Last-Event-ID`: no gap, no repeat, whichever daemon of a prefix answers), and a 410
//! (the revision is older than the daemon keeps) or every `resync` a full reconcile
//! again.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use serde::Deserialize;

use crate::daemon::{Daemon, FeedError};
use crate::desired::Desired;
use crate::events::{Events, Why};
use crate::marking::{Block, Marking};
use crate::nodes;
use crate::reconcile::reconcile;

/// How long after a failure (the daemon or the API server unreachable) the bridge tries
/// again.
const PAUSE: Duration = Duration::from_secs(1);

/// One event of the feed.
#[derive(Debug, Default)]
struct Event {
    id: Option<u64>,
    event: String,
    data: String,
}

/// The fields of an item event the bridge reads first.
#[derive(Deserialize)]
struct Kind {
    kind: Option<String>,
}

/// Follows the feed for as long as the bridge runs.
pub async fn run(
    daemon: &Daemon,
    api: &Api<Node>,
    marking: &Marking,
    desired: &Desired,
    events: &Events,
    resync: Duration,
) {
    loop {
        // The full pass gives the revision the feed resumes after.
        let mut revision = match reconcile(daemon, api, marking, desired, Some(events)).await {
            Ok(counts) => {
                tracing::info!(?counts, "reconciled");
                counts.revision
            }
            Err(e) => {
                // Nothing is changed in the cluster from what the bridge cannot see.
                tracing::warn!(error = %e, "reconcile failed; nothing changed");
                tokio::time::sleep(PAUSE).await;
                continue;
            }
        };
        let resync_at = Instant::now() + resync;
        while Instant::now() < resync_at {
            match follow(
                daemon,
                api,
                marking,
                desired,
                events,
                &mut revision,
                resync_at,
            )
            .await
            {
                Ok(()) => {}
                Err(FeedError::Gone) => {
                    tracing::warn!(
                        revision,
                        "the daemon no longer keeps the feed from here; listing again"
                    );
                    break;
                }
                Err(FeedError::Other(e)) => {
                    tracing::warn!(error = %e, revision, "the feed broke; resuming");
                    tokio::time::sleep(PAUSE).await;
                }
            }
        }
    }
}

/// One stream from after `revision` until it ends, fails or `until`; `revision` follows
/// every event applied.
async fn follow(
    daemon: &Daemon,
    api: &Api<Node>,
    marking: &Marking,
    desired: &Desired,
    events: &Events,
    revision: &mut u64,
    until: Instant,
) -> Result<(), FeedError> {
    let mut response = daemon.feed(*revision).await?;
    let mut buffer = String::new();
    let mut event = Event::default();
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let chunk = match tokio::time::timeout(left, response.chunk()).await {
            Err(_) => return Ok(()), // time for the resync
            Ok(Ok(Some(chunk))) => chunk,
            Ok(Ok(None)) => {
                daemon.feed_broke();
                return Err(FeedError::Other("the stream ended".into()));
            }
            Ok(Err(e)) => {
                daemon.feed_broke();
                return Err(FeedError::Other(e.to_string()));
            }
        };
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find('\n') {
            let line: String = buffer.drain(..=end).collect();
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                let done = std::mem::take(&mut event);
                apply(api, marking, desired, events, &done).await;
                if let Some(id) = done.id {
                    *revision = id;
                }
            } else if let Some(rest) = line.strip_prefix("id:") {
                event.id = rest.trim().parse().ok();
            } else if let Some(rest) = line.strip_prefix("event:") {
                event.event = rest.trim().to_owned();
            } else if let Some(rest) = line.strip_prefix("data:") {
                event.data.push_str(rest.trim_start());
            }
            // A comment (`:`, the heartbeat) or anything else: nothing to do.
        }
    }
}

/// Applies a node item's event to its Node; every other event is not the bridge's.
async fn apply(
    api: &Api<Node>,
    marking: &Marking,
    desired: &Desired,
    events: &Events,
    event: &Event,
) {
    let blocks = match event.event.as_str() {
        "added" | "merged" | "updated" => true,
        "removed" | "expired" => false,
        _ => return,
    };
    let Ok(Kind { kind: Some(kind) }) = serde_json::from_str::<Kind>(&event.data) else {
        return;
    };
    if kind != "node" {
        return;
    }
    let block: Block = match serde_json::from_str(&event.data) {
        Ok(block @ Block { revision: 1.., .. }) => block,
        Ok(block) => Block {
            revision: event.id.unwrap_or_default(),
            ..block
        },
        Err(e) => {
            tracing::warn!(error = %e, data = %event.data, "a node event the bridge cannot read");
            return;
        }
    };
    desired.set(&block.id, blocks.then(|| block.clone()));
    let node = match api.get_opt(&block.id).await {
        Ok(Some(node)) => node,
        Ok(None) => {
            tracing::info!(node = %block.id, "the blocklist names a node that is not a Node of this cluster");
            return;
        }
        Err(e) => {
            tracing::warn!(node = %block.id, error = %e, "could not read the Node; the next resync retries");
            return;
        }
    };
    let wanted = blocks.then_some(&block);
    if let Err(e) = nodes::apply(api, marking, node, wanted, Some((events, Why::Blocklist))).await {
        tracing::warn!(node = %block.id, error = %e, "could not mark the Node; the next resync retries");
    }
}
