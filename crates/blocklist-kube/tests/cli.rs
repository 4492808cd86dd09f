//! `blocklist-kube --help`, `completion SHELL` and `man`: every flag with its variable, a
//! completion script naming them, and a manual page that renders — with no cluster and no
//! daemon.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::path::Path;

use common::*;

const BRIDGE: &str = env!("CARGO_BIN_EXE_blocklist-kube");

/// The flags docs/kubernetes.md documents, each with its variable where it has one.
const FLAGS: &[(&str, Option<&str>)] = &[
    ("--daemon", Some("BLOCKLIST_SERVER")),
    ("--token-file", Some("BLOCKLIST_TOKEN_FILE")),
    ("--cacert", Some("BLOCKLIST_CACERT")),
    ("--name", Some("BLOCKLIST_KUBE_NAME")),
    ("--kubeconfig", None),
    ("--taint-key", Some("BLOCKLIST_KUBE_TAINT_KEY")),
    (
        "--annotation-prefix",
        Some("BLOCKLIST_KUBE_ANNOTATION_PREFIX"),
    ),
    (
        "--taskmanager-selector",
        Some("BLOCKLIST_KUBE_TASKMANAGER_SELECTOR"),
    ),
    ("--namespace", Some("BLOCKLIST_KUBE_NAMESPACE")),
    ("--resync", Some("BLOCKLIST_KUBE_RESYNC")),
    (
        "--max-tainted-nodes-percent",
        Some("BLOCKLIST_KUBE_MAX_TAINTED_NODES_PERCENT"),
    ),
    ("--dry-run", Some("BLOCKLIST_KUBE_DRY_RUN")),
    ("--condition", Some("BLOCKLIST_KUBE_CONDITIONS")),
    (
        "--detector-token-file",
        Some("BLOCKLIST_KUBE_DETECTOR_TOKEN_FILE"),
    ),
    ("--once", None),
    ("--listen", Some("BLOCKLIST_KUBE_LISTEN")),
    ("--log-format", Some("BLOCKLIST_KUBE_LOG_FORMAT")),
];

#[test]
fn help_completion_and_the_manual_page_name_every_flag() {
    let help = printed(Path::new(BRIDGE), &["--help"]);
    let bash = printed(Path::new(BRIDGE), &["completion", "bash"]);
    for (flag, variable) in FLAGS {
        assert!(help.contains(flag), "{flag} in --help:\n{help}");
        assert!(bash.contains(flag), "{flag} in the bash completion");
        if let Some(variable) = variable {
            assert!(
                help.contains(&format!("env: {variable}")),
                "{variable}:\n{help}"
            );
        }
    }
    if !have_groff("the bridge's manual page") {
        return;
    }
    let page = printed(Path::new(BRIDGE), &["man"]);
    let text = render_man(page.as_bytes(), "blocklist-kube man");
    for part in [
        "NAME",
        "SYNOPSIS",
        "OPTIONS",
        "--max-tainted-nodes-percent",
        "BLOCKLIST_SERVER",
    ] {
        assert!(text.contains(part), "{part}:\n{text}");
    }
}

/// A ceiling past 100 %, a name that cannot be a path segment, a condition that does not
/// parse or is given twice, and a condition without the detector's token beside the
/// enforcer's are refused at start, before any cluster is reached.
#[test]
fn bad_flags_are_refused_with_what_is_wrong() {
    let out = std::process::Command::new(BRIDGE)
        .args(["--max-tainted-nodes-percent", "150", "--once"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-tainted-nodes-percent"));
    let out = std::process::Command::new(BRIDGE)
        .args(["--name", "a/b", "--once"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--name") && stderr.contains("'/'"),
        "{stderr}"
    );
    for (args, says) in [
        (
            &["--condition", "KernelDeadlock,hold=soon"][..],
            "hold \"soon\"",
        ),
        (
            &[
                "--condition",
                "KernelDeadlock",
                "--condition",
                "KernelDeadlock",
            ][..],
            "given twice",
        ),
        (
            &["--condition", "KernelDeadlock", "--token-file", "/dev/null"][..],
            "--condition needs --detector-token-file",
        ),
    ] {
        let out = std::process::Command::new(BRIDGE)
            .args(args)
            .arg("--once")
            .output()
            .expect("run");
        assert!(!out.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
