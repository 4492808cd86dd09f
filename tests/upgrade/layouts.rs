//! The bytes each schema version writes, built by hand from `migrations/000N-*.md` rather
//! than by the code under test, so a fixture can only be read back if the decoder still
//! agrees with the documents.
//!
//! Values are bincode 2 `standard()`: an integer is a varint (below 251 one byte, else a
//! marker 251, 252 or 253 and then 2, 4 or 8 bytes little-endian), a signed one zigzagged
//! first; a `u8` is one raw byte; a string or vector is a varint length and its contents;
//! an enum is its variant index (a varint) and its fields.

// ---- bincode 2 `standard()` ----

/// The varint of an unsigned integer.
pub fn varint(n: u64) -> Vec<u8> {
    if n < 251 {
        vec![n as u8]
    } else if let Ok(n) = u16::try_from(n) {
        [&[251][..], &n.to_le_bytes()].concat()
    } else if let Ok(n) = u32::try_from(n) {
        [&[252][..], &n.to_le_bytes()].concat()
    } else {
        [&[253][..], &n.to_le_bytes()].concat()
    }
}

/// The varint of a signed integer: zigzag (0, -1, 1, -2, … as 0, 1, 2, 3, …), then varint.
pub fn signed(n: i64) -> Vec<u8> {
    varint(((n << 1) ^ (n >> 63)) as u64)
}

/// A string: its byte length as a varint, then its UTF-8.
pub fn string(s: &str) -> Vec<u8> {
    [varint(s.len() as u64), s.as_bytes().to_vec()].concat()
}

// ---- version 1 (migrations/0001-initial.md) ----

/// Kind tags, the first byte of an `items` key.
pub const TASK_MANAGER: u8 = b'T';
pub const NODE: u8 = b'N';

/// Action codes of `BlockV1`.
pub const MARK_BLOCKED: u8 = 0;
pub const EVACUATE: u8 = 1;

/// The end of a permanent item (`i64::MAX`); it has no `expiry` entry.
pub const PERMANENT: i64 = i64::MAX;

/// `meta/schema_version`: u32 big-endian.
pub fn schema_version(version: u32) -> [u8; 4] {
    version.to_be_bytes()
}

/// `items` key: kind tag ++ id.
pub fn v1_item_key(kind: u8, id: &str) -> Vec<u8> {
    [&[kind][..], id.as_bytes()].concat()
}

/// `BlockV1 { action: u8, start: i64, end: i64, cause: String }`, without a format byte:
/// the body of an `items` value, and the `block` of a format-2 item change (0003).
pub fn v1_block(action: u8, start: i64, end: i64, cause: &str) -> Vec<u8> {
    [vec![action], signed(start), signed(end), string(cause)].concat()
}

/// `items` value: format byte `0x01` ++ `BlockV1`.
pub fn v1_item(action: u8, start: i64, end: i64, cause: &str) -> Vec<u8> {
    [vec![0x01], v1_block(action, start, end, cause)].concat()
}

/// `expiry` key: end (8 bytes big-endian) ++ kind tag ++ id; the value is empty.
pub fn v1_expiry_key(end: i64, kind: u8, id: &str) -> Vec<u8> {
    [&(end as u64).to_be_bytes()[..], &[kind], id.as_bytes()].concat()
}

/// `tm_node` value (the key is the task manager id): `0x01` ++ node id.
pub fn v1_registration(node: &str) -> Vec<u8> {
    [&[0x01][..], node.as_bytes()].concat()
}

/// `node_tms` key: node id ++ `0x00` ++ task manager id; the value is empty.
pub fn v1_node_tms_key(node: &str, tm: &str) -> Vec<u8> {
    [node.as_bytes(), &[0x00], tm.as_bytes()].concat()
}

// ---- version 2 (migrations/0002-change-feed.md) ----

/// Event codes, the same in every event format.
pub const ADDED: u8 = 0;
pub const EXPIRED: u8 = 3;
pub const REGISTERED: u8 = 4;

