//! Evacuation (`MARK_BLOCKED_AND_EVACUATE_TASKS`): once a blocked node's NodeManagers are in
//! the bridge's partition (no new container lands there), its task managers' containers are
//! stopped one at a time through the ResourceManager (`GRACEFUL_SHUTDOWN`: SIGTERM, then
//! the NodeManager's kill), paced across the cluster (`--evictions-per-minute`), at most
//! `--max-evacuating-nodes` nodes at once, oldest block first. Flink asks YARN for
//! replacements, which land elsewhere. Application masters (Flink's JobManagers) are never
//! stopped: an evacuation moves task managers, not jobs.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::bridge::Bridge;

/// A container asked to stop and still listed after this long is asked again.
const AGAIN: Duration = Duration::from_secs(120);

/// Evacuates for as long as the bridge runs.
pub async fn run(bridge: &Bridge) {
    let pace = Duration::from_secs(60) / bridge.pace.per_minute.max(1);
    let mut asked: BTreeMap<String, Instant> = BTreeMap::new();
    loop {
        let waited = match step(bridge, &mut asked).await {
            Ok(true) => pace,
            Ok(false) => bridge.poll,
            Err(e) => {
                tracing::warn!(error = %e, "evacuation: could not read the containers; retrying");
                bridge.poll
            }
        };
        tokio::time::sleep(waited).await;
    }
}

/// Stops the next container due, if any: whether one was.
async fn step(bridge: &Bridge, asked: &mut BTreeMap<String, Instant>) -> Result<bool, String> {
    let Some(blocked) = bridge.blocked() else {
        return Ok(false);
    };
    let mut evacuating: Vec<_> = blocked.values().filter(|b| b.evacuates()).collect();
    if evacuating.is_empty() {
        bridge.metrics.containers_waiting.set(0);
        asked.clear();
        return Ok(false);
    }
    evacuating.sort_by_key(|b| (b.revision, b.id.clone()));
    let targets: Vec<String> = {
        let enforced = bridge.enforced.lock().expect("never poisoned");
        evacuating
            .iter()
            .filter_map(|b| enforced.get(&b.id))
            .take(bridge.pace.nodes)
            .flatten()
            .cloned()
            .collect()
    };
    if targets.is_empty() {
        return Ok(false);
    }
    let containers = bridge.rm.containers(&bridge.application_types).await?;
    let on_targets: Vec<_> = containers
        .into_iter()
        .filter(|c| !c.master && targets.contains(&c.node))
        .collect();
    asked.retain(|id, _| on_targets.iter().any(|c| &c.id == id));
    let due: Vec<_> = on_targets
        .iter()
        .filter(|c| asked.get(&c.id).is_none_or(|at| at.elapsed() > AGAIN))
        .collect();
    bridge
        .metrics
        .containers_waiting
        .set(i64::try_from(due.len()).unwrap_or(i64::MAX));
    let Some(container) = due.first() else {
        return Ok(false);
    };
    asked.insert(container.id.clone(), Instant::now());
    let outcome = bridge.rm.stop(&container.id).await;
    let label = if outcome.is_ok() { "stopped" } else { "error" };
    bridge
        .metrics
        .evacuations
        .get_or_create(&vec![("outcome".to_owned(), label.to_owned())])
        .inc();
    bridge.metrics.write("signal", outcome.is_ok());
    match outcome {
        Ok(()) => {
            tracing::info!(container = %container.id, node = %container.node, "evacuation: container asked to stop");
        }
        Err(e) => {
            tracing::warn!(container = %container.id, error = %e, "evacuation: could not stop the container");
        }
    }
    Ok(true)
}
