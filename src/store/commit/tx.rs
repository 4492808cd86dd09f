//! The batch's one transaction, and the helpers every operation reads and writes through.
//!
//! Every change goes through [`Tx::write`] or [`Tx::delete`] (which keep the expiry index
//! and the counts with the item) and has its event from [`Tx::emit`]; the events, the
//! revision, the counts, the watermark and the unreclaimed count go to their trees once all
//! operations have run.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap};
use std::convert::Infallible;

use sled::transaction::{
    ConflictableTransactionError, ConflictableTransactionResult, TransactionError,
};

use super::{Committer, Op};
use crate::allowlist::Entry;
use crate::model::{Block, Change, Event, EventType, Item, Kind};
use crate::policy::{Bucket, Exposure, Level, Policy};
use crate::provenance::{Ended, Ending, Report, Unblock, MAX_REPORTS};
use crate::store::members::Members;
use crate::store::meta::{encode_exposure, encode_u64, kind_count, EXPOSURE_KEY};
use crate::store::writes::{TxTree, Write, WriteLog};
use crate::store::{
    announced, codec, count_slot, encode_counts, keys, registration, Counts, HistoryRetention,
    StoreError, TreeId, TxTrees, COUNTS_KEY, POLICY_KEY, REVISION_KEY, UNRECLAIMED_KEY,
    WATERMARK_KEY,
};

pub(crate) type TxResult<T> = ConflictableTransactionResult<T, StoreError>;

/// What a committed transaction did: the events in revision order, and the revision,
/// counts, watermark and unreclaimed count after it. Each request's outcome stays with the
/// request (see [`super::Request`]).
pub(super) struct Transacted {
    pub events: Vec<Event>,
    pub revision: u64,
    pub counts: Counts,
    pub watermark: Vec<u8>,
    pub unreclaimed: u64,
    pub buckets: [Bucket; 2],
    /// The policy, when the transaction changed it.
    pub policy: Option<Policy>,
    pub exposure: Exposure,
    /// The nodes whose registered task managers changed, with their new sets.
    pub members: HashMap<String, BTreeSet<String>>,
    /// The allowlist's prefix entries, when the transaction changed them.
    pub prefixes: Option<Vec<Entry>>,
    pub allow_entries: u64,
    /// Every key it wrote, in order, when the store logs writes ([`crate::store::writes`]).
    pub writes: Vec<Write>,
}

impl Committer {
    /// Applies every op of `batch` in one transaction (`due[i]`: what op `i` announces).
    /// The closure may be re-run, so it only computes.
    pub(super) fn transact(
        &self,
        batch: &[Op],
        due: &[Vec<Vec<u8>>],
        now: i64,
    ) -> Result<Transacted, StoreError> {
        self.handles()
            .trees
            .transaction(|trees| {
                // Built afresh on every run of the closure: sled may re-run it.
                let log = self.log_writes.then(WriteLog::default);
                let log = log.as_ref();
                let events = TxTree::new(&trees.events, TreeId::Events, log);
                let meta = TxTree::new(&trees.meta, TreeId::Meta, log);
                let tx = self.tx(trees, log, now);
                for (op, due) in batch.iter().zip(due) {
                    op.apply(&tx, due)?;
                }
                for chunk in codec::chunks(&tx.emitted.borrow()) {
                    events.insert(
                        &keys::event_key(chunk[0].revision),
                        codec::encode_chunk(chunk),
                    )?;
                }
                let revision = tx.revision.get();
                if revision != self.revision {
                    meta.insert(REVISION_KEY, &encode_u64(revision))?;
                }
                let counts = tx.counts.get().map(|c| c.max(0) as u64);
                if counts != self.counts {
                    meta.insert(COUNTS_KEY, encode_counts(&counts))?;
                }
                let watermark = tx.watermark.into_inner();
                if watermark != self.watermark {
                    meta.insert(WATERMARK_KEY, watermark.as_slice())?;
                }
                let unreclaimed = tx.unreclaimed.get().max(0) as u64;
                if unreclaimed != self.unreclaimed {
                    meta.insert(UNRECLAIMED_KEY, &encode_u64(unreclaimed))?;
                }
                let exposure = tx.exposure.get();
                if exposure != self.exposure {
                    meta.insert(EXPOSURE_KEY, encode_exposure(&exposure))?;
                }
                let policy = tx.policy_changed.get().then(|| tx.policy.borrow().clone());
                if let Some(policy) = &policy {
                    meta.insert(POLICY_KEY, codec::encode_policy(policy))?;
                }
                Ok(Transacted {
                    events: tx.emitted.into_inner(),
                    revision,
                    counts,
                    watermark,
                    unreclaimed,
                    buckets: tx.buckets.get(),
                    policy,
                    exposure,
                    members: tx.members_changed.into_inner(),
                    prefixes: tx.prefixes_changed.into_inner(),
                    allow_entries: tx.allow_entries.get().max(0).unsigned_abs(),
                    writes: log.map(WriteLog::take).unwrap_or_default(),
                })
            })
            .map_err(|e| match e {
                TransactionError::Abort(e) => e,
                TransactionError::Storage(e) => StoreError::Sled(e),
            })
    }

