//! What the data dir of each schema version holds: one small blocklist, written in that
//! version's layout (see [`crate::layouts`]) with raw sled, as that version would have left
//! it; from version 6 also a stored policy and an allowlist.

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
    /// Version 6 only: the record of a block admitted past a guardrail by force.
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

/// Version 6 only: an active item admitted past the item cap by force, so its value holds
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

/// Version 5 only: announced expired (its expiry key is the watermark, its `expired` event
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

/// Registered on n1 and not blocked itself, so n1's block reaches it through membership.
pub const MEMBER: (&str, &str) = ("tm-3", "n1");

/// One allowlist entry (version 6).
pub struct Allowed {
    pub kind: u8,
    pub id: &'static str,
    pub prefix: bool,
    pub comment: &'static str,
    pub added_by: Option<&'static str>,
    pub added_at: i64,
    pub end: Option<i64>,
}

/// The allowlist entries in force in version 6: a prefix entry until removed, and an exact
/// one with an end (and its `expiry` entry). No stored item is covered by either: putting
/// an entry lifts the blocks it covers.
#[rustfmt::skip]
pub static ALLOWED: [Allowed; 2] = [
    Allowed { kind: NODE, id: "db-", prefix: true, comment: "databases", added_by: Some("alice"),
        added_at: START + 1_000, end: None },
    Allowed { kind: TASK_MANAGER, id: "tm-canary", prefix: false, comment: "the canary",
        added_by: None, added_at: START + 2_000, end: Some(FAR) },
];

/// Version 6 only: an allowlist entry that ended while the daemon was stopped (a hold-off,
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

/// The policy stored in version 6: the default but for a node cap and a node evacuation
/// rate, so that each option of a kind is stored both set and unset.
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

/// A policy as `GET /policy` returns it, and as its event carries it.
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
    if version >= 5 {
        log.push(vec![(ADDED, Item(&ANNOUNCED)), (ADDED, Item(&DUE))]);
        log.push(vec![(EXPIRED, Item(&ANNOUNCED))]);
    } else {
        log.push(vec![(ADDED, Item(&DUE))]);
    }
    if version >= 6 {
        log.push(vec![(POLICY_CHANGED, Json(policy_json(&POLICY)))]);
        log.push(
            ALLOWED
                .iter()
                .chain([&ALLOW_DUE])
                .map(|a| (ALLOWLISTED, Json(allowed_json(a))))
                .collect(),
        );
        log.push(vec![(ADDED, Item(&FORCED))]);
    }
    log
}

/// What `items` holds in `version`: the active items, the due one, from version 5 the
/// announced one, and in version 6 the forced one.
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
            // format 3 in versions 4 and 5, format 4 in version 6.
            _ => {
                let encode = if version < 6 { v3_change } else { v6_change };
                let chunk: Vec<(u8, Vec<u8>)> = transaction
                    .iter()
                    .map(|(event, change)| (*event, encode(change)))
                    .collect();
                let value = if version < 6 {
                    v4_chunk(at, &chunk)
                } else {
                    v6_chunk(at, &chunk)
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
        meta.insert("policy", v6_policy(&POLICY)).unwrap();
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
}

/// Writes the items in the item format of `version`, with their expiry entries, and (with
/// `members`) the registration of [`MEMBER`] in both membership trees
/// (migrations/0001-initial.md).
pub fn write_items(db: &sled::Db, version: u32, items: &[&Stored], members: bool) {
    let tree = db.open_tree("items").unwrap();
    let expiry = db.open_tree("expiry").unwrap();
    for s in items {
        let value = if version < 6 {
            v1_item(s.action, START, s.end, s.cause)
        } else {
            v6_item(s.action, START, s.end, s.cause, forced_of(s))
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
