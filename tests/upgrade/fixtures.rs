//! What the data dir of each schema version holds: one small blocklist, written in that
//! version's layout (see [`crate::layouts`]) with raw sled, as that version would have left
//! it; from version 6 also a stored policy and an allowlist; from version 7 each item's
//! provenance (its reports, its revision, an escalation) and the past blocks of two ids,
//! from version 8 in the compact formats (items 4, events 6, past blocks 2). None holds an
//! idempotency record, nor the share caps' figures, which the upgrade to version 9 counts.

use serde_json::{json, Value};

use crate::layouts::*;

/// When every fixture item started (unix ms).
pub const START: i64 = 1_700_000_000_000;

/// A timed end no test run reaches: 2100-01-01T00:00:00Z.
pub const FAR: i64 = 4_102_444_800_000;

/// One stored item; every one started at [`START`].
pub struct Stored {
    pub kind: u8,
    pub id: &'static str,
    pub action: u8,
    pub end: i64,
    pub cause: &'static str,
    /// From version 6: the record of a block admitted past a guardrail by force.
    pub forced: Option<Forced>,
}

/// A forced record (migrations/0006-guardrails.md).
pub struct Forced {
    pub guards: &'static [&'static str],
    pub by: Option<&'static str>,
    pub at: i64,
}

/// The items each version serves: both kinds, both actions, permanent and timed.
#[rustfmt::skip]
pub static ACTIVE: [Stored; 4] = [
    Stored { kind: NODE, id: "n1", action: EVACUATE, end: PERMANENT, cause: "disk", forced: None },
    Stored { kind: NODE, id: "n2", action: MARK_BLOCKED, end: FAR, cause: "net", forced: None },
    Stored { kind: TASK_MANAGER, id: "tm-1", action: MARK_BLOCKED, end: FAR, cause: "oom", forced: None },
    Stored { kind: TASK_MANAGER, id: "tm-2", action: EVACUATE, end: PERMANENT, cause: "gc", forced: None },
];

/// From version 6: an active item admitted past the item cap by force, so its value holds
/// a forced record.
pub static FORCED: Stored = Stored {
    kind: NODE,
    id: "n3",
    action: MARK_BLOCKED,
    end: FAR,
    cause: "forced",
    forced: Some(Forced {
        guards: &["max-items"],
        by: Some("alice"),
        at: START + 5_000,
    }),
};

/// Came due while the daemon was stopped: stored with its expiry entry, counted, not yet
/// expired. The upgraded daemon's sweeper must find it through the old expiry index.
pub static DUE: Stored = Stored {
    kind: TASK_MANAGER,
    id: "tm-due",
    action: EVACUATE,
    end: START + 120_000,
    cause: "late",
    forced: None,
};

/// From version 5: announced expired (its expiry key is the watermark, its `expired` event
/// is in the log, it has left the counts) and not yet reclaimed. It must stay gone, and
/// never be announced twice.
pub static ANNOUNCED: Stored = Stored {
    kind: NODE,
    id: "n-gone",
    action: MARK_BLOCKED,
    end: START + 60_000,
    cause: "old",
    forced: None,
};

/// From version 7: the block `tm-due` had before [`DUE`], removed with a reason: the id's
/// past block 0, with its add and removal in the log.
pub static EARLIER: Stored = Stored {
    kind: TASK_MANAGER,
    id: "tm-due",
    action: MARK_BLOCKED,
    end: START + 30_000,
    cause: "earlier",
    forced: None,
};

/// Who removed [`EARLIER`], and why.
pub const EARLIER_REMOVED_BY: &str = "operator:alice";
pub const EARLIER_REASON: &str = "a false positive";

/// Version 7: the escalation of the stored policy, `(factor, maxSecs, windowSecs)`.
pub const ESCALATION: (u32, u64, u64) = (2, 3_600, 86_400);

