//! The expiry loop: announces due items expired, waking exactly when the earliest deadline
//! arrives, and reclaims their storage when writers let it.
//!
//! ```text
//! loop {
//!     arm the wake-up (before reading the index: no lost wake-up)
//!     due now?          announce ..=now in bounded batches through the committer, loop
//!     reclaim due?      delete one batch of announced entries, loop
//!     otherwise         sleep until the next deadline or reclaim time, or a wake-up
//! }
//! ```
//! Expiry has two phases (`docs/architecture.md`, "Expiry in two phases"): announcing
//! (the `expired` event, the counts, the watermark) is on time; deleting the entries waits
//! until writers pause for [`Reclaim::idle`], with a trickle of at least
//! [`Reclaim::min_rate`] entries/s under continuous writes, so a mass expiry does not halve
//! the write rate. A writer that stores an end earlier than the one we sleep on wakes us
//! ([`SweepSignal::deadline_added`]). The 60 s cap covers wall-clock jumps and bounds every
//! sleep, even with nothing due. Readers never depend on us: they filter `end <= now`
//! themselves, so a late sweep is never visible.
//!
//! [`SweepSignal::deadline_added`]: crate::sweep_signal::SweepSignal::deadline_added

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::clock::now_ms;
use crate::metrics::Metrics;
use crate::store::{Expired, Store};

/// The most items announced in one commit, so a mass expiry does not hold up other
/// writers.
const SWEEP_BATCH: usize = 1_000;

/// The most announced entries deleted in one commit once writers have paused.
const RECLAIM_BATCH: usize = 1_000;

/// The entries deleted in one commit of the trickle under continuous writes: small, so a
/// writer sharing that commit barely waits for it.
const TRICKLE_BATCH: usize = 100;

/// The longest sleep, in case the wall clock jumps while we sleep on a monotonic timer.
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// How long to back off after a storage error before trying again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// When announced items' storage is deleted.
#[derive(Debug, Clone, Copy)]
pub struct Reclaim {
    /// Reclaim at full speed once no client write has committed for this long.
    pub idle: Duration,
    /// Under continuous writes, still delete at least this many entries per second (0:
    /// only when writers pause).
    pub min_rate: u32,
}

impl Reclaim {
    /// When the next reclaim batch may run, and how big it is, given when clients last
    /// wrote and when the last trickle batch ran (unix ms).
    fn next(&self, last_write: i64, last_trickle: i64) -> (i64, usize) {
        let idle_ms = i64::try_from(self.idle.as_millis()).unwrap_or(i64::MAX);
        let quiet_at = last_write.saturating_add(idle_ms);
        if self.min_rate == 0 {
            return (quiet_at, RECLAIM_BATCH);
        }
        let every_ms = (TRICKLE_BATCH as i64 * 1000 / i64::from(self.min_rate)).max(1);
        let trickle_at = last_trickle.saturating_add(every_ms);
        if quiet_at <= trickle_at {
            (quiet_at, RECLAIM_BATCH)
        } else {
            (trickle_at, TRICKLE_BATCH)
        }
    }
}

/// Runs until the task is aborted. `min_interval` is the least time between the end of one
/// sweep pass and the start of the next (zero: sweep each deadline as it comes).
pub async fn run(store: Store, min_interval: Duration, reclaim: Reclaim, metrics: Arc<Metrics>) {
    let signal = store.sweep_signal();
    let min_interval = i64::try_from(min_interval.as_millis()).unwrap_or(i64::MAX);
    // When the last complete pass ended; the first pass runs at start, for items that came
    // due while the daemon was down.
    let mut last_pass: Option<i64> = None;
    let mut last_trickle = i64::MIN;
    loop {
        let notified = signal.wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        signal.looking();
        // The committer's time (never before what was announced), as every reader's.
        let now = store.now();
        let first = match store.first_deadline() {
            Ok(first) => first,
            Err(e) => {
                tracing::error!(error = %e, "sweeper cannot read the expiry index");
                tokio::time::sleep(RETRY_AFTER).await;
                continue;
            }
        };
        let allowed = last_pass.map_or(i64::MIN, |t| t.saturating_add(min_interval));
        if first.is_some_and(|at| at <= now) && allowed <= now {
            // Continuous: each batch takes what is due when it commits.
            let upto = if min_interval == 0 { i64::MAX } else { now };
            match announce_pass(&store, upto, &metrics).await {
                Ok(()) => last_pass = Some(store.now()),
                Err(e) => {
                    tracing::error!(error = %e, "sweep failed; retrying");
                    tokio::time::sleep(RETRY_AFTER).await;
                }
            }
            continue;
        }
        // The start-up pass found nothing due: it counts as the first pass.
        last_pass.get_or_insert(now);
        let deadline = first.map(|at| at.max(allowed));
        let (reclaim_at, batch) =
            reclaim.next(signal.last_write.load(Ordering::Relaxed), last_trickle);
        // The committer's count of announced entries still stored: no index read here.
        let reclaim_at = (store.unreclaimed() > 0).then_some(reclaim_at);
        if reclaim_at.is_some_and(|at| at <= now) {
            if batch == TRICKLE_BATCH {
                last_trickle = now;
            }
            match reclaim_batch(&store, batch, &metrics).await {
                Ok(true) => {}
                Ok(false) => {
                    // The count says there is more, the index says not: never expected
                    // (verify checks the two agree), but do not spin on it.
                    tracing::warn!(
                        unreclaimed = store.unreclaimed(),
                        "nothing left to reclaim though the count says otherwise"
                    );
                    tokio::time::sleep(RETRY_AFTER).await;
                }
                Err(e) => {
                    tracing::error!(error = %e, "reclaiming expired items failed; retrying");
                    tokio::time::sleep(RETRY_AFTER).await;
                }
            }
            continue;
        }
        signal.sleeping_until(deadline);
        // Nothing to wait for still sleeps at most MAX_SLEEP: a cheap look a minute keeps a
        // lost wake-up, were there one, from lasting.
        let wait = deadline
            .into_iter()
            .chain(reclaim_at)
            .min()
            .map_or(MAX_SLEEP, |at| {
                Duration::from_millis(at.saturating_sub(now) as u64).min(MAX_SLEEP)
            });
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = notified => {}
        }
    }
}

