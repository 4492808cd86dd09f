//! What every part of the bridge shares: the daemon, the Nodes' API, the bridge's names on
//! a Node, what the blocklist wants, the ceiling, the statuses, the Events, the metrics and
//! whether this replica leads.

use std::collections::HashSet;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Node;
use kube::api::Api;

use crate::ceiling::Ceiling;
use crate::conditions::Conditions;
use crate::daemon::{Daemon, Status};
use crate::desired::Desired;
use crate::events::Events;
use crate::leader::Leadership;
use crate::marking::{Block, Marking};
use crate::metrics::Metrics;
use crate::report::Reporter;

/// What the bridge did to one Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It already carried what it should: nothing was sent.
    Unchanged,
    /// One patch (after any 409s) made it so (with `--dry-run`: would have).
    Written,
    /// No such Node (an id the blocklist names that is not a Node, or one deleted since).
    Missing,
    /// Not tainted: the ceiling was reached (why).
    HeldBack(String),
}

pub struct Bridge {
    /// The name its statuses are reported under (`--name`).
    pub name: String,
    pub daemon: Daemon,
    pub nodes: Api<Node>,
    pub marking: Marking,
    pub desired: Desired,
    pub ceiling: Ceiling,
    pub reporter: Reporter,
    pub events: Events,
    pub metrics: Metrics,
    /// The Node conditions that block their Node (`--condition`).
    pub conditions: Conditions,
    /// Set once the first full reconcile finished (`/readyz`).
    pub ready: AtomicBool,
    /// Whether this replica may write ([`crate::leader`]).
    pub leader: Leadership,
    /// Blocked ids that name no Node (`blocklist_kube_nodes_missing`).
    missing: Mutex<HashSet<String>>,
    /// Blocked Nodes that carry their taint (with `--dry-run`: would), as last written or
    /// read: the only Nodes an evacuation empties (one held back is not emptied).
    marked: Mutex<HashSet<String>>,
    /// Something an evacuation acts on changed.
    evacuation: tokio::sync::Notify,
}

impl Bridge {
    /// A bridge named `name` on `client`'s cluster, before its first reconcile.
    pub fn new(
        name: String,
        daemon: Daemon,
        client: &kube::Client,
        marking: Marking,
        max_tainted_percent: u8,
    ) -> Bridge {
        Bridge {
            name,
            daemon,
            nodes: Api::all(client.clone()),
            events: Events::new(client.clone(), marking.clone()),
            marking,
            desired: Desired::default(),
            ceiling: Ceiling::new(max_tainted_percent),
            reporter: Reporter::default(),
            metrics: Metrics::default(),
            conditions: Conditions::off(),
            ready: AtomicBool::new(false),
            leader: Leadership::new(None),
            missing: Mutex::default(),
            marked: Mutex::default(),
            evacuation: tokio::sync::Notify::new(),
        }
    }

    /// Something an evacuation acts on changed (a block, a Node marked, a pod): it looks
    /// again now.
    pub fn wake_evacuation(&self) {
        self.evacuation.notify_one();
    }

    /// Until [`Bridge::wake_evacuation`].
    pub async fn evacuation_woken(&self) {
        self.evacuation.notified().await;
    }

    /// The bridge with `conditions` detected.
    #[must_use]
    pub fn with_conditions(self, conditions: Conditions) -> Bridge {
        Bridge { conditions, ..self }
    }

    /// The bridge with `leader` deciding whether it may write.
    #[must_use]
    pub fn with_leadership(self, leader: Leadership) -> Bridge {
        Bridge { leader, ..self }
    }

    /// Whether blocked Node `name` carries its taint (with `--dry-run`: would).
    pub fn marked(&self, name: &str) -> bool {
        self.marked.lock().expect("not poisoned").contains(name)
    }

    /// Records what was done about Node `name`, which should carry `block`: its status for
    /// the daemon, and the metrics.
    pub fn record(&self, name: &str, block: Option<&Block>, outcome: &Result<Outcome, String>) {
        let mut missing = self.missing.lock().expect("not poisoned");
        if block.is_some() && matches!(outcome, Ok(Outcome::Missing)) {
            missing.insert(name.to_owned());
        } else {
            missing.remove(name);
        }
        self.metrics
            .nodes_missing
            .set(i64::try_from(missing.len()).unwrap_or(i64::MAX));
        drop(missing);
        let mut marked = self.marked.lock().expect("not poisoned");
        let changed =
            if block.is_some() && matches!(outcome, Ok(Outcome::Written | Outcome::Unchanged)) {
                marked.insert(name.to_owned())
            } else {
                marked.remove(name)
            };
        drop(marked);
        // An evacuation starts once its Node carries the taint (a stop needs no wake: the
        // next pod to evict is chosen from what the bridge knows then).
        if changed && block.is_some_and(Block::evacuates) {
            self.wake_evacuation();
        }
        let Some(block) = block else {
            self.reporter.set(name, None);
            return;
        };
        let (state, detail) = match outcome {
            Ok(Outcome::Written | Outcome::Unchanged) if self.marking.dry_run => (
                "dryRun",
                Some(format!("would taint {}", self.marking.taint(block))),
            ),
            Ok(Outcome::Written | Outcome::Unchanged) => (
                "enforced",
                Some(format!("taint {}", self.marking.taint(block))),
            ),
            Ok(Outcome::Missing) => ("noTarget", Some("no Node of this name".to_owned())),
            Ok(Outcome::HeldBack(why)) => ("heldBack", Some(why.clone())),
            Err(e) => ("failed", Some(e.clone())),
        };
        self.reporter.set(
            name,
            Some(Status {
                kind: "node",
                id: name.to_owned(),
                state,
                detail,
                observed_revision: Some(block.revision),
            }),
        );
    }
}
