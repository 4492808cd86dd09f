//! Writing a Node's marking: a merge patch computed from the Node read, carrying its
//! `resourceVersion`; on a 409 (someone changed the Node since — another controller's
//! taint, say) the Node is read again and the patch recomputed, so their change stays.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};

use crate::events::{Events, Why};
use crate::marking::{self, Block, Marking};

/// How many times a patch refused with 409 is recomputed before the reconcile gives up on
/// that Node until the next one.
const CONFLICT_RETRIES: usize = 5;

/// What a reconcile did to one Node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It already carried what it should: nothing was sent.
    Unchanged,
    /// One patch (after any 409s) made it so (with `--dry-run`: would have).
    Written,
    /// No such Node (an id the blocklist names that is not a Node, or one deleted since).
    Missing,
}

/// Makes Node `node` (as read) carry `block` (`None`: nothing of the bridge's); with
/// `events`, a write is told on the Node as an Event for the reason `why`.
pub async fn apply(
    api: &Api<Node>,
    marking: &Marking,
    mut node: Node,
    block: Option<&Block>,
    events: Option<(&Events, Why)>,
) -> Result<Outcome, kube::Error> {
    let name = node.metadata.name.clone().unwrap_or_default();
    for _ in 0..CONFLICT_RETRIES {
        let Some(patch) = marking::patch(&node, marking, block) else {
            return Ok(Outcome::Unchanged);
        };
        let params = if marking.dry_run {
            PatchParams::default().dry_run()
        } else {
            PatchParams::default()
        };
        match api.patch(&name, &params, &Patch::Merge(&patch)).await {
            Ok(_) if marking.dry_run => {
                tracing::info!(node = %name, %patch, "dry run: the Node would be patched so");
                return Ok(Outcome::Written);
            }
            Ok(_) => {
                if let Some((events, why)) = events {
                    events.written(&node, block, why).await;
                }
                return Ok(Outcome::Written);
            }
            Err(kube::Error::Api(status)) if status.is_conflict() => {
                tracing::debug!(node = %name, "the Node changed since it was read; reading it again");
                match api.get_opt(&name).await? {
                    Some(now) => node = now,
                    None => return Ok(Outcome::Missing),
                }
            }
            Err(kube::Error::Api(status)) if status.is_not_found() => return Ok(Outcome::Missing),
            Err(e) => return Err(e),
        }
    }
    tracing::warn!(node = %name, "the Node kept changing under the bridge; trying again at the next reconcile");
    Ok(Outcome::Unchanged)
}
