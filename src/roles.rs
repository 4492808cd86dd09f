//! A daemon's roles on an etcd prefix, one after another until it stops: a replica while
//! another daemon holds the writer key (its own followed store, reads served here, writes
//! sent on), the writer once it wins the key, and a replica again once another daemon has
//! taken the key from it (its lease ended: a pause, a partition). Each role's application
//! takes over from the last on the same listener ([`crate::http::Roles`]).
//!
//! Between losing its lease and seeing another daemon hold the key, a writer is a
//! *candidate*: its store refuses writes (the fence), it sends every request on, and its
//! committer tries to win the key back once a second, which it does if nobody else took it.

use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::http::{Auth, Forwarder, Stop};
use crate::store::{Election, Store, StoreConfig, StoreError};
use crate::{application, start, Error, Running};

/// How often a writer that lost its lease looks whether another daemon holds the key.
const DEPOSED_POLL: Duration = Duration::from_millis(250);

/// How long a replica's open, or its takeover, that failed on etcd waits before it is
/// tried again.
const FOLLOW_RETRY: Duration = Duration::from_secs(1);

/// What the roles need, the same for each.
pub(crate) struct Daemon {
    pub config: Config,
    pub store_config: StoreConfig,
    pub auth: Option<Auth>,
    pub forwarder: Arc<Forwarder>,
    pub election: Election,
    /// Fires when the daemon stops: every role's streams end, and a campaign stops waiting.
    pub stop: Stop,
}

/// Runs the roles; `first` is told once the first role serves. Returns the writer's store
/// and sweeper when the daemon stops as the writer; [`StoreError::Closed`] when it stops
/// as a replica.
pub(crate) async fn run(
    daemon: Daemon,
    won: bool,
    first: tokio::sync::oneshot::Sender<()>,
) -> Result<Running, Error> {
    let mut first = Some(first);
    let mut won = won;
    let mut deposed: Option<(Running, Stop)> = None;
    loop {
        let (running, writer_stop) = if won {
            become_writer(&daemon).await?
        } else {
            let replica = follow(&daemon, deposed.is_none()).await?;
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
            daemon.forwarder.roles.serve_replica(app);
            tracing::info!(
                "another daemon writes the prefix: serving as a replica (reads served here, \
                 writes sent on to the writer)"
            );
            if let Some(first) = first.take() {
                let _ = first.send(());
            }
            // The deposed writer's store stops only now that the replica serves: until
            // then its application sent every request on. (Before the campaign, which holds
            // the election while it waits.)
            if let Some((running, stop)) = deposed.take() {
                stop.fire();
                shut_down(running).await;
            }
            let became = take_over(&daemon).await;
            // Requests in flight on the replica's application finish on it; its streams end,
            // and their subscribers resume with Last-Event-ID on the writer's.
            replica.stop_following();
            replica_stop.fire();
            let became = became?;
            tracing::info!("took over as the writer");
            became
        };
        if let Some(first) = first.take() {
            let _ = first.send(());
        }
        tokio::select! {
            () = daemon.stop.fired() => return Ok(running),
            () = taken_from(&daemon.election) => {}
        }
        tracing::warn!(
            "another daemon holds the writer key now (this daemon's lease ended): stepping \
             down to a replica"
        );
        deposed = Some((running, writer_stop));
        won = false;
    }
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
    daemon.forwarder.roles.serve_writer(app);
    Ok((running, writer_stop))
}

/// A replica's takeover: waits for the writer key, then loads the blocklist as the writer.
/// An open that fails after the key was won (etcd unreachable while the log is read, say)
/// gives the key up, so that another daemon may take over, and the replica, still serving,
/// campaigns again a moment later: a replica never stops for a takeover that failed.
async fn take_over(daemon: &Daemon) -> Result<(Running, Stop), Error> {
    loop {
        match become_writer(daemon).await {
            Err(Error::Store(error)) if !matches!(error, StoreError::Closed) => {
                tracing::warn!(
                    %error,
                    "taking over as the writer failed; giving the writer key up and trying \
                     again as a replica"
                );
                let election = daemon.election.clone();
                tokio::task::spawn_blocking(move || election.give_up())
                    .await
                    .expect("giving the key up does not panic");
                tokio::select! {
                    () = daemon.stop.fired() => return Err(Error::Store(StoreError::Closed)),
                    () = tokio::time::sleep(FOLLOW_RETRY) => {}
                }
            }
            became => return became,
        }
    }
}

/// Opens the store as a replica. At the daemon's start a failure stops it; later (a writer
/// stepping down) etcd's failures are waited out, as a replica's campaign waits them out.
async fn follow(daemon: &Daemon, at_start: bool) -> Result<Store, Error> {
    loop {
        let config = daemon.store_config.clone();
        let opened = tokio::task::spawn_blocking(move || Store::follow(&config))
            .await
            .expect("opening a replica does not panic");
        match opened {
            Ok(store) => return Ok(store),
            Err(StoreError::Etcd(error)) if !at_start => {
                tracing::warn!(%error, "opening the replica failed; trying again");
                tokio::select! {
                    () = daemon.stop.fired() => return Err(Error::Store(StoreError::Closed)),
                    () = tokio::time::sleep(FOLLOW_RETRY) => {}
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Returns once this daemon is not the writer and another daemon holds the writer key.
async fn taken_from(election: &Election) {
    loop {
        tokio::time::sleep(DEPOSED_POLL).await;
        if election.is_writer() {
            continue;
        }
        let election = election.clone();
        let another = tokio::task::spawn_blocking(move || election.held_by_another())
            .await
            .expect("reading the writer key does not panic");
        if matches!(another, Ok(true)) {
            return;
        }
    }
}

/// Stops a writer's store: the sweeper, then the committer after its last group.
async fn shut_down(Running { store, sweeper }: Running) {
    sweeper.abort();
    let _ = sweeper.await;
    let stopped = tokio::task::spawn_blocking(move || store.shutdown())
        .await
        .expect("store shutdown does not panic");
    if let Err(error) = stopped {
        tracing::warn!(%error, "the deposed writer's store did not shut down cleanly");
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
