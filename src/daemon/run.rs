//! [`run`]: the daemon from its flags to its stop.

use std::future::Future;
use std::sync::Arc;

use super::app::{limits, start, store_config};
use super::error::Error;
use super::listener::{bind, listener_tls};
use super::roles::{self, Stopped};
use crate::config::Config;
use crate::http::{self, Auth, Forwarder, Stop};
use crate::metrics::Metrics;

/// Runs the daemon until `shutdown` resolves: opens the store, starts the sweeper, serves
/// HTTP, then drains in-flight requests and closes the store.
///
/// On etcd, the daemon takes its roles on the prefix in turn (`daemon/roles.rs`): a replica
/// while another daemon writes (`Store::open_replica`: reads served from the followed prefix,
/// writes sent on to the writer), the writer (store, sweeper and application) once it wins
/// the writer key, a replica again once another daemon has taken the key from it.
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
            let app = forwarder.switch.router();
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
                if ran.is_err() {
                    let _ = fail.send(());
                }
                ran
            });
            // Listening once the first role serves; a first role that failed is the
            // daemon's failure to start.
            if served.await.is_err() {
                return Err(match opening.await.expect("the roles do not panic") {
                    Err(error) => error,
                    Ok(_) => Error::Internal("the roles stopped before any served".to_owned()),
                });
            }
            (app, opening, Some(failed))
        }
        _ => {
            let (running, app) = start(&config, store_config, auth, None, stop.clone()).await?;
            let opening = tokio::spawn(async move { Ok(Stopped::Writer(running)) });
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
    match opening.await.expect("the roles do not panic")? {
        Stopped::Writer(running) => running.shut_down().await?,
        // Nothing of a writer's was open.
        Stopped::Replica => {}
    }
    tracing::info!("stopped");
    served.map_err(Error::Serve)
}
