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
use crate::model::{
    Block, EventType, LiveReport, MAX_DETAILS, MAX_DETAILS_BYTES, MAX_HOLDERS, MAX_SOURCE_BYTES,
};
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

/// Format byte of [`LiveV1`], a live report in `live` (schema 10).
pub const LIVE_V1: u8 = 1;

/// Format byte of a roster in `live` (schema 10): the sources holding the block.
pub const ROSTER_V1: u8 = 1;

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
                Operation::Retract => 2,
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
        2 => Operation::Retract,
        other => return Err(CodecError::Decode(format!("unknown operation {other}"))),
    };
    let action = action_from_code(value.action)?;
    Ok(Report {
        timestamp: value.at,
        source: value.source,
        operation,
        action,
        end_timestamp: value.end,
        cause: value.cause,
    })
}

/// The `how` of a past block ended by a retraction (schema 10): not an event code (its
/// event is `removed`), and above every one.
pub const HOW_RETRACTED: u8 = 0xF0;

/// A report's action code, which is a block's: decoded as one.
fn action_from_code(code: u8) -> Result<crate::model::Action, CodecError> {
    let block = block_from_v1(BlockV1 {
        action: code,
        start: 0,
        end: 0,
        cause: String::new(),
    })?;
    Ok(block.action)
}

