//! A rolling upgrade of etcd under the blocklist, as etcd documents it: three members on
//! the newest 3.5 patch (3.5.32 or later is etcd's precondition for 3.6), three daemons on
//! one prefix under a load of writes and reads spread over all three, then each member in
//! turn stopped (SIGTERM) and started again on 3.6 on its data dir; during the middle
//! step, while that member is down, the daemons are restarted one at a time too (SIGTERM,
//! then a new daemon on the same flags). Proven:
//! - no acknowledged write lost and no read older than an acknowledged write: every op is
//!   checked with the linearizability checker ([`checker`]);
//! - no request failed beyond its bounded retries: the clients send a call that got no
//!   usable answer again, to any daemon, for up to [`RETRY_FOR`]
//!   ([`Clients::spawn`]), and none ran out;
//! - `/readyz` is truthful throughout: a daemon that answers it 200 answers the read sent
//!   right after it, and after each step every daemon is ready and names each member's new
//!   version in `etcdVersions`.
//!
//! Built with the `etcd` feature only (`cargo test --features etcd`): its client's build
//! needs `protoc`.
#![cfg(feature = "etcd")]

#[path = "linearizability/checker.rs"]
mod checker;
// Shared with the linearizability suites, each of which uses a part.
#[allow(dead_code)]
#[path = "linearizability/clients.rs"]
mod clients;
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use checker::{Call, Fault};
use clients::{http_client, seed, send, setting, Clients, Sent, Target};
use common::*;

/// How long a client keeps sending a call again that got no usable answer: a caller's
/// bounded retries (the daemons answer 503 with `Retry-After: 1` while they cannot serve).
const RETRY_FOR: Duration = Duration::from_secs(5);

/// How long after it was sent a cut-off write may still take effect: as in
/// `etcd_replicas_linearizability.rs` (a writer commits it within its etcd call deadline
/// and a pause shorter than its lease, or never), twice that.
const LINGER: Duration = Duration::from_secs(12);

/// How long the load runs between steps.
const LOAD: Duration = Duration::from_secs(2);

/// The daemons up, as the clients and the readiness prober know them.
type Up = Arc<Mutex<Vec<Target>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_etcd_upgrade_under_load_loses_nothing_and_reads_stay_linearizable() {
    let test = "etcd_upgrade 3.5 to 3.6";
    let (Some(old), Some(new)) = (
        EtcdRelease::required("3.5", test),
        EtcdRelease::required("3.6", test),
    ) else {
        return;
    };
    let _alone = ONE_AT_A_TIME.lock().await;
    let seed = seed();
    let (writers, readers) = (
        setting("BLOCKLISTD_LIN_CLIENTS", 4) as usize,
        setting("BLOCKLISTD_LIN_READERS", 4) as usize,
    );
    let ids = setting("BLOCKLISTD_LIN_IDS", 4) as usize;
    println!(
        "BLOCKLISTD_LIN_SEED={seed}, etcd {} to {}",
        old.version(),
        new.version()
    );

    let mut cluster = EtcdCluster::start_release(&old, 3);
    let ws = Workspace::new();
    let mut flags = cluster.daemon_flags("/t/", LEASE_SECS, 1_000);
    flags.extend(["--forward-wait-ms", "1000"].map(str::to_owned));
    let (writer, replicas) = three_daemons(&ws, &flags).await;
    let mut daemons: Vec<(usize, Daemon)> =
        [writer].into_iter().chain(replicas).enumerate().collect();
    let up: Up = Arc::new(Mutex::new(
        daemons.iter().map(|(n, d)| Target::of(*n, d)).collect(),
    ));
    let clients = Clients::spawn(
        writers,
        readers,
        ids,
        seed,
        up.lock().unwrap().clone(),
        Some(RETRY_FOR),
    );
    let (stop_probing, prober) = probe_readiness(up.clone());
    let mut faults: Vec<Fault> = Vec::new();
    let mut started = daemons.len();

    tokio::time::sleep(LOAD).await;
    for member in 0..3 {
        faults.push(Fault {
            at: clients.now(),
            what: format!("etcd member m{member} stopped (SIGTERM)"),
        });
        tokio::task::block_in_place(|| cluster.stop(member));
        if member == 1 {
            // The middle step: the daemons' own rolling restart, with one member down and
            // the other two on different releases.
            for slot in 0..daemons.len() {
                let (gone, daemon) = daemons.remove(slot);
                let set = |targets: &mut Vec<Target>| targets.retain(|t| t.incarnation != gone);
                clients.targets(set);
                set(&mut up.lock().unwrap());
                faults.push(Fault {
                    at: clients.now(),
                    what: format!("d{gone} stopped (SIGTERM), restarted as d{started}"),
                });
                let exit = tokio::task::block_in_place(|| daemon.terminate());
                assert!(exit.success(), "d{gone} stopped with {exit}");
                let daemon = tokio::task::block_in_place(|| spawn_numbered(&ws, &flags, started));
                daemon.ready_within(DEADLINE).await.unwrap_or_else(|body| {
                    panic!("d{started} not ready: {body}\n{}", daemon.log_text())
                });
                let target = Target::of(started, &daemon);
                clients.targets(|targets| targets.push(target));
                up.lock().unwrap().push(target);
                daemons.insert(slot, (started, daemon));
                started += 1;
                tokio::time::sleep(LOAD / 2).await;
            }
        }
        tokio::task::block_in_place(|| cluster.start_on(member, &new));
        faults.push(Fault {
            at: clients.now(),
            what: format!("etcd member m{member} started on {}", new.version()),
        });
        for (n, daemon) in &daemons {
            every_member_seen(&cluster, *n, daemon).await;
        }
        tokio::time::sleep(LOAD).await;
    }

    for member in 0..3 {
        assert_eq!(
            cluster.member_version(member).as_deref(),
            Some(new.version().as_str()),
            "m{member}"
        );
    }
    let not_truthful = {
        let _ = stop_probing.send(true);
        prober.await.expect("the prober")
    };
    let wall = clients.now();
    let ids = clients.ids().to_vec();
    let last = Target::of(daemons[0].0, &daemons[0].1);
    let mut history = clients.stop(last).await;
    history.bound_cut_ops(|op| op.invoke + LINGER);
    history.summarize(faults.len(), wall);
    assert!(
        history.failed.is_empty(),
        "{} calls failed beyond {RETRY_FOR:?} of retries:\n{}",
        history.failed.len(),
        history.failed.join("\n")
    );
    assert!(
        not_truthful.is_empty(),
        "/readyz said ready and the next read failed:\n{}",
        not_truthful.join("\n")
    );
    history.assert_linearizable(&ids, &faults, 5);
}

