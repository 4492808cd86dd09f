//! Point reads and checks are linearizable with respect to writes, across kill -9: a read
//! never shows a write that a crash then takes back, nor misses one that was acknowledged.
//!
//! Concurrent clients add (with and without merge), delete, read and check a few contended
//! task-manager ids on the real daemon, and as many readers only read and check them (a
//! read shows a write it should not only in the moment between the write's transaction
//! and its flush, so the more reads, the more often one lands there). Meanwhile a nemesis
//! kills the daemon (SIGKILL) after a random 20–150 ms of load and restarts it on the same
//! data dir. Every op is recorded with the times it was sent and answered; the checker
//! ([`checker`]) then searches each id's history for an order of its ops that respects
//! real time and a sequential model of one item. The items are permanent, so time does not
//! enter the model.
//!
//! Crash semantics: an op with no usable answer (its connection was cut, it timed out, or
//! it got a 5xx) may have taken effect or not, but not after its daemon died; one that
//! could not connect (the daemon was already dead) did not happen and is not recorded.
//! Clients learn each new daemon's address (it binds port 0) once it is ready. The clients
//! and the judging of their history are [`clients`]'s, shared with the replicas' test
//! (`etcd_replicas_linearizability.rs`).
//!
//! The defaults fit a plain `cargo test` on a small machine. For a longer campaign, set:
//!
//! - `BLOCKLISTD_LIN_KILLS`: how many kills (default 100; 30 on etcd, where each restart waits
//!   out the killed writer's lease),
//! - `BLOCKLISTD_LIN_CLIENTS`: clients that write and read (default 8),
//! - `BLOCKLISTD_LIN_READERS`: clients that only read and check (default 8),
//! - `BLOCKLISTD_LIN_IDS`: task-manager ids they share (default 4),
//! - `BLOCKLISTD_LIN_VIOLATIONS`: how many violations of each kind (across a kill, and
//!   without one) to look for per id (default 5; each costs searches of the history up to
//!   it, and the search stops after 20 s in all),
//! - `BLOCKLISTD_LIN_SEED`: the seed of the clients' choices and the kill delays (a run is
//!   not replayable, its timing is the machine's; the seed is printed),
//! - `BLOCKLISTD_LIN_CHECK_SECS`: how long the checker may search one id's history (default
//!   60; a history it cannot decide in time fails the test),
//!
//! for example `BLOCKLISTD_LIN_KILLS=1000 cargo test --test linearizability -- --nocapture`.
//! A violation prints witnesses: a few of the offending id's ops, from a moment no op was
//! open, that no order explains, with the kills between them. The whole history of an id
//! that fails or is undecided goes to files under the target's tmp dir, rendered and as
//! JSON; `BLOCKLISTD_LIN_REPLAY=<the .json>` checks that history again instead of running
//! the daemons.

#[path = "linearizability/checker.rs"]
mod checker;
#[path = "linearizability/clients.rs"]
mod clients;
mod common;

use std::time::{Duration, Instant};

use clients::{seed, setting, Clients, Rng, Saved, Target};
use common::{on_etcd, Daemon, Workspace, DEADLINE};
use reqwest::StatusCode;

/// How long the clients run against each daemon before it is killed.
const LOAD: std::ops::Range<u64> = 20..150;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn point_reads_and_checks_are_linearizable_across_kill_9() {
    // On etcd each restart waits out the killed writer's lease (2 s).
    let kills = setting("BLOCKLISTD_LIN_KILLS", if on_etcd() { 30 } else { 100 }) as usize;
    let (writers, readers) = (
        setting("BLOCKLISTD_LIN_CLIENTS", 8) as usize,
        setting("BLOCKLISTD_LIN_READERS", 8) as usize,
    );
    let ids = setting("BLOCKLISTD_LIN_IDS", 4) as usize;
    let violations = setting("BLOCKLISTD_LIN_VIOLATIONS", 5) as usize;
    if let Some(saved) = Saved::from_env() {
        saved.assert_linearizable(violations);
        return;
    }
    let seed = seed();
    println!(
        "BLOCKLISTD_LIN_SEED={seed} kills={kills} clients={writers} readers={readers} ids={ids}"
    );
    let mut ws = Workspace::new();
    let mut daemon = start(&mut ws).await;
    let target = Target::of;
    let clients = Clients::spawn(writers, readers, ids, seed, vec![target(0, &daemon)], None);

    // The nemesis: load, kill -9, restart on the same data dir, again and again.
    let mut rng = Rng(seed);
    let mut ends = Vec::new();
    for incarnation in 1..=kills {
        tokio::time::sleep(Duration::from_millis(rng.in_range(LOAD))).await;
        tokio::task::block_in_place(|| daemon.kill9());
        ends.push(clients.now());
        clients.targets(Vec::clear);
        daemon = start(&mut ws).await;
        let up = target(incarnation, &daemon);
        clients.targets(|targets| targets.push(up));
    }
    tokio::time::sleep(Duration::from_millis(rng.in_range(LOAD))).await;
    let ids = clients.ids().to_vec();
    let base = clients.base;
    let mut history = clients.stop(Target::of(kills, &daemon)).await;
    let wall = base.elapsed();
    let exit = tokio::task::block_in_place(|| daemon.terminate());
    ends.push(base.elapsed());
    assert!(exit.success(), "the last daemon stopped with {exit}");
    history.bound_cut_ops(|op| checker::end_of_daemon(op.invoke, &ends));
    history.summarize(kills, wall);
    let (problems, _) = tokio::task::block_in_place(|| ws.inspect());
    if !problems.is_empty() {
        println!("verify found: {problems:?}");
    }
    history.assert_linearizable(&ids, &checker::daemon_ends(&ends), violations);
    assert!(problems.is_empty(), "verify found: {problems:?}");
}

/// Starts a daemon on the workspace's data dir and waits until it is ready.
async fn start(ws: &mut Workspace) -> Daemon {
    let daemon = tokio::task::block_in_place(|| ws.start(&[]));
    let http = clients::http_client();
    let url = daemon.url("/readyz");
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Ok(resp) = http.get(&url).send().await {
            if resp.status() == StatusCode::OK {
                return daemon;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the daemon was not ready in time; log:\n{}",
            daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
