//! A blocked task manager's pod carries the bridge's label (its key is the taint's,
//! `--taint-key`; its value the action), so `kubectl get pods -l blocklistd.io/blocked`
//! lists them; an unblock takes exactly that label off. Its eviction, when the action asks
//! for one, is [`crate::evacuation`]'s.
//!
//! The task manager's id is its pod's name (Flink's native Kubernetes mode); which
//! namespace it is in, the pods' watch ([`crate::membership`]) tells.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::bridge::Bridge;
use crate::marking::Block;

pub struct Labels {
    client: kube::Client,
    /// The pods' namespace when the bridge watches one (`--namespace`).
    namespace: Option<String>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Pod (task manager) name → its namespace, from the pods' watch.
    pods: HashMap<String, String>,
    /// Blocked task managers → the block; `None` until the first listing.
    blocked: Option<HashMap<String, Block>>,
}

impl Labels {
    pub fn new(client: kube::Client, namespace: Option<String>) -> Labels {
        Labels {
            client,
            namespace,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("not poisoned")
    }

    /// Task manager `tm`'s block changed (a feed event): its pod's label follows.
    pub async fn set(&self, bridge: &Bridge, tm: &str, block: Option<&Block>) {
        let (namespace, wanted) = {
            let mut state = self.state();
            if let Some(blocked) = state.blocked.as_mut() {
                match block {
                    Some(block) => blocked.insert(tm.to_owned(), block.clone()),
                    None => blocked.remove(tm),
                };
            }
            (state.pods.get(tm).cloned(), block.map(|b| b.action.clone()))
        };
        if let Some(namespace) = namespace {
            self.label(bridge, &namespace, tm, wanted.as_deref()).await;
        }
    }

    /// A task manager's pod as the watch saw it: labelled as its block says.
    pub async fn pod_seen(&self, bridge: &Bridge, pod: &Pod) {
        let (Some(name), Some(namespace)) = (&pod.metadata.name, &pod.metadata.namespace) else {
            return;
        };
        let wanted = {
            let mut state = self.state();
            state.pods.insert(name.clone(), namespace.clone());
            match &state.blocked {
                None => return, // nothing known yet: nothing acted on
                Some(blocked) => blocked.get(name).map(|b| b.action.clone()),
            }
        };
        let has = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(&bridge.marking.taint_key))
            .cloned();
        if has != wanted {
            self.label(bridge, namespace, name, wanted.as_deref()).await;
        }
    }

    /// The blocks of task managers whose action asks for evacuation, oldest change first,
    /// each with its pod's namespace when a pod of that name was seen; empty before the
    /// first listing.
    pub fn evacuating(&self) -> Vec<(Block, Option<String>)> {
        let state = self.state();
        let Some(blocked) = &state.blocked else {
            return Vec::new();
        };
        let mut evacuating: Vec<_> = blocked
            .values()
            .filter(|block| block.evacuates())
            .map(|block| (block.clone(), state.pods.get(&block.id).cloned()))
            .collect();
        evacuating.sort_by(|a, b| (a.0.revision, &a.0.id).cmp(&(b.0.revision, &b.0.id)));
        evacuating
    }

    /// A task manager's pod is gone.
    pub fn pod_gone(&self, name: &str) {
        self.state().pods.remove(name);
    }

    /// Every blocked task manager read from the daemon, and the labelled pods made to match.
    pub async fn reconcile(&self, bridge: &Bridge) -> Result<(), String> {
        let (blocks, _) = bridge.daemon.blocked("taskmanagers").await?;
        let blocked: HashMap<String, Block> =
            blocks.into_iter().map(|b| (b.id.clone(), b)).collect();
        let key = &bridge.marking.taint_key;
        let api: Api<Pod> = match &self.namespace {
            Some(namespace) => Api::namespaced(self.client.clone(), namespace),
            None => Api::all(self.client.clone()),
        };
        let labelled = api.list_metadata(&ListParams::default().labels(key)).await;
        bridge.metrics.api("list", &labelled);
        let labelled = labelled.map_err(|e| format!("listing labelled pods: {e}"))?;
        let mut done = HashSet::new();
        for pod in labelled {
            let (Some(name), Some(namespace)) = (pod.metadata.name, pod.metadata.namespace) else {
                continue;
            };
            let has = pod.metadata.labels.and_then(|mut l| l.remove(key));
            let wanted = blocked.get(&name).map(|b| b.action.clone());
            if has != wanted {
                self.label(bridge, &namespace, &name, wanted.as_deref())
                    .await;
            }
            done.insert(name);
        }
        let missing: Vec<(String, String, String)> = {
            let mut state = self.state();
            let missing = blocked
                .iter()
                .filter(|(tm, _)| !done.contains(*tm))
                .filter_map(|(tm, block)| {
                    Some((
                        state.pods.get(tm)?.clone(),
                        tm.clone(),
                        block.action.clone(),
                    ))
                })
                .collect();
            state.blocked = Some(blocked);
            missing
        };
        for (namespace, tm, action) in missing {
            self.label(bridge, &namespace, &tm, Some(&action)).await;
        }
        Ok(())
    }

    /// Sets (or with `None` removes) the bridge's label on pod `namespace/name`.
    async fn label(&self, bridge: &Bridge, namespace: &str, name: &str, value: Option<&str>) {
        if !bridge.leader.acting() {
            return; // the leader labels; this replica catches up when it leads
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let patch = json!({"metadata": {"labels": {bridge.marking.taint_key.clone(): value}}});
        let params = if bridge.marking.dry_run {
            PatchParams::default().dry_run()
        } else {
            PatchParams::default()
        };
        let result = api
            .patch_metadata(name, &params, &Patch::Merge(&patch))
            .await;
        bridge.metrics.api("patch", &result);
        match result {
            Ok(_) => {
                bridge.metrics.pods_labelled.inc();
                tracing::info!(pod = %format!("{namespace}/{name}"), label = ?value, dry_run = bridge.marking.dry_run, "task manager's pod labelled");
            }
            Err(kube::Error::Api(status)) if status.is_not_found() => {}
            Err(e) => {
                tracing::warn!(pod = %format!("{namespace}/{name}"), error = %e, "could not label the pod; the next resync retries");
            }
        }
    }
}