/// Version 7: n2's escalation record, `(requestedTimeout, timeout, pastBlocks)`.
pub const N2_ESCALATED: (i64, i64, u32) = (60_000, 120_000, 1);

/// How many reports an item keeps (`provenance::MAX_REPORTS`).
pub const KEPT_REPORTS: u64 = 32;

/// Who first reported each item from version 7, and how many reports it had: n1 more than
/// an item keeps, n2 an add and then an update.
fn reporting(s: &Stored) -> (&'static str, u64) {
    match s.id {
        "n1" => ("detector-a", 40),
        "n2" => ("speculative-execution", 2),
        "tm-1" => ("detector-a", 3),
        "n3" => ("alice", 1),
        _ => ("detector-b", 1),
    }
}

/// The provenance of a fixture item as `version` leaves it once the daemon opened it: from
/// version 7 as written ([`reporting`], its last event's revision); upgraded from an older
/// version, one report from `unknown` at its start and the database's revision then.
pub fn provenance(version: u32, s: &Stored) -> ProvenanceLayout {
    if version < 7 {
        return ProvenanceLayout {
            source: "unknown".into(),
            reports: 1,
            first_report: START,
            last_report: START,
            revision: last_revision(version),
            escalated: None,
        };
    }
    let (source, reports) = reporting(s);
    ProvenanceLayout {
        source: source.into(),
        reports,
        first_report: START,
        last_report: report(version, s, reports - 1).at,
        revision: revision_of(version, s),
        escalated: (s.id == "n2").then_some(N2_ESCALATED),
    }
}

/// The provenance an event of the log of `version` carries for an item: as stored from
/// version 7; in formats 2 to 4 (versions 3 to 6), what they decode as (one report from
/// `unknown` at the start, revision 0). Version 2's events are finished JSON without it.
pub fn logged_provenance(version: u32, s: &Stored) -> Option<ProvenanceLayout> {
    match version {
        ..=2 => None,
        3..=6 => Some(ProvenanceLayout {
            revision: 0,
            ..provenance(6, s)
        }),
        _ => Some(provenance(version, s)),
    }
}

/// One report of an item.
pub struct ReportLayout {
    pub at: i64,
    pub source: &'static str,
    pub operation: u8,
    pub action: u8,
    pub end: i64,
    pub cause: &'static str,
}

/// Report `n` of a fixture item in `version`: upgraded, the one from `unknown` at its
/// start; from version 7, one every 100 ms from the start, by turns from two detectors after
/// the first source, n2's second an update by an operator.
pub fn report(version: u32, s: &Stored, n: u64) -> ReportLayout {
    let (first, _) = if version < 7 {
        ("unknown", 1)
    } else {
        reporting(s)
    };
    let update = version >= 7 && s.id == "n2" && n == 1;
    let source = match n {
        _ if update => "operator:bob",
        0 => first,
        n if n % 2 == 1 => "detector-b",
        _ => "detector-a",
    };
    ReportLayout {
        at: START + n as i64 * 100,
        source,
        operation: if update { OP_UPDATE } else { OP_ADD },
        action: s.action,
        end: s.end,
        cause: s.cause,
    }
}

/// The numbers of the reports an item keeps: its most recent [`KEPT_REPORTS`].
pub fn kept_reports(version: u32, s: &Stored) -> std::ops::Range<u64> {
    let reports = provenance(version, s).reports;
    reports.saturating_sub(KEPT_REPORTS)..reports
}

/// The stored value of report `n` of an item.
pub fn report_value(version: u32, s: &Stored, n: u64) -> Vec<u8> {
    let r = report(version, s, n);
    v7_report(r.at, r.source, r.operation, r.action, r.end, r.cause)
}

/// The revision of the last event of `s` in the log of `version`.
fn revision_of(version: u32, s: &Stored) -> u64 {
    let mut revision = 0;
    let mut last = 0;
    for (_, change) in history(version).iter().flatten() {
        revision += 1;
        if matches!(change, Change::Item(item) if std::ptr::eq(*item, s)) {
            last = revision;
        }
    }
    assert!(last > 0, "{} is in the log", s.id);
    last
}

