//! Unblock by selector — `DELETE /blocklist/{kind}?source=…&cause=…&all=true`: exactly the
//! matching items go, in one transaction, each with its `removed` event and its past block;
//! a dry run writes nothing; more matches than `--max-batch` remove none (413); a selector
//! is required, and `all=true` needs an admin token; adds racing the delete never leave a
//! matching item half-removed.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const MB: &str = "MARK_BLOCKED";

/// An add element reported by `source`.
fn from(id: &str, source: &str, cause: &str) -> Value {
    json!({"id": id, "action": MB, "cause": cause, "source": source})
}

async fn add(d: &Daemon, kind: &str, items: Vec<Value>) {
    let (status, body) = d.post(&format!("/blocklist/{kind}"), json!(items)).await;
    assert!(status.is_success(), "{status}: {body}");
}

/// Sends a DELETE as `caller` (`Blocklist-Source`); the status, the body, and the revision
/// and `Dry-Run` headers.
async fn delete_as(d: &Daemon, path: &str, caller: &str) -> (StatusCode, Value, Option<u64>, bool) {
    let resp = d
        .client
        .delete(d.url(path))
        .header("Blocklist-Source", caller)
        .send()
        .await
        .expect("request");
    let revision = resp
        .headers()
        .get("x-blocklist-revision")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    let dry = resp.headers().get("dry-run").is_some();
    let status = resp.status();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    (status, body, revision, dry)
}

/// Every event up to revision `upto`, from the feed's start.
async fn events_upto(d: &Daemon, upto: u64) -> Vec<FeedEvent> {
    let mut watch = Watch::open(d, Some(0), None).await.unwrap();
    let events = watch.take(usize::try_from(upto).unwrap()).await;
    assert_consecutive(&events, 0);
    events
}

/// The active items of `kind` (by id, with their data) after replaying `events` up to and
/// including revision `at`.
fn state_at(events: &[FeedEvent], kind: &str, at: u64) -> BTreeMap<String, Value> {
    let mut state = BTreeMap::new();
    for e in events.iter().take_while(|e| e.id <= at) {
        if e.data["kind"] != kind {
            continue;
        }
        let id = e.data["id"].as_str().unwrap().to_owned();
        match e.event.as_str() {
            "added" | "merged" | "updated" => {
                state.insert(id, e.data.clone());
            }
            "removed" | "expired" => {
                state.remove(&id);
            }
            other => panic!("unexpected event {other}"),
        }
    }
    state
}

