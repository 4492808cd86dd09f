//! The REST contract of issue 2 over a real socket: status codes, merge rules, batch
//! atomicity, namespaces, odd ids, listing and removal.

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

const MB: &str = "MARK_BLOCKED";
const EVAC: &str = "MARK_BLOCKED_AND_EVACUATE_TASKS";
const PERMANENT: i64 = i64::MAX;

#[tokio::test]
async fn add_new_items_is_201_with_empty_body_and_they_are_listed_sorted() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let before = now_ms();
    let (status, body) = d
        .post(
            "/blocklist/taskmanagers",
            json!([item("tm-b", MB, "disk"), item("tm-a", EVAC, "oom")]),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(body, Value::Null, "201 has an empty body");

    let (status, list) = d.get("/blocklist/taskmanagers").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ids(&list), ["tm-a", "tm-b"]);
    let a = &list[0];
    assert_eq!(a["action"], EVAC);
    assert_eq!(a["cause"], "oom");
    assert_eq!(
        a["endTimestamp"],
        json!(PERMANENT),
        "no timeout means permanent"
    );
    let start = a["startTimestamp"].as_i64().unwrap();
    assert!(start >= before && start <= now_ms());
    // Exactly the FLIP-224 fields, and the item's provenance: one report, now, from nobody
    // named; the revision of its add (tm-b came first in the batch).
    let mut fields = a.as_object().unwrap().clone();
    let provenance: serde_json::Map<String, Value> = [
        "source",
        "reportCount",
        "firstReportTimestamp",
        "lastReportTimestamp",
        "revision",
    ]
    .into_iter()
    .filter_map(|field| fields.remove_entry(field))
    .collect();
    assert_eq!(fields.len(), 5, "exactly the FLIP-224 fields besides: {a}");
    assert_eq!(
        Value::Object(provenance),
        json!({"source": "unknown", "reportCount": 1, "firstReportTimestamp": start,
            "lastReportTimestamp": start, "revision": 2}),
    );

    let all = d.listing().await;
    assert_eq!(ids(&all["blockedTaskManagers"]), ["tm-a", "tm-b"]);
    assert_eq!(all["blockedNodes"], json!([]));
}

#[tokio::test]
async fn merge_rules_stronger_action_later_end_joined_causes_kept_start() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let mut first = item("n1", EVAC, "disk");
    first["timeout"] = json!(3_600_000);
    assert_eq!(
        d.post("/blocklist/nodes", json!([first])).await.0,
        StatusCode::CREATED
    );
    let (_, original) = d.get("/blocklist/nodes/n1").await;

    // Weaker action, shorter end, new cause: action and end stay, cause is appended.
    let mut second = item("n1", MB, "net");
    second["timeout"] = json!(60_000);
    second["allowMerge"] = json!(true);
    let (status, merged) = d.post("/blocklist/nodes", json!([second])).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let m = &merged[0];
    assert_eq!(m["id"], "n1");
    assert_eq!(m["action"], EVAC);
    assert_eq!(m["endTimestamp"], original["endTimestamp"]);
    assert_eq!(m["startTimestamp"], original["startTimestamp"]);
    assert_eq!(m["cause"], "disk,net");

    // A later end wins; a repeated cause is not repeated (alias field, string boolean).
    let end = now_ms() + 7_200_000;
    let third = json!({"id": "n1", "action": MB, "cause": "disk", "endTimestamp": end,
                       "mergeOnConflict": "true"});
    let (status, merged) = d.post("/blocklist/nodes", json!({"items": [third]})).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(merged[0]["endTimestamp"], json!(end));
    assert_eq!(merged[0]["cause"], "disk,net");

    // Permanent wins.
    let mut fourth = item("n1", MB, "manual");
    fourth["allowMerge"] = json!(true);
    let (_, merged) = d.post("/blocklist/nodes", json!([fourth])).await;
    assert_eq!(merged[0]["endTimestamp"], json!(PERMANENT));
    assert_eq!(merged[0]["cause"], "disk,net,manual");

    // Every report counts, the first is the block's start, the last the latest merge.
    assert_eq!(merged[0]["reportCount"], 4);
    assert_eq!(
        merged[0]["firstReportTimestamp"],
        original["startTimestamp"]
    );
    assert_eq!(merged[0]["revision"], 4, "the revision of the last merge");

    // The stored state is what the 202 said, and node entries carry taskManagers; `GET`
    // adds the reports, newest first.
    let (status, mut stored) = d.get("/blocklist/nodes/n1").await;
    assert_eq!(status, StatusCode::OK);
    let reports = stored.as_object_mut().unwrap().remove("reports").unwrap();
    let mut expected = merged[0].clone();
    expected["taskManagers"] = json!([]);
    assert_eq!(stored, expected);
    let reported: Vec<(&str, &str)> = reports
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["action"].as_str().unwrap(), r["cause"].as_str().unwrap()))
        .collect();
    assert_eq!(
        reported,
        [(MB, "manual"), (MB, "disk"), (MB, "net"), (EVAC, "disk")]
    );
    assert_eq!(reports[0]["timestamp"], merged[0]["lastReportTimestamp"]);
    assert_eq!(reports[0]["endTimestamp"], json!(PERMANENT));
    assert_eq!(reports[1]["endTimestamp"], json!(end));
}

