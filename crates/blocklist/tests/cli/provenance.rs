//! Who reported what, against the real daemon: `get` with its reports and past blocks,
//! `history`, `--source` and `--reason`, `update` (with `--if-match` and its 412), and
//! `remove` by selector.

use super::common::*;
use super::run::*;

#[test]
fn get_shows_the_reports_and_the_past_blocks() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let add = |cause: &str, source: &str| {
        cli(
            &d,
            &[
                "add", "node", "n1", "--cause", cause, "--merge", "--source", source,
            ],
        )
        .ok()
    };
    add("disk", "det-a");
    cli(
        &d,
        &[
            "remove",
            "node",
            "n1",
            "--reason",
            "disk replaced",
            "--source",
            "operator:alice",
        ],
    )
    .ok();
    add("disk again", "det-a");
    add("slow", "det-b");

    let run = cli(&d, &["get", "node", "n1"]).ok();
    let out = &run.stdout;
    assert!(out.starts_with("KIND"), "{run:?}");
    assert!(out.contains("disk again,slow"), "{run:?}");
    assert!(
        out.contains("\nblocked by det-a: 2 reports, the first "),
        "{run:?}"
    );
    assert!(out.contains("\nETag \""), "{run:?}");
    let reports = out.split("\nreports:\n").nth(1).expect("a reports table");
    let lines: Vec<&str> = reports.lines().collect();
    assert!(
        lines[0].starts_with("TIME") && lines[0].contains("SOURCE  OPERATION  ACTION  END"),
        "{run:?}"
    );
    // Newest first.
    assert!(
        lines[1].contains("det-b") && lines[1].ends_with("slow"),
        "{run:?}"
    );
    assert!(lines[1].contains("  add  "), "{run:?}");
    assert!(
        lines[2].contains("det-a") && lines[2].ends_with("disk again"),
        "{run:?}"
    );
    let past = out
        .split("\npast blocks:\n")
        .nth(1)
        .expect("a past blocks table");
    let lines: Vec<&str> = past.lines().collect();
    assert_eq!(lines.len(), 2, "{run:?}");
    assert!(
        lines[0].starts_with("START") && lines[0].ends_with("BY              REASON"),
        "{run:?}"
    );
    assert!(
        lines[1].contains("removed") && lines[1].contains("operator:alice"),
        "{run:?}"
    );
    assert!(lines[1].ends_with("disk replaced"), "{run:?}");

    let item = cli(&d, &["get", "node", "n1", "--json"]).ok().json();
    assert_eq!(item["source"], "det-a", "{item}");
    assert_eq!(item["reportCount"], 2, "{item}");
    assert_eq!(item["reports"].as_array().map(Vec::len), Some(2), "{item}");
    assert_eq!(item["reports"][0]["source"], "det-b", "{item}");
}

#[test]
fn history_lists_the_past_blocks_alone() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    assert_eq!(
        cli(&d, &["history", "tm", "t1"]).ok().stdout,
        "task manager t1 has no past blocks\n"
    );
    assert_eq!(
        cli(&d, &["history", "tm", "t1", "--json"]).ok().stdout,
        "[]\n"
    );
    cli(
        &d,
        &["add", "tm", "t1", "--cause", "oom", "--source", "det-a"],
    )
    .ok();
    cli(&d, &["remove", "tm", "t1"]).ok();
    cli(&d, &["add", "tm", "t1", "--cause", "oom"]).ok();
    cli(&d, &["remove", "tm", "t1", "--reason", "false alarm"]).ok();

    let run = cli(&d, &["history", "taskmanager", "t1"]).ok();
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{run:?}");
    assert!(lines[0].starts_with("START  "), "{run:?}");
    for header in ["END", "ENDED", "WHEN", "BY", "REASON"] {
        assert!(lines[0].contains(header), "{run:?}");
    }
    // Newest first; without a token or --source, the daemon records `unknown`.
    assert!(
        lines[1].contains("removed") && lines[1].ends_with("false alarm"),
        "{run:?}"
    );
    assert!(lines[1].contains("unknown"), "{run:?}");
    assert!(lines[2].ends_with(" -"), "no reason: {run:?}");
    let past = cli(&d, &["history", "tm", "t1", "--json"]).ok().json();
    assert_eq!(past.as_array().map(Vec::len), Some(2), "{past}");
    assert_eq!(past[1]["source"], "det-a", "{past}");
    assert_eq!(past[0]["ended"]["reason"], "false alarm", "{past}");
    // Still shown once the id is not blocked; `get` says it is not.
    assert_refused(&cli(&d, &["get", "tm", "t1"]), &["404"]);
}

