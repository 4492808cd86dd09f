//! The guardrails' values: `allowlist` entries and `meta/policy`. Frozen like every value
//! struct of [`super`].

use serde::{Deserialize, Serialize};

use super::{decode_framed, encode_framed, CodecError};
use super::{ALLOW_V1, POLICY_V1, POLICY_V2};
use crate::allowlist::Entry;
use crate::model::Kind;
use crate::policy::{Escalation, KindPolicy, Policy, Rate};

/// Allowlist value, format 1 (key: kind tag ++ id). Frozen like [`BlockV1`].
#[derive(Serialize, Deserialize)]
struct AllowV1 {
    prefix: bool,
    comment: String,
    added_by: Option<String>,
    added_at: i64,
    /// `None`: until removed.
    end: Option<i64>,
}

/// Policy value, format 1. Frozen like [`BlockV1`]; a percentage is a byte.
#[derive(Serialize, Deserialize)]
struct PolicyV1 {
    nodes: KindPolicyV1,
    task_managers: KindPolicyV1,
    min_registered: u64,
    max_block_duration_secs: Option<u64>,
    permanent_blocks_allowed: bool,
}

/// Policy value, format 2: format 1, then the escalation as `(factor, max_secs,
/// window_secs)`. Frozen like [`BlockV1`].
#[derive(Serialize, Deserialize)]
struct PolicyV2 {
    v1: PolicyV1,
    escalation: Option<(u32, u64, u64)>,
}

#[derive(Serialize, Deserialize)]
struct KindPolicyV1 {
    max_blocked_percent: Option<u8>,
    max_evacuating_percent: Option<u8>,
    max_blocked: Option<u64>,
    /// Per minute, burst.
    evacuations: Option<(u32, u32)>,
}

/// The `allowlist` value of `entry` (its kind and id are the key).
pub fn encode_allow(entry: &Entry) -> Vec<u8> {
    encode_framed(
        ALLOW_V1,
        &AllowV1 {
            prefix: entry.prefix,
            comment: entry.comment.clone(),
            added_by: entry.added_by.clone(),
            added_at: entry.added_at,
            end: entry.end_timestamp,
        },
    )
}

/// The entry of `(kind, id)` from its `allowlist` value.
pub fn decode_allow(kind: Kind, id: &str, bytes: &[u8]) -> Result<Entry, CodecError> {
    let value: AllowV1 = decode_framed(ALLOW_V1, bytes)?;
    Ok(Entry {
        kind,
        id: id.to_owned(),
        prefix: value.prefix,
        comment: value.comment,
        added_by: value.added_by,
        added_at: value.added_at,
        end_timestamp: value.end,
    })
}

pub fn encode_policy(policy: &Policy) -> Vec<u8> {
    let kind = |of: &KindPolicy| KindPolicyV1 {
        max_blocked_percent: of.max_blocked_percent,
        max_evacuating_percent: of.max_evacuating_percent,
        max_blocked: of.max_blocked,
        evacuations: of.evacuations.map(|r| (r.per_minute, r.burst)),
    };
    encode_framed(
        POLICY_V2,
        &PolicyV2 {
            v1: PolicyV1 {
                nodes: kind(&policy.nodes),
                task_managers: kind(&policy.task_managers),
                min_registered: policy.min_registered,
                max_block_duration_secs: policy.max_block_duration_secs,
                permanent_blocks_allowed: policy.permanent_blocks_allowed,
            },
            escalation: policy
                .escalation
                .map(|e| (e.factor, e.max_secs, e.window_secs)),
        },
    )
}

pub fn decode_policy(bytes: &[u8]) -> Result<Policy, CodecError> {
    let (value, escalation) = match bytes.first() {
        Some(&POLICY_V1) => (decode_framed::<PolicyV1>(POLICY_V1, bytes)?, None),
        _ => {
            let value: PolicyV2 = decode_framed(POLICY_V2, bytes)?;
            (value.v1, value.escalation)
        }
    };
    let kind = |of: KindPolicyV1| KindPolicy {
        max_blocked_percent: of.max_blocked_percent,
        max_evacuating_percent: of.max_evacuating_percent,
        max_blocked: of.max_blocked,
        evacuations: of
            .evacuations
            .map(|(per_minute, burst)| Rate { per_minute, burst }),
    };
    Ok(Policy {
        nodes: kind(value.nodes),
        task_managers: kind(value.task_managers),
        min_registered: value.min_registered,
        max_block_duration_secs: value.max_block_duration_secs,
        permanent_blocks_allowed: value.permanent_blocks_allowed,
        escalation: escalation.map(|(factor, max_secs, window_secs)| Escalation {
            factor,
            max_secs,
            window_secs,
        }),
    })
}
