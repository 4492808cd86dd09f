//! `GET /blocklist/events`: the change feed as Server-Sent Events, list-then-watch style.
//!
//! A watcher gets every event with revision > `since` (from the log on disk), then new
//! events as they become durable (from the store's broadcast), in order, without gaps or
//! duplicates. It subscribes to the broadcast before reading the log and skips what the log
//! already gave, so nothing falls between the two. A watcher that falls too far behind is
//! disconnected rather than slowing writers or growing memory; it resumes with
//! `Last-Event-ID`.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::collections::HashMap;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

use super::error::{ApiError, ErrorBody, Result, Unauthorized};
use super::reply::with_revision;
use super::state::AppState;
use crate::allowlist::Entry;
use crate::model::{Event, EventType, ItemEvent, RegistrationEvent};
use crate::policy::Policy;
use crate::store::Store;

/// Events read from the log per step of a catch-up.
const CATCH_UP_CHUNK: usize = 1_000;

/// Events queued per watcher between its task and its socket.
const WATCHER_QUEUE: usize = 256;

pub fn router() -> Router<AppState> {
    Router::new().route("/blocklist/events", get(watch))
}

/// Watch the change feed (Server-Sent Events)
///
/// List-then-watch: `GET /blocklist`, then `GET /blocklist/events?since=<its revision>`. The
/// stream sends every event with revision > `since`, in order, then stays open and pushes new
/// events as they become durable. Each event is
///
/// ```text
/// id: 42
/// event: merged
/// data: {"kind":"node","id":"n1","action":"MARK_BLOCKED","startTimestamp":1,"endTimestamp":2,"cause":"a,b"}
///
/// ```
///
/// `id:` is the event's revision. `event:` is `added`, `merged`, `removed` or `expired` with
/// the item (plus `"kind": "taskmanager"` or `"node"`) as `data:` (after the change; as it was
/// for removals), or `registered` / `unregistered` with `{"id": tm, "node": n}`. Lines
/// starting with `:` are heartbeat comments. A watcher that falls more than
/// `--events-max-lag` events behind is disconnected; it resumes with `Last-Event-ID`.
#[utoipa::path(
    get,
    path = "/blocklist/events",
    tag = "events",
    params(
        ("since" = Option<u64>, Query, minimum = 0, maximum = 9_223_372_036_854_775_807_i64,
            description = "Send the events after this revision (default: the current one, so only new events). No other query parameter is accepted."),
        ("Last-Event-ID" = Option<u64>, Header, nullable = false, minimum = 0, maximum = 9_223_372_036_854_775_807_i64,
            description = "What an EventSource sends on reconnect: works as `since`, and wins over it (both are checked)"),
    ),
    responses(
        (status = 200, description = "The stream, `id:`/`event:`/`data:` blocks as above, until the daemon shuts down. The schema describes one event, as an SSE client reads it: its `event` and `id` fields, and its `data` text, whose JSON has the `contentSchema` of its kind of event",
            body = FeedEvent, content_type = "text/event-stream",
            headers(("X-Blocklist-Revision" = u64, description = "The revision the stream starts after"))),
        (status = 400, description = "`since` or `Last-Event-ID` is not a non-negative integer, `since` given twice, or an unknown query parameter", body = ErrorBody),
        (status = 401, response = Unauthorized),
        (status = 410, description = "`since` is older than the retained log, or ahead of the daemon's revision: list again and watch from the listing's revision", body = ErrorBody),
    ),
    security((), ("bearerAuth" = [])),
)]
pub(super) async fn watch(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(format!("query: {e}")))?;
    if let Some((field, _)) = query.iter().find(|(k, _)| k != "since") {
        return Err(ApiError::bad_request(format!(
            "{field}: unknown query parameter (only since=REVISION)"
        )));
    }
    // Given twice, which one is meant is a guess: refuse rather than pick one.
    if query.len() > 1 {
        return Err(ApiError::bad_request(
            "since: given more than once (give one since=REVISION)",
        ));
    }
    let query: HashMap<String, String> = query.into_iter().collect();
    // Both are parsed, so a malformed one is refused whichever would be used. Last-Event-ID
    // wins over ?since=: a browser EventSource re-sends its original URL with the header on
    // every reconnect, and the header is the newer position.
    let since = query
        .get("since")
        .map(|v| parse_revision("since", v))
        .transpose()?;
    let last_event_id = headers
        .get("last-event-id")
        .map(|v| {
            let v = v
                .to_str()
                .map_err(|_| ApiError::bad_request("Last-Event-ID: not ASCII"))?;
            parse_revision("Last-Event-ID", v)
        })
        .transpose()?;
    let since = last_event_id.or(since);

    let store = state.store.clone();
    // Subscribe first, then read positions: see the module docs.
    let live = store.subscribe();
    let durable = store.durable_revision();
    let since = since.unwrap_or(durable);
    if let Some(why) = unreachable_from(&store, since) {
        return Err(ApiError::Gone(format!(
            "{why}; list again with GET /blocklist and watch from its revision"
        )));
    }

    let (tx, rx) = mpsc::channel(WATCHER_QUEUE);
    tokio::spawn(feed_watcher(
        store,
        live,
        since,
        state.limits.events_max_lag,
        tx,
        state.stopping(),
    ));
    let sse = Sse::new(ReceiverStream::new(rx))
        .keep_alive(KeepAlive::new().interval(state.limits.events_heartbeat));
    // The revision the stream starts after: resuming from it (as from Last-Event-ID)
    // neither skips nor repeats an event.
    Ok(with_revision(since, sse.into_response()))
}