/// The last revision of the log of `version` (what `meta/revision` holds; 0 without one).
pub fn last_revision(version: u32) -> u64 {
    history(version).iter().map(|t| t.len() as u64).sum()
}

/// A past block (from version 7): the block, how, whose unblock and why.
pub struct PastLayout {
    pub block: &'static Stored,
    pub how: u8,
    pub source: Option<&'static str>,
    pub reason: Option<&'static str>,
}

/// The past blocks from version 7, each its id's entry 0 (ended when the log was written): the
/// removed [`EARLIER`] and the announced [`ANNOUNCED`].
pub static PAST: [PastLayout; 2] = [
    PastLayout {
        block: &EARLIER,
        how: REMOVED,
        source: Some(EARLIER_REMOVED_BY),
        reason: Some(EARLIER_REASON),
    },
    PastLayout {
        block: &ANNOUNCED,
        how: EXPIRED,
        source: None,
        reason: None,
    },
];

/// The format-3 block of a fixture item in version 7 (without the format byte).
pub fn v7_block_of(s: &Stored) -> Vec<u8> {
    v7_block(&v6_block_of(s), &provenance(7, s))
}

/// The `history` entry of a version-7 past block that ended at `at`, in `version`'s format
/// (format 1 in version 7, format 2 from version 8).
pub fn past_value(version: u32, p: &PastLayout, at: i64) -> Vec<u8> {
    if version == 7 {
        return v7_past(&v7_block_of(p.block), p.how, at, p.source, p.reason);
    }
    let block = v8_block_of(p.block, (0, 0));
    v8_past(&block, p.how, at, p.block.end, p.source, p.reason)
}

/// The format-4 block of a fixture item from version 8 (without the format byte), its
/// start and revision stored relative to `from` ([`v8_block`]).
pub fn v8_block_of(s: &Stored, from: (i64, u64)) -> Vec<u8> {
    v8_block(
        s.action,
        START,
        s.end,
        s.cause,
        forced_of(s),
        &provenance(8, s),
        from,
    )
}

/// Registered on n1 and not blocked itself, so n1's block reaches it through membership.
pub const MEMBER: (&str, &str) = ("tm-3", "n1");

/// The share caps' figures of `version`'s fixture as the upgrade to version 9 counts them
/// (`(task managers, nodes)`): a node with a registered task manager is registered, and a
/// task manager is blocked and evacuating by its own item or by its node's. An item
/// announced expired counts as free, one past its end but not yet announced as blocked.
pub fn exposure(version: u32) -> (ExposureLayout, ExposureLayout) {
    // 0 free, 1 blocked, 2 evacuating (the action code plus one).
    let level = |kind: u8, id: &str| {
        stored(version)
            .iter()
            .find(|s| s.kind == kind && s.id == id && s.id != ANNOUNCED.id)
            .map_or(0, |s| s.action + 1)
    };
    let figures = |level: u8| ExposureLayout {
        registered: 1,
        blocked: i64::from(level >= 1),
        evacuating: i64::from(level == 2),
    };
    let (tm, node) = MEMBER;
    let node_level = level(NODE, node);
    let tm_level = level(TASK_MANAGER, tm).max(node_level);
    (figures(tm_level), figures(node_level))
}

/// One allowlist entry (from version 6).
pub struct Allowed {
    pub kind: u8,
    pub id: &'static str,
    pub prefix: bool,
    pub comment: &'static str,
    pub added_by: Option<&'static str>,
    pub added_at: i64,
    pub end: Option<i64>,
}

