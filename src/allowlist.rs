//! The allowlist: ids (exact, or every id with a prefix) that may never be blocked, each
//! with why, who said so and until when.
//!
//! Pure, like `policy`: the store keeps the entries (`allowlist` tree) and asks
//! [`Entry::matches`] inside the transaction of the write it guards.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::model::{Id, Kind};

/// The most prefix entries the allowlist holds: each add checks every one of them.
pub const MAX_PREFIX_ENTRIES: usize = 1_000;

/// The longest comment of an entry, in bytes.
pub const MAX_COMMENT_BYTES: usize = 1_024;

/// The comment of the entry a hold-off unblock puts in.
pub const HOLD_OFF_COMMENT: &str = "hold-off after an unblock";

/// One allowlist entry, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = AllowlistEntry)]
pub struct Entry {
    pub kind: Kind,
    /// The id, or with `prefix` the start of every id it covers.
    #[schema(value_type = Id)]
    pub id: String,
    /// Whether it covers every id starting with `id`.
    pub prefix: bool,
    /// Why the ids must never be blocked.
    pub comment: String,
    /// The name of the token that added it; `null` when the token has none.
    pub added_by: Option<String>,
    /// Unix ms when it was added (or last replaced).
    pub added_at: i64,
    /// Unix ms when it stops applying; `null`: until removed.
    pub end_timestamp: Option<i64>,
}

impl Entry {
    /// Whether it still applies at `now`.
    pub fn is_active(&self, now: i64) -> bool {
        self.end_timestamp.is_none_or(|end| end > now)
    }

    /// Whether it covers `id` (of its kind), ignoring its end.
    pub fn matches(&self, id: &str) -> bool {
        if self.prefix {
            id.starts_with(&self.id)
        } else {
            id == self.id
        }
    }

    /// The event data of a change to it.
    pub fn event_data(&self) -> String {
        serde_json::to_string(self).expect("entries serialize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, prefix: bool, end: Option<i64>) -> Entry {
        Entry {
            kind: Kind::Node,
            id: id.into(),
            prefix,
            comment: "c".into(),
            added_by: None,
            added_at: 0,
            end_timestamp: end,
        }
    }

    #[test]
    fn exact_and_prefix_entries() {
        assert!(entry("n1", false, None).matches("n1"));
        assert!(!entry("n1", false, None).matches("n10"));
        assert!(entry("db-", true, None).matches("db-7"));
        assert!(entry("db-", true, None).matches("db-"));
        assert!(!entry("db-", true, None).matches("web-1"));
    }

    #[test]
    fn an_entry_applies_until_its_end() {
        assert!(entry("n", false, None).is_active(i64::MAX - 1));
        assert!(entry("n", false, Some(10)).is_active(9));
        assert!(!entry("n", false, Some(10)).is_active(10));
    }
}
