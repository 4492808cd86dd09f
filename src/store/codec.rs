//! Stored values: one format byte, then the bincode 2 (`config::standard()`) encoding of a
//! frozen value struct.
//!
//! bincode writes no field names, so a value struct can never change shape once data exists
//! in it: a new shape gets a new format byte and a new struct, and the old one stays here
//! for decoding (or a migration rewrites it). Byte-exact fixtures in `tests` pin the
//! current format down.
//!
//! This file holds the format bytes of every value, the framing and the errors they share,
//! and the registration value (a bare id); the value structs live by what they store:
//! `block` (items of every format), `provenance` (reports, past blocks), `events` (the change log), `guardrails` (allowlist and policy) and
//! `idempotency` (kept responses).

use serde::de::DeserializeOwned;
use serde::Serialize;

mod block;
mod events;
mod guardrails;
pub mod idempotency;
pub mod provenance;
#[cfg(test)]
mod tests;

pub use block::{decode_block, encode_block, encode_block_v3, max_block_bytes};
pub use events::{chunks, decode_events, encode_chunk, events_at, max_chunk_bytes};
use events::{event_code, event_type};
pub use guardrails::{decode_allow, decode_policy, encode_allow, encode_policy};
pub use provenance::{
    decode_history_count, decode_live, decode_past, decode_report, decode_roster,
    encode_history_count, encode_live, encode_past, encode_report, encode_roster,
};

/// Format byte of [`BlockV1`], the item value of schema versions 1 to 5 (still decoded).
pub const BLOCK_V1: u8 = 1;

/// Format byte of [`BlockV2`], the item value of schema version 6: a block with its forced
/// record.
pub const BLOCK_V2: u8 = 2;

/// Format byte of [`block::BlockV3`], the item value of schema version 7: a block with
/// its provenance, revision and escalation.
pub const BLOCK_V3: u8 = 3;

/// Format byte of [`block::BlockV4`], the item value of schema version 8: format 3 with its
/// times and revision stored as distances, and an `unknown` source as empty.
pub const BLOCK_V4: u8 = 4;

/// Format byte of [`AllowV1`], an `allowlist` value (schema 6).
pub const ALLOW_V1: u8 = 1;

/// Format byte of [`PolicyV1`], `meta/policy` (schema 6; still decoded).
pub const POLICY_V1: u8 = 1;

/// Format byte of [`PolicyV2`], `meta/policy` of schema 7: format 1 and the escalation.
pub const POLICY_V2: u8 = 2;

/// Format byte of a registration value (`tm_node`): the node id's UTF-8 bytes follow.
pub const REGISTRATION_V1: u8 = 1;

/// Format byte of [`EventV1`], an `events` value of schema version 2 (still decoded).
pub const EVENT_V1: u8 = 1;

/// Format byte of [`EventV2`], the `events` value of schema version 3 (still decoded).
pub const EVENT_V2: u8 = 2;

/// Format byte of [`ChunkV3`], the `events` value of schema versions 4 and 5: the events
/// of one transaction, with consecutive revisions from the one in the key (still decoded).
pub const EVENTS_V3: u8 = 3;

/// Format byte of [`ChunkV4`], the `events` value of schema version 6: as format 3, with
/// items as [`BlockV2`].
pub const EVENTS_V4: u8 = 4;

/// Format byte of [`ChunkV5`], the `events` value of schema version 7: as format 4, with
/// items as [`block::BlockV3`].
pub const EVENTS_V5: u8 = 5;

/// Format byte of [`ChunkV6`], the `events` value of schema version 8: as format 5, with
/// items as [`block::BlockV4`] relative to the chunk's time and the event's revision.
pub const EVENTS_V6: u8 = 6;

/// bincode's varint (standard config) takes at most 9 bytes for any integer we store.
const VARINT: usize = 9;

/// The largest value we ever decode; a corrupt length prefix cannot make us allocate more.
const DECODE_LIMIT: usize = 64 * 1024;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    #[error("empty value")]
    Empty,
    #[error("unknown value format {0}")]
    UnknownFormat(u8),
    #[error("value does not decode: {0}")]
    Decode(String),
    #[error("value has {0} trailing bytes")]
    Trailing(usize),
    #[error("value holds an unknown action code {0}")]
    UnknownAction(u8),
    #[error("value holds an unknown event code {0}")]
    UnknownEvent(u8),
    #[error("value holds an unknown kind byte {0}")]
    UnknownKind(u8),
}

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// A format byte followed by the bincode encoding of `value`.
fn encode_framed<T: Serialize>(format: u8, value: &T) -> Vec<u8> {
    let mut out = vec![format];
    // Encoding into a Vec only fails for types serde cannot represent; ours are plain.
    bincode::serde::encode_into_std_write(value, &mut out, config())
        .expect("value structs always encode");
    out
}

/// Checks the format byte, decodes the rest with a size limit, and refuses trailing bytes.
fn decode_framed<T: DeserializeOwned>(format: u8, bytes: &[u8]) -> Result<T, CodecError> {
    let (&found, body) = bytes.split_first().ok_or(CodecError::Empty)?;
    if found != format {
        return Err(CodecError::UnknownFormat(found));
    }
    decode_body(body)
}

/// Decodes a value's body (after its format byte) with a size limit, refusing trailing bytes.
fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, CodecError> {
    let (value, read): (T, usize) =
        bincode::serde::decode_from_slice(body, config().with_limit::<DECODE_LIMIT>())
            .map_err(|e| CodecError::Decode(e.to_string()))?;
    if read != body.len() {
        return Err(CodecError::Trailing(body.len() - read));
    }
    Ok(value)
}

/// Value of a `tm_node` entry: the node the task manager runs on.
pub fn encode_registration(node: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + node.len());
    out.push(REGISTRATION_V1);
    out.extend_from_slice(node.as_bytes());
    out
}

pub fn decode_registration(bytes: &[u8]) -> Result<String, CodecError> {
    let (&format, node) = bytes.split_first().ok_or(CodecError::Empty)?;
    if format != REGISTRATION_V1 {
        return Err(CodecError::UnknownFormat(format));
    }
    String::from_utf8(node.to_vec()).map_err(|e| CodecError::Decode(e.to_string()))
}
