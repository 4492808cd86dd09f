//! The named scenarios, and the ceilings and peer they are compared with.
//!
//! Each scenario starts what it needs (a fresh daemon on a temp dir, or the shared
//! 1M-item fixture), runs a warm-up and then one measured phase, and returns its rows.
//! Ceilings and peer figures are measured once per run, with the same client and
//! concurrency as the scenario they are compared with, and reused.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use blocklistd::model::Kind;
use hyper::body::Bytes;
use hyper::{Method, StatusCode};

use crate::client::{expect_status, Http};
use crate::dataset::{self, ItemFn, Loaded, Registration};
use crate::load::{self, Phase, Rng, Worker, MAX_OPS_PER_PHASE};
use crate::procstat::{self, CpuUse, CpuWindow};
use crate::redis_peer::{self, Redis};
use crate::report::{Role, Row};
use crate::server::{DaemonSpec, Server};
use crate::{ceiling, Settings};

/// Every scenario, in the order of the printed table.
pub const SCENARIOS: [&str; 9] = [
    "add",
    "add-batch",
    "merge-hot",
    "check",
    "list",
    "expire",
    "idle",
    "restart",
    "footprint",
];

/// The order `all` runs them in: the fixture scenarios back to back so the 1M items are
/// loaded once (footprint right after loading, restart last because it kills the daemon).
pub const RUN_ORDER: [&str; 9] = [
    "add",
    "add-batch",
    "merge-hot",
    "list",
    "expire",
    "check",
    "footprint",
    "idle",
    "restart",
];

const ONE_HOUR_MS: i64 = 3_600_000;

/// Hot ids of `merge-hot`.
const HOT_IDS: u64 = 16;

/// Items per request of `add-batch`.
const BATCH_ITEMS: u64 = 100;

/// The concurrent listers of the `list` scenario's memory measurement.
const LISTERS: usize = 4;

/// How long `footprint` lets the loaded daemon sit idle before it reads RSS a second time
/// (`rss_settled_mb`): what an operator sees, once memory freed late is handed back.
const SETTLE: Duration = Duration::from_secs(3);

/// One request a worker is about to send, and the statuses that count as success.
struct Req {
    method: Method,
    path: String,
    body: Option<Bytes>,
    items: u64,
    ok: &'static [StatusCode],
}

/// A load worker on its own HTTP connection; `next` makes each request.
struct HttpWorker {
    http: Http,
    next: Box<dyn FnMut() -> Req + Send>,
}

impl Worker for HttpWorker {
    async fn call(&mut self) -> Result<u64, String> {
        let req = (self.next)();
        expect_status(
            self.http.send(req.method, &req.path, req.body).await?,
            req.ok,
        )?;
        Ok(req.items)
    }
}

async fn http_workers<F>(addr: SocketAddr, n: usize, mut make: F) -> Result<Vec<HttpWorker>, String>
where
    F: FnMut(usize) -> Box<dyn FnMut() -> Req + Send>,
{
    let mut workers = Vec::with_capacity(n);
    for w in 0..n {
        workers.push(HttpWorker {
            http: Http::connect(addr).await?,
            next: make(w),
        });
    }
    Ok(workers)
}

/// Single-item adds of fresh ids `{prefix}-{worker}-{seq}` to `path`, expecting `ok`.
fn fresh_adds(
    prefix: &'static str,
    path: &'static str,
    ok: &'static [StatusCode],
) -> impl FnMut(usize) -> Box<dyn FnMut() -> Req + Send> {
    move |w| {
        let mut seq = 0u64;
        Box::new(move || {
            seq += 1;
            Req {
                method: Method::POST,
                path: path.to_owned(),
                body: Some(dataset::one_item(
                    &format!("{prefix}-{w}-{seq}"),
                    "bench",
                    false,
                )),
                items: 1,
                ok,
            }
        })
    }
}

const CREATED: &[StatusCode] = &[StatusCode::CREATED];

/// The shared big dataset: `items` items (half task managers `tm-{even}`, half nodes
/// `node-{even}`), ending between one and two hours from now, plus registrations.
struct Fixture {
    server: Server,
    data_dir: PathBuf,
    items: usize,
    loaded: Loaded,
    /// Task managers `tm-0..registered` are registered (or meant to be, in fallback).
    registered: usize,
    registration: Option<Registration>,
}

/// The fixture's item `i`: task managers first, then nodes; ids are even numbers, so half
/// of the registered `tm-0..R` and of their nodes are blocked.
fn fixture_item(count: usize, base: i64) -> ItemFn {
    let half = count.div_ceil(2);
    Arc::new(move |i| {
        let end = base + ONE_HOUR_MS + (i as i64 * ONE_HOUR_MS / count.max(1) as i64);
        if i < half {
            (Kind::TaskManager, format!("tm-{}", 2 * i), end)
        } else {
            (Kind::Node, format!("node-{}", 2 * (i - half)), end)
        }
    })
}

/// An open-loop phase's result.
struct Paced {
    rate: f64,
    phase: Phase,
}

