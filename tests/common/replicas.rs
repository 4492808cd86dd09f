//! Three daemons on one prefix of a three-member etcd cluster of the test's own: the
//! writer and two replicas, with TLS everywhere — etcd serves its clients over TLS only and
//! requires their certificates ([`EtcdCluster::start_tls`]), and the daemons serve https
//! and send requests on to the writer over https ([`tls_flags`]).

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use super::{item, Ca, Daemon, EtcdCluster, Issued, Workspace, DEADLINE};

/// The writer's lease in the replicas' tests: how long a dead writer holds the prefix.
pub const LEASE_SECS: u64 = 2;

/// Held by each replicas test for its whole run: each starts three etcd members and three
/// daemons and loads them, and several of those at once on two cores starve etcd past its
/// deadlines.
pub static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The CA of the daemons' certificates in this test process, and the one certificate (for
/// 127.0.0.1 and localhost) every daemon serves and presents to the writer.
static DAEMONS: LazyLock<(Ca, Issued)> = LazyLock::new(|| {
    let ca = Ca::new("blocklistd test daemons' CA");
    let daemon = ca.daemon(&["127.0.0.1", "localhost"]);
    (ca, daemon)
});

/// The flags of a daemon of `ws` that serves https and sends requests on over https, each
/// daemon's certificate verified by [`DAEMONS`]' CA.
pub fn tls_flags(ws: &Workspace) -> Vec<String> {
    let (ca, daemon) = &*DAEMONS;
    let (cert, key) = daemon.write(ws.tmp.path(), "daemon");
    let ca = ca.write(ws.tmp.path(), "daemons-ca");
    [
        ("--tls-cert", cert),
        ("--tls-key", key),
        ("--tls-peer-ca", ca),
    ]
    .into_iter()
    .flat_map(|(flag, path)| [flag.to_owned(), path.display().to_string()])
    .collect()
}

/// The CA of the daemons' certificates ([`tls_flags`]).
pub fn daemons_ca() -> &'static Ca {
    &DAEMONS.0
}

/// A client that trusts the daemons' certificates ([`tls_flags`]), and plain HTTP.
pub fn trusting_daemons() -> reqwest::ClientBuilder {
    let ca = reqwest::Certificate::from_pem(DAEMONS.0.pem.as_bytes()).expect("the CA");
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(ca)
}

/// Daemon number `n` on the workspace's data dir, with `flags`, once it listens; its log is
/// `daemon-{n}.log` in the workspace. With `--tls-cert` among the flags, the helpers'
/// requests go over https.
pub fn spawn_numbered(ws: &Workspace, flags: &[String], n: usize) -> Daemon {
    let tls = flags.iter().any(|f| f == "--tls-cert");
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let log = ws.tmp.path().join(format!("daemon-{n}.log"));
    let daemon = Daemon::spawn(&ws.data_dir(), &log, &flags).listening();
    if tls {
        let client = trusting_daemons()
            .timeout(DEADLINE)
            .build()
            .expect("client");
        let streams = trusting_daemons().build().expect("client");
        daemon.over_https(client, streams)
    } else {
        daemon
    }
}

/// A three-member etcd cluster with TLS, and the flags of daemons on it under the prefix
/// `/t/` with TLS everywhere (lease `lease_secs`, each etcd call within `timeout_ms`).
pub fn tls_cluster(
    ws: &Workspace,
    test: &str,
    lease_secs: u64,
    timeout_ms: u64,
) -> Option<(EtcdCluster, Vec<String>)> {
    let cluster = EtcdCluster::start_tls(3, test)?;
    let mut flags = cluster.daemon_flags("/t/", lease_secs, timeout_ms);
    flags.extend(tls_flags(ws));
    Some((cluster, flags))
}

/// A three-member etcd cluster of the test's own, and on it the first daemon (the writer)
/// and two replicas with `extra` flags, each ready, TLS everywhere; the workspace holds
/// their logs.
pub async fn writer_and_replicas(
    test: &str,
    extra: &[&str],
) -> Option<(EtcdCluster, Workspace, Daemon, [Daemon; 2])> {
    let ws = Workspace::new();
    let (cluster, mut flags) = tls_cluster(&ws, test, LEASE_SECS, 1_000)?;
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
    add_acknowledged_by(&d.client, d, id).await;
}

/// [`add_acknowledged`], sent by `client` (a caller with a certificate, say).
pub async fn add_acknowledged_by(client: &reqwest::Client, d: &Daemon, id: &str) {
    let started = Instant::now();
    loop {
        let add =
            client
                .post(d.url("/blocklist/nodes"))
                .json(&json!([item(id, "MARK_BLOCKED", "c")]));
        let (status, body) = super::read(add.send().await.expect("an answer")).await;
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
