//! The daemon's side: what a block the watcher asks for looks like, whether the daemon
//! holds it already, and sending it (over the `blocklist` client's library: its TLS,
//! token, writes retried with their `Idempotency-Key`, and every daemon of the prefix,
//! moved on from when one fails).
//!
//! A report is a pure function of the failures behind it — its end is the newest failure's
//! time plus the block's duration, not the time it is sent — so the same failures make the
//! same report, and a watcher restarted mid-way asks for nothing new. Before asking, the
//! watcher reads the item: its own live report there means the block is held already;
//! a past block that ended after the failures means they were paid for (the block
//! expired, or an operator lifted it), and they do not block again.

use blocklist::client::{segment, Failure as ClientFailure};
use blocklist::daemons::Daemons;
use blocklist::detector::{self, text};
pub use blocklist::detector::{cause_text, Report, Sent};
use reqwest::Method;
use serde::Deserialize;
use serde_json::{json, Value};

/// What the daemon holds of an item, as far as this source is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// This source's live report holds it, until then.
    Ours { end: i64 },
    /// It is blocked by others only.
    Others,
    /// It is not blocked; its last block ended then (none: never blocked).
    No { last_end: Option<i64> },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Item {
    source: String,
    end_timestamp: i64,
    #[serde(default)]
    live_reports: Option<Vec<LiveReport>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LiveReport {
    source: String,
    end_timestamp: i64,
}

#[derive(Deserialize)]
struct PastBlock {
    ended: Ended,
}

#[derive(Deserialize)]
struct Ended {
    timestamp: i64,
}

/// The daemons of the prefix.
pub struct Daemon {
    daemons: Daemons,
}

fn is_404(failure: &ClientFailure) -> bool {
    matches!(failure, ClientFailure::Refused(m) if m.iter().any(|m| m.starts_with("404")))
}

impl Daemon {
    pub fn new(daemons: Daemons) -> Daemon {
        Daemon { daemons }
    }

    /// Whether `source` holds the item already, or when its last block ended. `Err` when
    /// the daemon could not say (then nothing is sent: never act on what cannot be seen).
    pub async fn held(&self, kind: &str, id: &str, source: &str) -> Result<Held, String> {
        let path = format!("/blocklist/{kind}/{}", segment(id));
        match self.daemons.send(Method::GET, &path, None).await {
            Ok(reply) => {
                let item: Item = reply.json().map_err(|e| text(&e))?;
                let ours = match &item.live_reports {
                    Some(live) => live
                        .iter()
                        .find(|r| r.source == source)
                        .map(|r| r.end_timestamp),
                    None => (item.source == source).then_some(item.end_timestamp),
                };
                Ok(ours.map_or(Held::Others, |end| Held::Ours { end }))
            }
            Err(failure) if is_404(&failure) => {
                let history = format!("{path}/history?limit=1");
                let reply = self
                    .daemons
                    .send(Method::GET, &history, None)
                    .await
                    .map_err(|e| text(&e))?;
                let past: Vec<PastBlock> = reply.json().map_err(|e| text(&e))?;
                Ok(Held::No {
                    last_end: past.first().map(|p| p.ended.timestamp),
                })
            }
            Err(failure) => Err(text(&failure)),
        }
    }

    /// Asks for the block under `source`, merging into what is there. `Err` when the
    /// daemon could not be reached or could not answer (5xx): worth another try later.
    pub async fn send(&self, report: &Report, source: &str) -> Result<Sent, String> {
        detector::report(&self.daemons, report, source).await
    }

    /// The node task manager `id` is registered on, if it is.
    pub async fn node_of(&self, id: &str) -> Result<Option<String>, String> {
        #[derive(Deserialize)]
        struct Registration {
            node: String,
        }
        let path = format!("/taskmanagers/{}", segment(id));
        match self.daemons.send(Method::GET, &path, None).await {
            Ok(reply) => Ok(Some(
                reply.json::<Registration>().map_err(|e| text(&e))?.node,
            )),
            Err(failure) if is_404(&failure) => Ok(None),
            Err(failure) => Err(text(&failure)),
        }
    }

    /// Registers task managers on their nodes (`PUT /taskmanagers`).
    pub async fn register(&self, all: &[(String, String)]) -> Result<(), String> {
        let body: Value = all
            .iter()
            .map(|(id, node)| json!({"id": id, "node": node}))
            .collect();
        self.daemons
            .send(Method::PUT, "/taskmanagers", Some(&body))
            .await
            .map(|_| ())
            .map_err(|e| text(&e))
    }
}