    /// Decides a dry run's outcome (`op`, with what it was scanned to take: `due`) against
    /// the state every
    /// committed transaction left, in a transaction of its own that is then rolled back:
    /// nothing is written, and the revision, counts and watermark stay the committer's.
    pub(super) fn rehearse(&self, op: &Op, due: &[Vec<u8>], now: i64) -> Result<(), StoreError> {
        let rolled_back = self.handles().trees.transaction(|trees| {
            let mut tx = self.tx(trees, None, now);
            tx.rehearsal = true;
            op.apply(&tx, due)?;
            Err::<Infallible, _>(ConflictableTransactionError::Abort(StoreError::RolledBack))
        });
        match rolled_back {
            Ok(never) => match never {},
            Err(TransactionError::Abort(StoreError::RolledBack)) => Ok(()),
            Err(TransactionError::Abort(e)) => Err(e),
            Err(TransactionError::Storage(e)) => Err(StoreError::Sled(e)),
        }
    }

    /// A transaction's view of the item and membership trees, starting from the state the
    /// last committed transaction left.
    fn tx<'a>(&'a self, trees: &'a TxTrees, log: Option<&'a WriteLog>, now: i64) -> Tx<'a> {
        let tree = |tree, id| TxTree::new(tree, id, log);
        Tx {
            items: tree(&trees.items, TreeId::Items),
            expiry: tree(&trees.expiry, TreeId::Expiry),
            tm_node: tree(&trees.tm_node, TreeId::TmNode),
            node_tms: tree(&trees.node_tms, TreeId::NodeTms),
            allowlist: tree(&trees.allowlist, TreeId::Allowlist),
            reports: tree(&trees.reports, TreeId::Reports),
            history: tree(&trees.history, TreeId::History),
            history_ends: tree(&trees.history_ends, TreeId::HistoryEnds),
            history_retention: self.history,
            idempotency: tree(&trees.idempotency, TreeId::Idempotency),
            enforcement: tree(&trees.enforcement, TreeId::Enforcement),
            live: tree(&trees.live, TreeId::Live),
            records_expired_at: now.saturating_sub(self.config.idempotency_retention_ms),
            now,
            policy: RefCell::new(self.policy.clone()),
            policy_changed: Cell::new(false),
            exposure: Cell::new(self.exposure),
            members: &self.members,
            members_changed: RefCell::new(HashMap::new()),
            prefixes: &self.prefixes,
            prefixes_changed: RefCell::new(None),
            allow_entries: Cell::new(i64::try_from(self.allow_entries).unwrap_or(i64::MAX)),
            written: RefCell::new(Vec::new()),
            rehearsal: false,
            buckets: Cell::new(self.buckets),
            revision: Cell::new(self.revision),
            emitted: RefCell::new(Vec::new()),
            counts: Cell::new(self.counts.map(|c| c as i64)),
            watermark: RefCell::new(self.watermark.clone()),
            unreclaimed: Cell::new(self.unreclaimed as i64),
            announcing_stopped: Cell::new(false),
        }
    }
}

