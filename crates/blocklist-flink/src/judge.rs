//! Who is to blame, as a pure function of the failures counted in the window.
//!
//! Spark counts failures per executor and excludes every executor past a threshold, so a
//! bug in the job excludes them all and leaves it to caps. Here a task manager is sick only
//! when it **stands out** from the other task managers running the same job:
//!
//! - at least `per_task_manager` counted failures of the job within the window, and
//! - more than the median of the *other* task managers' counts plus `margin`;
//! - a job running on one task manager falls back to the plain count;
//! - when more than `spread_percent` of the job's task managers failed in the window (and
//!   at least two did), the failure is the job's: nobody is blamed.
//!
//! A node is sick when `per_node` distinct task managers on it are.

use std::collections::{BTreeMap, BTreeSet};

/// The thresholds, each a flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    pub per_task_manager: usize,
    pub margin: usize,
    pub spread_percent: usize,
    pub per_node: usize,
}

impl Default for Rules {
    /// Spark's `excludeOnFailure` defaults: 2 failures of an executor, 2 executors of a
    /// node.
    fn default() -> Rules {
        Rules {
            per_task_manager: 2,
            margin: 1,
            spread_percent: 50,
            per_node: 2,
        }
    }
}

/// What one job's failures in the window say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nobody stands out (or nobody failed enough).
    Quiet,
    /// These task managers stand out.
    Sick(BTreeSet<String>),
    /// `failing` of the job's `of` task managers failed: the job's own failure.
    Everywhere { failing: usize, of: usize },
}

impl Rules {
    /// The task managers with enough failures to be looked at (no population needed yet).
    pub fn candidates(&self, counts: &BTreeMap<String, usize>) -> BTreeSet<String> {
        counts
            .iter()
            .filter(|(_, n)| **n >= self.per_task_manager)
            .map(|(tm, _)| tm.clone())
            .collect()
    }

    /// The verdict on one job: `counts` are its counted failures in the window per task
    /// manager, `running` the task managers it runs on now (those that failed are added:
    /// a task manager that failed and was replaced ran it too).
    pub fn judge(&self, counts: &BTreeMap<String, usize>, running: &BTreeSet<String>) -> Verdict {
        let candidates = self.candidates(counts);
        if candidates.is_empty() {
            return Verdict::Quiet;
        }
        let mut population: BTreeSet<&str> = running.iter().map(String::as_str).collect();
        population.extend(counts.keys().map(String::as_str));
        let failing = counts.values().filter(|n| **n > 0).count();
        let of = population.len();
        if failing >= 2 && failing * 100 > self.spread_percent * of {
            return Verdict::Everywhere { failing, of };
        }
        let count = |tm: &str| counts.get(tm).copied().unwrap_or(0);
        let sick: BTreeSet<String> = candidates
            .into_iter()
            .filter(|tm| {
                let mut others: Vec<usize> = population
                    .iter()
                    .filter(|other| **other != tm.as_str())
                    .map(|other| count(other))
                    .collect();
                if others.is_empty() {
                    return true;
                }
                others.sort_unstable();
                // The median of the others, rounded up (so a tie never blames).
                let median = if others.len() % 2 == 1 {
                    others[others.len() / 2]
                } else {
                    (others[others.len() / 2 - 1] + others[others.len() / 2]).div_ceil(2)
                };
                count(tm) > median + self.margin
            })
            .collect();
        if sick.is_empty() {
            Verdict::Quiet
        } else {
            Verdict::Sick(sick)
        }
    }

    /// The nodes with `per_node` or more sick task managers on them: `sick` maps each sick
    /// task manager to its node (those without one are on no node).
    pub fn sick_nodes<'a>(
        &self,
        sick: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> BTreeMap<String, BTreeSet<String>> {
        let mut nodes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (tm, node) in sick {
            nodes
                .entry(node.to_owned())
                .or_default()
                .insert(tm.to_owned());
        }
        nodes.retain(|_, tms| tms.len() >= self.per_node);
        nodes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(all: &[(&str, usize)]) -> BTreeMap<String, usize> {
        all.iter().map(|(tm, n)| ((*tm).to_owned(), *n)).collect()
    }

    fn set(all: &[&str]) -> BTreeSet<String> {
        all.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_table() {
        let rules = Rules::default();
        let four = set(&["tm-1", "tm-2", "tm-3", "tm-4"]);
        type Case<'a> = (
            &'a str,
            &'a [(&'a str, usize)],
            &'a BTreeSet<String>,
            Verdict,
        );
        let cases: &[Case] = &[
            ("nothing failed", &[], &four, Verdict::Quiet),
            (
                "one failure is not enough",
                &[("tm-2", 1)],
                &four,
                Verdict::Quiet,
            ),
            (
                "one bad task manager among four",
                &[("tm-2", 2)],
                &four,
                Verdict::Sick(set(&["tm-2"])),
            ),
            (
                "it stands out above a stray failure elsewhere",
                &[("tm-2", 4), ("tm-3", 1)],
                &four,
                Verdict::Sick(set(&["tm-2"])),
            ),
            (
                "the job fails everywhere: its own bug",
                &[("tm-1", 2), ("tm-2", 2), ("tm-3", 2), ("tm-4", 2)],
                &four,
                Verdict::Everywhere { failing: 4, of: 4 },
            ),
            (
                "three of four is most",
                &[("tm-1", 5), ("tm-2", 2), ("tm-3", 2)],
                &four,
                Verdict::Everywhere { failing: 3, of: 4 },
            ),
            (
                "two of four stand out (one bad node, perhaps)",
                &[("tm-1", 2), ("tm-2", 2)],
                &four,
                Verdict::Sick(set(&["tm-1", "tm-2"])),
            ),
            (
                "a job on one task manager: the plain count",
                &[("tm-1", 2)],
                &set(&["tm-1"]),
                Verdict::Sick(set(&["tm-1"])),
            ),
            (
                "a task manager that failed and left still counts, against the others",
                &[("tm-9", 2)],
                &four,
                Verdict::Sick(set(&["tm-9"])),
            ),
            (
                "one of two",
                &[("tm-1", 3)],
                &set(&["tm-1", "tm-2"]),
                Verdict::Sick(set(&["tm-1"])),
            ),
        ];
        for (name, failures, running, verdict) in cases {
            assert_eq!(&rules.judge(&counts(failures), running), verdict, "{name}");
        }
    }

    #[test]
    fn a_node_needs_enough_sick_task_managers() {
        let rules = Rules::default();
        let nodes = rules.sick_nodes([("tm-1", "n1"), ("tm-2", "n1"), ("tm-3", "n2")]);
        assert_eq!(nodes.keys().collect::<Vec<_>>(), ["n1"]);
        assert_eq!(nodes["n1"], set(&["tm-1", "tm-2"]));
    }
}
