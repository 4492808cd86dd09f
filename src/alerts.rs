//! Alertmanager's webhook payload (version 4), and what each alert in it asks of the
//! blocklist: a report of a node or task manager while it fires, its retraction once it
//! resolves. Pure: the HTTP layer (`http::alertmanager`) parses the body, asks [`decide`]
//! about each alert and sends the signals to the store in one transaction.
//!
//! Which alerts block what is said where operators define their alerts, in the rule's
//! labels (or annotations; labels win):
//!
//! | label | meaning | default |
//! |---|---|---|
//! | `blocklist_kind` | `node` or `taskmanager`; without it the alert blocks nothing | — |
//! | `blocklist_id_label` | the label whose value is the id | `node` for a node, `pod` for a task manager |
//! | `blocklist_action` | `MARK_BLOCKED` (`block`) or `MARK_BLOCKED_AND_EVACUATE_TASKS` (`evacuate`) | `MARK_BLOCKED` |
//! | `blocklist_duration` | how long from the alert's start (`30m`, `2h`) | until it resolves |
//! | `blocklist_on_resolve` | `retract`, or `keep` (the block lasts its duration) | `retract` |
//!
//! Each alert is its own source, `<detector>/<alertname>/<fingerprint>`, so two alerts of
//! one node (two rules, or one rule for two disks) are two live reports, and each resolve
//! retracts only its own. Its details keep the alert's `fingerprint`, `startsAt`,
//! `alertname` and `generatorURL`; `(fingerprint, startsAt)` names one episode, so a
//! delivery repeated changes nothing and a late resolve of an earlier episode retracts
//! nothing of a later one.

use std::collections::BTreeMap;

use serde::Deserialize;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use utoipa::ToSchema;

use crate::model::{
    validate_id, Action, Details, Kind, NewItem, CAUSE_SEPARATOR, MAX_CAUSE_BYTES,
    MAX_DETAILS_VALUE_BYTES, MAX_SOURCE_BYTES, PERMANENT,
};
use crate::provenance::{Retraction, Signal};

/// The payload version this receiver reads.
pub const VERSION: &str = "4";

/// The source of alerts from a caller without a name (a daemon without a token file).
pub const DEFAULT_DETECTOR: &str = "alertmanager";

/// The labels a rule says what to block with.
pub const KIND_LABEL: &str = "blocklist_kind";
pub const ID_LABEL: &str = "blocklist_id_label";
pub const ACTION_LABEL: &str = "blocklist_action";
pub const DURATION_LABEL: &str = "blocklist_duration";
pub const ON_RESOLVE_LABEL: &str = "blocklist_on_resolve";

/// The body Alertmanager's `webhook_configs` posts. Fields this receiver does not read
/// (`groupKey`, `groupLabels`, `commonLabels`, …) are accepted and left alone: newer
/// Alertmanagers add fields.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(title = "AlertmanagerPayload")]
pub struct Payload {
    /// The payload's version: `4`.
    #[schema(pattern = "^4$")]
    pub version: String,
    #[serde(default)]
    pub receiver: String,
    /// Alerts `max_alerts` left out of this delivery (Alertmanager's `uint64`).
    #[serde(default, deserialize_with = "non_negative_integer")]
    #[schema(schema_with = non_negative_integer_schema)]
    pub truncated_alerts: u64,
    pub alerts: Vec<Alert>,
}

/// A JSON integer of any size from 0 (as JSON Schema's `integer` counts them: `1e20` too),
/// saturated to a `u64`: it is only counted.
fn non_negative_integer<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let number = serde_json::Number::deserialize(d)?;
    match (number.as_u64(), number.as_f64()) {
        (Some(n), _) => Ok(n),
        (None, Some(f)) if f >= 0.0 && f.fract() == 0.0 => Ok(u64::MAX),
        _ => Err(serde::de::Error::custom(format!(
            "must be a whole number from 0, got {number}"
        ))),
    }
}

fn non_negative_integer_schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::Type::Integer)
        .minimum(Some(0))
        .description(Some(
            "Alerts `max_alerts` left out of this delivery (Alertmanager's `uint64`).",
        ))
        .into()
}

/// One alert of a delivery, firing or resolved (its own status, not the delivery's).
/// What its fields hold is judged alert by alert: an alert that names nothing, or names it
/// wrongly, is `ignored` in the answer, never a 400.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Alert {
    /// `firing` or `resolved` (another is ignored).
    pub status: String,
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    pub starts_at: String,
    #[serde(default)]
    pub ends_at: String,
    #[serde(rename = "generatorURL", default)]
    pub generator_url: String,
    pub fingerprint: String,
}

