//! `feed`: how soon a change reaches the subscribers of the change feed, for W subscribers
//! (`--subscribers`, default 1, 100 and 1,000), on a fresh daemon each, and the same with
//! etcd's watches.
//!
//! For each W: the subscribers connect (`GET /blocklist/events`, new events only; each on
//! its own connection); `add`'s load runs closed loop on C connections for `--duration` with
//! them attached — the add capacity with W subscribers, against `add` alone, and how many of
//! those adds a second the subscribers received meanwhile (delivery can fall behind: a
//! subscriber lags and catches up later); once they have caught up, adds run open loop at
//! half the lesser of the two (the feed's capacity) for `--duration`, each add's id
//! numbered and its acknowledgement time noted, and every subscriber times each event from
//! its add's acknowledgement (`crate::delivery`). Half of the capacity *with* the
//! subscribers, not of `add` alone: at 1,000 subscribers, half of `add` alone would ask the
//! two cores for more than ten million deliveries a second, which measures overload, not
//! latency.
//!
//! etcd is measured the same way, at half its own capacity; when that rate is lower than
//! ours, ours runs once more (a fresh daemon, the same W) with adds at etcd's rate, and the
//! two p99s at the same rate are what is compared.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty};
use hyper::body::{Bytes, Incoming};
use hyper::header::HOST;
use hyper::{Request, StatusCode};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::client::{expect_status, Http};
use crate::dataset;
use crate::delivery::{number_after, Acks, Delivery, Progress};
use crate::load::{self, Phase, Worker, MAX_OPS_PER_PHASE};
use crate::procstat::{CpuUse, CpuWindow};
use crate::report::{Role, Row};

use super::workers::{fresh_adds, http_workers};
use super::{Bench, CREATED};

/// How long the subscribers may take to receive what was added before the bench stops
/// waiting (what is still missing then is reported as undelivered).
const DRAIN_DEADLINE: Duration = Duration::from_secs(60);

/// Delivery p99 targets by subscriber count (docs/benchmarks.md).
fn p99_target_ms(subscribers: usize) -> Option<f64> {
    match subscribers {
        100 => Some(10.0),
        1000 => Some(50.0),
        _ => None,
    }
}

/// The subscribers of one measurement: their tasks, what they have received so far, and
/// the signal that stops them.
struct Subscribers {
    tasks: Vec<JoinHandle<Result<Delivery, String>>>,
    progress: Arc<Progress>,
    stop: watch::Sender<bool>,
}

impl Subscribers {
    fn new() -> Subscribers {
        Subscribers {
            tasks: Vec::new(),
            progress: Arc::new(Progress::default()),
            stop: watch::Sender::new(false),
        }
    }

    /// Waits until the subscribers have received `expected` timed events, or receive
    /// nothing more for `quiet`, or [`DRAIN_DEADLINE`].
    async fn drain(&self, expected: Option<u64>, quiet: Duration) {
        let deadline = Instant::now() + DRAIN_DEADLINE;
        let mut last = (self.progress.events(), Instant::now());
        while Instant::now() < deadline {
            if expected.is_some_and(|e| self.progress.timed_events() >= e) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            let events = self.progress.events();
            if events != last.0 {
                last = (events, Instant::now());
            } else if last.1.elapsed() >= quiet {
                return;
            }
        }
    }

    /// Stops every subscriber and merges what they timed.
    async fn stop(self) -> Result<(Delivery, u64), String> {
        let _ = self.stop.send(true);
        let mut all = Delivery::new();
        for task in self.tasks {
            all.merge(&task.await.map_err(|e| format!("subscriber: {e}"))??);
        }
        Ok((all, self.progress.reconnects()))
    }
}

/// What one W measured, ours or etcd's.
struct FeedRun {
    subscribers: usize,
    /// The closed-loop phase, unless the rate was given.
    capacity: Option<Phase>,
    paced: Phase,
    /// Adds a second the subscribers received while `capacity` ran, per subscriber.
    delivered: f64,
    rate: f64,
    cpu: CpuUse,
    delivery: Delivery,
    reconnects: u64,
}

