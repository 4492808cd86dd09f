//! The guardrail commands against the real daemon: `policy show`/`set`, the allowlist
//! (`allow add`/`list`/`remove`), `remove --hold-off`, `add --force`, and how a 403 reads.

use serde_json::json;

use super::common::*;
use super::run::*;

/// `policy show` of a new data dir: the daemon's defaults.
const DEFAULT_TABLE: &str = "SETTING                 NODES  TASKMANAGERS\n\
                             max-blocked-percent     50     50\n\
                             max-evacuating-percent  20     off\n\
                             max-blocked             off    off\n\
                             evacuations-per-minute  off    off\n\
                             evacuation-burst        -      -\n\
                             min-registered: 10\n\
                             max-block-duration: off\n\
                             permanent-blocks: allowed\n";

#[test]
fn policy_set_then_show_round_trip() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    assert_eq!(cli(&d, &["policy", "show"]).ok().stdout, DEFAULT_TABLE);

    let run = cli(
        &d,
        &[
            "policy",
            "set",
            "--nodes-max-blocked",
            "5",
            "--nodes-max-evacuating-percent",
            "off",
            "--taskmanagers-evacuations-per-minute",
            "6",
            "--taskmanagers-evacuation-burst",
            "2",
            "--min-registered",
            "3",
            "--max-block-duration",
            "12h",
            "--permanent-blocks",
            "forbidden",
        ],
    )
    .ok();
    let table = "SETTING                 NODES  TASKMANAGERS\n\
                 max-blocked-percent     50     50\n\
                 max-evacuating-percent  off    off\n\
                 max-blocked             5      off\n\
                 evacuations-per-minute  off    6\n\
                 evacuation-burst        -      2\n\
                 min-registered: 3\n\
                 max-block-duration: 12h\n\
                 permanent-blocks: forbidden\n";
    assert_eq!(run.stdout, format!("the policy is now:\n{table}"));
    assert_eq!(cli(&d, &["policy", "show"]).ok().stdout, table);
    let stored = cli(&d, &["policy", "show", "--json"]).ok().json();
    assert_eq!(
        stored,
        json!({
            "nodes": {"maxBlockedPercent": 50, "maxEvacuatingPercent": null, "maxBlocked": 5,
                      "evacuations": null},
            "taskManagers": {"maxBlockedPercent": 50, "maxEvacuatingPercent": null,
                             "maxBlocked": null, "evacuations": {"perMinute": 6, "burst": 2}},
            "minRegistered": 3,
            "maxBlockDurationSecs": 43_200,
            "permanentBlocksAllowed": false,
            "escalation": null
        })
    );
    // What `policy` (= `policy status`) reports follows.
    let status = cli(&d, &["policy"]).ok();
    assert_eq!(status.stdout, cli(&d, &["policy", "status"]).ok().stdout);
    assert!(
        status
            .stdout
            .starts_with("nodes: 0 items, cap 5 (5 more allowed); no evacuation limit\n"),
        "{status:?}"
    );
    assert!(
        status
            .stdout
            .ends_with("blocks: at most 12h; permanent blocks not allowed\n"),
        "{status:?}"
    );

    // The same again changes nothing; a dry run says what would be and stores nothing.
    let run = cli(&d, &["policy", "set", "--min-registered", "3"]).ok();
    assert_eq!(run.stdout, format!("the policy is unchanged:\n{table}"));
    let run = cli(
        &d,
        &["policy", "set", "--nodes-max-blocked", "off", "--dry-run"],
    )
    .ok();
    assert!(run.stdout.starts_with("the policy would be:\n"), "{run:?}");
    assert!(
        run.stdout
            .contains("\nmax-blocked             off    off\n"),
        "{run:?}"
    );
    assert_eq!(cli(&d, &["policy", "show", "--json"]).ok().json(), stored);
    // --json prints the stored policy as the daemon answers it.
    let answer = cli(
        &d,
        &["policy", "set", "--json", "--max-block-duration", "off"],
    )
    .ok()
    .json();
    assert_eq!(answer["maxBlockDurationSecs"], serde_json::Value::Null);

    // Refused here (a burst with no rate to go with it) or by the daemon (its range).
    let run = cli(&d, &["policy", "set", "--nodes-evacuation-burst", "3"]);
    assert_refused(&run, &["--nodes-evacuations-per-minute"]);
    let run = cli(
        &d,
        &[
            "policy",
            "set",
            "--taskmanagers-evacuations-per-minute",
            "0",
        ],
    );
    assert_refused(
        &run,
        &["400 Bad Request", "taskManagers.evacuations.perMinute"],
    );
    assert_refused(&cli(&d, &["policy", "set"]), &["give at least one setting"]);
    assert_eq!(
        cli(&d, &["policy", "show", "--json"]).ok().json()["taskManagers"]["evacuations"],
        json!({"perMinute": 6, "burst": 2})
    );
}

