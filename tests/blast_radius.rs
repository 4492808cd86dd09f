//! The share caps against the real binary, with the default policy: at most half the
//! registered nodes (and half the registered task managers, counting those blocked through
//! their node) may be blocked at once, and a fifth of the nodes evacuating. Checked in the
//! committer's transaction, so a storm from many clients admits exactly the cap.

mod common;

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const NODES: usize = 200;
const TMS_PER_NODE: usize = 10;

/// Registers `NODES` nodes with `TMS_PER_NODE` task managers each.
async fn register_cluster(d: &Daemon) {
    let pairs: Vec<Value> = (0..NODES)
        .flat_map(|n| {
            (0..TMS_PER_NODE)
                .map(move |t| json!({"id": format!("tm-{n:03}-{t}"), "node": format!("n{n:03}")}))
        })
        .collect();
    let (status, body) = d
        .call(Method::PUT, "/taskmanagers", Some(json!(pairs)))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

fn timed(id: &str, action: &str) -> Value {
    json!([{"id": id, "action": action, "cause": "detector", "timeout": 3_600_000}])
}

/// How many of the ids the batch check finds blocked, of each kind.
async fn effectively_blocked(d: &Daemon) -> (usize, usize) {
    let nodes: Vec<String> = (0..NODES).map(|n| format!("n{n:03}")).collect();
    let tms: Vec<String> = (0..NODES)
        .flat_map(|n| (0..TMS_PER_NODE).map(move |t| format!("tm-{n:03}-{t}")))
        .collect();
    let (status, verdicts) = d
        .post(
            "/blocklist/check",
            json!({"nodes": nodes, "taskManagers": tms}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{verdicts}");
    let blocked = |list: &Value| {
        list.as_array()
            .unwrap()
            .iter()
            .filter(|v| v["blocked"] == true)
            .count()
    };
    (
        blocked(&verdicts["nodes"]),
        blocked(&verdicts["taskManagers"]),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_detector_storm_on_a_registered_cluster_admits_exactly_the_share_cap() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    register_cluster(&d).await;
    let url = d.url("/blocklist/nodes");
    // 16 concurrent clients block all 200 nodes, one request each.
    let mut clients = Vec::new();
    for client_no in 0..16 {
        let (client, url) = (d.client.clone(), url.clone());
        clients.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            for node in (client_no..NODES).step_by(16) {
                let body = timed(&format!("n{node:03}"), "MARK_BLOCKED");
                let response = client.post(&url).json(&body).send().await.unwrap();
                let status = response.status();
                let retry_after = response.headers().get("retry-after").cloned();
                let body: Value = response.json().await.unwrap_or(Value::Null);
                answers.push((node, status, retry_after, body));
            }
            answers
        }));
    }
    let mut admitted = Vec::new();
    for client in clients {
        for (node, status, retry_after, body) in client.await.unwrap() {
            match status {
                StatusCode::CREATED => admitted.push(format!("n{node:03}")),
                StatusCode::TOO_MANY_REQUESTS => {
                    // Both kinds' caps: the node's own first, then its task managers'.
                    let errors = &body["errors"];
                    assert!(
                        errors[0].as_str().unwrap().contains("blocked-share: registered nodes blocked: 100 of 200 now, the cap is 100 (50%), 101 after this batch"),
                        "{errors}"
                    );
                    assert!(
                        errors[1].as_str().unwrap().contains("blocked-share: registered taskmanagers blocked: 1000 of 2000 now, the cap is 1000 (50%), 1010 after this batch"),
                        "{errors}"
                    );
                    // Relief comes when the first block ends, in about an hour.
                    let wait: u64 = retry_after
                        .expect("a Retry-After")
                        .to_str()
                        .unwrap()
                        .parse()
                        .unwrap();
                    assert!((3_500..=3_600).contains(&wait), "Retry-After {wait}");
                }
                other => panic!("node {node}: {other} {body}"),
            }
        }
    }
    admitted.sort();
    assert_eq!(admitted.len(), NODES / 2, "{admitted:?}");
    assert_eq!(ids(&d.get("/blocklist/nodes").await.1), admitted);
    // Half the nodes, so half the task managers, through their nodes.
    assert_eq!(
        effectively_blocked(&d).await,
        (NODES / 2, NODES / 2 * TMS_PER_NODE)
    );
    let status = d.get("/policy/status").await.1;
    assert_eq!(status["nodes"]["blockedShare"]["current"], NODES / 2);
    assert_eq!(status["nodes"]["blockedShare"]["headroom"], 0);
    assert_eq!(
        status["taskManagers"]["blockedShare"]["current"],
        NODES / 2 * TMS_PER_NODE
    );

    // A task manager of a node not blocked would pass its own kind's share, but the task
    // managers are at their cap too: 1,000 of 2,000.
    let tm = d
        .post(
            "/blocklist/taskmanagers",
            timed(
                &format!("tm-{}-0", admitted_complement(&admitted)),
                "MARK_BLOCKED",
            ),
        )
        .await;
    assert_eq!(tm.0, StatusCode::TOO_MANY_REQUESTS, "{}", tm.1);
    // One blocked through its node already adds nothing: it passes.
    let covered = format!("tm-{}-0", &admitted[0][1..]);
    let (status, body) = d
        .post("/blocklist/taskmanagers", timed(&covered, "MARK_BLOCKED"))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // Evacuating: at most a fifth of the nodes (40). Raising 41 blocked nodes in one batch
    // can never pass (422), 40 do.
    let raise = |ids: &[String]| {
        json!(ids
            .iter()
            .map(|id| json!({"id": id, "action": "MARK_BLOCKED_AND_EVACUATE_TASKS", "cause": "worse", "allowMerge": true}))
            .collect::<Vec<_>>())
    };
    let (status, body) = d.post("/blocklist/nodes", raise(&admitted[..41])).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["errors"][0]
            .as_str()
            .unwrap()
            .contains("evacuating-share: registered nodes evacuating: 0 of 200 now, the cap is 40 (20%), 41 after this batch"),
        "{body}"
    );
    let (status, body) = d.post("/blocklist/nodes", raise(&admitted[..40])).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");

    // After kill -9 the same state holds, and so do the caps.
    d.kill9();
    let d = ws.start(&[]);
    assert_eq!(ids(&d.get("/blocklist/nodes").await.1), admitted);
    assert_eq!(
        effectively_blocked(&d).await,
        (NODES / 2, NODES / 2 * TMS_PER_NODE)
    );
    let more = d
        .post(
            "/blocklist/nodes",
            timed(
                &format!("n{}", admitted_complement(&admitted)),
                "MARK_BLOCKED",
            ),
        )
        .await;
    assert_eq!(more.0, StatusCode::TOO_MANY_REQUESTS, "{}", more.1);
    let status = d.get("/policy/status").await.1;
    assert_eq!(status["nodes"]["evacuatingShare"]["current"], 40);
}

