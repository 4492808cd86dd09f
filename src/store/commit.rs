//! The single committer: the only writer of the store.
//!
//! sled 0.34 runs transactions one at a time under a process-wide lock, and its `flush` is a
//! disk round trip, so per-request transaction + flush cannot scale. The committer takes one
//! request, drains whatever else is already waiting (up to `max_batch`), applies them all in
//! one multi-tree transaction, flushes (and fsyncs) once, and only then replies to each:
//! group commit.
//!
//! Each request's outcome is decided before any of its writes, so a refused request (a
//! conflict) writes nothing while the rest of the batch commits. A storage error fails the
//! whole batch, and nothing of it is acknowledged.

use std::collections::HashMap;
use std::fs::File;
use std::sync::Arc;
use std::time::Instant;

use sled::transaction::{ConflictableTransactionResult, TransactionalTree};
use sled::{Db, Transactional};
use tokio::sync::{mpsc, oneshot};

use super::{codec, keys, StoreError, SweepSignal, Trees};
use crate::clock::now_ms;
use crate::model::{Block, Item, Kind, NewItem};

/// A request to the committer; `op: None` asks it to stop.
pub(crate) struct Commit {
    op: Option<Op>,
    reply: Option<oneshot::Sender<Result<Outcome, StoreError>>>,
}

impl Commit {
    pub fn new(op: Op, reply: oneshot::Sender<Result<Outcome, StoreError>>) -> Commit {
        Commit {
            op: Some(op),
            reply: Some(reply),
        }
    }

    pub fn shutdown() -> Commit {
        Commit {
            op: None,
            reply: None,
        }
    }
}

#[derive(Debug)]
pub(crate) enum Op {
    Add {
        kind: Kind,
        items: Vec<NewItem>,
        /// Request time: the start of new items.
        now: i64,
    },
    Remove {
        kind: Kind,
        id: String,
    },
    Expire {
        expiry_keys: Vec<Vec<u8>>,
    },
    Register {
        /// `(task manager, node)` pairs; a later pair for the same task manager wins.
        registrations: Vec<(String, String)>,
    },
    Unregister {
        tm: String,
    },
}

impl Op {
    /// How many items this request writes at most, to bound a batch's transaction.
    fn weight(&self) -> usize {
        match self {
            Op::Add { items, .. } => items.len(),
            Op::Remove { .. } => 1,
            Op::Expire { expiry_keys } => expiry_keys.len(),
            Op::Register { registrations } => registrations.len(),
            Op::Unregister { .. } => 1,
        }
    }
}

#[derive(Debug)]
pub(crate) enum Outcome {
    Added(AddOutcome),
    Removed(Option<Item>),
    Expired(Vec<Expired>),
    Registered(Vec<Registered>),
    /// The node the task manager was registered on, if it was.
    Unregistered(Option<String>),
}

/// What registering one task manager did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registered {
    Created,
    Moved,
    Unchanged,
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

/// An item the sweeper removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    pub kind: Kind,
    pub item: Item,
}

/// The most items one group commit writes; bigger batches wait for the next round.
const MAX_BATCH_WEIGHT: usize = 20_000;

pub(crate) struct Committer {
    pub db: Db,
    pub trees: Trees,
    /// The log file, fsynced after each flush when power-loss durability is on.
    pub log: Option<File>,
    pub requests: mpsc::Receiver<Commit>,
    pub max_batch: usize,
    pub sweep: Arc<SweepSignal>,
}

impl Committer {
    pub fn run(mut self) {
        let mut batch: Vec<Commit> = Vec::with_capacity(self.max_batch);
        loop {
            let Some(first) = self.requests.blocking_recv() else {
                return;
            };
            let mut stop = first.op.is_none();
            let mut weight = first.op.as_ref().map_or(0, Op::weight);
            batch.push(first);
            while !stop && batch.len() < self.max_batch && weight < MAX_BATCH_WEIGHT {
                match self.requests.try_recv() {
                    Ok(next) => {
                        stop = next.op.is_none();
                        weight += next.op.as_ref().map_or(0, Op::weight);
                        batch.push(next);
                    }
                    Err(_) => break,
                }
            }
            self.commit(&mut batch);
            if stop {
                tracing::debug!("committer stopped");
                return;
            }
        }
    }

    /// Commits one batch and answers every request in it.
    fn commit(&mut self, batch: &mut Vec<Commit>) {
        let started = Instant::now();
        let now = now_ms();
        let ops: Vec<&Op> = batch.iter().filter_map(|c| c.op.as_ref()).collect();
        let result = self.transact(&ops, now).and_then(|outcomes| {
            self.make_durable()?;
            Ok(outcomes)
        });
        tracing::trace!(requests = ops.len(), elapsed = ?started.elapsed(), "group commit");
        match result {
            Ok(outcomes) => {
                let earliest = outcomes
                    .iter()
                    .filter_map(|o| o.as_ref().ok())
                    .map(|applied| applied.earliest_end)
                    .min();
                if let Some(earliest) = earliest {
                    self.sweep.deadline_added(earliest);
                }
                let mut outcomes = outcomes.into_iter();
                for commit in batch.drain(..) {
                    if let Some(reply) = commit.reply {
                        let outcome = outcomes.next().expect("one outcome per op");
                        let _ = reply.send(outcome.map(|a| a.outcome));
                    }
                }
            }
            Err(e) => {
                tracing::error!(error = %e, requests = ops.len(), "group commit failed");
                let message = e.to_string();
                for commit in batch.drain(..) {
                    if let Some(reply) = commit.reply {
                        let _ = reply.send(Err(StoreError::CommitFailed(message.clone())));
                    }
                }
            }
        }
    }

