//! The single committer: the only writer of the store.
//!
//! sled 0.34 runs transactions one at a time under a process-wide lock, and its `flush` is a
//! disk round trip, so per-request transaction + flush cannot scale. The committer takes one
//! request, drains whatever else is already waiting (up to `max_batch`), applies them all in
//! one multi-tree transaction, and hands the group to the durability thread ([`super::sync`]),
//! which flushes (and fsyncs) once for every group waiting and only then replies to each:
//! group commit, pipelined so the next transaction runs while the disk works.
//!
//! Each request's outcome is decided before any of its writes, so a refused request (a
//! conflict) writes nothing while the rest of the batch commits. A storage error fails the
//! whole batch, and nothing of it is acknowledged.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fs::File;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use arc_swap::ArcSwapOption;
use sled::transaction::{ConflictableTransactionResult, TransactionalTree};
use sled::Transactional;
use tokio::sync::{mpsc, oneshot};

use super::pipeline::{self, Answer, CommitError, Decided, Group, Stage};
use super::{
    after_watermark, announced, codec, count_slot, encode_counts, keys, open_handles, registration,
    Counts, Feed, Handles, Opened, StoreConfig, StoreError, SweepSignal, Watched, COUNTS_KEY,
    REVISION_KEY, UNRECLAIMED_KEY, WATERMARK_KEY,
};
use crate::metrics::Metrics;
use crate::model::{Block, Change, Event, EventType, Item, Kind, NewItem};

/// Where a request's answer goes: its outcome and the revision after it.
pub(crate) type Reply = pipeline::Reply<Outcome>;

/// A request to the committer; `op: None` asks it to stop.
pub(crate) struct Commit {
    op: Option<Op>,
    reply: Option<Reply>,
}

impl Commit {
    pub fn new(op: Op, reply: Reply) -> Commit {
        Commit {
            op: Some(op),
            reply: Some(reply),
        }
    }

    pub fn shutdown() -> Commit {
        Commit {
            op: None,
            reply: None,
        }
    }
}

#[derive(Debug)]
pub(crate) enum Op {
    Add {
        kind: Kind,
        items: Vec<NewItem>,
        /// Request time: the start of new items.
        now: i64,
    },
    Remove {
        kind: Kind,
        id: String,
    },
    /// Announces up to `limit` due items expired, from the watermark on; see
    /// [`Tx::announce`].
    Announce {
        /// Nothing ending after this (or after the commit time) is announced.
        upto: i64,
        limit: usize,
    },
    /// Deletes announced items' entries; see [`Tx::reclaim`].
    Reclaim {
        expiry_keys: Vec<Vec<u8>>,
    },
    Register {
        /// `(task manager, node)` pairs; a later pair for the same task manager wins.
        registrations: Vec<(String, String)>,
    },
    Unregister {
        tm: String,
    },
    /// Writes exported items as they were (start included), merging into active ones when
    /// `merge`; ids are distinct within one op.
    Import {
        items: Vec<(Kind, Item)>,
        merge: bool,
    },
    /// Removes these items and registrations (for a replacing import).
    Clear {
        items: Vec<(Kind, String)>,
        tms: Vec<String>,
    },
}

impl Op {
    /// Whether a client asked for this (rather than the sweeper).
    fn is_client_write(&self) -> bool {
        !matches!(self, Op::Announce { .. } | Op::Reclaim { .. })
    }

    /// How many items this request writes at most, to bound a batch's transaction.
    fn weight(&self) -> usize {
        match self {
            Op::Add { items, .. } => items.len(),
            Op::Remove { .. } => 1,
            Op::Announce { limit, .. } => *limit,
            Op::Reclaim { expiry_keys } => expiry_keys.len(),
            Op::Register { registrations } => registrations.len(),
            Op::Unregister { .. } => 1,
            Op::Import { items, .. } => items.len(),
            Op::Clear { items, tms } => items.len() + tms.len(),
        }
    }
}

impl Op {
    /// Visits every key this op may change (`due`: what an announce takes, from
    /// [`Committer::scan_due`]), for the change stamps.
    fn touched(&self, due: &[Vec<u8>], mut visit: impl FnMut(Watched<'_>)) {
        match self {
            Op::Add { kind, items, .. } => items
                .iter()
                .for_each(|item| visit(Watched::Item(*kind, &item.id))),
            Op::Remove { kind, id } => visit(Watched::Item(*kind, id)),
            Op::Announce { .. } => expiry_items(due, visit),
            Op::Reclaim { expiry_keys } => expiry_items(expiry_keys, visit),
            Op::Register { registrations } => registrations
                .iter()
                .for_each(|(tm, _)| visit(Watched::Registration(tm))),
            Op::Unregister { tm } => visit(Watched::Registration(tm)),
            Op::Import { items, .. } => items
                .iter()
                .for_each(|(kind, item)| visit(Watched::Item(*kind, &item.id))),
            Op::Clear { items, tms } => {
                items
                    .iter()
                    .for_each(|(kind, id)| visit(Watched::Item(*kind, id)));
                tms.iter().for_each(|tm| visit(Watched::Registration(tm)));
            }
        }
    }
}

/// Visits the item behind each expiry key.
fn expiry_items(expiry_keys: &[Vec<u8>], mut visit: impl FnMut(Watched<'_>)) {
    for key in expiry_keys {
        if let Some((_, kind, id)) = keys::parse_expiry_key(key) {
            visit(Watched::Item(kind, id));
        }
    }
}

#[derive(Debug)]
pub(crate) enum Outcome {
    Added(AddOutcome),
    Removed(Option<Item>),
    Expired(Vec<Expired>),
    Registered(Vec<Registered>),
    /// The node the task manager was registered on, if it was.
    Unregistered(Option<String>),
    /// How many items an import wrote, or a clear removed.
    Count(usize),
}

/// What registering one task manager did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registered {
    Created,
    Moved,
    Unchanged,
}

/// The result of an add batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddOutcome {
    /// Everything was written. `merged` holds the stored state of each item that merged
    /// into an existing one (once per id, in order of first merge); empty when all were new.
    Written { merged: Vec<Item> },
    /// Nothing was written: these elements `(index, id)` met an active item without
    /// `allowMerge`.
    Conflict(Vec<(usize, String)>),
}