/// `events` key: the revision, 8 bytes big-endian.
pub fn v2_event_key(revision: u64) -> [u8; 8] {
    revision.to_be_bytes()
}

/// `meta/revision`: the last revision handed out, u64 big-endian.
pub fn v2_revision(revision: u64) -> [u8; 8] {
    revision.to_be_bytes()
}

/// The slot of (kind, action) in `meta/item_counts`: (taskmanager, `MARK_BLOCKED`),
/// (taskmanager, `MARK_BLOCKED_AND_EVACUATE_TASKS`), (node, …), (node, …).
pub fn v2_count_slot(kind: u8, action: u8) -> usize {
    usize::from(kind == NODE) * 2 + usize::from(action)
}

/// `meta/item_counts`: 4 × u64 big-endian, in [`v2_count_slot`] order.
pub fn v2_item_counts(counts: [u64; 4]) -> Vec<u8> {
    counts.iter().flat_map(|c| c.to_be_bytes()).collect()
}

/// `events` value, format `0x01`: `EventV1 { event: u8, at: i64, data: String }`, `data`
/// the finished JSON of the feed.
pub fn v2_event(event: u8, at: i64, data: &str) -> Vec<u8> {
    [vec![0x01, event], signed(at), string(data)].concat()
}

// ---- version 3 (migrations/0003-compact-events.md) ----

/// `ChangeV2::Item` (variant 0): `kind: u8` (the key byte), `id: String`, then `block`.
pub fn v3_item_change(kind: u8, id: &str, block: &[u8]) -> Vec<u8> {
    [varint(0), vec![kind], string(id), block.to_vec()].concat()
}

/// `ChangeV2::Registration` (variant 1): `tm: String`, `node: String`.
pub fn v3_registration_change(tm: &str, node: &str) -> Vec<u8> {
    [varint(1), string(tm), string(node)].concat()
}

/// `events` value, format `0x02`: `EventV2 { event: u8, at: i64, change: ChangeV2 }`.
pub fn v3_event(event: u8, at: i64, change: &[u8]) -> Vec<u8> {
    [vec![0x02, event], signed(at), change.to_vec()].concat()
}

// ---- version 4 (migrations/0004-event-chunks.md) ----

/// `events` value, format `0x03`, stored under its first revision:
/// `ChunkV3 { at: i64, events: Vec<(u8, ChangeV2)> }`, each event its code and change.
pub fn v4_chunk(at: i64, events: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut out = [vec![0x03], signed(at), varint(events.len() as u64)].concat();
    for (event, change) in events {
        out.push(*event);
        out.extend_from_slice(change);
    }
    out
}

// ---- version 5 (migrations/0005-expiry-watermark.md) ----

/// `meta/expiry_watermark`: the expiry key of the last item announced expired.
pub fn v5_watermark(end: i64, kind: u8, id: &str) -> Vec<u8> {
    v1_expiry_key(end, kind, id)
}

/// `meta/unreclaimed`: how many `expiry` entries are at or before the watermark, u64
/// big-endian.
pub fn v5_unreclaimed(entries: u64) -> [u8; 8] {
    entries.to_be_bytes()
}

// ---- version 6 (migrations/0006-guardrails.md) ----

/// Event codes of the guardrails' events (indices into `EventType::ALL`, after
/// `unregistered` = 5).
pub const POLICY_CHANGED: u8 = 6;
pub const ALLOWLISTED: u8 = 7;
pub const ALLOWLIST_EXPIRED: u8 = 9;

/// bincode's `Option`: 0 for none, else 1 and the value.
pub fn option(value: Option<Vec<u8>>) -> Vec<u8> {
    match value {
        None => vec![0],
        Some(bytes) => [vec![1], bytes].concat(),
    }
}

/// The forced record of a format-2 item: `guards: Vec<String>`, `by: Option<String>`,
/// `at: i64`.
pub fn v6_forced(guards: &[&str], by: Option<&str>, at: i64) -> Vec<u8> {
    let mut out = varint(guards.len() as u64);
    for guard in guards {
        out.extend_from_slice(&string(guard));
    }
    [out, option(by.map(string)), signed(at)].concat()
}

