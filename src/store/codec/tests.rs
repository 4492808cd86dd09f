// Old formats are written here byte by byte, varints' little-endian tails included.
#![allow(clippy::little_endian_bytes)]

use super::block::*;
use super::events::*;
use super::guardrails::*;
use super::*;
use crate::model::{
    Action, Block, Change, Event, EventType, Forced, Item, Kind, Provenance, PERMANENT,
    UNKNOWN_SOURCE,
};
use crate::policy::{Policy, Rate};

fn block() -> Block {
    Block {
        action: Action::MarkBlockedAndEvacuateTasks,
        start: 1_700_000_000_000,
        end: PERMANENT,
        cause: "disk".into(),
        forced: None,
        provenance: Provenance::first("detector", 1_700_000_000_000),
        revision: 42,
        escalated: None,
    }
}

#[test]
fn round_trip() {
    let b = block();
    assert_eq!(decode_block(&encode_block(&b)), Ok(b));
}

/// The exact bytes of format 1 (schema versions 1 to 5), which still decode.
#[test]
fn format_v1_fixture() {
    let bytes = [&[BLOCK_V1][..], &bincode_v1(&block())].concat();
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
    assert_eq!(decode_block(expected), Ok(legacy(block())));
}

/// What a block stored before provenance reads as: one report from an unknown source at
/// its start, revision 0.
fn legacy(block: Block) -> Block {
    Block {
        provenance: Provenance::first(UNKNOWN_SOURCE, block.start),
        revision: 0,
        escalated: None,
        ..block
    }
}

/// The exact bytes of format 4, which the daemon writes. If this fails, the on-disk format
/// changed: add a new format byte and a migration instead of editing this fixture.
#[test]
fn format_v4_fixture() {
    let plain: &[u8] = &[
        4, // format byte
        1, // action: evacuate
        253, 0, 208, 202, 159, 23, 3, 0,
        0, // start, as in format 1 (nothing to be relative to)
        // end − start: zigzag varint of i64::MAX − 1_700_000_000_000 (permanent)
        253, 254, 47, 53, 96, 232, 252, 255, 255, 4, b'd', b'i', b's', b'k', // cause
        0,    // forced: none
        8, b'd', b'e', b't', b'e', b'c', b't', b'o', b'r', // source
        1,    // reports
        0,    // first report − start
        0,    // last report − first report
        84,   // revision: zigzag 42
        0,    // escalated: none
    ];
    assert_eq!(encode_block(&block()), plain);
    assert_eq!(decode_block(plain), Ok(block()));
    // An hour-long block from `unknown`, reported again 3 ms later, escalated.
    let mut b = block();
    b.end = b.start + 3_600_000;
    b.provenance = Provenance::first(UNKNOWN_SOURCE, b.start);
    b.provenance.reports = 2;
    b.provenance.last_report = b.start + 3;
    b.escalated = Some(crate::model::Escalated {
        requested_timeout: 2,
        timeout: 8,
        past_blocks: 2,
    });
    let bytes: &[u8] = &[
        4, 1, 253, 0, 208, 202, 159, 23, 3, 0, 0, // format, action, start
        252, 0, 221, 109, 0, // end − start: zigzag 3_600_000 (u32 marker 252 + 4 bytes)
        4, b'd', b'i', b's', b'k', 0, // cause, forced: none
        0, // source: empty for `unknown`
        2, 0, 6, 84, // reports, first − start, last − first (zigzag 3), revision
        1, 4, 16, 2, // escalated: some, zigzag 2, zigzag 8, 2
    ];
    assert_eq!(encode_block(&b), bytes);
    assert_eq!(decode_block(bytes), Ok(b));
    // Differences wrap: the extremes of every field round-trip.
    let mut extreme = block();
    extreme.start = i64::MIN;
    extreme.end = i64::MAX;
    extreme.provenance.first_report = i64::MAX;
    extreme.provenance.last_report = i64::MIN;
    extreme.revision = u64::MAX;
    assert_eq!(decode_block(&encode_block(&extreme)), Ok(extreme));
}