/// The allowlist entries in force from version 6: a prefix entry until removed, and an exact
/// one with an end (and its `expiry` entry). No stored item is covered by either: putting
/// an entry lifts the blocks it covers.
#[rustfmt::skip]
pub static ALLOWED: [Allowed; 2] = [
    Allowed { kind: NODE, id: "db-", prefix: true, comment: "databases", added_by: Some("alice"),
        added_at: START + 1_000, end: None },
    Allowed { kind: TASK_MANAGER, id: "tm-canary", prefix: false, comment: "the canary",
        added_by: None, added_at: START + 2_000, end: Some(FAR) },
];

/// From version 6: an allowlist entry that ended while the daemon was stopped (a hold-off,
/// the usual timed entry). The sweeper must find it through its lower-case expiry key and
/// delete it with an `allowlist-expired` event, after [`DUE`]'s `expired` (its end is
/// later).
pub static ALLOW_DUE: Allowed = Allowed {
    kind: TASK_MANAGER,
    id: "tm-held",
    prefix: false,
    comment: "hold-off after an unblock",
    added_by: Some("alice"),
    added_at: START + 3_000,
    end: Some(START + 180_000),
};

/// An allowlist entry as the API shows it, and as its events carry it.
pub fn allowed_json(a: &Allowed) -> Value {
    json!({"kind": kind_name(a.kind), "id": a.id, "prefix": a.prefix, "comment": a.comment,
        "addedBy": a.added_by, "addedAt": a.added_at, "endTimestamp": a.end})
}

/// The policy stored from version 6 (with an [`ESCALATION`] from version 7): the default
/// but for a node cap and a node evacuation rate, so that each option of a kind is stored
/// both set and unset.
pub static POLICY: PolicyLayout = PolicyLayout {
    nodes: KindPolicyLayout {
        max_blocked_percent: Some(50),
        max_evacuating_percent: Some(20),
        max_blocked: Some(7),
        evacuations: Some((6, 3)),
    },
    task_managers: KindPolicyLayout {
        max_blocked_percent: Some(50),
        max_evacuating_percent: None,
        max_blocked: None,
        evacuations: None,
    },
    min_registered: 10,
    max_block_duration_secs: None,
    permanent_blocks_allowed: true,
};

/// The default policy, which an older data dir gets stored at its first start on version 6.
pub static DEFAULT_POLICY: PolicyLayout = PolicyLayout {
    nodes: KindPolicyLayout {
        max_blocked_percent: Some(50),
        max_evacuating_percent: Some(20),
        max_blocked: None,
        evacuations: None,
    },
    task_managers: KindPolicyLayout {
        max_blocked_percent: Some(50),
        max_evacuating_percent: None,
        max_blocked: None,
        evacuations: None,
    },
    min_registered: 10,
    max_block_duration_secs: None,
    permanent_blocks_allowed: true,
};

/// A policy as version 6 returned it and its events carry it (without an escalation).
pub fn policy_json(p: &PolicyLayout) -> Value {
    let kind = |of: &KindPolicyLayout| {
        json!({"maxBlockedPercent": of.max_blocked_percent,
            "maxEvacuatingPercent": of.max_evacuating_percent, "maxBlocked": of.max_blocked,
            "evacuations": of.evacuations.map(|(per_minute, burst)|
                json!({"perMinute": per_minute, "burst": burst}))})
    };
    json!({"nodes": kind(&p.nodes), "taskManagers": kind(&p.task_managers),
        "minRegistered": p.min_registered, "maxBlockDurationSecs": p.max_block_duration_secs,
        "permanentBlocksAllowed": p.permanent_blocks_allowed})
}

/// A policy as `GET /policy` returns it since version 7, and as its events carry it: with
/// its escalation (`null` when off).
pub fn policy_json_v7(p: &PolicyLayout, escalation: Option<(u32, u64, u64)>) -> Value {
    let mut policy = policy_json(p);
    policy["escalation"] = json!(escalation.map(
        |(factor, max, window)| json!({"factor": factor, "maxSecs": max, "windowSecs": window})
    ));
    policy
}

