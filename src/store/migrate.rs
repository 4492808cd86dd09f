//! The schema version in `meta`, and the upgrade path from every older version.
//!
//! Each version is documented in `migrations/NNNN-*.md`. Opening a database:
//! - fresh (sled's default tree only, nothing in it): stamp [`CURRENT`];
//! - older than [`CURRENT`]: run each step in order, each in one transaction;
//! - newer than [`CURRENT`]: refuse, so an old binary never misreads a newer layout;
//! - a sled database without our version key: refuse as foreign.

use std::convert::Infallible;

use sled::transaction::TransactionError;
use sled::{Db, Transactional};

use super::members::scan_exposure;
use super::meta::{
    decode_version, encode_exposure, encode_u64, encode_version, read_watermark, EXPOSURE_KEY,
};
use super::{codec, keys, StoreError, TreeId};
use crate::model::UNKNOWN_SOURCE;
use crate::policy::Exposure;
use crate::provenance::{Operation, Report};

/// The schema version this binary reads and writes.
/// 1: `items`, `expiry`, `meta`, `tm_node`, `node_tms` (migrations/0001-initial.md).
/// 2: adds `events`, `meta/revision` and `meta/item_counts` (migrations/0002-change-feed.md).
/// 3: events are written in format 2 (migrations/0003-compact-events.md).
/// 4: events are written in chunks (migrations/0004-event-chunks.md).
/// 5: adds `meta/expiry_watermark`, expiry in two phases (migrations/0005-expiry-watermark.md).
/// 6: adds `meta/policy` and `allowlist`; items and events in format 2 and 4, with forced
///    records (migrations/0006-guardrails.md).
/// 7: adds `reports`, `history` and `history_ends`; items and events in format 3 and 5, with
///    provenance (migrations/0007-provenance.md).
/// 8: items and events in format 4 and 6, times and revisions stored as distances
///    (migrations/0008-compact-items.md).
/// 9: `Idempotency-Key` heads in format 2, carrying their response's first chunk, and
///    `meta/exposure` (migrations/0009-records-and-figures.md).
/// 10: adds `live` (live reports and rosters), reports of operation `retract` and past
///    blocks ended `retracted` (migrations/0010-live-reports.md).
pub const CURRENT: u32 = 10;

pub const SCHEMA_VERSION_KEY: &[u8] = b"schema_version";