/// One transaction's view of the trees.
pub(crate) struct Tx<'a> {
    pub(super) items: TxTree<'a>,
    pub(super) expiry: TxTree<'a>,
    pub(super) tm_node: TxTree<'a>,
    pub(super) node_tms: TxTree<'a>,
    pub(super) allowlist: TxTree<'a>,
    pub(super) reports: TxTree<'a>,
    pub(super) history: TxTree<'a>,
    pub(super) history_ends: TxTree<'a>,
    /// How many past blocks an id keeps ([`super::history`]).
    pub(super) history_retention: HistoryRetention,
    /// `Idempotency-Key` records ([`super::idempotency`]), and the commit time at or before
    /// which a record is past retention.
    pub(super) idempotency: TxTree<'a>,
    pub(super) records_expired_at: i64,
    /// Enforcers' statuses, dropped with the block they describe ([`super::enforcement`]).
    pub(super) enforcement: TxTree<'a>,
    /// Live reports and rosters ([`super::live`]), dropped with the block they hold.
    pub(super) live: TxTree<'a>,
    /// Commit time: what counts as expired, and the time stamped on events.
    pub(super) now: i64,
    /// The guardrails, and the evacuation buckets, as this transaction goes.
    pub(super) policy: RefCell<Policy>,
    pub(super) policy_changed: Cell<bool>,
    pub(super) buckets: Cell<[Bucket; 2]>,
    /// The share caps' figures as this transaction goes ([`super::exposure`]).
    pub(super) exposure: Cell<Exposure>,
    /// The task managers on each node after the last committed transaction, and the nodes
    /// whose set this transaction changed (their whole new set).
    pub(super) members: &'a Members,
    pub(super) members_changed: RefCell<HashMap<String, BTreeSet<String>>>,
    /// The allowlist's prefix entries after the last committed transaction, and the whole
    /// new list once this transaction changed it.
    pub(super) prefixes: &'a [Entry],
    pub(super) prefixes_changed: RefCell<Option<Vec<Entry>>>,
    /// How many allowlist entries are stored, as this transaction goes.
    pub(super) allow_entries: Cell<i64>,
    /// The items this transaction wrote, in order: what an allowlist entry added later in
    /// it must also unblock (its scan ran before the transaction).
    pub(super) written: RefCell<Vec<(Kind, String)>>,
    /// A dry run's transaction, rolled back: what it decides is logged as nothing done.
    pub(super) rehearsal: bool,
    /// The last revision handed out in this transaction.
    revision: Cell<u64>,
    /// The events written, in revision order, for publishing once durable.
    emitted: RefCell<Vec<Event>>,
    /// Stored items per (kind, action) as this transaction goes.
    counts: Cell<[i64; 4]>,
    /// The expiry watermark as this transaction goes.
    pub(super) watermark: RefCell<Vec<u8>>,
    /// Expiry entries at or before the watermark, as this transaction goes.
    unreclaimed: Cell<i64>,
    /// An announce op met an item not due yet: later ones in this transaction announce
    /// nothing, since their keys were scanned past it and the watermark must not skip it.
    pub(super) announcing_stopped: Cell<bool>,
}

