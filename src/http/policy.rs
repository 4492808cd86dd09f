//! `/policy`: the guardrail policy (read, replace) and `/policy/status`, where each kind
//! stands against it.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use utoipa::ToSchema;

use super::caller::{Caller, Role};
use super::error::{
    ApiError, ErrorBody, Forbidden, Internal, Result, Unauthorized, Unavailable,
    UnsupportedMediaType,
};
use super::extract::{whole_floats_as_integers, DryRun};
use super::idempotency::KeyedBody;
use super::reply::with_revision;
use super::state::AppState;
use crate::model::Kind;
use crate::policy::{Policy, Standing};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/policy", get(get_policy).put(put_policy))
        .route("/policy/status", get(status))
}

/// The guardrail policy in force
///
/// A read: every guard of each kind, `null` where it is off.
#[utoipa::path(
    get,
    path = "/policy",
    tag = "policy",
    responses(
        (status = 200, description = "The policy", body = Policy,
            headers(("X-Blocklist-Revision" = u64, description = "The revision this read reflects"))),
        (status = 401, response = Unauthorized),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security((), ("bearerAuth" = [])),
)]
pub(super) async fn get_policy(State(state): State<AppState>) -> Result<Response> {
    let (policy, revision) = state.store.policy().await?;
    Ok(with_revision(revision, Json(policy)))
}

/// Replace the guardrail policy
///
/// Every field is required (a replace); it is stored durably, in force for every write
/// committed after it, and a change is a `policy` event in the feed. Admin tokens only.
#[utoipa::path(
    put,
    path = "/policy",
    tag = "policy",
    params(DryRun),
    request_body(content = Policy, content_type = "application/json"),
    responses(
        (status = 200, description = "The policy now in force (the same again changes nothing)", body = Policy,
            headers(("X-Blocklist-Revision" = u64, description = "The revision of the change"))),
        (status = 400, description = "Malformed: every problem, naming its field", body = ErrorBody),
        (status = 401, response = Unauthorized),
        (status = 403, response = Forbidden),
        (status = 415, response = UnsupportedMediaType),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security((), ("bearerAuth" = [])),
)]
pub(super) async fn put_policy(
    State(state): State<AppState>,
    caller: Caller,
    dry: DryRun,
    KeyedBody(key, mut body): KeyedBody,
) -> Response {
    let result = async {
        caller.require(Role::Admin, "changing the guardrail policy")?;
        whole_floats_as_integers(&mut body);
        let policy: Policy = serde_path_to_error::deserialize(body).map_err(|e| {
            let path = e.path().to_string();
            let at = if path == "." {
                String::new()
            } else {
                format!("{path}: ")
            };
            ApiError::bad_request(format!("{at}{}", e.into_inner()))
        })?;
        let problems = policy.problems();
        if !problems.is_empty() {
            return Err(ApiError::BadRequest(problems));
        }
        let kept = policy.clone();
        let key = key.render(dry, move |_: &bool, revision| {
            Some(dry.written(revision, (StatusCode::OK, Json(&kept))))
        });
        let (changed, revision) = state
            .store
            .with_mode(dry.mode())
            .keyed(key)
            .set_policy(policy.clone())
            .await?;
        if changed {
            tracing::warn!(
                by = caller.name.as_deref().unwrap_or("(unnamed token)"),
                dry_run = dry.mode() == crate::store::Mode::DryRun,
                "the guardrail policy changed"
            );
        }
        Ok(dry.written(revision, (StatusCode::OK, Json(policy))))
    }
    .await;
    dry.answer(result)
}

/// Where the guardrails stand: the policy, and each kind against it.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct PolicyStatus {
    task_managers: KindStatus,
    nodes: KindStatus,
    /// The share caps apply to a kind with at least this many registered ids.
    min_registered: u64,
    /// The longest a block may last from its request, in seconds; `null`: no limit.
    max_block_duration_secs: Option<u64>,
    /// Whether a permanent block is allowed.
    permanent_blocks_allowed: bool,
}

