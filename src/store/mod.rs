//! The only module that touches sled.
//!
//! Trees (byte layouts in [`keys`] and [`codec`], prose in `docs/architecture.md`):
//! - `items`: every blocked item, keyed by kind and id;
//! - `expiry`: one empty-valued entry per item with a finite end, keyed by big-endian end,
//!   so the sweeper reads only what is due;
//! - `meta`: the schema version and the current revision;
//! - `events`: the change log, one event per change, stored in chunks (the events of one
//!   transaction, cut at ~4 KiB) keyed by the chunk's first revision, big-endian, written in
//!   the same transaction as the changes;
//! - `tm_node`: which node each registered task manager runs on, and `node_tms`, its
//!   inverse index, so "task managers on node n" is a prefix scan, never a full scan.
//!
//! Invariants, kept by doing every write in one multi-tree transaction:
//! - an item with a finite `end` has exactly the expiry entry `expiry_key(end, kind, id)`,
//!   a permanent item has none, and every expiry entry belongs to such an item;
//! - `tm_node[tm] = n` exactly when `node_tms[n ++ 0x00 ++ tm]` exists;
//! - every change gets the next revision and its event in the transaction that makes it;
//!   `meta/revision` is the last revision handed out; `events` holds a contiguous range of
//!   revisions ending there (older ones pruned by retention);
//! - a write is acknowledged, and its events published to subscribers, only after the flush
//!   (and, by default, the fsync) covering it.
//!
//! Writes go through the single committer thread ([`commit`]), and are made durable and
//! answered by the syncer thread ([`sync`]); reads go straight to the
//! trees and filter `end <= now` themselves, so an item is gone for readers the moment it
//! is due, whether or not the sweeper has reached it.
//!
//! # Layout
//! - `mod.rs`: [`Store`], the handle, and its write entry points (through the committer);
//! - `config.rs`: [`StoreConfig`], how to open it;
//! - `open.rs`: opening (and reopening) the data dir and starting the committer;
//! - `error.rs`: [`StoreError`], and which failures answer 503;
//! - `meta.rs`: the `meta` tree: revision, item counts, the expiry watermark;
//! - `feed.rs`: revisions, the change feed, consistent and cacheable reads;
//! - `read.rs`: point gets and resumable scans;
//! - `verify.rs`: the invariant check;
//! - `stats.rs`: counts and sizes, for metrics and diagnostics;
//! - [`keys`], [`codec`]: the byte layouts; `migrate.rs`: schema upgrades;
//! - `commit.rs`, `sync.rs`: the committer and its durability thread;
//! - `durable.rs`, `stamps.rs`: which reads wait for durability; `blobs.rs`, `datadir.rs`:
//!   making what sled writes durable; `salvage.rs`: exporting a damaged data dir.

mod blobs;
pub mod codec;
mod commit;
mod config;
mod datadir;
mod durable;
mod error;
mod feed;
pub mod keys;
mod meta;
mod migrate;
mod open;
mod pipeline;
mod read;
mod salvage;
mod stamps;
mod stats;
mod sync;
mod verify;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use arc_swap::{ArcSwap, ArcSwapOption};
use sled::{Db, Tree};
use tokio::sync::{mpsc, Notify};

pub use blobs::SEGMENT_BYTES;
pub use codec::CodecError;
pub use commit::{AddOutcome, Expired, Registered, Retention};
pub use config::StoreConfig;
pub use durable::{Seen, READ_TIMEOUT};
pub use error::{Result, StoreError};
pub use meta::{count_slot, Counts};
pub use migrate::CURRENT as SCHEMA_VERSION;
pub use open::sled_config;
pub use pipeline::CommitError;
pub use salvage::{salvage, Salvaged};
pub use stamps::{ReadMark, Watched};
pub use stats::{DiskUsage, TreeUsage};

// The names the committer, the syncer, migrations and salvage import from the root
// (`super::…`), wherever in the files above they are defined.
pub(crate) use error::registration;
pub(crate) use feed::Feed;
pub(crate) use meta::{
    after_watermark, announced, encode_counts, scan_counts, COUNTS_KEY, REVISION_KEY,
    UNRECLAIMED_KEY, WATERMARK_KEY,
};
use open::panic_message;
pub(crate) use open::{open_handles, Opened};

