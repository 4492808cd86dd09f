//! Provenance (schema 7) over a real socket: who reported an item, how often and when (its
//! bounded reports), the blocks an id had before (its bounded history), updates in place
//! (`PATCH`, conditional on `If-Match`), and escalation for repeat offenders.

mod common;

use std::path::Path;

use common::*;
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const MB: &str = "MARK_BLOCKED";
const EVAC: &str = "MARK_BLOCKED_AND_EVACUATE_TASKS";
const PERMANENT: i64 = i64::MAX;

/// A request with extra headers: its status, headers and JSON body (`Null` when empty).
async fn request(
    d: &Daemon,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (StatusCode, HeaderMap, Value) {
    let mut req = d.client.request(method, d.url(path));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.bytes().await.expect("body");
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).expect("a JSON body")
    };
    (status, headers, body)
}

/// `PATCH path` with `body`, `If-Match: if_match` when given.
async fn patch(
    d: &Daemon,
    path: &str,
    if_match: Option<&str>,
    body: Value,
) -> (StatusCode, HeaderMap, Value) {
    let headers: Vec<(&str, &str)> = if_match.map(|tag| ("If-Match", tag)).into_iter().collect();
    request(d, Method::PATCH, path, &headers, Some(body)).await
}

/// The `ETag` of an answer.
fn etag(headers: &HeaderMap) -> String {
    headers
        .get("etag")
        .expect("an ETag")
        .to_str()
        .unwrap()
        .to_owned()
}

/// `GET path`: the item with its reports, and its `ETag`.
async fn get_item(d: &Daemon, path: &str) -> (Value, String) {
    let (status, headers, body) = request(d, Method::GET, path, &[], None).await;
    assert_eq!(status, StatusCode::OK, "GET {path}: {body}");
    (body, etag(&headers))
}

/// `GET path/history`: the id's past blocks, newest first.
async fn history(d: &Daemon, path: &str) -> Vec<Value> {
    let (status, body) = d.get(&format!("{path}/history")).await;
    assert_eq!(status, StatusCode::OK, "GET {path}/history: {body}");
    body.as_array().expect("an array").clone()
}

/// A timed add element.
fn timed(id: &str, action: &str, cause: &str, timeout: i64) -> Value {
    json!({"id": id, "action": action, "cause": cause, "timeout": timeout})
}

/// The revision of the blocklist.
async fn revision(d: &Daemon) -> u64 {
    d.listing().await["revision"].as_u64().unwrap()
}

/// Runs `blocklistd check` on a stopped daemon's data dir and asserts that it passes.
fn assert_check_passes(dir: &Path) {
    let out = blocklistd(&["--data-dir".as_ref(), dir.as_os_str(), "check".as_ref()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("ok: every invariant holds"), "{stdout}");
}

/// How many entries each tree named in `names` holds in the stopped daemon's data dir.
fn tree_lens(dir: &Path, names: &[&str]) -> Vec<usize> {
    let db = open_sled(dir);
    let lens = names
        .iter()
        .map(|name| db.open_tree(name).unwrap().len())
        .collect();
    drop(db);
    wait_until_unlocked(dir);
    lens
}

/// The fields of an item as the listing shows them (without `reports`, and without a
/// node's `taskManagers`).
fn without_reports(item: &Value) -> Value {
    let mut item = item.clone();
    let map = item.as_object_mut().unwrap();
    map.remove("reports");
    map.remove("taskManagers");
    item
}

/// 10,000 reports of one id, from several sources in batches that merge: the item counts
/// every one, keeps the first source and the first and last times, and lists exactly the
/// 32 most recent, newest first, each with its own source, end and cause; 32 is also all
/// the storage keeps.
#[tokio::test]
async fn reports_accumulate_with_sources_and_times_and_stay_bounded() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let base = now_ms() + 3_600_000;
    const BATCHES: usize = 10;
    const PER_BATCH: usize = 1_000;
    // Element i of batch b: its own source every third element, else the header's; an end
    // that grows with the element, so the item's end is the last one's.
    let source_of = |b: usize, i: usize| {
        if i.is_multiple_of(3) {
            format!("element-{b}-{i}")
        } else {
            format!("detector-{b}")
        }
    };
    let end_of = |b: usize, i: usize| base + (b * PER_BATCH + i) as i64;
    let (mut first_window, mut last_window) = ((0, 0), (0, 0));
    for b in 0..BATCHES {
        let elements: Vec<Value> = (0..PER_BATCH)
            .map(|i| {
                let mut e = json!({"id": "n1", "action": MB, "cause": format!("c{}", i % 4),
                    "endTimestamp": end_of(b, i), "allowMerge": true});
                if i.is_multiple_of(3) {
                    e["source"] = json!(source_of(b, i));
                }
                e
            })
            .collect();
        let header = format!("detector-{b}");
        let before = now_ms();
        let (status, _, body) = request(
            &d,
            Method::POST,
            "/blocklist/nodes",
            &[("Blocklist-Source", &header)],
            Some(Value::Array(elements)),
        )
        .await;
        let after = now_ms();
        // Every later element of the first batch merges into its first one.
        assert_eq!(status, StatusCode::ACCEPTED, "batch {b}: {body}");
        assert_eq!(body[0]["reportCount"], json!((b + 1) * PER_BATCH));
        if b == 0 {
            first_window = (before, after);
        }
        last_window = (before, after);
    }

    let (item, tag) = get_item(&d, "/blocklist/nodes/n1").await;
    let total = BATCHES * PER_BATCH;
    assert_eq!(item["reportCount"], json!(total));
    assert_eq!(item["source"], "element-0-0", "the first report's source");
    assert_eq!(item["cause"], "c0,c1,c2,c3");
    assert_eq!(
        item["endTimestamp"],
        json!(end_of(BATCHES - 1, PER_BATCH - 1))
    );
    let first = item["firstReportTimestamp"].as_i64().unwrap();
    let last = item["lastReportTimestamp"].as_i64().unwrap();
    assert!(first >= first_window.0 && first <= first_window.1, "{item}");
    assert!(last >= last_window.0 && last <= last_window.1, "{item}");
    assert_eq!(item["startTimestamp"], json!(first));
    assert_eq!(tag, format!("\"{}\"", item["revision"]));

    let reports = item["reports"].as_array().unwrap();
    assert_eq!(reports.len(), 32, "{item}");
    for (k, report) in reports.iter().enumerate() {
        // Newest first: the last batch's last elements, in reverse.
        let i = PER_BATCH - 1 - k;
        let b = BATCHES - 1;
        assert_eq!(
            report,
            &json!({"timestamp": last, "source": source_of(b, i), "operation": "add",
                "action": MB, "endTimestamp": end_of(b, i), "cause": format!("c{}", i % 4)}),
            "report {k}"
        );
    }
    assert!(d.terminate().success());
    assert_eq!(tree_lens(&ws.data_dir(), &["reports"]), [32]);
    assert_check_passes(&ws.data_dir());
}