/// An item the sweeper announced expired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    pub kind: Kind,
    pub item: Item,
}

/// The most items one group commit writes; bigger batches wait for the next round.
const MAX_BATCH_WEIGHT: usize = 20_000;

/// How often a failed reopen is retried with no write to trigger it.
const REOPEN_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// How often the committer looks for requests while the database is closed.
const REOPEN_POLL: std::time::Duration = std::time::Duration::from_millis(20);

pub(crate) struct Committer {
    /// The open database; `None` only while a reopen has failed and will be retried.
    pub handles: Option<Arc<Handles>>,
    /// Where readers find the database; emptied while it is reopened.
    pub slot: Arc<ArcSwapOption<Handles>>,
    pub config: StoreConfig,
    /// A storage error happened: sled refuses writes until reopened.
    pub broken: bool,
    /// The log file, fsynced after each flush when power-loss durability is on.
    pub log: Option<Arc<File>>,
    /// sled's `blobs/`, whose new files are fsynced after each transaction; `None` when
    /// power-loss durability is off.
    pub blobs: Option<super::blobs::BlobDir>,
    pub requests: mpsc::Receiver<Commit>,
    /// The durability thread: committed groups go there to be flushed and answered.
    pub stages: Option<SyncSender<Stage>>,
    pub syncer: Option<JoinHandle<()>>,
    /// Set by the durability thread when a flush failed: reopen before the next group.
    pub sync_failed: Arc<AtomicBool>,
    pub max_batch: usize,
    pub sweep: Arc<SweepSignal>,
    pub feed: Arc<Feed>,
    /// The revision of the last committed transaction.
    pub revision: u64,
    /// Stored items per (kind, action) after the last committed transaction, leaving out
    /// those announced expired.
    pub counts: Counts,
    /// The expiry watermark after the last committed transaction (see
    /// [`super::WATERMARK_KEY`]).
    pub watermark: Vec<u8>,
    /// Items announced expired whose storage is not reclaimed yet, after the last committed
    /// transaction.
    pub unreclaimed: u64,
    /// Events committed but not known durable (a flush failed after their transaction),
    /// held across a reopen: those whose revision survived it are published then.
    pub unpublished: Vec<Event>,
    pub retention: Retention,
    pub metrics: Arc<Metrics>,
}

/// How many events the log keeps: at most `count`, none older than `max_age_ms`.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    pub count: u64,
    pub max_age_ms: i64,
}

/// How many old events one commit prunes beyond as many as it wrote: pruning keeps pace
/// with any stream of commits and catches up by this much per commit, without stalling
/// the writers on a long backlog (after a retention change, say).
const MAX_PRUNE: u64 = 10_000;

impl Committer {
    pub fn run(mut self) {
        let mut batch: Vec<Commit> = Vec::with_capacity(self.max_batch);
        loop {
            // Broken after a failed transaction: readers of the keys it touched wait for
            // the reopen (`super::durable`), so it is retried without waiting for a write.
            let next = if self.handles.is_none() || self.broken {
                self.wait_reopening()
            } else {
                self.requests.blocking_recv()
            };
            let Some(first) = next else {
                return;
            };
            let mut stop = first.op.is_none();
            let mut weight = first.op.as_ref().map_or(0, Op::weight);
            batch.push(first);
            while !stop && batch.len() < self.max_batch && weight < MAX_BATCH_WEIGHT {
                match self.requests.try_recv() {
                    Ok(next) => {
                        stop = next.op.is_none();
                        weight += next.op.as_ref().map_or(0, Op::weight);
                        batch.push(next);
                    }
                    Err(_) => break,
                }
            }
            self.commit(&mut batch);
            if stop {
                break;
            }
        }
        // Let the durability thread answer everything committed, then stop it.
        self.stages = None;
        if let Some(syncer) = self.syncer.take() {
            let _ = syncer.join();
        }
        tracing::debug!("committer stopped");
    }

    /// While a reopen has failed, readers get 503: retries it every [`REOPEN_RETRY`] rather
    /// than only when a write arrives (which retries it itself, so one is returned at once).
    fn wait_reopening(&mut self) -> Option<Commit> {
        let mut last_try = Instant::now();
        loop {
            match self.requests.try_recv() {
                Ok(commit) => return Some(commit),
                Err(mpsc::error::TryRecvError::Disconnected) => return None,
                Err(mpsc::error::TryRecvError::Empty) => {}
            }
            std::thread::sleep(REOPEN_POLL);
            if last_try.elapsed() >= REOPEN_RETRY {
                last_try = Instant::now();
                match self.drain_and_recover() {
                    Ok(()) => return self.requests.blocking_recv(),
                    Err(e) => tracing::debug!(error = %e, "reopening still fails"),
                }
            }
        }
    }

    /// Waits until the durability thread has answered every group sent so far; keeps the
    /// events of groups whose flush failed for [`Committer::recover`].
    fn drain_syncer(&mut self) {
        let (reply, stash) = oneshot::channel();
        let sent = self
            .stages
            .as_ref()
            .is_some_and(|stages| stages.send(Stage::Barrier(reply)).is_ok());
        if sent {
            if let Ok(events) = stash.blocking_recv() {
                self.unpublished.extend(events);
            }
        }
    }