impl Paced {
    /// Adds the paced figures to `row`, with the p99 target checked at this load too.
    fn annotate(&self, row: &mut Row, p99_target_ms: f64) {
        let p99 = self.phase.ms(0.99);
        row.extra
            .insert("paced50_ops_s".into(), self.phase.ops_per_s());
        row.extra
            .insert("paced50_p50_ms".into(), self.phase.ms(0.5));
        row.extra.insert("paced50_p99_ms".into(), p99);
        row.target(
            format!("p99 ≤{p99_target_ms} ms at 50% load"),
            Some(p99 <= p99_target_ms && self.phase.errors == 0),
        );
        if self.phase.ops_per_s() < self.rate * 0.95 {
            row.add_note(&format!(
                "the open-loop phase reached only {:.0} of {:.0} ops/s",
                self.phase.ops_per_s(),
                self.rate
            ));
        }
    }
}

/// Reference rows measured once per run.
#[derive(Default)]
#[expect(
    clippy::option_option,
    reason = "the Redis rows: not measured yet, or measured and skipped (no redis-server)"
)]
struct References {
    http_post: Option<Row>,
    http_get: Option<Row>,
    store: Option<Row>,
    redis_add: Option<Option<Row>>,
    redis_check: Option<Option<Row>>,
    add_rate: Option<f64>,
}

