//! Live reports: what each source that holds a block asks for, and the block they make.
//!
//! A block may be held by several sources (an alert, a second alert, an operator). Each
//! holds it by one *live report*: the FLIP-224 merge of everything that source reported of
//! the item since its first report, until it retracts it. The block is the FLIP-224 merge
//! of its live reports; when the last one is retracted, the block ends.
//!
//! The merge itself is [`merge_claim`], the one place the rule is written: [`Block::merge`]
//! applies it to a block, [`LiveReport::merge`] to one source's report, and
//! [`Block::held_by`] folds it over the live reports that are left after a retraction.
//!
//! While one source holds a block and its report carries no [`Details`], the store keeps
//! no copy of the report: the block is the report ([`LiveReport::implied`]). That is every
//! block FLIP-224 alone makes, so a plain add writes what it always wrote.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{merge_causes, validate_text, Action, Block};

/// The most sources whose reports of one block are kept apart. The reports of any further
/// source are merged into one more live report, [`OTHER_SOURCES`]'s: nothing FLIP-224
/// accepts is refused, and a roster stays small.
pub const MAX_HOLDERS: usize = 32;

/// The source of the live report that holds the reports of every source past the first
/// [`MAX_HOLDERS`]. No source retracts it alone (each of them retracts nothing); an unblock
/// ends it with the block, and a retraction naming it takes it back whole.
pub const OTHER_SOURCES: &str = "(other sources)";

/// The most entries a report's details hold.
pub const MAX_DETAILS: usize = 16;

/// The longest details key, in UTF-8 bytes.
pub const MAX_DETAILS_KEY_BYTES: usize = 64;

/// The longest details value, in UTF-8 bytes (a Prometheus generator URL fits).
pub const MAX_DETAILS_VALUE_BYTES: usize = 1024;

/// The most bytes of UTF-8 all keys and values of a report's details hold together: the
/// store's bound on a live report's size (`store::blobs`) counts on it.
pub const MAX_DETAILS_BYTES: usize = 4096;

/// What a detector keeps of its evidence with a report: the alert's fingerprint, when it
/// started, where it came from. Small, bounded ([`validate_details`]), shown with the
/// report and never interpreted, except that a report whose details equal those of its
/// source's live report is a repeat (see [`LiveReport::repeats`]).
pub type Details = BTreeMap<String, String>;

/// One source's live report of an item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LiveReport {
    /// Who holds the block by it.
    #[schema(min_length = 1, max_length = 128)]
    pub source: String,
    /// The FLIP-224 merge of what it reported: the strongest action, the latest end, the
    /// causes in arrival order.
    pub action: Action,
    /// Unix ms when it stops asking; 9223372036854775807 = permanent.
    #[serde(rename = "endTimestamp")]
    pub end: i64,
    pub cause: String,
    /// Unix ms of its first and last report.
    #[serde(rename = "firstReportTimestamp")]
    pub first_report: i64,
    #[serde(rename = "lastReportTimestamp")]
    pub last_report: i64,
    /// How many reports it merged (at least 1).
    #[serde(rename = "reportCount")]
    pub reports: u64,
    /// Its latest report's details (absent: none).
    #[serde(default, skip_serializing_if = "Details::is_empty")]
    #[schema(value_type = std::collections::HashMap<String, String>)]
    pub details: Details,
}

impl LiveReport {
    /// A source's first report of an item, at `at`.
    pub fn new(
        source: &str,
        (action, end, cause): (Action, i64, &str),
        at: i64,
        details: Details,
    ) -> LiveReport {
        LiveReport {
            source: source.to_owned(),
            action,
            end,
            cause: merge_causes("", cause),
            first_report: at,
            last_report: at,
            reports: 1,
            details,
        }
    }

    /// The report of a block held by its first source alone, which the store does not keep
    /// apart: the block itself, with every report the block received.
    pub fn implied(block: &Block) -> LiveReport {
        LiveReport {
            source: block.provenance.source.clone(),
            action: block.action,
            end: block.end,
            cause: block.cause.clone(),
            first_report: block.provenance.first_report,
            last_report: block.provenance.last_report,
            reports: block.provenance.reports,
            details: Details::new(),
        }
    }

    /// Merges the source's next report, made at `at`, into this one (FLIP-224). Non-empty
    /// details replace the kept ones: they describe the latest evidence.
    pub fn merge(&mut self, (action, end, cause): (Action, i64, &str), at: i64, details: &Details) {
        merge_claim(
            (&mut self.action, &mut self.end, &mut self.cause),
            (action, end, cause),
        );
        self.reports = self.reports.saturating_add(1);
        self.last_report = self.last_report.max(at);
        if !details.is_empty() {
            self.details.clone_from(details);
        }
    }

