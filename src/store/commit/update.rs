//! Updating one active item in place (`PATCH`): its end set (longer or shorter, or
//! permanent), its action set (up or down), a cause appended — one `updated` event, with no
//! moment at which the resource is unblocked. Every live report of the block says the same
//! afterwards ([`super::live::Holders::update`]): the update is the word on the block. Conditional on the item's revision when the
//! caller gives one (`If-Match`).

use std::collections::HashMap;

use super::add::{Add, Force};
use super::{Applied, Command, Keying, Op, Request, Tx, TxResult, Writer};
use crate::metrics::Metrics;
use crate::model::{merge_causes, EventType, Item, ItemChange, Kind, NewItem};
use crate::policy::Refusal;
use crate::provenance::{Operation, Report};
use crate::store::{Result, Watched};

pub(crate) struct Update {
    kind: Kind,
    id: String,
    change: ItemChange,
    /// The revisions the item must be at one of (`If-Match`; none matches when empty);
    /// `None`: any.
    if_match: Option<Vec<u64>>,
    source: String,
    /// Request time.
    now: i64,
    force: Option<Force>,
}

/// What an update did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdateOutcome {
    /// The item as stored now (unchanged, and nothing written, when the update changed
    /// nothing).
    /// Boxed: an item is the largest of the outcomes by far.
    Updated(Box<Item>),
    /// No active item.
    NotFound,
    /// The item is at another revision than `If-Match` named; nothing was written.
    Mismatch { revision: u64 },
    /// A guardrail refused the updated block; nothing was written.
    Refused(Vec<Refusal>),
}

impl Command for Update {
    type Outcome = UpdateOutcome;

    fn op(request: Request<Update>) -> Op {
        Op::Update(request)
    }

    fn weight(&self) -> usize {
        1
    }

    fn touched(&self, _due: &[Vec<u8>], mut visit: impl FnMut(Watched<'_>)) {
        visit(Watched::Item(self.kind, &self.id));
    }

    fn apply(&self, tx: &Tx<'_>, _due: &[Vec<u8>]) -> TxResult<Result<Applied<UpdateOutcome>>> {
        let (kind, id) = (self.kind, self.id.as_str());
        let old = match tx.read(kind, id)? {
            Ok(Some(old)) if old.is_active(tx.now) => old,
            Ok(_) => return Ok(Ok(Applied::endless(UpdateOutcome::NotFound))),
            Err(e) => return Ok(Err(e)),
        };
        if let Some(false) = self.if_match.as_ref().map(|r| r.contains(&old.revision)) {
            return Ok(Ok(Applied::endless(UpdateOutcome::Mismatch {
                revision: old.revision,
            })));
        }
        let mut new = old.clone();
        if let Some(end) = self.change.end {
            new.end = end;
        }
        if let Some(action) = self.change.action {
            new.action = action;
        }
        if let Some(cause) = &self.change.cause {
            new.cause = merge_causes(&new.cause, cause);
        }
        if (new.action, new.end, &new.cause) == (old.action, old.end, &old.cause) {
            let item = Item::new(id.to_owned(), old);
            return Ok(Ok(Applied::endless(UpdateOutcome::Updated(Box::new(item)))));
        }
        // The guardrails see the updated block as an add of it would be seen, against the
        // item as it stands: a raise to evacuate counts against the caps and the rate, and
        // the end must be one the policy allows.
        let guarded = Add::new(
            kind,
            vec![NewItem {
                id: id.to_owned(),
                action: new.action,
                end: new.end,
                cause: new.cause.clone(),
                allow_merge: true,
                source: self.source.clone(),
                timeout: None,
                details: crate::model::Details::new(),
            }],
            self.now,
            self.force.clone(),
        );
        let stored = HashMap::from([(id, Some(old.clone()))]);
        let mut state = HashMap::from([(id, Some(new))]);
        let refusals = guarded.guard(tx, &[(0, id)], &stored, &state)?;
        if !refusals.is_empty() {
            let forced = self.force.is_some() && refusals.iter().all(|r| r.guard.is_forceable());
            if !forced {
                return Ok(Ok(Applied::endless(UpdateOutcome::Refused(refusals))));
            }
            if let Some(force) = &self.force {
                guarded.record_force(force, &refusals, &mut state, tx);
            }
        }
        let mut new = state.remove(id).flatten().expect("the updated block");
        new.reported(self.now);
        new.revision = tx.revision() + 1;
        let mut holders = match tx.holders(kind, id)? {
            Ok(holders) => holders,
            Err(e) => return Ok(Err(e)),
        };
        holders.update(
            self.change.end,
            self.change.action,
            self.change.cause.as_deref(),
        );
        tx.write(kind, id, Some(&old), &new)?;
        holders.store(tx, kind, id)?;
        tx.emit_item(EventType::Updated, kind, id, &new);
        // A shortened end may have come, and been passed by the sweeper, since the request.
        tx.announce_if_passed(kind, id, &new)?;
        let report = Report {
            timestamp: self.now,
            source: self.source.clone(),
            operation: Operation::Update,
            action: new.action,
            end_timestamp: new.end,
            cause: self.change.cause.clone().unwrap_or_default(),
        };
        tx.add_reports(kind, id, Some(&old), &new, &[report])?;
        let earliest_end = (!new.is_permanent()).then_some(new.end);
        Ok(Ok(Applied {
            outcome: UpdateOutcome::Updated(Box::new(Item::new(id.to_owned(), new))),
            earliest_end,
        }))
    }

    fn record(outcome: &UpdateOutcome, metrics: &Metrics) {
        if let UpdateOutcome::Refused(refusals) = outcome {
            metrics.refused(refusals.iter().map(|r| r.guard));
        }
    }
}

impl<K: Keying<UpdateOutcome>> Writer<'_, K> {
    /// Updates the active item `(kind, id)` in place, if it is at one of the revisions
    /// `if_match` when that is given; `source` reports it. `force` passes the caps and the rate as for an
    /// add.
    #[expect(
        clippy::too_many_arguments,
        reason = "one request's parts, each its own concern"
    )]
    pub async fn update(
        &self,
        kind: Kind,
        id: String,
        change: ItemChange,
        if_match: Option<Vec<u64>>,
        source: String,
        now: i64,
        force: Option<Force>,
    ) -> Result<(UpdateOutcome, u64)> {
        self.submit(Update {
            kind,
            id,
            change,
            if_match,
            source,
            now,
            force,
        })
        .await
    }
}