#[tokio::test]
async fn a_weaker_item_merged_into_a_permanent_one_does_not_shorten_it() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    d.post("/blocklist/taskmanagers", json!([item("tm", MB, "a")]))
        .await;
    let mut again = item("tm", EVAC, "b");
    again["timeout"] = json!("1000");
    again["allowMerge"] = json!(true);
    let (status, merged) = d.post("/blocklist/taskmanagers", json!([again])).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(merged[0]["endTimestamp"], json!(PERMANENT));
    assert_eq!(merged[0]["action"], EVAC);
}

#[tokio::test]
async fn conflict_is_409_naming_every_id_and_writes_nothing_of_the_batch() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    d.post(
        "/blocklist/nodes",
        json!([item("x", MB, "c"), item("y", MB, "c")]),
    )
    .await;
    let before = d.listing().await;

    let mut merging = item("x", EVAC, "merge-me");
    merging["allowMerge"] = json!(true);
    let batch = json!([
        item("new-1", MB, "c"),
        merging,
        item("y", EVAC, "c2"),
        item("x", MB, "c3")
    ]);
    let (status, body) = d.post("/blocklist/nodes", batch).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let errors: Vec<&str> = body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0].contains("items[2]") && errors[0].contains("\"y\""),
        "{errors:?}"
    );
    assert!(
        errors[1].contains("items[3]") && errors[1].contains("\"x\""),
        "{errors:?}"
    );
    assert_eq!(
        d.listing().await,
        before,
        "neither the new item nor the merge was written"
    );
}

#[tokio::test]
async fn same_id_twice_in_a_batch_counts_as_arriving_later() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    // Without allowMerge, the second element conflicts with the first.
    let (status, body) = d
        .post(
            "/blocklist/taskmanagers",
            json!([item("dup", MB, "a"), item("dup", MB, "b")]),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body["errors"][0].as_str().unwrap().contains("items[1]"));
    assert_eq!(d.get("/blocklist/taskmanagers").await.1, json!([]));

    // With allowMerge, it merges into the first: 202 with the merged state.
    let mut second = item("dup", EVAC, "b");
    second["allowMerge"] = json!(true);
    let (status, merged) = d
        .post(
            "/blocklist/taskmanagers",
            json!([item("dup", MB, "a"), second, item("other", MB, "o")]),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(
        merged.as_array().unwrap().len(),
        1,
        "only merged items are returned: {merged}"
    );
    assert_eq!(merged[0]["action"], EVAC);
    assert_eq!(merged[0]["cause"], "a,b");
    assert_eq!(
        ids(&d.get("/blocklist/taskmanagers").await.1),
        ["dup", "other"]
    );
}

