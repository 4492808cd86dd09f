//! The closed-loop load driver: N workers, each doing one operation at a time on its own
//! connection, for a bounded time and a bounded number of operations.
//!
//! Closed loop means the latency figures are service times under that concurrency (a slow
//! reply delays the worker's next request instead of queueing it): good for comparing the
//! daemon with its ceilings and peer under identical client behaviour, which is the point.

use std::future::Future;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// No phase ever runs more operations than this, whatever the duration says.
pub const MAX_OPS_PER_PHASE: u64 = 50_000_000;

/// One kind of operation, done by one worker. Workers are moved into their task for a phase
/// and handed back at its end, so connections survive from warm-up into the measured phase.
pub trait Worker: Send + 'static {
    /// Does one operation; `Ok(items)` counts the items it carried (1 for single-item ops).
    fn call(&mut self) -> impl Future<Output = Result<u64, String>> + Send;
}

/// What one phase measured.
pub struct Phase {
    pub ops: u64,
    pub items: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub elapsed: Duration,
    /// Latency of successful operations, in microseconds.
    pub latency_us: Histogram<u64>,
}

impl Phase {
    pub fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn items_per_s(&self) -> f64 {
        self.items as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Latency quantile in milliseconds.
    pub fn ms(&self, quantile: f64) -> f64 {
        self.latency_us.value_at_quantile(quantile) as f64 / 1000.0
    }
}

pub fn histogram() -> Histogram<u64> {
    // 1 µs to 10 minutes at 3 significant digits.
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

/// Runs every worker for `duration` (and at most `max_ops` operations in all), then returns
/// the workers and what they measured.
pub async fn run<W: Worker>(workers: Vec<W>, duration: Duration, max_ops: u64) -> (Vec<W>, Phase) {
    run_paced(workers, duration, max_ops, None).await
}

/// Like [`run`], but when `rate` (operations per second, all workers together) is given the
/// load is open loop: each worker sends on a fixed schedule, and latency counts from the
/// scheduled send time, so a stall is charged to every request it delays (no coordinated
/// omission). A worker that falls behind sends at once until it has caught up.
pub async fn run_paced<W: Worker>(
    workers: Vec<W>,
    duration: Duration,
    max_ops: u64,
    rate: Option<f64>,
) -> (Vec<W>, Phase) {
    let started = Instant::now();
    let n = workers.len().max(1);
    // Each worker's interval between sends, and a start offset spreading them evenly.
    let interval = rate.map(|r| Duration::from_secs_f64(n as f64 / r.max(1e-3)));
    let deadline = started + duration;
    let per_worker = (max_ops / workers.len().max(1) as u64).max(1);
    let tasks: Vec<_> = workers
        .into_iter()
        .enumerate()
        .map(|(w, mut worker)| {
            tokio::spawn(async move {
                let mut hist = histogram();
                let (mut ops, mut items, mut errors) = (0u64, 0u64, 0u64);
                let mut first_error = None;
                let mut next_send = interval.map(|i| started + i.mul_f64(w as f64 / n as f64));
                while ops + errors < per_worker {
                    let t0 = match (next_send, interval) {
                        (Some(at), Some(interval)) => {
                            next_send = Some(at + interval);
                            if Instant::now() >= at {
                                // Late because the previous request took longer than the
                                // interval: that wait is the server's, so it counts (no
                                // coordinated omission).
                                at
                            } else {
                                // On time: tokio's timer wakes up to a millisecond late,
                                // and that delay is the client's own, so time from now.
                                tokio::time::sleep_until(at.into()).await;
                                Instant::now()
                            }
                        }
                        _ => Instant::now(),
                    };
                    if t0 >= deadline {
                        break;
                    }
                    match worker.call().await {
                        Ok(n) => {
                            hist.saturating_record(t0.elapsed().as_micros().max(1) as u64);
                            ops += 1;
                            items += n;
                        }
                        Err(e) => {
                            errors += 1;
                            first_error.get_or_insert(e);
                            // A dead server must not turn the loop into a busy spin.
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                    }
                }
                (worker, hist, ops, items, errors, first_error)
            })
        })
        .collect();
    let mut phase = Phase {
        ops: 0,
        items: 0,
        errors: 0,
        first_error: None,
        elapsed: Duration::ZERO,
        latency_us: histogram(),
    };
    let mut workers = Vec::with_capacity(tasks.len());
    for task in tasks {
        let (worker, hist, ops, items, errors, first_error) =
            task.await.expect("a load worker panicked");
        workers.push(worker);
        phase.latency_us.add(hist).expect("same histogram bounds");
        phase.ops += ops;
        phase.items += items;
        phase.errors += errors;
        if phase.first_error.is_none() {
            phase.first_error = first_error;
        }
    }
    phase.elapsed = started.elapsed();
    (workers, phase)
}

/// A small, fast, seedable generator (splitmix64): the bench needs uniform picks, not
/// cryptographic ones, and no extra dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}