    /// Applies every op in one transaction. The closure may be re-run, so it only computes.
    fn transact(
        &self,
        ops: &[&Op],
        now: i64,
    ) -> Result<Vec<Result<Applied, StoreError>>, StoreError> {
        let trees = (
            &self.trees.items,
            &self.trees.expiry,
            &self.trees.tm_node,
            &self.trees.node_tms,
        );
        trees
            .transaction(|(items, expiry, tm_node, node_tms)| {
                let tx = Tx {
                    items,
                    expiry,
                    tm_node,
                    node_tms,
                    now,
                };
                ops.iter().map(|op| tx.apply(op)).collect()
            })
            .map_err(|e| match e {
                sled::transaction::TransactionError::Abort(e) => e,
                sled::transaction::TransactionError::Storage(e) => StoreError::Sled(e),
            })
    }

    /// Flushes sled's buffers to the log (pwrite + sync_file_range), then fsyncs the log
    /// itself, so the batch survives a power cut and not only a killed process.
    fn make_durable(&self) -> Result<(), StoreError> {
        self.db.flush()?;
        if let Some(log) = &self.log {
            log.sync_data()?;
        }
        Ok(())
    }
}

/// What one op did, plus the earliest finite end it wrote (to wake the sweeper).
struct Applied {
    outcome: Outcome,
    earliest_end: i64,
}

impl Applied {
    fn new(outcome: Outcome) -> Applied {
        Applied {
            outcome,
            earliest_end: i64::MAX,
        }
    }
}

type TxResult<T> = ConflictableTransactionResult<T, StoreError>;

/// One transaction's view of the trees.
struct Tx<'a> {
    items: &'a TransactionalTree,
    expiry: &'a TransactionalTree,
    tm_node: &'a TransactionalTree,
    node_tms: &'a TransactionalTree,
    /// Commit time: what counts as expired.
    now: i64,
}

