//! Reclaiming the storage of items announced expired: their expiry entries, and each item
//! where it is still the announced one. No event and no count: both happened when it was
//! announced ([`super::announce`]).

use super::{expiry_items, Applied, Command, Mode, Op, Request, Tx, TxResult};
use crate::store::{keys, Result, Store, Watched};

/// Deletes the entries behind `expiry_keys` (from [`Store::reclaimable`]).
pub(crate) struct Reclaim {
    expiry_keys: Vec<Vec<u8>>,
}

impl Command for Reclaim {
    /// How many entries it deleted.
    type Outcome = usize;

    const CLIENT_WRITE: bool = false;

    fn op(request: Request<Reclaim>) -> Op {
        Op::Reclaim(request)
    }

    fn weight(&self) -> usize {
        self.expiry_keys.len()
    }

    fn touched(&self, _due: &[Vec<u8>], visit: impl FnMut(Watched<'_>)) {
        expiry_items(&self.expiry_keys, visit);
    }

    /// Deletes the entries that are still there and at or before the watermark, and each
    /// one's item where it is still the announced one (same end), with everything kept
    /// beside it (its reports, its live reports and roster: none outlives its item).
    fn apply(&self, tx: &Tx<'_>, _due: &[Vec<u8>]) -> TxResult<Result<Applied<usize>>> {
        let mut deleted = 0;
        for key in &self.expiry_keys {
            if key.as_slice() > tx.watermark.borrow().as_slice() {
                continue; // never handed out so; not announced
            }
            if tx.expiry.remove(key.as_slice())?.is_none() {
                continue; // gone since the scan (a write replaced the item)
            }
            deleted += 1;
            let Some((end, kind, id)) = keys::parse_expiry_key(key) else {
                continue;
            };
            // A corrupt item stays for `blocklistd check` to report.
            if let Ok(Some(block)) = tx.read(kind, id)? {
                if block.end == end {
                    tx.drop_reports(kind, id, &block)?;
                    tx.drop_live(kind, id)?;
                    tx.items.remove(keys::item_key(kind, id))?;
                }
            }
        }
        tx.add_unreclaimed(-(deleted as i64));
        Ok(Ok(Applied::endless(deleted)))
    }
}

impl Store {
    /// Deletes the entries behind these expiry keys (from [`Store::reclaimable`]) and
    /// their items, where the item is still the announced one. Returns how many entries
    /// it deleted.
    pub async fn reclaim(&self, expiry_keys: Vec<Vec<u8>>) -> Result<usize> {
        let (deleted, _) = self.submit(Reclaim { expiry_keys }, Mode::Commit).await?;
        Ok(deleted)
    }
}