/// Brings the database to [`CURRENT`], or explains why it cannot.
pub fn upgrade(db: &Db) -> Result<(), StoreError> {
    let fresh = db
        .tree_names()
        .iter()
        .all(|name| name == b"__sled__default")
        && db.is_empty();
    let meta = TreeId::Meta.open(db)?;
    let version = match meta.get(SCHEMA_VERSION_KEY)? {
        Some(bytes) => read_version(&bytes)?,
        None if fresh => {
            meta.insert(super::REVISION_KEY, &encode_u64(0))?;
            meta.insert(super::COUNTS_KEY, super::encode_counts(&[0; 4]))?;
            meta.insert(EXPOSURE_KEY, encode_exposure(&Exposure::default()))?;
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
    // Each step rewrites what it must and bumps the stored version last (in one transaction
    // with its writes, or, for the rewrite of every item to version 7, after resumable
    // transactions that each leave the data readable), so a crash mid-upgrade leaves the
    // previous version in place; the next open resumes.
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
    for to in 3..=6 {
        if version < to {
            bump_version(db, &meta, to)?;
        }
    }
    if version < 7 {
        upgrade_6_to_7(db, &meta)?;
    }
    // Version 8 writes items and events in formats 4 and 6; formats 3 and 5 stay readable,
    // and items are rewritten in format 4 when they next change.
    if version < 8 {
        bump_version(db, &meta, 8)?;
    }
    // Version 9 writes record heads in format 2 (format 1 heads and their chunks stay
    // readable and are pruned as before) and keeps the share caps' figures in `meta`:
    // counted once here, then the version goes up. A crash in between leaves version 8,
    // and the next open counts again.
    if version < 9 {
        let watermark = read_watermark(&meta)?;
        let (_, exposure) = scan_exposure(
            &TreeId::Items.open(db)?,
            &TreeId::TmNode.open(db)?,
            &watermark,
        )?;
        meta.insert(EXPOSURE_KEY, encode_exposure(&exposure))?;
        bump_version(db, &meta, 9)?;
    }
    // Version 10 adds the `live` tree (created empty: every block of an older version is
    // held by its first source alone, by itself), and codes an older binary cannot read:
    // reports of operation 2 (retract) and past blocks ended 0xF0 (retracted). Nothing is
    // rewritten; the version goes up so that an older binary refuses the database.
    if version < 10 {
        TreeId::Live.open(db)?;
        bump_version(db, &meta, 10)?;
    }
    Ok(())
}

/// How many items one transaction of the version 7 upgrade rewrites.
const UPGRADE_7_BATCH: usize = 1_000;

/// Version 7 gives every item its provenance: each item of an older format is rewritten in
/// format 3 (one report, source `unknown`, at its start; its revision the database's) with
/// that one report stored, in transactions of [`UPGRADE_7_BATCH`] items. Each leaves the
/// version at 6 and rewritten items in format 3, so a crash resumes where it stopped;
/// the version goes to 7 once none is left.
fn upgrade_6_to_7(db: &Db, meta: &sled::Tree) -> Result<(), StoreError> {
    let items = TreeId::Items.open(db)?;
    let reports = TreeId::Reports.open(db)?;
    TreeId::History.open(db)?;
    TreeId::HistoryEnds.open(db)?;
    let revision = meta
        .get(super::REVISION_KEY)?
        .and_then(|bytes| super::meta::decode_u64(&bytes))
        .unwrap_or(0);
    let mut rewritten = 0u64;
    let mut after = std::ops::Bound::Unbounded;
    loop {
        // Nothing writes while we upgrade, so a scan outside the transaction is exact.
        let mut batch = Vec::with_capacity(UPGRADE_7_BATCH);
        for entry in items.range::<Vec<u8>, _>((after.clone(), std::ops::Bound::Unbounded)) {
            let (key, bytes) = entry?;
            after = std::ops::Bound::Excluded(key.to_vec());
            if bytes.first().is_some_and(|&f| f < codec::BLOCK_V3) {
                let Some((kind, id)) = keys::parse_item_key(&key) else {
                    continue; // left for `blocklistd check` to report
                };
                let Ok(mut block) = codec::decode_block(&bytes) else {
                    continue; // likewise
                };
                block.revision = revision;
                let report = Report {
                    timestamp: block.start,
                    source: UNKNOWN_SOURCE.to_owned(),
                    operation: Operation::Add,
                    action: block.action,
                    end_timestamp: block.end,
                    cause: block.cause.clone(),
                };
                batch.push((
                    key.to_vec(),
                    codec::encode_block_v3(&block),
                    keys::report_key(kind, id, 0),
                    codec::encode_report(&report),
                ));
                if batch.len() == UPGRADE_7_BATCH {
                    break;
                }
            }
        }
        if batch.is_empty() {
            break;
        }
        (&items, &reports)
            .transaction(|(items, reports)| {
                for (key, value, report_key, report) in &batch {
                    items.insert(key.as_slice(), value.as_slice())?;
                    reports.insert(report_key.as_slice(), report.as_slice())?;
                }
                Ok::<_, sled::transaction::ConflictableTransactionError<Infallible>>(())
            })
            .map_err(|e| match e {
                TransactionError::Storage(source) => StoreError::UpgradeFailed { to: 7, source },
                TransactionError::Abort(never) => match never {},
            })?;
        db.flush()?;
        rewritten += batch.len() as u64;
    }
    tracing::info!(items = rewritten, "gave every item its provenance");
    bump_version(db, meta, 7)
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
    TreeId::Events.open(db)?;
    // Nothing writes while we upgrade, so a scan outside the transaction is exact.
    let counts = super::encode_counts(&super::scan_counts(&TreeId::Items.open(db)?, &[])?);
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

pub(super) fn read_version(bytes: &[u8]) -> Result<u32, StoreError> {
    decode_version(bytes)
        .ok_or_else(|| StoreError::Foreign(format!("its schema version has {} bytes", bytes.len())))
}
