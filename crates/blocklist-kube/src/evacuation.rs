//! Evacuation: a block whose action is `MARK_BLOCKED_AND_EVACUATE_TASKS` also moves the
//! running work away, through the Eviction API ([`crate::eviction`]), paced, with the
//! PodDisruptionBudgets honoured. It is the second line behind the daemon's own
//! evacuation caps and rate.
//!
//! - **What is evicted**: on a blocked node that carries the bridge's taint, the pods the
//!   eviction selector matches (`--evict-selector`, the task managers' by default;
//!   `--evict-all`: every pod), in `--namespace` if one is given, but for those
//!   [`crate::evictable`] keeps; a blocked task manager's own pod. A node held back by the
//!   ceiling is not emptied, and nothing is evicted for a block that does not ask for it.
//! - **Pacing**: one eviction at a time, at most `--evictions-per-minute` across the
//!   cluster, each sent a whole pace after the one before (so every window of ten paces
//!   holds at most ten), and at most `--max-evacuating-nodes` nodes being emptied at once
//!   (oldest block first; the others wait their turn).
//! - **Budgets**: a 429 leaves the pod to a later try with backoff; it is evicted when
//!   the budget allows, never deleted around it. A 404 is a pod gone: success.
//! - **Stopping**: the target is chosen again after each wait for the pace, from what the
//!   bridge knows at that moment, so an unblock or a downgrade to `MARK_BLOCKED` that has
//!   reached the bridge stops the node's evacuation before its next eviction.
//! - **Progress**: each node's is its annotation `<prefix>evacuation` and part of its
//!   status in the daemon ("evacuating: n pods left, m waiting on a budget", then
//!   "evacuated at …"), written at most once a second per node and once at the end.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::bridge::Bridge;
use crate::eviction::{self, Answer};
use crate::marking::{rfc3339, Block};
use crate::metrics::now_ms;
use crate::pods::Labels;
use crate::workload::{Member, Workload};

/// How the evacuation is paced and what it evicts.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--evictions-per-minute`.
    pub per_minute: u32,
    /// `--max-evacuating-nodes`.
    pub max_nodes: usize,
    /// The pods an evacuated node's work is: a label selector, or `None` for every pod.
    pub selector: Option<String>,
    /// `--namespace`: only pods there.
    pub namespace: Option<String>,
}

/// The first pause after a budget refused a pod, and the longest.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// How often the evacuation looks again when nothing woke it (backoffs ending, progress
/// to publish).
const TICK: Duration = Duration::from_millis(500);

/// How often a node's progress is written at most (but for its end).
const PUBLISH_EVERY: Duration = Duration::from_secs(1);

pub struct Evacuation {
    client: kube::Client,
    settings: Settings,
    pods: Workload,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Pods evicted (by uid, or `namespace/name` for a task manager's pod out of the
    /// cache), until they leave the cache: never asked twice.
    evicted: HashSet<String>,
    /// Pods a budget refused (by the same key): when to ask again, and the pause after.
    waiting: HashMap<String, (Instant, Duration)>,
    /// Nodes being emptied, in the order they started.
    active: Vec<String>,
    /// Nodes found empty, and when (Unix ms).
    done: HashMap<String, i64>,
    /// Each node's progress as last written, and when.
    published: HashMap<String, (String, Instant)>,
    /// Where the next round-robin over the active nodes starts.
    cursor: usize,
}

impl State {
    /// Nothing under way, nothing shown.
    fn idle(&self) -> bool {
        self.evicted.is_empty()
            && self.waiting.is_empty()
            && self.active.is_empty()
            && self.done.is_empty()
            && self.published.is_empty()
    }
}

/// A pod to evict.
#[derive(Debug, Clone)]
struct Target {
    key: String,
    namespace: String,
    name: String,
    uid: Option<String>,
    /// The block it is evicted for; `node`: that of its node (else its task manager's).
    block: Block,
    node: Option<String>,
}

/// One look at what is to be done.
#[derive(Default)]
struct Plan {
    next: Option<Target>,
    /// Node → its progress.
    progress: Vec<(String, String)>,
    /// Nodes found empty in this look.
    finished: Vec<Block>,
    /// Nodes that stopped evacuating (unblocked, downgraded) and still show a progress.
    stopped: Vec<String>,
}

impl Evacuation {
    pub fn new(client: kube::Client, settings: Settings, taint_key: &str) -> Evacuation {
        Evacuation {
            pods: Workload::new(
                client.clone(),
                settings.selector.clone(),
                settings.namespace.clone(),
                taint_key.to_owned(),
            ),
            client,
            settings,
            state: Mutex::new(State::default()),
        }
    }

