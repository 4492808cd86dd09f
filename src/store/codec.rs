//! Stored values: one format byte, then the bincode 2 (`config::standard()`) encoding of a
//! frozen value struct.
//!
//! bincode writes no field names, so a value struct can never change shape once data exists
//! in it: a new shape gets a new format byte and a new struct, and the old one stays here
//! for decoding (or a migration rewrites it). Byte-exact fixtures in the tests below pin the
//! current format down.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::keys;

pub mod idempotency;
use crate::allowlist::Entry;
use crate::model::{
    Action, Block, Change, Event, EventType, Forced, Item, Kind, Provenance, UNKNOWN_SOURCE,
};
use crate::policy::{Escalation, KindPolicy, Policy, Rate};

/// Format byte of [`BlockV1`], the item value of schema versions 1 to 5 (still decoded).
pub const BLOCK_V1: u8 = 1;

/// Format byte of [`BlockV2`], the item value of schema version 6: a block with its forced
/// record.
pub const BLOCK_V2: u8 = 2;

/// Format byte of [`provenance::BlockV3`], the item value of schema version 7: a block with
/// its provenance, revision and escalation.
pub const BLOCK_V3: u8 = 3;

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
/// items as [`provenance::BlockV3`].
pub const EVENTS_V5: u8 = 5;

/// About how many bytes of events one chunk holds before the next starts. A chunk is cut
/// once its events' [`approximate_size`]s reach this, so it holds at most this plus one
/// event ([`max_chunk_bytes`]); 17 of those make a leaf of the event log, which must stay
/// under sled's blob threshold (`super::blobs`).
pub const CHUNK_BYTES: usize = 4096;

/// bincode's varint (standard config) takes at most 9 bytes for any integer we store.
const VARINT: usize = 9;

/// The largest forced record ([`ForcedV1`]): the option tag, every guard name with its
/// length (seven guards of at most 16 bytes), the name of the token (at most
/// [`MAX_TOKEN_NAME_BYTES`]) with its tag and length, and the time.
pub const MAX_FORCED_BYTES: usize =
    1 + VARINT + 7 * (VARINT + 16) + 1 + VARINT + MAX_TOKEN_NAME_BYTES + VARINT;

/// The longest token name the forced record stores.
pub const MAX_TOKEN_NAME_BYTES: usize = 64;

/// The largest `items` value whose cause has `cause` bytes: the format byte, then
/// [`BlockV2`] (action byte, two varint times, the cause with its length, the forced
/// record).
pub const fn max_block_bytes(cause: usize) -> usize {
    1 + 1 + VARINT + VARINT + VARINT + cause + MAX_FORCED_BYTES + provenance::MAX_PROVENANCE_BYTES
}

/// The largest encoding of one event of a chunk, for ids of `id` and causes of `cause`
/// bytes: event code, change tag, then the larger of an item change (kind byte, id, block)
/// and a registration (two ids).
const fn max_event_bytes(id: usize, cause: usize) -> usize {
    let item = 1 + VARINT + id + max_block_bytes(cause) - 1;
    let registration = 2 * (VARINT + id);
    1 + 1
        + if item > registration {
            item
        } else {
            registration
        }
}

/// The largest `events` value (a chunk): the format byte, the commit time and the event
/// count, then events whose approximate sizes stayed under [`CHUNK_BYTES`] before the last
/// one was added (an event's encoding is never larger than its approximate size: a test
/// checks it), then that last one.
pub const fn max_chunk_bytes(id: usize, cause: usize) -> usize {
    1 + VARINT + VARINT + CHUNK_BYTES + max_event_bytes(id, cause)
}

/// Events value, format 5: format 4 with items as [`provenance::BlockV3`]. Frozen like
/// [`BlockV1`].
#[derive(Serialize, Deserialize)]
struct ChunkV5 {
    at: i64,
    events: Vec<(u8, ChangeV4)>,
}

