//! The durability stage of group commit: makes committed groups durable and answers them.
//!
//! The committer runs group k+1's transaction while this thread flushes and fsyncs group
//! k, so the disk round trip (sled's `flush()` ≈ 0.5–1 ms, `fdatasync` ≈ 0.5–1.5 ms) does
//! not stall the only writer. Each pass takes every group waiting, calls `flush()` once
//! — which covers every transaction that returned before the call, since sled flushes up
//! to the last log position reserved — then fsyncs the log once, and only then publishes
//! the groups' revision and events and replies to their requests, in commit order.
//!
//! Invariant: a reply, an event, the durable revision or the durable sequence (which lets
//! point reads answer, `super::durable`) is released only after a flush and fsync that
//! *began after* the transaction that wrote it returned.
//!
//! When a flush or fsync fails, every group of that pass and of every later pass fails (sled
//! refuses all writes after an I/O error; what it committed in memory may or may not be on
//! disk) until the committer takes the stash in a [`Stage::Barrier`] and reopens the
//! database; the stashed events whose revisions survived the reopen are published then.

use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;

use super::pipeline::{publish, Group, Stage};
use super::writes::{Replicate, Write};
use super::CommitError;
use super::{Feed, Handles, StoreError};
use crate::metrics::Metrics;
use crate::model::Event;

/// How many committed groups may wait for the disk before the committer blocks; while it
/// waits, requests pile up and its next group is bigger.
pub(crate) const PIPELINE_DEPTH: usize = 2;

pub(crate) struct Syncer {
    pub stages: Receiver<Stage>,
    pub feed: Arc<Feed>,
    pub metrics: Arc<Metrics>,
    /// Set when a flush failed; read by the committer before each group.
    pub failed: Arc<AtomicBool>,
    /// Events of groups whose flush failed: on disk or not, the reopen will tell.
    pub stash: Vec<Event>,
    /// Where the groups' writes go before they are answered, if anywhere.
    pub replica: Option<Arc<dyn Replicate>>,
    /// Tells the committer a pass failed, so that it reopens the store without waiting for
    /// a write.
    pub wake: Box<dyn Fn() + Send>,
}

/// Starts the durability thread; it ends when the committer drops its sender.
pub(crate) fn spawn(
    feed: Arc<Feed>,
    metrics: Arc<Metrics>,
    failed: Arc<AtomicBool>,
    replica: Option<Arc<dyn Replicate>>,
    wake: Box<dyn Fn() + Send>,
) -> std::io::Result<(SyncSender<Stage>, std::thread::JoinHandle<()>)> {
    let (sender, stages) = std::sync::mpsc::sync_channel(PIPELINE_DEPTH);
    let syncer = Syncer {
        stages,
        feed,
        metrics,
        failed,
        stash: Vec::new(),
        replica,
        wake,
    };
    let handle = std::thread::Builder::new()
        .name("syncer".into())
        .spawn(move || syncer.run())?;
    Ok((sender, handle))
}

impl Syncer {
    fn run(mut self) {
        let mut groups = Vec::new();
        while let Ok(first) = self.stages.recv() {
            let mut barrier = None;
            let mut next = Some(first);
            while let Some(stage) = next.take() {
                match stage {
                    Stage::Group(group) => groups.push(group),
                    Stage::Barrier(reply) => {
                        barrier = Some(reply);
                        break;
                    }
                }
                next = self.stages.try_recv().ok();
            }
            if !groups.is_empty() {
                self.sync(&mut groups);
            }
            if let Some(reply) = barrier {
                self.failed.store(false, Ordering::SeqCst);
                let _ = reply.send(std::mem::take(&mut self.stash));
            }
        }
    }

    /// Makes `groups` durable with one flush and one fsync, then answers them in order.
    fn sync(&mut self, groups: &mut Vec<Group>) {
        let result = if self.failed.load(Ordering::SeqCst) {
            Err(CommitError::EarlierSyncFailed)
        } else if let Some(e) = groups.iter().find_map(|g| g.blobs_failed.as_ref()) {
            Err(e.clone())
        } else {
            let last = groups.last().expect("at least one group");
            make_durable(&last.handles, last.log.as_deref())
                .and_then(|()| self.replicate(groups))
                .map_err(|e| CommitError::SyncFailed(Arc::new(e)))
        };
        let last = groups.last().expect("at least one group");
        match result {
            Ok(()) => {
                let revision = last.revision;
                self.feed.durability.publish(last.seq);
                self.feed.durable.send_replace(revision);
                for group in groups.drain(..) {
                    publish(&self.feed, &self.metrics, group.events);
                    let elapsed = group.started.elapsed();
                    self.metrics.commit_seconds.observe(elapsed.as_secs_f64());
                    tracing::trace!(requests = group.answers.len(), ?elapsed, "group commit");
                    for answer in group.answers {
                        answer.send();
                    }
                }
            }
            Err(e) => {
                tracing::error!(error = %e, groups = groups.len(), "group commit failed");
                self.metrics.commit_failed("sync");
                self.failed.store(true, Ordering::SeqCst);
                (self.wake)();
                for group in groups.drain(..) {
                    self.stash.extend(group.events);
                    for answer in group.answers {
                        answer.fail(StoreError::NotCommitted(e.clone()));
                    }
                }
            }
        }
    }
}

impl Syncer {
    /// Hands the groups' writes to the replica, in one step, when there is one.
    fn replicate(&self, groups: &mut [Group]) -> Result<(), StoreError> {
        let Some(replica) = &self.replica else {
            return Ok(());
        };
        let writes: Vec<Write> = if let [group] = groups {
            std::mem::take(&mut group.writes)
        } else {
            groups
                .iter_mut()
                .flat_map(|g| std::mem::take(&mut g.writes))
                .collect()
        };
        replica.replicate(&writes)
    }
}

/// Flushes sled's buffers to the log (pwrite + `sync_file_range`), then fsyncs the log
/// itself, so the groups survive a power cut and not only a killed process. (The blob files
/// the groups' transactions wrote, normally none, were fsynced by the committer before it
/// handed them over: `super::blobs`.)
fn make_durable(handles: &Handles, log: Option<&File>) -> Result<(), StoreError> {
    handles.db.flush()?;
    if let Some(log) = log {
        if let Err(e) = log.sync_data() {
            // Linux may mark the pages of a failed writeback clean: they stay readable
            // from the page cache (the reopen finds them) yet may never reach the disk, and
            // a later fsync says nothing about them. The daemon goes on like after any
            // storage fault, but the operator must learn of it.
            tracing::error!(
                error = %e,
                "fsync of the database log failed: the disk may have lost writes the \
                 daemon can still read back; treat the disk as failing (export the data, \
                 import it on healthy storage; docs/operations.md)"
            );
            return Err(e.into());
        }
    }
    Ok(())
}
