//! The revision counters and the change feed: the live broadcast of durable events, the
//! stored log behind it, the seqlock that lets a reader tell whether a transaction
//! committed under its scan, the change stamps and durability that reads wait on, and the
//! item counts as of the last commit. (The guardrails' state is `guard_state.rs`'s.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{broadcast, watch};

use super::error::bad_key;
use super::{codec, durable, keys, stamps, ReadMark, Result, Store, StoreError, Watched};
use crate::model::Event;

/// The revision counters, the live event feed and what reads wait on, shared by the
/// committer and readers.
pub(crate) struct Feed {
    /// The revision of the last committed transaction (visible in the trees; maybe not yet
    /// durable).
    pub committed: AtomicU64,
    /// Seqlock over transactions: odd while one is being applied. A reader that needs a
    /// listing consistent with one revision checks it did not move during its scan.
    pub seq: AtomicU64,
    /// The revision known durable; listings wait for it to cover what they saw.
    pub durable: watch::Sender<u64>,
    /// Durable events, as they commit.
    pub live: broadcast::Sender<Arc<Event>>,
    /// The oldest revision still in the log (`committed + 1` when the log is empty).
    pub first_retained: AtomicU64,
    /// Stored items per (kind, action), as of the last commit.
    pub counts: [AtomicU64; 4],
    /// Items announced expired whose storage is not reclaimed yet, as of the last commit.
    pub unreclaimed: AtomicU64,
    /// Which keys changed (or are about to) at which `seq`: for readers that cache, and for
    /// readers that must not answer before what they read is durable.
    pub stamps: stamps::ChangeStamps,
    /// Up to which `seq` everything is durable; see [`durable`].
    pub durability: durable::Durability,
}

impl Feed {
    /// The counters of a store opened at `revision`, no event published yet.
    pub fn new(opened: &super::Opened, feed_buffer: usize) -> Feed {
        Feed {
            committed: AtomicU64::new(opened.revision),
            seq: AtomicU64::new(0),
            durable: watch::Sender::new(opened.revision),
            live: broadcast::channel(feed_buffer.max(1)).0,
            first_retained: AtomicU64::new(opened.first_retained),
            counts: opened.counts.map(AtomicU64::new),
            unreclaimed: AtomicU64::new(opened.unreclaimed),
            stamps: stamps::ChangeStamps::new(),
            durability: durable::Durability::new(),
        }
    }
}

/// Up to `limit` events of the log `events` with `after < revision <= upto`, in order.
pub(super) fn read_events(
    events: &sled::Tree,
    after: u64,
    upto: u64,
    limit: usize,
) -> Result<Vec<Event>> {
    if after >= upto {
        return Ok(Vec::new());
    }
    // Events are stored in chunks under their first revision: start from the chunk that
    // holds `after + 1`, which may begin before it.
    let from = keys::event_key(after + 1);
    let start = match events.range(..=from).next_back() {
        Some(entry) => entry?.0,
        None => sled::IVec::from(&from[..]),
    };
    let upto_key = sled::IVec::from(&keys::event_key(upto)[..]);
    let mut out = Vec::new();
    for entry in events.range(start..=upto_key) {
        let (key, bytes) = entry?;
        let first = keys::parse_event_key(&key).ok_or_else(|| bad_key(&key))?;
        let chunk = codec::decode_events(first, &bytes).map_err(|source| StoreError::Corrupt {
            key: format!("event {first}"),
            source,
        })?;
        for event in chunk {
            if event.revision > after && event.revision <= upto {
                out.push(event);
                if out.len() == limit {
                    return Ok(out);
                }
            }
        }
    }
    Ok(out)
}

impl Store {
    /// The revision of the last committed change.
    pub fn revision(&self) -> u64 {
        self.shared.feed.committed.load(Ordering::SeqCst)
    }

    /// The revision known to be on disk.
    pub fn durable_revision(&self) -> u64 {
        *self.shared.feed.durable.borrow()
    }

    /// The oldest revision whose event is still in the log; `revision() + 1` when empty.
    pub fn first_retained(&self) -> u64 {
        self.shared.feed.first_retained.load(Ordering::SeqCst)
    }

