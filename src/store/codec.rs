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
use crate::model::{Action, Block, Change, Event, EventType, Item};

/// Format byte of [`BlockV1`], the item value of schema version 1.
pub const BLOCK_V1: u8 = 1;

/// Format byte of a registration value (`tm_node`): the node id's UTF-8 bytes follow.
pub const REGISTRATION_V1: u8 = 1;

/// Format byte of [`EventV1`], an `events` value of schema version 2 (still decoded).
pub const EVENT_V1: u8 = 1;

/// Format byte of [`EventV2`], the `events` value of schema version 3 (still decoded).
pub const EVENT_V2: u8 = 2;

/// Format byte of [`ChunkV3`], the `events` value of schema version 4: the events of one
/// transaction, with consecutive revisions from the one in the key.
pub const EVENTS_V3: u8 = 3;

/// About how many bytes of events one chunk holds before the next starts. A chunk is cut
/// once its events' [`approximate_size`]s reach this, so it holds at most this plus one
/// event ([`max_chunk_bytes`]); 17 of those make a leaf of the event log, which must stay
/// under sled's blob threshold (`super::blobs`).
pub const CHUNK_BYTES: usize = 4096;

/// bincode's varint (standard config) takes at most 9 bytes for any integer we store.
const VARINT: usize = 9;

/// The largest `items` value whose cause has `cause` bytes: the format byte, then
/// [`BlockV1`] (action byte, two varint times, the cause with its length).
pub const fn max_block_bytes(cause: usize) -> usize {
    1 + 1 + VARINT + VARINT + VARINT + cause
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

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

pub fn encode_block(block: &Block) -> Vec<u8> {
    encode_framed(BLOCK_V1, &block_v1(block))
}

fn action_code(action: Action) -> u8 {
    match action {
        Action::MarkBlocked => 0,
        Action::MarkBlockedAndEvacuateTasks => 1,
    }
}

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
    block_from_v1(decode_framed(BLOCK_V1, bytes)?)
}

fn block_from_v1(value: BlockV1) -> Result<Block, CodecError> {
    let action = match value.action {
        0 => Action::MarkBlocked,
        1 => Action::MarkBlockedAndEvacuateTasks,
        other => return Err(CodecError::UnknownAction(other)),
    };
    Ok(Block {
        action,
        start: value.start,
        end: value.end,
        cause: value.cause,
    })
}

fn event_code(event: EventType) -> u8 {
    EventType::ALL
        .iter()
        .position(|t| *t == event)
        .expect("every event type is in ALL") as u8
}

/// The format-2/3 form of a change.
fn change_v2(change: &Change) -> ChangeV2 {
    match change {
        Change::Item { kind, item } => ChangeV2::Item {
            kind: keys::kind_tag(*kind),
            id: item.id.clone(),
            block: BlockV1 {
                action: action_code(item.action),
                start: item.start_timestamp,
                end: item.end_timestamp,
                cause: item.cause.clone(),
            },
        },
        Change::Registration { tm, node } => ChangeV2::Registration {
            tm: tm.clone(),
            node: node.clone(),
        },
        Change::Json(data) => ChangeV2::Json(data.clone()),
    }
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
            Change::Item { item, .. } => item.id.len() + item.cause.len(),
            Change::Registration { tm, node } => tm.len() + node.len(),
            Change::Json(data) => data.len(),
        }
}

/// Encodes the events of one chunk (see [`chunks`]) in format 3. All are from one
/// transaction, so they share its commit time.
pub fn encode_chunk(events: &[Event]) -> Vec<u8> {
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
    if format != EVENTS_V3 {
        return Ok(vec![decode_event(first, bytes)?]);
    }
    let chunk: ChunkV3 = decode_body(body)?;
    if chunk.events.is_empty() {
        return Err(CodecError::Decode("an empty chunk of events".into()));
    }
    chunk
        .events
        .into_iter()
        .zip(first..)
        .map(|((code, change), revision)| {
            Ok(Event::new(
                revision,
                event_type(code)?,
                chunk.at,
                change_from_v2(change)?,
            ))
        })
        .collect()
}

