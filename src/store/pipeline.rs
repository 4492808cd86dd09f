//! What the committer ([`super::commit`]) hands the syncer ([`super::sync`]): committed
//! groups, the answers they wait to send, and why a write was not committed.
//!
//! A leaf: it imports neither of the two threads, so each depends on it and not on the
//! other.

use std::fs::File;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;

use super::writes::Write;
use super::{CommitError, Feed, Handles, StoreError};
use crate::metrics::Metrics;
use crate::model::Event;

/// Where the answer to a request with outcome `O` goes: the outcome and the revision
/// after it.
pub(crate) type Reply<O> = oneshot::Sender<Result<(O, u64), StoreError>>;

/// A request's answer, decided when its transaction committed, held until the flush that
/// makes it durable (or fails).
pub(crate) trait Answer: Send {
    /// Sends the decided answer: the group it belongs to is durable.
    fn send(self: Box<Self>);
    /// Sends `error` instead: the group could not be made durable.
    fn fail(self: Box<Self>, error: StoreError);
}

/// The [`Answer`] to one request: its reply channel and what to send on it.
pub(crate) struct Decided<O> {
    pub reply: Reply<O>,
    pub answer: Result<(O, u64), StoreError>,
}

impl<O: Send> Answer for Decided<O> {
    fn send(self: Box<Self>) {
        // A requester that gave up waiting is no one's concern here.
        let _ = self.reply.send(self.answer);
    }

    fn fail(self: Box<Self>, error: StoreError) {
        let _ = self.reply.send(Err(error));
    }
}

/// A committed transaction on its way to disk.
pub(crate) struct Group {
    /// The database the transaction ran on (kept alive for the flush).
    pub handles: Arc<Handles>,
    /// The log file to fsync; `None` when power-loss durability is off.
    pub log: Option<Arc<File>>,
    /// The revision after the transaction.
    pub revision: u64,
    /// The commit sequence number after the transaction (see `super::durable`).
    pub seq: u64,
    /// Why the blob files the transaction wrote could not be fsynced: the group must fail
    /// like one whose flush failed.
    pub blobs_failed: Option<CommitError>,
    /// Its events, in revision order.
    pub events: Vec<Event>,
    /// Every key it wrote, in order, when the store logs writes: the prunes since the group
    /// before, then its transaction's.
    pub writes: Vec<Write>,
    /// Each request's answer, sent once durable.
    pub answers: Vec<Box<dyn Answer>>,
    /// When the committer started the transaction, for the commit-latency metric.
    pub started: Instant,
}

/// What the committer sends the syncer.
pub(crate) enum Stage {
    Group(Group),
    /// Answered once every earlier group is answered, with the events of failed passes;
    /// clears the failed state. The committer sends it before reopening the database.
    Barrier(oneshot::Sender<Vec<Event>>),
}

/// Hands durable events to subscribers, in revision order (the caller announces the
/// durable revision first).
pub(crate) fn publish(feed: &Feed, metrics: &Metrics, events: Vec<Event>) {
    for event in events {
        metrics.change(event.event);
        log_change(&event);
        // No subscribers is fine; a lagging one catches up from the log on its side.
        let _ = feed.live.send(Arc::new(event));
    }
}

/// One line per state change, at debug: at thousands of changes a second an info line each
/// cost more than the change. The change feed and the event log are the audit trail.
fn log_change(event: &Event) {
    tracing::debug!(
        revision = event.revision,
        event = event.event.as_str(),
        data = %event.data(),
        "change"
    );
}