    /// Commits one batch and passes it on to be made durable and answered.
    fn commit(&mut self, batch: &mut Vec<Commit>) {
        if self.sync_failed.load(Ordering::SeqCst) {
            self.broken = true;
        }
        if self.broken {
            if let Err(e) = self.drain_and_recover() {
                tracing::warn!(error = %e, "the storage still fails; refusing writes");
                fail_all(batch, &e);
                return;
            }
        }
        let started = Instant::now();
        // Never before the watermark's end, even if the wall clock went back: an item
        // announced expired must stay expired (readers go by the same time).
        let now = self.sweep.now();
        let revision_before = self.revision;
        // Announcing runs first in the transaction, so that the entries it scanned for are
        // all there is up to its bound: nothing else in the batch has written yet.
        batch.sort_by_key(|c| !matches!(c.op, Some(Op::Announce { .. })));
        let ops: Vec<&Op> = batch.iter().filter_map(|c| c.op.as_ref()).collect();
        if ops.iter().any(|op| op.is_client_write()) {
            self.sweep.last_write.store(now, Ordering::Relaxed);
        }
        let due = match self.scan_due(&ops, now) {
            Ok(due) => due,
            Err(e) => {
                tracing::error!(error = %e, "reading the expiry index failed");
                self.broken = true;
                fail_all(batch, &CommitError::TransactionFailed(Arc::new(e)));
                return;
            }
        };
        // Seqlock around the transaction: readers that need a consistent listing retry when
        // the sequence moved (or is odd) while they scanned.
        let settled = self.feed.seq.fetch_add(1, Ordering::SeqCst) + 2;
        // Before the transaction applies: a reader that sees a change finds its stamp (see
        // `super::durable`); a kept answer read before this is stale from now on.
        let stamps = &self.feed.stamps;
        for (op, due) in ops.iter().zip(&due) {
            op.touched(due, |key| stamps.stamp(key, settled));
        }
        let transacted = self.transact(&ops, &due, now);
        if let Ok(Transacted {
            events,
            revision,
            counts,
            watermark,
            unreclaimed,
            ..
        }) = &transacted
        {
            self.revision = *revision;
            self.counts = *counts;
            self.unreclaimed = *unreclaimed;
            self.feed.unreclaimed.store(*unreclaimed, Ordering::Relaxed);
            if *watermark != self.watermark {
                self.watermark.clone_from(watermark);
                self.sweep.set_watermark(watermark);
            }
            self.feed.committed.store(*revision, Ordering::SeqCst);
            for (slot, count) in self.feed.counts.iter().zip(counts) {
                slot.store(*count, Ordering::Relaxed);
            }
            // Every change has its event, so the events name every key this changed: each
            // must have been stamped before the transaction.
            if cfg!(debug_assertions) {
                for event in events {
                    let key = match &event.change {
                        Change::Item { kind, item } => Watched::Item(*kind, &item.id),
                        Change::Registration { tm, .. } => Watched::Registration(tm),
                        Change::Json(_) => unreachable!("only older versions wrote JSON events"),
                    };
                    assert!(stamps.stamp_of(key) >= settled, "{key:?} changed unstamped");
                }
            }
        }
        self.feed.seq.fetch_add(1, Ordering::SeqCst);
        self.metrics.commit_batch_requests.observe(ops.len() as f64);
        match transacted {
            Ok(Transacted {
                outcomes,
                events,
                revision,
                ..
            }) => {
                for outcome in outcomes.iter().flatten() {
                    if let Outcome::Added(AddOutcome::Conflict(_)) = outcome.outcome {
                        self.metrics.conflicts.inc();
                    }
                }
                // The sweeper may look at the new deadline before it is durable: its expiry
                // commits after this group, so it cannot overtake it.
                let earliest = outcomes
                    .iter()
                    .filter_map(|o| o.as_ref().ok())
                    .filter_map(|applied| applied.earliest_end)
                    .min();
                if let Some(earliest) = earliest {
                    self.sweep.deadline_added(earliest);
                }
                let mut outcomes = outcomes.into_iter();
                let answers = batch
                    .drain(..)
                    // The shutdown request has no op (and so no outcome) and no reply.
                    .filter(|commit| commit.op.is_some())
                    .filter_map(|commit| {
                        let outcome = outcomes.next().expect("one outcome per op");
                        let answer = outcome.map(|a| (a.outcome, a.revision));
                        commit
                            .reply
                            .map(|reply| Box::new(Decided { reply, answer }) as Box<dyn Answer>)
                    })
                    .collect();
                let blobs_failed = self.sync_blobs().err();
                let group = Group {
                    handles: self.handles.clone().expect("open unless broken"),
                    log: self.log.clone(),
                    revision,
                    seq: settled,
                    blobs_failed,
                    events,
                    answers,
                    started,
                };
                if let Some(stages) = &self.stages {
                    // Blocks while the disk is PIPELINE_DEPTH groups behind.
                    if let Err(unsent) = stages.send(Stage::Group(group)) {
                        tracing::error!("the durability thread is gone");
                        if let Stage::Group(group) = unsent.0 {
                            for answer in group.answers {
                                answer.fail(StoreError::Closed);
                            }
                        }
                    }
                }
                // Prune at least what this commit wrote, so a stream of big commits cannot
                // outgrow the retention; MAX_PRUNE more is the catching up. While the syncer
                // flushes the group. Pruning rewrites leaves too: their blob files, if any,
                // are synced at once rather than left to the next commit (there may be none
                // for a while).
                self.prune(now, MAX_PRUNE + (revision - revision_before));
                if self.sync_blobs().is_err() {
                    self.broken = true;
                }
            }
            Err(e) => {
                tracing::error!(error = %e, requests = ops.len(), "group commit failed");
                // sled 0.34 keeps failing every write after an I/O error; the next batch
                // reopens the database once the storage works again.
                self.broken = true;
                fail_all(batch, &CommitError::TransactionFailed(Arc::new(e)));
            }
        }
    }