pub struct Bench {
    settings: Settings,
    daemon: DaemonSpec,
    work: tempfile::TempDir,
    runs: usize,
    refs: References,
    fixture: Option<Fixture>,
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
        })
    }

    /// Runs one scenario and returns its rows (ours first, then ceiling and peer).
    pub async fn run(&mut self, scenario: &str) -> Result<Vec<Row>, String> {
        match scenario {
            "add" => self.add().await,
            "add-batch" => self.add_batch().await,
            "merge-hot" => self.merge_hot().await,
            "check" => self.check().await,
            "list" => self.list().await,
            "expire" => self.expire().await,
            "idle" => self.idle().await,
            "restart" => self.restart().await,
            "footprint" => self.footprint().await,
            other => Err(format!("unknown scenario {other:?}")),
        }
    }

    // ---- helpers ----

    fn fresh_dir(&mut self, name: &str) -> PathBuf {
        self.runs += 1;
        self.work.path().join(format!("{}-{name}", self.runs))
    }

    /// A daemon on a new, empty data dir.
    fn fresh_daemon(&mut self, name: &str) -> Result<(Server, PathBuf), String> {
        let dir = self.fresh_dir(name);
        let log = dir.with_extension("log");
        Ok((self.daemon.start(&dir, &log)?, dir))
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

    async fn start_redis(&mut self) -> Result<Option<Redis>, String> {
        if !self.settings.peer {
            return Ok(None);
        }
        let dir = self.fresh_dir("redis");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        Redis::start(&dir).await
    }

    fn peer_skipped(&self, scenario: &str) -> Row {
        let mut row = Row::new(scenario, Role::Peer);
        row.note = if self.settings.peer {
            redis_peer::NOT_INSTALLED.into()
        } else {
            "peer skipped: --no-peer".into()
        };
        row
    }

    // ---- ceilings and peer ----

    async fn http_ceiling_post(&mut self) -> Result<Row, String> {
        if let Some(row) = &self.refs.http_post {
            return Ok(row.clone());
        }
        let log = self.fresh_dir("http-ceiling").with_extension("log");
        let server = ceiling::spawn_http(&log)?;
        let workers = http_workers(
            server.addr,
            self.settings.concurrency,
            fresh_adds("ceiling", "/ceiling", CREATED),
        )
        .await?;
        let (_, phase, cpu) = self.measure(workers, &[server.pid()]).await;
        let mut row = Row::from_phase("add", Role::Ceiling, &phase, cpu, false);
        row.add_note("HTTP ceiling: empty axum POST handler (parses the JSON, answers 201)");
        self.refs.http_post = Some(row.clone());
        Ok(row)
    }

    /// The GET ceiling, saturated and then open-loop at `paced_rate` (the rate of ours'
    /// paced phase), so both p99s at that load sit side by side.
    async fn http_ceiling_get(&mut self, registered: u64, paced_rate: f64) -> Result<Row, String> {
        if let Some(row) = &self.refs.http_get {
            return Ok(row.clone());
        }
        let log = self.fresh_dir("http-ceiling").with_extension("log");
        let server = ceiling::spawn_http(&log)?;
        let workers = http_workers(server.addr, self.settings.concurrency, |w| {
            let mut rng = Rng::new(w as u64);
            Box::new(move || Req {
                method: Method::GET,
                path: format!("/ceiling/tm-{}", rng.below(registered)),
                body: None,
                items: 1,
                ok: &[StatusCode::OK],
            })
        })
        .await?;
        let (workers, phase, cpu) = self.measure(workers, &[server.pid()]).await;
        let paced = self.paced(workers, paced_rate).await.phase;
        let mut row = Row::from_phase("check", Role::Ceiling, &phase, cpu, false);
        row.extra.insert("paced_ops_s".into(), paced.ops_per_s());
        row.extra.insert("paced_p50_ms".into(), paced.ms(0.5));
        row.extra.insert("paced_p99_ms".into(), paced.ms(0.99));
        row.add_note("HTTP ceiling: empty axum GET handler (path param, small JSON); paced_* = open loop at ours' paced50 rate");
        self.refs.http_get = Some(row.clone());
        Ok(row)
    }

    async fn store_ceiling(&mut self) -> Result<Row, String> {
        if let Some(row) = &self.refs.store {
            return Ok(row.clone());
        }
        let dir = self.fresh_dir("store-ceiling");
        self.wait_quiet(&[]).await;
        let duration = self.settings.duration;
        let warmup = self.warmup();
        let (phase, cpu) = tokio::task::spawn_blocking(move || {
            // Warm-up on a scratch dir so the measured run starts from an empty store, like
            // the daemon's.
            let scratch = dir.with_extension("warmup");
            ceiling::store_ceiling(&scratch, warmup, MAX_OPS_PER_PHASE)?;
            let _ = std::fs::remove_dir_all(&scratch);
            let window = CpuWindow::start(&[]);
            let phase = ceiling::store_ceiling(&dir, duration, MAX_OPS_PER_PHASE)?;
            Ok::<_, String>((phase, window.stop()))
        })
        .await
        .map_err(|e| format!("store ceiling: {e}"))??;
        let ceiling::StorePhase { phase, split } = phase;
        let mut row = Row::from_phase("add-batch", Role::Ceiling, &phase, cpu, true);
        let per_tx = |d: Duration| d.as_secs_f64() * 1000.0 / phase.ops.max(1) as f64;
        row.extra.insert("tx_ms".into(), per_tx(split.transaction));
        row.extra.insert("flush_ms".into(), per_tx(split.flush));
        row.extra.insert("fsync_ms".into(), per_tx(split.fsync));
        row.extra.insert("encode_ms".into(), per_tx(split.encode));
        // The store runs inside the bench: its CPU is the bench's.
        row.server_cpu = Some(cpu.bench);
        row.server_cpu_us_per_op =
            Some(cpu.bench * cpu.wall_seconds * 1e6 / phase.items.max(1) as f64);
        row.bench_cpu = None;
        row.add_note(&format!(
            "store ceiling: sled directly, {} items per transaction + flush + fsync, one thread, \
             no HTTP; latency per transaction",
            ceiling::STORE_TX_ITEMS
        ));
        self.refs.store = Some(row.clone());
        Ok(row)
    }

    async fn redis_add(&mut self) -> Result<Option<Row>, String> {
        if let Some(row) = &self.refs.redis_add {
            return Ok(row.clone());
        }
        let row = match self.start_redis().await? {
            None => None,
            Some(redis) => {
                let mut workers = Vec::new();
                for worker in 0..self.settings.concurrency {
                    workers.push(redis_peer::AddWorker {
                        con: redis.connect().await?,
                        worker,
                        seq: 0,
                    });
                }
                let (_, phase, cpu) = self.measure(workers, &[redis.pid()]).await;
                let mut row = Row::from_phase("add", Role::Peer, &phase, cpu, false);
                row.add_note(
                    "Redis appendfsync always: MULTI; HSET; ZADD; EXEC per add, one connection per worker",
                );
                Some(row)
            }
        };
        self.refs.redis_add = Some(row.clone());
        Ok(row)
    }

    async fn redis_check(
        &mut self,
        items: usize,
        item: ItemFn,
        registered: u64,
    ) -> Result<Option<Row>, String> {
        if let Some(row) = &self.refs.redis_check {
            return Ok(row.clone());
        }
        let row = match self.start_redis().await? {
            None => None,
            Some(redis) => {
                redis.load(items, &*item).await?;
                let mut workers = Vec::new();
                for w in 0..self.settings.concurrency {
                    workers.push(redis_peer::CheckWorker {
                        con: redis.connect().await?,
                        rng: Rng::new(w as u64),
                        registered,
                    });
                }
                let (_, phase, cpu) = self.measure(workers, &[redis.pid()]).await;
                let mut row = Row::from_phase("check", Role::Peer, &phase, cpu, false);
                row.add_note(&format!(
                    "Redis HGET of a random registered task manager, {items} items stored"
                ));
                Some(row)
            }
        };
        self.refs.redis_check = Some(row.clone());
        Ok(row)
    }

    // ---- scenarios ----

    /// `add`: single-item POSTs with fresh ids on C connections, every reply durable.
    async fn add(&mut self) -> Result<Vec<Row>, String> {
        let (server, _dir) = self.fresh_daemon("add")?;
        let workers = http_workers(
            server.addr,
            self.settings.concurrency,
            fresh_adds("add", "/blocklist/taskmanagers", CREATED),
        )
        .await?;
        let (workers, phase, cpu) = self.measure(workers, &[server.pid()]).await;
        let paced = self.paced_half(workers, &phase).await;
        drop(server);
        let mut ours = Row::from_phase("add", Role::Ours, &phase, cpu, false);
        paced.annotate(&mut ours, 5.0);
        self.refs.add_rate = Some(phase.ops_per_s());
        let ceiling = self.http_ceiling_post().await?;
        let peer = self.redis_add().await?;
        ours.ratio_ceiling = ratio(ours.ops_per_s, ceiling.ops_per_s);
        ours.ratio_peer = peer
            .as_ref()
            .and_then(|p| ratio(ours.ops_per_s, p.ops_per_s));
        ours.target("≥0.5× ceiling", ours.ratio_ceiling.map(|r| r >= 0.5));
        ours.target("≥0.7× Redis", ours.ratio_peer.map(|r| r >= 0.7));
        ours.target("p99 ≤5 ms", ours.p99_ms.map(|p| p <= 5.0));
        ours.add_note(&format!(
            "{} connections, 1 item per POST",
            self.settings.concurrency
        ));
        Ok(vec![
            ours,
            ceiling,
            peer.unwrap_or_else(|| self.peer_skipped("add")),
        ])
    }

    /// `add-batch`: POSTs of 100 items on C/8 connections, in items/s.
    async fn add_batch(&mut self) -> Result<Vec<Row>, String> {
        let (server, _dir) = self.fresh_daemon("add-batch")?;
        let connections = (self.settings.concurrency / 8).max(1);
        let workers = http_workers(server.addr, connections, |w| {
            let mut seq = 0u64;
            Box::new(move || {
                let mut body = String::with_capacity(120 * BATCH_ITEMS as usize);
                body.push('[');
                for _ in 0..BATCH_ITEMS {
                    seq += 1;
                    dataset::push_item(
                        &mut body,
                        &format!("batch-{w}-{seq}"),
                        "bench",
                        None,
                        false,
                    );
                }
                body.push(']');
                Req {
                    method: Method::POST,
                    path: "/blocklist/taskmanagers".into(),
                    body: Some(Bytes::from(body)),
                    items: BATCH_ITEMS,
                    ok: CREATED,
                }
            })
        })
        .await?;
        let (_, phase, cpu) = self.measure(workers, &[server.pid()]).await;
        drop(server);
        let mut ours = Row::from_phase("add-batch", Role::Ours, &phase, cpu, true);
        let ceiling = self.store_ceiling().await?;
        ours.ratio_ceiling = ratio(ours.items_per_s, ceiling.items_per_s);
        ours.target(
            "≥0.7× store ceiling (items/s)",
            ours.ratio_ceiling.map(|r| r >= 0.7),
        );
        ours.add_note(&format!(
            "{connections} connections, {BATCH_ITEMS} items per POST; latency per request"
        ));
        Ok(vec![ours, ceiling])
    }

    /// `merge-hot`: C connections merging (allowMerge) into 16 hot ids.
    async fn merge_hot(&mut self) -> Result<Vec<Row>, String> {
        let (server, _dir) = self.fresh_daemon("merge-hot")?;
        let add_rate = if let Some(rate) = self.refs.add_rate {
            rate
        } else {
            // Run alone: measure `add` on this daemon first, for the ratio.
            let (phase, _) = self.add_phase(&server, self.settings.duration).await?;
            self.refs.add_rate = Some(phase.ops_per_s());
            phase.ops_per_s()
        };
        let mut http = Http::connect(server.addr).await?;
        for k in 0..HOT_IDS {
            expect_status(
                http.post(
                    "/blocklist/taskmanagers",
                    dataset::one_item(&format!("hot-{k}"), "seed", false),
                )
                .await?,
                &[
                    StatusCode::CREATED,
                    StatusCode::ACCEPTED,
                    StatusCode::CONFLICT,
                ],
            )?;
        }
        let workers = http_workers(server.addr, self.settings.concurrency, |w| {
            let mut rng = Rng::new(1000 + w as u64);
            Box::new(move || {
                // A few recurring causes, as detectors re-reporting do: the merged cause
                // stays bounded, while every merge moves the end (and the expiry entry).
                let id = format!("hot-{}", rng.below(HOT_IDS));
                let cause = format!("cause-{}", rng.below(4));
                Req {
                    method: Method::POST,
                    path: "/blocklist/taskmanagers".into(),
                    body: Some(dataset::one_item(&id, &cause, true)),
                    items: 1,
                    ok: &[StatusCode::ACCEPTED],
                }
            })
        })
        .await?;
        let (_, phase, cpu) = self.measure(workers, &[server.pid()]).await;
        let mut ours = Row::from_phase("merge-hot", Role::Ours, &phase, cpu, false);
        let vs_add = ratio(ours.ops_per_s, Some(add_rate));
        ours.extra.insert("vs_add".into(), vs_add.unwrap_or(0.0));
        ours.target("no errors", Some(phase.errors == 0));
        ours.target("≥0.5× add", vs_add.map(|r| r >= 0.5));
        ours.add_note(&format!(
            "{} connections, {HOT_IDS} hot ids, allowMerge; vs_add = ops/s ÷ add's",
            self.settings.concurrency
        ));
        Ok(vec![ours])
    }

    /// Loads the shared fixture if this run has not yet.
    async fn fixture(&mut self) -> Result<&mut Fixture, String> {
        if self.fixture.is_none() {
            let (server, data_dir) = self.fresh_daemon("fixture")?;
            let items = self.settings.items.max(2);
            let loaded = dataset::bulk_add(
                server.addr,
                items,
                fixture_item(items, blocklistd::clock::now_ms()),
            )
            .await?;
            eprintln!(
                "blocklist-bench: fixture: {} items loaded in {:.1} s ({:.0} items/s)",
                loaded.items,
                loaded.elapsed.as_secs_f64(),
                loaded.items_per_s()
            );
            self.fixture = Some(Fixture {
                server,
                data_dir,
                items,
                loaded,
                registered: items.min(10_000),
                registration: None,
            });
        }
        Ok(self.fixture.as_mut().expect("loaded above"))
    }

    /// `check`: effective checks of random registered task managers against the fixture.
    async fn check(&mut self) -> Result<Vec<Row>, String> {
        let concurrency = self.settings.concurrency;
        let fixture = self.fixture().await?;
        let registered = fixture.registered;
        let nodes = (registered / 10).max(1);
        if fixture.registration.is_none() {
            fixture.registration =
                Some(dataset::register(fixture.server.addr, registered, nodes).await?);
        }
        let (fallback, reg_note) = match fixture.registration.as_ref().expect("set above") {
            Registration::Done { count, elapsed } => (
                false,
                format!(
                    "{count} task managers registered on {nodes} nodes in {:.2} s",
                    elapsed.as_secs_f64()
                ),
            ),
            Registration::Unsupported(status) => (
                true,
                format!(
                    "FALLBACK: PUT /taskmanagers answered {status}, so these are point reads \
                     GET /blocklist/taskmanagers/{{id}} (200 or 404), not effective checks"
                ),
            ),
        };
        let (addr, pid, items) = (fixture.server.addr, fixture.server.pid(), fixture.items);
        let workers = http_workers(addr, concurrency, |w| {
            let mut rng = Rng::new(w as u64);
            Box::new(move || {
                let r = rng.below(registered as u64);
                if fallback {
                    Req {
                        method: Method::GET,
                        path: format!("/blocklist/taskmanagers/tm-{r}"),
                        body: None,
                        items: 1,
                        ok: &[StatusCode::OK, StatusCode::NOT_FOUND],
                    }
                } else {
                    Req {
                        method: Method::GET,
                        path: format!("/blocklist/check/taskmanagers/tm-{r}"),
                        body: None,
                        items: 1,
                        ok: &[StatusCode::OK],
                    }
                }
            })
        })
        .await?;
        let (workers, phase, cpu) = self.measure(workers, &[pid]).await;
        let paced = self.paced_half(workers, &phase).await;
        let mut ours = Row::from_phase("check", Role::Ours, &phase, cpu, false);
        paced.annotate(&mut ours, 2.0);
        let ceiling = self.http_ceiling_get(registered as u64, paced.rate).await?;
        let peer = self
            .redis_check(
                items,
                fixture_item(items, blocklistd::clock::now_ms()),
                registered as u64,
            )
            .await?;
        ours.ratio_ceiling = ratio(ours.ops_per_s, ceiling.ops_per_s);
        ours.ratio_peer = peer
            .as_ref()
            .and_then(|p| ratio(ours.ops_per_s, p.ops_per_s));
        ours.target("≥0.8× GET ceiling", ours.ratio_ceiling.map(|r| r >= 0.8));
        ours.target("p99 ≤2 ms", ours.p99_ms.map(|p| p <= 2.0));
        ours.add_note(&format!(
            "{concurrency} connections, {items} items blocked, random of {registered} task managers; {reg_note}"
        ));
        Ok(vec![
            ours,
            ceiling,
            peer.unwrap_or_else(|| self.peer_skipped("check")),
        ])
    }

    /// `list`: `GET /blocklist` of items/10 items, one request at a time; then [`LISTERS`]
    /// at once, for memory.
    async fn list(&mut self) -> Result<Vec<Row>, String> {
        let (server, _dir) = self.fresh_daemon("list")?;
        let count = (self.settings.items / 10).max(2);
        dataset::bulk_add(
            server.addr,
            count,
            fixture_item(count, blocklistd::clock::now_ms()),
        )
        .await?;
        let loaded_rss = procstat::rss_bytes(server.pid());
        let mut http = Http::connect(server.addr).await?;
        let (_, body) = expect_status(http.get("/blocklist").await?, &[StatusCode::OK])?;
        let listing: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| format!("listing is not JSON: {e}"))?;
        let listed = ["blockedTaskManagers", "blockedNodes"]
            .iter()
            .map(|k| listing[k].as_array().map_or(0, Vec::len))
            .sum::<usize>();
        if listed != count {
            return Err(format!(
                "GET /blocklist listed {listed} items, expected {count}"
            ));
        }
        let workers = vec![HttpWorker {
            http,
            next: Box::new(|| Req {
                method: Method::GET,
                path: "/blocklist".into(),
                body: None,
                items: 1,
                ok: &[StatusCode::OK],
            }),
        }];
        let (_, phase, cpu) = self.measure(workers, &[server.pid()]).await;
        let mut ours = Row::from_phase("list", Role::Ours, &phase, cpu, false);
        let mb = |b: Option<u64>| b.unwrap_or(0) as f64 / (1024.0 * 1024.0);
        ours.extra
            .insert("rss_mb".into(), mb(procstat::rss_bytes(server.pid())));
        ours.extra.insert(
            "peak_rss_mb".into(),
            mb(procstat::peak_rss_bytes(server.pid())),
        );
        ours.extra
            .insert("body_mb".into(), body.len() as f64 / (1024.0 * 1024.0));
        ours.extra.insert("rss_loaded_mb".into(), mb(loaded_rss));
        // Then several listers at once: a body built whole costs each of them the whole
        // list, a streamed one a few chunks. The peak after them shows which.
        let listers = (0..LISTERS).map(|_| Http::connect(server.addr));
        let mut tasks = Vec::new();
        for http in listers {
            let mut http = http.await?;
            let expected = body.len();
            tasks.push(tokio::spawn(async move {
                for _ in 0..3 {
                    let (_, got) = expect_status(http.get("/blocklist").await?, &[StatusCode::OK])?;
                    if got.len() != expected {
                        return Err(format!(
                            "a concurrent GET /blocklist got {} bytes, expected {expected}",
                            got.len()
                        ));
                    }
                }
                Ok(())
            }));
        }
        for task in tasks {
            task.await.map_err(|e| format!("a lister failed: {e}"))??;
        }
        ours.extra.insert(
            format!("peak_rss_{LISTERS}_listers_mb"),
            mb(procstat::peak_rss_bytes(server.pid())),
        );
        ours.target("p99 ≤300 ms", ours.p99_ms.map(|p| p <= 300.0));
        ours.add_note(&format!(
            "{count} items (half nodes), 1 connection, sequential; then {LISTERS} concurrent \
             listers × 3 for peak_rss_{LISTERS}_listers_mb"
        ));
        Ok(vec![ours])
    }

    /// `expire`: `items` items coming due over `--expire-window` while `add` runs.
    async fn expire(&mut self) -> Result<Vec<Row>, String> {
        let (server, _dir) = self.fresh_daemon("expire")?;
        let count = self.settings.items.max(1);
        let window = self.settings.expire_window;
        let window_ms = window.as_millis() as i64;
        // Everything must be loaded (and the baseline measured) before the first item is
        // due: allow a conservative 12,000 items/s for loading (a quiet 2-core machine loads
        // about 20,000).
        let lead_ms = 1_000
            + count as i64 / 12
            + self.settings.duration.as_millis() as i64
            + self.warmup().as_millis() as i64;
        let first_due = blocklistd::clock::now_ms() + lead_ms;
        let item: ItemFn = Arc::new(move |i| {
            let end = first_due + i as i64 * window_ms / count as i64;
            (Kind::TaskManager, format!("exp-{i}"), end)
        });
        let loaded = dataset::bulk_add(server.addr, count, item).await?;
        // Baseline: `add` on this daemon, with the items loaded and nothing due yet.
        let until_due =
            Duration::from_millis((first_due - blocklistd::clock::now_ms()).max(0) as u64);
        let baseline_time = until_due
            .saturating_sub(self.warmup() + Duration::from_millis(500))
            .min(self.settings.duration);
        let baseline = if baseline_time >= Duration::from_millis(300) {
            Some(self.add_phase(&server, baseline_time).await?.0.ops_per_s())
        } else {
            self.refs.add_rate
        };
        let wait = first_due - blocklistd::clock::now_ms();
        if wait > 0 {
            tokio::time::sleep(Duration::from_millis(wait as u64)).await;
        }
        let (phase, cpu) = self.add_phase_no_warmup(&server, window).await?;
        // Wait (bounded) for the sweeper to finish, following its lag histogram; then for
        // the storage of what it announced to be reclaimed, now that the writers stopped.
        let window_end = Instant::now();
        let give_up = window_end + Duration::from_secs(30);
        let log = loop {
            let lag = SweeperLag::scrape(server.addr).await?;
            if lag.expired >= loaded.items || Instant::now() > give_up {
                break lag;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let give_up = Instant::now() + Duration::from_secs(120);
        let reclaimed = loop {
            let lag = SweeperLag::scrape(server.addr).await?;
            if lag.reclaimed >= log.expired || Instant::now() > give_up {
                break lag.reclaimed;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let reclaimed_after_s = window_end.elapsed().as_secs_f64();
        let mut server = server;
        let mut ours = Row::from_phase("expire", Role::Ours, &phase, cpu, false);
        if let Some(status) = server.exited() {
            ours.add_note(&format!(
                "THE DAEMON EXITED during the scenario ({status}); last log lines: {}",
                crate::server::tail(&server.log)
                    .lines()
                    .rev()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" / ")
            ));
        }
        ours.extra.insert("add_p99_ms".into(), phase.ms(0.99));
        ours.p50_ms = Some(log.quantile_ms(0.50));
        ours.p99_ms = Some(log.quantile_ms(0.99));
        ours.p999_ms = Some(log.quantile_ms(0.999));
        ours.extra.insert("expired".into(), log.expired as f64);
        ours.extra.insert("reclaimed".into(), reclaimed as f64);
        ours.extra
            .insert("reclaimed_after_s".into(), reclaimed_after_s);
        ours.extra.insert("loaded".into(), loaded.items as f64);
        ours.extra
            .insert("load_items_s".into(), loaded.items_per_s());
        let drop = baseline.map(|b| 1.0 - phase.ops_per_s() / b);
        if let Some(b) = baseline {
            ours.extra.insert("baseline_add_ops_s".into(), b);
        }
        if let Some(d) = drop {
            ours.extra.insert("add_drop_pct".into(), d * 100.0);
        }
        ours.target(
            "lag p99 ≤50 ms",
            (log.expired > 0).then(|| ours.p99_ms.unwrap_or(f64::MAX) <= 50.0),
        );
        ours.target("add drop ≤20%", drop.map(|d| d <= 0.20));
        ours.add_note(&format!(
            "{} items due over {:.0} s while add runs; p50/p99/p999 = sweeper lag (upper bounds of \
             the daemon's `sweeper_lag_seconds` buckets), ops/s = add during the window; \
             reclaimed_after_s: from the window's end until their storage was reclaimed",
            loaded.items,
            window.as_secs_f64()
        ));
        if loaded.skipped > 0 {
            ours.add_note(&format!(
                "{} items skipped: loading was slower than the schedule",
                loaded.skipped
            ));
        }
        if log.expired < loaded.items {
            ours.add_note(&format!(
                "only {} of {} expired within 30 s of the window's end",
                log.expired, loaded.items
            ));
        }
        Ok(vec![ours])
    }

    /// Like [`Bench::add_phase`] but measured from the first request (the window is timed).
    async fn add_phase_no_warmup(
        &self,
        server: &Server,
        duration: Duration,
    ) -> Result<(Phase, CpuUse), String> {
        let workers = http_workers(
            server.addr,
            self.settings.concurrency,
            fresh_adds("window", "/blocklist/taskmanagers", CREATED),
        )
        .await?;
        let window = CpuWindow::start(&[server.pid()]);
        let (_, phase) = load::run(workers, duration, MAX_OPS_PER_PHASE).await;
        Ok((phase, window.stop()))
    }

    /// `idle`: the fixture with nothing due for an hour; the daemon's CPU over `--duration`.
    async fn idle(&mut self) -> Result<Vec<Row>, String> {
        let duration = self.settings.duration;
        let fixture = self.fixture().await?;
        let pid = fixture.server.pid();
        let items = fixture.items;
        // Let any work left from loading settle first.
        tokio::time::sleep(Duration::from_secs(1)).await;
        self.wait_quiet(&[pid]).await;
        let window = CpuWindow::start(&[pid]);
        tokio::time::sleep(duration).await;
        let cpu = window.stop();
        let mut ours = Row::new("idle", Role::Ours);
        ours.server_cpu = Some(cpu.server);
        ours.record_others(cpu);
        ours.bench_cpu = Some(cpu.bench);
        ours.extra
            .insert("cpu_ms".into(), cpu.server_seconds * 1000.0);
        ours.target("CPU ≈0 (<1% of a core)", Some(cpu.server < 0.01));
        ours.add_note(&format!(
            "{items} items, first due in ≥1 h, {:.0} s",
            duration.as_secs_f64()
        ));
        Ok(vec![ours])
    }

    /// `restart`: SIGKILL the fixture daemon and time until it serves a point read again.
    async fn restart(&mut self) -> Result<Vec<Row>, String> {
        let restarts = self.settings.restarts.max(1);
        let spec = self.daemon.clone();
        self.fixture().await?;
        // Taken out while the daemon is down; put back with the restarted daemon.
        let mut fixture = self.fixture.take().expect("loaded above");
        let mut ready_ms = Vec::new();
        let mut listening_ms = Vec::new();
        for round in 0..restarts {
            fixture.server.kill9();
            let log = fixture
                .data_dir
                .with_extension(format!("restart{round}.log"));
            let spawned = Instant::now();
            let server = spec.start(&fixture.data_dir, &log)?;
            let listening = server.listening.duration_since(server.spawned);
            let ready = wait_ready(server.addr, "/blocklist/taskmanagers/tm-0", spawned).await?;
            ready_ms.push(ready.as_secs_f64() * 1000.0);
            listening_ms.push(listening.as_secs_f64() * 1000.0);
            fixture.server = server;
        }
        self.fixture = Some(fixture);
        let items = self.fixture.as_ref().map_or(0, |f| f.items);
        let mut sorted = ready_ms.clone();
        sorted.sort_by(f64::total_cmp);
        let max = *sorted.last().expect("at least one restart");
        let mut ours = Row::new("restart", Role::Ours);
        ours.p50_ms = Some(sorted[sorted.len() / 2]);
        ours.p99_ms = Some(max);
        ours.p999_ms = Some(max);
        ours.extra.insert("ready_max_ms".into(), max);
        ours.extra.insert(
            "listening_max_ms".into(),
            listening_ms.iter().copied().fold(0.0, f64::max),
        );
        ours.target("ready ≤1 s", Some(max <= 1000.0));
        ours.add_note(&format!(
            "{items} items; {restarts} × (SIGKILL, start, first 200 on GET /blocklist/taskmanagers/tm-0); \
             p50 = median, p99/p999 = worst; ready ms: {}",
            ready_ms.iter().map(|m| format!("{m:.0}")).collect::<Vec<_>>().join(", ")
        ));
        Ok(vec![ours])
    }

    /// `footprint`: RSS and disk of the fixture daemon.
    async fn footprint(&mut self) -> Result<Vec<Row>, String> {
        let fixture = self.fixture().await?;
        let pid = fixture.server.pid();
        let items = fixture.loaded.items.max(1);
        let rss = procstat::rss_bytes(pid).unwrap_or(0);
        let peak = procstat::peak_rss_bytes(pid).unwrap_or(0);
        let (apparent, allocated) = procstat::disk_usage(&fixture.data_dir);
        tokio::time::sleep(SETTLE).await;
        let settled = procstat::rss_bytes(pid).unwrap_or(0);
        let mb = |b: u64| b as f64 / (1024.0 * 1024.0);
        let mut ours = Row::new("footprint", Role::Ours);
        ours.extra.insert("rss_mb".into(), mb(rss));
        ours.extra.insert("rss_settled_mb".into(), mb(settled));
        ours.extra.insert("peak_rss_mb".into(), mb(peak));
        ours.extra.insert("disk_mb".into(), mb(allocated));
        ours.extra.insert("disk_apparent_mb".into(), mb(apparent));
        ours.extra.insert(
            "disk_bytes_per_item".into(),
            allocated as f64 / items as f64,
        );
        ours.extra
            .insert("load_items_s".into(), fixture.loaded.items_per_s());
        ours.target("RSS ≤300 MB", Some(mb(rss) <= 300.0));
        ours.target(
            "disk ≤250 B/item",
            Some(allocated as f64 / items as f64 <= 250.0),
        );
        let registered = match &fixture.registration {
            Some(Registration::Done { count, .. }) => format!(", {count} registrations"),
            _ => String::new(),
        };
        ours.add_note(&format!(
            "{items} items{registered}, after bulk loading ({:.0} items/s in batches of {})",
            fixture.loaded.items_per_s(),
            dataset::BULK_BATCH
        ));
        Ok(vec![ours])
    }
}

fn ratio(ours: Option<f64>, theirs: Option<f64>) -> Option<f64> {
    match (ours, theirs) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// Polls `path` until it answers 200; returns the time since `since`. Bounded at 120 s.
async fn wait_ready(addr: SocketAddr, path: &str, since: Instant) -> Result<Duration, String> {
    let give_up = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(mut http) = Http::connect(addr).await {
            if let Ok((StatusCode::OK, _)) = http.get(path).await {
                return Ok(since.elapsed());
            }
        }
        if Instant::now() > give_up {
            return Err(format!(
                "{path} did not answer 200 within 120 s of the restart"
            ));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The daemon's `blocklist_sweeper_lag_seconds` histogram (commit time − endTimestamp of
/// each item the sweeper announced expired) and reclaim counter, read from `/metrics`.
struct SweeperLag {
    expired: usize,
    /// `blocklist_reclaimed_entries_total`: announced items whose storage is deleted.
    reclaimed: usize,
    /// Cumulative counts by bucket upper bound (seconds), ascending.
    buckets: Vec<(f64, u64)>,
}

impl SweeperLag {
    async fn scrape(addr: SocketAddr) -> Result<SweeperLag, String> {
        let answer = Http::connect(addr).await?.get("/metrics").await?;
        let (_, body) = expect_status(answer, &[StatusCode::OK])?;
        let text = String::from_utf8_lossy(&body);
        let mut lag = SweeperLag {
            expired: 0,
            reclaimed: 0,
            buckets: Vec::new(),
        };
        for line in text.lines() {
            let Some((name, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            if name == "blocklist_sweeper_lag_seconds_count" {
                lag.expired = value as usize;
            } else if name == "blocklist_reclaimed_entries_total" {
                lag.reclaimed = value as usize;
            } else if let Some(le) = name
                .strip_prefix("blocklist_sweeper_lag_seconds_bucket{le=\"")
                .and_then(|rest| rest.strip_suffix("\"}"))
            {
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().map_err(|_| format!("bad bucket {le}"))?
                };
                lag.buckets.push((le, value as u64));
            }
        }
        lag.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        Ok(lag)
    }

    /// The upper bound (ms) of the bucket holding quantile `q`: the true quantile is at most
    /// this, and above the previous bucket's bound.
    fn quantile_ms(&self, q: f64) -> f64 {
        let rank = (q * self.expired as f64).ceil().max(1.0) as u64;
        self.buckets
            .iter()
            .find(|(_, count)| *count >= rank)
            .map_or(f64::NAN, |(le, _)| le * 1000.0)
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
