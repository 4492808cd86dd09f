//! One actor among the bridge's replicas: they elect a leader through a
//! `coordination.k8s.io/v1` Lease, and only the leader writes — to Kubernetes and to the
//! daemon. The others follow the feed and watch the Nodes and pods like the leader, so
//! they take over warm.
//!
//! The algorithm is client-go's: the holder renews the Lease every retry period; another
//! replica takes it once the record it read (holder, renew time, `resourceVersion`) has
//! not changed for the lease's duration **by its own clock** (no two clocks are
//! compared); every write of the Lease carries the `resourceVersion` it was computed from,
//! so of two replicas racing for it one gets a 409.
//!
//! A lease is not mutual exclusion by itself: a leader paused (a stop, a long GC, a
//! partition) cannot know it lost it. So the leader acts only until a deadline of its own
//! clock: the start of its last successful renewal plus the renew deadline (two thirds of
//! the duration), which is before any other replica can have seen the lease expire.
//! [`Leadership::acting`] is asked right before every write; a leader resumed after its
//! deadline writes nothing, and learns from its next read that it lost the lease.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;

/// The Lease the replicas share, and who this one is.
pub struct Election {
    pub api: Api<Lease>,
    /// The Lease's name (`--lease-name`).
    pub name: String,
    /// This replica's identity, unique among them (`--identity`).
    pub identity: String,
    /// How long a Lease not renewed stays held (`--lease-duration`).
    pub duration: Duration,
}

/// Whether this replica may write now.
pub struct Leadership {
    election: Option<Election>,
    /// The end of this replica's right to act, by its own clock.
    acting_until: Mutex<Option<Instant>>,
    /// `true` while this replica leads; the parts that act subscribe to changes.
    leading: watch::Sender<bool>,
    /// Set once the first round of the election is over (won, lost or failed).
    decided: watch::Sender<bool>,
}

/// The record of the Lease a follower watches for change (its expiry is counted from the
/// moment this replica first saw it).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    holder: Option<String>,
    renewed: Option<MicroTime>,
    version: Option<String>,
}

impl Leadership {
    /// Leadership by `election`; `None`: no election, this replica always acts.
    pub fn new(election: Option<Election>) -> Leadership {
        let alone = election.is_none();
        Leadership {
            election,
            acting_until: Mutex::new(None),
            leading: watch::Sender::new(alone),
            decided: watch::Sender::new(alone),
        }
    }

    /// Until the first round of the election is over: a replica that can lead at start
    /// makes its first reconcile as the leader.
    pub async fn decided(&self) {
        let _ = self.decided.subscribe().wait_for(|decided| *decided).await;
    }

    /// Whether this replica may write now: it leads, and its deadline has not passed.
    pub fn acting(&self) -> bool {
        self.election.is_none()
            || self
                .acting_until
                .lock()
                .expect("not poisoned")
                .is_some_and(|until| Instant::now() < until)
    }

    /// Changes of whether this replica leads.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    fn set(&self, until: Option<Instant>) {
        *self.acting_until.lock().expect("not poisoned") = until;
        let leads = until.is_some();
        self.leading.send_if_modified(|now| {
            let changed = *now != leads;
            *now = leads;
            changed
        });
    }

    /// Takes part in the election for as long as the bridge runs: acquires the Lease when
    /// it is free or expired, renews it while held, and stops acting as soon as its own
    /// deadline passes without a renewal.
    pub async fn run(&self) {
        let Some(election) = &self.election else {
            return std::future::pending().await;
        };
        let renew_deadline = election.duration * 2 / 3;
        let retry = (election.duration / 8).max(Duration::from_millis(100));
        let mut observed: Option<(Record, Instant)> = None;
        loop {
            let started = Instant::now();
            match election.try_acquire_or_renew(&mut observed).await {
                Ok(true) => {
                    if !*self.leading.borrow() {
                        tracing::info!(identity = %election.identity, lease = %election.name, "this replica leads: it acts");
                    }
                    self.set(Some(started + renew_deadline));
                }
                Ok(false) => {
                    if *self.leading.borrow() {
                        tracing::warn!(identity = %election.identity, lease = %election.name, "another replica holds the lease: this one stops acting");
                    }
                    self.set(None);
                }
                Err(e) => {
                    // Acting goes on until the deadline, and not past it.
                    tracing::warn!(error = %e, lease = %election.name, "could not read or renew the lease");
                }
            }
            self.decided.send_replace(true);
            if !self.acting() && *self.leading.borrow() {
                tracing::warn!(identity = %election.identity, "the lease was not renewed in time: this replica stops acting");
                self.set(None);
            }
            tokio::time::sleep(retry).await;
        }
    }

    /// A clean stop: stops acting, then hands the Lease back (holder cleared), so another
    /// replica takes it at its next try instead of after the lease's duration.
    pub async fn release(&self) {
        let Some(election) = &self.election else {
            return;
        };
        let held = self.acting();
        self.set(None);
        if held {
            match election.release().await {
                Ok(()) => tracing::info!(lease = %election.name, "the lease was released"),
                Err(e) => {
                    tracing::warn!(error = %e, lease = %election.name, "could not release the lease; it expires by itself");
                }
            }
        }
    }
}