impl Tx<'_> {
    /// Applies one op. The outer `Result` aborts the whole transaction (storage errors);
    /// the inner one fails only this request (a corrupt stored value).
    fn apply(&self, op: &Op) -> TxResult<Result<Applied, StoreError>> {
        match op {
            Op::Add { kind, items, now } => self.add(*kind, items, *now),
            Op::Remove { kind, id } => self.remove(*kind, id),
            Op::Expire { expiry_keys } => self.expire(expiry_keys),
            Op::Register { registrations } => self.register(registrations),
            Op::Unregister { tm } => self.unregister(tm),
        }
    }

    fn register(
        &self,
        registrations: &[(String, String)],
    ) -> TxResult<Result<Applied, StoreError>> {
        let mut results = Vec::with_capacity(registrations.len());
        for (tm, node) in registrations {
            // Reads see this transaction's own writes, so a repeated task manager in the
            // batch moves from where the earlier pair put it.
            let old = match self.node_of(tm)? {
                Ok(old) => old,
                Err(e) => return Ok(Err(e)),
            };
            let result = match old {
                Some(old) if old == *node => Registered::Unchanged,
                Some(old) => {
                    self.node_tms.remove(keys::node_tm_key(&old, tm))?;
                    Registered::Moved
                }
                None => Registered::Created,
            };
            if result != Registered::Unchanged {
                self.tm_node
                    .insert(tm.as_bytes(), codec::encode_registration(node))?;
                self.node_tms.insert(keys::node_tm_key(node, tm), &[])?;
            }
            results.push(result);
        }
        Ok(Ok(Applied::new(Outcome::Registered(results))))
    }

    fn unregister(&self, tm: &str) -> TxResult<Result<Applied, StoreError>> {
        let old = match self.node_of(tm)? {
            Ok(old) => old,
            Err(e) => return Ok(Err(e)),
        };
        if let Some(node) = &old {
            self.tm_node.remove(tm.as_bytes())?;
            self.node_tms.remove(keys::node_tm_key(node, tm))?;
        }
        Ok(Ok(Applied::new(Outcome::Unregistered(old))))
    }

    /// The node `tm` is registered on.
    fn node_of(&self, tm: &str) -> TxResult<Result<Option<String>, StoreError>> {
        let Some(bytes) = self.tm_node.get(tm.as_bytes())? else {
            return Ok(Ok(None));
        };
        Ok(codec::decode_registration(&bytes)
            .map(Some)
            .map_err(|source| StoreError::Corrupt {
                key: format!("taskmanager registration {tm}"),
                source,
            }))
    }

    fn add(
        &self,
        kind: Kind,
        items: &[NewItem],
        start: i64,
    ) -> TxResult<Result<Applied, StoreError>> {
        // The state each id has as the batch goes: first the stored state, then each
        // element's result, so a later element of the batch arrives after an earlier one.
        let mut stored: HashMap<&str, Option<Block>> = HashMap::new();
        let mut state: HashMap<&str, Option<Block>> = HashMap::new();
        let mut order: Vec<&str> = Vec::new();
        let mut merged: Vec<&str> = Vec::new();
        let mut conflicts = Vec::new();
        for (index, new) in items.iter().enumerate() {
            let id = new.id.as_str();
            if !state.contains_key(id) {
                let old = match self.read(kind, id)? {
                    Ok(old) => old,
                    Err(e) => return Ok(Err(e)),
                };
                let active = old.clone().filter(|b| b.is_active(self.now));
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
            return Ok(Ok(Applied::new(Outcome::Added(AddOutcome::Conflict(
                conflicts,
            )))));
        }
        let mut earliest_end = i64::MAX;
        for id in &order {
            let block = state[id]
                .as_ref()
                .expect("every touched id ends with a block");
            self.write(kind, id, stored[id].as_ref(), block)?;
            if !block.is_permanent() {
                earliest_end = earliest_end.min(block.end);
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
            outcome: Outcome::Added(AddOutcome::Written { merged }),
            earliest_end,
        }))
    }

    fn remove(&self, kind: Kind, id: &str) -> TxResult<Result<Applied, StoreError>> {
        let old = match self.read(kind, id)? {
            Ok(old) => old,
            Err(e) => return Ok(Err(e)),
        };
        let Some(old) = old else {
            return Ok(Ok(Applied::new(Outcome::Removed(None))));
        };
        self.delete(kind, id, &old)?;
        // An expired item the sweeper has not reached is gone for the caller too (404), but
        // deleting it here is still right: it saves the sweeper the work.
        let removed = old
            .is_active(self.now)
            .then(|| Item::new(id.to_owned(), old));
        Ok(Ok(Applied::new(Outcome::Removed(removed))))
    }

    fn expire(&self, expiry_keys: &[Vec<u8>]) -> TxResult<Result<Applied, StoreError>> {
        let mut expired = Vec::new();
        for key in expiry_keys {
            let Some((end, kind, id)) = keys::parse_expiry_key(key) else {
                // Not ours to interpret; drop it so it cannot block the sweeper forever.
                self.expiry.remove(key.as_slice())?;
                continue;
            };
            let block = match self.read(kind, id)? {
                Ok(block) => block,
                Err(e) => return Ok(Err(e)),
            };
            match block {
                Some(block) if block.end == end => {
                    if block.is_active(self.now) {
                        continue; // not due (the scan and the commit disagree on now)
                    }
                    self.delete(kind, id, &block)?;
                    expired.push(Expired {
                        kind,
                        item: Item::new(id.to_owned(), block),
                    });
                }
                // A stale entry (its item is gone or ends elsewhere): never expected, since
                // every write moves the entry with the item, but harmless to drop.
                _ => {
                    self.expiry.remove(key.as_slice())?;
                }
            }
        }
        Ok(Ok(Applied::new(Outcome::Expired(expired))))
    }

    /// The stored block (active or not) of `(kind, id)`.
    fn read(&self, kind: Kind, id: &str) -> TxResult<Result<Option<Block>, StoreError>> {
        let key = keys::item_key(kind, id);
        let Some(bytes) = self.items.get(&key)? else {
            return Ok(Ok(None));
        };
        Ok(codec::decode_block(&bytes)
            .map(Some)
            .map_err(|source| StoreError::Corrupt {
                key: format!("{}/{id}", kind.plural()),
                source,
            }))
    }

    /// Stores `new` for `(kind, id)`, moving its expiry entry from `old`'s end to `new`'s.
    fn write(&self, kind: Kind, id: &str, old: Option<&Block>, new: &Block) -> TxResult<()> {
        // Remove the old index entry first: when both ends are equal, the insert below puts
        // it back (remove-after-insert would lose it).
        if let Some(old) = old.filter(|b| !b.is_permanent()) {
            self.expiry.remove(keys::expiry_key(old.end, kind, id))?;
        }
        if !new.is_permanent() {
            self.expiry
                .insert(keys::expiry_key(new.end, kind, id), &[])?;
        }
        self.items
            .insert(keys::item_key(kind, id), codec::encode_block(new))?;
        Ok(())
    }

    fn delete(&self, kind: Kind, id: &str, old: &Block) -> TxResult<()> {
        if !old.is_permanent() {
            self.expiry.remove(keys::expiry_key(old.end, kind, id))?;
        }
        self.items.remove(keys::item_key(kind, id))?;
        Ok(())
    }
}
