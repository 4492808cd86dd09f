//! What the data dir of each schema version holds: one small blocklist, written in that
//! version's layout (see [`crate::layouts`]) with raw sled, as that version would have left
//! it.

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
}

/// The items each version serves: both kinds, both actions, permanent and timed.
#[rustfmt::skip]
pub static ACTIVE: [Stored; 4] = [
    Stored { kind: NODE, id: "n1", action: EVACUATE, end: PERMANENT, cause: "disk" },
    Stored { kind: NODE, id: "n2", action: MARK_BLOCKED, end: FAR, cause: "net" },
    Stored { kind: TASK_MANAGER, id: "tm-1", action: MARK_BLOCKED, end: FAR, cause: "oom" },
    Stored { kind: TASK_MANAGER, id: "tm-2", action: EVACUATE, end: PERMANENT, cause: "gc" },
];

/// Came due while the daemon was stopped: stored with its expiry entry, counted, not yet
/// expired. The upgraded daemon's sweeper must find it through the old expiry index.
pub static DUE: Stored = Stored {
    kind: TASK_MANAGER,
    id: "tm-due",
    action: EVACUATE,
    end: START + 120_000,
    cause: "late",
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
};

/// Registered on n1 and not blocked itself, so n1's block reaches it through membership.
pub const MEMBER: (&str, &str) = ("tm-3", "n1");

/// What an event records.
pub enum Change {
    Item(&'static Stored),
    Registration(&'static str, &'static str),
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
    log
}

/// What `items` holds in `version`: the active items, the due one, and in version 5 the
/// announced one.
pub fn stored(version: u32) -> Vec<&'static Stored> {
    let mut items: Vec<&Stored> = ACTIVE.iter().chain([&DUE]).collect();
    if version >= 5 {
        items.push(&ANNOUNCED);
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
    }
}

/// A change as formats 2 and 3 store it.
fn v3_change(change: &Change) -> Vec<u8> {
    match change {
        Change::Item(s) => v3_item_change(s.kind, s.id, &v1_block(s.action, START, s.end, s.cause)),
        Change::Registration(tm, node) => v3_registration_change(tm, node),
    }
}

/// Writes the data dir of `version` into `db`; its events were committed at `at`.
pub fn write(db: &sled::Db, version: u32, at: i64) {
    let meta = db.open_tree("meta").unwrap();
    meta.insert("schema_version", &schema_version(version))
        .unwrap();
    write_items(db, &stored(version), true);
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
            // One chunk per transaction (each well under 4 KiB), under its first revision.
            _ => {
                let chunk: Vec<(u8, Vec<u8>)> = transaction
                    .iter()
                    .map(|(event, change)| (*event, v3_change(change)))
                    .collect();
                events
                    .insert(v2_event_key(first), v4_chunk(at, &chunk))
                    .unwrap();
            }
        }
    }
    meta.insert("revision", &v2_revision(revision)).unwrap();
    // The counts hold what is stored and not announced: the announced item has left them.
    let mut counts = [0; 4];
    for s in ACTIVE.iter().chain([&DUE]) {
        counts[v2_count_slot(s.kind, s.action)] += 1;
    }
    meta.insert("item_counts", v2_item_counts(counts)).unwrap();
    if version >= 5 {
        let watermark = v5_watermark(ANNOUNCED.end, ANNOUNCED.kind, ANNOUNCED.id);
        meta.insert("expiry_watermark", watermark).unwrap();
        meta.insert("unreclaimed", &v5_unreclaimed(1)).unwrap();
    }
}

/// Writes the items with their expiry entries, and (with `members`) the registration of
/// [`MEMBER`] in both membership trees (migrations/0001-initial.md).
pub fn write_items(db: &sled::Db, items: &[&Stored], members: bool) {
    let tree = db.open_tree("items").unwrap();
    let expiry = db.open_tree("expiry").unwrap();
    for s in items {
        tree.insert(
            v1_item_key(s.kind, s.id),
            v1_item(s.action, START, s.end, s.cause),
        )
        .unwrap();
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