impl Tx<'_> {
    /// The last revision handed out so far in this transaction.
    pub(super) fn revision(&self) -> u64 {
        self.revision.get()
    }

    /// Records the event of one change under the next revision, for this transaction.
    pub(super) fn emit(&self, event: EventType, change: Change) {
        let revision = self.revision.get() + 1;
        self.revision.set(revision);
        // Stored with the transaction's other events, in chunks, once all ops have run.
        let event = Event::new(revision, event, self.now, change);
        self.emitted.borrow_mut().push(event);
    }

    pub(super) fn emit_item(&self, event: EventType, kind: Kind, id: &str, block: &Block) {
        let item = Item::new(id.to_owned(), block.clone());
        self.emit(event, Change::Item { kind, item });
    }

    pub(super) fn add_unreclaimed(&self, delta: i64) {
        self.unreclaimed.set(self.unreclaimed.get() + delta);
    }

    /// Whether `(kind, id)`'s `block` has been announced expired (see
    /// [`crate::store::WATERMARK_KEY`]).
    pub(super) fn is_announced(&self, kind: Kind, id: &str, block: &Block) -> bool {
        announced(&self.watermark.borrow(), block.end, kind, id)
    }

    /// The stored block (active or not) of `(kind, id)`.
    pub(super) fn read(&self, kind: Kind, id: &str) -> TxResult<Result<Option<Block>, StoreError>> {
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

    /// The node `tm` is registered on.
    pub(super) fn node_of(&self, tm: &str) -> TxResult<Result<Option<String>, StoreError>> {
        let Some(bytes) = self.tm_node.get(tm.as_bytes())? else {
            return Ok(Ok(None));
        };
        Ok(registration(tm, &bytes).map(Some))
    }

    /// Stored items of `kind` as this transaction goes, leaving out those announced expired
    /// (a due one not yet announced still counts).
    pub(super) fn count_of(&self, kind: Kind) -> u64 {
        kind_count(&self.counts.get().map(|c| c.max(0) as u64), kind)
    }

    pub(super) fn count(&self, kind: Kind, block: &Block, delta: i64) {
        let mut counts = self.counts.get();
        counts[count_slot(kind, block.action)] += delta;
        self.counts.set(counts);
    }

    /// Stores `new` for `(kind, id)`, moving its expiry entry from `old`'s end to `new`'s.
    /// An `old` that ended is another block: its reports go with it.
    pub(super) fn write(
        &self,
        kind: Kind,
        id: &str,
        old: Option<&Block>,
        new: &Block,
    ) -> TxResult<()> {
        let from = match old {
            // Announced: out of the counts already, and its entry goes below.
            Some(old) if self.is_announced(kind, id, old) => {
                self.add_unreclaimed(-1);
                Level::Free
            }
            Some(old) => {
                self.count(kind, old, -1);
                Level::of(Some(old.action))
            }
            None => Level::Free,
        };
        self.count(kind, new, 1);
        self.level_changed(kind, id, from, Level::of(Some(new.action)))?;
        self.written.borrow_mut().push((kind, id.to_owned()));
        // Remove the old index entry first: when both ends are equal, the insert below puts
        // it back (remove-after-insert would lose it).
        if let Some(old) = old.filter(|b| !b.is_permanent()) {
            self.expiry.remove(keys::expiry_key(old.end, kind, id))?;
        }
        if let Some(old) = old.filter(|b| !b.is_active(self.now)) {
            self.drop_reports(kind, id, old)?;
            self.drop_live(kind, id)?;
        }
        if !new.is_permanent() {
            self.expiry
                .insert(keys::expiry_key(new.end, kind, id), &[])?;
        }
        self.items
            .insert(keys::item_key(kind, id), codec::encode_block(new))?;
        Ok(())
    }

    /// [`Tx::write`]s `block` over `old` and emits what a subscriber must see; `block` is
    /// stamped with the revision of its event.
    pub(super) fn store(
        &self,
        kind: Kind,
        id: &str,
        old: Option<&Block>,
        block: &mut Block,
    ) -> TxResult<()> {
        let event = match old {
            // Its `expired` event is out already; the new item is simply added.
            Some(old) if self.is_announced(kind, id, old) => EventType::Added,
            // An expired item the sweeper has not reached yet ends before the new one
            // starts, so a subscriber sees the old block end first.
            Some(old) if !old.is_active(self.now) => {
                self.ended(kind, id, old, Ended::Expired, &Unblock::default())?;
                EventType::Added
            }
            Some(_) => EventType::Merged,
            None => EventType::Added,
        };
        block.revision = self.revision() + 1;
        self.write(kind, id, old, block)?;
        self.emit_item(event, kind, id, block);
        self.announce_if_passed(kind, id, block)
    }

    /// Announces `(kind, id)`'s `block`, just written, expired if its end came (the request
    /// was validated before it) and the watermark has already passed it: the sweeper will
    /// never announce it, so the write does.
    pub(super) fn announce_if_passed(&self, kind: Kind, id: &str, block: &Block) -> TxResult<()> {
        if self.is_announced(kind, id, block) {
            self.count(kind, block, -1);
            self.level_changed(kind, id, Level::of(Some(block.action)), Level::Free)?;
            self.add_unreclaimed(1);
            self.ended(kind, id, block, Ended::Expired, &Unblock::default())?;
        }
        Ok(())
    }

    /// Emits the end of `(kind, id)`'s `block` (`removed` or `expired`) and keeps it as a
    /// past block of the id ([`super::history`]).
    pub(super) fn ended(
        &self,
        kind: Kind,
        id: &str,
        block: &Block,
        how: Ended,
        unblock: &Unblock,
    ) -> TxResult<()> {
        let event = match how {
            Ended::Expired => EventType::Expired,
            Ended::Removed | Ended::Retracted => EventType::Removed,
        };
        self.emit_item(event, kind, id, block);
        self.drop_statuses(kind, id)?;
        let ending = Ending {
            how,
            timestamp: self.now,
            source: unblock.source.clone(),
            reason: unblock.reason.clone(),
        };
        self.keep_past(kind, id, block, &ending)
    }

    /// Stores the reports `new` of `(kind, id)`, whose block was `before` (when they merge
    /// into or update a stored block) and is now `after` (the new ones its last reports):
    /// each overwrites the report [`MAX_REPORTS`] older in its slot of the ring
    /// ([`keys::report_key`]), so only the most recent are kept.
    ///
    /// Invariant: report 0 is absent only while the block has that one report and it is the
    /// block's [`Block::first_report`] (readers rebuild it). So the ring of a fresh add stays
    /// empty, and the block's second report first stores the one `before` implied.
    pub(super) fn add_reports(
        &self,
        kind: Kind,
        id: &str,
        before: Option<&Block>,
        after: &Block,
        new: &[Report],
    ) -> TxResult<()> {
        let total = after.provenance.reports;
        let first_new = total.saturating_sub(new.len() as u64);
        if let Some(before) = before.filter(|_| first_new == 1) {
            let key = keys::report_key(kind, id, 0);
            if self.reports.get(&key)?.is_none() {
                self.reports
                    .insert(key, codec::encode_report(&before.first_report()))?;
            }
        }
        let kept_from = total.saturating_sub(MAX_REPORTS);
        for (n, report) in (first_new..total).zip(new) {
            if n >= kept_from && !(n == 0 && after.implies_first(report)) {
                self.reports
                    .insert(keys::report_key(kind, id, n), codec::encode_report(report))?;
            }
        }
        Ok(())
    }

    /// Drops the stored reports of `(kind, id)`'s `block`.
    pub(super) fn drop_reports(&self, kind: Kind, id: &str, block: &Block) -> TxResult<()> {
        let total = block.provenance.reports;
        for n in total.saturating_sub(MAX_REPORTS)..total {
            self.reports.remove(keys::report_key(kind, id, n))?;
        }
        Ok(())
    }

    /// Deletes `(kind, id)`, whose stored block is `old`, with its expiry entry.
    pub(super) fn delete(&self, kind: Kind, id: &str, old: &Block) -> TxResult<()> {
        if self.is_announced(kind, id, old) {
            self.add_unreclaimed(-1);
        } else {
            self.count(kind, old, -1);
            self.level_changed(kind, id, Level::of(Some(old.action)), Level::Free)?;
        }
        if !old.is_permanent() {
            self.expiry.remove(keys::expiry_key(old.end, kind, id))?;
        }
        self.drop_reports(kind, id, old)?;
        self.drop_live(kind, id)?;
        self.items.remove(keys::item_key(kind, id))?;
        Ok(())
    }
}
