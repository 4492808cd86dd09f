//! A daemon's roles on an etcd prefix, one after another until it stops: a replica while
//! another daemon holds the writer key (its own followed store, reads served here, writes
//! sent on), the writer once it wins the key, and a replica again once another daemon has
//! taken the key from it (its lease ended: a pause, a partition). Each role's application
//! takes over from the last on the same listener ([`crate::http::RoleSwitch`]).
//!
//! Between losing its lease and seeing another daemon hold the key, a writer is a
//! *candidate*: its store refuses writes (the fence), it sends every request on, and its
//! committer tries to win the key back once a second, which it does if nobody else took it.
//!
//! Which role comes next is decided in `transitions.rs`, a pure function; the loop here
//! does the I/O of each step and reports what came of it.

use std::sync::Arc;
use std::time::Duration;

use super::app::{application, start, Running};
use super::error::Error;
use super::transitions::{next, Observed, Phase, Step};
use crate::config::Config;
use crate::http::{Auth, Forwarder, Stop};
use crate::store::{Election, Store, StoreConfig, StoreError};

/// How often a writer that lost its lease looks whether the key is still its own.
const DEPOSED_POLL: Duration = Duration::from_millis(250);

/// How long a replica's open, or its takeover, that failed on etcd waits before it is
/// tried again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// What the roles need, the same for each.
pub(super) struct Daemon {
    pub config: Config,
    pub store_config: StoreConfig,
    pub auth: Option<Auth>,
    pub forwarder: Arc<Forwarder>,
    pub election: Election,
    /// Fires when the daemon stops: every role's streams end, and a campaign stops waiting.
    pub stop: Stop,
}

/// How the daemon's store stood when it stopped.
pub(super) enum Stopped {
    /// A writer's store was open (the writer's, or a deposed writer's not yet shut down):
    /// it is to be shut down.
    Writer(Running),
    /// Only a replica's store, or none, was open: nothing to shut down.
    Replica,
}

/// The stores open now, each with its role's own stop.
#[derive(Default)]
struct Open {
    /// The writer's store: serving, or deposed and still serving until the replica does.
    writer: Option<(Running, Stop)>,
    replica: Option<(Store, Stop)>,
}

/// Runs the roles; `first` is told once the first role serves. `won`: whether the daemon's
/// first campaign won the writer key.
pub(super) async fn run(
    daemon: Daemon,
    won: bool,
    first: tokio::sync::oneshot::Sender<()>,
) -> Result<Stopped, Error> {
    let mut first = Some(first);
    let mut open = Open::default();
    let mut failure = None;
    let (mut phase, mut observed) = (Phase::Starting, Observed::Started { won });
    loop {
        let Some((then, step)) = next(phase, observed) else {
            return Err(Error::Internal(format!(
                "the roles saw {observed:?} while {phase:?}"
            )));
        };
        phase = then;
        observed = match step {
            Step::OpenWriter => match become_writer(&daemon).await {
                Ok(writer) => {
                    // Requests in flight on the replica's application finish on it; its
                    // streams end, and their subscribers resume with Last-Event-ID on the
                    // writer's.
                    if let Some((replica, stop)) = open.replica.take() {
                        replica.stop_following();
                        stop.fire();
                        tracing::info!("took over as the writer");
                    }
                    open.writer = Some(writer);
                    if let Some(first) = first.take() {
                        let _ = first.send(());
                    }
                    Observed::WriterServing
                }
                Err(error) => observe_failure(error, phase, &mut failure),
            },
            Step::OpenReplica => match become_replica(&daemon).await {
                Ok(replica) => {
                    open.replica = Some(replica);
                    tracing::info!(
                        "another daemon writes the prefix: serving as a replica (reads served \
                         here, writes sent on to the writer)"
                    );
                    if let Some(first) = first.take() {
                        let _ = first.send(());
                    }
                    // The deposed writer's store stops only now that the replica serves:
                    // until then its application sent every request on.
                    if let Some((running, stop)) = open.writer.take() {
                        stop.fire();
                        if let Err(error) = running.shut_down().await {
                            tracing::warn!(
                                %error,
                                "the deposed writer's store did not shut down cleanly"
                            );
                        }
                    }
                    Observed::ReplicaServing
                }
                Err(StoreError::Closed) => Observed::Stopping,
                Err(error) => {
                    let on_etcd = matches!(error, StoreError::Etcd(_));
                    if on_etcd && phase != Phase::Starting {
                        tracing::warn!(%error, "opening the replica failed; trying again");
                    }
                    failure = Some(error.into());
                    Observed::ReplicaFailed { on_etcd }
                }
            },
            Step::HoldKey => {
                tokio::select! {
                    () = daemon.stop.fired() => Observed::Stopping,
                    () = taken_from(&daemon.election) => {
                        tracing::warn!(
                            "the writer key is another daemon's now, or nobody's (this \
                             daemon's lease ended): stepping down to a replica, which \
                             campaigns for it"
                        );
                        Observed::KeyTaken
                    }
                }
            }
            Step::GiveUpKeyAndWait => {
                let election = daemon.election.clone();
                tokio::task::spawn_blocking(move || election.give_up())
                    .await
                    .expect("giving the key up does not panic");
                wait(&daemon.stop).await
            }
            Step::Wait => wait(&daemon.stop).await,
            Step::Stop => {
                return Ok(match open.writer {
                    Some((running, _)) => Stopped::Writer(running),
                    None => Stopped::Replica,
                });
            }
            Step::Fail => {
                return Err(failure.unwrap_or_else(|| {
                    Error::Internal(format!("the roles failed while {phase:?} without an error"))
                }));
            }
        };
    }
}

