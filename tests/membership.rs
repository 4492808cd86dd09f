//! Task managers on nodes, and the effective check: a task manager is blocked if it is
//! blocked itself or its node is.

mod common;

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const MB: &str = "MARK_BLOCKED";
const EVAC: &str = "MARK_BLOCKED_AND_EVACUATE_TASKS";

async fn put(d: &Daemon, path: &str, body: Value) -> (StatusCode, Value) {
    d.call(Method::PUT, path, Some(body)).await
}

#[tokio::test]
async fn register_move_unregister() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    assert_eq!(
        put(&d, "/taskmanagers/tm-1", json!({"node": "n1"})).await,
        (StatusCode::CREATED, json!({"id": "tm-1", "node": "n1"}))
    );
    assert_eq!(
        put(&d, "/taskmanagers/tm-1", json!({"node": "n1"})).await.0,
        StatusCode::OK
    );
    assert_eq!(
        put(&d, "/taskmanagers/tm%2F2", json!({"node": "n 1"}))
            .await
            .0,
        StatusCode::CREATED
    );
    assert_eq!(
        d.get("/taskmanagers/tm-1").await,
        (StatusCode::OK, json!({"id": "tm-1", "node": "n1"}))
    );
    assert_eq!(
        d.get("/taskmanagers").await.1,
        json!([{"id": "tm-1", "node": "n1"}, {"id": "tm/2", "node": "n 1"}])
    );

    // Move tm-1 to n2: the node's entry follows.
    d.post(
        "/blocklist/nodes",
        json!([item("n1", MB, "a"), item("n2", MB, "b")]),
    )
    .await;
    assert_eq!(
        put(&d, "/taskmanagers/tm-1", json!({"node": "n2"})).await,
        (StatusCode::OK, json!({"id": "tm-1", "node": "n2"}))
    );
    let nodes = d.get("/blocklist/nodes").await.1;
    assert_eq!(nodes[0]["taskManagers"], json!([]));
    assert_eq!(nodes[1]["taskManagers"], json!(["tm-1"]));

    assert_eq!(
        d.delete("/taskmanagers/tm-1").await,
        (StatusCode::OK, json!({}))
    );
    assert_eq!(
        d.delete("/taskmanagers/tm-1").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(d.get("/taskmanagers/tm-1").await.0, StatusCode::NOT_FOUND);
    assert_eq!(
        d.get("/blocklist/nodes/n2").await.1["taskManagers"],
        json!([])
    );
}

#[tokio::test]
async fn batch_registration_is_atomic_and_later_pairs_win() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let batch: Vec<Value> = (0..300)
        .map(|i| json!({"id": format!("tm-{i:03}"), "node": format!("n{}", i % 3)}))
        .collect();
    let (status, body) = put(&d, "/taskmanagers", Value::Array(batch)).await;
    assert_eq!(
        (status, body),
        (
            StatusCode::CREATED,
            json!({"created": 300, "moved": 0, "unchanged": 0})
        )
    );

    let (status, body) = put(&d, "/taskmanagers", json!([{"id": "tm-000", "node": "n0"}, {"id": "tm-001", "node": "n9"}, {"id": "tm-001", "node": "n8"}])).await;
    assert_eq!(
        (status, body),
        (
            StatusCode::OK,
            json!({"created": 0, "moved": 2, "unchanged": 1})
        )
    );
    assert_eq!(d.get("/taskmanagers/tm-001").await.1["node"], "n8");

    // One bad element: nothing of the batch is written.
    let before = d.get("/taskmanagers").await.1;
    let (status, body) = put(
        &d,
        "/taskmanagers",
        json!([{"id": "tm-new", "node": "n1"}, {"id": "tm-002", "node": ""}]),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["errors"][0]
            .as_str()
            .unwrap()
            .starts_with("items[1] (id \"tm-002\").node"),
        "{body}"
    );
    assert_eq!(d.get("/taskmanagers").await.1, before);

    d.post("/blocklist/nodes", json!([item("n1", MB, "c")]))
        .await;
    let on_n1 = d.get("/blocklist/nodes/n1").await.1["taskManagers"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(on_n1, 99, "tm-001 moved away from n1");
}

#[tokio::test]
async fn bad_registrations_are_refused_and_change_nothing() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    put(&d, "/taskmanagers/tm", json!({"node": "n"})).await;
    let cases = [
        ("/taskmanagers/tm", json!({})),
        ("/taskmanagers/tm", json!({"node": 5})),
        ("/taskmanagers/tm", json!({"node": "n", "zone": "z"})),
        ("/taskmanagers/tm", json!(["n"])),
        ("/taskmanagers/tm", json!({"node": "a\u{7}"})),
        ("/taskmanagers/a%00b", json!({"node": "n"})),
        ("/taskmanagers", json!([])),
        ("/taskmanagers", json!([{"id": "x"}])),
        ("/taskmanagers", json!({"id": "x", "node": "n"})),
    ];
    for (path, body) in cases {
        let (status, resp) = put(&d, path, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {body}: {resp}");
        assert!(resp["errors"][0].is_string());
    }
    assert_eq!(
        d.get("/taskmanagers").await.1,
        json!([{"id": "tm", "node": "n"}])
    );
}

