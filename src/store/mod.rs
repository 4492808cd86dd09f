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

mod blobs;
pub mod codec;
mod commit;
mod datadir;
mod durable;
pub mod keys;
mod migrate;
mod pipeline;
mod salvage;
mod stamps;
mod sync;

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use arc_swap::{ArcSwap, ArcSwapOption};
use sled::{Db, Tree};
use tokio::sync::{broadcast, mpsc, watch, Notify};

pub use blobs::SEGMENT_BYTES;
pub use codec::CodecError;
pub use commit::{AddOutcome, Expired, Registered, Retention};
pub use durable::{Seen, READ_TIMEOUT};
pub use migrate::CURRENT as SCHEMA_VERSION;
pub use pipeline::CommitError;
pub use salvage::{salvage, Salvaged};
pub use stamps::{ReadMark, Watched};

use crate::metrics::Metrics;
use crate::model::{Action, Block, Event, Item, Kind};
use commit::Message;

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("data dir {0} is in use by another process (is another blocklistd running on it?)")]
    InUse(PathBuf),
    #[error("not a blocklistd data dir: {0}")]
    Foreign(String),
    #[error(
        "the database has schema version {found}, newer than this binary supports \
         ({supported}): run a newer blocklistd"
    )]
    TooNew { found: u32, supported: u32 },
    #[error(
        "sled could not recover the database in {}: {cause}.{}\n{} Keep a copy of the whole \
         directory, then run `blocklistd --data-dir {} salvage --out items.jsonl` to export \
         what is still readable, and `blocklistd --data-dir NEW_DIR import items.jsonl` to \
         load it into a new data dir (docs/operations.md, \"A damaged data dir\")",
        dir.display(),
        damage_lines(files),
        if *untouched {
            "The data dir was not changed."
        } else {
            "sled may have rewritten the end of its log while it tried."
        },
        dir.display()
    )]
    Damaged {
        dir: PathBuf,
        cause: String,
        /// What looks damaged, one file per line (see [`datadir::damage_report`]).
        files: Vec<String>,
        /// Whether the failure was found before sled's recovery ran on the data dir.
        untouched: bool,
    },
    #[error("storage error: {0}")]
    Sled(#[from] sled::Error),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("corrupt value under key {key:?}: {source}")]
    Corrupt { key: String, source: CodecError },
    /// A write was not committed, or not made durable; [`CommitError`] says why. 503 (see
    /// [`StoreError::is_unavailable`]): the storage failed, not the request; the detail
    /// names paths and sled internals, so it goes to the log and the client gets the
    /// generic message.
    #[error("the write was not committed: {0}")]
    NotCommitted(#[from] CommitError),
    /// A read run on the blocking pool panicked or was cancelled. 503, as a failure of the
    /// daemon rather than of the request; a panic message is no business of the client's.
    #[error("read task failed: {0}")]
    ReadTaskFailed(#[source] tokio::task::JoinError),
    /// A streamed listing's producer stopped before its last chunk: the body fails rather
    /// than end early, so a client never takes a cut-off listing for a complete one. Met
    /// after the status is sent, so no status of its own is ever answered; it counts as
    /// 503 and stays out of the body like every storage failure.
    #[error("the listing stopped before its end")]
    ListingStopped,
    /// The transaction of a schema upgrade step failed on a storage error. Met while
    /// opening, so it stops the start (or fails a reopen) rather than reach a client; it
    /// counts as 503 like the storage error it is, with the detail kept to the log.
    #[error("upgrade to schema {to} failed: {source}")]
    UpgradeFailed {
        to: u32,
        #[source]
        source: sled::Error,
    },
    #[error("the store is shut down")]
    Closed,
    #[error("the database is being reopened after a storage error")]
    Reopening,
    #[error(
        "the disk has not confirmed, within {0:?}, the writes this read depends on; \
         the answer is withheld rather than risk one a crash could take back"
    )]
    NotDurable(std::time::Duration),
}

impl StoreError {
    /// [`StoreError::Damaged`] for `dir`, with what [`datadir::damage_report`] finds there.
    fn damaged(dir: &Path, cause: impl Into<String>, untouched: bool) -> StoreError {
        StoreError::Damaged {
            dir: dir.to_owned(),
            cause: cause.into(),
            files: datadir::damage_report(dir),
            untouched,
        }
    }
}

/// The damaged files of [`StoreError::Damaged`], as lines of its message.
fn damage_lines(files: &[String]) -> String {
    if files.is_empty() {
        return " No file looks damaged on its own (the log itself may be).".into();
    }
    const SHOWN: usize = 10;
    let mut text = String::from(" Damaged files:");
    for file in files.iter().take(SHOWN) {
        text.push_str("\n  ");
        text.push_str(file);
    }
    if files.len() > SHOWN {
        text.push_str(&format!("\n  … and {} more", files.len() - SHOWN));
    }
    text
}

