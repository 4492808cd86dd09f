//! Announcing due items expired: an `expired` event each, out of the counts, and the expiry
//! watermark ([`crate::store::WATERMARK_KEY`]) advanced past their keys. This is the one
//! place the watermark advances. Their entries stay for [`super::reclaim`]: deleting them
//! here would double the cost of a mass expiry to the writers sharing the committer.

use std::ops::Bound;

use super::{expiry_items, Applied, Command, Committer, Mode, Op, Request, Tx, TxResult};
use crate::model::{Item, Kind};
use crate::policy::Level;
use crate::provenance::{Ended, Unblock};
use crate::store::keys::Expiring;
use crate::store::{after_watermark, keys, Result, Store, StoreError, Watched};

/// Announces up to `limit` due items expired, from the watermark on.
pub(crate) struct Announce {
    /// Nothing ending after this (or after the commit time) is announced.
    upto: i64,
    limit: usize,
}

/// An item the sweeper announced expired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    pub kind: Kind,
    pub item: Item,
}

impl Command for Announce {
    /// The items announced, in expiry-key order.
    type Outcome = Vec<Expired>;

    const CLIENT_WRITE: bool = false;

    fn op(request: Request<Announce>) -> Op {
        Op::Announce(request)
    }

    fn weight(&self) -> usize {
        self.limit
    }

    fn touched(&self, due: &[Vec<u8>], visit: impl FnMut(Watched<'_>)) {
        expiry_items(due, visit);
    }

    /// Announces the items behind `due` (scanned by [`Committer::scan_due`], in key
    /// order).
    fn apply(&self, tx: &Tx<'_>, due: &[Vec<u8>]) -> TxResult<Result<Applied<Vec<Expired>>>> {
        let mut expired = Vec::new();
        for key in due {
            if tx.announcing_stopped.get() {
                break;
            }
            let (end, kind, id) = match keys::parse_expiry_target(key) {
                Some((end, Expiring::Item(kind), id)) => (end, kind, id),
                Some((end, Expiring::Allow(kind), id)) => {
                    tx.expire_allow(kind, id, end, key)?;
                    tx.watermark.borrow_mut().clone_from(key);
                    continue;
                }
                None => {
                    // Not ours to interpret; drop it so it cannot block the sweeper forever.
                    tx.expiry.remove(key.as_slice())?;
                    continue;
                }
            };
            match tx.read(kind, id)? {
                // A corrupt item is passed over (never announced) for `blocklistd check` to
                // report: holding the watermark on it would stop all expiry.
                Err(e) => {
                    tracing::error!(error = %e, "a due item cannot be read; not announced");
                    tx.add_unreclaimed(1); // its entry is left behind the watermark
                }
                Ok(Some(block)) if block.end == end => {
                    if block.is_active(tx.now) {
                        // The scan and the commit disagree on now (the clock went back).
                        tx.announcing_stopped.set(true);
                        break;
                    }
                    tx.count(kind, &block, -1);
                    tx.level_changed(kind, id, Level::of(Some(block.action)), Level::Free)?;
                    tx.add_unreclaimed(1);
                    tx.ended(kind, id, &block, Ended::Expired, &Unblock::default())?;
                    expired.push(Expired {
                        kind,
                        item: Item::new(id.to_owned(), block),
                    });
                }
                // A stale entry (its item is gone or ends elsewhere): never expected, since
                // every write moves the entry with the item, but harmless to drop.
                _ => {
                    tx.expiry.remove(key.as_slice())?;
                }
            }
            tx.watermark.borrow_mut().clone_from(key);
        }
        Ok(Ok(Applied::endless(expired)))
    }
}

impl Committer {
    /// The expiry keys each announce op of the batch takes (and the items each allowlist
    /// entry covers, or each unblock by selector matches; empty for other ops), read before
    /// the transaction, which cannot scan. The committer is the only writer and
    /// announcing runs first in the transaction, so this is exactly what is due between the
    /// watermark and each op's bound: an entry committed after an outside scan could have
    /// been passed over for good.
    pub(super) fn scan_due(&self, batch: &[Op], now: i64) -> Result<Vec<Vec<Vec<u8>>>> {
        let expiry = &self.handles().trees.expiry;
        let mut after = self.watermark.clone();
        batch
            .iter()
            .map(|op| {
                let request = match op {
                    Op::Announce(request) => request,
                    Op::PutAllow(request) => {
                        return super::allow::scan_covered(
                            &self.handles().trees.items,
                            request.command.entry(),
                        )
                    }
                    Op::RemoveSelected(request) => {
                        return super::select::scan_selected(
                            &self.handles().trees,
                            &request.command,
                            now,
                        )
                    }
                    _ => return Ok(Vec::new()),
                };
                let Announce { upto, limit } = request.command;
                let bound = keys::due_bound(upto.min(now));
                if after.as_slice() >= &bound[..] {
                    return Ok(Vec::new()); // an empty range; sled would panic on a reversed one
                }
                let due = expiry
                    .range::<Vec<u8>, _>((after_watermark(&after), Bound::Excluded(bound.to_vec())))
                    .keys()
                    .take(limit)
                    .map(|key| Ok(key?.to_vec()))
                    .collect::<Result<Vec<_>, StoreError>>()?;
                if let Some(last) = due.last() {
                    after.clone_from(last);
                }
                Ok(due)
            })
            .collect()
    }
}

impl Store {
    /// Announces up to `limit` items due by `upto` (and by the commit time) expired, in
    /// expiry-key order from the watermark: their `expired` events, the counts, the
    /// watermark, in one commit. Their entries stay until [`Store::reclaim`].
    pub async fn announce(&self, upto: i64, limit: usize) -> Result<(Vec<Expired>, u64)> {
        self.submit(Announce { upto, limit }, Mode::Commit).await
    }
}
