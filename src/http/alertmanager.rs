//! `POST /webhooks/alertmanager`: Alertmanager's webhook receiver. Each alert of a delivery
//! becomes a report while it fires and its retraction once resolved ([`crate::alerts`]),
//! all of them in one transaction, each decided on its own.
//!
//! The answer is 200 once everything that could be stored is durable, with what became
//! of each alert, even when a guardrail refused some or some named nothing: Alertmanager
//! sends a group that got a 4xx again at every `group_interval`, forever. A 5xx only when
//! nothing could be stored (the store is down, or not the writer's), so that Alertmanager
//! retries; a body that is not Alertmanager's payload is a 400 that says what is wrong.

use std::collections::HashSet;
use std::sync::Mutex;

use axum::extract::State;
use axum::response::Response;
use axum::routing::post;
use axum::{Json, Router};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::caller::Caller;
use super::error::{
    ApiError, ErrorBody, Forbidden, Internal, PayloadTooLarge, RequestTimeout, Result,
    Unauthorized, Unavailable, UnsupportedMediaType,
};
use super::extract::DryRun;
use super::idempotency::{Key, KeyedBody};
use super::routes::ALERTMANAGER_WEBHOOK;
use super::state::AppState;
use crate::alerts::{self, Decision, Payload};
use crate::model::{Id, Kind};
use crate::provenance::Signal;
use crate::store::{AddOutcome, Ingested, Retracted};

pub fn router() -> Router<AppState> {
    Router::new().route(ALERTMANAGER_WEBHOOK, post(receive))
}

/// What became of one alert.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct AlertResult {
    pub fingerprint: String,
    pub alertname: String,
    /// `blocked` (its report is stored: a new block, or merged into one), `repeated` (the
    /// same episode again: nothing changed), `retracted` (its report was taken back; the
    /// block ended unless another source holds it), `absent` (resolved, and nothing of it
    /// was held), `kept` (resolved; its rule keeps the block for its duration), `refused`
    /// (a guardrail or the allowlist refused it: `reason`), `ignored` (it names no
    /// blocklist kind, or names something wrongly: `reason`).
    #[schema(pattern = "^(blocked|repeated|retracted|absent|kept|refused|ignored)$")]
    pub outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<Kind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Id>)]
    pub id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The answer to a delivery.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct Delivery {
    /// How many alerts came to each outcome (only those that occurred).
    #[schema(value_type = std::collections::HashMap<String, u64>)]
    counts: std::collections::BTreeMap<&'static str, usize>,
    /// One result per alert, in the delivery's order.
    alerts: Vec<AlertResult>,
}

/// The alert names whose ignored alerts were logged already: one line per name, not one
/// per delivery (Alertmanager re-sends a group every `group_interval`). Bounded, so that
/// alerts with ever new names cannot grow it.
static LOGGED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
const MAX_LOGGED_NAMES: usize = 1024;

fn log_ignored_once(alertname: &str, reason: &str) {
    let mut logged = LOGGED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let names = logged.get_or_insert_with(HashSet::new);
    if names.len() < MAX_LOGGED_NAMES && names.insert(alertname.to_owned()) {
        tracing::warn!(
            alertname,
            reason,
            "an alert sent to the blocklist blocks nothing (logged once per alert name)"
        );
    }
}

/// The payload, or a 400 naming the field that is not Alertmanager's.
fn payload(body: Value) -> Result<Payload> {
    let payload: Payload = serde_path_to_error::deserialize(body).map_err(|e| {
        ApiError::bad_request(format!(
            "not Alertmanager's webhook payload: {}: {}",
            e.path(),
            e.inner()
        ))
    })?;
    if payload.version != alerts::VERSION {
        return Err(ApiError::bad_request(format!(
            "version: this receiver reads Alertmanager's webhook payload version {}, got {:?}",
            alerts::VERSION,
            payload.version
        )));
    }
    Ok(payload)
}

