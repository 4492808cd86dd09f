//! The watcher against a real Flink 2.3 cluster (a `JobManager` and four task managers of
//! chosen ids in one JVM) and a real daemon: a task manager whose tasks keep failing is
//! blocked with its evidence and the healthy ones are not; a job's own exceptions and a
//! job failing everywhere block nothing; two sick task managers on one node block the
//! node; Flink's failure labels, a dry run and the watcher's own registrations; a
//! restarted watcher counts nothing twice; Flink stopped blocks nothing; its alerting
//! rules select a real watcher's series and fire nothing while it is healthy.

#[path = "../../../tests/common/mod.rs"]
mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

const IO: &str = "java.io.IOException";
const USER: &str = "blocklist.flinkharness.UserFunctionException";
const RUNTIME: &str = "java.lang.RuntimeException";

async fn blocked(daemon: &Daemon, kind: &str, id: &str) -> Option<Value> {
    let (status, body) = daemon.get(&format!("/blocklist/{kind}/{id}")).await;
    (status == StatusCode::OK).then_some(body)
}

async fn until_blocked(daemon: &Daemon, kind: &str, id: &str, watcher: &Watcher) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Some(item) = blocked(daemon, kind, id).await {
            return item;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{kind}/{id} was not blocked:\n{}",
            watcher.log_text()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// An operator's unblock (an admin token of the restart test's token file).
async fn lift(daemon: &Daemon, id: &str) {
    let lifted = daemon
        .client
        .delete(daemon.url(&format!(
            "/blocklist/taskmanagers/{id}?reason=replaced%20disk"
        )))
        .bearer_auth("ops-token-value")
        .send()
        .await
        .unwrap();
    assert_eq!(lifted.status(), StatusCode::OK);
}

/// Until the watcher counted `n` failures (of any outcome) of cluster `test`.
async fn until_seen(watcher: &Watcher, outcome: &str, n: f64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let series =
        format!("blocklist_flink_failures_total{{cluster=\"test\",outcome=\"{outcome}\"}}");
    loop {
        let seen = watcher.metric(&series).await;
        if seen >= n {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{series} stayed at {seen}, waiting for {n}:\n{}",
            watcher.log_text()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_task_manager_that_keeps_failing_is_blocked_and_nothing_else_is() {
    let Some(harness) = flink_harness("the watcher against Flink") else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().await;
    let mut ws = Workspace::new();
    let daemon = ws.start(&[]);
    let mut flink = Flink::start(
        &harness,
        &ws.tmp.path().join("flink"),
        &FlinkSpec::four(false),
    );
    // tm-2 and tm-4 share node n1: both sick, the node is.
    let (status, _) = daemon
        .call(
            reqwest::Method::PUT,
            "/taskmanagers",
            json!([{"id": "tm-2", "node": "n1"}, {"id": "tm-4", "node": "n1"},
                   {"id": "tm-1", "node": "n2"}, {"id": "tm-3", "node": "n3"}])
            .into(),
        )
        .await;
    assert!(status.is_success());
    let watcher = Watcher::start(ws.tmp.path(), &flink.url(), &daemon, &[]);

    // A job's own exception, three times on tm-3: its code's, never the machine's.
    let user = flink.submit("user-bug", 4, &["tm-3"], USER, 3);
    // A job failing on every task manager: its own bug, blamed on nobody. Five times on
    // each of four: 20 entries, more than the 16 Flink keeps.
    let everywhere = flink.submit("everywhere", 4, &["*"], RUNTIME, 5);
    // The machine: tm-2 fails twice.
    let disk = flink.submit("disk", 4, &["tm-2"], IO, 2);

    let tm2 = until_blocked(&daemon, "taskmanagers", "tm-2", &watcher).await;
    assert_eq!(tm2["source"], "flink/test", "{tm2}");
    assert_eq!(tm2["action"], "MARK_BLOCKED", "{tm2}");
    let cause = tm2["cause"].as_str().unwrap();
    assert!(
        cause.contains("2 task failures within 10m")
            && cause.contains(&disk)
            && cause.contains(IO)
            && cause.contains("injected failure on tm-2"),
        "{cause}"
    );
    let live = &tm2["liveReports"][0];
    assert_eq!(live["source"], "flink/test", "{tm2}");
    assert_eq!(live["details"]["job"], disk.as_str(), "{tm2}");
    let times: Vec<i64> = live["details"]["failures"]
        .as_str()
        .unwrap()
        .split(' ')
        .map(|t| t.parse().unwrap())
        .collect();
    assert_eq!(times.len(), 2, "{tm2}");
    // The block lasts an hour from the newest failure.
    assert_eq!(
        tm2["endTimestamp"].as_i64().unwrap(),
        times.iter().max().unwrap() + 3_600_000
    );

    // The user's exceptions and the job failing everywhere were seen and blamed on nobody.
    until_seen(&watcher, "user-class", 3.0).await;
    let series = "blocklist_flink_jobs_failing_everywhere_total{cluster=\"test\"}";
    eventually(
        "the job failing everywhere is logged as the job's",
        || async { watcher.metric(series).await >= 1.0 },
    )
    .await;
    assert!(
        watcher.log_text().contains(&everywhere),
        "the job failing everywhere is named: {}",
        watcher.log_text()
    );
    // A watcher that starts once the job's 20 failures are in finds its history full (16
    // entries) of entries it never saw: older failures were lost, and it says so.
    let url = format!("{}/jobs/{everywhere}/exceptions", flink.url());
    eventually("the job failing everywhere fills its history", || async {
        let history: Value = reqwest::get(&url).await.unwrap().json().await.unwrap();
        history["exceptionHistory"]["entries"]
            .as_array()
            .is_some_and(|entries| entries.len() >= 16)
    })
    .await;
    let late = Watcher::start(
        ws.tmp.path(),
        &flink.url(),
        &daemon,
        &["--name", "late", "--dry-run"],
    );
    let series = "blocklist_flink_history_truncated_total{cluster=\"test\"}";
    eventually("the history cut short is counted", || async {
        late.metric(series).await >= 1.0
    })
    .await;
    assert!(late.log_text().contains("cut short"), "{}", late.log_text());
    drop(late);
    for healthy in ["tm-1", "tm-3"] {
        assert!(
            blocked(&daemon, "taskmanagers", healthy).await.is_none(),
            "{healthy}: {}",
            watcher.log_text()
        );
    }
    assert!(
        blocked(&daemon, "nodes", "n1").await.is_none(),
        "one sick task manager on n1"
    );
    let _ = user;

    // tm-4 fails twice too: two sick task managers on n1, and the node is blocked.
    flink.submit("disk-2", 4, &["tm-4"], IO, 2);
    until_blocked(&daemon, "taskmanagers", "tm-4", &watcher).await;
    let n1 = until_blocked(&daemon, "nodes", "n1", &watcher).await;
    assert_eq!(n1["source"], "flink/test", "{n1}");
    let cause = n1["cause"].as_str().unwrap();
    assert!(cause.contains("tm-2") && cause.contains("tm-4"), "{cause}");
    for healthy in ["tm-1", "tm-3"] {
        assert!(
            blocked(&daemon, "taskmanagers", healthy).await.is_none(),
            "{healthy}"
        );
    }
    for node in ["n2", "n3"] {
        assert!(blocked(&daemon, "nodes", node).await.is_none(), "{node}");
    }
    let reports = "blocklist_flink_reports_total{kind=\"taskmanagers\",outcome=\"blocked\"}";
    assert_eq!(watcher.metric(reports).await, 2.0);

    // The alerting rules of its group (charts/blocklistd/files/alerts.yaml) select its series, and none
    // fires while it is healthy.
    let test = "the_task_manager_that_keeps_failing_is_blocked_and_nothing_else_is";
    if have_promtool(test) {
        let scrape = watcher.scrape().await;
        feed_through_the_rules(&scrape, "blocklist-flink", "blocklist-flink", &[], test);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn with_an_enricher_only_the_failures_it_labels_system_count() {
    let Some(harness) = flink_harness("the watcher and Flink's failure labels") else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().await;
    let mut ws = Workspace::new();
    let daemon = ws.start(&[]);
    let mut flink = Flink::start(
        &harness,
        &ws.tmp.path().join("flink"),
        &FlinkSpec::four(true),
    );
    let watcher = Watcher::start(
        ws.tmp.path(),
        &flink.url(),
        &daemon,
        &["--require-label", "type=System", "--register-task-managers"],
    );
    // Beside it, a dry run under another name: it says what it would block, and blocks
    // nothing.
    let dry = Watcher::start(
        ws.tmp.path(),
        &flink.url(),
        &daemon,
        &["--name", "flink-dry", "--dry-run"],
    );
    // A platform's class, but the enricher says it is the job's.
    flink.submit("labelled-user", 4, &["tm-1"], RUNTIME, 3);
    // The enricher says it is the system's.
    flink.submit("labelled-system", 4, &["tm-3"], IO, 2);
    // No bridge here: the watcher registers Flink's task managers on the hosts Flink
    // reports for them.
    eventually("the task managers are registered on their host", || async {
        let (_, registered) = daemon.get("/taskmanagers").await;
        registered
            == json!([{"id": "tm-1", "node": "127.0.0.1"}, {"id": "tm-2", "node": "127.0.0.1"},
                      {"id": "tm-3", "node": "127.0.0.1"}, {"id": "tm-4", "node": "127.0.0.1"}])
    })
    .await;
    let tm3 = until_blocked(&daemon, "taskmanagers", "tm-3", &watcher).await;
    until_seen(&watcher, "label", 3.0).await;
    assert!(blocked(&daemon, "taskmanagers", "tm-1").await.is_none());

    let series = "blocklist_flink_reports_total{kind=\"taskmanagers\",outcome=\"dry-run\"}";
    eventually("the dry run would have blocked tm-3", || async {
        dry.metric(series).await >= 1.0
    })
    .await;
    assert!(
        dry.log_text().contains("dry run: would block"),
        "{}",
        dry.log_text()
    );
    let (_, item) = daemon.get("/blocklist/taskmanagers/tm-3").await;
    assert_eq!(
        item["reportCount"], tm3["reportCount"],
        "the dry run wrote nothing: {item}"
    );
    assert!(
        !item.to_string().contains("flink-dry"),
        "no report of the dry run's: {item}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_watcher_counts_nothing_twice_and_flink_stopped_blocks_nothing() {
    let Some(harness) = flink_harness("the watcher restarted, and Flink stopped") else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().await;
    let mut ws = Workspace::new();
    // The watcher's token is a detector's, named as the watcher: it reports under
    // flink/<cluster> only.
    let tokens = ws.tmp.path().join("tokens");
    std::fs::write(
        &tokens,
        "flink-token-value name=flink role=detector\nops-token-value name=ops role=admin\n",
    )
    .unwrap();
    let daemon = ws.start(&["--token-file", tokens.to_str().unwrap()]);
    let token = ws.tmp.path().join("flink.token");
    std::fs::write(&token, "flink-token-value\n").unwrap();
    let token_flag = ["--token-file", token.to_str().unwrap()];
    let flink_dir = ws.tmp.path().join("flink");
    let spec = FlinkSpec::four(false);
    let mut flink = Flink::start(&harness, &flink_dir, &spec);
    let watcher = Watcher::start(ws.tmp.path(), &flink.url(), &daemon, &token_flag);
    // tm-1 fails once: not enough. tm-2 twice: blocked.
    flink.submit("once", 4, &["tm-1"], IO, 1);
    flink.submit("twice", 4, &["tm-2"], IO, 2);
    let tm2 = until_blocked(&daemon, "taskmanagers", "tm-2", &watcher).await;
    until_seen(&watcher, "counted", 3.0).await;
    assert!(blocked(&daemon, "taskmanagers", "tm-1").await.is_none());

    // kill -9, and again: the same three failures, counted once each. Given a dead daemon
    // first, it moves on to the one that answers.
    watcher.kill9();
    let daemons = format!("http://127.0.0.1:{},{}", free_port(), daemon.url(""));
    let watcher = Watcher::start(
        ws.tmp.path(),
        &flink.url(),
        &daemon,
        &[&token_flag[..], &["--daemon", &daemons]].concat(),
    );
    until_seen(&watcher, "counted", 3.0).await;
    // A few more polls: nothing new is asked, nothing is blocked twice.
    eventually("the restarted watcher finds tm-2 held already", || async {
        watcher
            .metric("blocklist_flink_reports_total{kind=\"taskmanagers\",outcome=\"held\"}")
            .await
            >= 1.0
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(
        watcher
            .metric("blocklist_flink_failures_total{cluster=\"test\",outcome=\"counted\"}")
            .await,
        3.0,
        "{}",
        watcher.log_text()
    );
    assert!(
        blocked(&daemon, "taskmanagers", "tm-1").await.is_none(),
        "tm-1's one failure counted once"
    );
    let again = blocked(&daemon, "taskmanagers", "tm-2").await.unwrap();
    assert_eq!(
        again["reportCount"], tm2["reportCount"],
        "no new report: {again}"
    );
    assert_eq!(
        again["revision"], tm2["revision"],
        "nothing written: {again}"
    );

    // An operator lifts tm-2's block (its disk replaced, say): the failures that caused it
    // do not block it again, but new ones do.
    lift(&daemon, "tm-2").await;
    let lifted_at = now_ms();
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert!(
        blocked(&daemon, "taskmanagers", "tm-2").await.is_none(),
        "the old failures do not undo the unblock: {}",
        watcher.log_text()
    );
    flink.submit("again", 4, &["tm-2"], IO, 2);
    let tm2 = until_blocked(&daemon, "taskmanagers", "tm-2", &watcher).await;
    let times: Vec<i64> = tm2["liveReports"][0]["details"]["failures"]
        .as_str()
        .unwrap()
        .split(' ')
        .map(|t| t.parse().unwrap())
        .collect();
    assert_eq!(times.len(), 2, "only the failures since the unblock: {tm2}");
    assert!(
        times.iter().all(|t| *t > lifted_at),
        "{times:?} after {lifted_at}"
    );

    // Lifted again, and the watcher restarted: the unblock still stands.
    lift(&daemon, "tm-2").await;
    watcher.kill9();
    let watcher = Watcher::start(ws.tmp.path(), &flink.url(), &daemon, &token_flag);
    eventually(
        "the restarted watcher finds tm-2's failures paid for",
        || async {
            watcher
                .metric("blocklist_flink_reports_total{kind=\"taskmanagers\",outcome=\"paid\"}")
                .await
                >= 1.0
        },
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert!(
        blocked(&daemon, "taskmanagers", "tm-2").await.is_none(),
        "the operator's unblock stands: {}",
        watcher.log_text()
    );

    // Flink gone: the watcher is not ready, and nothing changes.
    let port = flink.port;
    flink.kill9();
    eventually("the watcher is not ready without Flink", || async {
        !watcher.ready().await
    })
    .await;
    assert_eq!(
        watcher.metric("blocklist_flink_up{cluster=\"test\"}").await,
        0.0
    );
    let (_, all) = daemon.get("/blocklist/taskmanagers").await;
    assert_eq!(all, json!([]), "nothing blocked by Flink's absence");

    // Flink back on its port: the watcher resumes.
    let mut flink = Flink::start(&harness, &flink_dir, &FlinkSpec { port, ..spec });
    eventually("the watcher is ready again", || async {
        watcher.ready().await
    })
    .await;
    flink.submit("after", 4, &["tm-3"], IO, 2);
    until_blocked(&daemon, "taskmanagers", "tm-3", &watcher).await;
    assert!(blocked(&daemon, "taskmanagers", "tm-1").await.is_none());
}
