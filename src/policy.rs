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

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::allowlist::Entry;
use crate::model::{Action, Kind, NewItem, PERMANENT};

/// The guardrails in force: `GET /policy`'s document, stored by the daemon.
///
/// The default caps a kind's share of *registered* ids only (so a caller that never
/// registers task managers meets no guard) and sets no rate, count or duration limit.
/// Every field is required in a `PUT /policy` (a replace: nothing is left to a default the
/// caller did not see).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    pub nodes: KindPolicy,
    pub task_managers: KindPolicy,
    /// The share caps of a kind apply only while at least this many ids of it are
    /// registered: on a small cluster one failure is already a large share.
    pub min_registered: u64,
    /// The longest a block may last from its request, in seconds; `null`: no limit.
    #[serde(deserialize_with = "Option::deserialize")]
    #[schema(required = true, minimum = 1)]
    pub max_block_duration_secs: Option<u64>,
    /// Whether a block may be permanent.
    pub permanent_blocks_allowed: bool,
}

/// The guardrails of one kind. Each is off when `null`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KindPolicy {
    /// At most this percentage of the registered ids of the kind may be effectively
    /// blocked at once (a task manager is, by its own item or by its node's).
    #[serde(deserialize_with = "Option::deserialize")]
    #[schema(required = true, maximum = 100)]
    pub max_blocked_percent: Option<u8>,
    /// At most this percentage of the registered ids of the kind may be effectively
    /// evacuating (`MARK_BLOCKED_AND_EVACUATE_TASKS`) at once.
    #[serde(deserialize_with = "Option::deserialize")]
    #[schema(required = true, maximum = 100)]
    pub max_evacuating_percent: Option<u8>,
    /// At most this many items of the kind, registered or not.
    #[serde(deserialize_with = "Option::deserialize")]
    #[schema(required = true)]
    pub max_blocked: Option<u64>,
    /// How fast new evacuations may come.
    #[serde(deserialize_with = "Option::deserialize")]
    #[schema(required = true)]
    pub evacuations: Option<Rate>,
}

impl KindPolicy {
    /// No guard at all.
    pub const OFF: KindPolicy = KindPolicy {
        max_blocked_percent: None,
        max_evacuating_percent: None,
        max_blocked: None,
        evacuations: None,
    };
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            nodes: KindPolicy {
                max_blocked_percent: Some(50),
                max_evacuating_percent: Some(20),
                ..KindPolicy::OFF
            },
            task_managers: KindPolicy {
                max_blocked_percent: Some(50),
                ..KindPolicy::OFF
            },
            min_registered: 10,
            max_block_duration_secs: None,
            permanent_blocks_allowed: true,
        }
    }
}

impl Policy {
    /// No guard at all: what an embedding (or a test) sets to have none.
    pub const OFF: Policy = Policy {
        nodes: KindPolicy::OFF,
        task_managers: KindPolicy::OFF,
        min_registered: 0,
        max_block_duration_secs: None,
        permanent_blocks_allowed: true,
    };

    /// The guardrails of `kind`.
    pub fn of(&self, kind: Kind) -> &KindPolicy {
        match kind {
            Kind::TaskManager => &self.task_managers,
            Kind::Node => &self.nodes,
        }
    }

    pub fn of_mut(&mut self, kind: Kind) -> &mut KindPolicy {
        match kind {
            Kind::TaskManager => &mut self.task_managers,
            Kind::Node => &mut self.nodes,
        }
    }

    /// A share cap of `percent` in ids of a kind with `registered` registered ids: `None`
    /// when the cap is off, or does not apply (fewer than `min_registered`, or none).
    pub fn share_cap(&self, percent: Option<u8>, registered: u64) -> Option<u64> {
        let percent = percent?;
        (registered >= self.min_registered && registered > 0)
            .then(|| registered * u64::from(percent) / 100)
    }