/// A removal with `?reason=` and a `Blocklist-Source` becomes the id's past block: the item
/// as it was, and how (removed), when, by whom and why it ended.
#[tokio::test]
async fn a_removal_with_a_reason_and_a_source_appears_in_the_history() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let path = "/blocklist/taskmanagers/tm-1";
    assert_eq!(history(&d, path).await, Vec::<Value>::new());
    let (status, _, _) = request(
        &d,
        Method::POST,
        "/blocklist/taskmanagers",
        &[("Blocklist-Source", "speculative-execution")],
        Some(json!([timed("tm-1", EVAC, "slow", 3_600_000)])),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (item, _) = get_item(&d, path).await;

    let before = now_ms();
    let (status, _, body) = request(
        &d,
        Method::DELETE,
        &format!("{path}?reason=a%20false%20positive%2C%20says%20ops"),
        &[("Blocklist-Source", "operator:alice")],
        None,
    )
    .await;
    assert_eq!((status, body), (StatusCode::OK, json!({})));
    let after = now_ms();
    assert_eq!(d.get(path).await.0, StatusCode::NOT_FOUND);

    let past = history(&d, path).await;
    assert_eq!(past.len(), 1, "{past:?}");
    let ended = &past[0]["ended"];
    let at = ended["timestamp"].as_i64().unwrap();
    assert!(at >= before && at <= after, "{ended}");
    assert_eq!(
        ended,
        &json!({"how": "removed", "timestamp": at, "source": "operator:alice",
            "reason": "a false positive, says ops"})
    );
    // The block as it was when it ended.
    let mut expected = without_reports(&item);
    expected["ended"] = ended.clone();
    assert_eq!(past[0], expected);
    assert_eq!(past[0]["source"], "speculative-execution");
    assert_eq!(past[0]["reportCount"], 1);
    // The other kind's namespace has none.
    assert_eq!(
        history(&d, "/blocklist/nodes/tm-1").await,
        Vec::<Value>::new()
    );
}

/// An item that reaches its end becomes a past block that expired (no source, no reason);
/// the id blocked again starts a new block with one report, and the old one stays in the
/// history as it was.
#[tokio::test]
async fn an_expiry_appears_in_the_history_and_a_re_add_starts_with_one_report() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let path = "/blocklist/nodes/n1";
    let mut watch = Watch::open(&d, Some(0), None).await.unwrap();
    let mut first = timed("n1", MB, "disk", 400);
    first["allowMerge"] = json!(true);
    let mut again = first.clone();
    again["cause"] = json!("net");
    // The second element merges into the first's new block.
    assert_eq!(
        d.post("/blocklist/nodes", json!([first, again])).await.0,
        StatusCode::ACCEPTED
    );
    let events = watch.take(2).await;
    assert_eq!(
        summary(&events),
        pairs(&[("added", "n1"), ("expired", "n1")])
    );
    let end = events[0].data["endTimestamp"].as_i64().unwrap();
    assert_eq!(d.get(path).await.0, StatusCode::NOT_FOUND);

    let past = history(&d, path).await;
    assert_eq!(past.len(), 1, "{past:?}");
    let ended = &past[0]["ended"];
    assert_eq!(ended["how"], "expired");
    assert!(ended["timestamp"].as_i64().unwrap() >= end, "{ended}");
    assert_eq!(
        ended.as_object().unwrap().len(),
        2,
        "an expiry has no source nor reason: {ended}"
    );
    assert_eq!(past[0]["reportCount"], 2);
    assert_eq!(past[0]["cause"], "disk,net");
    assert_eq!(past[0]["endTimestamp"], json!(end));

    let before = now_ms();
    assert_eq!(
        d.post("/blocklist/nodes", json!([item("n1", EVAC, "again")]))
            .await
            .0,
        StatusCode::CREATED
    );
    let (item, _) = get_item(&d, path).await;
    assert_eq!(item["reportCount"], 1, "a new block: {item}");
    assert_eq!(item["cause"], "again");
    assert!(item["startTimestamp"].as_i64().unwrap() >= before);
    assert_eq!(item["firstReportTimestamp"], item["startTimestamp"]);
    assert_eq!(item["reports"].as_array().unwrap().len(), 1, "{item}");
    assert_eq!(item["reports"][0]["cause"], "again");
    assert_eq!(
        history(&d, path).await,
        past,
        "the old block is kept as it was"
    );
}

