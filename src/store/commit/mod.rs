//! The single committer: the only writer of the store.
//!
//! sled 0.34 runs transactions one at a time under a process-wide lock, and its `flush` is a
//! disk round trip, so per-request transaction + flush cannot scale. The committer takes one
//! request, drains whatever else is already waiting (up to `max_batch`), applies them all in
//! one multi-tree transaction, and hands the group to the durability thread
//! ([`super::sync`]), which flushes (and fsyncs) once for every group waiting and only then
//! replies to each: group commit, pipelined so the next transaction runs while the disk
//! works.
//!
//! Each request's outcome is decided before any of its writes, so a refused request (a
//! conflict) writes nothing while the rest of the batch commits. A storage error fails the
//! whole batch, and nothing of it is acknowledged.
//!
//! A dry run ([`Mode::DryRun`]) is left out of the batch's transaction and decided after it,
//! against what it committed, in a transaction of its own that is rolled back
//! ([`Committer::rehearse`]); its answer waits for the batch's group to be durable.
//!
//! # Layout
//! - this file: the [`Committer`], the [`Message`]s it is sent, and the [`Command`] every
//!   operation implements; each request carries the reply channel of its own outcome type;
//! - [`run`]: the batching loop: gathers a batch, weighs it, commits it step by step and
//!   hands the group to the syncer;
//! - [`tx`]: the batch's one transaction and the helpers every operation writes through;
//! - one file per operation, with its request, its outcome, its transaction logic and its
//!   `Store` entry point: [`add`] (where a merge happens), [`remove`], [`select`] (an
//!   unblock by selector), [`register`] (and unregister), [`enforcement`] (enforcers'
//!   statuses), [`import`], [`clear`],
//!   [`announce`] (where the expiry watermark advances) and [`reclaim`];
//! - [`recover`]: fault recovery: deciding on a reopen, the storage probe, the reopen and
//!   its retry;
//! - [`prune`]: the event log's retention;
//! - [`idempotency`]: `Idempotency-Key` records: looked up before a request's command runs
//!   and kept with its write, in the batch's transaction; their retention.

mod add;
mod allow;
mod announce;
mod clear;
mod enforcement;
mod exposure;
mod history;
mod idempotency;
mod import;
mod ingest;
mod live;
mod policy;
mod prune;
mod reclaim;
mod recover;
mod register;
mod remove;
mod retract;
mod run;
mod select;
mod tx;
mod update;

use std::cell::Cell;
use std::fs::File;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::thread::JoinHandle;

use arc_swap::ArcSwapOption;
use tokio::sync::{mpsc, oneshot};

use super::blobs::BlobDir;
use super::members::Members;
use super::pipeline::{Answer, Decided, Reply, Stage};
use super::writes::WriteLog;
use super::{
    keys, Counts, Feed, GuardState, Handles, HistoryRetention, Retention, StoreConfig, StoreError,
    SweepSignal, Watched,
};
use super::{Result, Store};
use crate::allowlist::Entry;
use crate::metrics::Metrics;
use crate::model::Event;
use crate::policy::{Bucket, Exposure, Policy};

pub use add::{AddOutcome, Force};
pub use allow::{AllowOutcome, MAX_UNBLOCKED};
pub use announce::Expired;
pub use enforcement::ReportOutcome;
pub use idempotency::{Idempotency, KeptResponse, Keying, Render, Unkeyed};
pub use ingest::Ingested;
pub use register::Registered;
pub use remove::{HoldOff, Removed};
pub use retract::Retracted;
pub use select::SelectedOutcome;
pub use update::UpdateOutcome;

use add::Add;
use allow::{PutAllow, RemoveAllow};
use announce::Announce;
use clear::Clear;
use enforcement::Report;
use idempotency::Found;
use import::Import;
use ingest::Ingest;
pub(crate) use policy::SetPolicy;
use reclaim::Reclaim;
use register::{Register, Unregister};
use remove::Remove;
use retract::Retract;
use select::RemoveSelected;
use tx::{Tx, TxResult};
use update::Update;

