//! What every enforcer (a bridge that makes a cluster obey the blocklist: `blocklist-kube`,
//! `blocklist-yarn`) needs of the daemons: the blocked items (`GET /blocklist/{kind}`), the
//! change feed (`GET /blocklist/events`) and its item events, the membership
//! (`/taskmanagers`) and the enforcer's statuses (`PUT /enforcement/{name}`), over the
//! client's [`Daemons`] (its TLS, token, writes retried with their `Idempotency-Key`, and
//! every daemon of the prefix, moved on from when one fails).

use std::path::Path;
use std::time::Instant;

use futures::FutureExt;
use reqwest::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::client::{refusal, revision_header, segment, Failure, TlsFiles};
use crate::daemons::Daemons;
use crate::sse::{SseEvent, SseParser};

/// A blocked item as the daemon lists it and the feed carries it (the fields an enforcer
/// shows).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Block {
    pub id: String,
    pub action: String,
    pub cause: String,
    #[serde(default)]
    pub source: String,
    pub end_timestamp: i64,
    /// The revision of the change that made the item what it is (a feed event's data may
    /// leave it out: then the event's id, which is that revision).
    #[serde(default)]
    pub revision: u64,
    /// Unix ms of the block's last report: when the daemon took the add or merge in (the
    /// start of the block-to-enforcement latency).
    #[serde(default)]
    pub last_report_timestamp: i64,
    /// The sources whose live reports hold it, when not `source` alone (a listing's; the
    /// feed's items leave it out).
    #[serde(default)]
    pub held_by: Vec<String>,
}

/// The action that asks for the running work to leave too.
pub const EVACUATE: &str = "MARK_BLOCKED_AND_EVACUATE_TASKS";

/// The `endTimestamp` of a permanent item (Java's `Long.MAX_VALUE`).
pub const PERMANENT: i64 = i64::MAX;

impl Block {
    /// Whether the block asks for evacuation.
    pub fn evacuates(&self) -> bool {
        self.action == EVACUATE
    }
}

/// An item's event of the feed: what happened to which item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemEvent {
    /// `node` or `taskmanager`.
    pub kind: String,
    /// The item as it is now: `Some` while it blocks (`added`, `merged`, `updated`), `None`
    /// once it does not (`removed`, `expired`).
    pub block: Option<Block>,
    /// Its id.
    pub id: String,
}

/// The field of an item event read first.
#[derive(Deserialize)]
struct Kind {
    kind: Option<String>,
}

impl ItemEvent {
    /// The item event `event` is; `None` for every other event of the feed (a heartbeat,
    /// a policy change). An item event whose data does not read is logged and skipped.
    pub fn of(event: &SseEvent) -> Option<ItemEvent> {
        let blocks = match event.event.as_str() {
            "added" | "merged" | "updated" => true,
            "removed" | "expired" => false,
            _ => return None,
        };
        let Ok(Kind { kind: Some(kind) }) = serde_json::from_str::<Kind>(&event.data) else {
            return None;
        };
        let block: Block = match serde_json::from_str(&event.data) {
            Ok(block @ Block { revision: 1.., .. }) => block,
            Ok(block) => Block {
                revision: event.id.unwrap_or_default(),
                ..block
            },
            Err(e) => {
                tracing::warn!(error = %e, data = %event.data, "an item event that does not read");
                return None;
            }
        };
        Some(ItemEvent {
            kind,
            id: block.id.clone(),
            block: blocks.then_some(block),
        })
    }
}

/// The daemons of one prefix.
pub struct Daemon {
    daemons: Daemons,
}

/// Why the feed could not be followed from a revision.
#[derive(Debug)]
pub enum FeedError {
    /// 410: the revision is older than the daemon keeps: list again.
    Gone,
    Other(String),
}

/// A task manager's registration: which node it runs on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    pub id: String,
    pub node: String,
}

/// One status report (`PUT /enforcement/{name}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub kind: &'static str,
    pub id: String,
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_revision: Option<u64>,
}

/// The most registrations or statuses one request carries (the daemon's `--max-batch`
/// default is larger).
const PER_BATCH: usize = 1_000;

impl Daemon {
    /// Clients for every URL, with the token (its file's first line) and the TLS files.
    pub fn new(
        urls: &[String],
        token_file: Option<&Path>,
        tls: &TlsFiles,
    ) -> Result<Daemon, String> {
        Ok(Daemon {
            daemons: Daemons::new(urls, token_file, tls)?,
        })
    }
}

impl From<Daemons> for Daemon {
    fn from(daemons: Daemons) -> Daemon {
        Daemon { daemons }
    }
}

impl Daemon {
    fn failure(&self, what: &str, failure: &Failure) -> String {
        self.daemons.failure(what, failure)
    }

    /// A JSON read with the revision it reflects (`X-Blocklist-Revision`).
    async fn read<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<(T, u64), String> {
        let client = self.daemons.client();
        let response = match client.request(Method::GET, path).send().await {
            Ok(response) => response,
            Err(e) => return Err(self.failure(path, &client.unreachable(&e))),
        };
        let status = response.status();
        let revision = revision_header(&response);
        let body = match response.bytes().await {
            Ok(body) => body,
            Err(e) => return Err(self.failure(path, &client.unreachable(&e))),
        };
        if !status.is_success() {
            return Err(self.failure(path, &refusal(status, &body)));
        }
        let revision = revision.ok_or_else(|| format!("{path}: no X-Blocklist-Revision"))?;
        let value = serde_json::from_slice(&body).map_err(|e| format!("{path}: {e}"))?;
        Ok((value, revision))
    }

