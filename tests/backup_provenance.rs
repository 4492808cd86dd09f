//! Export and import carry provenance: an item's kept reports and every past block survive a
//! round trip into a new data dir.

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

#[tokio::test]
async fn an_export_imported_into_a_new_dir_keeps_the_reports_and_the_past_blocks() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    // n1: three reports from two sources. n2: blocked, then removed with a reason.
    for (source, cause) in [
        ("detector-a", "disk"),
        ("detector-b", "net"),
        ("detector-a", "io"),
    ] {
        let mut element = item("n1", "MARK_BLOCKED", cause);
        element["allowMerge"] = json!(true);
        element["source"] = json!(source);
        let (status, _) = d.post("/blocklist/nodes", json!([element])).await;
        assert!(status == StatusCode::CREATED || status == StatusCode::ACCEPTED);
    }
    let (status, _) = d
        .post(
            "/blocklist/nodes",
            json!([item("n2", "MARK_BLOCKED", "flaky")]),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = d.delete("/blocklist/nodes/n2?reason=replaced%20disk").await;
    assert_eq!(status, StatusCode::OK);
    let (_, n1_before) = d.get("/blocklist/nodes/n1").await;
    let (_, n2_history) = d.get("/blocklist/nodes/n2/history").await;
    assert_eq!(n1_before["reports"].as_array().unwrap().len(), 3);
    assert_eq!(n2_history.as_array().unwrap().len(), 1);

    let exported = d.export().await;
    d.terminate();
    let file = ws.tmp.path().join("export.jsonl");
    std::fs::write(&file, &exported).unwrap();
    let fresh = ws.tmp.path().join("restored");
    import_into(&fresh, &file);

    let restored = Daemon::start(&fresh, &ws.tmp.path().join("restored.log"), &[]);
    let (status, n1_after) = restored.get("/blocklist/nodes/n1").await;
    assert_eq!(status, StatusCode::OK);
    // The reports, newest first, and the provenance summary, as they were (the revision is
    // the new store's own).
    assert_eq!(n1_after["reports"], n1_before["reports"]);
    for field in [
        "source",
        "reportCount",
        "firstReportTimestamp",
        "lastReportTimestamp",
        "startTimestamp",
        "cause",
    ] {
        assert_eq!(n1_after[field], n1_before[field], "{field}");
    }
    assert_eq!(n1_after["source"], "detector-a");
    let (_, history) = restored.get("/blocklist/nodes/n2/history").await;
    let strip = |mut v: Value| {
        v.as_object_mut().unwrap().remove("revision");
        v
    };
    assert_eq!(
        strip(history[0].clone()),
        strip(n2_history[0].clone()),
        "the past block with how it ended"
    );
    assert_eq!(history[0]["ended"]["reason"], "replaced disk");
    let (status, _) = restored.get("/blocklist/nodes/n2").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    restored.terminate();

    // Imported again, merging into the active n1: the merge is a fourth report, the newest,
    // from the imported item's source.
    import_into(&fresh, &file);
    let restored = Daemon::start(&fresh, &ws.tmp.path().join("merged.log"), &[]);
    let (_, n1_merged) = restored.get("/blocklist/nodes/n1").await;
    assert_eq!(n1_merged["reportCount"], 4, "{n1_merged}");
    let reports = n1_merged["reports"].as_array().unwrap();
    assert_eq!(reports.len(), 4, "{n1_merged}");
    assert_eq!(reports[0]["source"], "detector-a");
    assert_eq!(reports[0]["timestamp"], n1_merged["lastReportTimestamp"]);
    assert_eq!(reports[1..], n1_before["reports"].as_array().unwrap()[..]);
}
