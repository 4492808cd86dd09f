//! The bridge's statuses in the daemon (`PUT /enforcement/{name}`): for each blocked node
//! what the bridge did — `enforced`, `dryRun`, `noTarget`, `heldBack`, `failed` — so the
//! blocklist shows whether the cluster obeyed. Changes are gathered for a moment and sent
//! in one request; after every full reconcile the whole view is sent again (the daemon
//! writes only what differs), which puts right a daemon that lost track (a failover, a
//! restore). A block's end drops its statuses in the daemon itself. An evacuation's
//! progress ([`crate::evacuation`]) is added to the detail of its node's status. Only the
//! leader reports; a replica that takes over sends its whole view after its first reconcile.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;

use crate::daemon::{Daemon, Status};
use crate::leader::Leadership;

/// How long changes are gathered before they are sent.
const GATHER: Duration = Duration::from_millis(50);

/// How long after a failed report it is sent again.
const PAUSE: Duration = Duration::from_secs(1);

#[derive(Default)]
pub struct Reporter {
    /// Node → its status as last decided.
    current: Mutex<HashMap<String, Status>>,
    /// Node → its status not yet sent.
    pending: Mutex<HashMap<String, Status>>,
    /// Node → its evacuation's progress, added to its status's detail.
    progress: Mutex<HashMap<String, String>>,
    wake: Notify,
}

impl Reporter {
    /// Node `node`'s status now (`None`: not blocked, nothing to say).
    pub fn set(&self, node: &str, status: Option<Status>) {
        let mut current = self.current.lock().expect("not poisoned");
        match status {
            Some(status) => {
                if current.get(node) == Some(&status) {
                    return;
                }
                current.insert(node.to_owned(), status.clone());
                let status = self.with_progress(status);
                self.pending
                    .lock()
                    .expect("not poisoned")
                    .insert(node.to_owned(), status);
                self.wake.notify_one();
            }
            None => {
                current.remove(node);
                self.pending.lock().expect("not poisoned").remove(node);
            }
        }
    }

    /// Node `node`'s evacuation progress now (`None`: no evacuation); its status is sent
    /// again with it.
    pub fn set_progress(&self, node: &str, progress: Option<String>) {
        let current = self.current.lock().expect("not poisoned");
        {
            let mut all = self.progress.lock().expect("not poisoned");
            let changed = match progress {
                Some(text) => all.insert(node.to_owned(), text.clone()) != Some(text),
                None => all.remove(node).is_some(),
            };
            if !changed {
                return;
            }
        }
        if let Some(status) = current.get(node) {
            let status = self.with_progress(status.clone());
            self.pending
                .lock()
                .expect("not poisoned")
                .insert(node.to_owned(), status);
            self.wake.notify_one();
        }
    }

    /// `status` with its node's evacuation progress in its detail, while it is enforced.
    fn with_progress(&self, mut status: Status) -> Status {
        let all = self.progress.lock().expect("not poisoned");
        if let (Some(progress), "enforced" | "dryRun") = (all.get(&status.id), status.state) {
            status.detail = Some(match status.detail {
                Some(detail) => format!("{detail}; {progress}"),
                None => progress.clone(),
            });
        }
        status
    }

    /// Sends every status again, after a full reconcile, keeping only the nodes `blocked`
    /// says are still blocked.
    pub fn resend_all(&self, blocked: impl Fn(&str) -> bool) {
        let mut current = self.current.lock().expect("not poisoned");
        current.retain(|node, _| blocked(node));
        let mut pending = self.pending.lock().expect("not poisoned");
        for (node, status) in current.iter() {
            pending.insert(node.clone(), self.with_progress(status.clone()));
        }
        self.wake.notify_one();
    }

    /// Keeps the daemon told, for as long as the bridge runs (while `leader` says it acts).
    pub async fn run(&self, daemon: &Daemon, name: &str, leader: &Leadership) {
        loop {
            self.wake.notified().await;
            tokio::time::sleep(GATHER).await;
            if !leader.acting() {
                continue; // kept pending; the leader's reports are the daemon's
            }
            while let Err(e) = self.flush(daemon, name).await {
                tracing::warn!(error = %e, "could not report the statuses; trying again");
                tokio::time::sleep(PAUSE).await;
            }
        }
    }

    /// Sends what is pending once; what failed stays pending.
    pub async fn flush(&self, daemon: &Daemon, name: &str) -> Result<(), String> {
        let batch: Vec<Status> = {
            let mut pending = self.pending.lock().expect("not poisoned");
            pending.drain().map(|(_, status)| status).collect()
        };
        if batch.is_empty() {
            return Ok(());
        }
        let sent = daemon.report(name, &batch).await;
        if sent.is_err() {
            let mut pending = self.pending.lock().expect("not poisoned");
            for status in batch {
                // A newer status of the same node, decided meanwhile, wins.
                pending.entry(status.id.clone()).or_insert(status);
            }
        }
        sent
    }
}
