//! Three daemons on one prefix of a three-member etcd cluster of the test's own: the
//! writer and two replicas.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use super::{item, Daemon, EtcdCluster, Workspace, DEADLINE};

/// The writer's lease in the replicas' tests: how long a dead writer holds the prefix.
pub const LEASE_SECS: u64 = 2;

/// Held by each replicas test for its whole run: each starts three etcd members and three
/// daemons and loads them, and several of those at once on two cores starve etcd past its
/// deadlines.
pub static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Daemon number `n` on the workspace's data dir, with `flags`, once it listens; its log is
/// `daemon-{n}.log` in the workspace.
pub fn spawn_numbered(ws: &Workspace, flags: &[String], n: usize) -> Daemon {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let log = ws.tmp.path().join(format!("daemon-{n}.log"));
    Daemon::spawn(&ws.data_dir(), &log, &flags).listening()
}

/// A three-member etcd cluster of the test's own, and on it the first daemon (the writer)
/// and two replicas with `extra` flags, each ready; the workspace holds their logs.
pub async fn writer_and_replicas(
    test: &str,
    extra: &[&str],
) -> Option<(EtcdCluster, Workspace, Daemon, [Daemon; 2])> {
    let cluster = EtcdCluster::start(3, test)?;
    let ws = Workspace::new();
    let mut flags = cluster.daemon_flags("/t/", LEASE_SECS, 1_000);
    flags.extend(extra.iter().map(|f| (*f).to_owned()));
    let (writer, replicas) = three_daemons(&ws, &flags).await;
    Some((cluster, ws, writer, replicas))
}

/// Daemons 0, 1 and 2 with `flags`: the first once it is the writer, the others once they
/// are current replicas.
pub async fn three_daemons(ws: &Workspace, flags: &[String]) -> (Daemon, [Daemon; 2]) {
    let writer = spawn_numbered(ws, flags, 0);
    writer
        .writer_within(DEADLINE)
        .await
        .expect("the first daemon writes");
    let replicas = [spawn_numbered(ws, flags, 1), spawn_numbered(ws, flags, 2)];
    for replica in &replicas {
        replica
            .ready_within(DEADLINE)
            .await
            .expect("a current replica");
    }
    (writer, replicas)
}

/// Adds node `id` through `d`, retrying a 503 (an election) until it is acknowledged.
pub async fn add_acknowledged(d: &Daemon, id: &str) {
    let started = Instant::now();
    loop {
        let (status, body) = d
            .post("/blocklist/nodes", json!([item(id, "MARK_BLOCKED", "c")]))
            .await;
        if status == StatusCode::CREATED {
            return;
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{id}: {body}");
        assert!(
            started.elapsed() < DEADLINE,
            "{id} never acknowledged: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