#[tokio::test]
async fn a_node_block_blocks_its_task_managers_and_the_stronger_action_wins() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    put(&d, "/taskmanagers", json!([{"id": "tm-1", "node": "n1"}, {"id": "tm-2", "node": "n1"}, {"id": "tm-3", "node": "n2"}])).await;

    // Nothing blocked: the answer says so, with action null (present, not omitted).
    let (status, v) = d.get("/blocklist/check/taskmanagers/tm-1").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        v,
        json!({"id": "tm-1", "node": "n1", "blocked": false, "action": null, "blockedBy": []})
    );

    let mut node_item = item("n1", MB, "disk");
    node_item["timeout"] = json!(3_600_000);
    d.post("/blocklist/nodes", json!([node_item])).await;
    let (_, v) = d.get("/blocklist/check/taskmanagers/tm-2").await;
    assert_eq!(v["blocked"], true);
    assert_eq!(v["action"], MB);
    assert_eq!(v["blockedBy"].as_array().unwrap().len(), 1);
    assert_eq!(v["blockedBy"][0]["kind"], "node");
    assert_eq!(v["blockedBy"][0]["id"], "n1");
    assert_eq!(v["blockedBy"][0]["cause"], "disk");
    assert_eq!(
        d.get("/blocklist/check/taskmanagers/tm-3").await.1["blocked"],
        false
    );

    // A direct block on tm-1 too: both apply, the stronger action wins.
    d.post(
        "/blocklist/taskmanagers",
        json!([item("tm-1", EVAC, "oom")]),
    )
    .await;
    let (_, v) = d.get("/blocklist/check/taskmanagers/tm-1").await;
    assert_eq!(v["action"], EVAC);
    let kinds: Vec<&str> = v["blockedBy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["taskmanager", "node"]);

    // Listings: the node shows its task managers; blockedTaskManagers only direct blocks.
    let all = d.listing().await;
    assert_eq!(
        all["blockedNodes"][0]["taskManagers"],
        json!(["tm-1", "tm-2"])
    );
    assert_eq!(ids(&all["blockedTaskManagers"]), ["tm-1"]);

    // Node checks and unregistered task managers.
    let (_, v) = d.get("/blocklist/check/nodes/n1").await;
    assert_eq!(
        (v["blocked"].clone(), v["blockedBy"][0]["kind"].clone()),
        (json!(true), json!("node"))
    );
    assert!(v.get("node").is_none());
    assert_eq!(
        d.get("/blocklist/check/nodes/n2").await.1["action"],
        Value::Null
    );
    d.post("/blocklist/taskmanagers", json!([item("loner", MB, "x")]))
        .await;
    let (_, v) = d.get("/blocklist/check/taskmanagers/loner").await;
    assert_eq!((v["blocked"].clone(), v.get("node")), (json!(true), None));
}

#[tokio::test]
async fn expiry_of_the_node_item_clears_its_task_managers() {
    let mut ws = Workspace::new();
    // The sweeper waits an hour between passes: the check must not depend on it.
    let d = ws.start(&["--sweep-interval-ms", "3600000"]);
    put(&d, "/taskmanagers/tm-1", json!({"node": "n1"})).await;
    let mut node_item = item("n1", EVAC, "flaky");
    // Long enough for the first check to land before it ends, even on a loaded machine.
    node_item["timeout"] = json!(2_000);
    d.post("/blocklist/nodes", json!([node_item])).await;
    assert_eq!(
        d.get("/blocklist/check/taskmanagers/tm-1").await.1["blocked"],
        true
    );
    eventually("the node block to expire for the check", || async {
        d.get("/blocklist/check/taskmanagers/tm-1").await.1["blocked"] == false
    })
    .await;
    assert_eq!(d.get("/blocklist/check/nodes/n1").await.1["blocked"], false);
}