/// What a failed writer's open comes to: a campaign stopped by the daemon's stop is its
/// stop; any other failure is kept for [`Step::Fail`] (a replica's takeover that failed
/// is logged: the replica serves on and campaigns again).
fn observe_failure(error: Error, phase: Phase, failure: &mut Option<Error>) -> Observed {
    let on_store = match &error {
        Error::Store(StoreError::Closed) => return Observed::Stopping,
        Error::Store(error) if phase == Phase::Replica => {
            tracing::warn!(
                %error,
                "taking over as the writer failed; giving the writer key up and trying again \
                 as a replica"
            );
            true
        }
        Error::Store(_) => true,
        _ => false,
    };
    *failure = Some(error);
    Observed::WriterFailed { on_store }
}

/// Waits for the writer key (while another daemon holds it), loads the blocklist as the
/// writer and serves the writer's application.
async fn become_writer(daemon: &Daemon) -> Result<(Running, Stop), Error> {
    let writer_stop = role_stop(&daemon.stop);
    let (running, app) = start(
        &daemon.config,
        daemon.store_config.clone(),
        daemon.auth.clone(),
        Some(daemon.forwarder.clone()),
        writer_stop.clone(),
    )
    .await?;
    daemon.forwarder.switch.serve_writer(app);
    Ok((running, writer_stop))
}

/// Opens the store as a replica and serves the replica's application.
async fn become_replica(daemon: &Daemon) -> Result<(Store, Stop), StoreError> {
    let config = daemon.store_config.clone();
    let replica = tokio::task::spawn_blocking(move || Store::open_replica(&config))
        .await
        .expect("opening a replica does not panic")?;
    let replica_stop = role_stop(&daemon.stop);
    let app = application(
        &daemon.config,
        &replica,
        daemon.store_config.metrics.clone(),
        daemon.auth.clone(),
        None,
        Some(daemon.forwarder.clone()),
        replica_stop.clone(),
    );
    daemon.forwarder.switch.serve_replica(app);
    Ok((replica, replica_stop))
}

/// Waits [`RETRY_AFTER`], or until the daemon stops.
async fn wait(stop: &Stop) -> Observed {
    tokio::select! {
        () = stop.fired() => Observed::Stopping,
        () = tokio::time::sleep(RETRY_AFTER) => Observed::Waited,
    }
}

/// Returns once this daemon is not the writer and the writer key is not its own: another
/// daemon holds it, or nobody does (its lease ended while the daemon was paused, and no
/// replica took the key: a lone writer, which would otherwise wait for a taker forever and
/// refuse every write meanwhile; as a replica it campaigns and wins the key again).
async fn taken_from(election: &Election) {
    loop {
        tokio::time::sleep(DEPOSED_POLL).await;
        if election.is_writer() {
            continue;
        }
        let election = election.clone();
        let lost = tokio::task::spawn_blocking(move || election.not_held_by_this())
            .await
            .expect("reading the writer key does not panic");
        if matches!(lost, Ok(true)) {
            return;
        }
    }
}

/// A role's own stop: fired when the role ends, and when the daemon stops.
fn role_stop(daemon: &Stop) -> Stop {
    let role = Stop::new();
    let (daemon, fired) = (daemon.clone(), role.clone());
    tokio::spawn(async move {
        tokio::select! {
            () = daemon.fired() => fired.fire(),
            () = fired.fired() => {}
        }
    });
    role
}
