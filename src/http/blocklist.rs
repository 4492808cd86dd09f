//! `/blocklist`: add, merge, remove and read blocked task managers and nodes.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use utoipa::ToSchema;

use super::add_request::AddRequest;
use super::caller::{Caller, Role};
use super::error::{
    ApiError, BadId, ErrorBody, Forbidden, Internal, PayloadTooLarge, RequestTimeout, Result,
    Unauthorized, Unavailable, UnsupportedMediaType,
};
use super::extract::{DryRun, ForceParam, HoldOffParam, IdPath};
use super::idempotency::{Key, KeyedBody};
use super::provenance::{ReasonParam, RequestSource, SourceHeader};
use super::state::AppState;
use crate::allowlist::Entry;
use crate::listing::Listing;
use crate::model::{Item, Kind};
use crate::policy::{Guard, Refusal};
use crate::provenance::{Report, Unblock};
use crate::store::{self, AddOutcome, HoldOff, Removed, Seen, Store};
use crate::{backup, validate};

pub fn router() -> Router<AppState> {
    // One route per kind, spelled out rather than looped over `Kind::ALL`, so that each has a
    // handler of its own to carry its `#[utoipa::path]` documentation.
    Router::new()
        .route("/blocklist", get(list_all))
        .route("/blocklist/export", get(export))
        .route(
            "/blocklist/taskmanagers",
            get(list_task_managers).post(add_task_managers),
        )
        .route(
            "/blocklist/taskmanagers/{id}",
            get(get_task_manager).delete(remove_task_manager),
        )
        .route("/blocklist/nodes", get(list_nodes).post(add_nodes))
        .route("/blocklist/nodes/{id}", get(get_node).delete(remove_node))
}

/// A node entry: the item plus the task managers registered on the node.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct NodeEntry {
    #[serde(flatten)]
    item: Item,
    /// The ids of the task managers registered on the node, sorted.
    task_managers: Vec<String>,
}

/// The node entry of a node item: one index prefix scan (`seen` records what it depends
/// on).
fn node_entry(store: &Store, item: Item, seen: &mut Seen) -> store::Result<NodeEntry> {
    let task_managers = store.task_managers_on(&item.id, seen)?;
    Ok(NodeEntry {
        item,
        task_managers,
    })
}

/// The content type of the JSON listings.
const JSON: &str = "application/json";

/// Writes an item as a JSON array element.
#[expect(
    clippy::unnecessary_wraps,
    reason = "the signature of every listing producer"
)]
#[expect(
    clippy::needless_pass_by_value,
    reason = "the signature of every listing producer"
)]
fn item_json(_: &Store, _: Kind, item: Item, out: &mut Vec<u8>) -> store::Result<()> {
    serde_json::to_writer(out, &item).expect("items serialize");
    Ok(())
}

/// Writes a node entry as a JSON array element.
fn node_entry_json(store: &Store, _: Kind, item: Item, out: &mut Vec<u8>) -> store::Result<()> {
    // A listing waits for the horizon of its whole scan before its last chunk.
    let entry = node_entry(store, item, &mut store.seen())?;
    serde_json::to_writer(out, &entry).expect("node entries serialize");
    Ok(())
}

/// The listing of one kind: a JSON array of items, or of node entries.
fn kind_listing(kind: Kind, now: i64) -> Listing {
    let render = match kind {
        Kind::TaskManager => item_json,
        Kind::Node => node_entry_json,
    };
    Listing::new(now)
        .text("[")
        .items(kind, render, b",")
        .text("]")
}

