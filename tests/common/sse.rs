//! The change feed's client: a watch on `GET /blocklist/events`, parsed event by event.

use reqwest::StatusCode;
use serde_json::Value;

use super::http::read;
use super::{Daemon, DEADLINE};

/// One Server-Sent Event of the change feed.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedEvent {
    pub id: u64,
    pub event: String,
    pub data: Value,
}

/// A watch stream on `GET /blocklist/events`, parsed as it arrives.
pub struct Watch {
    resp: reqwest::Response,
    buf: Vec<u8>,
    /// Where in `buf` to resume looking for the blank line that ends an event.
    scanned: usize,
}

impl Watch {
    /// Opens a watch; `Err` carries the status and body of a refused one.
    pub async fn open(
        d: &Daemon,
        since: Option<u64>,
        last_event_id: Option<u64>,
    ) -> Result<Watch, (StatusCode, Value)> {
        let path = match since {
            Some(since) => format!("/blocklist/events?since={since}"),
            None => "/blocklist/events".to_owned(),
        };
        // No overall timeout: a watch lives as long as the test needs it.
        Watch::open_at(&d.streams, &d.url(&path), last_event_id).await
    }

    /// Opens a watch at `url` with `client` (an https one, say).
    pub async fn open_at(
        client: &reqwest::Client,
        url: &str,
        last_event_id: Option<u64>,
    ) -> Result<Watch, (StatusCode, Value)> {
        let mut req = client.get(url);
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id.to_string());
        }
        let resp = req.send().await.expect("watch request");
        if resp.status() != StatusCode::OK {
            return Err(read(resp).await);
        }
        let content_type = resp.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}"
        );
        Ok(Watch {
            resp,
            buf: Vec::new(),
            scanned: 0,
        })
    }

    /// The next event; `None` when the server ended the stream. Panics after [`DEADLINE`].
    pub async fn next(&mut self) -> Option<FeedEvent> {
        tokio::time::timeout(DEADLINE, self.next_event())
            .await
            .expect("no event in time")
    }

    async fn next_event(&mut self) -> Option<FeedEvent> {
        loop {
            while let Some(at) = self.buf[self.scanned..]
                .windows(2)
                .position(|w| w == b"\n\n")
            {
                let end = self.scanned + at + 2;
                let block: Vec<u8> = self.buf.drain(..end).collect();
                self.scanned = 0;
                if let Some(event) = parse_block(&String::from_utf8(block).expect("UTF-8 SSE")) {
                    return Some(event);
                }
            }
            self.scanned = self.buf.len().saturating_sub(1);
            match self.resp.chunk().await {
                Ok(Some(chunk)) => self.buf.extend_from_slice(&chunk),
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// Takes `n` events, panicking if the stream ends first.
    pub async fn take(&mut self, n: usize) -> Vec<FeedEvent> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let event = self
                .next()
                .await
                .unwrap_or_else(|| panic!("stream ended after {} of {n} events", out.len()));
            out.push(event);
        }
        out
    }
}

/// Parses one SSE block; comments (heartbeats) give `None`.
fn parse_block(block: &str) -> Option<FeedEvent> {
    let (mut id, mut event, mut data) = (None, None, String::new());
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("id:") {
            id = Some(v.trim().parse().expect("numeric id"));
        } else if let Some(v) = line.strip_prefix("event:") {
            event = Some(v.trim().to_owned());
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push_str(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    Some(FeedEvent {
        id: id?,
        event: event?,
        data: serde_json::from_str(&data).expect("JSON data"),
    })
}

/// Asserts that `events` carry the revisions right after `after`, in order.
pub fn assert_consecutive(events: &[FeedEvent], after: u64) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(
            e.id,
            after + 1 + i as u64,
            "revisions are consecutive: {events:?}"
        );
    }
}

/// `(event, id)` of each event, to compare a stream with what it should carry.
pub fn summary(events: &[FeedEvent]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| (e.event.clone(), e.data["id"].as_str().unwrap().to_owned()))
        .collect()
}

/// `(event, id)` pairs as owned strings, the other side of [`summary`].
pub fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}