fn how_code(how: Ended) -> u8 {
    match how {
        Ended::Expired => event_code(EventType::Expired),
        Ended::Removed => event_code(EventType::Removed),
        Ended::Retracted => HOW_RETRACTED,
    }
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
    let how = if how == HOW_RETRACTED {
        Ended::Retracted
    } else {
        match event_type(how)? {
            EventType::Expired => Ended::Expired,
            EventType::Removed => Ended::Removed,
            other => {
                return Err(CodecError::Decode(format!(
                    "a past block cannot end by {}",
                    other.as_str()
                )))
            }
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

/// Live report value, format 1 (key: kind tag ++ id ++ 0x00 ++ source). Frozen like
/// [`BlockV1`]. Times as distances, like [`BlockV4`]'s.
#[derive(Serialize, Deserialize)]
struct LiveV1 {
    action: u8,
    /// `end − first_report` (wrapping: a permanent end round-trips).
    end: i64,
    cause: String,
    first_report: i64,
    /// `last_report − first_report`.
    last_report: i64,
    reports: u64,
    details: Vec<(String, String)>,
}

/// The largest `live` value: a live report whose merged cause has `cause` bytes, with the
/// largest details; or a roster, whichever is larger.
pub const fn max_live_bytes(cause: usize) -> usize {
    let report = 1
        + 1
        + 4 * VARINT
        + cause
        + VARINT
        + VARINT
        + VARINT
        + MAX_DETAILS * 2 * VARINT
        + MAX_DETAILS_BYTES;
    // The holders kept apart, and the others' report.
    let roster = 1 + VARINT + (MAX_HOLDERS + 1) * (VARINT + MAX_SOURCE_BYTES);
    if report > roster {
        report
    } else {
        roster
    }
}

pub fn encode_live(report: &LiveReport) -> Vec<u8> {
    encode_framed(
        LIVE_V1,
        &LiveV1 {
            action: action_code(report.action),
            end: report.end.wrapping_sub(report.first_report),
            cause: report.cause.clone(),
            first_report: report.first_report,
            last_report: report.last_report.wrapping_sub(report.first_report),
            reports: report.reports,
            details: report
                .details
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        },
    )
}

/// The live report of `source` stored as `bytes`.
pub fn decode_live(source: &str, bytes: &[u8]) -> Result<LiveReport, CodecError> {
    let value: LiveV1 = decode_framed(LIVE_V1, bytes)?;
    let action = action_from_code(value.action)?;
    Ok(LiveReport {
        source: source.to_owned(),
        action,
        end: value.end.wrapping_add(value.first_report),
        cause: value.cause,
        first_report: value.first_report,
        last_report: value.last_report.wrapping_add(value.first_report),
        reports: value.reports,
        details: value.details.into_iter().collect(),
    })
}

/// A roster: the sources holding a block, in the order of their first reports.
pub fn encode_roster(sources: &[String]) -> Vec<u8> {
    encode_framed(ROSTER_V1, &sources)
}

pub fn decode_roster(bytes: &[u8]) -> Result<Vec<String>, CodecError> {
    decode_framed(ROSTER_V1, bytes)
}

#[cfg(test)]
mod tests {
    // The formats are written here byte by byte, varints' little-endian tails included.
    #![allow(clippy::little_endian_bytes)]

    use super::*;
    use crate::model::{Action, Details, Provenance, PERMANENT};
    use crate::provenance::Ended;

    const AT: i64 = 1_700_000_000_000;

    /// bincode's varint of a zigzagged i64 this large: 0xFD, then the u64 little-endian.
    fn wide(value: i64) -> Vec<u8> {
        let zigzag = ((value << 1) ^ (value >> 63)) as u64;
        [&[0xFD][..], &zigzag.to_le_bytes()].concat()
    }

    #[test]
    fn a_live_report_and_a_roster_are_pinned_byte_for_byte() {
        let report = LiveReport {
            source: "am".into(),
            action: Action::MarkBlockedAndEvacuateTasks,
            end: PERMANENT,
            cause: "disk".into(),
            first_report: AT,
            last_report: AT + 5,
            reports: 2,
            details: Details::from([("fingerprint".into(), "f1".into())]),
        };
        let bytes = encode_live(&report);
        let want = [
            &[LIVE_V1, 1][..],
            &wide(PERMANENT - AT),
            &[4],
            b"disk",
            &wide(AT),
            &[10, 2, 1, 11],
            b"fingerprint",
            &[2],
            b"f1",
        ]
        .concat();
        assert_eq!(bytes, want);
        assert_eq!(decode_live("am", &bytes), Ok(report));
        assert!(bytes.len() <= max_live_bytes(4));

        let roster = vec!["op".to_owned(), "am".to_owned()];
        let bytes = encode_roster(&roster);
        assert_eq!(bytes, [ROSTER_V1, 2, 2, b'o', b'p', 2, b'a', b'm']);
        assert_eq!(decode_roster(&bytes), Ok(roster));
        assert!(decode_roster(&[ROSTER_V1 + 1, 0]).is_err());
    }

    #[test]
    fn the_largest_live_values_stay_within_their_bound() {
        let details: Details = (0..MAX_DETAILS)
            .map(|i| {
                let key = format!("{i:0>64}");
                (key, "v".repeat(MAX_DETAILS_BYTES / MAX_DETAILS - 64))
            })
            .collect();
        assert!(crate::model::validate_details(&details).is_ok());
        let cause = "c".repeat(crate::model::MAX_MERGED_CAUSE_BYTES);
        let report = LiveReport {
            source: "s".repeat(MAX_SOURCE_BYTES),
            action: Action::MarkBlocked,
            end: i64::MIN,
            cause,
            first_report: i64::MAX,
            last_report: i64::MIN,
            reports: u64::MAX,
            details,
        };
        let bound = max_live_bytes(crate::model::MAX_MERGED_CAUSE_BYTES);
        assert!(encode_live(&report).len() <= bound);
        let roster: Vec<String> = (0..=MAX_HOLDERS).map(|i| format!("{i:0>128}")).collect();
        assert!(encode_roster(&roster).len() <= bound);
    }

    #[test]
    fn a_retraction_and_a_retracted_past_block_are_pinned_byte_for_byte() {
        let report = Report {
            timestamp: AT,
            source: "am".into(),
            operation: Operation::Retract,
            action: Action::MarkBlocked,
            end_timestamp: AT,
            cause: "c".into(),
        };
        let bytes = encode_report(&report);
        let want = [
            &[REPORT_V1][..],
            &wide(AT),
            &[2, b'a', b'm', 2, 0],
            &wide(AT),
            &[1, b'c'],
        ]
        .concat();
        assert_eq!(bytes, want);
        assert_eq!(decode_report(&bytes), Ok(report));

        let block = Block {
            action: Action::MarkBlocked,
            start: AT,
            end: AT + 1_000,
            cause: "c".into(),
            forced: None,
            provenance: Provenance::first("am", AT),
            revision: 3,
            escalated: None,
        };
        let ending = Ending {
            how: Ended::Retracted,
            timestamp: AT + 10,
            source: Some("am".into()),
            reason: None,
        };
        let bytes = encode_past(&block, &ending);
        // The block as an items value without its format byte, then how (0xF0), when
        // (its end − 990 ms, zigzagged), who and no reason.
        let block_v4 = &super::super::encode_block(&block)[1..];
        let want = [
            &[PAST_V2][..],
            block_v4,
            &[HOW_RETRACTED, 0xFB],
            &1_979u16.to_le_bytes(),
            &[1, 2, b'a', b'm', 0],
        ]
        .concat();
        assert_eq!(bytes, want);
        assert_eq!(decode_past(&bytes), Ok((block, ending)));
    }
}
