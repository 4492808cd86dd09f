//! Opening the store on etcd: the mirror the committer runs on, rebuilt from the prefix's
//! log ([`super::etcd`]) in a temporary sled database.
//!
//! The mirror lives in the system's temp dir (`TMPDIR`), as `blocklistd-mirror.<pid>.<n>`,
//! deleted when it is closed; one left behind by a killed daemon is deleted by the next
//! start on the machine.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use super::etcd::{Etcd, Loaded};
use super::migrate::{read_version, CURRENT, SCHEMA_VERSION_KEY};
use super::writes::{Replicate, Write};
use super::TreeId;
use super::{codec, migrate, Result, StoreConfig, StoreError, POLICY_KEY, SEGMENT_BYTES};

/// Rebuilds the mirror from etcd, as this prefix's writer. A new prefix gets its first
/// entry here: a new database's `meta` and the policy of the flags, the writes a data dir
/// gets when it is created.
pub(super) fn open_mirror(config: &StoreConfig, etcd: &Etcd) -> Result<sled::Db> {
    // At the first open [`super::Store::open`] has waited as a replica already; at a
    // reopen, a daemon that lost the writer key fails here (retried every second).
    etcd.campaign(Some(std::time::Duration::ZERO))?;
    let db = new_mirror(config)?;
    let trees = super::Trees::of(&db)?;
    let entries = etcd.restore(&trees)?;
    if entries == 0 && !etcd.creates() {
        return Err(StoreError::Etcd(format!(
            "the prefix {} holds no blocklistd store",
            etcd.prefix()
        )));
    }
    if entries == 0 {
        let policy = config.policy.apply(config.new_policy.clone());
        trees
            .meta
            .insert(POLICY_KEY, codec::encode_policy(&policy))?;
        let mut writes = Vec::new();
        for entry in &trees.meta {
            let (key, value) = entry?;
            writes.push(Write {
                tree: TreeId::Meta,
                key: key.to_vec(),
                value: Some(value.to_vec()),
            });
        }
        etcd.replicate(&writes)?;
        tracing::info!(
            schema_version = CURRENT,
            "created the store in a new etcd prefix"
        );
    }
    check_version(&trees)?;
    Ok(db)
}

/// Loads the mirror from etcd as a replica: the writer key and the writer's place in the log
/// untouched. A prefix whose writer has not put its first entry yet gives an empty store,
/// which the entry then fills.
pub(super) fn open_replica_mirror(config: &StoreConfig, etcd: &Etcd) -> Result<(sled::Db, Loaded)> {
    let db = new_mirror(config)?;
    let trees = super::Trees::of(&db)?;
    let loaded = etcd.load_replica(&trees)?;
    if loaded.read > 0 {
        check_version(&trees)?;
    }
    Ok((db, loaded))
}

/// A new, empty mirror with a new database's meta (which the log's first entry overwrites).
fn new_mirror(config: &StoreConfig) -> Result<sled::Db> {
    remove_stale_mirrors();
    let db = sled::Config::new()
        .path(mirror_path())
        .temporary(true)
        .segment_size(SEGMENT_BYTES)
        .cache_capacity(config.cache_bytes)
        .flush_every_ms(None)
        .open()?;
    migrate::upgrade(&db)?;
    Ok(db)
}

/// Refuses a prefix of another schema version.
fn check_version(trees: &super::Trees) -> Result<()> {
    let version = match trees.meta.get(SCHEMA_VERSION_KEY)? {
        Some(bytes) => read_version(&bytes)?,
        None => 0,
    };
    if version != CURRENT {
        // An upgrade rewrites the store outside the committer, which only the data dir's
        // store can do.
        return Err(StoreError::Etcd(format!(
            "the prefix holds a store of schema {version}; this build reads and writes \
             schema {CURRENT} only: run the blocklistd that wrote it, export, and import \
             into a new prefix"
        )));
    }
    Ok(())
}

const MIRROR_PREFIX: &str = "blocklistd-mirror.";

/// A new mirror's directory: this process's, numbered (a reopen makes a new one).
fn mirror_path() -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("{MIRROR_PREFIX}{}.{n}", std::process::id()))
}

/// Deletes the mirrors of processes that no longer run (a `kill -9` leaves its mirror).
fn remove_stale_mirrors() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(MIRROR_PREFIX))
            .and_then(|n| n.split('.').next())
            .and_then(|pid| pid.parse::<i32>().ok())
        else {
            continue;
        };
        let gone = rustix::process::Pid::from_raw(pid).is_none_or(|pid| {
            rustix::process::test_kill_process(pid) == Err(rustix::io::Errno::SRCH)
        });
        if gone {
            if let Err(e) = std::fs::remove_dir_all(entry.path()) {
                tracing::warn!(path = %entry.path().display(), error = %e, "could not delete a stale mirror");
            }
        }
    }
}
