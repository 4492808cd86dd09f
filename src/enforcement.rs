//! Enforcement statuses: what an enforcer — a process acting on the blocklist in a cluster,
//! such as `blocklist-kube` tainting blocked Nodes — reports it did about a blocked item,
//! under its own name, so an operator sees whether the cluster obeyed.
//!
//! A status is not provenance: it never changes the block, its revision or its `ETag`, and
//! it emits no event. It lives exactly as long as the block it describes (the block's end
//! drops its statuses in the same transaction, `store::commit::enforcement`), and a report
//! about an id that is not blocked now is answered as such and not stored: an enforcer
//! racing an unblock cannot leave a status behind.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::model::Kind;
use crate::validate::{
    batch_elements, element_errors, element_object, integer, required_id, type_name,
    unknown_fields, Invalid,
};

/// The longest enforcer name: a Kubernetes object name's limit, which a bridge's name
/// (often its Deployment's) fits.
pub const MAX_ENFORCER_BYTES: usize = 253;

/// The longest `detail` of a status, in characters.
pub const MAX_DETAIL_CHARS: usize = 1024;

/// What an enforcer did about a blocked item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum EnforcementState {
    /// Acted on: the cluster keeps new work off the target (a Node tainted, say).
    Enforced,
    /// Everything computed, nothing written to the cluster (the enforcer's dry run).
    DryRun,
    /// The cluster has no such target (no Node of that name); acted on when one appears.
    NoTarget,
    /// Not acted on: the enforcer's own ceiling (a share of the cluster it never blocks
    /// beyond) was reached.
    HeldBack,
    /// The enforcer tried and failed; `detail` says why. It keeps trying.
    Failed,
}

impl EnforcementState {
    const ALL: [EnforcementState; 5] = [
        EnforcementState::Enforced,
        EnforcementState::DryRun,
        EnforcementState::NoTarget,
        EnforcementState::HeldBack,
        EnforcementState::Failed,
    ];

    /// As written in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            EnforcementState::Enforced => "enforced",
            EnforcementState::DryRun => "dryRun",
            EnforcementState::NoTarget => "noTarget",
            EnforcementState::HeldBack => "heldBack",
            EnforcementState::Failed => "failed",
        }
    }
}

/// One enforcer's status of one blocked item, as stored and served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnforcementStatus {
    pub state: EnforcementState,
    /// Unix ms since the item has had this state from this enforcer (the daemon's clock,
    /// when the report that changed the state was stored).
    pub since: i64,
    /// What the enforcer says about it: the taint it put, why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The item's `revision` the enforcer acted on: older than the item's own, and the
    /// enforcer has not caught up with the item's last change yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_revision: Option<u64>,
}

/// Every enforcer's status of one item, by enforcer name.
pub type Statuses = BTreeMap<String, EnforcementStatus>;

/// One element of `PUT /enforcement/{enforcer}`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reported {
    pub kind: Kind,
    pub id: String,
    pub state: EnforcementState,
    pub detail: Option<String>,
    pub observed_revision: Option<u64>,
}

/// The stored form of an item's statuses: JSON, so an enforcer's status may gain fields
/// without a schema change (they are small and written rarely).
pub fn encode(statuses: &Statuses) -> Vec<u8> {
    serde_json::to_vec(statuses).expect("statuses serialise")
}

pub fn decode(bytes: &[u8]) -> Result<Statuses, serde_json::Error> {
    serde_json::from_slice(bytes)
}

