//! blocklistd: a persistent blocklist daemon with Apache Flink's FLIP-224 semantics.
//!
//! Callers block task managers or nodes over REST, for a while or for good; the daemon
//! merges repeated reports, expires items on time, and acknowledges a write only once it is
//! on disk.
//!
//! # Layout
//! - [`config`]: flags and environment variables.
//! - [`model`]: the pure domain: kinds, actions, items, the merge rule, id rules.
//! - [`validate`]: request JSON to validated domain values, with every error named.
//! - [`provenance`]: who reported an item, the blocks an id had before, and the selectors
//!   of an unblock by provenance; pure, like [`model`].
//! - [`store`]: the only module that touches sled: trees, key and value encodings,
//!   migrations, the single group-commit writer and its durability (flush + fsync) thread.
//! - [`check`]: the effective "is this task manager or node blocked?" answer.
//! - [`sweeper`]: the expiry loop over the store's expiry index.
//! - [`sweep_signal`]: the sweeper's wake-up protocol, which the committer raises; below
//!   both the store and the sweeper, so that neither imports the other.
//! - [`http`]: the axum front end (routes, extractors, the error response, listings
//!   streamed with back-pressure, and the `OpenAPI` document generated from the handlers'
//!   annotations).
//! - [`listing`]: listings produced in bounded chunks (resumed by key), which the HTTP
//!   layer streams and the offline export collects.
//! - [`backup`]: export and import as JSON lines.
//! - [`offline`]: the `check`, `export`, `salvage` and `import` subcommands.
//! - [`progress`]: how far long offline work has got, on stderr: a bar on a terminal, one
//!   summary line otherwise; the work reports through its `Progress` trait.
//! - [`shell`]: completion scripts and manual pages from the clap definitions (both
//!   binaries' `completion` and `man` subcommands).
//! - [`metrics`]: the Prometheus registry.
//! - `roles`: a daemon's roles on an etcd prefix in turn — replica, writer, replica again —
//!   each application swapped in on the same listener.
//! - [`tls`]: TLS (rustls): the listener's certificate, reloaded without a restart, the
//!   identity of a client certificate, and the client side of a request sent on to the
//!   writer.
//! - [`pem`]: certificates and keys read from PEM files, the file named in every error.
//! - [`clock`]: unix-ms wall-clock time, and the daemon's clock, which never goes back
//!   before what was announced expired.

pub mod allowlist;
pub mod backup;
pub mod check;
pub mod clock;
pub mod config;
pub mod http;
pub mod listing;
pub mod metrics;
pub mod model;
pub mod offline;
pub mod pem;
pub mod policy;
pub mod progress;
pub mod provenance;
mod roles;
pub mod shell;
pub mod store;
pub mod sweep_signal;
pub mod sweeper;
pub mod tls;
pub mod validate;

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::config::{Config, Opener};
use crate::http::{AppState, Auth, Forwarder, Limits, Stop};
use crate::metrics::Metrics;
use crate::store::{Store, StoreConfig, StoreError};
use crate::tls::ServerTls;

/// Why the daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Config(String),
    #[error("cannot open the store: {0}")]
    Store(#[from] StoreError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("server error: {0}")]
    Serve(std::io::Error),
}

/// The store's settings: the data dir's, or, with `--store etcd`, the cluster's (connected;
/// nothing written yet), announcing `advertised` as where to forward to while this daemon
/// is the writer.
fn store_config(
    config: &Config,
    advertised: &str,
    metrics: Arc<Metrics>,
) -> Result<StoreConfig, Error> {
    let mut store = config.store();
    store.metrics = metrics;
    let name = crate::store::Announcement {
        name: format!("blocklistd pid {} at {advertised}", std::process::id()),
        url: Some(advertised.to_owned()),
    }
    .to_value();
    config
        .store
        .place(&mut store, name, Opener::Daemon)
        .map_err(Error::Config)?;
    Ok(store)
}

/// The daemon once its store is open: what stops with it.
struct Running {
    store: Store,
    sweeper: tokio::task::JoinHandle<()>,
}

