//! Backward compatibility: a data dir of every older schema version (1 to 9), written byte by
//! byte as that version lays it out (`migrations/000N-*.md`), is opened by the real binary
//! (upgraded, when older than the current version) and served with all it held; a newer
//! schema is refused and left as it is.
//!
//! Layout: `upgrade/layouts.rs` builds each version's keys and values from the migration
//! documents; `upgrade/fixtures.rs` is the blocklist every version's fixture holds, and
//! from version 6 its guardrails (a stored policy, an allowlist, a forced block), from
//! version 7 its provenance (reports, revisions, an escalation, past blocks). Version 8's
//! fixture holds version 7's blocklist as a version-8 binary writes it: items in format 4,
//! event chunks in format 6, past blocks in format 2, and no share caps' figures
//! (`meta/exposure`), which the upgrade to version 9 counts; version 9's adds them. No fixture holds an
//! idempotency record: `tests/idempotency.rs` upgrades schema 8's.
//!
//! `every_older_schema_version_has_an_upgrade_test` fails while a version below the current
//! one has no fixture here.
// These tests write old formats byte by byte, on purpose without the daemon's encoders.
#![allow(clippy::big_endian_bytes, clippy::little_endian_bytes)]

mod common;
#[path = "upgrade/fixtures.rs"]
mod fixtures;
#[path = "upgrade/layouts.rs"]
mod layouts;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use blocklistd::store::SCHEMA_VERSION;
use common::*;
use fixtures::{
    Allowed, Change, Stored, ACTIVE, ALLOWED, ALLOW_DUE, ANNOUNCED, DUE, FORCED, MEMBER, POLICY,
    START,
};
use layouts::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const MB: &str = "MARK_BLOCKED";
const EVAC: &str = "MARK_BLOCKED_AND_EVACUATE_TASKS";

/// The item value (format 1) of a permanent evacuating node, cause "disk", started at
/// `1_700_000_000_000`, byte by byte as migrations/0001-initial.md describes it.
const N1_FORMAT_1: &[u8] = &[
    1, 1, 253, 0, 208, 202, 159, 23, 3, 0, 0, 253, 254, 255, 255, 255, 255, 255, 255, 255, 4, b'd',
    b'i', b's', b'k',
];

/// Starts the daemon on the older database the test wrote, and checks that it upgraded it.
fn start_upgrading(ws: &mut Workspace) -> Daemon {
    let d = ws.start(&[]);
    assert!(
        d.log_text().contains("upgraded the database schema"),
        "{}",
        d.log_text()
    );
    d
}

