//! Removing one item: the active one is gone for everyone (`removed`); an expired one the
//! sweeper has not reached is deleted too, as the sweeper would have (`expired`).

use super::{Applied, Command, Mode, Op, Request, Tx, TxResult, Writer};
use crate::model::{EventType, Item, Kind};
use crate::store::{Result, Store, Watched};

pub(crate) struct Remove {
    kind: Kind,
    id: String,
}

impl Command for Remove {
    /// The item removed; `None` when there was no active one.
    type Outcome = Option<Item>;

    fn op(request: Request<Remove>) -> Op {
        Op::Remove(request)
    }

    fn weight(&self) -> usize {
        1
    }

    fn touched(&self, _due: &[Vec<u8>], mut visit: impl FnMut(Watched<'_>)) {
        visit(Watched::Item(self.kind, &self.id));
    }

    fn apply(&self, tx: &Tx<'_>, _due: &[Vec<u8>]) -> TxResult<Result<Applied<Option<Item>>>> {
        Ok(remove(tx, self.kind, &self.id)?.map(Applied::endless))
    }
}

/// Deletes `(kind, id)` in `tx`; the item, when it was active.
pub(super) fn remove(tx: &Tx<'_>, kind: Kind, id: &str) -> TxResult<Result<Option<Item>>> {
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
    let event = if old.is_active(tx.now) {
        EventType::Removed
    } else {
        EventType::Expired
    };
    tx.emit_item(event, kind, id, &old);
    Ok(Ok(old
        .is_active(tx.now)
        .then(|| Item::new(id.to_owned(), old))))
}

impl Writer<'_> {
    /// Removes the active item `(kind, id)`; `None` when there is none.
    pub async fn remove(&self, kind: Kind, id: String) -> Result<(Option<Item>, u64)> {
        self.submit(Remove { kind, id }).await
    }
}

impl Store {
    /// [`Writer::remove`], committed.
    pub async fn remove(&self, kind: Kind, id: String) -> Result<(Option<Item>, u64)> {
        self.with_mode(Mode::Commit).remove(kind, id).await
    }
}
