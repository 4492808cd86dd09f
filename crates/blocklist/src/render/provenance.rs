//! Provenance: who reported an item and when (the summary line and the reports table of
//! `get`), and the blocks an id had before (the past blocks table of `get` and `history`).

use std::fmt::{Display, Write as _};

use blocklistd::model::PERMANENT;
use chrono::TimeZone;
use serde::Deserialize;

use super::{action_name, clean, local_time, relative, table, ItemView};

/// `GET /blocklist/{kind}/{id}`: the item (a node's with its task managers) and its most
/// recent reports, newest first.
#[derive(Debug, Deserialize)]
pub struct ItemDetailView {
    #[serde(flatten)]
    pub item: ItemView,
    #[serde(default)]
    pub reports: Vec<ReportView>,
    /// The live reports that hold the block, when kept apart (absent: `source` alone).
    #[serde(default, rename = "liveReports")]
    pub live_reports: Vec<LiveReportView>,
    /// What each enforcer reported it did about the block, by enforcer name.
    #[serde(default)]
    pub enforcement: std::collections::BTreeMap<String, EnforcementView>,
}

/// One source's live report of the item (`docs/api.md`, "Live reports and retraction").
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveReportView {
    pub source: String,
    pub action: String,
    pub end_timestamp: i64,
    pub cause: String,
    #[serde(default)]
    pub details: std::collections::BTreeMap<String, String>,
}

/// The live reports table of `get`: who holds the block, asking for what, with what
/// evidence.
pub fn live_reports_table<Tz: TimeZone>(live: &[LiveReportView], tz: &Tz) -> String
where
    Tz::Offset: Display,
{
    let rows: Vec<Vec<String>> = live
        .iter()
        .map(|r| {
            let details: Vec<String> = r.details.iter().map(|(k, v)| format!("{k}={v}")).collect();
            vec![
                clean(&r.source),
                action_name(&r.action).to_owned(),
                at(r.end_timestamp, tz),
                clean(&r.cause),
                if details.is_empty() {
                    "-".to_owned()
                } else {
                    clean(&details.join(" "))
                },
            ]
        })
        .collect();
    table(&["SOURCE", "ACTION", "END", "CAUSE", "DETAILS"], &rows)
}

/// One enforcer's status of the item (`docs/api.md`, "Enforcement").
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnforcementView {
    pub state: String,
    pub since: i64,
    #[serde(default)]
    pub detail: Option<String>,
    #[serde(default)]
    pub observed_revision: Option<u64>,
}

/// The enforcers' statuses of `get`, one line each: who, what, since when, and whether it
/// acted on an older revision of the item than `revision`.
pub fn enforcement_text<Tz: TimeZone>(
    statuses: &std::collections::BTreeMap<String, EnforcementView>,
    revision: u64,
    now_ms: i64,
    tz: &Tz,
) -> String
where
    Tz::Offset: Display,
{
    let mut text = String::new();
    for (enforcer, status) in statuses {
        let _ = write!(
            text,
            "  {}: {} since {} ({})",
            clean(enforcer),
            clean(&status.state),
            local_time(status.since, tz),
            relative(status.since - now_ms)
        );
        if let Some(detail) = &status.detail {
            let _ = write!(text, ": {}", clean(detail));
        }
        if status.observed_revision.is_some_and(|seen| seen < revision) {
            let _ = write!(text, " [has not seen the item's last change yet]");
        }
        text.push('\n');
    }
    text
}

/// One report of an item.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportView {
    pub timestamp: i64,
    pub source: String,
    pub operation: String,
    pub action: String,
    pub end_timestamp: i64,
    #[serde(default)]
    pub cause: String,
}

/// A past block of an id: the block as it ended, and how.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PastBlockView {
    #[serde(flatten)]
    pub item: ItemView,
    pub ended: EndingView,
}

/// How a past block ended.
#[derive(Debug, Clone, Deserialize)]
pub struct EndingView {
    pub how: String,
    pub timestamp: i64,
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
}

/// A time in a table of what happened: local time, "permanent" for the end that never
/// comes.
fn at<Tz: TimeZone>(ms: i64, tz: &Tz) -> String
where
    Tz::Offset: Display,
{
    if ms == PERMANENT {
        "permanent".to_owned()
    } else {
        local_time(ms, tz)
    }
}

/// The lines under an item in `get`: who blocked it and how often it was reported, its
/// `ETag` (for `update --if-match`), and how escalation lengthened it if it did.
pub fn provenance_text<Tz: TimeZone>(item: &ItemView, now_ms: i64, tz: &Tz) -> String
where
    Tz::Offset: Display,
{
    let reports = match item.report_count {
        1 => "1 report".to_owned(),
        n => format!("{n} reports"),
    };
    let last = if item.report_count > 1 {
        format!(
            ", the last {} ({})",
            local_time(item.last_report_timestamp, tz),
            relative(item.last_report_timestamp.saturating_sub(now_ms))
        )
    } else {
        String::new()
    };
    let mut text = format!(
        "blocked by {}: {reports}, the first {}{last}\nETag \"{}\"\n",
        clean(&item.source),
        local_time(item.first_report_timestamp, tz),
        item.revision
    );
    if !item.held_by.is_empty() {
        let _ = writeln!(text, "held by {}", clean(&item.held_by.join(", ")));
    }
    if let Some(escalated) = &item.escalated {
        let _ = writeln!(
            text,
            "escalated: {} instead of the {} asked for, after {} past block{}",
            duration(escalated.timeout),
            duration(escalated.requested_timeout),
            escalated.past_blocks,
            if escalated.past_blocks == 1 { "" } else { "s" }
        );
    }
    text
}

