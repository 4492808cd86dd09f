//! `events` values: the change log's chunks (format 6, and the formats 1 to 5 older
//! versions wrote), how a transaction's events are cut into chunks, and their size bound.
//! Frozen like every value struct of [`super`].

use serde::{Deserialize, Serialize};

use super::block::{
    block_from_v1, block_from_v2, block_from_v3, block_from_v4, block_v4, max_block_bytes, Base,
    BlockV1, BlockV2, BlockV3, BlockV4, MAX_FORCED_BYTES, MAX_PROVENANCE_BYTES,
};
#[cfg(test)]
use super::block::{block_v1, block_v2, block_v3};
use super::{config, decode_body, encode_framed, CodecError, DECODE_LIMIT, VARINT};
use super::{EVENTS_V3, EVENTS_V4, EVENTS_V5, EVENTS_V6, EVENT_V1, EVENT_V2};
use crate::model::{Change, Event, EventType, Item};
use crate::store::keys;

/// About how many bytes of events one chunk holds before the next starts. A chunk is cut
/// once its events' [`approximate_size`]s reach this, so it holds at most this plus one
/// event ([`max_chunk_bytes`]); 17 of those make a leaf of the event log, which must stay
/// under sled's blob threshold (`super::blobs`).
pub const CHUNK_BYTES: usize = 4096;

/// The largest encoding of one event of a chunk, for ids of `id` and causes of `cause`
/// bytes: event code, change tag, then the larger of an item change (kind byte, id, block)
/// and a registration (two ids).
pub(super) const fn max_event_bytes(id: usize, cause: usize) -> usize {
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

/// Events value, format 6: format 5 with items as [`BlockV4`], each relative to the chunk's
/// `at` and its event's revision ([`Base`]). Frozen like [`BlockV1`].
#[derive(Serialize, Deserialize)]
struct ChunkV6 {
    at: i64,
    events: Vec<(u8, ChangeV5)>,
}

/// What a format-6 event records. Frozen: variant order is the on-disk tag.
#[derive(Serialize, Deserialize)]
enum ChangeV5 {
    Item {
        kind: u8,
        id: String,
        block: BlockV4,
    },
    Registration {
        tm: String,
        node: String,
    },
    Json(String),
}

/// Events value, format 5: format 4 with items as [`BlockV3`]. Frozen like
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
        block: BlockV3,
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

pub(super) fn event_code(event: EventType) -> u8 {
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

/// The format-6 form of a change, relative to `base`.
fn change_v5(change: &Change, base: Base) -> ChangeV5 {
    match change {
        Change::Item { kind, item } => ChangeV5::Item {
            kind: keys::kind_tag(*kind),
            id: item.id.clone(),
            block: block_v4(&item.block(), base),
        },
        Change::Registration { tm, node } => ChangeV5::Registration {
            tm: tm.clone(),
            node: node.clone(),
        },
        Change::Json(data) => ChangeV5::Json(data.clone()),
    }
}

fn change_from_v5(change: ChangeV5, base: Base) -> Result<Change, CodecError> {
    Ok(match change {
        ChangeV5::Item { kind, id, block } => Change::Item {
            kind: keys::kind_from_tag(kind).ok_or(CodecError::UnknownKind(kind))?,
            item: Item::new(id, block_from_v4(block, base)?),
        },
        ChangeV5::Registration { tm, node } => Change::Registration { tm, node },
        ChangeV5::Json(data) => Change::Json(data),
    })
}

/// The format-5 form of a change (what version 7 wrote, for the fixtures).
#[cfg(test)]
fn change_v4(change: &Change) -> ChangeV4 {
    match change {
        Change::Item { kind, item } => ChangeV4::Item {
            kind: keys::kind_tag(*kind),
            id: item.id.clone(),
            block: block_v3(&item.block()),
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
            item: Item::new(id, block_from_v3(block)?),
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

pub(super) fn event_type(code: u8) -> Result<EventType, CodecError> {
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

pub(super) fn approximate_size(event: &Event) -> usize {
    const FIXED: usize = 32;
    FIXED
        + match &event.change {
            Change::Item { item, .. } => {
                item.id.len()
                    + item.cause.len()
                    + item.source.len()
                    + item.forced.as_ref().map_or(0, |_| MAX_FORCED_BYTES)
                    + MAX_PROVENANCE_BYTES
                    - crate::model::MAX_SOURCE_BYTES
            }
            Change::Registration { tm, node } => tm.len() + node.len(),
            Change::Json(data) => data.len(),
        }
}

/// Encodes the events of one chunk (see [`chunks`]) in format 6. All are from one
/// transaction, so they share its commit time.
pub fn encode_chunk(events: &[Event]) -> Vec<u8> {
    let at = events.first().map_or(0, |e| e.at);
    let events = events
        .iter()
        .map(|event| {
            let base = Base {
                time: at,
                revision: event.revision,
            };
            (event_code(event.event), change_v5(&event.change, base))
        })
        .collect();
    encode_framed(EVENTS_V6, &ChunkV6 { at, events })
}

/// Encodes a chunk in format 5, as schema version 7 wrote it (for the fixtures).
#[cfg(test)]
pub fn encode_chunk_v5(events: &[Event]) -> Vec<u8> {
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
        EVENTS_V6 => {
            let chunk: ChunkV6 = decode_body(body)?;
            let at = chunk.at;
            let events: Vec<_> = chunk
                .events
                .into_iter()
                .zip(first..)
                .map(|((code, change), revision)| {
                    Ok((code, change_from_v5(change, Base { time: at, revision })?))
                })
                .collect::<Result<_, CodecError>>()?;
            (at, events)
        }
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
    if !matches!(format, EVENTS_V3 | EVENTS_V4 | EVENTS_V5 | EVENTS_V6) {
        return Ok(decode_event(0, bytes)?.at);
    }
    // `at` is the chunk's first field: decode it alone and leave the rest.
    let (at, _): (i64, usize) =
        bincode::serde::decode_from_slice(body, config().with_limit::<DECODE_LIMIT>())
            .map_err(|e| CodecError::Decode(e.to_string()))?;
    Ok(at)
}

/// Decodes a single-event value (formats 1 and 2) stored under `revision`.
pub(super) fn decode_event(revision: u64, bytes: &[u8]) -> Result<Event, CodecError> {
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