impl FeedRun {
    fn row(&self, role: Role, add_alone: Option<f64>) -> Row {
        let mut row = Row::new("feed", role);
        let d = &self.delivery;
        let seconds = self.paced.elapsed.as_secs_f64().max(1e-9);
        row.ops_per_s = Some(d.events as f64 / seconds);
        if d.events > 0 {
            row.p50_ms = Some(d.ms(0.5));
            row.p99_ms = Some(d.ms(0.99));
            row.p999_ms = Some(d.ms(0.999));
            row.server_cpu_us_per_op = Some(self.cpu.server_seconds * 1e6 / d.events.max(1) as f64);
        }
        row.server_cpu = Some(self.cpu.server);
        row.bench_cpu = Some(self.cpu.bench);
        row.record_others(self.cpu);
        row.ops = d.events;
        let expected = self.paced.ops * self.subscribers as u64;
        row.errors = self.paced.errors + expected.saturating_sub(d.events + d.untimed);
        let extra = &mut row.extra;
        extra.insert("subscribers".into(), self.subscribers as f64);
        extra.insert("max_ms".into(), d.latency_us.max() as f64 / 1000.0);
        if let Some(capacity) = &self.capacity {
            extra.insert("add_capacity_ops_s".into(), capacity.ops_per_s());
            extra.insert("delivered_capacity_ops_s".into(), self.delivered);
            if let Some(alone) = add_alone {
                extra.insert("add_alone_ops_s".into(), alone);
                extra.insert(
                    "add_capacity_vs_alone".into(),
                    capacity.ops_per_s() / alone.max(1e-9),
                );
            }
        }
        extra.insert("paced_add_ops_s".into(), self.paced.ops_per_s());
        extra.insert("paced_add_p99_ms".into(), self.paced.ms(0.99));
        extra.insert(
            "undelivered".into(),
            expected.saturating_sub(d.events + d.untimed) as f64,
        );
        extra.insert("early".into(), d.early as f64);
        if self.reconnects > 0 {
            extra.insert("reconnects".into(), self.reconnects as f64);
        }
        if self.paced.ops_per_s() < self.rate * 0.95 {
            row.add_note(&format!(
                "the paced adds reached only {:.0} of {:.0}/s",
                self.paced.ops_per_s(),
                self.rate
            ));
        }
        if let Some(e) = self
            .paced
            .first_error
            .as_ref()
            .or(self.capacity.as_ref().and_then(|c| c.first_error.as_ref()))
        {
            row.add_note(&format!("add errors, first: {e}"));
        }
        row
    }
}

impl Bench {
    pub(super) async fn feed(&mut self) -> Result<Vec<Row>, String> {
        raise_open_files_limit();
        let add_alone = {
            let (server, _dir) = self.fresh_daemon("feed-add").await?;
            self.add_rate(&server).await?
        };
        let mut rows = Vec::new();
        for subscribers in self.settings.subscribers.clone() {
            let ours = self.feed_ours(subscribers, self.settings.feed_rate).await?;
            let mut row = ours.row(Role::Ours, Some(add_alone));
            let etcd = self.feed_etcd(subscribers).await?;
            // Against etcd at the same add rate: ours again, paced at etcd's rate (half of
            // etcd's capacity) when that is lower than ours.
            let mut ours_p99_at_etcd_rate = row.p99_ms;
            if let Some(etcd) = etcd.as_ref().filter(|e| e.rate < ours.rate) {
                let same = self.feed_ours(subscribers, Some(etcd.rate)).await?;
                let same = same.row(Role::Ours, None);
                ours_p99_at_etcd_rate = same.p99_ms;
                if let Some(p99) = same.p99_ms {
                    row.extra.insert("at_etcd_rate_p99_ms".into(), p99);
                }
                row.extra.insert(
                    "at_etcd_rate_events_s".into(),
                    same.ops_per_s.unwrap_or(0.0),
                );
            }
            let etcd_row = etcd.map(|run| run.row(Role::Etcd, None));
            row.ratio_etcd = etcd_row
                .as_ref()
                .and_then(|e| super::reference::ratio(e.p99_ms, ours_p99_at_etcd_rate));
            if let Some(target) = p99_target_ms(subscribers) {
                row.target(
                    format!("p99 ≤{target} ms at {subscribers} subscribers"),
                    row.p99_ms.map(|p| p <= target && row.errors == 0),
                );
            }
            row.target(
                "p99 ≤ etcd's at its rate",
                etcd_row
                    .as_ref()
                    .and_then(|e| e.p99_ms)
                    .zip(ours_p99_at_etcd_rate)
                    .map(|(theirs, ours)| ours <= theirs),
            );
            row.add_note(&format!(
                "{subscribers} SSE subscribers on GET /blocklist/events; adds on {} connections \
                 paced at half the capacity with them attached; ops/s = events delivered per \
                 second (all subscribers), p50/p99/p999 = ack of the add → event received, \
                 server µs/op = daemon CPU per delivered event; at_etcd_rate_* = ours again \
                 with adds at etcd's paced rate, ours/etcd = etcd's p99 ÷ ours at that rate",
                self.settings.concurrency
            ));
            rows.push(row);
            rows.push(etcd_row.unwrap_or_else(|| self.etcd_skipped("feed")));
        }
        Ok(rows)
    }

