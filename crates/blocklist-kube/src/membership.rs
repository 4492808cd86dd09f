//! The daemon's membership kept current from the pods: every pod the task-manager
//! selector matches, once bound to a Node (`spec.nodeName`), is registered as a task
//! manager of that name on that node (Flink uses the pod's name as the task manager's
//! resource id), in batches; a deleted pod is unregistered; and each time the watch
//! (re)lists, the daemon's membership is made to match the pods — missing and moved ones
//! registered, ones no pod stands for unregistered. The bridge is the membership's one
//! registrar (docs/kubernetes.md).

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;

use crate::bridge::Bridge;
use crate::daemon::{Daemon, Registration};
use crate::pods::Labels;
use crate::workload::Workload;

/// How long a burst of pod changes is gathered into one batch.
const GATHER: Duration = Duration::from_millis(20);

/// How long after the daemon failed a batch it is sent again.
const PAUSE: Duration = Duration::from_secs(1);

/// What the daemon should learn: a registration (`Some(node)`) or an unregistration.
type Pending = HashMap<String, Option<String>>;

/// Follows the pods `selector` matches for as long as the bridge runs; each is also
/// labelled as its task manager's block says ([`Labels`]), and given to `workload` when
/// the evacuation's cache is of the same pods.
pub async fn run(
    bridge: &Bridge,
    labels: &Labels,
    pods: Api<Pod>,
    selector: &str,
    workload: Option<&Workload>,
) {
    let stream =
        watcher::watcher(pods, watcher::Config::default().labels(selector)).default_backoff();
    futures::pin_mut!(stream);
    // Task manager → node, as the pods say and the daemon has been (or will be) told.
    let mut known: HashMap<String, String> = HashMap::new();
    let mut listing: Option<HashMap<String, String>> = None;
    let mut pending = Pending::new();
    let mut resync = false;
    let mut leading = bridge.leader.subscribe();
    loop {
        if !bridge.leader.acting() && (resync || !pending.is_empty()) {
            // Only the leader tells the daemon; one that comes to lead matches the daemon's
            // membership to the pods first.
            pending.clear();
            resync = true;
        }
        let next = if !bridge.leader.acting() {
            tokio::select! {
                event = stream.next() => event.map(Some),
                _ = leading.changed() => Some(None),
            }
        } else if pending.is_empty() && !resync {
            stream.next().await.map(Some)
        } else {
            match tokio::time::timeout(GATHER, stream.next()).await {
                Ok(event) => event.map(Some),
                Err(_) => Some(None),
            }
        };
        if let (Some(workload), Some(Some(Ok(event)))) = (workload, &next) {
            workload.apply(bridge, event);
        }
        match next {
            None => return,
            Some(Some(Ok(event))) => match event {
                Event::Init => listing = Some(HashMap::new()),
                Event::InitApply(pod) => {
                    labels.pod_seen(bridge, &pod).await;
                    if let (Some(listing), Some((id, node))) = (&mut listing, bound(&pod)) {
                        listing.insert(id, node);
                    }
                }
                Event::InitDone => {
                    known = listing.take().unwrap_or_default();
                    resync = true;
                }
                Event::Apply(pod) => {
                    labels.pod_seen(bridge, &pod).await;
                    if let Some((id, node)) = bound(&pod) {
                        if known.get(&id) != Some(&node) {
                            pending.insert(id.clone(), Some(node.clone()));
                            known.insert(id, node);
                        }
                    }
                }
                Event::Delete(pod) => {
                    let id = pod.metadata.name.clone().unwrap_or_default();
                    labels.pod_gone(&id);
                    if known.remove(&id).is_some() {
                        pending.insert(id, None);
                    }
                }
            },
            Some(Some(Err(e))) => tracing::warn!(error = %e, "the pods' watch failed; it resumes"),
            Some(None) if !bridge.leader.acting() => {}
            // The burst is over: tell the daemon.
            Some(None) => {
                let sent = if resync {
                    match reconcile(bridge, &known).await {
                        Ok(()) => {
                            resync = false;
                            pending.clear();
                            Ok(())
                        }
                        Err(e) => Err(e),
                    }
                } else {
                    flush(bridge, &mut pending).await
                };
                if let Err(e) = sent {
                    tracing::warn!(error = %e, "could not update the daemon's membership; trying again");
                    tokio::time::sleep(PAUSE).await;
                }
            }
        }
    }
}

/// The task manager a pod stands for and the node it is bound to; `None` while it is not
/// bound yet.
fn bound(pod: &Pod) -> Option<(String, String)> {
    let id = pod.metadata.name.clone()?;
    let node = pod.spec.as_ref()?.node_name.clone()?;
    Some((id, node))
}

/// Sends what is pending: the registrations in batches, then the unregistrations; what
/// failed stays pending (sent again, an unregistration already done is no error).
async fn flush(bridge: &Bridge, pending: &mut Pending) -> Result<(), String> {
    let registrations: Vec<Registration> = pending
        .iter()
        .filter_map(|(id, node)| {
            Some(Registration {
                id: id.clone(),
                node: node.clone()?,
            })
        })
        .collect();
    let gone = pending
        .iter()
        .filter(|(_, node)| node.is_none())
        .map(|(id, _)| id.clone());
    let gone: Vec<String> = gone.collect();
    send(bridge, &registrations, &gone).await?;
    pending.clear();
    Ok(())
}

/// Registers `registrations` (in batches), then unregisters `gone`, counting both.
async fn send(
    bridge: &Bridge,
    registrations: &[Registration],
    gone: &[String],
) -> Result<(), String> {
    if !bridge.leader.acting() {
        return Err("this replica no longer leads; the leader keeps the membership".into());
    }
    bridge.daemon.register(registrations).await?;
    bridge
        .metrics
        .registrations
        .inc_by(registrations.len() as u64);
    for id in gone {
        bridge.daemon.unregister(id).await?;
        bridge.metrics.unregistrations.inc();
    }
    Ok(())
}

/// Makes the daemon's membership what the pods say: missing and moved task managers
/// registered, ones no pod stands for unregistered.
async fn reconcile(bridge: &Bridge, pods: &HashMap<String, String>) -> Result<(), String> {
    let daemon: &Daemon = &bridge.daemon;
    let held: HashMap<String, String> = daemon
        .registrations()
        .await?
        .into_iter()
        .map(|r| (r.id, r.node))
        .collect();
    let registrations: Vec<Registration> = pods
        .iter()
        .filter(|(id, node)| held.get(*id) != Some(*node))
        .map(|(id, node)| Registration {
            id: id.clone(),
            node: node.clone(),
        })
        .collect();
    let gone: Vec<String> = held
        .keys()
        .filter(|id| !pods.contains_key(*id))
        .cloned()
        .collect();
    send(bridge, &registrations, &gone).await?;
    tracing::info!(
        registered = registrations.len(),
        pods = pods.len(),
        "the daemon's membership matches the pods"
    );
    Ok(())
}