/// `GET /blocklist`: a [`Blocklist`], written field by field so it can be streamed (a test
/// checks that the bytes are the serialization of the struct, which documents the shape).
fn blocklist_listing(revision: u64, now: i64) -> Listing {
    Listing::new(now)
        .text(r#"{"blockedTaskManagers":["#)
        .items(Kind::TaskManager, item_json, b",")
        .text(r#"],"blockedNodes":["#)
        .items(Kind::Node, node_entry_json, b",")
        .text(format!(r#"],"revision":{revision}}}"#))
}

/// The whole blocklist, each list sorted by id.
// The schema of `GET /blocklist`, whose body `blocklist_listing` streams rather than builds
// from this struct; only the test that checks the two agree builds it.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct Blocklist {
    /// Directly blocked task managers only (a node block shows in the check).
    blocked_task_managers: Vec<Item>,
    blocked_nodes: Vec<NodeEntry>,
    /// The revision this listing reflects: watch the feed from here.
    revision: u64,
}

/// The whole blocklist
///
/// Streamed; its end is sent only once everything it shows is durable (a cut-off body
/// means the daemon failed). Watch the feed from its revision.
#[utoipa::path(
    get,
    path = "/blocklist",
    tag = "blocklist",
    responses(
        (status = 200, description = "Every active item", body = Blocklist,
            headers(("X-Blocklist-Revision" = u64, description = "The revision this listing reflects"))),
        (status = 401, response = Unauthorized),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security((), ("bearerAuth" = [])),
)]
pub(super) async fn list_all(State(state): State<AppState>) -> Result<Response> {
    state
        .streamed("/blocklist", JSON, |revision| {
            blocklist_listing(revision, state.store.now())
        })
        .await
}

async fn list(State(state): State<AppState>, kind: Kind) -> Result<Response> {
    let route = match kind {
        Kind::TaskManager => "/blocklist/taskmanagers",
        Kind::Node => "/blocklist/nodes",
    };
    state
        .streamed(route, JSON, |_| kind_listing(kind, state.store.now()))
        .await
}

/// Every active item and registration as JSON lines
///
/// The format `blocklistd import` reads.
#[utoipa::path(
    get,
    path = "/blocklist/export",
    tag = "blocklist",
    responses(
        (status = 200, description = "One JSON document per line", body = String,
            content_type = "application/x-ndjson",
            headers(("X-Blocklist-Revision" = u64, description = "The revision this export reflects"))),
        (status = 401, response = Unauthorized),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security((), ("bearerAuth" = [])),
)]
pub(super) async fn export(State(state): State<AppState>) -> Result<Response> {
    let now = state.store.now();
    let (policy, _) = state.store.policy().await?;
    let (entries, _) = state
        .listing(move |store| store.stored_allowlist(None, now))
        .await?;
    let head = backup::export_head(&policy, &entries);
    state
        .streamed("/blocklist/export", "application/x-ndjson", |_| {
            backup::export_listing(head, now)
        })
        .await
}

async fn get_one(
    State(state): State<AppState>,
    kind: Kind,
    IdPath(id): IdPath,
) -> Result<Response> {
    let now = state.store.now();
    let (store, read_id) = (state.store.clone(), id.clone());
    let found = state
        .store
        .read_durably(move |seen| {
            let (store, id) = (&store, &read_id);
            // Read before the item, whose stamp then covers them (see `Store::reports`).
            let reports = store.reports(kind, id, seen)?;
            let Some(block) = store.get(kind, id, now, seen)? else {
                return Ok(None);
            };
            let item = Item::new(id.clone(), block);
            let etag = etag(item.revision);
            let body = match kind {
                Kind::TaskManager => Json(ItemDetail { item, reports }).into_response(),
                Kind::Node => Json(NodeDetail {
                    entry: node_entry(store, item, seen)?,
                    reports,
                })
                .into_response(),
            };
            Ok(Some(([(header::ETAG, etag)], body).into_response()))
        })
        .await?;
    found.ok_or_else(|| not_blocked(kind, &id))
}

/// The `ETag` of an item whose last change had `revision`: a strong tag of the revision.
pub(super) fn etag(revision: u64) -> String {
    format!("\"{revision}\"")
}

/// A task manager item with its most recent reports.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct ItemDetail {
    #[serde(flatten)]
    item: Item,
    /// The most recent reports (up to 32), newest first; `reportCount` counts them all.
    reports: Vec<Report>,
}

/// A node entry with its most recent reports.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct NodeDetail {
    #[serde(flatten)]
    entry: NodeEntry,
    /// The most recent reports (up to 32), newest first; `reportCount` counts them all.
    reports: Vec<Report>,
}