/// What a format-5 event records. Frozen: variant order is the on-disk tag.
#[derive(Serialize, Deserialize)]
enum ChangeV4 {
    Item {
        kind: u8,
        id: String,
        block: provenance::BlockV3,
    },
    Registration {
        tm: String,
        node: String,
    },
    Json(String),
}

/// Events value, format 4: format 3 with items as [`BlockV2`]. Frozen like [`BlockV1`].
#[derive(Serialize, Deserialize)]
struct ChunkV4 {
    at: i64,
    events: Vec<(u8, ChangeV3)>,
}

/// What a format-4 event records. Frozen: variant order is the on-disk tag.
#[derive(Serialize, Deserialize)]
enum ChangeV3 {
    Item {
        kind: u8,
        id: String,
        block: BlockV2,
    },
    Registration {
        tm: String,
        node: String,
    },
    /// An event kept as its finished JSON: policy and allowlist changes.
    Json(String),
}

/// Events value, format 3: one key per chunk instead of one per event, because every sled
/// insert copies a leaf — a third of the inserts of a batch add were its events. Frozen
/// like [`BlockV1`]. `at` comes first so that retention can read it alone.
#[derive(Serialize, Deserialize)]
struct ChunkV3 {
    /// Commit time, unix ms: one transaction, one time for all its events.
    at: i64,
    /// Each event's type (index into [`EventType::ALL`]) and change, in revision order.
    events: Vec<(u8, ChangeV2)>,
}

/// Event value, format 2: the change itself in bincode, about a third of format 1's JSON
/// (the log is a large part of what sled writes). Frozen like [`BlockV1`].
#[derive(Serialize, Deserialize)]
struct EventV2 {
    /// Index into [`EventType::ALL`].
    event: u8,
    /// Commit time, unix ms (for age-based retention).
    at: i64,
    change: ChangeV2,
}

/// What a format-2 event records. Frozen: variant order is the on-disk tag.
#[derive(Serialize, Deserialize)]
enum ChangeV2 {
    Item {
        /// [`Kind`]'s key byte (`T` or `N`).
        kind: u8,
        id: String,
        block: BlockV1,
    },
    Registration {
        tm: String,
        node: String,
    },
    /// An event first stored as format 1 (its finished JSON). Only in format-3 chunks, and
    /// only if such an event were ever written again; the daemon emits the two above.
    Json(String),
}

/// Event value, format 1. Frozen like [`BlockV1`].
#[derive(Serialize, Deserialize)]
struct EventV1 {
    /// Index into [`EventType::ALL`].
    event: u8,
    /// Commit time, unix ms (for age-based retention).
    at: i64,
    /// The JSON the feed sends as `data:`.
    data: String,
}

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

/// Item value, format 1. Frozen: field order and types are the on-disk layout.
#[derive(Serialize, Deserialize)]
struct BlockV1 {
    /// 0 = `MARK_BLOCKED`, 1 = `MARK_BLOCKED_AND_EVACUATE_TASKS`.
    action: u8,
    start: i64,
    end: i64,
    cause: String,
}

/// Item value, format 2: format 1 and the forced record. Frozen like [`BlockV1`].
#[derive(Serialize, Deserialize)]
struct BlockV2 {
    action: u8,
    start: i64,
    end: i64,
    cause: String,
    forced: Option<ForcedV1>,
}

/// Frozen like [`BlockV1`].
#[derive(Serialize, Deserialize)]
struct ForcedV1 {
    guards: Vec<String>,
    by: Option<String>,
    at: i64,
}

/// Allowlist value, format 1 (key: kind tag ++ id). Frozen like [`BlockV1`].
#[derive(Serialize, Deserialize)]
struct AllowV1 {
    prefix: bool,
    comment: String,
    added_by: Option<String>,
    added_at: i64,
    /// `None`: until removed.
    end: Option<i64>,
}

/// Policy value, format 1. Frozen like [`BlockV1`]; a percentage is a byte.
#[derive(Serialize, Deserialize)]
struct PolicyV1 {
    nodes: KindPolicyV1,
    task_managers: KindPolicyV1,
    min_registered: u64,
    max_block_duration_secs: Option<u64>,
    permanent_blocks_allowed: bool,
}