    /// Each count guard of each kind, with its current figure and its limit in `standing`
    /// (for the gauges): the count cap and the two share caps.
    pub fn figures(&self, standing: &[Standing; 2]) -> Vec<Figure> {
        standing
            .iter()
            .flat_map(|s| {
                let of = self.of(s.kind);
                [
                    (Guard::MaxItems, s.items, of.max_blocked),
                    (
                        Guard::BlockedShare,
                        s.blocked,
                        self.share_cap(of.max_blocked_percent, s.registered),
                    ),
                    (
                        Guard::EvacuatingShare,
                        s.evacuating,
                        self.share_cap(of.max_evacuating_percent, s.registered),
                    ),
                ]
                .map(|(guard, current, limit)| Figure {
                    kind: s.kind,
                    guard,
                    current,
                    limit,
                })
            })
            .collect()
    }

    /// The longest a block may last, in ms.
    pub fn max_duration_ms(&self) -> Option<i64> {
        self.max_block_duration_secs
            .map(|secs| i64::try_from(secs.saturating_mul(1000)).unwrap_or(i64::MAX))
    }

    /// What is wrong with it, each naming its field; empty when it can be stored.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for kind in Kind::ALL {
            let of = self.of(kind);
            let field = match kind {
                Kind::TaskManager => "taskManagers",
                Kind::Node => "nodes",
            };
            for (name, percent) in [
                ("maxBlockedPercent", of.max_blocked_percent),
                ("maxEvacuatingPercent", of.max_evacuating_percent),
            ] {
                if let Some(p) = percent.filter(|p| *p > 100) {
                    problems.push(format!("{field}.{name} is {p}; a percentage is 0 to 100"));
                }
            }
            if let Some(rate) = of.evacuations {
                if rate.per_minute == 0 {
                    problems.push(format!(
                        "{field}.evacuations.perMinute must be at least 1; null turns the rate \
                         limit off"
                    ));
                }
                if rate.burst == 0 {
                    problems.push(format!("{field}.evacuations.burst must be at least 1"));
                }
            }
        }
        if self.max_block_duration_secs == Some(0) {
            problems
                .push("maxBlockDurationSecs must be at least 1; null turns the limit off".into());
        }
        problems
    }
}

/// A rate: `per_minute` on average, up to `burst` at once (a token bucket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rate {
    #[schema(minimum = 1)]
    pub per_minute: u32,
    #[schema(minimum = 1)]
    pub burst: u32,
}

/// What the daemon's flags set in the stored policy at start: each `Some` replaces its
/// field, the rest keep what is stored (or the default, on a new data dir).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// Per kind ([`slot`]); the inner `None` turns the guard off.
    pub max_blocked_percent: [Option<Option<u8>>; 2],
    pub max_evacuating_percent: [Option<Option<u8>>; 2],
    pub max_blocked: [Option<Option<u64>>; 2],
    pub evacuations_per_minute: [Option<Option<u32>>; 2],
    /// Only with a rate (set here or stored); without one, the rate's own value.
    pub evacuation_burst: [Option<u32>; 2],
    pub min_registered: Option<u64>,
    pub max_block_duration_secs: Option<Option<u64>>,
    pub permanent_blocks_allowed: Option<bool>,
}

impl Overrides {
    /// `policy` with these overrides applied.
    pub fn apply(&self, mut policy: Policy) -> Policy {
        for kind in Kind::ALL {
            let i = slot(kind);
            let of = policy.of_mut(kind);
            if let Some(v) = self.max_blocked_percent[i] {
                of.max_blocked_percent = v;
            }
            if let Some(v) = self.max_evacuating_percent[i] {
                of.max_evacuating_percent = v;
            }
            if let Some(v) = self.max_blocked[i] {
                of.max_blocked = v;
            }
            if let Some(per_minute) = self.evacuations_per_minute[i] {
                of.evacuations = per_minute.map(|per_minute| Rate {
                    per_minute,
                    burst: per_minute,
                });
            }
            if let (Some(rate), Some(burst)) = (&mut of.evacuations, self.evacuation_burst[i]) {
                rate.burst = burst;
            }
        }
        if let Some(v) = self.min_registered {
            policy.min_registered = v;
        }
        if let Some(v) = self.max_block_duration_secs {
            policy.max_block_duration_secs = v;
        }
        if let Some(v) = self.permanent_blocks_allowed {
            policy.permanent_blocks_allowed = v;
        }
        policy
    }
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
    /// Items of the kind stored, as the count cap counts them (an item past its end counts
    /// until the sweeper has announced it).
    pub items: u64,
    /// Its registered ids, and how many of them are effectively blocked and evacuating.
    pub registered: u64,
    pub blocked: u64,
    pub evacuating: u64,
    /// The evacuation tokens available now, with a rate set.
    pub evacuation_tokens: Option<f64>,
}