#[tokio::test]
async fn kinds_are_separate_namespaces() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    assert_eq!(
        d.post("/blocklist/taskmanagers", json!([item("same", MB, "tm")]))
            .await
            .0,
        StatusCode::CREATED
    );
    assert_eq!(
        d.post("/blocklist/nodes", json!([item("same", EVAC, "node")]))
            .await
            .0,
        StatusCode::CREATED
    );
    assert_eq!(d.get("/blocklist/taskmanagers/same").await.1["cause"], "tm");
    assert_eq!(d.get("/blocklist/nodes/same").await.1["cause"], "node");
    assert_eq!(d.delete("/blocklist/nodes/same").await.0, StatusCode::OK);
    assert_eq!(
        d.get("/blocklist/taskmanagers/same").await.0,
        StatusCode::OK
    );
    assert_eq!(
        d.get("/blocklist/nodes/same").await.0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn ids_with_slashes_spaces_percent_and_non_ascii_round_trip() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    // (A bare ".." cannot be sent by URL-normalising clients, so it is left out here.)
    let odd = [
        "a/b",
        "with space",
        "100%",
        "ünïcødé-ノード",
        "../etc/passwd",
        "a..b",
        "?q=1#f",
        &"z".repeat(256),
    ];
    let batch: Vec<Value> = odd.iter().map(|id| item(id, MB, "odd")).collect();
    assert_eq!(
        d.post("/blocklist/nodes", Value::Array(batch)).await.0,
        StatusCode::CREATED
    );
    let mut sorted: Vec<String> = odd.iter().map(std::string::ToString::to_string).collect();
    sorted.sort();
    assert_eq!(ids(&d.get("/blocklist/nodes").await.1), sorted);
    for id in odd {
        let (status, got) = d.get(&format!("/blocklist/nodes/{}", enc(id))).await;
        assert_eq!(status, StatusCode::OK, "GET {id:?}");
        assert_eq!(got["id"], id);
    }
    for id in odd {
        let (status, body) = d.delete(&format!("/blocklist/nodes/{}", enc(id))).await;
        assert_eq!((status, body), (StatusCode::OK, json!({})), "DELETE {id:?}");
    }
    assert_eq!(d.get("/blocklist/nodes").await.1, json!([]));
}

#[tokio::test]
async fn remove_is_200_then_404_and_missing_get_is_404() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    d.post("/blocklist/taskmanagers", json!([item("tm", MB, "c")]))
        .await;
    assert_eq!(
        d.delete("/blocklist/taskmanagers/tm").await,
        (StatusCode::OK, json!({}))
    );
    let (status, body) = d.delete("/blocklist/taskmanagers/tm").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        body["errors"][0].as_str().unwrap().contains("\"tm\""),
        "{body}"
    );
    let (status, body) = d.get("/blocklist/taskmanagers/never").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body["errors"].is_array());
    // After removal the id is free again: a fresh add is a 201, not a merge.
    assert_eq!(
        d.post("/blocklist/taskmanagers", json!([item("tm", MB, "again")]))
            .await
            .0,
        StatusCode::CREATED
    );
    assert_eq!(
        d.get("/blocklist/taskmanagers/tm").await.1["cause"],
        "again"
    );
}

#[tokio::test]
async fn end_timestamp_and_string_numbers_are_accepted() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let end = now_ms() + 600_000;
    let batch = json!([
        {"id": "abs", "action": MB, "cause": "c", "endTimestamp": end.to_string()},
        {"id": "rel", "action": MB, "cause": "c", "timeout": "600000"},
        {"id": "perm", "action": MB, "cause": "c", "endTimestamp": PERMANENT},
    ]);
    let before = now_ms();
    assert_eq!(
        d.post("/blocklist/nodes", batch).await.0,
        StatusCode::CREATED
    );
    let after = now_ms();
    assert_eq!(
        d.get("/blocklist/nodes/abs").await.1["endTimestamp"],
        json!(end)
    );
    let rel = d.get("/blocklist/nodes/rel").await.1["endTimestamp"]
        .as_i64()
        .unwrap();
    assert!(rel >= before + 600_000 && rel <= after + 600_000);
    assert_eq!(
        d.get("/blocklist/nodes/perm").await.1["endTimestamp"],
        json!(PERMANENT)
    );
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_with_the_error_shape() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let (status, body) = d.get("/blocklist/gateways").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body["errors"][0].is_string());
    let (status, body) = d.call(reqwest::Method::PUT, "/blocklist/nodes", None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(body["errors"][0].as_str().unwrap().contains("PUT"));
}