impl Election {
    /// One round: `Ok(true)` when this replica holds the Lease now (acquired or renewed).
    async fn try_acquire_or_renew(
        &self,
        observed: &mut Option<(Record, Instant)>,
    ) -> Result<bool, kube::Error> {
        let now = MicroTime(Timestamp::now());
        let seconds = i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX);
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return held(self.api.create(&PostParams::default(), &lease).await);
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        if holder.as_deref() == Some(&self.identity) {
            spec.renew_time = Some(now);
            spec.lease_duration_seconds = Some(seconds);
            return held(
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await,
            );
        }
        let record = Record {
            holder: holder.clone(),
            renewed: spec.renew_time.clone(),
            version: lease.metadata.resource_version.clone(),
        };
        let seen_at = match observed {
            Some((seen, at)) if *seen == record => *at,
            _ => {
                *observed = Some((record, Instant::now()));
                Instant::now()
            }
        };
        let their_duration = spec.lease_duration_seconds.map_or(self.duration, |s| {
            Duration::from_secs(u64::try_from(s).unwrap_or(0))
        });
        if holder.is_some() && seen_at.elapsed() < their_duration {
            return Ok(false);
        }
        spec.holder_identity = Some(self.identity.clone());
        spec.lease_duration_seconds = Some(seconds);
        spec.acquire_time = Some(now.clone());
        spec.renew_time = Some(now);
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        held(
            self.api
                .replace(&self.name, &PostParams::default(), &lease)
                .await,
        )
    }

    /// Clears the holder of the Lease if it is still this replica.
    async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(&self.identity) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
            .map(|_| ())
    }
}

/// A write of the Lease: held when it was stored, not when another replica wrote first
/// (409: conflict on update, or already exists on create).
fn held(result: Result<Lease, kube::Error>) -> Result<bool, kube::Error> {
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// A default identity: the host's name (a pod's name in a cluster) and this process's id
/// and start, unique among the replicas even on one host.
pub fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "blocklist-kube".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{host}_{}_{nanos:08x}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An election on a cluster nobody answers for (nothing here is sent).
    fn election() -> Election {
        let config = kube::Config::new("https://127.0.0.1:9".parse().expect("a URI"));
        let client = kube::Client::try_from(config).expect("a client");
        Election {
            api: Api::namespaced(client, "default"),
            name: "blocklist-kube".into(),
            identity: "me".into(),
            duration: Duration::from_secs(3),
        }
    }

    #[tokio::test]
    async fn a_leader_stops_acting_at_its_deadline_before_it_learns_it_lost_the_lease() {
        let leadership = Leadership::new(Some(election()));
        assert!(!leadership.acting(), "no lease yet");
        leadership.set(Some(Instant::now() + Duration::from_millis(100)));
        assert!(leadership.acting());
        // Paused past its deadline: it still believes it leads (no round has told it
        // otherwise), and it does not act.
        std::thread::sleep(Duration::from_millis(150));
        assert!(*leadership.subscribe().borrow());
        assert!(!leadership.acting());
    }

    #[test]
    fn without_an_election_a_bridge_always_acts() {
        let leadership = Leadership::new(None);
        assert!(leadership.acting());
        assert!(*leadership.subscribe().borrow());
    }
}