impl StoreError {
    /// Whether the failure is the storage's (disk full, I/O error, shutting down) rather than
    /// a problem with the data: the HTTP layer answers 503 for these.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            StoreError::Sled(_)
                | StoreError::Io(_)
                | StoreError::NotCommitted(_)
                | StoreError::ReadTaskFailed(_)
                | StoreError::ListingStopped
                | StoreError::UpgradeFailed { .. }
                | StoreError::Closed
                | StoreError::Reopening
                | StoreError::NotDurable(_)
        )
    }
}

/// How to open the store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub data_dir: PathBuf,
    /// sled's page cache budget. RSS runs to a few times this, so it is set explicitly.
    pub cache_bytes: u64,
    /// fsync the log file after each group-commit flush, and the blob files sled creates
    /// (power-loss durability). sled's own flush is `sync_file_range`, which survives a
    /// killed process but not a power cut.
    pub fsync: bool,
    /// sled's segment size for a new data dir (an existing one keeps its own): see
    /// [`blobs::SEGMENT_BYTES`].
    pub segment_bytes: usize,
    /// The most requests one group commit takes.
    pub max_commit_batch: usize,
    /// How much of the change log to keep.
    pub retention: Retention,
    /// The live feed's ring of recent events; a subscriber that misses some of it catches up
    /// from the log.
    pub feed_buffer: usize,
    /// Where the committer records what it does.
    pub metrics: Arc<Metrics>,
}

impl StoreConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> StoreConfig {
        StoreConfig {
            data_dir: data_dir.into(),
            cache_bytes: 64 * 1024 * 1024,
            fsync: true,
            segment_bytes: SEGMENT_BYTES,
            max_commit_batch: 256,
            retention: Retention {
                count: 100_000,
                max_age_ms: 24 * 3600 * 1000,
            },
            feed_buffer: 1024,
            metrics: Arc::default(),
        }
    }
}

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

/// The revision counters and the live event feed, shared by the committer and readers.
pub(crate) struct Feed {
    /// The revision of the last committed transaction (visible in the trees; maybe not yet
    /// durable).
    pub committed: AtomicU64,
    /// Seqlock over transactions: odd while one is being applied. A reader that needs a
    /// listing consistent with one revision checks it did not move during its scan.
    pub seq: AtomicU64,
    /// The revision known durable; listings wait for it to cover what they saw.
    pub durable: watch::Sender<u64>,
    /// Durable events, as they commit.
    pub live: broadcast::Sender<Arc<Event>>,
    /// The oldest revision still in the log (`committed + 1` when the log is empty).
    pub first_retained: AtomicU64,
    /// Stored items per (kind, action), as of the last commit.
    pub counts: [AtomicU64; 4],
    /// Items announced expired whose storage is not reclaimed yet, as of the last commit.
    pub unreclaimed: AtomicU64,
    /// Which keys changed (or are about to) at which `seq`: for readers that cache, and for
    /// readers that must not answer before what they read is durable.
    pub stamps: stamps::ChangeStamps,
    /// Up to which `seq` everything is durable; see [`durable`].
    pub durability: durable::Durability,
}

/// An open database and its trees.
pub(crate) struct Handles {
    pub db: Db,
    pub trees: Trees,
}

/// What opening a database found, to (re)initialise the counters.
pub(crate) struct Opened {
    pub handles: Handles,
    pub revision: u64,
    pub counts: Counts,
    pub first_retained: u64,
    pub watermark: Vec<u8>,
    /// Expiry entries at or before the watermark (announced, not reclaimed).
    pub unreclaimed: u64,
}

/// Opens the sled database in `config.data_dir`, upgrades its schema, and reads the
/// revision, counts and log start. Used at start and when reopening after a storage error.
/// A sled configuration for opening the database in `dir` directly, with the segment size
/// it was created with (or ours, for a new one): for tests and tools that build or inspect
/// databases below the store. Nothing else may open one.
pub fn sled_config(dir: &Path) -> Result<sled::Config> {
    let segment = datadir::segment_bytes(dir, SEGMENT_BYTES)
        .map_err(|cause| StoreError::damaged(dir, cause, true))?;
    Ok(sled::Config::new().path(dir).segment_size(segment))
}

/// The tree of items, and of registrations (the names salvage opens too).
const ITEMS_TREE: &str = "items";
const TM_NODE_TREE: &str = "tm_node";

