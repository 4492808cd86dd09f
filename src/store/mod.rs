//! The only module that touches sled.
//!
//! Trees: the one table of them is `trees.rs` (`TreeId`: each tree's number, name and
//! what it holds: `items`, `expiry`, `tm_node` and its inverse `node_tms`, `events`, `meta`,
//! `allowlist`, `reports`, `history`, `history_ends`, `idempotency`). Byte layouts in
//! [`keys`] and [`codec`], prose in `docs/architecture.md`.
//!
//! Invariants, kept by doing every write in one multi-tree transaction:
//! - an item with a finite `end` has exactly the expiry entry `expiry_key(end, kind, id)`,
//!   a permanent item has none, and every expiry entry belongs to such an item;
//! - `tm_node[tm] = n` exactly when `node_tms[n ++ 0x00 ++ tm]` exists;
//! - every change gets the next revision and its event in the transaction that makes it;
//!   `meta/revision` is the last revision handed out; `events` holds a contiguous range of
//!   revisions ending there (older ones pruned by retention);
//! - a write made with an `Idempotency-Key` has its record exactly when it committed (both
//!   in one transaction), and every record has all its chunks and its time index entry;
//! - a write is acknowledged, and its events published to subscribers, only after the flush
//!   (and, by default, the fsync) covering it.
//!
//! Writes go through the single committer thread ([`commit`]), and are made durable and
//! answered by the syncer thread ([`sync`]); reads go straight to the
//! trees and filter `end <= now` themselves, so an item is gone for readers the moment it
//! is due, whether or not the sweeper has reached it.
//!
//! # Layout
//! - `mod.rs`: [`Store`], the handle: starting it (the feed, the committer and its
//!   durability thread) and stopping it;
//! - `trees.rs`: the table of trees, the open trees and the transaction over them;
//! - `config.rs`: [`StoreConfig`], how to open it;
//! - `open.rs`: opening (and reopening) the database in the data dir;
//! - `error.rs`: [`StoreError`], which failures answer 503, and decoding stored values;
//! - `meta.rs`: the `meta` tree: revision, item counts, the expiry watermark;
//! - `feed.rs`: revisions, the change feed, item counts, consistent and cacheable reads;
//! - `guard_state.rs`: the guardrails' state published to readers after each commit;
//! - `read.rs`: point gets and resumable scans;
//! - `verify.rs`: the invariant check;
//! - `stats.rs`: counts and sizes, for metrics and diagnostics;
//! - [`keys`], [`codec`]: the byte layouts; `migrate.rs`: schema upgrades;
//! - `commit/`: the committer, one file per write operation with its `Store` entry point;
//!   `pipeline.rs`, `sync.rs`: the hand-over to its durability thread, and that thread;
//! - `durable.rs`, `stamps.rs`: which reads wait for durability; `blobs.rs`, `datadir.rs`:
//!   making what sled writes durable; `salvage.rs`: exporting a damaged data dir.

mod blobs;
pub mod codec;
mod commit;
mod config;
mod datadir;
mod durable;
mod election;
mod error;
#[cfg(feature = "etcd")]
pub(crate) mod etcd;
mod feed;
mod guard_state;
pub mod keys;
mod members;
mod meta;
mod migrate;
#[cfg(feature = "etcd")]
mod mirror;
mod open;
mod pipeline;
mod read;
#[cfg(feature = "etcd")]
mod replica;
mod salvage;
mod stamps;
mod stats;
mod sync;
#[cfg(test)]
mod testing;
mod trees;
mod verify;
mod writes;

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use arc_swap::ArcSwapOption;
use sled::Db;
use tokio::sync::mpsc;

pub use blobs::SEGMENT_BYTES;
pub use codec::CodecError;
pub use commit::{
    AddOutcome, AllowOutcome, Expired, Force, HoldOff, Idempotency, Ingested, KeptResponse, Keying,
    Mode, Registered, Removed, Render, ReportOutcome, Retracted, SelectedOutcome, Unkeyed,
    UpdateOutcome, Writer, MAX_UNBLOCKED,
};
pub use config::{HistoryRetention, Retention, StoreConfig};
pub use durable::{Seen, READ_TIMEOUT};
pub use election::{Announcement, Election};
pub use error::{CommitError, Result, StoreError};
pub use keys::MAX_IDEMPOTENCY_KEY_BYTES;
pub use meta::{count_slot, Counts};
pub use migrate::CURRENT as SCHEMA_VERSION;
pub use open::sled_config;

