//! Kubernetes Events on a Node the bridge marked, since a taint says neither who nor why:
//! `Blocked` (who blocked it, why, how, until when), `Unblocked`, and the warning
//! `TaintRestored` when the bridge put back a taint taken off by hand while the block
//! stands (to unblock a node, remove it from the blocklist). An evacuation adds `Evicted`
//! and the warning `EvictionWaiting` (a PodDisruptionBudget says not now) on each pod, and
//! `Evacuated` on the node. A condition the bridge reports as a detector adds
//! `ConditionBlocked`, the warning `ConditionRefused` (a guardrail said no) and
//! `ConditionCleared` on its Node. `kubectl describe` shows them. An Event that cannot be written
//! is logged, never retried: it is a courtesy, the taint is the state.

use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Resource;

use crate::marking::{Block, Marking};

/// Why the bridge wrote to a Node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The blocklist changed (a feed event, a resync).
    Blocklist,
    /// The Node had drifted from the blocklist (changed by hand, created later).
    Drift,
}

pub struct Events {
    recorder: Recorder,
    marking: Marking,
}

impl Events {
    pub fn new(client: kube::Client, marking: Marking) -> Events {
        let instance = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .ok();
        let reporter = Reporter {
            controller: "blocklist-kube".into(),
            instance,
        };
        Events {
            recorder: Recorder::new(client, reporter),
            marking,
        }
    }

    /// After a write that made `node` (as read before it) carry `block`.
    pub async fn written(&self, node: &Node, block: Option<&Block>, why: Why) {
        let was_marked = self.marking.carries(node);
        // Its annotations without its taint: the taint was taken off by hand (a Node new
        // since its block carries neither).
        let taken_off = !was_marked && self.marking.annotated(node);
        let event = match (block, was_marked, why) {
            (Some(block), false, Why::Drift) if taken_off => {
                let end = if block.end_timestamp == i64::MAX {
                    "permanently".to_owned()
                } else {
                    format!("until unix ms {}", block.end_timestamp)
                };
                Event {
                    type_: EventType::Warning,
                    reason: "TaintRestored".into(),
                    note: Some(format!(
                        "the blocklist still blocks this node ({}, {end}): its taint was put \
                         back; to unblock the node, remove it from the blocklist",
                        block.action
                    )),
                    action: "Taint".into(),
                    secondary: None,
                }
            }
            (Some(block), false, _) => Event {
                type_: EventType::Normal,
                reason: "Blocked".into(),
                note: Some(note(block)),
                action: "Taint".into(),
                secondary: None,
            },
            (Some(block), true, _) => Event {
                type_: EventType::Normal,
                reason: "BlockChanged".into(),
                note: Some(note(block)),
                action: "Taint".into(),
                secondary: None,
            },
            (None, true, _) => Event {
                type_: EventType::Normal,
                reason: "Unblocked".into(),
                note: Some(
                    "the blocklist no longer blocks this node: its taint was removed".into(),
                ),
                action: "Untaint".into(),
                secondary: None,
            },
            (None, false, _) => return,
        };
        self.publish(&event, &node.object_ref(&())).await;
    }

    async fn publish(&self, event: &Event, reference: &ObjectReference) {
        if let Err(e) = self.recorder.publish(event, reference).await {
            tracing::warn!(error = %e, reason = %event.reason, kind = ?reference.kind, name = ?reference.name, "could not write the Event");
        }
    }
}

impl Events {
    /// The ceiling kept the bridge from tainting `node`, which the blocklist blocks.
    pub async fn held_back(&self, node: &Node, why: &str) {
        let event = Event {
            type_: EventType::Warning,
            reason: "TaintHeldBack".into(),
            note: Some(format!(
                "the blocklist blocks this node, but it was not tainted: {why}"
            )),
            action: "Taint".into(),
            secondary: None,
        };
        self.publish(&event, &node.object_ref(&())).await;
    }

    /// Pod `pod` was evicted: its node (or task manager) is blocked with evacuation.
    pub async fn evicted(&self, pod: &ObjectReference, block: &Block, what: &str) {
        let event = Event {
            type_: EventType::Normal,
            reason: "Evicted".into(),
            note: Some(format!("evicted: {what} {}", note(block))),
            action: "Evict".into(),
            secondary: None,
        };
        self.publish(&event, pod).await;
    }

    /// A PodDisruptionBudget refused `pod`'s eviction (the API server's `message`).
    pub async fn eviction_waiting(&self, pod: &ObjectReference, message: &str) {
        let event = Event {
            type_: EventType::Warning,
            reason: "EvictionWaiting".into(),
            note: Some(format!(
                "a PodDisruptionBudget refuses its eviction now; it is asked again later: {message}"
            )),
            action: "Evict".into(),
            secondary: None,
        };
        self.publish(&event, pod).await;
    }

    /// About Node `name`'s condition ([`crate::conditions`]): `ConditionBlocked`,
    /// `ConditionRefused` (a `warning`), `ConditionCleared`.
    pub async fn condition(&self, name: &str, reason: &str, warning: bool, note: &str) {
        if self.marking.dry_run {
            return;
        }
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(note.chars().take(1024).collect()),
            action: "Report".into(),
            secondary: None,
        };
        self.publish(&event, &node_reference(name)).await;
    }

    /// Node `name` holds none of the work its evacuation evicts any more.
    pub async fn evacuated(&self, name: &str, block: &Block) {
        let event = Event {
            type_: EventType::Normal,
            reason: "Evacuated".into(),
            note: Some(format!("no work left to evict: {}", note(block))),
            action: "Evict".into(),
            secondary: None,
        };
        self.publish(&event, &node_reference(name)).await;
    }
}

/// A reference to Node `name`, for an Event about it.
fn node_reference(name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(name.to_owned()),
        ..ObjectReference::default()
    }
}

/// Who blocked the node, why, how, until when.
fn note(block: &Block) -> String {
    let end = if block.end_timestamp == i64::MAX {
        "permanently".to_owned()
    } else {
        format!("until unix ms {}", block.end_timestamp)
    };
    let by = if block.source.is_empty() {
        "unknown"
    } else {
        &block.source
    };
    format!(
        "blocked by {by} for {:?} ({}, {end})",
        block.cause, block.action
    )
}