/// A format-2 block without its format byte: format 1's fields, then
/// `forced: Option<{guards, by, at}>` (`forced` as [`v6_forced`] builds it). The body of an
/// `items` value, and the `block` of a format-4 item change.
pub fn v6_block(action: u8, start: i64, end: i64, cause: &str, forced: Option<Vec<u8>>) -> Vec<u8> {
    [v1_block(action, start, end, cause), option(forced)].concat()
}

/// `items` value, format `0x02`.
pub fn v6_item(action: u8, start: i64, end: i64, cause: &str, forced: Option<Vec<u8>>) -> Vec<u8> {
    [vec![0x02], v6_block(action, start, end, cause, forced)].concat()
}

/// A JSON change (variant 2): how format 4 stores policy and allowlist events.
pub fn v6_json_change(data: &str) -> Vec<u8> {
    [varint(2), string(data)].concat()
}

/// `events` value, format `0x04`: format 3's chunk, with items as [`v6_block`]s.
pub fn v6_chunk(at: i64, events: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut out = v4_chunk(at, events);
    out[0] = 0x04;
    out
}

/// The guardrails of one kind in `meta/policy`, in stored order.
pub struct KindPolicyLayout {
    pub max_blocked_percent: Option<u8>,
    pub max_evacuating_percent: Option<u8>,
    pub max_blocked: Option<u64>,
    /// Per minute, burst.
    pub evacuations: Option<(u32, u32)>,
}

/// `meta/policy`'s fields, in stored order.
pub struct PolicyLayout {
    pub nodes: KindPolicyLayout,
    pub task_managers: KindPolicyLayout,
    pub min_registered: u64,
    pub max_block_duration_secs: Option<u64>,
    pub permanent_blocks_allowed: bool,
}

/// `meta/policy`, format `0x01`: per kind (nodes, then task managers) the two percentages
/// (`Option<u8>`, a raw byte), the item cap (`Option<u64>`) and the rate
/// (`Option<(u32, u32)>`); then `min_registered`, `max_block_duration_secs`,
/// `permanent_blocks_allowed` (a bool is one byte).
pub fn v6_policy(policy: &PolicyLayout) -> Vec<u8> {
    let kind = |of: &KindPolicyLayout| {
        [
            option(of.max_blocked_percent.map(|p| vec![p])),
            option(of.max_evacuating_percent.map(|p| vec![p])),
            option(of.max_blocked.map(varint)),
            option(of.evacuations.map(|(per_minute, burst)| {
                [varint(per_minute.into()), varint(burst.into())].concat()
            })),
        ]
        .concat()
    };
    [
        vec![0x01],
        kind(&policy.nodes),
        kind(&policy.task_managers),
        varint(policy.min_registered),
        option(policy.max_block_duration_secs.map(varint)),
        vec![u8::from(policy.permanent_blocks_allowed)],
    ]
    .concat()
}

/// `allowlist` key: kind tag (`T`/`N`) ++ id, as an item's.
pub fn v6_allow_key(kind: u8, id: &str) -> Vec<u8> {
    v1_item_key(kind, id)
}

/// `allowlist` value, format `0x01`: `prefix: bool`, `comment: String`,
/// `added_by: Option<String>`, `added_at: i64`, `end: Option<i64>`.
pub fn v6_allow(
    prefix: bool,
    comment: &str,
    added_by: Option<&str>,
    added_at: i64,
    end: Option<i64>,
) -> Vec<u8> {
    [
        vec![0x01, u8::from(prefix)],
        string(comment),
        option(added_by.map(string)),
        signed(added_at),
        option(end.map(signed)),
    ]
    .concat()
}

/// `expiry` key of an allowlist entry: end (8 bytes big-endian) ++ the kind tag in lower
/// case (`t`/`n`) ++ id; the value is empty.
pub fn v6_allow_expiry_key(end: i64, kind: u8, id: &str) -> Vec<u8> {
    v1_expiry_key(end, kind.to_ascii_lowercase(), id)
}