    /// Whether a report carrying `details` repeats this one: the same evidence delivered
    /// again (an alert's `(fingerprint, startsAt)` sent twice), which changes nothing.
    /// Reports without details never repeat: each is a report of its own, as in FLIP-224.
    pub fn repeats(&self, details: &Details) -> bool {
        !details.is_empty() && self.details == *details
    }

    /// Whether every entry of `wanted` is among this report's details (an empty `wanted`
    /// matches any report): a retraction conditional on the evidence it retracts.
    pub fn matches(&self, wanted: &Details) -> bool {
        wanted.iter().all(|(k, v)| self.details.get(k) == Some(v))
    }

    /// Whether it still asks for anything at `now`.
    pub fn is_active(&self, now: i64) -> bool {
        self.end > now
    }
}

/// The FLIP-224 merge rule, the only place it is written: the stronger action, the later
/// end (permanent wins), the causes as a set in arrival order.
pub fn merge_claim(
    (action, end, cause): (&mut Action, &mut i64, &mut String),
    (new_action, new_end, new_cause): (Action, i64, &str),
) {
    *action = (*action).max(new_action);
    *end = (*end).max(new_end);
    *cause = merge_causes(cause, new_cause);
}

impl Block {
    /// The block its live `reports` make at `now`: the FLIP-224 merge of those still
    /// active, in the order of their first reports; its start, provenance, forced and
    /// escalation records kept. `None` when no report is left: the block ends.
    pub fn held_by(&self, reports: &[LiveReport], now: i64) -> Option<Block> {
        let mut live: Vec<&LiveReport> = reports.iter().filter(|r| r.is_active(now)).collect();
        live.sort_by_key(|r| r.first_report);
        let (first, rest) = live.split_first()?;
        let mut block = self.clone();
        block.action = first.action;
        block.end = first.end;
        block.cause = merge_causes("", &first.cause);
        for report in rest {
            merge_claim(
                (&mut block.action, &mut block.end, &mut block.cause),
                (report.action, report.end, &report.cause),
            );
        }
        Some(block)
    }
}

