//! The batching loop: takes one request, gathers whatever else is already waiting, commits
//! the batch in one transaction and hands the group to the syncer, which answers it once
//! durable.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::exposure::adopt_members;
use super::history::MAX_HISTORY_PRUNE;
use super::prune::MAX_PRUNE;
use super::tx::Transacted;
use super::{earlier, Committer, Message, Op};
use crate::model::{Change, Event};
use crate::store::pipeline::{Answer, Group, Stage};
use crate::store::CommitError;
use crate::store::{StoreError, Watched};

/// The most items one group commit writes; bigger batches wait for the next round.
const MAX_BATCH_WEIGHT: usize = 20_000;

impl Committer {
    pub(crate) fn run(mut self) {
        let mut batch: Vec<Op> = Vec::with_capacity(self.max_batch);
        loop {
            let next = if self.needs_reopen() {
                self.wait_reopening()
            } else {
                self.requests.blocking_recv()
            };
            let Some(first) = next else {
                return;
            };
            let stop = self.gather(first, &mut batch);
            // Also after a shutdown alone: the batch, empty or not, commits like any other
            // (a reopen if one is due, a flush through the syncer, a prune).
            self.commit(&mut batch);
            if stop {
                break;
            }
        }
        self.hand_over_pruned();
        // Let the durability thread answer everything committed, then stop it.
        self.stages = None;
        if let Some(syncer) = self.syncer.take() {
            let _ = syncer.join();
        }
        tracing::debug!("committer stopped");
    }

    /// Fills `batch` with `first` and whatever is already waiting, up to `max_batch`
    /// requests or [`MAX_BATCH_WEIGHT`] items. True when it met a shutdown (and took
    /// nothing after it).
    fn gather(&mut self, first: Message, batch: &mut Vec<Op>) -> bool {
        let mut weight = 0;
        let mut next = first;
        loop {
            match next {
                Message::Shutdown => return true,
                // Nothing to apply: the batch, empty or not, commits, and a commit first
                // reopens a store whose flush failed.
                Message::Wake => {}
                Message::Write(op) => {
                    weight += op.weight();
                    batch.push(*op);
                }
            }
            if batch.len() >= self.max_batch || weight >= MAX_BATCH_WEIGHT {
                return false;
            }
            match self.requests.try_recv() {
                Ok(message) => next = message,
                Err(_) => return false,
            }
        }
    }

    /// Commits one batch and passes it on to be made durable and answered.
    fn commit(&mut self, batch: &mut Vec<Op>) {
        if let Err(e) = self.reopen_if_broken() {
            tracing::warn!(error = %e, "the storage still fails; refusing writes");
            self.metrics.commit_failed("transaction");
            fail_all(batch, &e);
            return;
        }
        if let Err(e) = self.replica_refuses(batch) {
            self.metrics.commit_failed("transaction");
            fail_all(batch, &e);
            return;
        }
        let started = Instant::now();
        // Never before the watermark's end, even if the wall clock went back: an item
        // announced expired must stay expired (readers go by the same time).
        let now = self.sweep.now();
        let revision_before = self.revision;
        let requests = batch.len();
        // Dry runs are decided after the batch's transaction, against everything committed
        // up to it, and answered with its group: once all they were decided against is
        // durable. They stamp no key, since they change none.
        let mut dry_runs: Vec<Op> = batch.extract_if(.., |op| op.is_dry_run()).collect();
        announces_first(batch);
        if batch.iter().any(Op::is_client_write) {
            self.sweep.last_write.store(now, Ordering::Relaxed);
        }
        let due = match self.scan_due(batch, now) {
            Ok(due) => due,
            Err(e) => {
                tracing::error!(error = %e, "reading the expiry index failed");
                self.broken = true;
                self.metrics.commit_failed("transaction");
                let error = CommitError::TransactionFailed(Arc::new(e));
                fail_all(batch, &error);
                fail_all(&mut dry_runs, &error);
                return;
            }
        };
        // Seqlock around the transaction: readers that need a consistent listing retry when
        // the sequence moved (or is odd) while they scanned.
        let settled = self.feed.seq.fetch_add(1, Ordering::SeqCst) + 2;
        self.stamp(batch, &due, settled);
        let transacted = self.transact(batch, &due, now);
        if let Ok(transacted) = &transacted {
            self.adopt(transacted, settled);
        }
        self.feed.seq.fetch_add(1, Ordering::SeqCst);
        self.metrics
            .commit_batch_requests
            .observe(batch.len() as f64);
        match transacted {
            Ok(transacted) => {
                let revision = transacted.revision;
                let mut answers = self.answers(batch);
                answers.extend(self.rehearsals(dry_runs, now));
                let group = self.group(transacted, answers, settled, started);
                self.hand_over(group);
                // Prune at least what this commit wrote, so a stream of big commits cannot
                // outgrow the retention; MAX_PRUNE more is the catching up. While the syncer
                // flushes the group. Pruning rewrites leaves too: their blob files, if any,
                // are synced at once rather than left to the next commit (there may be none
                // for a while).
                self.prune(now, MAX_PRUNE + (revision - revision_before));
                self.prune_history(now, MAX_HISTORY_PRUNE);
                // As many records as requests (each keeps at most one), and the catching up.
                self.prune_records(now, requests);
                if self.sync_blobs().is_err() {
                    self.broken = true;
                }
            }
            Err(e) => {
                tracing::error!(error = %e, requests = batch.len(), "group commit failed");
                // sled 0.34 keeps failing every write after an I/O error; the next batch
                // reopens the database once the storage works again.
                self.broken = true;
                self.metrics.commit_failed("transaction");
                let error = CommitError::TransactionFailed(Arc::new(e));
                fail_all(batch, &error);
                fail_all(&mut dry_runs, &error);
            }
        }
    }

