//! Requests this daemon cannot serve, sent on to the writer of its etcd prefix.
//!
//! Several daemons on one prefix are one blocklist, and only the writer (the holder of the
//! writer key, [`crate::store::Election`]) runs the committer. A replica (a daemon that
//! follows the prefix, [`crate::store::Store::open_replica`]) serves reads — `GET`, `HEAD` and
//! the batch check — itself, once its store has caught up with every write acknowledged
//! before the request
//! ([`crate::store::Store::catch_up`]; 503 when it cannot). Every other request, and every
//! request on a writer whose lease ended (its mirror is no longer kept current), goes —
//! but its own probes and metrics — to the writer at the URL it announced in the key
//! (`--advertise-url`) and returns the writer's answer unchanged: status, headers (`ETag`,
//! `Retry-After`, the revision, `Idempotent-Replayed`) and body, streamed (a watch stream
//! too). The caller's headers go with it, `Authorization` and `Blocklist-Source` among
//! them, so the writer checks the caller's token and records the caller, not the
//! forwarding daemon.
//!
//! Invariants:
//! - A request is forwarded at most once: the forwarded copy carries [`FORWARDED_HEADER`],
//!   and a daemon that is not the writer answers such a request 503 at once instead of
//!   sending it on or serving it from a state that may be stale — two daemons that each
//!   think the other writes cannot pass a request back and forth.
//! - A request is sent again only when the connection to the writer could not be opened
//!   (nothing was sent). Once sent, a failure is a 503 that says the request may or may not
//!   have taken effect: the caller's retry with its `Idempotency-Key` applies it once.
//! - While no writer is known (an election), a request waits up to `--forward-wait-ms`,
//!   then answers 503 with `Retry-After`. However many requests wait, one read of the
//!   writer key at a time is in flight.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::{self, HeaderName};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::Full;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::error::ApiError;
use super::limits::{read_body, Limits};
use super::role_switch::RoleSwitch;
use crate::metrics::{ForwardLabels, Metrics};
use crate::store::{Announcement, Election, Store};
use crate::tls::{Peer, FORWARDED_NAMES_HEADER};

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
    limits: Limits,
    /// `https` to a writer that advertises it (verified with `--tls-peer-ca`), else `http`.
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    /// The writer key as last read.
    known: Mutex<Option<Known>>,
    /// Held by the one request reading the writer key; the others wait for its result.
    reading: tokio::sync::Mutex<()>,
    metrics: Arc<Metrics>,
    /// What this daemon serves in each role (set by the daemon's roles): a request that found
    /// this replica became the writer goes to the writer's application.
    pub switch: RoleSwitch,
}

/// The writer key as read at `read`: the URL to send to, or why there is none.
#[derive(Clone)]
struct Known {
    read: Instant,
    writer: Result<String, String>,
}

impl Known {
    /// Whether it may still be used: a URL for [`WRITER_KEPT`], the lack of one only until
    /// the next poll.
    fn fresh(&self) -> bool {
        let kept = if self.writer.is_ok() {
            WRITER_KEPT
        } else {
            WRITER_POLL
        };
        self.read.elapsed() < kept
    }
}

