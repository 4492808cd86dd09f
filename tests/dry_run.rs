//! `?dryRun=true` on every write: the same status and body as the real request, `Dry-Run:
//! true`, and nothing written — the export, the revision and the change feed are as they
//! were.

mod common;

use std::collections::HashSet;

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// A response as the comparison needs it.
#[derive(Debug)]
struct Answer {
    status: StatusCode,
    body: String,
    dry_run_header: Option<String>,
    revision_header: Option<String>,
}

async fn send(d: &Daemon, method: &Method, path: &str, body: Option<&Value>) -> Answer {
    let mut request = d.client.request(method.clone(), d.url(path));
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.expect("request");
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let (dry_run_header, revision_header) = (header("dry-run"), header("x-blocklist-revision"));
    Answer {
        status: response.status(),
        dry_run_header,
        revision_header,
        body: response.text().await.unwrap(),
    }
}

/// Everything the daemon holds, as `GET /blocklist/export` writes it, and its revision.
async fn snapshot(d: &Daemon) -> (String, u64) {
    let export = d.export().await;
    let revision = d.listing().await["revision"].as_u64().unwrap();
    (export, revision)
}

fn with_dry_run(path: &str, value: &str) -> String {
    let separator = if path.contains('?') { '&' } else { '?' };
    format!("{path}{separator}dryRun={value}")
}