impl Alert {
    /// Its `alertname` label (empty when it has none).
    pub fn name(&self) -> &str {
        self.labels.get("alertname").map_or("", String::as_str)
    }

    /// A setting of its rule: the label, else the annotation.
    fn setting(&self, name: &str) -> Option<&str> {
        self.labels
            .get(name)
            .or_else(|| self.annotations.get(name))
            .map(|v| v.trim())
    }
}

/// What an alert asks of the blocklist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// A signal for the store: a report while it fires, a retraction once it resolved.
    Signal(Signal),
    /// Resolved, and its rule keeps the block for its duration: nothing to do.
    Kept,
    /// It blocks nothing: it names no blocklist kind, or names something wrongly (why).
    Ignored(String),
}

/// What `alert` asks, when `detector` (the token's name) received it at `now`.
pub fn decide(alert: &Alert, detector: &str, now: i64) -> Decision {
    match rule(alert) {
        Ok(rule) => rule.decision(alert, detector, now),
        Err(why) => Decision::Ignored(why),
    }
}

/// An alert's rule, as its labels say it.
struct Rule {
    kind: Kind,
    id: String,
    action: Action,
    duration_ms: Option<i64>,
    keep_on_resolve: bool,
    starts_at: i64,
}

fn rule(alert: &Alert) -> Result<Rule, String> {
    let kind = match alert.setting(KIND_LABEL) {
        None => return Err(format!("it has no {KIND_LABEL} label")),
        Some("node") => Kind::Node,
        Some("taskmanager") => Kind::TaskManager,
        Some(other) => {
            return Err(format!(
                "{KIND_LABEL} is {other:?}; it must be node or taskmanager"
            ))
        }
    };
    let id_label = alert.setting(ID_LABEL).unwrap_or(match kind {
        Kind::Node => "node",
        Kind::TaskManager => "pod",
    });
    let Some(id) = alert.labels.get(id_label) else {
        return Err(format!(
            "it has no label {id_label:?} to take the {} id from ({ID_LABEL} names another)",
            kind.singular()
        ));
    };
    validate_id(id).map_err(|e| format!("the id in label {id_label:?} {e}"))?;
    let action = match alert.setting(ACTION_LABEL) {
        None | Some("MARK_BLOCKED" | "block") => Action::MarkBlocked,
        Some("MARK_BLOCKED_AND_EVACUATE_TASKS" | "evacuate") => Action::MarkBlockedAndEvacuateTasks,
        Some(other) => {
            return Err(format!(
                "{ACTION_LABEL} is {other:?}; it must be MARK_BLOCKED (block) or \
                 MARK_BLOCKED_AND_EVACUATE_TASKS (evacuate)"
            ))
        }
    };
    let duration_ms = match alert.setting(DURATION_LABEL) {
        None => None,
        Some(text) => {
            let duration = humantime::parse_duration(text)
                .map_err(|e| format!("{DURATION_LABEL} {text:?} is not a duration ({e})"))?;
            match i64::try_from(duration.as_millis()) {
                Ok(ms) if ms > 0 => Some(ms),
                _ => {
                    return Err(format!(
                        "{DURATION_LABEL} {text:?} is not a positive duration"
                    ))
                }
            }
        }
    };
    let keep_on_resolve = match alert.setting(ON_RESOLVE_LABEL) {
        None | Some("retract") => false,
        Some("keep") if duration_ms.is_some() => true,
        Some("keep") => {
            return Err(format!(
                "{ON_RESOLVE_LABEL} is keep, but there is no {DURATION_LABEL} to keep it for"
            ))
        }
        Some(other) => {
            return Err(format!(
                "{ON_RESOLVE_LABEL} is {other:?}; it must be retract or keep"
            ))
        }
    };
    let starts_at = OffsetDateTime::parse(&alert.starts_at, &Rfc3339).map_err(|e| {
        format!(
            "startsAt {:?} is not an RFC 3339 time ({e})",
            alert.starts_at
        )
    })?;
    let starts_at = i64::try_from(starts_at.unix_timestamp_nanos() / 1_000_000)
        .map_err(|_| format!("startsAt {:?} is out of range", alert.starts_at))?;
    Ok(Rule {
        kind,
        id: id.clone(),
        action,
        duration_ms,
        keep_on_resolve,
        starts_at,
    })
}

