//! Past blocks: kept when a block ends, bounded per id in the same transaction, and pruned
//! by age after each commit.
//!
//! Each id has a counter in `history` (its key is the item's) holding the number of its
//! oldest kept past block and of the next one; entry `n` is `kind ++ id ++ 0x00 ++ n`, and
//! `history_ends` indexes every entry by when it ended. Invariants: every entry has exactly
//! its index key; an id with entries has a counter, with `first <= n < next` for each; at
//! most `per_id` entries per id are left by any transaction.

use sled::transaction::TransactionError;

use super::{Committer, Tx, TxResult};
use crate::model::{Block, Kind};
use crate::provenance::Ending;
use crate::store::writes::{TxTree, WriteLog};
use crate::store::TreeId;
use crate::store::{codec, keys};

/// How many past blocks one prune by age drops at most: pruning catches up by this much
/// per commit, without stalling the writers on a long backlog.
pub(super) const MAX_HISTORY_PRUNE: usize = 1_000;

impl Tx<'_> {
    /// The counter of `(kind, id)`'s past blocks: `(first, next)`, `(0, 0)` for none, `None`
    /// for one that does not decode (logged; `check` reports it). A corrupt counter costs
    /// that id its history, never the transaction: aborting would fail every group that
    /// ends the id, the sweeper's announcements included, and so stop all expiry.
    fn past_count(&self, kind: Kind, id: &str) -> TxResult<Option<(u64, u64)>> {
        let Some(bytes) = self.history.get(keys::item_key(kind, id))? else {
            return Ok(Some((0, 0)));
        };
        match codec::decode_history_count(&bytes) {
            Ok(count) => Ok(Some(count)),
            Err(e) => {
                tracing::error!(
                    key = %format!("history/{}/{id}", kind.plural()),
                    error = %e,
                    "a history counter does not decode; the id's past blocks are not kept"
                );
                Ok(None)
            }
        }
    }

    /// Keeps `block` as the newest past block of `(kind, id)`, with how it ended, and drops
    /// the oldest beyond the bound.
    pub(super) fn keep_past(
        &self,
        kind: Kind,
        id: &str,
        block: &Block,
        ending: &Ending,
    ) -> TxResult<()> {
        let Some((mut first, next)) = self.past_count(kind, id)? else {
            return Ok(());
        };
        self.history.insert(
            keys::past_key(kind, id, next),
            codec::encode_past(block, ending),
        )?;
        self.history_ends
            .insert(keys::past_end_key(ending.timestamp, kind, id, next), &[])?;
        let next = next + 1;
        while next - first > self.history_retention.per_id {
            if let Some(bytes) = self.history.remove(keys::past_key(kind, id, first))? {
                // Its index key needs its end; an undecodable entry's stays for `check`.
                if let Ok((_, ending)) = codec::decode_past(&bytes) {
                    self.history_ends.remove(keys::past_end_key(
                        ending.timestamp,
                        kind,
                        id,
                        first,
                    ))?;
                }
            }
            first += 1;
        }
        self.history.insert(
            keys::item_key(kind, id),
            codec::encode_history_count(first, next),
        )?;
        Ok(())
    }

    /// How many past blocks of `(kind, id)` ended at or after `since` (newest first, so it
    /// reads only those and one more).
    pub(super) fn past_blocks_since(&self, kind: Kind, id: &str, since: i64) -> TxResult<u32> {
        let Some((first, next)) = self.past_count(kind, id)? else {
            return Ok(0);
        };
        let mut count = 0;
        for n in (first..next).rev() {
            let Some(bytes) = self.history.get(keys::past_key(kind, id, n))? else {
                continue; // pruned by age
            };
            match codec::decode_past(&bytes) {
                Ok((_, ending)) if ending.timestamp >= since => count += 1,
                _ => break,
            }
        }
        Ok(count)
    }
}

impl Committer {
    /// Drops past blocks that ended before the retention age, oldest first, at most
    /// `max` of them, in one transaction. Not flushed on its own: a prune lost to a crash
    /// only keeps more history.
    pub(super) fn prune_history(&self, now: i64, max: usize) {
        let cutoff = now.saturating_sub(self.history.max_age_ms);
        let t = &self.handles().trees;
        let due: Vec<(i64, Kind, String, u64)> = t
            .history_ends
            .range(..keys::due_bound(cutoff.saturating_sub(1)).to_vec())
            .take(max)
            .filter_map(|entry| {
                let (key, _) = entry.ok()?;
                let (ended, kind, id, n) = keys::parse_past_end_key(&key)?;
                Some((ended, kind, id.to_owned(), n))
            })
            .collect();
        if due.is_empty() {
            return;
        }
        let pruned = t.transaction(|trees| {
            // Logged once committed: sled may re-run the closure.
            let log = self.log_writes.then(WriteLog::default);
            let history = TxTree::new(&trees.history, TreeId::History, log.as_ref());
            let ends = TxTree::new(&trees.history_ends, TreeId::HistoryEnds, log.as_ref());
            for (ended, kind, id, n) in &due {
                ends.remove(keys::past_end_key(*ended, *kind, id, *n))?;
                history.remove(keys::past_key(*kind, id, *n))?;
                let counter = keys::item_key(*kind, id);
                let Some(bytes) = history.get(&counter)? else {
                    continue;
                };
                let Ok((first, next)) = codec::decode_history_count(&bytes) else {
                    continue;
                };
                // Entries need not end in number order (an import appends older ones; the
                // clock can step back), so a pruned entry leaves a hole unless it was the
                // oldest: then `first` moves past it and any holes after it.
                if *n != first {
                    continue;
                }
                let mut first = first + 1;
                while first < next && history.get(keys::past_key(*kind, id, first))?.is_none() {
                    first += 1;
                }
                if first >= next {
                    history.remove(counter)?;
                } else {
                    history.insert(counter, codec::encode_history_count(first, next))?;
                }
            }
            Ok::<_, sled::transaction::ConflictableTransactionError<()>>(log)
        });
        if let Ok(Some(log)) = &pruned {
            self.pruned.borrow_mut().append(&mut log.borrow_mut());
        }
        if let Err(e) = pruned {
            let e = match e {
                TransactionError::Abort(()) => "aborted".to_owned(),
                TransactionError::Storage(e) => e.to_string(),
            };
            tracing::warn!(error = %e, "pruning the history failed");
        }
    }
}