pub use salvage::{salvage, Salvaged};
pub use stamps::{ReadMark, Stale, Watched};
pub use stats::{DiskUsage, TreeUsage};

// The names the committer, the syncer, migrations and salvage import from the root
// (`super::…`), wherever in the files above they are defined.
use error::panic_message;
pub(crate) use error::registration;
pub(crate) use feed::Feed;
pub(crate) use guard_state::GuardState;
pub(crate) use meta::{
    after_watermark, announced, encode_counts, scan_counts, COUNTS_KEY, POLICY_KEY, REVISION_KEY,
    UNRECLAIMED_KEY, WATERMARK_KEY,
};
use open::check_not_foreign;
pub(crate) use open::{open_handles, Opened};
pub(crate) use trees::{TreeId, Trees, TxTrees};

use crate::model::Kind;
use crate::policy::Policy;
use crate::sweep_signal::SweepSignal;
use commit::Message;
use writes::WriteLog;

/// A handle to the open store. Cloning costs one atomic increment.
#[derive(Clone)]
pub struct Store {
    shared: Arc<StoreState>,
}

/// What every clone of a [`Store`] shares.
struct StoreState {
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
    guards: Arc<GuardState>,
    /// The etcd store's connection: the writer key is given up at a clean stop.
    #[cfg(feature = "etcd")]
    etcd: Option<Arc<etcd::Etcd>>,
    /// A replica's following of the prefix's log ([`Store::open_replica`]); `None` on the
    /// writer's store and on sled. Dropped with the store, which ends it.
    #[cfg(feature = "etcd")]
    following: Option<etcd::Following>,
}

/// Where a daemon on the etcd store stands.
#[derive(Debug, Clone)]
pub struct EtcdStanding {
    /// It holds the writer key with a live lease: it writes, and its reads are current.
    pub writer: bool,
    /// What an operator must do since etcd refused its last write so (the NOSPACE alarm).
    pub refusal: Option<&'static str>,
    /// How many times this daemon became the writer.
    pub elections_won: u64,
    /// The writer's name as this daemon last saw it.
    pub writer_name: Option<String>,
    /// Each member's endpoint and etcd version as last read (`None`: it has not
    /// answered), and whether that release has the fixes the store rests on.
    pub member_versions: Vec<(String, Option<String>, bool)>,
    /// What an operator must know when a member runs etcd without the fixes the store
    /// rests on.
    pub version_warning: Option<String>,
}

/// An open database and its trees.
pub(crate) struct Handles {
    pub db: Db,
    pub trees: Trees,
}

