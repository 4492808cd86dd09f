//! What to send the daemon about the Nodes' conditions, as a pure function of what the
//! bridge knows: each Node's sick conditions as the Nodes' watch saw them, the reports the
//! daemon holds under the bridge's sources, and what became of the reports it sent.
//!
//! Level-triggered: a condition sick past its hold and not held is reported; one held (or
//! ever sent) that is no longer sick — cleared, its Node deleted, its type no longer
//! configured — is retracted. Two rules keep it from fighting people and guardrails:
//! - an episode (a condition's `lastTransitionTime`) reported once and then no longer
//!   held was ended by someone — an operator's unblock, an allowlist entry, the block's
//!   duration — and is not reported again; its next transition is a new episode;
//! - an episode a guardrail refused is asked again no sooner than [`REFUSED_AGAIN`] later,
//!   never in a loop.

use std::collections::{HashMap, HashSet};

use super::spec::Spec;

/// How long after a refusal an episode is asked again.
pub const REFUSED_AGAIN_MS: i64 = 5 * 60 * 1000;

/// A report older than this past its due moment is checked against the Node's past
/// blocks first (the bridge may have reported it before a restart or a takeover, and
/// someone ended it since); one on time goes at once.
pub const LATE_MS: i64 = 2_000;

/// A configured condition of a Node, in a sick status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sick {
    pub status: String,
    /// Its `lastTransitionTime`, unix ms: the episode.
    pub since: i64,
    pub reason: String,
    pub message: String,
}

/// What became of an episode's report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// The daemon took it.
    Reported,
    /// Someone ended the block it held: not reported again.
    Ended,
    /// A guardrail or the allowlist refused it, at that unix ms.
    Refused(i64),
}

/// One (Node, condition type)'s episode, as far as the bridge sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Episode {
    pub since: i64,
    pub fate: Fate,
    /// A report of it (or of an earlier episode not retracted since) was taken: on
    /// clearing, a retraction is due whatever else is known.
    pub sent: bool,
}

/// (Node, condition type).
pub type Key = (String, String);

/// What the bridge knows.
#[derive(Debug, Default)]
pub struct Known {
    /// Each Node's configured conditions that are sick.
    pub sick: HashMap<String, HashMap<String, Sick>>,
    /// The reports the daemon holds under the bridge's sources.
    pub held: HashSet<Key>,
    pub episodes: HashMap<Key, Episode>,
}

/// One thing to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Report the condition of the Node; `check` first whether a past block ended it.
    Report {
        key: Key,
        sick: Sick,
        counted: i64,
        check: bool,
    },
    Retract {
        key: Key,
    },
}

/// The steps due at `now` (unix ms), and when the next one falls due (a hold that ends, a
/// refusal to ask again), if any. `Known::episodes` is tidied on the way: a cleared
/// episode nothing was sent for is forgotten, and one reported, no longer held and still
/// sick is marked [`Fate::Ended`].
pub fn plan(known: &mut Known, specs: &[Spec], now: i64) -> (Vec<Step>, Option<i64>) {
    let mut keys: HashSet<Key> = known.held.clone();
    keys.extend(known.episodes.keys().cloned());
    for (node, sick) in &known.sick {
        keys.extend(sick.keys().map(|kind| (node.clone(), kind.clone())));
    }
    let mut keys: Vec<Key> = keys.into_iter().collect();
    keys.sort();
    let (mut steps, mut next) = (Vec::new(), None::<i64>);
    let mut due = |at: i64| next = Some(next.map_or(at, |n| n.min(at)));
    for key in keys {
        let spec = specs.iter().find(|s| s.kind == key.1);
        let sick = spec.and(known.sick.get(&key.0).and_then(|s| s.get(&key.1)));
        let held = known.held.contains(&key);
        let (Some(spec), Some(sick)) = (spec, sick) else {
            match known.episodes.get(&key) {
                _ if held => steps.push(Step::Retract { key }),
                Some(episode) if episode.sent => steps.push(Step::Retract { key }),
                _ => {
                    known.episodes.remove(&key);
                }
            }
            continue;
        };
        let counted = sick.since + millis(spec.hold);
        if now < counted {
            due(counted);
            continue;
        }
        if spec.duration.is_some_and(|d| counted + millis(d) <= now) {
            continue; // its block would be over already
        }
        let episode = known.episodes.get_mut(&key);
        let report = match episode {
            // A new episode of a condition the bridge still holds from an earlier one:
            // reported again, so the block says (and lasts for) this one.
            Some(e) if held => e.since != sick.since,
            None if held => false,
            Some(e) if e.since == sick.since => match e.fate {
                Fate::Reported => {
                    e.fate = Fate::Ended;
                    false
                }
                Fate::Ended => false,
                Fate::Refused(at) if now < at + REFUSED_AGAIN_MS => {
                    due(at + REFUSED_AGAIN_MS);
                    false
                }
                Fate::Refused(_) => true,
            },
            _ => true,
        };
        if report {
            let check = !known.episodes.contains_key(&key) && now - counted > LATE_MS;
            steps.push(Step::Report {
                key,
                sick: sick.clone(),
                counted,
                check,
            });
        }
    }
    (steps, next)
}

