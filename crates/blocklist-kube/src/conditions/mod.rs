//! Node conditions as a detector: the conditions an operator names (`--condition`:
//! node-problem-detector's `KernelDeadlock`, the kubelet's `DiskPressure`, …) become
//! reports of their Node under the source `<name>/condition/<type>`, sent with the
//! bridge's `detector` token (`--detector-token-file`), and are retracted when they clear.
//! The daemon's guardrails, provenance, feed and every enforcer apply to them as to any
//! block; the bridge's enforcer token never blocks.
//!
//! - `spec`: one `--condition`;
//! - `plan`: what to send, as a pure function of what the bridge knows;
//! - this room: what the bridge knows (the Nodes' watch, the daemon's listings and feed)
//!   and the loop that sends it, on the leader only.

pub mod plan;
pub mod spec;

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use blocklist::daemons::Daemons;
use blocklist::detector::{self, cause_text, Report, Retracted, Sent};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use reqwest::Method;
use serde::Deserialize;

use crate::events::Events;
use crate::leader::Leadership;
use crate::marking::Block;
use crate::metrics::{now_ms, Metrics};
use plan::{millis, Episode, Fate, Key, Known, Sick, Step};
pub use spec::Spec;

/// How long after the daemon could not be reached the steps are tried again.
const RETRY_MS: i64 = 2_000;

/// How many reports or retractions are in flight at once (a storm over thousands of Nodes
/// is sent in seconds, each report on its own: a guardrail refuses one, not a batch).
const IN_FLIGHT: usize = 8;

/// Who hears what the conditions did.
struct Told<'a> {
    metrics: &'a Metrics,
    events: &'a Events,
}

pub struct Conditions {
    specs: Vec<Spec>,
    /// `<name>/condition/`: the sources' prefix.
    prefix: String,
    /// The daemons as the detector (`None`: no `--condition`).
    daemons: Option<Daemons>,
    state: Mutex<State>,
    wake: tokio::sync::Notify,
}

#[derive(Default)]
struct State {
    known: Known,
    /// The Nodes the watch has listed so far (since its last `Init`): at its `InitDone`,
    /// a Node it no longer lists is deleted.
    listing: Option<HashSet<String>>,
    /// The watch listed every Node once: a Node it does not know is deleted, not unseen.
    nodes_listed: bool,
    /// The daemon's reports were read (a full listing) while this replica led: a replica
    /// that comes to lead sends nothing before its first listing as the leader (what the
    /// one before sent would be sent again). The feed's ends and the bridge's own answers
    /// keep them current.
    held_listed: bool,
    /// Unix ms before which nothing is tried again (the daemon was unreachable).
    retry_at: i64,
}

impl Conditions {
    /// `specs` reported under `<name>/condition/<type>` with `daemons` (`None` with no
    /// spec).
    pub fn new(name: &str, specs: Vec<Spec>, daemons: Option<Daemons>) -> Conditions {
        Conditions {
            specs,
            prefix: format!("{name}/condition/"),
            daemons,
            state: Mutex::default(),
            wake: tokio::sync::Notify::new(),
        }
    }

    /// None configured: the bridge detects nothing.
    pub fn off() -> Conditions {
        Conditions::new("", Vec::new(), None)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("not poisoned")
    }

    fn on(&self) -> bool {
        !self.specs.is_empty()
    }

    /// The source a condition type's reports are made under.
    pub fn source(&self, kind: &str) -> String {
        format!("{}{kind}", self.prefix)
    }

    /// A Node as the watch saw it.
    pub fn seen(&self, node: &Node) {
        if !self.on() {
            return;
        }
        let name = node.metadata.name.clone().unwrap_or_default();
        let sick = self.sick(node);
        let mut state = self.state();
        if let Some(listing) = state.listing.as_mut() {
            listing.insert(name.clone());
        }
        let known = &mut state.known.sick;
        let changed = if sick.is_empty() {
            known.remove(&name).is_some()
        } else {
            known.insert(name, sick.clone()).as_ref() != Some(&sick)
        };
        drop(state);
        if changed {
            self.wake.notify_one();
        }
    }

    /// A Node deleted.
    pub fn gone(&self, name: &str) {
        if self.on() && self.state().known.sick.remove(name).is_some() {
            self.wake.notify_one();
        }
    }

    /// The watch lists every Node again (`Init`).
    pub fn listing_started(&self) {
        self.state().listing = Some(HashSet::new());
    }

    /// The watch listed every Node (`InitDone`): those it did not list are gone.
    pub fn listing_done(&self) {
        let mut state = self.state();
        if let Some(listed) = state.listing.take() {
            state.known.sick.retain(|name, _| listed.contains(name));
        }
        state.nodes_listed = true;
        drop(state);
        self.wake.notify_one();
    }

