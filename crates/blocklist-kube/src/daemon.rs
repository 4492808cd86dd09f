//! The daemon's side: the blocked nodes, as `GET /blocklist/nodes` lists them.

use crate::marking::Block;

/// The daemon's URL and the token to present.
pub struct Daemon {
    pub url: String,
    pub token: Option<String>,
    pub http: reqwest::Client,
}

impl Daemon {
    /// Every node item blocking now.
    pub async fn blocked_nodes(&self) -> Result<Vec<Block>, String> {
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
        response
            .json::<Vec<Block>>()
            .await
            .map_err(|e| format!("{url}: {e}"))
    }
}
