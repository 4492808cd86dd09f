//! Where the etcd store's write log stands on the writer: the next entry's number and the
//! writes waiting to be folded. The handle keeps it (`Etcd::log`); `log.rs` writes, folds
//! and loads the log through it.

use std::collections::BTreeMap;

use crate::store::writes::Write;
use crate::store::TreeId;

/// Where the log stands, on the writer.
#[derive(Debug, Default)]
pub(super) struct Log {
    /// The number the next entry gets.
    pub next_entry: u64,
    /// The last value of every key the entries after the last fold wrote (`None`:
    /// removed), and the last of those entries; what the next fold puts.
    pub unfolded: BTreeMap<(TreeId, Vec<u8>), Option<Vec<u8>>>,
    pub unfolded_through: u64,
    pub unfolded_entries: u64,
    /// A fold is running on etcd's runtime.
    pub folding: bool,
}

impl Log {
    /// Entry `number`'s writes wait to be folded.
    pub(super) fn unfold(&mut self, number: u64, writes: Vec<Write>) {
        for write in writes {
            self.unfolded.insert((write.tree, write.key), write.value);
        }
        self.unfolded_through = number;
        self.unfolded_entries += 1;
    }

    /// The number of the last entry replayed (0: none yet).
    pub(super) fn last_entry(&self) -> u64 {
        self.next_entry.saturating_sub(1)
    }
}