    /// Refuses a batch that writes while the replica refuses every write (etcd's NOSPACE
    /// alarm, still raised): nothing of it is applied, so no rebuild follows — the sweeper's
    /// retries under the alarm would otherwise make one a second, each a moment of 503s for
    /// readers. Dry runs alone go on.
    fn replica_refuses(&self, batch: &[Op]) -> Result<(), CommitError> {
        let Some(replica) = &self.config.replicate else {
            return Ok(());
        };
        if batch.iter().all(Op::is_dry_run) {
            return Ok(());
        }
        replica.refuses_writes().map_err(|e| {
            let requests = batch.len();
            tracing::warn!(error = %e, requests, "etcd refuses writes; the batch is refused");
            CommitError::TransactionFailed(Arc::new(e))
        })
    }

    /// Decides each dry run in turn against the committed state (none sees another's
    /// outcome: each is rolled back), and takes its answer.
    fn rehearsals(&mut self, dry_runs: Vec<Op>, now: i64) -> Vec<Box<dyn Answer>> {
        let mut answers = Vec::with_capacity(dry_runs.len());
        for op in dry_runs {
            // What an allowlist put would lift, or an unblock by selector remove, scanned
            // as for a real one (a dry run announces nothing).
            let items = &self.handles().trees.items;
            let due = match &op {
                Op::PutAllow(request) => super::allow::scan_covered(items, request.command.entry()),
                Op::RemoveSelected(request) => {
                    super::select::scan_selected(&self.handles().trees, &request.command, now)
                }
                _ => Ok(Vec::new()),
            };
            match due.and_then(|due| self.rehearse(&op, &due, now)) {
                Ok(()) => answers.push(op.answer(&self.metrics).0),
                Err(e) => {
                    tracing::error!(error = %e, "a dry run's transaction failed");
                    self.broken = true;
                    op.fail(StoreError::NotCommitted(CommitError::TransactionFailed(
                        Arc::new(e),
                    )));
                }
            }
        }
        answers
    }

    /// Stamps every key the batch may change with `settled`, before the transaction
    /// applies: a reader that sees a change finds its stamp (see `crate::store::durable`);
    /// the caches of answers drop what it may change.
    fn stamp(&self, batch: &[Op], due: &[Vec<Vec<u8>>], settled: u64) {
        self.feed
            .stamps
            .stamp_touched(settled, &self.members, |stamp| {
                for (op, due) in batch.iter().zip(due) {
                    op.touched(due, &mut *stamp);
                }
            });
    }

    /// Takes on what a committed transaction left: the revision, counts, watermark and
    /// unreclaimed count, for the next batch and for readers.
    fn adopt(&mut self, transacted: &Transacted, settled: u64) {
        let Transacted {
            events,
            revision,
            counts,
            watermark,
            unreclaimed,
            buckets,
            policy,
            exposure,
            members,
            prefixes,
            allow_entries,
            writes: _,
        } = transacted;
        self.allow_entries = *allow_entries;
        self.revision = *revision;
        if let Some(policy) = policy {
            self.policy.clone_from(policy);
            *self.guards.policy.lock().expect("not poisoned") = policy.clone();
        }
        if *exposure != self.exposure {
            self.exposure = *exposure;
            *self.guards.exposure.lock().expect("not poisoned") = *exposure;
        }
        adopt_members(&mut self.members, members);
        if let Some(prefixes) = prefixes {
            self.prefixes.clone_from(prefixes);
        }
        if *buckets != self.buckets {
            self.buckets = *buckets;
            *self.guards.buckets.lock().expect("not poisoned") = *buckets;
        }
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
        if cfg!(debug_assertions) {
            self.assert_stamped(events, settled);
        }
    }

