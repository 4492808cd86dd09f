//! Every key encoding of the store, in one place.
//!
//! ```text
//! items   key: kind(1) ++ id(1..=256)                 value: codec::Block
//! expiry  key: end(8, big-endian u64) ++ kind(1) ++ id   value: empty
//!         key: end(8) ++ allow tag(1) ++ id           value: empty (schema 6)
//! allowlist key: kind(1) ++ id                        value: codec allowlist entry (schema 6)
//! meta    key: b"schema_version"                      value: u32 big-endian
//!         key: b"revision"                            value: u64 big-endian (schema 2)
//!         key: b"item_counts"                         value: 4 × u64 big-endian (schema 2)
//!         key: b"expiry_watermark"                    value: an expiry key (schema 5)
//!         key: b"unreclaimed"                         value: u64 big-endian (schema 5)
//!         key: b"policy"                              value: codec policy (schema 6)
//! events  key: revision (8, big-endian u64)           value: codec event (schema 2)
//! tm_node   key: task manager id                      value: codec registration (its node)
//! node_tms  key: node id ++ 0x00 ++ task manager id   value: empty
//! reports   key: kind(1) ++ id ++ 0x00 ++ slot(8)     value: codec report (schema 7)
//! history   key: kind(1) ++ id                        value: codec history counter (schema 7)
//!           key: kind(1) ++ id ++ 0x00 ++ n(8)        value: codec past block (schema 7)
//! history_ends key: ended(8) ++ kind(1) ++ id ++ 0x00 ++ n(8)   value: empty (schema 7)
//! live      key: kind(1) ++ id                        value: codec roster (schema 10)
//!           key: kind(1) ++ id ++ 0x00 ++ source      value: codec live report (schema 10)
//! idempotency key: 'k' ++ Idempotency-Key             value: codec record head
//!             key: 'k' ++ Idempotency-Key ++ 0x00 ++ chunk (4, big-endian u32)
//!                                                     value: ≤ 8 KiB of the response
//!             key: 't' ++ committed at (8, big-endian u64) ++ Idempotency-Key
//!                                                     value: empty
//! ```
//!
//! `n` and `slot` are big-endian u64s. A past block's `n` counts an id's past blocks from
//! 0, so byte order is arrival order within an id. A report's slot is its number (counting
//! the item's reports from 0) modulo [`MAX_REPORTS`]: an item's reports are a ring of fixed
//! keys, each new one overwriting the oldest, so a detector re-reporting a hot id rewrites
//! one key instead of adding one and deleting another (which, at the two ends of the id's
//! range, would split and merge the tree's leaves all the time). Slot 0 may be absent while
//! the item's one report is the one the item implies (`commit::Tx::add_reports`).
//!
//! `node_tms` is the node → task managers index. The 0x00 separator is unambiguous because
//! ids never hold control characters, so the prefix `node ++ 0x00` matches exactly the
//! entries of that node (`n1` never matches `n10`).
//!
//! Invariant of the expiry key: byte order equals time order, so `range(..=due_bound(now))`
//! is exactly the set of items due at `now`. That holds because `end` is non-negative (it
//! is a future unix-ms time when written) and big-endian. Permanent items are not indexed.
// Byte order is this module's format: every key's layout (see the workspace lints in
// Cargo.toml).
#![allow(clippy::big_endian_bytes)]

use crate::model::Kind;
use crate::provenance::MAX_REPORTS;

/// Tag byte of a kind, the first byte of an item key and the ninth of an expiry key.
pub fn kind_tag(kind: Kind) -> u8 {
    match kind {
        Kind::TaskManager => b'T',
        Kind::Node => b'N',
    }
}

pub fn kind_from_tag(tag: u8) -> Option<Kind> {
    match tag {
        b'T' => Some(Kind::TaskManager),
        b'N' => Some(Kind::Node),
        _ => None,
    }
}

/// `items` key of `(kind, id)`.
pub fn item_key(kind: Kind, id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + id.len());
    key.push(kind_tag(kind));
    key.extend_from_slice(id.as_bytes());
    key
}

/// The `items` key prefix holding every item of `kind`.
pub fn item_prefix(kind: Kind) -> [u8; 1] {
    [kind_tag(kind)]
}