/// What the committer's channel carries.
pub(crate) enum Message {
    /// Boxed: the queue holds up to four batches' worth of messages, each at the size of
    /// the largest operation and its decided outcome.
    Write(Box<Op>),
    /// Stop after committing what came before. A message rather than the channel closing:
    /// HTTP handlers still hold clones of the store.
    Shutdown,
    /// From the syncer: a pass failed, so the store must be reopened now, not at the next
    /// write (readers wait for that reopen).
    Wake,
}

/// One request to the committer, by operation.
pub(crate) enum Op {
    Add(Request<Add>),
    Remove(Request<Remove>),
    Announce(Request<Announce>),
    Reclaim(Request<Reclaim>),
    Register(Request<Register>),
    Unregister(Request<Unregister>),
    Import(Request<Import>),
    Clear(Request<Clear>),
    PutAllow(Request<PutAllow>),
    RemoveAllow(Request<RemoveAllow>),
    SetPolicy(Request<SetPolicy>),
    Update(Request<Update>),
    RemoveSelected(Request<RemoveSelected>),
    Report(Request<Report>),
    Retract(Request<Retract>),
    Ingest(Request<Ingest>),
}

/// Evaluates `$body` with `$request` bound to the [`Request`] inside `$op`, whatever its
/// operation: what differs between operations is on [`Command`], so this is the one match
/// over them.
macro_rules! with_request {
    ($op:expr, $request:ident => $body:expr) => {
        match $op {
            Op::Add($request) => $body,
            Op::Remove($request) => $body,
            Op::Announce($request) => $body,
            Op::Reclaim($request) => $body,
            Op::Register($request) => $body,
            Op::Unregister($request) => $body,
            Op::Import($request) => $body,
            Op::Clear($request) => $body,
            Op::PutAllow($request) => $body,
            Op::RemoveAllow($request) => $body,
            Op::SetPolicy($request) => $body,
            Op::Update($request) => $body,
            Op::RemoveSelected($request) => $body,
            Op::Report($request) => $body,
            Op::Retract($request) => $body,
            Op::Ingest($request) => $body,
        }
    };
}

impl Op {
    /// How many items it writes at most, to bound a batch's transaction.
    fn weight(&self) -> usize {
        with_request!(self, request => request.command.weight())
    }

    /// Whether a client asked for it (rather than the sweeper).
    fn is_client_write(&self) -> bool {
        with_request!(self, request => request.is_client_write())
    }

    /// Visits every key it may change (`due`: what an announce takes), for the change
    /// stamps.
    fn touched(&self, due: &[Vec<u8>], visit: impl FnMut(Watched<'_>)) {
        with_request!(self, request => request.command.touched(due, visit));
    }

    /// Applies it in the batch's transaction `tx` and keeps what it decided.
    fn apply(&self, tx: &Tx<'_>, due: &[Vec<u8>]) -> TxResult<()> {
        with_request!(self, request => request.apply(tx, due))
    }

    /// Its answer, once its transaction committed, and the earliest finite end it wrote.
    fn answer(self, metrics: &Metrics) -> (Box<dyn Answer>, Option<i64>) {
        with_request!(self, request => request.answer(metrics))
    }

    /// Answers `error` at once: it was not committed.
    fn fail(self, error: StoreError) {
        with_request!(self, request => request.fail(error));
    }

    /// Whether it only asks what it would do ([`Mode::DryRun`]).
    fn is_dry_run(&self) -> bool {
        with_request!(self, request => request.mode == Mode::DryRun)
    }
}

/// Whether a write is made, or only decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Commit,
    /// Decided exactly as it would be at this point, against every committed change, and
    /// answered once those are durable, but written nowhere: no change, no revision, no
    /// event. The revision answered with it is the one its outcome was decided at.
    DryRun,
}