/// Policy value, format 2: format 1, then the escalation as `(factor, max_secs,
/// window_secs)`. Frozen like [`BlockV1`].
#[derive(Serialize, Deserialize)]
struct PolicyV2 {
    v1: PolicyV1,
    escalation: Option<(u32, u64, u64)>,
}

#[derive(Serialize, Deserialize)]
struct KindPolicyV1 {
    max_blocked_percent: Option<u8>,
    max_evacuating_percent: Option<u8>,
    max_blocked: Option<u64>,
    /// Per minute, burst.
    evacuations: Option<(u32, u32)>,
}

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

pub fn encode_block(block: &Block) -> Vec<u8> {
    encode_framed(BLOCK_V3, &provenance::block_v3(block))
}

#[cfg(test)]
fn block_v2(block: &Block) -> BlockV2 {
    BlockV2 {
        action: action_code(block.action),
        start: block.start,
        end: block.end,
        cause: block.cause.clone(),
        forced: block.forced.as_ref().map(forced_v1),
    }
}

fn block_from_v2(value: BlockV2) -> Result<Block, CodecError> {
    let mut block = block_from_v1(BlockV1 {
        action: value.action,
        start: value.start,
        end: value.end,
        cause: value.cause,
    })?;
    block.forced = value.forced.map(forced_from_v1);
    Ok(block)
}

fn forced_v1(f: &Forced) -> ForcedV1 {
    ForcedV1 {
        guards: f.guards.clone(),
        by: f.by.clone(),
        at: f.at,
    }
}

fn forced_from_v1(f: ForcedV1) -> Forced {
    Forced {
        guards: f.guards,
        by: f.by,
        at: f.at,
    }
}

fn action_code(action: Action) -> u8 {
    match action {
        Action::MarkBlocked => 0,
        Action::MarkBlockedAndEvacuateTasks => 1,
    }
}

