//! The `expire` scenario, and the daemon's sweeper-lag histogram it reads from `/metrics`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use blocklistd::model::Kind;
use hyper::StatusCode;

use crate::client::{expect_status, Http};
use crate::dataset::{self, ItemFn};
use crate::load::{self, Phase, MAX_OPS_PER_PHASE};
use crate::procstat::{CpuUse, CpuWindow};
use crate::report::{Role, Row};
use crate::server::Server;

use super::workers::{fresh_adds, http_workers};
use super::{Bench, CREATED};

impl Bench {
    /// `expire`: `items` items coming due over `--expire-window` while `add` runs.
    pub(super) async fn expire(&mut self) -> Result<Vec<Row>, String> {
        let (server, _dir) = self.fresh_daemon("expire").await?;
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