#[test]
fn allow_add_list_remove() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    cli(&d, &["add", "node", "n1", "--cause", "disk"]).ok();
    assert_eq!(
        cli(&d, &["allow", "list"]).ok().stdout,
        "the allowlist is empty\n"
    );

    // A dry run lifts nothing.
    let run = cli(
        &d,
        &[
            "allow",
            "add",
            "node",
            "n1",
            "--comment",
            "db primary",
            "--dry-run",
        ],
    )
    .ok();
    assert!(
        run.stdout.starts_with(
            "would allowlist node n1: until removed, comment \"db primary\"\nwould unblock:\n"
        ),
        "{run:?}"
    );
    assert_eq!(
        ids(&cli(&d, &["--json", "list", "nodes"]).ok().json()),
        ["n1"]
    );

    // The entry lifts the block it covers, in the same write.
    let run = cli(
        &d,
        &["allow", "add", "node", "n1", "--comment", "db primary"],
    )
    .ok();
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(
        lines[..2],
        [
            "allowlisted node n1: until removed, comment \"db primary\"",
            "unblocked:"
        ],
        "{run:?}"
    );
    assert!(lines[2].starts_with("KIND"), "{run:?}");
    assert!(lines[3].starts_with("node  n1  block"), "{run:?}");
    assert_eq!(lines.len(), 4, "{run:?}");
    assert_eq!(cli(&d, &["list"]).ok().stdout, "nothing is blocked\n");
    // Put again: the entry is replaced.
    let run = cli(
        &d,
        &[
            "allow",
            "add",
            "nodes",
            "n1",
            "--comment",
            "db primary (replica too)",
        ],
    )
    .ok();
    assert_eq!(
        run.stdout,
        "allowlisted node n1 (its earlier entry replaced): until removed, comment \"db \
         primary (replica too)\"\n"
    );

    // A prefix entry with an end, for an id that needs percent-encoding.
    let answer = cli(
        &d,
        &[
            "allow",
            "add",
            "tm",
            "db/ü ",
            "--prefix",
            "--comment",
            "databases",
            "--timeout",
            "2h",
            "--json",
        ],
    )
    .ok()
    .json();
    assert_eq!(answer["entry"]["id"], "db/ü ");
    assert_eq!(answer["entry"]["prefix"], true);
    assert_eq!(answer["unblocked"], json!([]));
    let end = answer["entry"]["endTimestamp"].as_i64().unwrap();
    assert!((end - now_ms() - 7_200_000).abs() < 60_000, "{answer}");

    let run = cli(&d, &["allow", "list"]).ok();
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{run:?}");
    for header in ["KIND", "ID", "MATCH", "ENDS", "BY", "COMMENT"] {
        assert!(lines[0].contains(header), "{run:?}");
    }
    let row = |kind: &str| {
        *lines
            .iter()
            .find(|l| l.starts_with(kind))
            .unwrap_or_else(|| panic!("no {kind} row: {run:?}"))
    };
    let tm = row("taskmanager");
    assert!(
        tm.contains("db/ü   prefix") && tm.ends_with("databases"),
        "{run:?}"
    );
    assert!(
        tm.contains("(in 1h 59m)") || tm.contains("(in 2h)"),
        "{run:?}"
    );
    let node = row("node ");
    assert!(
        node.contains("exact") && node.contains("until removed"),
        "{run:?}"
    );
    assert!(node.ends_with("db primary (replica too)"), "{run:?}");
    let all = cli(&d, &["allow", "list", "--json"]).ok().json();
    assert_eq!(all["entries"].as_array().unwrap().len(), 2, "{all}");
    assert!(all["revision"].as_u64().is_some(), "{all}");
    let nodes = cli(&d, &["allow", "list", "nodes", "--json"]).ok().json();
    assert_eq!(ids(&nodes), ["n1"]);
    assert_eq!(
        cli(&d, &["allow", "list", "taskmanagers"])
            .ok()
            .stdout
            .lines()
            .count(),
        2
    );

    // An add of an allowlisted id is refused with the daemon's message, the whole batch.
    let run = cli(&d, &["add", "node", "n2", "n1", "--cause", "disk"]);
    assert_refused(&run, &["items[1]", "\"n1\"", "allowlist"]);
    let run = cli(&d, &["add", "tm", "db/ü 7", "--cause", "oom", "--force"]);
    assert_refused(&run, &["db/ü 7", "allowlist"]);
    assert_eq!(cli(&d, &["list"]).ok().stdout, "nothing is blocked\n");

    // Remove: a dry run leaves it; then it goes; a second time there is none.
    let run = cli(&d, &["allow", "remove", "node", "n1", "--dry-run"]).ok();
    assert_eq!(run.stdout, "would remove the allowlist entry of node n1\n");
    let run = cli(&d, &["allow", "remove", "node", "n1"]).ok();
    assert_eq!(run.stdout, "removed the allowlist entry of node n1\n");
    assert_refused(
        &cli(&d, &["allow", "remove", "node", "n1"]),
        &["404 Not Found", "\"n1\""],
    );
    let removed = cli(&d, &["allow", "remove", "tm", "db/ü ", "--json"])
        .ok()
        .json();
    assert_eq!(removed["id"], "db/ü ");
    assert_eq!(
        cli(&d, &["allow", "list", "nodes"]).ok().stdout,
        "no node is allowlisted\n"
    );
    // Off the allowlist, it may be blocked again.
    cli(&d, &["add", "node", "n1", "--cause", "disk"]).ok();
    // Caught before sending: an empty id, a comment that is missing.
    assert_refused(
        &cli(&d, &["allow", "add", "node", "", "--comment", "c"]),
        &["must not be empty"],
    );
    assert_refused(&cli(&d, &["allow", "add", "node", "n9"]), &["--comment"]);
}

