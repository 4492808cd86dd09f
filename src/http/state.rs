//! What every handler gets: the shared state behind the router, and the request limits.

use std::sync::Arc;

use axum::extract::FromRef;
use tokio::sync::watch;
use tokio::task::AbortHandle;

use super::auth::Auth;
use super::caller::TokenCheck;
use super::error::{self, ApiError};
use super::limits::Limits;
use crate::check::Checker;
use crate::metrics::Metrics;
use crate::store::{self, Store};

/// What every handler gets. Every request clones it several times (each middleware and
/// extractor takes its own), so it is one `Arc`: a clone is one atomic increment.
#[derive(Clone)]
pub struct AppState(Arc<AppContext>);

impl std::ops::Deref for AppState {
    type Target = AppContext;

    fn deref(&self) -> &AppContext {
        &self.0
    }
}

/// The state behind [`AppState`].
pub struct AppContext {
    pub store: Store,
    /// Answers checks, keeping recent verdicts.
    pub checker: Checker,
    pub limits: Limits,
    /// Bearer-token checking; `None` when no `--token-file` was given.
    pub auth: Option<Arc<Auth>>,
    pub metrics: Arc<Metrics>,
    /// The origins (`--cors-origin`) whose pages may call the API from a browser; empty:
    /// no CORS.
    pub cors_origins: Vec<String>,
    /// The sweeper task, for the readiness probe; `None` on a replica (the writer sweeps).
    pub(super) sweeper: Option<AbortHandle>,
    /// Set to true when the server stops: long-lived responses (watch streams) end on it,
    /// or graceful shutdown would wait for them forever.
    pub(super) stop: Stop,
    /// Sends on to the writer what this daemon does not serve, on etcd
    /// ([`super::forward`]); `None` on sled.
    pub(super) forwarder: Option<Arc<super::Forwarder>>,
}

/// Turns true when the server stops ([`AppContext::stop`]); one for the server and every
/// handler, made before either.
#[derive(Clone)]
pub struct Stop(pub(super) Arc<watch::Sender<bool>>);

impl Stop {
    pub fn new() -> Stop {
        Stop(Arc::new(watch::Sender::new(false)))
    }

    /// Turns it true: the streams of the application it was given to end.
    pub fn fire(&self) {
        self.0.send_replace(true);
    }

    /// Resolves once it has turned true.
    pub async fn fired(&self) {
        let _ = self.0.subscribe().wait_for(|stop| *stop).await;
    }
}

impl Default for Stop {
    fn default() -> Stop {
        Stop::new()
    }
}

/// Who a request without a checked token is (`http::caller`): decided by whether there is a
/// token file, which is what `auth` holds.
impl FromRef<AppState> for TokenCheck {
    fn from_ref(state: &AppState) -> TokenCheck {
        if state.auth.is_some() {
            TokenCheck::On
        } else {
            TokenCheck::Off
        }
    }
}

impl AppState {
    pub fn new(
        store: Store,
        limits: Limits,
        auth: Option<Auth>,
        metrics: Arc<Metrics>,
        sweeper: Option<AbortHandle>,
        check_cache_bytes: u64,
        cors_origins: Vec<String>,
    ) -> AppState {
        AppState(Arc::new(AppContext {
            checker: Checker::new(store.clone(), check_cache_bytes),
            store,
            limits,
            auth: auth.map(Arc::new),
            metrics,
            cors_origins,
            sweeper,
            stop: Stop::new(),
            forwarder: None,
        }))
    }

    /// The same state, for a server made before it: stopping with `stop`, and sending on
    /// to the writer what this daemon does not serve. Only at construction, before the
    /// state is shared.
    pub fn serving(self, stop: Stop, forwarder: Option<Arc<super::Forwarder>>) -> AppState {
        let mut shared = Arc::into_inner(self.0).expect("not shared yet");
        shared.stop = stop;
        shared.forwarder = forwarder;
        AppState(Arc::new(shared))
    }

    /// A receiver that turns true when the server stops.
    pub(super) fn stopping(&self) -> watch::Receiver<bool> {
        self.stop.0.subscribe()
    }

    /// Runs a store call that may scan (a listing) on the blocking pool, off the async workers.
    pub(super) async fn blocking<T, F>(&self, f: F) -> error::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> store::Result<T> + Send + 'static,
    {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| ApiError::Store(store::StoreError::ReadTaskFailed(e)))?
            .map_err(ApiError::from)
    }

    /// Runs a listing built whole in memory (`GET /taskmanagers`; the blocklist's listings
    /// are streamed, see [`super::stream`]) on the blocking pool so that it reflects
    /// one revision, then waits until that revision is durable: a listing never shows a
    /// change that a crash could still take back.
    pub(super) async fn listing<T, F>(&self, read: F) -> error::Result<(T, u64)>
    where
        T: Send + 'static,
        F: Fn(&Store) -> store::Result<T> + Send + 'static,
    {
        let ((value, revision), seen) = self
            .blocking(move |store| Ok((store.consistent_read(&read)?, store.scan_ended())))
            .await?;
        // What the scan saw may be newer than `revision` when it settled for a lower bound.
        self.store.settle_scan(seen).await?;
        Ok((value, revision))
    }
}