/// The smallest key greater than every `items` key of `kind` (the next tag byte): a listing
/// resumed after an id scans up to it, exclusive.
pub fn item_prefix_end(kind: Kind) -> [u8; 1] {
    [kind_tag(kind) + 1]
}

/// Splits an `items` key into kind and id.
pub fn parse_item_key(key: &[u8]) -> Option<(Kind, &str)> {
    let (&tag, id) = key.split_first()?;
    Some((kind_from_tag(tag)?, std::str::from_utf8(id).ok()?))
}

const END_LEN: usize = 8;

/// `expiry` key of an item ending at `end` (unix ms, non-negative).
pub fn expiry_key(end: i64, kind: Kind, id: &str) -> Vec<u8> {
    debug_assert!(end >= 0, "expiry keys need a non-negative end");
    let mut key = Vec::with_capacity(END_LEN + 1 + id.len());
    key.extend_from_slice(&(end as u64).to_be_bytes());
    key.push(kind_tag(kind));
    key.extend_from_slice(id.as_bytes());
    key
}

/// The smallest key greater than every expiry key with `end <= now`: scanning the expiry
/// tree below it yields exactly the items due at `now`.
pub fn due_bound(now: i64) -> [u8; END_LEN] {
    (now.max(-1) as u64).wrapping_add(1).to_be_bytes()
}

/// Splits an item's `expiry` key into end, kind and id; `None` for an allowlist entry's
/// key (see [`parse_expiry_target`]) or a malformed one.
pub fn parse_expiry_key(key: &[u8]) -> Option<(i64, Kind, &str)> {
    match parse_expiry_target(key)? {
        (end, Expiring::Item(kind), id) => Some((end, kind, id)),
        (_, Expiring::Allow(_), _) => None,
    }
}

/// What an `expiry` entry is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiring {
    Item(Kind),
    /// An allowlist entry of the kind.
    Allow(Kind),
}

/// Tag byte of an allowlist entry's expiry key: the kind's tag in lower case, so an
/// entry's key never equals an item's.
fn allow_tag(kind: Kind) -> u8 {
    kind_tag(kind).to_ascii_lowercase()
}

/// `expiry` key of the allowlist entry `(kind, id)` ending at `end`.
pub fn allow_expiry_key(end: i64, kind: Kind, id: &str) -> Vec<u8> {
    let mut key = expiry_key(end, kind, id);
    key[END_LEN] = allow_tag(kind);
    key
}

/// Splits any `expiry` key into end, what expires, and its id.
pub fn parse_expiry_target(key: &[u8]) -> Option<(i64, Expiring, &str)> {
    if key.len() < END_LEN + 1 {
        return None;
    }
    let (end, rest) = key.split_at(END_LEN);
    let end = i64::try_from(u64::from_be_bytes(end.try_into().ok()?)).ok()?;
    let (&tag, id) = rest.split_first()?;
    let id = std::str::from_utf8(id).ok()?;
    let target = match kind_from_tag(tag) {
        Some(kind) => Expiring::Item(kind),
        // Only the lower-case tags: the upper-case ones are the items'.
        None if tag.is_ascii_lowercase() => {
            Expiring::Allow(kind_from_tag(tag.to_ascii_uppercase())?)
        }
        None => return None,
    };
    Some((end, target, id))
}

/// The end time of an expiry key, read from its first eight bytes.
pub fn expiry_key_end(key: &[u8]) -> Option<i64> {
    let end = u64::from_be_bytes(key.get(..END_LEN)?.try_into().ok()?);
    i64::try_from(end).ok()
}

/// `events` key of the chunk starting at a revision: big-endian, so key order is revision
/// order.
pub fn event_key(revision: u64) -> [u8; 8] {
    revision.to_be_bytes()
}

pub fn parse_event_key(key: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(key.try_into().ok()?))
}

/// Separator between node id and task manager id in a `node_tms` key.
const SEP: u8 = 0;

/// `node_tms` key of task manager `tm` on `node`.
pub fn node_tm_key(node: &str, tm: &str) -> Vec<u8> {
    let mut key = node_tm_prefix(node);
    key.extend_from_slice(tm.as_bytes());
    key
}

/// The `node_tms` prefix of every task manager on `node`.
pub fn node_tm_prefix(node: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(node.len() + 1 + 32);
    key.extend_from_slice(node.as_bytes());
    key.push(SEP);
    key
}

