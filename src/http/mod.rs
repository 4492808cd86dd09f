//! The HTTP front end: parse, validate, call the store, map errors. Nothing else.
//!
//! Here: the router, its layers, and the accept loop. Each resource module (`blocklist`,
//! `update` (`PATCH` of an item), `provenance` (an id's past blocks, and who and why a
//! write names), `selector` (an unblock by selector), `detectors` (retractions, and the
//! source a detector reports under), `alertmanager` (Alertmanager's webhook), `check`, `events`, `taskmanagers`,
//! `policy`, `allowlist`, `ops`) has its `router()`, its handlers and the schemas of its
//! requests and responses (the add request's, which the derive cannot state whole, in
//! `add_request`); `openapi` only gathers those into the document. What they
//! share: `state` (`AppState`), `error` (`ApiError`, the error body and responses),
//! `extract` (the body and `{id}` extractors), `reply` (the revision header, the empty
//! body), `stream` (streamed listings), `caller` (who sent a request: the `Caller`
//! extractor, roles, `Caller::require`), `tokens` (the token file), `auth` and `observe`
//! (the layers), `cors` (the opt-in CORS layer), `console` (the operator console page,
//! outside the API), `idempotency` (the `Idempotency-Key` of writes: its extractors, the kept
//! response, its place in the document).

mod add_request;
mod alertmanager;
mod allowlist;
mod auth;
mod blocklist;
mod caller;
mod check;
mod console;
mod cors;
mod detectors;
mod enforcement;
mod error;
mod events;
mod extract;
mod forward;
mod idempotency;
mod limits;
mod observe;
mod openapi;
mod ops;
mod paging;
mod policy;
mod provenance;
mod reply;
mod role_switch;
mod routes;
mod schema;
mod selector;
mod state;
mod stream;
mod taskmanagers;
mod tokens;
mod update;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{Method, Request, Uri};
use axum::{middleware, Router};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::tls::ServerTls;

pub use auth::Auth;
pub use error::{ApiError, ErrorBody};
pub use forward::{Forwarder, FORWARDED_HEADER};
pub use limits::Limits;
pub use openapi::ApiDoc;
pub use reply::REVISION_HEADER;
pub use role_switch::RoleSwitch;
pub use routes::ROUTES;
pub use state::{AppContext, AppState, Stop};

/// The `OpenAPI` document of this API, as `GET /openapi.json` serves it.
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
        .merge(policy::router())
        .merge(provenance::router())
        .merge(selector::router())
        .merge(detectors::router())
        .merge(alertmanager::router())
        .merge(update::router())
        .merge(allowlist::router())
        .merge(taskmanagers::router())
        .merge(enforcement::router())
        .merge(ops::router())
        .merge(console::router())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed);
    // Without a token there is nothing to check: no layer, rather than one that passes
    // every request through (it would cost every request a boxed future).
    if let Some(auth) = &state.auth {
        app = app.layer(middleware::from_fn_with_state(
            auth.clone(),
            auth::require_token,
        ));
    }
    // Outside the token check: a browser's preflight carries no token, and is answered
    // here. Only with --cors-origin: without it no CORS header is ever sent.
    if let Some(cors) = cors::layer(&state.cors_origins) {
        app = app.layer(cors);
    }
    // Outside the rest: a request the writer serves goes there whole, and the writer
    // checks the caller's token.
    if let Some(forwarder) = &state.forwarder {
        let route = forward::Route {
            forwarder: forwarder.clone(),
            store: state.store.clone(),
        };
        app = app.layer(middleware::from_fn_with_state(
            route,
            forward::forward_unless_served_here,
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
/// to `grace` for the requests in flight. With `tls`, each connection's handshake comes
/// first, and each request on it carries the client's verified certificate
/// ([`crate::tls::Peer`]) as an extension.
///
/// A hand-written accept loop rather than `axum::serve`, for what that does not offer: a
/// deadline for request headers (slow-header clients), a cap on open connections, and TLS.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    stop: Stop,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
    tls: Option<Arc<ServerTls>>,
) -> std::io::Result<()> {
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    tokio::pin!(shutdown);
    loop {
        let (stream, addr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
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
        let (app, http, tls, watcher) =
            (app.clone(), http.clone(), tls.clone(), graceful.watcher());
        tokio::spawn(async move {
            // Errors here are the client's (reset, timeout): nothing to do but close.
            match tls {
                None => {
                    let service = TowerToHyperService::new(app);
                    let _ = watcher
                        .watch(http.serve_connection(TokioIo::new(stream), service))
                        .await;
                }
                Some(tls) => {
                    if let Some(accepted) = tls.accept(stream, addr, limits.header_timeout).await {
                        let peer = accepted.peer;
                        let app = app.map_request(move |mut request: Request<Incoming>| {
                            if let Some(peer) = &peer {
                                request.extensions_mut().insert(peer.clone());
                            }
                            request
                        });
                        let service = TowerToHyperService::new(app);
                        let io = TokioIo::new(accepted.stream);
                        let _ = watcher.watch(http.serve_connection(io, service)).await;
                    }
                }
            }
            drop(permit);
        });
    }
    drop(listener);
    stop.0.send_replace(true);
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