/// Why the feed cannot be followed from after `revision`, or `None` when it can: the
/// revision is ahead of the daemon's (its data restored from an older backup), or older
/// than the event log keeps. A watch from it, or a walk in pages begun at it, is then
/// answered 410.
pub(super) fn unreachable_from(store: &Store, revision: u64) -> Option<String> {
    let current = store.revision();
    if revision > current {
        return Some(format!(
            "revision {revision} is ahead of this daemon's revision {current} (was the data \
             restored from an older backup?)"
        ));
    }
    let first = store.first_retained();
    (revision + 1 < first).then(|| {
        format!("revision {revision} is older than the event log keeps (it starts at {first})")
    })
}

/// The largest revision: revisions are unsigned, but kept to an int64's range, which is what
/// the document declares and what most clients' integers hold. (At a million changes a
/// second, the daemon reaches it in 292,000 years.)
const MAX_REVISION: u64 = i64::MAX as u64;

/// One event of the feed as an SSE client reads it (`event`, `id` and the `data` text), for
/// the document: a `oneOf` over the kinds of change, each naming the schema of its data's
/// JSON in `contentSchema`.
pub(super) struct FeedEvent;

impl PartialSchema for FeedEvent {
    fn schema() -> RefOr<Schema> {
        let branch = |data: &str| {
            let names: Vec<&str> = EventType::ALL
                .into_iter()
                .filter(|&event| data_schema(event) == data)
                .map(EventType::as_str)
                .collect();
            let mut data_text = ObjectBuilder::new()
                .schema_type(Type::String)
                .content_media_type("application/json")
                .build();
            // `contentSchema` has no field in utoipa; its extensions are written as given.
            data_text.extensions = Some(Extensions::from_iter([(
                "contentSchema",
                serde_json::json!({ "$ref": format!("#/components/schemas/{data}") }),
            )]));
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .property(
                    "event",
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .enum_values(Some(names)),
                )
                .property(
                    "id",
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .pattern(Some("^[1-9][0-9]*$"))
                        .description(Some("The event's revision")),
                )
                .property("data", data_text)
                .required("event")
                .required("id")
                .required("data")
        };
        // Each data schema once, in order of its first event: `updated` shares the items'
        // schema but comes last in `ALL`, so a `dedup` would keep a second item branch (and
        // every item event would match two branches of the `oneOf`).
        let mut data: Vec<&str> = Vec::new();
        for schema in EventType::ALL.into_iter().map(data_schema) {
            if !data.contains(&schema) {
                data.push(schema);
            }
        }
        data.into_iter()
            .fold(OneOfBuilder::new(), |one_of, data| {
                one_of.item(branch(data))
            })
            .into()
    }
}

