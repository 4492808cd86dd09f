//! Clearing items and registrations in one transaction, for an import that replaces what
//! is stored.

use super::register::unregister;
use super::remove::remove;
use super::{Applied, Command, Mode, Op, Request, Tx, TxResult};
use crate::model::Kind;
use crate::provenance::Unblock;
use crate::store::{Result, Store, Watched};

pub(crate) struct Clear {
    items: Vec<(Kind, String)>,
    /// Task managers whose registration goes.
    tms: Vec<String>,
}

impl Command for Clear {
    /// How many active items it removed.
    type Outcome = usize;

    fn op(request: Request<Clear>) -> Op {
        Op::Clear(request)
    }

    fn weight(&self) -> usize {
        self.items.len() + self.tms.len()
    }

    fn touched(&self, _due: &[Vec<u8>], mut visit: impl FnMut(Watched<'_>)) {
        for (kind, id) in &self.items {
            visit(Watched::Item(*kind, id));
        }
        for tm in &self.tms {
            visit(Watched::Registration(tm));
        }
    }

    fn apply(&self, tx: &Tx<'_>, _due: &[Vec<u8>]) -> TxResult<Result<Applied<usize>>> {
        // Read everything first, so a corrupt value fails the request before any removal:
        // the transaction commits the group's other ops, and half a clear would go with it.
        for (kind, id) in &self.items {
            if let Err(e) = tx.read(*kind, id)? {
                return Ok(Err(e));
            }
        }
        for tm in &self.tms {
            if let Err(e) = tx.node_of(tm)? {
                return Ok(Err(e));
            }
        }
        let mut removed = 0;
        for (kind, id) in &self.items {
            match remove(tx, *kind, id, &Unblock::default())? {
                Ok(Some(_)) => removed += 1,
                Ok(None) => {}
                Err(e) => return Ok(Err(e)),
            }
        }
        for tm in &self.tms {
            if let Err(e) = unregister(tx, tm)? {
                return Ok(Err(e));
            }
        }
        Ok(Ok(Applied::endless(removed)))
    }
}

impl Store {
    /// Removes these items and registrations in one transaction; returns how many items.
    pub async fn clear(&self, items: Vec<(Kind, String)>, tms: Vec<String>) -> Result<usize> {
        let (removed, _) = self.submit(Clear { items, tms }, Mode::Commit).await?;
        Ok(removed)
    }
}