// ---- version 7 (migrations/0007-provenance.md) ----

/// Event codes added by version 7 (after `allowlist-expired` = 9), and `removed`, which a
/// past block records as how it ended.
pub const REMOVED: u8 = 2;
pub const UPDATED: u8 = 10;

/// Report operations.
pub const OP_ADD: u8 = 0;
pub const OP_UPDATE: u8 = 1;

/// An item's provenance as format 3 stores it after format 2's fields.
pub struct ProvenanceLayout {
    pub source: String,
    pub reports: u64,
    pub first_report: i64,
    pub last_report: i64,
    pub revision: u64,
    /// `(requested_timeout, timeout, past_blocks)`.
    pub escalated: Option<(i64, i64, u32)>,
}

/// A format-3 block without its format byte: [`v6_block`], then `source: String`,
/// `reports: u64`, `first_report: i64`, `last_report: i64`, `revision: u64`,
/// `escalated: Option<{requested_timeout: i64, timeout: i64, past_blocks: u32}>`. The body of
/// an `items` value, the `block` of a format-5 item change and of a past block.
pub fn v7_block(v6_block: &[u8], p: &ProvenanceLayout) -> Vec<u8> {
    [
        v6_block.to_vec(),
        string(&p.source),
        varint(p.reports),
        signed(p.first_report),
        signed(p.last_report),
        varint(p.revision),
        option(p.escalated.map(|(requested, timeout, past)| {
            [signed(requested), signed(timeout), varint(past.into())].concat()
        })),
    ]
    .concat()
}

/// `items` value, format `0x03`.
pub fn v7_item(v6_block: &[u8], p: &ProvenanceLayout) -> Vec<u8> {
    [vec![0x03], v7_block(v6_block, p)].concat()
}

/// The `reports` key of report `n`: a numbered key of its slot, `n` mod 32 (the ring of
/// an item's kept reports).
pub fn v7_report_key(kind: u8, id: &str, n: u64) -> Vec<u8> {
    v7_numbered_key(kind, id, n % 32)
}

/// A numbered key of `reports` and `history`: kind tag ++ id ++ `0x00` ++ n (8 bytes
/// big-endian).
pub fn v7_numbered_key(kind: u8, id: &str, n: u64) -> Vec<u8> {
    [&[kind][..], id.as_bytes(), &[0], &n.to_be_bytes()].concat()
}

/// `reports` value, format `0x01`: `at: i64`, `source: String`, `operation: u8`,
/// `action: u8`, `end: i64`, `cause: String`.
pub fn v7_report(
    at: i64,
    source: &str,
    operation: u8,
    action: u8,
    end: i64,
    cause: &str,
) -> Vec<u8> {
    [
        vec![0x01],
        signed(at),
        string(source),
        vec![operation, action],
        signed(end),
        string(cause),
    ]
    .concat()
}

/// `history` counter (key: kind tag ++ id), format `0x01`: `(first, next)` as two u64.
pub fn v7_history_count(first: u64, next: u64) -> Vec<u8> {
    [vec![0x01], varint(first), varint(next)].concat()
}

/// `history` entry, format `0x01`: the block ([`v7_block`]), `how: u8` (the event code of
/// `removed` or `expired`), `at: i64`, `source: Option<String>`, `reason: Option<String>`.
pub fn v7_past(
    block: &[u8],
    how: u8,
    at: i64,
    source: Option<&str>,
    reason: Option<&str>,
) -> Vec<u8> {
    [
        vec![0x01],
        block.to_vec(),
        vec![how],
        signed(at),
        option(source.map(string)),
        option(reason.map(string)),
    ]
    .concat()
}

/// `history_ends` key: ended (8 bytes big-endian) ++ the entry's key; the value is empty.
pub fn v7_history_end_key(ended: i64, kind: u8, id: &str, n: u64) -> Vec<u8> {
    [
        (ended as u64).to_be_bytes().to_vec(),
        v7_numbered_key(kind, id, n),
    ]
    .concat()
}

