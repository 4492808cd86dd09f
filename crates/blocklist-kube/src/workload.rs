//! The pods an evacuation may evict, cached as the few facts it reads: bound to which
//! node, whether they are work to evict ([`crate::evictable`], judged once as each pod is
//! seen), whether they are being deleted: a few hundred bytes a pod, where a cache of
//! whole `Pod` objects costs kilobytes.
//!
//! A watch of the pods the eviction selector matches (bound to a node, in `--namespace`
//! if one is given) keeps it; each relist replaces it whole once listed, so a look never
//! sees half a listing. When the eviction selector is the task managers' (the default),
//! the membership's watch of those pods feeds it ([`Workload::apply`]) and no second watch
//! runs: one listing of the pods, not two.

use std::collections::HashMap;
use std::sync::Mutex;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use tokio::sync::watch;

use crate::bridge::Bridge;
use crate::evictable::{evictable, terminating};
use crate::marking::EVACUATE;

/// One pod, as the evacuation reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub node: String,
    /// Work to evict from a node blocked with evacuation (see [`crate::evictable`]).
    pub work: bool,
    pub terminating: bool,
}

impl Member {
    fn of(pod: &Pod, taint_key: &str) -> Option<Member> {
        Some(Member {
            uid: pod.metadata.uid.clone()?,
            namespace: pod.metadata.namespace.clone()?,
            name: pod.metadata.name.clone()?,
            node: pod.spec.as_ref()?.node_name.clone()?,
            work: evictable(pod, taint_key, EVACUATE).is_ok(),
            terminating: terminating(pod),
        })
    }
}

/// The cache.
pub struct Workload {
    client: kube::Client,
    /// A label selector, or `None` for every pod.
    selector: Option<String>,
    namespace: Option<String>,
    taint_key: String,
    /// By uid; `None` until the first listing is in.
    pods: Mutex<Option<HashMap<String, Member>>>,
    /// A listing being read.
    listing: Mutex<Option<HashMap<String, Member>>>,
    listed: watch::Sender<bool>,
}

impl Workload {
    pub fn new(
        client: kube::Client,
        selector: Option<String>,
        namespace: Option<String>,
        taint_key: String,
    ) -> Workload {
        Workload {
            client,
            selector,
            namespace,
            taint_key,
            pods: Mutex::new(None),
            listing: Mutex::new(None),
            listed: watch::Sender::new(false),
        }
    }

    /// Keeps the cache with a watch of its own, for as long as the bridge runs.
    pub async fn watch(&self, bridge: &Bridge) {
        let api: Api<Pod> = match &self.namespace {
            Some(namespace) => Api::namespaced(self.client.clone(), namespace),
            None => Api::all(self.client.clone()),
        };
        let mut config = watcher::Config::default().fields("spec.nodeName!=");
        if let Some(selector) = &self.selector {
            config = config.labels(selector);
        }
        let stream = watcher::watcher(api, config).default_backoff();
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => self.apply(bridge, &event),
                Err(e) => {
                    tracing::warn!(error = %e, "the evacuation's pod watch failed; it resumes");
                }
            }
        }
    }

    /// One event of a watch of the pods the eviction selector matches; each change wakes
    /// the evacuation.
    pub fn apply(&self, bridge: &Bridge, event: &Event<Pod>) {
        match event {
            Event::Init => *self.listing.lock().expect("not poisoned") = Some(HashMap::new()),
            Event::InitApply(pod) => {
                if let (Some(listing), Some(member)) = (
                    self.listing.lock().expect("not poisoned").as_mut(),
                    Member::of(pod, &self.taint_key),
                ) {
                    listing.insert(member.uid.clone(), member);
                }
            }
            Event::InitDone => {
                let listing = self.listing.lock().expect("not poisoned").take();
                *self.pods.lock().expect("not poisoned") = listing;
                self.listed.send_replace(true);
                bridge.wake_evacuation();
            }
            Event::Apply(pod) => {
                let mut pods = self.pods.lock().expect("not poisoned");
                if let Some(pods) = pods.as_mut() {
                    match Member::of(pod, &self.taint_key) {
                        Some(member) => pods.insert(member.uid.clone(), member),
                        None => pods.remove(pod.metadata.uid.as_deref().unwrap_or_default()),
                    };
                }
                drop(pods);
                bridge.wake_evacuation();
            }
            Event::Delete(pod) => {
                if let (Some(pods), Some(uid)) = (
                    self.pods.lock().expect("not poisoned").as_mut(),
                    &pod.metadata.uid,
                ) {
                    pods.remove(uid);
                }
                bridge.wake_evacuation();
            }
        }
    }

    /// Until the first listing is in.
    pub async fn listed(&self) {
        let mut listed = self.listed.subscribe();
        let _ = listed.wait_for(|listed| *listed).await;
    }

    /// Visits every pod cached now (under the cache's lock: `visit` only looks, and
    /// copies what it keeps).
    pub fn each(&self, mut visit: impl FnMut(&Member)) {
        if let Some(pods) = self.pods.lock().expect("not poisoned").as_ref() {
            pods.values().for_each(&mut visit);
        }
    }
}
