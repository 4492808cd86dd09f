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

/// Format byte of [`EventV2`], the `events` value of schema version 3.
pub const EVENT_V2: u8 = 2;

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
    /// 0 = MARK_BLOCKED, 1 = MARK_BLOCKED_AND_EVACUATE_TASKS.
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

/// Encodes an event in the current format (2). An event that came from a format-1 value
/// (finished JSON) is written back as format 1 — only the import of old data does that.
pub fn encode_event(event: &Event) -> Vec<u8> {
    let code = EventType::ALL
        .iter()
        .position(|t| *t == event.event)
        .expect("every event type is in ALL") as u8;
    let change = match &event.change {
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
        Change::Json(data) => {
            let value = EventV1 {
                event: code,
                at: event.at,
                data: data.clone(),
            };
            return encode_framed(EVENT_V1, &value);
        }
    };
    let value = EventV2 {
        event: code,
        at: event.at,
        change,
    };
    encode_framed(EVENT_V2, &value)
}

/// Decodes an `events` value stored under `revision`, of either format.
pub fn decode_event(revision: u64, bytes: &[u8]) -> Result<Event, CodecError> {
    let (&format, body) = bytes.split_first().ok_or(CodecError::Empty)?;
    let (code, at, change) = match format {
        EVENT_V1 => {
            let value: EventV1 = decode_body(body)?;
            (value.event, value.at, Change::Json(value.data))
        }
        EVENT_V2 => {
            let value: EventV2 = decode_body(body)?;
            let change = match value.change {
                ChangeV2::Item { kind, id, block } => Change::Item {
                    kind: keys::kind_from_tag(kind).ok_or(CodecError::UnknownKind(kind))?,
                    item: Item::new(id, block_from_v1(block)?),
                },
                ChangeV2::Registration { tm, node } => Change::Registration { tm, node },
            };
            (value.event, value.at, change)
        }
        other => return Err(CodecError::UnknownFormat(other)),
    };
    let event = *EventType::ALL
        .get(usize::from(code))
        .ok_or(CodecError::UnknownEvent(code))?;
    Ok(Event::new(revision, event, at, change))
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

    #[test]
    fn event_format_v2_fixture() {
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
                item: item.clone(),
            },
        );
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
        let registered = Event::new(
            8,
            EventType::Registered,
            2,
            Change::Registration {
                tm: "t1".into(),
                node: "n1".into(),
            },
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
}
