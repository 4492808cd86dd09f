//! Item values: format 1 (a block), 2 (with its forced record), 3 (with its provenance,
//! revision and escalation) and 4 (format 3 with its times and revision stored as
//! distances), the forced record, and the item value's size bound. Frozen like every value
//! struct of [`super`].

use serde::{Deserialize, Serialize};

use super::{decode_framed, encode_framed, CodecError, VARINT};
use super::{BLOCK_V1, BLOCK_V2, BLOCK_V3, BLOCK_V4};
use crate::model::{
    Action, Block, Escalated, Forced, Provenance, MAX_SOURCE_BYTES, UNKNOWN_SOURCE,
};

/// The largest forced record ([`ForcedV1`]): the option tag, every guard name with its
/// length (seven guards of at most 16 bytes), the name of the token (at most
/// [`MAX_TOKEN_NAME_BYTES`]) with its tag and length, and the time.
pub const MAX_FORCED_BYTES: usize =
    1 + VARINT + 7 * (VARINT + 16) + 1 + VARINT + MAX_TOKEN_NAME_BYTES + VARINT;

/// The longest token name the forced record stores.
pub const MAX_TOKEN_NAME_BYTES: usize = 64;

/// The largest `items` value whose cause has `cause` bytes: the format byte, then
/// [`BlockV4`] (or [`BlockV3`], field for field as large): [`BlockV2`]'s action byte, two
/// varint times, the cause with its length and the forced record, then the provenance
/// ([`MAX_PROVENANCE_BYTES`]).
pub const fn max_block_bytes(cause: usize) -> usize {
    1 + 1 + VARINT + VARINT + VARINT + cause + MAX_FORCED_BYTES + MAX_PROVENANCE_BYTES
}

/// Item value, format 1. Frozen: field order and types are the on-disk layout.
#[derive(Serialize, Deserialize)]
pub(super) struct BlockV1 {
    /// 0 = `MARK_BLOCKED`, 1 = `MARK_BLOCKED_AND_EVACUATE_TASKS`.
    pub(super) action: u8,
    pub(super) start: i64,
    pub(super) end: i64,
    pub(super) cause: String,
}

/// Item value, format 2: format 1 and the forced record. Frozen like [`BlockV1`].
#[derive(Serialize, Deserialize)]
pub(super) struct BlockV2 {
    action: u8,
    start: i64,
    end: i64,
    cause: String,
    forced: Option<ForcedV1>,
}

/// Frozen like [`BlockV1`].
#[derive(Serialize, Deserialize)]
pub(super) struct ForcedV1 {
    guards: Vec<String>,
    by: Option<String>,
    at: i64,
}

pub fn encode_block(block: &Block) -> Vec<u8> {
    encode_framed(BLOCK_V4, &block_v4(block, Base::ABSOLUTE))
}

/// Encodes a block in format 3, as schema version 7 writes it: the upgrade to version 7
/// leaves exactly version 7's layout behind each of its steps, and the fixtures.
pub fn encode_block_v3(block: &Block) -> Vec<u8> {
    encode_framed(BLOCK_V3, &block_v3(block))
}

#[cfg(test)]
pub(super) fn block_v2(block: &Block) -> BlockV2 {
    BlockV2 {
        action: action_code(block.action),
        start: block.start,
        end: block.end,
        cause: block.cause.clone(),
        forced: block.forced.as_ref().map(forced_v1),
    }
}

pub(super) fn block_from_v2(value: BlockV2) -> Result<Block, CodecError> {
    let mut block = block_from_v1(BlockV1 {
        action: value.action,
        start: value.start,
        end: value.end,
        cause: value.cause,
    })?;
    block.forced = value.forced.map(forced_from_v1);
    Ok(block)
}

pub(super) fn forced_v1(f: &Forced) -> ForcedV1 {
    ForcedV1 {
        guards: f.guards.clone(),
        by: f.by.clone(),
        at: f.at,
    }
}

pub(super) fn forced_from_v1(f: ForcedV1) -> Forced {
    Forced {
        guards: f.guards,
        by: f.by,
        at: f.at,
    }
}

pub(super) fn action_code(action: Action) -> u8 {
    match action {
        Action::MarkBlocked => 0,
        Action::MarkBlockedAndEvacuateTasks => 1,
    }
}

#[cfg(test)]
pub(super) fn block_v1(block: &Block) -> BlockV1 {
    BlockV1 {
        action: action_code(block.action),
        start: block.start,
        end: block.end,
        cause: block.cause.clone(),
    }
}

pub fn decode_block(bytes: &[u8]) -> Result<Block, CodecError> {
    match bytes.first() {
        Some(&BLOCK_V1) => block_from_v1(decode_framed(BLOCK_V1, bytes)?),
        Some(&BLOCK_V2) => block_from_v2(decode_framed(BLOCK_V2, bytes)?),
        Some(&BLOCK_V3) => block_from_v3(decode_framed(BLOCK_V3, bytes)?),
        _ => block_from_v4(decode_framed(BLOCK_V4, bytes)?, Base::ABSOLUTE),
    }
}

pub(super) fn block_from_v1(value: BlockV1) -> Result<Block, CodecError> {
    let action = match value.action {
        0 => Action::MarkBlocked,
        1 => Action::MarkBlockedAndEvacuateTasks,
        other => return Err(CodecError::UnknownAction(other)),
    };
    // A block stored before provenance: one report, from an unknown source, at its start,
    // as the version 7 upgrade stores it; revision 0 (the upgrade gives it the database's).
    Ok(Block {
        action,
        start: value.start,
        end: value.end,
        cause: value.cause,
        forced: None,
        provenance: Provenance::first(UNKNOWN_SOURCE, value.start),
        revision: 0,
        escalated: None,
    })
}

