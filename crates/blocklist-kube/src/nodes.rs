//! Writing a Node's marking: a merge patch computed from the Node read and what the
//! blocklist wants of it now ([`crate::desired`]), carrying the Node's `resourceVersion`;
//! on a 409 (someone changed the Node since — another controller's taint, or the bridge
//! itself applying a newer block from the feed while a reconcile marks the same Node)
//! the Node is read again and the patch recomputed from the newest block, so their change
//! stays and an older block never overwrites a newer one. A new taint asks the ceiling
//! first ([`crate::ceiling`]).

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};

use crate::bridge::Bridge;
use crate::desired::Known;
use crate::events::Why;
use crate::marking::{self, Block};
use crate::metrics::now_ms;

/// How many times a patch refused with 409 is recomputed before the bridge gives up on
/// that Node until the next event or resync.
const CONFLICT_RETRIES: usize = 5;

pub use crate::bridge::Outcome;

/// Makes Node `node` (as read) carry what the blocklist wants of it as the bridge knows
/// it at the moment of writing (nothing of the bridge's when it is not blocked; nothing
/// done before the first listing), writes an Event for the reason `why` after a change,
/// and records the outcome (the statuses, the metrics).
pub async fn apply(bridge: &Bridge, node: Node, why: Why) -> Outcome {
    if !bridge.leader.acting() {
        // Only the leader writes; a replica that takes over reconciles first.
        return Outcome::Unchanged;
    }
    let name = node.metadata.name.clone().unwrap_or_default();
    let Some((outcome, block)) = write(bridge, node, why).await else {
        return Outcome::Unchanged;
    };
    if let Err(e) = &outcome {
        tracing::warn!(node = %name, error = %e, "could not mark the Node; the next event or resync retries");
    }
    bridge.record(&name, block.as_ref(), &outcome);
    bridge
        .metrics
        .nodes_tainted
        .set(i64::try_from(bridge.ceiling.tainted()).unwrap_or(i64::MAX));
    outcome.unwrap_or(Outcome::Unchanged)
}

/// The outcome of making `node` carry its block, and the block it was made to carry;
/// `None` before the first listing.
async fn write(
    bridge: &Bridge,
    node: Node,
    why: Why,
) -> Option<(Result<Outcome, String>, Option<Block>)> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let Known::Block(mut wanted) = bridge.desired.of(&name) else {
        return None;
    };
    let outcome = attempt(bridge, node, why, &mut wanted).await;
    Some((outcome, wanted))
}

/// [`write`]'s attempts: the first with `wanted`, each after a 409 with the block wanted
/// then (left in `wanted`).
async fn attempt(
    bridge: &Bridge,
    mut node: Node,
    why: Why,
    wanted: &mut Option<Block>,
) -> Result<Outcome, String> {
    let (api, marking, metrics) = (&bridge.nodes, &bridge.marking, &bridge.metrics);
    let name = node.metadata.name.clone().unwrap_or_default();
    for _ in 0..CONFLICT_RETRIES {
        let block = wanted.as_ref();
        let carries = marking.carries(&node);
        let Some(patch) = marking::patch(&node, marking, block) else {
            // It matches: tainted as blocked, or free of the bridge's marks (and of any
            // refusal the ceiling remembered).
            if carries {
                bridge.ceiling.seen(&name, true);
            } else {
                bridge.ceiling.release(&name);
            }
            return Ok(Outcome::Unchanged);
        };
        let adds = block.is_some() && !carries;
        if adds {
            if let Err((why_not, first)) = bridge.ceiling.admit(&name) {
                metrics.ceiling_refusals.inc();
                if first {
                    tracing::warn!(node = %name, why = %why_not, "the ceiling holds back a taint");
                    if !marking.dry_run {
                        bridge.events.held_back(&node, &why_not).await;
                    }
                }
                return Ok(Outcome::HeldBack(why_not));
            }
        }
        let params = if marking.dry_run {
            PatchParams::default().dry_run()
        } else {
            PatchParams::default()
        };
        if !bridge.leader.acting() {
            if adds {
                bridge.ceiling.release(&name);
            }
            return Err("this replica no longer leads; the leader marks the Node".into());
        }
        let result = api.patch(&name, &params, &Patch::Merge(&patch)).await;
        metrics.api("patch", &result);
        match result {
            Ok(_) if marking.dry_run => {
                tracing::info!(node = %name, %patch, "dry run: the Node would be patched so");
                return Ok(Outcome::Written);
            }
            Ok(_) => {
                if adds {
                    metrics.taints_applied.inc();
                    if let Some(block) = block.filter(|b| b.last_report_timestamp > 0) {
                        #[expect(
                            clippy::cast_precision_loss,
                            reason = "milliseconds, far below 2^52"
                        )]
                        let seconds =
                            (now_ms() - block.last_report_timestamp).max(0) as f64 / 1000.0;
                        metrics.block_to_taint_seconds.observe(seconds);
                    }
                } else if block.is_none() && carries {
                    metrics.taints_removed.inc();
                    bridge.ceiling.release(&name);
                }
                bridge.events.written(&node, block, why).await;
                return Ok(Outcome::Written);
            }
            Err(kube::Error::Api(status)) if status.is_conflict() => {
                tracing::debug!(node = %name, "the Node changed since it was read; reading it again");
                let reread = api.get_opt(&name).await;
                metrics.api("get", &reread);
                match reread.map_err(|e| e.to_string())? {
                    Some(now) => {
                        node = now;
                        // Whoever changed it may be the bridge itself, with a newer block.
                        if let Known::Block(newest) = bridge.desired.of(&name) {
                            *wanted = newest;
                        }
                    }
                    None => {
                        bridge.ceiling.gone(&name);
                        return Ok(Outcome::Missing);
                    }
                }
            }
            Err(kube::Error::Api(status)) if status.is_not_found() => {
                bridge.ceiling.gone(&name);
                return Ok(Outcome::Missing);
            }
            Err(e) => {
                if adds {
                    bridge.ceiling.release(&name);
                }
                return Err(e.to_string());
            }
        }
    }
    Err("the Node kept changing under the bridge (409 after each re-read)".into())
}