async fn add(
    State(state): State<AppState>,
    kind: Kind,
    caller: &Caller,
    (dry, force, RequestSource(source)): (DryRun, ForceParam, RequestSource),
    KeyedBody(key, body): KeyedBody,
) -> Result<Response> {
    let force = force.by(caller)?;
    let now = state.store.now();
    let items = validate::add_batch_from(&body, now, state.limits.max_batch, &source)?;
    let key = key.render(dry, move |outcome: &AddOutcome, revision| match outcome {
        AddOutcome::Written { merged, escalated } => {
            Some(added(dry, merged.clone(), escalated.clone(), revision))
        }
        AddOutcome::Refused(_) | AddOutcome::Conflict(_) => None,
    });
    let writer = state.store.with_mode(dry.mode()).keyed(key);
    let (outcome, revision) = writer.add_forced(kind, items, now, force).await?;
    match outcome {
        AddOutcome::Written { merged, escalated } => Ok(added(dry, merged, escalated, revision)),
        AddOutcome::Refused(refusals) => Err(refused(&state, kind, refusals, now).await),
        AddOutcome::Conflict(conflicts) => Err(ApiError::Conflict(
            conflicts
                .into_iter()
                .map(|(index, id)| {
                    format!(
                        "items[{index}] (id {id:?}): {} {id:?} is already blocked and allowMerge \
                         is false; nothing of the batch was written",
                        kind.singular()
                    )
                })
                .collect(),
        )),
    }
}

/// The answer to a written add: 201 (with the items escalation lengthened, if any), or 202
/// with the items that merged and those escalation lengthened.
fn added(dry: DryRun, mut merged: Vec<Item>, escalated: Vec<Item>, revision: u64) -> Response {
    if merged.is_empty() && escalated.is_empty() {
        dry.written(revision, StatusCode::CREATED)
    } else if merged.is_empty() {
        dry.written(revision, (StatusCode::CREATED, Json(escalated)))
    } else {
        merged.extend(escalated);
        dry.written(revision, (StatusCode::ACCEPTED, Json(merged)))
    }
}

/// The answer to an unblock.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct Removal {
    /// With `holdOff`: the allowlist entry that now keeps the id from being blocked again
    /// (one already there that lasts longer is kept as it is).
    #[serde(skip_serializing_if = "Option::is_none")]
    hold_off: Option<Entry>,
}

async fn remove(
    State(state): State<AppState>,
    kind: Kind,
    caller: &Caller,
    IdPath(id): IdPath,
    (dry, hold_off, reason, RequestSource(source)): (
        DryRun,
        HoldOffParam,
        ReasonParam,
        RequestSource,
    ),
    key: Key,
) -> Result<Response> {
    let hold_off = match hold_off.ms() {
        Some(ms) => {
            caller.require(Role::Admin, "an unblock with a hold-off")?;
            Some(HoldOff {
                until: state.store.now() + ms,
                by: caller.name.clone(),
            })
        }
        None => None,
    };
    let key = key.render(dry, move |removed: &Option<Removed>, revision| {
        removed
            .as_ref()
            .map(|removed| unblocked(dry, removed, revision))
    });
    match state
        .store
        .with_mode(dry.mode())
        .keyed(key)
        .unblock(
            kind,
            id.clone(),
            Unblock {
                source: Some(source),
                reason: reason.into_reason(),
            },
            hold_off,
        )
        .await?
    {
        (Some(removed), revision) => Ok(unblocked(dry, &removed, revision)),
        (None, _) => Err(not_blocked(kind, &id)),
    }
}

/// The answer to an unblock that removed an item.
fn unblocked(dry: DryRun, removed: &Removed, revision: u64) -> Response {
    let hold_off = removed.hold_off.clone();
    dry.written(revision, Json(Removal { hold_off }))
}

/// How many expiry entries a refused add looks through for the next end of its kind.
const RELIEF_SCAN: usize = 10_000;

