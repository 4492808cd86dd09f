//! Change stamps: for every key, coarsely, the commit that last changed it — so that a
//! reader can keep what it read and later learn, without asking sled, whether it may have
//! gone stale.
//!
//! Keys hash into a fixed table of slots. A slot holds the commit sequence number (the
//! [`Feed`](super::Feed) seqlock's value after the transaction) of the last transaction
//! that changed any key hashing there. Collisions only make readers wait or re-read more
//! often. Caches that must not lose answers to collisions are told each change exactly
//! ([`Stale`]), right after its stamp.
//!
//! The protocol, and why it is safe:
//! - the committer bumps `seq` to odd, stamps the slot of every key the transaction may
//!   change with `seq + 1`, runs the transaction, then bumps `seq` to that even value — all
//!   before the syncer can acknowledge the change. Stamping before the transaction applies
//!   means that a reader who sees a change and then loads its key's stamp gets that
//!   transaction's number or a later one, which durable reads rely on
//!   ([`super::durable`]);
//! - a reader takes a [`ReadMark`] *before* it reads the trees: `seq`, or while a
//!   transaction is applying (odd `seq`), the even number before it — that transaction has
//!   stamped its keys with the number after, so whatever the read saw of them is re-read;
//! - what it read is still current while every slot it depends on is `<=` its mark: a
//!   transaction that committed before the mark was taken is visible to the read (the
//!   `SeqCst` bump orders it), and one that commits after stamps a larger number.
//!
//! Between the stamps and the transaction, a fresh read still shows the state before it:
//! that change is not acknowledged yet, exactly as a read racing it could miss it.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{RwLock, Weak};

use super::members::Members;
use crate::model::Kind;

/// Slots in the table: 8 MiB of stamps. A slot stamped by a group not yet durable makes a
/// durable read of any key in it wait for that group's fsync; a detector's storm stamps
/// ~35,000 new keys a second, so with fewer slots more reads of keys no write touches wait.
const SLOTS: usize = 1 << 20;