/// The exact bytes of format 3 (schema version 7), which still decode.
#[test]
fn format_v3_fixture() {
    let plain: &[u8] = &[
        3, // format byte
        1, // action: evacuate
        253, 0, 208, 202, 159, 23, 3, 0, 0, // start, as in format 1
        253, 254, 255, 255, 255, 255, 255, 255, 255, // end: permanent
        4, b'd', b'i', b's', b'k', // cause
        0,    // forced: none
        8, b'd', b'e', b't', b'e', b'c', b't', b'o', b'r', // source
        1,    // reports
        253, 0, 208, 202, 159, 23, 3, 0, 0, // first report
        253, 0, 208, 202, 159, 23, 3, 0, 0,  // last report
        42, // revision
        0,  // escalated: none
    ];
    assert_eq!(encode_block_v3(&block()), plain);
    assert_eq!(decode_block(plain), Ok(block()));
    let mut escalated = block();
    escalated.escalated = Some(crate::model::Escalated {
        requested_timeout: 2,
        timeout: 8,
        past_blocks: 2,
    });
    let mut bytes = plain[..plain.len() - 1].to_vec();
    bytes.extend_from_slice(&[1, 4, 16, 2]); // some: zigzag 2, zigzag 8, 2
    assert_eq!(encode_block_v3(&escalated), bytes);
    assert_eq!(decode_block(&bytes), Ok(escalated));
}

fn bincode_v1(block: &Block) -> Vec<u8> {
    encode_framed(BLOCK_V1, &block_v1(block))[1..].to_vec()
}

/// The exact bytes of format 2 (schema version 6), which still decode.
#[test]
fn format_v2_fixture() {
    let encode_v2 = |b: &Block| encode_framed(BLOCK_V2, &block_v2(b));
    let plain: &[u8] = &[
        2, // format byte
        1, // action: evacuate
        253, 0, 208, 202, 159, 23, 3, 0, 0, // start, as in format 1
        253, 254, 255, 255, 255, 255, 255, 255, 255, // end: permanent
        4, b'd', b'i', b's', b'k', // cause
        0,    // forced: none
    ];
    assert_eq!(encode_v2(&block()), plain);
    assert_eq!(decode_block(plain), Ok(legacy(block())));
    let mut forced = legacy(block());
    forced.forced = Some(Forced {
        guards: vec!["blocked-share".into()],
        by: Some("ops".into()),
        at: 3,
    });
    let mut bytes = plain[..plain.len() - 1].to_vec();
    bytes.extend_from_slice(&[1, 1, 13]); // some, one guard, its length
    bytes.extend_from_slice(b"blocked-share");
    bytes.extend_from_slice(&[1, 3, b'o', b'p', b's', 6]); // by: some "ops"; at: zigzag 3
    assert_eq!(encode_v2(&forced), bytes);
    assert_eq!(decode_block(&bytes), Ok(forced));
}

#[test]
fn allowlist_and_policy_format_fixtures() {
    let entry = crate::allowlist::Entry {
        kind: Kind::Node,
        id: "db-".into(),
        prefix: true,
        comment: "dbs".into(),
        added_by: None,
        added_at: 1,
        end_timestamp: Some(2),
    };
    // format, prefix, comment, added_by none, added_at zigzag 1, end some zigzag 2.
    let bytes = [1, 1, 3, b'd', b'b', b's', 0, 2, 1, 4];
    assert_eq!(encode_allow(&entry), bytes);
    assert_eq!(decode_allow(Kind::Node, "db-", &bytes), Ok(entry));
    let policy = Policy::default();
    // format 1 (schema 6, still decoded); nodes: 50 %, 20 %, no count, no rate; task
    // managers: 50 %, none, none, none; min_registered 10; no duration; permanent allowed.
    let bytes = [1, 1, 50, 1, 20, 0, 0, 1, 50, 0, 0, 0, 10, 0, 1];
    assert_eq!(decode_policy(&bytes), Ok(policy.clone()));
    // Format 2 (schema 7), which the daemon writes: format 1's fields, then the escalation
    // (none, or factor 2, max 3600 s as a u16 varint, window 86400 s as a u32 one).
    let mut v2 = bytes.to_vec();
    v2[0] = 2;
    v2.push(0);
    assert_eq!(encode_policy(&policy), v2);
    assert_eq!(decode_policy(&v2), Ok(policy.clone()));
    let mut escalating = policy;
    escalating.escalation = Some(crate::policy::Escalation {
        factor: 2,
        max_secs: 3_600,
        window_secs: 86_400,
    });
    let mut bytes = v2[..v2.len() - 1].to_vec();
    bytes.extend_from_slice(&[1, 2, 251, 0x10, 0x0e, 252, 0x80, 0x51, 0x01, 0x00]);
    assert_eq!(encode_policy(&escalating), bytes);
    assert_eq!(decode_policy(&bytes), Ok(escalating));
    let mut rated = Policy::OFF;
    rated.nodes.evacuations = Some(Rate {
        per_minute: 6,
        burst: 3,
    });
    assert_eq!(decode_policy(&encode_policy(&rated)), Ok(rated));
}