    /// Ours with `subscribers`, adds paced at half the feed's capacity, or at `rate`.
    async fn feed_ours(
        &mut self,
        subscribers: usize,
        rate: Option<f64>,
    ) -> Result<FeedRun, String> {
        let (server, _dir) = self.fresh_daemon(&format!("feed-{subscribers}")).await?;
        let acks = Arc::new(Acks::new(format!("f{subscribers}p-")));
        let mut followers = Subscribers::new();
        for _ in 0..subscribers {
            let body = open_feed(server.addr, None).await?;
            followers.tasks.push(tokio::spawn(follow_feed(
                server.addr,
                body,
                acks.clone(),
                followers.progress.clone(),
                followers.stop.subscribe(),
            )));
        }
        let capacity = http_workers(
            server.addr,
            self.settings.concurrency,
            fresh_adds("feedcap", "/blocklist/taskmanagers", CREATED),
        )
        .await?;
        let mut paced = Vec::new();
        for _ in 0..self.settings.concurrency {
            paced.push(FeedAdd {
                http: Http::connect(server.addr).await?,
                acks: acks.clone(),
            });
        }
        self.feed_phases(capacity, paced, followers, &[server.pid()], rate)
            .await
    }

    /// The capacity phase (unless `rate` is given), the catching up, the paced phase (at
    /// half the capacity, or `rate`) and its delivery.
    async fn feed_phases<C: Worker, P: Worker>(
        &self,
        capacity: Vec<C>,
        paced: Vec<P>,
        followers: Subscribers,
        pids: &[u32],
        rate: Option<f64>,
    ) -> Result<FeedRun, String> {
        let subscribers = followers.tasks.len();
        self.wait_quiet(pids).await;
        let (capacity, delivered, rate) = match rate {
            Some(rate) => (None, 0.0, rate),
            None => {
                let (capacity, delivered) = self.feed_capacity(capacity, &followers).await;
                let rate = capacity.ops_per_s().min(delivered) * 0.5;
                (Some(capacity), delivered, rate)
            }
        };
        let window = CpuWindow::start(pids);
        let (_, paced) =
            load::run_paced(paced, self.settings.duration, MAX_OPS_PER_PHASE, Some(rate)).await;
        let expected = paced.ops * subscribers as u64;
        followers
            .drain(Some(expected), Duration::from_secs(2))
            .await;
        let cpu = window.stop();
        let (delivery, reconnects) = followers.stop().await?;
        Ok(FeedRun {
            subscribers,
            capacity,
            paced,
            delivered,
            rate,
            cpu,
            delivery,
            reconnects,
        })
    }

    /// `capacity`'s closed loop with the subscribers attached, and how many of its adds a
    /// second they received meanwhile.
    async fn feed_capacity<C: Worker>(
        &self,
        capacity: Vec<C>,
        followers: &Subscribers,
    ) -> (Phase, f64) {
        let (capacity, _) = load::run(capacity, self.warmup(), MAX_OPS_PER_PHASE).await;
        followers.drain(None, Duration::from_millis(500)).await;
        let before = followers.progress.events();
        let (_, capacity) = load::run(capacity, self.settings.duration, MAX_OPS_PER_PHASE).await;
        // What the subscribers received while it ran: adds outrun delivery (a subscriber
        // lags, and catches up later), so the feed's capacity is the lesser of the two.
        let delivered = (followers.progress.events() - before) as f64
            / followers.tasks.len().max(1) as f64
            / capacity.elapsed.as_secs_f64().max(1e-9);
        followers.drain(None, Duration::from_millis(500)).await;
        (capacity, delivered)
    }
}