/// The answer to an add a guardrail refused: 422 when one refusal is for good, else 429 with
/// `Retry-After` when the daemon knows when the write could pass (the bucket's next token,
/// or when the first block of the kind ends).
pub(super) async fn refused(
    state: &AppState,
    kind: Kind,
    refusals: Vec<Refusal>,
    now: i64,
) -> ApiError {
    let errors: Vec<String> = refusals
        .iter()
        .map(|r| {
            format!(
                "items[{}] (id {:?}): {}: {}; nothing of the batch was written",
                r.index,
                r.id,
                r.guard.as_str(),
                r.message
            )
        })
        .collect();
    if !refusals.iter().all(Refusal::is_for_later) {
        return ApiError::Unprocessable(errors);
    }
    let wait_ms = refusals
        .iter()
        .filter_map(|r| r.retry_after_ms)
        .max()
        .unwrap_or(0);
    // A cap: relieved when the first current block ends (of the kind, for the count cap;
    // of either, for a share cap), if any is timed.
    let count_cap = refusals.iter().any(|r| r.guard == Guard::MaxItems);
    let share_cap = refusals
        .iter()
        .any(|r| matches!(r.guard, Guard::BlockedShare | Guard::EvacuatingShare));
    let relief_ms = if count_cap || share_cap {
        let of = (!share_cap).then_some(kind);
        // Advice only: when it cannot be read, the answer goes without it.
        let next = state
            .blocking(move |store| store.next_end_of(of, now, RELIEF_SCAN))
            .await;
        match next {
            Ok(Some(end)) => Some(wait_ms.max(end - now)),
            // No timed block to wait for: at least the rate's (or a hold-off's) wait.
            _ => (wait_ms > 0).then_some(wait_ms),
        }
    } else {
        Some(wait_ms)
    };
    let retry_after_secs = relief_ms.map(|ms| u64::try_from(ms).unwrap_or(0).div_ceil(1000).max(1));
    ApiError::TooMany {
        errors,
        retry_after_secs,
    }
}

pub(super) fn not_blocked(kind: Kind, id: &str) -> ApiError {
    ApiError::NotFound(format!("{} {id:?} is not blocked", kind.singular()))
}

// ---- Per-kind handlers: thin wrappers that exist to carry the documentation. ----