impl Rule {
    fn decision(self, alert: &Alert, detector: &str, now: i64) -> Decision {
        let source = source(detector, alert.name(), &alert.fingerprint);
        match alert.status.as_str() {
            "firing" => {
                let end = match self.duration_ms {
                    None => PERMANENT,
                    Some(ms) => self.starts_at.saturating_add(ms),
                };
                if end <= now {
                    return Decision::Ignored(format!(
                        "its {DURATION_LABEL} has passed since it started"
                    ));
                }
                Decision::Signal(Signal::Report(
                    self.kind,
                    NewItem {
                        id: self.id,
                        action: self.action,
                        end,
                        cause: cause(alert),
                        allow_merge: true,
                        source,
                        timeout: self.duration_ms,
                        details: details(alert),
                    },
                ))
            }
            "resolved" if self.keep_on_resolve => Decision::Kept,
            "resolved" => Decision::Signal(Signal::Retract(
                self.kind,
                Retraction {
                    id: self.id,
                    source,
                    details: episode(alert),
                    reason: Some(format!("alert {} resolved", alert.name())),
                },
            )),
            other => Decision::Ignored(format!(
                "its status is {other:?}; it must be firing or resolved"
            )),
        }
    }
}

/// The source of an alert's report: `<detector>/<alertname>/<fingerprint>`, the alert name
/// cut short (at a character) where the whole would pass the source limit; the fingerprint
/// keeps it unique.
pub fn source(detector: &str, alertname: &str, fingerprint: &str) -> String {
    let fingerprint = visible(cut(fingerprint, MAX_EVIDENCE_BYTES));
    let room = MAX_SOURCE_BYTES.saturating_sub(detector.len() + fingerprint.len() + 2);
    let name = visible(alertname);
    let source = format!("{detector}/{}/{fingerprint}", cut(&name, room));
    cut(&source, MAX_SOURCE_BYTES).to_owned()
}

/// The longest fingerprint, start time or alert name a report keeps (Alertmanager's are
/// 16 hex digits, an RFC 3339 time and a rule's name): what is longer is cut, so that an
/// alert cannot make a report of any size.
const MAX_EVIDENCE_BYTES: usize = 256;

/// `text` without control characters (which no source, detail or cause may hold).
fn visible(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).collect()
}

/// The alert's episode: what a retraction matches, so that a late resolve of an earlier
/// episode takes nothing of a later one.
fn episode(alert: &Alert) -> Details {
    Details::from([
        (
            "fingerprint".to_owned(),
            visible(cut(&alert.fingerprint, MAX_EVIDENCE_BYTES)),
        ),
        (
            "startsAt".to_owned(),
            visible(cut(&alert.starts_at, MAX_EVIDENCE_BYTES)),
        ),
    ])
}

/// What a report of the alert keeps: its episode, its name and where it came from (cut to
/// the details' limits).
fn details(alert: &Alert) -> Details {
    let mut details = episode(alert);
    for (key, value, limit) in [
        ("alertname", alert.name(), MAX_EVIDENCE_BYTES),
        (
            "generatorURL",
            alert.generator_url.as_str(),
            MAX_DETAILS_VALUE_BYTES,
        ),
    ] {
        let value = visible(cut(value, limit));
        if !value.is_empty() {
            details.insert(key.to_owned(), value);
        }
    }
    // Four entries of at most 256, 256, 256 and 1024 bytes: within every details limit.
    details
}

/// The cause of an alert's report: `<alertname>: <summary>` (or its description), one cause
/// (separators replaced), within the cause limit.
fn cause(alert: &Alert) -> String {
    let text = alert
        .annotations
        .get("summary")
        .or_else(|| alert.annotations.get("description"))
        .map(|s| s.trim())
        .filter(|s| !s.is_empty());
    let name = match alert.name() {
        "" => "alert",
        name => name,
    };
    let cause = match text {
        Some(text) => format!("{name}: {text}"),
        None => name.to_owned(),
    };
    let cause: String = cause
        .chars()
        .map(|c| if c == CAUSE_SEPARATOR { ';' } else { c })
        .filter(|c| !c.is_control())
        .collect();
    cut(&cause, MAX_CAUSE_BYTES).to_owned()
}

/// `text` cut to at most `limit` bytes, at a character boundary.
fn cut(text: &str, limit: usize) -> &str {
    let mut end = text.len().min(limit);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests;