#[tokio::test]
async fn a_dry_run_answers_as_the_write_would_and_writes_nothing() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    // Ends far off and fixed, so that the dry run's body and the real one's are the same.
    let end = now_ms() + 3_600_000;
    let later = end + 60_000;
    let node = |id: &str, action: &str, cause: &str, end: i64| json!({"id": id, "action": action, "cause": cause, "endTimestamp": end});
    let seed = json!([node("n-old", "MARK_BLOCKED", "seed", end)]);
    assert_eq!(
        d.post("/blocklist/nodes", seed).await.0,
        StatusCode::CREATED
    );
    let seed = json!([node("tm-old", "MARK_BLOCKED", "seed", end)]);
    assert_eq!(
        d.post("/blocklist/taskmanagers", seed).await.0,
        StatusCode::CREATED
    );
    let seed = json!([{"id": "tm1", "node": "n1"}]);
    let seeded = d.call(Method::PUT, "/taskmanagers", Some(seed)).await;
    assert_eq!(seeded.0, StatusCode::CREATED, "{}", seeded.1);
    let seed = json!([node("n-held", "MARK_BLOCKED", "seed", end)]);
    assert_eq!(
        d.post("/blocklist/nodes", seed).await.0,
        StatusCode::CREATED
    );
    let seed = json!({"comment": "seed", "endTimestamp": end});
    let seeded = d
        .call(Method::PUT, "/allowlist/nodes/seeded", Some(seed))
        .await;
    assert_eq!(seeded.0, StatusCode::CREATED, "{}", seeded.1);
    let mut policy = d.get("/policy").await.1;
    policy["maxBlockDurationSecs"] = json!(7200);
    let (_, first) = snapshot(&d).await;
    let mut watch = Watch::open(&d, Some(first), None).await.unwrap();

    let evacuate = "MARK_BLOCKED_AND_EVACUATE_TASKS";
    let cases: Vec<(Method, &str, Option<Value>, StatusCode)> = vec![
        (
            Method::POST,
            "/blocklist/nodes",
            Some(json!([node("n-new", "MARK_BLOCKED", "c", end)])),
            StatusCode::CREATED,
        ),
        (
            Method::POST,
            "/blocklist/nodes",
            Some(
                json!([{"id": "n-old", "action": evacuate, "cause": "more", "endTimestamp": later, "allowMerge": true}]),
            ),
            StatusCode::ACCEPTED,
        ),
        (
            Method::POST,
            "/blocklist/nodes",
            Some(json!([node("n-old", "MARK_BLOCKED", "again", end)])),
            StatusCode::CONFLICT,
        ),
        (
            Method::POST,
            "/blocklist/nodes",
            Some(json!([{"id": "bad"}])),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "/blocklist/taskmanagers",
            Some(json!({"items": [node("tm-new", evacuate, "c", end)]})),
            StatusCode::CREATED,
        ),
        (
            Method::DELETE,
            "/blocklist/nodes/n-old",
            None,
            StatusCode::OK,
        ),
        (
            Method::DELETE,
            "/blocklist/nodes/absent",
            None,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::DELETE,
            "/blocklist/taskmanagers/tm-old",
            None,
            StatusCode::OK,
        ),
        (
            Method::PUT,
            "/taskmanagers/tm2",
            Some(json!({"node": "n2"})),
            StatusCode::CREATED,
        ),
        (
            Method::PUT,
            "/taskmanagers/tm1",
            Some(json!({"node": "n9"})),
            StatusCode::OK,
        ),
        (
            Method::PUT,
            "/taskmanagers",
            Some(
                json!([{"id": "tm3", "node": "n3"}, {"id": "tm1", "node": "n1"}, {"id": "tm2", "node": "n2"}]),
            ),
            StatusCode::CREATED,
        ),
        (Method::DELETE, "/taskmanagers/tm1", None, StatusCode::OK),
        (
            Method::DELETE,
            "/taskmanagers/nobody",
            None,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::POST,
            "/blocklist/nodes?force=true",
            Some(json!([node("n-forced", "MARK_BLOCKED", "c", end)])),
            StatusCode::CREATED,
        ),
        (
            Method::DELETE,
            "/blocklist/nodes/n-held?holdOff=30m",
            None,
            StatusCode::OK,
        ),
        (
            Method::PUT,
            "/allowlist/nodes/n-new",
            Some(json!({"comment": "spare", "endTimestamp": end})),
            StatusCode::CREATED,
        ),
        (
            Method::PUT,
            "/allowlist/nodes/seeded",
            Some(json!({"comment": "no end"})),
            StatusCode::OK,
        ),
        (
            Method::PUT,
            "/allowlist/taskmanagers/tm-",
            Some(json!({"comment": "every tm-", "prefix": true})),
            StatusCode::CREATED,
        ),
        (
            Method::PUT,
            "/allowlist/nodes/x",
            Some(json!({"comment": ""})),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::DELETE,
            "/allowlist/nodes/seeded",
            None,
            StatusCode::OK,
        ),
        (
            Method::DELETE,
            "/allowlist/nodes/absent",
            None,
            StatusCode::NOT_FOUND,
        ),
        (Method::PUT, "/policy", Some(policy.clone()), StatusCode::OK),
        (
            Method::PUT,
            "/policy",
            Some(json!({"nodes": {}})),
            StatusCode::BAD_REQUEST,
        ),
    ];
    let mut writes = 0;
    for (method, path, body, want) in &cases {
        let what = format!("{method} {path}");
        let (export, revision) = snapshot(&d).await;
        let dry = send(&d, method, &with_dry_run(path, "true"), body.as_ref()).await;
        assert_eq!(dry.status, *want, "{what} (dry run): {}", dry.body);
        assert_eq!(dry.dry_run_header.as_deref(), Some("true"), "{what}");
        assert_eq!(
            dry.revision_header, None,
            "{what}: a dry run has no revision"
        );
        assert_eq!(
            snapshot(&d).await,
            (export, revision),
            "{what}: the dry run wrote"
        );

        let real = send(&d, method, &with_dry_run(path, "false"), body.as_ref()).await;
        assert_eq!(
            (real.status, timeless(&real.body)),
            (dry.status, timeless(&dry.body)),
            "{what}"
        );
        assert_eq!(real.dry_run_header, None, "{what}");
        if real.status.is_success() {
            assert!(real.revision_header.is_some(), "{what}");
            writes += 1;
        }
    }
    assert!(writes >= 14, "{writes} of the cases wrote");

    // The feed carries exactly the real writes: what a watcher open all along received
    // (live) is what the log holds, and each revision is one of theirs.
    let (_, last) = snapshot(&d).await;
    let live = watch.take(usize::try_from(last - first).unwrap()).await;
    assert_consecutive(&live, first);
    let mut replay = Watch::open(&d, Some(first), None).await.unwrap();
    let logged = replay.take(live.len()).await;
    assert_eq!(live, logged);
    let names: HashSet<&str> = live.iter().map(|e| e.event.as_str()).collect();
    for name in [
        "merged",
        "unregistered",
        "allowlisted",
        "unallowlisted",
        "policy",
    ] {
        assert!(names.contains(name), "{name}: {names:?}");
    }
}