/// The layout builders give the bytes that `store::codec`'s own fixtures pin down, so a
/// builder that drifted from the format fails here, before any daemon starts.
#[test]
fn the_layouts_give_the_bytes_of_the_codec_fixtures() {
    assert_eq!(varint(250), [250]);
    assert_eq!(varint(251), [251, 251, 0]);
    assert_eq!(varint(1 << 16), [252, 0, 0, 1, 0]);
    assert_eq!(varint(1 << 32), [253, 0, 0, 0, 0, 1, 0, 0, 0]);
    assert_eq!(signed(-1), [1]);
    // format_v1_fixture
    assert_eq!(v1_item(EVACUATE, START, PERMANENT, "disk"), N1_FORMAT_1);
    // event_format_v1_fixture
    assert_eq!(v2_event(EXPIRED, 2, "{}"), [1, 3, 4, 2, b'{', b'}']);
    // event_format_v2_fixture
    let t1 = v3_item_change(TASK_MANAGER, "t1", &v1_block(EVACUATE, 5, 9, "c"));
    let on_n1 = v3_registration_change("t1", "n1");
    let t1_expired = [2, 3, 4, 0, b'T', 2, b't', b'1', 1, 10, 18, 1, b'c'];
    assert_eq!(v3_event(EXPIRED, 2, &t1), t1_expired);
    let registered = [2, 4, 4, 1, 2, b't', b'1', 2, b'n', b'1'];
    assert_eq!(v3_event(REGISTERED, 2, &on_n1), registered);
    // events_format_v3_fixture
    assert_eq!(
        v4_chunk(2, &[(EXPIRED, t1), (REGISTERED, on_n1.clone())]),
        [
            3, 4, 2, 3, 0, b'T', 2, b't', b'1', 1, 10, 18, 1, b'c', 4, 1, 2, b't', b'1', 2, b'n',
            b'1',
        ]
    );
    // format_v2_fixture: format 1's fields, then no forced record, or one.
    let plain = v6_item(EVACUATE, START, PERMANENT, "disk", None);
    assert_eq!(plain, [&[2], &N1_FORMAT_1[1..], &[0]].concat());
    let forced = v6_forced(&["blocked-share"], Some("ops"), 3);
    let mut forced_bytes = plain[..plain.len() - 1].to_vec();
    forced_bytes.extend_from_slice(&[1, 1, 13]);
    forced_bytes.extend_from_slice(b"blocked-share");
    forced_bytes.extend_from_slice(&[1, 3, b'o', b'p', b's', 6]);
    assert_eq!(
        v6_item(EVACUATE, START, PERMANENT, "disk", Some(forced)),
        forced_bytes
    );
    // allowlist_and_policy_format_fixtures: the policy in format 1 (schema 6), and in
    // format 2 (schema 7) with no escalation, or one.
    assert_eq!(
        v6_allow(true, "dbs", None, 1, Some(2)),
        [1, 1, 3, b'd', b'b', b's', 0, 2, 1, 4]
    );
    assert_eq!(
        v6_policy(&fixtures::DEFAULT_POLICY),
        [1, 1, 50, 1, 20, 0, 0, 1, 50, 0, 0, 0, 10, 0, 1]
    );
    assert_eq!(
        v7_policy(&fixtures::DEFAULT_POLICY, None),
        [2, 1, 50, 1, 20, 0, 0, 1, 50, 0, 0, 0, 10, 0, 1, 0]
    );
    assert_eq!(
        v7_policy(&fixtures::DEFAULT_POLICY, Some((2, 3_600, 86_400))),
        [
            2, 1, 50, 1, 20, 0, 0, 1, 50, 0, 0, 0, 10, 0, 1, 1, 2, 251, 0x10, 0x0e, 252, 0x80,
            0x51, 0x01, 0x00
        ]
    );
    // events_format_v4_fixture: the item's block in format 2, and a JSON change.
    let t1 = v3_item_change(TASK_MANAGER, "t1", &v6_block(EVACUATE, 5, 9, "c", None));
    assert_eq!(
        v6_chunk(
            2,
            &[
                (EXPIRED, t1),
                (REGISTERED, on_n1.clone()),
                (POLICY_CHANGED, v6_json_change("{}"))
            ]
        ),
        [
            4, 4, 3, 3, 0, b'T', 2, b't', b'1', 1, 10, 18, 1, b'c', 0, 4, 1, 2, b't', b'1', 2,
            b'n', b'1', 6, 2, 2, b'{', b'}',
        ]
    );
    // format_v3_fixture: format 2's fields, then source "detector", 1 report, first and last
    // at the start, revision 42, and no escalation record, or one.
    let detector = || ProvenanceLayout {
        source: "detector".into(),
        reports: 1,
        first_report: START,
        last_report: START,
        revision: 42,
        escalated: None,
    };
    let start = &N1_FORMAT_1[2..11];
    let block = v6_item(EVACUATE, START, PERMANENT, "disk", None)[1..].to_vec();
    let plain = [
        &[3],
        &block[..],
        &[8],
        b"detector",
        &[1],
        start,
        start,
        &[42, 0],
    ]
    .concat();
    assert_eq!(v7_item(&block, &detector()), plain);
    let escalated = ProvenanceLayout {
        escalated: Some((2, 8, 2)),
        ..detector()
    };
    let mut escalated_bytes = plain[..plain.len() - 1].to_vec();
    escalated_bytes.extend_from_slice(&[1, 4, 16, 2]);
    assert_eq!(v7_item(&block, &escalated), escalated_bytes);
    // events_format_v5_fixture: the item's block in format 3.
    let unknown = ProvenanceLayout {
        source: "unknown".into(),
        reports: 1,
        first_report: 5,
        last_report: 5,
        revision: 0,
        escalated: None,
    };
    let t1 = v3_item_change(
        TASK_MANAGER,
        "t1",
        &v7_block(&v6_block(EVACUATE, 5, 9, "c", None), &unknown),
    );
    assert_eq!(
        v7_chunk(
            2,
            &[
                (EXPIRED, t1),
                (REGISTERED, on_n1.clone()),
                (POLICY_CHANGED, v6_json_change("{}"))
            ]
        ),
        [
            5, 4, 3, 3, 0, b'T', 2, b't', b'1', 1, 10, 18, 1, b'c', 0, 7, b'u', b'n', b'k', b'n',
            b'o', b'w', b'n', 1, 10, 10, 0, 0, 4, 1, 2, b't', b'1', 2, b'n', b'1', 6, 2, 2, b'{',
            b'}',
        ]
    );
    // format_v4_fixture: format 3's fields with the end, the reports' times and the
    // revision as distances, the source "detector", and no escalation record, or one.
    let v8_plain: &[u8] = &[
        4, 1, 253, 0, 208, 202, 159, 23, 3, 0, 0, 253, 254, 47, 53, 96, 232, 252, 255, 255, 4,
        b'd', b'i', b's', b'k', 0, 8, b'd', b'e', b't', b'e', b'c', b't', b'o', b'r', 1, 0, 0, 84,
        0,
    ];
    let v8_block_of =
        |end: i64, p: &ProvenanceLayout| v8_block(EVACUATE, START, end, "disk", None, p, (0, 0));
    assert_eq!(v8_item(&v8_block_of(PERMANENT, &detector())), v8_plain);
    let hour_unknown = ProvenanceLayout {
        source: "unknown".into(),
        reports: 2,
        last_report: START + 3,
        escalated: Some((2, 8, 2)),
        ..detector()
    };
    assert_eq!(
        v8_item(&v8_block_of(START + 3_600_000, &hour_unknown)),
        [
            4, 1, 253, 0, 208, 202, 159, 23, 3, 0, 0, 252, 0, 221, 109, 0, 4, b'd', b'i', b's',
            b'k', 0, 0, 2, 0, 6, 84, 1, 4, 16, 2,
        ]
    );
    // events_format_v6_fixture: the item's block in format 4, its start relative to the
    // chunk's time (2) and its revision to the event's own (7).
    let t1 = v3_item_change(
        TASK_MANAGER,
        "t1",
        &v8_block(EVACUATE, 5, 9, "c", None, &unknown, (2, 7)),
    );
    assert_eq!(
        v8_chunk(
            2,
            &[
                (EXPIRED, t1),
                (REGISTERED, on_n1),
                (POLICY_CHANGED, v6_json_change("{}"))
            ]
        ),
        [
            6, 4, 3, 3, 0, b'T', 2, b't', b'1', 1, 6, 8, 1, b'c', 0, 0, 1, 0, 0, 13, 0, 4, 1, 2,
            b't', b'1', 2, b'n', b'1', 6, 2, 2, b'{', b'}',
        ]
    );
    // past_format_fixtures: format 2, the block in format 4, expired 12 ms after its end.
    let hour_block = v8_block_of(START + 3_600_000, &detector());
    assert_eq!(
        v8_past(
            &hour_block,
            EXPIRED,
            START + 3_600_012,
            START + 3_600_000,
            None,
            None
        ),
        [&[2][..], &hour_block, &[3, 24, 0, 0]].concat()
    );
    // keys::allow_expiry_key: the item's expiry key with the tag in lower case.
    assert_eq!(
        v6_allow_expiry_key(5, TASK_MANAGER, "t1"),
        [0, 0, 0, 0, 0, 0, 0, 5, b't', b't', b'1']
    );
}

/// The JSON of a fixture item as a listing returns it in `version` once the daemon opened
/// it (nodes with their task managers).
fn served(version: u32, s: &Stored) -> Value {
    let mut item = flip224(s);
    add_provenance(&mut item, &fixtures::provenance(version, s));
    if s.kind == NODE {
        let (tm, node) = MEMBER;
        item["taskManagers"] = if s.id == node { json!([tm]) } else { json!([]) };
    }
    item
}