#[tokio::test]
async fn a_selector_delete_removes_exactly_the_matching_items() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    add(
        &d,
        "taskmanagers",
        vec![
            from("a1", "det-a", "disk full"),
            from("a2", "det-a", "oom,disk full"),
            from("a3", "det-a", "disk full"),
            from("a4", "det-a", "oom"),
            from("b1", "det-b", "disk full"),
        ],
    )
    .await;
    // A later report by another source leaves the item det-a's (the first report's).
    let mut again = from("a3", "det-b", "slow");
    again["allowMerge"] = json!(true);
    add(&d, "taskmanagers", vec![again]).await;
    add(&d, "nodes", vec![from("n1", "det-a", "disk full")]).await;
    let before = d.revision().await;

    let (status, body, rev, dry) = delete_as(
        &d,
        "/blocklist/taskmanagers?source=det-a&cause=disk&reason=disk%20replaced",
        "operator:alice",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(!dry);
    assert_eq!(body["count"], 3, "{body}");
    assert_eq!(ids(&body["removed"]), ["a1", "a2", "a3"]);
    assert_eq!(body["removed"][2]["cause"], "disk full,slow", "{body}");
    assert_eq!(body["removed"][2]["source"], "det-a", "{body}");
    let rev = rev.expect("a revision header");
    assert_eq!(rev, before + 3, "one revision per removal");

    // The others stay: another source, another cause, the other kind.
    let listing = d.listing().await;
    assert_eq!(ids(&listing["blockedTaskManagers"]), ["a4", "b1"]);
    assert_eq!(ids(&listing["blockedNodes"]), ["n1"]);

    // One `removed` event per item, in one run of revisions.
    let events = events_upto(&d, rev).await;
    let removals: Vec<(String, String)> = summary(&events[usize::try_from(before).unwrap()..]);
    assert_eq!(
        removals,
        pairs(&[("removed", "a1"), ("removed", "a2"), ("removed", "a3")])
    );

    // Each has its past block, with the reason and the caller's source.
    for id in ["a1", "a2", "a3"] {
        let (status, past) = d
            .get(&format!("/blocklist/taskmanagers/{id}/history"))
            .await;
        assert_eq!(status, StatusCode::OK, "{past}");
        assert_eq!(past.as_array().map(Vec::len), Some(1), "{past}");
        let ended = &past[0]["ended"];
        assert_eq!(ended["how"], "removed", "{past}");
        assert_eq!(ended["reason"], "disk replaced", "{past}");
        assert_eq!(ended["source"], "operator:alice", "{past}");
        assert_eq!(past[0]["source"], "det-a", "{past}");
    }

    // A cause alone, on nodes; a selector that matches nothing is an empty answer.
    let (status, body, _, _) = delete_as(&d, "/blocklist/nodes?cause=full", "op").await;
    assert_eq!((status, body["count"].clone()), (StatusCode::OK, json!(1)));
    assert_eq!(ids(&body["removed"]), ["n1"]);
    let at = d.revision().await;
    let (status, body, rev, _) = delete_as(&d, "/blocklist/nodes?source=nobody", "op").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({"count": 0, "removed": []}));
    assert_eq!(rev, Some(at), "nothing written");
}

#[tokio::test]
async fn a_dry_run_lists_what_would_go_and_writes_nothing() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    add(
        &d,
        "nodes",
        vec![
            from("n1", "det-a", "x"),
            from("n2", "det-a", "y"),
            from("n3", "det-b", "x"),
        ],
    )
    .await;
    let before = d.listing().await;
    let (status, body, rev, dry) =
        delete_as(&d, "/blocklist/nodes?source=det-a&dryRun=true", "op").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(dry, "Dry-Run: true");
    assert_eq!(rev, None, "a dry run takes no revision");
    assert_eq!(body["count"], 2);
    assert_eq!(ids(&body["removed"]), ["n1", "n2"]);
    assert_eq!(d.listing().await, before);
    let (_, past) = d.get("/blocklist/nodes/n1/history").await;
    assert_eq!(past, json!([]));
}

#[tokio::test]
async fn over_the_limit_is_413_with_the_count_and_removes_nothing() {
    let mut ws = Workspace::new();
    let d = ws.start(&["--max-batch", "3"]);
    add(
        &d,
        "taskmanagers",
        vec![
            from("t1", "det-a", "x"),
            from("t2", "det-a", "x"),
            from("t3", "det-a", "x"),
        ],
    )
    .await;
    add(
        &d,
        "taskmanagers",
        vec![from("t4", "det-a", "x"), from("t5", "det-a", "y")],
    )
    .await;
    let before = d.listing().await;
    for query in ["source=det-a", "source=det-a&dryRun=true", "all=true"] {
        let (status, body, _, _) =
            delete_as(&d, &format!("/blocklist/taskmanagers?{query}"), "op").await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{query}: {body}");
        let message = body["errors"][0].as_str().unwrap();
        assert!(
            message
                .contains("5 task managers match; the limit is 3 per request; narrow the selector"),
            "{message}"
        );
    }
    assert_eq!(d.listing().await, before, "nothing was removed");
    // Narrowed to the limit, it goes through.
    let (status, body, _, _) =
        delete_as(&d, "/blocklist/taskmanagers?source=det-a&cause=x", "op").await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "4 match: {body}");
    let (status, body, _, _) = delete_as(&d, "/blocklist/taskmanagers?cause=y", "op").await;
    assert_eq!((status, body["count"].clone()), (StatusCode::OK, json!(1)));
}