#[cfg(not(feature = "etcd"))]
impl Bench {
    #[expect(
        clippy::unused_async,
        reason = "the signature of the etcd build's twin"
    )]
    async fn feed_etcd(&mut self, _subscribers: usize) -> Result<Option<FeedRun>, String> {
        Ok(None)
    }
}

#[cfg(feature = "etcd")]
impl Bench {
    /// The same measurement against etcd: W watches of the items' prefix, each on its own
    /// connection, and `add`'s transactions.
    async fn feed_etcd(&mut self, subscribers: usize) -> Result<Option<FeedRun>, String> {
        use crate::etcd_peer::{follow, watch, AddWorker};
        let Some(etcd) = self.start_etcd().await? else {
            return Ok(None);
        };
        let acks = Arc::new(Acks::new(format!("f{subscribers}p-")));
        let mut followers = Subscribers::new();
        for _ in 0..subscribers {
            let stream = watch(&etcd).await?;
            followers.tasks.push(tokio::spawn(follow(
                stream,
                acks.clone(),
                followers.progress.clone(),
                followers.stop.subscribe(),
            )));
        }
        let (mut capacity, mut paced) = (Vec::new(), Vec::new());
        for worker in 0..self.settings.concurrency {
            capacity.push(AddWorker::new(&etcd, worker, None).await?);
            paced.push(AddWorker::new(&etcd, worker, Some(acks.clone())).await?);
        }
        self.feed_phases(capacity, paced, followers, etcd.pids(), None)
            .await
            .map(Some)
    }
}

/// One add per call with the next numbered id of `acks`, its acknowledgement noted.
struct FeedAdd {
    http: Http,
    acks: Arc<Acks>,
}

impl Worker for FeedAdd {
    async fn call(&mut self) -> Result<u64, String> {
        let (id, n) = self.acks.next_id();
        let body = dataset::one_item(&id, "bench", false);
        expect_status(
            self.http
                .send(hyper::Method::POST, "/blocklist/taskmanagers", Some(body))
                .await?,
            CREATED,
        )?;
        self.acks.acked(n);
        Ok(1)
    }
}

/// Opens the change feed on a connection of its own: new events only, or those after
/// `last_event_id` when resuming. Subscribed once this returns (the daemon subscribes
/// before it answers).
async fn open_feed(addr: SocketAddr, last_event_id: Option<u64>) -> Result<Incoming, String> {
    let mut sender = crate::client::open(addr).await?;
    let mut request = Request::get("/blocklist/events").header(HOST, "127.0.0.1");
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id);
    }
    let request = request
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let reply = sender
        .send_request(request)
        .await
        .map_err(|e| format!("GET /blocklist/events: {e}"))?;
    if reply.status() != StatusCode::OK {
        return Err(format!("GET /blocklist/events: {}", reply.status()));
    }
    Ok(reply.into_body())
}

/// Follows the feed until `stop`, timing the events of `acks`' adds; resumes with
/// `Last-Event-ID` when the daemon disconnects it (a watcher too far behind).
async fn follow_feed(
    addr: SocketAddr,
    mut body: Incoming,
    acks: Arc<Acks>,
    progress: Arc<Progress>,
    mut stop: watch::Receiver<bool>,
) -> Result<Delivery, String> {
    let needle = format!("\"id\":\"{}", acks.prefix()).into_bytes();
    let mut delivery = Delivery::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut last_id = None;
    while !*stop.borrow() {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            _ = stop.changed() => break,
        };
        let Some(Ok(frame)) = frame else {
            body = open_feed(addr, last_id).await?;
            progress.reconnected();
            pending.clear();
            continue;
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let received = Instant::now();
        pending.extend_from_slice(&data);
        let mut start = 0;
        while let Some(end) = pending[start..].iter().position(|&b| b == b'\n') {
            let line = &pending[start..start + end];
            if let Some(id) = line.strip_prefix(b"id: ") {
                last_id = std::str::from_utf8(id).ok().and_then(|id| id.parse().ok());
            } else if line.starts_with(b"event:") {
                progress.event();
            } else if line.starts_with(b"data:") {
                if let Some(n) = number_after(line, &needle) {
                    acks.received(n, received, &mut delivery);
                    progress.timed();
                }
            }
            start += end + 1;
        }
        pending.drain(..start);
    }
    Ok(delivery)
}

/// 1,000 subscribers and 64 workers need more descriptors than the common soft limit of
/// 1,024: raise it to the hard limit, as the daemon does.
fn raise_open_files_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let _ = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        },
    );
}