/// Opens the store (on etcd: waits until this daemon is the writer), starts the sweeper,
/// and builds the application.
async fn start(
    config: &Config,
    store_config: StoreConfig,
    auth: Option<Auth>,
    forwarder: Option<Arc<Forwarder>>,
    stop: Stop,
) -> Result<(Running, axum::Router), Error> {
    let metrics = store_config.metrics.clone();
    let store = tokio::task::spawn_blocking(move || Store::open(&store_config))
        .await
        .expect("opening the store does not panic")?;
    let sweeper = tokio::spawn(sweeper::run(
        store.clone(),
        config.sweep_interval(),
        config.reclaim(),
        metrics.clone(),
    ));
    let app = application(
        config,
        &store,
        metrics,
        auth,
        Some(&sweeper),
        forwarder,
        stop,
    );
    Ok((Running { store, sweeper }, app))
}

/// The application over `store`: the writer's (with its sweeper), or a replica's.
fn application(
    config: &Config,
    store: &Store,
    metrics: Arc<crate::metrics::Metrics>,
    auth: Option<Auth>,
    sweeper: Option<&tokio::task::JoinHandle<()>>,
    forwarder: Option<Arc<Forwarder>>,
    stop: Stop,
) -> axum::Router {
    let state = AppState::new(
        store.clone(),
        limits(config),
        auth,
        metrics,
        sweeper.map(tokio::task::JoinHandle::abort_handle),
        config.check_cache_mb.saturating_mul(1024 * 1024),
        config.cors_origins.clone(),
    )
    .serving(stop, forwarder);
    http::router(state)
}

async fn bind(config: &Config) -> Result<TcpListener, Error> {
    TcpListener::bind(config.listen)
        .await
        .map_err(|source| Error::Bind {
            addr: config.listen,
            source,
        })
}

fn limits(config: &Config) -> Limits {
    Limits {
        max_body_bytes: config.max_body_bytes,
        max_batch: config.max_batch,
        events_heartbeat: config.events_heartbeat(),
        events_max_lag: config.events_max_lag,
        header_timeout: config.header_timeout(),
        body_timeout: config.body_timeout(),
        max_connections: config.max_connections as usize,
    }
}

/// The listener's TLS, if `--tls-cert` asks for it: loaded, and reloaded on SIGHUP and when
/// its files change. Without it, SIGHUP is only logged, and plain HTTP off loopback warned
/// about.
fn listener_tls(config: &Config, metrics: &Arc<Metrics>) -> Result<Option<Arc<ServerTls>>, Error> {
    let Some(files) = config.tls.files() else {
        crate::tls::log_hangups().map_err(Error::Serve)?;
        if !config.listen.ip().is_loopback() {
            tracing::warn!(
                listen = %config.listen,
                "serving plain HTTP on a non-loopback address: tokens and the blocklist \
                 cross the network in the clear; give --tls-cert and --tls-key"
            );
        }
        return Ok(None);
    };
    if config.store.on_etcd() && files.peer_ca.is_none() {
        return Err(Error::Config(
            "--tls-cert with --store etcd needs --tls-peer-ca: the CA that signed the other \
             daemons' certificates, to verify the writer a request is sent on to"
                .to_owned(),
        ));
    }
    let tls = ServerTls::load(files, metrics.clone()).map_err(Error::Config)?;
    tls.watch().map_err(Error::Serve)?;
    Ok(Some(tls))
}

