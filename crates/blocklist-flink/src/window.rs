//! The failures of one Flink cluster counted in the sliding window, each once.
//!
//! A failure is itself by its job, its time and its task manager, however many polls see
//! it. Nothing of this is kept on disk: after a restart the window is read again from
//! Flink's exception histories, which hold what was counted before (the count is
//! re-derived, never added to), and what was already reported is read from the daemon
//! (`crate::report`). A failure at or before the end of the task manager's last block is
//! paid for: it counted toward that block and counts toward no later one.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::history::Failure;

#[derive(Debug, Default)]
pub struct Window {
    /// Its width, ms.
    width: i64,
    /// Every failure seen and still in the window, counted or not: seen once.
    seen: BTreeSet<(String, i64, String)>,
    /// The counted failures by job and task manager.
    counted: BTreeMap<String, BTreeMap<String, Vec<Failure>>>,
    /// Per task manager, the end of its last block: failures up to it are paid for.
    paid: HashMap<String, i64>,
}

impl Window {
    pub fn new(width_ms: i64) -> Window {
        Window {
            width: width_ms,
            ..Window::default()
        }
    }

    /// Takes a failure in: `true` when it was not seen before (and is inside the window).
    /// Only a failure that `counts` is counted.
    pub fn observe(&mut self, failure: &Failure, counts: bool, now: i64) -> bool {
        if failure.timestamp <= now - self.width || !self.seen.insert(failure.key()) {
            return false;
        }
        let paid = self.paid.get(&failure.task_manager).copied();
        if counts && paid.is_none_or(|until| failure.timestamp > until) {
            self.counted
                .entry(failure.job.clone())
                .or_default()
                .entry(failure.task_manager.clone())
                .or_default()
                .push(failure.clone());
        }
        true
    }

    /// Forgets what left the window.
    pub fn slide(&mut self, now: i64) {
        let from = now - self.width;
        self.seen.retain(|(_, at, _)| *at > from);
        for tms in self.counted.values_mut() {
            for failures in tms.values_mut() {
                failures.retain(|f| f.timestamp > from);
            }
            tms.retain(|_, failures| !failures.is_empty());
        }
        self.counted.retain(|_, tms| !tms.is_empty());
        self.paid.retain(|_, until| *until > from);
    }

    /// The failures of `task_manager` up to `until` are paid for by a block that ended
    /// then (or ends then): they count toward no later block.
    pub fn pay(&mut self, task_manager: &str, until: i64) {
        let paid = self.paid.entry(task_manager.to_owned()).or_insert(until);
        *paid = (*paid).max(until);
        for tms in self.counted.values_mut() {
            if let Some(failures) = tms.get_mut(task_manager) {
                failures.retain(|f| f.timestamp > until);
            }
            tms.retain(|_, failures| !failures.is_empty());
        }
        self.counted.retain(|_, tms| !tms.is_empty());
    }

    /// The jobs with counted failures, each with its counts per task manager.
    pub fn counts(&self) -> impl Iterator<Item = (&str, BTreeMap<String, usize>)> {
        self.counted.iter().map(|(job, tms)| {
            (
                job.as_str(),
                tms.iter().map(|(tm, f)| (tm.clone(), f.len())).collect(),
            )
        })
    }

    /// The counted failures of `task_manager` in `job`, oldest first.
    pub fn failures(&self, job: &str, task_manager: &str) -> Vec<&Failure> {
        let mut all: Vec<&Failure> = self
            .counted
            .get(job)
            .and_then(|tms| tms.get(task_manager))
            .map(|f| f.iter().collect())
            .unwrap_or_default();
        all.sort_by_key(|f| f.timestamp);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(tm: &str, at: i64) -> Failure {
        Failure {
            job: "j".into(),
            task_manager: tm.into(),
            timestamp: at,
            exception: "java.io.IOException".into(),
            message: String::new(),
            labels: BTreeMap::new(),
        }
    }

    fn count(window: &Window, tm: &str) -> usize {
        window.failures("j", tm).len()
    }

    #[test]
    fn a_failure_seen_by_many_polls_counts_once() {
        let mut window = Window::new(600_000);
        assert!(window.observe(&failure("tm-2", 1_000), true, 2_000));
        assert!(!window.observe(&failure("tm-2", 1_000), true, 3_000));
        assert!(window.observe(&failure("tm-2", 1_500), true, 3_000));
        assert!(window.observe(&failure("tm-3", 1_500), false, 3_000));
        assert_eq!(count(&window, "tm-2"), 2);
        assert_eq!(count(&window, "tm-3"), 0, "seen, not counted");
    }

    #[test]
    fn the_window_slides_and_paid_failures_count_no_more() {
        let mut window = Window::new(10_000);
        window.observe(&failure("tm-2", 1_000), true, 1_000);
        window.observe(&failure("tm-2", 5_000), true, 5_000);
        window.slide(11_500);
        assert_eq!(count(&window, "tm-2"), 1, "the first left the window");
        assert!(
            !window.observe(&failure("tm-2", 1_000), true, 11_500),
            "too old to count again"
        );
        window.pay("tm-2", 6_000);
        assert_eq!(count(&window, "tm-2"), 0);
        window.observe(&failure("tm-2", 5_500), true, 12_000);
        assert_eq!(count(&window, "tm-2"), 0, "paid for by the block");
        window.observe(&failure("tm-2", 7_000), true, 12_000);
        assert_eq!(count(&window, "tm-2"), 1, "after the block's end");
        assert_eq!(window.counts().count(), 1);
    }
}
