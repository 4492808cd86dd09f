//! An item's first report is the same whether the store holds it or rebuilds it from the
//! item: a fresh add stores no report, and the report reads the same before and after the
//! item's next report (a merge or a `PATCH`), escalated or not.

use super::*;

/// The report a fresh add of `id` made, as `GET` shows it.
async fn first_report_of(d: &Daemon, path: &str) -> Value {
    let (item, _) = get_item(d, path).await;
    assert_eq!(item["reportCount"], 1, "{item}");
    let reports = item["reports"].as_array().unwrap();
    assert_eq!(reports.len(), 1, "{item}");
    reports[0].clone()
}

#[tokio::test]
async fn the_first_report_reads_the_same_before_and_after_the_next() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let (_, mut policy) = d.get("/policy").await;
    policy["escalation"] = json!({"factor": 3, "maxSecs": 3600, "windowSecs": 3600});
    assert_eq!(
        d.call(Method::PUT, "/policy", Some(policy)).await.0,
        StatusCode::OK
    );

    let added = now_ms();
    let mut element = timed("n1", EVAC, "disk", 60_000);
    element["source"] = json!("detector-a");
    assert_eq!(
        d.post("/blocklist/nodes", json!([element])).await.0,
        StatusCode::CREATED
    );
    let first = first_report_of(&d, "/blocklist/nodes/n1").await;
    let end = first["endTimestamp"].as_i64().unwrap();
    assert!(end >= added + 60_000 && end <= now_ms() + 60_000, "{first}");
    assert_eq!(
        first,
        json!({"timestamp": first["timestamp"], "source": "detector-a", "operation": "add",
            "action": EVAC, "endTimestamp": end, "cause": "disk"})
    );

    // A merge that raises nothing and adds a cause: the first report is as it was.
    let mut merge = timed("n1", MB, "oom", 1_000);
    merge["allowMerge"] = json!(true);
    let (status, _, body) = request(
        &d,
        Method::POST,
        "/blocklist/nodes",
        &[("Blocklist-Source", "detector-b")],
        Some(json!([merge])),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (item, _) = get_item(&d, "/blocklist/nodes/n1").await;
    assert_eq!(item["cause"], "disk,oom");
    assert_eq!(item["reports"][1], first, "{item}");
    assert_eq!(item["reports"][0]["source"], "detector-b", "{item}");

    // A PATCH of a fresh item: its first report is as it was.
    d.post("/blocklist/nodes", json!([timed("n2", MB, "cpu", 60_000)]))
        .await;
    let first = first_report_of(&d, "/blocklist/nodes/n2").await;
    let (status, _, body) =
        patch(&d, "/blocklist/nodes/n2", None, json!({"permanent": true})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (item, _) = get_item(&d, "/blocklist/nodes/n2").await;
    assert_eq!(item["reports"][1], first, "{item}");
    assert_eq!(item["reports"][0]["endTimestamp"], PERMANENT, "{item}");

    // An escalated add: its report asks for the timeout requested, not the one applied.
    assert_eq!(d.delete("/blocklist/nodes/n2").await.0, StatusCode::OK);
    let requested = 10_000;
    d.post(
        "/blocklist/nodes",
        json!([timed("n2", MB, "cpu", requested)]),
    )
    .await;
    let (item, _) = get_item(&d, "/blocklist/nodes/n2").await;
    assert_eq!(item["escalated"]["timeout"], 3 * requested, "{item}");
    let first = first_report_of(&d, "/blocklist/nodes/n2").await;
    let start = item["startTimestamp"].as_i64().unwrap();
    assert_eq!(first["endTimestamp"], start + requested, "{item}");
    let mut merge = timed("n2", MB, "cpu", 1_000);
    merge["allowMerge"] = json!(true);
    assert_eq!(
        d.post("/blocklist/nodes", json!([merge])).await.0,
        StatusCode::ACCEPTED
    );
    let (item, _) = get_item(&d, "/blocklist/nodes/n2").await;
    assert_eq!(item["reports"][1], first, "{item}");

    // A fresh add, never reported again: nothing in the reports tree.
    d.post(
        "/blocklist/nodes",
        json!([timed("n3", MB, "fresh", 60_000)]),
    )
    .await;
    assert_eq!(
        first_report_of(&d, "/blocklist/nodes/n3").await["cause"],
        "fresh"
    );
    assert!(d.terminate().success());
    // n1 and n2 (its second block): two each; n3: none.
    assert_eq!(ws.tree_entries(&["reports"]), [4]);
    assert_check_passes(&ws.data_dir());
}
