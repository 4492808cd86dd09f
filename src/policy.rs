//! The guardrails: what a caller may do to the blocklist at most, so that a broken detector
//! or a script run against the wrong cluster cannot block or evacuate everything at once.
//!
//! Pure, like `model`: the committer asks these questions inside the transaction of the
//! write they guard, against the state every earlier group left (the caller passes `now`
//! and the figures), so concurrent writers can never together pass a guard that each alone
//! would break.
//!
//! A refusal is either for time to fix ([`Refusal::retry_after_ms`] is `Some`: a cap that a
//! block ending will relieve, the evacuation rate), answered 429, or for good (retrying as
//! is never works), answered 422.

use crate::model::{Action, Kind, NewItem, PERMANENT};

/// The guardrails in force. The default guards nothing: plain FLIP-224 use works unchanged
/// until an operator sets a guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Per kind ([`slot`]): at most this many items of the kind blocked at once.
    pub max_items: [Option<u64>; 2],
    /// Per kind: how fast new evacuations (`MARK_BLOCKED_AND_EVACUATE_TASKS`) may come.
    pub evacuations: [Option<Rate>; 2],
    /// The longest a block may last from the request (`endTimestamp − now`), in ms.
    pub max_duration_ms: Option<i64>,
    /// Whether a block may be permanent.
    pub allow_permanent: bool,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            max_items: [None; 2],
            evacuations: [None; 2],
            max_duration_ms: None,
            allow_permanent: true,
        }
    }
}

/// A rate: `per_minute` on average, up to `burst` at once (a token bucket).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub per_minute: u32,
    pub burst: u32,
}

/// Where a kind's guard sits in a per-kind pair.
pub fn slot(kind: Kind) -> usize {
    match kind {
        Kind::TaskManager => 0,
        Kind::Node => 1,
    }
}

/// Where one kind stands against its guardrails.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Standing {
    pub kind: Kind,
    /// Items of the kind blocked, as the cap counts them (an item past its end counts until
    /// the sweeper has announced it).
    pub blocked: u64,
    /// The evacuation tokens available now, with a rate set.
    pub evacuation_tokens: Option<f64>,
}

/// Which guard refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Guard {
    MaxItems,
    EvacuationRate,
    MaxDuration,
    Permanent,
}

impl Guard {
    pub const ALL: [Guard; 4] = [
        Guard::MaxItems,
        Guard::EvacuationRate,
        Guard::MaxDuration,
        Guard::Permanent,
    ];

    /// Its name in messages and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Guard::MaxItems => "max-items",
            Guard::EvacuationRate => "evacuation-rate",
            Guard::MaxDuration => "max-duration",
            Guard::Permanent => "permanent",
        }
    }
}

/// Why a write was refused, naming the element (`index` in the batch, `id`) where one is to
/// blame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub index: usize,
    pub id: String,
    pub guard: Guard,
    /// What is wrong: the current figure, the cap and the figure after the batch.
    pub message: String,
    /// When time will fix it, how long until the write could pass (0: soon, but the
    /// daemon cannot tell when).
    pub retry_after_ms: Option<i64>,
}

impl Refusal {
    /// Whether only retrying later can pass it (429), rather than never as is (422).
    pub fn is_for_later(&self) -> bool {
        self.retry_after_ms.is_some()
    }
}

/// The guards on one element alone: its duration.
pub fn element(
    policy: &Policy,
    kind: Kind,
    index: usize,
    item: &NewItem,
    now: i64,
) -> Option<Refusal> {
    let refusal = |guard, message| Refusal {
        index,
        id: item.id.clone(),
        guard,
        message,
        retry_after_ms: None,
    };
    if item.end == PERMANENT {
        return (!policy.allow_permanent).then(|| {
            refusal(
                Guard::Permanent,
                format!(
                    "a permanent {} block is not allowed here; give a timeout or an \
                     endTimestamp",
                    kind.singular()
                ),
            )
        });
    }
    let max = policy.max_duration_ms?;
    let duration = item.end.saturating_sub(now);
    (duration > max).then(|| {
        refusal(
            Guard::MaxDuration,
            format!("the block would last {duration} ms; the longest allowed is {max} ms"),
        )
    })
}

/// The cap on blocked items of `kind`: `current` blocked now, `new` more after the batch
/// (each element of `new_ids` adds one). Refuses every new element when the cap would be
/// passed; for later when it could fit once blocks end, for good when it could not even
/// alone.
pub fn max_items(
    policy: &Policy,
    kind: Kind,
    current: u64,
    new_ids: &[(usize, &str)],
) -> Vec<Refusal> {
    let Some(cap) = policy.max_items[slot(kind)] else {
        return Vec::new();
    };
    let after = current + new_ids.len() as u64;
    if new_ids.is_empty() || after <= cap {
        return Vec::new();
    }
    let fits_ever = new_ids.len() as u64 <= cap;
    new_ids
        .iter()
        .map(|&(index, id)| Refusal {
            index,
            id: id.to_owned(),
            guard: Guard::MaxItems,
            message: format!(
                "{} blocked: {current} now, the cap is {cap}, {after} after this batch",
                kind.plural()
            ),
            retry_after_ms: fits_ever.then_some(0),
        })
        .collect()
}

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

    fn new(id: &str, end: i64) -> NewItem {
        NewItem {
            id: id.into(),
            action: Action::MarkBlocked,
            end,
            cause: "c".into(),
            allow_merge: false,
        }
    }

    #[test]
    fn durations_and_permanent_blocks() {
        let policy = Policy {
            max_duration_ms: Some(1_000),
            allow_permanent: false,
            ..Policy::default()
        };
        let now = 10_000;
        assert_eq!(
            element(&policy, Kind::Node, 0, &new("a", now + 1_000), now),
            None
        );
        let long = element(&policy, Kind::Node, 3, &new("b", now + 1_001), now).unwrap();
        assert_eq!(
            (long.guard, long.index, long.is_for_later()),
            (Guard::MaxDuration, 3, false)
        );
        let forever = element(&policy, Kind::Node, 0, &new("c", PERMANENT), now).unwrap();
        assert_eq!(forever.guard, Guard::Permanent);
        assert_eq!(
            element(&Policy::default(), Kind::Node, 0, &new("d", PERMANENT), now),
            None
        );
    }

    #[test]
    fn the_item_cap_refuses_every_new_element_past_it() {
        let policy = Policy {
            max_items: [None, Some(5)],
            ..Policy::default()
        };
        let ids = [(0, "a"), (2, "b")];
        assert!(max_items(&policy, Kind::Node, 3, &ids).is_empty());
        let refused = max_items(&policy, Kind::Node, 4, &ids);
        assert_eq!(refused.len(), 2);
        assert!(
            refused.iter().all(|r| r.retry_after_ms == Some(0)),
            "{refused:?}"
        );
        assert!(
            refused[0].message.contains("4 now, the cap is 5, 6 after"),
            "{refused:?}"
        );
        // More than the cap in one batch never fits.
        let many: Vec<(usize, &str)> = (0..6).map(|i| (i, "x")).collect();
        assert!(!max_items(&policy, Kind::Node, 0, &many)[0].is_for_later());
        assert!(max_items(&policy, Kind::TaskManager, 100, &ids).is_empty());
    }

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
