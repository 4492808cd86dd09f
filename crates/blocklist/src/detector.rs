//! What a detector beside a cluster sends the daemons (`blocklist-flink`'s failures,
//! `blocklist-kube`'s Node conditions): a report of an item under the detector's own
//! source, merging into what is there, with the evidence kept as its live report's
//! details; the retraction of that report once the signal clears; and a cause's text that
//! stays one cause in FLIP-224's merge.

use std::collections::BTreeMap;

use reqwest::Method;
use serde::Deserialize;
use serde_json::json;

use crate::client::Failure;
use crate::daemons::Daemons;

/// A block a detector asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// `taskmanagers` or `nodes`.
    pub kind: &'static str,
    pub id: String,
    pub action: String,
    pub cause: String,
    /// Unix ms (`i64::MAX`: permanent).
    pub end: i64,
    /// The evidence kept with the live report; the same details again are a repeat, which
    /// changes nothing.
    pub details: BTreeMap<String, String>,
}

/// The answer to a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    Blocked,
    /// A guardrail, the allowlist or the request's shape refused it (4xx): the messages.
    Refused(String),
}

/// What a retraction did (the daemon's `outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Retracted {
    /// Other sources' reports hold the block.
    Kept,
    /// It was the last: the block ended.
    Ended,
    /// The source held no report of an active block.
    Absent,
}

/// All of a failure's messages, on one line.
pub fn text(failure: &Failure) -> String {
    failure.messages().join("; ")
}

/// Asks for `report`'s block under `source`, merging into what is there. `Err` when no
/// daemon could be reached or answered (5xx): worth another try later.
pub async fn report(daemons: &Daemons, report: &Report, source: &str) -> Result<Sent, String> {
    let body = json!([{
        "id": report.id,
        "action": report.action,
        "cause": report.cause,
        "endTimestamp": report.end,
        "allowMerge": true,
        "source": source,
        "details": report.details,
    }]);
    let path = format!("/blocklist/{}", report.kind);
    match daemons.send(Method::POST, &path, Some(&body)).await {
        Ok(_) => Ok(Sent::Blocked),
        Err(Failure::Refused(messages)) if !messages.iter().any(|m| m.starts_with('5')) => {
            Ok(Sent::Refused(messages.join("; ")))
        }
        Err(failure) => Err(text(&failure)),
    }
}

/// Takes back `source`'s live report of item `id` of `kind` (`taskmanagers`, `nodes`),
/// whichever episode it holds. `Err` when no daemon could say.
pub async fn retract(
    daemons: &Daemons,
    kind: &str,
    id: &str,
    source: &str,
) -> Result<Retracted, String> {
    #[derive(Deserialize)]
    struct Answer {
        retracted: Vec<One>,
    }
    #[derive(Deserialize)]
    struct One {
        outcome: Retracted,
    }
    let body = json!([{"id": id, "source": source}]);
    let path = format!("/blocklist/retract/{kind}");
    let reply = daemons
        .send(Method::POST, &path, Some(&body))
        .await
        .map_err(|e| text(&e))?;
    let answer: Answer = reply.json().map_err(|e| text(&e))?;
    answer
        .retracted
        .first()
        .map(|one| one.outcome)
        .ok_or_else(|| format!("{path}: an answer without the retraction"))
}

/// A cause's text for FLIP-224's merge: causes are joined with `,`, so a comma inside one
/// would split it into parts; and at most `max` characters of it.
pub fn cause_text(text: &str, max: usize) -> String {
    let clean: String = text
        .chars()
        .map(|c| match c {
            ',' => ';',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect();
    if clean.chars().count() <= max {
        clean
    } else {
        let mut cut: String = clean.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_keeps_one_part_and_a_bound() {
        assert_eq!(cause_text("a, b\nc", 100), "a; b c");
        assert_eq!(cause_text("abcdef", 4), "abc…");
    }
}
