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
//! # Layout
//! - this file: the [`Policy`] document, its per-kind guards and the flags' [`Overrides`];
//! - [`exposure`]: the figures the share caps count ([`Exposure`], [`Standing`]);
//! - [`guards`]: each guard's verdict on a batch, as [`Refusal`]s;
//! - [`bucket`]: the evacuation rate's token bucket.

mod bucket;
mod exposure;
mod guards;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::model::Kind;

pub use bucket::{evacuation_rate, is_new_evacuation, Bucket};
pub use exposure::{Exposure, Level, Standing};
pub use guards::{allowlisted, element, max_items, shares, Figure, Guard, Refusal};

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
    #[schema(maximum = 1_000_000_000_000_000_u64)]
    pub min_registered: u64,
    /// The longest a block may last from its request, in seconds; `null`: no limit.
    #[serde(deserialize_with = "Option::deserialize")]
    #[schema(required = true, minimum = 1, maximum = 1_000_000_000_000_000_u64)]
    pub max_block_duration_secs: Option<u64>,
    /// Whether a block may be permanent.
    pub permanent_blocks_allowed: bool,
    /// Longer blocks for repeat offenders; `null` or absent: off.
    #[serde(default)]
    pub escalation: Option<Escalation>,
}

/// Escalation for repeat offenders (fail2ban's `bantime.increment`): an add that creates a
/// block with a `timeout`, for an id that had `k` blocks ending within the last
/// `windowSecs`, gets `timeout × factor^k`, at most `maxSecs` (and at most
/// `maxBlockDurationSecs`); never less than it asked for. Blocks with an `endTimestamp`,
/// permanent ones and merges into an active block are not escalated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Escalation {
    #[schema(minimum = 2, maximum = 1000)]
    pub factor: u32,
    /// The longest an escalated block lasts, in seconds.
    #[schema(minimum = 1, maximum = 1_000_000_000_000_000_u64)]
    pub max_secs: u64,
    /// How far back past blocks count, in seconds.
    #[schema(minimum = 1, maximum = 1_000_000_000_000_000_u64)]
    pub window_secs: u64,
}

impl Escalation {
    /// The timeout of an add asking for `timeout` ms, for an id with `past` blocks that
    /// ended within the window; at most `cap_ms` (the policy's duration cap, if any).
    pub fn timeout(&self, timeout: i64, past: u32, cap_ms: Option<i64>) -> i64 {
        let max = secs_to_ms(self.max_secs).min(cap_ms.unwrap_or(i64::MAX));
        let grown = i64::from(self.factor)
            .checked_pow(past)
            .and_then(|f| timeout.checked_mul(f))
            .unwrap_or(i64::MAX);
        grown.min(max).max(timeout)
    }

    /// The window in ms.
    pub fn window_ms(&self) -> i64 {
        secs_to_ms(self.window_secs)
    }
}

/// Seconds as ms, saturating.
fn secs_to_ms(secs: u64) -> i64 {
    i64::try_from(secs.saturating_mul(1000)).unwrap_or(i64::MAX)
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
    #[schema(required = true, maximum = 1_000_000_000_000_000_u64)]
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
            escalation: None,
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
        escalation: None,
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
                for (name, value) in [("perMinute", rate.per_minute), ("burst", rate.burst)] {
                    if value > MAX_RATE {
                        problems.push(format!(
                            "{field}.evacuations.{name} is {value}; the most is {MAX_RATE}"
                        ));
                    }
                }
            }
            if let Some(n) = of.max_blocked.filter(|n| *n > MAX_POLICY_NUMBER) {
                problems.push(format!(
                    "{field}.maxBlocked is {n}; the most is {MAX_POLICY_NUMBER}"
                ));
            }
        }
        if self.max_block_duration_secs == Some(0) {
            problems
                .push("maxBlockDurationSecs must be at least 1; null turns the limit off".into());
        }
        for (name, value) in [
            ("minRegistered", Some(self.min_registered)),
            ("maxBlockDurationSecs", self.max_block_duration_secs),
        ] {
            if let Some(n) = value.filter(|n| *n > MAX_POLICY_NUMBER) {
                problems.push(format!("{name} is {n}; the most is {MAX_POLICY_NUMBER}"));
            }
        }
        if let Some(escalation) = &self.escalation {
            if !(2..=1000).contains(&escalation.factor) {
                problems.push(format!(
                    "escalation.factor is {}; it must be 2 to 1000 (null turns escalation off)",
                    escalation.factor
                ));
            }
            for (name, value) in [
                ("maxSecs", escalation.max_secs),
                ("windowSecs", escalation.window_secs),
            ] {
                if value == 0 || value > MAX_POLICY_NUMBER {
                    problems.push(format!(
                        "escalation.{name} is {value}; it must be 1 to {MAX_POLICY_NUMBER}"
                    ));
                }
            }
        }
        problems
    }
}

/// A rate: `per_minute` on average, up to `burst` at once (a token bucket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rate {
    #[schema(minimum = 1, maximum = 1_000_000)]
    pub per_minute: u32,
    #[schema(minimum = 1, maximum = 1_000_000)]
    pub burst: u32,
}

/// The largest count or number of seconds a policy holds (10^15: past any cluster and, in
/// seconds, about 31.7 million years), so that every figure stays exact in a double and in
/// an int64 wherever a client reads it.
pub const MAX_POLICY_NUMBER: u64 = 1_000_000_000_000_000;

/// The fastest evacuation rate and the largest burst a policy holds.
pub const MAX_RATE: u32 = 1_000_000;

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
                // A rate already stored keeps its burst (the flag replaces only the rate);
                // a new one starts with a minute's worth.
                let burst = of.evacuations.map(|r| r.burst);
                of.evacuations = per_minute.map(|per_minute| Rate {
                    per_minute,
                    burst: burst.unwrap_or(per_minute),
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