/// Splits a `node_tms` key into node and task manager.
pub fn parse_node_tm_key(key: &[u8]) -> Option<(&str, &str)> {
    let at = key.iter().position(|&b| b == SEP)?;
    let node = std::str::from_utf8(&key[..at]).ok()?;
    let tm = std::str::from_utf8(&key[at + 1..]).ok()?;
    Some((node, tm))
}

/// A key of one id's numbered entries (`reports`, `history`): kind ++ id ++ 0x00 ++ n.
fn numbered_key(kind: Kind, id: &str, n: u64) -> Vec<u8> {
    let mut key = numbered_prefix(kind, id);
    key.extend_from_slice(&n.to_be_bytes());
    key
}

/// The prefix of every numbered entry of `(kind, id)`: kind ++ id ++ 0x00.
pub fn numbered_prefix(kind: Kind, id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(2 + id.len() + 8);
    key.push(kind_tag(kind));
    key.extend_from_slice(id.as_bytes());
    key.push(0);
    key
}

/// `reports` key of report `n` of `(kind, id)`: its slot in the ring, `n` mod
/// [`MAX_REPORTS`].
pub fn report_key(kind: Kind, id: &str, n: u64) -> Vec<u8> {
    numbered_key(kind, id, n % MAX_REPORTS)
}

/// `history` key of past block `n` of `(kind, id)`.
pub fn past_key(kind: Kind, id: &str, n: u64) -> Vec<u8> {
    numbered_key(kind, id, n)
}

/// `live` key of `source`'s live report of `(kind, id)`: kind ++ id ++ 0x00 ++ source. The
/// item's roster is under its item key ([`item_key`]) in the same tree, just before them.
pub fn live_key(kind: Kind, id: &str, source: &str) -> Vec<u8> {
    let mut key = numbered_prefix(kind, id);
    key.extend_from_slice(source.as_bytes());
    key
}

/// Splits a `live` key: `(kind, id, None)` for a roster, `(kind, id, Some(source))` for a
/// report.
pub fn parse_live_key(key: &[u8]) -> Option<(Kind, &str, Option<&str>)> {
    let (&tag, rest) = key.split_first()?;
    let kind = kind_from_tag(tag)?;
    match rest.iter().position(|&b| b == 0) {
        None => Some((kind, std::str::from_utf8(rest).ok()?, None)),
        Some(at) => Some((
            kind,
            std::str::from_utf8(&rest[..at]).ok()?,
            Some(std::str::from_utf8(&rest[at + 1..]).ok()?),
        )),
    }
}

/// The number at the end of a numbered key.
pub fn parse_number(key: &[u8]) -> Option<u64> {
    let tail = key.len().checked_sub(8)?;
    Some(u64::from_be_bytes(key[tail..].try_into().ok()?))
}

/// `history_ends` key of past block `n` of `(kind, id)`, which ended at `ended`.
pub fn past_end_key(ended: i64, kind: Kind, id: &str, n: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(END_LEN + 2 + id.len() + 8);
    key.extend_from_slice(&(ended.max(0) as u64).to_be_bytes());
    key.extend_from_slice(&numbered_key(kind, id, n));
    key
}

/// Splits a `history_ends` key into the end, the kind, the id and the entry number.
pub fn parse_past_end_key(key: &[u8]) -> Option<(i64, Kind, &str, u64)> {
    let ended = i64::try_from(u64::from_be_bytes(key.get(..END_LEN)?.try_into().ok()?)).ok()?;
    let rest = key.get(END_LEN..)?;
    let n = parse_number(rest)?;
    let (&tag, id) = rest.get(..rest.len() - 8)?.split_first()?;
    let id = id.strip_suffix(&[0])?;
    Some((ended, kind_from_tag(tag)?, std::str::from_utf8(id).ok()?, n))
}

/// The longest `Idempotency-Key`, in bytes.
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 255;

/// Tag of a record's head and chunks in the `idempotency` tree.
const RECORD_TAG: u8 = b'k';

/// Tag of the `idempotency` tree's time index.
const RECORD_TIME_TAG: u8 = b't';

/// The longest key of the `idempotency` tree: a time index entry (a chunk's is 261 bytes).
pub const MAX_RECORD_KEY_BYTES: usize = 1 + END_LEN + MAX_IDEMPOTENCY_KEY_BYTES;