pub(crate) fn open_handles(config: &StoreConfig) -> Result<Opened> {
    let dir = &config.data_dir;
    let segment_bytes = datadir::segment_bytes(dir, config.segment_bytes)
        .map_err(|cause| StoreError::damaged(dir, cause, true))?;
    if segment_bytes < SEGMENT_BYTES {
        tracing::warn!(
            segment_bytes,
            "this data dir was created with sled segments smaller than {SEGMENT_BYTES} bytes: \
             sled may write long causes as blob files (they are fsynced, but a disk that \
             loses them breaks recovery); export and import it into a new data dir to \
             prevent them (docs/operations.md)"
        );
    }
    // sled's recovery stops at the first blob it cannot read, may then fail, and rewrites
    // the end of its log before it does: with damaged blobs, try it on a copy first, and
    // leave the data dir untouched (for `salvage`) if it fails there.
    if !blobs::damaged(&dir.join("blobs")).is_empty() {
        if let Err(cause) = salvage::opens_on_copy(dir, segment_bytes) {
            return Err(StoreError::damaged(dir, cause, true));
        }
    }
    let sled_config = sled::Config::new()
        .path(dir)
        .cache_capacity(config.cache_bytes)
        .segment_size(segment_bytes)
        // We flush after every group commit; a background flusher would only add wake-ups.
        .flush_every_ms(None);
    // sled's recovery panics on some damage (an empty blob file: "tried to serialize
    // Uninitialized"); the daemon reports it instead of crashing.
    let db = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sled_config.open())) {
        Ok(opened) => opened.map_err(|e| open_error(dir, e))?,
        Err(panic) => {
            return Err(StoreError::damaged(
                dir,
                format!("its recovery panicked: {}", panic_message(&*panic)),
                false,
            ))
        }
    };
    // Whatever sled created or rewrote while opening (conf, a snapshot, directory entries)
    // is durable before anything is read or answered.
    if config.fsync {
        datadir::make_durable_after_open(dir)?;
    }
    migrate::upgrade(&db)?;
    let trees = Trees {
        items: db.open_tree(ITEMS_TREE)?,
        expiry: db.open_tree("expiry")?,
        tm_node: db.open_tree(TM_NODE_TREE)?,
        node_tms: db.open_tree("node_tms")?,
        events: db.open_tree("events")?,
        meta: db.open_tree(migrate::META_TREE)?,
    };
    let revision =
        match trees.meta.get(REVISION_KEY)? {
            Some(bytes) => u64::from_be_bytes(bytes.as_ref().try_into().map_err(|_| {
                StoreError::Foreign(format!("its revision has {} bytes", bytes.len()))
            })?),
            None => 0,
        };
    let watermark = read_watermark(&trees.meta)?;
    let unreclaimed = match trees.meta.get(UNRECLAIMED_KEY)? {
        Some(bytes) => u64::from_be_bytes(bytes.as_ref().try_into().map_err(|_| {
            StoreError::Foreign(format!("its unreclaimed count has {} bytes", bytes.len()))
        })?),
        None => 0,
    };
    let counts = match trees.meta.get(COUNTS_KEY)? {
        Some(bytes) => decode_counts(&bytes)
            .ok_or_else(|| StoreError::Foreign("its item counts are malformed".into()))?,
        None => scan_counts(&trees.items, &watermark)?,
    };
    let first_retained = match trees.events.first()? {
        Some((key, _)) => keys::parse_event_key(&key).ok_or_else(|| bad_key(&key))?,
        None => revision + 1,
    };
    Ok(Opened {
        handles: Handles { db, trees },
        revision,
        counts,
        first_retained,
        watermark,
        unreclaimed,
    })
}

/// How many expiry entries are at or before the watermark, by scanning them (for
/// `verify`).
fn count_unreclaimed(expiry: &Tree, watermark: &[u8]) -> Result<u64> {
    if watermark.is_empty() {
        return Ok(0);
    }
    let mut n = 0;
    for key in expiry
        .range::<&[u8], _>((Bound::Unbounded, Bound::Included(watermark)))
        .keys()
    {
        key?;
        n += 1;
    }
    Ok(n)
}

/// Where the expiry keys not yet announced begin.
pub(crate) fn after_watermark(watermark: &[u8]) -> Bound<Vec<u8>> {
    if watermark.is_empty() {
        Bound::Unbounded
    } else {
        Bound::Excluded(watermark.to_vec())
    }
}

/// The stored expiry watermark; empty (nothing announced) when there is none yet.
fn read_watermark(meta: &Tree) -> Result<Vec<u8>> {
    match meta.get(WATERMARK_KEY)? {
        Some(bytes) if keys::parse_expiry_key(&bytes).is_some() => Ok(bytes.to_vec()),
        Some(_) => Err(StoreError::Foreign(
            "its expiry watermark is malformed".into(),
        )),
        None => Ok(Vec::new()),
    }
}

/// Whether the item `(kind, id)` ending at `end` has been announced expired: its expiry
/// key is at or before the watermark (an empty watermark announces nothing).
pub(crate) fn announced(watermark: &[u8], end: i64, kind: Kind, id: &str) -> bool {
    if end == crate::model::PERMANENT || watermark.is_empty() {
        return false;
    }
    // The end decides unless it equals the watermark's; then the whole key does.
    match keys::expiry_key_end(watermark) {
        Some(w) if end != w => end < w,
        _ => keys::expiry_key(end, kind, id).as_slice() <= watermark,
    }
}

/// Live entries and bytes of one tree; see [`Store::disk_usage`].
#[derive(Debug, Clone)]
pub struct TreeUsage {
    /// The sled tree's name.
    pub name: String,
    pub entries: u64,
    /// Bytes of keys and values, without sled's own overhead.
    pub bytes: u64,
}

