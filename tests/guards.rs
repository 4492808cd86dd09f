//! The guardrails against the real binary: a cap on blocked items, a rate of new
//! evacuations, a longest duration and no permanent blocks. Each is checked in the
//! committer's transaction, so concurrent callers cannot together pass it, and a refused
//! batch writes nothing.

mod common;

use std::time::Instant;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

const EVACUATE: &str = "MARK_BLOCKED_AND_EVACUATE_TASKS";

/// What one add answered: status, `Retry-After` in seconds, errors.
struct Answer {
    status: StatusCode,
    retry_after: Option<u64>,
    body: Value,
}

async fn add(client: &reqwest::Client, url: &str, body: &Value) -> Answer {
    let response = client.post(url).json(body).send().await.expect("request");
    let status = response.status();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().expect("Retry-After in seconds"));
    let text = response.text().await.unwrap();
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap()
    };
    Answer {
        status,
        retry_after,
        body,
    }
}

fn timed(id: &str, action: &str) -> Value {
    json!([{"id": id, "action": action, "cause": "detector", "timeout": 3_600_000}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_storm_of_node_blocks_admits_exactly_the_cap_and_keeps_it_across_kill_9() {
    let flags = ["--max-blocked-nodes", "20"];
    let mut ws = Workspace::new();
    let d = ws.start(&flags);
    let url = d.url("/blocklist/nodes");
    // 16 concurrent clients block 200 nodes, one request each.
    let mut clients = Vec::new();
    for client_no in 0..16 {
        let (client, url) = (d.client.clone(), url.clone());
        clients.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            for node in (client_no..200).step_by(16) {
                let body = timed(&format!("n{node:03}"), "MARK_BLOCKED");
                answers.push((node, add(&client, &url, &body).await));
            }
            answers
        }));
    }
    let mut admitted = Vec::new();
    for client in clients {
        for (node, answer) in client.await.unwrap() {
            match answer.status {
                StatusCode::CREATED => admitted.push(format!("n{node:03}")),
                StatusCode::TOO_MANY_REQUESTS => {
                    let error = answer.body["errors"][0].as_str().unwrap();
                    assert!(
                        error.contains("max-items: nodes blocked: 20 now, the cap is 20"),
                        "{error}"
                    );
                    // Relief comes when the first of the blocks ends, in about an hour.
                    let wait = answer.retry_after.expect("a Retry-After");
                    assert!((3_500..=3_600).contains(&wait), "Retry-After {wait}");
                }
                other => panic!("node {node}: {other} {}", answer.body),
            }
        }
    }
    admitted.sort();
    assert_eq!(admitted.len(), 20, "{admitted:?}");
    let listed = ids(&d.get("/blocklist/nodes").await.1);
    assert_eq!(listed, admitted);
    // Merging into a blocked node adds no block: it passes the cap.
    let merge = json!([{"id": admitted[0], "action": "MARK_BLOCKED", "cause": "again", "allowMerge": true}]);
    assert_eq!(
        add(&d.client, &url, &merge).await.status,
        StatusCode::ACCEPTED
    );
    // The other kind has a cap of its own (none here).
    let tm = timed("tm-1", "MARK_BLOCKED");
    assert_eq!(
        add(&d.client, &d.url("/blocklist/taskmanagers"), &tm)
            .await
            .status,
        StatusCode::CREATED
    );

    d.kill9();
    let d = ws.start(&flags);
    assert_eq!(ids(&d.get("/blocklist/nodes").await.1), admitted);
    let more = add(
        &d.client,
        &d.url("/blocklist/nodes"),
        &timed("n999", "MARK_BLOCKED"),
    )
    .await;
    assert_eq!(more.status, StatusCode::TOO_MANY_REQUESTS, "{}", more.body);
    // Once a block goes, there is room for one more.
    assert_eq!(
        d.delete(&format!("/blocklist/nodes/{}", admitted[0]))
            .await
            .0,
        StatusCode::OK
    );
    let one = add(
        &d.client,
        &d.url("/blocklist/nodes"),
        &timed("n999", "MARK_BLOCKED"),
    )
    .await;
    assert_eq!(one.status, StatusCode::CREATED, "{}", one.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_evacuation_rate_admits_at_most_the_burst_plus_the_rate_under_concurrent_callers() {
    // Two tokens a second after a burst of five.
    let mut ws = Workspace::new();
    let d = ws.start(&[
        "--node-evacuations-per-minute",
        "120",
        "--node-evacuation-burst",
        "5",
    ]);
    let url = d.url("/blocklist/nodes");
    let start = Instant::now();
    let mut clients = Vec::new();
    for client_no in 0..16 {
        let (client, url) = (d.client.clone(), url.clone());
        clients.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            for n in 0..12 {
                let body = timed(&format!("e{client_no}-{n}"), EVACUATE);
                answers.push(add(&client, &url, &body).await);
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            answers
        }));
    }
    let mut admitted = 0;
    for client in clients {
        for answer in client.await.unwrap() {
            match answer.status {
                StatusCode::CREATED => admitted += 1,
                StatusCode::TOO_MANY_REQUESTS => {
                    let error = answer.body["errors"][0].as_str().unwrap();
                    assert!(error.contains("evacuation-rate"), "{error}");
                    // The next token is at most half a second away.
                    assert_eq!(answer.retry_after, Some(1));
                }
                other => panic!("{other} {}", answer.body),
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let most = 5.0 + 2.0 * elapsed;
    assert!(admitted >= 5, "the burst passes: {admitted}");
    assert!(
        f64::from(admitted) <= most,
        "{admitted} admitted in {elapsed:.2} s (at most {most:.1})"
    );
    assert_eq!(
        ids(&d.get("/blocklist/nodes").await.1).len(),
        admitted as usize
    );

    // Blocking without evacuating is not rate limited.
    for n in 0..10 {
        let body = timed(&format!("b{n}"), "MARK_BLOCKED");
        assert_eq!(
            add(&d.client, &url, &body).await.status,
            StatusCode::CREATED
        );
    }
}

#[tokio::test]
async fn a_merge_is_a_new_evacuation_only_when_it_raises_the_action() {
    let mut ws = Workspace::new();
    // One token, refilled once a minute: the test never sees a refill.
    let d = ws.start(&[
        "--node-evacuations-per-minute",
        "1",
        "--node-evacuation-burst",
        "1",
    ]);
    let url = d.url("/blocklist/nodes");
    for id in ["b1", "b2"] {
        assert_eq!(
            add(&d.client, &url, &timed(id, "MARK_BLOCKED"))
                .await
                .status,
            StatusCode::CREATED
        );
    }
    let raise =
        |id: &str| json!([{"id": id, "action": EVACUATE, "cause": "worse", "allowMerge": true}]);
    assert_eq!(
        add(&d.client, &url, &raise("b1")).await.status,
        StatusCode::ACCEPTED
    );
    // b1 evacuates already: merging another evacuation into it takes no token.
    assert_eq!(
        add(&d.client, &url, &raise("b1")).await.status,
        StatusCode::ACCEPTED
    );
    let refused = add(&d.client, &url, &raise("b2")).await;
    assert_eq!(
        refused.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        refused.body
    );
    assert!(
        (59..=60).contains(&refused.retry_after.unwrap()),
        "{:?}",
        refused.retry_after
    );
    let b2 = d.get("/blocklist/nodes/b2").await.1;
    assert_eq!(
        b2["action"], "MARK_BLOCKED",
        "the refused merge changed nothing: {b2}"
    );
}

#[tokio::test]
async fn a_dry_run_meets_the_rate_but_takes_no_token() {
    let mut ws = Workspace::new();
    // One token, refilled once an hour: the test never sees a refill.
    let d = ws.start(&[
        "--taskmanager-evacuations-per-minute",
        "1",
        "--taskmanager-evacuation-burst",
        "1",
    ]);
    let (url, dry) = (
        d.url("/blocklist/taskmanagers"),
        d.url("/blocklist/taskmanagers?dryRun=true"),
    );
    let body = timed("tm-1", EVACUATE);
    assert_eq!(
        add(&d.client, &dry, &body).await.status,
        StatusCode::CREATED
    );
    assert_eq!(
        add(&d.client, &url, &body).await.status,
        StatusCode::CREATED
    );
    let body = timed("tm-2", EVACUATE);
    let real = add(&d.client, &url, &body).await;
    let rehearsed = add(&d.client, &dry, &body).await;
    assert_eq!(real.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!((rehearsed.status, rehearsed.body), (real.status, real.body));
}

#[tokio::test]
async fn too_long_and_permanent_blocks_are_refused_for_good_and_nothing_of_the_batch_is_written() {
    let mut ws = Workspace::new();
    let d = ws.start(&[
        "--max-block-duration-secs",
        "3600",
        "--permanent-blocks",
        "forbidden",
    ]);
    let url = d.url("/blocklist/nodes");
    let element = |id: &str, timeout: Option<i64>| {
        let mut e = json!({"id": id, "action": "MARK_BLOCKED", "cause": "c"});
        if let Some(t) = timeout {
            e["timeout"] = json!(t);
        }
        e
    };
    let batch = json!([
        element("ok", Some(1_800_000)),
        element("long", Some(7_200_000)),
        element("forever", None)
    ]);
    let answer = add(&d.client, &url, &batch).await;
    assert_eq!(
        answer.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        answer.body
    );
    assert_eq!(answer.retry_after, None);
    let errors: Vec<&str> = answer.body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0]
            .starts_with("items[1] (id \"long\"): max-duration: the block would last 7200000 ms"),
        "{errors:?}"
    );
    assert!(
        errors[1].starts_with("items[2] (id \"forever\"): permanent: "),
        "{errors:?}"
    );
    assert_eq!(
        d.listing().await["revision"],
        0,
        "nothing of the batch was written"
    );
    let ok = add(&d.client, &url, &json!([element("ok", Some(3_600_000))])).await;
    assert_eq!(ok.status, StatusCode::CREATED, "{}", ok.body);
}

#[tokio::test]
async fn refusals_are_counted_by_guard() {
    let mut ws = Workspace::new();
    let d = ws.start(&["--max-blocked-taskmanagers", "1"]);
    let url = d.url("/blocklist/taskmanagers");
    assert_eq!(
        add(&d.client, &url, &timed("a", "MARK_BLOCKED"))
            .await
            .status,
        StatusCode::CREATED
    );
    assert_eq!(
        add(&d.client, &url, &timed("b", "MARK_BLOCKED"))
            .await
            .status,
        StatusCode::TOO_MANY_REQUESTS
    );
    let text = d
        .client
        .get(d.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("blocklist_guard_refusals_total{guard=\"max-items\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("blocklist_guard_refusals_total{guard=\"evacuation-rate\"} 0"),
        "{text}"
    );
}

mod caps_hold {
    //! The property, in-process: for random sequences of adds (new, merging, conflicting),
    //! removals, registrations and expiries, no admitted add leaves a kind above a cap in
    //! force when it committed (unless it added nothing to that figure: registrations can
    //! raise a figure past a cap, and then only blocks that add nothing pass): neither the
    //! item count nor the share of registered ids blocked or evacuating. And the share
    //! figures the committer keeps agree with the state recomputed from scratch.

    use std::collections::{HashMap, HashSet};

    use blocklistd::model::{Action, Kind, NewItem, PERMANENT};
    use blocklistd::policy::{slot, Policy, Standing};
    use blocklistd::store::{AddOutcome, Store, StoreConfig};
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Add {
            kind: Kind,
            ids: Vec<u8>,
            evacuate: bool,
            timeout_ms: Option<i64>,
            merge: bool,
        },
        Remove(Kind, u8),
        Register(u8, u8),
        Unregister(u8),
        Wait(u64),
    }

    fn kind() -> impl Strategy<Value = Kind> {
        prop_oneof![Just(Kind::Node), Just(Kind::TaskManager)]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (
                kind(),
                prop::collection::vec(0u8..8, 1..4),
                any::<bool>(),
                prop_oneof![Just(None), Just(Some(3)), Just(Some(15)), Just(Some(3_600_000))],
                any::<bool>(),
            )
                .prop_map(|(kind, ids, evacuate, timeout_ms, merge)| Op::Add {
                    kind,
                    ids,
                    evacuate,
                    timeout_ms,
                    merge
                }),
            1 => (kind(), 0u8..8).prop_map(|(kind, id)| Op::Remove(kind, id)),
            2 => (0u8..8, 0u8..8).prop_map(|(tm, node)| Op::Register(tm, node)),
            1 => (0u8..8).prop_map(Op::Unregister),
            1 => (0u64..20).prop_map(Op::Wait),
        ]
    }

    const CAPS: [u64; 2] = [6, 7];

    fn policy() -> Policy {
        let mut policy = Policy::OFF;
        policy.task_managers.max_blocked = Some(CAPS[0]);
        policy.nodes.max_blocked = Some(CAPS[1]);
        policy.nodes.max_blocked_percent = Some(50);
        policy.nodes.max_evacuating_percent = Some(25);
        policy.task_managers.max_blocked_percent = Some(50);
        policy.task_managers.max_evacuating_percent = Some(34);
        policy.min_registered = 2;
        policy
    }

    /// Each figure a cap counts, as the committer keeps it, and the cap (if it applies).
    fn figures(policy: &Policy, standing: &[Standing; 2]) -> Vec<(String, u64, Option<u64>)> {
        standing
            .iter()
            .flat_map(|s| {
                let of = policy.of(s.kind);
                [
                    ("items", s.items, of.max_blocked),
                    (
                        "blocked",
                        s.blocked,
                        policy.share_cap(of.max_blocked_percent, s.registered),
                    ),
                    (
                        "evacuating",
                        s.evacuating,
                        policy.share_cap(of.max_evacuating_percent, s.registered),
                    ),
                ]
                .map(|(what, figure, cap)| (format!("{} {what}", s.kind.plural()), figure, cap))
            })
            .collect()
    }

    /// The share figures recomputed from the active items and the registrations:
    /// (registered, blocked, evacuating) per kind.
    fn recomputed(store: &Store) -> [(u64, u64, u64); 2] {
        let now = store.now();
        let level = |kind| -> HashMap<String, u8> {
            store
                .list(kind, now)
                .unwrap()
                .into_iter()
                .map(|i| {
                    (
                        i.id,
                        1 + u8::from(i.action == Action::MarkBlockedAndEvacuateTasks),
                    )
                })
                .collect()
        };
        let (nodes, tms) = (level(Kind::Node), level(Kind::TaskManager));
        let registrations = store.registrations().unwrap();
        let registered_nodes: HashSet<&str> =
            registrations.iter().map(|(_, n)| n.as_str()).collect();
        let mut out = [(0, 0, 0); 2];
        for node in &registered_nodes {
            let l = nodes.get(*node).copied().unwrap_or(0);
            let n = &mut out[slot(Kind::Node)];
            *n = (n.0 + 1, n.1 + u64::from(l >= 1), n.2 + u64::from(l == 2));
        }
        for (tm, node) in &registrations {
            let own = tms.get(tm).copied().unwrap_or(0);
            let l = own.max(nodes.get(node).copied().unwrap_or(0));
            let t = &mut out[slot(Kind::TaskManager)];
            *t = (t.0 + 1, t.1 + u64::from(l >= 1), t.2 + u64::from(l == 2));
        }
        out
    }

    /// Waits until every due item is announced, and checks that the committer's share
    /// figures are then exactly the recomputed ones.
    async fn settle_and_compare(store: &Store) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let (_, standing) = store.guard_standing(store.now());
            let kept = standing.map(|s| (s.registered, s.blocked, s.evacuating));
            let fresh = recomputed(store);
            if kept == fresh {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the committer keeps {kept:?}, the state says {fresh:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    fn run(ops: Vec<Op>) {
        let dir = tempfile::tempdir().unwrap();
        let mut config = StoreConfig::new(dir.path().join("data"));
        config.fsync = false;
        config.new_policy = policy();
        let store = Store::open(&config).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let sweeper = tokio::spawn(blocklistd::sweeper::run(
                store.clone(),
                std::time::Duration::from_millis(1),
                blocklistd::sweeper::Reclaim {
                    idle: std::time::Duration::from_millis(50),
                    min_rate: 1000,
                },
                std::sync::Arc::default(),
            ));
            for op in ops {
                match op {
                    Op::Add {
                        kind,
                        ids,
                        evacuate,
                        timeout_ms,
                        merge,
                    } => {
                        let now = store.now();
                        let items = ids
                            .iter()
                            .map(|id| NewItem {
                                id: format!("i{id}"),
                                action: if evacuate {
                                    Action::MarkBlockedAndEvacuateTasks
                                } else {
                                    Action::MarkBlocked
                                },
                                end: timeout_ms.map_or(PERMANENT, |t| now + t),
                                cause: "c".into(),
                                allow_merge: merge,
                                source: "unknown".into(),
                                timeout: timeout_ms,
                                details: blocklistd::model::Details::new(),
                            })
                            .collect();
                        let policy = policy();
                        let before = figures(&policy, &store.guard_standing(now).1);
                        let (outcome, _) = store.add(kind, items, now).await.unwrap();
                        let after = figures(&policy, &store.guard_standing(store.now()).1);
                        if matches!(outcome, AddOutcome::Written { .. }) {
                            for ((what, was, _), (_, is, cap)) in before.iter().zip(&after) {
                                if let Some(cap) = cap {
                                    assert!(
                                        is <= cap || is <= was,
                                        "{what}: {was} before the add, {is} after, cap {cap}"
                                    );
                                }
                            }
                        }
                    }
                    Op::Remove(kind, id) => {
                        store.remove(kind, format!("i{id}")).await.unwrap();
                    }
                    Op::Register(tm, node) => {
                        store
                            .register(vec![(format!("i{tm}"), format!("i{node}"))])
                            .await
                            .unwrap();
                    }
                    Op::Unregister(tm) => {
                        store.unregister(format!("i{tm}")).await.unwrap();
                    }
                    Op::Wait(ms) => {
                        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                        settle_and_compare(&store).await;
                    }
                }
            }
            settle_and_compare(&store).await;
            sweeper.abort();
        });
        store.shutdown().unwrap();
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn no_admitted_add_breaks_a_cap(ops in prop::collection::vec(op(), 1..40)) {
            run(ops);
        }
    }
}

#[tokio::test]
async fn the_policy_status_shows_each_kind_against_its_guards() {
    let mut ws = Workspace::new();
    let d = ws.start(&[
        "--max-blocked-nodes",
        "3",
        "--node-evacuations-per-minute",
        "1",
        "--node-evacuation-burst",
        "2",
        "--max-block-duration-secs",
        "7200",
    ]);
    let url = d.url("/blocklist/nodes");
    assert_eq!(
        add(&d.client, &url, &timed("n1", EVACUATE)).await.status,
        StatusCode::CREATED
    );
    assert_eq!(
        add(&d.client, &url, &timed("n2", "MARK_BLOCKED"))
            .await
            .status,
        StatusCode::CREATED
    );
    let (status, body) = d.get("/policy/status").await;
    assert_eq!(status, StatusCode::OK);
    let share = |current: u64, percent: Option<u64>| json!({"current": current, "percent": percent, "cap": null, "headroom": null});
    let expected = json!({
        "taskManagers": {
            "items": 0, "maxBlocked": null, "headroom": null, "registered": 0,
            "blockedShare": share(0, Some(50)), "evacuatingShare": share(0, None),
            "evacuations": null,
        },
        "nodes": {
            "items": 2,
            "maxBlocked": 3,
            "headroom": 1,
            "registered": 0,
            "blockedShare": share(0, Some(50)),
            "evacuatingShare": share(0, Some(20)),
            "evacuations": {"perMinute": 1, "burst": 2, "available": 1},
        },
        "minRegistered": 10,
        "maxBlockDurationSecs": 7200,
        "permanentBlocksAllowed": true,
    });
    assert_eq!(body, expected);

    // The policy is stored: without flags, a restart after kill -9 keeps it (the bucket
    // starts full again: it lives in memory).
    d.kill9();
    let d = ws.start(&[]);
    let mut body = d.get("/policy/status").await.1;
    body["nodes"]["evacuations"]["available"] = json!(1);
    assert_eq!(body, expected);
}
