//! FLIP-224 as its document writes it: the request example of the FLIP, copied verbatim
//! (the `items` wrapper, numbers and booleans as strings, and the merge flag spelled
//! `mergeOnConflictallowMerge`, as the document's text left it), is accepted and merges.

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// The FLIP's example request body, byte for byte but for the line breaks.
fn flip_example() -> Value {
    json!({"items": [{"id": "node1/container1", "action": "MARK_BLOCKED",
        "endTimestamp": "1952317200000", "cause": "Hot machine",
        "mergeOnConflictallowMerge": "true"}]})
}

#[tokio::test]
async fn the_flip_documents_example_is_created_then_merged() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let (status, body) = d.post("/blocklist/nodes", flip_example()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = d.post("/blocklist/nodes", flip_example()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body[0]["id"], "node1/container1", "{body}");
    assert_eq!(body[0]["endTimestamp"], 1_952_317_200_000_i64, "{body}");
    assert_eq!(
        body[0]["cause"], "Hot machine",
        "the same cause is not repeated: {body}"
    );
    let (status, item) = d
        .get(&format!("/blocklist/nodes/{}", enc("node1/container1")))
        .await;
    assert_eq!(status, StatusCode::OK, "{item}");
    assert_eq!(item["action"], "MARK_BLOCKED");
}

#[tokio::test]
async fn two_spellings_of_the_merge_flag_in_one_element_are_refused_naming_both() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    for (a, b) in [
        ("allowMerge", "mergeOnConflictallowMerge"),
        ("mergeOnConflict", "mergeOnConflictallowMerge"),
        ("allowMerge", "mergeOnConflict"),
    ] {
        let element = json!({"id": "n1", "action": "MARK_BLOCKED", "cause": "c",
            a: true, b: "true"});
        let (status, body) = d.post("/blocklist/nodes", json!([element])).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{a} and {b}: {body}");
        let message = body["errors"][0].as_str().expect("an error");
        assert!(
            message.contains(a) && message.contains(b) && message.contains("items[0]"),
            "the error names the element and both spellings: {message}"
        );
        assert!(
            !message.contains("unknown field"),
            "every spelling is known: {message}"
        );
    }
    assert_eq!(
        d.listing().await["blockedNodes"],
        json!([]),
        "nothing was written"
    );
}
