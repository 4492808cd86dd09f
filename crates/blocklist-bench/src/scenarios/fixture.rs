//! The shared fixture (the 1M items the fixture scenarios run against, loaded once per
//! run), and the scenarios that only observe the daemon holding it: `idle`, `restart` and
//! `footprint`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use blocklistd::model::Kind;
use hyper::StatusCode;

use crate::client::Http;
use crate::dataset::{self, ItemFn, Loaded, Registration};
use crate::procstat::{self, CpuWindow};
use crate::report::{Role, Row};
use crate::server::Server;

use super::Bench;

const ONE_HOUR_MS: i64 = 3_600_000;

/// How long `footprint` lets the loaded daemon sit idle before it reads RSS a second time
/// (`rss_settled_mb`): what an operator sees, once memory freed late is handed back.
const SETTLE: Duration = Duration::from_secs(3);

/// The shared big dataset: `items` items (half task managers `tm-{even}`, half nodes
/// `node-{even}`), ending between one and two hours from now, plus registrations.
pub(super) struct Fixture {
    pub(super) server: Server,
    data_dir: PathBuf,
    pub(super) items: usize,
    loaded: Loaded,
    /// Task managers `tm-0..registered` are registered (or meant to be, in fallback).
    pub(super) registered: usize,
    pub(super) registration: Option<Registration>,
}

/// The fixture's item `i`: task managers first, then nodes; ids are even numbers, so half
/// of the registered `tm-0..R` and of their nodes are blocked.
pub(super) fn fixture_item(count: usize, base: i64) -> ItemFn {
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

impl Bench {
    /// Stops the fixture's daemon and deletes its data dir, so the next fixture scenario
    /// loads a new one (`ab` does, every round).
    pub fn drop_fixture(&mut self) {
        if let Some(fixture) = self.fixture.take() {
            let dir = fixture.data_dir.clone();
            drop(fixture);
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                eprintln!("blocklist-bench: cannot delete {}: {e}", dir.display());
            }
        }
    }

    /// Loads the shared fixture if this run has not yet.
    pub(super) async fn fixture(&mut self) -> Result<&mut Fixture, String> {
        if self.fixture.is_none() {
            let (server, data_dir) = self.fresh_daemon("fixture").await?;
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

    /// `idle`: the fixture with nothing due for an hour; the daemon's CPU over `--duration`.
    pub(super) async fn idle(&mut self) -> Result<Vec<Row>, String> {
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
    pub(super) async fn restart(&mut self) -> Result<Vec<Row>, String> {
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
    pub(super) async fn footprint(&mut self) -> Result<Vec<Row>, String> {
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

/// Polls `path` until it answers 200; returns the time since `since`. Bounded at 120 s.
pub(super) async fn wait_ready(
    addr: SocketAddr,
    path: &str,
    since: Instant,
) -> Result<Duration, String> {
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
