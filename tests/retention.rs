//! Event retention under commits bigger than the prune step. Alone in its own test binary:
//! it writes 36,000 items, and next to the feed tests' timing-sensitive watchers it would
//! slow them into lagging.

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

const MB: &str = "MARK_BLOCKED";

#[tokio::test]
async fn commits_bigger_than_the_prune_step_do_not_outgrow_the_retention() {
    // Each commit writes 12,000 events, more than the 10,000 a commit may prune to catch
    // up: pruning must still keep pace, or the log grows by the difference every commit.
    let mut ws = Workspace::new();
    let d = ws.start(&[
        "--events-retention-count",
        "100",
        "--max-batch",
        "12000",
        "--max-body-bytes",
        "4194304",
    ]);
    const BATCH: u64 = 12_000;
    for round in 0..3 {
        let items: Vec<Value> = (0..BATCH)
            .map(|i| item(&format!("n{round}-{i}"), MB, "c"))
            .collect();
        let (status, body) = d.post("/blocklist/nodes", json!(items)).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let head = 3 * BATCH;
    // Retention is per chunk of ~4 KiB, so a little more than 100 stays; never thousands.
    assert_eq!(
        Watch::open(&d, Some(head - 2_000), None)
            .await
            .err()
            .map(|e| e.0),
        Some(StatusCode::GONE),
        "events far beyond the retention are still kept"
    );
    let mut watch = Watch::open(&d, Some(head - 100), None).await.unwrap();
    assert_consecutive(&watch.take(100).await, head - 100);
    d.kill9();
    let (problems, _) = ws.inspect();
    assert!(problems.is_empty(), "{problems:?}");
}
