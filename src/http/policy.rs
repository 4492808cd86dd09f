//! `/policy/status`: the guardrails in force and where each kind stands against them.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use utoipa::ToSchema;

use super::error::Unauthorized;
use super::state::AppState;
use crate::model::Kind;
use crate::policy::{slot, Rate, Standing};

pub fn router() -> Router<AppState> {
    Router::new().route("/policy/status", get(status))
}

/// The guardrails in force (set by the daemon's flags) and where each kind stands.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct PolicyStatus {
    task_managers: KindStatus,
    nodes: KindStatus,
    /// The longest a block may last from its request, in seconds; `null`: no limit.
    max_block_duration_secs: Option<u64>,
    /// Whether a permanent block is allowed.
    permanent_blocks_allowed: bool,
}

/// One kind against its guardrails.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct KindStatus {
    /// Items blocked, as the cap counts them (an item past its end counts until the sweeper
    /// has announced it, a few milliseconds).
    blocked: u64,
    /// The cap on blocked items; `null`: none.
    max_blocked: Option<u64>,
    /// How many more items the cap admits now; `null` without a cap.
    headroom: Option<u64>,
    /// The evacuation rate; `null`: none.
    evacuations: Option<EvacuationStatus>,
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

impl KindStatus {
    fn new(standing: &Standing, max_blocked: Option<u64>, rate: Option<Rate>) -> KindStatus {
        KindStatus {
            blocked: standing.blocked,
            max_blocked,
            headroom: max_blocked.map(|cap| cap.saturating_sub(standing.blocked)),
            evacuations: rate.map(|rate| EvacuationStatus {
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
/// A read: how close each kind is to its cap, and how many evacuations the rate admits now.
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
    let kind = |kind: Kind| {
        let stands = standing
            .iter()
            .find(|s| s.kind == kind)
            .expect("every kind stands");
        let i = slot(kind);
        KindStatus::new(stands, policy.max_items[i], policy.evacuations[i])
    };
    Json(PolicyStatus {
        task_managers: kind(Kind::TaskManager),
        nodes: kind(Kind::Node),
        max_block_duration_secs: policy
            .max_duration_ms
            .map(|ms| u64::try_from(ms / 1000).unwrap_or(0)),
        permanent_blocks_allowed: policy.allow_permanent,
    })
}
