//! What one role serves: the writer's store with its sweeper, and the application over a
//! store (the writer's or a replica's).

use std::sync::Arc;

use super::error::Error;
use crate::config::{Config, Opener};
use crate::http::{self, AppState, Auth, Forwarder, Limits, Stop};
use crate::metrics::Metrics;
use crate::store::{Store, StoreConfig, StoreError};
use crate::sweeper;

/// The store's settings: the data dir's, or, with `--store etcd`, the cluster's (connected;
/// nothing written yet), announcing `advertised` as where to forward to while this daemon
/// is the writer.
pub(super) fn store_config(
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
    // Read once, as the etcd client reads it: an alert watches it expire.
    if let (true, Some(cert)) = (config.store.on_etcd(), &config.store.etcd_cert) {
        let not_after =
            crate::tls::expiry("etcd client certificate", cert).map_err(Error::Config)?;
        store.metrics.tls.etcd_client_certificate(not_after);
    }
    Ok(store)
}

/// The writer's store once open: what stops with it.
pub(super) struct Running {
    store: Store,
    sweeper: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops the sweeper, then the committer after its last group: the one way a writer's
    /// store stops, at the daemon's stop and when a deposed writer steps down.
    pub(super) async fn shut_down(self) -> Result<(), StoreError> {
        let Running { store, sweeper } = self;
        sweeper.abort();
        let _ = sweeper.await;
        tokio::task::spawn_blocking(move || store.shutdown())
            .await
            .expect("store shutdown does not panic")
    }
}

/// Opens the store as the writer (on etcd: waits until this daemon holds the writer key),
/// starts the sweeper, and builds the writer's application.
pub(super) async fn start(
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
pub(super) fn application(
    config: &Config,
    store: &Store,
    metrics: Arc<Metrics>,
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

/// The request limits, from the flags.
pub(super) fn limits(config: &Config) -> Limits {
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
