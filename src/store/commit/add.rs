//! Adding a validated batch of items of one kind, as one atomic unit: new ids are added,
//! ids with an active item merge into it where the element allows it ([`Block::merge`]),
//! and any other meeting with an active item refuses the whole batch. Each element is also
//! its source's report, taken into the block's live reports ([`super::live`]); one that
//! repeats its source's live report (the same details) changes nothing.

use std::collections::{BTreeSet, HashMap};

use super::live::Holders;
use super::{earlier, Applied, Command, Keying, Mode, Op, Request, Tx, TxResult, Writer};
use crate::metrics::Metrics;
use crate::model::{Block, Escalated, Forced, Item, Kind, NewItem};
use crate::policy::{self, Bucket, Exposure, Level, Refusal};
use crate::provenance::{Operation, Report};
use crate::store::{Result, Store, Watched};

pub(crate) struct Add {
    kind: Kind,
    items: Vec<NewItem>,
    /// Request time: the start of new items.
    now: i64,
    /// Set when the caller forces the write past the caps and the rate.
    force: Option<Force>,
}

/// A caller's `?force=true`: who forces (the token's name, if it has one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Force {
    pub by: Option<String>,
}

/// The result of an add batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddOutcome {
    /// Everything was written. `merged` holds the stored state of each item that merged
    /// into an existing one, or that an element only repeated (once per id, in order of
    /// first merge); empty when all were new.
    /// `escalated` holds the stored state of each new item escalation lengthened (see
    /// [`crate::policy::Escalation`]), in order, unless it is in `merged`.
    /// `repeated` counts the elements that only repeated their source's live report.
    Written {
        merged: Vec<Item>,
        escalated: Vec<Item>,
        repeated: usize,
    },
    /// Nothing was written: these elements `(index, id)` met an active item without
    /// `allowMerge`.
    Conflict(Vec<(usize, String)>),
    /// Nothing was written: the batch would break a guardrail ([`crate::policy`]); one
    /// refusal per offending element and guard.
    Refused(Vec<Refusal>),
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
        // Each active block's live reports as the batch goes (`live`).
        let mut holders: HashMap<&str, Holders> = HashMap::new();
        // Each id once, in order of its first element: (that element's index, id).
        let mut order: Vec<(usize, &str)> = Vec::new();
        let mut merged: Vec<&str> = Vec::new();
        let mut escalated: Vec<&str> = Vec::new();
        let mut conflicts = Vec::new();
        let mut repeated = 0;
        // The ids an element changed: a repeat alone writes nothing.
        let mut changed: BTreeSet<&str> = BTreeSet::new();
        // Each id's reports from this batch, in order.
        let mut reports: HashMap<&str, Vec<Report>> = HashMap::new();
        for (index, new) in self.items.iter().enumerate() {
            let id = new.id.as_str();
            if !state.contains_key(id) {
                let old = match tx.read(kind, id)? {
                    Ok(old) => old,
                    Err(e) => return Ok(Err(e)),
                };
                let active = old.clone().filter(|b| b.is_active(tx.now));
                let held = match &active {
                    Some(_) => match tx.holders(kind, id)? {
                        Ok(held) => held,
                        Err(e) => return Ok(Err(e)),
                    },
                    None => Holders::none(),
                };
                holders.insert(id, held);
                stored.insert(id, old);
                state.insert(id, active);
                order.push((index, id));
            }
            let current = state.get_mut(id).expect("inserted above");
            let held = holders.get_mut(id).expect("inserted above");
            let claim = (new.action, new.end, new.cause.as_str());
            match current {
                None => {
                    let mut block = new.to_block(start);
                    if let Err(e) = self.escalate(tx, &mut block, new, stored[id].as_ref())? {
                        return Ok(Err(e));
                    }
                    if block.escalated.is_some() {
                        escalated.push(id);
                    }
                    held.created(&block, &new.details);
                    *current = Some(block);
                }
                Some(_) if new.allow_merge && held.repeats(&new.source, &new.details) => {
                    // The same evidence again: no report, no change.
                    repeated += 1;
                    if !merged.contains(&id) {
                        merged.push(id);
                    }
                    continue;
                }
                Some(block) if new.allow_merge => {
                    held.report(block, &new.source, claim, start, &new.details);
                    block.merge(new.action, new.end, &new.cause);
                    block.reported(start);
                    if !merged.contains(&id) {
                        merged.push(id);
                    }
                }
                Some(_) => conflicts.push((index, new.id.clone())),
            }
            changed.insert(id);
            reports.entry(id).or_default().push(Report {
                timestamp: start,
                source: new.source.clone(),
                operation: Operation::Add,
                action: new.action,
                end_timestamp: new.end,
                cause: new.cause.clone(),
            });
        }
        if !conflicts.is_empty() {
            return Ok(Ok(Applied::endless(AddOutcome::Conflict(conflicts))));
        }
        let refusals = self.guard(tx, &order, &stored, &state)?;
        let forced = !refusals.is_empty()
            && self.force.is_some()
            && refusals.iter().all(|r| r.guard.is_forceable());
        if !refusals.is_empty() && !forced {
            return Ok(Ok(Applied::endless(AddOutcome::Refused(refusals))));
        }
        if let (true, Some(force)) = (forced, &self.force) {
            self.record_force(force, &refusals, &mut state, tx);
        }
        let mut earliest_end = None;
        for (_, id) in order.iter().filter(|(_, id)| changed.contains(id)) {
            let block = state
                .get_mut(id)
                .and_then(Option::as_mut)
                .expect("every touched id ends with a block");
            tx.store(kind, id, stored[id].as_ref(), block)?;
            tx.add_reports(kind, id, stored[id].as_ref(), block, &reports[id])?;
            holders[id].store(tx, kind, id)?;
            if !block.is_permanent() {
                earliest_end = earlier(earliest_end, Some(block.end));
            }
        }
        let stored_item = |id: &&str| {
            Item::new(
                (*id).to_owned(),
                state[id].clone().expect("written ids have a block"),
            )
            .with_holders(holders[id].roster())
        };
        // An id escalated and then merged into by a later element is listed as merged only:
        // each id once.
        let merged_ids: BTreeSet<&str> = merged.iter().copied().collect();
        let escalated = escalated
            .iter()
            .filter(|id| !merged_ids.contains(**id))
            .filter(|id| state[*id].as_ref().is_some_and(|b| b.escalated.is_some()))
            .map(stored_item)
            .collect();
        let merged = merged.iter().map(stored_item).collect();
        Ok(Ok(Applied {
            outcome: AddOutcome::Written {
                merged,
                escalated,
                repeated,
            },
            earliest_end,
        }))
    }

    fn record(outcome: &AddOutcome, metrics: &Metrics) {
        match outcome {
            AddOutcome::Conflict(_) => {
                metrics.conflicts.inc();
            }
            AddOutcome::Refused(refusals) => metrics.refused(refusals.iter().map(|r| r.guard)),
            AddOutcome::Written { .. } => {}
        }
    }
}

