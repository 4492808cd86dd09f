//! `watch`: follows `GET /blocklist/events` (Server-Sent Events) and prints one line per
//! event, until Ctrl-C.
//!
//! A dropped connection is not the end: the client reconnects with `Last-Event-ID` set to
//! the last revision it printed, which the daemon answers with exactly the events after
//! it — no gap, no duplicate, even across a daemon restart. Only the first connection
//! decides the exit code (2 when nothing answers); a refusal (say 410 Gone, when the
//! daemon's log no longer reaches back far enough) ends the watch with exit 1.
//!
//! On a terminal, a status line on stderr below the events says whether the watch is
//! connected (and how many events it has printed) or waiting to reconnect.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::client::{refusal, revision_header, Client, Failure};
use crate::render;
use crate::status::Status;
use blocklist::sse::{SseEvent, SseParser};

/// The daemon sends a heartbeat comment every 15 s by default; this much silence means the
/// connection died without a FIN (a dead peer or a dropped NAT entry), so reconnect.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Pauses between reconnects: short at first (a daemon restart takes a moment), doubling
/// up to a ceiling while the daemon stays away.
const FIRST_RETRY: Duration = Duration::from_millis(250);
const MAX_RETRY: Duration = Duration::from_secs(5);

/// Runs until Ctrl-C (exit 0), stdout closes (exit 0), or a refusal / a failed first
/// connection (the error).
pub async fn run(client: &Client, since: Option<u64>, json: bool) -> Result<(), Failure> {
    let status = Status::on_stderr();
    tokio::select! {
        // Ending on Ctrl-C is the normal way out, not an error.
        _ = tokio::signal::ctrl_c() => Ok(()),
        outcome = follow(client, since, json, &status) => outcome,
    }
}

/// How one connection ended, when it did not fail to start.
enum End {
    /// The server closed the stream (it shuts down on SIGTERM).
    Closed,
    /// The connection broke or went silent.
    Dropped(String),
    /// Stdout was closed (`blocklist watch | head -3`): stop quietly.
    OutputClosed,
}

async fn follow(
    client: &Client,
    since: Option<u64>,
    json: bool,
    status: &Status,
) -> Result<(), Failure> {
    // The revision after which the next connection must start: the last one printed, or
    // the starting point of the first connection.
    let mut resume = since;
    let mut connected_before = false;
    let mut delay = FIRST_RETRY;
    let mut printed = 0u64;
    loop {
        let mut connected = false;
        status.set(format!("connecting to {}", client.base()));
        let mut once = Once {
            client,
            status,
            json,
            printed: &mut printed,
        };
        let end = once
            .stream(&mut resume, connected_before, &mut connected)
            .await;
        let say = |line: String| status.suspend(|| eprintln!("blocklist: {line}"));
        match end {
            Ok(End::OutputClosed) => return Ok(()),
            Ok(End::Closed) => say("the server ended the stream; reconnecting".into()),
            Ok(End::Dropped(why)) => say(format!("connection lost ({why}); reconnecting")),
            Err(Failure::Unreachable(why)) if connected_before => {
                say(format!("{why}; retrying in {delay:?}"));
            }
            Err(failure) => return Err(failure),
        }
        if connected {
            connected_before = true;
            delay = FIRST_RETRY;
        }
        status.set(format!("reconnecting to {} in {delay:?}", client.base()));
        tokio::time::sleep(delay).await;
        if !connected {
            delay = (delay * 2).min(MAX_RETRY);
        }
    }
}

/// One connection's view of the watch: where to print, and the count of events printed.
struct Once<'a> {
    client: &'a Client,
    status: &'a Status,
    json: bool,
    printed: &'a mut u64,
}

