//! `blocklist-flink --help`, `completion SHELL` and `man`: every flag with its variable, a
//! completion script naming them, and a manual page that renders; bad flags refused at
//! start with what is wrong — with no Flink and no daemon.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::path::Path;

use common::*;

const WATCHER: &str = env!("CARGO_BIN_EXE_blocklist-flink");

/// The flags docs/flink.md documents, each with its variable.
const FLAGS: &[(&str, &str)] = &[
    ("--flink", "BLOCKLIST_FLINK_CLUSTERS"),
    ("--daemon", "BLOCKLIST_SERVER"),
    ("--token-file", "BLOCKLIST_TOKEN_FILE"),
    ("--cacert", "BLOCKLIST_CACERT"),
    ("--name", "BLOCKLIST_FLINK_NAME"),
    ("--flink-token-file", "BLOCKLIST_FLINK_TOKEN_FILE"),
    ("--flink-user", "BLOCKLIST_FLINK_USER"),
    ("--flink-password-file", "BLOCKLIST_FLINK_PASSWORD_FILE"),
    ("--flink-cacert", "BLOCKLIST_FLINK_CACERT"),
    ("--flink-history-size", "BLOCKLIST_FLINK_HISTORY_SIZE"),
    ("--poll", "BLOCKLIST_FLINK_POLL"),
    ("--window", "BLOCKLIST_FLINK_WINDOW"),
    (
        "--task-manager-failures",
        "BLOCKLIST_FLINK_TASK_MANAGER_FAILURES",
    ),
    ("--margin", "BLOCKLIST_FLINK_MARGIN"),
    ("--spread-percent", "BLOCKLIST_FLINK_SPREAD_PERCENT"),
    ("--node-task-managers", "BLOCKLIST_FLINK_NODE_TASK_MANAGERS"),
    ("--count-exceptions", "BLOCKLIST_FLINK_COUNT_EXCEPTIONS"),
    ("--ignore-exceptions", "BLOCKLIST_FLINK_IGNORE_EXCEPTIONS"),
    ("--require-label", "BLOCKLIST_FLINK_REQUIRE_LABELS"),
    ("--ignore-label", "BLOCKLIST_FLINK_IGNORE_LABELS"),
    ("--action", "BLOCKLIST_FLINK_ACTION"),
    ("--duration", "BLOCKLIST_FLINK_DURATION"),
    ("--dry-run", "BLOCKLIST_FLINK_DRY_RUN"),
    (
        "--register-task-managers",
        "BLOCKLIST_FLINK_REGISTER_TASK_MANAGERS",
    ),
    ("--listen", "BLOCKLIST_FLINK_LISTEN"),
    ("--log-format", "BLOCKLIST_FLINK_LOG_FORMAT"),
];

#[test]
fn help_completion_and_the_manual_page_name_every_flag() {
    let help = printed(Path::new(WATCHER), &["--help"]);
    let bash = printed(Path::new(WATCHER), &["completion", "bash"]);
    for (flag, variable) in FLAGS {
        assert!(help.contains(flag), "{flag} in --help:\n{help}");
        assert!(bash.contains(flag), "{flag} in the bash completion");
        assert!(
            help.contains(&format!("env: {variable}")),
            "{variable}:\n{help}"
        );
    }
    // The default classes counted are spelled out in --help (a list too long for clap's
    // default line): every one of them.
    let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
    for pattern in blocklist_flink::filter::DEFAULT_COUNT {
        assert!(flat.contains(pattern), "{pattern} in --help:\n{help}");
    }
    if !have_groff("the watcher's manual page") {
        return;
    }
    let page = printed(Path::new(WATCHER), &["man"]);
    let text = render_man(page.as_bytes(), "blocklist-flink man");
    for part in [
        "NAME",
        "SYNOPSIS",
        "OPTIONS",
        "--task-manager-failures",
        "BLOCKLIST_SERVER",
    ] {
        assert!(text.contains(part), "{part}:\n{text}");
    }
}

/// Each refused before anything is polled, naming the flag.
#[test]
fn bad_flags_are_refused_with_what_is_wrong() {
    let refused = |args: &[&str], says: &[&str]| refuses(Path::new(WATCHER), args, says);
    refused(&[], &["--flink"]);
    refused(&["--flink", "ftp://jm"], &["--flink ftp://jm", "http://"]);
    refused(
        &["--flink", "a=http://jm:8081", "--flink", "a=http://jm:8082"],
        &["twice"],
    );
    refused(
        &["--flink", "http://jm:8081", "--spread-percent", "0"],
        &["--spread-percent"],
    );
    refused(
        &[
            "--flink",
            "http://jm:8081",
            "--count-exceptions",
            "java.*.Foo",
        ],
        &["--count-exceptions", "java.*.Foo"],
    );
    refused(
        &["--flink", "http://jm:8081", "--require-label", "type"],
        &["--require-label", "KEY=VALUE"],
    );
    refused(&["--flink", "http://jm:8081", "--poll", "0s"], &["--poll"]);
}

/// Every flag and `BLOCKLIST_*` variable of the watcher's Deployment, as the chart's
/// production example renders it (`charts/blocklistd`), is one `blocklist-flink --help`
/// knows.
#[test]
fn the_watchers_deployment_uses_only_flags_and_variables_it_knows() {
    let test = "the_watchers_deployment_uses_only_flags_and_variables_it_knows";
    let Some(objects) = rendered(Some("etcd-tls"), test) else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let deployment = object(&objects, "Deployment", "blocklistd-flink");
    let unknown = unknown_to_help(Path::new(WATCHER), &object_file(dir.path(), deployment), 10);
    assert!(
        unknown.is_empty(),
        "unknown to `blocklist-flink --help`: {unknown:?}"
    );
}
