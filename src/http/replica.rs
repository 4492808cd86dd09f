//! What a replica serves (a daemon on an etcd prefix another daemon writes): the full
//! application over its followed store ([`crate::store::Store::follow`]), which serves
//! reads itself and sends the rest on to the writer ([`super::forward`]). Once it has won
//! the writer key and loaded the blocklist as the writer, the writer's application takes
//! over on the same listener, connections already open included.

use std::convert::Infallible;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::Router;
use tower_service::Service;

use super::error::ApiError;

/// The replica's application: `replica` until `taken_over` holds the writer's, that from
/// then on. `replica` is taken out (and dropped with the last request that holds it) at the
/// takeover.
pub fn replica_router(
    replica: Arc<Mutex<Option<Router>>>,
    taken_over: Arc<OnceLock<Router>>,
) -> Router {
    Router::new().fallback(move |request: Request| {
        let app = match taken_over.get() {
            Some(app) => Some(app.clone()),
            None => replica.lock().expect("not poisoned").clone(),
        };
        async move {
            match app {
                Some(app) => call(app, request).await,
                // Between the takeover's two steps: the writer's application is set first.
                None => unreachable_replica(),
            }
        }
    })
}

/// The replica's application is gone only once the writer's is set; answered as a 503
/// all the same rather than trusted.
fn unreachable_replica() -> Response {
    ApiError::Unavailable("this daemon is changing roles; retry in a moment".into()).into_response()
}

async fn call(mut app: Router, request: Request) -> Response {
    let answered: Result<Response, Infallible> = app.call(request).await;
    answered.unwrap_or_else(|never| match never {})
}

/// A write this daemon must serve itself: one that waited for the writer until this
/// daemon became it. Served by the writer's application once the blocklist is loaded,
/// waiting up to `wait` for that; 503 after.
pub(super) async fn served_once_taken_over(
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
            return ApiError::Unavailable(
                "this daemon has just become the writer of the etcd prefix and is loading the \
                 blocklist from etcd; retry in a moment"
                    .into(),
            )
            .into_response();
        }
        tokio::time::sleep(TAKEOVER_POLL).await;
    }
}

/// How often a request waiting for this daemon's takeover looks whether it is done.
const TAKEOVER_POLL: Duration = Duration::from_millis(20);
