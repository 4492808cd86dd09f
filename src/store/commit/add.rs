//! Adding a validated batch of items of one kind, as one atomic unit: new ids are added,
//! ids with an active item merge into it where the element allows it ([`Block::merge`]),
//! and any other meeting with an active item refuses the whole batch.

use std::collections::HashMap;

use super::{earlier, Applied, Command, Mode, Op, Request, Tx, TxResult, Writer};
use crate::metrics::Metrics;
use crate::model::{Block, Item, Kind, NewItem};
use crate::store::{Result, Store, Watched};

pub(crate) struct Add {
    kind: Kind,
    items: Vec<NewItem>,
    /// Request time: the start of new items.
    now: i64,
}

/// The result of an add batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddOutcome {
    /// Everything was written. `merged` holds the stored state of each item that merged
    /// into an existing one (once per id, in order of first merge); empty when all were new.
    Written { merged: Vec<Item> },
    /// Nothing was written: these elements `(index, id)` met an active item without
    /// `allowMerge`.
    Conflict(Vec<(usize, String)>),
}

impl Command for Add {
    type Outcome = AddOutcome;

    fn op(request: Request<Add>) -> Op {
        Op::Add(request)
    }

    fn weight(&self) -> usize {
        self.items.len()
    }

    fn touched(&self, _due: &[Vec<u8>], mut visit: impl FnMut(Watched<'_>)) {
        for item in &self.items {
            visit(Watched::Item(self.kind, &item.id));
        }
    }

    fn apply(&self, tx: &Tx<'_>, _due: &[Vec<u8>]) -> TxResult<Result<Applied<AddOutcome>>> {
        let (kind, start) = (self.kind, self.now);
        // The state each id has as the batch goes: first the stored state, then each
        // element's result, so a later element of the batch arrives after an earlier one.
        let mut stored: HashMap<&str, Option<Block>> = HashMap::new();
        let mut state: HashMap<&str, Option<Block>> = HashMap::new();
        let mut order: Vec<&str> = Vec::new();
        let mut merged: Vec<&str> = Vec::new();
        let mut conflicts = Vec::new();
        for (index, new) in self.items.iter().enumerate() {
            let id = new.id.as_str();
            if !state.contains_key(id) {
                let old = match tx.read(kind, id)? {
                    Ok(old) => old,
                    Err(e) => return Ok(Err(e)),
                };
                let active = old.clone().filter(|b| b.is_active(tx.now));
                stored.insert(id, old);
                state.insert(id, active);
                order.push(id);
            }
            let current = state.get_mut(id).expect("inserted above");
            match current {
                None => *current = Some(new.to_block(start)),
                Some(block) if new.allow_merge => {
                    block.merge(new.action, new.end, &new.cause);
                    if !merged.contains(&id) {
                        merged.push(id);
                    }
                }
                Some(_) => conflicts.push((index, new.id.clone())),
            }
        }
        if !conflicts.is_empty() {
            return Ok(Ok(Applied::endless(AddOutcome::Conflict(conflicts))));
        }
        let mut earliest_end = None;
        for id in &order {
            let block = state[id]
                .as_ref()
                .expect("every touched id ends with a block");
            tx.store(kind, id, stored[id].as_ref(), block)?;
            if !block.is_permanent() {
                earliest_end = earlier(earliest_end, Some(block.end));
            }
        }
        let merged = merged
            .iter()
            .map(|id| {
                Item::new(
                    (*id).to_owned(),
                    state[id].clone().expect("merged ids exist"),
                )
            })
            .collect();
        Ok(Ok(Applied {
            outcome: AddOutcome::Written { merged },
            earliest_end,
        }))
    }

    fn record(outcome: &AddOutcome, metrics: &Metrics) {
        if let AddOutcome::Conflict(_) = outcome {
            metrics.conflicts.inc();
        }
    }
}

impl Writer<'_> {
    /// Adds (or merges) a validated batch as one atomic unit.
    pub async fn add(
        &self,
        kind: Kind,
        items: Vec<NewItem>,
        now: i64,
    ) -> Result<(AddOutcome, u64)> {
        self.submit(Add { kind, items, now }).await
    }
}

impl Store {
    /// [`Writer::add`], committed.
    pub async fn add(
        &self,
        kind: Kind,
        items: Vec<NewItem>,
        now: i64,
    ) -> Result<(AddOutcome, u64)> {
        self.with_mode(Mode::Commit).add(kind, items, now).await
    }
}