    /// Every change has its event, so the events name every key the transaction changed:
    /// each must have been stamped before it.
    fn assert_stamped(&self, events: &[Event], settled: u64) {
        for event in events {
            let key = match &event.change {
                Change::Item { kind, item } => Watched::Item(*kind, &item.id),
                Change::Registration { tm, .. } => Watched::Registration(tm),
                // Policy and allowlist changes: no key a point read is stamped by.
                Change::Json(_) => continue,
            };
            let stamp = self.feed.stamps.stamp_of(key);
            assert!(stamp >= settled, "{key:?} changed unstamped");
        }
    }

    /// Takes each request's answer out of the committed batch, and wakes the sweeper if
    /// the batch wrote an end earlier than the one it sleeps on.
    fn answers(&self, batch: &mut Vec<Op>) -> Vec<Box<dyn Answer>> {
        let mut earliest = None;
        let answers = batch
            .drain(..)
            .map(|op| {
                let (answer, earliest_end) = op.answer(&self.metrics);
                earliest = earlier(earliest, earliest_end);
                answer
            })
            .collect();
        // The sweeper may look at the new deadline before it is durable: its expiry commits
        // after this group, so it cannot overtake it.
        if let Some(earliest) = earliest {
            self.sweep.deadline_added(earliest);
        }
        answers
    }

    /// The group the syncer makes durable and answers.
    fn group(
        &mut self,
        transacted: Transacted,
        answers: Vec<Box<dyn Answer>>,
        settled: u64,
        started: Instant,
    ) -> Group {
        let blobs_failed = self.sync_blobs().err();
        Group {
            handles: self.handles.clone().expect("open unless broken"),
            log: self.log.clone(),
            revision: transacted.revision,
            seq: settled,
            blobs_failed,
            events: transacted.events,
            writes: {
                let mut writes = self.pruned.take();
                writes.extend(transacted.writes);
                writes
            },
            answers,
            started,
        }
    }

    /// At a stop, the writes of the prunes after the last group, logged for the replica:
    /// a group of their own, without a transaction, events or answers.
    fn hand_over_pruned(&mut self) {
        if self.pruned.borrow().is_empty() || self.broken {
            return;
        }
        let group = Group {
            handles: self.handles.clone().expect("open unless broken"),
            log: self.log.clone(),
            revision: self.revision,
            seq: self.feed.seq.load(Ordering::SeqCst),
            blobs_failed: None,
            events: Vec::new(),
            writes: self.pruned.take(),
            answers: Vec::new(),
            started: Instant::now(),
        };
        self.hand_over(group);
    }

    /// Sends `group` to the syncer; blocks while the disk is `PIPELINE_DEPTH` groups
    /// behind.
    fn hand_over(&self, group: Group) {
        let Some(stages) = &self.stages else {
            return;
        };
        if let Err(unsent) = stages.send(Stage::Group(group)) {
            tracing::error!("the durability thread is gone");
            if let Stage::Group(group) = unsent.0 {
                for answer in group.answers {
                    answer.fail(StoreError::Closed);
                }
            }
        }
    }

    /// Fsyncs the blob files sled wrote (normally none, `crate::store::blobs`) and
    /// `blobs/`, before the group goes to be flushed: here, because the transaction that
    /// wrote them has returned, so each is complete (the syncer, running beside the next
    /// transaction, could meet one half written and take it as synced).
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
}

/// Announcing runs first in the transaction, so that the entries it scanned for are all
/// there is up to its bound: nothing else in the batch has written yet. The sort is
/// stable: the other requests keep their order.
fn announces_first(batch: &mut [Op]) {
    batch.sort_by_key(|op| !matches!(op, Op::Announce(_)));
}

/// Answers every request of a batch with the same failure: nothing of it was committed.
fn fail_all(batch: &mut Vec<Op>, error: &CommitError) {
    for op in batch.drain(..) {
        op.fail(StoreError::NotCommitted(error.clone()));
    }
}
