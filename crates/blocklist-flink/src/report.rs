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

use std::collections::BTreeMap;

use blocklist::client::{segment, Failure as ClientFailure};
use blocklist::daemons::Daemons;
use reqwest::Method;
use serde::Deserialize;
use serde_json::{json, Value};

/// A block the watcher asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// `taskmanagers` or `nodes`.
    pub kind: &'static str,
    pub id: String,
    pub action: String,
    pub cause: String,
    /// Unix ms.
    pub end: i64,
    /// The evidence kept with the live report (job, exception, the failures' times).
    pub details: BTreeMap<String, String>,
}

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

/// The answer to a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    Blocked,
    /// A guardrail, the allowlist or the request's shape refused it (4xx): the messages.
    Refused(String),
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

fn text(failure: &ClientFailure) -> String {
    failure.messages().join("; ")
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
        let body = json!([{
            "id": report.id,
            "action": report.action,
            "cause": report.cause,
            "endTimestamp": report.end,
            "allowMerge": true,
            "source": source,
            "details": report.details,
        }]);
        let path = format!("/blocklist/{}", report.kind);
        match self.daemons.send(Method::POST, &path, Some(&body)).await {
            Ok(_) => Ok(Sent::Blocked),
            Err(ClientFailure::Refused(messages))
                if !messages.iter().any(|m| m.starts_with('5')) =>
            {
                Ok(Sent::Refused(messages.join("; ")))
            }
            Err(failure) => Err(text(&failure)),
        }
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

/// A cause's text for FLIP-224's merge: causes are joined with `,`, so a comma inside one
/// would split it into parts; and at most `max` characters of it.
pub fn cause_text(text: &str, max: usize) -> String {
    let clean: String = text
        .chars()
        .map(|c| match c {
            ',' => ';',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect();
    if clean.chars().count() <= max {
        clean
    } else {
        let mut cut: String = clean.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_keeps_one_part_and_a_bound() {
        assert_eq!(cause_text("a, b\nc", 100), "a; b c");
        assert_eq!(cause_text("abcdef", 4), "abc…");
    }
}