/// One operation of the committer: what it writes in the batch's transaction, and what its
/// requester learns.
pub(crate) trait Command: Sized {
    /// What the requester learns, with the revision after it.
    type Outcome: Send + 'static;

    /// Whether a client asks for it (rather than the sweeper): reclaiming expired items
    /// waits for client writes to pause.
    const CLIENT_WRITE: bool = true;

    /// Its request, as the committer is sent it.
    fn op(request: Request<Self>) -> Op;

    /// How many items it writes at most, to bound a batch's transaction.
    fn weight(&self) -> usize;

    /// Visits every key it may change (`due`: what an announce takes, from
    /// [`Committer::scan_due`]), so the change stamps cover them before the transaction.
    fn touched(&self, due: &[Vec<u8>], visit: impl FnMut(Watched<'_>));

    /// Applies it in the batch's transaction (`due`: as for [`Command::touched`]). The outer
    /// `Result` aborts the whole transaction (storage errors); the inner one fails only this
    /// request (a corrupt stored value). The closure running it may be re-run, so it only
    /// computes.
    fn apply(&self, tx: &Tx<'_>, due: &[Vec<u8>]) -> TxResult<Result<Applied<Self::Outcome>>>;

    /// Counts in the metrics what its committed outcome says about the workload.
    fn record(_outcome: &Self::Outcome, _metrics: &Metrics) {}
}

/// What one operation did in the transaction.
pub(crate) struct Applied<O> {
    pub outcome: O,
    /// The earliest finite end it wrote, which may wake the sweeper; `None` when it wrote
    /// none.
    pub earliest_end: Option<i64>,
}

impl<O> Applied<O> {
    /// An outcome that wrote no finite end.
    fn endless(outcome: O) -> Applied<O> {
        Applied {
            outcome,
            earliest_end: None,
        }
    }
}

/// The earlier of two ends; `None` only when both are.
fn earlier(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    a.into_iter().chain(b).min()
}

/// A request for command `C`, with the reply channel of its outcome.
pub(crate) struct Request<C: Command> {
    command: C,
    mode: Mode,
    reply: Reply<C::Outcome>,
    /// Its `Idempotency-Key`, if it has one: looked up before the command runs, and the
    /// response kept with the write. Never used in [`Mode::DryRun`].
    key: Option<Idempotency<C::Outcome>>,
    /// What the batch's transaction decided for it, with the revision after it. Set by each
    /// run of the transaction closure (sled may re-run it; the last run is the one that
    /// commits), taken once the transaction committed.
    decided: Cell<Option<Decision<C::Outcome>>>,
}

/// What the batch's transaction decided for one request: what it did and the revision
/// after it, or the error that fails it alone.
type Decision<O> = Result<(Applied<O>, u64)>;

impl<C: Command> Request<C> {
    pub(super) fn new(command: C, mode: Mode, reply: Reply<C::Outcome>) -> Request<C> {
        Request {
            command,
            mode,
            reply,
            key: None,
            decided: Cell::new(None),
        }
    }

    /// This request with `key` (`None`: without one).
    fn keyed(mut self, key: Option<Idempotency<C::Outcome>>) -> Request<C> {
        self.key = key;
        self
    }

    #[expect(clippy::unused_self, reason = "called through the type-erased `Op`")]
    fn is_client_write(&self) -> bool {
        C::CLIENT_WRITE
    }

    fn apply(&self, tx: &Tx<'_>, due: &[Vec<u8>]) -> TxResult<()> {
        // A dry run neither looks its key up nor keeps it.
        let key = self.key.as_ref().filter(|_| self.mode == Mode::Commit);
        let mut stale = None;
        if let Some(key) = key {
            // Reads this transaction's own writes too: a request earlier in the batch with
            // the same key is found here.
            let settled = match tx.recorded(&key.key, &key.fingerprint)? {
                Ok(Found::Nothing(past)) => {
                    stale = past;
                    None
                }
                Ok(Found::Same(response)) => Some(StoreError::Replay(Box::new(response))),
                Ok(Found::Different) => Some(StoreError::KeyReused(key.key.clone())),
                Err(e) => Some(e),
            };
            if let Some(settled) = settled {
                self.decided.set(Some(Err(settled)));
                return Ok(());
            }
        }
        let before = tx.revision();
        let decided = self.command.apply(tx, due)?.map(|applied| {
            let revision = match self.mode {
                Mode::Commit => tx.revision(),
                // What it was decided at: it took no revision of its own.
                Mode::DryRun => before,
            };
            (applied, revision)
        });
        // Kept with the write it answers, when the HTTP layer answers it with a success.
        if let (Some(key), Ok((applied, revision))) = (key, &decided) {
            if let Some(response) = (key.render)(&applied.outcome, *revision) {
                tx.record(&key.key, key.fingerprint, &response, stale.as_ref())?;
            }
        }
        self.decided.set(Some(decided));
        Ok(())
    }

    fn answer(self, metrics: &Metrics) -> (Box<dyn Answer>, Option<i64>) {
        let decided = self
            .decided
            .into_inner()
            .expect("a committed transaction applied every request of its batch");
        let (answer, earliest_end) = match decided {
            // A dry run changed nothing: it counts in no metric and wakes no sweeper.
            Ok((applied, revision)) if self.mode == Mode::DryRun => {
                (Ok((applied.outcome, revision)), None)
            }
            Ok((applied, revision)) => {
                C::record(&applied.outcome, metrics);
                (Ok((applied.outcome, revision)), applied.earliest_end)
            }
            Err(e) => {
                if matches!(e, StoreError::Replay(_)) {
                    metrics.idempotent_replays.inc();
                }
                (Err(e), None)
            }
        };
        let reply = self.reply;
        (Box::new(Decided { reply, answer }), earliest_end)
    }

    fn fail(self, error: StoreError) {
        // A requester that gave up waiting is no one's concern here.
        let _ = self.reply.send(Err(error));
    }
}

/// Visits the item behind each expiry key.
fn expiry_items(expiry_keys: &[Vec<u8>], mut visit: impl FnMut(Watched<'_>)) {
    for key in expiry_keys {
        if let Some((_, kind, id)) = keys::parse_expiry_key(key) {
            visit(Watched::Item(kind, id));
        }
    }
}

pub(crate) struct Committer {
    /// The open database; `None` only while a reopen has failed and will be retried.
    pub(super) handles: Option<Arc<Handles>>,
    /// Where readers find the database; emptied while it is reopened.
    pub(super) slot: Arc<ArcSwapOption<Handles>>,
    pub(super) config: StoreConfig,
    /// A storage error happened: sled refuses writes until reopened.
    pub(super) broken: bool,
    /// The log file, fsynced after each flush when power-loss durability is on.
    pub(super) log: Option<Arc<File>>,
    /// sled's `blobs/`, whose new files are fsynced after each transaction; `None` when
    /// power-loss durability is off.
    pub(super) blobs: Option<BlobDir>,
    pub(super) requests: mpsc::Receiver<Message>,
    /// The durability thread: committed groups go there to be flushed and answered.
    pub(super) stages: Option<SyncSender<Stage>>,
    pub(super) syncer: Option<JoinHandle<()>>,
    /// Set by the durability thread when a flush failed: reopen before the next group.
    pub(super) sync_failed: Arc<AtomicBool>,
    pub(super) max_batch: usize,
    pub(super) sweep: Arc<SweepSignal>,
    pub(super) feed: Arc<Feed>,
    /// The guardrails' state published to readers after each commit.
    pub(super) guards: Arc<GuardState>,
    /// The revision of the last committed transaction.
    pub(super) revision: u64,
    /// Stored items per (kind, action) after the last committed transaction, leaving out
    /// those announced expired.
    pub(super) counts: Counts,
    /// The expiry watermark after the last committed transaction (see
    /// [`super::WATERMARK_KEY`]).
    pub(super) watermark: Vec<u8>,
    /// Items announced expired whose storage is not reclaimed yet, after the last committed
    /// transaction.
    pub(super) unreclaimed: u64,
    /// Events committed but not known durable (a flush failed after their transaction),
    /// held across a reopen: those whose revision survived it are published then.
    pub(super) unpublished: Vec<Event>,
    pub(super) retention: Retention,
    pub(super) history: HistoryRetention,
    pub(super) metrics: Arc<Metrics>,
    /// The guardrails, the evacuation buckets, the share caps' figures, the task managers
    /// on each node and the allowlist's prefix entries, after the last committed
    /// transaction.
    pub(super) policy: Policy,
    pub(super) buckets: [Bucket; 2],
    pub(super) exposure: Exposure,
    pub(super) members: Members,
    pub(super) prefixes: Vec<Entry>,
    /// How many allowlist entries are stored: with none, an add reads no entry.
    pub(super) allow_entries: u64,
    /// Whether each commit's writes are logged for its group ([`crate::store::writes`]),
    /// and the writes of the prunes since the last group, which the next one carries first.
    pub(super) log_writes: bool,
    pub(super) pruned: WriteLog,
}

impl Committer {
    /// The open database; only called while it is open (not broken).
    fn handles(&self) -> &Handles {
        self.handles.as_ref().expect("open unless broken")
    }

    /// Where writes outside the transaction are logged, when writes are.
    fn pruned_log(&self) -> Option<&WriteLog> {
        self.log_writes.then_some(&self.pruned)
    }
}

/// The client writes of a [`Store`], made or only decided as its [`Mode`] says, with the
/// `Idempotency-Key` `K` attaches ([`Unkeyed`]: none). The `Store`'s own methods of the
/// same names commit, unkeyed.
///
/// A keyed write whose key has a live record of the same request fails with
/// [`StoreError::Replay`], carrying the response to send again, and applies nothing; one
/// whose key was first used by a different request fails with [`StoreError::KeyReused`].
pub struct Writer<'a, K = Unkeyed> {
    store: &'a Store,
    mode: Mode,
    key: K,
}

impl<'a> Writer<'a> {
    /// These writes with `key` (`None`: as without one), for requests of outcome `O`.
    pub fn keyed<O>(self, key: Option<Idempotency<O>>) -> Writer<'a, Option<Idempotency<O>>> {
        Writer {
            store: self.store,
            mode: self.mode,
            key,
        }
    }
}

impl<K> Writer<'_, K> {
    async fn submit<C: Command>(&self, command: C) -> Result<(C::Outcome, u64)>
    where
        K: Keying<C::Outcome>,
    {
        let key = self.key.idempotency();
        self.store.submit_keyed(command, self.mode, key).await
    }
}

impl Store {
    /// This store's client writes in `mode`.
    pub fn with_mode(&self, mode: Mode) -> Writer<'_> {
        Writer {
            store: self,
            mode,
            key: Unkeyed,
        }
    }

    /// Sends `command` to the committer and waits for its answer, given once durable.
    async fn submit<C: Command>(&self, command: C, mode: Mode) -> Result<(C::Outcome, u64)> {
        self.submit_keyed(command, mode, None).await
    }

    /// [`Store::submit`] with an `Idempotency-Key`.
    async fn submit_keyed<C: Command>(
        &self,
        command: C,
        mode: Mode,
        key: Option<Idempotency<C::Outcome>>,
    ) -> Result<(C::Outcome, u64)> {
        let (reply, answer) = oneshot::channel();
        let request = Request::new(command, mode, reply).keyed(key);
        self.shared
            .commits
            .send(Message::Write(Box::new(C::op(request))))
            .await
            .map_err(|_| StoreError::Closed)?;
        answer.await.map_err(|_| StoreError::Closed)?
    }
}
