//! The event log's retention: old events are dropped after each commit, in whole chunks.

use std::sync::atomic::Ordering;

use super::Committer;
use crate::store::writes::log_write;
use crate::store::TreeId;
use crate::store::{codec, keys};

/// How many old events one commit prunes beyond as many as it wrote: pruning keeps pace
/// with any stream of commits and catches up by this much per commit, without stalling
/// the writers on a long backlog (after a retention change, say).
pub(super) const MAX_PRUNE: u64 = 10_000;

impl Committer {
    /// Drops events beyond the retention count or age, oldest first, whole chunks at a
    /// time (so up to one chunk more than the count stays), at most about `max_events`. Not
    /// flushed on its own: a prune lost to a crash only keeps more history.
    pub(super) fn prune(&mut self, now: i64, max_events: u64) {
        let first = self.feed.first_retained.load(Ordering::SeqCst);
        // Revisions before this are beyond the retention count.
        let keep_from = (self.revision + 1).saturating_sub(self.retention.count);
        let cutoff = now.saturating_sub(self.retention.max_age_ms);
        let events = &self.handles().trees.events;
        let mut chunks = events.range(keys::event_key(first)..).peekable();
        let mut dropped_to = first;
        while dropped_to - first < max_events {
            let Some(Ok((key, bytes))) = chunks.next() else {
                break;
            };
            if keys::parse_event_key(&key).is_none() {
                break;
            }
            // A chunk ends where the next begins; the last one at the head of the log.
            let end = match chunks.peek() {
                Some(Ok((next, _))) => match keys::parse_event_key(next) {
                    Some(next) => next,
                    None => break,
                },
                Some(Err(_)) => break,
                None => self.revision + 1,
            };
            let expendable =
                end <= keep_from || codec::events_at(&bytes).is_ok_and(|at| at < cutoff);
            if !expendable {
                break;
            }
            if let Err(e) = events.remove(&key) {
                tracing::warn!(error = %e, "pruning the event log failed");
                break;
            }
            log_write(self.pruned_log(), TreeId::Events, &key, None);
            dropped_to = end;
            self.feed.first_retained.store(end, Ordering::SeqCst);
        }
    }
}
