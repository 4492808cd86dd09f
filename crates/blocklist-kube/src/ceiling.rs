//! The bridge's own ceiling, behind the daemon's guardrails: never more than
//! `--max-tainted-nodes-percent` of the cluster's Nodes carry its taint. Beyond it no new
//! taint is put (the Node's status says `heldBack`); taints already put stay, and a Node
//! freed by an unblock makes room for the next.

use std::collections::HashSet;
use std::sync::Mutex;

pub struct Ceiling {
    percent: u64,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Every Node of the cluster, by name.
    nodes: HashSet<String>,
    /// The Nodes carrying the bridge's taint (or granted it, the patch on its way).
    tainted: HashSet<String>,
    /// The Nodes refused a taint, until one is granted: each is told once.
    held: HashSet<String>,
}

impl Ceiling {
    pub fn new(percent: u8) -> Ceiling {
        Ceiling {
            percent: u64::from(percent.min(100)),
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("not poisoned")
    }

    /// A Node as read (the watch): whether it carries the taint. A Node read without it
    /// stays counted if it was granted one: the read may predate the patch, and the only
    /// ways a taint goes are [`Ceiling::release`] and [`Ceiling::gone`] (one taken off by
    /// hand is put back).
    pub fn seen(&self, name: &str, tainted: bool) {
        let mut state = self.state();
        state.nodes.insert(name.to_owned());
        if tainted {
            state.tainted.insert(name.to_owned());
        }
    }

    /// A Node deleted.
    pub fn gone(&self, name: &str) {
        let mut state = self.state();
        state.nodes.remove(name);
        state.tainted.remove(name);
    }

    /// Every Node, from a full listing: `(name, tainted)`. Taints granted meanwhile (by
    /// the feed, while the listing was read) stay counted, so the count errs on the safe
    /// side; deleted Nodes go.
    pub fn replace(&self, all: impl IntoIterator<Item = (String, bool)>) {
        let mut state = self.state();
        let mut nodes = HashSet::new();
        for (name, tainted) in all {
            if tainted {
                state.tainted.insert(name.clone());
            }
            nodes.insert(name);
        }
        state.tainted.retain(|name| nodes.contains(name));
        state.nodes = nodes;
    }

    /// Asks to taint `name`: granted (and counted) when it is tainted already or one more
    /// stays within the ceiling; otherwise why not, and whether this is the first refusal
    /// since it was last granted (the one to tell on the Node).
    pub fn admit(&self, name: &str) -> Result<(), (String, bool)> {
        let mut state = self.state();
        if state.tainted.contains(name) {
            return Ok(());
        }
        let total = state.nodes.len().max(1) as u64;
        let allowed = total * self.percent / 100;
        if (state.tainted.len() as u64) < allowed {
            state.tainted.insert(name.to_owned());
            state.held.remove(name);
            return Ok(());
        }
        let first = state.held.insert(name.to_owned());
        Err((
            format!(
                "{} of the cluster's {total} Nodes carry the taint: the ceiling \
             (--max-tainted-nodes-percent {}) allows {allowed}",
                state.tainted.len(),
                self.percent
            ),
            first,
        ))
    }

    /// `name` no longer carries the taint, or no longer needs one.
    pub fn release(&self, name: &str) {
        let mut state = self.state();
        state.tainted.remove(name);
        state.held.remove(name);
    }

    /// The Nodes refused a taint since they were last granted one, by name.
    pub fn held(&self) -> Vec<String> {
        let mut held: Vec<String> = self.state().held.iter().cloned().collect();
        held.sort();
        held
    }

    /// Every Node's name.
    pub fn names(&self) -> HashSet<String> {
        self.state().nodes.clone()
    }

    /// How many Nodes carry the taint.
    pub fn tainted(&self) -> usize {
        self.state().tainted.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_admits_up_to_its_share_and_a_release_makes_room() {
        let ceiling = Ceiling::new(50);
        ceiling.replace((0..10).map(|i| (format!("n{i}"), i == 0)));
        for i in 1..5 {
            assert_eq!(ceiling.admit(&format!("n{i}")), Ok(()));
        }
        let (refused, first) = ceiling.admit("n5").unwrap_err();
        assert!(refused.contains("5 of the cluster's 10 Nodes"), "{refused}");
        assert!(first);
        assert!(!ceiling.admit("n5").unwrap_err().1, "told once");
        assert_eq!(ceiling.admit("n0"), Ok(()), "one already tainted stays");
        ceiling.release("n1");
        assert_eq!(ceiling.admit("n5"), Ok(()));
        assert_eq!(ceiling.tainted(), 5);
    }
}