/// One count guard's figure against its limit (`None`: off, or not applying).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Figure {
    pub kind: Kind,
    pub guard: Guard,
    pub current: u64,
    pub limit: Option<u64>,
}

/// How far the blocklist reaches into the registered ids, per kind ([`slot`]): what the
/// share caps count. A registered node is a node with at least one registered task
/// manager; a registered task manager is effectively blocked by its own item or by its
/// node's, and evacuating when either evacuates. An item counts until it is announced
/// expired, like [`Standing::items`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Exposure {
    pub registered: [i64; 2],
    pub blocked: [i64; 2],
    pub evacuating: [i64; 2],
}

impl Exposure {
    pub fn add(&mut self, other: &Exposure) {
        for i in 0..2 {
            self.registered[i] += other.registered[i];
            self.blocked[i] += other.blocked[i];
            self.evacuating[i] += other.evacuating[i];
        }
    }

    pub fn sub(&mut self, other: &Exposure) {
        for i in 0..2 {
            self.registered[i] -= other.registered[i];
            self.blocked[i] -= other.blocked[i];
            self.evacuating[i] -= other.evacuating[i];
        }
    }

    /// One registered id of `kind`, blocked to `level`.
    pub fn one(kind: Kind, level: Level) -> Exposure {
        let mut exposure = Exposure::default();
        let i = slot(kind);
        exposure.registered[i] = 1;
        exposure.blocked[i] = i64::from(level >= Level::Blocked);
        exposure.evacuating[i] = i64::from(level == Level::Evacuating);
        exposure
    }
}

/// How strongly an id is blocked, as the share caps see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Free,
    Blocked,
    Evacuating,
}

impl Level {
    pub fn of(action: Option<Action>) -> Level {
        match action {
            None => Level::Free,
            Some(Action::MarkBlocked) => Level::Blocked,
            Some(Action::MarkBlockedAndEvacuateTasks) => Level::Evacuating,
        }
    }
}

/// Which guard refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Guard {
    MaxItems,
    BlockedShare,
    EvacuatingShare,
    EvacuationRate,
    MaxDuration,
    Permanent,
    Allowlist,
}

impl Guard {
    pub const ALL: [Guard; 7] = [
        Guard::MaxItems,
        Guard::BlockedShare,
        Guard::EvacuatingShare,
        Guard::EvacuationRate,
        Guard::MaxDuration,
        Guard::Permanent,
        Guard::Allowlist,
    ];