#[test]
fn update_changes_an_item_in_place_and_explains_a_412() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    cli(
        &d,
        &["add", "tm", "t1", "--cause", "oom", "--timeout", "1h"],
    )
    .ok();
    let etag = cli(&d, &["get", "tm", "t1", "--json"]).ok().json()["revision"]
        .as_u64()
        .unwrap()
        .to_string();

    let run = cli(
        &d,
        &[
            "update",
            "tm",
            "t1",
            "--timeout",
            "3h",
            "--if-match",
            &etag,
            "--source",
            "op",
        ],
    )
    .ok();
    assert!(
        run.stdout.starts_with("updated task manager t1, ETag \""),
        "{run:?}"
    );
    assert!(run.stdout.contains("KIND"), "{run:?}");
    assert!(
        run.stdout.contains("(in 2h 59m)") || run.stdout.contains("(in 3h)"),
        "{run:?}"
    );

    // The ETag read before the update no longer matches: 412, explained, nothing written.
    let run = cli(
        &d,
        &["update", "tm", "t1", "--permanent", "--if-match", &etag],
    );
    assert_refused(
        &run,
        &[
            "412 Precondition Failed",
            "nothing was written",
            "the item changed after its ETag was read",
        ],
    );
    let item = cli(&d, &["get", "tm", "t1", "--json"]).ok().json();
    assert_ne!(item["endTimestamp"], i64::MAX, "{item}");
    assert_eq!(item["reports"][0]["operation"], "update", "{item}");
    assert_eq!(item["reports"][0]["source"], "op", "{item}");

    // A dry run, then the real one: permanent, evacuate, a cause appended.
    let args = [
        "update",
        "tm",
        "t1",
        "--permanent",
        "--action",
        "evacuate",
        "--cause",
        "disk",
    ];
    let mut dry = args.to_vec();
    dry.push("--dry-run");
    let run = cli(&d, &dry).ok();
    assert!(
        run.stdout.starts_with("would update task manager t1"),
        "{run:?}"
    );
    assert_ne!(
        cli(&d, &["get", "tm", "t1", "--json"]).ok().json()["endTimestamp"],
        i64::MAX
    );
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let item = cli(&d, &json_args).ok().json();
    assert_eq!(item["endTimestamp"], i64::MAX, "{item}");
    assert_eq!(item["action"], "MARK_BLOCKED_AND_EVACUATE_TASKS", "{item}");
    assert_eq!(item["cause"], "oom,disk", "{item}");

    assert_refused(
        &cli(&d, &["update", "node", "nope", "--timeout", "1h"]),
        &["404"],
    );
    assert_refused(&cli(&d, &["update", "tm", "t1"]), &["--timeout"]);
}

#[test]
fn remove_by_selector_lists_what_it_unblocked() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    for (id, source, cause) in [
        ("a1", "det-a", "oom"),
        ("a2", "det-a", "disk"),
        ("b1", "det-b", "oom"),
    ] {
        cli(&d, &["add", "tm", id, "--cause", cause, "--source", source]).ok();
    }
    cli(
        &d,
        &["add", "node", "n1", "--cause", "oom", "--source", "det-a"],
    )
    .ok();

    let run = cli(&d, &["remove", "tm", "--by-source", "det-a", "--dry-run"]).ok();
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines[0], "would unblock 2 task managers:", "{run:?}");
    assert!(lines[1].starts_with("KIND"), "{run:?}");
    assert!(lines[2].starts_with("taskmanager  a1") && lines[3].starts_with("taskmanager  a2"));
    assert_eq!(
        ids(&cli(&d, &["list", "tm", "--json"]).ok().json()),
        ["a1", "a2", "b1"]
    );

    let run = cli(
        &d,
        &[
            "remove",
            "tm",
            "--by-source",
            "det-a",
            "--by-cause",
            "oom",
            "--reason",
            "detector bug",
            "--source",
            "operator:alice",
        ],
    )
    .ok();
    assert!(
        run.stdout.starts_with("unblocked 1 task manager:\nKIND"),
        "{run:?}"
    );
    assert!(run.stdout.contains("taskmanager  a1"), "{run:?}");
    let past = cli(&d, &["history", "tm", "a1", "--json"]).ok().json();
    assert_eq!(past[0]["ended"]["reason"], "detector bug", "{past}");
    assert_eq!(past[0]["ended"]["source"], "operator:alice", "{past}");

    assert_eq!(
        cli(&d, &["remove", "tm", "--by-cause", "cpu"]).ok().stdout,
        "no task manager matched; nothing was unblocked\n"
    );
    let answer = cli(&d, &["remove", "tm", "--all", "--json"]).ok().json();
    assert_eq!(answer["count"], 2, "{answer}");
    assert_eq!(ids(&answer["removed"]), ["a2", "b1"]);
    assert_eq!(
        ids(&cli(&d, &["list", "nodes", "--json"]).ok().json()),
        ["n1"]
    );

    // Neither an id nor a selector, or both: refused before sending.
    assert_refused(&cli(&d, &["remove", "tm"]), &["--by-source"]);
    assert_refused(&cli(&d, &["remove", "node", "n1", "--all"]), &["--all"]);
}