#[test]
fn event_format_v1_fixture() {
    // Format 1 (schema 2) stored the finished JSON; it still decodes.
    let event = Event::new(7, EventType::Expired, 2, Change::Json("{}".into()));
    let bytes = [1, 3, 4, 2, b'{', b'}'];
    assert_eq!(decode_event(7, &bytes), Ok(event.clone()));
    assert_eq!(event.data(), "{}");
    assert_eq!(encode_event(&event), bytes);
    assert!(decode_event(7, &[1, 99, 4, 2, b'{', b'}']).is_err());
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
            forced: None,
            provenance: Provenance::first(UNKNOWN_SOURCE, 5),
            revision: 0,
            escalated: None,
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
            "endTimestamp": 9, "cause": "c", "source": "unknown", "reportCount": 1,
            "firstReportTimestamp": 5, "lastReportTimestamp": 5, "revision": 0})
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
        3, 4, 2, 3, 0, b'T', 2, b't', b'1', 1, 10, 18, 1, b'c', 4, 1, 2, b't', b'1', 2, b'n', b'1',
    ];
    assert_eq!(encode_chunk_v3(&chunk), bytes);
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

/// The exact bytes of format 4 (schema version 6), which still decode.
#[test]
fn events_format_v4_fixture() {
    let (expired, registered) = fixture_events();
    let policy = Event::new(9, EventType::PolicyChanged, 2, Change::Json("{}".into()));
    let chunk = [expired, registered, policy];
    // format 4, at, three events: the item with its block in format 2 (forced: none), the
    // registration, and a JSON change (variant 2).
    let bytes = [
        4, 4, 3, 3, 0, b'T', 2, b't', b'1', 1, 10, 18, 1, b'c', 0, 4, 1, 2, b't', b'1', 2, b'n',
        b'1', 6, 2, 2, b'{', b'}',
    ];
    assert_eq!(encode_chunk_v4(&chunk), bytes);
    assert_eq!(decode_events(7, &bytes), Ok(chunk.to_vec()));
    assert_eq!(events_at(&bytes), Ok(2));
}

/// The exact bytes of format 6, which the daemon writes.
#[test]
fn events_format_v6_fixture() {
    let (expired, registered) = fixture_events();
    let policy = Event::new(9, EventType::PolicyChanged, 2, Change::Json("{}".into()));
    let chunk = [expired, registered, policy];
    // format 6, at, three events: the item with its block in format 4 relative to the
    // chunk's time 2 and the event's revision 7 (start zigzag 3, end − start zigzag 4;
    // forced: none; source empty for `unknown`, 1 report, first and last at the start,
    // revision 0 − 7 = zigzag −7, not escalated), the registration, and a JSON change.
    let bytes = [
        6, 4, 3, 3, 0, b'T', 2, b't', b'1', 1, 6, 8, 1, b'c', 0, 0, 1, 0, 0, 13, 0, 4, 1, 2, b't',
        b'1', 2, b'n', b'1', 6, 2, 2, b'{', b'}',
    ];
    assert_eq!(encode_chunk(&chunk), bytes);
    assert_eq!(decode_events(7, &bytes), Ok(chunk.to_vec()));
    assert_eq!(events_at(&bytes), Ok(2));
}

