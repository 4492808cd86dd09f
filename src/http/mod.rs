//! The HTTP front end: parse, validate, call the store, map errors. Nothing else.

mod blocklist;
mod check;
mod error;
mod events;
mod extract;
mod taskmanagers;

use std::future::{Future, IntoFuture};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use error::{ApiError, ErrorBody};

use crate::store::{self, Store};

/// Request limits, from the flags.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_batch: usize,
    /// Between heartbeat comments on idle watch streams.
    pub events_heartbeat: Duration,
    /// How many events a watcher may fall behind the head before it is disconnected.
    pub events_max_lag: u64,
}

/// What every handler gets. Cloning costs a few atomic increments.
#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub limits: Limits,
    /// Set to true when the server stops: long-lived responses (watch streams) end on it,
    /// or graceful shutdown would wait for them forever.
    stop: Arc<watch::Sender<bool>>,
}

impl AppState {
    pub fn new(store: Store, limits: Limits) -> AppState {
        AppState {
            store,
            limits,
            stop: Arc::new(watch::Sender::new(false)),
        }
    }

    /// A receiver that turns true when the server stops.
    fn stopping(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Runs a store call that may scan (a listing) on the blocking pool, off the async workers.
    async fn blocking<T, F>(&self, f: F) -> error::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> store::Result<T> + Send + 'static,
    {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| {
                ApiError::Store(store::StoreError::CommitFailed(format!(
                    "read task failed: {e}"
                )))
            })?
            .map_err(ApiError::from)
    }

    /// Runs a listing on the blocking pool so that it reflects one revision, then waits
    /// until that revision is durable: a listing never shows a change that a crash could
    /// still take back.
    async fn listing<T, F>(&self, read: F) -> error::Result<(T, u64)>
    where
        T: Send + 'static,
        F: Fn(&Store) -> store::Result<T> + Send + 'static,
    {
        let (value, revision) = self
            .blocking(move |store| store.consistent_read(&read))
            .await?;
        // What the scan saw may be newer than `revision` when it settled for a lower bound.
        self.store.wait_durable(self.store.revision()).await;
        Ok((value, revision))
    }
}

/// The header that carries the revision a response reflects.
pub const REVISION_HEADER: &str = "x-blocklist-revision";

/// Adds the `X-Blocklist-Revision` header to a response.
pub(crate) fn with_revision(revision: u64, response: impl IntoResponse) -> Response {
    let mut response = response.into_response();
    response
        .headers_mut()
        .insert(REVISION_HEADER, HeaderValue::from(revision));
    response
}

pub fn router(state: AppState) -> Router {
    let limit = state.limits.max_body_bytes;
    Router::new()
        .merge(blocklist::router())
        .merge(check::router())
        .merge(events::router())
        .merge(taskmanagers::router())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no such endpoint: {method} {}", uri.path()))
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!("{method} is not allowed on {}", uri.path()))
}

/// Serves until `shutdown` resolves, then stops accepting and waits up to `grace` for the
/// requests in flight.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    let stop = state.stop.clone();
    let mut stop_rx = stop.subscribe();
    let server = axum::serve(listener, router(state)).with_graceful_shutdown(async move {
        shutdown.await;
        stop.send_replace(true);
    });
    let server = server.into_future();
    tokio::pin!(server);
    tokio::select! {
        result = &mut server => return result,
        _ = stop_rx.wait_for(|stopped| *stopped) => {}
    }
    match tokio::time::timeout(grace, server).await {
        Ok(result) => result,
        Err(_) => {
            tracing::warn!(
                ?grace,
                "requests still in flight after the shutdown grace period; exiting"
            );
            Ok(())
        }
    }
}