/// [`served`], as `GET` returns one item: with its kept reports, newest first.
fn served_one(version: u32, s: &Stored) -> Value {
    let mut item = served(version, s);
    item["reports"] = fixtures::kept_reports(version, s)
        .rev()
        .map(|n| {
            let r = fixtures::report(version, s, n);
            json!({"timestamp": r.at, "source": r.source,
                "operation": if r.operation == OP_UPDATE { "update" } else { "add" },
                "action": fixtures::action_name(r.action), "endTimestamp": r.end,
                "cause": r.cause})
        })
        .collect();
    item
}

/// The FLIP-224 fields of a fixture item (and `forced`, when it was forced).
fn flip224(s: &Stored) -> Value {
    let mut item = json!({"id": s.id, "action": fixtures::action_name(s.action),
        "startTimestamp": START, "endTimestamp": s.end, "cause": s.cause});
    if let Some(f) = &s.forced {
        item["forced"] = json!({"guards": f.guards, "by": f.by, "at": f.at});
    }
    item
}

/// Adds the provenance fields to an item's JSON (`escalated` only when it was).
fn add_provenance(item: &mut Value, p: &ProvenanceLayout) {
    item["source"] = json!(p.source);
    item["reportCount"] = json!(p.reports);
    item["firstReportTimestamp"] = json!(p.first_report);
    item["lastReportTimestamp"] = json!(p.last_report);
    item["revision"] = json!(p.revision);
    if let Some((requested, timeout, past)) = p.escalated {
        item["escalated"] =
            json!({"requestedTimeout": requested, "timeout": timeout, "pastBlocks": past});
    }
}

/// The JSON of a fixture item with its kind, as a check or a new event carries it once
/// the daemon opened `version`.
fn with_kind(version: u32, s: &Stored) -> Value {
    let mut item = flip224(s);
    item["kind"] = json!(fixtures::kind_name(s.kind));
    add_provenance(&mut item, &fixtures::provenance(version, s));
    item
}

/// The JSON of a fixture item in an event of the log `version` wrote.
fn logged(version: u32, s: &Stored) -> Value {
    let mut item = flip224(s);
    item["kind"] = json!(fixtures::kind_name(s.kind));
    if let Some(p) = fixtures::logged_provenance(version, s) {
        add_provenance(&mut item, &p);
    }
    item
}

fn item_path(s: &Stored) -> String {
    format!("/blocklist/{}s/{}", fixtures::kind_name(s.kind), s.id)
}

/// The feed's name of an event code (`EventType::ALL`'s order).
fn event_name(event: u8) -> String {
    let names = [
        "added",
        "merged",
        "removed",
        "expired",
        "registered",
        "unregistered",
        "policy",
        "allowlisted",
        "unallowlisted",
        "allowlist-expired",
        "updated",
    ];
    names[usize::from(event)].to_owned()
}

/// An event of the log of `version` as the feed sends it: its type and its data.
fn sent(version: u32, event: u8, change: &Change) -> (String, Value) {
    let data = match change {
        Change::Item(s) => logged(version, s),
        Change::Registration(tm, node) => json!({"id": tm, "node": node}),
        Change::Json(data) => data.clone(),
    };
    (event_name(event), data)
}

/// The `meta` entry `key` of a stopped daemon's data dir.
fn stored_meta(dir: &Path, key: &str) -> Option<Vec<u8>> {
    let db = open_sled(dir);
    let meta = db.open_tree("meta").unwrap();
    let bytes = meta.get(key).unwrap().map(|v| v.to_vec());
    drop((meta, db));
    wait_until_unlocked(dir);
    bytes
}

/// The schema version stored in a stopped daemon's data dir.
fn stored_schema_version(dir: &Path) -> u32 {
    let bytes = stored_meta(dir, "schema_version").expect("a schema version");
    u32::from_be_bytes(bytes.as_slice().try_into().expect("4 bytes"))
}

