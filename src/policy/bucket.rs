//! The evacuation rate: a token bucket per kind, kept by the committer.

use super::{Guard, Rate, Refusal};
use crate::model::{Action, Kind};

/// A token bucket's state: `level` tokens at time `at` (unix ms).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    pub level: f64,
    pub at: i64,
}

impl Bucket {
    /// The bucket of a kind without a rate: never used.
    pub const EMPTY: Bucket = Bucket { level: 0.0, at: 0 };

    /// A full bucket of `rate` at `now`.
    pub fn full(rate: Rate, now: i64) -> Bucket {
        Bucket {
            level: f64::from(rate.burst),
            at: now,
        }
    }

    /// The bucket at `now`: refilled for the time since `at` (none if the clock went
    /// back), never over the burst.
    pub fn at(self, rate: Rate, now: i64) -> Bucket {
        let elapsed = now.saturating_sub(self.at).max(0) as f64;
        let level = (self.level + elapsed * f64::from(rate.per_minute) / 60_000.0)
            .min(f64::from(rate.burst));
        Bucket {
            level,
            at: now.max(self.at),
        }
    }
}

/// The evacuation rate guard for a batch whose `evacuations` (index, id) are new ones:
/// `Ok` with the bucket after taking them, or a refusal of each.
pub fn evacuation_rate(
    rate: Rate,
    bucket: Bucket,
    kind: Kind,
    evacuations: &[(usize, &str)],
    now: i64,
) -> Result<Bucket, Vec<Refusal>> {
    let bucket = bucket.at(rate, now);
    let wanted = evacuations.len() as f64;
    if wanted <= bucket.level {
        return Ok(Bucket {
            level: bucket.level - wanted,
            at: bucket.at,
        });
    }
    let retry_after_ms = if wanted <= f64::from(rate.burst) && rate.per_minute > 0 {
        let missing = wanted - bucket.level;
        Some((missing * 60_000.0 / f64::from(rate.per_minute)).ceil() as i64)
    } else {
        None
    };
    let message = format!(
        "new {} evacuations: {} in this batch, {:.1} allowed now ({} per minute, bursts of {})",
        kind.singular(),
        evacuations.len(),
        bucket.level.floor(),
        rate.per_minute,
        rate.burst
    );
    Err(evacuations
        .iter()
        .map(|&(index, id)| Refusal {
            index,
            id: id.to_owned(),
            guard: Guard::EvacuationRate,
            message: message.clone(),
            retry_after_ms,
        })
        .collect())
}

/// Whether an element's outcome is a new evacuation: an id that ends evacuating and was not
/// evacuating before (nothing active, or an active `MARK_BLOCKED`).
pub fn is_new_evacuation(before: Option<Action>, after: Action) -> bool {
    after == Action::MarkBlockedAndEvacuateTasks && before != Some(after)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATE: Rate = Rate {
        per_minute: 60,
        burst: 3,
    };

    #[test]
    fn the_bucket_refills_at_the_rate_up_to_the_burst() {
        let bucket = Bucket::full(RATE, 0);
        let three = [(0, "a"), (1, "b"), (2, "c")];
        let empty = evacuation_rate(RATE, bucket, Kind::Node, &three, 0).unwrap();
        assert!(empty.level.abs() < 1e-9);
        // One token a second.
        let refused = evacuation_rate(RATE, empty, Kind::Node, &three[..2], 500).unwrap_err();
        assert_eq!(refused[0].retry_after_ms, Some(1_500));
        let later = evacuation_rate(RATE, empty, Kind::Node, &three[..2], 2_000).unwrap();
        assert!(later.level.abs() < 1e-9);
        // Never over the burst, and a clock that went back refills nothing.
        assert_eq!(empty.at(RATE, 3_600_000).level, 3.0);
        assert_eq!(empty.at(RATE, -5).level, empty.level);
        // A batch bigger than the burst can never pass.
        let four = [(0, "a"), (1, "b"), (2, "c"), (3, "d")];
        let refused = evacuation_rate(RATE, bucket, Kind::Node, &four, 0).unwrap_err();
        assert!(!refused[0].is_for_later());
    }

    #[test]
    fn new_evacuations() {
        let (block, evacuate) = (Action::MarkBlocked, Action::MarkBlockedAndEvacuateTasks);
        assert!(is_new_evacuation(None, evacuate));
        assert!(is_new_evacuation(Some(block), evacuate));
        assert!(!is_new_evacuation(Some(evacuate), evacuate));
        assert!(!is_new_evacuation(None, block));
    }
}
