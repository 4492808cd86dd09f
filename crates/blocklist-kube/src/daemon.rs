//! The daemon's side: the blocked nodes (`GET /blocklist/nodes`), the change feed
//! (`GET /blocklist/events`), and the membership (`/taskmanagers`).
//!
//! Any daemon of a prefix answers (replicas serve reads and send writes on to the writer,
//! and the feed resumes anywhere by its event ids), so the bridge is given them all and
//! moves to the next one whenever the one it uses fails: a writer killed, a replica gone.

use std::sync::atomic::{AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};

use crate::marking::Block;

/// The daemons' URLs and the token to present.
pub struct Daemon {
    pub urls: Vec<String>,
    /// The URL requests go to now.
    pub current: AtomicUsize,
    pub token: Option<String>,
    pub http: reqwest::Client,
    /// For the feed: no overall timeout (the stream stays open).
    pub stream: reqwest::Client,
}

/// Why the feed could not be followed from a revision.
#[derive(Debug)]
pub enum FeedError {
    /// 410: the revision is older than the daemon keeps: list again.
    Gone,
    Other(String),
}

impl Daemon {
    /// `path` at the daemon requests go to now.
    fn url(&self, path: &str) -> String {
        let i = self.current.load(Ordering::SeqCst) % self.urls.len().max(1);
        let base = self.urls.get(i).map_or("", String::as_str);
        format!("{}{path}", base.trim_end_matches('/'))
    }

    /// The daemon at `url` failed: later requests go to the next one.
    fn failed(&self, url: &str) {
        if self.urls.len() > 1 {
            let next = self.current.fetch_add(1, Ordering::SeqCst) + 1;
            let next = &self.urls[next % self.urls.len()];
            tracing::warn!(failed = %url, next = %next, "a daemon failed; moving to the next");
        }
    }

    /// A request's failure, after moving on from its daemon when another may answer.
    fn failure(&self, url: &str, why: impl std::fmt::Display) -> String {
        self.failed(url);
        format!("{url}: {why}")
    }

    /// Every node item blocking now, and the revision the listing reflects at least
    /// (`X-Blocklist-Revision`: the feed from it converges on the daemon's state).
    pub async fn blocked_nodes(&self) -> Result<(Vec<Block>, u64), String> {
        let url = self.url("/blocklist/nodes");
        let mut request = self.http.get(&url);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.map_err(|e| self.failure(&url, e))?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            return Err(self.failure(&url, format!("{status}: {body}")));
        }
        let revision = response
            .headers()
            .get("x-blocklist-revision")
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
            .ok_or_else(|| format!("{url}: no X-Blocklist-Revision"))?;
        let blocks = response
            .json::<Vec<Block>>()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        Ok((blocks, revision))
    }

    /// The change feed from after `revision` (`Last-Event-ID`), open.
    pub async fn feed(&self, revision: u64) -> Result<reqwest::Response, FeedError> {
        let url = self.url("/blocklist/events");
        let mut request = self
            .stream
            .get(&url)
            .header("Last-Event-ID", revision.to_string());
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .map_err(|e| FeedError::Other(self.failure(&url, e)))?;
        match response.status() {
            reqwest::StatusCode::OK => Ok(response),
            reqwest::StatusCode::GONE => Err(FeedError::Gone),
            status => Err(FeedError::Other(self.failure(&url, status))),
        }
    }

    /// The feed broke after it was opened on the current daemon: the next attempt goes
    /// to another.
    pub fn feed_broke(&self) {
        let url = self.url("/blocklist/events");
        self.failed(&url);
    }
}

/// A task manager's registration: which node it runs on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    pub id: String,
    pub node: String,
}

/// The most registrations one `PUT /taskmanagers` carries (the daemon's `--max-batch`
/// default is larger).
const REGISTRATIONS_PER_BATCH: usize = 1_000;

impl Daemon {
    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, self.url(path));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Every registration the daemon holds.
    pub async fn registrations(&self) -> Result<Vec<Registration>, String> {
        let response = self
            .request(reqwest::Method::GET, "/taskmanagers")
            .send()
            .await
            .map_err(|e| self.failure("GET /taskmanagers", e))?;
        if !response.status().is_success() {
            return Err(self.failure("GET /taskmanagers", response.status()));
        }
        response
            .json()
            .await
            .map_err(|e| format!("GET /taskmanagers: {e}"))
    }

    /// Registers `all` (new ones, and moves), in batches.
    pub async fn register(&self, all: &[Registration]) -> Result<(), String> {
        for batch in all.chunks(REGISTRATIONS_PER_BATCH) {
            let response = self
                .request(reqwest::Method::PUT, "/taskmanagers")
                .json(batch)
                .send()
                .await
                .map_err(|e| self.failure("PUT /taskmanagers", e))?;
            if !response.status().is_success() {
                let status = response.status();
                let body = response.text().await.unwrap_or_default();
                return Err(self.failure("PUT /taskmanagers", format!("{status}: {body}")));
            }
        }
        Ok(())
    }

    /// Unregisters task manager `id` (one not registered is no error).
    pub async fn unregister(&self, id: &str) -> Result<(), String> {
        let path = format!("/taskmanagers/{}", encode(id));
        let response = self
            .request(reqwest::Method::DELETE, &path)
            .send()
            .await
            .map_err(|e| self.failure(&path, e))?;
        match response.status() {
            s if s.is_success() || s == reqwest::StatusCode::NOT_FOUND => Ok(()),
            s => Err(self.failure(&path, s)),
        }
    }
}

/// An id as one path segment.
fn encode(id: &str) -> String {
    id.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