/// Checks an enforcer's name (a path segment): 1 to [`MAX_ENFORCER_BYTES`] of ASCII
/// letters, digits, `-`, `_` and `.`, so it reads the same in a URL, a log and a metric.
pub fn validate_enforcer(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_ENFORCER_BYTES {
        return Err(format!(
            "an enforcer's name has 1 to {MAX_ENFORCER_BYTES} bytes, got {}",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(format!(
            "an enforcer's name has only ASCII letters, digits, '-', '_' and '.', got {c:?} in {name:?}"
        ));
    }
    Ok(())
}

const REPORT_FIELDS: &[&str] = &["kind", "id", "state", "detail", "observedRevision"];

/// Parses the body of `PUT /enforcement/{enforcer}`: a non-empty array of reports (or
/// `{"items": [...]}`), at most `max_batch`; every error of every element at once.
pub fn reports(body: &Value, max_batch: usize) -> Result<Vec<Reported>, Invalid> {
    let elements = batch_elements(body, max_batch)?;
    let mut out = Vec::with_capacity(elements.len());
    let mut errors = Vec::new();
    for (index, element) in elements.iter().enumerate() {
        let Some(map) = element_object(index, element, &mut errors) else {
            continue;
        };
        let mut errs = unknown_fields(map, REPORT_FIELDS);
        let kind = match map.get("kind") {
            Some(Value::String(s)) if s == "node" => Some(Kind::Node),
            Some(Value::String(s)) if s == "taskmanager" => Some(Kind::TaskManager),
            Some(other) => {
                errs.push(format!(
                    ".kind: one of \"node\", \"taskmanager\", got {other}"
                ));
                None
            }
            None => {
                errs.push(".kind: missing".to_owned());
                None
            }
        };
        let id = required_id(map, "id", &mut errs);
        let state = match map.get("state") {
            Some(Value::String(s)) => {
                let state = EnforcementState::ALL
                    .into_iter()
                    .find(|st| st.as_str() == s);
                if state.is_none() {
                    errs.push(format!(
                        ".state: one of {}, got {s:?}",
                        EnforcementState::ALL
                            .map(EnforcementState::as_str)
                            .join(", ")
                    ));
                }
                state
            }
            Some(other) => {
                errs.push(format!(".state: a string, got {}", type_name(other)));
                None
            }
            None => {
                errs.push(".state: missing".to_owned());
                None
            }
        };
        let detail = match map.get("detail") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.chars().count() <= MAX_DETAIL_CHARS => Some(s.clone()),
            Some(Value::String(s)) => {
                errs.push(format!(
                    ".detail: at most {MAX_DETAIL_CHARS} characters, got {}",
                    s.chars().count()
                ));
                None
            }
            Some(other) => {
                errs.push(format!(".detail: a string, got {}", type_name(other)));
                None
            }
        };
        // A JSON number (`174.0` is whole too), 0 to 2^63 − 1 as every revision is; never
        // a string, which the schema does not allow.
        let observed_revision = match map.get("observedRevision") {
            None | Some(Value::Null) => None,
            Some(v @ Value::Number(_)) => match integer("observedRevision", v, &mut errs) {
                Some(n) => u64::try_from(n).ok().or_else(|| {
                    errs.push(format!(".observedRevision: a whole number ≥ 0, got {n}"));
                    None
                }),
                None => None,
            },
            Some(other) => {
                errs.push(format!(
                    ".observedRevision: a whole number ≥ 0, got {}",
                    type_name(other)
                ));
                None
            }
        };
        match (kind, id, state) {
            (Some(kind), Some(id), Some(state)) if errs.is_empty() => out.push(Reported {
                kind,
                id,
                state,
                detail,
                observed_revision,
            }),
            _ => errors.extend(element_errors(index, map, errs)),
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(Invalid::BadRequest(errors))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reports_name_every_bad_field_of_every_element() {
        let body = json!([
            {"kind": "node", "id": "n1", "state": "enforced", "detail": "taint", "observedRevision": 3},
            {"kind": "pod", "id": "", "state": "done", "extra": 1},
            {"kind": "taskmanager", "id": "tm", "state": "heldBack", "observedRevision": -1},
        ]);
        let Err(Invalid::BadRequest(errors)) = reports(&body, 10) else {
            panic!("refused")
        };
        let text = errors.join("\n");
        for expected in [
            "items[1]",
            ".kind: one of",
            ".state: one of enforced, dryRun, noTarget, heldBack, failed, got \"done\"",
            ".extra: unknown field",
            ".id:",
            "items[2] (id \"tm\").observedRevision",
        ] {
            assert!(text.contains(expected), "{expected:?} in {text}");
        }
        let good = reports(
            &json!([{"kind": "node", "id": "n1", "state": "dryRun"}]),
            10,
        )
        .unwrap();
        assert_eq!(good[0].state, EnforcementState::DryRun);
        assert_eq!(
            (good[0].detail.as_deref(), good[0].observed_revision),
            (None, None)
        );
    }

    #[test]
    fn enforcer_names_are_plain_segments() {
        assert!(validate_enforcer("blocklist-kube.prod_1").is_ok());
        assert!(validate_enforcer("").is_err());
        assert!(validate_enforcer("a/b").is_err());
        assert!(validate_enforcer(&"a".repeat(254)).is_err());
    }

    #[test]
    fn states_serialise_as_documented() {
        for state in EnforcementState::ALL {
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                Value::String(state.as_str().into())
            );
        }
    }
}