#[tokio::test]
async fn batch_check_answers_each_id_in_order() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    put(
        &d,
        "/taskmanagers",
        json!([{"id": "a", "node": "n1"}, {"id": "b", "node": "n2"}]),
    )
    .await;
    d.post("/blocklist/nodes", json!([item("n1", MB, "x")]))
        .await;
    d.post("/blocklist/taskmanagers", json!([item("c", EVAC, "y")]))
        .await;
    let (status, v) = d
        .post(
            "/blocklist/check",
            json!({"taskManagers": ["a", "b", "c", "unknown"], "nodes": ["n2", "n1"]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let blocked = |list: &Value| -> Vec<(String, bool)> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|v| {
                (
                    v["id"].as_str().unwrap().to_owned(),
                    v["blocked"].as_bool().unwrap(),
                )
            })
            .collect()
    };
    let s = |id: &str, b| (id.to_owned(), b);
    assert_eq!(
        blocked(&v["taskManagers"]),
        [
            s("a", true),
            s("b", false),
            s("c", true),
            s("unknown", false)
        ]
    );
    assert_eq!(blocked(&v["nodes"]), [s("n2", false), s("n1", true)]);
    assert_eq!(v["taskManagers"][2]["action"], EVAC);

    let many: Vec<String> = (0..10_000).map(|i| format!("tm-{i}")).collect();
    let (status, v) = d
        .post("/blocklist/check", json!({"taskManagers": many}))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["taskManagers"].as_array().unwrap().len(), 10_000);
    let too_many: Vec<String> = (0..10_001).map(|i| format!("tm-{i}")).collect();
    assert_eq!(
        d.post("/blocklist/check", json!({"nodes": too_many}))
            .await
            .0,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    let (status, v) = d
        .post("/blocklist/check", json!({"taskManagers": ["ok", ""]}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        v["errors"][0]
            .as_str()
            .unwrap()
            .starts_with("taskManagers[1]"),
        "{v}"
    );
}

#[tokio::test]
async fn registrations_and_checks_survive_kill_9() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let batch: Vec<Value> = (0..100)
        .map(|i| json!({"id": format!("tm-{i}"), "node": format!("n{}", i % 10)}))
        .collect();
    assert_eq!(
        put(&d, "/taskmanagers", Value::Array(batch)).await.0,
        StatusCode::CREATED
    );
    put(&d, "/taskmanagers/tm-5", json!({"node": "n-moved"})).await;
    d.delete("/taskmanagers/tm-6").await;
    d.post("/blocklist/nodes", json!([item("n3", EVAC, "c")]))
        .await;
    let registrations = d.get("/taskmanagers").await.1;
    let nodes = d.get("/blocklist/nodes").await.1;
    d.kill9();

    let d = ws.start(&[]);
    assert_eq!(d.get("/taskmanagers").await.1, registrations);
    assert_eq!(d.get("/blocklist/nodes").await.1, nodes);
    assert_eq!(
        d.get("/blocklist/check/taskmanagers/tm-13").await.1["action"],
        EVAC
    );
    assert_eq!(
        d.get("/blocklist/check/taskmanagers/tm-5").await.1["node"],
        "n-moved"
    );
    d.kill9();
    let (problems, _) = ws.inspect();
    assert!(problems.is_empty(), "{problems:?}");
}

/// The daemon keeps recent check verdicts (`--check-cache-mb`): asking again about the same
/// ids after each kind of change must show the change, never the kept answer. Run with
/// keeping on (the default) and off, which must answer alike.
#[tokio::test]
async fn repeated_checks_see_every_change_at_once() {
    for flags in [&[][..], &["--check-cache-mb", "0"][..]] {
        let mut ws = Workspace::new();
        let d = ws.start(flags);
        let check = |path: &'static str| {
            let d = &d;
            async move {
                let (status, v) = d.get(path).await;
                assert_eq!(status, StatusCode::OK, "{path}: {v}");
                v
            }
        };
        let tm = "/blocklist/check/taskmanagers/tm-1";
        put(&d, "/taskmanagers/tm-1", json!({"node": "n1"})).await;
        // Asked twice, so a kept verdict exists before each change below.
        for _ in 0..2 {
            assert_eq!(check(tm).await["blocked"], false, "{flags:?}");
        }

        // The node's item.
        d.post("/blocklist/nodes", json!([item("n1", MB, "disk")]))
            .await;
        assert_eq!(check(tm).await["blocked"], true, "{flags:?}");
        assert_eq!(check("/blocklist/check/nodes/n1").await["blocked"], true);

        // The registration: moved to a node that is not blocked.
        put(&d, "/taskmanagers/tm-1", json!({"node": "n2"})).await;
        let v = check(tm).await;
        assert_eq!(
            (v["blocked"].clone(), v["node"].clone()),
            (json!(false), json!("n2"))
        );

        // Its own item, then a merge into it that changes the action.
        d.post("/blocklist/taskmanagers", json!([item("tm-1", MB, "oom")]))
            .await;
        assert_eq!(check(tm).await["action"], MB, "{flags:?}");
        let mut stronger = item("tm-1", EVAC, "again");
        stronger["allowMerge"] = json!(true);
        d.post("/blocklist/taskmanagers", json!([stronger])).await;
        let v = check(tm).await;
        assert_eq!(v["action"], EVAC, "{flags:?}");
        assert_eq!(v["blockedBy"][0]["cause"], "oom,again");

        // The batch check answers from the same verdicts.
        let (_, batch) = d
            .post(
                "/blocklist/check",
                json!({"taskManagers": ["tm-1"], "nodes": ["n1"]}),
            )
            .await;
        assert_eq!(batch["taskManagers"][0], check(tm).await);
        assert_eq!(batch["nodes"][0]["blocked"], true);

        // Removals: the item, the node's item, the registration.
        d.delete("/blocklist/taskmanagers/tm-1").await;
        assert_eq!(check(tm).await["blocked"], false, "{flags:?}");
        d.delete("/blocklist/nodes/n1").await;
        assert_eq!(check("/blocklist/check/nodes/n1").await["blocked"], false);
        d.delete("/taskmanagers/tm-1").await;
        assert!(check(tm).await.get("node").is_none(), "{flags:?}");
    }
}
