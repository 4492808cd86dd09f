//! The write scenarios, each on a fresh daemon: `add`, `add-keyed`, `add-batch` and
//! `merge-hot`.

use hyper::{Method, StatusCode};

use crate::client::{expect_status, Http};
use crate::dataset;
use crate::load::{Phase, Rng};
use crate::procstat::CpuUse;
use crate::report::{Role, Row};
use crate::server::Server;

use super::reference::ratio;
use super::workers::{fresh_adds, fresh_batches, http_workers, keyed, Req};
use super::{Bench, CREATED};

/// Hot ids of `merge-hot`.
const HOT_IDS: u64 = 16;

/// Items per request of `add-batch` (and of `check-under-storm`'s storm).
pub(super) const BATCH_ITEMS: u64 = 100;

impl Bench {
    /// `add`: single-item POSTs with fresh ids on C connections, every reply durable.
    pub(super) async fn add(&mut self) -> Result<Vec<Row>, String> {
        let (server, _dir) = self.fresh_daemon("add").await?;
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
        let redis = self.redis_add().await?;
        let etcd = self.etcd_add().await?;
        ours.ratio_ceiling = ratio(ours.ops_per_s, ceiling.ops_per_s);
        ours.ratio_redis = redis
            .as_ref()
            .and_then(|p| ratio(ours.ops_per_s, p.ops_per_s));
        ours.ratio_etcd = etcd
            .as_ref()
            .and_then(|p| ratio(ours.ops_per_s, p.ops_per_s));
        ours.target("≥0.5× ceiling", ours.ratio_ceiling.map(|r| r >= 0.5));
        ours.target("≥0.7× Redis", ours.ratio_redis.map(|r| r >= 0.7));
        ours.target("≥2× etcd", ours.ratio_etcd.map(|r| r >= 2.0));
        ours.target("p99 ≤5 ms", ours.p99_ms.map(|p| p <= 5.0));
        ours.add_note(&format!(
            "{} connections, 1 item per POST",
            self.settings.concurrency
        ));
        Ok(vec![
            ours,
            ceiling,
            redis.unwrap_or_else(|| self.redis_skipped("add")),
            etcd.unwrap_or_else(|| self.etcd_skipped("add")),
        ])
    }

    /// `add-keyed`: `add` with a fresh `Idempotency-Key` on every POST, so the ratio to
    /// `add` is the price of the idempotency record each keyed write also commits.
    pub(super) async fn add_keyed(&mut self) -> Result<Vec<Row>, String> {
        let (server, _dir) = self.fresh_daemon("add-keyed").await?;
        let add_rate = self.add_rate(&server).await?;
        let workers = http_workers(
            server.addr,
            self.settings.concurrency,
            keyed(fresh_adds("keyed", "/blocklist/taskmanagers", CREATED)),
        )
        .await?;
        let (_, phase, cpu) = self.measure(workers, &[server.pid()]).await;
        let note = format!(
            "{} connections, 1 item per POST, a fresh Idempotency-Key each",
            self.settings.concurrency
        );
        Ok(vec![vs_add_row(
            "add-keyed",
            &phase,
            cpu,
            add_rate,
            0.9,
            &note,
        )])
    }

    /// `add`'s rate for a ratio: the one this run measured, or (a scenario run alone)
    /// `add` measured on `server` now, before the scenario's own phase.
    pub(super) async fn add_rate(&mut self, server: &Server) -> Result<f64, String> {
        if let Some(rate) = self.refs.add_rate {
            return Ok(rate);
        }
        let (phase, _) = self.add_phase(server, self.settings.duration).await?;
        self.refs.add_rate = Some(phase.ops_per_s());
        Ok(phase.ops_per_s())
    }

    /// `add-batch`: POSTs of 100 items on C/8 connections, in items/s.
    pub(super) async fn add_batch(&mut self) -> Result<Vec<Row>, String> {
        let (server, _dir) = self.fresh_daemon("add-batch").await?;
        let connections = (self.settings.concurrency / 8).max(1);
        let workers = http_workers(
            server.addr,
            connections,
            fresh_batches("batch", "/blocklist/taskmanagers", BATCH_ITEMS),
        )
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
    pub(super) async fn merge_hot(&mut self) -> Result<Vec<Row>, String> {
        let (server, _dir) = self.fresh_daemon("merge-hot").await?;
        let add_rate = self.add_rate(&server).await?;
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
                    idempotency_key: None,
                }
            })
        })
        .await?;
        let (_, phase, cpu) = self.measure(workers, &[server.pid()]).await;
        let note = format!(
            "{} connections, {HOT_IDS} hot ids, allowMerge",
            self.settings.concurrency
        );
        Ok(vec![vs_add_row(
            "merge-hot",
            &phase,
            cpu,
            add_rate,
            0.5,
            &note,
        )])
    }
}

/// The row of a scenario judged against `add`'s rate: no errors, and at least `min` × it
/// (`vs_add`).
fn vs_add_row(
    scenario: &str,
    phase: &Phase,
    cpu: CpuUse,
    add_rate: f64,
    min: f64,
    note: &str,
) -> Row {
    let mut ours = Row::from_phase(scenario, Role::Ours, phase, cpu, false);
    let vs_add = ratio(ours.ops_per_s, Some(add_rate));
    ours.extra.insert("vs_add".into(), vs_add.unwrap_or(0.0));
    ours.target("no errors", Some(phase.errors == 0));
    ours.target(format!("≥{min}× add"), vs_add.map(|r| r >= min));
    ours.add_note(&format!("{note}; vs_add = ops/s ÷ add's"));
    ours
}
