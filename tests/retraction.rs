//! Live reports over a real socket: a block held by several sources, each retracting its
//! own report (`POST /blocklist/retract/{kind}`), the block then what the others ask for
//! or ended, `retracted`; repeats of the same evidence; the unblock that still ends a
//! block whoever holds it; and what a `detector` token may and may not do.

mod common;

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const MB: &str = "MARK_BLOCKED";
const EVAC: &str = "MARK_BLOCKED_AND_EVACUATE_TASKS";
const PERMANENT: i64 = i64::MAX;

/// A report of `id` by `source` (merging into what is there).
fn report(id: &str, action: &str, cause: &str, source: &str) -> Value {
    json!({"id": id, "action": action, "cause": cause, "source": source, "allowMerge": true})
}

async fn add(d: &Daemon, kind: &str, items: Value) -> (StatusCode, Value) {
    d.post(&format!("/blocklist/{kind}"), items).await
}

/// `POST /blocklist/retract/{kind}` with `headers`: status, revision header, body.
async fn retract_as(
    d: &Daemon,
    kind: &str,
    headers: &[(&str, &str)],
    body: Value,
) -> (StatusCode, Option<u64>, Value) {
    let (status, h, body) = request(
        d,
        Method::POST,
        &format!("/blocklist/retract/{kind}"),
        headers,
        Some(body),
    )
    .await;
    let revision = h
        .get("x-blocklist-revision")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    (status, revision, body)
}

async fn retract(d: &Daemon, kind: &str, body: Value) -> (StatusCode, Option<u64>, Value) {
    retract_as(d, kind, &[], body).await
}