/// The number of a node that was not admitted.
fn admitted_complement(admitted: &[String]) -> String {
    (0..NODES)
        .map(|n| format!("{n:03}"))
        .find(|n| !admitted.contains(&format!("n{n}")))
        .unwrap()
}

#[tokio::test]
async fn the_share_caps_do_not_apply_below_min_registered_nor_to_plain_flip_224_use() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    // No registrations: every node may be blocked, as FLIP-224 says.
    let all: Vec<Value> = (0..50)
        .map(|n| json!({"id": format!("n{n}"), "action": "MARK_BLOCKED_AND_EVACUATE_TASKS", "cause": "c"}))
        .collect();
    let (status, body) = d.post("/blocklist/nodes", json!(all)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // Nine registered nodes (below the minimum of ten): still no cap.
    let pairs: Vec<Value> = (0..9)
        .map(|n| json!({"id": format!("tm{n}"), "node": format!("m{n}")}))
        .collect();
    d.call(Method::PUT, "/taskmanagers", Some(json!(pairs)))
        .await;
    let nine: Vec<Value> = (0..9)
        .map(|n| json!({"id": format!("m{n}"), "action": "MARK_BLOCKED", "cause": "c"}))
        .collect();
    let (status, body) = d.post("/blocklist/nodes", json!(nine)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let status = d.get("/policy/status").await.1;
    assert_eq!(status["nodes"]["registered"], 9);
    assert_eq!(status["nodes"]["blockedShare"]["current"], 9);
    assert_eq!(status["nodes"]["blockedShare"]["cap"], Value::Null);
}
