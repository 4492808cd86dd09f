//! `blocklist-yarn --help`, `completion SHELL` and `man`: every flag with its variable, a
//! completion script naming them, and a manual page that renders; bad flags refused at
//! start with what is wrong — with no ResourceManager and no daemon.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::path::Path;

use common::*;

const BRIDGE: &str = env!("CARGO_BIN_EXE_blocklist-yarn");

/// The flags docs/yarn.md documents, each with its variable.
const FLAGS: &[(&str, &str)] = &[
    ("--resourcemanager", "BLOCKLIST_YARN_RESOURCEMANAGERS"),
    ("--user", "BLOCKLIST_YARN_USER"),
    (
        "--resourcemanager-cacert",
        "BLOCKLIST_YARN_RESOURCEMANAGER_CACERT",
    ),
    ("--daemon", "BLOCKLIST_SERVER"),
    ("--token-file", "BLOCKLIST_TOKEN_FILE"),
    ("--cacert", "BLOCKLIST_CACERT"),
    ("--name", "BLOCKLIST_YARN_NAME"),
    ("--label", "BLOCKLIST_YARN_LABEL"),
    (
        "--max-labelled-nodes-percent",
        "BLOCKLIST_YARN_MAX_LABELLED_NODES_PERCENT",
    ),
    ("--dry-run", "BLOCKLIST_YARN_DRY_RUN"),
    ("--resync", "BLOCKLIST_YARN_RESYNC"),
    ("--poll", "BLOCKLIST_YARN_POLL"),
    ("--membership-poll", "BLOCKLIST_YARN_MEMBERSHIP_POLL"),
    ("--timeout", "BLOCKLIST_YARN_TIMEOUT"),
    ("--application-type", "BLOCKLIST_YARN_APPLICATION_TYPES"),
    (
        "--evictions-per-minute",
        "BLOCKLIST_YARN_EVICTIONS_PER_MINUTE",
    ),
    (
        "--max-evacuating-nodes",
        "BLOCKLIST_YARN_MAX_EVACUATING_NODES",
    ),
    ("--listen", "BLOCKLIST_YARN_LISTEN"),
    ("--log-format", "BLOCKLIST_YARN_LOG_FORMAT"),
];

#[test]
fn help_completion_and_the_manual_page_name_every_flag() {
    let help = printed(Path::new(BRIDGE), &["--help"]);
    let bash = printed(Path::new(BRIDGE), &["completion", "bash"]);
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/yarn.md"))
            .expect("docs/yarn.md");
    for (flag, variable) in FLAGS {
        assert!(help.contains(flag), "{flag} in --help:\n{help}");
        assert!(bash.contains(flag), "{flag} in the bash completion");
        assert!(
            docs.contains(&format!("`{flag}`")),
            "{flag} in docs/yarn.md"
        );
        assert!(
            help.contains(&format!("env: {variable}")),
            "{variable}:\n{help}"
        );
    }
    if !have_groff("the YARN bridge's manual page") {
        return;
    }
    let page = printed(Path::new(BRIDGE), &["man"]);
    let text = render_man(page.as_bytes(), "blocklist-yarn man");
    for part in [
        "NAME",
        "SYNOPSIS",
        "OPTIONS",
        "--max-labelled-nodes-percent",
        "BLOCKLIST_SERVER",
    ] {
        assert!(text.contains(part), "{part}:\n{text}");
    }
}

/// Each refused before anything is read, naming the flag.
#[test]
fn bad_flags_are_refused_with_what_is_wrong() {
    let refused = |args: &[&str], says: &[&str]| refuses(Path::new(BRIDGE), args, says);
    let rm = ["--resourcemanager", "http://rm:8088"];
    refused(&[], &["--resourcemanager"]);
    refused(
        &["--resourcemanager", "ftp://rm"],
        &["--resourcemanager ftp://rm", "http"],
    );
    refused(
        &[&rm[..], &["--label", "block listed"]].concat(),
        &["--label", "YARN label"],
    );
    refused(
        &[&rm[..], &["--max-labelled-nodes-percent", "101"]].concat(),
        &["--max-labelled-nodes-percent"],
    );
    refused(&[&rm[..], &["--name", "a/b"]].concat(), &["--name"]);
    refused(&[&rm[..], &["--poll", "0s"]].concat(), &["--poll"]);
}
