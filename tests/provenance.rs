//! Provenance (schema 7) over a real socket: who reported an item, how often and when (its
//! bounded reports), the blocks an id had before (its bounded history), updates in place
//! (`PATCH`, conditional on `If-Match`), and escalation for repeat offenders.

mod common;

use common::*;
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const MB: &str = "MARK_BLOCKED";
const EVAC: &str = "MARK_BLOCKED_AND_EVACUATE_TASKS";
const PERMANENT: i64 = i64::MAX;

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
    assert_eq!(ws.tree_entries(&["reports"]), [32]);
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
    assert_eq!(ws.tree_entries(&["history", "history_ends"]), [6, 4]);
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
    let mut watch = Watch::open(&d, Some(d.revision().await), None)
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
    let from = d.revision().await;
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
    let from = d.revision().await;

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
    assert_eq!(d.revision().await, from);
    // A tag of another form or a weak one matches nothing either.
    for other in ["W/\"1\"", "1", "\"x\""] {
        let (status, _, _) = patch(&d, path, Some(other), json!({"action": EVAC})).await;
        assert_eq!(status, StatusCode::PRECONDITION_FAILED, "{other}");
    }
    assert_eq!(d.revision().await, from);

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
    assert_eq!(d.revision().await, from + 2);
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
    // An id escalated and then merged into by a later element of the same batch: listed
    // once, as merged.
    d.delete(path).await;
    let mut again = timed("n1", EVAC, "again", requested);
    again["allowMerge"] = json!(true);
    let (status, body) = d
        .post(
            "/blocklist/nodes",
            json!([timed("n1", MB, "flaky", requested), again]),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(ids(&body), ["n1"], "{body}");
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
    let from = d.revision().await;
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
    assert_eq!(d.revision().await, from);
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
    assert_eq!(d.revision().await, from);

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

#[path = "provenance/first_report.rs"]
mod first_report;
#[path = "provenance/invariants.rs"]
mod invariants;