#[cfg(test)]
fn block_v1(block: &Block) -> BlockV1 {
    BlockV1 {
        action: action_code(block.action),
        start: block.start,
        end: block.end,
        cause: block.cause.clone(),
    }
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

pub fn decode_block(bytes: &[u8]) -> Result<Block, CodecError> {
    match bytes.first() {
        Some(&BLOCK_V1) => block_from_v1(decode_framed(BLOCK_V1, bytes)?),
        Some(&BLOCK_V2) => block_from_v2(decode_framed(BLOCK_V2, bytes)?),
        _ => provenance::block_from_v3(decode_framed(BLOCK_V3, bytes)?),
    }
}

fn block_from_v1(value: BlockV1) -> Result<Block, CodecError> {
    let action = match value.action {
        0 => Action::MarkBlocked,
        1 => Action::MarkBlockedAndEvacuateTasks,
        other => return Err(CodecError::UnknownAction(other)),
    };
    // A block stored before provenance: one report, from an unknown source, at its start
    // (what the version 7 upgrade makes of it); revision 0 until it changes.
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

fn event_code(event: EventType) -> u8 {
    EventType::ALL
        .iter()
        .position(|t| *t == event)
        .expect("every event type is in ALL") as u8
}

/// The format-2/3 form of a change (what older versions wrote, for the fixtures).
#[cfg(test)]
fn change_v2(change: &Change) -> ChangeV2 {
    match change {
        Change::Item { kind, item } => ChangeV2::Item {
            kind: keys::kind_tag(*kind),
            id: item.id.clone(),
            block: block_v1(&item.block()),
        },
        Change::Registration { tm, node } => ChangeV2::Registration {
            tm: tm.clone(),
            node: node.clone(),
        },
        Change::Json(data) => ChangeV2::Json(data.clone()),
    }
}

/// The format-5 form of a change.
fn change_v4(change: &Change) -> ChangeV4 {
    match change {
        Change::Item { kind, item } => ChangeV4::Item {
            kind: keys::kind_tag(*kind),
            id: item.id.clone(),
            block: provenance::block_v3(&item.block()),
        },
        Change::Registration { tm, node } => ChangeV4::Registration {
            tm: tm.clone(),
            node: node.clone(),
        },
        Change::Json(data) => ChangeV4::Json(data.clone()),
    }
}

fn change_from_v4(change: ChangeV4) -> Result<Change, CodecError> {
    Ok(match change {
        ChangeV4::Item { kind, id, block } => Change::Item {
            kind: keys::kind_from_tag(kind).ok_or(CodecError::UnknownKind(kind))?,
            item: Item::new(id, provenance::block_from_v3(block)?),
        },
        ChangeV4::Registration { tm, node } => Change::Registration { tm, node },
        ChangeV4::Json(data) => Change::Json(data),
    })
}

/// The format-4 form of a change (what version 6 wrote, for the fixtures).
#[cfg(test)]
fn change_v3(change: &Change) -> ChangeV3 {
    match change {
        Change::Item { kind, item } => ChangeV3::Item {
            kind: keys::kind_tag(*kind),
            id: item.id.clone(),
            block: block_v2(&item.block()),
        },
        Change::Registration { tm, node } => ChangeV3::Registration {
            tm: tm.clone(),
            node: node.clone(),
        },
        Change::Json(data) => ChangeV3::Json(data.clone()),
    }
}

fn change_from_v3(change: ChangeV3) -> Result<Change, CodecError> {
    Ok(match change {
        ChangeV3::Item { kind, id, block } => Change::Item {
            kind: keys::kind_from_tag(kind).ok_or(CodecError::UnknownKind(kind))?,
            item: Item::new(id, block_from_v2(block)?),
        },
        ChangeV3::Registration { tm, node } => Change::Registration { tm, node },
        ChangeV3::Json(data) => Change::Json(data),
    })
}

fn change_from_v2(change: ChangeV2) -> Result<Change, CodecError> {
    Ok(match change {
        ChangeV2::Item { kind, id, block } => Change::Item {
            kind: keys::kind_from_tag(kind).ok_or(CodecError::UnknownKind(kind))?,
            item: Item::new(id, block_from_v1(block)?),
        },
        ChangeV2::Registration { tm, node } => Change::Registration { tm, node },
        ChangeV2::Json(data) => Change::Json(data),
    })
}

fn event_type(code: u8) -> Result<EventType, CodecError> {
    EventType::ALL
        .get(usize::from(code))
        .copied()
        .ok_or(CodecError::UnknownEvent(code))
}

/// Encodes one event in format 2 (schema 3), or format 1 for an event that came from a
/// format-1 value. The daemon writes chunks ([`encode_chunk`]); this stays for the fixtures
/// of what older versions wrote.
#[cfg(test)]
pub fn encode_event(event: &Event) -> Vec<u8> {
    let code = event_code(event.event);
    match &event.change {
        Change::Json(data) => encode_framed(
            EVENT_V1,
            &EventV1 {
                event: code,
                at: event.at,
                data: data.clone(),
            },
        ),
        change => encode_framed(
            EVENT_V2,
            &EventV2 {
                event: code,
                at: event.at,
                change: change_v2(change),
            },
        ),
    }
}

/// Splits the events of one transaction (consecutive revisions, one commit time) into
/// chunks of about [`CHUNK_BYTES`]: each is stored under its first event's revision.
pub fn chunks(events: &[Event]) -> impl Iterator<Item = &[Event]> {
    let mut rest = events;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut bytes = 0;
        let mut len = 0;
        while len < rest.len() && (len == 0 || bytes < CHUNK_BYTES) {
            bytes += approximate_size(&rest[len]);
            len += 1;
        }
        let (chunk, tail) = rest.split_at(len);
        rest = tail;
        Some(chunk)
    })
}

