//! What a daemon serves while it waits to become the writer of its etcd prefix (a
//! standby): its own probes and metrics, and every other request sent on to the writer
//! ([`super::forward`]). Once it has won the writer key and loaded the blocklist, the full
//! application ([`super::router`]) takes over on the same listener, connections already
//! open included.

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::header::{CONTENT_TYPE, VARY};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{middleware, Json, Router};
use tower_service::Service;

use super::error::ApiError;
use super::forward::{forward_unless_served_here, Forwarder};
use super::ops::{healthz, negotiate};
use crate::metrics::{Metrics, StoreGauges};

/// The standby's application: until `taken_over` holds the full application, probes and
/// metrics answered here and the rest forwarded; from then on, the full application.
pub fn standby_router(
    forwarder: Arc<Forwarder>,
    taken_over: Arc<OnceLock<Router>>,
    metrics: Arc<Metrics>,
) -> Router {
    let wait = forwarder.wait();
    let full = taken_over.clone();
    let waiting = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(render_metrics))
        .with_state(metrics)
        .fallback(move |request: Request| {
            let full = full.clone();
            async move { served_once_taken_over(&full, wait, request).await }
        })
        .layer(middleware::from_fn_with_state(
            forwarder,
            forward_unless_served_here,
        ));
    Router::new().fallback(move |request: Request| {
        let app = taken_over.get().unwrap_or(&waiting).clone();
        call(app, request)
    })
}

async fn call(mut app: Router, request: Request) -> Response {
    let answered: Result<Response, Infallible> = app.call(request).await;
    answered.unwrap_or_else(|never| match never {})
}

/// A request this daemon must serve itself: one forwarded here by another daemon, or one
/// that waited for the writer until this daemon became it. Served by the full application
/// once the blocklist is loaded, waiting up to `wait` for that; 503 after.
async fn served_once_taken_over(
    full: &OnceLock<Router>,
    wait: Duration,
    request: Request,
) -> Response {
    let until = Instant::now() + wait;
    loop {
        if let Some(app) = full.get() {
            return call(app.clone(), request).await;
        }
        if Instant::now() >= until {
            return ApiError::NoWriter(
                "this daemon is not serving requests yet: it is a standby of the etcd prefix, \
                 or it has just become the writer and is loading the blocklist from etcd; \
                 retry in a moment"
                    .into(),
            )
            .into_response();
        }
        tokio::time::sleep(TAKEOVER_POLL).await;
    }
}

/// How often a request waiting for this daemon's takeover looks whether it is done.
const TAKEOVER_POLL: Duration = Duration::from_millis(20);

/// Not ready: another daemon writes the prefix (or this one is loading it, having just won
/// the writer key). The body has `/readyz`'s fields ([`super::ops::readyz`]).
async fn readyz() -> Response {
    let body = serde_json::json!({
        "status": "not ready",
        "store": "standby",
        "committer": "stopped",
        "sweeper": "stopped",
        "revision": 0,
        "etcd": "not the writer",
    });
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

/// This process's own metrics; the store's gauges are the writer's to report.
async fn render_metrics(State(metrics): State<Arc<Metrics>>, headers: HeaderMap) -> Response {
    let format = negotiate(&headers);
    let gauges = StoreGauges {
        etcd_writer: Some(false),
        ..StoreGauges::default()
    };
    let text = metrics.render(&gauges, format);
    (
        [(CONTENT_TYPE, format.content_type()), (VARY, "accept")],
        text,
    )
        .into_response()
}
