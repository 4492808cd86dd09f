//! Reads a crash cannot contradict.
//!
//! The committer's transaction is visible to sled readers at once, but durable only after the
//! syncer's flush and fsync that follow it. A read that answered from such a transaction
//! could show a change that a crash then takes back (a scheduler evacuates a node whose block
//! never existed, or allocates on one whose removal never happened). So every answer is
//! held back until what it saw is durable.
//!
//! Which reads must wait is told by the change stamps ([`super::stamps`]) and one more
//! number, the **durable sequence**: the commit sequence number (`Feed::seq` after a group's
//! transaction) up to which every transaction is on disk.
//!
//! - The committer stamps every key a group may change with the group's sequence number
//!   *before* its transaction applies (`Op::touched` in [`super::commit`]). So a reader that
//!   sees a group's change and then loads the key's stamp gets that group's number or a later
//!   one (sled publishes the change with a release store after the stamp).
//! - The syncer publishes a group's sequence number as durable only after the flush and fsync
//!   covering it; a reopen after a storage fault publishes its own, once the database holds
//!   exactly what is on disk.
//! - A point read records the stamp of every key it read ([`Seen`]); it is answered at once
//!   when none is above the durable sequence — the case of every key no group in flight
//!   touches, so an unrelated write storm costs reads nothing — and otherwise once the
//!   durable sequence reaches the highest stamp (about one group commit). Collisions of
//!   stamps only cost such a wait.
//! - A scan cannot name its keys beforehand (a registration it did not see may be in
//!   flight): it waits for the [`horizon`](Durability::horizon), every group whose
//!   transaction had begun when the scan ended.
//! - A reopen in between may have dropped the very change a read saw: the reader then reads
//!   again ([`Seen`] carries the reopen count it started under).
//!
//! Waiting, rather than answering from the last durable state, because sled keeps no older
//! versions to answer from; the wait is bounded by [`READ_TIMEOUT`], after which the read
//! fails with 503 (the disk does not confirm writes: the daemon cannot say what is true).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use super::{Result, Store, StoreError, Watched};

/// The longest a read waits for the disk to confirm what it saw before it answers 503.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The durable sequence and the reopen count, shared by the committer, the syncer and
/// readers.
pub(crate) struct Durability {
    /// Every transaction with a sequence number up to this is durable (or was replaced by a
    /// reopen). Read on every point read, so an atomic rather than the watch's lock.
    seq: AtomicU64,
    /// The same number, for readers that wait for it.
    changed: watch::Sender<u64>,
    /// How many times the database was reopened after a storage fault.
    reopens: AtomicU64,
}

/// What a read depended on: the highest change stamp among the keys it read, and the reopen
/// count when it started. Start one with [`super::Store::seen`] before reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub(super) need: u64,
    pub(super) reopens: u64,
}

impl Seen {
    /// The read depends on changes up to sequence number `seq`.
    pub(super) fn depends_on(&mut self, seq: u64) {
        self.need = self.need.max(seq);
    }
}

impl Durability {
    pub fn new() -> Durability {
        Durability {
            seq: AtomicU64::new(0),
            changed: watch::Sender::new(0),
            reopens: AtomicU64::new(0),
        }
    }

    /// Where a read starts.
    pub fn start(&self) -> Seen {
        Seen {
            need: 0,
            reopens: self.reopens.load(Ordering::SeqCst),
        }
    }

    /// Everything up to `seq` is durable (called by the syncer after a flush and fsync, and
    /// by a reopen).
    pub fn publish(&self, seq: u64) {
        self.seq.fetch_max(seq, Ordering::SeqCst);
        self.changed.send_if_modified(|durable| {
            let moved = seq > *durable;
            *durable = (*durable).max(seq);
            moved
        });
    }

    /// The database was reopened: what readers saw before may be gone. Called before the
    /// reopen's stamps and [`Durability::publish`].
    pub fn reopened(&self) {
        self.reopens.fetch_add(1, Ordering::SeqCst);
    }

    /// The sequence number of every transaction that may have applied by now: the current
    /// one if it is still applying (odd `seq`), else the last. A scan that ends now may have
    /// seen any of them.
    pub fn horizon(seq: u64) -> u64 {
        seq + (seq & 1)
    }

    /// Whether everything `seen` depends on is durable and no reopen came between.
    pub fn settled(&self, seen: &Seen) -> bool {
        seen.need <= self.seq.load(Ordering::SeqCst)
            && seen.reopens == self.reopens.load(Ordering::SeqCst)
    }