/// Runs the daemon until `shutdown` resolves: opens the store, starts the sweeper, serves
/// HTTP, then drains in-flight requests and closes the store.
///
/// On etcd, the daemon takes its roles on the prefix in turn ([`roles`]): a replica while
/// another daemon writes (`Store::follow`: reads served from the followed prefix, writes
/// sent on to the writer), the writer (store, sweeper and application) once it wins the
/// writer key, a replica again once another daemon has taken the key from it.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let auth = match &config.token_file {
        Some(path) => Some(Auth::from_file(path, config.auth_reads).map_err(Error::Config)?),
        None => None,
    };
    if auth.is_none() && !config.listen.ip().is_loopback() && !config.allow_unauthenticated {
        return Err(Error::Config(format!(
            "refusing to listen on {} without authentication: anyone who can reach it could \
             change the blocklist. Give --token-file, or --allow-unauthenticated if the \
             network is trusted",
            config.listen
        )));
    }
    let metrics = Arc::new(Metrics::new());
    let tls = listener_tls(&config, &metrics)?;
    // On etcd the address is announced in the writer key, so the listener comes first; on
    // sled it comes after the store opened, so that nothing connects to a daemon that may
    // still fail to start.
    let mut listener = if config.store.on_etcd() {
        Some(bind(&config).await?)
    } else {
        None
    };
    let advertised = match &listener {
        Some(listener) => config
            .store
            .advertised(listener.local_addr().map_err(Error::Serve)?, tls.is_some())
            .map_err(Error::Config)?,
        None => String::new(),
    };
    let forwarding_tls = match &tls {
        Some(tls) if config.tls.tls_peer_ca.is_some() => {
            Some(crate::tls::forwarding_config(tls).map_err(Error::Config)?)
        }
        _ => None,
    };
    let store_config = store_config(&config, &advertised, metrics.clone())?;
    let election = store_config.election();
    let stopping_election = election.clone();
    let forwarder = election.clone().map(|election| {
        Forwarder::new(
            election,
            advertised,
            config.store.forward_wait(),
            limits(&config),
            forwarding_tls,
            metrics.clone(),
        )
    });
    let stop = Stop::new();
    let (app, opening, failed) = match (election, forwarder) {
        (Some(election), Some(forwarder)) => {
            let won = {
                let election = election.clone();
                tokio::task::spawn_blocking(move || election.try_win())
                    .await
                    .expect("campaigning does not panic")?
            };
            let app = forwarder.roles.router();
            let daemon = roles::Daemon {
                config: config.clone(),
                store_config,
                auth,
                forwarder,
                election,
                stop: stop.clone(),
            };
            let (first, served) = tokio::sync::oneshot::channel();
            let (fail, failed) = tokio::sync::oneshot::channel::<()>();
            let opening = tokio::spawn(async move {
                let ran = roles::run(daemon, won, first).await;
                if !matches!(ran, Ok(_) | Err(Error::Store(StoreError::Closed))) {
                    let _ = fail.send(());
                }
                ran
            });
            // Listening once the first role serves; a first role that failed is the
            // daemon's failure to start.
            if served.await.is_err() {
                return Err(opening
                    .await
                    .expect("the roles do not panic")
                    .err()
                    .unwrap_or(Error::Store(StoreError::Closed)));
            }
            (app, opening, Some(failed))
        }
        _ => {
            let (running, app) = start(&config, store_config, auth, None, stop.clone()).await?;
            let opening = tokio::spawn(async move { Ok(running) });
            (app, opening, None)
        }
    };
    let listener = match listener.take() {
        Some(listener) => listener,
        None => bind(&config).await?,
    };
    let addr = listener.local_addr().map_err(Error::Serve)?;
    // Tests and supervisors read this line from stdout to learn the bound port.
    println!("listening on {addr}");
    tracing::info!(%addr, data_dir = %config.data_dir.display(), "blocklistd started");

    // On etcd, a role that failed (not a wait: an error) stops the daemon, as a daemon
    // whose first open failed does.
    let shutdown = async move {
        match failed {
            // Dropped unsent when the roles ended without failing.
            Some(failed) => tokio::select! {
                () = shutdown => {}
                Ok(()) = failed => {}
            },
            None => shutdown.await,
        }
    };
    let served = http::serve(
        listener,
        app,
        limits(&config),
        stop,
        shutdown,
        config.shutdown_timeout(),
        tls,
    )
    .await;
    tracing::info!("shutting down");
    if !opening.is_finished() {
        // Perhaps a replica: stop waiting for the writer key.
        if let Some(election) = &stopping_election {
            election.stop_waiting();
        }
    }
    let running = opening.await.expect("opening the store does not panic");
    let Running { store, sweeper } = match running {
        Ok(running) => running,
        // Stopped while waiting for the writer key: nothing was opened.
        Err(Error::Store(StoreError::Closed)) => {
            tracing::info!("stopped");
            return served.map_err(Error::Serve);
        }
        Err(e) => return Err(e),
    };
    sweeper.abort();
    let _ = sweeper.await;
    tokio::task::spawn_blocking(move || store.shutdown())
        .await
        .expect("store shutdown does not panic")?;
    tracing::info!("stopped");
    served.map_err(Error::Serve)
}