/// The exact bytes of format 5 (schema version 7), which still decode.
#[test]
fn events_format_v5_fixture() {
    let (expired, registered) = fixture_events();
    let policy = Event::new(9, EventType::PolicyChanged, 2, Change::Json("{}".into()));
    let chunk = [expired, registered, policy];
    // format 5, at, three events: the item with its block in format 3 (forced: none;
    // source "unknown", 1 report, first and last at zigzag 5, revision 0, not escalated),
    // the registration, and a JSON change (variant 2).
    let bytes = [
        5, 4, 3, 3, 0, b'T', 2, b't', b'1', 1, 10, 18, 1, b'c', 0, 7, b'u', b'n', b'k', b'n', b'o',
        b'w', b'n', 1, 10, 10, 0, 0, 4, 1, 2, b't', b'1', 2, b'n', b'1', 6, 2, 2, b'{', b'}',
    ];
    assert_eq!(encode_chunk_v5(&chunk), bytes);
    assert_eq!(decode_events(7, &bytes), Ok(chunk.to_vec()));
    assert_eq!(events_at(&bytes), Ok(2));
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
        forced: Some(Forced {
            guards: crate::policy::Guard::ALL
                .map(|g| g.as_str().to_owned())
                .to_vec(),
            by: Some("n".repeat(MAX_TOKEN_NAME_BYTES)),
            at: i64::MIN,
        }),
        provenance: Provenance {
            source: "s".repeat(crate::model::MAX_SOURCE_BYTES),
            reports: u64::MAX,
            first_report: i64::MIN,
            last_report: i64::MIN,
        },
        revision: u64::MAX,
        escalated: Some(crate::model::Escalated {
            requested_timeout: i64::MIN,
            timeout: i64::MIN,
            past_blocks: u32::MAX,
        }),
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
            item.cause = "c".repeat(CHUNK_BYTES / 2 - 32 - MAX_ID_BYTES - 1 - MAX_PROVENANCE_BYTES);
            item.forced = None;
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

/// A history counter whose first entry is past its next is corrupt, not a huge range.
#[test]
fn a_history_counter_with_first_past_next_does_not_decode() {
    assert_eq!(
        decode_history_count(&encode_history_count(3, 7)),
        Ok((3, 7))
    );
    assert_eq!(
        decode_history_count(&encode_history_count(7, 7)),
        Ok((7, 7))
    );
    assert!(matches!(
        decode_history_count(&encode_history_count(8, 7)),
        Err(CodecError::Decode(_))
    ));
}

/// The exact bytes of a past block in format 2, which the daemon writes, and in format 1
/// (schema version 7), which still decodes.
#[test]
fn past_format_fixtures() {
    use crate::provenance::{Ended, Ending};
    let mut b = block();
    b.end = b.start + 3_600_000;
    let ending = Ending {
        how: Ended::Expired,
        timestamp: b.end + 12,
        source: None,
        reason: None,
    };
    let block_v4 = &encode_block(&b)[1..];
    let v2 = [&[2][..], block_v4, &[3, 24, 0, 0]].concat(); // expired, 12 ms after its end
    assert_eq!(encode_past(&b, &ending), v2);
    assert_eq!(decode_past(&v2), Ok((b.clone(), ending.clone())));
    let removed = Ending {
        how: Ended::Removed,
        timestamp: b.start + 1,
        source: Some("op".into()),
        reason: Some("r".into()),
    };
    assert_eq!(
        decode_past(&encode_past(&b, &removed)),
        Ok((b.clone(), removed))
    );
    // Format 1: the block in format 3, the time whole.
    let at = ending.timestamp;
    let mut at_bytes = vec![253];
    at_bytes.extend_from_slice(&(2 * at as u64).to_le_bytes());
    let v1 = [
        &[1][..],
        &encode_block_v3(&b)[1..],
        &[3],
        &at_bytes,
        &[0, 0],
    ]
    .concat();
    assert_eq!(provenance::encode_past_v1(&b, &ending), v1);
    assert_eq!(decode_past(&v1), Ok((b, ending)));
}