    /// Subscribes to durable events as they commit. Subscribe before reading the log, then
    /// skip what the log already gave: nothing falls between the two.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.shared.feed.live.subscribe()
    }

    /// Up to `limit` events with `after < revision <= upto`, in order.
    pub fn events_between(&self, after: u64, upto: u64, limit: usize) -> Result<Vec<Event>> {
        read_events(&self.handles()?.trees.events, after, upto, limit)
    }

    /// Runs a multi-key read built whole in memory (`GET /taskmanagers`) so that it reflects
    /// exactly one revision, which it returns: the read is retried while a transaction
    /// commits under it. After a few tries under heavy writes it settles for the revision
    /// seen before its last read — a lower bound: replaying the feed from it converges to
    /// the same state, since every event carries the full state after its change.
    ///
    /// The streamed listings ([`crate::listing`]) cannot retry a scan whose first chunks are
    /// already sent, so they always report that lower bound: the revision read before
    /// their scan starts.
    pub fn consistent_read<T>(&self, read: impl Fn(&Store) -> Result<T>) -> Result<(T, u64)> {
        const TRIES: usize = 4;
        let feed = &self.shared.feed;
        let mut tries = 0;
        loop {
            tries += 1;
            let before = feed.seq.load(Ordering::SeqCst);
            let revision = feed.committed.load(Ordering::SeqCst);
            let value = read(self)?;
            let settled = before.is_multiple_of(2) && feed.seq.load(Ordering::SeqCst) == before;
            if settled || tries == TRIES {
                return Ok((value, revision));
            }
            if !before.is_multiple_of(2) {
                // A transaction is in flight; they take well under a millisecond.
                std::thread::yield_now();
            }
        }
    }

    /// Where the commit order stands, taken *before* reads whose result a caller keeps.
    ///
    /// While a transaction is applying (`seq` odd), the mark is the number before it: that
    /// transaction stamps every key it changes with the number after it, so whatever the
    /// read saw of it, a later check finds those keys changed since the mark and reads
    /// them again. A read during a storm of writes is therefore kept like any other.
    pub fn read_mark(&self) -> ReadMark {
        let seq = self.shared.feed.seq.load(Ordering::SeqCst);
        ReadMark(seq & !1)
    }

    /// Tells `cache` which answers each transaction may change, before it applies, for as
    /// long as the cache lives (see [`Stale`]).
    pub fn tell_changes(&self, cache: std::sync::Weak<dyn super::Stale>) {
        self.shared.feed.stamps.tell(cache);
    }

    /// Whether `key` is certainly unchanged since `mark` (false may also mean that a key
    /// sharing its stamp changed, or that the database was reopened).
    pub fn unchanged_since(&self, mark: ReadMark, key: Watched<'_>) -> bool {
        self.shared.feed.stamps.unchanged_since(mark, key)
    }
}

#[cfg(test)]
impl Store {
    /// A task manager id whose item shares `key`'s change-stamp slot.
    pub(crate) fn id_sharing_a_slot_with(&self, key: Watched<'_>) -> String {
        self.shared.feed.stamps.id_sharing_a_slot_with(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Kind;
    use crate::store::StoreConfig;

    /// A reader that takes its mark while a transaction applies (as it does all the time
    /// under a storm of writes) gets a mark it can keep its answer under: the keys that
    /// transaction changes read as changed since the mark, every other key as unchanged.
    #[test]
    fn a_mark_taken_while_a_transaction_applies_is_kept_and_sees_its_keys_change() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreConfig::new(dir.path().join("data"))).unwrap();
        let feed = &store.shared.feed;
        let changed = Watched::Item(Kind::TaskManager, "tm-changed");
        let untouched = Watched::Item(Kind::TaskManager, "tm-untouched");

        // What the committer does around a transaction: seq odd, stamp, apply, seq even.
        let settled = feed.seq.fetch_add(1, Ordering::SeqCst) + 2;
        let mark = store.read_mark();
        feed.stamps.stamp(changed, settled);
        feed.seq.fetch_add(1, Ordering::SeqCst);

        assert!(!store.unchanged_since(mark, changed));
        assert!(store.unchanged_since(mark, untouched));
        // A mark taken after the transaction covers it.
        assert!(store.unchanged_since(store.read_mark(), changed));
        store.shutdown().unwrap();
    }
}