/// Writes the fixture of `version`, starts the daemon on it, and checks that it upgrades
/// it (when older than the current version), serves every item (an upgraded one with one
/// report, from `unknown` at its start), registration, event and guardrail it held, expires
/// what came due into the history, keeps what was announced gone, gives the next change the
/// next revision, and leaves a data dir of the current version that `blocklistd check`
/// passes, with the reports and the history the items should have and the share caps'
/// figures of its registrations.
async fn upgrades_and_serves(version: u32) {
    let mut ws = Workspace::new();
    let dir = ws.data_dir();
    // Events committed now: older ones would fall to age retention at the first commit (and
    // so would past blocks that ended long ago).
    let at = now_ms();
    {
        let db = open_sled(&dir);
        fixtures::write(&db, version, at);
        db.flush().unwrap();
    }
    wait_until_unlocked(&dir);
    let d = ws.start(&[]);
    let upgraded = d.log_text().contains("upgraded the database schema");
    assert_eq!(upgraded, version < SCHEMA_VERSION, "{}", d.log_text());

    let mut nodes = vec![&ACTIVE[0], &ACTIVE[1]];
    if version >= 6 {
        nodes.push(&FORCED);
    }
    for s in nodes.iter().chain(&[&ACTIVE[2], &ACTIVE[3]]) {
        let resp = d.send(Method::GET, &item_path(s), None).await;
        let etag = resp.headers()["etag"].to_str().unwrap().to_owned();
        let revision = fixtures::provenance(version, s).revision;
        assert_eq!(etag, format!("\"{revision}\""), "{}", s.id);
        let got = resp.json::<Value>().await.unwrap();
        assert_eq!(got, served_one(version, s));
        if version < 7 {
            assert_eq!(
                got["reports"],
                json!([{"timestamp": START, "source": "unknown", "operation": "add",
                    "action": fixtures::action_name(s.action), "endTimestamp": s.end,
                    "cause": s.cause}]),
                "{}: one report, from unknown at its start",
                s.id
            );
        }
    }
    // Both have ended: gone for every reader, whether or not announced yet.
    for s in [&DUE, &ANNOUNCED] {
        assert_eq!(
            d.get(&item_path(s)).await.0,
            StatusCode::NOT_FOUND,
            "{}",
            s.id
        );
    }
    // The sweeper finds the due item through the old expiry index and announces it; the
    // one behind the watermark it never announces again. From version 6 the ended allowlist
    // entry is due too, and comes after it in the expiry tree (a later end).
    let mut announced = vec![(event_name(EXPIRED), with_kind(version, &DUE))];
    if version >= 6 {
        let entry = fixtures::allowed_json(&ALLOW_DUE);
        announced.push(sent(version, ALLOWLIST_EXPIRED, &Change::Json(entry)));
    }
    let logged: Vec<(String, Value)> = fixtures::history(version)
        .iter()
        .flatten()
        .map(|(event, change)| sent(version, *event, change))
        .collect();
    let last = (logged.len() + announced.len()) as u64;
    eventually("the due entries to be announced", || async {
        d.listing().await["revision"] == last
    })
    .await;
    // The sweeper counts what it announced once its commit is visible: wait for the count.
    eventually("the sweeper to count the due item", || async {
        d.swept().await >= 1
    })
    .await;
    assert_eq!(d.swept().await, 1, "only the due item is announced");
    assert_eq!(
        d.listing().await,
        json!({"blockedTaskManagers": [served(version, &ACTIVE[2]), served(version, &ACTIVE[3])],
            "blockedNodes": nodes.iter().map(|s| served(version, s)).collect::<Vec<_>>(),
            "revision": last})
    );

    // Membership: the registration is kept, and the node's block reaches the task manager.
    let (tm, node) = MEMBER;
    assert_eq!(
        d.get(&format!("/taskmanagers/{tm}")).await,
        (StatusCode::OK, json!({"id": tm, "node": node}))
    );
    assert_eq!(
        d.get(&format!("/blocklist/check/taskmanagers/{tm}"))
            .await
            .1,
        json!({"id": tm, "node": node, "blocked": true, "action": EVAC,
            "blockedBy": [with_kind(version, &ACTIVE[0])]})
    );
    assert_eq!(
        d.get("/blocklist/check/taskmanagers/tm-1").await.1,
        json!({"id": "tm-1", "blocked": true, "action": MB,
            "blockedBy": [with_kind(version, &ACTIVE[2])]})
    );
    assert_guardrails(&d, version).await;

    // The log as stored, the expiry, then changes after the upgrade at the next revisions.
    let mut watch = Watch::open(&d, Some(0), None).await.unwrap();
    let body = json!([item("tm-new", MB, "c")]);
    assert_eq!(
        revision_of(&d, Method::POST, "/blocklist/taskmanagers", Some(body)).await,
        (StatusCode::CREATED, last + 1)
    );
    assert_eq!(
        revision_of(&d, Method::DELETE, &item_path(&ACTIVE[1]), None).await,
        (StatusCode::OK, last + 2)
    );
    let mut expected = logged;
    expected.extend(announced);
    let events = watch.take(expected.len() + 2).await;
    assert_consecutive(&events, 0);
    let got: Vec<(String, Value)> = events
        .iter()
        .map(|e| (e.event.clone(), e.data.clone()))
        .collect();
    assert_eq!(got[..expected.len()], expected);
    assert_eq!(
        summary(&events[expected.len()..]),
        pairs(&[("added", "tm-new"), ("removed", "n2")])
    );
    assert_eq!(
        events[expected.len() + 1].data,
        with_kind(version, &ACTIVE[1])
    );
    assert_histories(&d, version, at).await;

    // The storage of every expired item is reclaimed once writers pause; an allowlist
    // entry's went when it was announced.
    let expired = if version >= 5 { 2 } else { 1 };
    eventually("the expired items' storage to be reclaimed", || async {
        d.reclaimed().await == expired
    })
    .await;
    assert_eq!(d.swept().await, 1, "nothing is announced twice");
    assert!(d.terminate().success());
    assert_eq!(stored_schema_version(&dir), SCHEMA_VERSION);
    // An older data dir got the default policy stored at its first start on version 6 or
    // later (in the current format); a stored one is kept as it was written (format 1 in
    // version 6, format 2 from version 7).
    let policy = match version {
        ..=5 => v7_policy(&fixtures::DEFAULT_POLICY, None),
        6 => v6_policy(&POLICY),
        _ => v7_policy(&POLICY, fixtures::escalation(version)),
    };
    assert_eq!(stored_meta(&dir, "policy"), Some(policy));
    if version >= 6 {
        assert_allowlist_stored_as_written(&dir);
    }
    assert_provenance_stored(&dir, version, at);
    assert_written_in_current_formats(&dir);
    // No fixture holds the share caps' figures: the upgrade to version 9 counts them, and
    // no change since touched a registered id (tm-new and n2 are not registered).
    let (task_managers, nodes) = fixtures::exposure(version);
    assert_eq!(
        stored_meta(&dir, "exposure"),
        Some(v9_exposure(&task_managers, &nodes)),
        "meta/exposure"
    );
    assert_check_passes(&dir);
}

/// What the daemon wrote after the upgrade is in the current formats: the item it added
/// (format 4), the chunk of its last change (format 6), and the past block of the item it
/// removed (format 2); what it did not touch keeps the format it was written in.
fn assert_written_in_current_formats(dir: &Path) {
    let trees = contents(dir);
    let format_of = |tree: &str, key: &[u8]| {
        trees[tree.as_bytes()]
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, value)| value[0])
    };
    assert_eq!(
        format_of("items", &v1_item_key(TASK_MANAGER, "tm-new")),
        Some(4),
        "the item added after the upgrade"
    );
    let (_, last_chunk) = trees[b"events".as_slice()].last().unwrap();
    assert_eq!(last_chunk[0], 6, "the chunk of the last change");
    let removed = &ACTIVE[1];
    let entries = [&v1_item_key(removed.kind, removed.id)[..], &[0]].concat();
    let newest_past = trees[b"history".as_slice()]
        .iter()
        .rfind(|(key, _)| key.starts_with(&entries))
        .map(|(_, value)| value[0]);
    assert_eq!(
        newest_past,
        Some(2),
        "the past block of the item removed after the upgrade"
    );
}

