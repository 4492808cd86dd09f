//! The sweeper's wake-up protocol: what the committer tells [`crate::sweeper`] — a deadline
//! earlier than the one it sleeps on, how far expiry has been announced, when clients last
//! wrote — and the daemon's [`Clock`], which how far expiry has been announced holds up.
//!
//! It is a module of its own, importing neither the store nor the sweeper: the store's
//! committer raises the signal and the sweeper, which imports the store, waits on it, so
//! the protocol sits below both and no import cycle forms.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::sync::Notify;

use crate::clock::{now_ms, Clock};
use crate::model::PERMANENT;

/// What the committer tells the sweeper: a deadline earlier than the one it sleeps on,
/// how far expiry has been announced, and when clients last wrote.
pub struct SweepSignal {
    /// What the sweeper is doing, as [`Watch::encode`] stores it: what a writer's new
    /// deadline must come before to wake it.
    watch: AtomicI64,
    pub wake: Notify,
    /// The expiry watermark as of the last commit: the last expiry key announced expired
    /// (the store's `meta/expiry_watermark`); set through [`SweepSignal::set_watermark`].
    pub watermark: ArcSwap<Vec<u8>>,
    /// Reads the end (unix ms) out of a watermark: the key encoding is the store's.
    end_of: fn(&[u8]) -> Option<i64>,
    /// Never before the watermark's end: everything ending by then is announced expired,
    /// so no one may take a `now` before it. It lives here, beside the watermark, so that
    /// [`SweepSignal::set_watermark`] moves the two together.
    clock: Clock,
    /// When the last commit with a client's write in it ran (unix ms); reclaiming expired
    /// items waits for writers to pause.
    pub last_write: AtomicI64,
}

/// What the sweeper is doing, as far as a writer adding a deadline needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Watch {
    /// Reading the index, its wake-up armed: a deadline added now may be one its read
    /// missed, so every one wakes it.
    Looking,
    /// Asleep with no deadline in the index: every deadline added is the earliest.
    Idle,
    /// Asleep until this deadline (unix ms): only an earlier one wakes it.
    Until(i64),
}

/// The encodings of the two [`Watch`] states without a deadline. [`Watch::Until`] stores
/// its deadline as it is, and no deadline is negative (the expiry index keys ends as u64,
/// and the sweeper sleeps only on ends it read there), so negative values are free for
/// these and the encoding is lossless.
const LOOKING: i64 = -1;
const IDLE: i64 = -2;

impl Watch {
    /// Its value in [`SweepSignal::watch`]: one atomic, so that the committer reads it on
    /// every commit without a lock.
    fn encode(self) -> i64 {
        match self {
            Watch::Looking => LOOKING,
            Watch::Idle => IDLE,
            Watch::Until(deadline) => {
                debug_assert!(deadline >= 0, "deadlines come from the expiry index");
                deadline
            }
        }
    }

    fn decode(value: i64) -> Watch {
        match value {
            LOOKING => Watch::Looking,
            IDLE => Watch::Idle,
            deadline => Watch::Until(deadline),
        }
    }

    /// Whether a deadline `end` added now must wake the sweeper. [`PERMANENT`] is no
    /// deadline (a permanent item has no expiry entry; a batch that added no deadline
    /// reports it) and never wakes it.
    fn woken_by(self, end: i64) -> bool {
        match self {
            Watch::Looking | Watch::Idle => end < PERMANENT,
            Watch::Until(deadline) => end < deadline,
        }
    }
}

impl SweepSignal {
    /// The signal for a store whose watermark is `watermark` (empty: nothing announced),
    /// whose end `end_of` reads. The sweeper has not looked at the index yet, so every
    /// deadline wakes it.
    pub fn new(watermark: Vec<u8>, end_of: fn(&[u8]) -> Option<i64>) -> SweepSignal {
        SweepSignal {
            watch: AtomicI64::new(Watch::Looking.encode()),
            wake: Notify::new(),
            clock: Clock::new(end_of(&watermark)),
            watermark: ArcSwap::from_pointee(watermark),
            end_of,
            // Start-up counts as a write: clients reconnect and write then.
            last_write: AtomicI64::new(now_ms()),
        }
    }

    /// Publishes the committer's new watermark. The clock's floor moves first, so a reader
    /// that sees the new watermark also sees time at or past its end.
    pub(crate) fn set_watermark(&self, watermark: &[u8]) {
        self.clock.set_floor((self.end_of)(watermark));
        self.watermark.store(Arc::new(watermark.to_vec()));
    }

    /// The current time (unix ms) as every part of the daemon must see it: see [`Clock`].
    pub fn now(&self) -> i64 {
        self.clock.now()
    }

