//! Opening the database: refusing a foreign or damaged data dir, opening sled, upgrading
//! the schema, and reading back what the committer's counters start from.
//! [`super::Store::open`] starts here, and the committer reopens through [`open_handles`]
//! after a storage error; this file imports nothing of the committer, so the two do not
//! depend on each other.

use std::path::Path;

use crate::allowlist::Entry;
use crate::policy::{Exposure, Policy};

use super::error::{bad_key, panic_message};
use super::members::{scan_exposure, scan_members, scan_prefixes, Members};
use super::meta::{
    decode_counts, decode_exposure, decode_u64, encode_exposure, read_watermark, scan_counts,
    EXPOSURE_KEY,
};
use super::{
    blobs, codec, datadir, keys, migrate, salvage, Counts, Handles, Result, StoreConfig,
    StoreError, Trees, COUNTS_KEY, POLICY_KEY, REVISION_KEY, SEGMENT_BYTES, UNRECLAIMED_KEY,
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
    /// The stored policy; `None` before this version first started on the database.
    pub policy: Option<Policy>,
    pub members: Members,
    pub exposure: Exposure,
    pub prefixes: Vec<Entry>,
    /// How many allowlist entries are stored (ended or not).
    pub allow_entries: u64,
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
    #[cfg(feature = "etcd")]
    if let Some(etcd) = &config.etcd {
        let db = super::mirror::open_mirror(config, etcd)?;
        return read_opened(db);
    }
    read_opened(open_sled(config)?)
}

/// Opens and upgrades the sled database in the data dir.
fn open_sled(config: &StoreConfig) -> Result<sled::Db> {
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
    Ok(db)
}

/// Reads what the committer's counters start from in an open, upgraded database.
pub(super) fn read_opened(db: sled::Db) -> Result<Opened> {
    let trees = Trees::of(&db)?;
    let Figures {
        revision,
        watermark,
        unreclaimed,
        counts,
        policy,
        exposure,
        first_retained,
    } = read_figures(&trees)?;
    let counts = match counts {
        Some(counts) => counts,
        None => scan_counts(&trees.items, &watermark)?,
    };
    let (members, exposure) = match exposure {
        Some(exposure) => (scan_members(&trees.tm_node)?, exposure),
        // Only a damaged database lacks them (the schema 9 upgrade stores them): scanned
        // and stored, so that the next start reads them again.
        None => {
            let (members, exposure) = scan_exposure(&trees.items, &trees.tm_node, &watermark)?;
            trees
                .meta
                .insert(EXPOSURE_KEY, encode_exposure(&exposure))?;
            (members, exposure)
        }
    };
    let prefixes = scan_prefixes(&trees.allowlist)?;
    let allow_entries = trees.allowlist.len() as u64;
    Ok(Opened {
        handles: Handles { db, trees },
        revision,
        counts,
        first_retained,
        watermark,
        unreclaimed,
        policy,
        members,
        exposure,
        prefixes,
        allow_entries,
    })
}

/// The figures the `meta` tree and the event log's start hold, as the last transaction
/// left them (`None` where a damaged database lacks one).
pub(super) struct Figures {
    pub revision: u64,
    pub watermark: Vec<u8>,
    pub unreclaimed: u64,
    pub counts: Option<Counts>,
    pub policy: Option<Policy>,
    pub exposure: Option<Exposure>,
    pub first_retained: u64,
}

/// Reads the [`Figures`]: at open, and on a replica after each entry it applies.
pub(super) fn read_figures(trees: &Trees) -> Result<Figures> {
    let revision = match trees.meta.get(REVISION_KEY)? {
        Some(bytes) => decode_u64(&bytes).ok_or_else(|| {
            StoreError::Foreign(format!("its revision has {} bytes", bytes.len()))
        })?,
        None => 0,
    };
    let watermark = read_watermark(&trees.meta)?;
    let unreclaimed = match trees.meta.get(UNRECLAIMED_KEY)? {
        Some(bytes) => decode_u64(&bytes).ok_or_else(|| {
            StoreError::Foreign(format!("its unreclaimed count has {} bytes", bytes.len()))
        })?,
        None => 0,
    };
    let counts = match trees.meta.get(COUNTS_KEY)? {
        Some(bytes) => Some(
            decode_counts(&bytes)
                .ok_or_else(|| StoreError::Foreign("its item counts are malformed".into()))?,
        ),
        None => None,
    };
    let policy = match trees.meta.get(POLICY_KEY)? {
        Some(bytes) => Some(codec::decode_policy(&bytes).map_err(|e| {
            StoreError::Foreign(format!("its guardrail policy does not decode: {e}"))
        })?),
        None => None,
    };
    let exposure =
        match trees.meta.get(EXPOSURE_KEY)? {
            Some(bytes) => Some(decode_exposure(&bytes).ok_or_else(|| {
                StoreError::Foreign("its share caps' figures are malformed".into())
            })?),
            None => None,
        };
    let first_retained = match trees.events.first()? {
        Some((key, _)) => keys::parse_event_key(&key).ok_or_else(|| bad_key(&key))?,
        None => revision + 1,
    };
    Ok(Figures {
        revision,
        watermark,
        unreclaimed,
        counts,
        policy,
        exposure,
        first_retained,
    })
}

/// Refuses a non-empty directory that holds none of sled's files: pointing the daemon at
/// the wrong directory must not litter it with a database.
pub(super) fn check_not_foreign(dir: &Path) -> Result<()> {
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