/// The histories after the test's changes: the due item's id has its expiry newest (and
/// from version 7 the block it had before, removed with a reason), n2 its removal (by
/// `unknown`, no header nor token), the announced item from version 7 its expiry, and an
/// id never blocked none. The ones that ended while the daemon ran ended after the fixture
/// was written (`at`).
async fn assert_histories(d: &Daemon, version: u32, at: i64) {
    let past = |s: &Stored, ending: Value| {
        let mut block = served(version, s);
        block.as_object_mut().unwrap().remove("taskManagers");
        block["ended"] = ending;
        block
    };
    let history = |s: &Stored| {
        let path = format!("{}/history", item_path(s));
        async move {
            let (status, body) = d.get(&path).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            body
        }
    };
    // When a block that ended while the daemon ran ended, checked to be since `at`.
    let ended_since = |entry: &Value| {
        let when = entry["ended"]["timestamp"].as_i64().unwrap();
        assert!(when >= at && when <= now_ms(), "{entry}");
        when
    };
    let due = history(&DUE).await;
    let when = ended_since(&due[0]);
    let mut expected = vec![past(&DUE, json!({"how": "expired", "timestamp": when}))];
    if version >= 7 {
        expected.push(past(
            &fixtures::EARLIER,
            json!({"how": "removed", "timestamp": at, "source": fixtures::EARLIER_REMOVED_BY,
                "reason": fixtures::EARLIER_REASON}),
        ));
    }
    assert_eq!(due, json!(expected));
    let n2 = history(&ACTIVE[1]).await;
    let when = ended_since(&n2[0]);
    assert_eq!(
        n2,
        json!([past(
            &ACTIVE[1],
            json!({"how": "removed", "timestamp": when, "source": "unknown"})
        )])
    );
    let gone = if version >= 7 {
        json!([past(&ANNOUNCED, json!({"how": "expired", "timestamp": at}))])
    } else {
        json!([]) // announced before there was a history
    };
    assert_eq!(history(&ANNOUNCED).await, gone);
    assert_eq!(history(&ACTIVE[0]).await, json!([]));
}

/// The provenance trees of the data dir `version`'s fixture left once the daemon ran on it
/// and stopped: each fixture item still stored keeps its reports byte for byte (upgraded:
/// report 0, from `unknown` at its start); the removed, expired and reclaimed ones none,
/// nor tm-new, whose one report its item implies.
/// The history holds the fixture's past blocks (from version 7) as written, and one more
/// entry for each id whose block ended while the daemon ran (the due item, n2), with the
/// counters to match.
fn assert_provenance_stored(dir: &Path, version: u32, at: i64) {
    let trees = contents(dir);
    let mut kept: Vec<&Stored> = vec![&ACTIVE[0], &ACTIVE[2], &ACTIVE[3]];
    if version >= 6 {
        kept.push(&FORCED);
    }
    let mut reports: Vec<(Vec<u8>, Vec<u8>)> = kept
        .iter()
        .flat_map(|s| {
            fixtures::kept_reports(version, s).map(|n| {
                let key = v7_report_key(s.kind, s.id, n);
                (key, fixtures::report_value(version, s, n))
            })
        })
        .collect();
    reports.sort();
    // tm-new, added while the daemon ran, has one report: its item implies it.
    assert_eq!(
        trees[b"reports".as_slice()],
        reports,
        "the reports of the items still stored, and none of tm-new"
    );

    let history: BTreeMap<&[u8], &[u8]> = trees[b"history".as_slice()]
        .iter()
        .map(|(k, v)| (k.as_slice(), v.as_slice()))
        .collect();
    let due_key = v1_item_key(DUE.kind, DUE.id);
    let n2_key = v1_item_key(ACTIVE[1].kind, ACTIVE[1].id);
    let mut counters = vec![
        (due_key.clone(), v7_history_count(0, 1)),
        (n2_key, v7_history_count(0, 1)),
    ];
    if version >= 7 {
        counters[0].1 = v7_history_count(0, 2);
        counters.push((
            v1_item_key(ANNOUNCED.kind, ANNOUNCED.id),
            v7_history_count(0, 1),
        ));
        for p in &fixtures::PAST {
            let key = v7_numbered_key(p.block.kind, p.block.id, 0);
            assert_eq!(
                history.get(key.as_slice()).copied(),
                Some(fixtures::past_value(version, p, at).as_slice()),
                "{}'s past block as written",
                p.block.id
            );
        }
    }
    counters.sort();
    let stored_counters: Vec<(Vec<u8>, Vec<u8>)> = history
        .iter()
        .filter(|(key, _)| !key.contains(&0))
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect();
    assert_eq!(stored_counters, counters);
    let entries = history.len() - counters.len();
    assert_eq!(entries, if version >= 7 { 4 } else { 2 });
    assert_eq!(trees[b"history_ends".as_slice()].len(), entries);
}

/// The guardrails a data dir of `version` is served with. From version 6 the stored policy
/// (from version 7 with an escalation; none before) and the allowlist entries in force (not
/// the one that ended), which refuse an add of an id they cover: for good (422) for an
/// entry until removed, for later (429) while one with an end applies. An older data dir
/// has the default policy and no allowlist.
async fn assert_guardrails(d: &Daemon, version: u32) {
    let (policy, entries) = if version >= 6 {
        let entries: Vec<Value> = ALLOWED.iter().map(fixtures::allowed_json).collect();
        let policy = fixtures::policy_json_v7(&POLICY, fixtures::escalation(version));
        (policy, entries)
    } else {
        let policy = json!({
            "nodes": {"maxBlockedPercent": 50, "maxEvacuatingPercent": 20, "maxBlocked": null,
                "evacuations": null},
            "taskManagers": {"maxBlockedPercent": 50, "maxEvacuatingPercent": null,
                "maxBlocked": null, "evacuations": null},
            "minRegistered": 10,
            "maxBlockDurationSecs": null,
            "permanentBlocksAllowed": true,
            "escalation": null,
        });
        (policy, Vec::new())
    };
    assert_eq!(d.get("/policy").await, (StatusCode::OK, policy));
    let (status, allowlist) = d.get("/allowlist").await;
    assert_eq!(
        (status, &allowlist["entries"]),
        (StatusCode::OK, &json!(entries))
    );
    if version < 6 {
        return;
    }
    let refusal = |a: &Allowed, id: &str, which: &str| {
        format!(
            "{} {id:?} is on the allowlist ({which}: {:?}",
            fixtures::kind_name(a.kind),
            a.comment
        )
    };
    let (status, body) = d
        .post("/blocklist/nodes", json!([item("db-7", MB, "c")]))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let expected = refusal(&ALLOWED[0], "db-7", "the prefix entry \"db-\"") + ", added by alice)";
    assert!(
        body["errors"][0].as_str().unwrap().contains(&expected),
        "{body}"
    );
    let canary = &ALLOWED[1];
    let (status, body) = d
        .post("/blocklist/taskmanagers", json!([item(canary.id, MB, "c")]))
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    let expected = refusal(canary, canary.id, "its entry")
        + &format!(", until {} (unix ms))", canary.end.unwrap());
    assert!(
        body["errors"][0].as_str().unwrap().contains(&expected),
        "{body}"
    );
}