    /// Wakes the sweeper if `end` comes before what it sleeps on. `Notify` keeps a permit
    /// when nobody waits, so a wake-up between its scan and its sleep is not lost.
    pub fn deadline_added(&self, end: i64) {
        if Watch::decode(self.watch.load(Ordering::Acquire)).woken_by(end) {
            self.wake.notify_one();
        }
    }

    /// The sweeper is about to read the index (its wake-up already armed): until it sleeps
    /// again, any new deadline wakes it.
    pub fn looking(&self) {
        self.watch.store(Watch::Looking.encode(), Ordering::SeqCst);
    }

    /// The deadline the sweeper sleeps until (unix ms); `None` while it works, or when
    /// nothing is due.
    pub fn sleeping_on(&self) -> Option<i64> {
        match Watch::decode(self.watch.load(Ordering::SeqCst)) {
            Watch::Until(deadline) => Some(deadline),
            Watch::Looking | Watch::Idle => None,
        }
    }

    /// The sweeper will sleep until `deadline` (`None`: no deadline in the index); from now
    /// on only an earlier one wakes it.
    pub fn sleeping_until(&self, deadline: Option<i64>) {
        let watch = deadline.map_or(Watch::Idle, Watch::Until);
        self.watch.store(watch.encode(), Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A stand-in for the store's key encoding: a watermark is its end in decimal.
    fn end_in_decimal(watermark: &[u8]) -> Option<i64> {
        std::str::from_utf8(watermark).ok()?.parse().ok()
    }

    fn signal() -> SweepSignal {
        SweepSignal::new(Vec::new(), end_in_decimal)
    }

    /// Whether the sweeper, having armed its wake-up before `between` ran, would be woken.
    async fn wakes(signal: &SweepSignal, between: impl FnOnce(&SweepSignal)) -> bool {
        let notified = signal.wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        between(signal);
        // A permit makes it ready at once; the wait only bounds the negative case.
        tokio::time::timeout(Duration::from_millis(20), notified)
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_deadline_added_while_the_sweeper_looks_wakes_it() {
        // The index read found nothing, or a later deadline: the write landed after it.
        assert!(
            wakes(&signal(), |s| {
                s.looking();
                s.deadline_added(4_102_444_800_000);
            })
            .await
        );
        assert!(
            wakes(&signal(), |s| {
                s.looking();
                s.deadline_added(i64::MIN + 1);
            })
            .await
        );
    }

    #[tokio::test]
    async fn while_it_sleeps_only_an_earlier_deadline_wakes_it() {
        let signal = signal();
        assert!(
            !wakes(&signal, |s| {
                s.sleeping_until(Some(1_000));
                s.deadline_added(2_000);
                s.deadline_added(1_000);
            })
            .await
        );
        assert!(
            wakes(&signal, |s| {
                s.sleeping_until(Some(1_000));
                s.deadline_added(999);
            })
            .await
        );
        assert!(
            wakes(&signal, |s| {
                s.sleeping_until(None);
                s.deadline_added(4_102_444_800_000);
            })
            .await
        );
    }

    #[tokio::test]
    async fn no_deadline_never_wakes_it() {
        let states: [fn(&SweepSignal); 2] = [SweepSignal::looking, |s| s.sleeping_until(None)];
        for state in states {
            assert!(
                !wakes(&signal(), |s| {
                    state(s);
                    s.deadline_added(PERMANENT);
                })
                .await
            );
        }
    }

    #[test]
    fn every_state_survives_its_encoding() {
        for watch in [
            Watch::Looking,
            Watch::Idle,
            Watch::Until(0),
            Watch::Until(4_102_444_800_000),
            Watch::Until(i64::MAX - 1),
        ] {
            assert_eq!(Watch::decode(watch.encode()), watch);
        }
        let signal = signal();
        assert_eq!(signal.sleeping_on(), None, "it has not looked yet");
        signal.sleeping_until(Some(0));
        assert_eq!(signal.sleeping_on(), Some(0));
        signal.sleeping_until(None);
        assert_eq!(signal.sleeping_on(), None);
    }

    #[test]
    fn the_watermark_holds_the_clock_at_its_end() {
        let signal = signal();
        let ahead = now_ms() + 3_600_000;
        signal.set_watermark(ahead.to_string().as_bytes());
        assert!(signal.now() >= ahead, "{} < {ahead}", signal.now());
        assert_eq!(**signal.watermark.load(), ahead.to_string().into_bytes());
        assert!(SweepSignal::new(ahead.to_string().into_bytes(), end_in_decimal).now() >= ahead);
    }
}