/// A key whose changes a reader may depend on.
#[derive(Debug, Clone, Copy)]
pub enum Watched<'a> {
    /// The item `(kind, id)`.
    Item(Kind, &'a str),
    /// A task manager's registration.
    Registration(&'a str),
}

/// The point in the commit order a read started from; see [`ChangeStamps`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadMark(pub(super) u64);

/// A cache of answers the committer tells, exactly, which answers a transaction may
/// change, before it applies: the stamps' slots are shared by many keys, so under a storm of
/// writes to other keys they would make most of its answers look stale.
///
/// A cache that keeps an answer must still compare the stamps of the keys it read with its
/// mark *after* keeping it, drop it if one moved, and serve it only after that comparison
/// passed: a transaction told before the answer was kept stamped first, so that check sees
/// it, but until then the kept answer may be older than an acknowledged change.
pub trait Stale: Send + Sync {
    /// Checks of task manager `tm` may change: its item, its registration or its node's
    /// item is about to.
    fn task_manager(&self, tm: &str);
    /// Checks of node `node` may change: its item is about to.
    fn node(&self, node: &str);
    /// Anything may have changed (a reopen after a storage fault).
    fn everything(&self);
}

pub(crate) struct ChangeStamps {
    slots: Box<[AtomicU64]>,
    hasher: foldhash::fast::FixedState,
    caches: RwLock<Vec<Weak<dyn Stale>>>,
}

impl ChangeStamps {
    pub fn new() -> ChangeStamps {
        ChangeStamps {
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
            hasher: foldhash::fast::FixedState::with_seed(0x5eed_b10c),
            caches: RwLock::new(Vec::new()),
        }
    }

    /// Tells `cache` of every change from the next transaction on (for as long as it lives).
    pub fn tell(&self, cache: Weak<dyn Stale>) {
        let mut caches = self.caches.write().expect("not poisoned");
        caches.retain(|c| c.strong_count() > 0);
        caches.push(cache);
    }

    /// Stamps every key `touched` names with `seq` and tells the caches, before the
    /// transaction applies; a node's item tells them of its `members` too.
    pub fn stamp_touched(
        &self,
        seq: u64,
        members: &Members,
        touched: impl FnOnce(&mut dyn FnMut(Watched<'_>)),
    ) {
        let caches: Vec<_> = (self.caches.read().expect("not poisoned").iter())
            .filter_map(Weak::upgrade)
            .collect();
        touched(&mut |key| {
            self.stamp(key, seq);
            for cache in &caches {
                match key {
                    Watched::Item(Kind::TaskManager, tm) | Watched::Registration(tm) => {
                        cache.task_manager(tm);
                    }
                    Watched::Item(Kind::Node, node) => {
                        cache.node(node);
                        for tm in members.get(node).into_iter().flatten() {
                            cache.task_manager(tm);
                        }
                    }
                }
            }
        });
    }

    fn slot(&self, key: Watched<'_>) -> &AtomicU64 {
        // A fast fixed-seed hash: slots are an in-memory detail, nothing persists them, and
        // a collision costs a re-read, never a wrong answer.
        let hash = match key {
            Watched::Item(kind, id) => self.hasher.hash_one((kind as u8, id)),
            Watched::Registration(tm) => self.hasher.hash_one((u8::MAX, tm)),
        };
        &self.slots[hash as usize % SLOTS]
    }

    /// Records that `key` may change in the transaction ending at `seq`, before it applies.
    /// Only the committer stamps, with increasing numbers.
    pub fn stamp(&self, key: Watched<'_>, seq: u64) {
        self.slot(key).store(seq, Ordering::Release);
    }

    /// Records that anything may have changed (a reopen that lost unsynced commits), and
    /// tells the caches.
    pub fn stamp_all(&self, seq: u64) {
        for slot in &self.slots {
            slot.store(seq, Ordering::Release);
        }
        let caches = self.caches.read().expect("not poisoned");
        for cache in caches.iter().filter_map(Weak::upgrade) {
            cache.everything();
        }
    }

    /// The last stamp of `key`'s slot: the sequence number of the last transaction that
    /// changed, or was about to change, `key` (or a key sharing its slot).
    pub fn stamp_of(&self, key: Watched<'_>) -> u64 {
        self.slot(key).load(Ordering::Acquire)
    }

    /// Whether no transaction after `mark` changed `key`.
    pub fn unchanged_since(&self, mark: ReadMark, key: Watched<'_>) -> bool {
        self.slot(key).load(Ordering::Acquire) <= mark.0
    }
}

#[cfg(test)]
impl ChangeStamps {
    /// A task manager id whose item shares `key`'s slot, found by trying ids in turn (about
    /// a million tries; 64 million find one with certainty all but 1 in e^64).
    pub fn id_sharing_a_slot_with(&self, key: Watched<'_>) -> String {
        let slot: *const AtomicU64 = self.slot(key);
        (0u64..64 * SLOTS as u64)
            .map(|i| format!("other-{i}"))
            .find(|id| std::ptr::eq(self.slot(Watched::Item(Kind::TaskManager, id)), slot))
            .expect("some id shares the slot")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_after_the_mark_is_a_change_and_other_keys_stay_unchanged() {
        let stamps = ChangeStamps::new();
        let mark = ReadMark(2);
        let tm = Watched::Item(Kind::TaskManager, "tm-1");
        assert!(stamps.unchanged_since(mark, tm));
        stamps.stamp(tm, 4);
        assert!(!stamps.unchanged_since(mark, tm));
        assert!(stamps.unchanged_since(ReadMark(4), tm));
        // The same id as another kind, or as a registration, is another key.
        assert!(stamps.unchanged_since(mark, Watched::Item(Kind::Node, "tm-1")));
        assert!(stamps.unchanged_since(mark, Watched::Registration("tm-1")));
        stamps.stamp_all(6);
        assert!(!stamps.unchanged_since(ReadMark(4), Watched::Registration("tm-1")));
    }
}
