//! Fault recovery. After a storage error sled 0.34 refuses every write until the database
//! is reopened: this decides when to reopen (a failed transaction or flush), waits until the
//! storage takes a synced write again, reopens, reloads the counters from what is really on
//! disk, and retries while that fails.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::{Committer, Message};
use crate::store::pipeline::{publish, Stage};
use crate::store::CommitError;
use crate::store::{open_handles, Opened, StoreError};

/// How often a failed reopen is retried with no write to trigger it.
const REOPEN_RETRY: Duration = Duration::from_secs(1);

/// How often the committer looks for requests while the database is closed.
const REOPEN_POLL: Duration = Duration::from_millis(20);

/// Free space the data dir needs before the database is reopened: reopening writes (sled
/// segments are 512 KiB), and a reopen that fails would leave readers without a database.
const REOPEN_FREE_BYTES: u64 = 16 * 1024 * 1024;

impl Committer {
    /// Whether the database is closed or refuses writes, so that the next message must not
    /// be waited for without retrying the reopen: readers of the keys a failed transaction
    /// touched wait for the reopen (`crate::store::durable`).
    pub(super) fn needs_reopen(&self) -> bool {
        self.handles.is_none() || self.broken
    }

    /// Before a batch: reopens the database if a transaction or a flush failed since the
    /// last one. Err: it stays closed, and the batch must be refused.
    pub(super) fn reopen_if_broken(&mut self) -> Result<(), CommitError> {
        if self.sync_failed.load(Ordering::SeqCst) {
            self.broken = true;
        }
        if self.broken {
            self.drain_and_recover()?;
        }
        Ok(())
    }

    /// While a reopen has failed, readers get 503: retries it every [`REOPEN_RETRY`] rather
    /// than only when a write arrives (which retries it itself, so one is returned at once).
    /// `None`: the channel closed.
    pub(super) fn wait_reopening(&mut self) -> Option<Message> {
        let mut last_try = Instant::now();
        loop {
            match self.requests.try_recv() {
                Ok(message) => return Some(message),
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

    /// [`Committer::recover`], once nothing may still be flushing the database about to be
    /// closed.
    fn drain_and_recover(&mut self) -> Result<(), CommitError> {
        self.drain_syncer();
        self.recover()
    }

    /// After a storage error: if the data dir takes a synced write again, closes and
    /// reopens the database, and reloads the counters from what is really on disk.
    fn recover(&mut self) -> Result<(), CommitError> {
        if self.config.on_disk() {
            probe_storage(&self.config.data_dir)
                .map_err(|e| CommitError::StorageStillFailing(Arc::new(e)))?;
        }
        tracing::info!("storage works again; reopening the database");
        if let Some(old) = self.handles.take() {
            self.slot.store(None);
            self.log = None;
            // Readers hold the handles only for the length of one call.
            let deadline = Instant::now() + Duration::from_secs(5);
            while Arc::strong_count(&old) > 1 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            drop(old);
        }
        // The prunes not yet handed over were of the database just closed; the reopened
        // one prunes again what is due in it.
        self.pruned.take();
        let reopen_failed = |e: StoreError| CommitError::ReopenFailed(Arc::new(e));
        let Opened {
            handles,
            revision,
            counts,
            first_retained,
            watermark,
            unreclaimed,
            policy,
            members,
            exposure,
            prefixes,
            allow_entries,
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
        if let Some(policy) = policy {
            self.policy.clone_from(&policy);
            *self.guards.policy.lock().expect("not poisoned") = policy;
        }
        self.members = members;
        self.exposure = exposure;
        *self.guards.exposure.lock().expect("not poisoned") = exposure;
        self.prefixes = prefixes;
        self.allow_entries = allow_entries;
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
        publish(
            &self.feed,
            &self.metrics,
            std::mem::take(&mut self.unpublished),
        );
        tracing::info!(revision, "database reopened");
        Ok(())
    }
}

/// Whether the storage fault has cleared: enough free space, and a small synced write works.
fn probe_storage(dir: &Path) -> std::io::Result<()> {
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