/// The allowlist of the version-6 fixture after the daemon ran on it: the entries in force
/// byte for byte as written, with the expiry entry of the one with an end; nothing left of
/// the one that ended.
fn assert_allowlist_stored_as_written(dir: &Path) {
    let trees = contents(dir);
    let stored: Vec<(Vec<u8>, Vec<u8>)> = ALLOWED
        .iter()
        .map(|a| {
            let value = v6_allow(a.prefix, a.comment, a.added_by, a.added_at, a.end);
            (v6_allow_key(a.kind, a.id), value)
        })
        .collect();
    assert_eq!(trees[b"allowlist".as_slice()], stored);
    let allow_ends: Vec<Vec<u8>> = trees[b"expiry".as_slice()]
        .iter()
        .map(|(key, _)| key.clone())
        // The tag after the 8-byte end: lower case for an allowlist entry.
        .filter(|key| key[8].is_ascii_lowercase())
        .collect();
    let canary = &ALLOWED[1];
    assert_eq!(
        allow_ends,
        [v6_allow_expiry_key(
            canary.end.unwrap(),
            canary.kind,
            canary.id
        )]
    );
}

/// Version 1 (migrations/0001-initial.md): items, their expiry index, membership.
#[tokio::test]
async fn a_version_1_data_dir_is_upgraded_and_serves_all_it_held() {
    upgrades_and_serves(1).await;
}

/// Version 2 (migrations/0002-change-feed.md): adds a log of format-1 events (finished
/// JSON), the revision and the item counts.
#[tokio::test]
async fn a_version_2_data_dir_is_upgraded_and_serves_all_it_held() {
    upgrades_and_serves(2).await;
}

/// Version 3 (migrations/0003-compact-events.md): events in format 2 (bincode changes).
#[tokio::test]
async fn a_version_3_data_dir_is_upgraded_and_serves_all_it_held() {
    upgrades_and_serves(3).await;
}

/// Version 4 (migrations/0004-event-chunks.md): events in chunks of a transaction.
#[tokio::test]
async fn a_version_4_data_dir_is_upgraded_and_serves_all_it_held() {
    upgrades_and_serves(4).await;
}

/// Version 5 (migrations/0005-expiry-watermark.md): an expiry watermark with an announced
/// item not yet reclaimed. Upgraded, it gets the default policy and an empty allowlist.
#[tokio::test]
async fn a_version_5_data_dir_is_upgraded_and_serves_all_it_held() {
    upgrades_and_serves(5).await;
}

/// Version 6 (migrations/0006-guardrails.md): items and events in the formats with a
/// forced record, policy and allowlist events, a stored policy, and an allowlist with and
/// without ends. Upgraded, every item gets one report, from `unknown` at its start, and
/// the revision the database had; its policy is kept as it was written.
#[tokio::test]
async fn a_version_6_data_dir_is_upgraded_and_serves_all_it_held() {
    upgrades_and_serves(6).await;
}

/// Version 7 (migrations/0007-provenance.md): items in format 3 with their provenance (one
/// with more reports than it keeps, one escalated, one updated), their reports, the past
/// blocks of two ids with their counters and index, events in format 5 (an `updated` and a
/// `removed` among them), and a policy with an escalation. Its upgrade rewrites none of
/// them: it serves every item, event, report and past block as written.
#[tokio::test]
async fn a_version_7_data_dir_is_upgraded_and_serves_all_it_held() {
    upgrades_and_serves(7).await;
}

/// Version 8 (migrations/0008-compact-items.md): version 7's blocklist as a version-8
/// binary writes it: items in format 4, events in format 6 (each item relative to its
/// chunk's time and its event's revision), past blocks in format 2, and no `meta/exposure`,
/// which the upgrade to version 9 counts and stores.
#[tokio::test]
async fn a_version_8_data_dir_is_upgraded_and_serves_all_it_held() {
    upgrades_and_serves(8).await;
}

/// Version 9 (migrations/0009-records-and-figures.md): version 8's blocklist with the share
/// caps' figures stored (`meta/exposure`). Its upgrade to version 10 creates the `live`
/// tree empty: every block is held by its first source alone, by itself.
#[tokio::test]
async fn a_version_9_data_dir_is_upgraded_and_serves_all_it_held() {
    upgrades_and_serves(9).await;
}

/// Every schema version older than the current one has its fixture above: a version with
/// no `#[tokio::test]` that runs `upgrades_and_serves(N)` fails here, so a schema cannot
/// be added without a fixture of the one it replaces.
#[test]
fn every_older_schema_version_has_an_upgrade_test() {
    let source = include_str!("upgrade.rs");
    // The file's top-level items, each ending with the brace that closes it at column 0: an
    // async test is one with the attribute before its signature, and one also ignored does
    // not run, so its call covers nothing.
    let covered: BTreeSet<u32> = source
        .split("\n}\n")
        .filter_map(|item| item.split_once("async fn "))
        .filter(|(head, _)| head.contains("\n#[tokio::test]\n") && !head.contains("#[ignore"))
        .flat_map(|(_, body)| {
            body.lines().filter_map(|line| {
                let call = line.trim().strip_prefix("upgrades_and_serves(")?;
                call.strip_suffix(").await;")?.parse().ok()
            })
        })
        .collect();
    for version in 1..SCHEMA_VERSION {
        assert!(
            covered.contains(&version),
            "schema version {version} has no upgrade test (the current one is \
             {SCHEMA_VERSION}): add a fixture for version {version} (its layouts in \
             tests/upgrade/layouts.rs from migrations/{version:04}-*.md, its data in \
             tests/upgrade/fixtures.rs) and a #[tokio::test] that runs \
             upgrades_and_serves({version})"
        );
    }
}