fn approximate_size(event: &Event) -> usize {
    const FIXED: usize = 32;
    FIXED
        + match &event.change {
            Change::Item { item, .. } => {
                item.id.len()
                    + item.cause.len()
                    + item.source.len()
                    + item.forced.as_ref().map_or(0, |_| MAX_FORCED_BYTES)
                    + provenance::MAX_PROVENANCE_BYTES
                    - crate::model::MAX_SOURCE_BYTES
            }
            Change::Registration { tm, node } => tm.len() + node.len(),
            Change::Json(data) => data.len(),
        }
}

/// Encodes the events of one chunk (see [`chunks`]) in format 5. All are from one
/// transaction, so they share its commit time.
pub fn encode_chunk(events: &[Event]) -> Vec<u8> {
    let at = events.first().map_or(0, |e| e.at);
    let events = events
        .iter()
        .map(|event| (event_code(event.event), change_v4(&event.change)))
        .collect();
    encode_framed(EVENTS_V5, &ChunkV5 { at, events })
}

/// Encodes a chunk in format 4, as schema version 6 wrote it (for the fixtures).
#[cfg(test)]
pub fn encode_chunk_v4(events: &[Event]) -> Vec<u8> {
    let at = events.first().map_or(0, |e| e.at);
    let events = events
        .iter()
        .map(|event| (event_code(event.event), change_v3(&event.change)))
        .collect();
    encode_framed(EVENTS_V4, &ChunkV4 { at, events })
}

/// Encodes a chunk in format 3, as schema versions 4 and 5 wrote it (for the fixtures).
#[cfg(test)]
pub fn encode_chunk_v3(events: &[Event]) -> Vec<u8> {
    let at = events.first().map_or(0, |e| e.at);
    let events = events
        .iter()
        .map(|event| (event_code(event.event), change_v2(&event.change)))
        .collect();
    encode_framed(EVENTS_V3, &ChunkV3 { at, events })
}

/// Decodes an `events` value stored under `first`: a chunk (format 3), or one event of an
/// older format. Revisions count up from `first`.
pub fn decode_events(first: u64, bytes: &[u8]) -> Result<Vec<Event>, CodecError> {
    let (&format, body) = bytes.split_first().ok_or(CodecError::Empty)?;
    let (at, events) = match format {
        EVENTS_V5 => {
            let chunk: ChunkV5 = decode_body(body)?;
            let events: Vec<_> = chunk
                .events
                .into_iter()
                .map(|(code, change)| Ok((code, change_from_v4(change)?)))
                .collect::<Result<_, CodecError>>()?;
            (chunk.at, events)
        }
        EVENTS_V4 => {
            let chunk: ChunkV4 = decode_body(body)?;
            let events: Vec<_> = chunk
                .events
                .into_iter()
                .map(|(code, change)| Ok((code, change_from_v3(change)?)))
                .collect::<Result<_, CodecError>>()?;
            (chunk.at, events)
        }
        EVENTS_V3 => {
            let chunk: ChunkV3 = decode_body(body)?;
            let events: Vec<_> = chunk
                .events
                .into_iter()
                .map(|(code, change)| Ok((code, change_from_v2(change)?)))
                .collect::<Result<_, CodecError>>()?;
            (chunk.at, events)
        }
        _ => return Ok(vec![decode_event(first, bytes)?]),
    };
    if events.is_empty() {
        return Err(CodecError::Decode("an empty chunk of events".into()));
    }
    events
        .into_iter()
        .zip(first..)
        .map(|((code, change), revision)| Ok(Event::new(revision, event_type(code)?, at, change)))
        .collect()
}

/// The commit time of an `events` value (of a chunk, the time all its events share),
/// without decoding the rest of a chunk.
pub fn events_at(bytes: &[u8]) -> Result<i64, CodecError> {
    let (&format, body) = bytes.split_first().ok_or(CodecError::Empty)?;
    if !matches!(format, EVENTS_V3 | EVENTS_V4 | EVENTS_V5) {
        return Ok(decode_event(0, bytes)?.at);
    }
    // `at` is the chunk's first field: decode it alone and leave the rest.
    let (at, _): (i64, usize) =
        bincode::serde::decode_from_slice(body, config().with_limit::<DECODE_LIMIT>())
            .map_err(|e| CodecError::Decode(e.to_string()))?;
    Ok(at)
}

