//! Requests this daemon cannot serve, sent on to the writer of its etcd prefix.
//!
//! Several daemons on one prefix are one blocklist, and only the writer (the holder of the
//! writer key, [`crate::store::Election`]) runs the committer. Another daemon — a standby
//! waiting for the writer's lease, or a writer whose lease ended — sends each request on
//! to the writer at the URL it announced in the key (`--advertise-url`) and returns the
//! writer's answer unchanged: status, headers (`ETag`, `Retry-After`, the revision,
//! `Idempotent-Replayed`) and body, streamed (a watch stream too). The caller's headers go
//! with it, `Authorization` and `Blocklist-Source` among them, so the writer checks the
//! caller's token and records the caller, not the forwarding daemon.
//!
//! Invariants:
//! - A request is forwarded at most once: the forwarded copy carries
//!   [`FORWARDED_HEADER`], and a daemon answers such a request itself (503 when it is not
//!   the writer) instead of sending it on — two daemons that each think the other writes
//!   cannot pass a request back and forth.
//! - A request is sent again only when the connection to the writer could not be opened
//!   (nothing was sent). Once sent, a failure is a 503 that says the request may or may not
//!   have taken effect: the caller's retry with its `Idempotency-Key` applies it once.
//! - While no writer is known (an election), a request waits up to `--forward-wait-ms`,
//!   then answers 503 with `Retry-After`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::{self, HeaderName};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::error::ApiError;
use crate::metrics::{ForwardLabels, Metrics};
use crate::store::{Announcement, Election};

/// Marks a request one daemon sent on to another; its value is the sender's URL.
pub const FORWARDED_HEADER: &str = "blocklist-forwarded-by";

/// How long a writer's URL, once read from etcd, is used without reading it again.
const WRITER_KEPT: Duration = Duration::from_secs(1);

/// Between reads of the writer key while no writer is known.
const WRITER_POLL: Duration = Duration::from_millis(100);

/// The longest wait for the head of the writer's answer: the writer answers a write within
/// its etcd deadline, so a longer silence is a writer that stopped (paused, cut off).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// Sends requests on to the writer.
pub struct Forwarder {
    election: Election,
    /// This daemon's own announced URL: a writer key that names it is no writer to forward
    /// to (its lease ended, and it has not noticed yet or is winning the key back).
    own_url: String,
    wait: Duration,
    max_body_bytes: usize,
    client: Client<HttpConnector, Full<Bytes>>,
    /// The writer's URL as last read, and when.
    writer: Mutex<Option<(String, Instant)>>,
    metrics: Arc<Metrics>,
}