/// `idempotency` key of the head of `key`'s record.
pub fn record_key(key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + key.len() + 1 + 4);
    out.push(RECORD_TAG);
    out.extend_from_slice(key.as_bytes());
    out
}

/// `idempotency` key of chunk `index` of `key`'s record: right after its head, since keys
/// are printable ASCII and the separator is 0x00.
pub fn record_chunk_key(key: &str, index: u32) -> Vec<u8> {
    let mut out = record_key(key);
    out.push(SEP);
    out.extend_from_slice(&index.to_be_bytes());
    out
}

/// `idempotency` key of the time index entry of `key`'s record, committed at `at` (unix ms,
/// non-negative): byte order is time order.
pub fn record_time_key(at: i64, key: &str) -> Vec<u8> {
    debug_assert!(at >= 0, "commit times are non-negative");
    let mut out = Vec::with_capacity(1 + END_LEN + key.len());
    out.push(RECORD_TIME_TAG);
    out.extend_from_slice(&(at.max(0) as u64).to_be_bytes());
    out.extend_from_slice(key.as_bytes());
    out
}

/// The first key of the time index.
pub fn record_time_start() -> Vec<u8> {
    vec![RECORD_TIME_TAG]
}

/// The smallest time index key of a record committed at or after `at`: the entries below
/// it are exactly those committed before.
pub fn record_time_bound(at: i64) -> Vec<u8> {
    let mut out = record_time_start();
    out.extend_from_slice(&(at.max(0) as u64).to_be_bytes());
    out
}