/// One kind against its guardrails.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct KindStatus {
    /// Items of the kind stored, as the count cap counts them (an item past its end counts
    /// until the sweeper has announced it, a few milliseconds).
    items: u64,
    /// The cap on items; `null`: none.
    max_blocked: Option<u64>,
    /// How many more items the cap admits now; `null` without a cap.
    headroom: Option<u64>,
    /// Registered ids of the kind (a node is registered while a task manager is registered
    /// on it).
    registered: u64,
    /// The share cap of registered ids effectively blocked.
    blocked_share: ShareStatus,
    /// The share cap of registered ids effectively evacuating.
    evacuating_share: ShareStatus,
    /// The evacuation rate; `null`: none.
    evacuations: Option<EvacuationStatus>,
}

/// A share cap's figure against its cap.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct ShareStatus {
    /// Registered ids it counts now.
    current: u64,
    /// The cap's percentage; `null`: off.
    percent: Option<u8>,
    /// The cap in ids; `null` when off or not applying (fewer than `minRegistered`
    /// registered).
    cap: Option<u64>,
    /// How many more ids it admits now; `null` when it does not apply.
    headroom: Option<u64>,
}

/// A kind's evacuation rate and its bucket.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct EvacuationStatus {
    per_minute: u32,
    burst: u32,
    /// New evacuations the bucket admits now (whole tokens).
    available: u32,
}

impl ShareStatus {
    fn new(current: u64, percent: Option<u8>, cap: Option<u64>) -> ShareStatus {
        ShareStatus {
            current,
            percent,
            cap,
            headroom: cap.map(|cap| cap.saturating_sub(current)),
        }
    }
}

impl KindStatus {
    fn new(standing: &Standing, policy: &Policy) -> KindStatus {
        let of = policy.of(standing.kind);
        let share = |current, percent| {
            ShareStatus::new(
                current,
                percent,
                policy.share_cap(percent, standing.registered),
            )
        };
        KindStatus {
            items: standing.items,
            max_blocked: of.max_blocked,
            headroom: of.max_blocked.map(|cap| cap.saturating_sub(standing.items)),
            registered: standing.registered,
            blocked_share: share(standing.blocked, of.max_blocked_percent),
            evacuating_share: share(standing.evacuating, of.max_evacuating_percent),
            evacuations: of.evacuations.map(|rate| EvacuationStatus {
                per_minute: rate.per_minute,
                burst: rate.burst,
                // A level never exceeds the burst, a u32.
                #[expect(clippy::cast_possible_truncation, reason = "0 ≤ level ≤ burst")]
                available: standing.evacuation_tokens.unwrap_or(0.0).floor() as u32,
            }),
        }
    }
}

/// Where the guardrails stand
///
/// A read: how close each kind is to each cap, and how many evacuations the rate admits
/// now. The figures are those of the last commit.
#[utoipa::path(
    get,
    path = "/policy/status",
    tag = "policy",
    responses(
        (status = 200, description = "The guardrails and where each kind stands", body = PolicyStatus),
        (status = 401, response = Unauthorized),
    ),
    security((), ("bearerAuth" = [])),
)]
pub(super) async fn status(State(state): State<AppState>) -> Json<PolicyStatus> {
    let (policy, standing) = state.store.guard_standing(state.store.now());
    Json(policy_status(&policy, &standing))
}

/// The status document of `policy` with the kinds standing so.
pub(super) fn policy_status(policy: &Policy, standing: &[Standing; 2]) -> PolicyStatus {
    let kind = |kind: Kind| {
        let stands = standing
            .iter()
            .find(|s| s.kind == kind)
            .expect("every kind stands");
        KindStatus::new(stands, policy)
    };
    PolicyStatus {
        task_managers: kind(Kind::TaskManager),
        nodes: kind(Kind::Node),
        min_registered: policy.min_registered,
        max_block_duration_secs: policy.max_block_duration_secs,
        permanent_blocks_allowed: policy.permanent_blocks_allowed,
    }
}