    /// The cache of the pods that can be work (its own watch, [`Workload::watch`], or
    /// fed by the membership's, [`Workload::apply`]).
    pub fn workload(&self) -> &Workload {
        &self.pods
    }

    /// Empties the nodes and pods to evacuate, for as long as the bridge runs.
    pub async fn run(&self, bridge: &Bridge, labels: &Labels) {
        self.pods.listed().await;
        let spacing = Duration::from_secs_f64(60.0 / f64::from(self.settings.per_minute.max(1)));
        // When the last eviction was sent: the next is sent a whole pace later, or more.
        let mut last: Option<tokio::time::Instant> = None;
        loop {
            let plan = self.plan(bridge, labels);
            let has_next = plan.next.is_some();
            self.publish(bridge, plan).await;
            if !has_next || !bridge.leader.acting() {
                let _ = tokio::time::timeout(TICK, bridge.evacuation_woken()).await;
                continue;
            }
            if let Some(last) = last {
                tokio::time::sleep_until(last + spacing).await;
            }
            // The blocklist may have changed while waiting for the pace: what is evicted
            // is what it says now.
            let mut plan = self.plan(bridge, labels);
            let next = plan.next.take();
            self.publish(bridge, plan).await;
            let Some(target) = next else {
                continue;
            };
            if !bridge.leader.acting() {
                continue;
            }
            last = Some(tokio::time::Instant::now());
            let (answer, result) = eviction::evict(
                &self.client,
                &target.namespace,
                &target.name,
                target.uid.as_deref(),
                bridge.marking.dry_run,
            )
            .await;
            bridge.metrics.api("evict", &result);
            bridge.metrics.eviction(answer.outcome());
            self.settle(bridge, &target, answer).await;
        }
    }

    /// Records what the API server answered for `target`.
    async fn settle(&self, bridge: &Bridge, target: &Target, answer: Answer) {
        let what = match &target.node {
            Some(node) => format!("node {node} is blocked"),
            None => format!("task manager {} is blocked", target.name),
        };
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(target.name.clone()),
            namespace: Some(target.namespace.clone()),
            uid: target.uid.clone(),
            ..ObjectReference::default()
        };
        let pod = format!("{}/{}", target.namespace, target.name);
        let dry_run = bridge.marking.dry_run;
        let first_refusal = {
            let mut state = self.state.lock().expect("not poisoned");
            match &answer {
                Answer::Evicted | Answer::Gone => {
                    state.waiting.remove(&target.key);
                    state.evicted.insert(target.key.clone());
                    false
                }
                Answer::BudgetRefused(_) | Answer::Error(_) => {
                    let now = Instant::now();
                    let pause = state
                        .waiting
                        .get(&target.key)
                        .map_or(FIRST_BACKOFF, |(_, pause)| (*pause * 2).min(MAX_BACKOFF));
                    state
                        .waiting
                        .insert(target.key.clone(), (now + pause, pause))
                        .is_none()
                }
            }
        };
        match answer {
            Answer::Evicted => {
                tracing::info!(%pod, node = ?target.node, dry_run, "evicted");
                if !dry_run {
                    bridge
                        .events
                        .evicted(&reference, &target.block, &what)
                        .await;
                }
            }
            Answer::Gone => tracing::info!(%pod, "the pod to evict is gone already"),
            Answer::BudgetRefused(message) => {
                tracing::info!(%pod, %message, "a PodDisruptionBudget refuses the eviction now; asking again later");
                if first_refusal && !dry_run {
                    bridge.events.eviction_waiting(&reference, &message).await;
                }
            }
            Answer::Error(e) => {
                tracing::warn!(%pod, error = %e, "could not evict; asking again later");
            }
        }
    }

