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

use std::sync::atomic::Ordering;
use std::time::Duration;

use std::sync::Arc;

use crate::clock::now_ms;
use crate::metrics::Metrics;
use crate::store::Store;

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
                match sweep_once(&store, now, &metrics).await {
                    Ok(more) => {
                        if !more {
                            last_pass = Some(now_ms());
                        }
                    }
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

/// Expires one bounded batch of what is due at `now`; true when more may be due.
async fn sweep_once(store: &Store, now: i64, metrics: &Metrics) -> crate::store::Result<bool> {
    let scan = store.clone();
    let due = tokio::task::spawn_blocking(move || scan.due(now, SWEEP_BATCH))
        .await
        .expect("the due scan does not panic")?;
    let more = due.len() == SWEEP_BATCH;
    let scanned = due.len();
    let (expired, _) = store.expire(due).await?;
    if expired.is_empty() && scanned > 0 {
        // Due entries that cannot be expired (a corrupt item): do not spin on them.
        tracing::error!(
            entries = scanned,
            "due expiry entries could not be expired; backing off"
        );
        tokio::time::sleep(RETRY_AFTER).await;
        return Ok(false);
    }
    let done = now_ms();
    for e in &expired {
        let lag_ms = done - e.item.end_timestamp;
        metrics
            .sweeper_lag_seconds
            .observe(lag_ms.max(0) as f64 / 1000.0);
        tracing::info!(
            kind = e.kind.singular(),
            id = %e.item.id,
            action = e.item.action.as_str(),
            end = e.item.end_timestamp,
            lag_ms,
            cause = %e.item.cause,
            "expired"
        );
    }
    Ok(more)
}