use commit::Message;

/// A handle to the open store. Cloning costs one atomic increment.
#[derive(Clone)]
pub struct Store {
    shared: Arc<Shared>,
}

struct Shared {
    /// The open database. Empty only while the committer reopens it after a storage error
    /// (sled 0.34 refuses every write after an I/O error until reopened); readers then get
    /// a 503 for those few milliseconds.
    handles: Arc<ArcSwapOption<Handles>>,
    commits: mpsc::Sender<Message>,
    /// The committer thread, taken by [`Store::shutdown`]. A std mutex: only touched once,
    /// never across an await.
    committer: Mutex<Option<JoinHandle<()>>>,
    sweep: Arc<SweepSignal>,
    feed: Arc<Feed>,
}

/// An open database and its trees.
pub(crate) struct Handles {
    pub db: Db,
    pub trees: Trees,
}

/// The trees every transaction spans.
#[derive(Clone)]
pub(crate) struct Trees {
    pub items: Tree,
    pub expiry: Tree,
    pub tm_node: Tree,
    pub node_tms: Tree,
    pub events: Tree,
    pub meta: Tree,
}

/// The tree of items, and of registrations (the names salvage opens too).
const ITEMS_TREE: &str = "items";
const TM_NODE_TREE: &str = "tm_node";

/// What the committer tells the sweeper: a deadline earlier than the one it sleeps on,
/// how far expiry has been announced, and when clients last wrote.
pub struct SweepSignal {
    /// What a writer's new deadline must come before to wake the sweeper (unix ms): the
    /// deadline it sleeps until, or [`LOOKING`] while it reads the index.
    next_deadline: AtomicI64,
    pub wake: Notify,
    /// The expiry watermark as of the last commit (see [`WATERMARK_KEY`]); set through
    /// [`SweepSignal::set_watermark`].
    pub watermark: ArcSwap<Vec<u8>>,
    /// The end of the watermark's entry (unix ms; `i64::MIN` when none): everything ending
    /// by then is announced expired, so no one may take a `now` before it.
    announced_until: AtomicI64,
    /// When the last commit with a client's write in it ran (unix ms); reclaiming expired
    /// items waits for writers to pause.
    pub last_write: AtomicI64,
}

/// The end of a watermark's entry; `i64::MIN` for none (nothing announced yet).
fn announced_until(watermark: &[u8]) -> i64 {
    keys::expiry_key_end(watermark).unwrap_or(i64::MIN)
}

/// [`SweepSignal::next_deadline`] while the sweeper reads the index: every deadline a
/// writer adds then may be one its read missed, so every one wakes it. (Any finite end is
/// below it; a permanent item has no deadline and is never added.)
const LOOKING: i64 = i64::MAX;

impl SweepSignal {
    fn new(watermark: Vec<u8>) -> SweepSignal {
        SweepSignal {
            next_deadline: AtomicI64::new(i64::MAX),
            wake: Notify::new(),
            announced_until: AtomicI64::new(announced_until(&watermark)),
            watermark: ArcSwap::from_pointee(watermark),
            // Start-up counts as a write: clients reconnect and write then.
            last_write: AtomicI64::new(crate::clock::now_ms()),
        }
    }

    /// Publishes the committer's new watermark.
    pub(crate) fn set_watermark(&self, watermark: &[u8]) {
        self.announced_until
            .store(announced_until(watermark), Ordering::SeqCst);
        self.watermark.store(Arc::new(watermark.to_vec()));
    }

    /// The current time (unix ms) as every part of the daemon must see it: the wall clock,
    /// but never before the end of an item already announced expired. After the clock
    /// steps back (NTP, a restored VM) an item whose `expired` event went out stays expired
    /// for readers too, not only for the committer.
    pub fn now(&self) -> i64 {
        crate::clock::now_ms().max(self.announced_until.load(Ordering::SeqCst))
    }

    /// Wakes the sweeper if `end` comes before what it sleeps on. `Notify` keeps a permit
    /// when nobody waits, so a wake-up between its scan and its sleep is not lost.
    pub fn deadline_added(&self, end: i64) {
        if end < self.next_deadline.load(Ordering::Acquire) {
            self.wake.notify_one();
        }
    }