#[tokio::test]
async fn a_selector_is_required_and_checked() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    add(&d, "nodes", vec![from("n1", "det-a", "x")]).await;
    for (query, needle) in [
        ("", "give a selector"),
        ("?all=false", "give a selector"),
        ("?reason=why", "give a selector"),
        ("?dryRun=true", "give a selector"),
        ("?source=", "source: must not be empty"),
        (
            "?source=a%01b",
            "source: contains the control character U+0001",
        ),
        ("?cause=", "cause: must not be empty"),
        ("?all=yes", "all: must be true or false"),
        ("?source=a&source=b", "source: given more than once"),
        ("?holdOff=1m&source=det-a", "takes no parameter \"holdOff\""),
        ("?sources=det-a", "takes no parameter \"sources\""),
    ] {
        let (status, body, _, _) = delete_as(&d, &format!("/blocklist/nodes{query}"), "op").await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        let message = body["errors"][0].as_str().unwrap();
        assert!(message.contains(needle), "{query}: {body}");
    }
    assert_eq!(ids(&d.listing().await["blockedNodes"]), ["n1"]);
}

#[tokio::test]
async fn all_needs_an_admin_token() {
    let mut ws = Workspace::new();
    let tokens = ws.tmp.path().join("tokens");
    std::fs::write(
        &tokens,
        "writer-token role=writer name=bot\nadmin-token role=admin name=alice\n",
    )
    .unwrap();
    let d = ws.start(&["--token-file", tokens.to_str().unwrap()]);
    let as_token = |path: &str, token: &str| {
        d.client
            .request(Method::DELETE, d.url(path))
            .bearer_auth(token)
            .send()
    };
    let add_tms = d
        .client
        .post(d.url("/blocklist/taskmanagers"))
        .bearer_auth("writer-token")
        .json(&json!([from("t1", "det-a", "x"), from("t2", "det-b", "x")]))
        .send()
        .await
        .unwrap();
    assert_eq!(add_tms.status(), StatusCode::CREATED);
    let add_nodes = d
        .client
        .post(d.url("/blocklist/nodes"))
        .bearer_auth("writer-token")
        .json(&json!([from("n1", "det-a", "x")]))
        .send()
        .await
        .unwrap();
    assert_eq!(add_nodes.status(), StatusCode::CREATED);

    let refused = as_token("/blocklist/taskmanagers?all=true", "writer-token")
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let body: Value = refused.json().await.unwrap();
    assert!(body.to_string().contains("needs an admin token"), "{body}");
    let removed = as_token("/blocklist/taskmanagers?source=det-a", "writer-token")
        .await
        .unwrap();
    assert_eq!(removed.status(), StatusCode::OK);
    // The token's name is the unblock's source when no header names one.
    let (_, past) = d.get("/blocklist/taskmanagers/t1/history").await;
    assert_eq!(past[0]["ended"]["source"], "bot", "{past}");

    let removed = as_token("/blocklist/taskmanagers?all=true", "admin-token")
        .await
        .unwrap();
    assert_eq!(removed.status(), StatusCode::OK);
    let body: Value = removed.json().await.unwrap();
    assert_eq!(ids(&body["removed"]), ["t2"]);
    let listing = d.listing().await;
    assert_eq!(listing["blockedTaskManagers"], json!([]));
    assert_eq!(
        ids(&listing["blockedNodes"]),
        ["n1"],
        "the other kind stays"
    );
}

