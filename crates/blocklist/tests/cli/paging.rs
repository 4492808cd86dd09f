//! `blocklist list` reads big listings in pages: every request asks for a page of 1000,
//! and the pages join into exactly the listing the daemon answers whole.

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::common::*;
use super::run::{command, run_cmd};
use super::Proxy;

#[test]
fn list_reads_a_big_listing_in_pages_and_prints_it_whole() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    rt.block_on(async {
        for (kind, n) in [("taskmanagers", 2_500), ("nodes", 1_200)] {
            let items: Vec<Value> = (0..n)
                .map(|i| item(&format!("{kind}-{i:05}"), "MARK_BLOCKED", "c"))
                .collect();
            let (status, body) = d.post(&format!("/blocklist/{kind}"), json!(items)).await;
            assert_eq!(status, StatusCode::CREATED, "{body}");
        }
    });
    let (whole, nodes) =
        rt.block_on(async { (d.listing().await, d.get("/blocklist/nodes").await.1) });
    let proxy = Proxy::start(d.addr);
    let server = format!("http://{}", proxy.addr);

    let all = run_cmd(command(&server, &["--json", "list"])).ok().json();
    assert_eq!(all, whole);
    let listed = run_cmd(command(&server, &["--json", "list", "nodes"]))
        .ok()
        .json();
    assert_eq!(listed, nodes);
    let table = run_cmd(command(&server, &["list"])).ok().stdout;
    for id in [
        "taskmanagers-00000",
        "taskmanagers-02499",
        "nodes-00000",
        "nodes-01199",
    ] {
        assert!(table.contains(id), "{id} missing");
    }

    // Each request asked for a page: 4 of the 3,700 items, 2 of the nodes, 4 again.
    let sent = proxy.sent_text();
    let firsts = sent.matches("get /blocklist?limit=1000 ").count()
        + sent.matches("get /blocklist/nodes?limit=1000 ").count();
    let nexts = sent.matches("?limit=1000&continue=").count();
    assert_eq!((firsts, nexts), (3, 3 + 1 + 3), "{sent}");
    assert!(
        !sent.contains("get /blocklist "),
        "a request for the whole listing"
    );
}