    /// The daemon's node items, from a full listing taken while this replica `leads` (or
    /// not): the reports held under the bridge's sources.
    pub fn listed(&self, blocks: &HashMap<String, Block>, leads: bool) {
        if !self.on() {
            return;
        }
        let mut held = HashSet::new();
        for block in blocks.values() {
            let holders = if block.held_by.is_empty() {
                std::slice::from_ref(&block.source)
            } else {
                &block.held_by[..]
            };
            for holder in holders {
                if let Some(kind) = holder.strip_prefix(&self.prefix) {
                    held.insert((block.id.clone(), kind.to_owned()));
                }
            }
        }
        let mut state = self.state();
        state.known.held = held;
        state.held_listed = leads;
        drop(state);
        self.wake.notify_one();
    }

    /// Node `id`'s block ended (a feed event: removed, expired): no report holds it.
    pub fn ended(&self, id: &str) {
        if self.on() {
            self.state().known.held.retain(|(node, _)| node != id);
            self.wake.notify_one();
        }
    }

    /// The configured conditions of `node` in a sick status, by type.
    fn sick(&self, node: &Node) -> HashMap<String, Sick> {
        let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
        conditions
            .into_iter()
            .flatten()
            .filter(|c| {
                self.specs
                    .iter()
                    .any(|s| s.kind == c.type_ && s.sick.contains(&c.status))
            })
            .map(|c| {
                let since = c
                    .last_transition_time
                    .as_ref()
                    .map_or(0, |t| t.0.as_millisecond());
                let sick = Sick {
                    status: c.status.clone(),
                    since,
                    reason: c.reason.clone().unwrap_or_default(),
                    message: c.message.clone().unwrap_or_default(),
                };
                (c.type_.clone(), sick)
            })
            .collect()
    }

