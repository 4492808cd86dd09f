//! How to open the store: the data dir and the knobs of sled, the committer and the feed.

use crate::policy::{Overrides, Policy};
use std::path::PathBuf;
use std::sync::Arc;

use super::writes::Replicate;
use super::SEGMENT_BYTES;
use crate::metrics::Metrics;

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
    /// How much of the history of past blocks to keep.
    pub history: HistoryRetention,
    /// How long an `Idempotency-Key` record is kept, in ms from its write's commit.
    pub idempotency_retention_ms: i64,
    /// The live feed's ring of recent events; a subscriber that misses some of it catches up
    /// from the log.
    pub feed_buffer: usize,
    /// Where the committer records what it does.
    pub metrics: Arc<Metrics>,
    /// The guardrail policy of a new data dir (an existing one keeps its stored policy).
    pub new_policy: Policy,
    /// What the daemon's flags change in the policy (stored or new) at open.
    pub policy: Overrides,
    /// Where every group's writes go before it is answered, if anywhere: the committer then
    /// logs its writes ([`super::writes`]).
    pub(crate) replicate: Option<Arc<dyn Replicate>>,
    /// The etcd cluster the store lives in (`--store etcd`); `None`: the data dir.
    #[cfg(feature = "etcd")]
    pub(crate) etcd: Option<Arc<super::etcd::Etcd>>,
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
            history: HistoryRetention {
                per_id: 20,
                max_age_ms: 30 * 24 * 3600 * 1000,
            },
            idempotency_retention_ms: 24 * 3600 * 1000,
            feed_buffer: 1024,
            metrics: Arc::default(),
            new_policy: Policy::default(),
            policy: Overrides::default(),
            replicate: None,
            #[cfg(feature = "etcd")]
            etcd: None,
        }
    }

    /// Whether the store lives in the data dir (not in etcd): only then are there files
    /// to lock, fsync and probe.
    pub fn on_disk(&self) -> bool {
        #[cfg(feature = "etcd")]
        return self.etcd.is_none();
        #[cfg(not(feature = "etcd"))]
        true
    }

    /// The writer election of the etcd prefix the store lives in; `None` on sled.
    pub fn election(&self) -> Option<super::Election> {
        #[cfg(feature = "etcd")]
        return self.etcd.clone().map(|etcd| super::Election { etcd });
        #[cfg(not(feature = "etcd"))]
        None
    }

    /// The store in `etcd`'s cluster instead of the data dir: a mirror rebuilt from its log
    /// at every open, each group committed to it before it is answered.
    #[cfg(feature = "etcd")]
    pub(crate) fn in_etcd(&mut self, etcd: Arc<super::etcd::Etcd>) {
        self.replicate = Some(etcd.clone());
        self.etcd = Some(etcd);
        // Nothing local is worth an fsync: etcd's quorum holds what was acknowledged.
        self.fsync = false;
    }
}

/// How many past blocks the history keeps: at most `per_id` of each id, none that ended
/// more than `max_age_ms` ago.
#[derive(Debug, Clone, Copy)]
pub struct HistoryRetention {
    pub per_id: u64,
    pub max_age_ms: i64,
}

/// How many events the log keeps: at most `count`, none older than `max_age_ms`.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    pub count: u64,
    pub max_age_ms: i64,
}
