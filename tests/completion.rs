//! `blocklistd completion SHELL` and `blocklistd man`: the scripts name every subcommand,
//! and every manual page renders.

mod common;

use clap::CommandFactory;
use common::*;

/// The subcommands an operator completes, as `--help` lists them and as the clap
/// definitions have them.
fn subcommands() -> Vec<String> {
    let listed = subcommands_in_help(&BIN);
    let defined: Vec<String> = blocklistd::config::Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_owned())
        .collect();
    assert_eq!(listed, defined);
    for expected in ["check", "export", "salvage", "import", "completion", "man"] {
        assert!(
            listed.iter().any(|s| s == expected),
            "{expected}: {listed:?}"
        );
    }
    listed
}

#[test]
fn completion_scripts_name_every_subcommand() {
    assert_completions_name(&BIN, &subcommands());
    // Flags too: the offline ones and the daemon's.
    let bash = printed(&BIN, &["completion", "bash"]);
    for flag in [
        "--data-dir",
        "--quiet",
        "--mode",
        "--listen",
        "--token-file",
    ] {
        assert!(bash.contains(flag), "{flag}");
    }
}

#[test]
fn the_manual_pages_render() {
    if !have_groff("the_manual_pages_render") {
        return;
    }
    let subcommands = subcommands();
    let page = printed(&BIN, &["man"]);
    let text = render_man(page.as_bytes(), "blocklistd man");
    for part in ["NAME", "SYNOPSIS", "OPTIONS", "SUBCOMMANDS", "--data-dir"] {
        assert!(text.contains(part), "{part}:\n{text}");
    }
    for sub in &subcommands {
        assert!(
            text.contains(&format!("blocklistd-{sub}(1)")),
            "{sub}:\n{text}"
        );
    }

    // `--dir` writes that page and one per subcommand, and lists them.
    let dir = tempfile::tempdir().unwrap();
    let listed = printed(&BIN, &["man", "--dir", dir.path().to_str().unwrap()]);
    let mut names = vec!["blocklistd.1".to_owned()];
    names.extend(subcommands.iter().map(|s| format!("blocklistd-{s}.1")));
    assert_eq!(listed.lines().count(), names.len(), "{listed}");
    for name in &names {
        let path = dir.path().join(name);
        assert!(
            listed.contains(&path.display().to_string()),
            "{name}: {listed}"
        );
        let page = std::fs::read(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        render_man(&page, name);
    }
    let import = render_man(
        &std::fs::read(dir.path().join("blocklistd-import.1")).unwrap(),
        "import",
    );
    for part in ["--mode", "--quiet", "replace"] {
        assert!(import.contains(part), "{part}:\n{import}");
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("blocklistd.1")).unwrap(),
        page,
        "the page printed is the page written"
    );
}