/// What an `idempotency` key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKey<'a> {
    /// The head of a record.
    Head(&'a str),
    /// A chunk of a record's response.
    Chunk(&'a str, u32),
    /// A time index entry: commit time, key.
    Time(i64, &'a str),
}

/// Splits an `idempotency` key; `None` for a malformed one.
pub fn parse_record_key(raw: &[u8]) -> Option<RecordKey<'_>> {
    fn text(bytes: &[u8]) -> Option<&str> {
        std::str::from_utf8(bytes)
            .ok()
            .filter(|key| !key.is_empty() && key.bytes().all(|b| (b' '..=b'~').contains(&b)))
    }
    let (&tag, rest) = raw.split_first()?;
    match tag {
        RECORD_TAG => match rest.iter().position(|&b| b == SEP) {
            None => Some(RecordKey::Head(text(rest)?)),
            Some(at) => {
                let index = u32::from_be_bytes(rest[at + 1..].try_into().ok()?);
                Some(RecordKey::Chunk(text(&rest[..at])?, index))
            }
        },
        RECORD_TIME_TAG if rest.len() > END_LEN => {
            let (at, key) = rest.split_at(END_LEN);
            let at = i64::try_from(u64::from_be_bytes(at.try_into().ok()?)).ok()?;
            Some(RecordKey::Time(at, text(key)?))
        }
        _ => None,
    }
}

/// Splits a time index key of the `idempotency` tree into commit time and key.
pub fn parse_record_time_key(raw: &[u8]) -> Option<(i64, &str)> {
    match parse_record_key(raw)? {
        RecordKey::Time(at, key) => Some((at, key)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn item_keys_round_trip() {
        for kind in Kind::ALL {
            let key = item_key(kind, "a/b ü");
            assert_eq!(parse_item_key(&key), Some((kind, "a/b ü")));
            assert!(key.starts_with(&item_prefix(kind)));
            assert!(key.as_slice() < &item_prefix_end(kind)[..]);
            // Even the longest id of the largest characters stays below the end.
            let longest = item_key(kind, &"\u{10FFFF}".repeat(64));
            assert!(longest.as_slice() < &item_prefix_end(kind)[..]);
        }
        for (kind, other) in [
            (Kind::TaskManager, Kind::Node),
            (Kind::Node, Kind::TaskManager),
        ] {
            let end = item_prefix_end(kind);
            let key = item_key(other, "a");
            assert!(!(item_prefix(kind)[..] <= key[..] && key[..] < end[..]));
        }
        assert_ne!(item_key(Kind::Node, "x"), item_key(Kind::TaskManager, "x"));
    }

    #[test]
    fn expiry_keys_round_trip() {
        let key = expiry_key(1_700_000_000_123, Kind::Node, "n1");
        assert_eq!(
            parse_expiry_key(&key),
            Some((1_700_000_000_123, Kind::Node, "n1"))
        );
        assert_eq!(expiry_key_end(&key), Some(1_700_000_000_123));
        let allow = allow_expiry_key(5, Kind::TaskManager, "t1");
        assert_eq!(
            parse_expiry_target(&allow),
            Some((5, Expiring::Allow(Kind::TaskManager), "t1"))
        );
        assert_eq!(parse_expiry_key(&allow), None);
        assert_ne!(allow, expiry_key(5, Kind::TaskManager, "t1"));
    }

    #[test]
    fn due_bound_separates_due_from_future() {
        let now = 1_000;
        let bound = due_bound(now);
        assert!(expiry_key(now, Kind::Node, "zzz").as_slice() < &bound[..]);
        assert!(expiry_key(now - 1, Kind::Node, "a").as_slice() < &bound[..]);
        assert!(expiry_key(now + 1, Kind::TaskManager, "").as_slice() > &bound[..]);
    }

    #[test]
    fn node_tm_keys_round_trip_and_prefixes_do_not_bleed() {
        let key = node_tm_key("n1", "tm/ü");
        assert_eq!(parse_node_tm_key(&key), Some(("n1", "tm/ü")));
        assert!(key.starts_with(&node_tm_prefix("n1")));
        assert!(!node_tm_key("n10", "tm").starts_with(&node_tm_prefix("n1")));
    }

    #[test]
    fn record_keys_round_trip_and_sort_chunks_after_their_head() {
        assert_eq!(
            parse_record_key(&record_key("k-1")),
            Some(RecordKey::Head("k-1"))
        );
        assert_eq!(
            parse_record_key(&record_chunk_key("k-1", 7)),
            Some(RecordKey::Chunk("k-1", 7))
        );
        assert_eq!(
            parse_record_time_key(&record_time_key(1_700_000_000_000, "a b")),
            Some((1_700_000_000_000, "a b"))
        );
        // A record's chunks come right after its head, before any other record's head.
        let mut keys = vec![
            record_key("a!"),
            record_chunk_key("a", 1),
            record_key("a"),
            record_chunk_key("a", 0),
            record_key("a "),
        ];
        keys.sort();
        assert_eq!(
            keys,
            [
                record_key("a"),
                record_chunk_key("a", 0),
                record_chunk_key("a", 1),
                record_key("a "),
                record_key("a!"),
            ]
        );
        // The time bound splits at the commit time; every time key sorts after every head.
        assert!(record_time_key(99, "~").as_slice() < &record_time_bound(100)[..]);
        assert!(record_time_key(100, "!").as_slice() >= &record_time_bound(100)[..]);
        assert!(record_key(&"~".repeat(255)) < record_time_start());
        let longest = "~".repeat(MAX_IDEMPOTENCY_KEY_BYTES);
        assert_eq!(
            record_time_key(i64::MAX, &longest).len(),
            MAX_RECORD_KEY_BYTES
        );
        assert!(record_chunk_key(&longest, u32::MAX).len() < MAX_RECORD_KEY_BYTES);
        for bad in [&b""[..], b"k", b"t12345678", b"x1", b"k\x01"] {
            assert_eq!(parse_record_key(bad), None, "{bad:?}");
        }
    }

    proptest! {
        /// Encoded order equals numeric order of endTimestamp, whatever the ids.
        #[test]
        fn expiry_key_order_is_time_order(
            a in 0i64..i64::MAX, b in 0i64..i64::MAX,
            ida in "[a-z0-9ü/ ]{1,8}", idb in "[a-z0-9ü/ ]{1,8}",
        ) {
            let ka = expiry_key(a, Kind::TaskManager, &ida);
            let kb = expiry_key(b, Kind::Node, &idb);
            if a < b { prop_assert!(ka < kb); }
            if a > b { prop_assert!(ka > kb); }
        }

        #[test]
        fn due_bound_is_exact(end in 0i64..i64::MAX - 1, now in 0i64..i64::MAX - 1) {
            let key = expiry_key(end, Kind::Node, "x");
            prop_assert_eq!(key.as_slice() < &due_bound(now)[..], end <= now);
        }
    }
}