#[test]
fn remove_by_selector_over_the_limit_says_so_and_removes_nothing() {
    let mut ws = Workspace::new();
    let d = ws.start(&["--max-batch", "2"]);
    cli(&d, &["add", "node", "n1", "n2", "--cause", "c"]).ok();
    cli(&d, &["add", "node", "n3", "--cause", "c"]).ok();
    let run = cli(&d, &["remove", "node", "--by-cause", "c"]);
    assert_refused(
        &run,
        &[
            "413 Payload Too Large",
            "3 nodes match; the limit is 2 per request; narrow the selector",
        ],
    );
    assert_eq!(
        ids(&cli(&d, &["list", "nodes", "--json"]).ok().json()),
        ["n1", "n2", "n3"]
    );
}

/// `get` and `list` show what each enforcer reported about the item, and `get` says when
/// one has not seen the item's last change yet.
#[tokio::test]
async fn get_shows_the_enforcers_statuses() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    cli(&d, &["add", "node", "n1", "--cause", "disk"]).ok();
    let (status, body) = d
        .call(
            reqwest::Method::PUT,
            "/enforcement/blocklist-kube",
            Some(serde_json::json!([{"kind": "node", "id": "n1", "state": "enforced",
                                     "detail": "taint blocklistd.io/blocked=MARK_BLOCKED:NoSchedule",
                                     "observedRevision": 1}])),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    let run = cli(&d, &["get", "node", "n1"]).ok();
    let statuses = run
        .stdout
        .split("\nenforcement:\n")
        .nth(1)
        .expect("the statuses");
    let line = statuses.lines().next().unwrap_or_default();
    assert!(
        line.starts_with("  blocklist-kube: enforced since ")
            && line.ends_with(": taint blocklistd.io/blocked=MARK_BLOCKED:NoSchedule"),
        "{run:?}"
    );
    let run = cli(&d, &["list"]).ok();
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(lines[0].ends_with("ENFORCEMENT"), "{run:?}");
    assert!(lines[1].ends_with("blocklist-kube: enforced"), "{run:?}");
    cli(&d, &["update", "node", "n1", "--cause", "fan"]).ok();
    let run = cli(&d, &["get", "node", "n1"]).ok();
    assert!(
        run.stdout
            .contains("[has not seen the item's last change yet]"),
        "{run:?}"
    );
}

#[test]
fn get_shows_who_holds_a_block_and_retract_takes_back_a_sources_report() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    for (cause, source) in [("disk", "operator:alice"), ("smart errors", "alerts")] {
        cli(
            &d,
            &[
                "add", "node", "n1", "--cause", cause, "--merge", "--source", source,
            ],
        )
        .ok();
    }
    let run = cli(&d, &["get", "node", "n1"]).ok();
    assert!(
        run.stdout.contains("\nheld by operator:alice, alerts\n"),
        "{run:?}"
    );
    let held = run
        .stdout
        .split("\nheld by:\n")
        .nth(1)
        .expect("a held by table");
    let lines: Vec<&str> = held.lines().collect();
    assert!(
        lines[0].starts_with("SOURCE") && lines[0].contains("DETAILS"),
        "{run:?}"
    );
    assert!(
        lines[1].starts_with("operator:alice") && lines[2].starts_with("alerts"),
        "{run:?}"
    );

    let run = cli(
        &d,
        &["retract", "node", "n1", "--source", "alerts", "--dry-run"],
    )
    .ok();
    assert_eq!(
        run.stdout,
        "would retract alerts's report of node n1; still blocked (block), held by operator:alice\n"
    );
    let run = cli(&d, &["retract", "node", "n1", "--source", "alerts"]).ok();
    assert!(
        run.stdout
            .starts_with("retracted alerts's report of node n1; still blocked"),
        "{run:?}"
    );
    let run = cli(&d, &["retract", "node", "n1", "--source", "alerts"]).ok();
    assert_eq!(
        run.stdout,
        "alerts holds no report of node n1: nothing to retract\n"
    );
    let run = cli(
        &d,
        &[
            "retract",
            "node",
            "n1",
            "--source",
            "operator:alice",
            "--reason",
            "fixed",
        ],
    )
    .ok();
    assert_eq!(
        run.stdout,
        "retracted operator:alice's report of node n1, the last: node n1 is unblocked\n"
    );
    let past = cli(&d, &["history", "node", "n1", "--json"]).ok().json();
    assert_eq!(past[0]["ended"]["how"], "retracted", "{past}");
    assert_eq!(past[0]["ended"]["reason"], "fixed", "{past}");
}