/// Adds of matching ids (new ones, and merges into those being deleted) race a selector
/// delete: the delete takes every matching item there is at its turn and nothing else, so
/// replaying the feed, no matching item is left at the delete's revision, what it removed is
/// exactly what matched just before it, and every other item (and every match added after
/// it) remains.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_adds_never_leave_a_matching_item_half_removed() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    for chunk in 0..4 {
        let items: Vec<Value> = (0..100)
            .map(|i| {
                let n = chunk * 100 + i;
                let source = if n % 4 == 0 { "det-b" } else { "det-a" };
                from(&format!("pre-{n:03}"), source, "x")
            })
            .collect();
        add(&d, "taskmanagers", items).await;
    }
    let d = std::sync::Arc::new(d);
    let mut writers = Vec::new();
    for w in 0..4 {
        let d = d.clone();
        writers.push(tokio::spawn(async move {
            for round in 0..25 {
                let mut merge = from(
                    &format!("pre-{:03}", (w * 97 + round * 13) % 400),
                    "det-a",
                    "y",
                );
                merge["allowMerge"] = json!(true);
                let items = vec![
                    from(&format!("new-{w}-{round:02}"), "det-a", "x"),
                    from(&format!("other-{w}-{round:02}"), "det-b", "x"),
                    merge,
                ];
                let (status, body) = d.post("/blocklist/taskmanagers", json!(items)).await;
                assert!(status.is_success(), "{status}: {body}");
            }
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    let (status, body, rev, _) =
        delete_as(&d, "/blocklist/taskmanagers?source=det-a&reason=race", "op").await;
    for writer in writers {
        writer.await.unwrap();
    }
    assert_eq!(status, StatusCode::OK, "{body}");
    let rev = rev.unwrap();
    let count = body["count"].as_u64().unwrap();
    assert!(count >= 300, "at least the pre-added det-a items: {count}");
    let removed: BTreeSet<String> = ids(&body["removed"]).into_iter().collect();

    let last = d.revision().await;
    let events = events_upto(&d, last).await;
    // The items det-a holds: those it reported first, and det-b's that it merged into
    // (only det-a's merges bring the cause `y`): `source=` takes both, whole.
    let by_source = |state: &BTreeMap<String, Value>, source: &str| -> BTreeSet<String> {
        state
            .iter()
            .filter(|(_, item)| {
                item["source"] == source
                    || item["cause"]
                        .as_str()
                        .is_some_and(|cause| cause.split(',').any(|part| part == "y"))
            })
            .map(|(id, _)| id.clone())
            .collect()
    };
    // Just before the delete's run of removals, and at its end.
    let before = state_at(&events, "taskmanager", rev - count);
    let after = state_at(&events, "taskmanager", rev);
    assert_eq!(by_source(&before, "det-a"), removed, "it took every match");
    assert!(
        by_source(&after, "det-a").is_empty(),
        "none left at its revision"
    );
    assert_eq!(
        after.keys().collect::<BTreeSet<_>>(),
        before
            .keys()
            .filter(|id| !removed.contains(*id))
            .collect::<BTreeSet<_>>(),
        "and nothing else"
    );
    let run: Vec<&FeedEvent> = events[usize::try_from(rev - count).unwrap()..]
        .iter()
        .take(usize::try_from(count).unwrap())
        .collect();
    assert!(
        run.iter().all(|e| e.event == "removed"),
        "one run of removals"
    );

    // Now: every item the feed says is there is listed, the det-b ones all stayed, and no
    // removed det-a item came back other than by an add after the delete.
    let now = state_at(&events, "taskmanager", last);
    let listing = d.listing().await;
    let listed: BTreeSet<String> = ids(&listing["blockedTaskManagers"]).into_iter().collect();
    assert_eq!(listed, now.keys().cloned().collect());
    for w in 0..4 {
        for round in 0..25 {
            assert!(listed.contains(&format!("other-{w}-{round:02}")));
        }
    }
    for n in (0..400).step_by(4) {
        let id = format!("pre-{n:03}");
        assert!(
            listed.contains(&id) || removed.contains(&id),
            "det-b's {id} stayed unless det-a held it too"
        );
    }
    for id in &removed {
        if let Some(item) = now.get(id) {
            let added = events
                .iter()
                .rev()
                .find(|e| e.data["id"] == id.as_str() && e.event == "added")
                .unwrap();
            assert!(added.id > rev, "{id} came back by a later add: {item}");
        }
    }
}