/// With `--history-per-id 3`, an id that had 5 blocks keeps the newest 3 (newest first),
/// and so does the storage; another id keeps its own.
#[tokio::test]
async fn history_is_bounded_per_id() {
    let mut ws = Workspace::new();
    let d = ws.start(&["--history-per-id", "3"]);
    let path = "/blocklist/taskmanagers/tm";
    for i in 0..5 {
        let body = json!([item("tm", MB, &format!("block-{i}"))]);
        assert_eq!(
            d.post("/blocklist/taskmanagers", body).await.0,
            StatusCode::CREATED
        );
        assert_eq!(
            d.delete(&format!("{path}?reason=round-{i}")).await.0,
            StatusCode::OK
        );
    }
    d.post("/blocklist/taskmanagers", json!([item("other", MB, "x")]))
        .await;
    d.delete("/blocklist/taskmanagers/other").await;

    let past = history(&d, path).await;
    let causes: Vec<&str> = past.iter().map(|p| p["cause"].as_str().unwrap()).collect();
    assert_eq!(causes, ["block-4", "block-3", "block-2"]);
    let reasons: Vec<&str> = past
        .iter()
        .map(|p| p["ended"]["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, ["round-4", "round-3", "round-2"]);
    assert_eq!(history(&d, "/blocklist/taskmanagers/other").await.len(), 1);
    assert!(d.terminate().success());
    // Stored: tm's 3 entries and counter, other's entry and counter; one index entry each.
    assert_eq!(
        tree_lens(&ws.data_dir(), &["history", "history_ends"]),
        [6, 4]
    );
    assert_check_passes(&ws.data_dir());
}

/// A `PATCH` that shortens an item moves its end: the sweeper announces it at about the new
/// end (not the old one), the item is gone and in the history, and the data dir passes
/// `blocklistd check`.
#[tokio::test]
async fn a_patch_shortens_an_item_and_the_sweeper_honours_the_new_end() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let path = "/blocklist/nodes/n1";
    d.post(
        "/blocklist/nodes",
        json!([timed("n1", EVAC, "disk", 3_600_000)]),
    )
    .await;
    let (old, _) = get_item(&d, path).await;
    let mut watch = Watch::open(&d, Some(revision(&d).await), None)
        .await
        .unwrap();
    let before = now_ms();
    let (status, headers, body) = patch(&d, path, None, json!({"timeout": 700})).await;
    let after = now_ms();
    assert_eq!(status, StatusCode::OK, "{body}");
    let end = body["endTimestamp"].as_i64().unwrap();
    assert!(end >= before + 700 && end <= after + 700, "{body}");
    assert_eq!(body["startTimestamp"], old["startTimestamp"]);
    assert_eq!(body["action"], EVAC);
    assert_eq!(body["reportCount"], 2);
    assert_eq!(etag(&headers), format!("\"{}\"", body["revision"]));

    let updated = watch.next().await.unwrap();
    assert_eq!(
        (updated.event.as_str(), updated.id),
        ("updated", old["revision"].as_u64().unwrap() + 1)
    );
    assert_eq!(updated.data["endTimestamp"], json!(end));
    let expired = watch.next().await.unwrap();
    let seen = now_ms();
    assert_eq!(
        (expired.event.as_str(), expired.data["id"].as_str()),
        ("expired", Some("n1"))
    );
    assert!(seen >= end, "announced before its new end ({seen} < {end})");
    assert!(
        seen < end + 10_000,
        "announced long after its new end ({seen} vs {end})"
    );
    assert_eq!(expired.data["endTimestamp"], json!(end));
    assert_eq!(d.get(path).await.0, StatusCode::NOT_FOUND);
    assert_eq!(d.get("/blocklist/nodes").await.1, json!([]));
    let past = history(&d, path).await;
    assert_eq!(past.len(), 1);
    assert_eq!(
        (&past[0]["ended"]["how"], &past[0]["endTimestamp"]),
        (&json!("expired"), &json!(end))
    );
    assert!(d.terminate().success());
    assert_check_passes(&ws.data_dir());
}

/// A `PATCH` lowers an evacuation to `MARK_BLOCKED` and extends it in one change: a single
/// `updated` event carrying the item after it, and the update among its reports.
#[tokio::test]
async fn a_patch_downgrades_and_extends_in_one_updated_event() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let path = "/blocklist/nodes/n1";
    d.post(
        "/blocklist/nodes",
        json!([timed("n1", EVAC, "disk", 60_000)]),
    )
    .await;
    let (old, old_tag) = get_item(&d, path).await;
    let from = revision(&d).await;
    let mut watch = Watch::open(&d, Some(from), None).await.unwrap();
    let before = now_ms();
    let (status, headers, body) = request(
        &d,
        Method::PATCH,
        path,
        &[("Blocklist-Source", "operator:bob")],
        Some(json!({"action": MB, "timeout": 7_200_000, "cause": "drained"})),
    )
    .await;
    let after = now_ms();
    assert_eq!(status, StatusCode::OK, "{body}");
    let end = body["endTimestamp"].as_i64().unwrap();
    assert!(end >= before + 7_200_000 && end <= after + 7_200_000);
    assert_eq!(body["action"], MB);
    assert_eq!(body["cause"], "disk,drained");
    assert_eq!(body["startTimestamp"], old["startTimestamp"]);
    assert_eq!(body["source"], "unknown", "the first report's source stays");
    assert_eq!(body["reportCount"], 2);
    assert_eq!(body["revision"], json!(from + 1));
    assert_ne!(etag(&headers), old_tag);

    // A marker after it: the feed holds the update's one event, then the marker's.
    d.post("/blocklist/taskmanagers", json!([item("marker", MB, "m")]))
        .await;
    let events = watch.take(2).await;
    assert_consecutive(&events, from);
    assert_eq!(
        summary(&events),
        pairs(&[("updated", "n1"), ("added", "marker")])
    );
    let mut with_kind = body.clone();
    with_kind["kind"] = json!("node");
    assert_eq!(events[0].data, with_kind);

    let (stored, tag) = get_item(&d, path).await;
    assert_eq!(without_reports(&stored), body);
    assert_eq!(tag, etag(&headers));
    let latest = &stored["reports"][0];
    assert_eq!(
        latest,
        &json!({"timestamp": body["lastReportTimestamp"], "source": "operator:bob",
            "operation": "update", "action": MB, "endTimestamp": end, "cause": "drained"})
    );
    assert_eq!(stored["reports"][1]["operation"], "add");
    assert_eq!(stored["reports"][1]["action"], EVAC);
    assert_eq!(
        history(&d, path).await,
        Vec::<Value>::new(),
        "never unblocked"
    );
}

