//! `check-under-storm`: the scheduler's question while a failure detector storms writes.
//! Checks at a fixed rate (open loop, so a stall is charged to every check it delays),
//! first alone and then while `add-batch`'s load (batches of fresh items at full speed)
//! runs against the same daemon; the check's p99 under the storm against its p99 alone.
//! Every registered task manager is checked once before either phase: a scheduler asks
//! about the same task managers over and over, so its steady state is a warm cache.

use std::time::Duration;

use crate::load::{self, MAX_OPS_PER_PHASE};
use crate::procstat::CpuWindow;
use crate::report::{Role, Row};

use super::read::check_request;
use super::workers::{fresh_batches, http_workers};
use super::write::BATCH_ITEMS;
use super::Bench;

/// The checks' rate: a scheduler placing work on a large cluster, far below what `check`
/// saturates at, so that what moves the latency is the storm, not the checks.
const CHECK_RATE: f64 = 2_000.0;

/// The checks' connections.
const CHECK_CONNECTIONS: usize = 16;

impl Bench {
    pub(super) async fn check_under_storm(&mut self) -> Result<Vec<Row>, String> {
        let target = self.check_target().await?;
        let duration = self.settings.duration;
        // A scheduler has asked about every task manager before: one check of each, so
        // both phases measure the steady state, not the first sight of a task manager.
        let (registered, fallback) = (target.registered as u64, target.fallback);
        let every = http_workers(target.addr, CHECK_CONNECTIONS, |w| {
            let mut next = w as u64;
            Box::new(move || {
                let req = check_request(fallback, next % registered);
                next += CHECK_CONNECTIONS as u64;
                req
            })
        })
        .await?;
        load::run(every, Duration::from_secs(60), registered).await;
        let checks = http_workers(target.addr, CHECK_CONNECTIONS, target.requests()).await?;
        self.wait_quiet(&[target.pid]).await;
        let (checks, _) =
            load::run_paced(checks, self.warmup(), MAX_OPS_PER_PHASE, Some(CHECK_RATE)).await;
        let (checks, alone) =
            load::run_paced(checks, duration, MAX_OPS_PER_PHASE, Some(CHECK_RATE)).await;

        let storm_connections = (self.settings.concurrency / 8).max(1);
        let storm = http_workers(
            target.addr,
            storm_connections,
            fresh_batches("storm", "/blocklist/taskmanagers", BATCH_ITEMS),
        )
        .await?;
        let window = CpuWindow::start(&[target.pid]);
        let ((_, stormed), (_, storm)) = tokio::join!(
            load::run_paced(checks, duration, MAX_OPS_PER_PHASE, Some(CHECK_RATE)),
            load::run(storm, duration, MAX_OPS_PER_PHASE),
        );
        let cpu = window.stop();

        let mut ours = Row::from_phase("check-under-storm", Role::Ours, &stormed, cpu, false);
        let (alone_p99, stormed_p99) = (alone.ms(0.99), stormed.ms(0.99));
        ours.extra.insert("alone_p50_ms".into(), alone.ms(0.5));
        ours.extra.insert("alone_p99_ms".into(), alone_p99);
        ours.extra
            .insert("storm_items_s".into(), storm.items_per_s());
        ours.extra.insert("storm_p99_ms".into(), storm.ms(0.99));
        ours.target(
            "check p99 ≤2× alone",
            Some(stormed.errors == 0 && stormed_p99 <= 2.0 * alone_p99),
        );
        if stormed.ops_per_s() < CHECK_RATE * 0.95 {
            ours.add_note(&format!(
                "the checks reached only {:.0} of {CHECK_RATE:.0}/s",
                stormed.ops_per_s()
            ));
        }
        if storm.errors > 0 {
            ours.add_note(&format!(
                "{} storm errors, first: {}",
                storm.errors,
                storm.first_error.as_deref().unwrap_or("?")
            ));
        }
        ours.add_note(&format!(
            "{CHECK_CONNECTIONS} connections checking at {CHECK_RATE:.0}/s (open loop) against \
             {} items, while {storm_connections} connections add batches of {BATCH_ITEMS} \
             fresh items at full speed; p50/p99/p999 = the checks under the storm, alone_* = \
             the same checks without it; server CPU over the storm; {}",
            target.items, target.note
        ));
        Ok(vec![ours])
    }
}
