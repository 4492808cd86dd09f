//! The schema version in `meta`, and the upgrade path from every older version.
//!
//! Each version is documented in `migrations/NNNN-*.md`. Opening a database:
//! - fresh (sled's default tree only, nothing in it): stamp [`CURRENT`];
//! - older than [`CURRENT`]: run each step in order, each in one transaction;
//! - newer than [`CURRENT`]: refuse, so an old binary never misreads a newer layout;
//! - a sled database without our version key: refuse as foreign.

use std::convert::Infallible;

use sled::transaction::TransactionError;
use sled::Db;

use super::meta::{decode_version, encode_u64, encode_version};
use super::StoreError;

/// The schema version this binary reads and writes.
/// 1: `items`, `expiry`, `meta`, `tm_node`, `node_tms` (migrations/0001-initial.md).
/// 2: adds `events`, `meta/revision` and `meta/item_counts` (migrations/0002-change-feed.md).
/// 3: events are written in format 2 (migrations/0003-compact-events.md).
/// 4: events are written in chunks (migrations/0004-event-chunks.md).
/// 5: adds `meta/expiry_watermark`, expiry in two phases (migrations/0005-expiry-watermark.md).
/// 6: adds `meta/policy` and `allowlist`; items and events in format 2 and 4, with forced
///    records (migrations/0006-guardrails.md).
pub const CURRENT: u32 = 6;

pub const META_TREE: &str = "meta";
pub const SCHEMA_VERSION_KEY: &[u8] = b"schema_version";

/// Brings the database to [`CURRENT`], or explains why it cannot.
pub fn upgrade(db: &Db) -> Result<(), StoreError> {
    let fresh = db
        .tree_names()
        .iter()
        .all(|name| name == b"__sled__default")
        && db.is_empty();
    let meta = db.open_tree(META_TREE)?;
    let version = match meta.get(SCHEMA_VERSION_KEY)? {
        Some(bytes) => read_version(&bytes)?,
        None if fresh => {
            meta.insert(super::REVISION_KEY, &encode_u64(0))?;
            meta.insert(super::COUNTS_KEY, super::encode_counts(&[0; 4]))?;
            meta.insert(SCHEMA_VERSION_KEY, &encode_version(CURRENT))?;
            db.flush()?;
            tracing::info!(schema_version = CURRENT, "created a new database");
            return Ok(());
        }
        None => {
            return Err(StoreError::Foreign(
                "it has no blocklistd schema version".into(),
            ))
        }
    };
    if version > CURRENT {
        return Err(StoreError::TooNew {
            found: version,
            supported: CURRENT,
        });
    }
    if version == 0 {
        return Err(StoreError::Foreign(
            "schema version 0 does not exist".into(),
        ));
    }
    // Each step rewrites what it must and bumps the stored version in one transaction, so
    // a crash mid-upgrade leaves the previous version intact; the next open resumes.
    if version < 2 {
        upgrade_1_to_2(db, &meta)?;
    }
    // Version 3 writes events in format 2 (bincode instead of JSON); version 4 writes them
    // in chunks (format 3, one key per transaction); version 5 adds the expiry watermark,
    // whose absence means nothing announced; version 6 adds the policy (stored at the first
    // start, see `Store::open`) and the allowlist (a tree created empty), and writes items
    // and events in formats with a forced record. Older values stay readable, so nothing is
    // rewritten: the version only goes up, so that an older binary, which cannot read the
    // new format (or would announce expired items twice), refuses the database.
    for to in 3..=CURRENT {
        if version < to {
            bump_version(db, &meta, to)?;
        }
    }
    Ok(())
}

/// An upgrade step that rewrites nothing (see above).
fn bump_version(db: &Db, meta: &sled::Tree, to: u32) -> Result<(), StoreError> {
    meta.insert(SCHEMA_VERSION_KEY, &encode_version(to))?;
    db.flush()?;
    tracing::info!(from = to - 1, to, "upgraded the database schema");
    Ok(())
}

/// Version 2 adds the change log. Existing items and registrations are kept as they are;
/// the revision starts at 0 and the log at the first change after the upgrade.
fn upgrade_1_to_2(db: &Db, meta: &sled::Tree) -> Result<(), StoreError> {
    db.open_tree("events")?;
    // Nothing writes while we upgrade, so a scan outside the transaction is exact.
    let counts = super::encode_counts(&super::scan_counts(&db.open_tree("items")?, &[])?);
    meta.transaction(|meta| {
        if meta.get(super::REVISION_KEY)?.is_none() {
            meta.insert(super::REVISION_KEY, &encode_u64(0))?;
        }
        meta.insert(super::COUNTS_KEY, counts.clone())?;
        meta.insert(SCHEMA_VERSION_KEY, &encode_version(2))?;
        Ok::<_, sled::transaction::ConflictableTransactionError<Infallible>>(())
    })
    .map_err(|e| match e {
        TransactionError::Storage(source) => StoreError::UpgradeFailed { to: 2, source },
        TransactionError::Abort(never) => match never {},
    })?;
    db.flush()?;
    tracing::info!(from = 1, to = 2, "upgraded the database schema");
    Ok(())
}

fn read_version(bytes: &[u8]) -> Result<u32, StoreError> {
    decode_version(bytes)
        .ok_or_else(|| StoreError::Foreign(format!("its schema version has {} bytes", bytes.len())))
}
