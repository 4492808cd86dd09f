//! The writer's lease: kept alive from etcd's runtime, and judged alive by this process's
//! own clock too, so that a writer woken from a pause never acts on a lease that ended.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::members::Members;
use super::Etcd;

impl Etcd {
    /// Whether this daemon's lease surely still lives: not marked lost, and confirmed
    /// within its time to live by this process's monotonic clock — which a pause (SIGSTOP,
    /// a stalled VM) moves on, so a writer that wakes after its lease answers nothing from
    /// its mirror before its keep-alive task has noticed.
    pub(super) fn lease_lives(&self) -> bool {
        !self.lease_lost.load(Ordering::SeqCst)
            && (self.epoch.elapsed().as_millis() as u64) < self.lease_until.load(Ordering::SeqCst)
    }

    /// Keeps `lease` alive from the runtime, renewing at a third of its time to live; marks
    /// it lost when etcd says it has ended, or when no renewal has been confirmed for as
    /// long as it lives (counted from when the last confirmed one was sent, so etcd cannot
    /// have let it end earlier). Each step has a quarter of the time to live, and a failed
    /// one is retried at once on a new stream, to the next member: a stream to a member
    /// that died stays open.
    pub(super) fn keep_alive(&self, lease: i64) {
        let members = self.members.clone();
        let lost = self.lease_lost.clone();
        let until = self.lease_until.clone();
        let epoch = self.epoch;
        let ttl_ms = self.until(Duration::ZERO);
        let ttl = Duration::from_secs(self.config.lease_ttl_secs.max(1).unsigned_abs());
        self.runtime().spawn(async move {
            let step = ttl / 4;
            let mut last_renewed = tokio::time::Instant::now();
            let mut renewal = None;
            while !lost.load(Ordering::SeqCst) {
                let sent = tokio::time::Instant::now();
                let alive = renew(&members, lease, &mut renewal, step).await;
                match alive {
                    Some(true) => {
                        last_renewed = sent;
                        let sent = sent.into_std().saturating_duration_since(epoch);
                        until.fetch_max(sent.as_millis() as u64 + ttl_ms, Ordering::SeqCst);
                    }
                    Some(false) => {
                        tracing::warn!(lease, "the writer's lease has ended");
                        lost.store(true, Ordering::SeqCst);
                        return;
                    }
                    None => renewal = None,
                }
                if last_renewed.elapsed() >= ttl {
                    tracing::warn!(lease, "the writer's lease could not be renewed in time");
                    lost.store(true, Ordering::SeqCst);
                    return;
                }
                let pause = if alive.is_some() {
                    ttl / 3
                } else {
                    Duration::from_millis(50)
                };
                tokio::time::sleep(pause).await;
            }
        });
    }
}

impl Etcd {
    /// When, in milliseconds after `epoch`, a lease whose grant or renewal was sent at
    /// `sent` (after `epoch`) surely still lives.
    pub(super) fn until(&self, sent: Duration) -> u64 {
        let ttl = self.config.lease_ttl_secs.max(1).unsigned_abs() * 1000;
        sent.as_millis() as u64 + ttl
    }
}

/// A keep-alive stream, and the member it goes to.
type Renewal = (
    usize,
    etcd_client::LeaseKeeper,
    etcd_client::LeaseKeepAliveStream,
);

/// One renewal of `lease` on `renewal`'s stream (opened to the current member when there
/// is none), each step within `step`: `Some(alive)` as etcd answered, `None` when it did
/// not (and the next stream goes to the next member).
async fn renew(
    members: &Members,
    lease: i64,
    renewal: &mut Option<Renewal>,
    step: Duration,
) -> Option<bool> {
    if renewal.is_none() {
        let member = members.current();
        let open = async {
            let mut client = members.client(member).await?;
            client.lease_keep_alive(lease).await
        };
        let opened = tokio::time::timeout(step, open)
            .await
            .map_err(|_| format!("no answer within {step:?}"))
            .and_then(|opened| opened.map_err(|e| e.to_string()));
        match opened {
            Ok((keeper, responses)) => *renewal = Some((member, keeper, responses)),
            Err(error) => {
                members.failed(member, &error);
                return None;
            }
        }
    }
    let (member, keeper, responses) = renewal.as_mut()?;
    let answer = async {
        tokio::time::timeout(step, keeper.keep_alive())
            .await
            .map_err(|_| format!("no answer within {step:?}"))?
            .map_err(|e| e.to_string())?;
        tokio::time::timeout(step, responses.message())
            .await
            .map_err(|_| format!("no answer within {step:?}"))?
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "the keep-alive stream ended".to_string())
    };
    match answer.await {
        Ok(answer) => Some(answer.ttl() > 0),
        Err(error) => {
            members.failed(*member, &error);
            None
        }
    }
}