    /// The sweeper is about to read the index (its wake-up already armed): until it sleeps
    /// again, any new deadline wakes it.
    pub fn looking(&self) {
        self.next_deadline.store(LOOKING, Ordering::SeqCst);
    }

    /// The deadline the sweeper sleeps until (unix ms); `None` while it works, or when
    /// nothing is due.
    pub fn sleeping_on(&self) -> Option<i64> {
        let deadline = self.next_deadline.load(Ordering::SeqCst);
        (deadline != LOOKING && deadline != i64::MAX).then_some(deadline)
    }

    /// The sweeper will sleep until `deadline` (`None`: no deadline in the index); from now
    /// on only an earlier one wakes it.
    pub fn sleeping_until(&self, deadline: Option<i64>) {
        self.next_deadline
            .store(deadline.unwrap_or(i64::MAX), Ordering::SeqCst);
    }
}

impl Store {
    /// Stops the committer after the requests already queued, and flushes. Blocking.
    pub fn shutdown(&self) -> Result<()> {
        let handle = self.shared.committer.lock().expect("not poisoned").take();
        if let Some(handle) = handle {
            // A shutdown marker rather than dropping the sender: HTTP handlers still hold
            // clones of the store.
            let _ = self.shared.commits.blocking_send(Message::Shutdown);
            let _ = handle.join();
        }
        self.handles()?.db.flush()?;
        Ok(())
    }

    /// The open database, or 503 while it is being reopened.
    fn handles(&self) -> Result<Arc<Handles>> {
        self.shared.handles.load_full().ok_or(StoreError::Reopening)
    }

    /// Whether the committer thread is still running.
    pub fn committer_alive(&self) -> bool {
        self.shared
            .committer
            .lock()
            .expect("not poisoned")
            .as_ref()
            .is_some_and(|h| !h.is_finished())
    }

    pub fn sweep_signal(&self) -> &SweepSignal {
        &self.shared.sweep
    }

    /// The time readers and validation go by: see [`SweepSignal::now`].
    pub fn now(&self) -> i64 {
        self.shared.sweep.now()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::SweepSignal;

    /// Whether the sweeper, having armed its wake-up before `between` ran, would be woken.
    async fn wakes(signal: &SweepSignal, between: impl FnOnce(&SweepSignal)) -> bool {
        let notified = signal.wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        between(signal);
        // A permit makes it ready at once; the wait only bounds the negative case.
        tokio::time::timeout(Duration::from_millis(20), notified)
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_deadline_added_while_the_sweeper_looks_wakes_it() {
        let signal = SweepSignal::new(Vec::new());
        // The index read found nothing, or a later deadline: the write landed after it.
        assert!(
            wakes(&signal, |s| {
                s.looking();
                s.deadline_added(4_102_444_800_000);
            })
            .await
        );
        assert!(
            wakes(&signal, |s| {
                s.looking();
                s.deadline_added(i64::MIN + 1);
            })
            .await
        );
    }

    #[test]
    fn time_never_goes_back_before_what_was_announced_expired() {
        let signal = SweepSignal::new(Vec::new());
        let wall = crate::clock::now_ms();
        assert!(signal.now() >= wall, "no watermark: the wall clock");
        // The watermark's end is ahead of the wall clock, as after a step back of the clock.
        let ahead = wall + 3_600_000;
        signal.set_watermark(&super::keys::expiry_key(
            ahead,
            crate::model::Kind::Node,
            "n1",
        ));
        assert!(signal.now() >= ahead, "{} < {ahead}", signal.now());
        let key = signal.watermark.load_full();
        assert_eq!(super::keys::expiry_key_end(&key), Some(ahead));
    }

    #[tokio::test]
    async fn while_it_sleeps_only_an_earlier_deadline_wakes_it() {
        let signal = SweepSignal::new(Vec::new());
        assert!(
            !wakes(&signal, |s| {
                s.sleeping_until(Some(1_000));
                s.deadline_added(2_000);
                s.deadline_added(1_000);
            })
            .await
        );
        assert!(
            wakes(&signal, |s| {
                s.sleeping_until(Some(1_000));
                s.deadline_added(999);
            })
            .await
        );
        assert!(
            wakes(&signal, |s| {
                s.sleeping_until(None);
                s.deadline_added(4_102_444_800_000);
            })
            .await
        );
    }
}