    /// Its name in messages and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Guard::MaxItems => "max-items",
            Guard::BlockedShare => "blocked-share",
            Guard::EvacuatingShare => "evacuating-share",
            Guard::EvacuationRate => "evacuation-rate",
            Guard::MaxDuration => "max-duration",
            Guard::Permanent => "permanent",
            Guard::Allowlist => "allowlist",
        }
    }

    /// Whether `?force=true` passes it: the caps and the rate, which protect the cluster
    /// from a storm an operator may know to be real; never what the operator's own policy
    /// says of one block (its duration, the allowlist).
    pub fn is_forceable(self) -> bool {
        matches!(
            self,
            Guard::MaxItems | Guard::BlockedShare | Guard::EvacuatingShare | Guard::EvacuationRate
        )
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
        return (!policy.permanent_blocks_allowed).then(|| {
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
    let max = policy.max_duration_ms()?;
    let duration = item.end.saturating_sub(now);
    (duration > max).then(|| {
        refusal(
            Guard::MaxDuration,
            format!("the block would last {duration} ms; the longest allowed is {max} ms"),
        )
    })
}

/// The refusal of element `index`, whose `id` the allowlist `entry` covers at `now`: for
/// good, unless the entry ends (a hold-off): then until it does.
pub fn allowlisted(kind: Kind, index: usize, id: &str, entry: &Entry, now: i64) -> Refusal {
    let by = entry
        .added_by
        .as_deref()
        .map_or(String::new(), |by| format!(", added by {by}"));
    let until = entry
        .end_timestamp
        .map_or(String::new(), |end| format!(", until {end} (unix ms)"));
    let which = if entry.prefix {
        format!("the prefix entry {:?}", entry.id)
    } else {
        "its entry".to_owned()
    };
    Refusal {
        index,
        id: id.to_owned(),
        guard: Guard::Allowlist,
        message: format!(
            "{} {id:?} is on the allowlist ({which}: {:?}{by}{until}); it may not be blocked",
            kind.singular(),
            entry.comment
        ),
        retry_after_ms: entry.end_timestamp.map(|end| (end - now).max(0)),
    }
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
    let Some(cap) = policy.of(kind).max_blocked else {
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

/// The share caps of every kind, for a batch whose elements `(index, id, delta)` change the
/// exposure by `delta` each, against `current`. Refuses each element that adds to a measure
/// (registered ids blocked, evacuating) of a kind past its cap; for later when the batch
/// alone fits under the cap (blocks ending will make room), for good when it never can.
/// A batch that adds nothing to a measure is never refused by it, even above its cap (a
/// policy lowered below the current figure, registrations onto blocked nodes).
pub fn shares(
    policy: &Policy,
    current: &Exposure,
    elements: &[(usize, &str, Exposure)],
) -> Vec<Refusal> {
    let mut refusals = Vec::new();
    // Nodes first: a node batch that breaks both kinds' caps is named for its own first.
    for kind in [Kind::Node, Kind::TaskManager] {
        let i = slot(kind);
        let registered = current.registered[i].max(0).unsigned_abs();
        let of = policy.of(kind);
        let measures = [
            (Guard::BlockedShare, "blocked", of.max_blocked_percent),
            (
                Guard::EvacuatingShare,
                "evacuating",
                of.max_evacuating_percent,
            ),
        ];
        for (guard, what, percent) in measures {
            let Some(cap) = policy.share_cap(percent, registered) else {
                continue;
            };
            let cap = i64::try_from(cap).unwrap_or(i64::MAX);
            let percent = percent.unwrap_or_default();
            let measure = |e: &Exposure| match guard {
                Guard::BlockedShare => e.blocked[i],
                _ => e.evacuating[i],
            };
            let now_figure = measure(current);
            let delta: i64 = elements.iter().map(|(_, _, d)| measure(d)).sum();
            let after = now_figure + delta;
            if delta <= 0 || after <= cap {
                continue;
            }
            let added: i64 = elements.iter().map(|(_, _, d)| measure(d).max(0)).sum();
            let fits_ever = added <= cap;
            let message = format!(
                "registered {} {what}: {now_figure} of {registered} now, the cap is {cap} \
                 ({percent}%), {after} after this batch",
                kind.plural()
            );
            refusals.extend(elements.iter().filter(|(_, _, d)| measure(d) > 0).map(
                |&(index, id, _)| Refusal {
                    index,
                    id: id.to_owned(),
                    guard,
                    message: message.clone(),
                    retry_after_ms: fits_ever.then_some(0),
                },
            ));
        }
    }
    refusals
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
            max_block_duration_secs: Some(1),
            permanent_blocks_allowed: false,
            ..Policy::OFF
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
            element(&Policy::OFF, Kind::Node, 0, &new("d", PERMANENT), now),
            None
        );
    }

    #[test]
    fn the_item_cap_refuses_every_new_element_past_it() {
        let mut policy = Policy::OFF;
        policy.nodes.max_blocked = Some(5);
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
