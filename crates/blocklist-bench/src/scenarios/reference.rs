//! The reference rows, measured once per run with the same client and concurrency as the
//! scenario they are compared with: the HTTP ceilings, the store ceiling and the Redis peer
//! (etcd's rows: `etcd`).

use std::time::Duration;

use hyper::{Method, StatusCode};

use crate::ceiling;
use crate::dataset::ItemFn;
use crate::load::{Rng, MAX_OPS_PER_PHASE};
use crate::procstat::CpuWindow;
use crate::redis_peer::{self, Redis};
use crate::report::{Role, Row};

use super::workers::{fresh_adds, http_workers, Req};
use super::{Bench, CREATED};

/// Reference rows measured once per run.
#[derive(Default)]
#[expect(
    clippy::option_option,
    reason = "the peers' rows: not measured yet, or measured and skipped (peer not installed)"
)]
pub(super) struct References {
    http_post: Option<Row>,
    http_get: Option<Row>,
    store: Option<Row>,
    redis_add: Option<Option<Row>>,
    redis_check: Option<Option<Row>>,
    #[cfg(feature = "etcd")]
    pub(super) etcd_add: Option<Option<Row>>,
    #[cfg(feature = "etcd")]
    pub(super) etcd_check: Option<Option<Row>>,
    pub(super) add_rate: Option<f64>,
}

impl Bench {
    async fn start_redis(&mut self) -> Result<Option<Redis>, String> {
        if !self.settings.peer {
            return Ok(None);
        }
        let dir = self.fresh_dir("redis");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        Redis::start(&dir).await
    }

    pub(super) fn redis_skipped(&self, scenario: &str) -> Row {
        self.peer_skipped(scenario, Role::Redis, redis_peer::NOT_INSTALLED)
    }

    /// The row of a peer that was not measured: `--no-peer`, or `why`.
    pub(super) fn peer_skipped(&self, scenario: &str, role: Role, why: &str) -> Row {
        let mut row = Row::new(scenario, role);
        row.note = if self.settings.peer {
            why.into()
        } else {
            "peer skipped: --no-peer".into()
        };
        row
    }

    pub(super) async fn http_ceiling_post(&mut self) -> Result<Row, String> {
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
    pub(super) async fn http_ceiling_get(
        &mut self,
        registered: u64,
        paced_rate: f64,
    ) -> Result<Row, String> {
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
                idempotency_key: None,
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

    pub(super) async fn store_ceiling(&mut self) -> Result<Row, String> {
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

    pub(super) async fn redis_add(&mut self) -> Result<Option<Row>, String> {
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
                let mut row = Row::from_phase("add", Role::Redis, &phase, cpu, false);
                row.add_note(
                    "Redis appendfsync always: MULTI; HSET; ZADD; EXEC per add, one connection per worker",
                );
                Some(row)
            }
        };
        self.refs.redis_add = Some(row.clone());
        Ok(row)
    }

    pub(super) async fn redis_check(
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
                let mut row = Row::from_phase("check", Role::Redis, &phase, cpu, false);
                row.add_note(&format!(
                    "Redis HGET of a random registered task manager, {items} items stored"
                ));
                Some(row)
            }
        };
        self.refs.redis_check = Some(row.clone());
        Ok(row)
    }
}

pub(super) fn ratio(ours: Option<f64>, theirs: Option<f64>) -> Option<f64> {
    match (ours, theirs) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}