    /// Fsyncs the blob files sled wrote (normally none, `super::blobs`) and `blobs/`, before
    /// the group goes to be flushed: here, because the transaction that wrote them has
    /// returned, so each is complete (the syncer, running beside the next transaction, could
    /// meet one half written and take it as synced).
    fn sync_blobs(&mut self) -> Result<(), CommitError> {
        let Some(blobs) = self.blobs.as_mut() else {
            return Ok(());
        };
        match blobs.sync_new() {
            Ok(0) => Ok(()),
            Ok(synced) => {
                tracing::warn!(
                    synced,
                    "sled wrote blob files (fsynced); this data dir's segments are too small \
                     to prevent them (docs/operations.md, \"Blob files\")"
                );
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "fsync of sled's blob files failed");
                Err(CommitError::BlobSyncFailed(Arc::new(e)))
            }
        }
    }

    /// [`Committer::recover`], once nothing may still be flushing the database about to be
    /// closed.
    fn drain_and_recover(&mut self) -> Result<(), CommitError> {
        self.drain_syncer();
        self.recover()
    }

    /// After a storage error: if the data dir takes a synced write again, closes and
    /// reopens the database, and reloads the counters from what is really on disk.
    fn recover(&mut self) -> Result<(), CommitError> {
        probe_storage(&self.config.data_dir)
            .map_err(|e| CommitError::StorageStillFailing(Arc::new(e)))?;
        tracing::info!("storage works again; reopening the database");
        if let Some(old) = self.handles.take() {
            self.slot.store(None);
            self.log = None;
            // Readers hold the handles only for the length of one call.
            let deadline = Instant::now() + std::time::Duration::from_secs(5);
            while Arc::strong_count(&old) > 1 && Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            drop(old);
        }
        let reopen_failed = |e: StoreError| CommitError::ReopenFailed(Arc::new(e));
        let Opened {
            handles,
            revision,
            counts,
            first_retained,
            watermark,
            unreclaimed,
        } = open_handles(&self.config).map_err(reopen_failed)?;
        self.log = if self.config.fsync {
            let log = File::open(self.config.data_dir.join("db"));
            Some(Arc::new(log.map_err(|e| reopen_failed(e.into()))?))
        } else {
            None
        };
        // What the failed batch left in memory is gone; what reached the disk stays. Any
        // key may differ from what readers last saw, and a reader waiting for a change to
        // become durable must read again.
        self.feed.durability.reopened();
        let settled = self.feed.seq.fetch_add(1, Ordering::SeqCst) + 2;
        self.feed.stamps.stamp_all(settled);
        self.feed.seq.fetch_add(1, Ordering::SeqCst);
        self.revision = revision;
        self.counts = counts;
        self.sweep.set_watermark(&watermark);
        self.watermark = watermark;
        self.unreclaimed = unreclaimed;
        self.feed.unreclaimed.store(unreclaimed, Ordering::Relaxed);
        self.feed.committed.store(revision, Ordering::SeqCst);
        self.feed
            .first_retained
            .store(first_retained, Ordering::SeqCst);
        for (slot, count) in self.feed.counts.iter().zip(counts) {
            slot.store(count, Ordering::Relaxed);
        }
        self.unpublished.retain(|e| e.revision <= revision);
        let handles = Arc::new(handles);
        self.slot.store(Some(handles.clone()));
        self.handles = Some(handles);
        self.broken = false;
        self.feed.durable.send_replace(revision);
        // The database holds exactly what is on disk now.
        self.feed.durability.publish(settled);
        pipeline::publish(
            &self.feed,
            &self.metrics,
            std::mem::take(&mut self.unpublished),
        );
        tracing::info!(revision, "database reopened");
        Ok(())
    }

    fn handles(&self) -> &Handles {
        self.handles.as_ref().expect("open unless broken")
    }

    /// Drops events beyond the retention count or age, oldest first, whole chunks at a
    /// time (so up to one chunk more than the count stays), at most about `max_events`. Not
    /// flushed on its own: a prune lost to a crash only keeps more history.
    fn prune(&mut self, now: i64, max_events: u64) {
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
            dropped_to = end;
            self.feed.first_retained.store(end, Ordering::SeqCst);
        }
    }

    /// The expiry keys each announce op of the batch takes (empty for other ops), read
    /// before the transaction, which cannot scan. The committer is the only writer and
    /// announcing runs first in the transaction, so this is exactly what is due between the
    /// watermark and each op's bound: an entry committed after an outside scan could have
    /// been passed over for good.
    fn scan_due(&self, ops: &[&Op], now: i64) -> Result<Vec<Vec<Vec<u8>>>, StoreError> {
        let expiry = &self.handles().trees.expiry;
        let mut after = self.watermark.clone();
        ops.iter()
            .map(|op| {
                let Op::Announce { upto, limit } = op else {
                    return Ok(Vec::new());
                };
                let bound = keys::due_bound((*upto).min(now));
                if after.as_slice() >= &bound[..] {
                    return Ok(Vec::new()); // an empty range; sled would panic on a reversed one
                }
                let due = expiry
                    .range::<Vec<u8>, _>((after_watermark(&after), Bound::Excluded(bound.to_vec())))
                    .keys()
                    .take(*limit)
                    .map(|key| Ok(key?.to_vec()))
                    .collect::<Result<Vec<_>, StoreError>>()?;
                if let Some(last) = due.last() {
                    after.clone_from(last);
                }
                Ok(due)
            })
            .collect()
    }

    /// Applies every op in one transaction (`due[i]`: what op `i` announces). The closure
    /// may be re-run, so it only computes.
    fn transact(
        &self,
        ops: &[&Op],
        due: &[Vec<Vec<u8>>],
        now: i64,
    ) -> Result<Transacted, StoreError> {
        let t = &self.handles().trees;
        let trees = (
            &t.items,
            &t.expiry,
            &t.tm_node,
            &t.node_tms,
            &t.events,
            &t.meta,
        );
        trees
            .transaction(|(items, expiry, tm_node, node_tms, events, meta)| {
                // Built afresh on every run of the closure: sled may re-run it.
                let tx = Tx {
                    items,
                    expiry,
                    tm_node,
                    node_tms,
                    now,
                    revision: Cell::new(self.revision),
                    emitted: RefCell::new(Vec::new()),
                    counts: Cell::new(self.counts.map(|c| c as i64)),
                    watermark: RefCell::new(self.watermark.clone()),
                    unreclaimed: Cell::new(self.unreclaimed as i64),
                    announcing_stopped: Cell::new(false),
                };
                let outcomes = ops
                    .iter()
                    .zip(due)
                    .map(|(op, due)| tx.apply(op, due))
                    .collect::<TxResult<Vec<_>>>()?;
                for chunk in codec::chunks(&tx.emitted.borrow()) {
                    events.insert(
                        &keys::event_key(chunk[0].revision),
                        codec::encode_chunk(chunk),
                    )?;
                }
                let revision = tx.revision.get();
                if revision != self.revision {
                    meta.insert(REVISION_KEY, &revision.to_be_bytes())?;
                }
                let counts = tx.counts.get().map(|c| c.max(0) as u64);
                if counts != self.counts {
                    meta.insert(COUNTS_KEY, encode_counts(&counts))?;
                }
                let watermark = tx.watermark.into_inner();
                if watermark != self.watermark {
                    meta.insert(WATERMARK_KEY, watermark.as_slice())?;
                }
                let unreclaimed = tx.unreclaimed.get().max(0) as u64;
                if unreclaimed != self.unreclaimed {
                    meta.insert(UNRECLAIMED_KEY, &unreclaimed.to_be_bytes())?;
                }
                Ok(Transacted {
                    outcomes,
                    events: tx.emitted.into_inner(),
                    revision,
                    counts,
                    watermark,
                    unreclaimed,
                })
            })
            .map_err(|e| match e {
                sled::transaction::TransactionError::Abort(e) => e,
                sled::transaction::TransactionError::Storage(e) => StoreError::Sled(e),
            })
    }
}

