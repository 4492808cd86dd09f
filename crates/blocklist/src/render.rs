//! Human output: tables, end times as local time plus "in 59m", check answers and feed
//! events; the guardrail policy in [`policy`], allowlist entries in [`allow`], reports and
//! past blocks in [`provenance`]. Pure: every
//! function takes `now` and the time zone, so tests pin both.

use std::fmt::Display;

use blocklistd::model::PERMANENT;
use chrono::{DateTime, TimeZone};
use serde::Deserialize;
use serde_json::Value;

mod allow;
mod policy;
mod provenance;

pub use allow::{
    allow_table, entry_end, entry_subject, AllowPutView, AllowlistView, EntryView, RemovalView,
};
pub use policy::{policy_status_text, policy_table};
pub use provenance::{
    enforcement_text, live_reports_table, past_blocks_table, provenance_text, reports_table,
    ItemDetailView, PastBlockView,
};

/// An item as the API shows it. Deserialized leniently (unknown fields ignored, optional
/// ones defaulted) so a newer daemon adding fields does not break an older client.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemView {
    /// Present in check answers and feed events; listings imply it.
    #[serde(default)]
    pub kind: Option<String>,
    pub id: String,
    pub action: String,
    pub end_timestamp: i64,
    pub cause: String,
    /// Node entries only: the task managers registered on the node.
    #[serde(default)]
    pub task_managers: Option<Vec<String>>,
    /// Present when the block was let in past guardrails by `--force`.
    #[serde(default)]
    pub forced: Option<ForcedView>,
    #[serde(default)]
    pub start_timestamp: i64,
    /// Who made the first report (who blocked it).
    #[serde(default = "unknown")]
    pub source: String,
    #[serde(default = "one")]
    pub report_count: u64,
    #[serde(default)]
    pub first_report_timestamp: i64,
    #[serde(default)]
    pub last_report_timestamp: i64,
    /// The revision of its last change: its `ETag`.
    #[serde(default)]
    pub revision: u64,
    /// Present when escalation lengthened the add that created it.
    #[serde(default)]
    pub escalated: Option<EscalatedView>,
    /// The sources that hold it, when that is not `source` alone.
    #[serde(default)]
    pub held_by: Vec<String>,
}

impl ItemView {
    /// The sources that hold it: `heldBy`, or its `source` alone.
    pub fn holders(&self) -> Vec<String> {
        if self.held_by.is_empty() {
            vec![self.source.clone()]
        } else {
            self.held_by.clone()
        }
    }
}

fn unknown() -> String {
    "unknown".to_owned()
}

fn one() -> u64 {
    1
}

/// An item's `escalated`: the timeout asked for, the one applied, after how many past
/// blocks.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EscalatedView {
    pub requested_timeout: i64,
    pub timeout: i64,
    pub past_blocks: u32,
}

/// An item's `forced`: which guards a forced write passed, by whom, when.
#[derive(Debug, Clone, Deserialize)]
pub struct ForcedView {
    #[serde(default)]
    pub guards: Vec<String>,
    #[serde(default)]
    pub by: Option<String>,
    pub at: i64,
}

/// `GET /blocklist`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Listing {
    pub blocked_task_managers: Vec<ItemView>,
    pub blocked_nodes: Vec<ItemView>,
}

/// `GET /blocklist/check/...`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckView {
    pub id: String,
    #[serde(default)]
    pub node: Option<String>,
    pub blocked: bool,
    #[serde(default)]
    pub action: Option<String>,
    #[serde(default)]
    pub blocked_by: Vec<ItemView>,
}

/// How a forced block was let in: `forced past blocked-share by alice at 2030-…` (no
/// "by" when the token has no name, or the daemon takes no tokens).
pub fn forced_text<Tz: TimeZone>(forced: &ForcedView, tz: &Tz) -> String
where
    Tz::Offset: Display,
{
    let guards = if forced.guards.is_empty() {
        "the guardrails".to_owned()
    } else {
        let guards: Vec<String> = forced.guards.iter().map(|g| clean(g)).collect();
        guards.join(", ")
    };
    let by = forced
        .by
        .as_deref()
        .map_or_else(String::new, |by| format!(" by {}", clean(by)));
    format!("forced past {guards}{by} at {}", local_time(forced.at, tz))
}

/// The short action names the CLI accepts, so what the table shows can be typed back.
pub fn action_name(action: &str) -> &str {
    match action {
        "MARK_BLOCKED" => "block",
        "MARK_BLOCKED_AND_EVACUATE_TASKS" => "evacuate",
        other => other,
    }
}