/// A duration in whole ms, saturating.
pub fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: &str) -> Spec {
        format!("{kind},hold=10s").parse().unwrap()
    }

    fn sick(since: i64) -> Sick {
        Sick {
            status: "True".into(),
            since,
            reason: "r".into(),
            message: "m".into(),
        }
    }

    fn key(node: &str, kind: &str) -> Key {
        (node.into(), kind.into())
    }

    fn known(sick_nodes: &[(&str, &str, i64)]) -> Known {
        let mut known = Known::default();
        for (node, kind, since) in sick_nodes {
            known
                .sick
                .entry((*node).into())
                .or_default()
                .insert((*kind).into(), sick(*since));
        }
        known
    }

    fn episode(since: i64, fate: Fate) -> Episode {
        Episode {
            since,
            fate,
            sent: fate == Fate::Reported,
        }
    }

    #[test]
    fn a_condition_counts_once_it_held_past_its_hold() {
        let specs = [spec("KernelDeadlock")];
        let mut k = known(&[("n1", "KernelDeadlock", 1_000)]);
        assert_eq!(plan(&mut k, &specs, 5_000), (vec![], Some(11_000)));
        let (steps, next) = plan(&mut k, &specs, 11_000);
        assert_eq!(
            steps,
            [Step::Report {
                key: key("n1", "KernelDeadlock"),
                sick: sick(1_000),
                counted: 11_000,
                check: false
            }]
        );
        assert_eq!(next, None);
        // Seen late (a restart, a takeover): checked against the past blocks first.
        let (steps, _) = plan(&mut k, &specs, 20_000);
        assert!(matches!(steps[0], Step::Report { check: true, .. }));
    }

    #[test]
    fn an_unconfigured_type_or_a_healthy_node_reports_nothing() {
        let mut k = known(&[("n1", "Other", 0)]);
        assert_eq!(
            plan(&mut k, &[spec("KernelDeadlock")], 99_000),
            (vec![], None)
        );
    }

    #[test]
    fn held_is_left_alone_and_cleared_is_retracted() {
        let specs = [spec("A"), spec("B")];
        let mut k = known(&[("n1", "A", 0), ("n1", "B", 0)]);
        k.held.insert(key("n1", "A"));
        k.held.insert(key("n1", "B"));
        assert_eq!(plan(&mut k, &specs, 99_000), (vec![], None));
        // B clears: B retracted, A stays (both must clear for the block to end).
        k.sick.get_mut("n1").unwrap().remove("B");
        assert_eq!(
            plan(&mut k, &specs, 99_000).0,
            [Step::Retract {
                key: key("n1", "B")
            }]
        );
        // The Node deleted, or a type no longer configured: retracted too.
        k.sick.clear();
        assert_eq!(plan(&mut k, &specs, 99_000).0.len(), 2);
        let mut k = known(&[]);
        k.held.insert(key("n1", "Gone"));
        assert_eq!(
            plan(&mut k, &specs, 0).0,
            [Step::Retract {
                key: key("n1", "Gone")
            }]
        );
    }

    #[test]
    fn an_episode_someone_ended_is_not_reported_again_but_the_next_one_is() {
        let specs = [spec("A")];
        let mut k = known(&[("n1", "A", 0)]);
        k.episodes
            .insert(key("n1", "A"), episode(0, Fate::Reported));
        // Reported, no longer held, still sick: an operator's unblock (or its end).
        assert_eq!(plan(&mut k, &specs, 99_000), (vec![], None));
        assert_eq!(k.episodes[&key("n1", "A")].fate, Fate::Ended);
        // Clearing still retracts (the report was sent), whatever else is known.
        k.sick.clear();
        assert_eq!(
            plan(&mut k, &specs, 99_000).0,
            [Step::Retract {
                key: key("n1", "A")
            }]
        );
        // A new transition is a new episode.
        let mut k = known(&[("n1", "A", 50_000)]);
        k.episodes.insert(key("n1", "A"), episode(0, Fate::Ended));
        assert!(matches!(
            plan(&mut k, &specs, 60_000).0[..],
            [Step::Report {
                counted: 60_000,
                ..
            }]
        ));
    }

    #[test]
    fn a_refusal_is_asked_again_no_sooner_than_its_pause() {
        let specs = [spec("A")];
        let mut k = known(&[("n1", "A", 0)]);
        k.episodes
            .insert(key("n1", "A"), episode(0, Fate::Refused(20_000)));
        let again = 20_000 + REFUSED_AGAIN_MS;
        assert_eq!(plan(&mut k, &specs, 30_000), (vec![], Some(again)));
        assert_eq!(plan(&mut k, &specs, again).0.len(), 1);
        // Cleared before: forgotten, nothing to retract.
        k.sick.clear();
        assert_eq!(plan(&mut k, &specs, 30_000), (vec![], None));
        assert!(k.episodes.is_empty());
    }

    #[test]
    fn a_new_episode_of_a_held_condition_is_reported_over_the_old_one() {
        let specs = [spec("A")];
        let mut k = known(&[("n1", "A", 40_000)]);
        k.held.insert(key("n1", "A"));
        k.episodes
            .insert(key("n1", "A"), episode(0, Fate::Reported));
        assert_eq!(plan(&mut k, &specs, 45_000), (vec![], Some(50_000)));
        assert_eq!(plan(&mut k, &specs, 50_000).0.len(), 1);
    }

    #[test]
    fn a_block_whose_duration_is_over_is_not_asked_for() {
        let specs = ["A,hold=10s,duration=1m".parse::<Spec>().unwrap()];
        let mut k = known(&[("n1", "A", 0)]);
        assert_eq!(plan(&mut k, &specs, 69_999).0.len(), 1);
        assert_eq!(plan(&mut k, &specs, 70_000), (vec![], None));
    }
}
