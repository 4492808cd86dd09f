//! The etcd store (`--store etcd`, the `etcd` feature): the blocklist lives in an etcd
//! cluster, under one key prefix, and outlives the machine.
//!
//! The committer, its transaction and every rule run unchanged on a **mirror**: a temporary
//! sled database the writer rebuilds from etcd when it opens ([`super::mirror`]). What
//! makes a group durable is not sled's flush but etcd: the group's writes
//! ([`super::writes`]) become the next entry of a log under the prefix ([`log`]), put only
//! if the writer key's create revision is still this daemon's. That compare is the
//! **fence**: a writer whose lease ended — paused, partitioned — can never write again,
//! whatever its clock says, because a new writer's key has another create revision.
//!
//! etcd acknowledges a put once a quorum has it in its fsynced WAL; only then does the
//! syncer answer the group. A failed or unanswered put fails the groups like a failed
//! flush, and the committer reopens: it rebuilds the mirror from what etcd really holds (an
//! entry whose put timed out may or may not be there), first winning the writer key again
//! if its lease ended; until then writes and reads answer 503.
//!
//! Keys under the prefix `P`: `P/writer`, the writer's name under its lease, created only
//! when absent; the log and the folded state ([`log`]).
//!
//! The etcd client is async; the committer and the syncer are plain threads. Every call
//! runs on a small runtime of this module's own, under a deadline
//! ([`EtcdConfig::call_timeout`]), and the calling thread waits for it.

mod follow;
mod lease;
mod log;
mod log_state;
mod members;
mod versions;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, PutOptions, Txn, TxnOp, TxnOpResponse,
};

pub(crate) use self::follow::{Apply, FollowState, Following};
pub(crate) use self::log::Loaded;
use self::members::{Attempt, Members};
pub(crate) use self::versions::{warning as version_warning, MemberVersion};
use super::StoreError;

/// How to reach the cluster and where the blocklist lives in it.
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    pub endpoints: Vec<String>,
    /// The CA and client certificate for `https://` endpoints.
    pub tls: Option<etcd_client::TlsOptions>,
    /// Every key is under it; ends with `/`.
    pub prefix: String,
    pub user: Option<(String, String)>,
    /// The writer key's lease, in seconds: how long a dead writer holds the prefix.
    pub lease_ttl_secs: i64,
    /// etcd's `--max-request-bytes`: no put may be larger.
    pub max_request_bytes: usize,
    /// etcd's `--max-txn-ops`: no transaction may hold more operations.
    pub max_txn_ops: usize,
    /// How many log entries wait before they are folded ([`log`]).
    pub fold_entries: u64,
    /// The deadline of every call to etcd.
    pub call_timeout: Duration,
    /// What this daemon writes in the writer key when it wins it: an
    /// [`super::Announcement`] (who it is, where to forward to).
    pub name: String,
    /// How long the first open waits while another daemon holds the writer key: `None`,
    /// as long as it takes (a replica daemon); an offline tool waits one lease, the
    /// longest a killed daemon's key outlives it.
    pub patience: Option<Duration>,
    /// Whether an empty prefix may get a new store (the daemon, `import`); `check` and
    /// `export` refuse one, so that a mistyped prefix does not look like an empty store.
    pub create: bool,
}

impl EtcdConfig {
    /// The patience of an offline tool: one lease, and a second for the clocks.
    pub fn lease_and_a_second(&self) -> Duration {
        Duration::from_secs(self.lease_ttl_secs.max(1).unsigned_abs() + 1)
    }
}

/// The connection to the cluster, and this daemon's standing as its writer.
pub(crate) struct Etcd {
    config: EtcdConfig,
    /// Taken only by `drop`, which shuts it down without waiting (it may be dropped on a
    /// runtime's thread, where waiting is not allowed).
    runtime: Option<tokio::runtime::Runtime>,
    members: Arc<Members>,
    /// Held by a campaign for as long as it waits, so [`Etcd::is_writer`] (asked by every
    /// request) reads `writing` instead.
    writer: Mutex<Standing>,
    /// Whether [`Standing::fence`] is set, readable without the lock (a request asks it).
    writing: AtomicBool,
    /// Set by the keep-alive task when the lease is gone: the next write is refused here
    /// (etcd would refuse it too, by the fence).
    lease_lost: Arc<AtomicBool>,
    /// Until when, in milliseconds after `epoch`, the lease surely lives: the last
    /// confirmed renewal's send time plus the time to live. A writer paused past it (its
    /// keep-alive task has not run yet to notice) answers nothing as the writer.
    lease_until: Arc<AtomicU64>,
    epoch: std::time::Instant,
    /// Where the log stands ([`log`]).
    log: Arc<Mutex<log_state::Log>>,
    /// What an operator must do since etcd last refused a write so (its NOSPACE alarm),
    /// until a write takes again: `/readyz` says it.
    refusal: Mutex<Option<&'static str>>,
    /// Set when the daemon stops: a campaign still waiting for another writer's lease
    /// gives up ([`Etcd::stop_waiting`]).
    stopping: AtomicBool,
    /// How many times this daemon became the writer (`blocklist_etcd_elections_total`).
    elections_won: AtomicU64,
    /// The writer's name as this daemon last saw it (its own once it won; a waiting
    /// campaign reads the key four times a second): `blocklist_etcd_writer`.
    writer_seen: Mutex<Option<String>>,
    /// Each member's etcd version as last read ([`versions`]).
    versions: Mutex<Vec<MemberVersion>>,
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd")
            .field("endpoints", &self.config.endpoints)
            .field("prefix", &self.config.prefix)
            .finish_non_exhaustive()
    }
}

