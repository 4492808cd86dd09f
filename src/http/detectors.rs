//! What detectors do over HTTP: report under their own name, and retract their reports
//! (`POST /blocklist/retract/{kind}`).
//!
//! A `detector` token reports and retracts under its name only: the source of what it
//! sends is its token's name, or a source under it (`name/…`), whatever else the request
//! says ([`detector_source`]); every other write is refused to it by its role.

use axum::extract::State;
use axum::response::Response;
use axum::routing::post;
use axum::{Json, Router};
use serde::Serialize;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use super::caller::{Caller, Role};
use super::error::{
    ErrorBody, Forbidden, Internal, PayloadTooLarge, RequestTimeout, Result, Unauthorized,
    Unavailable, UnsupportedMediaType,
};
use super::extract::DryRun;
use super::idempotency::KeyedBody;
use super::provenance::{ReasonParam, RequestSource, SourceHeader};
use super::schema;
use super::state::AppState;
use crate::model::{Id, Item, Kind};
use crate::provenance::Retraction;
use crate::store::Retracted;
use crate::validate;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/blocklist/retract/taskmanagers",
            post(retract_task_managers),
        )
        .route("/blocklist/retract/nodes", post(retract_nodes))
}

/// The source a caller reports or retracts as, given the one its request names: for a
/// detector, that one when it is the detector's name or under it (`name/…`), else the
/// name; for anyone else, the one named.
pub fn detector_source(caller: &Caller, requested: &str) -> String {
    match (caller.role, &caller.name) {
        (Role::Detector, Some(name)) => {
            let under = requested
                .strip_prefix(name.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
            if under {
                requested.to_owned()
            } else {
                name.clone()
            }
        }
        _ => requested.to_owned(),
    }
}

/// What one retraction did.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct RetractionResult {
    #[schema(value_type = Id)]
    id: String,
    /// The source whose report it retracted (or would have).
    #[schema(min_length = 1, max_length = 128)]
    source: String,
    /// `kept`: the report is taken back and other sources' reports hold the block, which
    /// is now `item`; `ended`: it was the last, and the block ended (`item` as it was);
    /// `absent`: the source held no (matching) report of an active block, nothing changed.
    #[schema(pattern = "^(kept|ended|absent)$")]
    outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    item: Option<Item>,
}

/// The answer to a retraction.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct RetractionAnswer {
    /// One result per element, in order.
    retracted: Vec<RetractionResult>,
}

fn answer(retractions: &[Retraction], outcomes: Vec<Retracted>) -> RetractionAnswer {
    let retracted = retractions
        .iter()
        .zip(outcomes)
        .map(|(r, outcome)| {
            let name = outcome.as_str();
            let item = match outcome {
                Retracted::Kept(item) | Retracted::Ended(item) => Some(item),
                Retracted::Absent => None,
            };
            RetractionResult {
                id: r.id.clone(),
                source: r.source.clone(),
                outcome: name,
                item,
            }
        })
        .collect();
    RetractionAnswer { retracted }
}

async fn retract(
    State(state): State<AppState>,
    kind: Kind,
    caller: &Caller,
    (dry, reason, RequestSource(source)): (DryRun, ReasonParam, RequestSource),
    KeyedBody(key, body): KeyedBody,
) -> Result<Response> {
    let reason = reason.into_reason();
    let mut retractions =
        validate::retractions(&body, state.limits.max_batch, &source, reason.as_deref())?;
    for r in &mut retractions {
        r.source = detector_source(caller, &r.source);
    }
    let sent = retractions.clone();
    let key = key.render(dry, move |outcomes: &Vec<Retracted>, revision| {
        Some(dry.written(revision, Json(answer(&sent, outcomes.clone()))))
    });
    let (outcomes, revision) = state
        .store
        .with_mode(dry.mode())
        .keyed(key)
        .retract(kind, retractions.clone(), state.store.now())
        .await?;
    Ok(dry.written(revision, Json(answer(&retractions, outcomes))))
}

