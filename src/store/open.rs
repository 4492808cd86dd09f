//! Opening the data dir: refusing a foreign or damaged one, opening sled, upgrading the
//! schema, reading back what the committer's counters start from, and starting the
//! committer. Reopening after a storage error goes through [`open_handles`] too.

use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwapOption;
use tokio::sync::{broadcast, mpsc, watch};

use super::error::bad_key;
use super::meta::{decode_counts, read_watermark, scan_counts};
use super::{
    blobs, commit, datadir, durable, keys, migrate, salvage, stamps, sync, Counts, Feed, Handles,
    Result, Shared, Store, StoreConfig, StoreError, SweepSignal, Trees, COUNTS_KEY, ITEMS_TREE,
    REVISION_KEY, SEGMENT_BYTES, TM_NODE_TREE, UNRECLAIMED_KEY,
};

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

/// A sled configuration for opening the database in `dir` directly, with the segment size
/// it was created with (or ours, for a new one): for tests and tools that build or inspect
/// databases below the store. Nothing else may open one.
pub fn sled_config(dir: &Path) -> Result<sled::Config> {
    let segment = datadir::segment_bytes(dir, SEGMENT_BYTES)
        .map_err(|cause| StoreError::damaged(dir, cause, true))?;
    Ok(sled::Config::new().path(dir).segment_size(segment))
}

/// Opens the sled database in `config.data_dir`, upgrades its schema, and reads the
/// revision, counts and log start. Used at start and when reopening after a storage error.
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
        let sweep = Arc::new(sweep_signal(watermark.clone()));
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

/// The sweeper's signal for a store whose watermark is `watermark`: it reads the end of a
/// watermark as of an expiry key, and holds the clock there.
fn sweep_signal(watermark: Vec<u8>) -> SweepSignal {
    SweepSignal::new(watermark, keys::expiry_key_end)
}

/// What a caught panic said.
pub(super) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(text), _) => (*text).to_owned(),
        (_, Some(text)) => text.clone(),
        _ => "a panic without a message".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Kind;

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