#[test]
fn remove_with_a_hold_off_keeps_the_id_from_coming_back() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    cli(&d, &["add", "node", "n1", "--cause", "flaky"]).ok();
    cli(&d, &["add", "node", "n2", "--cause", "flaky"]).ok();

    let run = cli(&d, &["remove", "node", "n1", "--hold-off", "30m"]).ok();
    assert!(
        run.stdout.starts_with("unblocked node n1, held off until "),
        "{run:?}"
    );
    assert!(
        run.stdout.ends_with("(in 29m)\n") || run.stdout.ends_with("(in 30m)\n"),
        "{run:?}"
    );
    let run = cli(&d, &["add", "node", "n1", "--cause", "flaky again"]);
    assert_ne!(run.code, 0, "{run:?}");
    assert_refused(&run, &["\"n1\"", "allowlist"]);
    let entries = cli(&d, &["allow", "list", "nodes", "--json"]).ok().json();
    assert_eq!(ids(&entries), ["n1"]);
    assert_eq!(entries[0]["comment"], "hold-off after an unblock");

    // --json: the daemon's answer with the entry; a dry run holds nothing off.
    let answer = cli(
        &d,
        &[
            "remove",
            "node",
            "n2",
            "--hold-off",
            "1h 30m",
            "--dry-run",
            "--json",
        ],
    )
    .ok()
    .json();
    assert_eq!(answer["holdOff"]["id"], "n2");
    assert_eq!(
        ids(&cli(&d, &["--json", "list", "nodes"]).ok().json()),
        ["n2"]
    );
    // Outside the daemon's range, or nothing to unblock: refused, nothing written.
    assert_refused(
        &cli(&d, &["remove", "node", "n2", "--hold-off", "8d"]),
        &["400 Bad Request", "holdOff"],
    );
    assert_refused(
        &cli(&d, &["remove", "node", "n3", "--hold-off", "1h"]),
        &["404 Not Found"],
    );
    assert_refused(
        &cli(&d, &["remove", "node", "n2", "--hold-off", "soon"]),
        &["--hold-off"],
    );
    assert_eq!(
        ids(&cli(&d, &["allow", "list", "nodes", "--json"]).ok().json()),
        ["n1"]
    );
}

