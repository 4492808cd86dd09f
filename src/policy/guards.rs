//! Each guard's verdict on a batch: the refusals of the elements it would not let in, each
//! naming the guard, the figures and whether time can fix it.

use super::{slot, Exposure, Policy};
use crate::allowlist::Entry;
use crate::model::{Kind, NewItem, PERMANENT};

/// One count guard's figure against its limit (`None`: off, or not applying).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Figure {
    pub kind: Kind,
    pub guard: Guard,
    pub current: u64,
    pub limit: Option<u64>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Action;

    fn new(id: &str, end: i64) -> NewItem {
        NewItem {
            id: id.into(),
            action: Action::MarkBlocked,
            end,
            cause: "c".into(),
            allow_merge: false,
            source: "unknown".into(),
            timeout: None,
            details: crate::model::Details::new(),
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
    fn a_share_cap_refuses_the_elements_that_add_past_it() {
        let mut policy = Policy::OFF;
        policy.nodes.max_blocked_percent = Some(50);
        policy.min_registered = 4;
        let mut current = Exposure::default();
        current.registered[crate::policy::slot(Kind::Node)] = 10;
        current.blocked[crate::policy::slot(Kind::Node)] = 4;
        let one = Exposure::one(Kind::Node, crate::policy::Level::Blocked);
        let mut none = one;
        none.sub(&one);
        // One more fits (5 of 10); two do not, and the element adding nothing is not named.
        assert!(shares(&policy, &current, &[(0, "a", one)]).is_empty());
        let refused = shares(
            &policy,
            &current,
            &[(0, "a", one), (1, "b", none), (2, "c", one)],
        );
        let named: Vec<usize> = refused.iter().map(|r| r.index).collect();
        assert_eq!(named, [0, 2]);
        assert_eq!(refused[0].guard, Guard::BlockedShare);
        assert!(refused[0].is_for_later(), "two fit under a cap of five");
        assert!(
            refused[0]
                .message
                .contains("4 of 10 now, the cap is 5 (50%), 6 after"),
            "{}",
            refused[0].message
        );
        // Below min_registered the cap does not apply; a batch adding nothing always passes.
        current.registered[crate::policy::slot(Kind::Node)] = 3;
        assert!(shares(&policy, &current, &[(0, "a", one), (1, "b", one)]).is_empty());
        current.registered[crate::policy::slot(Kind::Node)] = 10;
        current.blocked[crate::policy::slot(Kind::Node)] = 9;
        assert!(shares(&policy, &current, &[(0, "a", none)]).is_empty());
    }
}