impl Forwarder {
    /// `limits`: this daemon's, for reading bodies; its header timeout is also the idle
    /// time after which the writer (run with the same flags) closes a kept connection, so
    /// connections are kept for less. `tls`: for a writer that advertises `https`
    /// ([`crate::tls::forwarding_config`]); without it only `http` writers are reached.
    pub fn new(
        election: Election,
        own_url: String,
        wait: Duration,
        limits: Limits,
        tls: Option<rustls::ClientConfig>,
        metrics: Arc<Metrics>,
    ) -> Arc<Forwarder> {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(1)));
        // `https_or_http` needs HttpConnector to pass https URLs on.
        connector.enforce_http(false);
        // No trust roots without --tls-peer-ca: an https writer is refused, and says why.
        let tls = tls.unwrap_or_else(|| {
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .expect("ring supports the default versions")
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth()
        });
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(limits.header_timeout / 2)
            .build(connector);
        Arc::new(Forwarder {
            election,
            own_url,
            wait,
            limits,
            client,
            known: Mutex::new(None),
            reading: tokio::sync::Mutex::new(()),
            metrics,
            switch: RoleSwitch::default(),
        })
    }

    /// How long a request waits for a writer (`--forward-wait-ms`).
    pub fn wait(&self) -> Duration {
        self.wait
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
        let body = read_body(body, self.limits.max_body_bytes, self.limits.body_timeout)
            .await
            .map_err(|error| (error, "failed"))?;
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let deadline = started + self.wait;
        loop {
            let url = match self.writer_url(deadline).await {
                Ok(Some(url)) => url,
                Ok(None) => return Ok(Sent::Here(Request::from_parts(parts, Body::from(body)))),
                Err(message) => return Err((ApiError::Unavailable(message), "no_writer")),
            };
            let mut outgoing = hyper::Request::new(Full::new(body.clone()));
            *outgoing.method_mut() = parts.method.clone();
            *outgoing.uri_mut() = format!("{url}{path}").parse().map_err(|e| {
                let error = ApiError::Unavailable(format!("the writer's URL {url}: {e}"));
                (error, "no_writer")
            })?;
            let headers = outgoing.headers_mut();
            headers.clone_from(&parts.headers);
            strip_hop_by_hop(headers);
            // hyper writes the writer's own; `Expect` is this connection's business.
            headers.remove(header::HOST);
            headers.remove(header::EXPECT);
            if let Ok(own) = HeaderValue::from_str(&self.own_url) {
                headers.insert(FORWARDED_HEADER, own);
            }
            name_certificate(headers, parts.extensions.get::<Peer>());
            match tokio::time::timeout(ANSWER_TIMEOUT, self.client.request(outgoing)).await {
                Ok(Ok(answer)) => {
                    if answer.status() == StatusCode::SERVICE_UNAVAILABLE {
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
                        return Err((ApiError::Unavailable(message), "no_writer"));
                    }
                    tokio::time::sleep(WRITER_POLL).await;
                }
                Ok(Err(e)) => return Err(lost(&url, &e.to_string())),
                Err(_) => return Err(lost(&url, &format!("no answer within {ANSWER_TIMEOUT:?}"))),
            }
        }
    }

    /// The writer's URL, waiting while no daemon that serves requests holds the key, until
    /// `deadline`. `None`: this daemon is the writer now. Err: why there is none to send to.
    async fn writer_url(&self, deadline: Instant) -> Result<Option<String>, String> {
        loop {
            if self.election.is_writer() {
                return Ok(None);
            }
            let why = match self.known().await.writer {
                Ok(url) => return Ok(Some(url)),
                Err(why) => why,
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

    /// The writer key as last read, read again when it is no longer fresh — by one request
    /// at a time: the others wait for that read and take its result.
    async fn known(&self) -> Known {
        if let Some(known) = self.last_known() {
            return known;
        }
        let _reading = self.reading.lock().await;
        if let Some(known) = self.last_known() {
            return known;
        }
        let election = self.election.clone();
        let read = tokio::task::spawn_blocking(move || election.writer())
            .await
            .map_err(|e| e.to_string())
            .and_then(|read| read.map_err(|e| e.to_string()));
        let writer = match read {
            Ok(Some(value)) => match Announcement::from_value(&value) {
                Announcement { url: Some(url), .. } if url != self.own_url => Ok(url),
                // Won, and the store not loaded yet; or this daemon's lease ended and the
                // key not yet gone with it.
                Announcement { url: Some(_), .. } => Err(
                    "the writer key names this daemon, which is not serving as the writer"
                        .to_owned(),
                ),
                Announcement { name, url: None } => Err(format!(
                    "the etcd prefix is held by {name}, which serves no requests"
                )),
            },
            Ok(None) => Err(
                "no daemon is the writer of the etcd prefix (an election is in progress)"
                    .to_owned(),
            ),
            Err(e) => Err(format!(
                "the writer of the etcd prefix could not be read: {e}"
            )),
        };
        let known = Known {
            read: Instant::now(),
            writer,
        };
        *self.known.lock().expect("not poisoned") = Some(known.clone());
        known
    }

    fn last_known(&self) -> Option<Known> {
        self.known
            .lock()
            .expect("not poisoned")
            .clone()
            .filter(Known::fresh)
    }

    /// Reads the writer key again at the next request, unless another request has already
    /// read a newer URL.
    fn forget(&self, url: &str) {
        let mut known = self.known.lock().expect("not poisoned");
        if known
            .as_ref()
            .is_some_and(|k| k.writer.as_deref() == Ok(url))
        {
            *known = None;
        }
    }
}

/// Names the caller's verified client certificate, if it has one and sends no token (a
/// token wins, as on the writer), for the writer's token file: the writer has only the
/// forwarding daemon's certificate. A client's own header of that name is never passed on.
fn name_certificate(headers: &mut HeaderMap, caller: Option<&Peer>) {
    headers.remove(FORWARDED_NAMES_HEADER);
    if headers.contains_key(header::AUTHORIZATION) {
        return;
    }
    for name in caller.map(|peer| &peer.names[..]).unwrap_or_default() {
        if let Ok(value) = HeaderValue::from_str(name) {
            headers.append(FORWARDED_NAMES_HEADER, value);
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
    (ApiError::Unavailable(message), "failed")
}

/// Headers of one connection (RFC 9110, 7.6.1), never passed on.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Drops the headers of one connection, and those its `Connection` header names: each side
/// frames its own.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::try_from(name.trim()).ok())
        .collect();
    for name in named
        .iter()
        .chain(HOP_BY_HOP.map(HeaderName::from_static).iter())
    {
        headers.remove(name);
    }
}

/// Whether this daemon answers `path` itself whatever its role: its probes and metrics.
fn own_path(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics")
}

/// What the layer needs: where to forward, and the store this daemon would serve from.
#[derive(Clone)]
pub struct Route {
    pub forwarder: Arc<Forwarder>,
    pub store: Store,
}

/// Whether a replica serves `request` itself: a read — every `GET` and `HEAD` (a feed, a
/// listing and the console included), and the batch check, a `POST` that reads.
fn is_read(request: &Request) -> bool {
    matches!(*request.method(), Method::GET | Method::HEAD)
        || (request.method() == Method::POST && request.uri().path() == "/blocklist/check")
}

/// The layer: a request this daemon does not serve goes to the writer.
pub async fn forward_unless_served_here(
    State(route): State<Route>,
    request: Request,
    next: Next,
) -> Response {
    let Route { forwarder, store } = route;
    if own_path(request.uri().path()) {
        return next.run(request).await;
    }
    if store.is_replica() && is_read(&request) {
        // Served here from the followed state, once it shows every write acknowledged
        // before this request (a request forwarded here by another daemon too) — also
        // while this daemon, having just won the writer key, loads the blocklist.
        return match store.catch_up().await {
            Ok(()) => next.run(request).await,
            Err(e) => ApiError::from(e).into_response(),
        };
    }
    if !store.is_replica() && forwarder.election.is_writer() {
        return next.run(request).await;
    }
    if request.headers().contains_key(FORWARDED_HEADER) {
        // Sent here by a daemon that took this one for the writer: not sent on again, and
        // not served from a state another writer may have moved past.
        return ApiError::Unavailable(
            "this daemon is not the writer of the etcd prefix (a request sent on by another \
             daemon is not sent on again): retry"
                .into(),
        )
        .into_response();
    }
    match forwarder.forward(request).await {
        Ok(answer) => answer,
        // A replica's store writes nothing: the request goes to the application this
        // daemon serves as the writer, once it is loaded.
        Err(request) if store.is_replica() => {
            forwarder
                .switch
                .served_as_writer(forwarder.wait, request)
                .await
        }
        Err(request) => next.run(request).await,
    }
}