/// The commit time of an `events` value (of a chunk, the time all its events share),
/// without decoding the rest of a chunk.
pub fn events_at(bytes: &[u8]) -> Result<i64, CodecError> {
    let (&format, body) = bytes.split_first().ok_or(CodecError::Empty)?;
    if format != EVENTS_V3 {
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
mod tests {
    use super::*;
    use crate::model::{Kind, PERMANENT};

    fn block() -> Block {
        Block {
            action: Action::MarkBlockedAndEvacuateTasks,
            start: 1_700_000_000_000,
            end: PERMANENT,
            cause: "disk".into(),
        }
    }

    #[test]
    fn round_trip() {
        let b = block();
        assert_eq!(decode_block(&encode_block(&b)), Ok(b));
    }

    /// The exact bytes of format 1. If this fails, the on-disk format changed: add a new
    /// format byte and a migration instead of editing this fixture.
    #[test]
    fn format_v1_fixture() {
        let bytes = encode_block(&block());
        let expected: &[u8] = &[
            1, // format byte
            1, // action: evacuate
            // start: zigzag varint of 1_700_000_000_000 (u64 marker 253 + 8 bytes LE)
            253, 0, 208, 202, 159, 23, 3, 0, 0,
            // end: zigzag varint of i64::MAX = u64::MAX - 1
            253, 254, 255, 255, 255, 255, 255, 255, 255, 4, b'd', b'i', b's',
            b'k', // cause: length + bytes
        ];
        assert_eq!(bytes, expected);
        assert_eq!(decode_block(expected), Ok(block()));
    }

    #[test]
    fn event_format_v1_fixture() {
        // Format 1 (schema 2) stored the finished JSON; it still decodes.
        let event = Event::new(7, EventType::Expired, 2, Change::Json("{}".into()));
        let bytes = [1, 3, 4, 2, b'{', b'}'];
        assert_eq!(decode_event(7, &bytes), Ok(event.clone()));
        assert_eq!(event.data(), "{}");
        assert_eq!(encode_event(&event), bytes);
        assert!(decode_event(7, &[1, 9, 4, 2, b'{', b'}']).is_err());
    }

    /// Revision 7: task manager t1 expired; revision 8: t1 registered on n1; both at 2.
    fn fixture_events() -> (Event, Event) {
        let item = Item::new(
            "t1".into(),
            Block {
                action: Action::MarkBlockedAndEvacuateTasks,
                start: 5,
                end: 9,
                cause: "c".into(),
            },
        );
        let expired = Event::new(
            7,
            EventType::Expired,
            2,
            Change::Item {
                kind: Kind::TaskManager,
                item,
            },
        );
        let registered = Event::new(
            8,
            EventType::Registered,
            2,
            Change::Registration {
                tm: "t1".into(),
                node: "n1".into(),
            },
        );
        (expired, registered)
    }

    #[test]
    fn event_format_v2_fixture() {
        let (expired, registered) = fixture_events();
        // format, event code, at (zigzag 2), variant 0, kind 'T', id "t1", then the block as
        // in format 1 of items: action 1, start zigzag 5, end zigzag 9, cause "c".
        let bytes = [2, 3, 4, 0, b'T', 2, b't', b'1', 1, 10, 18, 1, b'c'];
        assert_eq!(encode_event(&expired), bytes);
        assert_eq!(decode_event(7, &bytes), Ok(expired.clone()));
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(expired.data()).unwrap(),
            serde_json::json!({"kind": "taskmanager", "id": "t1",
                "action": "MARK_BLOCKED_AND_EVACUATE_TASKS", "startTimestamp": 5,
                "endTimestamp": 9, "cause": "c"})
        );
        let bytes = [2, 4, 4, 1, 2, b't', b'1', 2, b'n', b'1'];
        assert_eq!(encode_event(&registered), bytes);
        assert_eq!(decode_event(8, &bytes), Ok(registered.clone()));
        assert_eq!(registered.data(), r#"{"id":"t1","node":"n1"}"#);
        // An unknown kind byte or format is refused.
        assert_eq!(
            decode_event(7, &[2, 3, 4, 0, b'X', 2, b't', b'1', 1, 10, 18, 1, b'c']),
            Err(CodecError::UnknownKind(b'X'))
        );
        assert_eq!(decode_event(7, &[3]), Err(CodecError::UnknownFormat(3)));
    }

    #[test]
    fn registration_format_v1_fixture() {
        assert_eq!(encode_registration("n1"), [1, b'n', b'1']);
        assert_eq!(decode_registration(&[1, b'n', b'1']), Ok("n1".to_owned()));
        assert_eq!(
            decode_registration(&[2, b'n']),
            Err(CodecError::UnknownFormat(2))
        );
        assert!(decode_registration(&[1, 0xff]).is_err());
    }

    #[test]
    fn rejects_bad_values() {
        let good = encode_block(&block());
        assert_eq!(decode_block(&[]), Err(CodecError::Empty));
        let mut wrong_format = good.clone();
        wrong_format[0] = 9;
        assert_eq!(
            decode_block(&wrong_format),
            Err(CodecError::UnknownFormat(9))
        );
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(decode_block(&trailing), Err(CodecError::Trailing(1)));
        assert!(matches!(
            decode_block(&good[..good.len() - 2]),
            Err(CodecError::Decode(_))
        ));
        let mut bad_action = good;
        bad_action[1] = 7;
        assert_eq!(decode_block(&bad_action), Err(CodecError::UnknownAction(7)));
        // A huge length prefix for the cause must not allocate it.
        let huge = [1, 0, 0, 0, 252, 255, 255, 255, 255];
        assert!(decode_block(&huge).is_err());
    }

    #[test]
    fn events_format_v3_fixture() {
        let (expired, registered) = fixture_events();
        let chunk = [expired.clone(), registered.clone()];
        // format 3, at (zigzag 2), two events; each: event code, then the change as in
        // format 2 (variant, fields).
        let bytes = [
            3, 4, 2, 3, 0, b'T', 2, b't', b'1', 1, 10, 18, 1, b'c', 4, 1, 2, b't', b'1', 2, b'n',
            b'1',
        ];
        assert_eq!(encode_chunk(&chunk), bytes);
        assert_eq!(decode_events(7, &bytes), Ok(chunk.to_vec()));
        assert_eq!(events_at(&bytes), Ok(2));
        // Older single-event values read as chunks of one.
        assert_eq!(
            decode_events(7, &encode_event(&expired)),
            Ok(vec![expired.clone()])
        );
        assert_eq!(events_at(&encode_event(&expired)), Ok(2));
        // An empty chunk, or trailing bytes, are refused.
        assert!(decode_events(7, &[3, 4, 0]).is_err());
        let mut trailing = bytes.to_vec();
        trailing.push(0);
        assert_eq!(decode_events(7, &trailing), Err(CodecError::Trailing(1)));
    }

    #[test]
    fn chunks_cut_by_size_and_never_empty() {
        let event = |revision: u64, cause_len: usize| {
            Event::new(
                revision,
                EventType::Added,
                1,
                Change::Item {
                    kind: Kind::Node,
                    item: Item::new("n".into(), {
                        let mut b = block();
                        b.cause = "c".repeat(cause_len);
                        b
                    }),
                },
            )
        };
        assert_eq!(chunks(&[]).count(), 0);
        // One event larger than a chunk still gets one of its own.
        let big = [event(1, CHUNK_BYTES * 2), event(2, 1)];
        let lens: Vec<usize> = chunks(&big).map(<[Event]>::len).collect();
        assert_eq!(lens, [1, 1]);
        // Many small ones: every chunk but the last holds about CHUNK_BYTES.
        let small: Vec<Event> = (1..=1000).map(|r| event(r, 60)).collect();
        let cut: Vec<&[Event]> = chunks(&small).collect();
        assert!(cut.len() > 1 && cut.len() < 100, "{} chunks", cut.len());
        assert_eq!(cut.iter().map(|c| c.len()).sum::<usize>(), 1000);
        for chunk in &cut {
            let encoded = encode_chunk(chunk);
            assert!(encoded.len() < 2 * CHUNK_BYTES, "{} bytes", encoded.len());
            assert_eq!(
                decode_events(chunk[0].revision, &encoded).unwrap(),
                chunk.to_vec()
            );
        }
    }

    /// The bounds the blob budget (`super::blobs`) is built on hold for the largest values
    /// the API lets through: ids of 256 bytes, merged causes of 16 KiB, times as large as
    /// they go.
    #[test]
    fn the_largest_values_stay_within_their_bounds() {
        use crate::model::{MAX_ID_BYTES, MAX_MERGED_CAUSE_BYTES};
        let worst = Block {
            action: Action::MarkBlockedAndEvacuateTasks,
            start: i64::MIN,
            end: PERMANENT,
            cause: "c".repeat(MAX_MERGED_CAUSE_BYTES),
        };
        assert!(encode_block(&worst).len() <= max_block_bytes(MAX_MERGED_CAUSE_BYTES));
        let id = "i".repeat(MAX_ID_BYTES);
        let item = |revision| {
            Event::new(
                revision,
                EventType::Merged,
                i64::MAX,
                Change::Item {
                    kind: Kind::TaskManager,
                    item: Item::new(id.clone(), worst.clone()),
                },
            )
        };
        let registration = Event::new(
            1,
            EventType::Registered,
            i64::MAX,
            Change::Registration {
                tm: id.clone(),
                node: id.clone(),
            },
        );
        for event in [item(1), registration] {
            let one = encode_chunk(std::slice::from_ref(&event)).len() - (1 + 9 + 1);
            assert!(
                one <= approximate_size(&event),
                "{one} > its approximate size"
            );
            assert!(one <= max_event_bytes(MAX_ID_BYTES, MAX_MERGED_CAUSE_BYTES));
        }
        // Events just under the cut, then the largest one.
        let small = |revision| {
            let mut event = item(revision);
            if let Change::Item { item, .. } = &mut event.change {
                item.cause = "c".repeat(CHUNK_BYTES / 2 - 32 - MAX_ID_BYTES - 1);
            }
            event
        };
        let events = [small(1), small(2), item(3)];
        let cut: Vec<&[Event]> = chunks(&events).collect();
        assert_eq!(cut[0].len(), 3, "the largest event joins the chunk");
        let bytes = encode_chunk(cut[0]).len();
        assert!(
            bytes <= max_chunk_bytes(MAX_ID_BYTES, MAX_MERGED_CAUSE_BYTES),
            "{bytes}"
        );
    }
}
