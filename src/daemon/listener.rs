//! The daemon's listening socket and its TLS.

use std::sync::Arc;

use tokio::net::TcpListener;

use super::error::Error;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::tls::ServerTls;

/// Binds `--listen`.
pub(super) async fn bind(config: &Config) -> Result<TcpListener, Error> {
    TcpListener::bind(config.listen)
        .await
        .map_err(|source| Error::Bind {
            addr: config.listen,
            source,
        })
}

/// The listener's TLS, if `--tls-cert` asks for it: loaded, and reloaded on SIGHUP and when
/// its files change. Without it, SIGHUP is only logged, and plain HTTP off loopback warned
/// about.
pub(super) fn listener_tls(
    config: &Config,
    metrics: &Arc<Metrics>,
) -> Result<Option<Arc<ServerTls>>, Error> {
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
    if !config.store.on_etcd() && files.peer_ca.is_some() {
        // Not an error: one environment file may serve daemons on either store.
        tracing::warn!(
            "--tls-peer-ca is unused on the sled store: it verifies the other daemons of an \
             etcd prefix, and a daemon on sled sends no request on to another"
        );
    }
    let tls = ServerTls::load(files, metrics.clone()).map_err(Error::Config)?;
    tls.watch().map_err(Error::Serve)?;
    Ok(Some(tls))
}