/// A body without the times that the commit stamps (an allowlist entry's `addedAt`, a
/// hold-off's end): a dry run is decided a moment before the real write.
fn timeless(body: &str) -> Value {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(map) => {
                map.remove("addedAt");
                // A merge reports at its request's time, which differs between the two.
                map.remove("lastReportTimestamp");
                if let Some(Value::Object(hold_off)) = map.get_mut("holdOff") {
                    hold_off.remove("endTimestamp");
                }
                map.values_mut().for_each(strip);
            }
            Value::Array(values) => values.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut value = serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.into()));
    strip(&mut value);
    value
}

#[tokio::test]
async fn dry_runs_among_concurrent_writes_change_nothing_of_their_own() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let (_, before) = snapshot(&d).await;
    let n = 24;
    let mut tasks = Vec::new();
    for i in 0..n {
        let client = d.client.clone();
        let (real, dry) = (
            d.url("/blocklist/taskmanagers"),
            d.url("/blocklist/taskmanagers?dryRun=true"),
        );
        tasks.push(tokio::spawn(async move {
            let element = |id: String| json!([item(&id, "MARK_BLOCKED", "c")]);
            let (a, b) = tokio::join!(
                client.post(real).json(&element(format!("real-{i}"))).send(),
                client.post(dry).json(&element(format!("dry-{i}"))).send(),
            );
            (a.unwrap().status(), b.unwrap().status())
        }));
    }
    for task in tasks {
        assert_eq!(
            task.await.unwrap(),
            (StatusCode::CREATED, StatusCode::CREATED)
        );
    }
    let listed = d.get("/blocklist/taskmanagers").await.1;
    let listed: HashSet<String> = ids(&listed).into_iter().collect();
    let want: HashSet<String> = (0..n).map(|i| format!("real-{i}")).collect();
    assert_eq!(listed, want);
    let (_, after) = snapshot(&d).await;
    assert_eq!(
        after - before,
        n,
        "one revision per real add, none per dry run"
    );
}

#[tokio::test]
async fn a_malformed_dry_run_flag_is_refused_and_changes_nothing() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let body = json!([item("x", "MARK_BLOCKED", "c")]);
    for query in ["dryRun=maybe", "dryRun=1", "dryRun=true&dryRun=false"] {
        let (status, answer) = d
            .post(&format!("/blocklist/nodes?{query}"), body.clone())
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {answer}");
        assert!(
            answer["errors"][0]
                .as_str()
                .unwrap()
                .starts_with("dryRun: "),
            "{answer}"
        );
    }
    // A misspelt flag is no flag at all: refused, never taken for a real write.
    for (method, path) in [
        (Method::POST, "/blocklist/nodes?dryrun=true"),
        (Method::DELETE, "/blocklist/nodes/x?dry_run=true"),
        (Method::PUT, "/taskmanagers/t?force=true"),
    ] {
        let body = (method == Method::POST).then(|| body.clone());
        let body = body.or_else(|| (method == Method::PUT).then(|| json!({"node": "n"})));
        let (status, answer) = d.call(method.clone(), path, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {path}: {answer}");
        assert!(
            answer["errors"][0]
                .as_str()
                .unwrap()
                .starts_with("query: this request takes no parameter"),
            "{answer}"
        );
    }
    assert_eq!(d.listing().await["revision"], 0);
}
