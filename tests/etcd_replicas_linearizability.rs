//! Point reads and checks are linearizable across replicas: three daemons on one prefix of
//! a three-member etcd cluster, clients sending each op to any of them at random, while a
//! nemesis kills (SIGKILL, then a restart) and pauses (SIGSTOP past the lease, or not) the
//! daemons — the writer more often than its share — and kills etcd members, the leader
//! among them, one at a time. Every op is checked with the single daemon's checker
//! ([`checker`], [`clients`]): a read through any replica never shows less than a write
//! acknowledged before it began, nor a write that did not take.
//!
//! Cut-off semantics differ from one daemon's: a write cut off at a replica (its connection
//! cut by a kill, a timeout, a 503) may still reach the writer, or be in a writer's
//! transaction etcd has not committed yet, after the daemon the client spoke to died. It
//! may take effect until [`LINGER`] after it was sent, or never.
//!
//! The defaults fit CI. For a longer campaign, set `BLOCKLISTD_LIN_FAULTS` (default 12),
//! and as in `linearizability.rs` `BLOCKLISTD_LIN_CLIENTS`, `BLOCKLISTD_LIN_READERS`,
//! `BLOCKLISTD_LIN_IDS`, `BLOCKLISTD_LIN_VIOLATIONS`, `BLOCKLISTD_LIN_SEED`,
//! `BLOCKLISTD_LIN_CHECK_SECS` and `BLOCKLISTD_LIN_REPLAY`, e.g.
//! `BLOCKLISTD_LIN_FAULTS=200 cargo test --features etcd --test etcd_replicas_linearizability
//! -- --nocapture`.
//!
//! Built with the `etcd` feature only (`cargo test --features etcd`): its client's build
//! needs `protoc`.
#![cfg(feature = "etcd")]

#[path = "linearizability/checker.rs"]
mod checker;
#[path = "linearizability/clients.rs"]
mod clients;
mod common;

use std::time::Duration;

use checker::Fault;
use clients::{seed, setting, Clients, Rng, Saved, Target};
use common::*;

/// How long after it was sent a cut-off write may still take effect. A write takes effect
/// only in a writer's transaction, fenced by its lease: it reaches a writer within
/// `--forward-wait-ms` (1 s here) or is never sent; a writer that has it commits it within
/// its etcd call deadline (1 s), after a pause shorter than its lease (2 s) at most, and a
/// writer paused longer commits nothing more. Twice that sum.
const LINGER: Duration = Duration::from_secs(12);

/// How long the clients run between faults, in milliseconds.
const LOAD: std::ops::Range<u64> = 500..2_000;

/// How long a daemon stays paused (SIGSTOP), in milliseconds: shorter than the lease, and
/// longer (another daemon takes over).
const PAUSE: std::ops::Range<u64> = 500..3_500;

/// How long an etcd member stays dead, in milliseconds.
const MEMBER_DOWN: std::ops::Range<u64> = 500..2_000;

/// One of the three daemons, as the nemesis knows it.
struct Slot {
    incarnation: usize,
    daemon: Daemon,
}

