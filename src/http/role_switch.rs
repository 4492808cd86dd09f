//! The role switch: what a daemon on an etcd prefix serves, role by role: as a replica (another daemon
//! writes), the full application over its followed store
//! ([`crate::store::Store::open_replica`]), which serves reads itself and sends the rest on to
//! the writer ([`super::forward`]); as the writer, the writer's application. Each takes
//! over from the other on the same listener, connections already open included
//! ([`RoleSwitch`]).

use std::convert::Infallible;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio::sync::watch;
use tower_service::Service;

use super::error::ApiError;

/// The application a daemon on an etcd prefix serves now, swapped as its role changes.
/// Requests in flight finish on the application they started on.
#[derive(Clone)]
pub struct RoleSwitch {
    /// What a new request goes to; `None` only before the first role is set.
    current: Arc<RwLock<Option<Router>>>,
    /// The writer's application while this daemon is the writer: where a write that waited
    /// for a writer and found this daemon became it goes.
    writer: watch::Sender<Option<Router>>,
}

impl Default for RoleSwitch {
    fn default() -> RoleSwitch {
        RoleSwitch {
            current: Arc::default(),
            writer: watch::Sender::new(None),
        }
    }
}

impl RoleSwitch {
    /// Serves `app`, a replica's, from now on.
    pub fn serve_replica(&self, app: Router) {
        self.writer.send_replace(None);
        *self.current.write().expect("not poisoned") = Some(app);
    }

    /// Serves `app`, the writer's, from now on.
    pub fn serve_writer(&self, app: Router) {
        self.writer.send_replace(Some(app.clone()));
        *self.current.write().expect("not poisoned") = Some(app);
    }

    /// The router the listener serves: each request to the current role's application.
    pub fn router(&self) -> Router {
        let current = self.current.clone();
        Router::new().fallback(move |request: Request| {
            let app = current.read().expect("not poisoned").clone();
            async move {
                match app {
                    Some(app) => call(app, request).await,
                    None => {
                        ApiError::Unavailable("this daemon is starting; retry in a moment".into())
                            .into_response()
                    }
                }
            }
        })
    }

    /// Serves a write this daemon must serve itself — one that waited for the writer until
    /// this daemon became it — with the writer's application once the blocklist is loaded,
    /// waiting up to `wait` for that; 503 after.
    pub(super) async fn served_as_writer(&self, wait: Duration, request: Request) -> Response {
        let mut writer = self.writer.subscribe();
        // The watch's borrow is not held past this statement (it is not `Send`).
        let app = match tokio::time::timeout(wait, writer.wait_for(Option::is_some)).await {
            Ok(Ok(app)) => app.clone(),
            _ => None,
        };
        match app {
            Some(app) => call(app, request).await,
            None => ApiError::Unavailable(
                "this daemon has just become the writer of the etcd prefix and is loading the \
                 blocklist from etcd; retry in a moment"
                    .into(),
            )
            .into_response(),
        }
    }
}

async fn call(mut app: Router, request: Request) -> Response {
    let answered: Result<Response, Infallible> = app.call(request).await;
    answered.unwrap_or_else(|never| match never {})
}