impl Store {
    /// Opens (or creates) the store in `config.data_dir`, upgrades its schema, and starts
    /// the committer thread.
    pub fn open(config: &StoreConfig) -> Result<Store> {
        let dir = &config.data_dir;
        if config.on_disk() {
            datadir::create(dir)?;
            check_not_foreign(dir)?;
        }
        #[cfg(feature = "etcd")]
        if let Some(etcd) = &config.etcd {
            // A replica until the prefix has no other writer (an offline tool, a while).
            etcd.campaign(etcd.patience())?;
        }
        let opened = open_handles(config)?;
        let policy = policy_at_open(config, &opened)?;
        let wanted = config.policy.apply(policy.clone());
        for kind in Kind::ALL {
            if config.policy.evacuation_burst[crate::policy::slot(kind)].is_some()
                && wanted.of(kind).evacuations.is_none()
            {
                tracing::warn!(
                    kind = kind.plural(),
                    "an evacuation burst was given for a kind without an evacuation rate; it \
                     has no effect (give the rate too)"
                );
            }
        }
        let feed = Arc::new(Feed::new(&opened, config.feed_buffer));
        let guards = Arc::new(GuardState::new(policy.clone(), opened.exposure));
        let buckets = *guards.buckets.lock().expect("not poisoned");
        let Opened {
            handles,
            revision,
            counts,
            watermark,
            unreclaimed,
            members,
            exposure,
            prefixes,
            allow_entries,
            ..
        } = opened;
        let log = if config.fsync {
            Some(Arc::new(std::fs::File::open(dir.join("db"))?))
        } else {
            None
        };
        let sweep = Arc::new(sweep_signal(watermark.clone()));
        let (commits, requests) = mpsc::channel(4 * config.max_commit_batch);
        let handles = Arc::new(handles);
        let slot = Arc::new(ArcSwapOption::new(Some(handles.clone())));
        let sync_failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let blob_dir = if config.fsync && config.on_disk() {
            Some(blobs::BlobDir::open(&dir.join("blobs"))?)
        } else {
            None
        };
        let wake = {
            let commits = commits.clone();
            Box::new(move || {
                // A full queue holds a request, which reopens the store just the same.
                let _ = commits.try_send(Message::Wake);
            })
        };
        let (stages, syncer) = sync::spawn(
            feed.clone(),
            config.metrics.clone(),
            sync_failed.clone(),
            config.replicate.clone(),
            wake,
        )?;
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
            guards: guards.clone(),
            revision,
            counts,
            watermark,
            unreclaimed,
            unpublished: Vec::new(),
            retention: config.retention,
            history: config.history,
            metrics: config.metrics.clone(),
            policy: policy.clone(),
            buckets,
            exposure,
            members,
            prefixes,
            allow_entries,
            log_writes: config.replicate.is_some(),
            pruned: WriteLog::default(),
        };
        let handle = std::thread::Builder::new()
            .name("committer".into())
            .spawn(move || committer.run())?;
        let store = Store {
            shared: Arc::new(StoreState {
                handles: slot,
                commits,
                committer: Mutex::new(Some(handle)),
                sweep,
                feed,
                guards,
                #[cfg(feature = "etcd")]
                etcd: config.etcd.clone(),
                #[cfg(feature = "etcd")]
                following: None,
            }),
        };
        if wanted != policy {
            store.set_policy_at_open(wanted)?;
        }
        Ok(store)
    }

    /// Commits the policy the flags ask for, before any request: an event like any change.
    /// Blocking, whether or not the caller runs in an async runtime.
    fn set_policy_at_open(&self, policy: Policy) -> Result<()> {
        let (reply, mut answer) = tokio::sync::oneshot::channel();
        let request = commit::Request::new(
            commit::SetPolicy {
                policy: Box::new(policy),
            },
            Mode::Commit,
            reply,
        );
        self.shared
            .commits
            .try_send(Message::Write(Box::new(commit::Op::SetPolicy(request))))
            .map_err(|_| StoreError::Closed)?;
        loop {
            match answer.try_recv() {
                Ok(answered) => return answered.map(|_| ()),
                Err(tokio::sync::oneshot::error::TryRecvError::Empty) => {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Err(tokio::sync::oneshot::error::TryRecvError::Closed) => {
                    return Err(StoreError::Closed)
                }
            }
        }
    }

    /// Stops the committer after the requests already queued, and flushes. Blocking.
    pub fn shutdown(&self) -> Result<()> {
        let handle = self.shared.committer.lock().expect("not poisoned").take();
        if let Some(handle) = handle {
            // A shutdown marker rather than dropping the sender: HTTP handlers still hold
            // clones of the store.
            let _ = self.shared.commits.blocking_send(Message::Shutdown);
            let _ = handle.join();
            // The committer wrote its last group: nothing more is written to etcd.
            #[cfg(feature = "etcd")]
            if let Some(etcd) = &self.shared.etcd {
                etcd.resign();
            }
        }
        self.handles()?.db.flush()?;
        Ok(())
    }

    /// The open database, or 503 while it is being reopened.
    fn handles(&self) -> Result<Arc<Handles>> {
        self.shared.handles.load_full().ok_or(StoreError::Reopening)
    }

    /// Whether the database is open (not being reopened after a storage error).
    pub fn is_open(&self) -> bool {
        self.shared.handles.load().is_some()
    }

    /// Where this daemon stands in etcd (`None` on sled): for `/readyz`.
    pub fn etcd_standing(&self) -> Option<EtcdStanding> {
        #[cfg(feature = "etcd")]
        if let Some(etcd) = &self.shared.etcd {
            let versions = etcd.versions();
            return Some(EtcdStanding {
                writer: etcd.is_writer(),
                refusal: etcd.refusal(),
                elections_won: etcd.elections_won(),
                writer_name: etcd.writer_seen(),
                version_warning: etcd::version_warning(&versions),
                member_versions: versions
                    .into_iter()
                    .map(|v| {
                        let fixed = !v.below_minimum();
                        (v.member, v.version, fixed)
                    })
                    .collect(),
            });
        }
        None
    }

    /// The writer election of the etcd prefix the store lives in; `None` on sled.
    pub fn election(&self) -> Option<Election> {
        #[cfg(feature = "etcd")]
        return self.shared.etcd.clone().map(|etcd| Election { etcd });
        #[cfg(not(feature = "etcd"))]
        None
    }

    /// Whether this store is a replica's, kept current from etcd ([`Store::open_replica`]) rather
    /// than written by a committer of its own.
    pub fn is_replica(&self) -> bool {
        #[cfg(feature = "etcd")]
        return self.shared.following.is_some();
        #[cfg(not(feature = "etcd"))]
        false
    }

    /// Waits until this store shows every write etcd acknowledged before the call: at once
    /// on the writer's store and on sled (where writes are made); on a replica, until it
    /// has applied the prefix's log as far as a read of etcd begun after the call finds it.
    /// 503 ([`StoreError::Behind`]) when etcd cannot be read or the replica does not catch
    /// up within a bound.
    #[cfg_attr(
        not(feature = "etcd"),
        expect(clippy::unused_async, reason = "a replica's catch-up awaits etcd")
    )]
    pub async fn catch_up(&self) -> Result<()> {
        #[cfg(feature = "etcd")]
        return self.catch_up_replica().await;
        #[cfg(not(feature = "etcd"))]
        Ok(())
    }

    /// A replica's store needs the etcd store; this build has none.
    #[cfg(not(feature = "etcd"))]
    pub fn open_replica(_: &StoreConfig) -> Result<Store> {
        Err(StoreError::Etcd("this build has no etcd store".into()))
    }

    #[cfg(not(feature = "etcd"))]
    pub fn stop_following(&self) {}

    /// On a replica, how many log entries it is behind, and for how many seconds.
    pub fn replica_lag(&self) -> Option<(u64, f64)> {
        #[cfg(feature = "etcd")]
        if let Some(progress) = self.follow_state() {
            let (entries, behind) = progress.lag();
            return Some((entries, behind.as_secs_f64()));
        }
        None
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

/// The policy a store opens with: the stored one; on a data dir this version never opened,
/// the new policy the flags give, stored as it is (not a change for the feed).
fn policy_at_open(config: &StoreConfig, opened: &Opened) -> Result<Policy> {
    if let Some(stored) = &opened.policy {
        return Ok(stored.clone());
    }
    let policy = config.policy.apply(config.new_policy.clone());
    opened
        .handles
        .trees
        .meta
        .insert(POLICY_KEY, codec::encode_policy(&policy))?;
    Ok(policy)
}

/// The sweeper's signal for a store whose watermark is `watermark`: it reads the end of a
/// watermark as of an expiry key, and holds the clock there.
fn sweep_signal(watermark: Vec<u8>) -> SweepSignal {
    SweepSignal::new(watermark, keys::expiry_key_end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_holds_at_the_end_of_the_announced_watermark() {
        let wall = crate::clock::now_ms();
        let signal = sweep_signal(Vec::new());
        assert!(signal.now() >= wall, "no watermark: the wall clock");
        // The watermark's end is ahead of the wall clock, as after a step back of the clock.
        let ahead = wall + 3_600_000;
        signal.set_watermark(&keys::expiry_key(ahead, Kind::Node, "n1"));
        assert!(signal.now() >= ahead, "{} < {ahead}", signal.now());
        let key = signal.watermark.load_full();
        assert_eq!(keys::expiry_key_end(&key), Some(ahead));
        assert!(sweep_signal(key.to_vec()).now() >= ahead, "as reopened");
    }
}
