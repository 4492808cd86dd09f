//! The daemon's blocked nodes, kept current: a listing (`GET /blocklist/nodes`), then the
//! change feed from its revision (`Last-Event-ID`: no gap, no repeat, whichever daemon of the
//! prefix answers), each node event handed to the pass at once; a broken stream resumed
//! from the last event; a 410 (the revision is older than the daemon keeps) or every
//! `resync` a listing again.

use std::time::{Duration, Instant};

use blocklist::enforcer::{FeedError, ItemEvent};
use blocklist::sse::SseParser;

use crate::bridge::Bridge;

/// How long after a failure the bridge tries again.
const PAUSE: Duration = Duration::from_secs(1);

/// Follows the daemon for as long as the bridge runs.
pub async fn run(bridge: &Bridge, resync: Duration) {
    loop {
        let (blocks, revision) = match bridge.daemon.blocked("nodes").await {
            Ok(listing) => listing,
            Err(e) => {
                bridge.current(false);
                tracing::warn!(error = %e, "cannot list the daemon's blocks; nothing changes meanwhile");
                tokio::time::sleep(PAUSE).await;
                continue;
            }
        };
        bridge.metrics.revision(revision);
        bridge.listed(blocks);
        let until = Instant::now() + resync;
        let mut revision = revision;
        while Instant::now() < until {
            match follow(bridge, &mut revision, until).await {
                Ok(()) => {}
                Err(FeedError::Gone) => {
                    tracing::warn!(
                        revision,
                        "the daemon no longer keeps the feed from here; listing again"
                    );
                    break;
                }
                Err(FeedError::Other(e)) => {
                    // Until the feed is open again, what the bridge holds may be behind.
                    bridge.current(false);
                    tracing::warn!(error = %e, revision, "the feed broke; resuming");
                    tokio::time::sleep(PAUSE).await;
                }
            }
        }
    }
}

/// One stream from after `revision` until it ends, fails or `until`; `revision` follows
/// every event applied.
async fn follow(bridge: &Bridge, revision: &mut u64, until: Instant) -> Result<(), FeedError> {
    let mut response = bridge.daemon.feed(*revision).await?;
    bridge.current(true);
    let mut parser = SseParser::default();
    while let Some(events) = bridge
        .daemon
        .next_events(&mut response, &mut parser, until)
        .await?
    {
        bridge.metrics.feed_alive();
        for event in events {
            if let Some(item) = ItemEvent::of(&event) {
                if item.kind == "node" {
                    bridge.changed(&item.id, item.block);
                }
            }
            if let Some(id) = event.id {
                *revision = id;
                bridge.metrics.revision(id);
            }
        }
    }
    Ok(())
}