impl Slot {
    fn target(&self) -> Target {
        Target::of(self.incarnation, &self.daemon)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_through_any_replica_are_linearizable_under_faults() {
    let faults_wanted = setting("BLOCKLISTD_LIN_FAULTS", 12) as usize;
    let (writers, readers) = (
        setting("BLOCKLISTD_LIN_CLIENTS", 6) as usize,
        setting("BLOCKLISTD_LIN_READERS", 6) as usize,
    );
    let ids = setting("BLOCKLISTD_LIN_IDS", 4) as usize;
    let violations = setting("BLOCKLISTD_LIN_VIOLATIONS", 5) as usize;
    if let Some(saved) = Saved::from_env() {
        saved.assert_linearizable(violations);
        return;
    }
    let seed = seed();
    println!(
        "BLOCKLISTD_LIN_SEED={seed} faults={faults_wanted} clients={writers} readers={readers} \
         ids={ids}"
    );
    let ws = Workspace::new();
    let Some((mut cluster, mut flags)) =
        tls_cluster(&ws, "etcd_replicas_linearizability", LEASE_SECS, 1_000)
    else {
        return;
    };
    flags.extend(["--forward-wait-ms", "1000"].map(str::to_owned));
    let (writer, [first, second]) = three_daemons(&ws, &flags).await;
    let mut slots: Vec<Slot> = [writer, first, second]
        .into_iter()
        .enumerate()
        .map(|(incarnation, daemon)| Slot {
            incarnation,
            daemon,
        })
        .collect();
    let clients = Clients::spawn(
        writers,
        readers,
        ids,
        seed,
        slots.iter().map(Slot::target).collect(),
        None,
    );

    let mut rng = Rng(seed);
    let mut faults: Vec<Fault> = Vec::new();
    let mut started = slots.len();
    while faults.len() < faults_wanted {
        tokio::time::sleep(Duration::from_millis(rng.in_range(LOAD))).await;
        // The writer half the time, any daemon otherwise.
        let writer = match rng.below(2) {
            0 => writer_slot(&slots).await,
            _ => None,
        };
        let slot = writer.unwrap_or_else(|| rng.below(3) as usize);
        let role = if writer.is_some() {
            "the writer"
        } else {
            "a daemon"
        };
        let at = clients.now();
        match rng.below(3) {
            0 => {
                let old = slots.remove(slot);
                let gone = old.incarnation;
                clients.targets(|targets| targets.retain(|t| t.incarnation != gone));
                tokio::task::block_in_place(|| old.daemon.kill9());
                let daemon = tokio::task::block_in_place(|| spawn_numbered(&ws, &flags, started));
                faults.push(Fault {
                    at,
                    what: format!("d{gone} ({role}) killed (kill -9), restarted as d{started}"),
                });
                let new = Slot {
                    incarnation: started,
                    daemon,
                };
                clients.targets(|targets| targets.push(new.target()));
                slots.insert(slot, new);
                started += 1;
            }
            1 => {
                let paused = Duration::from_millis(rng.in_range(PAUSE));
                let Slot {
                    incarnation,
                    daemon,
                } = &slots[slot];
                signal(daemon.pid(), "-STOP");
                faults.push(Fault {
                    at,
                    what: format!("d{incarnation} ({role}) paused (SIGSTOP) for {paused:?}"),
                });
                tokio::time::sleep(paused).await;
                signal(daemon.pid(), "-CONT");
            }
            _ => {
                let member = match rng.below(2) {
                    0 => tokio::task::block_in_place(|| cluster.leader()),
                    _ => None,
                };
                let which = if member.is_some() {
                    "the leader"
                } else {
                    "a member"
                };
                let member = member.unwrap_or_else(|| rng.below(3) as usize);
                cluster.kill(member);
                faults.push(Fault {
                    at,
                    what: format!("etcd member m{member} ({which}) killed"),
                });
                tokio::time::sleep(Duration::from_millis(rng.in_range(MEMBER_DOWN))).await;
                // Back and healthy before the next fault, which may kill another member.
                tokio::task::block_in_place(|| cluster.restart_all());
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(rng.in_range(LOAD))).await;
    let ids = clients.ids().to_vec();
    let wall = clients.now();
    let last = &slots[0];
    let mut history = clients.stop(last.target()).await;
    history.bound_cut_ops(|op| op.invoke + LINGER);
    history.summarize(faults.len(), wall);
    history.assert_linearizable(&ids, &faults, violations);
}

/// Which slot's daemon says it is the writer; `None` during an election. A daemon that
/// does not answer has stopped by itself: the test fails with its log.
async fn writer_slot(slots: &[Slot]) -> Option<usize> {
    for (n, slot) in slots.iter().enumerate() {
        let answer = slot
            .daemon
            .client
            .get(slot.daemon.url("/readyz"))
            .send()
            .await;
        let Ok(answer) = answer else {
            panic!(
                "d{} stopped by itself; its log:\n{}",
                slot.incarnation,
                slot.daemon.log_text()
            );
        };
        let ok = answer.status().is_success();
        let body: serde_json::Value = answer.json().await.unwrap_or_default();
        if ok && body["etcd"] == "writer" {
            return Some(n);
        }
    }
    None
}