/// The first version-1 layout has no membership trees: `tm_node` and `node_tms` joined
/// version 1 without a version bump (`git log -p migrations/0001-initial.md`). Such a dir
/// is upgraded all the same, and takes registrations after it.
#[tokio::test]
async fn a_version_1_data_dir_without_membership_trees_is_upgraded() {
    let mut ws = Workspace::new();
    let dir = ws.data_dir();
    {
        let db = open_sled(&dir);
        db.open_tree("meta")
            .unwrap()
            .insert("schema_version", &schema_version(1))
            .unwrap();
        fixtures::write_items(&db, 1, &ACTIVE.iter().collect::<Vec<_>>(), false);
        db.flush().unwrap();
    }
    wait_until_unlocked(&dir);
    let d = start_upgrading(&mut ws);
    // No revision stored in version 1: the items are upgraded at revision 0.
    let mut nodes = vec![served(1, &ACTIVE[0]), served(1, &ACTIVE[1])];
    nodes[0]["taskManagers"] = json!([]);
    assert_eq!(
        d.get("/blocklist/nodes").await,
        (StatusCode::OK, json!(nodes))
    );
    let (tm, node) = MEMBER;
    assert_eq!(
        revision_of(
            &d,
            Method::PUT,
            &format!("/taskmanagers/{tm}"),
            Some(json!({"node": node}))
        )
        .await,
        (StatusCode::CREATED, 1)
    );
    assert_eq!(
        d.get(&format!("/blocklist/check/taskmanagers/{tm}"))
            .await
            .1["blockedBy"],
        json!([with_kind(1, &ACTIVE[0])])
    );
    assert!(d.terminate().success());
    assert_eq!(stored_schema_version(&dir), SCHEMA_VERSION);
    assert_check_passes(&dir);
}

/// The version 7 upgrade rewrites items in transactions of 1,000, each leaving the version
/// at 6: a data dir where a run was cut short after its first transaction (1,000 items in
/// format 3 with their report, the rest in format 2) is finished by the next start, which
/// leaves the rewritten ones as they are and gives the others their report and revision.
#[tokio::test]
async fn a_version_7_upgrade_cut_short_resumes_where_it_stopped() {
    const ITEMS: usize = 2_500;
    const DONE: usize = 1_000;
    let (revision, earlier_run) = (9, 5);
    let mut ws = Workspace::new();
    let dir = ws.data_dir();
    let id = |i: usize| format!("tm-{i:05}");
    let unknown = |revision| ProvenanceLayout {
        source: "unknown".into(),
        reports: 1,
        first_report: START,
        last_report: START,
        revision,
        escalated: None,
    };
    {
        let db = open_sled(&dir);
        let meta = db.open_tree("meta").unwrap();
        meta.insert("schema_version", &schema_version(6)).unwrap();
        meta.insert("revision", &v2_revision(revision)).unwrap();
        meta.insert("item_counts", v2_item_counts([ITEMS as u64, 0, 0, 0]))
            .unwrap();
        meta.insert("policy", v6_policy(&fixtures::DEFAULT_POLICY))
            .unwrap();
        let items = db.open_tree("items").unwrap();
        let reports = db.open_tree("reports").unwrap();
        for i in 0..ITEMS {
            let block = v6_block(MARK_BLOCKED, START, PERMANENT, "c", None);
            let key = v1_item_key(TASK_MANAGER, &id(i));
            if i < DONE {
                // What the cut-short run wrote, at the revision the database had then.
                items
                    .insert(key, v7_item(&block, &unknown(earlier_run)))
                    .unwrap();
                let report = v7_report(START, "unknown", OP_ADD, MARK_BLOCKED, PERMANENT, "c");
                reports
                    .insert(v7_numbered_key(TASK_MANAGER, &id(i), 0), report)
                    .unwrap();
            } else {
                items.insert(key, [&[2], &block[..]].concat()).unwrap();
            }
        }
        db.flush().unwrap();
    }
    wait_until_unlocked(&dir);
    let d = start_upgrading(&mut ws);
    let (status, listed) = d.get("/blocklist/taskmanagers").await;
    assert_eq!(status, StatusCode::OK);
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), ITEMS);
    for (i, item) in listed.iter().enumerate() {
        let mut expected = json!({"id": id(i), "action": MB, "startTimestamp": START,
            "endTimestamp": PERMANENT, "cause": "c"});
        let at = if i < DONE { earlier_run } else { revision };
        add_provenance(&mut expected, &unknown(at));
        assert_eq!(item, &expected);
    }
    for i in [0, DONE - 1, DONE, ITEMS - 1] {
        let (_, item) = d.get(&format!("/blocklist/taskmanagers/{}", id(i))).await;
        assert_eq!(item["reports"].as_array().unwrap().len(), 1, "{item}");
    }
    assert!(d.terminate().success());
    assert_eq!(stored_schema_version(&dir), SCHEMA_VERSION);
    let trees = contents(&dir);
    assert_eq!(trees[b"reports".as_slice()].len(), ITEMS, "one report each");
    assert!(trees[b"items".as_slice()]
        .iter()
        .all(|(_, value)| value[0] == 3));
    assert_check_passes(&dir);
}