/// What [`BlockV3`] adds to [`BlockV2`] at most: the source with its length, the
/// report count and two times, the revision, and the escalation record with its tag.
pub const MAX_PROVENANCE_BYTES: usize = VARINT + MAX_SOURCE_BYTES + 4 * VARINT + 1 + 3 * VARINT;

/// Item value, format 3: format 2, then the provenance summary, the revision of the change
/// that made the block what it is, and the escalation record.
#[derive(Serialize, Deserialize)]
pub(super) struct BlockV3 {
    action: u8,
    start: i64,
    end: i64,
    cause: String,
    forced: Option<ForcedV1>,
    source: String,
    reports: u64,
    first_report: i64,
    last_report: i64,
    revision: u64,
    escalated: Option<EscalatedV1>,
}

#[derive(Serialize, Deserialize)]
struct EscalatedV1 {
    requested_timeout: i64,
    timeout: i64,
    past_blocks: u32,
}

pub(super) fn block_v3(block: &Block) -> BlockV3 {
    BlockV3 {
        action: action_code(block.action),
        start: block.start,
        end: block.end,
        cause: block.cause.clone(),
        forced: block.forced.as_ref().map(forced_v1),
        source: block.provenance.source.clone(),
        reports: block.provenance.reports,
        first_report: block.provenance.first_report,
        last_report: block.provenance.last_report,
        revision: block.revision,
        escalated: block.escalated.map(escalated_v1),
    }
}

fn escalated_v1(e: Escalated) -> EscalatedV1 {
    EscalatedV1 {
        requested_timeout: e.requested_timeout,
        timeout: e.timeout,
        past_blocks: e.past_blocks,
    }
}

pub(super) fn block_from_v3(value: BlockV3) -> Result<Block, CodecError> {
    let mut block = block_from_v2(BlockV2 {
        action: value.action,
        start: value.start,
        end: value.end,
        cause: value.cause,
        forced: value.forced,
    })?;
    block.provenance = Provenance {
        source: value.source,
        reports: value.reports,
        first_report: value.first_report,
        last_report: value.last_report,
    };
    block.revision = value.revision;
    block.escalated = value.escalated.map(|e| Escalated {
        requested_timeout: e.requested_timeout,
        timeout: e.timeout,
        past_blocks: e.past_blocks,
    });
    Ok(block)
}

/// What a [`BlockV4`]'s start and revision are stored relative to. In an `items` value,
/// nothing ([`Base::ABSOLUTE`]); in the change log, the chunk's commit time and the event's
/// own revision: a new item starts at its request, moments before its commit, and the item
/// of an `added` or `merged` event has that event's revision, so both distances are a
/// varint byte or two instead of nine and five.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Base {
    pub(super) time: i64,
    pub(super) revision: u64,
}

impl Base {
    pub(super) const ABSOLUTE: Base = Base {
        time: 0,
        revision: 0,
    };
}

/// Item value, format 4: [`BlockV3`]'s fields in its order, each time and the revision
/// stored as the distance from the value it is nearly always equal or close to (bincode's
/// varint spends nine bytes on a unix-ms time, one on a distance under 126 ms), and the
/// source empty for `unknown` (a source is never empty). Differences wrap, so every `i64`
/// and `u64` round-trips exactly. Frozen like [`BlockV1`].
#[derive(Serialize, Deserialize)]
pub(super) struct BlockV4 {
    action: u8,
    /// `start − base.time`.
    start: i64,
    /// `end − start`: how long the block lasts (`i64::MAX − start` for a permanent one).
    end: i64,
    cause: String,
    forced: Option<ForcedV1>,
    /// The first report's source; empty for `unknown`.
    source: String,
    reports: u64,
    /// `first_report − start`.
    first_report: i64,
    /// `last_report − first_report`.
    last_report: i64,
    /// `revision − base.revision`, as two's-complement `i64`.
    revision: i64,
    escalated: Option<EscalatedV1>,
}

pub(super) fn block_v4(block: &Block, base: Base) -> BlockV4 {
    let p = &block.provenance;
    BlockV4 {
        action: action_code(block.action),
        start: block.start.wrapping_sub(base.time),
        end: block.end.wrapping_sub(block.start),
        cause: block.cause.clone(),
        forced: block.forced.as_ref().map(forced_v1),
        source: if p.source == UNKNOWN_SOURCE {
            String::new()
        } else {
            p.source.clone()
        },
        reports: p.reports,
        first_report: p.first_report.wrapping_sub(block.start),
        last_report: p.last_report.wrapping_sub(p.first_report),
        revision: (block.revision as i64).wrapping_sub(base.revision as i64),
        escalated: block.escalated.map(escalated_v1),
    }
}

pub(super) fn block_from_v4(value: BlockV4, base: Base) -> Result<Block, CodecError> {
    let start = value.start.wrapping_add(base.time);
    let first_report = value.first_report.wrapping_add(start);
    let source = if value.source.is_empty() {
        UNKNOWN_SOURCE.to_owned()
    } else {
        value.source
    };
    block_from_v3(BlockV3 {
        action: value.action,
        start,
        end: value.end.wrapping_add(start),
        cause: value.cause,
        forced: value.forced,
        source,
        reports: value.reports,
        first_report,
        last_report: value.last_report.wrapping_add(first_report),
        revision: value.revision.wrapping_add(base.revision as i64) as u64,
        escalated: value.escalated,
    })
}