/// Alertmanager's webhook receiver
///
/// Alertmanager's `webhook_configs` (payload version 4) posts here, with a `detector`
/// token (`http_config.authorization`). Each alert, by its own status, becomes a report of
/// the node or task manager its rule's labels name while it fires, under the source
/// `<token name>/<alertname>/<fingerprint>` with the alert's fingerprint, `startsAt`,
/// `alertname` and `generatorURL` as its details, and that report's retraction once it
/// resolves (unless its rule keeps the block for its duration). The same episode
/// (`fingerprint`, `startsAt`) delivered again changes nothing. All of a delivery is one
/// transaction, each alert decided on its own: a guardrail refuses an alert, not the
/// delivery. See docs/operations.md, "Alertmanager".
#[utoipa::path(
    post,
    path = "/webhooks/alertmanager",
    tag = "blocklist",
    params(DryRun),
    request_body(content = Payload, content_type = "application/json",
        description = "Alertmanager's webhook payload, version 4"),
    responses(
        (status = 200, description = "Everything that could be stored is durable: what became of each alert", body = Delivery,
            headers(("X-Blocklist-Revision" = u64, description = "The revision of the delivery's last change (the current one when nothing changed)"))),
        (status = 400, description = "Not Alertmanager's payload (bad JSON, a missing or mistyped field, another version): nothing was written", body = ErrorBody),
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
pub(super) async fn receive(
    State(state): State<AppState>,
    caller: Caller,
    dry: DryRun,
    KeyedBody(key, body): KeyedBody,
) -> Response {
    dry.answer(deliver(&state, &caller, dry, (key, body)).await)
}

async fn deliver(
    state: &AppState,
    caller: &Caller,
    dry: DryRun,
    (key, body): (Key, Value),
) -> Result<Response> {
    let payload = payload(body)?;
    if payload.alerts.len() > state.limits.max_batch {
        return Err(ApiError::PayloadTooLarge(format!(
            "the delivery has {} alerts; the limit is {} (--max-batch): set max_alerts in \
             the webhook's configuration",
            payload.alerts.len(),
            state.limits.max_batch
        )));
    }
    if payload.truncated_alerts > 0 {
        tracing::warn!(
            receiver = payload.receiver,
            truncated = payload.truncated_alerts,
            "Alertmanager left alerts out of a delivery (max_alerts): they are not seen"
        );
    }
    let detector = caller.name.as_deref().unwrap_or(alerts::DEFAULT_DETECTOR);
    let now = state.store.now();
    let mut results: Vec<AlertResult> = Vec::with_capacity(payload.alerts.len());
    let mut signals = Vec::new();
    // For each alert with a signal, its index among the signals.
    let mut signalled = Vec::with_capacity(payload.alerts.len());
    for alert in &payload.alerts {
        let mut result = AlertResult {
            fingerprint: alert.fingerprint.clone(),
            alertname: alert.name().to_owned(),
            outcome: "ignored",
            kind: None,
            id: None,
            reason: None,
        };
        match alerts::decide(alert, detector, now) {
            Decision::Signal(signal) => {
                let (kind, id) = match &signal {
                    Signal::Report(kind, item) => (*kind, item.id.clone()),
                    Signal::Retract(kind, retraction) => (*kind, retraction.id.clone()),
                };
                result.kind = Some(kind);
                result.id = Some(id);
                signalled.push(Some(signals.len()));
                signals.push(signal);
            }
            Decision::Kept => {
                result.outcome = "kept";
                signalled.push(None);
            }
            Decision::Ignored(reason) => {
                log_ignored_once(alert.name(), &reason);
                result.reason = Some(reason);
                signalled.push(None);
            }
        }
        results.push(result);
    }
    if signals.is_empty() {
        let delivery = delivered(results, &signalled, &[]);
        return Ok(dry.written(state.store.revision(), Json(delivery)));
    }
    // A retry with the same Idempotency-Key is answered as the first delivery was.
    let (decided, by) = (results.clone(), signalled.clone());
    let key = key.render(dry, move |outcomes: &Vec<Ingested>, revision| {
        let delivery = delivered(decided.clone(), &by, outcomes);
        Some(dry.written(revision, Json(delivery)))
    });
    let (outcomes, revision) = state
        .store
        .with_mode(dry.mode())
        .keyed(key)
        .ingest(signals, now)
        .await?;
    let delivery = delivered(results, &signalled, &outcomes);
    if !dry.is_set() {
        for result in &delivery.alerts {
            state
                .metrics
                .detectors
                .alert(result.outcome, &result.alertname);
        }
    }
    Ok(dry.written(revision, Json(delivery)))
}

/// The answer to a delivery: each alert's result (`results`, as decided before the store),
/// completed by what the store did with its signal (`signalled[i]`: the index of alert
/// `i`'s signal among `outcomes`), and the counts.
fn delivered(
    mut results: Vec<AlertResult>,
    signalled: &[Option<usize>],
    outcomes: &[Ingested],
) -> Delivery {
    for (result, at) in results.iter_mut().zip(signalled) {
        if let Some(ingested) = at.and_then(|at| outcomes.get(at)) {
            let (outcome, reason) = outcome_of(ingested);
            result.outcome = outcome;
            result.reason = reason;
        }
    }
    let mut counts = std::collections::BTreeMap::new();
    for result in &results {
        *counts.entry(result.outcome).or_insert(0) += 1;
    }
    Delivery {
        counts,
        alerts: results,
    }
}

/// An alert's outcome from what the store did with its signal, and why when refused.
fn outcome_of(ingested: &Ingested) -> (&'static str, Option<String>) {
    match ingested {
        Ingested::Reported(AddOutcome::Written { repeated: 0, .. }) => ("blocked", None),
        Ingested::Reported(AddOutcome::Written { .. }) => ("repeated", None),
        Ingested::Reported(AddOutcome::Refused(refusals)) => (
            "refused",
            Some(
                refusals
                    .iter()
                    .map(|r| format!("{}: {}", r.guard.as_str(), r.message))
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
        ),
        Ingested::Reported(AddOutcome::Conflict(_)) => {
            ("refused", Some("the item is already blocked".to_owned()))
        }
        Ingested::Retracted(Retracted::Kept(_) | Retracted::Ended(_)) => ("retracted", None),
        Ingested::Retracted(Retracted::Absent) => ("absent", None),
    }
}