#[tokio::test]
async fn a_version_1_database_is_upgraded_keeping_its_data() {
    let ws = Workspace::new();
    let dir = ws.data_dir();
    // A database in the exact version-1 layout (migrations/0001-initial.md), written byte
    // by byte rather than by the current code.
    {
        let db = common::open_sled(&dir);
        db.open_tree("meta")
            .unwrap()
            .insert("schema_version", &1u32.to_be_bytes())
            .unwrap();
        let items = db.open_tree("items").unwrap();
        items.insert(b"Nn1", N1_FORMAT_1).unwrap();
        db.open_tree("expiry").unwrap();
        db.open_tree("tm_node")
            .unwrap()
            .insert(b"tm-1", &[1, b'n', b'1'])
            .unwrap();
        db.open_tree("node_tms")
            .unwrap()
            .insert(b"n1\0tm-1", &[])
            .unwrap();
        db.flush().unwrap();
    }
    wait_until_unlocked(&dir);
    let mut ws = ws;
    let d = start_upgrading(&mut ws);
    let (_, node) = d.get("/blocklist/nodes/n1").await;
    assert_eq!(node["action"], EVAC);
    assert_eq!(node["startTimestamp"], json!(1_700_000_000_000i64));
    assert_eq!(node["taskManagers"], json!(["tm-1"]));
    assert_eq!(
        d.get("/blocklist/check/taskmanagers/tm-1").await.1["blocked"],
        true
    );
    // The log starts at the current revision, 0.
    assert_eq!(d.listing().await["revision"], 0);
    let mut watch = Watch::open(&d, Some(0), None).await.unwrap();
    d.post("/blocklist/taskmanagers", json!([item("tm-2", MB, "c")]))
        .await;
    assert_eq!(summary(&watch.take(1).await), pairs(&[("added", "tm-2")]));
    assert!(d.terminate().success());
    let (problems, _) = ws.inspect();
    assert!(problems.is_empty(), "{problems:?}");
}

#[tokio::test]
async fn a_version_2_log_is_still_served_after_the_upgrade() {
    let ws = Workspace::new();
    let dir = ws.data_dir();
    // A version-2 database (migrations/0002-change-feed.md), byte by byte: one item and its
    // `added` event in format 1 (finished JSON), revision 1.
    let data = r#"{"kind":"node","id":"n1","action":"MARK_BLOCKED_AND_EVACUATE_TASKS","startTimestamp":1700000000000,"endTimestamp":9223372036854775807,"cause":"disk"}"#;
    {
        let db = common::open_sled(&dir);
        let meta = db.open_tree("meta").unwrap();
        meta.insert("schema_version", &2u32.to_be_bytes()).unwrap();
        meta.insert("revision", &1u64.to_be_bytes()).unwrap();
        let mut counts = vec![0u8; 32];
        counts[31] = 1; // one (node, MARK_BLOCKED_AND_EVACUATE_TASKS)
        meta.insert("item_counts", counts).unwrap();
        db.open_tree("items")
            .unwrap()
            .insert(b"Nn1", N1_FORMAT_1)
            .unwrap();
        db.open_tree("expiry").unwrap();
        db.open_tree("tm_node").unwrap();
        db.open_tree("node_tms").unwrap();
        // format 1, event 0 (added), at = now (a zigzag varint: 253 and 8 bytes; an older
        // event would be pruned by age retention as soon as something commits), the JSON.
        let mut event = vec![1u8, 0, 253];
        event.extend_from_slice(&(now_ms() as u64 * 2).to_le_bytes());
        event.push(data.len() as u8);
        event.extend_from_slice(data.as_bytes());
        db.open_tree("events")
            .unwrap()
            .insert(1u64.to_be_bytes(), event)
            .unwrap();
        db.flush().unwrap();
    }
    wait_until_unlocked(&dir);
    let mut ws = ws;
    let d = start_upgrading(&mut ws);
    assert_eq!(d.listing().await["revision"], 1);
    let mut watch = Watch::open(&d, Some(0), None).await.unwrap();
    d.post("/blocklist/taskmanagers", json!([item("tm-2", MB, "c")]))
        .await;
    let events = watch.take(2).await;
    assert_consecutive(&events, 0);
    // The old event as it was stored, the new one built from format 2.
    assert_eq!(
        events[0].data,
        serde_json::from_str::<serde_json::Value>(data).unwrap()
    );
    assert_eq!(
        summary(&events),
        pairs(&[("added", "n1"), ("added", "tm-2")])
    );
    assert_eq!(events[1].data["kind"], "taskmanager");
    assert!(d.terminate().success());
    let (problems, _) = ws.inspect();
    assert!(problems.is_empty(), "{problems:?}");
}

/// Every tree of a sled database by name, with its entries (key, value) in order.
type Contents = BTreeMap<Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>>;

/// What the sled database in `dir` holds.
fn contents(dir: &Path) -> Contents {
    let db = open_sled(dir);
    let trees = db
        .tree_names()
        .into_iter()
        .map(|name| {
            let tree = db.open_tree(&name).unwrap();
            let entries = tree
                .iter()
                .map(|entry| {
                    let (key, value) = entry.unwrap();
                    (key.to_vec(), value.to_vec())
                })
                .collect();
            (name.to_vec(), entries)
        })
        .collect();
    drop(db);
    wait_until_unlocked(dir);
    trees
}

/// An older binary must never misread a newer layout: both the daemon and the offline
/// subcommands refuse it, say what to do, and change nothing in it.
#[tokio::test]
async fn a_newer_schema_is_refused_with_a_clear_message_and_left_unchanged() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    assert_eq!(
        d.post("/blocklist/nodes", json!([item("n1", MB, "disk")]))
            .await
            .0,
        StatusCode::CREATED
    );
    assert!(d.terminate().success());
    let dir = ws.data_dir();
    {
        let db = common::open_sled(&dir);
        db.open_tree("meta")
            .unwrap()
            .insert("schema_version", &99u32.to_be_bytes())
            .unwrap();
        db.flush().unwrap();
    }
    wait_until_unlocked(&dir);
    let before = contents(&dir);
    let message = format!(
        "schema version 99, newer than this binary supports ({SCHEMA_VERSION}): run a newer \
         blocklistd"
    );
    let stderr = refused_start(&dir);
    assert!(stderr.contains(&message), "{stderr}");
    assert_eq!(
        contents(&dir),
        before,
        "the daemon left the database as it was"
    );
    let out = blocklistd(&["--data-dir".as_ref(), dir.as_os_str(), "check".as_ref()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&message), "{stderr}");
    assert_eq!(contents(&dir), before, "check left the database as it was");
}