impl ToSchema for FeedEvent {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((ItemEvent::name().into(), ItemEvent::schema()));
        ItemEvent::schemas(schemas);
        schemas.push((
            RegistrationEvent::name().into(),
            RegistrationEvent::schema(),
        ));
        RegistrationEvent::schemas(schemas);
        schemas.push((Policy::name().into(), Policy::schema()));
        Policy::schemas(schemas);
        schemas.push((Entry::name().into(), Entry::schema()));
        Entry::schemas(schemas);
    }
}

/// The schema of an event's data.
fn data_schema(event: EventType) -> &'static str {
    match event {
        EventType::Added
        | EventType::Merged
        | EventType::Removed
        | EventType::Expired
        | EventType::Updated => "ItemEvent",
        EventType::Registered | EventType::Unregistered => "RegistrationEvent",
        EventType::PolicyChanged => "Policy",
        EventType::Allowlisted | EventType::Unallowlisted | EventType::AllowlistExpired => {
            "AllowlistEntry"
        }
    }
}

fn parse_revision(what: &str, value: &str) -> Result<u64> {
    match value.trim().parse::<u64>() {
        Ok(revision) if revision <= MAX_REVISION => Ok(revision),
        _ => Err(ApiError::bad_request(format!(
            "{what}: must be a revision (an integer from 0 to {MAX_REVISION}), got {value:?}"
        ))),
    }
}

type Sender = mpsc::Sender<Result<SseEvent, Infallible>>;

/// Feeds one watcher: the log from `since`, then live events, until the client goes away,
/// falls more than `max_lag` events behind, or the daemon shuts down.
///
/// The live broadcast is only a fast path: when this watcher misses some of it (a burst
/// bigger than its ring, or a slow socket), it catches up from the log on disk, so memory
/// stays bounded and writers never wait. Only a watcher that has fallen `max_lag` events
/// behind the head is disconnected; it resumes with `Last-Event-ID`.
async fn feed_watcher(
    store: Store,
    mut live: broadcast::Receiver<Arc<Event>>,
    since: u64,
    max_lag: u64,
    tx: Sender,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) {
    let mut last = since;
    // The first catch-up replays what the client asked for, at its own pace; later ones
    // happen because it fell behind the live feed, and those are bounded by `max_lag`.
    let mut first_catch_up = true;
    loop {
        // Catch up from the log, up to what is durable (the broadcast has the rest).
        loop {
            let upto = store.durable_revision();
            if last >= upto {
                break;
            }
            if !first_catch_up && upto - last > max_lag {
                tracing::info!(
                    last,
                    head = upto,
                    "watcher fell too far behind; disconnecting it"
                );
                return;
            }
            let reader = store.clone();
            let chunk = tokio::task::spawn_blocking(move || {
                reader.events_between(last, upto, CATCH_UP_CHUNK)
            })
            .await;
            let events = match chunk {
                Ok(Ok(events)) => events,
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "reading the event log for a watcher failed");
                    return;
                }
                Err(_) => return,
            };
            // Retention pruned what we were about to send: end the stream; the reconnect
            // gets a 410 and lists again, rather than a silent gap.
            if events.first().map(|e| e.revision) != Some(last + 1) {
                return;
            }
            for event in &events {
                if !send(&tx, event).await {
                    return;
                }
                last = event.revision;
            }
        }
        first_catch_up = false;
        loop {
            tokio::select! {
                received = live.recv() => match received {
                    Ok(event) if event.revision <= last => {}
                    Ok(event) => {
                        if !send(&tx, &event).await {
                            return;
                        }
                        last = event.revision;
                    }
                    // Missed part of the broadcast: the log has it.
                    Err(broadcast::error::RecvError::Lagged(_)) => break,
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                () = tx.closed() => return,
                () = async { let _ = stopping.wait_for(|stop| *stop).await; } => return,
            }
        }
    }
}

/// Sends one event; false when the client has gone.
async fn send(tx: &Sender, event: &Event) -> bool {
    let sse = SseEvent::default()
        .id(event.revision.to_string())
        .event(event.event.as_str())
        .data(event.data());
    tx.send(Ok(sse)).await.is_ok()
}
