//! The HTTP front end: parse, validate, call the store, map errors. Nothing else.

mod auth;
mod blocklist;
mod check;
mod error;
mod events;
mod extract;
mod observe;
mod openapi;
mod ops;
mod reply;
mod stream;
mod taskmanagers;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{Method, Uri};
use axum::{middleware, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::AbortHandle;

pub use auth::Auth;
pub use error::{ApiError, ErrorBody};
pub use openapi::ApiDoc;
pub use reply::REVISION_HEADER;

use crate::check::Checker;
use crate::metrics::Metrics;
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
    /// Deadline for a request's headers.
    pub header_timeout: Duration,
    /// Deadline for a request's body.
    pub body_timeout: Duration,
    /// The most open connections.
    pub max_connections: usize,
}

/// What every handler gets. Every request clones it several times (each middleware and
/// extractor takes its own), so it is one `Arc`: a clone is one atomic increment.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The state behind [`AppState`].
pub struct Shared {
    pub store: Store,
    /// Answers checks, keeping recent verdicts.
    pub checker: Checker,
    pub limits: Limits,
    /// Bearer-token checking; `None` when no `--token-file` was given.
    pub auth: Option<Arc<Auth>>,
    pub metrics: Arc<Metrics>,
    /// The sweeper task, for the readiness probe.
    sweeper: AbortHandle,
    /// Set to true when the server stops: long-lived responses (watch streams) end on it,
    /// or graceful shutdown would wait for them forever.
    stop: Arc<watch::Sender<bool>>,
}

impl AppState {
    pub fn new(
        store: Store,
        limits: Limits,
        auth: Option<Auth>,
        metrics: Arc<Metrics>,
        sweeper: AbortHandle,
        check_cache_bytes: u64,
    ) -> AppState {
        AppState(Arc::new(Shared {
            checker: Checker::new(store.clone(), check_cache_bytes),
            store,
            limits,
            auth: auth.map(Arc::new),
            metrics,
            sweeper,
            stop: Arc::new(watch::Sender::new(false)),
        }))
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

    /// Runs a listing built whole in memory (`GET /taskmanagers`; the blocklist's listings
    /// are streamed, see [`stream`]) on the blocking pool so that it reflects
    /// one revision, then waits until that revision is durable: a listing never shows a
    /// change that a crash could still take back.
    async fn listing<T, F>(&self, read: F) -> error::Result<(T, u64)>
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

/// Every (method, path) the router serves, besides the implicit HEAD of each GET. Kept by
/// hand because an axum `Router` cannot list its routes: a unit test checks that the OpenAPI
/// document names exactly these, and `tests/openapi.rs` that the running daemon serves them
/// (and no other method on their paths). Add a route here when you add it below.
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/blocklist"),
    ("GET", "/blocklist/export"),
    ("GET", "/blocklist/taskmanagers"),
    ("POST", "/blocklist/taskmanagers"),
    ("GET", "/blocklist/taskmanagers/{id}"),
    ("DELETE", "/blocklist/taskmanagers/{id}"),
    ("GET", "/blocklist/nodes"),
    ("POST", "/blocklist/nodes"),
    ("GET", "/blocklist/nodes/{id}"),
    ("DELETE", "/blocklist/nodes/{id}"),
    ("POST", "/blocklist/check"),
    ("GET", "/blocklist/check/taskmanagers/{id}"),
    ("GET", "/blocklist/check/nodes/{id}"),
    ("GET", "/blocklist/events"),
    ("GET", "/taskmanagers"),
    ("PUT", "/taskmanagers"),
    ("GET", "/taskmanagers/{id}"),
    ("PUT", "/taskmanagers/{id}"),
    ("DELETE", "/taskmanagers/{id}"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
    ("GET", "/openapi.json"),
];

/// The OpenAPI document of this API, as `GET /openapi.json` serves it.
pub fn openapi_document() -> &'static str {
    openapi::document()
}

/// The application. Every route is listed in [`ROUTES`] and documented in [`ApiDoc`].
pub fn router(state: AppState) -> Router {
    let mut app = Router::new()
        .route("/openapi.json", axum::routing::get(openapi::openapi_json))
        .merge(blocklist::router())
        .merge(check::router())
        .merge(events::router())
        .merge(taskmanagers::router())
        .merge(ops::router())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed);
    // Without a token there is nothing to check: no layer, rather than one that passes
    // every request through (it would cost every request a boxed future).
    if state.auth.is_some() {
        app = app.layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ));
    }
    app.layer(observe::ObserveLayer::new(state.metrics.clone()))
        .with_state(state)
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no such endpoint: {method} {}", uri.path()))
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!("{method} is not allowed on {}", uri.path()))
}

/// The answer to a connection over `--max-connections`, written before closing it.
const TOO_MANY_CONNECTIONS: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/json\r\ncontent-length: 59\r\nconnection: close\r\n\r\n\
{\"errors\":[\"too many open connections; retry in a moment\"]}";

/// Serves until `shutdown` resolves, then stops accepting, ends watch streams, and waits up
/// to `grace` for the requests in flight.
///
/// A hand-written accept loop rather than `axum::serve`, for what that does not offer: a
/// deadline for request headers (slow-header clients), and a cap on open connections.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    let limits = state.limits;
    let stop = state.stop.clone();
    let app = router(state);
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    tokio::pin!(shutdown);
    loop {
        let (stream, _peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            tokio::spawn(async move {
                let mut stream = stream;
                let _ = stream.write_all(TOO_MANY_CONNECTIONS).await;
                let _ = stream.shutdown().await;
            });
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            // Errors here are the client's (reset, timeout): nothing to do but close.
            let _ = connection.await;
            drop(permit);
        });
    }
    drop(listener);
    stop.send_replace(true);
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?grace,
            "requests still in flight after the shutdown grace period; exiting"
        );
    }
    Ok(())
}