    /// What is to be done now: the next pod to evict, each node's progress.
    fn plan(&self, bridge: &Bridge, labels: &Labels) -> Plan {
        let mut plan = Plan::default();
        let Some(blocks) = bridge.desired.evacuating() else {
            return plan; // nothing known yet: nothing acted on
        };
        let nodes: Vec<Block> = blocks
            .into_iter()
            .filter(|b| bridge.marked(&b.id))
            .collect();
        let tms = labels.evacuating();
        let mut state = self.state.lock().expect("not poisoned");
        if nodes.is_empty() && tms.is_empty() && state.idle() {
            return plan; // the common case: no evacuation, no pod looked at
        }
        let wanted: HashSet<&str> = nodes.iter().map(|b| b.id.as_str()).collect();
        let tm_names: HashSet<&str> = tms.iter().map(|(b, _)| b.id.as_str()).collect();
        let tm_keys: HashSet<String> = tms
            .iter()
            .filter_map(|(block, ns)| Some(format!("{}/{}", ns.as_ref()?, block.id)))
            .collect();
        let mut by_node: HashMap<&str, Vec<Member>> = HashMap::new();
        let mut by_name: HashMap<String, Vec<Member>> = HashMap::new();
        let mut present: HashSet<String> = HashSet::new();
        self.pods.each(|pod| {
            if let Some(node) = wanted.get(pod.node.as_str()).filter(|_| pod.work) {
                by_node.entry(node).or_default().push(pod.clone());
            }
            if tm_names.contains(pod.name.as_str()) {
                by_name
                    .entry(pod.name.clone())
                    .or_default()
                    .push(pod.clone());
            }
            if state.evicted.contains(&pod.uid) || state.waiting.contains_key(&pod.uid) {
                present.insert(pod.uid.clone());
            }
        });
        let now = Instant::now();
        let dry_run = bridge.marking.dry_run;
        let max_nodes = self.settings.max_nodes.max(1);
        state
            .evicted
            .retain(|k| present.contains(k) || tm_keys.contains(k));
        state
            .waiting
            .retain(|k, _| present.contains(k) || tm_keys.contains(k));
        state.active.retain(|n| wanted.contains(n.as_str()));
        state.done.retain(|n, _| wanted.contains(n.as_str()));
        let published: Vec<String> = state.published.keys().cloned().collect();
        for node in published {
            if !wanted.contains(node.as_str()) {
                state.published.remove(&node);
                plan.stopped.push(node);
            }
        }
        let due = |state: &State, key: &str| {
            !state.evicted.contains(key) && state.waiting.get(key).is_none_or(|(at, _)| *at <= now)
        };

        // A blocked task manager's pod first: one pod each, quickly done.
        for (block, namespace) in tms {
            let tm = block.id.clone();
            let pod = by_name.get(&tm).and_then(|pods| {
                pods.iter()
                    .find(|p| namespace.is_none() || Some(&p.namespace) == namespace.as_ref())
            });
            let target = match (pod, &namespace) {
                (Some(pod), _) if pod.terminating => continue,
                (Some(pod), _) => Target {
                    key: pod.uid.clone(),
                    namespace: pod.namespace.clone(),
                    name: tm,
                    uid: Some(pod.uid.clone()),
                    block,
                    node: None,
                },
                (None, Some(namespace)) => Target {
                    key: format!("{namespace}/{tm}"),
                    namespace: namespace.clone(),
                    name: tm,
                    uid: None,
                    block,
                    node: None,
                },
                (None, None) => continue,
            };
            if plan.next.is_none() && due(&state, &target.key) {
                plan.next = Some(target);
            }
        }

        for block in &nodes {
            let id = block.id.as_str();
            let pods = by_node.get(id).map_or(&[][..], Vec::as_slice);
            let pending = pods
                .iter()
                .filter(|p| !(dry_run && state.evicted.contains(&p.uid)))
                .count();
            if pending == 0 {
                state.active.retain(|n| n != id);
                let at = *state.done.entry(id.to_owned()).or_insert_with(|| {
                    plan.finished.push(block.clone());
                    now_ms()
                });
                let text = if dry_run {
                    format!("dry run: {} pods would be evicted", pods.len())
                } else {
                    format!("evacuated at {}", rfc3339(at))
                };
                plan.progress.push((id.to_owned(), text));
                continue;
            }
            state.done.remove(id);
            if !state.active.iter().any(|n| n == id) && state.active.len() < max_nodes {
                state.active.push(id.to_owned());
            }
            let waiting = pods
                .iter()
                .filter(|p| state.waiting.contains_key(&p.uid))
                .count();
            let text = if !state.active.iter().any(|n| n == id) {
                format!(
                    "queued: {pending} pods to evict once fewer than {max_nodes} nodes are evacuating"
                )
            } else if dry_run {
                format!("dry run: evacuating, {pending} pods left to evict")
            } else {
                format!("evacuating: {pending} pods left, {waiting} waiting on a budget")
            };
            plan.progress.push((id.to_owned(), text));
        }

        // Then the active nodes, round robin, each its first pod that is due.
        if plan.next.is_none() && !state.active.is_empty() {
            let count = state.active.len();
            for step in 0..count {
                let at = (state.cursor + step) % count;
                let id = state.active[at].clone();
                let Some(block) = nodes.iter().find(|b| b.id == id) else {
                    continue;
                };
                let pod = by_node
                    .get(id.as_str())
                    .and_then(|pods| pods.iter().find(|p| !p.terminating && due(&state, &p.uid)));
                if let Some(pod) = pod {
                    plan.next = Some(Target {
                        key: pod.uid.clone(),
                        namespace: pod.namespace.clone(),
                        name: pod.name.clone(),
                        uid: Some(pod.uid.clone()),
                        block: block.clone(),
                        node: Some(id),
                    });
                    state.cursor = (at + 1) % count;
                    break;
                }
            }
        }
        bridge
            .metrics
            .nodes_evacuating
            .set(i64::try_from(state.active.len()).unwrap_or(i64::MAX));
        bridge
            .metrics
            .pods_waiting
            .set(i64::try_from(state.waiting.len()).unwrap_or(i64::MAX));
        plan
    }