impl Add {
    pub(super) fn new(kind: Kind, items: Vec<NewItem>, now: i64, force: Option<Force>) -> Add {
        Add {
            kind,
            items,
            now,
            force,
        }
    }

    /// Lengthens `block`, just created by `new`, when the policy escalates and the id had
    /// blocks ending within its window (`stored`: what the id had, which may have ended
    /// without its past block recorded yet; this transaction records it).
    fn escalate(
        &self,
        tx: &Tx<'_>,
        block: &mut Block,
        new: &NewItem,
        stored: Option<&Block>,
    ) -> TxResult<Result<()>> {
        let policy = tx.policy.borrow();
        let (Some(escalation), Some(timeout)) = (policy.escalation, new.timeout) else {
            return Ok(Ok(()));
        };
        let since = tx.now.saturating_sub(escalation.window_ms());
        let mut past = tx.past_blocks_since(self.kind, &new.id, since)?;
        let unrecorded =
            stored.is_some_and(|old| old.end >= since && !tx.is_announced(self.kind, &new.id, old));
        if unrecorded {
            past += 1; // it ended (nothing active held the id); its past block is written below
        }
        if past == 0 {
            return Ok(Ok(()));
        }
        let cap = policy
            .max_block_duration_secs
            .map(|s| i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX));
        let applied = escalation.timeout(timeout, past, cap);
        if applied > timeout {
            block.end = self.now.saturating_add(applied);
            block.escalated = Some(Escalated {
                requested_timeout: timeout,
                timeout: applied,
                past_blocks: past,
            });
        }
        Ok(Ok(()))
    }

    /// The guardrails on the batch's outcome (`order`: each id once, with the index of its
    /// first element; `stored`: what each id had; `state`: what each ends with), against
    /// the state this transaction sees: every refusal, or none, in which case the
    /// evacuations it admits are taken from the bucket.
    pub(super) fn guard(
        &self,
        tx: &Tx<'_>,
        order: &[(usize, &str)],
        stored: &HashMap<&str, Option<Block>>,
        state: &HashMap<&str, Option<Block>>,
    ) -> TxResult<Vec<Refusal>> {
        let (kind, now) = (self.kind, tx.now);
        let policy = &*tx.policy.borrow();
        // How long a block lasts counts from its request, which is also its start.
        let mut refusals: Vec<Refusal> = self
            .items
            .iter()
            .enumerate()
            .filter_map(|(index, item)| policy::element(policy, kind, index, item, self.now))
            .collect();
        for (index, item) in self.items.iter().enumerate() {
            if let Some(entry) = tx.allowlisted(kind, &item.id)? {
                refusals.push(policy::allowlisted(kind, index, &item.id, &entry, now));
            }
        }
        // The share caps: each id's change of level, from what counts now (an item until
        // it is announced) to what the batch leaves.
        let mut shares = Vec::with_capacity(order.len());
        for &(index, id) in order {
            let from = match &stored[id] {
                Some(old) if !tx.is_announced(kind, id, old) => Level::of(Some(old.action)),
                _ => Level::Free,
            };
            let to = Level::of(state[id].as_ref().map(|b| b.action));
            let delta = tx.exposure_delta(kind, id, from, to)?;
            if delta != Exposure::default() {
                shares.push((index, id, delta));
            }
        }
        refusals.extend(policy::shares(policy, &tx.exposure.get(), &shares));
        if policy.of(kind).max_blocked.is_some() {
            // Ids blocked after the batch that were not before (an announced item is out of
            // the counts already; a due one not yet announced is still in them).
            let new_ids: Vec<(usize, &str)> = order
                .iter()
                .copied()
                .filter(|(_, id)| match &stored[id] {
                    None => true,
                    Some(old) => tx.is_announced(kind, id, old),
                })
                .collect();
            refusals.extend(policy::max_items(policy, kind, tx.count_of(kind), &new_ids));
        }
        if let Some(rate) = policy.of(kind).evacuations {
            let evacuations: Vec<(usize, &str)> = order
                .iter()
                .copied()
                .filter(|(_, id)| {
                    let before = stored[id]
                        .as_ref()
                        .filter(|old| old.is_active(now))
                        .map(|old| old.action);
                    let after = state[id].as_ref().expect("every id ends with a block");
                    policy::is_new_evacuation(before, after.action)
                })
                .collect();
            if !evacuations.is_empty() {
                let mut buckets = tx.buckets.get();
                let bucket = &mut buckets[policy::slot(kind)];
                match policy::evacuation_rate(rate, *bucket, kind, &evacuations, now) {
                    // Taken when the batch goes in: unrefused, or forced.
                    Ok(after)
                        if refusals
                            .iter()
                            .all(|r| self.force.is_some() && r.guard.is_forceable()) =>
                    {
                        *bucket = after;
                        tx.buckets.set(buckets);
                    }
                    Ok(_) => {}
                    Err(refused) => {
                        // Forced past the rate: the evacuations take every token there is,
                        // so the detector does not get a burst of its own right after.
                        let forced = self.force.is_some()
                            && refusals
                                .iter()
                                .chain(&refused)
                                .all(|r| r.guard.is_forceable());
                        if forced {
                            *bucket = Bucket {
                                level: 0.0,
                                at: bucket.at(rate, now).at,
                            };
                            tx.buckets.set(buckets);
                        }
                        refusals.extend(refused);
                    }
                }
            }
        }
        Ok(refusals)
    }

    /// Marks the blocks of the ids that only force let in, naming the guards each passed,
    /// and logs it: an operator must always be able to tell a forced block.
    pub(super) fn record_force<'a>(
        &'a self,
        force: &Force,
        refusals: &[Refusal],
        state: &mut HashMap<&'a str, Option<Block>>,
        tx: &Tx<'_>,
    ) {
        for (id, block) in state.iter_mut() {
            let mut guards: Vec<String> = refusals
                .iter()
                .filter(|r| r.id == *id)
                .map(|r| r.guard.as_str().to_owned())
                .collect();
            guards.sort();
            guards.dedup();
            if let (false, Some(block)) = (guards.is_empty(), block) {
                block.forced = Some(Forced {
                    guards,
                    by: force.by.clone(),
                    at: tx.now,
                });
            }
        }
        if tx.rehearsal {
            return;
        }
        let guards: BTreeSet<&str> = refusals.iter().map(|r| r.guard.as_str()).collect();
        tracing::warn!(
            kind = self.kind.plural(),
            ids = refusals.len(),
            guards = ?guards,
            by = force.by.as_deref().unwrap_or("(unnamed token)"),
            "a write was forced past guardrails"
        );
    }
}

impl<K: Keying<AddOutcome>> Writer<'_, K> {
    /// Adds (or merges) a validated batch as one atomic unit.
    pub async fn add(
        &self,
        kind: Kind,
        items: Vec<NewItem>,
        now: i64,
    ) -> Result<(AddOutcome, u64)> {
        self.add_forced(kind, items, now, None).await
    }

    /// [`Writer::add`], passing the caps and the rate when `force` is given (the blocks it
    /// lets in record it).
    pub async fn add_forced(
        &self,
        kind: Kind,
        items: Vec<NewItem>,
        now: i64,
        force: Option<Force>,
    ) -> Result<(AddOutcome, u64)> {
        self.submit(Add {
            kind,
            items,
            now,
            force,
        })
        .await
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