impl Once<'_> {
    /// One connection: connect, then print events until it ends. `resume` advances with
    /// every event printed.
    async fn stream(
        &mut self,
        resume: &mut Option<u64>,
        reconnect: bool,
        connected: &mut bool,
    ) -> Result<End, Failure> {
        let client = self.client;
        let mut req = client.request(Method::GET, "/blocklist/events");
        match (*resume, reconnect) {
            // The documented way to start: list-then-watch with ?since=.
            (Some(since), false) => req = req.query(&[("since", since)]),
            // What EventSource does on a reconnect; it also wins over any ?since=.
            (Some(last), true) => req = req.header("Last-Event-ID", last.to_string()),
            (None, _) => {}
        }
        let mut resp = req.send().await.map_err(|e| client.unreachable(&e))?;
        if resp.status() != StatusCode::OK {
            let status = resp.status();
            let body = resp.bytes().await.unwrap_or_default();
            return Err(refusal(status, &body));
        }
        *connected = true;
        if resume.is_none() {
            // Without ?since= the stream starts at the daemon's current revision, which it
            // reports in this header: resuming from it after an early drop keeps the feed
            // gapless even before the first event arrives.
            *resume = revision_header(&resp);
        }
        self.show_connected();
        let mut parser = SseParser::default();
        loop {
            let chunk = match tokio::time::timeout(IDLE_TIMEOUT, resp.chunk()).await {
                Err(_) => {
                    return Ok(End::Dropped(format!(
                        "nothing received for {IDLE_TIMEOUT:?}"
                    )))
                }
                Ok(Err(e)) => return Ok(End::Dropped(client.unreachable(&e).messages().join(""))),
                Ok(Ok(None)) => return Ok(End::Closed),
                Ok(Ok(Some(chunk))) => chunk,
            };
            let events = parser.push(&chunk);
            if events.is_empty() {
                continue;
            }
            for event in events {
                let line = format_event(&event, self.json);
                if !self.status.suspend(|| crate::output::emit(&line)) {
                    return Ok(End::OutputClosed);
                }
                if let Some(id) = event.id {
                    *resume = Some(id);
                }
                *self.printed += 1;
            }
            self.show_connected();
        }
    }

    fn show_connected(&self) {
        let printed = *self.printed;
        self.status.set(format!(
            "watching {}: connected, {printed} event{} printed",
            self.client.base(),
            if printed == 1 { "" } else { "s" }
        ));
    }
}

/// The output line of one event: human, or `{"revision":…,"event":…,"data":…}` where
/// `data` is the server's JSON as it came.
fn format_event(event: &SseEvent, json: bool) -> String {
    let parsed: Option<Value> = serde_json::from_str(&event.data).ok();
    if json {
        let revision = event.id.map_or("null".to_owned(), |id| id.to_string());
        let data = match parsed {
            // Multi-line data would break the one-object-per-line promise: re-encode it.
            Some(value) if event.data.contains('\n') => value.to_string(),
            Some(_) => event.data.trim().to_owned(),
            // Not JSON: sent on as a string rather than breaking the line.
            None => Value::String(event.data.clone()).to_string(),
        };
        format!(
            "{{\"revision\":{revision},\"event\":{},\"data\":{data}}}\n",
            Value::String(event.event.clone())
        )
    } else {
        let data = parsed.unwrap_or_else(|| Value::String(event.data.clone()));
        let now = blocklistd::clock::now_ms();
        let mut line = render::event_line(
            event.id.unwrap_or(0),
            &event.event,
            &data,
            now,
            &chrono::Local,
        );
        line.push('\n');
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_keep_the_servers_data() {
        let event = SseEvent {
            id: Some(5),
            event: "added".into(),
            data: "{\"kind\":\"node\",\"id\":\"n1\"}".into(),
        };
        let line = format_event(&event, true);
        assert_eq!(
            line,
            "{\"revision\":5,\"event\":\"added\",\"data\":{\"kind\":\"node\",\"id\":\"n1\"}}\n"
        );
        let odd = SseEvent {
            id: None,
            event: "x".into(),
            data: "not json".into(),
        };
        let v: Value = serde_json::from_str(&format_event(&odd, true)).unwrap();
        assert_eq!(v["data"], "not json");
        assert_eq!(v["revision"], Value::Null);
    }
}
