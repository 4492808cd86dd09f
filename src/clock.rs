//! Time in unix milliseconds, the unit of every timestamp in the API and store: the wall
//! clock, and [`Clock`], the daemon's time, which never goes back before what it has
//! announced expired.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in unix ms. A clock set before 1970 reads as 0 rather than failing.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The time every part of the daemon goes by (unix ms): the wall clock, but never before a
/// floor. The store keeps the floor at the end of the last item announced expired, so that
/// after the wall clock steps back (NTP, a restored VM) an item whose `expired` event went
/// out stays expired for readers too, not only for the committer.
///
/// One atomic, read without a lock by every request and every commit.
#[derive(Debug)]
pub struct Clock {
    /// The earliest time [`Clock::now`] answers (unix ms). No floor is `i64::MIN`: below
    /// every wall-clock reading, so `max` leaves the wall clock as it is.
    floor: AtomicI64,
}

impl Clock {
    /// A clock that never reads before `floor` (`None`: the wall clock as it is).
    pub fn new(floor: Option<i64>) -> Clock {
        Clock {
            floor: AtomicI64::new(floor.unwrap_or(i64::MIN)),
        }
    }

    /// Now: the wall clock, or the floor while the wall clock is behind it.
    pub fn now(&self) -> i64 {
        now_ms().max(self.floor.load(Ordering::SeqCst))
    }

    /// Replaces the floor (`None`: none). It follows the store's watermark, which a reopen
    /// after a storage error may set back to what the disk kept, so this does not keep the
    /// higher of the two.
    pub fn set_floor(&self, floor: Option<i64>) {
        self.floor
            .store(floor.unwrap_or(i64::MIN), Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_never_goes_back_before_what_was_announced_expired() {
        let clock = Clock::new(None);
        let wall = now_ms();
        assert!(clock.now() >= wall, "no floor: the wall clock");
        // The floor is ahead of the wall clock, as after a step back of the clock.
        let ahead = wall + 3_600_000;
        clock.set_floor(Some(ahead));
        assert!(clock.now() >= ahead, "{} < {ahead}", clock.now());
        assert!(Clock::new(Some(ahead)).now() >= ahead);
        clock.set_floor(None);
        assert!(clock.now() < ahead, "the floor is gone");
    }
}
