//! The named scenarios, and the ceilings and peer they are compared with.
//!
//! Each scenario starts what it needs (a fresh daemon on a temp dir, or the shared
//! 1M-item fixture), runs a warm-up and then one measured phase, and returns its rows.
//! Ceilings and peer figures are measured once per run, with the same client and
//! concurrency as the scenario they are compared with, and reused.
//!
//! Layout:
//! - this file: the scenario lists, [`Bench`] (its constructor, the dispatch by name) and
//!   the measuring helpers every scenario uses;
//! - `workers`: HTTP load workers (`Req`, `HttpWorker`, `http_workers`, `fresh_adds`,
//!   `fresh_batches`) and the
//!   result of an open-loop phase;
//! - `write`: `add`, `add-keyed`, `add-batch`, `merge-hot`;
//! - `read`: `check`, `list`, and the fixture the check scenarios ask (`CheckTarget`);
//! - `pages`: `list-pages`, the fixture walked in pages;
//! - `storm`: `check-under-storm`;
//! - `expire`: `expire` and the sweeper-lag histogram it reads from `/metrics`;
//! - `fixture`: the shared 1M-item fixture and the scenarios on it that only observe the
//!   daemon (`idle`, `restart`, `footprint`);
//! - `reference`: the ceilings and the Redis peer, measured once per run, and `ratio`;
//! - `etcd`: etcd's rows for `add` and `check`, measured once per run;
//! - `feed`: `feed`, the change feed's delivery to W subscribers, ours and etcd's watches;
//! - `failover`, `kube`, `kube-evacuation`, `alerts` (not part of `all`): the writer's
//!   failover on etcd; the Kubernetes bridge against a real kube-apiserver, its taints and
//!   membership, and its evacuation; the alert loop from a metric's change to a Node's
//!   taint, with real Prometheus and Alertmanager;
//! - `flink` (not part of `all`): the Flink watcher, from a task failure in a real Flink
//!   to the blocked task manager, and its cost polling 200 jobs (recorded payloads);
//! - `yarn` (not part of `all`): the YARN bridge against a stand-in ResourceManager of
//!   1,000 NodeManagers, from a block to its NodeManager's partition changed.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use hyper::StatusCode;

use crate::load::{self, Phase, Worker, MAX_OPS_PER_PHASE};
use crate::procstat::{self, CpuUse, CpuWindow};
use crate::report::{Role, Row};
use crate::server::{DaemonSpec, Server};
use crate::settings::Settings;

mod etcd;
mod expire;
mod failover;
mod feed;
mod fixture;
mod flink;
mod kube;
mod pages;
mod read;
mod reference;
mod storm;
mod workers;
mod write;
mod yarn;

use fixture::Fixture;
use reference::References;
use workers::{fresh_adds, http_workers, Paced};

/// Every scenario, in the order of the printed table.
pub const SCENARIOS: [&str; 13] = [
    "add",
    "add-keyed",
    "add-batch",
    "merge-hot",
    "feed",
    "check",
    "check-under-storm",
    "list",
    "list-pages",
    "expire",
    "idle",
    "restart",
    "footprint",
];

/// The order `all` runs them in: the fixture scenarios back to back so the 1M items are
/// loaded once (footprint right after loading; check-under-storm last, because its storm
/// adds items the others must not count).
pub const RUN_ORDER: [&str; 13] = [
    "add",
    "add-keyed",
    "add-batch",
    "merge-hot",
    "feed",
    "list",
    "expire",
    "check",
    "footprint",
    "list-pages",
    "idle",
    "restart",
    "check-under-storm",
];

const CREATED: &[StatusCode] = &[StatusCode::CREATED];

pub struct Bench {
    settings: Settings,
    daemon: DaemonSpec,
    work: tempfile::TempDir,
    runs: usize,
    refs: References,
    fixture: Option<Fixture>,
    /// The writers of the replicas the scenarios send to (`--via-replica`), kept running
    /// until the run ends.
    writers: Vec<Server>,
}

impl Bench {
    pub fn new(settings: Settings, daemon: DaemonSpec) -> Result<Bench, String> {
        let work = match &settings.work_dir {
            Some(dir) => tempfile::Builder::new()
                .prefix("blocklist-bench-")
                .tempdir_in(dir),
            None => tempfile::Builder::new()
                .prefix("blocklist-bench-")
                .tempdir(),
        }
        .map_err(|e| format!("temp dir: {e}"))?;
        Ok(Bench {
            settings,
            daemon,
            work,
            runs: 0,
            refs: References::default(),
            fixture: None,
            writers: Vec::new(),
        })
    }

    /// Runs one scenario and returns its rows (ours first, then ceiling and peer).
    pub async fn run(&mut self, scenario: &str) -> Result<Vec<Row>, String> {
        match scenario {
            "add" => self.add().await,
            "add-keyed" => self.add_keyed().await,
            "add-batch" => self.add_batch().await,
            "merge-hot" => self.merge_hot().await,
            "feed" => self.feed().await,
            "check" => self.check().await,
            "check-under-storm" => self.check_under_storm().await,
            "list" => self.list().await,
            "list-pages" => self.list_pages().await,
            "expire" => self.expire().await,
            "idle" => self.idle().await,
            "restart" => self.restart().await,
            "footprint" => self.footprint().await,
            "failover" => self.failover().await,
            "kube" => self.kube().await,
            "kube-evacuation" => self.kube_evacuation().await,
            "alerts" => self.alerts().await,
            "flink" => self.flink().await,
            "yarn" => self.yarn().await,
            other => Err(format!("unknown scenario {other:?}")),
        }
    }