/// The live contents of the trees against the size of the database files.
#[derive(Debug, Clone)]
pub struct DiskUsage {
    pub trees: Vec<TreeUsage>,
    /// What sled reports as its size on disk (the log and its snapshot).
    pub on_disk: u64,
}

impl DiskUsage {
    pub fn live_bytes(&self) -> u64 {
        self.trees.iter().map(|t| t.bytes).sum()
    }
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

/// `meta` key of the last revision handed out (u64 big-endian).
pub(crate) const REVISION_KEY: &[u8] = b"revision";

/// `meta` key of the stored item counts per kind and action: four u64 big-endian, in
/// [`count_slot`] order. Kept in the same transaction as the items, so metrics never scan.
pub(crate) const COUNTS_KEY: &[u8] = b"item_counts";

/// `meta` key of the expiry watermark (schema 5): the last expiry key announced expired.
/// Every item whose expiry key is at or before it has had its `expired` event and left the
/// counts; its entries may still be in `items` and `expiry` until reclaimed. See
/// `docs/architecture.md`, "Expiry in two phases".
pub(crate) const WATERMARK_KEY: &[u8] = b"expiry_watermark";

/// `meta` key of how many items are announced expired but still stored (schema 5; u64
/// big-endian, absent: 0): the entries at or before the watermark. Kept in the same
/// transactions, so neither a scrape nor a start scans that backlog, which a crash during
/// a mass expiry can leave at a million entries.
pub(crate) const UNRECLAIMED_KEY: &[u8] = b"unreclaimed";

/// Item counts per (kind, action), indexed by [`count_slot`].
pub type Counts = [u64; 4];

/// The slot of `(kind, action)` in [`Counts`].
pub fn count_slot(kind: Kind, action: Action) -> usize {
    let k = match kind {
        Kind::TaskManager => 0,
        Kind::Node => 2,
    };
    k + match action {
        Action::MarkBlocked => 0,
        Action::MarkBlockedAndEvacuateTasks => 1,
    }
}

pub(crate) fn encode_counts(counts: &Counts) -> Vec<u8> {
    counts.iter().flat_map(|c| c.to_be_bytes()).collect()
}

pub(crate) fn decode_counts(bytes: &[u8]) -> Option<Counts> {
    if bytes.len() != 32 {
        return None;
    }
    let mut counts = [0u64; 4];
    for (i, chunk) in bytes.chunks_exact(8).enumerate() {
        counts[i] = u64::from_be_bytes(chunk.try_into().ok()?);
    }
    Some(counts)
}

/// Counts the stored items not yet announced expired, by scanning (for upgrades and
/// `verify`).
pub(crate) fn scan_counts(items: &Tree, watermark: &[u8]) -> Result<Counts> {
    let mut counts = [0u64; 4];
    for entry in items.iter() {
        let (key, bytes) = entry?;
        let (kind, id) = keys::parse_item_key(&key).ok_or_else(|| bad_key(&key))?;
        let block = decode(&key, &bytes)?;
        if !announced(watermark, block.end, kind, id) {
            counts[count_slot(kind, block.action)] += 1;
        }
    }
    Ok(counts)
}

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
    /// Opens (or creates) the store in `config.data_dir`, upgrades its schema, and starts
    /// the committer thread.
    pub fn open(config: &StoreConfig) -> Result<Store> {
        let dir = &config.data_dir;
        datadir::create(dir)?;
        check_not_foreign(dir)?;
        let Opened {
            handles,
            revision,
            counts,
            first_retained,
            watermark,
            unreclaimed,
        } = open_handles(config)?;
        let feed = Arc::new(Feed {
            committed: AtomicU64::new(revision),
            seq: AtomicU64::new(0),
            durable: watch::Sender::new(revision),
            live: broadcast::channel(config.feed_buffer.max(1)).0,
            first_retained: AtomicU64::new(first_retained),
            counts: counts.map(AtomicU64::new),
            unreclaimed: AtomicU64::new(unreclaimed),
            stamps: stamps::ChangeStamps::new(),
            durability: durable::Durability::new(),
        });
        let log = if config.fsync {
            Some(Arc::new(std::fs::File::open(dir.join("db"))?))
        } else {
            None
        };
        let sweep = Arc::new(SweepSignal::new(watermark.clone()));
        let (commits, requests) = mpsc::channel(4 * config.max_commit_batch);
        let handles = Arc::new(handles);
        let slot = Arc::new(ArcSwapOption::new(Some(handles.clone())));
        let sync_failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let blob_dir = if config.fsync {
            Some(blobs::BlobDir::open(&dir.join("blobs"))?)
        } else {
            None
        };
        let (stages, syncer) =
            sync::spawn(feed.clone(), config.metrics.clone(), sync_failed.clone())?;
        let committer = commit::Committer {
            handles: Some(handles),
            slot: slot.clone(),
            config: config.clone(),
            broken: false,
            log,
            blobs: blob_dir,
            requests,
            stages: Some(stages),
            syncer: Some(syncer),
            sync_failed,
            max_batch: config.max_commit_batch,
            sweep: sweep.clone(),
            feed: feed.clone(),
            revision,
            counts,
            watermark,
            unreclaimed,
            unpublished: Vec::new(),
            retention: config.retention,
            metrics: config.metrics.clone(),
        };
        let handle = std::thread::Builder::new()
            .name("committer".into())
            .spawn(move || committer.run())?;
        Ok(Store {
            shared: Arc::new(Shared {
                handles: slot,
                commits,
                committer: Mutex::new(Some(handle)),
                sweep,
                feed,
            }),
        })
    }

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

