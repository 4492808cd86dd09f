//! Delivery latency of a change feed: when each add was acknowledged to its client, and how
//! long after that each subscriber received its event.
//!
//! Adds take numbered ids `{prefix}{n}`; the add's worker stores its acknowledgement time
//! in slot `n`, and a subscriber that receives the event of `{prefix}{n}` reads the slot.
//! An event can arrive before its add's reply (the daemon publishes both at the moment the
//! change is durable, and etcd sends watch events as it applies): its latency counts as 0,
//! and it is counted as `early`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use hdrhistogram::Histogram;

use crate::load::histogram;

/// Adds timed per phase; more are delivered and counted but not timed.
const ACK_SLOTS: usize = 1 << 22;

pub struct Acks {
    base: Instant,
    prefix: String,
    next: AtomicU64,
    /// Nanoseconds from `base` to the acknowledgement, plus one (0: not acknowledged yet).
    slots: Vec<AtomicU64>,
}

impl Acks {
    pub fn new(prefix: String) -> Acks {
        Acks {
            base: Instant::now(),
            prefix,
            next: AtomicU64::new(0),
            slots: (0..ACK_SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The ids' common prefix: `{prefix}{n}`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The next add's id, and its number.
    pub fn next_id(&self) -> (String, u64) {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        (format!("{}{n}", self.prefix), n)
    }

    /// Add `n` was acknowledged now.
    pub fn acked(&self, n: u64) {
        if let Some(slot) = usize::try_from(n).ok().and_then(|n| self.slots.get(n)) {
            slot.store(self.nanos(Instant::now()) + 1, Ordering::Release);
        }
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.duration_since(self.base).as_nanos()).unwrap_or(u64::MAX - 1)
    }

    /// A subscriber received the event of add `n` at `received`.
    pub fn received(&self, n: u64, received: Instant, into: &mut Delivery) {
        into.events += 1;
        let Some(slot) = usize::try_from(n).ok().and_then(|n| self.slots.get(n)) else {
            into.untimed += 1;
            return;
        };
        let acked = slot.load(Ordering::Acquire);
        let micros = if acked == 0 {
            into.early += 1;
            0
        } else {
            self.nanos(received).saturating_sub(acked - 1) / 1000
        };
        let _ = into.latency_us.record(micros.max(1));
    }
}

/// What subscribers received of one phase's adds.
pub struct Delivery {
    /// Events of timed adds received, over all subscribers.
    pub events: u64,
    /// Of those, received before the add's reply.
    pub early: u64,
    /// Events of adds beyond the ack slots.
    pub untimed: u64,
    pub latency_us: Histogram<u64>,
}

impl Delivery {
    pub fn new() -> Delivery {
        Delivery {
            events: 0,
            early: 0,
            untimed: 0,
            latency_us: histogram(),
        }
    }

    pub fn merge(&mut self, other: &Delivery) {
        self.events += other.events;
        self.early += other.early;
        self.untimed += other.untimed;
        let _ = self.latency_us.add(&other.latency_us);
    }

    /// Latency quantile in milliseconds.
    pub fn ms(&self, quantile: f64) -> f64 {
        self.latency_us.value_at_quantile(quantile) as f64 / 1000.0
    }
}

/// The add number in `text` after `"id":"{prefix}`, if any: the item id of an SSE `data:`
/// line, or the end of an etcd key.
pub fn number_after(text: &[u8], needle: &[u8]) -> Option<u64> {
    let at = text.windows(needle.len()).position(|w| w == needle)? + needle.len();
    let digits = text[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&text[at..at + digits])
        .ok()?
        .parse()
        .ok()
}

/// What all subscribers of a phase have received so far, for the bench to wait on.
#[derive(Default)]
pub struct Progress {
    events: AtomicU64,
    timed: AtomicU64,
    reconnects: AtomicU64,
}

impl Progress {
    /// A subscriber received an event (any).
    pub fn event(&self) {
        self.events.fetch_add(1, Ordering::Relaxed);
    }

    /// A subscriber received an event of a timed add.
    pub fn timed(&self) {
        self.timed.fetch_add(1, Ordering::Relaxed);
    }

    /// A subscriber was disconnected and resumed.
    pub fn reconnected(&self) {
        self.reconnects.fetch_add(1, Ordering::Relaxed);
    }

    pub fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }

    pub fn timed_events(&self) -> u64 {
        self.timed.load(Ordering::Relaxed)
    }

    pub fn reconnects(&self) -> u64 {
        self.reconnects.load(Ordering::Relaxed)
    }
}
