//! The daemon's `/metrics` text and single samples of it.

use reqwest::StatusCode;

use super::{raw_get, Daemon};

impl Daemon {
    /// The daemon's `/metrics` text.
    pub async fn scrape(&self) -> String {
        let resp = self.client.get(self.url("/metrics")).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        resp.text().await.unwrap()
    }

    /// `/metrics` asked for with this `Accept` header (`None`: with no `Accept` at all):
    /// the answer's `Content-Type` and its text.
    pub async fn scrape_accepting(&self, accept: Option<&str>) -> (String, String) {
        let (addr, accept) = (self.addr, accept.map(str::to_owned));
        let (status, headers, body) = tokio::task::spawn_blocking(move || {
            let headers: Vec<_> = accept.iter().map(|a| ("Accept", a.as_str())).collect();
            raw_get(addr, "/metrics", &headers)
        })
        .await
        .unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
        let content_type = headers
            .into_iter()
            .find(|(name, _)| name == "content-type")
            .map(|(_, value)| value)
            .unwrap_or_default();
        (content_type, body)
    }

    /// One sample of `/metrics` (0 when absent).
    pub async fn metric(&self, name_and_labels: &str) -> f64 {
        metric(&self.scrape().await, name_and_labels)
    }

    /// How many items the sweeper has announced expired (its lag histogram counts each one).
    pub async fn swept(&self) -> usize {
        self.metric("blocklist_sweeper_lag_seconds_count").await as usize
    }

    /// How many announced items the sweeper has deleted from storage.
    pub async fn reclaimed(&self) -> usize {
        self.metric("blocklist_reclaimed_entries_total").await as usize
    }
}

/// One sample of a `/metrics` text (0 when absent).
pub fn metric(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name_and_labels) && l[name_and_labels.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}