/// The escalation of the policy stored in `version` (from version 7; none before).
pub fn escalation(version: u32) -> Option<(u32, u64, u64)> {
    (version >= 7).then_some(ESCALATION)
}

/// What an event records.
pub enum Change {
    Item(&'static Stored),
    Registration(&'static str, &'static str),
    /// A policy or allowlist event: its finished JSON.
    Json(Value),
}

/// The transactions that wrote a fixture, each its events (code, change) in revision order;
/// revisions count from 1. Version 1 has no log.
pub fn history(version: u32) -> Vec<Vec<(u8, Change)>> {
    use Change::*;
    if version < 2 {
        return Vec::new();
    }
    let mut log = vec![
        vec![(ADDED, Item(&ACTIVE[0])), (ADDED, Item(&ACTIVE[1]))],
        vec![(ADDED, Item(&ACTIVE[2])), (ADDED, Item(&ACTIVE[3]))],
        vec![(REGISTERED, Registration(MEMBER.0, MEMBER.1))],
    ];
    if version >= 7 {
        log.push(vec![(ADDED, Item(&EARLIER))]);
        log.push(vec![(REMOVED, Item(&EARLIER))]);
    }
    if version >= 5 {
        log.push(vec![(ADDED, Item(&ANNOUNCED)), (ADDED, Item(&DUE))]);
        log.push(vec![(EXPIRED, Item(&ANNOUNCED))]);
    } else {
        log.push(vec![(ADDED, Item(&DUE))]);
    }
    if version >= 6 {
        let policy = if version < 7 {
            policy_json(&POLICY)
        } else {
            policy_json_v7(&POLICY, escalation(version))
        };
        log.push(vec![(POLICY_CHANGED, Json(policy))]);
        log.push(
            ALLOWED
                .iter()
                .chain([&ALLOW_DUE])
                .map(|a| (ALLOWLISTED, Json(allowed_json(a))))
                .collect(),
        );
        log.push(vec![(ADDED, Item(&FORCED))]);
    }
    if version >= 7 {
        log.push(vec![(UPDATED, Item(&ACTIVE[1]))]);
    }
    log
}

/// What `items` holds in `version`: the active items, the due one, from version 5 the
/// announced one, and from version 6 the forced one.
pub fn stored(version: u32) -> Vec<&'static Stored> {
    let mut items: Vec<&Stored> = ACTIVE.iter().chain([&DUE]).collect();
    if version >= 5 {
        items.push(&ANNOUNCED);
    }
    if version >= 6 {
        items.push(&FORCED);
    }
    items
}

/// The name of a kind in JSON.
pub fn kind_name(kind: u8) -> &'static str {
    if kind == NODE {
        "node"
    } else {
        "taskmanager"
    }
}

/// The name of an action code.
pub fn action_name(action: u8) -> &'static str {
    if action == EVACUATE {
        "MARK_BLOCKED_AND_EVACUATE_TASKS"
    } else {
        "MARK_BLOCKED"
    }
}

