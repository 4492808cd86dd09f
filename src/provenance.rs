//! Provenance: the reports an item received, and the blocks an id had before.
//!
//! Every add element and every update of an item is a *report*: when, by whom (its source),
//! with what action, end and cause. An item keeps the most recent [`MAX_REPORTS`] of them and
//! a summary of all ([`crate::model::Provenance`]), so a detector that re-reports every minute
//! grows a count, not the item. When a block ends (removed, expired, or replaced by a new
//! block after its end) its final state becomes a *past block* of the id, with how it
//! ended; the store keeps a bounded number of them per id, for a bounded time.
//!
//! An unblock may also name its items by provenance rather than by id: a [`Selector`]
//! picks every active item of a kind that a source reported first, or whose cause says
//! something, or all of them.
//!
//! A source takes back its own report by a [`Retraction`]; a detector's reports and
//! retractions are its [`Signal`]s.
//!
//! Pure types and rules, like [`crate::model`]: the store writes them, the API shows them.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::model::{Action, Block, Details, Item, Kind, NewItem};

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

impl Block {
    /// The report that created the block, as the block itself tells it: its first report's
    /// time and source, its action, cause and end (the end asked for, before escalation
    /// lengthened it). While the block has that one report, and the report is exactly this,
    /// the store keeps no copy of it: a fresh add writes the item alone, and the report is
    /// stored at the block's next report ([`Block::implies_first`]).
    pub fn first_report(&self) -> Report {
        Report {
            timestamp: self.provenance.first_report,
            source: self.provenance.source.clone(),
            operation: Operation::Add,
            action: self.action,
            end_timestamp: self.requested_end(),
            cause: self.cause.clone(),
        }
    }

    /// Whether `report`, the only one the block has, is its [`Block::first_report`].
    pub fn implies_first(&self, report: &Report) -> bool {
        self.provenance.reports == 1
            && report.timestamp == self.provenance.first_report
            && report.source == self.provenance.source
            && report.operation == Operation::Add
            && report.action == self.action
            && report.end_timestamp == self.requested_end()
            && report.cause == self.cause
    }

    /// The end the block's creating add asked for.
    fn requested_end(&self) -> i64 {
        match self.escalated {
            Some(e) => self.start.saturating_add(e.requested_timeout),
            None => self.end,
        }
    }
}

/// What made a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    Add,
    Update,
    /// The source took its live report back; the report's action, end and cause are
    /// those of the live report it retracted.
    Retract,
}

/// How a past block ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Ended {
    /// It reached its end.
    Expired,
    /// Someone unblocked it (or an allowlist entry lifted it).
    Removed,
    /// The last source that held it retracted its report ([`crate::model::LiveReport`]).
    Retracted,
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
    /// The source of the unblock, or of the retraction that ended it; absent for an expiry.
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

/// Which items of a kind an unblock by selector takes: those that every part given matches
/// (the parts combine with AND). A selector with no part selects nothing: "all" is said
/// with [`Selector::all`], never by leaving the parts out.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    /// This source holds the item: it has a live report of it, whether it reported first
    /// or later. (The unblock then ends the block, whoever else holds it, as every unblock
    /// does; a source's own reports alone are taken back by a retraction.)
    pub source: Option<String>,
    /// The item's merged cause contains this text.
    pub cause: Option<String>,
    /// Every item: with another part given, that part alone narrows it.
    pub all: bool,
}

impl Selector {
    /// Whether no part is given (nothing is selected).
    pub fn is_empty(&self) -> bool {
        !self.all && self.source.is_none() && self.cause.is_none()
    }

    /// Whether `block`, held by `holders` (the store's roster: empty while its first source
    /// alone holds it), is one of the items it selects (active or not: that is the
    /// caller's to check).
    pub fn matches(&self, block: &Block, holders: &[String]) -> bool {
        let holds = |source: &String| {
            if holders.is_empty() {
                *source == block.provenance.source
            } else {
                holders.contains(source)
            }
        };
        !self.is_empty()
            && self.source.as_ref().is_none_or(holds)
            && self
                .cause
                .as_ref()
                .is_none_or(|cause| block.cause.contains(cause.as_str()))
    }
}

/// One retraction: `source`'s live report of `id`, if its details hold every entry of
/// `details` (empty: whatever they are).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retraction {
    pub id: String,
    pub source: String,
    pub details: Details,
    /// Why, kept with the past block when the retraction ends the block.
    pub reason: Option<String>,
}

/// One signal of a detector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    /// A report of an item, as an add element.
    Report(Kind, NewItem),
    /// A retraction of the source's report.
    Retract(Kind, Retraction),
}

impl Signal {
    /// The item it is about.
    pub fn item(&self) -> (Kind, &str) {
        match self {
            Signal::Report(kind, item) => (*kind, &item.id),
            Signal::Retract(kind, retraction) => (*kind, &retraction.id),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::Selector;
    use crate::model::{Action, Block, Provenance};

    fn block(source: &str, cause: &str) -> Block {
        Block {
            action: Action::MarkBlocked,
            start: 1,
            end: 2,
            cause: cause.to_owned(),
            forced: None,
            provenance: Provenance::first(source, 1),
            revision: 0,
            escalated: None,
        }
    }

    #[test]
    fn selector_parts_combine_with_and() {
        let b = block("detector-a", "disk,oom kill");
        let select = |source: Option<&str>, cause: Option<&str>, all: bool| Selector {
            source: source.map(str::to_owned),
            cause: cause.map(str::to_owned),
            all,
        };
        assert!(
            !select(None, None, false).matches(&b, &[]),
            "empty selects nothing"
        );
        assert!(select(None, None, true).matches(&b, &[]));
        assert!(select(Some("detector-a"), None, false).matches(&b, &[]));
        assert!(
            !select(Some("detector"), None, false).matches(&b, &[]),
            "source is exact"
        );
        assert!(
            select(None, Some("oom"), false).matches(&b, &[]),
            "cause is a substring"
        );
        assert!(select(None, Some("disk,oom"), false).matches(&b, &[]));
        assert!(select(Some("detector-a"), Some("disk"), true).matches(&b, &[]));
        assert!(!select(Some("detector-a"), Some("cpu"), false).matches(&b, &[]));
        assert!(!select(Some("detector-b"), Some("disk"), true).matches(&b, &[]));
        // Held by several sources: any of them selects it, the first or not.
        let holders = ["detector-b".to_owned(), "operator".to_owned()];
        assert!(select(Some("operator"), None, false).matches(&b, &holders));
        assert!(!select(Some("detector-a"), None, false).matches(&b, &holders));
    }
}
