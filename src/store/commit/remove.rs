//! Removing one item: the active one is gone for everyone (`removed`); an expired one the
//! sweeper has not reached is deleted too, as the sweeper would have (`expired`).

use super::{Applied, Command, Keying, Mode, Op, Request, Tx, TxResult, Writer};
use crate::allowlist::{Entry, HOLD_OFF_COMMENT};
use crate::model::{Item, Kind};
use crate::provenance::{Ended, Unblock};
use crate::store::{Result, Store, Watched};

pub(crate) struct Remove {
    kind: Kind,
    id: String,
    unblock: Unblock,
    hold_off: Option<HoldOff>,
}

/// An unblock's hold-off: an allowlist entry for the id until `until`, put in the same
/// transaction, so that the detector that blocked it cannot block it again at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldOff {
    pub until: i64,
    /// The name of the token that unblocked.
    pub by: Option<String>,
}

/// What an unblock did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    pub item: Item,
    /// The allowlist entry now covering the id, with a hold-off (a longer-lasting one
    /// already there is kept as it is). Boxed: rare, and it would double the size of every
    /// unblock's outcome.
    pub hold_off: Option<Box<Entry>>,
}

impl Command for Remove {
    /// What was removed; `None` when there was no active item (and nothing was written).
    type Outcome = Option<Removed>;

    fn op(request: Request<Remove>) -> Op {
        Op::Remove(request)
    }

    fn weight(&self) -> usize {
        1
    }

    fn touched(&self, _due: &[Vec<u8>], mut visit: impl FnMut(Watched<'_>)) {
        visit(Watched::Item(self.kind, &self.id));
    }

    fn apply(&self, tx: &Tx<'_>, _due: &[Vec<u8>]) -> TxResult<Result<Applied<Option<Removed>>>> {
        let (kind, id) = (self.kind, self.id.as_str());
        let old = match tx.allow_entry(kind, id)? {
            Ok(old) => old,
            Err(e) => return Ok(Err(e)),
        };
        let item = match remove(tx, kind, id, &self.unblock)? {
            Ok(Some(item)) => item,
            Ok(None) => return Ok(Ok(Applied::endless(None))),
            Err(e) => return Ok(Err(e)),
        };
        let Some(hold_off) = &self.hold_off else {
            let removed = Removed {
                item,
                hold_off: None,
            };
            return Ok(Ok(Applied::endless(Some(removed))));
        };
        // An entry of the id that outlasts the hold-off stays as it is.
        let lasts = |entry: &Entry| {
            entry.is_active(tx.now) && entry.end_timestamp.is_none_or(|end| end >= hold_off.until)
        };
        if let Some(old) = old.as_ref().filter(|e| lasts(e)) {
            let removed = Removed {
                item,
                hold_off: Some(Box::new(old.clone())),
            };
            return Ok(Ok(Applied::endless(Some(removed))));
        }
        let entry = Entry {
            kind,
            id: id.to_owned(),
            prefix: false,
            comment: HOLD_OFF_COMMENT.to_owned(),
            added_by: hold_off.by.clone(),
            added_at: tx.now,
            end_timestamp: Some(hold_off.until),
        };
        tx.put_allow(old.as_ref(), &entry)?;
        Ok(Ok(Applied {
            outcome: Some(Removed {
                item,
                hold_off: Some(Box::new(entry)),
            }),
            earliest_end: Some(hold_off.until),
        }))
    }
}

/// Deletes `(kind, id)` in `tx`; the item, when it was active.
pub(super) fn remove(
    tx: &Tx<'_>,
    kind: Kind,
    id: &str,
    unblock: &Unblock,
) -> TxResult<Result<Option<Item>>> {
    let old = match tx.read(kind, id)? {
        Ok(old) => old,
        Err(e) => return Ok(Err(e)),
    };
    let Some(old) = old else {
        return Ok(Ok(None));
    };
    let was_announced = tx.is_announced(kind, id, &old);
    tx.delete(kind, id, &old)?;
    if was_announced {
        // Already expired for everyone; only its storage was left.
        return Ok(Ok(None));
    }
    // An expired item the sweeper has not reached is gone for the caller too (404), but
    // deleting it here is still right: it saves the sweeper the work. Subscribers learn
    // that it expired.
    if old.is_active(tx.now) {
        tx.ended(kind, id, &old, Ended::Removed, unblock)?;
    } else {
        tx.ended(kind, id, &old, Ended::Expired, &Unblock::default())?;
    }
    Ok(Ok(old
        .is_active(tx.now)
        .then(|| Item::new(id.to_owned(), old))))
}

impl<K: Keying<Option<Removed>>> Writer<'_, K> {
    /// Removes the active item `(kind, id)`, saying who and why (`unblock`), with a
    /// hold-off when one is given; `None` when there is none.
    pub async fn unblock(
        &self,
        kind: Kind,
        id: String,
        unblock: Unblock,
        hold_off: Option<HoldOff>,
    ) -> Result<(Option<Removed>, u64)> {
        self.submit(Remove {
            kind,
            id,
            unblock,
            hold_off,
        })
        .await
    }

    /// Removes the active item `(kind, id)`; `None` when there is none.
    pub async fn remove(&self, kind: Kind, id: String) -> Result<(Option<Item>, u64)> {
        let (removed, revision) = self.unblock(kind, id, Unblock::default(), None).await?;
        Ok((removed.map(|r| r.item), revision))
    }
}

impl Store {
    /// [`Writer::remove`], committed.
    pub async fn remove(&self, kind: Kind, id: String) -> Result<(Option<Item>, u64)> {
        self.with_mode(Mode::Commit).remove(kind, id).await
    }
}
