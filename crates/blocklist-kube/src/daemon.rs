//! The daemon's side: the blocked nodes (`GET /blocklist/nodes`), the change feed
//! (`GET /blocklist/events`), and the membership (`/taskmanagers`).

use serde::{Deserialize, Serialize};

use crate::marking::Block;

/// The daemon's URL and the token to present.
pub struct Daemon {
    pub url: String,
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
    /// Every node item blocking now, and the revision the listing reflects at least
    /// (`X-Blocklist-Revision`: the feed from it converges on the daemon's state).
    pub async fn blocked_nodes(&self) -> Result<(Vec<Block>, u64), String> {
        let url = format!("{}/blocklist/nodes", self.url.trim_end_matches('/'));
        let mut request = self.http.get(&url);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.map_err(|e| format!("{url}: {e}"))?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            return Err(format!("{url}: {status}: {body}"));
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
        let url = format!("{}/blocklist/events", self.url.trim_end_matches('/'));
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
            .map_err(|e| FeedError::Other(format!("{url}: {e}")))?;
        match response.status() {
            reqwest::StatusCode::OK => Ok(response),
            reqwest::StatusCode::GONE => Err(FeedError::Gone),
            status => Err(FeedError::Other(format!("{url}: {status}"))),
        }
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
        let url = format!("{}{path}", self.url.trim_end_matches('/'));
        let request = self.http.request(method, url);
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
            .map_err(|e| format!("GET /taskmanagers: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("GET /taskmanagers: {}", response.status()));
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
                .map_err(|e| format!("PUT /taskmanagers: {e}"))?;
            if !response.status().is_success() {
                let status = response.status();
                let body = response.text().await.unwrap_or_default();
                return Err(format!("PUT /taskmanagers: {status}: {body}"));
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
            .map_err(|e| format!("DELETE {path}: {e}"))?;
        match response.status() {
            s if s.is_success() || s == reqwest::StatusCode::NOT_FOUND => Ok(()),
            s => Err(format!("DELETE {path}: {s}")),
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
