//! The HTTP front end: parse, validate, call the store, map errors. Nothing else.

mod blocklist;
mod check;
mod error;
mod extract;
mod taskmanagers;

use std::future::{Future, IntoFuture};
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::{Method, Uri};
use axum::Router;
use tokio::net::TcpListener;

pub use error::{ApiError, ErrorBody};

use crate::store::{self, Store};

/// Request limits, from the flags.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_batch: usize,
}

/// What every handler gets. Cloning costs a few atomic increments.
#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub limits: Limits,
}

impl AppState {
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
}

pub fn router(state: AppState) -> Router {
    let limit = state.limits.max_body_bytes;
    Router::new()
        .merge(blocklist::router())
        .merge(check::router())
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
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let server = axum::serve(listener, router(state)).with_graceful_shutdown(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let mut stop_rx = stop_rx;
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
