//! Provenance: the reports an item received, and the blocks an id had before.
//!
//! Every add element and every update of an item is a *report*: when, by whom (its source),
//! with what action, end and cause. An item keeps the most recent [`MAX_REPORTS`] of them and
//! a summary of all ([`crate::model::Provenance`]), so a detector that re-reports every minute
//! grows a count, not the item. When a block ends (removed, expired, or replaced by a new
//! block after its end) its final state becomes a *past block* of the id, with how it
//! ended; the store keeps a bounded number of them per id, for a bounded time.
//!
//! Pure types and rules, like [`crate::model`]: the store writes them, the API shows them.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::model::{Action, Item};

/// How many reports an item keeps: the most recent ones (the count goes on).
pub const MAX_REPORTS: u64 = 32;

/// The longest reason an unblock may give, in UTF-8 bytes.
pub const MAX_REASON_BYTES: usize = 1024;

/// One report of an item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Report {
    /// Unix ms of the report (its request).
    pub timestamp: i64,
    /// Who made it.
    #[schema(min_length = 1, max_length = 128)]
    pub source: String,
    /// `add` for an add element (new or merged), `update` for a `PATCH`.
    pub operation: Operation,
    /// The action it asked for (for an update: the item's action after it).
    pub action: Action,
    /// The end it asked for (for an update: the item's end after it); 9223372036854775807 =
    /// permanent.
    pub end_timestamp: i64,
    /// The cause it gave (empty for an update that appended none).
    pub cause: String,
}

/// What made a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    Add,
    Update,
}

/// How a past block ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Ended {
    /// It reached its end.
    Expired,
    /// Someone unblocked it (or an allowlist entry lifted it).
    Removed,
}

/// Who ended a block and why: what an unblock says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Unblock {
    /// The unblocking request's source.
    pub source: Option<String>,
    /// `?reason=` or the body's `reason`.
    pub reason: Option<String>,
}

/// How one past block of an id ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Ending {
    pub how: Ended,
    /// Unix ms: when it was removed, or when its end was announced.
    pub timestamp: i64,
    /// The source of the unblock; absent for an expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The unblock's reason, when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A block an id had: its final state and how it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PastBlock {
    #[serde(flatten)]
    pub item: Item,
    pub ended: Ending,
}

/// Checks an unblock's reason: at most [`MAX_REASON_BYTES`] of UTF-8. The error text
/// completes "reason …".
pub fn validate_reason(reason: &str) -> Result<(), String> {
    if reason.len() > MAX_REASON_BYTES {
        return Err(format!(
            "is {} bytes long; the limit is {MAX_REASON_BYTES} bytes of UTF-8",
            reason.len()
        ));
    }
    Ok(())
}