/// The four handlers of one kind (list, add, get, remove), each a one-line call of the
/// shared handler above with its `Kind`, carrying that kind's `#[utoipa::path]`. A macro,
/// because utoipa needs each path as a literal.
macro_rules! kind_handlers {
    (
        kind: $kind:expr,
        path: $path:literal,
        path_id: $path_id:literal,
        entry: $entry:ty,
        list: $list:ident, $list_doc:literal, $list_desc:literal,
        add: $add:ident, $add_doc:literal,
        get: $get:ident, $detail:ty, $get_doc:literal, $get_desc:literal,
        remove: $remove:ident, $remove_doc:literal $(,)?
    ) => {
        #[doc = $list_doc]
        #[utoipa::path(
            get,
            path = $path,
            tag = "blocklist",
            responses(
                (status = 200, description = $list_desc, body = [$entry],
                    headers(("X-Blocklist-Revision" = u64, description = "The revision this listing reflects"))),
                (status = 401, response = Unauthorized),
                (status = 500, response = Internal),
                (status = 503, response = Unavailable),
            ),
            security((), ("bearerAuth" = [])),
        )]
        pub(super) async fn $list(state: State<AppState>) -> Result<Response> {
            list(state, $kind).await
        }

        #[doc = $add_doc]
        #[doc = ""]
        #[doc = "The batch is validated whole, then applied as one atomic transaction, or not at all. A 201"]
        #[doc = "or 202 is sent only once the change is on disk. See docs/api.md for the merge rules."]
        #[utoipa::path(
            post,
            path = $path,
            tag = "blocklist",
            params(DryRun, ForceParam, SourceHeader),
            request_body(content = AddRequest, content_type = "application/json"),
            responses(
                (status = 201, description = "Every element was new. The body is empty, unless escalation lengthened some new items: then it is a JSON array of those items as stored (each with `escalated`)",
                    headers(("X-Blocklist-Revision" = u64, description = "The revision of the request's last change"))),
                (status = 202, description = "Some elements merged into active items (new ones were added too): the stored state of each merged item, once per id, in order of first merge; then each new item escalation lengthened (with `escalated`)",
                    body = [Item],
                    headers(("X-Blocklist-Revision" = u64, description = "The revision of the request's last change"))),
                (status = 400, description = "Malformed: every problem of every element", body = ErrorBody),
                (status = 401, response = Unauthorized),
                (status = 403, response = Forbidden),
                (status = 408, response = RequestTimeout),
                (status = 409, description = "Some element met an active item and had allowMerge false; nothing was written", body = ErrorBody),
                (status = 422, description = "A guardrail refused the batch for good (an allowlisted id, a block longer than the policy's maxBlockDurationSecs, a permanent one where none is allowed, more items or evacuations than a cap or the burst allow at all): every offending element named; nothing was written", body = ErrorBody),
                (status = 429, description = "A guardrail refused the batch for now (a share or count cap, the evacuation rate, a hold-off): every offending element named, with the current figure, the cap and the figure after the batch; nothing was written", body = ErrorBody,
                    headers(("Retry-After" = u64, description = "Seconds until the batch could pass: the next evacuation token, the end of the first timed block, or of the hold-off; absent when the daemon cannot tell"))),
                (status = 413, response = PayloadTooLarge),
                (status = 415, response = UnsupportedMediaType),
                (status = 500, response = Internal),
                (status = 503, response = Unavailable),
            ),
            security(("bearerAuth" = [])),
        )]
        pub(super) async fn $add(
            state: State<AppState>,
            caller: Caller,
            dry: DryRun,
            force: ForceParam,
            source: RequestSource,
            body: KeyedBody,
        ) -> Response {
            dry.answer(add(state, $kind, &caller, (dry, force, source), body).await)
        }

        #[doc = $get_doc]
        #[utoipa::path(
            get,
            path = $path_id,
            tag = "blocklist",
            params(IdPath),
            responses(
                (status = 200, description = $get_desc, body = $detail,
                    headers(("ETag" = String, description = "The item's last-changed revision, quoted: give it in If-Match to update only this state"))),
                (status = 400, response = BadId),
                (status = 401, response = Unauthorized),
                (status = 404, description = "Not blocked (or already expired)", body = ErrorBody),
                (status = 500, response = Internal),
                (status = 503, response = Unavailable),
            ),
            security((), ("bearerAuth" = [])),
        )]
        pub(super) async fn $get(state: State<AppState>, id: IdPath) -> Result<Response> {
            get_one(state, $kind, id).await
        }

        #[doc = $remove_doc]
        #[utoipa::path(
            delete,
            path = $path_id,
            tag = "blocklist",
            params(IdPath, DryRun, HoldOffParam, ReasonParam, SourceHeader),
            responses(
                (status = 200, description = "The item was active and is now removed (durably), with its hold-off if one was asked for", body = Removal,
                    headers(("X-Blocklist-Revision" = u64, description = "The revision of the removal"))),
                (status = 400, description = "Bad id or holdOff", body = ErrorBody),
                (status = 401, response = Unauthorized),
                (status = 403, response = Forbidden),
                (status = 404, description = "Not blocked (or already expired)", body = ErrorBody),
                (status = 500, response = Internal),
                (status = 503, response = Unavailable),
            ),
            security(("bearerAuth" = [])),
        )]
        pub(super) async fn $remove(
            state: State<AppState>,
            caller: Caller,
            id: IdPath,
            dry: DryRun,
            hold_off: HoldOffParam,
            (reason, source): (ReasonParam, RequestSource),
            key: Key,
        ) -> Response {
            dry.answer(
                remove(state, $kind, &caller, id, (dry, hold_off, reason, source), key).await,
            )
        }
    };
}

kind_handlers! {
    kind: Kind::TaskManager,
    path: "/blocklist/taskmanagers",
    path_id: "/blocklist/taskmanagers/{id}",
    entry: Item,
    list: list_task_managers, "Blocked task managers", "Active task manager items, sorted by id",
    add: add_task_managers, "Block task managers",
    get: get_task_manager, ItemDetail, "One blocked task manager", "The active item, with its most recent reports",
    remove: remove_task_manager, "Unblock a task manager",
}