/// Announces what is due, batch after batch, until a batch comes back short.
///
/// `upto` is `i64::MAX` without `--sweep-interval-ms`: each batch takes what is due when it
/// commits, so what comes due while batches commit joins the pass at once. Otherwise a
/// pass announces what was due at its start, so the interval spaces passes even under a
/// steady flow.
async fn announce_pass(store: &Store, upto: i64, metrics: &Metrics) -> crate::store::Result<()> {
    loop {
        let watermark = store.sweep_signal().watermark.load_full();
        let (items, _) = store.announce(upto, SWEEP_BATCH).await?;
        record(&items, metrics);
        if items.len() < SWEEP_BATCH {
            if items.is_empty() && store.sweep_signal().watermark.load_full() == watermark {
                // Due entries that cannot be announced (the clock went back): do not spin.
                tracing::warn!("due expiry entries could not be announced; backing off");
                tokio::time::sleep(RETRY_AFTER).await;
            }
            return Ok(());
        }
    }
}

/// Deletes up to `limit` announced entries and their items; false when it found none.
async fn reclaim_batch(
    store: &Store,
    limit: usize,
    metrics: &Metrics,
) -> crate::store::Result<bool> {
    let scan = store.clone();
    let keys = tokio::task::spawn_blocking(move || scan.reclaimable(limit))
        .await
        .expect("the reclaim scan does not panic")?;
    if keys.is_empty() {
        return Ok(false);
    }
    let deleted = store.reclaim(keys).await?;
    metrics.reclaimed_entries.inc_by(deleted as u64);
    Ok(true)
}

/// Measures and logs what one batch expired. The line per item is at debug: at a mass
/// expiry it would cost more than the expiry; the change feed carries every `expired` event.
fn record(expired: &[Expired], metrics: &Metrics) {
    let done = now_ms();
    let mut worst = 0;
    for e in expired {
        let lag_ms = (done - e.item.end_timestamp).max(0);
        worst = worst.max(lag_ms);
        metrics.sweeper_lag_seconds.observe(lag_ms as f64 / 1000.0);
        tracing::debug!(
            kind = e.kind.singular(),
            id = %e.item.id,
            action = e.item.action.as_str(),
            end = e.item.end_timestamp,
            lag_ms,
            cause = %e.item.cause,
            "expired"
        );
    }
    // At most one warning per interval: a sweeper that is behind runs batch after batch.
    let last = LAST_WARNING.load(Ordering::Relaxed);
    if worst >= LATE_MS && done.saturating_sub(last) >= WARN_EVERY_MS {
        LAST_WARNING.store(done, Ordering::Relaxed);
        tracing::warn!(
            items = expired.len(),
            worst_lag_ms = worst,
            "the sweeper is behind"
        );
    }
}

/// A lag worth a warning: a scheduler would notice.
const LATE_MS: i64 = 1_000;

/// The least time between two "behind" warnings.
const WARN_EVERY_MS: i64 = 10_000;

/// When the last "behind" warning was logged (unix ms).
static LAST_WARNING: AtomicI64 = AtomicI64::new(i64::MIN);
