//! What every part of the bridge shares: the ResourceManager, the daemons, the settings,
//! the blocked nodes as far as the bridge knows, the statuses last reported, and the wake-up
//! of the pass.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::Duration;

use blocklist::enforcer::{Block, Daemon};
use tokio::sync::Notify;

use crate::metrics::Metrics;
use crate::plan::Settings;
use crate::rm::ResourceManager;

/// Pacing of an evacuation (`MARK_BLOCKED_AND_EVACUATE_TASKS`).
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// `--evictions-per-minute`: containers stopped per minute across the cluster.
    pub per_minute: u32,
    /// `--max-evacuating-nodes`: blocked nodes emptied at once.
    pub nodes: usize,
}

pub struct Bridge {
    pub rm: ResourceManager,
    pub daemon: Daemon,
    /// `--name`: the enforcer the statuses are reported under.
    pub name: String,
    pub settings: Settings,
    pub pace: Pace,
    /// `--poll`: how often the ResourceManager is read when nothing else wakes the pass.
    pub poll: Duration,
    /// `--application-type`: the applications whose containers are task managers.
    pub application_types: Vec<String>,
    pub metrics: Metrics,
    desired: Mutex<Desired>,
    /// What was last reported of each item: `(state, detail, revision)`.
    pub reported: Mutex<BTreeMap<String, (&'static str, String, u64)>>,
    /// The blocked nodes the last pass found enforced, with their NodeManagers' ids: what
    /// an evacuation may empty (a node's new containers can no longer land there).
    pub enforced: Mutex<BTreeMap<String, Vec<String>>>,
    wake: Notify,
    /// The first pass finished with the daemon's listing in hand.
    pub ready: AtomicBool,
}

/// The blocked nodes, and whether they are current: a listing was read and the feed from
/// its revision is open. While they are not (the daemon unreachable), the pass writes
/// nothing: the bridge never acts on what it cannot see.
#[derive(Default)]
struct Desired {
    blocks: BTreeMap<String, Block>,
    current: bool,
}

impl Bridge {
    pub fn new(
        rm: ResourceManager,
        daemon: Daemon,
        name: String,
        settings: Settings,
        pace: Pace,
        poll: Duration,
        application_types: Vec<String>,
    ) -> Bridge {
        Bridge {
            rm,
            daemon,
            name,
            settings,
            pace,
            poll,
            application_types,
            metrics: Metrics::default(),
            desired: Mutex::new(Desired::default()),
            reported: Mutex::new(BTreeMap::new()),
            enforced: Mutex::new(BTreeMap::new()),
            wake: Notify::new(),
            ready: AtomicBool::new(false),
        }
    }

    fn desired(&self) -> std::sync::MutexGuard<'_, Desired> {
        self.desired.lock().expect("never poisoned")
    }

    /// A listing's blocked nodes: the whole of them, current.
    pub fn listed(&self, blocks: Vec<Block>) {
        let mut desired = self.desired();
        desired.blocks = blocks.into_iter().map(|b| (b.id.clone(), b)).collect();
        desired.current = true;
        drop(desired);
        self.wake.notify_one();
    }

    /// A node's event: `Some` while it blocks, `None` once it does not.
    pub fn changed(&self, id: &str, block: Option<Block>) {
        let mut desired = self.desired();
        match block {
            Some(block) => {
                desired.blocks.insert(id.to_owned(), block);
            }
            None => {
                desired.blocks.remove(id);
            }
        }
        drop(desired);
        self.wake.notify_one();
    }

    /// The feed is open again from where it was (`true`), or broke (`false`).
    pub fn current(&self, current: bool) {
        self.desired().current = current;
        if current {
            self.wake.notify_one();
        }
    }

    /// The blocked nodes, if current.
    pub fn blocked(&self) -> Option<BTreeMap<String, Block>> {
        let desired = self.desired();
        desired.current.then(|| desired.blocks.clone())
    }

    /// Waits until something wakes the pass, or `poll`.
    pub async fn woken(&self) {
        let _ = tokio::time::timeout(self.poll, self.wake.notified()).await;
    }
}