/// A span of ms the way `relative` says it, without "in".
fn duration(ms: i64) -> String {
    relative(ms).trim_start_matches("in ").to_owned()
}

/// The reports table of `get`, newest first as the daemon lists them.
pub fn reports_table<Tz: TimeZone>(reports: &[ReportView], tz: &Tz) -> String
where
    Tz::Offset: Display,
{
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            vec![
                local_time(r.timestamp, tz),
                clean(&r.source),
                clean(&r.operation),
                action_name(&r.action).to_owned(),
                at(r.end_timestamp, tz),
                if r.cause.is_empty() {
                    "-".to_owned()
                } else {
                    clean(&r.cause)
                },
            ]
        })
        .collect();
    table(
        &["TIME", "SOURCE", "OPERATION", "ACTION", "END", "CAUSE"],
        &rows,
    )
}

/// The past blocks table of `get` and `history`, newest first as the daemon lists them:
/// when each started and was to end, how and when it ended, by whom and why.
pub fn past_blocks_table<Tz: TimeZone>(past: &[PastBlockView], tz: &Tz) -> String
where
    Tz::Offset: Display,
{
    let rows: Vec<Vec<String>> = past
        .iter()
        .map(|p| {
            vec![
                local_time(p.item.start_timestamp, tz),
                at(p.item.end_timestamp, tz),
                clean(&p.ended.how),
                local_time(p.ended.timestamp, tz),
                p.ended
                    .source
                    .as_deref()
                    .map_or_else(|| "-".to_owned(), clean),
                p.ended
                    .reason
                    .as_deref()
                    .map_or_else(|| "-".to_owned(), clean),
            ]
        })
        .collect();
    table(&["START", "END", "ENDED", "WHEN", "BY", "REASON"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use serde_json::json;

    const NOW: i64 = 1_900_000_000_000; // 2030-03-17 17:46:40 UTC
    const MIN: i64 = 60_000;

    #[test]
    fn an_items_provenance_and_reports() {
        let detail: ItemDetailView = serde_json::from_value(json!({
            "id": "tm-1", "action": "MARK_BLOCKED", "startTimestamp": NOW - 10 * MIN,
            "endTimestamp": PERMANENT, "cause": "oom,disk", "source": "det-a",
            "reportCount": 2, "firstReportTimestamp": NOW - 10 * MIN,
            "lastReportTimestamp": NOW - 5 * MIN, "revision": 7,
            "escalated": {"requestedTimeout": 3_600_000, "timeout": 7_200_000, "pastBlocks": 1},
            "reports": [
                {"timestamp": NOW - 5 * MIN, "source": "operator:bob", "operation": "update",
                 "action": "MARK_BLOCKED", "endTimestamp": PERMANENT, "cause": ""},
                {"timestamp": NOW - 10 * MIN, "source": "det-a", "operation": "add",
                 "action": "MARK_BLOCKED", "endTimestamp": NOW + 50 * MIN, "cause": "oom\n"},
            ],
        }))
        .unwrap();
        assert_eq!(
            provenance_text(&detail.item, NOW, &Utc),
            "blocked by det-a: 2 reports, the first 2030-03-17 17:36:40, the last \
             2030-03-17 17:41:40 (5m ago)\n\
             ETag \"7\"\n\
             escalated: 2h instead of the 1h asked for, after 1 past block\n"
        );
        assert_eq!(
            reports_table(&detail.reports, &Utc),
            "TIME                 SOURCE        OPERATION  ACTION  END                  CAUSE\n\
             2030-03-17 17:41:40  operator:bob  update     block   permanent            -\n\
             2030-03-17 17:36:40  det-a         add        block   2030-03-17 18:36:40  oom\\n\n"
        );
    }

    #[test]
    fn past_blocks() {
        let past: Vec<PastBlockView> = serde_json::from_value(json!([
            {"id": "n1", "action": "MARK_BLOCKED", "startTimestamp": NOW - 60 * MIN,
             "endTimestamp": PERMANENT, "cause": "disk", "source": "det-a",
             "ended": {"how": "removed", "timestamp": NOW - 30 * MIN,
                       "source": "operator:alice", "reason": "disk replaced"}},
            {"id": "n1", "action": "MARK_BLOCKED", "startTimestamp": NOW - 120 * MIN,
             "endTimestamp": NOW - 90 * MIN, "cause": "disk", "source": "det-a",
             "ended": {"how": "expired", "timestamp": NOW - 90 * MIN}},
        ]))
        .unwrap();
        assert_eq!(
            past_blocks_table(&past, &Utc),
            "START                END                  ENDED    WHEN                 BY              REASON\n\
             2030-03-17 16:46:40  permanent            removed  2030-03-17 17:16:40  operator:alice  disk replaced\n\
             2030-03-17 15:46:40  2030-03-17 16:16:40  expired  2030-03-17 16:16:40  -               -\n"
        );
    }
}
