//! The per-request measurements: every request timed by route and status, refusals
//! counted, one log line at debug (never headers: they may hold a token).
//!
//! A tower layer of its own rather than `axum::middleware::from_fn`: that boxes a future
//! and clones the inner service into a box on every request, and a check costs only a few
//! microseconds more than an empty handler, so the layer around it must cost nothing it
//! does not need. For the same reason the histogram of a (route, method, status) is looked
//! up in the metric family once and then kept in a table: the family's lookup takes a
//! lock and hashes the labels.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::response::Response;
use pin_project_lite::pin_project;
use prometheus_client::metrics::histogram::Histogram;
use tower_layer::Layer;
use tower_service::Service;

use crate::metrics::{Metrics, RejectLabels, RequestLabels};

/// The metric labels of the methods we serve by name; the rest are `other`.
const METHODS: [&str; 8] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "other",
];

/// The statuses whose histograms are kept in the table; others go to the family each time.
const KEPT_STATUSES: [u16; 16] = [
    200, 201, 202, 204, 304, 400, 401, 404, 405, 408, 409, 413, 415, 422, 500, 503,
];

/// The route label of a request no route matched. The others are the templates of
/// [`super::routes::ROUTES`], never raw paths: ids must not explode the label space.
const UNMATCHED: &str = "unmatched";

/// The index of a method's label in [`METHODS`].
fn method_index(method: &Method) -> usize {
    match *method {
        Method::GET => 0,
        Method::HEAD => 1,
        Method::POST => 2,
        Method::PUT => 3,
        Method::DELETE => 4,
        Method::OPTIONS => 5,
        Method::PATCH => 6,
        _ => 7,
    }
}

/// The route labels: every template of [`super::routes::ROUTES`] once, then [`UNMATCHED`].
fn route_labels() -> Vec<&'static str> {
    let mut labels: Vec<&'static str> = Vec::new();
    for (_, path) in super::routes::ROUTES {
        if !labels.contains(path) {
            labels.push(path);
        }
    }
    labels.push(UNMATCHED);
    labels
}

/// Layer that times every request; see the module doc.
#[derive(Clone)]
pub(super) struct ObserveLayer {
    shared: Arc<RouteTimings>,
}

/// The layer's state, shared by every request it times: each route's histograms.
struct RouteTimings {
    metrics: Arc<Metrics>,
    routes: Vec<&'static str>,
    /// The histogram of (route, method, kept status), indexed by [`RouteTimings::slot`]; filled on
    /// first use.
    histograms: Vec<OnceLock<Histogram>>,
}

impl ObserveLayer {
    pub(super) fn new(metrics: Arc<Metrics>) -> ObserveLayer {
        let routes = route_labels();
        let slots = routes.len() * METHODS.len() * KEPT_STATUSES.len();
        ObserveLayer {
            shared: Arc::new(RouteTimings {
                metrics,
                routes,
                histograms: (0..slots).map(|_| OnceLock::new()).collect(),
            }),
        }
    }
}

impl RouteTimings {
    /// The index of a matched route template in `routes` (the last one: unmatched).
    fn route_index(&self, matched: Option<&MatchedPath>) -> usize {
        let unmatched = self.routes.len() - 1;
        matched.map_or(unmatched, |m| {
            self.routes
                .iter()
                .position(|route| *route == m.as_str())
                .unwrap_or(unmatched)
        })
    }

    fn slot(route: usize, method: usize, status: u16) -> Option<usize> {
        let status = KEPT_STATUSES.iter().position(|s| *s == status)?;
        Some((route * METHODS.len() + method) * KEPT_STATUSES.len() + status)
    }

    fn record(&self, route: usize, method: usize, status: u16, started: Instant) {
        let elapsed = started.elapsed();
        let labels = RequestLabels {
            method: METHODS[method],
            route: self.routes[route],
            status,
        };
        tracing::debug!(
            method = %labels.method,
            route = %labels.route,
            status,
            ?elapsed,
            "request"
        );
        if status >= 400 {
            self.metrics
                .rejected
                .get_or_create(&RejectLabels { status })
                .inc();
        }
        let seconds = elapsed.as_secs_f64();
        match Self::slot(route, method, status) {
            Some(slot) => self.histograms[slot]
                .get_or_init(|| self.metrics.request_seconds.get_or_create_owned(&labels))
                .observe(seconds),
            None => self
                .metrics
                .request_seconds
                .get_or_create(&labels)
                .observe(seconds),
        }
    }
}

impl<S> Layer<S> for ObserveLayer {
    type Service = Observe<S>;

    fn layer(&self, inner: S) -> Observe<S> {
        Observe {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service of [`ObserveLayer`].
#[derive(Clone)]
pub(super) struct Observe<S> {
    inner: S,
    shared: Arc<RouteTimings>,
}

impl<S> Service<Request> for Observe<S>
where
    S: Service<Request, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = ObserveFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let started = Instant::now();
        let method = method_index(request.method());
        let route = self
            .shared
            .route_index(request.extensions().get::<MatchedPath>());
        ObserveFuture {
            inner: self.inner.call(request),
            shared: self.shared.clone(),
            started,
            method,
            route,
        }
    }
}

pin_project! {
    /// The response future of [`Observe`]: records the request when the response is ready.
    pub(super) struct ObserveFuture<F> {
        #[pin]
        inner: F,
        shared: Arc<RouteTimings>,
        started: Instant,
        method: usize,
        route: usize,
    }
}

impl<F, E> Future for ObserveFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = std::task::ready!(this.inner.poll(cx));
        if let Ok(response) = &result {
            this.shared.record(
                *this.route,
                *this.method,
                response.status().as_u16(),
                *this.started,
            );
        }
        Poll::Ready(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kept_slot_is_distinct() {
        let layer = ObserveLayer::new(Arc::new(Metrics::new()));
        let shared = &layer.shared;
        let mut seen = std::collections::HashSet::new();
        for route in 0..shared.routes.len() {
            for method in 0..METHODS.len() {
                for status in KEPT_STATUSES {
                    let slot = RouteTimings::slot(route, method, status).expect("kept");
                    assert!(slot < shared.histograms.len());
                    assert!(seen.insert(slot), "slot {slot} taken twice");
                }
            }
        }
        assert_eq!(RouteTimings::slot(0, 0, 418), None);
    }

    #[test]
    fn routes_are_labelled_by_template() {
        let layer = ObserveLayer::new(Arc::new(Metrics::new()));
        let shared = &layer.shared;
        assert_eq!(shared.routes[shared.route_index(None)], UNMATCHED);
        assert_eq!(*shared.routes.last().unwrap(), UNMATCHED);
        let unique: std::collections::HashSet<_> = shared.routes.iter().collect();
        assert_eq!(unique.len(), shared.routes.len(), "each template once");
    }
}