    /// Sends what is due, for as long as the bridge runs, while this replica leads (as
    /// `leader` says), telling `metrics` and the Nodes' `events`.
    pub async fn run(&self, leader: &Leadership, metrics: &Metrics, events: &Events) {
        let told = Told { metrics, events };
        let Some(daemons) = &self.daemons else {
            return;
        };
        let mut leading = leader.subscribe();
        let mut next: Option<i64> = None;
        loop {
            let wait =
                next.map(|at| Duration::from_millis(u64::try_from(at - now_ms()).unwrap_or(0)));
            tokio::select! {
                () = self.wake.notified() => {}
                () = sleep_or_forever(wait) => {}
                // A replica that stops leading needs a listing as the leader again
                // ([`State::held_listed`]); one that comes to lead has none yet (its
                // listings as a follower do not count) and lists at once.
                Ok(()) = leading.changed() => {
                    if !*leading.borrow_and_update() {
                        self.state().held_listed = false;
                    }
                    continue;
                }
            }
            next = None;
            let now = now_ms();
            let steps = {
                let mut state = self.state();
                if !leader.acting() || !state.nodes_listed || !state.held_listed {
                    continue;
                }
                if now < state.retry_at {
                    next = Some(state.retry_at);
                    continue;
                }
                let (steps, due) = plan::plan(&mut state.known, &self.specs, now);
                next = due;
                steps
            };
            let failed = futures::stream::iter(steps)
                .map(|step| self.send(&told, daemons, step))
                .buffer_unordered(IN_FLIGHT)
                .fold(false, |failed, ok| async move { failed || !ok })
                .await;
            if failed {
                let at = now_ms() + RETRY_MS;
                self.state().retry_at = at;
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
    }

    /// Sends one step; `false` when the daemon could not be reached (tried again later).
    async fn send(&self, told: &Told<'_>, daemons: &Daemons, step: Step) -> bool {
        match step {
            Step::Report {
                key,
                sick,
                counted,
                check,
            } => self.report(told, daemons, key, sick, counted, check).await,
            Step::Retract { key } => self.retract(told, daemons, key).await,
        }
    }

    async fn report(
        &self,
        told: &Told<'_>,
        daemons: &Daemons,
        key: Key,
        sick: Sick,
        counted: i64,
        check: bool,
    ) -> bool {
        let (node, kind) = &key;
        let Some(spec) = self.specs.iter().find(|s| &s.kind == kind) else {
            return true;
        };
        let marker = format!("{kind}={}", sick.status);
        if check {
            match ended_since(daemons, node, counted, &marker).await {
                Ok(false) => {}
                Ok(true) => {
                    tracing::info!(%node, condition = %kind, "a block of this episode ended since it counted: not reported again");
                    told.metrics.condition(kind, "ended");
                    self.remember(&key, sick.since, Fate::Ended, false);
                    return true;
                }
                Err(e) => {
                    tracing::warn!(%node, condition = %kind, error = %e, "could not read the Node's past blocks; nothing sent");
                    return false;
                }
            }
        }
        let end = spec.duration.map_or(i64::MAX, |d| counted + millis(d));
        let report = Report {
            kind: "nodes",
            id: node.clone(),
            action: spec.action.to_owned(),
            cause: cause_text(
                &format!("{marker} ({}): {}", sick.reason, sick.message),
                512,
            ),
            end,
            details: [
                ("condition".to_owned(), kind.clone()),
                ("status".to_owned(), sick.status.clone()),
                (
                    "lastTransitionTime".to_owned(),
                    crate::marking::rfc3339(sick.since),
                ),
                ("reason".to_owned(), cause_text(&sick.reason, 256)),
            ]
            .into(),
        };
        let source = self.source(kind);
        match detector::report(daemons, &report, &source).await {
            Ok(Sent::Blocked) => {
                tracing::info!(%node, condition = %kind, %source, "a sick condition reported");
                told.metrics.condition(kind, "reported");
                if !check {
                    #[expect(clippy::cast_precision_loss, reason = "milliseconds, far below 2^52")]
                    let seconds = (now_ms() - counted).max(0) as f64 / 1000.0;
                    told.metrics.condition_to_report_seconds.observe(seconds);
                }
                self.state().known.held.insert(key.clone());
                self.remember(&key, sick.since, Fate::Reported, true);
                told
                    .events
                    .condition(node, "ConditionBlocked", false, &format!(
                        "condition {marker} since {} ({}: {}) held past {}: reported to the blocklist as {source} ({})",
                        crate::marking::rfc3339(sick.since),
                        sick.reason,
                        sick.message,
                        humantime::format_duration(spec.hold),
                        spec.action,
                    ))
                    .await;
                true
            }
            Ok(Sent::Refused(why)) => {
                tracing::warn!(%node, condition = %kind, %why, "the daemon refused the condition's report; asked again in 5 minutes");
                told.metrics.condition(kind, "refused");
                self.remember(&key, sick.since, Fate::Refused(now_ms()), false);
                told.events
                    .condition(
                        node,
                        "ConditionRefused",
                        true,
                        &format!("condition {marker}: the blocklist refused its block: {why}"),
                    )
                    .await;
                true
            }
            Err(e) => {
                tracing::warn!(%node, condition = %kind, error = %e, "could not report the condition; trying again");
                told.metrics.condition(kind, "failed");
                false
            }
        }
    }

    async fn retract(&self, told: &Told<'_>, daemons: &Daemons, key: Key) -> bool {
        let (node, kind) = &key;
        let source = self.source(kind);
        match detector::retract(daemons, "nodes", node, &source).await {
            Ok(outcome) => {
                tracing::info!(%node, condition = %kind, ?outcome, "a cleared condition's report retracted");
                self.forget(&key);
                told.metrics.condition(kind, "retracted");
                if outcome != Retracted::Absent {
                    let left = if outcome == Retracted::Ended {
                        "the block ended"
                    } else {
                        "other reports still hold the block"
                    };
                    told.events
                        .condition(
                            node,
                            "ConditionCleared",
                            false,
                            &format!(
                                "condition {kind} cleared: {source}'s report retracted; {left}"
                            ),
                        )
                        .await;
                }
                true
            }
            Err(e) => {
                tracing::warn!(%node, condition = %kind, error = %e, "could not retract the condition's report; trying again");
                told.metrics.condition(kind, "failed");
                false
            }
        }
    }

    /// A retracted report: neither held nor an episode to remember.
    fn forget(&self, key: &Key) {
        let mut state = self.state();
        state.known.held.remove(key);
        state.known.episodes.remove(key);
    }

    fn remember(&self, key: &Key, since: i64, fate: Fate, sent: bool) {
        let mut state = self.state();
        let episodes = &mut state.known.episodes;
        let sent = sent || episodes.get(key).is_some_and(|e| e.sent);
        episodes.insert(key.clone(), Episode { since, fate, sent });
    }
}

async fn sleep_or_forever(wait: Option<Duration>) {
    match wait {
        Some(wait) => tokio::time::sleep(wait).await,
        None => std::future::pending().await,
    }
}

/// Whether Node `node`'s last block ended at or after `counted` with `marker` among its
/// causes: a block of this episode someone ended (the bridge reported it before a restart
/// or a takeover).
async fn ended_since(
    daemons: &Daemons,
    node: &str,
    counted: i64,
    marker: &str,
) -> Result<bool, String> {
    #[derive(Deserialize)]
    struct Past {
        cause: String,
        ended: Ended,
    }
    #[derive(Deserialize)]
    struct Ended {
        timestamp: i64,
    }
    let path = format!(
        "/blocklist/nodes/{}/history?limit=1",
        blocklist::client::segment(node)
    );
    let reply = daemons
        .send(Method::GET, &path, None)
        .await
        .map_err(|e| detector::text(&e))?;
    let past: Vec<Past> = reply.json().map_err(|e| detector::text(&e))?;
    Ok(past
        .first()
        .is_some_and(|p| p.ended.timestamp >= counted && p.cause.contains(marker)))
}