    // ---- the change feed ----

    /// The revision of the last committed change.
    pub fn revision(&self) -> u64 {
        self.shared.feed.committed.load(Ordering::SeqCst)
    }

    /// The revision known to be on disk.
    pub fn durable_revision(&self) -> u64 {
        *self.shared.feed.durable.borrow()
    }

    /// Items announced expired whose storage is not reclaimed yet, as of the last commit.
    pub fn unreclaimed(&self) -> u64 {
        self.shared.feed.unreclaimed.load(Ordering::Relaxed)
    }

    /// Stored items per (kind, action) (expired ones count until announced); see
    /// [`count_slot`].
    pub fn item_counts(&self) -> Counts {
        let c = &self.shared.feed.counts;
        [0, 1, 2, 3].map(|i| c[i].load(Ordering::Relaxed))
    }

    /// The database's size on disk, in bytes.
    pub fn size_on_disk(&self) -> Result<u64> {
        Ok(self.handles()?.db.size_on_disk()?)
    }

    /// The oldest revision whose event is still in the log; `revision() + 1` when empty.
    pub fn first_retained(&self) -> u64 {
        self.shared.feed.first_retained.load(Ordering::SeqCst)
    }

    /// Subscribes to durable events as they commit. Subscribe before reading the log, then
    /// skip what the log already gave: nothing falls between the two.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.shared.feed.live.subscribe()
    }

    /// Up to `limit` events with `after < revision <= upto`, in order.
    pub fn events_between(&self, after: u64, upto: u64, limit: usize) -> Result<Vec<Event>> {
        if after >= upto {
            return Ok(Vec::new());
        }
        let events = &self.handles()?.trees.events;
        // Events are stored in chunks under their first revision: start from the chunk
        // that holds `after + 1`, which may begin before it.
        let from = keys::event_key(after + 1);
        let start = match events.range(..=from).next_back() {
            Some(entry) => entry?.0,
            None => sled::IVec::from(&from[..]),
        };
        let upto_key = sled::IVec::from(&keys::event_key(upto)[..]);
        let mut out = Vec::new();
        for entry in events.range(start..=upto_key) {
            let (key, bytes) = entry?;
            let first = keys::parse_event_key(&key).ok_or_else(|| bad_key(&key))?;
            let chunk =
                codec::decode_events(first, &bytes).map_err(|source| StoreError::Corrupt {
                    key: format!("event {first}"),
                    source,
                })?;
            for event in chunk {
                if event.revision > after && event.revision <= upto {
                    out.push(event);
                    if out.len() == limit {
                        return Ok(out);
                    }
                }
            }
        }
        Ok(out)
    }

    /// Runs a multi-key read built whole in memory (`GET /taskmanagers`) so that it reflects
    /// exactly one revision, which it returns: the read is retried while a transaction
    /// commits under it. After a few tries under heavy writes it settles for the revision
    /// seen before its last read — a lower bound: replaying the feed from it converges to
    /// the same state, since every event carries the full state after its change.
    ///
    /// The streamed listings ([`crate::listing`]) cannot retry a scan whose first chunks are
    /// already sent, so they always report that lower bound: the revision read before
    /// their scan starts.
    pub fn consistent_read<T>(&self, read: impl Fn(&Store) -> Result<T>) -> Result<(T, u64)> {
        const TRIES: usize = 4;
        let feed = &self.shared.feed;
        let mut tries = 0;
        loop {
            tries += 1;
            let before = feed.seq.load(Ordering::SeqCst);
            let revision = feed.committed.load(Ordering::SeqCst);
            let value = read(self)?;
            let settled = before.is_multiple_of(2) && feed.seq.load(Ordering::SeqCst) == before;
            if settled || tries == TRIES {
                return Ok((value, revision));
            }
            if !before.is_multiple_of(2) {
                // A transaction is in flight; they take well under a millisecond.
                std::thread::yield_now();
            }
        }
    }

    /// Where the commit order stands, taken *before* reads whose result a caller keeps;
    /// `None` while a transaction is being applied (nothing read then may be kept).
    pub fn read_mark(&self) -> Option<ReadMark> {
        let seq = self.shared.feed.seq.load(Ordering::SeqCst);
        seq.is_multiple_of(2).then_some(ReadMark(seq))
    }

    /// Whether `key` is certainly unchanged since `mark` (false may also mean that a key
    /// sharing its stamp changed, or that the database was reopened).
    pub fn unchanged_since(&self, mark: ReadMark, key: Watched<'_>) -> bool {
        self.shared.feed.stamps.unchanged_since(mark, key)
    }

    // ---- reads: straight from the trees, never trusting the sweeper ----

    /// The active item `(kind, id)` at `now`; `seen` records what the answer depends on.
    pub fn get(&self, kind: Kind, id: &str, now: i64, seen: &mut Seen) -> Result<Option<Block>> {
        let key = keys::item_key(kind, id);
        let bytes = self.handles()?.trees.items.get(&key)?;
        self.saw(seen, Watched::Item(kind, id));
        let Some(bytes) = bytes else {
            return Ok(None);
        };
        let block = decode(&key, &bytes)?;
        Ok(block.is_active(now).then_some(block))
    }

    /// Every active item of `kind` at `now`, sorted by id (byte order of UTF-8).
    pub fn list(&self, kind: Kind, now: i64) -> Result<Vec<Item>> {
        let mut out = Vec::new();
        self.scan_items(kind, None, now, |item| {
            out.push(item);
            Ok(true)
        })?;
        Ok(out)
    }

    /// Visits the active items of `kind` at `now` in id order, from the first id after
    /// `after` (from the first of all when `None`), for as long as `visit` returns true.
    /// Returns true when the scan got past the last item of `kind`.
    ///
    /// This is how a listing is read in bounded chunks: each chunk is one call, resumed
    /// after the last id the previous one visited. The database handles are held for the
    /// call only — never between chunks, so a slow client cannot delay a reopen after a
    /// storage fault (a kept `sled::Iter` would also keep the old database, and its file
    /// lock, alive).
    pub fn scan_items(
        &self,
        kind: Kind,
        after: Option<&str>,
        now: i64,
        mut visit: impl FnMut(Item) -> Result<bool>,
    ) -> Result<bool> {
        let from = match after {
            Some(id) => Bound::Excluded(keys::item_key(kind, id)),
            None => Bound::Included(keys::item_prefix(kind).to_vec()),
        };
        let to = Bound::Excluded(keys::item_prefix_end(kind).to_vec());
        for entry in self.handles()?.trees.items.range((from, to)) {
            let (key, bytes) = entry?;
            let block = decode(&key, &bytes)?;
            if block.is_active(now) {
                let (_, id) = keys::parse_item_key(&key).ok_or_else(|| bad_key(&key))?;
                if !visit(Item::new(id.to_owned(), block))? {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// The node task manager `tm` is registered on; `seen` records what the answer depends
    /// on.
    pub fn node_of(&self, tm: &str, seen: &mut Seen) -> Result<Option<String>> {
        let bytes = self.handles()?.trees.tm_node.get(tm.as_bytes())?;
        self.saw(seen, Watched::Registration(tm));
        let Some(bytes) = bytes else {
            return Ok(None);
        };
        registration(tm, &bytes).map(Some)
    }

    /// Every registration `(task manager, node)`, sorted by task manager id.
    pub fn registrations(&self) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        self.scan_registrations(None, |tm, node| {
            out.push((tm, node));
            Ok(true)
        })?;
        Ok(out)
    }

    /// Visits the registrations `(task manager, node)` in task manager order, from the first
    /// after `after`, for as long as `visit` returns true; true when it got past the last.
    /// Resumable in chunks like [`Store::scan_items`].
    pub fn scan_registrations(
        &self,
        after: Option<&str>,
        mut visit: impl FnMut(String, String) -> Result<bool>,
    ) -> Result<bool> {
        let from = match after {
            Some(tm) => Bound::Excluded(tm.as_bytes().to_vec()),
            None => Bound::Unbounded,
        };
        for entry in self
            .handles()?
            .trees
            .tm_node
            .range::<Vec<u8>, _>((from, Bound::Unbounded))
        {
            let (key, bytes) = entry?;
            let tm = std::str::from_utf8(&key).map_err(|_| bad_key(&key))?;
            let node = registration(tm, &bytes)?;
            if !visit(tm.to_owned(), node)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The task managers registered on `node`, sorted by id: one prefix scan of the index;
    /// `seen` records what the answer depends on.
    pub fn task_managers_on(&self, node: &str, seen: &mut Seen) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for key in self
            .handles()?
            .trees
            .node_tms
            .scan_prefix(keys::node_tm_prefix(node))
            .keys()
        {
            let key = key?;
            let (_, tm) = keys::parse_node_tm_key(&key).ok_or_else(|| bad_key(&key))?;
            out.push(tm.to_owned());
        }
        self.saw_all(seen);
        Ok(out)
    }

    /// The earliest end in the expiry index not yet announced expired, if any.
    pub fn first_deadline(&self) -> Result<Option<i64>> {
        let from = after_watermark(&self.shared.sweep.watermark.load());
        let first = self
            .handles()?
            .trees
            .expiry
            .range::<Vec<u8>, _>((from, Bound::Unbounded))
            .keys()
            .next();
        match first {
            Some(key) => {
                let key = key?;
                Ok(Some(
                    keys::expiry_key_end(&key).ok_or_else(|| bad_key(&key))?,
                ))
            }
            None => Ok(None),
        }
    }

    /// Up to `limit` expiry keys of items announced expired but still stored (at or before
    /// the watermark), earliest first: what reclaiming has left to delete.
    pub fn reclaimable(&self, limit: usize) -> Result<Vec<Vec<u8>>> {
        let watermark = self.shared.sweep.watermark.load_full();
        if watermark.is_empty() {
            return Ok(Vec::new());
        }
        self.handles()?
            .trees
            .expiry
            .range::<Vec<u8>, _>((Bound::Unbounded, Bound::Included(watermark.to_vec())))
            .keys()
            .take(limit)
            .map(|k| Ok(k?.to_vec()))
            .collect()
    }

    /// Checks the store's invariants and returns every violation found (empty when sound).
    pub fn verify(&self) -> Result<Vec<String>> {
        let mut problems = Vec::new();
        let handles = self.handles()?;
        let trees = &handles.trees;
        let mut indexed = 0usize;
        for entry in trees.items.iter() {
            let (key, bytes) = entry?;
            let Some((kind, id)) = keys::parse_item_key(&key) else {
                problems.push(format!("items: malformed key {key:?}"));
                continue;
            };
            match codec::decode_block(&bytes) {
                Err(e) => problems.push(format!("items: {} {id:?}: {e}", kind.singular())),
                Ok(block) if block.is_permanent() => {}
                Ok(block) if block.end < 0 => problems.push(format!(
                    "items: {} {id:?} has a negative end {}",
                    kind.singular(),
                    block.end
                )),
                Ok(block) => {
                    indexed += 1;
                    if !trees
                        .expiry
                        .contains_key(keys::expiry_key(block.end, kind, id))?
                    {
                        problems.push(format!(
                            "expiry: no entry for {} {id:?} ending at {}",
                            kind.singular(),
                            block.end
                        ));
                    }
                }
            }
        }
        let mut entries = 0usize;
        for key in trees.expiry.iter().keys() {
            let key = key?;
            entries += 1;
            let Some((end, kind, id)) = keys::parse_expiry_key(&key) else {
                problems.push(format!("expiry: malformed key {key:?}"));
                continue;
            };
            let item = trees.items.get(keys::item_key(kind, id))?;
            let matches = item
                .and_then(|bytes| codec::decode_block(&bytes).ok())
                .is_some_and(|block| block.end == end);
            if !matches {
                problems.push(format!(
                    "expiry: entry for {} {id:?} at {end} has no item ending then",
                    kind.singular()
                ));
            }
        }
        for entry in trees.tm_node.iter() {
            let (key, bytes) = entry?;
            let tm = String::from_utf8_lossy(&key);
            match codec::decode_registration(&bytes) {
                Err(e) => problems.push(format!("tm_node: {tm:?}: {e}")),
                Ok(node) => {
                    if !trees.node_tms.contains_key(keys::node_tm_key(&node, &tm))? {
                        problems.push(format!("node_tms: no entry for {tm:?} on {node:?}"));
                    }
                }
            }
        }
        for key in trees.node_tms.iter().keys() {
            let key = key?;
            let Some((node, tm)) = keys::parse_node_tm_key(&key) else {
                problems.push(format!("node_tms: malformed key {key:?}"));
                continue;
            };
            let registered = trees
                .tm_node
                .get(tm.as_bytes())?
                .and_then(|bytes| codec::decode_registration(&bytes).ok());
            if registered.as_deref() != Some(node) {
                problems.push(format!(
                    "node_tms: {tm:?} listed on {node:?} but registered on {registered:?}"
                ));
            }
        }
        let revision = match trees.meta.get(REVISION_KEY)? {
            Some(bytes) => match <[u8; 8]>::try_from(bytes.as_ref()) {
                Ok(b) => u64::from_be_bytes(b),
                Err(_) => {
                    problems.push("meta: malformed revision".into());
                    0
                }
            },
            None => {
                problems.push("meta: no revision".into());
                0
            }
        };
        let mut expected: Option<u64> = None;
        for entry in trees.events.iter() {
            let (key, bytes) = entry?;
            let Some(rev) = keys::parse_event_key(&key) else {
                problems.push(format!("events: malformed key {key:?}"));
                continue;
            };
            if let Some(expected) = expected.filter(|e| *e != rev) {
                problems.push(format!(
                    "events: revision {rev} follows a gap (expected {expected})"
                ));
            }
            // A chunk holds consecutive revisions from its key's.
            let len = match codec::decode_events(rev, &bytes) {
                Ok(chunk) => chunk.len() as u64,
                Err(e) => {
                    problems.push(format!("events: revision {rev}: {e}"));
                    1
                }
            };
            expected = Some(rev + len);
            if rev + len - 1 > revision {
                problems.push(format!(
                    "events: revision {} is past meta revision {revision}",
                    rev + len - 1
                ));
            }
        }
        if let Some(next) = expected.filter(|next| *next != revision + 1) {
            problems.push(format!(
                "events: the log ends at {} but meta revision is {revision}",
                next - 1
            ));
        }
        let stored = trees.meta.get(COUNTS_KEY)?.and_then(|b| decode_counts(&b));
        let watermark = match read_watermark(&trees.meta) {
            Ok(watermark) => watermark,
            Err(e) => {
                problems.push(format!("meta: {e}"));
                Vec::new()
            }
        };
        let stored_unreclaimed = trees
            .meta
            .get(UNRECLAIMED_KEY)?
            .and_then(|b| <[u8; 8]>::try_from(b.as_ref()).ok())
            .map_or(0, u64::from_be_bytes);
        let unreclaimed = count_unreclaimed(&trees.expiry, &watermark)?;
        if stored_unreclaimed != unreclaimed {
            problems.push(format!(
                "meta: unreclaimed count {stored_unreclaimed} disagrees with the {unreclaimed} \
                 expiry entries at or before the watermark"
            ));
        }
        if let Ok(scanned) = scan_counts(&trees.items, &watermark) {
            if stored != Some(scanned) {
                problems.push(format!(
                    "meta: item counts {stored:?} disagree with the items ({scanned:?})"
                ));
            }
        }
        if entries != indexed && problems.is_empty() {
            problems.push(format!(
                "expiry: {entries} entries for {indexed} items with a finite end"
            ));
        }
        Ok(problems)
    }

    /// Counts of entries per tree, for tests and diagnostics: `(items, expiry)`.
    pub fn tree_sizes(&self) -> Result<(usize, usize)> {
        let handles = self.handles()?;
        Ok((handles.trees.items.len(), handles.trees.expiry.len()))
    }

    /// What each tree holds (entries and bytes of keys and values) against the size of the
    /// database on disk: sled's log keeps whole leaves and superseded copies of them, so the
    /// file runs to a few times the live bytes (see `docs/operations.md`). Reads every entry.
    pub fn disk_usage(&self) -> Result<DiskUsage> {
        let handles = self.handles()?;
        let t = &handles.trees;
        let all = [
            &t.items,
            &t.expiry,
            &t.tm_node,
            &t.node_tms,
            &t.events,
            &t.meta,
        ];
        let mut trees = Vec::with_capacity(all.len());
        for tree in all {
            let mut usage = TreeUsage {
                name: String::from_utf8_lossy(&tree.name()).into_owned(),
                entries: 0,
                bytes: 0,
            };
            for entry in tree.iter() {
                let (key, value) = entry?;
                usage.entries += 1;
                usage.bytes += (key.len() + value.len()) as u64;
            }
            trees.push(usage);
        }
        Ok(DiskUsage {
            trees,
            on_disk: handles.db.size_on_disk()?,
        })
    }
}

/// Refuses a non-empty directory that holds none of sled's files: pointing the daemon at
/// the wrong directory must not litter it with a database.
fn check_not_foreign(dir: &Path) -> Result<()> {
    let mut foreign = Vec::new();
    let mut has_db = false;
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        match name.as_str() {
            "db" | "conf" => has_db = true,
            "blobs" | "lost+found" => {}
            n if n.starts_with("snap.") || n.starts_with('.') => {}
            _ => foreign.push(name),
        }
    }
    if !has_db && !foreign.is_empty() {
        foreign.sort();
        return Err(StoreError::Foreign(format!(
            "{} holds other files ({}) and no database; give an empty or new directory",
            dir.display(),
            foreign.join(", ")
        )));
    }
    Ok(())
}

fn open_error(dir: &Path, e: sled::Error) -> StoreError {
    match &e {
        sled::Error::Io(io) if io.to_string().contains("could not acquire lock") => {
            StoreError::InUse(dir.to_owned())
        }
        sled::Error::Corruption { .. } => StoreError::damaged(dir, e.to_string(), false),
        _ => StoreError::Sled(e),
    }
}

/// What a caught panic said.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(text), _) => (*text).to_owned(),
        (_, Some(text)) => text.clone(),
        _ => "a panic without a message".to_owned(),
    }
}

fn decode(key: &[u8], bytes: &[u8]) -> Result<Block> {
    codec::decode_block(bytes).map_err(|source| StoreError::Corrupt {
        key: String::from_utf8_lossy(key).into_owned(),
        source,
    })
}

/// Decodes the registration value of task manager `tm`.
pub(crate) fn registration(tm: &str, bytes: &[u8]) -> Result<String> {
    codec::decode_registration(bytes).map_err(|source| StoreError::Corrupt {
        key: format!("taskmanager registration {tm}"),
        source,
    })
}

fn bad_key(key: &[u8]) -> StoreError {
    StoreError::Corrupt {
        key: String::from_utf8_lossy(key).into_owned(),
        source: CodecError::Decode("malformed key".into()),
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
