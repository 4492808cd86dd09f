//! The daemon knows which etcd it stands on: each member's version, read when it starts
//! (and every 10 s), in `/readyz` and `blocklist_etcd_member_version`; a member on a
//! release without etcd's fixes for linearizable reads and the watch (Debian's 3.4.23, say)
//! is warned about, and `--etcd-require-fixed-version` refuses to start on it.
//!
//! Each test runs the release it names, whatever `BLOCKLISTD_TEST_ETCD` chose: 3.4 is
//! Debian's etcd-server, 3.6 the build of `tests/servers/etcd-3.6`.
//!
//! Built with the `etcd` feature only (`cargo test --features etcd`): its client's build
//! needs `protoc`.
#![cfg(feature = "etcd")]

mod common;

use std::ffi::OsStr;

use common::*;
use reqwest::StatusCode;

/// A one-member cluster on `release`, and a daemon on it with `extra` flags, once it
/// writes.
async fn daemon_on(release: &EtcdRelease, ws: &Workspace, extra: &[&str]) -> (EtcdCluster, Daemon) {
    let cluster = EtcdCluster::start_release(release, 1);
    let mut flags = cluster.daemon_flags("/t/", 2, 1_000);
    flags.extend(extra.iter().map(|f| (*f).to_owned()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let log = ws.tmp.path().join("daemon.log");
    let daemon = Daemon::spawn(&ws.data_dir(), &log, &flags).listening();
    daemon.writer_within(DEADLINE).await.expect("the writer");
    (cluster, daemon)
}

/// Checks that `daemon` is ready (a warning is no unreadiness) and reports `member` on
/// `version`, with or without the fixes, in `/readyz` and the metric; returns `/readyz`'s
/// body.
async fn reported(daemon: &Daemon, member: &str, version: &str, fixed: bool) -> serde_json::Value {
    let (status, body) = daemon.get("/readyz").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["etcdVersions"][member], version, "{body}");
    let metric = format!(
        r#"blocklist_etcd_member_version{{member="{member}",version="{version}",fixed="{fixed}"}}"#
    );
    assert_eq!(daemon.metric(&metric).await, 1.0, "{metric}");
    body
}

#[tokio::test(flavor = "multi_thread")]
async fn a_member_without_the_fixes_is_named_in_readyz_the_metric_and_the_log() {
    let Some(release) = EtcdRelease::required("3.4", "etcd_versions 3.4 warning") else {
        return;
    };
    let version = release.version();
    let ws = Workspace::new();
    let (cluster, daemon) = daemon_on(&release, &ws, &[]).await;
    let member = cluster.endpoints();

    let body = reported(&daemon, &member, &version, false).await;
    let warning = body["warning"].as_str().unwrap_or_default();
    assert!(
        warning.contains(&format!("{member} runs etcd {version}")) && warning.contains("3.4.42"),
        "{body}"
    );
    let log = daemon.log_text();
    assert!(
        log.contains("WARN") && log.contains("lacks etcd's fixes") && log.contains(&version),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn require_fixed_version_refuses_to_start_on_a_member_without_the_fixes() {
    let Some(release) = EtcdRelease::required("3.4", "etcd_versions 3.4 refusal") else {
        return;
    };
    let cluster = EtcdCluster::start_release(&release, 1);
    let ws = Workspace::new();
    let mut args = vec![
        "--listen".to_owned(),
        "127.0.0.1:0".to_owned(),
        "--allow-unauthenticated".to_owned(),
        "--data-dir".to_owned(),
        ws.data_dir().display().to_string(),
        "--etcd-require-fixed-version".to_owned(),
    ];
    args.extend(cluster.daemon_flags("/t/", 2, 1_000));
    let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    let (status, stderr) = run_to_exit(&args);
    assert!(!status.success(), "it started:\n{stderr}");
    assert!(
        stderr.contains("--etcd-require-fixed-version")
            && stderr.contains(&format!("runs etcd {}", release.version())),
        "{stderr}"
    );
    // Nothing was written: no writer key, no log.
    let keys = cluster.etcdctl(&["get", "/t/", "--prefix", "--keys-only"]);
    assert_eq!(keys.trim(), "", "{keys}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_member_with_the_fixes_is_reported_without_a_warning() {
    let Some(release) = EtcdRelease::required("3.6", "etcd_versions 3.6") else {
        return;
    };
    let version = release.version();
    let ws = Workspace::new();
    let (cluster, daemon) = daemon_on(&release, &ws, &["--etcd-require-fixed-version"]).await;
    let member = cluster.endpoints();
    let body = reported(&daemon, &member, &version, true).await;
    assert!(body.get("warning").is_none(), "{body}");
}
