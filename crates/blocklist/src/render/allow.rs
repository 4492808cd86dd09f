//! Allowlist entries: the sentences of `allow add`, `remove --hold-off` and `watch`, and
//! the table of `allow list`.

use std::fmt::Display;

use chrono::TimeZone;
use serde::Deserialize;

use super::{clean, end_time, table, ItemView};

/// The answer to an unblock: `{}`, or with `--hold-off` the allowlist entry that holds
/// the id off.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemovalView {
    #[serde(default)]
    pub hold_off: Option<EntryView>,
}

/// An allowlist entry as the API shows it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryView {
    pub kind: String,
    pub id: String,
    #[serde(default)]
    pub prefix: bool,
    pub comment: String,
    #[serde(default)]
    pub added_by: Option<String>,
    /// `null` (or absent): until removed.
    #[serde(default)]
    pub end_timestamp: Option<i64>,
}

/// `GET /allowlist`.
#[derive(Debug, Deserialize)]
pub struct AllowlistView {
    pub entries: Vec<EntryView>,
}

/// The answer to `PUT /allowlist/{kind}/{id}`.
#[derive(Debug, Deserialize)]
pub struct AllowPutView {
    pub entry: EntryView,
    /// The active blocks the entry lifted.
    #[serde(default)]
    pub unblocked: Vec<ItemView>,
}

/// Which ids an allowlist entry covers: `node n-7`, `node ids starting with db-`.
pub fn entry_subject(entry: &EntryView) -> String {
    let kind = match entry.kind.as_str() {
        "taskmanager" => "task manager",
        other => other,
    };
    if entry.prefix {
        format!("{kind} ids starting with {}", clean(&entry.id))
    } else {
        format!("{kind} {}", clean(&entry.id))
    }
}

/// Until when an allowlist entry applies: `until removed`, or `until` its end.
pub fn entry_end<Tz: TimeZone>(entry: &EntryView, now_ms: i64, tz: &Tz) -> String
where
    Tz::Offset: Display,
{
    match entry.end_timestamp {
        None => "until removed".into(),
        Some(end) => format!("until {}", end_time(end, now_ms, tz)),
    }
}

/// The allowlist table: one row per entry, the comment last.
pub fn allow_table<Tz: TimeZone>(entries: &[EntryView], now_ms: i64, tz: &Tz) -> String
where
    Tz::Offset: Display,
{
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|entry| {
            vec![
                clean(&entry.kind),
                clean(&entry.id),
                if entry.prefix { "prefix" } else { "exact" }.to_owned(),
                match entry.end_timestamp {
                    None => "until removed".to_owned(),
                    Some(end) => end_time(end, now_ms, tz),
                },
                entry
                    .added_by
                    .as_deref()
                    .map_or_else(|| "-".to_owned(), clean),
                clean(&entry.comment),
            ]
        })
        .collect();
    table(&["KIND", "ID", "MATCH", "ENDS", "BY", "COMMENT"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use serde_json::{json, Value};

    const MIN: i64 = 60_000;

    fn entry(value: Value) -> EntryView {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn allowlist_entries() {
        let now = 1_900_000_000_000;
        let exact = entry(json!({"kind": "node", "id": "n-7", "prefix": false,
            "comment": "db primary", "addedBy": "alice", "addedAt": 1, "endTimestamp": null}));
        let prefix = entry(json!({"kind": "taskmanager", "id": "db-", "prefix": true,
            "comment": "hold-off after an unblock", "addedBy": null, "addedAt": 1,
            "endTimestamp": now + 30 * MIN}));
        assert_eq!(entry_subject(&exact), "node n-7");
        assert_eq!(entry_subject(&prefix), "task manager ids starting with db-");
        assert_eq!(entry_end(&exact, now, &Utc), "until removed");
        assert_eq!(
            entry_end(&prefix, now, &Utc),
            "until 2030-03-17 18:16:40 (in 30m)"
        );
        assert_eq!(
            allow_table(&[exact, prefix], now, &Utc),
            "KIND         ID   MATCH   ENDS                          BY     COMMENT\n\
             node         n-7  exact   until removed                 alice  db primary\n\
             taskmanager  db-  prefix  2030-03-17 18:16:40 (in 30m)  -      hold-off after an \
             unblock\n"
        );
    }
}
