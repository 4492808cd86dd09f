//! Retracting live reports: a source takes back its own report of an item. The block is
//! then what the live reports left ask for ([`Block::held_by`]: one `updated` event), or,
//! when none is left, it ends (`removed`, its past block ended `retracted` by the source).
//! Retracting what is not there changes nothing and is no error.
//!
//! [`Block::held_by`]: crate::model::Block::held_by

use super::{earlier, Applied, Command, Keying, Op, Request, Tx, TxResult, Writer};
use crate::metrics::Metrics;
use crate::model::{EventType, Item, Kind};
use crate::provenance::{Ended, Operation, Report, Retraction, Unblock};
use crate::store::{Result, Watched};

pub(crate) struct Retract {
    kind: Kind,
    items: Vec<Retraction>,
    /// Request time: the retraction's report.
    now: i64,
}

/// What one retraction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retracted {
    /// The report is taken back; other live reports hold the block, which is now this.
    Kept(Item),
    /// The report was the last: the block ended, as it was then.
    Ended(Item),
    /// The source held no (matching) live report of an active item: nothing changed.
    Absent,
}

impl Retracted {
    /// Its name in answers and metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            Retracted::Kept(_) => "kept",
            Retracted::Ended(_) => "ended",
            Retracted::Absent => "absent",
        }
    }
}

impl Command for Retract {
    /// One outcome per retraction, in order.
    type Outcome = Vec<Retracted>;

    fn op(request: Request<Retract>) -> Op {
        Op::Retract(request)
    }

    fn weight(&self) -> usize {
        self.items.len()
    }

    fn touched(&self, _due: &[Vec<u8>], mut visit: impl FnMut(Watched<'_>)) {
        for item in &self.items {
            visit(Watched::Item(self.kind, &item.id));
        }
    }

    fn apply(&self, tx: &Tx<'_>, _due: &[Vec<u8>]) -> TxResult<Result<Applied<Vec<Retracted>>>> {
        let mut outcomes = Vec::with_capacity(self.items.len());
        let mut earliest_end = None;
        for retraction in &self.items {
            let applied = match retract(tx, self.kind, retraction, self.now)? {
                Ok(applied) => applied,
                Err(e) => return Ok(Err(e)),
            };
            earliest_end = earlier(earliest_end, applied.earliest_end);
            outcomes.push(applied.outcome);
        }
        Ok(Ok(Applied {
            outcome: outcomes,
            earliest_end,
        }))
    }

    fn record(outcome: &Vec<Retracted>, metrics: &Metrics) {
        for retracted in outcome {
            metrics.detectors.retracted(retracted.as_str());
        }
    }
}

/// Applies one retraction in `tx`, made at `now`.
pub(super) fn retract(
    tx: &Tx<'_>,
    kind: Kind,
    retraction: &Retraction,
    now: i64,
) -> TxResult<Result<Applied<Retracted>>> {
    let id = retraction.id.as_str();
    let old = match tx.read(kind, id)? {
        Ok(Some(old)) if old.is_active(tx.now) => old,
        Ok(_) => return Ok(Ok(Applied::endless(Retracted::Absent))),
        Err(e) => return Ok(Err(e)),
    };
    let mut holders = match tx.holders(kind, id)? {
        Ok(holders) => holders,
        Err(e) => return Ok(Err(e)),
    };
    let Some(taken) = holders.retract(&old, &retraction.source, &retraction.details) else {
        return Ok(Ok(Applied::endless(Retracted::Absent)));
    };
    let Some(mut new) = old.held_by(&holders.all(&old), tx.now) else {
        // No live report left: the block ends, by this retraction.
        tx.delete(kind, id, &old)?;
        let unblock = Unblock {
            source: Some(retraction.source.clone()),
            reason: retraction.reason.clone(),
        };
        tx.ended(kind, id, &old, Ended::Retracted, &unblock)?;
        return Ok(Ok(Applied::endless(Retracted::Ended(Item::new(
            id.to_owned(),
            old,
        )))));
    };
    holders.prune(tx.now);
    new.reported(now);
    new.revision = tx.revision() + 1;
    tx.write(kind, id, Some(&old), &new)?;
    holders.store(tx, kind, id)?;
    tx.emit_item(EventType::Updated, kind, id, &new);
    // Its end may be earlier than the old one's, and passed already.
    tx.announce_if_passed(kind, id, &new)?;
    let report = Report {
        timestamp: now,
        source: retraction.source.clone(),
        operation: Operation::Retract,
        action: taken.action,
        end_timestamp: taken.end,
        cause: taken.cause,
    };
    tx.add_reports(kind, id, Some(&old), &new, &[report])?;
    let earliest_end = (!new.is_permanent()).then_some(new.end);
    let item = Item::new(id.to_owned(), new).with_holders(holders.roster());
    Ok(Ok(Applied {
        outcome: Retracted::Kept(item),
        earliest_end,
    }))
}

impl Retract {
    pub(super) fn new(kind: Kind, items: Vec<Retraction>, now: i64) -> Retract {
        Retract { kind, items, now }
    }
}

impl<K: Keying<Vec<Retracted>>> Writer<'_, K> {
    /// Retracts each of `items`, in order, as one atomic unit.
    pub async fn retract(
        &self,
        kind: Kind,
        items: Vec<Retraction>,
        now: i64,
    ) -> Result<(Vec<Retracted>, u64)> {
        self.submit(Retract::new(kind, items, now)).await
    }
}
