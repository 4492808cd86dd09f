//! `blocklist completion SHELL` and `blocklist man`: the scripts name every subcommand, and
//! every manual page renders.

// The daemon's test harness, for its completion and manual checks.
#[path = "../../../tests/common/mod.rs"]
mod common;

use std::path::Path;

use common::*;

const CLI: &str = env!("CARGO_BIN_EXE_blocklist");

/// The subcommands of subcommands, which get pages of their own (`blocklist-policy-set.1`).
const NESTED: &[&str] = &[
    "policy-status",
    "policy-show",
    "policy-set",
    "allow-add",
    "allow-remove",
    "allow-list",
];

/// The subcommands `--help` lists, which must include every one this client has.
fn subcommands() -> Vec<String> {
    let listed = subcommands_in_help(Path::new(CLI));
    for expected in [
        "list",
        "get",
        "add",
        "remove",
        "check",
        "register",
        "unregister",
        "policy",
        "allow",
        "watch",
        "completion",
        "man",
    ] {
        assert!(
            listed.iter().any(|s| s == expected),
            "{expected}: {listed:?}"
        );
    }
    listed
}

#[test]
fn completion_scripts_name_every_subcommand() {
    assert_completions_name(Path::new(CLI), &subcommands());
    let bash = printed(Path::new(CLI), &["completion", "bash"]);
    for flag in [
        "--server",
        "--token-file",
        "--json",
        "--cause",
        "--since",
        "--force",
        "--hold-off",
        "--comment",
        "--nodes-max-blocked-percent",
        "--max-block-duration",
    ] {
        assert!(bash.contains(flag), "{flag}");
    }
    // Completion needs no server: a token file that does not exist is no error here.
    let out = std::process::Command::new(CLI)
        .args(["completion", "zsh"])
        .env("BLOCKLIST_TOKEN_FILE", "/nonexistent/token")
        .output()
        .unwrap();
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
}

#[test]
fn the_manual_pages_render() {
    if !have_groff("the_manual_pages_render") {
        return;
    }
    let subcommands = subcommands();
    let page = printed(Path::new(CLI), &["man"]);
    let text = render_man(page.as_bytes(), "blocklist man");
    for part in [
        "NAME",
        "SYNOPSIS",
        "OPTIONS",
        "SUBCOMMANDS",
        "--server",
        "BLOCKLIST_SERVER",
    ] {
        assert!(text.contains(part), "{part}:\n{text}");
    }
    for sub in &subcommands {
        assert!(
            text.contains(&format!("blocklist-{sub}(1)")),
            "{sub}:\n{text}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let listed = printed(
        Path::new(CLI),
        &["man", "--dir", dir.path().to_str().unwrap()],
    );
    assert_eq!(
        listed.lines().count(),
        1 + subcommands.len() + NESTED.len(),
        "{listed}"
    );
    for sub in subcommands
        .iter()
        .map(String::as_str)
        .chain(NESTED.iter().copied())
        .map(|s| format!("-{s}"))
        .chain([String::new()])
    {
        let name = format!("blocklist{sub}.1");
        let page = std::fs::read(dir.path().join(&name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let text = render_man(&page, &name);
        let flags: &[&str] = match sub.as_str() {
            "-add" => &["--cause", "--timeout", "--merge", "--force"],
            "-remove" => &["--hold-off", "--dry-run"],
            "-policy" => &["blocklist-policy-set(1)"],
            "-policy-set" => &[
                "--nodes-max-blocked-percent",
                "--taskmanagers-evacuation-burst",
                "--max-block-duration",
                "--permanent-blocks",
                "--dry-run",
            ],
            "-allow-add" => &["--comment", "--prefix", "--until"],
            _ => &[],
        };
        for part in flags {
            assert!(text.contains(part), "{name}: {part}:\n{text}");
        }
    }
}