/// Escapes control characters (causes may hold newlines or terminal escape sequences,
/// which would break a table or a terminal); everything else is shown as it is.
pub fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A time difference the way people say it: "in 59m", "in 1h 59m", "3d 4h ago", "now".
/// Rounded down to the unit shown: a block with 59m 59s left shows "in 59m", so the text
/// never promises more time than is left.
pub fn relative(delta_ms: i64) -> String {
    let secs = delta_ms.unsigned_abs() / 1000;
    if secs == 0 {
        return "now".into();
    }
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    let span = match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m"),
        (0, _, 0) => format!("{h}h"),
        (0, _, _) => format!("{h}h {m}m"),
        (_, 0, _) => format!("{d}d"),
        (_, _, _) => format!("{d}d {h}h"),
    };
    if delta_ms > 0 {
        format!("in {span}")
    } else {
        format!("{span} ago")
    }
}

/// A unix-ms time in `tz`, e.g. `2030-01-31 18:00:00`; out-of-range values as raw ms.
pub fn local_time<Tz: TimeZone>(ms: i64, tz: &Tz) -> String
where
    Tz::Offset: Display,
{
    match DateTime::from_timestamp_millis(ms) {
        Some(t) => t.with_timezone(tz).format("%Y-%m-%d %H:%M:%S").to_string(),
        None => format!("unix ms {ms}"),
    }
}

/// When an item ends: "permanent", or its local time and how far away it is.
pub fn end_time<Tz: TimeZone>(end_ms: i64, now_ms: i64, tz: &Tz) -> String
where
    Tz::Offset: Display,
{
    if end_ms == PERMANENT {
        return "permanent".into();
    }
    format!(
        "{} ({})",
        local_time(end_ms, tz),
        relative(end_ms.saturating_sub(now_ms))
    )
}

/// Left-aligned columns two spaces apart; the last column is not padded, so a long cause
/// only makes its own line long.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header_row: Vec<String> = headers
        .iter()
        .map(std::string::ToString::to_string)
        .collect();
    for row in std::iter::once(&header_row).chain(rows) {
        let last = row.len().saturating_sub(1);
        for (i, cell) in row.iter().enumerate() {
            if i == last {
                out.push_str(cell);
            } else {
                out.push_str(cell);
                let pad = widths[i] - cell.chars().count() + 2;
                out.push_str(&" ".repeat(pad));
            }
        }
        out.push('\n');
    }
    out
}

/// The blocklist table: one row per item, `kind` given for each (listings do not carry
/// it inside the items).
pub fn items_table<Tz: TimeZone>(items: &[(&str, &ItemView)], now_ms: i64, tz: &Tz) -> String
where
    Tz::Offset: Display,
{
    items_table_with(items, &Enforcement::new(), now_ms, tz)
}

/// What enforcers report about each item, by `(kind, id)`: `blocklist-kube: enforced`.
pub type Enforcement = std::collections::BTreeMap<(String, String), String>;

/// [`items_table`] with an `ENFORCEMENT` column when any item has a status in `statuses`
/// (`-` for one without).
pub fn items_table_with<Tz: TimeZone>(
    items: &[(&str, &ItemView)],
    statuses: &Enforcement,
    now_ms: i64,
    tz: &Tz,
) -> String
where
    Tz::Offset: Display,
{
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|(kind, item)| {
            let mut row = vec![
                kind.to_string(),
                clean(&item.id),
                action_name(&item.action).to_owned(),
                end_time(item.end_timestamp, now_ms, tz),
                clean(&item.cause),
            ];
            if !statuses.is_empty() {
                let key = (kind.to_string(), item.id.clone());
                row.push(
                    statuses
                        .get(&key)
                        .map_or_else(|| "-".to_owned(), |s| clean(s)),
                );
            }
            row
        })
        .collect();
    if statuses.is_empty() {
        table(&["KIND", "ID", "ACTION", "ENDS", "CAUSE"], &rows)
    } else {
        table(
            &["KIND", "ID", "ACTION", "ENDS", "CAUSE", "ENFORCEMENT"],
            &rows,
        )
    }
}

/// The human answer of `check`: one sentence, then the items that block it.
pub fn check_text<Tz: TimeZone>(kind: &str, answer: &CheckView, now_ms: i64, tz: &Tz) -> String
where
    Tz::Offset: Display,
{
    let who = match (kind, &answer.node) {
        ("node", _) => format!("node {}", clean(&answer.id)),
        (_, Some(node)) => format!(
            "task manager {} (on node {})",
            clean(&answer.id),
            clean(node)
        ),
        (_, None) => format!(
            "task manager {} (not registered on a node)",
            clean(&answer.id)
        ),
    };
    if !answer.blocked {
        return format!("{who} is not blocked\n");
    }
    let action = answer.action.as_deref().map_or("?", action_name);
    let rows: Vec<(&str, &ItemView)> = answer
        .blocked_by
        .iter()
        .map(|item| (item.kind.as_deref().unwrap_or("?"), item))
        .collect();
    format!(
        "{who} is blocked: {action}\n{}",
        items_table(&rows, now_ms, tz)
    )
}