/// `events` value, format `0x05`: format 4's chunk, with items as [`v7_block`]s.
pub fn v7_chunk(at: i64, events: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut out = v4_chunk(at, events);
    out[0] = 0x05;
    out
}

/// `meta/policy`, format `0x02`: format 1's fields, then
/// `escalation: Option<(factor: u32, max_secs: u64, window_secs: u64)>`.
pub fn v7_policy(policy: &PolicyLayout, escalation: Option<(u32, u64, u64)>) -> Vec<u8> {
    let mut out = v6_policy(policy);
    out[0] = 0x02;
    out.extend(option(escalation.map(|(factor, max, window)| {
        [varint(factor.into()), varint(max), varint(window)].concat()
    })));
    out
}

// ---- version 8 (migrations/0008-compact-items.md) ----

/// A format-4 block without its format byte: format 3's fields in format 3's order, with
/// `end` as `end − start` (`i64::MAX − start` for a permanent block), `source` empty for
/// `unknown`, `first_report` as `first_report − start`, `last_report` as
/// `last_report − first_report` and `revision` as an `i64`, every difference wrapping.
/// `start` and `revision` are stored as distances from `(start_from, revision_from)`:
/// `(0, 0)` in `items` and `history`, the chunk's time and the event's own revision in an
/// event.
pub fn v8_block(
    action: u8,
    start: i64,
    end: i64,
    cause: &str,
    forced: Option<Vec<u8>>,
    p: &ProvenanceLayout,
    (start_from, revision_from): (i64, u64),
) -> Vec<u8> {
    let source = if p.source == "unknown" { "" } else { &p.source };
    [
        vec![action],
        signed(start.wrapping_sub(start_from)),
        signed(end.wrapping_sub(start)),
        string(cause),
        option(forced),
        string(source),
        varint(p.reports),
        signed(p.first_report.wrapping_sub(start)),
        signed(p.last_report.wrapping_sub(p.first_report)),
        signed((p.revision as i64).wrapping_sub(revision_from as i64)),
        option(p.escalated.map(|(requested, timeout, past)| {
            [signed(requested), signed(timeout), varint(past.into())].concat()
        })),
    ]
    .concat()
}

/// `items` value, format `0x04`.
pub fn v8_item(block: &[u8]) -> Vec<u8> {
    [&[0x04][..], block].concat()
}

/// `events` value, format `0x06`: format 5's chunk, with items as [`v8_block`]s relative to
/// the chunk's time and each event's revision.
pub fn v8_chunk(at: i64, events: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut out = v4_chunk(at, events);
    out[0] = 0x06;
    out
}

/// `history` entry, format `0x02`: format 1 ([`v7_past`]) with the block as [`v8_block`]
/// (as in `items`) and `at` as `at − end`, the block's end.
pub fn v8_past(
    block: &[u8],
    how: u8,
    at: i64,
    end: i64,
    source: Option<&str>,
    reason: Option<&str>,
) -> Vec<u8> {
    let mut out = v7_past(block, how, at.wrapping_sub(end), source, reason);
    out[0] = 0x02;
    out
}

// ---- version 9 (migrations/0009-records-and-figures.md) ----

/// The share caps' figures of one kind: its registered ids, and how many of them are
/// blocked and evacuating.
pub struct ExposureLayout {
    pub registered: i64,
    pub blocked: i64,
    pub evacuating: i64,
}

/// `meta/exposure`: six i64 big-endian, registered, blocked, evacuating, each task managers
/// then nodes.
pub fn v9_exposure(task_managers: &ExposureLayout, nodes: &ExposureLayout) -> Vec<u8> {
    [
        task_managers.registered,
        nodes.registered,
        task_managers.blocked,
        nodes.blocked,
        task_managers.evacuating,
        nodes.evacuating,
    ]
    .iter()
    .flat_map(|figure| figure.to_be_bytes())
    .collect()
}
