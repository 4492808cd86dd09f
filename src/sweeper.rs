//! The expiry loop: deletes due items, waking exactly when the earliest deadline arrives.
//!
//! ```text
//! loop {
//!     arm the wake-up (before reading the index: no lost wake-up)
//!     due now?      expire ..=now in bounded batches through the committer, loop
//!     next at `at`  sleep until min(at, now + 60 s) or a wake-up
//!     nothing       wait for a wake-up
//! }
//! ```
//! A writer that stores an end earlier than the one we sleep on wakes us
//! ([`SweepSignal::deadline_added`]). The 60 s cap covers wall-clock jumps. Readers never
//! depend on us: they filter `end <= now` themselves, so a late sweep is never visible.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::clock::now_ms;
use crate::metrics::Metrics;
use crate::store::{Expired, Store};

/// The most items expired in one commit, so a mass expiry does not hold up other writers.
const SWEEP_BATCH: usize = 1_000;

/// The longest sleep, in case the wall clock jumps while we sleep on a monotonic timer.
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// How long to back off after a storage error before trying again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Runs until the task is aborted. `min_interval` is the least time between the end of one
/// sweep pass and the start of the next (zero: sweep each deadline as it comes).
pub async fn run(store: Store, min_interval: Duration, metrics: Arc<Metrics>) {
    let signal = store.sweep_signal();
    let min_interval = i64::try_from(min_interval.as_millis()).unwrap_or(i64::MAX);
    // When the last complete pass ended; the first pass runs at start, for items that came
    // due while the daemon was down.
    let mut last_pass: Option<i64> = None;
    loop {
        let notified = signal.wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        // While we look, any writer's new deadline counts as earlier than ours.
        signal.next_deadline.store(i64::MIN, Ordering::SeqCst);
        let now = now_ms();
        let first = match store.first_deadline() {
            Ok(first) => first,
            Err(e) => {
                tracing::error!(error = %e, "sweeper cannot read the expiry index");
                tokio::time::sleep(RETRY_AFTER).await;
                continue;
            }
        };
        let allowed = last_pass.map_or(i64::MIN, |t| t.saturating_add(min_interval));
        match first {
            Some(at) if at <= now && allowed <= now => {
                match sweep_pass(&store, now, min_interval == 0, &metrics).await {
                    Ok(()) => last_pass = Some(now_ms()),
                    Err(e) => {
                        tracing::error!(error = %e, "sweep failed; retrying");
                        tokio::time::sleep(RETRY_AFTER).await;
                    }
                }
            }
            Some(at) => {
                // The start-up pass found nothing due: it counts as the first pass.
                last_pass.get_or_insert(now);
                let at = at.max(allowed);
                signal.next_deadline.store(at, Ordering::SeqCst);
                let wait = Duration::from_millis((at - now) as u64).min(MAX_SLEEP);
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = notified => {}
                }
            }
            None => {
                last_pass.get_or_insert(now);
                signal.next_deadline.store(i64::MAX, Ordering::SeqCst);
                notified.await;
            }
        }
    }
}

/// How many expiry batches may be in the committer's hands at once: while one commits and
/// syncs, the next is already scanned and queued, so a mass expiry is not paced by the disk.
const IN_FLIGHT: usize = 2;

/// How long a continuous pass keeps taking in what comes due before it drains and ends, so
/// the next pass scans the index from its start again.
const CONTINUOUS_PASS_MS: i64 = 1_000;

/// Expires what is due, batch after batch, each scan starting after the last key handed
/// out, until a scan finds nothing more and every batch is answered.
///
/// `continuous` (no `--sweep-interval-ms`): each scan takes what is due at the time of the
/// scan, so what comes due while batches commit joins the pass at once instead of waiting
/// for the pass to end — an item waits about one commit, not one to two passes. After
/// [`CONTINUOUS_PASS_MS`] the pass stops taking in more, drains and ends: the next pass
/// scans from the start of the index, which catches an entry written behind the cursor (an
/// end computed before the scan but committed after it). Otherwise a pass expires what was
/// due at `now`, so `--sweep-interval-ms` spaces passes even under a steady flow.
async fn sweep_pass(
    store: &Store,
    now: i64,
    continuous: bool,
    metrics: &Metrics,
) -> crate::store::Result<()> {
    let mut after: Option<Vec<u8>> = None;
    let mut upto = now;
    let mut in_flight = VecDeque::with_capacity(IN_FLIGHT);
    let (mut scanned, mut expired) = (0, 0);
    loop {
        if in_flight.len() < IN_FLIGHT {
            let scan_time = now_ms();
            if continuous && scan_time < now + CONTINUOUS_PASS_MS {
                upto = scan_time;
            }
            let (scan, from) = (store.clone(), after.clone());
            let due =
                tokio::task::spawn_blocking(move || scan.due(upto, from.as_deref(), SWEEP_BATCH))
                    .await
                    .expect("the due scan does not panic")?;
            if let Some(last) = due.last() {
                after = Some(last.clone());
                scanned += due.len();
                let store = store.clone();
                in_flight.push_back(tokio::spawn(async move { store.expire(due).await }));
                continue;
            }
        }
        let Some(oldest) = in_flight.pop_front() else {
            break;
        };
        let (items, _) = oldest.await.expect("expiring does not panic")?;
        expired += items.len();
        record(&items, metrics);
    }
    if expired == 0 && scanned > 0 {
        // Due entries that cannot be expired (a corrupt item): do not spin on them.
        tracing::error!(
            entries = scanned,
            "due expiry entries could not be expired; backing off"
        );
        tokio::time::sleep(RETRY_AFTER).await;
    }
    Ok(())
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