/// One line of `watch`: `REV EVENT KIND ID: …`. Data that is not what blocklistd sends is
/// shown raw rather than dropped.
pub fn event_line<Tz: TimeZone>(
    revision: u64,
    event: &str,
    data: &Value,
    now_ms: i64,
    tz: &Tz,
) -> String
where
    Tz::Offset: Display,
{
    let event = clean(event);
    if matches!(event.as_str(), "registered" | "unregistered") {
        if let (Some(tm), Some(node)) = (data["id"].as_str(), data["node"].as_str()) {
            let preposition = if event == "registered" { "on" } else { "from" };
            return format!(
                "{revision} {event} taskmanager {} {preposition} node {}",
                clean(tm),
                clean(node)
            );
        }
    }
    if matches!(
        event.as_str(),
        "allowlisted" | "unallowlisted" | "allowlist-expired"
    ) {
        if let Ok(entry) = EntryView::deserialize(data) {
            return format!(
                "{revision} {event} {}: {}, comment \"{}\"",
                entry_subject(&entry),
                entry_end(&entry, now_ms, tz),
                clean(&entry.comment)
            );
        }
    }
    match ItemView::deserialize(data) {
        Ok(item) => format!(
            "{revision} {event} {} {}: {}, ends {}, cause \"{}\"",
            clean(item.kind.as_deref().unwrap_or("?")),
            clean(&item.id),
            action_name(&item.action),
            end_time(item.end_timestamp, now_ms, tz),
            clean(&item.cause),
        ),
        Err(_) => format!("{revision} {event} {}", clean(&data.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{FixedOffset, Utc};
    use serde_json::json;

    const MIN: i64 = 60_000;
    const HOUR: i64 = 60 * MIN;
    const DAY: i64 = 24 * HOUR;

    #[test]
    fn relative_times_round_down_to_the_unit_shown() {
        assert_eq!(relative(HOUR - 1), "in 59m");
        assert_eq!(relative(HOUR), "in 1h");
        assert_eq!(relative(2 * HOUR - 1000), "in 1h 59m");
        assert_eq!(relative(45_999), "in 45s");
        assert_eq!(relative(7 * DAY), "in 7d");
        assert_eq!(relative(7 * DAY - 1), "in 6d 23h");
        assert_eq!(relative(DAY + 5 * MIN), "in 1d");
        assert_eq!(relative(999), "now");
        assert_eq!(relative(0), "now");
        assert_eq!(relative(-5 * MIN), "5m ago");
        assert_eq!(relative(i64::MIN), "106751991167d 7h ago");
    }

    #[test]
    fn end_times() {
        let now = 1_900_000_000_000; // 2030-03-17 17:46:40 UTC
        assert_eq!(end_time(PERMANENT, now, &Utc), "permanent");
        assert_eq!(
            end_time(now + HOUR - 1, now, &Utc),
            "2030-03-17 18:46:39 (in 59m)"
        );
        let cet = FixedOffset::east_opt(3600).unwrap();
        assert_eq!(
            end_time(now + 2 * HOUR, now, &cet),
            "2030-03-17 20:46:40 (in 2h)"
        );
        assert_eq!(
            end_time(now - 1000, now, &Utc),
            "2030-03-17 17:46:39 (1s ago)"
        );
        // Beyond chrono's range but not the permanent marker.
        assert_eq!(
            end_time(i64::MAX - 1, now, &Utc),
            format!(
                "unix ms {} ({})",
                i64::MAX - 1,
                relative(i64::MAX - 1 - now)
            )
        );
    }

    #[test]
    fn tables_align_and_leave_the_last_column_ragged() {
        let out = table(
            &["KIND", "ID", "CAUSE"],
            &[
                vec!["node".into(), "n1".into(), "disk".into()],
                vec!["taskmanager".into(), "tm-üü".into(), "a long cause".into()],
            ],
        );
        assert_eq!(
            out,
            "KIND         ID     CAUSE\n\
             node         n1     disk\n\
             taskmanager  tm-üü  a long cause\n"
        );
    }

    fn item(value: Value) -> ItemView {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn items_table_shows_short_actions_local_ends_and_clean_causes() {
        let now = 1_900_000_000_000;
        let n1 = item(
            json!({"id": "n1", "action": "MARK_BLOCKED_AND_EVACUATE_TASKS",
            "startTimestamp": 1, "endTimestamp": PERMANENT, "cause": "disk\nerrors\u{1b}[31m",
            "taskManagers": ["tm-1"]}),
        );
        let tm = item(
            json!({"id": "tm 7", "action": "MARK_BLOCKED", "startTimestamp": 1,
            "endTimestamp": now + 30 * MIN, "cause": "oom", "someFutureField": true}),
        );
        let out = items_table(&[("taskmanager", &tm), ("node", &n1)], now, &Utc);
        assert_eq!(
            out,
            "KIND         ID    ACTION    ENDS                          CAUSE\n\
             taskmanager  tm 7  block     2030-03-17 18:16:40 (in 30m)  oom\n\
             node         n1    evacuate  permanent                     disk\\nerrors\\u{1b}[31m\n"
        );
    }

    #[test]
    fn check_answers() {
        let now = 1_900_000_000_000;
        let clear: CheckView = serde_json::from_value(json!({"id": "tm-1", "node": "n1",
            "blocked": false, "action": null, "blockedBy": []}))
        .unwrap();
        assert_eq!(
            check_text("taskmanager", &clear, now, &Utc),
            "task manager tm-1 (on node n1) is not blocked\n"
        );
        let blocked: CheckView = serde_json::from_value(json!({"id": "tm-1",
            "blocked": true, "action": "MARK_BLOCKED", "blockedBy": [
                {"kind": "taskmanager", "id": "tm-1", "action": "MARK_BLOCKED",
                 "startTimestamp": 1, "endTimestamp": PERMANENT, "cause": "oom"}]}))
        .unwrap();
        let text = check_text("taskmanager", &blocked, now, &Utc);
        assert!(
            text.starts_with(
                "task manager tm-1 (not registered on a node) is blocked: block\nKIND"
            ),
            "{text}"
        );
        assert!(
            text.contains("taskmanager  tm-1  block   permanent  oom"),
            "{text}"
        );
        let node: CheckView = serde_json::from_value(json!({"id": "n1", "blocked": false,
            "action": null, "blockedBy": []}))
        .unwrap();
        assert_eq!(
            check_text("node", &node, now, &Utc),
            "node n1 is not blocked\n"
        );
    }

    #[test]
    fn event_lines() {
        let now = 1_900_000_000_000;
        let data = json!({"kind": "node", "id": "n1", "action": "MARK_BLOCKED",
            "startTimestamp": 1, "endTimestamp": now + 2 * HOUR, "cause": "a,b"});
        assert_eq!(
            event_line(42, "merged", &data, now, &Utc),
            "42 merged node n1: block, ends 2030-03-17 19:46:40 (in 2h), cause \"a,b\""
        );
        assert_eq!(
            event_line(
                43,
                "registered",
                &json!({"id": "tm-1", "node": "n1"}),
                now,
                &Utc
            ),
            "43 registered taskmanager tm-1 on node n1"
        );
        assert_eq!(
            event_line(
                44,
                "unregistered",
                &json!({"id": "tm-1", "node": "n1"}),
                now,
                &Utc
            ),
            "44 unregistered taskmanager tm-1 from node n1"
        );
        assert_eq!(
            event_line(45, "renamed", &json!({"x": 1}), now, &Utc),
            "45 renamed {\"x\":1}"
        );
    }

    #[test]
    fn allowlist_event_lines() {
        let now = 1_900_000_000_000;
        let data = json!({"kind": "node", "id": "n-7", "prefix": false, "comment": "db",
            "addedBy": null, "addedAt": 1, "endTimestamp": null});
        assert_eq!(
            event_line(50, "allowlisted", &data, now, &Utc),
            "50 allowlisted node n-7: until removed, comment \"db\""
        );
        assert_eq!(
            event_line(51, "allowlist-expired", &data, now, &Utc),
            "51 allowlist-expired node n-7: until removed, comment \"db\""
        );
    }

    #[test]
    fn forced_blocks_say_past_what_and_by_whom() {
        let item = item(
            json!({"id": "n1", "action": "MARK_BLOCKED", "endTimestamp": PERMANENT,
            "cause": "c", "forced": {"guards": ["blocked-share", "max-items"], "by": "alice",
            "at": 1_900_000_000_000_i64}}),
        );
        assert_eq!(
            forced_text(item.forced.as_ref().unwrap(), &Utc),
            "forced past blocked-share, max-items by alice at 2030-03-17 17:46:40"
        );
        let unnamed: ForcedView =
            serde_json::from_value(json!({"guards": [], "by": null, "at": 0})).unwrap();
        assert_eq!(
            forced_text(&unnamed, &Utc),
            "forced past the guardrails at 1970-01-01 00:00:00"
        );
    }
}