macro_rules! retract_handler {
    ($name:ident, $kind:expr, $path:literal, $doc:literal) => {
        #[doc = $doc]
        #[doc = ""]
        #[doc = "Each element takes back one source's live report of an item: the element's `source`, else the request's (`Blocklist-Source`, else the token's name); a `detector` token retracts only its own, whatever the request names. With `details`, only a report whose details hold every one of them (an alert's episode). The block is then the merge of the live reports left (one `updated` event), or, when none is left, it ends (`removed`; its past block ended `retracted`, by the source, with `reason`). Retracting what is not there changes nothing and is no error. The batch is one transaction."]
        #[utoipa::path(
            post,
            path = $path,
            tag = "blocklist",
            params(DryRun, ReasonParam, SourceHeader),
            request_body(content = RetractRequest, content_type = "application/json"),
            responses(
                (status = 200, description = "What each retraction did, once durable", body = RetractionAnswer,
                    headers(("X-Blocklist-Revision" = u64, description = "The revision of the request's last change (the current one when nothing changed)"))),
                (status = 400, description = "Malformed: every problem of every element", body = ErrorBody),
                (status = 401, response = Unauthorized),
                (status = 403, response = Forbidden),
                (status = 408, response = RequestTimeout),
                (status = 413, response = PayloadTooLarge),
                (status = 415, response = UnsupportedMediaType),
                (status = 500, response = Internal),
                (status = 503, response = Unavailable),
            ),
            security(("bearerAuth" = [])),
        )]
        pub(super) async fn $name(
            state: State<AppState>,
            caller: Caller,
            dry: DryRun,
            (reason, source): (ReasonParam, RequestSource),
            body: KeyedBody,
        ) -> Response {
            dry.answer(retract(state, $kind, &caller, (dry, reason, source), body).await)
        }
    };
}

retract_handler!(
    retract_task_managers,
    Kind::TaskManager,
    "/blocklist/retract/taskmanagers",
    "Retract reports of task managers"
);
retract_handler!(
    retract_nodes,
    Kind::Node,
    "/blocklist/retract/nodes",
    "Retract reports of nodes"
);

/// One element of a retraction, for the `OpenAPI` document (`validate::retractions` parses
/// it, and refuses any other field).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RetractionElement {
    #[schema(value_type = Id)]
    id: String,
    #[schema(schema_with = retracted_source)]
    source: Option<String>,
    #[schema(schema_with = retracted_details)]
    details: Option<std::collections::BTreeMap<String, String>>,
}

fn retracted_source() -> RefOr<Schema> {
    schema::source(
        "Whose report: default the request's source. A `detector` token's own, whatever this says.",
    )
}

fn retracted_details() -> RefOr<Schema> {
    schema::details("Only a report whose details hold every one of these (an alert's episode).")
}

/// The body of a retraction: a non-empty array of elements, or `{"items": [...]}`.
pub(super) struct RetractRequest;

impl PartialSchema for RetractRequest {
    fn schema() -> RefOr<Schema> {
        schema::batch(
            &Ref::from_schema_name(RetractionElement::name()).into(),
            "A non-empty array of elements, or `{\"items\": [...]}`, applied in one transaction.",
        )
    }
}

impl ToSchema for RetractRequest {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((
            RetractionElement::name().into(),
            RetractionElement::schema(),
        ));
        RetractionElement::schemas(schemas);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_detector_reports_under_its_name_only() {
        let detector = Caller::with_token(Some("alerts".into()), Role::Detector);
        assert_eq!(detector_source(&detector, "alerts"), "alerts");
        assert_eq!(
            detector_source(&detector, "alerts/Disk/f1"),
            "alerts/Disk/f1"
        );
        assert_eq!(detector_source(&detector, "operator:alice"), "alerts");
        assert_eq!(detector_source(&detector, "alertsx"), "alerts");
        assert_eq!(detector_source(&detector, "unknown"), "alerts");
        let writer = Caller::with_token(Some("ci".into()), Role::Writer);
        assert_eq!(detector_source(&writer, "operator:alice"), "operator:alice");
    }
}