/// Decodes a single-event value (formats 1 and 2) stored under `revision`.
fn decode_event(revision: u64, bytes: &[u8]) -> Result<Event, CodecError> {
    let (&format, body) = bytes.split_first().ok_or(CodecError::Empty)?;
    let (code, at, change) = match format {
        EVENT_V1 => {
            let value: EventV1 = decode_body(body)?;
            (value.event, value.at, Change::Json(value.data))
        }
        EVENT_V2 => {
            let value: EventV2 = decode_body(body)?;
            (value.event, value.at, change_from_v2(value.change)?)
        }
        other => return Err(CodecError::UnknownFormat(other)),
    };
    Ok(Event::new(revision, event_type(code)?, at, change))
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

#[cfg(test)]
mod tests;

pub mod provenance;
pub use provenance::{
    decode_history_count, decode_past, decode_report, encode_history_count, encode_past,
    encode_report,
};

/// The `allowlist` value of `entry` (its kind and id are the key).
pub fn encode_allow(entry: &Entry) -> Vec<u8> {
    encode_framed(
        ALLOW_V1,
        &AllowV1 {
            prefix: entry.prefix,
            comment: entry.comment.clone(),
            added_by: entry.added_by.clone(),
            added_at: entry.added_at,
            end: entry.end_timestamp,
        },
    )
}

/// The entry of `(kind, id)` from its `allowlist` value.
pub fn decode_allow(kind: Kind, id: &str, bytes: &[u8]) -> Result<Entry, CodecError> {
    let value: AllowV1 = decode_framed(ALLOW_V1, bytes)?;
    Ok(Entry {
        kind,
        id: id.to_owned(),
        prefix: value.prefix,
        comment: value.comment,
        added_by: value.added_by,
        added_at: value.added_at,
        end_timestamp: value.end,
    })
}

pub fn encode_policy(policy: &Policy) -> Vec<u8> {
    let kind = |of: &KindPolicy| KindPolicyV1 {
        max_blocked_percent: of.max_blocked_percent,
        max_evacuating_percent: of.max_evacuating_percent,
        max_blocked: of.max_blocked,
        evacuations: of.evacuations.map(|r| (r.per_minute, r.burst)),
    };
    encode_framed(
        POLICY_V2,
        &PolicyV2 {
            v1: PolicyV1 {
                nodes: kind(&policy.nodes),
                task_managers: kind(&policy.task_managers),
                min_registered: policy.min_registered,
                max_block_duration_secs: policy.max_block_duration_secs,
                permanent_blocks_allowed: policy.permanent_blocks_allowed,
            },
            escalation: policy
                .escalation
                .map(|e| (e.factor, e.max_secs, e.window_secs)),
        },
    )
}

pub fn decode_policy(bytes: &[u8]) -> Result<Policy, CodecError> {
    let (value, escalation) = match bytes.first() {
        Some(&POLICY_V1) => (decode_framed::<PolicyV1>(POLICY_V1, bytes)?, None),
        _ => {
            let value: PolicyV2 = decode_framed(POLICY_V2, bytes)?;
            (value.v1, value.escalation)
        }
    };
    let kind = |of: KindPolicyV1| KindPolicy {
        max_blocked_percent: of.max_blocked_percent,
        max_evacuating_percent: of.max_evacuating_percent,
        max_blocked: of.max_blocked,
        evacuations: of
            .evacuations
            .map(|(per_minute, burst)| Rate { per_minute, burst }),
    };
    Ok(Policy {
        nodes: kind(value.nodes),
        task_managers: kind(value.task_managers),
        min_registered: value.min_registered,
        max_block_duration_secs: value.max_block_duration_secs,
        permanent_blocks_allowed: value.permanent_blocks_allowed,
        escalation: escalation.map(|(factor, max_secs, window_secs)| Escalation {
            factor,
            max_secs,
            window_secs,
        }),
    })
}
