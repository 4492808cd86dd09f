//! The provenance values: reports and past blocks (with their counters), of schema 7, and
//! the past blocks of schema 8.
//! Frozen like every value struct of [`super`].

use serde::{Deserialize, Serialize};

#[cfg(test)]
use super::block::block_v3;
use super::block::{
    action_code, block_from_v1, block_from_v3, block_from_v4, block_v4, max_block_bytes, Base,
    BlockV1, BlockV3, BlockV4,
};
use super::{decode_framed, encode_framed, event_code, event_type, CodecError, VARINT};
use crate::model::{Block, EventType, MAX_SOURCE_BYTES};
use crate::provenance::{Ended, Ending, Operation, Report, MAX_REASON_BYTES};

/// Format byte of [`ReportV1`], a `reports` value (schema 7).
pub const REPORT_V1: u8 = 1;

/// Format byte of [`PastV1`], a `history` entry of schema 7 (still decoded).
pub const PAST_V1: u8 = 1;

/// Format byte of [`PastV2`], a `history` entry of schema 8: the block in format 4, the
/// time it ended as its distance from the block's end.
pub const PAST_V2: u8 = 2;

/// Format byte of a `history` counter: the id's first and next entry numbers.
pub const HISTORY_COUNT_V1: u8 = 1;

/// The largest `reports` value: the format byte, the time, the source, the operation, the
/// action, the end and a cause of up to `cause` bytes.
pub const fn max_report_bytes(cause: usize) -> usize {
    1 + VARINT + VARINT + MAX_SOURCE_BYTES + 1 + 1 + VARINT + VARINT + cause
}

/// The largest `history` entry of a block whose merged cause has `cause` bytes: the block
/// (without its format byte), how and when it ended, the unblock's source and reason.
pub const fn max_past_bytes(cause: usize) -> usize {
    max_block_bytes(cause)
        + 1
        + VARINT
        + 1
        + VARINT
        + MAX_SOURCE_BYTES
        + 1
        + VARINT
        + MAX_REASON_BYTES
}

/// Report value, format 1 (key: kind tag ++ id ++ 0x00 ++ report number).
#[derive(Serialize, Deserialize)]
struct ReportV1 {
    at: i64,
    source: String,
    /// 0 = add, 1 = update.
    operation: u8,
    action: u8,
    end: i64,
    cause: String,
}

/// Past block value, format 2 (key: kind tag ++ id ++ 0x00 ++ entry number): format 1 with
/// the block as [`BlockV4`] and `at` as `at − block.end` (an expired block ends moments
/// after its end: one varint byte or two instead of nine). Frozen like
/// [`BlockV1`].
#[derive(Serialize, Deserialize)]
struct PastV2 {
    block: BlockV4,
    how: u8,
    at: i64,
    source: Option<String>,
    reason: Option<String>,
}

/// Past block value, format 1 (key: kind tag ++ id ++ 0x00 ++ entry number).
#[derive(Serialize, Deserialize)]
struct PastV1 {
    block: BlockV3,
    /// The event code of how it ended: `removed` or `expired`.
    how: u8,
    at: i64,
    source: Option<String>,
    reason: Option<String>,
}

pub fn encode_report(report: &Report) -> Vec<u8> {
    encode_framed(
        REPORT_V1,
        &ReportV1 {
            at: report.timestamp,
            source: report.source.clone(),
            operation: match report.operation {
                Operation::Add => 0,
                Operation::Update => 1,
            },
            action: action_code(report.action),
            end: report.end_timestamp,
            cause: report.cause.clone(),
        },
    )
}

pub fn decode_report(bytes: &[u8]) -> Result<Report, CodecError> {
    let value: ReportV1 = decode_framed(REPORT_V1, bytes)?;
    let operation = match value.operation {
        0 => Operation::Add,
        1 => Operation::Update,
        other => return Err(CodecError::Decode(format!("unknown operation {other}"))),
    };
    // The action's code is a block's: decode it as one.
    let action = block_from_v1(BlockV1 {
        action: value.action,
        start: 0,
        end: 0,
        cause: String::new(),
    })?
    .action;
    Ok(Report {
        timestamp: value.at,
        source: value.source,
        operation,
        action,
        end_timestamp: value.end,
        cause: value.cause,
    })
}

fn how_code(how: Ended) -> u8 {
    event_code(match how {
        Ended::Expired => EventType::Expired,
        Ended::Removed => EventType::Removed,
    })
}

/// A `history` entry: `block` as it was when it ended, and how.
pub fn encode_past(block: &Block, ending: &Ending) -> Vec<u8> {
    encode_framed(
        PAST_V2,
        &PastV2 {
            block: block_v4(block, Base::ABSOLUTE),
            how: how_code(ending.how),
            at: ending.timestamp.wrapping_sub(block.end),
            source: ending.source.clone(),
            reason: ending.reason.clone(),
        },
    )
}

/// A `history` entry in format 1, as schema version 7 wrote it (for the fixtures).
#[cfg(test)]
pub fn encode_past_v1(block: &Block, ending: &Ending) -> Vec<u8> {
    encode_framed(
        PAST_V1,
        &PastV1 {
            block: block_v3(block),
            how: how_code(ending.how),
            at: ending.timestamp,
            source: ending.source.clone(),
            reason: ending.reason.clone(),
        },
    )
}

pub fn decode_past(bytes: &[u8]) -> Result<(Block, Ending), CodecError> {
    let value = match bytes.first() {
        Some(&PAST_V1) => decode_framed::<PastV1>(PAST_V1, bytes)?,
        _ => {
            let value: PastV2 = decode_framed(PAST_V2, bytes)?;
            let block = block_from_v4(value.block, Base::ABSOLUTE)?;
            let at = value.at.wrapping_add(block.end);
            return past_from(block, value.how, at, value.source, value.reason);
        }
    };
    past_from(
        block_from_v3(value.block)?,
        value.how,
        value.at,
        value.source,
        value.reason,
    )
}

fn past_from(
    block: Block,
    how: u8,
    at: i64,
    source: Option<String>,
    reason: Option<String>,
) -> Result<(Block, Ending), CodecError> {
    let how = match event_type(how)? {
        EventType::Expired => Ended::Expired,
        EventType::Removed => Ended::Removed,
        other => {
            return Err(CodecError::Decode(format!(
                "a past block cannot end by {}",
                other.as_str()
            )))
        }
    };
    let ending = Ending {
        how,
        timestamp: at,
        source,
        reason,
    };
    Ok((block, ending))
}

/// A `history` counter: the numbers of the id's oldest kept entry and of its next one.
pub fn encode_history_count(first: u64, next: u64) -> Vec<u8> {
    encode_framed(HISTORY_COUNT_V1, &(first, next))
}

/// The `(first, next)` of a `history` counter; one with `first > next` is corrupt.
pub fn decode_history_count(bytes: &[u8]) -> Result<(u64, u64), CodecError> {
    let (first, next): (u64, u64) = decode_framed(HISTORY_COUNT_V1, bytes)?;
    if first > next {
        return Err(CodecError::Decode(format!(
            "history counter's first {first} is past its next {next}"
        )));
    }
    Ok((first, next))
}
