//! The `meta` tree: its keys, the encoding of its values (the only byte-order code outside
//! `keys` and `codec`), the item counts and the expiry watermark the committer keeps there
//! (so neither a scrape nor a start scans the items), and the scan that rebuilds the counts.
// Byte order is this module's format (see the workspace lints in Cargo.toml).
#![allow(clippy::big_endian_bytes)]

use std::ops::Bound;

use sled::Tree;

use super::error::{bad_key, decode};
use super::{keys, Result, StoreError};
use crate::model::{Action, Kind};
use crate::policy::Exposure;

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

/// `meta` key of the guardrail policy (schema 6; absent only before the first start of
/// this version, which stores it).
pub(crate) const POLICY_KEY: &[u8] = b"policy";

/// `meta` key of the share caps' figures (schema 9): [`Exposure`]'s six counts, each an
/// i64 big-endian (two's complement), `registered`, `blocked`, `evacuating`, task managers
/// before nodes in each. Kept in the same transactions as the items and registrations, so
/// a start reads the registrations but not the items they name.
pub(crate) const EXPOSURE_KEY: &[u8] = b"exposure";

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

/// The items of `kind` in `counts`, both actions together.
pub fn kind_count(counts: &Counts, kind: Kind) -> u64 {
    Action::ALL
        .iter()
        .map(|&action| counts[count_slot(kind, action)])
        .sum()
}

/// A `meta` counter (`revision`, `unreclaimed`): u64 big-endian.
pub(crate) fn encode_u64(value: u64) -> [u8; 8] {
    value.to_be_bytes()
}

/// A `meta` counter read back; `None` unless it is 8 bytes.
pub(crate) fn decode_u64(bytes: &[u8]) -> Option<u64> {
    bytes.try_into().ok().map(u64::from_be_bytes)
}

/// `meta/schema_version`: u32 big-endian.
pub(crate) fn encode_version(version: u32) -> [u8; 4] {
    version.to_be_bytes()
}

/// `meta/schema_version` read back; `None` unless it is 4 bytes.
pub(crate) fn decode_version(bytes: &[u8]) -> Option<u32> {
    bytes.try_into().ok().map(u32::from_be_bytes)
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

pub(crate) fn encode_exposure(exposure: &Exposure) -> Vec<u8> {
    [exposure.registered, exposure.blocked, exposure.evacuating]
        .iter()
        .flatten()
        .flat_map(|c| c.to_be_bytes())
        .collect()
}

/// The stored figures read back; `None` unless they are 48 bytes.
pub(crate) fn decode_exposure(bytes: &[u8]) -> Option<Exposure> {
    if bytes.len() != 48 {
        return None;
    }
    let mut counts = [0i64; 6];
    for (i, chunk) in bytes.chunks_exact(8).enumerate() {
        counts[i] = i64::from_be_bytes(chunk.try_into().ok()?);
    }
    Some(Exposure {
        registered: [counts[0], counts[1]],
        blocked: [counts[2], counts[3]],
        evacuating: [counts[4], counts[5]],
    })
}

/// Counts the stored items not yet announced expired, by scanning (for upgrades, and an
/// open that finds no stored counts; `verify` counts them in its own pass).
pub(crate) fn scan_counts(items: &Tree, watermark: &[u8]) -> Result<Counts> {
    let mut counts = [0u64; 4];
    for entry in items {
        let (key, bytes) = entry?;
        let (kind, id) = keys::parse_item_key(&key).ok_or_else(|| bad_key(&key))?;
        let block = decode(&key, &bytes)?;
        if !announced(watermark, block.end, kind, id) {
            counts[count_slot(kind, block.action)] += 1;
        }
    }
    Ok(counts)
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
pub(super) fn read_watermark(meta: &Tree) -> Result<Vec<u8>> {
    match meta.get(WATERMARK_KEY)? {
        Some(bytes) if keys::parse_expiry_target(&bytes).is_some() => Ok(bytes.to_vec()),
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
