//! The daemon's membership from YARN: each running container of the applications named by
//! `--application-type` (Flink's) but their application masters (the JobManagers) is a task
//! manager whose id is its container id, registered on its NodeManager's host — the node id
//! Flink itself reports on YARN. A container that is gone is unregistered. Registrations of
//! other ids (not `container_…`) are not the bridge's and are left alone.

use std::collections::BTreeMap;

use blocklist::enforcer::Registration;

use crate::bridge::Bridge;
use crate::rm::host_of;

/// The prefix of YARN's container ids: the registrations the bridge keeps.
const CONTAINER: &str = "container_";

/// Keeps the membership current for as long as the bridge runs, `every`
/// (`--membership-poll`).
pub async fn run(bridge: &Bridge, every: std::time::Duration) {
    let mut known: Option<BTreeMap<String, String>> = None;
    loop {
        if let Err(e) = sync(bridge, &mut known).await {
            tracing::warn!(error = %e, "could not keep the membership current; retrying");
            known = None;
        }
        tokio::time::sleep(every).await;
    }
}

/// One round: the containers read, the differences registered and unregistered. `known`
/// is what the daemon holds of the bridge's ids, read from it when `None`.
async fn sync(bridge: &Bridge, known: &mut Option<BTreeMap<String, String>>) -> Result<(), String> {
    let containers = bridge.rm.containers(&bridge.application_types).await?;
    let wanted: BTreeMap<String, String> = containers
        .into_iter()
        .filter(|c| !c.master)
        .map(|c| (c.id, host_of(&c.node).to_owned()))
        .collect();
    let held = match known.take() {
        Some(held) => held,
        None => bridge
            .daemon
            .registrations()
            .await?
            .into_iter()
            .filter(|r| r.id.starts_with(CONTAINER))
            .map(|r| (r.id, r.node))
            .collect(),
    };
    let new: Vec<Registration> = wanted
        .iter()
        .filter(|(id, node)| held.get(*id) != Some(node))
        .map(|(id, node)| Registration {
            id: id.clone(),
            node: node.clone(),
        })
        .collect();
    if !new.is_empty() {
        bridge.daemon.register(&new).await?;
        bridge.metrics.registrations.inc_by(new.len() as u64);
        tracing::info!(count = new.len(), "task managers registered");
    }
    for id in held.keys().filter(|id| !wanted.contains_key(*id)) {
        bridge.daemon.unregister(id).await?;
        bridge.metrics.unregistrations.inc();
        tracing::info!(task_manager = %id, "its container is gone: unregistered");
    }
    *known = Some(wanted);
    Ok(())
}