    /// Writes the progress that changed (at most once a second per node, but for its
    /// end), and what ended: an Event and the time from block to empty per node found
    /// empty, the annotation taken off a node that stopped evacuating but stays blocked.
    async fn publish(&self, bridge: &Bridge, plan: Plan) {
        if !bridge.leader.acting() {
            return;
        }
        for block in &plan.finished {
            if !bridge.marking.dry_run {
                bridge.events.evacuated(&block.id, block).await;
            }
            if block.last_report_timestamp > 0 {
                #[expect(clippy::cast_precision_loss, reason = "milliseconds, far below 2^52")]
                let seconds = (now_ms() - block.last_report_timestamp).max(0) as f64 / 1000.0;
                bridge.metrics.block_to_empty_seconds.observe(seconds);
            }
            tracing::info!(node = %block.id, "evacuated");
        }
        let now = Instant::now();
        let changed: Vec<(String, String)> = {
            let mut state = self.state.lock().expect("not poisoned");
            plan.progress
                .into_iter()
                .filter(|(node, text)| match state.published.get(node) {
                    Some((was, _)) if was == text => false,
                    Some((_, at))
                        if now.duration_since(*at) < PUBLISH_EVERY
                            && !text.starts_with("evacuated") =>
                    {
                        false
                    }
                    _ => {
                        state.published.insert(node.clone(), (text.clone(), now));
                        true
                    }
                })
                .collect()
        };
        for (node, text) in changed {
            bridge.reporter.set_progress(&node, Some(text.clone()));
            self.annotate(bridge, &node, Some(&text)).await;
        }
        for node in plan.stopped {
            bridge.reporter.set_progress(&node, None);
            // An unblocked node loses every mark of the bridge's with its taint; one that
            // stays blocked loses its progress here.
            if let crate::desired::Known::Block(Some(_)) = bridge.desired.of(&node) {
                self.annotate(bridge, &node, None).await;
            }
        }
    }

    /// Sets (or with `None` removes) node `node`'s progress annotation.
    async fn annotate(&self, bridge: &Bridge, node: &str, text: Option<&str>) {
        if bridge.marking.dry_run || !bridge.leader.acting() {
            return;
        }
        let patch =
            json!({"metadata": {"annotations": {bridge.marking.progress_annotation(): text}}});
        let result = bridge
            .nodes
            .patch_metadata(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        bridge.metrics.api("patch", &result);
        match result {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_not_found() => {}
            Err(e) => {
                tracing::warn!(%node, error = %e, "could not write the evacuation's progress on the Node");
            }
        }
    }
}