/// Waits until daemon `n` is ready and its `/readyz` names, for every member, the version
/// that member reports (the daemon reads them every 10 s), with no warning (3.5.36 and
/// 3.6 both have etcd's fixes).
async fn every_member_seen(cluster: &EtcdCluster, n: usize, daemon: &Daemon) {
    let members = cluster.endpoints();
    let wanted: Vec<(String, String)> = members
        .split(',')
        .enumerate()
        .map(|(i, url)| {
            let version = cluster.member_version(i).expect("a member that answers");
            (url.to_owned(), version)
        })
        .collect();
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let (status, body) = daemon.get("/readyz").await;
        let seen = wanted
            .iter()
            .all(|(url, version)| body["etcdVersions"][url] == version.as_str());
        if status.is_success() && seen {
            assert!(body.get("warning").is_none(), "d{n}: {body}");
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "d{n} does not show {wanted:?}: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Polls every daemon up: each `/readyz` that answers 200 is followed at once by a read
/// through the same daemon, which must be answered. Returns the stop switch and the task,
/// which ends with each time a daemon said ready and then failed the read.
fn probe_readiness(
    up: Up,
) -> (
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<Vec<String>>,
) {
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(async move {
        let http = http_client();
        let mut not_truthful = Vec::new();
        let mut probes = 0_usize;
        while !*stopped.borrow() {
            let targets = up.lock().unwrap().clone();
            for target in targets {
                let ready = http.get(target.url("/readyz")).send().await;
                if !ready.is_ok_and(|r| r.status().is_success()) {
                    continue;
                }
                probes += 1;
                if let Sent::Cut(why) = send(&http, target, "tm-0", &Call::Check).await {
                    // A daemon taken out of `up` is being stopped on purpose: its
                    // readiness was read before its SIGTERM, and its read cut by it.
                    if !up.lock().unwrap().contains(&target) {
                        continue;
                    }
                    not_truthful.push(format!(
                        "d{} was ready, then answered a check: {why}",
                        target.incarnation
                    ));
                }
            }
            let _ = tokio::time::timeout(Duration::from_millis(250), stopped.changed()).await;
        }
        println!("{probes} readiness probes answered 200 and followed by a read");
        not_truthful
    });
    (stop, task)
}