/// The finished JSON a version-2 binary stored in a format-1 event.
fn v2_data(change: &Change) -> String {
    match change {
        Change::Item(s) => format!(
            r#"{{"kind":"{}","id":"{}","action":"{}","startTimestamp":{START},"endTimestamp":{},"cause":"{}"}}"#,
            kind_name(s.kind),
            s.id,
            action_name(s.action),
            s.end,
            s.cause
        ),
        Change::Registration(tm, node) => format!(r#"{{"id":"{tm}","node":"{node}"}}"#),
        Change::Json(data) => data.to_string(),
    }
}

/// A change as formats 2 and 3 store it (their fixtures hold no JSON change; variant 2 is
/// how format 3 would).
fn v3_change(change: &Change) -> Vec<u8> {
    match change {
        Change::Item(s) => v3_item_change(s.kind, s.id, &v1_block(s.action, START, s.end, s.cause)),
        Change::Registration(tm, node) => v3_registration_change(tm, node),
        Change::Json(data) => v6_json_change(&data.to_string()),
    }
}

/// A change as format 4 stores it: items as format-2 blocks.
fn v6_change(change: &Change) -> Vec<u8> {
    match change {
        Change::Item(s) => v3_item_change(s.kind, s.id, &v6_block_of(s)),
        Change::Registration(tm, node) => v3_registration_change(tm, node),
        Change::Json(data) => v6_json_change(&data.to_string()),
    }
}

/// A change as format 5 stores it: items as format-3 blocks. (Each event of an item carries
/// it as finally stored: a log need not tell a consistent story for its format to be read.)
fn v7_change(change: &Change) -> Vec<u8> {
    match change {
        Change::Item(s) => v3_item_change(s.kind, s.id, &v7_block_of(s)),
        other => v6_change(other),
    }
}

/// A change as format 6 stores it: items as format-4 blocks, relative to the chunk's time
/// `at` and the event's own `revision`.
fn v8_change(change: &Change, at: i64, revision: u64) -> Vec<u8> {
    match change {
        Change::Item(s) => v3_item_change(s.kind, s.id, &v8_block_of(s, (at, revision))),
        other => v6_change(other),
    }
}

/// The format-2 block of a fixture item (without the format byte).
fn v6_block_of(s: &Stored) -> Vec<u8> {
    v6_block(s.action, START, s.end, s.cause, forced_of(s))
}

/// The forced record of a fixture item, as format 2 stores it.
fn forced_of(s: &Stored) -> Option<Vec<u8>> {
    s.forced.as_ref().map(|f| v6_forced(f.guards, f.by, f.at))
}

/// Writes the data dir of `version` into `db`; its events were committed at `at`.
pub fn write(db: &sled::Db, version: u32, at: i64) {
    let meta = db.open_tree("meta").unwrap();
    meta.insert("schema_version", &schema_version(version))
        .unwrap();
    write_items(db, version, &stored(version), true);
    if version < 2 {
        return;
    }
    // Version 2 adds the log, the revision and the counts.
    let events = db.open_tree("events").unwrap();
    let mut revision = 0;
    for transaction in history(version) {
        let first = revision + 1;
        revision += transaction.len() as u64;
        match version {
            // One key per event: format 1 (the JSON) in version 2, format 2 in version 3.
            2 | 3 => {
                for ((event, change), rev) in transaction.iter().zip(first..) {
                    let value = if version == 2 {
                        v2_event(*event, at, &v2_data(change))
                    } else {
                        v3_event(*event, at, &v3_change(change))
                    };
                    events.insert(v2_event_key(rev), value).unwrap();
                }
            }
            // One chunk per transaction (each well under 4 KiB), under its first revision:
            // format 3 in versions 4 and 5, format 4 in version 6, format 5 in version 7,
            // format 6 in version 8 (its items relative to the chunk's time and each
            // event's revision).
            _ => {
                let chunk: Vec<(u8, Vec<u8>)> = transaction
                    .iter()
                    .zip(first..)
                    .map(|((event, change), revision)| {
                        let encoded = match version {
                            ..=5 => v3_change(change),
                            6 => v6_change(change),
                            7 => v7_change(change),
                            _ => v8_change(change, at, revision),
                        };
                        (*event, encoded)
                    })
                    .collect();
                let value = match version {
                    ..=5 => v4_chunk(at, &chunk),
                    6 => v6_chunk(at, &chunk),
                    7 => v7_chunk(at, &chunk),
                    _ => v8_chunk(at, &chunk),
                };
                events.insert(v2_event_key(first), value).unwrap();
            }
        }
    }
    meta.insert("revision", &v2_revision(revision)).unwrap();
    // The counts hold what is stored and not announced: the announced item has left them.
    let mut counts = [0; 4];
    for s in stored(version).iter().filter(|s| s.id != ANNOUNCED.id) {
        counts[v2_count_slot(s.kind, s.action)] += 1;
    }
    meta.insert("item_counts", v2_item_counts(counts)).unwrap();
    if version >= 5 {
        let watermark = v5_watermark(ANNOUNCED.end, ANNOUNCED.kind, ANNOUNCED.id);
        meta.insert("expiry_watermark", watermark).unwrap();
        meta.insert("unreclaimed", &v5_unreclaimed(1)).unwrap();
    }
    if version >= 6 {
        let policy = if version < 7 {
            v6_policy(&POLICY)
        } else {
            v7_policy(&POLICY, escalation(version))
        };
        meta.insert("policy", policy).unwrap();
        let allowlist = db.open_tree("allowlist").unwrap();
        let expiry = db.open_tree("expiry").unwrap();
        for a in ALLOWED.iter().chain([&ALLOW_DUE]) {
            let value = v6_allow(a.prefix, a.comment, a.added_by, a.added_at, a.end);
            allowlist.insert(v6_allow_key(a.kind, a.id), value).unwrap();
            if let Some(end) = a.end {
                expiry
                    .insert(v6_allow_expiry_key(end, a.kind, a.id), &[])
                    .unwrap();
            }
        }
    }
    if version >= 7 {
        write_provenance(db, version, at);
    }
    // Version 9 keeps the share caps' figures, as the upgrade to it counted them.
    if version >= 9 {
        let (task_managers, nodes) = exposure(version);
        meta.insert("exposure", v9_exposure(&task_managers, &nodes))
            .unwrap();
    }
}

/// The `reports` (each stored item's kept reports) and `history` (each past block, its id's
/// counter, its `history_ends` key) of `version` (7 or later), in its formats; the blocks
/// ended at `at`.
fn write_provenance(db: &sled::Db, version: u32, at: i64) {
    let reports = db.open_tree("reports").unwrap();
    for s in stored(version) {
        for n in kept_reports(version, s) {
            reports
                .insert(v7_report_key(s.kind, s.id, n), report_value(version, s, n))
                .unwrap();
        }
    }
    let history = db.open_tree("history").unwrap();
    let ends = db.open_tree("history_ends").unwrap();
    for p in &PAST {
        let (kind, id) = (p.block.kind, p.block.id);
        history
            .insert(v7_numbered_key(kind, id, 0), past_value(version, p, at))
            .unwrap();
        history
            .insert(v1_item_key(kind, id), v7_history_count(0, 1))
            .unwrap();
        ends.insert(v7_history_end_key(at, kind, id, 0), &[])
            .unwrap();
    }
}

/// Writes the items in the item format of `version`, with their expiry entries, and (with
/// `members`) the registration of [`MEMBER`] in both membership trees
/// (migrations/0001-initial.md).
pub fn write_items(db: &sled::Db, version: u32, items: &[&Stored], members: bool) {
    let tree = db.open_tree("items").unwrap();
    let expiry = db.open_tree("expiry").unwrap();
    for s in items {
        let value = match version {
            ..=5 => v1_item(s.action, START, s.end, s.cause),
            6 => v6_item(s.action, START, s.end, s.cause, forced_of(s)),
            7 => v7_item(&v6_block_of(s), &provenance(version, s)),
            _ => v8_item(&v8_block_of(s, (0, 0))),
        };
        tree.insert(v1_item_key(s.kind, s.id), value).unwrap();
        if s.end != PERMANENT {
            expiry
                .insert(v1_expiry_key(s.end, s.kind, s.id), &[])
                .unwrap();
        }
    }
    if members {
        let (tm, node) = MEMBER;
        db.open_tree("tm_node")
            .unwrap()
            .insert(tm, v1_registration(node))
            .unwrap();
        db.open_tree("node_tms")
            .unwrap()
            .insert(v1_node_tms_key(node, tm), &[])
            .unwrap();
    }
}
