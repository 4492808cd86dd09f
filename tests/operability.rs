//! Operability: metrics, probes, clean shutdown, `check`, export/import.

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// The value of a metric line `name{labels} value` in a Prometheus exposition.
#[tokio::test]
async fn metrics_follow_adds_merges_conflicts_and_expiry() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let mut short = item("n-short", "MARK_BLOCKED", "c");
    short["timeout"] = json!(200);
    d.post(
        "/blocklist/nodes",
        json!([short, item("n1", "MARK_BLOCKED_AND_EVACUATE_TASKS", "c")]),
    )
    .await;
    d.post(
        "/blocklist/taskmanagers",
        json!([item("t1", "MARK_BLOCKED", "c")]),
    )
    .await;
    let mut merge = item("t1", "MARK_BLOCKED", "d");
    merge["allowMerge"] = json!(true);
    d.post("/blocklist/taskmanagers", json!([merge])).await;
    assert_eq!(
        d.post(
            "/blocklist/taskmanagers",
            json!([item("t1", "MARK_BLOCKED", "e")])
        )
        .await
        .0,
        StatusCode::CONFLICT
    );
    assert_eq!(
        d.post("/blocklist/nodes", json!([])).await.0,
        StatusCode::BAD_REQUEST
    );

    let text = d.scrape().await;
    assert_eq!(
        metric(&text, r#"blocklist_changes_total{event="added"}"#),
        3.0,
        "{text}"
    );
    assert_eq!(
        metric(&text, r#"blocklist_changes_total{event="merged"}"#),
        1.0
    );
    assert_eq!(metric(&text, "blocklist_conflicts_total"), 1.0);
    assert_eq!(
        metric(&text, r#"blocklist_rejected_requests_total{status="409"}"#),
        1.0
    );
    assert_eq!(
        metric(&text, r#"blocklist_rejected_requests_total{status="400"}"#),
        1.0
    );
    assert_eq!(
        metric(
            &text,
            r#"blocklist_items{kind="taskmanager",action="MARK_BLOCKED"}"#
        ),
        1.0
    );
    assert_eq!(
        metric(
            &text,
            r#"blocklist_items{kind="node",action="MARK_BLOCKED_AND_EVACUATE_TASKS"}"#
        ),
        1.0
    );
    // Four changes so far, and the short item's expiry if the sweeper got to it already.
    assert_eq!(
        metric(&text, "blocklist_revision"),
        4.0 + metric(&text, r#"blocklist_changes_total{event="expired"}"#)
    );
    assert!(metric(&text, "blocklist_database_size_bytes") > 0.0);
    assert!(text.contains(r#"blocklist_http_request_duration_seconds_count{method="POST",route="/blocklist/taskmanagers",status="201"}"#), "{text}");
    assert!(metric(&text, "blocklist_commit_batch_requests_count") >= 4.0);

    eventually("the short item to be swept", || async {
        metric(
            &d.scrape().await,
            r#"blocklist_changes_total{event="expired"}"#,
        ) == 1.0
    })
    .await;
    let text = d.scrape().await;
    assert_eq!(metric(&text, "blocklist_sweeper_lag_seconds_count"), 1.0);
    assert_eq!(
        metric(
            &text,
            r#"blocklist_items{kind="node",action="MARK_BLOCKED"}"#
        ),
        0.0
    );
}

/// The `Content-Type` of the Prometheus text exposition format 0.0.4.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// The `Content-Type` of the `OpenMetrics` text format 1.0.0.
const OPENMETRICS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Something in every kind of metric: two adds, a conflict, a rejected request, requests
/// on two routes.
async fn some_traffic(d: &Daemon) {
    d.post(
        "/blocklist/taskmanagers",
        json!([
            item("t1", "MARK_BLOCKED", "c"),
            item("t2", "MARK_BLOCKED", "c")
        ]),
    )
    .await;
    d.post(
        "/blocklist/taskmanagers",
        json!([item("t1", "MARK_BLOCKED", "again")]),
    )
    .await;
    d.post("/blocklist/nodes", json!([])).await;
    d.get("/blocklist").await;
}

/// The metric families of a text exposition, as its `# TYPE` lines declare them, each with
/// the names of the samples that follow it (up to the next comment line).
fn families(text: &str) -> Vec<(String, String, Vec<String>)> {
    let mut families: Vec<(String, String, Vec<String>)> = Vec::new();
    let mut open = false;
    for line in text.lines() {
        if let Some(declared) = line.strip_prefix("# TYPE ") {
            let (name, kind) = declared.split_once(' ').expect("# TYPE name type");
            families.push((name.to_owned(), kind.to_owned(), Vec::new()));
            open = true;
        } else if line.starts_with('#') {
            open = false;
        } else if let (true, Some(family)) = (open, families.last_mut()) {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            family.2.push(line[..end].to_owned());
        }
    }
    families
}

/// Asked for the Prometheus text format 0.0.4 (as `promtool` and many scrapers ask),
/// `/metrics` answers in it: a counter's `# HELP` and `# TYPE` name its `_total` series, and
/// nothing of `OpenMetrics` (`# EOF`, `# UNIT`, `_created`, exemplars) is there.
#[tokio::test]
async fn metrics_answer_the_prometheus_text_format_when_asked() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    some_traffic(&d).await;
    let (content_type, text) = d.scrape_accepting(Some("text/plain;version=0.0.4")).await;
    assert_eq!(content_type, PROMETHEUS_TEXT, "{text}");

    let families = families(&text);
    let counters: Vec<_> = families.iter().filter(|f| f.1 == "counter").collect();
    let names: Vec<&str> = counters.iter().map(|f| f.0.as_str()).collect();
    for expected in [
        "blocklist_changes_total",
        "blocklist_conflicts_total",
        "blocklist_idempotent_replays_total",
        "blocklist_rejected_requests_total",
        "blocklist_reclaimed_entries_total",
    ] {
        assert!(
            names.contains(&expected),
            "no counter {expected}: {names:?}\n{text}"
        );
    }
    for (name, _, samples) in &counters {
        assert!(
            name.ends_with("_total"),
            "`# TYPE {name} counter` does not name the _total series\n{text}"
        );
        let help = format!("# HELP {name} ");
        assert!(
            text.lines().any(|l| l.starts_with(&help)),
            "no `{help}…` line\n{text}"
        );
        assert!(
            samples.iter().all(|s| s == name),
            "samples {samples:?} under counter {name}\n{text}"
        );
    }
    for openmetrics_only in ["# EOF", "# UNIT", "_created", " # {"] {
        assert!(
            !text.contains(openmetrics_only),
            "{openmetrics_only:?} in the Prometheus text format\n{text}"
        );
    }
    // The same samples as ever.
    assert_eq!(
        metric(&text, r#"blocklist_changes_total{event="added"}"#),
        2.0,
        "{text}"
    );
    assert_eq!(metric(&text, "blocklist_conflicts_total"), 1.0);
    assert_eq!(
        metric(&text, r#"blocklist_rejected_requests_total{status="400"}"#),
        1.0
    );
}

/// Prometheus' own linter, `promtool check metrics`, has nothing to say about the
/// Prometheus text format `/metrics` answers: no parse error and no lint warning.
#[tokio::test]
async fn promtool_finds_nothing_to_lint_in_the_prometheus_text_format() {
    let test = "promtool_finds_nothing_to_lint_in_the_prometheus_text_format";
    if !available(
        "promtool is missing (Debian package: prometheus)",
        runs("promtool", "--version"),
        test,
    ) {
        return;
    }
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    some_traffic(&d).await;
    let (_, text) = d.scrape_accepting(Some("text/plain;version=0.0.4")).await;

    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start promtool");
    promtool
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(text.as_bytes())
        .expect("feed promtool");
    let out = promtool.wait_with_output().expect("promtool ends");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.is_empty(),
        "promtool check metrics: {} and\n{said}\non this text:\n{text}",
        out.status
    );
}

/// A scraper that prefers `OpenMetrics` gets it, Prometheus' own scrapers included (their
/// default `Accept` headers, 3.x and 2.x): counters typed under their family name, and the
/// text ends with `# EOF`.
#[tokio::test]
async fn metrics_answer_openmetrics_to_a_scraper_that_prefers_it() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    some_traffic(&d).await;
    for accept in [
        "application/openmetrics-text",
        "application/openmetrics-text; version=1.0.0",
        "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,\
         application/openmetrics-text;version=0.0.1;q=0.4,\
         text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,\
         text/plain;version=0.0.4;q=0.2,*/*;q=0.1",
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,\
         text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
        "text/plain;version=0.0.4;q=0.5, application/openmetrics-text",
    ] {
        let (content_type, text) = d.scrape_accepting(Some(accept)).await;
        assert_eq!(content_type, OPENMETRICS_TEXT, "Accept: {accept}\n{text}");
        assert!(text.ends_with("\n# EOF\n"), "Accept: {accept}\n{text}");
        assert!(
            text.lines().any(|l| l == "# TYPE blocklist_changes counter"),
            "Accept: {accept}\n{text}"
        );
        assert_eq!(
            metric(&text, r#"blocklist_changes_total{event="added"}"#),
            2.0,
            "{text}"
        );
    }
}

/// Without a preference for `OpenMetrics` — no `Accept`, `*/*`, plain text, a type `/metrics`
/// does not serve, or `OpenMetrics` ranked below the text format — the answer is the
/// Prometheus text format; and the answer says that it varies with `Accept`.
#[tokio::test]
async fn metrics_answer_the_prometheus_text_format_without_a_preference_for_openmetrics() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    for accept in [
        None,
        Some("*/*"),
        Some("text/plain"),
        Some("text/plain; charset=utf-8"),
        Some("application/json"),
        Some("application/openmetrics-text;q=0.3, text/plain;version=0.0.4;q=0.8"),
        Some("application/openmetrics-text;q=0, */*"),
        Some("application/openmetrics-text;version=2.0.0, */*;q=0.1"),
    ] {
        let (content_type, text) = d.scrape_accepting(accept).await;
        assert_eq!(content_type, PROMETHEUS_TEXT, "Accept: {accept:?}\n{text}");
        assert!(!text.contains("# EOF"), "Accept: {accept:?}\n{text}");
    }
    let resp = d.client.get(d.url("/metrics")).send().await.unwrap();
    assert_eq!(resp.headers()["vary"], "accept");
}

#[tokio::test]
async fn probes_answer() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    assert_eq!(
        d.get("/healthz").await,
        (StatusCode::OK, json!({"status": "ok"}))
    );
    let (status, body) = d.get("/readyz").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "ready");
    assert_eq!(body["store"], "open");
    assert_eq!(body["sweeper"], "running");
    // Where the daemon stands in etcd, on etcd only.
    let etcd = if on_etcd() {
        json!("writer")
    } else {
        Value::Null
    };
    assert_eq!(
        body.get("etcd").cloned().unwrap_or(Value::Null),
        etcd,
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_completes_requests_in_flight_and_exits_0() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let client = reqwest::Client::new();
    let url = d.url("/blocklist/taskmanagers");
    let requests: Vec<_> = (0..50)
        .map(|i| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                let body = json!([item(&format!("tm-{i}"), "MARK_BLOCKED", "c")]);
                client
                    .post(&url)
                    .json(&body)
                    .send()
                    .await
                    .map(|r| r.status())
            })
        })
        .collect();
    // Wait until the daemon has taken some of them in, then ask it to stop.
    eventually("some requests to land", || async {
        d.metric(r#"blocklist_changes_total{event="added"}"#).await > 0.0
    })
    .await;
    let status = d.terminate();
    assert_eq!(status.code(), Some(0));
    let (mut acknowledged, mut unanswered) = (Vec::new(), Vec::new());
    for (i, r) in requests.into_iter().enumerate() {
        // An error means the request was not yet accepted when the listener closed.
        match r.await.unwrap() {
            Ok(status) => {
                assert_eq!(
                    status,
                    StatusCode::CREATED,
                    "a request in flight was answered, and well"
                );
                acknowledged.push(format!("tm-{i}"));
            }
            Err(_) => unanswered.push(format!("tm-{i}")),
        }
    }
    assert!(!acknowledged.is_empty());
    let d = ws.start(&[]);
    let present = ids(&d.get("/blocklist/taskmanagers").await.1);
    for id in &acknowledged {
        assert!(
            present.contains(id),
            "{id} was acknowledged before shutdown but is gone"
        );
    }
    // A graceful stop answers every request it took in: one without an answer was never
    // applied.
    for id in &unanswered {
        assert!(
            !present.contains(id),
            "{id} was applied but its client got no answer"
        );
    }
}

#[tokio::test]
async fn check_finds_nothing_wrong_in_a_sound_store_and_names_a_broken_invariant() {
    if skip_on_etcd("an index broken in the data dir's sled database") {
        return;
    }
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let mut timed = item("n1", "MARK_BLOCKED", "c");
    timed["timeout"] = json!(3_600_000);
    d.post("/blocklist/nodes", json!([timed])).await;
    d.kill9();
    let dir = ws.data_dir();
    let out = blocklistd(&["check".as_ref(), "--data-dir".as_ref(), dir.as_os_str()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("ok: every invariant holds"), "{stdout}");
    // The usage report names the tree that holds the item, and the file it is in.
    assert!(stdout.contains("tree items: 1 entry"), "{stdout}");
    assert!(stdout.contains("tree expiry: 1 entry"), "{stdout}");
    assert!(stdout.contains("on disk: "), "{stdout}");
    // The flag may come before the subcommand's name too (a subcommand must not then work
    // on ./blocklistd-data instead).
    let before = blocklistd(&["--data-dir".as_ref(), dir.as_os_str(), "check".as_ref()]);
    let before_out = String::from_utf8_lossy(&before.stdout);
    assert!(before.status.success(), "{before_out}");
    assert!(before_out.contains("tree items: 1 entry"), "{before_out}");

    // Break the index behind the daemon's back: remove the item's expiry entry.
    {
        let db = common::open_sled(&dir);
        let expiry = db.open_tree("expiry").unwrap();
        let key = expiry.first().unwrap().unwrap().0;
        expiry.remove(key).unwrap();
        db.flush().unwrap();
    }
    wait_until_unlocked(&dir);
    let out = blocklistd(&["check".as_ref(), "--data-dir".as_ref(), dir.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("problem: expiry: no entry for node \"n1\""),
        "{stdout}"
    );

    let missing = ws.tmp.path().join("nothing-here");
    let out = blocklistd(&["check".as_ref(), "--data-dir".as_ref(), missing.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!missing.exists(), "check never creates a database");
}

#[tokio::test]
async fn export_then_import_reproduces_a_100k_item_store() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    for kind in ["taskmanagers", "nodes"] {
        for chunk in 0..5 {
            let items: Vec<Value> = (0..10_000)
                .map(|i| {
                    let mut it = item(
                        &format!("{kind}-{chunk}-{i:05}"),
                        if i % 2 == 0 {
                            "MARK_BLOCKED"
                        } else {
                            "MARK_BLOCKED_AND_EVACUATE_TASKS"
                        },
                        "bulk",
                    );
                    if i % 3 == 0 {
                        it["timeout"] = json!(3_600_000 + i);
                    }
                    it
                })
                .collect();
            assert_eq!(
                d.post(&format!("/blocklist/{kind}"), Value::Array(items))
                    .await
                    .0,
                StatusCode::CREATED
            );
        }
    }
    let regs: Vec<Value> = (0..1000)
        .map(|i| json!({"id": format!("tm-{i}"), "node": format!("nodes-0-{:05}", i % 100)}))
        .collect();
    d.call(
        reqwest::Method::PUT,
        "/taskmanagers",
        Some(Value::Array(regs)),
    )
    .await;
    // An item that expires before the import: it must be skipped.
    // Long enough to be exported as an item on a loaded machine (expired first, it would be
    // a past block instead).
    let short_end = now_ms() + 8_000;
    let short =
        json!({"id": "short", "action": "MARK_BLOCKED", "cause": "c", "endTimestamp": short_end});
    d.post("/blocklist/nodes", json!([short])).await;

    let resp = d
        .client
        .get(d.url("/blocklist/export"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    let exported = resp.text().await.unwrap();
    // The policy line, the items, the registrations.
    assert_eq!(exported.lines().count(), 1 + 100_000 + 1000 + 1);
    let mut before = d.listing().await;
    d.kill9();

    // Offline export of the same store gives the same lines.
    let dir = ws.data_dir();
    let out = blocklistd(&["export".as_ref(), "--data-dir".as_ref(), dir.as_os_str()]);
    assert!(out.status.success());
    // (Except for the short item, which may have expired in between.)
    let lasting = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.contains("\"short\""))
            .map(str::to_owned)
            .collect()
    };
    let (offline, online) = (
        lasting(&String::from_utf8(out.stdout).unwrap()),
        lasting(&exported),
    );
    let first_difference = offline.iter().zip(&online).position(|(a, b)| a != b);
    assert_eq!(first_difference, None, "offline and online exports differ");
    assert_eq!(offline.len(), online.len());

    let file = ws.tmp.path().join("export.jsonl");
    std::fs::write(&file, &exported).unwrap();
    eventually("the short item to expire", || async {
        now_ms() > short_end
    })
    .await;
    let fresh = ws.tmp.path().join("restored");
    let out = blocklistd(&[
        "import".as_ref(),
        "--data-dir".as_ref(),
        fresh.as_os_str(),
        "--mode".as_ref(),
        "replace".as_ref(),
        file.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("(1 expired skipped)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let restored = Daemon::start(&fresh, &ws.tmp.path().join("restored.log"), &[]);
    let mut after = restored.listing().await;
    // The short item has expired in the meantime in the original too.
    before["blockedNodes"]
        .as_array_mut()
        .unwrap()
        .retain(|n| n["id"] != "short");
    before.as_object_mut().unwrap().remove("revision");
    after.as_object_mut().unwrap().remove("revision");
    assert!(
        after == before,
        "the restored listing differs from the original"
    );
    assert_eq!(
        restored
            .get("/taskmanagers")
            .await
            .1
            .as_array()
            .unwrap()
            .len(),
        1000
    );
}

#[tokio::test]
async fn a_bad_import_file_writes_nothing() {
    let ws = Workspace::new();
    let file = ws.tmp.path().join("bad.jsonl");
    std::fs::write(&file, "{\"type\":\"registration\",\"id\":\"t\",\"node\":\"n\"}\n{\"type\":\"item\",\"kind\":\"node\"}\n").unwrap();
    let dir = ws.data_dir();
    let out = blocklistd(&[
        "import".as_ref(),
        "--data-dir".as_ref(),
        dir.as_os_str(),
        file.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 2"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dir.exists(), "nothing was written");
}