#[test]
fn force_passes_a_cap() {
    let mut ws = Workspace::new();
    let d = ws.start(&["--max-blocked-nodes", "1"]);
    cli(&d, &["add", "node", "n1", "--cause", "disk"]).ok();
    let run = cli(&d, &["add", "node", "n2", "n3", "--cause", "disk"]);
    assert_refused(&run, &["max-items"]);

    // A forced dry run passes too, and writes nothing.
    let run = cli(
        &d,
        &[
            "add",
            "node",
            "n2",
            "n3",
            "--cause",
            "disk",
            "--force",
            "--dry-run",
        ],
    )
    .ok();
    assert!(
        run.stdout.starts_with("would block node n2: block"),
        "{run:?}"
    );
    assert_eq!(
        ids(&cli(&d, &["--json", "list", "nodes"]).ok().json()),
        ["n1"]
    );

    let run = cli(
        &d,
        &["add", "node", "n2", "n3", "--cause", "disk", "--force"],
    )
    .ok();
    assert!(run.stdout.starts_with("blocked node n2: block"), "{run:?}");
    assert!(run.stdout.contains("\nblocked node n3: block"), "{run:?}");
    assert_eq!(
        ids(&cli(&d, &["--json", "list", "nodes"]).ok().json()),
        ["n1", "n2", "n3"]
    );
    // The blocks say they were forced, and past what.
    let item = cli(&d, &["get", "node", "n2", "--json"]).ok().json();
    assert_eq!(item["forced"]["guards"], json!(["max-items"]), "{item}");
    let run = cli(&d, &["get", "node", "n3"]).ok();
    assert!(
        run.stdout.contains("\nforced past max-items at "),
        "{run:?}"
    );
    let item = cli(&d, &["get", "node", "n1", "--json"]).ok().json();
    assert!(item.get("forced").is_none(), "{item}");
}

#[test]
fn forbidden_says_the_token_is_not_an_admin_token() {
    let mut ws = Workspace::new();
    let tokens = ws.tmp.path().join("tokens");
    std::fs::write(
        &tokens,
        "admin-secret name=alice role=admin\nwriter-secret name=bob role=writer\n",
    )
    .unwrap();
    let d = ws.start(&["--token-file", tokens.to_str().unwrap()]);
    let token = |name: &str, secret: &str| {
        let path = ws.tmp.path().join(name);
        std::fs::write(&path, secret).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let (admin, writer) = (
        token("admin", "admin-secret"),
        token("writer", "writer-secret"),
    );
    let with = |token: &str, args: &[&str]| {
        let mut all = vec!["--token-file", token];
        all.extend_from_slice(args);
        cli(&d, &all)
    };

    let hint = "blocklist: the token given is not an admin token";
    for args in [
        &["policy", "set", "--min-registered", "1"][..],
        &["allow", "add", "node", "n1", "--comment", "c"],
        &["allow", "remove", "node", "n1"],
        &["add", "node", "n1", "--cause", "c", "--force"],
    ] {
        let run = with(&writer, args);
        assert_refused(&run, &["403 Forbidden", "needs an admin token", hint]);
        assert!(!run.stderr.contains("secret"), "{run:?}");
    }
    with(&writer, &["add", "node", "n1", "--cause", "c"]).ok();
    assert_refused(
        &with(&writer, &["remove", "node", "n1", "--hold-off", "1m"]),
        &["403 Forbidden", hint],
    );
    // The admin may; and the entries say who.
    with(&admin, &["remove", "node", "n1", "--hold-off", "1m"]).ok();
    let run = with(&admin, &["allow", "list"]).ok();
    assert!(
        run.stdout.contains("  alice  hold-off after an unblock\n"),
        "{run:?}"
    );
}