kind_handlers! {
    kind: Kind::Node,
    path: "/blocklist/nodes",
    path_id: "/blocklist/nodes/{id}",
    entry: NodeEntry,
    list: list_nodes, "Blocked nodes", "Active node entries, sorted by id",
    add: add_nodes, "Block nodes",
    get: get_node, NodeDetail, "One blocked node", "The active node entry, with its most recent reports",
    remove: remove_node, "Unblock a node",
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listing::{CHUNK_BYTES, CHUNK_ELEMENTS};
    use crate::model::{Action, PERMANENT};
    use crate::store::StoreConfig;

    /// Items `{prefix}00000…` of which those with `i % 7 == 0` end at `short_end`.
    fn items(kind: Kind, prefix: &str, n: usize, now: i64, short_end: i64) -> Vec<(Kind, Item)> {
        (0..n)
            .map(|i| {
                let item = Item {
                    id: format!("{prefix}{i:05}"),
                    action: Action::MarkBlocked,
                    start_timestamp: now,
                    end_timestamp: if i % 7 == 0 { short_end } else { PERMANENT },
                    cause: "c".repeat(i % 50 + 1),
                    forced: None,
                    source: "unknown".into(),
                    report_count: 1,
                    first_report_timestamp: now,
                    last_report_timestamp: now,
                    revision: 0,
                    escalated: None,
                };
                (kind, item)
            })
            .collect()
    }

    /// Drives a listing chunk by chunk as the HTTP layer does, checking each chunk's bound.
    fn chunks(store: &Store, mut listing: Listing) -> (Vec<u8>, usize) {
        let (mut body, mut count) = (Vec::new(), 0);
        loop {
            let mut chunk = Vec::new();
            let done = listing.next_chunk(store, &mut chunk).unwrap();
            assert!(
                chunk.len() < CHUNK_BYTES + 1024,
                "a chunk of {}",
                chunk.len()
            );
            body.extend_from_slice(&chunk);
            count += 1;
            if done {
                return (body, count);
            }
        }
    }

    /// The streamed bodies, over several chunks, are byte for byte the serialization of the
    /// documented types, with the items due at the listing's `now` left out.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn streamed_listings_are_the_documented_shapes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreConfig::new(dir.path().join("data"))).unwrap();
        let now = crate::clock::now_ms();
        let n = 2 * CHUNK_ELEMENTS + 100;
        let short_end = now + 60_000;
        store
            .import(items(Kind::TaskManager, "tm-", n, now, short_end), false)
            .await
            .unwrap();
        store
            .import(items(Kind::Node, "n-", n, now, short_end), false)
            .await
            .unwrap();
        store
            .register(vec![
                ("tm-b".into(), "n-00001".into()),
                ("tm-a".into(), "n-00001".into()),
                ("tm-c".into(), "n-00002".into()),
            ])
            .await
            .unwrap();
        let revision = store.revision();
        tokio::task::spawn_blocking(move || {
            // After the short items' end: they are due, whether or not swept.
            let later = short_end;
            let task_managers = store.list(Kind::TaskManager, later).unwrap();
            let nodes: Vec<NodeEntry> = store
                .list(Kind::Node, later)
                .unwrap()
                .into_iter()
                .map(|item| node_entry(&store, item, &mut store.seen()).unwrap())
                .collect();
            assert_eq!(task_managers.len(), n - n.div_ceil(7));
            assert_eq!(nodes[0].task_managers, ["tm-a", "tm-b"]);

            let (tms_body, tms_chunks) = chunks(&store, kind_listing(Kind::TaskManager, later));
            assert_eq!(tms_body, serde_json::to_vec(&task_managers).unwrap());
            assert!(tms_chunks > 1, "{tms_chunks} chunk(s)");
            let (nodes_body, _) = chunks(&store, kind_listing(Kind::Node, later));
            assert_eq!(nodes_body, serde_json::to_vec(&nodes).unwrap());
            let (all, all_chunks) = chunks(&store, blocklist_listing(revision, later));
            let whole = Blocklist {
                blocked_task_managers: task_managers,
                blocked_nodes: nodes,
                revision,
            };
            assert_eq!(
                String::from_utf8(all).unwrap(),
                serde_json::to_string(&whole).unwrap()
            );
            assert!(all_chunks >= 3, "{all_chunks} chunk(s)");

            // Before the short items' end they are listed; an empty kind is `[]`.
            let (body, _) = chunks(&store, kind_listing(Kind::TaskManager, now));
            let listed: Vec<Item> = serde_json::from_slice(&body).unwrap();
            assert_eq!(listed.len(), n);
            assert_eq!(chunks(&store, kind_listing(Kind::Node, PERMANENT)).0, b"[]");
            store.shutdown().unwrap();
        })
        .await
        .unwrap();
    }
}