/// What a committed transaction did: one outcome per op, the events in revision order,
/// and the revision, counts, watermark and unreclaimed count after it.
struct Transacted {
    outcomes: Vec<Result<Applied, StoreError>>,
    events: Vec<Event>,
    revision: u64,
    counts: Counts,
    watermark: Vec<u8>,
    unreclaimed: u64,
}

/// Answers every request of a batch with the same failure: nothing of it was committed.
fn fail_all(batch: &mut Vec<Commit>, error: &CommitError) {
    for commit in batch.drain(..) {
        if let Some(reply) = commit.reply {
            let _ = reply.send(Err(StoreError::NotCommitted(error.clone())));
        }
    }
}

/// Free space the data dir needs before the database is reopened: reopening writes (sled
/// segments are 512 KiB), and a reopen that fails would leave readers without a database.
const REOPEN_FREE_BYTES: u64 = 16 * 1024 * 1024;

/// Whether the storage fault has cleared: enough free space, and a small synced write works.
fn probe_storage(dir: &std::path::Path) -> std::io::Result<()> {
    use std::io::Write;
    let stat = rustix::fs::statvfs(dir)?;
    let free = stat.f_bavail.saturating_mul(stat.f_frsize);
    if free < REOPEN_FREE_BYTES {
        return Err(std::io::Error::other(format!(
            "only {free} bytes free in the data dir; waiting for {REOPEN_FREE_BYTES}"
        )));
    }
    let path = dir.join(".blocklistd-probe");
    let result = (|| {
        let mut file = File::create(&path)?;
        file.write_all(&[0u8; 4096])?;
        file.sync_all()
    })();
    let _ = std::fs::remove_file(&path);
    result
}

/// What one op did, the revision after it, and the earliest finite end it wrote (to wake
/// the sweeper; `None` when it wrote none).
struct Applied {
    outcome: Outcome,
    revision: u64,
    earliest_end: Option<i64>,
}

/// `end`, or `earliest` when that comes first.
fn earlier(earliest: Option<i64>, end: i64) -> Option<i64> {
    Some(earliest.map_or(end, |earliest| earliest.min(end)))
}

type TxResult<T> = ConflictableTransactionResult<T, StoreError>;

fn registration_change(tm: &str, node: &str) -> Change {
    Change::Registration {
        tm: tm.to_owned(),
        node: node.to_owned(),
    }
}