impl Forwarder {
    pub fn new(
        election: Election,
        own_url: String,
        wait: Duration,
        max_body_bytes: usize,
        metrics: Arc<Metrics>,
    ) -> Arc<Forwarder> {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(1)));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Arc::new(Forwarder {
            election,
            own_url,
            wait,
            max_body_bytes,
            client,
            writer: Mutex::new(None),
            metrics,
        })
    }

    /// How long a request waits for a writer (`--forward-wait-ms`).
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// Whether this daemon serves `request` itself: it is the writer, the request was
    /// forwarded to it already, or it asks about this daemon (probes, metrics, the
    /// console's page and the API document).
    fn serves_here(&self, request: &Request) -> bool {
        let path = request.uri().path();
        matches!(path, "/healthz" | "/readyz" | "/metrics" | "/openapi.json")
            || path == "/ui"
            || path.starts_with("/ui/")
            || request.headers().contains_key(FORWARDED_HEADER)
            || self.election.is_writer()
    }

    /// Sends `request` to the writer and returns its answer as it came; or gives it back
    /// when this daemon became the writer while it waited.
    async fn forward(&self, request: Request) -> Result<Response, Request> {
        let started = Instant::now();
        let (response, outcome) = match self.send(request, started).await {
            Ok(Sent::Answered(response)) => (response, "answered"),
            Ok(Sent::Here(request)) => return Err(request),
            Err((error, outcome)) => (error.into_response(), outcome),
        };
        self.metrics
            .forwarded_seconds
            .get_or_create(&ForwardLabels { outcome })
            .observe(started.elapsed().as_secs_f64());
        Ok(response)
    }

    async fn send(
        &self,
        request: Request,
        started: Instant,
    ) -> Result<Sent, (ApiError, &'static str)> {
        let (parts, body) = request.into_parts();
        // Kept whole, so that a request the writer never received can be sent again.
        let body = axum::body::to_bytes(body, self.max_body_bytes)
            .await
            .map_err(|e| {
                let error = ApiError::PayloadTooLarge(format!(
                    "the body could not be read whole within --max-body-bytes ({}): {e}",
                    self.max_body_bytes
                ));
                (error, "failed")
            })?;
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let deadline = started + self.wait;
        loop {
            let url = match self.writer_url(deadline).await {
                Ok(Some(url)) => url,
                Ok(None) => return Ok(Sent::Here(Request::from_parts(parts, Body::from(body)))),
                Err(message) => return Err((ApiError::NoWriter(message), "no_writer")),
            };
            let mut outgoing = hyper::Request::new(Full::new(body.clone()));
            *outgoing.method_mut() = parts.method.clone();
            *outgoing.uri_mut() = format!("{url}{path}").parse().map_err(|e| {
                let error = ApiError::NoWriter(format!("the writer's URL {url}: {e}"));
                (error, "no_writer")
            })?;
            let headers = outgoing.headers_mut();
            headers.clone_from(&parts.headers);
            strip_hop_by_hop(headers);
            headers.remove(header::HOST);
            if let Ok(own) = HeaderValue::from_str(&self.own_url) {
                headers.insert(FORWARDED_HEADER, own);
            }
            match tokio::time::timeout(ANSWER_TIMEOUT, self.client.request(outgoing)).await {
                Ok(Ok(answer)) => {
                    if answer.status() == axum::http::StatusCode::SERVICE_UNAVAILABLE {
                        // Perhaps no longer the writer: read the key again next time.
                        self.forget(&url);
                    }
                    let mut response = answer.map(Body::new);
                    strip_hop_by_hop(response.headers_mut());
                    return Ok(Sent::Answered(response));
                }
                Ok(Err(e)) if e.is_connect() => {
                    // Nothing was sent: try the writer the key names now, until the deadline.
                    self.forget(&url);
                    if Instant::now() >= deadline {
                        let message = format!(
                            "the writer of the etcd prefix, at {url}, cannot be reached ({e}); \
                             nothing was sent to it; waited {:?} (--forward-wait-ms): retry",
                            self.wait
                        );
                        return Err((ApiError::NoWriter(message), "no_writer"));
                    }
                    tokio::time::sleep(WRITER_POLL).await;
                }
                Ok(Err(e)) => return Err(lost(&url, &e.to_string())),
                Err(_) => return Err(lost(&url, &format!("no answer within {ANSWER_TIMEOUT:?}"))),
            }
        }
    }

    /// The writer's URL: as read within [`WRITER_KEPT`], or read from etcd, waiting while
    /// no daemon that serves requests holds the key, until `deadline`. `None`: this daemon
    /// is the writer now. Err: why there is none to send to.
    async fn writer_url(&self, deadline: Instant) -> Result<Option<String>, String> {
        if let Some((url, read)) = self.writer.lock().expect("not poisoned").clone() {
            if read.elapsed() < WRITER_KEPT {
                return Ok(Some(url));
            }
        }
        loop {
            if self.election.is_writer() {
                return Ok(None);
            }
            let election = self.election.clone();
            let read = tokio::task::spawn_blocking(move || election.writer())
                .await
                .map_err(|e| e.to_string())
                .and_then(|read| read.map_err(|e| e.to_string()));
            let why = match read {
                Ok(Some(value)) => match Announcement::from_value(&value) {
                    Announcement { url: Some(url), .. } if url != self.own_url => {
                        *self.writer.lock().expect("not poisoned") =
                            Some((url.clone(), Instant::now()));
                        return Ok(Some(url));
                    }
                    // Won, and the store not loaded yet; or this daemon's lease ended and
                    // the key not yet gone with it.
                    Announcement { url: Some(_), .. } => {
                        "the writer key names this daemon, which is not serving as the writer"
                            .to_owned()
                    }
                    Announcement { name, url: None } => {
                        format!("the etcd prefix is held by {name}, which serves no requests")
                    }
                },
                Ok(None) => "no daemon is the writer of the etcd prefix (an election is in \
                             progress)"
                    .to_owned(),
                Err(e) => format!("the writer of the etcd prefix could not be read: {e}"),
            };
            if Instant::now() + WRITER_POLL > deadline {
                return Err(format!(
                    "{why}; waited {:?} (--forward-wait-ms): retry",
                    self.wait
                ));
            }
            tokio::time::sleep(WRITER_POLL).await;
        }
    }

    /// Reads the writer key again at the next request, unless another request has already
    /// read a newer URL.
    fn forget(&self, url: &str) {
        let mut writer = self.writer.lock().expect("not poisoned");
        if writer.as_ref().is_some_and(|(kept, _)| kept == url) {
            *writer = None;
        }
    }
}

/// What became of a request [`Forwarder::send`] took.
enum Sent {
    /// The writer's answer.
    Answered(Response),
    /// This daemon became the writer while the request waited: it is served here.
    Here(Request),
}

/// A request sent to the writer that got no answer: it may or may not have taken effect.
fn lost(url: &str, why: &str) -> (ApiError, &'static str) {
    let message = format!(
        "the writer of the etcd prefix, at {url}, did not answer ({why}); the request may or \
         may not have taken effect: retry it with the same Idempotency-Key, or re-read first"
    );
    (ApiError::NoWriter(message), "failed")
}

/// Headers of one connection (RFC 9110, 7.6.1), never passed on.
fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

/// Drops the headers of one connection: each side frames its own.
fn strip_hop_by_hop(headers: &mut axum::http::HeaderMap) {
    let names: Vec<HeaderName> = headers
        .keys()
        .filter(|n| is_hop_by_hop(n))
        .cloned()
        .collect();
    for name in names {
        headers.remove(name);
    }
}

/// The layer: a request this daemon does not serve goes to the writer.
pub async fn forward_unless_served_here(
    State(forwarder): State<Arc<Forwarder>>,
    request: Request,
    next: Next,
) -> Response {
    if forwarder.serves_here(&request) {
        return next.run(request).await;
    }
    match forwarder.forward(request).await {
        Ok(answer) => answer,
        Err(request) => next.run(request).await,
    }
}