    /// Waits until everything up to `need` is durable. Ok(true) when the read may be
    /// answered with what it read, Ok(false) when a reopen came between and it must read
    /// again.
    pub async fn wait(&self, seen: &Seen) -> Result<bool, StoreError> {
        if seen.need > self.seq.load(Ordering::SeqCst) {
            let mut changed = self.changed.subscribe();
            let waited =
                tokio::time::timeout(READ_TIMEOUT, changed.wait_for(|d| *d >= seen.need)).await;
            match waited {
                Ok(Ok(_)) => {}
                // The store shut down: nothing will become durable any more.
                Ok(Err(_)) => return Err(StoreError::Closed),
                Err(_) => return Err(StoreError::NotDurable(READ_TIMEOUT)),
            }
        }
        Ok(seen.reopens == self.reopens.load(Ordering::SeqCst))
    }
}

/// Reads whose answers must be durable: a [`Seen`] per read, then a wait if needed.
impl Store {
    /// Starts a read whose answer must be durable: hand it to the reads, then settle it with
    /// [`Store::confirm`] (or let [`Store::read_durably`] do both).
    pub fn seen(&self) -> Seen {
        self.shared.feed.durability.start()
    }

    /// Records that `seen`'s read depends on everything a scan that ends now may have seen
    /// (scans cannot name their keys beforehand).
    pub fn saw_all(&self, seen: &mut Seen) {
        let seq = self.shared.feed.seq.load(Ordering::SeqCst);
        seen.depends_on(Durability::horizon(seq));
    }

    /// Records that `seen`'s read depends on `key`, just read.
    pub(super) fn saw(&self, seen: &mut Seen, key: Watched<'_>) {
        seen.depends_on(self.shared.feed.stamps.stamp_of(key));
    }

    /// Waits (at most [`READ_TIMEOUT`]) until everything `seen` depends on is durable.
    /// True when the read may be answered with what it read; false when the database was
    /// reopened after a storage fault in between, and it must read again.
    pub async fn confirm(&self, seen: &Seen) -> Result<bool> {
        let durability = &self.shared.feed.durability;
        if durability.settled(seen) {
            return Ok(true);
        }
        durability.wait(seen).await
    }

    /// Runs `read` until its answer is one a crash cannot take back, and returns it: at once
    /// when none of the keys it read is being changed, else once the change is durable.
    ///
    /// `read` runs on the blocking pool: a sled read waits for the whole of any transaction
    /// applying meanwhile, and on an async worker that wait would hold up every request
    /// queued behind it.
    pub async fn read_durably<T: Send + 'static>(
        &self,
        read: impl Fn(&mut Seen) -> Result<T> + Send + Sync + 'static,
    ) -> Result<T> {
        let read = std::sync::Arc::new(read);
        // Each retry follows a reopen after a storage fault; more than a few in a row means
        // the storage keeps failing.
        for _ in 0..4 {
            let (store, read) = (self.clone(), read.clone());
            let (value, seen) = tokio::task::spawn_blocking(move || {
                let mut seen = store.seen();
                read(&mut seen).map(|value| (value, seen))
            })
            .await
            .map_err(StoreError::ReadTaskFailed)??;
            if self.confirm(&seen).await? {
                return Ok(value);
            }
        }
        Err(StoreError::Reopening)
    }

    /// What a scan that ends now depends on: every group whose transaction had begun.
    pub fn scan_ended(&self) -> Seen {
        let mut seen = self.seen();
        self.saw_all(&mut seen);
        seen
    }

    /// Waits (at most [`READ_TIMEOUT`]) until what a scan saw ([`Store::scan_ended`]) is
    /// durable. A reopen in between fails it: a listing half sent cannot be read again.
    pub async fn settle_scan(&self, seen: Seen) -> Result<()> {
        if self.confirm(&seen).await? {
            Ok(())
        } else {
            Err(StoreError::Reopening)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_read_of_a_change_waits_until_it_is_durable() {
        let durability = std::sync::Arc::new(Durability::new());
        let mut seen = durability.start();
        assert!(
            durability.settled(&seen),
            "nothing read, nothing to wait for"
        );
        seen.depends_on(4);
        assert!(!durability.settled(&seen));
        let waiting = durability.clone();
        let waiter = tokio::spawn(async move { waiting.wait(&seen).await });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        durability.publish(2);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "an earlier group is not enough");
        durability.publish(4);
        assert!(waiter.await.unwrap().unwrap());
        assert!(durability.settled(&seen));
    }

    #[tokio::test]
    async fn a_reopen_in_between_makes_the_reader_read_again() {
        let durability = Durability::new();
        let mut seen = durability.start();
        seen.depends_on(6);
        durability.reopened();
        durability.publish(8);
        assert!(!durability.wait(&seen).await.unwrap());
        assert!(!durability.settled(&seen));
        let again = durability.start();
        assert!(durability.settled(&again));
    }

    #[test]
    fn the_horizon_covers_a_transaction_still_applying() {
        assert_eq!(Durability::horizon(4), 4);
        assert_eq!(Durability::horizon(5), 6);
    }

    #[test]
    fn publishing_never_goes_back() {
        let durability = Durability::new();
        durability.publish(10);
        durability.publish(6);
        let mut seen = durability.start();
        seen.depends_on(10);
        assert!(durability.settled(&seen));
    }
}