/// Checks a report's details: at most [`MAX_DETAILS`] entries, each key 1 to
/// [`MAX_DETAILS_KEY_BYTES`] and each value at most [`MAX_DETAILS_VALUE_BYTES`] of UTF-8,
/// neither with control characters, all of them at most [`MAX_DETAILS_BYTES`]. The error
/// completes "details…".
pub fn validate_details(details: &Details) -> Result<(), String> {
    if details.len() > MAX_DETAILS {
        return Err(format!(
            " has {} entries; the limit is {MAX_DETAILS}",
            details.len()
        ));
    }
    let total: usize = details.iter().map(|(k, v)| k.len() + v.len()).sum();
    if total > MAX_DETAILS_BYTES {
        return Err(format!(
            " hold {total} bytes of keys and values; the limit is {MAX_DETAILS_BYTES}"
        ));
    }
    for (key, value) in details {
        validate_text(key, MAX_DETAILS_KEY_BYTES).map_err(|e| format!(" key {key:?} {e}"))?;
        if value.len() > MAX_DETAILS_VALUE_BYTES {
            return Err(format!(
                ".{key} is {} bytes long; the limit is {MAX_DETAILS_VALUE_BYTES} bytes of UTF-8",
                value.len()
            ));
        }
        if let Some(c) = value.chars().find(|c| c.is_control()) {
            return Err(format!(
                ".{key} contains the control character U+{:04X}; control characters are not \
                 allowed",
                u32::from(c)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Provenance, PERMANENT};

    const MB: Action = Action::MarkBlocked;
    const EV: Action = Action::MarkBlockedAndEvacuateTasks;

    fn report(source: &str, action: Action, end: i64, cause: &str, first: i64) -> LiveReport {
        LiveReport::new(source, (action, end, cause), first, Details::new())
    }

    fn block() -> Block {
        Block {
            action: EV,
            start: 10,
            end: PERMANENT,
            cause: "old".into(),
            forced: None,
            provenance: Provenance::first("alerts", 10),
            revision: 7,
            escalated: None,
        }
    }

    /// The rule, as a table: the live reports left, and the block they make at t = 100.
    #[test]
    fn a_block_is_the_merge_of_its_live_reports() {
        type Case<'a> = (&'a str, Vec<LiveReport>, Option<(Action, i64, &'a str)>);
        let cases: Vec<Case> = vec![
            ("none left: the block ends", vec![], None),
            (
                "one: exactly what it asks for",
                vec![report("op", MB, 5_000, "disk", 20)],
                Some((MB, 5_000, "disk")),
            ),
            (
                "two: the stronger action, the later end, the causes by first report",
                vec![
                    report("b", MB, 9_000, "net", 30),
                    report("a", EV, 5_000, "disk", 20),
                ],
                Some((EV, 9_000, "disk,net")),
            ),
            (
                "permanent wins",
                vec![
                    report("a", MB, PERMANENT, "x", 20),
                    report("b", MB, 9_000, "y", 30),
                ],
                Some((MB, PERMANENT, "x,y")),
            ),
            (
                "a report past its end asks for nothing",
                vec![
                    report("a", EV, 100, "gone", 20),
                    report("b", MB, 9_000, "kept", 30),
                ],
                Some((MB, 9_000, "kept")),
            ),
            (
                "only reports past their end: the block ends",
                vec![report("a", EV, 50, "gone", 20)],
                None,
            ),
            (
                "shared causes once",
                vec![
                    report("a", MB, 9_000, "disk,net", 20),
                    report("b", MB, 9_000, "net,disk,cpu", 30),
                ],
                Some((MB, 9_000, "disk,net,cpu")),
            ),
        ];
        for (name, reports, want) in cases {
            let got = block().held_by(&reports, 100);
            let got = got.as_ref().map(|b| (b.action, b.end, b.cause.as_str()));
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn what_the_live_reports_do_not_say_is_kept() {
        let held = block()
            .held_by(&[report("op", MB, 5_000, "disk", 20)], 100)
            .unwrap();
        assert_eq!(held.start, 10);
        assert_eq!(held.provenance, Provenance::first("alerts", 10));
        assert_eq!(held.revision, 7);
    }

    #[test]
    fn a_sources_reports_merge_by_flip_224_and_details_repeat() {
        let fired = Details::from([("fingerprint".to_owned(), "f1".to_owned())]);
        let mut r = LiveReport::new("am", (MB, 5_000, "disk"), 20, fired.clone());
        r.merge((EV, 4_000, "disk,smart"), 30, &Details::new());
        assert_eq!(
            (r.action, r.end, r.cause.as_str()),
            (EV, 5_000, "disk,smart")
        );
        assert_eq!((r.reports, r.first_report, r.last_report), (2, 20, 30));
        assert_eq!(
            r.details, fired,
            "a report without details keeps the evidence"
        );
        assert!(r.repeats(&fired));
        assert!(!r.repeats(&Details::new()), "no details: never a repeat");
        let again = Details::from([("fingerprint".to_owned(), "f2".to_owned())]);
        assert!(!r.repeats(&again));
        assert!(r.matches(&Details::new()) && r.matches(&fired) && !r.matches(&again));
    }

    #[test]
    fn the_implied_report_is_the_block() {
        let mut b = block();
        b.provenance.reports = 3;
        b.provenance.last_report = 40;
        let r = LiveReport::implied(&b);
        assert_eq!(r.source, "alerts");
        assert_eq!((r.action, r.end, r.cause.as_str()), (EV, PERMANENT, "old"));
        assert_eq!((r.first_report, r.last_report, r.reports), (10, 40, 3));
        assert_eq!(b.held_by(&[r], 100).unwrap(), b);
    }

    #[test]
    fn details_are_bounded() {
        let one = |k: &str, v: &str| Details::from([(k.to_owned(), v.to_owned())]);
        assert!(validate_details(&one("fingerprint", "abc")).is_ok());
        assert!(validate_details(&Details::new()).is_ok());
        assert!(validate_details(&one("", "v"))
            .unwrap_err()
            .contains("must not be empty"));
        assert!(validate_details(&one("k", "a\u{1}"))
            .unwrap_err()
            .contains("U+0001"));
        let long = "x".repeat(MAX_DETAILS_VALUE_BYTES + 1);
        assert!(validate_details(&one("k", &long))
            .unwrap_err()
            .contains("limit is 1024"));
        let many: Details = (0..=MAX_DETAILS)
            .map(|i| (i.to_string(), String::new()))
            .collect();
        assert!(validate_details(&many).unwrap_err().contains("limit is 16"));
        let big: Details = (0..5)
            .map(|i| (i.to_string(), "v".repeat(MAX_DETAILS_VALUE_BYTES)))
            .collect();
        assert!(validate_details(&big)
            .unwrap_err()
            .contains("limit is 4096"));
    }
}