async fn history(d: &Daemon, path: &str) -> Vec<Value> {
    let (status, body) = d.get(&format!("{path}/history")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body.as_array().unwrap().clone()
}

/// Every event after revision `after`, up to the current one.
async fn events_after(d: &Daemon, after: u64) -> Vec<FeedEvent> {
    let upto = d.revision().await;
    let mut watch = Watch::open(d, Some(after), None).await.unwrap();
    watch.take(usize::try_from(upto - after).unwrap()).await
}

#[tokio::test]
async fn a_retraction_leaves_the_block_the_other_sources_ask_for() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    // An operator blocks n1 for good; an alert reports it too, stronger and timed.
    add(
        &d,
        "nodes",
        json!([report("n1", MB, "disk smart", "operator:alice")]),
    )
    .await;
    let (status, body) = add(
        &d,
        "nodes",
        json!([{"id": "n1", "action": EVAC, "cause": "DiskErrors", "timeout": 3_600_000,
            "source": "alerts/DiskErrors/f1", "allowMerge": true,
            "details": {"fingerprint": "f1", "startsAt": "t1"}}]),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(
        body[0]["action"], EVAC,
        "FLIP-224's merge, as before: {body}"
    );
    assert_eq!(body[0]["cause"], "disk smart,DiskErrors");
    assert_eq!(
        body[0]["heldBy"],
        json!(["operator:alice", "alerts/DiskErrors/f1"])
    );
    let (_, item) = d.get("/blocklist/nodes/n1").await;
    let live = item["liveReports"].as_array().expect("kept apart: {item}");
    assert_eq!(live.len(), 2, "{item}");
    assert_eq!(live[0]["source"], "operator:alice");
    assert_eq!(live[0]["endTimestamp"], json!(PERMANENT));
    assert_eq!(
        live[1]["details"],
        json!({"fingerprint": "f1", "startsAt": "t1"})
    );
    let before = d.revision().await;

    // The alert resolves: the operator's block is what is left.
    let (status, revision, body) = retract(
        &d,
        "nodes",
        json!([{"id": "n1", "source": "alerts/DiskErrors/f1"}]),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(revision, Some(before + 1), "one updated event");
    let result = &body["retracted"][0];
    assert_eq!(result["outcome"], "kept", "{body}");
    assert_eq!(result["item"]["action"], MB, "{body}");
    assert_eq!(result["item"]["endTimestamp"], json!(PERMANENT));
    assert_eq!(result["item"]["cause"], "disk smart");
    assert!(
        result["item"].get("heldBy").is_none(),
        "its source alone: {body}"
    );

    let (_, item) = d.get("/blocklist/nodes/n1").await;
    assert_eq!(
        (item["action"].clone(), item["cause"].clone()),
        (json!(MB), json!("disk smart"))
    );
    assert_eq!(item["source"], "operator:alice");
    assert_eq!(
        item["liveReports"].as_array().map(Vec::len),
        Some(1),
        "{item}"
    );
    // The ledger shows the retraction, newest first.
    assert_eq!(item["reports"][0]["operation"], "retract", "{item}");
    assert_eq!(item["reports"][0]["source"], "alerts/DiskErrors/f1");
    assert_eq!(item["reports"][0]["action"], EVAC);
    let events = events_after(&d, before).await;
    assert_eq!(summary(&events), pairs(&[("updated", "n1")]));
    assert_eq!(events[0].data["action"], MB);
    let (status, check) = d.get("/blocklist/check/nodes/n1").await;
    assert_eq!(
        (status, check["action"].clone()),
        (StatusCode::OK, json!(MB))
    );
}

#[tokio::test]
async fn the_last_retraction_ends_the_block_retracted_by_its_source() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    add(
        &d,
        "taskmanagers",
        json!([report("tm-1", EVAC, "oom", "det-a")]),
    )
    .await;
    add(
        &d,
        "taskmanagers",
        json!([report("tm-1", MB, "slow", "det-b")]),
    )
    .await;
    let before = d.revision().await;
    let (status, revision, body) = retract_as(
        &d,
        "taskmanagers",
        &[("Blocklist-Source", "det-a")],
        json!([{"id": "tm-1"}]),
    )
    .await;
    assert_eq!(
        (status, body["retracted"][0]["outcome"].clone()),
        (StatusCode::OK, json!("kept"))
    );
    assert_eq!(revision, Some(before + 1));
    assert_eq!(
        body["retracted"][0]["item"]["action"], MB,
        "det-b's: {body}"
    );

    let (status, revision, body) = retract(
        &d,
        "taskmanagers?reason=replaced",
        json!({"items": [{"id": "tm-1", "source": "det-b"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(revision, Some(before + 2));
    assert_eq!(body["retracted"][0]["outcome"], "ended", "{body}");
    let (status, _) = d.get("/blocklist/taskmanagers/tm-1").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let past = history(&d, "/blocklist/taskmanagers/tm-1").await;
    assert_eq!(past[0]["ended"]["how"], "retracted", "{past:?}");
    assert_eq!(past[0]["ended"]["source"], "det-b", "{past:?}");
    assert_eq!(past[0]["ended"]["reason"], "replaced", "{past:?}");
    let events = events_after(&d, before).await;
    assert_eq!(
        summary(&events),
        pairs(&[("updated", "tm-1"), ("removed", "tm-1")])
    );

    // A block held by its first source alone, by itself, ends at that source's retraction.
    add(&d, "nodes", json!([report("n9", MB, "c", "det-a")])).await;
    let (_, _, body) = retract(&d, "nodes", json!([{"id": "n9", "source": "det-a"}])).await;
    assert_eq!(body["retracted"][0]["outcome"], "ended", "{body}");
    assert_eq!(d.get("/blocklist/nodes/n9").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn retracting_what_is_not_there_changes_nothing_and_succeeds() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    add(&d, "nodes", json!([report("n1", MB, "c", "det-a")])).await;
    add(&d, "nodes", json!([report("n2", MB, "c", "det-a")])).await;
    retract(&d, "nodes", json!([{"id": "n2", "source": "det-a"}])).await;
    let at = d.revision().await;
    let (status, revision, body) = retract(
        &d,
        "nodes",
        json!([
            {"id": "n1", "source": "det-b"},     // never reported by det-b
            {"id": "n2", "source": "det-a"},     // already retracted: the block ended
            {"id": "n404", "source": "det-a"},   // never blocked
            {"id": "n1", "source": "det-a", "details": {"fingerprint": "other"}},
        ]),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let outcomes: Vec<&Value> = body["retracted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["outcome"])
        .collect();
    assert_eq!(outcomes, [&json!("absent"); 4], "{body}");
    assert_eq!(revision, Some(at), "nothing written");
    assert_eq!(d.revision().await, at);
    assert_eq!(d.get("/blocklist/nodes/n1").await.0, StatusCode::OK);
}

#[tokio::test]
async fn the_same_evidence_again_writes_nothing_and_new_evidence_is_a_report() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let alert = |starts: &str| {
        json!([{"id": "n1", "action": MB, "cause": "DiskErrors", "source": "alerts/D/f1",
            "allowMerge": true, "details": {"fingerprint": "f1", "startsAt": starts}}])
    };
    let (status, _) = add(&d, "nodes", alert("t1")).await;
    assert_eq!(status, StatusCode::CREATED);
    let at = d.revision().await;
    for _ in 0..3 {
        let (status, revision) =
            revision_of(&d, Method::POST, "/blocklist/nodes", Some(alert("t1"))).await;
        assert_eq!((status, revision), (StatusCode::ACCEPTED, at), "a repeat");
    }
    let (_, item) = d.get("/blocklist/nodes/n1").await;
    assert_eq!(item["reportCount"], 1, "{item}");
    // A new episode is a report, merged into the source's own live report.
    add(&d, "nodes", alert("t2")).await;
    assert_eq!(d.revision().await, at + 1);
    let (_, item) = d.get("/blocklist/nodes/n1").await;
    assert_eq!(item["reportCount"], 2);
    assert_eq!(item["liveReports"][0]["details"]["startsAt"], "t2");
    assert_eq!(item["liveReports"][0]["reportCount"], 2);
    // A late resolve of the first episode takes nothing of the second.
    let (_, _, body) = retract(
        &d,
        "nodes",
        json!([{"id": "n1", "source": "alerts/D/f1", "details": {"startsAt": "t1"}}]),
    )
    .await;
    assert_eq!(body["retracted"][0]["outcome"], "absent", "{body}");
    let (_, _, body) = retract(
        &d,
        "nodes",
        json!([{"id": "n1", "source": "alerts/D/f1", "details": {"startsAt": "t2"}}]),
    )
    .await;
    assert_eq!(body["retracted"][0]["outcome"], "ended", "{body}");
}

#[tokio::test]
async fn an_unblock_ends_the_block_whoever_holds_it_and_a_patch_is_every_reports_word() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    add(&d, "nodes", json!([report("n1", MB, "a", "det-a")])).await;
    add(&d, "nodes", json!([report("n1", EVAC, "b", "det-b")])).await;
    // Downgraded in place: what a retraction leaves says it too.
    let (status, body) = d
        .call(
            Method::PATCH,
            "/blocklist/nodes/n1",
            Some(json!({"action": MB})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, _, body) = retract(&d, "nodes", json!([{"id": "n1", "source": "det-a"}])).await;
    assert_eq!(body["retracted"][0]["item"]["action"], MB, "{body}");

    add(&d, "nodes", json!([report("n1", MB, "c", "det-c")])).await;
    let (status, _) = d.delete("/blocklist/nodes/n1").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(d.get("/blocklist/nodes/n1").await.0, StatusCode::NOT_FOUND);
    // Its live reports went with it: a new block starts with its own source alone.
    add(&d, "nodes", json!([report("n1", MB, "d", "det-d")])).await;
    let (_, item) = d.get("/blocklist/nodes/n1").await;
    assert!(
        item.get("liveReports").is_none() && item.get("heldBy").is_none(),
        "{item}"
    );
    let (_, _, body) = retract(&d, "nodes", json!([{"id": "n1", "source": "det-b"}])).await;
    assert_eq!(body["retracted"][0]["outcome"], "absent");
}

#[tokio::test]
async fn an_unblock_by_source_takes_every_block_that_source_holds() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    add(&d, "nodes", json!([report("first", MB, "c", "det-a")])).await;
    add(&d, "nodes", json!([report("later", MB, "c", "op")])).await;
    add(&d, "nodes", json!([report("later", MB, "c", "det-a")])).await;
    add(&d, "nodes", json!([report("gone", MB, "c", "det-a")])).await;
    add(&d, "nodes", json!([report("gone", MB, "c", "op")])).await;
    retract(&d, "nodes", json!([{"id": "gone", "source": "det-a"}])).await;
    add(&d, "nodes", json!([report("other", MB, "c", "op")])).await;
    let (status, body) = d.delete("/blocklist/nodes?source=det-a").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(ids(&body["removed"]), ["first", "later"], "{body}");
    assert_eq!(ids(&d.listing().await["blockedNodes"]), ["gone", "other"]);
}

#[tokio::test]
async fn a_dry_run_and_a_keyed_retry_of_a_retraction() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    add(&d, "nodes", json!([report("n1", MB, "a", "det-a")])).await;
    add(&d, "nodes", json!([report("n1", EVAC, "b", "det-b")])).await;
    let at = d.revision().await;
    let (status, _, body) = retract(
        &d,
        "nodes?dryRun=true",
        json!([{"id": "n1", "source": "det-b"}]),
    )
    .await;
    assert_eq!(
        (status, body["retracted"][0]["outcome"].clone()),
        (StatusCode::OK, json!("kept"))
    );
    assert_eq!(body["retracted"][0]["item"]["action"], MB, "{body}");
    assert_eq!(d.revision().await, at, "a dry run writes nothing");

    let key = [("Idempotency-Key", "5a8f1c1e-6f0b-4c1e-9a51-2b7d8e3c4f10")];
    let body = json!([{"id": "n1", "source": "det-b"}]);
    let first = retract_as(&d, "nodes", &key, body.clone()).await;
    let again = retract_as(&d, "nodes", &key, body).await;
    assert_eq!(first.0, StatusCode::OK);
    assert_eq!(first.2, again.2, "answered as the first time");
    assert_eq!(d.revision().await, at + 1, "applied once");
}

#[tokio::test]
async fn bad_retractions_are_refused_whole_and_named() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    add(&d, "nodes", json!([report("n1", MB, "a", "det-a")])).await;
    let at = d.revision().await;
    let (status, _, body) = retract(
        &d,
        "nodes",
        json!([{"id": "n1", "source": "det-a"}, {"id": ""}, {"id": "n2", "details": "x"}]),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let errors: Vec<&str> = body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].starts_with("items[1]") && errors[0].ends_with(".id: must not be empty"));
    assert!(errors[1].starts_with("items[2] (id \"n2\").details: must be an object"));
    assert_eq!(d.revision().await, at, "nothing written");
    let (status, _, _) = retract(&d, "nodes", json!([])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn past_32_sources_the_others_hold_the_block_together() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    for n in 0..34 {
        let (status, body) = add(
            &d,
            "nodes",
            json!([report("n1", MB, "c", &format!("s{n}"))]),
        )
        .await;
        assert!(status.is_success(), "FLIP-224 refuses no report: {body}");
    }
    let (_, item) = d.get("/blocklist/nodes/n1").await;
    let held = item["heldBy"].as_array().expect("held by: {item}");
    assert_eq!(held.len(), 33, "{item}");
    assert_eq!(held[32], "(other sources)", "{item}");
    assert_eq!(item["liveReports"][32]["reportCount"], 2, "{item}");
    // One of the others retracts nothing alone; naming them all takes them back.
    let (_, _, body) = retract(&d, "nodes", json!([{"id": "n1", "source": "s33"}])).await;
    assert_eq!(body["retracted"][0]["outcome"], "absent", "{body}");
    let (_, _, body) = retract(
        &d,
        "nodes",
        json!([{"id": "n1", "source": "(other sources)"}]),
    )
    .await;
    assert_eq!(body["retracted"][0]["outcome"], "kept", "{body}");
    assert_eq!(
        body["retracted"][0]["item"]["heldBy"]
            .as_array()
            .map(Vec::len),
        Some(32)
    );
}

fn token_file(ws: &Workspace) -> String {
    let path = ws.tmp.path().join("tokens");
    std::fs::write(
        &path,
        "admin-token name=alice role=admin\n\
         writer-token name=ops role=writer\n\
         detector-token name=alerts role=detector\n\
         enforcer-token name=bridge role=enforcer\n",
    )
    .unwrap();
    path.to_string_lossy().into_owned()
}

async fn as_token(
    d: &Daemon,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let auth = format!("Bearer {token}");
    let (status, _, body) = request(d, method, path, &[("Authorization", &auth)], body).await;
    (status, body)
}

#[tokio::test]
async fn a_detector_reports_and_retracts_under_its_own_name_and_nothing_else() {
    let mut ws = Workspace::new();
    let tokens = token_file(&ws);
    let d = ws.start(&["--token-file", &tokens]);
    let det = "detector-token";
    // Its reports are its own, whatever the request names; sources under its name stay.
    let (status, body) = as_token(
        &d,
        det,
        Method::POST,
        "/blocklist/nodes",
        Some(json!([
            {"id": "n1", "action": MB, "cause": "disk", "source": "operator:alice"},
            {"id": "n2", "action": MB, "cause": "disk", "source": "alerts/Disk/f2"},
        ])),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, n1) = d.get("/blocklist/nodes/n1").await;
    assert_eq!(n1["source"], "alerts", "{n1}");
    let (_, n2) = d.get("/blocklist/nodes/n2").await;
    assert_eq!(n2["source"], "alerts/Disk/f2", "{n2}");

    // An operator's block: the detector can neither unblock it nor retract for the operator.
    as_token(
        &d,
        "writer-token",
        Method::POST,
        "/blocklist/nodes",
        Some(json!([item("op-1", EVAC, "mine")])),
    )
    .await;
    let refusals = [
        (Method::DELETE, "/blocklist/nodes/op-1", None),
        (Method::DELETE, "/blocklist/nodes?source=ops", None),
        (
            Method::PATCH,
            "/blocklist/nodes/op-1",
            Some(json!({"action": MB})),
        ),
        (Method::PUT, "/policy", Some(json!({}))),
        (
            Method::PUT,
            "/allowlist/nodes/x",
            Some(json!({"comment": "c"})),
        ),
        (
            Method::PUT,
            "/taskmanagers/tm-1",
            Some(json!({"node": "n1"})),
        ),
        (Method::PUT, "/enforcement/alerts", Some(json!([]))),
        (
            Method::POST,
            "/blocklist/nodes?force=true",
            Some(json!([item("n3", MB, "c")])),
        ),
    ];
    for (method, path, body) in refusals {
        let (status, answer) = as_token(&d, det, method.clone(), path, body).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {answer}");
        assert!(
            answer["errors"][0]
                .as_str()
                .unwrap()
                .contains("role is detector"),
            "{answer}"
        );
    }
    let (status, body) = as_token(
        &d,
        det,
        Method::POST,
        "/blocklist/retract/nodes",
        Some(json!([{"id": "op-1", "source": "ops"}])),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["retracted"][0]["source"], "alerts", "its own: {body}");
    assert_eq!(body["retracted"][0]["outcome"], "absent");
    assert_eq!(d.get("/blocklist/nodes/op-1").await.0, StatusCode::OK);
    // Its own: taken back.
    let (_, body) = as_token(
        &d,
        det,
        Method::POST,
        "/blocklist/retract/nodes",
        Some(json!([{"id": "n1"}, {"id": "n2", "source": "alerts/Disk/f2"}])),
    )
    .await;
    assert_eq!(body["retracted"][0]["outcome"], "ended", "{body}");
    assert_eq!(body["retracted"][1]["outcome"], "ended", "{body}");
    // An enforcer cannot report, and a detector is no enforcer.
    let (status, _) = as_token(
        &d,
        "enforcer-token",
        Method::POST,
        "/blocklist/nodes",
        Some(json!([item("n5", MB, "c")])),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn a_retraction_acknowledged_survives_kill_9() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    add(&d, "nodes", json!([report("n1", MB, "a", "det-a")])).await;
    add(&d, "nodes", json!([report("n1", EVAC, "b", "det-b")])).await;
    add(&d, "nodes", json!([report("n2", MB, "a", "det-b")])).await;
    let (status, _, _) = retract(
        &d,
        "nodes",
        json!([{"id": "n1", "source": "det-b"}, {"id": "n2", "source": "det-b"}]),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    d.kill9();
    let d = ws.start(&[]);
    let (_, item) = d.get("/blocklist/nodes/n1").await;
    assert_eq!(
        (item["action"].clone(), item["cause"].clone()),
        (json!(MB), json!("a")),
        "{item}"
    );
    assert_eq!(d.get("/blocklist/nodes/n2").await.0, StatusCode::NOT_FOUND);
    if !on_etcd() {
        d.terminate();
        assert_check_passes(&ws.data_dir());
    }
}

#[tokio::test]
async fn a_block_several_sources_held_leaves_nothing_behind_once_it_expires_and_is_reclaimed() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let timed = |source: &str| {
        json!({"id": "n1", "action": MB, "cause": source, "source": source,
               "allowMerge": true, "timeout": 300})
    };
    for source in ["det-a", "det-b"] {
        let (status, body) = add(&d, "nodes", json!([timed(source)])).await;
        assert!(status.is_success(), "{status}: {body}");
    }
    let (_, item) = d.get("/blocklist/nodes/n1").await;
    assert_eq!(item["heldBy"], json!(["det-a", "det-b"]), "{item}");
    eventually("the expired block to be reclaimed", || async {
        d.reclaimed().await >= 1
    })
    .await;
    if !on_etcd() {
        d.terminate();
        assert_check_passes(&ws.data_dir());
    }
}