/// What this daemon holds: its lease, and the writer key's create revision (the fence; 0
/// while it is not the writer).
#[derive(Debug, Default)]
struct Standing {
    lease: i64,
    fence: i64,
}

fn etcd_error(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Etcd(format!("{what}: {e}"))
}

impl Etcd {
    /// Prepares the connections to the cluster's members (each is opened on first use;
    /// nothing is sent yet).
    pub fn connect(config: EtcdConfig) -> Result<Arc<Etcd>, StoreError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("etcd")
            .enable_all()
            .build()?;
        // A member without a leader (an election, a partition) refuses at once rather than
        // wait, and the call tries again (`Etcd::call`).
        let mut options = ConnectOptions::new()
            .with_connect_timeout(config.call_timeout)
            .with_timeout(config.call_timeout)
            .with_require_leader(true);
        if let Some(tls) = &config.tls {
            options = options.with_tls(tls.clone());
        }
        if let Some((user, password)) = &config.user {
            options = options.with_user(user.clone(), password.clone());
        }
        if config.endpoints.is_empty() {
            return Err(etcd_error("connecting to etcd", "no endpoints given"));
        }
        let members = Arc::new(Members::new(config.endpoints.clone(), options));
        Ok(Arc::new(Etcd {
            config,
            runtime: Some(runtime),
            members,
            writer: Mutex::new(Standing::default()),
            writing: AtomicBool::new(false),
            lease_lost: Arc::new(AtomicBool::new(false)),
            lease_until: Arc::new(AtomicU64::new(0)),
            epoch: std::time::Instant::now(),
            log: Arc::default(),
            refusal: Mutex::new(None),
            stopping: AtomicBool::new(false),
            elections_won: AtomicU64::new(0),
            writer_seen: Mutex::new(None),
            versions: Mutex::new(Vec::new()),
        }))
    }

    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.runtime.as_ref().expect("taken only by drop")
    }

    fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.config.prefix)
    }

    fn writer_key(&self) -> String {
        self.key("writer")
    }

    /// Runs the call `make` builds (for a member's client) on this module's runtime, again
    /// while it fails in a way another attempt may get past (a member down, an election),
    /// until the call deadline; a failed attempt moves the next to another member
    /// ([`members`]). Only calls whose repetition is harmless come here: reads, a lease
    /// grant (one left over ends by itself), puts of the same value, and writes guarded by
    /// compares that a repeat fails (whose caller then reads back what took).
    fn call<T, F, Fut>(&self, what: &str, make: F) -> Result<T, StoreError>
    where
        F: Fn(Client) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
        T: Send + 'static,
    {
        let deadline = self.config.call_timeout;
        let attempts = attempts(self.members.clone(), deadline, make);
        wait_for(self.runtime(), deadline, attempts).map_err(|e| etcd_error(what, e))
    }

    /// The fence every write compares: the writer key's create revision, while this
    /// daemon is the writer with a live lease.
    fn fence(&self) -> Result<i64, StoreError> {
        let mut standing = self.writer.lock().expect("not poisoned");
        if standing.fence == 0 || !self.lease_lives() {
            self.set_fence(&mut standing, 0);
            return Err(StoreError::NotWriter(
                "this daemon's lease has ended".into(),
            ));
        }
        Ok(standing.fence)
    }

    /// Forgets the fence: etcd refused a write by it, so another daemon holds the key.
    fn deposed(&self) {
        let mut standing = self.writer.lock().expect("not poisoned");
        self.set_fence(&mut standing, 0);
    }

    /// Sets the fence, and whether there is one for [`Etcd::is_writer`].
    fn set_fence(&self, standing: &mut Standing, fence: i64) {
        standing.fence = fence;
        self.writing.store(fence != 0, Ordering::SeqCst);
    }

    /// Whether this daemon holds the writer key with a live lease.
    pub fn is_writer(&self) -> bool {
        self.writing.load(Ordering::SeqCst) && self.lease_lives()
    }

    /// How many times this daemon became the writer.
    pub fn elections_won(&self) -> u64 {
        self.elections_won.load(Ordering::SeqCst)
    }

    /// The writer's name as this daemon last saw it: its own while it writes.
    pub fn writer_seen(&self) -> Option<String> {
        if self.is_writer() {
            return Some(super::Announcement::from_value(&self.config.name).name);
        }
        self.writer_seen.lock().expect("not poisoned").clone()
    }

    fn saw_writer(&self, name: Option<String>) {
        *self.writer_seen.lock().expect("not poisoned") = name.filter(|n| !n.is_empty());
    }

    /// What an operator must do before etcd takes a write again, when it last refused one
    /// for a reason of the operator's (its NOSPACE alarm).
    pub fn refusal(&self) -> Option<&'static str> {
        *self.refusal.lock().expect("not poisoned")
    }

    /// The prefix the store lives under.
    pub fn prefix(&self) -> &str {
        &self.config.prefix
    }

    /// Whether an empty prefix may get a new store ([`EtcdConfig::create`]).
    pub fn creates(&self) -> bool {
        self.config.create
    }

    /// How long the first open waits for the writer key ([`EtcdConfig::patience`]).
    pub fn patience(&self) -> Option<Duration> {
        self.config.patience
    }

    /// Makes this daemon the writer of the prefix: a lease, kept alive, and the writer key
    /// created under it if absent. While another daemon holds the key, waits (as a
    /// replica) up to `patience` (`None`: as long as it takes), then fails naming it.
    /// Already the writer with a live lease: nothing to do.
    ///
    /// Without patience (a replica waiting its turn), etcd's failures are waited out too:
    /// a replica outlives an etcd outage, and campaigns again once etcd answers.
    pub fn campaign(&self, patience: Option<Duration>) -> Result<(), StoreError> {
        let started = std::time::Instant::now();
        let mut standing = self.writer.lock().expect("not poisoned");
        let mut warned = false;
        loop {
            match self.campaign_once(&mut standing, patience, started) {
                Err(StoreError::Etcd(error))
                    if patience.is_none() && !self.stopping.load(Ordering::SeqCst) =>
                {
                    if !warned {
                        tracing::warn!(%error, "etcd does not answer the campaign for the writer key; trying again");
                        warned = true;
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
                outcome => return outcome,
            }
        }
    }

    /// One campaign, until it wins, runs out of patience or fails on an etcd error.
    fn campaign_once(
        &self,
        standing: &mut Standing,
        patience: Option<Duration>,
        started: std::time::Instant,
    ) -> Result<(), StoreError> {
        if standing.fence != 0 && self.lease_lives() {
            return Ok(());
        }
        self.set_fence(standing, 0);
        // The lease is kept while it lives: a key this daemon created under it (by an
        // attempt whose answer was lost, or before a refusal it could not explain) is
        // then recognised as its own, not taken for another writer's.
        if standing.lease == 0 || !self.lease_lives() {
            let old = std::mem::take(&mut standing.lease);
            let ttl = self.config.lease_ttl_secs;
            let sent = self.epoch.elapsed();
            let lease = self.call("granting the writer's lease", move |mut client| {
                async move {
                    if old != 0 {
                        // Frees at once any key the ended lease still holds.
                        let _ = client.lease_revoke(old).await;
                    }
                    client.lease_grant(ttl, None).await.map(|r| r.id())
                }
            })?;
            standing.lease = lease;
            self.lease_lost.store(false, Ordering::SeqCst);
            self.lease_until.store(self.until(sent), Ordering::SeqCst);
            self.keep_alive(lease);
        }
        let lease = standing.lease;
        let mut announced = false;
        loop {
            let key = self.writer_key();
            let name = self.config.name.clone();
            let (won, holder) =
                self.call("campaigning for the writer key", move |mut client| {
                    let (key, name) = (key.clone(), name.clone());
                    async move {
                        let txn = Txn::new()
                            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                            .and_then([TxnOp::put(
                                key.clone(),
                                name,
                                Some(PutOptions::new().with_lease(lease)),
                            )])
                            .or_else([TxnOp::get(key, None)]);
                        let response = client.txn(txn).await?;
                        let revision = response
                            .header()
                            .map_or(0, etcd_client::ResponseHeader::revision);
                        if response.succeeded() {
                            // The put's revision is the key's create revision: the fence.
                            return Ok((Some(revision), String::new()));
                        }
                        let holder = response.op_responses().into_iter().find_map(|op| match op {
                            TxnOpResponse::Get(get) => get.kvs().first().map(|kv| {
                                let value = String::from_utf8_lossy(kv.value());
                                let name = super::Announcement::from_value(&value).name;
                                (kv.lease(), kv.create_revision(), name)
                            }),
                            _ => None,
                        });
                        Ok(match holder {
                            // An earlier attempt of this call created it, and its answer was
                            // lost: won all the same.
                            Some((holder, created, _)) if holder == lease => {
                                (Some(created), String::new())
                            }
                            Some((_, _, name)) => (None, name),
                            None => (None, String::new()),
                        })
                    }
                })?;
            self.saw_writer(Some(if won.is_some() {
                super::Announcement::from_value(&self.config.name).name
            } else {
                holder.clone()
            }));
            if let Some(fence) = won {
                self.set_fence(standing, fence);
                self.elections_won.fetch_add(1, Ordering::SeqCst);
                tracing::info!(prefix = %self.config.prefix, fence, "this daemon is the writer");
                return Ok(());
            }
            if patience.is_some_and(|patience| started.elapsed() >= patience) {
                return Err(StoreError::NotWriter(holder));
            }
            if self.stopping.load(Ordering::SeqCst) {
                return Err(StoreError::Closed);
            }
            if !announced {
                tracing::info!(
                    prefix = %self.config.prefix,
                    writer = %holder,
                    "another daemon writes this prefix; serving as a replica until its lease ends"
                );
                announced = true;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Etcd {
    /// The writer key's value (the writer's announcement), or `None` while nobody holds it.
    pub fn writer(&self) -> Result<Option<String>, StoreError> {
        let key = self.writer_key();
        self.call("reading the writer key", move |mut client| {
            let key = key.clone();
            async move {
                let response = client.get(key, None).await?;
                Ok(response
                    .kvs()
                    .first()
                    .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()))
            }
        })
        .inspect(|value| {
            let name = value
                .as_deref()
                .map(|v| super::Announcement::from_value(v).name);
            self.saw_writer(name);
        })
    }

    /// Whether the writer key holds anything but this daemon's announcement: another
    /// daemon's, or nothing (this daemon's lease ended, and nobody took the key yet).
    pub fn not_held_by_this(&self) -> Result<bool, StoreError> {
        Ok(self.writer()?.is_none_or(|value| value != self.config.name))
    }

    /// Ends a campaign that waits for another writer's lease ([`Etcd::campaign`] returns
    /// [`StoreError::Closed`] within a poll): the daemon is stopping.
    pub fn stop_waiting(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// Gives the writer key up at a clean stop, by revoking its lease: a replica takes
    /// over at once instead of after the lease. Called once nothing more is written.
    pub fn resign(&self) {
        let lease = {
            let mut standing = self.writer.lock().expect("not poisoned");
            self.set_fence(&mut standing, 0);
            std::mem::take(&mut standing.lease)
        };
        if lease == 0 {
            return;
        }
        self.lease_lost.store(true, Ordering::SeqCst);
        match self.call("giving the writer key up", move |mut client| async move {
            client.lease_revoke(lease).await
        }) {
            Ok(_) => tracing::info!(prefix = %self.config.prefix, "gave the writer key up"),
            // It ends with the lease all the same.
            Err(e) => tracing::warn!(error = %e, "could not give the writer key up"),
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        // An open that failed, or an offline tool, ends here: its key must not hold the
        // prefix for a lease.
        self.resign();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// [`Etcd::call`]'s attempts, as a future to await on etcd's runtime (where `call` cannot
/// wait): until one succeeds, fails for good, or `deadline` has passed.
async fn attempts<T, F, Fut>(
    members: Arc<Members>,
    deadline: Duration,
    make: F,
) -> Result<T, String>
where
    F: Fn(Client) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
    T: Send + 'static,
{
    let until = tokio::time::Instant::now() + deadline;
    let mut pause = Duration::from_millis(20);
    // An attempt may hang on a member that went away mid-request; it gets a part of the
    // deadline, and the next goes to another member.
    let attempt = (deadline / 4).clamp(Duration::from_millis(250), Duration::from_secs(1));
    loop {
        let error = match members.attempt(attempt, &make).await {
            Attempt::Done(value) => return Ok(value),
            Attempt::Failed(error) => return Err(error),
            Attempt::Again(error) => error,
        };
        if tokio::time::Instant::now() + pause >= until {
            return Err(error);
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}

/// Runs `future` on `runtime` and waits for it from the calling thread (any thread: a
/// runtime worker too, since it does not enter the runtime), at most `timeout`.
fn wait_for<T, E, F>(
    runtime: &tokio::runtime::Runtime,
    timeout: Duration,
    future: F,
) -> Result<T, String>
where
    F: Future<Output = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let (send, receive) = std::sync::mpsc::channel();
    runtime.spawn(async move {
        let outcome = match tokio::time::timeout(timeout, future).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {timeout:?}")),
        };
        let _ = send.send(outcome);
    });
    receive
        .recv()
        .unwrap_or_else(|_| Err("the etcd runtime stopped".into()))
}