    /// Every item of `kind` (`nodes`, `taskmanagers`) blocking now, and the revision the
    /// listing reflects at least (the feed from it converges on the daemon's state).
    pub async fn blocked(&self, kind: &str) -> Result<(Vec<Block>, u64), String> {
        self.read(&format!("/blocklist/{kind}")).await
    }

    /// The change feed from after `revision` (`Last-Event-ID`), open.
    pub async fn feed(&self, revision: u64) -> Result<reqwest::Response, FeedError> {
        let client = self.daemons.streams();
        let request = client
            .request(Method::GET, "/blocklist/events")
            .header("Last-Event-ID", revision.to_string());
        let response = request
            .send()
            .await
            .map_err(|e| FeedError::Other(self.failure("the feed", &client.unreachable(&e))))?;
        match response.status() {
            StatusCode::OK => Ok(response),
            StatusCode::GONE => Err(FeedError::Gone),
            status => {
                let body = response.bytes().await.unwrap_or_default();
                Err(FeedError::Other(
                    self.failure("the feed", &refusal(status, &body)),
                ))
            }
        }
    }

    /// The feed broke after it was opened on the current daemon: the next attempt goes
    /// to another.
    pub fn feed_broke(&self) {
        self.daemons.failed();
    }

    /// The events of the next bytes of the feed `response` (opened by [`Daemon::feed`]),
    /// read with `parser`: `Ok(None)` once `until` comes first. A stream that ended or
    /// failed is the current daemon's failure ([`Daemon::feed_broke`]).
    pub async fn next_events(
        &self,
        response: &mut reqwest::Response,
        parser: &mut SseParser,
        until: Instant,
    ) -> Result<Option<Vec<SseEvent>>, FeedError> {
        let left = until.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, response.chunk()).await {
            Err(_) => Ok(None),
            Ok(read) => self.events_of(read, parser).map(Some),
        }
    }

    /// Adds to `events` those of the feed `response` received already, without waiting,
    /// until `max` are there: a burst (a storm's 1,000 retractions) is read whole, to be
    /// applied at once, rather than one read for each. A stream that ended or failed is
    /// the current daemon's failure, as in [`Daemon::next_events`]; `events` keeps what
    /// was read before.
    pub fn ready_events(
        &self,
        response: &mut reqwest::Response,
        parser: &mut SseParser,
        events: &mut Vec<SseEvent>,
        max: usize,
    ) -> Result<(), FeedError> {
        while events.len() < max {
            // A chunk's future that is not ready has taken nothing from the stream.
            let Some(read) = response.chunk().now_or_never() else {
                return Ok(());
            };
            events.extend(self.events_of(read, parser)?);
        }
        Ok(())
    }

    /// The events of one read of the feed's stream, read with `parser`; a stream that
    /// ended or failed is the current daemon's failure ([`Daemon::feed_broke`]).
    fn events_of<B: AsRef<[u8]>>(
        &self,
        read: reqwest::Result<Option<B>>,
        parser: &mut SseParser,
    ) -> Result<Vec<SseEvent>, FeedError> {
        match read {
            Ok(Some(chunk)) => Ok(parser.push(chunk.as_ref())),
            Ok(None) => {
                self.feed_broke();
                Err(FeedError::Other("the stream ended".into()))
            }
            Err(e) => {
                self.feed_broke();
                Err(FeedError::Other(e.to_string()))
            }
        }
    }

    /// A write with a JSON body.
    async fn write(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, String> {
        let client = self.daemons.client();
        match client.send(method, path, body).await {
            Ok(reply) => Ok(serde_json::from_slice(&reply.body).unwrap_or(Value::Null)),
            Err(failure) => Err(self.failure(path, &failure)),
        }
    }

    /// Every registration the daemon holds.
    pub async fn registrations(&self) -> Result<Vec<Registration>, String> {
        Ok(self.read("/taskmanagers").await?.0)
    }

    /// Registers `all` (new ones, and moves), in batches.
    pub async fn register(&self, all: &[Registration]) -> Result<(), String> {
        for batch in all.chunks(PER_BATCH) {
            let body = serde_json::to_value(batch).expect("registrations serialise");
            self.write(Method::PUT, "/taskmanagers", Some(&body))
                .await?;
        }
        Ok(())
    }

    /// Unregisters task manager `id` (one not registered is no error).
    pub async fn unregister(&self, id: &str) -> Result<(), String> {
        let path = format!("/taskmanagers/{}", segment(id));
        let client = self.daemons.client();
        match client.send(Method::DELETE, &path, None).await {
            Ok(_) => Ok(()),
            Err(Failure::Refused(messages)) if messages.iter().any(|m| m.starts_with("404")) => {
                Ok(())
            }
            Err(failure) => Err(self.failure(&path, &failure)),
        }
    }

    /// Reports `statuses` under enforcer `name`, in batches.
    pub async fn report(&self, name: &str, statuses: &[Status]) -> Result<(), String> {
        let path = format!("/enforcement/{}", segment(name));
        for batch in statuses.chunks(PER_BATCH) {
            let body = serde_json::to_value(batch).expect("statuses serialise");
            self.write(Method::PUT, &path, Some(&body)).await?;
        }
        Ok(())
    }
}