/// `If-Match` with another tag is 412 and writes nothing (the same `ETag` and item after it,
/// no event); the item's own tag is 200 with a new one, after which the old tag no longer
/// matches; `*` matches any state.
#[tokio::test]
async fn if_match_refuses_a_stale_tag_and_accepts_the_current_one_or_any() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let path = "/blocklist/taskmanagers/tm";
    d.post(
        "/blocklist/taskmanagers",
        json!([timed("tm", MB, "c", 600_000)]),
    )
    .await;
    let (item, tag) = get_item(&d, path).await;
    assert_eq!(tag, format!("\"{}\"", item["revision"]));
    let from = revision(&d).await;

    let stale = format!("\"{}\"", item["revision"].as_u64().unwrap() + 100);
    let (status, _, body) = patch(&d, path, Some(&stale), json!({"action": EVAC})).await;
    assert_eq!(status, StatusCode::PRECONDITION_FAILED, "{body}");
    let error = body["errors"][0].as_str().unwrap();
    assert!(
        error.contains("If-Match") && error.contains(&tag) && error.contains("nothing was written"),
        "{error}"
    );
    // Nothing written: the same item and tag, the same revision, no event.
    assert_eq!(get_item(&d, path).await, (item.clone(), tag.clone()));
    assert_eq!(revision(&d).await, from);
    // A tag of another form or a weak one matches nothing either.
    for other in ["W/\"1\"", "1", "\"x\""] {
        let (status, _, _) = patch(&d, path, Some(other), json!({"action": EVAC})).await;
        assert_eq!(status, StatusCode::PRECONDITION_FAILED, "{other}");
    }
    assert_eq!(revision(&d).await, from);

    let mut watch = Watch::open(&d, Some(from), None).await.unwrap();
    let listed = format!("{stale}, {tag}");
    let (status, headers, body) = patch(&d, path, Some(&listed), json!({"action": EVAC})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let new_tag = etag(&headers);
    assert_ne!(new_tag, tag);
    assert_eq!(new_tag, format!("\"{}\"", from + 1));
    assert_eq!(body["action"], EVAC);
    let event = watch.next().await.unwrap();
    assert_eq!((event.event.as_str(), event.id), ("updated", from + 1));

    let (status, _, _) = patch(&d, path, Some(&tag), json!({"cause": "late"})).await;
    assert_eq!(
        status,
        StatusCode::PRECONDITION_FAILED,
        "the old tag is stale now"
    );
    let (status, headers, body) = patch(&d, path, Some("*"), json!({"cause": "any"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["cause"], "c,any");
    assert_eq!(etag(&headers), format!("\"{}\"", from + 2));
    assert_eq!(revision(&d).await, from + 2);
    // Nothing to match: a PATCH of an id not blocked is 404.
    let (status, _, _) = patch(
        &d,
        "/blocklist/taskmanagers/none",
        Some("*"),
        json!({"cause": "x"}),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// With escalation on (factor 2), each new timed block of an id that had blocks within the
/// window lasts twice the one before, up to `maxSecs`; the 201 lists the escalated item,
/// and a 202 lists the merged items and then the escalated ones.
#[tokio::test]
async fn escalation_doubles_the_timeouts_of_a_repeat_offender_up_to_the_cap() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let (_, mut policy) = d.get("/policy").await;
    policy["escalation"] = json!({"factor": 2, "maxSecs": 40, "windowSecs": 3600});
    assert_eq!(
        d.call(Method::PUT, "/policy", Some(policy.clone())).await,
        (StatusCode::OK, policy.clone())
    );
    assert_eq!(d.get("/policy").await.1["escalation"], policy["escalation"]);

    let path = "/blocklist/nodes/n1";
    let requested = 10_000;
    let mut timeouts = Vec::new();
    for round in 0..5u32 {
        let (status, body) = d
            .post(
                "/blocklist/nodes",
                json!([timed("n1", MB, "flaky", requested)]),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let (item, _) = get_item(&d, path).await;
        let lasts =
            item["endTimestamp"].as_i64().unwrap() - item["startTimestamp"].as_i64().unwrap();
        timeouts.push(lasts);
        if round == 0 {
            assert_eq!(body, Value::Null, "nothing escalated: an empty 201");
            assert!(item.get("escalated").is_none(), "{item}");
        } else {
            let escalated = json!({"requestedTimeout": requested, "timeout": lasts,
                "pastBlocks": round});
            assert_eq!(item["escalated"], escalated);
            assert_eq!(body, json!([without_reports(&item)]), "the 201 lists it");
        }
        assert_eq!(d.delete(path).await.0, StatusCode::OK);
    }
    assert_eq!(timeouts, [10_000, 20_000, 40_000, 40_000, 40_000]);

    // A batch that merges and escalates: 202 with the merged item, then the escalated one.
    d.post("/blocklist/nodes", json!([item("n2", MB, "a")]))
        .await;
    let mut merge = item("n2", EVAC, "b");
    merge["allowMerge"] = json!(true);
    let (status, body) = d
        .post(
            "/blocklist/nodes",
            json!([
                merge,
                timed("n1", MB, "flaky", requested),
                timed("n3", MB, "new", requested)
            ]),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(ids(&body), ["n2", "n1"], "{body}");
    assert!(body[0].get("escalated").is_none());
    assert_eq!(body[1]["escalated"]["pastBlocks"], 5);
    assert_eq!(body[1]["escalated"]["timeout"], 40_000);
    // An endTimestamp is never escalated, nor is a block without escalation in the policy.
    d.delete(path).await;
    let end = now_ms() + requested;
    let (status, body) = d
        .post(
            "/blocklist/nodes",
            json!([{"id": "n1", "action": MB, "cause": "flaky", "endTimestamp": end}]),
        )
        .await;
    assert_eq!((status, body), (StatusCode::CREATED, Value::Null));
    assert_eq!(get_item(&d, path).await.0["endTimestamp"], json!(end));
}

/// Who a report is from: the `Blocklist-Source` header, else the token's name, else
/// `unknown`; an element's own `source` wins over both. An invalid header is a 400 naming
/// it, and writes nothing.
#[tokio::test]
async fn sources_come_from_the_element_the_header_or_the_token_name() {
    let mut ws = Workspace::new();
    let tokens = ws.tmp.path().join("tokens");
    std::fs::write(&tokens, "alice-token-value name=alice role=admin\n").unwrap();
    let d = ws.start(&["--token-file", tokens.to_str().unwrap()]);
    let auth = ("Authorization", "Bearer alice-token-value");
    let add = |id: &str, source: Option<&str>| {
        let mut e = item(id, MB, "c");
        if let Some(source) = source {
            e["source"] = json!(source);
        }
        Some(json!([e]))
    };
    let cases: [(&str, Option<&str>, Option<&str>, &str); 4] = [
        ("by-token", None, None, "alice"),
        ("by-header", Some("detector"), None, "detector"),
        ("by-element", Some("detector"), Some("element"), "element"),
        (
            "by-element-only",
            None,
            Some("élément ünïcode"),
            "élément ünïcode",
        ),
    ];
    for (id, header, element, expected) in cases {
        let mut headers = vec![auth];
        if let Some(header) = header {
            headers.push(("Blocklist-Source", header));
        }
        let (status, _, body) = request(
            &d,
            Method::POST,
            "/blocklist/nodes",
            &headers,
            add(id, element),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{id}: {body}");
        let (got, _) = get_item(&d, &format!("/blocklist/nodes/{id}")).await;
        assert_eq!(got["source"], expected, "{id}");
        assert_eq!(got["reports"][0]["source"], expected, "{id}");
    }
    // An unblock and an update report as the token's name too.
    let (status, _, _) = request(
        &d,
        Method::PATCH,
        "/blocklist/nodes/by-header",
        &[auth],
        Some(json!({"cause": "more"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (stored, _) = get_item(&d, "/blocklist/nodes/by-header").await;
    assert_eq!(stored["reports"][0]["source"], "alice");
    assert_eq!(stored["source"], "detector");
    let (status, _, _) = request(
        &d,
        Method::DELETE,
        "/blocklist/nodes/by-token",
        &[auth],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        history(&d, "/blocklist/nodes/by-token").await[0]["ended"]["source"],
        "alice"
    );

    // Invalid headers: 400 naming the header (and what is wrong), nothing written.
    let from = revision(&d).await;
    let long = "x".repeat(200);
    for (bad, what) in [(long.as_str(), "200 bytes"), ("tab\there", "control")] {
        let headers = [auth, ("Blocklist-Source", bad)];
        let (status, _, body) = request(
            &d,
            Method::POST,
            "/blocklist/nodes",
            &headers,
            add("refused", None),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad:?}: {body}");
        let error = body["errors"][0].as_str().unwrap();
        assert!(
            error.starts_with("Blocklist-Source") && error.contains(what),
            "{error}"
        );
        for (method, path, body) in [
            (Method::DELETE, "/blocklist/nodes/by-header", None),
            (
                Method::PATCH,
                "/blocklist/nodes/by-header",
                Some(json!({"cause": "x"})),
            ),
        ] {
            let (status, _, answer) = request(&d, method, path, &headers, body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{bad:?}: {answer}");
        }
    }
    assert_eq!(
        d.get("/blocklist/nodes/refused").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(get_item(&d, "/blocklist/nodes/by-header").await.0, stored);
    assert_eq!(revision(&d).await, from);
    // An invalid element source is a 400 naming the element's field.
    let (status, _, body) = request(
        &d,
        Method::POST,
        "/blocklist/nodes",
        &[auth],
        add("refused", Some(&long)),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["errors"][0]
            .as_str()
            .unwrap()
            .contains(".source: is 200 bytes"),
        "{body}"
    );
    assert_eq!(revision(&d).await, from);

    // Without a token file nor a header: `unknown`.
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    d.post("/blocklist/taskmanagers", json!([item("tm", MB, "c")]))
        .await;
    let (item, _) = get_item(&d, "/blocklist/taskmanagers/tm").await;
    assert_eq!(
        (&item["source"], &item["reports"][0]["source"]),
        (&json!("unknown"), &json!("unknown"))
    );
}

/// A permanent block that is removed is kept with its end in the history, beside the id's
/// next block.
#[tokio::test]
async fn a_permanent_block_removed_keeps_its_end_in_the_history() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let path = "/blocklist/nodes/perm";
    d.post("/blocklist/nodes", json!([item("perm", EVAC, "forever")]))
        .await;
    assert_eq!(d.delete(path).await.0, StatusCode::OK);
    d.post("/blocklist/nodes", json!([item("perm", MB, "again")]))
        .await;
    let past = history(&d, path).await;
    assert_eq!(past.len(), 1);
    assert_eq!(past[0]["endTimestamp"], json!(PERMANENT));
    assert_eq!(past[0]["cause"], "forever");
    assert_eq!(get_item(&d, path).await.0["cause"], "again");
}

mod invariants {
    //! Random sequences of adds (new, merged, escalated), updates, removals and expiries of
    //! a few ids, on the store in-process with a history of 2 per id and a 1 ms sweeper:
    //! every block that ended is the newest past block of its id until 2 more end, no id
    //! keeps more than 2, and once the sweeper settles the store passes `verify` (every
    //! expiry entry matches its item's end, the counts match the items) and the trees of
    //! provenance agree with the items (kept reports, history counters, history index).
    //!
    //! Requests carry a request time up to 40 ms before they commit, as a request validated
    //! before it queued behind others does: an end can have come by then, even one the
    //! sweeper has passed.

    use std::collections::{BTreeMap, HashMap};
    use std::time::Duration;

    use blocklistd::model::{Action, ItemChange, Kind, NewItem, PERMANENT};
    use blocklistd::policy::{Escalation, Policy};
    use blocklistd::provenance::MAX_REPORTS;
    use blocklistd::store::{codec, keys, Mode, Store, StoreConfig};
    use proptest::prelude::*;

    const PER_ID: u64 = 2;

    #[derive(Debug, Clone)]
    enum Op {
        Add {
            kind: Kind,
            ids: Vec<u8>,
            evacuate: bool,
            timeout_ms: Option<i64>,
            merge: bool,
            lag: i64,
        },
        Patch {
            kind: Kind,
            id: u8,
            end: NewEnd,
            evacuate: Option<bool>,
            cause: bool,
            lag: i64,
        },
        Remove(Kind, u8),
        Wait(u64),
    }

    /// What an update does to the end.
    #[derive(Debug, Clone, Copy)]
    enum NewEnd {
        Keep,
        Permanent,
        /// This many ms after the request time.
        In(i64),
    }

    fn kind() -> impl Strategy<Value = Kind> {
        prop_oneof![Just(Kind::Node), Just(Kind::TaskManager)]
    }

    fn lag() -> impl Strategy<Value = i64> {
        prop_oneof![3 => Just(0i64), 1 => 1i64..40]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (
                kind(),
                prop::collection::vec(0u8..3, 1..4),
                any::<bool>(),
                prop_oneof![Just(None), (1i64..30).prop_map(Some), Just(Some(3_600_000))],
                any::<bool>(),
                lag(),
            )
                .prop_map(|(kind, ids, evacuate, timeout_ms, merge, lag)| Op::Add {
                    kind,
                    ids,
                    evacuate,
                    timeout_ms,
                    merge,
                    lag
                }),
            3 => (
                kind(),
                0u8..3,
                prop_oneof![
                    Just(NewEnd::Keep),
                    Just(NewEnd::Permanent),
                    (1i64..30).prop_map(NewEnd::In),
                    Just(NewEnd::In(3_600_000)),
                ],
                prop::option::of(any::<bool>()),
                any::<bool>(),
                lag(),
            )
                .prop_map(|(kind, id, end, evacuate, cause, lag)| Op::Patch {
                    kind,
                    id,
                    end,
                    evacuate,
                    cause,
                    lag
                }),
            2 => (kind(), 0u8..3).prop_map(|(kind, id)| Op::Remove(kind, id)),
            2 => (0u64..25).prop_map(Op::Wait),
        ]
    }

    fn action(evacuate: bool) -> Action {
        if evacuate {
            Action::MarkBlockedAndEvacuateTasks
        } else {
            Action::MarkBlocked
        }
    }

    /// The guardrails off, and escalation on (short), so escalated adds are among the ops.
    fn policy() -> Policy {
        let mut policy = Policy::OFF;
        policy.escalation = Some(Escalation {
            factor: 2,
            max_secs: 1,
            window_secs: 60,
        });
        policy
    }

    const KINDS: [Kind; 2] = [Kind::Node, Kind::TaskManager];

    /// When each id's past blocks ended, newest first, as the store serves them; asserts
    /// that none keeps more than [`PER_ID`].
    async fn histories(store: &Store) -> BTreeMap<(String, String), Vec<i64>> {
        let mut out = BTreeMap::new();
        for kind in KINDS {
            for id in 0..3u8 {
                let id = format!("i{id}");
                let past = store
                    .read_durably(|seen| store.past_blocks(kind, &id, seen))
                    .await
                    .unwrap();
                assert!(
                    past.len() as u64 <= PER_ID,
                    "{} {id:?} keeps {} past blocks: {past:?}",
                    kind.plural(),
                    past.len()
                );
                let ends = past.iter().map(|p| p.ended.timestamp).collect();
                out.insert((kind.plural().to_owned(), id), ends);
            }
        }
        out
    }

    /// Waits until nothing due is left unannounced: no stored item of the kind both
    /// inactive and counted.
    async fn settle(store: &Store) {
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        loop {
            let now = store.now();
            let active: u64 = KINDS
                .iter()
                .map(|k| store.list(*k, now).unwrap().len() as u64)
                .sum();
            if store.item_counts().iter().sum::<u64>() == active {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the counts keep {:?} for {active} active items",
                store.item_counts()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The trees of provenance against the items, on the closed data dir: each item keeps
    /// exactly its most recent reports, numbered by arrival; every history counter spans
    /// exactly its id's entries, at most [`PER_ID`]; every entry has its index key and
    /// every index key its entry.
    fn provenance_trees_agree(dir: &std::path::Path) {
        let db = blocklistd::store::sled_config(dir).unwrap().open().unwrap();
        let items = db.open_tree("items").unwrap();
        let reports = db.open_tree("reports").unwrap();
        let history = db.open_tree("history").unwrap();
        let ends = db.open_tree("history_ends").unwrap();
        let mut expected_reports = Vec::new();
        for entry in &items {
            let (key, bytes) = entry.unwrap();
            let (kind, id) = keys::parse_item_key(&key).unwrap();
            let block = codec::decode_block(&bytes).unwrap();
            let total = block.provenance.reports;
            for n in total.saturating_sub(MAX_REPORTS)..total {
                expected_reports.push(keys::report_key(kind, id, n));
            }
        }
        expected_reports.sort();
        let stored_reports: Vec<Vec<u8>> =
            reports.iter().keys().map(|k| k.unwrap().to_vec()).collect();
        assert_eq!(stored_reports, expected_reports, "reports kept");

        let mut counters: HashMap<Vec<u8>, (u64, u64)> = HashMap::new();
        let mut entries: Vec<Vec<u8>> = Vec::new();
        let mut indexed: Vec<Vec<u8>> = Vec::new();
        for entry in &history {
            let (key, bytes) = entry.unwrap();
            if key.contains(&0) {
                // kind tag ++ id ++ 0x00 ++ n (8 bytes)
                let (_, ending) = codec::decode_past(&bytes).unwrap();
                let kind = keys::kind_from_tag(key[0]).unwrap();
                let id = std::str::from_utf8(&key[1..key.len() - 9]).unwrap();
                let n = keys::parse_number(&key).unwrap();
                assert_eq!(key.as_ref(), keys::past_key(kind, id, n).as_slice());
                indexed.push(keys::past_end_key(ending.timestamp, kind, id, n));
                entries.push(key.to_vec());
            } else {
                counters.insert(key.to_vec(), codec::decode_history_count(&bytes).unwrap());
            }
        }
        let mut spanned: Vec<Vec<u8>> = Vec::new();
        for (key, (first, next)) in &counters {
            let (kind, id) = keys::parse_item_key(key).unwrap();
            assert!(next - first <= PER_ID, "{key:?} spans {first}..{next}");
            spanned.extend((*first..*next).map(|n| keys::past_key(kind, id, n)));
        }
        spanned.sort();
        assert_eq!(entries, spanned, "every counter spans exactly its entries");
        indexed.sort();
        let stored_ends: Vec<Vec<u8>> = ends.iter().keys().map(|k| k.unwrap().to_vec()).collect();
        assert_eq!(
            stored_ends, indexed,
            "history_ends indexes every entry, only them"
        );
    }

    fn run(ops: Vec<Op>) {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let mut config = StoreConfig::new(&data);
        config.fsync = false;
        config.new_policy = policy();
        config.history.per_id = PER_ID;
        let store = Store::open(&config).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let sweeper = tokio::spawn(blocklistd::sweeper::run(
                store.clone(),
                Duration::from_millis(1),
                blocklistd::sweeper::Reclaim {
                    idle: Duration::from_millis(50),
                    min_rate: 1000,
                },
                std::sync::Arc::default(),
            ));
            let writer = store.with_mode(Mode::Commit);
            for op in ops {
                match op {
                    Op::Add {
                        kind,
                        ids,
                        evacuate,
                        timeout_ms,
                        merge,
                        lag,
                    } => {
                        let now = store.now() - lag;
                        let items = ids
                            .iter()
                            .map(|id| NewItem {
                                id: format!("i{id}"),
                                action: action(evacuate),
                                end: timeout_ms.map_or(PERMANENT, |t| now + t),
                                cause: format!("c{id}"),
                                allow_merge: merge,
                                source: "prop".into(),
                                timeout: timeout_ms,
                            })
                            .collect();
                        writer.add(kind, items, now).await.unwrap();
                    }
                    Op::Patch {
                        kind,
                        id,
                        end,
                        evacuate,
                        cause,
                        lag,
                    } => {
                        let now = store.now() - lag;
                        let mut change = ItemChange {
                            end: match end {
                                NewEnd::Keep => None,
                                NewEnd::Permanent => Some(PERMANENT),
                                NewEnd::In(ms) => Some(now + ms),
                            },
                            action: evacuate.map(action),
                            cause: cause.then(|| "patched".to_owned()),
                        };
                        if change == ItemChange::default() {
                            change.cause = Some("patched".to_owned());
                        }
                        writer
                            .update(
                                kind,
                                format!("i{id}"),
                                change,
                                None,
                                "prop".into(),
                                now,
                                None,
                            )
                            .await
                            .unwrap();
                    }
                    Op::Remove(kind, id) => {
                        writer.remove(kind, format!("i{id}")).await.unwrap();
                    }
                    Op::Wait(ms) => {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                    }
                }
                histories(&store).await;
            }
            settle(&store).await;
            // Every block that ended is in its id's history, newest first, up to the bound:
            // the log's `removed` and `expired` events of each id, in reverse.
            let events = store.events_between(0, store.revision(), 100_000).unwrap();
            let mut ended: BTreeMap<(String, String), Vec<i64>> = BTreeMap::new();
            for event in &events {
                let name = event.event.as_str();
                if name != "removed" && name != "expired" {
                    continue;
                }
                if let blocklistd::model::Change::Item { kind, item } = &event.change {
                    ended
                        .entry((kind.plural().to_owned(), item.id.clone()))
                        .or_default()
                        .push(event.at);
                }
            }
            let kept = histories(&store).await;
            for (key, ends) in &kept {
                let mut expected: Vec<i64> = ended.get(key).cloned().unwrap_or_default();
                expected.reverse();
                expected.truncate(PER_ID as usize);
                assert_eq!(ends, &expected, "{key:?}: the history of what ended");
            }
            sweeper.abort();
            let _ = sweeper.await;
            let problems = store.verify().unwrap();
            assert!(problems.is_empty(), "{problems:?}");
        });
        store.shutdown().unwrap();
        drop(store);
        super::wait_until_unlocked(&data);
        provenance_trees_agree(&data);
    }

    /// An update validated while its new end was still ahead, committed after the sweeper
    /// passed that end (it announced an item ending later): the update announces it, as an
    /// add would (the sweeper never looks behind its watermark). Its `expired` event follows
    /// its `updated` one, it leaves the counts, it is in the history, and `verify` is clean.
    #[test]
    fn an_update_to_an_end_the_sweeper_has_passed_announces_it() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let mut config = StoreConfig::new(&data);
        config.fsync = false;
        config.new_policy = Policy::OFF;
        let store = Store::open(&config).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let writer = store.with_mode(Mode::Commit);
            let now = store.now();
            let block = |id: &str, timeout: i64| NewItem {
                id: id.into(),
                action: Action::MarkBlocked,
                end: now + timeout,
                cause: "c".into(),
                allow_merge: false,
                source: "prop".into(),
                timeout: Some(timeout),
            };
            let kind = Kind::TaskManager;
            writer
                .add(kind, vec![block("a", 10), block("b", 3_600_000)], now)
                .await
                .unwrap();
            let deadline = std::time::Instant::now() + super::DEADLINE;
            while store.now() <= now + 10 {
                assert!(std::time::Instant::now() < deadline);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let (expired, _) = store.announce(store.now(), 100).await.unwrap();
            assert_eq!(expired.len(), 1, "a is announced: {expired:?}");
            let before = store.revision();
            // Asked for at `now + 1`, when `now + 5` was still ahead; a ends after it.
            let change = ItemChange {
                end: Some(now + 5),
                ..ItemChange::default()
            };
            writer
                .update(kind, "b".into(), change, None, "late".into(), now + 1, None)
                .await
                .unwrap();
            let events = store.events_between(before, store.revision(), 10).unwrap();
            let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
            assert_eq!(names, ["updated", "expired"], "{events:?}");
            assert_eq!(store.item_counts().iter().sum::<u64>(), 0);
            let past = store
                .read_durably(|seen| store.past_blocks(kind, "b", seen))
                .await
                .unwrap();
            assert_eq!(past.len(), 1, "{past:?}");
            assert_eq!(past[0].item.end_timestamp, now + 5);
            let problems = store.verify().unwrap();
            assert!(problems.is_empty(), "{problems:?}");
        });
        store.shutdown().unwrap();
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn history_stays_bounded_and_every_index_matches(ops in prop::collection::vec(op(), 1..40)) {
            run(ops);
        }
    }
}