    /// Runs one scenario; a failure becomes an `ours` row saying so (and is logged), so a
    /// run goes on past it. The flag says whether it failed.
    pub async fn run_or_row(&mut self, scenario: &str) -> (Vec<Row>, bool) {
        match self.run(scenario).await {
            Ok(rows) => (rows, false),
            Err(e) => {
                eprintln!("blocklist-bench: {scenario} failed: {e}");
                let mut row = Row::new(scenario, Role::Ours);
                row.note = format!("FAILED: {e}");
                (vec![row], true)
            }
        }
    }

    // ---- helpers ----

    fn fresh_dir(&mut self, name: &str) -> PathBuf {
        self.runs += 1;
        self.work.path().join(format!("{}-{name}", self.runs))
    }

    /// A daemon on a new, empty data dir.
    /// A new daemon on a new data dir; with `--via-replica`, a replica of it (the daemon
    /// itself, the writer, kept in `writers`), each once its `/readyz` answers 200.
    async fn fresh_daemon(&mut self, name: &str) -> Result<(Server, PathBuf), String> {
        let dir = self.fresh_dir(name);
        let log = dir.with_extension("log");
        let server = self.daemon.start(&dir, &log)?;
        if !self.settings.via_replica {
            return Ok((server, dir));
        }
        fixture::wait_ready(server.addr, "/readyz", Instant::now()).await?;
        let replica_dir = self.fresh_dir(&format!("{name}-replica"));
        let replica = self
            .daemon
            .start(&replica_dir, &replica_dir.with_extension("log"))?;
        fixture::wait_ready(replica.addr, "/readyz", Instant::now()).await?;
        self.writers.push(server);
        Ok((replica, dir))
    }

    fn warmup(&self) -> Duration {
        (self.settings.duration / 5).min(Duration::from_secs(1))
    }

    /// Before a measured phase: writes the machine's dirty pages back (`sync(2)`), then,
    /// with `--wait-quiet S`, waits up to S seconds for other processes to go quiet.
    ///
    /// The sync is for the daemon's fsyncs, which otherwise queue behind whatever else is
    /// waiting for the disk: right after `cargo build --release` (~100 MB of fresh
    /// binaries) the kernel's writeback stalled them for 40–75 ms, which was the whole of
    /// `add`'s p99 at half load (5.8–7.2 ms after a sync).
    async fn wait_quiet(&self, pids: &[u32]) {
        let _ = tokio::task::spawn_blocking(rustix::fs::sync).await;
        if self.settings.wait_quiet.is_zero() {
            return;
        }
        if !procstat::wait_quiet(pids, self.settings.wait_quiet).await {
            eprintln!(
                "blocklist-bench: the machine did not go quiet within {:?}; measuring anyway",
                self.settings.wait_quiet
            );
        }
    }

    /// Warm-up (unrecorded), then the measured phase with the CPU of `pids` over it.
    async fn measure<W: Worker>(&self, workers: Vec<W>, pids: &[u32]) -> (Vec<W>, Phase, CpuUse) {
        self.measure_for(workers, pids, self.settings.duration)
            .await
    }

    async fn measure_for<W: Worker>(
        &self,
        workers: Vec<W>,
        pids: &[u32],
        duration: Duration,
    ) -> (Vec<W>, Phase, CpuUse) {
        self.wait_quiet(pids).await;
        let (workers, _) = load::run(workers, self.warmup(), MAX_OPS_PER_PHASE).await;
        let window = CpuWindow::start(pids);
        let (workers, phase) = load::run(workers, duration, MAX_OPS_PER_PHASE).await;
        (workers, phase, window.stop())
    }

    /// An open-loop phase at half the rate `saturated` reached, with the same workers: the
    /// latency a client sees when the daemon is busy but not saturated (at saturation a
    /// closed loop of C connections has a mean latency of C ÷ rate, whatever the server).
    async fn paced_half<W: Worker>(&self, workers: Vec<W>, saturated: &Phase) -> Paced {
        self.paced(workers, saturated.ops_per_s() * 0.5).await
    }

    /// An open-loop phase at `rate` requests/s, with the same workers.
    async fn paced<W: Worker>(&self, workers: Vec<W>, rate: f64) -> Paced {
        let (_, phase) = load::run_paced(
            workers,
            self.settings.duration,
            MAX_OPS_PER_PHASE,
            Some(rate),
        )
        .await;
        Paced { rate, phase }
    }

    /// The single-item add load of `add`, against `server`, for `duration`.
    async fn add_phase(
        &self,
        server: &Server,
        duration: Duration,
    ) -> Result<(Phase, CpuUse), String> {
        let workers = http_workers(
            server.addr,
            self.settings.concurrency,
            fresh_adds("add", "/blocklist/taskmanagers", CREATED),
        )
        .await?;
        let (_, phase, cpu) = self.measure_for(workers, &[server.pid()], duration).await;
        Ok((phase, cpu))
    }
}

impl Bench {
    /// Keeps the run's temp dir (logs, data dirs) instead of deleting it at the end.
    pub fn keep_work_dir(&mut self) -> PathBuf {
        let work = std::mem::replace(
            &mut self.work,
            tempfile::tempdir().expect("a replacement temp dir"),
        );
        work.keep()
    }
}