/// One transaction's view of the trees.
struct Tx<'a> {
    items: &'a TransactionalTree,
    expiry: &'a TransactionalTree,
    tm_node: &'a TransactionalTree,
    node_tms: &'a TransactionalTree,
    /// Commit time: what counts as expired, and the time stamped on events.
    now: i64,
    /// The last revision handed out in this transaction.
    revision: Cell<u64>,
    /// The events written, in revision order, for publishing once durable.
    emitted: RefCell<Vec<Event>>,
    /// Stored items per (kind, action) as this transaction goes.
    counts: Cell<[i64; 4]>,
    /// The expiry watermark as this transaction goes.
    watermark: RefCell<Vec<u8>>,
    /// Expiry entries at or before the watermark, as this transaction goes.
    unreclaimed: Cell<i64>,
    /// An announce op met an item not due yet: later ones in this transaction announce
    /// nothing, since their keys were scanned past it and the watermark must not skip it.
    announcing_stopped: Cell<bool>,
}

impl Tx<'_> {
    /// Applies one op. The outer `Result` aborts the whole transaction (storage errors);
    /// the inner one fails only this request (a corrupt stored value).
    fn apply(&self, op: &Op, due: &[Vec<u8>]) -> TxResult<Result<Applied, StoreError>> {
        let applied = match op {
            Op::Add { kind, items, now } => self.add(*kind, items, *now),
            Op::Remove { kind, id } => self.remove(*kind, id),
            Op::Announce { .. } => self.announce(due),
            Op::Reclaim { expiry_keys } => self.reclaim(expiry_keys),
            Op::Register { registrations } => self.register(registrations),
            Op::Unregister { tm } => self.unregister(tm),
            Op::Import { items, merge } => self.import(items, *merge),
            Op::Clear { items, tms } => self.clear(items, tms),
        }?;
        Ok(applied.map(|(outcome, earliest_end)| Applied {
            outcome,
            revision: self.revision.get(),
            earliest_end,
        }))
    }

    /// Records the event of one change under the next revision, for this transaction.
    fn emit(&self, event: EventType, change: Change) -> TxResult<()> {
        let revision = self.revision.get() + 1;
        self.revision.set(revision);
        // Stored with the transaction's other events, in chunks, once all ops have run.
        let event = Event::new(revision, event, self.now, change);
        self.emitted.borrow_mut().push(event);
        Ok(())
    }

    fn emit_item(&self, event: EventType, kind: Kind, id: &str, block: &Block) -> TxResult<()> {
        let item = Item::new(id.to_owned(), block.clone());
        self.emit(event, Change::Item { kind, item })
    }

    fn register(
        &self,
        registrations: &[(String, String)],
    ) -> TxResult<Result<(Outcome, Option<i64>), StoreError>> {
        // Read every old node first, so a corrupt value fails the request before any write.
        let mut current: HashMap<&str, Option<String>> = HashMap::new();
        for (tm, _) in registrations {
            if !current.contains_key(tm.as_str()) {
                match self.node_of(tm)? {
                    Ok(old) => current.insert(tm, old),
                    Err(e) => return Ok(Err(e)),
                };
            }
        }
        let mut results = Vec::with_capacity(registrations.len());
        for (tm, node) in registrations {
            // A repeated task manager moves from where the earlier pair put it.
            let old = current.insert(tm, Some(node.clone())).flatten();
            let result = match old {
                Some(old) if old == *node => Registered::Unchanged,
                Some(old) => {
                    self.node_tms.remove(keys::node_tm_key(&old, tm))?;
                    Registered::Moved
                }
                None => Registered::Created,
            };
            if result != Registered::Unchanged {
                self.tm_node
                    .insert(tm.as_bytes(), codec::encode_registration(node))?;
                self.node_tms.insert(keys::node_tm_key(node, tm), &[])?;
                self.emit(EventType::Registered, registration_change(tm, node))?;
            }
            results.push(result);
        }
        Ok(Ok((Outcome::Registered(results), None)))
    }

    fn import(
        &self,
        items: &[(Kind, Item)],
        merge: bool,
    ) -> TxResult<Result<(Outcome, Option<i64>), StoreError>> {
        // Read everything first, so a corrupt value fails the request before any write.
        let mut olds = Vec::with_capacity(items.len());
        for (kind, item) in items {
            match self.read(*kind, &item.id)? {
                Ok(old) => olds.push(old),
                Err(e) => return Ok(Err(e)),
            }
        }
        let mut written = 0;
        let mut earliest_end = None;
        for ((kind, item), old) in items.iter().zip(olds) {
            if item.end_timestamp <= self.now {
                continue; // expired since the export
            }
            let (kind, id) = (*kind, item.id.as_str());
            let active = old.as_ref().filter(|b| b.is_active(self.now));
            let block = match active {
                Some(existing) if merge => {
                    let mut merged = existing.clone();
                    merged.merge(item.action, item.end_timestamp, &item.cause);
                    merged
                }
                _ => item.block(),
            };
            self.store(kind, id, old.as_ref(), &block)?;
            if !block.is_permanent() {
                earliest_end = earlier(earliest_end, block.end);
            }
            written += 1;
        }
        Ok(Ok((Outcome::Count(written), earliest_end)))
    }

    fn clear(
        &self,
        items: &[(Kind, String)],
        tms: &[String],
    ) -> TxResult<Result<(Outcome, Option<i64>), StoreError>> {
        // Read everything first, so a corrupt value fails the request before any removal:
        // the transaction commits the group's other ops, and half a clear would go with it.
        for (kind, id) in items {
            if let Err(e) = self.read(*kind, id)? {
                return Ok(Err(e));
            }
        }
        for tm in tms {
            if let Err(e) = self.node_of(tm)? {
                return Ok(Err(e));
            }
        }
        let mut removed = 0;
        for (kind, id) in items {
            match self.remove(*kind, id)? {
                Ok((Outcome::Removed(Some(_)), _)) => removed += 1,
                Ok(_) => {}
                Err(e) => return Ok(Err(e)),
            }
        }
        for tm in tms {
            if let Err(e) = self.unregister(tm)? {
                return Ok(Err(e));
            }
        }
        Ok(Ok((Outcome::Count(removed), None)))
    }

    fn unregister(&self, tm: &str) -> TxResult<Result<(Outcome, Option<i64>), StoreError>> {
        let old = match self.node_of(tm)? {
            Ok(old) => old,
            Err(e) => return Ok(Err(e)),
        };
        if let Some(node) = &old {
            self.tm_node.remove(tm.as_bytes())?;
            self.node_tms.remove(keys::node_tm_key(node, tm))?;
            self.emit(EventType::Unregistered, registration_change(tm, node))?;
        }
        Ok(Ok((Outcome::Unregistered(old), None)))
    }

    /// The node `tm` is registered on.
    fn node_of(&self, tm: &str) -> TxResult<Result<Option<String>, StoreError>> {
        let Some(bytes) = self.tm_node.get(tm.as_bytes())? else {
            return Ok(Ok(None));
        };
        Ok(registration(tm, &bytes).map(Some))
    }

    fn add(
        &self,
        kind: Kind,
        items: &[NewItem],
        start: i64,
    ) -> TxResult<Result<(Outcome, Option<i64>), StoreError>> {
        // The state each id has as the batch goes: first the stored state, then each
        // element's result, so a later element of the batch arrives after an earlier one.
        let mut stored: HashMap<&str, Option<Block>> = HashMap::new();
        let mut state: HashMap<&str, Option<Block>> = HashMap::new();
        let mut order: Vec<&str> = Vec::new();
        let mut merged: Vec<&str> = Vec::new();
        let mut conflicts = Vec::new();
        for (index, new) in items.iter().enumerate() {
            let id = new.id.as_str();
            if !state.contains_key(id) {
                let old = match self.read(kind, id)? {
                    Ok(old) => old,
                    Err(e) => return Ok(Err(e)),
                };
                let active = old.clone().filter(|b| b.is_active(self.now));
                stored.insert(id, old);
                state.insert(id, active);
                order.push(id);
            }
            let current = state.get_mut(id).expect("inserted above");
            match current {
                None => *current = Some(new.to_block(start)),
                Some(block) if new.allow_merge => {
                    block.merge(new.action, new.end, &new.cause);
                    if !merged.contains(&id) {
                        merged.push(id);
                    }
                }
                Some(_) => conflicts.push((index, new.id.clone())),
            }
        }
        if !conflicts.is_empty() {
            return Ok(Ok((Outcome::Added(AddOutcome::Conflict(conflicts)), None)));
        }
        let mut earliest_end = None;
        for id in &order {
            let block = state[id]
                .as_ref()
                .expect("every touched id ends with a block");
            self.store(kind, id, stored[id].as_ref(), block)?;
            if !block.is_permanent() {
                earliest_end = earlier(earliest_end, block.end);
            }
        }
        let merged = merged
            .iter()
            .map(|id| {
                Item::new(
                    (*id).to_owned(),
                    state[id].clone().expect("merged ids exist"),
                )
            })
            .collect();
        Ok(Ok((
            Outcome::Added(AddOutcome::Written { merged }),
            earliest_end,
        )))
    }

    fn remove(&self, kind: Kind, id: &str) -> TxResult<Result<(Outcome, Option<i64>), StoreError>> {
        let old = match self.read(kind, id)? {
            Ok(old) => old,
            Err(e) => return Ok(Err(e)),
        };
        let Some(old) = old else {
            return Ok(Ok((Outcome::Removed(None), None)));
        };
        let was_announced = self.is_announced(kind, id, &old);
        self.delete(kind, id, &old)?;
        if was_announced {
            // Already expired for everyone; only its storage was left.
            return Ok(Ok((Outcome::Removed(None), None)));
        }
        // An expired item the sweeper has not reached is gone for the caller too (404), but
        // deleting it here is still right: it saves the sweeper the work. Subscribers learn
        // that it expired.
        let event = if old.is_active(self.now) {
            EventType::Removed
        } else {
            EventType::Expired
        };
        self.emit_item(event, kind, id, &old)?;
        let removed = old
            .is_active(self.now)
            .then(|| Item::new(id.to_owned(), old));
        Ok(Ok((Outcome::Removed(removed), None)))
    }

    /// Announces the items behind `due` (scanned by [`Committer::scan_due`], in key
    /// order) expired: an `expired` event each, out of the counts, and the watermark moved
    /// past their keys. Their entries stay for [`Tx::reclaim`]: deleting them here doubled
    /// the cost of a mass expiry to the writers sharing the committer.
    fn announce(&self, due: &[Vec<u8>]) -> TxResult<Result<(Outcome, Option<i64>), StoreError>> {
        let mut expired = Vec::new();
        for key in due {
            if self.announcing_stopped.get() {
                break;
            }
            let Some((end, kind, id)) = keys::parse_expiry_key(key) else {
                // Not ours to interpret; drop it so it cannot block the sweeper forever.
                self.expiry.remove(key.as_slice())?;
                continue;
            };
            match self.read(kind, id)? {
                // A corrupt item is passed over (never announced) for `blocklistd check` to
                // report: holding the watermark on it would stop all expiry.
                Err(e) => {
                    tracing::error!(error = %e, "a due item cannot be read; not announced");
                    self.add_unreclaimed(1); // its entry is left behind the watermark
                }
                Ok(Some(block)) if block.end == end => {
                    if block.is_active(self.now) {
                        // The scan and the commit disagree on now (the clock went back).
                        self.announcing_stopped.set(true);
                        break;
                    }
                    self.count(kind, &block, -1);
                    self.add_unreclaimed(1);
                    self.emit_item(EventType::Expired, kind, id, &block)?;
                    expired.push(Expired {
                        kind,
                        item: Item::new(id.to_owned(), block),
                    });
                }
                // A stale entry (its item is gone or ends elsewhere): never expected, since
                // every write moves the entry with the item, but harmless to drop.
                _ => {
                    self.expiry.remove(key.as_slice())?;
                }
            }
            self.watermark.borrow_mut().clone_from(key);
        }
        Ok(Ok((Outcome::Expired(expired), None)))
    }

    /// Deletes the entries behind `expiry_keys` (from [`super::Store::reclaimable`]) that
    /// are still there and at or before the watermark, and each one's item where it is
    /// still the announced one (same end). No event and no count: both happened when it
    /// was announced.
    fn reclaim(
        &self,
        expiry_keys: &[Vec<u8>],
    ) -> TxResult<Result<(Outcome, Option<i64>), StoreError>> {
        let mut deleted = 0;
        for key in expiry_keys {
            if key.as_slice() > self.watermark.borrow().as_slice() {
                continue; // never handed out so; not announced
            }
            if self.expiry.remove(key.as_slice())?.is_none() {
                continue; // gone since the scan (a write replaced the item)
            }
            deleted += 1;
            let Some((end, kind, id)) = keys::parse_expiry_key(key) else {
                continue;
            };
            // A corrupt item stays for `blocklistd check` to report.
            if let Ok(Some(block)) = self.read(kind, id)? {
                if block.end == end {
                    self.items.remove(keys::item_key(kind, id))?;
                }
            }
        }
        self.add_unreclaimed(-(deleted as i64));
        Ok(Ok((Outcome::Count(deleted), None)))
    }

    fn add_unreclaimed(&self, delta: i64) {
        self.unreclaimed.set(self.unreclaimed.get() + delta);
    }

    /// Whether `(kind, id)`'s `block` has been announced expired (see
    /// [`super::WATERMARK_KEY`]).
    fn is_announced(&self, kind: Kind, id: &str, block: &Block) -> bool {
        announced(&self.watermark.borrow(), block.end, kind, id)
    }

    /// The stored block (active or not) of `(kind, id)`.
    fn read(&self, kind: Kind, id: &str) -> TxResult<Result<Option<Block>, StoreError>> {
        let key = keys::item_key(kind, id);
        let Some(bytes) = self.items.get(&key)? else {
            return Ok(Ok(None));
        };
        Ok(codec::decode_block(&bytes)
            .map(Some)
            .map_err(|source| StoreError::Corrupt {
                key: format!("{}/{id}", kind.plural()),
                source,
            }))
    }

    fn count(&self, kind: Kind, block: &Block, delta: i64) {
        let mut counts = self.counts.get();
        counts[count_slot(kind, block.action)] += delta;
        self.counts.set(counts);
    }

    /// Stores `new` for `(kind, id)`, moving its expiry entry from `old`'s end to `new`'s.
    fn write(&self, kind: Kind, id: &str, old: Option<&Block>, new: &Block) -> TxResult<()> {
        match old {
            // Announced: out of the counts already, and its entry goes below.
            Some(old) if self.is_announced(kind, id, old) => self.add_unreclaimed(-1),
            Some(old) => self.count(kind, old, -1),
            None => {}
        }
        self.count(kind, new, 1);
        // Remove the old index entry first: when both ends are equal, the insert below puts
        // it back (remove-after-insert would lose it).
        if let Some(old) = old.filter(|b| !b.is_permanent()) {
            self.expiry.remove(keys::expiry_key(old.end, kind, id))?;
        }
        if !new.is_permanent() {
            self.expiry
                .insert(keys::expiry_key(new.end, kind, id), &[])?;
        }
        self.items
            .insert(keys::item_key(kind, id), codec::encode_block(new))?;
        Ok(())
    }

    /// [`Tx::write`]s `block` over `old` and emits what a subscriber must see.
    fn store(&self, kind: Kind, id: &str, old: Option<&Block>, block: &Block) -> TxResult<()> {
        self.write(kind, id, old, block)?;
        match old {
            // Its `expired` event is out already; the new item is simply added.
            Some(old) if self.is_announced(kind, id, old) => {
                self.emit_item(EventType::Added, kind, id, block)?
            }
            // An expired item the sweeper has not reached yet ends before the new one
            // starts, so a subscriber sees the old block end first.
            Some(old) if !old.is_active(self.now) => {
                self.emit_item(EventType::Expired, kind, id, old)?;
                self.emit_item(EventType::Added, kind, id, block)?;
            }
            Some(_) => self.emit_item(EventType::Merged, kind, id, block)?,
            None => self.emit_item(EventType::Added, kind, id, block)?,
        }
        // An end that came (the request was validated before it) and that the watermark
        // has already passed: the sweeper will never announce it, so this write does.
        if self.is_announced(kind, id, block) {
            self.count(kind, block, -1);
            self.add_unreclaimed(1);
            self.emit_item(EventType::Expired, kind, id, block)?;
        }
        Ok(())
    }

    fn delete(&self, kind: Kind, id: &str, old: &Block) -> TxResult<()> {
        if self.is_announced(kind, id, old) {
            self.add_unreclaimed(-1);
        } else {
            self.count(kind, old, -1);
        }
        if !old.is_permanent() {
            self.expiry.remove(keys::expiry_key(old.end, kind, id))?;
        }
        self.items.remove(keys::item_key(kind, id))?;
        Ok(())
    }
}
