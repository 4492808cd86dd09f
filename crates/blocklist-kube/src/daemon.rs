//! The daemon's side: the blocked nodes, as `GET /blocklist/nodes` lists them.

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
