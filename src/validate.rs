//! Turns request JSON into validated domain values, or into every error found.
//!
//! Validation is hand-written over `serde_json::Value` rather than derived, because the
//! contract needs things serde's derive does not give together: every error names the
//! element index and field, all errors of a batch are reported at once, numbers may arrive
//! as decimal strings and booleans as `"true"`/`"false"` (as in FLIP-224's own examples),
//! and an unknown field — say the typo `endTimeStamp` — is an error rather than a silent
//! permanent block. Pure: the caller passes `now`.

use serde_json::{Map, Value};

use crate::model::{
    validate_details, validate_id, validate_source, Action, Details, ItemChange, NewItem,
    CAUSE_SEPARATOR, MAX_CAUSE_BYTES, PERMANENT, UNKNOWN_SOURCE,
};

/// Why a request was refused before it reached the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalid {
    /// 400: the request is malformed; each string names the element and field.
    BadRequest(Vec<String>),
    /// 413: the request is well-formed but over a size limit.
    TooLarge(String),
}

const ADD_FIELDS: &[&str] = &[
    "id",
    "action",
    "cause",
    "timeout",
    "endTimestamp",
    "allowMerge",
    "mergeOnConflict",
    "mergeOnConflictallowMerge",
    "source",
    "details",
];

/// The spellings of the merge flag, the FLIP's own first: FLIP-224 renamed
/// `mergeOnConflict` to `allowMerge` and its request example and field list kept both
/// words run together, so a client copying the document sends the third. All mean the
/// same; one element gives at most one of them.
pub const MERGE_FLAG: [&str; 3] = ["allowMerge", "mergeOnConflict", "mergeOnConflictallowMerge"];

/// The longest `timeout`, in ms: 10^18, about 31.7 million years, so that `now + timeout`
/// stays far inside an `i64` for any clock this daemon will see. Longer is what a permanent
/// block (no timeout) is for.
pub const MAX_TIMEOUT_MS: i64 = 1_000_000_000_000_000_000;

/// Parses the body of `POST /blocklist/{kind}`: a JSON array of items, or `{"items": [...]}`.
pub fn add_batch(body: &Value, now: i64, max_batch: usize) -> Result<Vec<NewItem>, Invalid> {
    add_batch_from(body, now, max_batch, UNKNOWN_SOURCE)
}

/// [`add_batch`], the elements that name no `source` reported by `source` (the request's).
pub fn add_batch_from(
    body: &Value,
    now: i64,
    max_batch: usize,
    source: &str,
) -> Result<Vec<NewItem>, Invalid> {
    let elements = batch_elements(body, max_batch)?;
    let mut items = Vec::with_capacity(elements.len());
    let mut errors = Vec::new();
    for (index, element) in elements.iter().enumerate() {
        match add_item(element, now, source) {
            Ok(item) => items.push(item),
            Err(mut errs) => {
                let id = element.get("id").and_then(Value::as_str);
                for e in &mut errs {
                    *e = match id {
                        Some(id) => format!("items[{index}] (id {id:?}){e}"),
                        None => format!("items[{index}]{e}"),
                    };
                }
                errors.append(&mut errs);
            }
        }
    }
    if errors.is_empty() {
        Ok(items)
    } else {
        Err(Invalid::BadRequest(errors))
    }
}

/// The elements of a batch body: a non-empty array, bare or as `{"items": [...]}`, with at
/// most `max_batch` elements.
pub fn batch_elements(body: &Value, max_batch: usize) -> Result<&[Value], Invalid> {
    let elements = match body {
        Value::Array(elements) => elements,
        Value::Object(map) => {
            if let Some(field) = map.keys().find(|k| *k != "items") {
                return Err(bad(format!(
                    "unknown field {field:?}: the body is an array of items or {{\"items\": [...]}}"
                )));
            }
            match map.get("items") {
                Some(Value::Array(elements)) => elements,
                Some(other) => {
                    return Err(bad(format!(
                        "items: must be an array, got {}",
                        type_name(other)
                    )))
                }
                None => return Err(bad("items: required field is missing".into())),
            }
        }
        other => {
            return Err(bad(format!(
                "the body must be a JSON array of items (or {{\"items\": [...]}}), got {}",
                type_name(other)
            )))
        }
    };
    if elements.is_empty() {
        return Err(bad("the batch is empty: give at least one item".into()));
    }
    if elements.len() > max_batch {
        return Err(Invalid::TooLarge(format!(
            "the batch has {} items; the limit is {max_batch} per request",
            elements.len()
        )));
    }
    Ok(elements)
}

/// One add element. Errors are returned as suffixes (`.field: what`) for the caller to
/// prefix with the element's position.
fn add_item(element: &Value, now: i64, source: &str) -> Result<NewItem, Vec<String>> {
    let Value::Object(map) = element else {
        return Err(vec![format!(
            ": must be an object, got {}",
            type_name(element)
        )]);
    };
    let mut errors = unknown_fields(map, ADD_FIELDS);
    let id = required_id(map, "id", &mut errors);
    let action = match map.get("action") {
        None => missing("action", &mut errors),
        Some(Value::String(s)) => Action::parse(s).or_else(|| {
            errors.push(format!(
                ".action: unknown action {s:?}; use MARK_BLOCKED or MARK_BLOCKED_AND_EVACUATE_TASKS"
            ));
            None
        }),
        Some(other) => wrong_type("action", "a string", other, &mut errors),
    };
    let cause = match map.get("cause") {
        None => missing("cause", &mut errors),
        Some(value) => cause(value, &mut errors),
    };
    let end = resolve_end(map, now, &mut errors);
    let allow_merge = allow_merge(map, &mut errors);
    let source = match map.get("source") {
        None | Some(Value::Null) => Some(source.to_owned()),
        Some(Value::String(s)) => match validate_source(s) {
            Ok(()) => Some(s.clone()),
            Err(e) => {
                errors.push(format!(".source: {e}"));
                None
            }
        },
        Some(other) => wrong_type("source", "a string", other, &mut errors),
    };
    let details = details(map, &mut errors);
    match (id, action, cause, end, allow_merge, source) {
        (
            Some(id),
            Some(action),
            Some(cause),
            Some((end, timeout)),
            Some(allow_merge),
            Some(source),
        ) if errors.is_empty() => Ok(NewItem {
            id,
            action,
            end,
            cause,
            allow_merge,
            source,
            timeout,
            details,
        }),
        _ => Err(errors),
    }
}

/// A cause: 1 byte to [`MAX_CAUSE_BYTES`], not only separators.
fn cause(value: &Value, errors: &mut Vec<String>) -> Option<String> {
    match value {
        Value::String(s) if s.split(CAUSE_SEPARATOR).all(str::is_empty) => {
            // Causes are a set joined by the separator: one made of separators only would
            // be stored as an empty cause.
            errors.push(format!(
                ".cause: must not be empty (nor only {CAUSE_SEPARATOR:?} separators)"
            ));
            None
        }
        Value::String(s) if s.len() > MAX_CAUSE_BYTES => {
            errors.push(format!(
                ".cause: is {} bytes long; the limit is {MAX_CAUSE_BYTES} bytes",
                s.len()
            ));
            None
        }
        Value::String(s) => Some(s.clone()),
        other => wrong_type("cause", "a string", other, errors),
    }
}

/// An element's `details`: an object of strings (absent or `null`: none).
fn details(map: &Map<String, Value>, errors: &mut Vec<String>) -> Details {
    let Some(value) = optional(map, "details") else {
        return Details::new();
    };
    let Value::Object(entries) = value else {
        wrong_type::<()>("details", "an object of strings", value, errors);
        return Details::new();
    };
    let mut details = Details::new();
    for (key, value) in entries {
        match value {
            Value::String(s) => {
                details.insert(key.clone(), s.clone());
            }
            other => {
                wrong_type::<()>(&format!("details.{key}"), "a string", other, errors);
            }
        }
    }
    if let Err(e) = validate_details(&details) {
        errors.push(format!(".details{e}"));
    }
    details
}

/// The fields of an update (`PATCH /blocklist/{kind}/{id}`).
const UPDATE_FIELDS: &[&str] = &["endTimestamp", "timeout", "permanent", "action", "cause"];

/// Parses the body of an update: at most one of `endTimestamp` (unix ms, in the future),
/// `timeout` (ms from now) and `permanent: true`; `action`; `cause` (appended); at least one
/// of them.
pub fn item_change(body: &Value, now: i64) -> Result<ItemChange, Invalid> {
    let Value::Object(map) = body else {
        return Err(bad(format!(
            "the body must be an object such as {{\"timeout\": 600000}}, got {}",
            type_name(body)
        )));
    };
    let mut errors = unknown_fields(map, UPDATE_FIELDS);
    let permanent = optional(map, "permanent").and_then(|v| boolean("permanent", v, &mut errors));
    let timed = optional(map, "timeout").is_some() || optional(map, "endTimestamp").is_some();
    let end = match permanent {
        Some(true) if timed => {
            errors
                .push(".permanent: give at most one of permanent, timeout and endTimestamp".into());
            None
        }
        Some(true) => Some(PERMANENT),
        Some(false) if !timed => {
            errors.push(
                ".permanent: false sets nothing; give timeout or endTimestamp for an end".into(),
            );
            None
        }
        _ if timed => resolve_end(map, now, &mut errors).map(|(end, _)| end),
        _ => None,
    };
    let action = match optional(map, "action") {
        None => None,
        Some(Value::String(s)) => Action::parse(s).or_else(|| {
            errors.push(format!(
                ".action: unknown action {s:?}; use MARK_BLOCKED or MARK_BLOCKED_AND_EVACUATE_TASKS"
            ));
            None
        }),
        Some(other) => wrong_type("action", "a string", other, &mut errors),
    };
    let cause = optional(map, "cause").and_then(|v| cause(v, &mut errors));
    if errors.is_empty() && end.is_none() && action.is_none() && cause.is_none() {
        errors.push(
            "the body changes nothing: give endTimestamp, timeout or permanent, action, or cause"
                .into(),
        );
    }
    if !errors.is_empty() {
        return Err(Invalid::BadRequest(
            errors
                .into_iter()
                .map(|e| e.strip_prefix('.').map(str::to_owned).unwrap_or(e))
                .collect(),
        ));
    }
    Ok(ItemChange { end, action, cause })
}

/// Parses the body of `PUT /taskmanagers/{id}`: `{"node": "n1"}`; returns the node.
pub fn registration(body: &Value) -> Result<String, Invalid> {
    let Value::Object(map) = body else {
        return Err(bad(format!(
            "the body must be an object {{\"node\": \"...\"}}, got {}",
            type_name(body)
        )));
    };
    let mut errors = unknown_fields(map, &["node"]);
    let node = required_id(map, "node", &mut errors);
    match node {
        Some(node) if errors.is_empty() => Ok(node),
        _ => Err(Invalid::BadRequest(
            errors
                .into_iter()
                .map(|e| e.trim_start_matches('.').to_owned())
                .collect(),
        )),
    }
}

/// Parses the body of `PUT /taskmanagers`: an array of `{"id", "node"}` (or
/// `{"items": [...]}`) into `(task manager, node)` pairs.
pub fn registrations(body: &Value, max_batch: usize) -> Result<Vec<(String, String)>, Invalid> {
    let elements = batch_elements(body, max_batch)?;
    let mut pairs = Vec::with_capacity(elements.len());
    let mut errors = Vec::new();
    for (index, element) in elements.iter().enumerate() {
        let Some(map) = element_object(index, element, &mut errors) else {
            continue;
        };
        let mut errs = unknown_fields(map, &["id", "node"]);
        let id = required_id(map, "id", &mut errs);
        let node = required_id(map, "node", &mut errs);
        match (id, node) {
            (Some(id), Some(node)) if errs.is_empty() => pairs.push((id, node)),
            _ => errors.extend(element_errors(index, map, errs)),
        }
    }
    if errors.is_empty() {
        Ok(pairs)
    } else {
        Err(Invalid::BadRequest(errors))
    }
}

/// The ids of a batch check, `POST /blocklist/check`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CheckRequest {
    pub task_managers: Vec<String>,
    pub nodes: Vec<String>,
}

/// Parses `{"taskManagers": [...], "nodes": [...]}` (either may be absent), at most
/// `max_ids` ids in all.
pub fn check_request(body: &Value, max_ids: usize) -> Result<CheckRequest, Invalid> {
    let Value::Object(map) = body else {
        return Err(bad(format!(
            "the body must be an object {{\"taskManagers\": [...], \"nodes\": [...]}}, got {}",
            type_name(body)
        )));
    };
    let mut errors: Vec<String> = unknown_fields(map, &["taskManagers", "nodes"])
        .into_iter()
        .map(|e| e.trim_start_matches('.').to_owned())
        .collect();
    let mut ids_of = |field: &str| -> Vec<String> {
        match map.get(field) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(ids)) => ids
                .iter()
                .enumerate()
                .filter_map(|(i, id)| match id {
                    Value::String(s) => match validate_id(s) {
                        Ok(()) => Some(s.clone()),
                        Err(why) => {
                            errors.push(format!("{field}[{i}] (id {s:?}): {why}"));
                            None
                        }
                    },
                    other => {
                        errors.push(format!(
                            "{field}[{i}]: must be a string, got {}",
                            type_name(other)
                        ));
                        None
                    }
                })
                .collect(),
            Some(other) => {
                errors.push(format!(
                    "{field}: must be an array of ids, got {}",
                    type_name(other)
                ));
                Vec::new()
            }
        }
    };
    let request = CheckRequest {
        task_managers: ids_of("taskManagers"),
        nodes: ids_of("nodes"),
    };
    if !errors.is_empty() {
        return Err(Invalid::BadRequest(errors));
    }
    let total = request.task_managers.len() + request.nodes.len();
    if total > max_ids {
        return Err(Invalid::TooLarge(format!(
            "the check asks for {total} ids; the limit is {max_ids} per request"
        )));
    }
    Ok(request)
}

/// Batch element `index` as an object; another value is an error in `errors`, named by its
/// index.
pub(crate) fn element_object<'a>(
    index: usize,
    element: &'a Value,
    errors: &mut Vec<String>,
) -> Option<&'a Map<String, Value>> {
    if let Value::Object(map) = element {
        return Some(map);
    }
    errors.push(format!(
        "items[{index}]: must be an object, got {}",
        type_name(element)
    ));
    None
}

/// The errors `errs` (each `.field: why`) of batch element `index`, named by its index and,
/// when it has one, its id: `items[2] (id "n1").state: …`.
pub(crate) fn element_errors(
    index: usize,
    map: &Map<String, Value>,
    errs: Vec<String>,
) -> impl Iterator<Item = String> {
    let label = match map.get("id").and_then(Value::as_str) {
        Some(id) => format!("items[{index}] (id {id:?})"),
        None => format!("items[{index}]"),
    };
    errs.into_iter().map(move |e| format!("{label}{e}"))
}

/// One `.field: unknown field` error per field of `map` not in `known`.
pub(crate) fn unknown_fields(map: &Map<String, Value>, known: &[&str]) -> Vec<String> {
    map.keys()
        .filter(|field| !known.contains(&field.as_str()))
        .map(|field| {
            format!(
                ".{field}: unknown field (known fields: {})",
                known.join(", ")
            )
        })
        .collect()
}

/// The end of an allowlist entry from its body's `timeout` or `endTimestamp` (the same
/// rules as an item's); `None`: until removed.
pub fn entry_end(map: &Map<String, Value>, now: i64) -> Result<Option<i64>, Vec<String>> {
    let mut errors = Vec::new();
    match resolve_end(map, now, &mut errors).map(|(end, _)| end) {
        Some(PERMANENT) => Ok(None),
        Some(end) if errors.is_empty() => Ok(Some(end)),
        _ => Err(errors),
    }
}

/// The end an element asks for (`now + timeout`, the given `endTimestamp`, or permanent),
/// and its timeout when it gave one.
fn resolve_end(
    map: &Map<String, Value>,
    now: i64,
    errors: &mut Vec<String>,
) -> Option<(i64, Option<i64>)> {
    let timeout = optional(map, "timeout");
    let end = optional(map, "endTimestamp");
    if timeout.is_some() && end.is_some() {
        errors.push(
            ".timeout/.endTimestamp: give at most one of timeout (ms from now) and endTimestamp \
             (unix ms); neither means permanent"
                .into(),
        );
        return None;
    }
    if let Some(v) = timeout {
        let timeout = integer("timeout", v, errors)?;
        if timeout <= 0 {
            errors.push(format!(
                ".timeout: must be a positive number of milliseconds, got {timeout}"
            ));
            return None;
        }
        if timeout > MAX_TIMEOUT_MS {
            errors.push(format!(
                ".timeout: {timeout} ms is over the limit of {MAX_TIMEOUT_MS} ms (about 31.7 \
                 million years); omit timeout for a permanent block"
            ));
            return None;
        }
        return if let Some(end) = now.checked_add(timeout) {
            Some((end, Some(timeout)))
        } else {
            errors.push(format!(
                ".timeout: {timeout} ms from now overflows the end time; omit timeout for a \
                 permanent block"
            ));
            None
        };
    }
    if let Some(v) = end {
        let end = integer("endTimestamp", v, errors)?;
        if end <= now {
            errors.push(format!(
                ".endTimestamp: must be in the future (unix ms), got {end} while now is {now}"
            ));
            return None;
        }
        return Some((end, None));
    }
    Some((PERMANENT, None))
}

fn allow_merge(map: &Map<String, Value>, errors: &mut Vec<String>) -> Option<bool> {
    let given: Vec<(&str, &Value)> = MERGE_FLAG
        .iter()
        .filter_map(|&name| optional(map, name).map(|value| (name, value)))
        .collect();
    match given.as_slice() {
        [] => Some(false),
        [(name, value)] => boolean(name, value, errors),
        several => {
            let names: Vec<&str> = several.iter().map(|(name, _)| *name).collect();
            errors.push(format!(
                ".{}: the merge flag is given {} times; give one of allowMerge, \
                 mergeOnConflict, mergeOnConflictallowMerge",
                names.join("/."),
                names.len()
            ));
            None
        }
    }
}

/// A field that may be absent; `null` counts as absent.
pub(crate) fn optional<'a>(map: &'a Map<String, Value>, field: &str) -> Option<&'a Value> {
    map.get(field).filter(|v| !v.is_null())
}

/// A required id field, checked against the id rules.
pub(crate) fn required_id(
    map: &Map<String, Value>,
    field: &str,
    errors: &mut Vec<String>,
) -> Option<String> {
    match map.get(field) {
        None => missing(field, errors),
        Some(Value::String(s)) => match validate_id(s) {
            Ok(()) => Some(s.clone()),
            Err(why) => {
                errors.push(format!(".{field}: {why}"));
                None
            }
        },
        Some(other) => wrong_type(field, "a string", other, errors),
    }
}

/// The largest whole number a double holds exactly, and every smaller one: 2^53.
const MAX_EXACT_DOUBLE: f64 = 9_007_199_254_740_992.0;

/// 2^63: doubles at or beyond it are out of an `i64`'s range.
const I64_BOUND: f64 = 9_223_372_036_854_775_808.0;

/// An integer given as a JSON number (whole, even if written `3600000.0`) or as a decimal
/// string.
pub(crate) fn integer(field: &str, v: &Value, errors: &mut Vec<String>) -> Option<i64> {
    let parsed = match v {
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Ok(i),
            // Clients that serialise doubles write `3600000.0`: a whole number all the
            // same, taken while a double holds it exactly.
            (None, Some(f)) if n.is_f64() && f.fract() != 0.0 => {
                Err(format!("must be a whole number of milliseconds, got {n}"))
            }
            (None, Some(f)) if n.is_f64() && f.abs() <= MAX_EXACT_DOUBLE => Ok(f as i64),
            (None, Some(f)) if n.is_f64() && f.abs() < I64_BOUND => Err(format!(
                "{n} is a floating-point number too large to be exact; write it as an integer"
            )),
            _ => Err(format!("{n} is out of range (a signed 64-bit integer)")),
        },
        Value::String(s) => s.parse::<i64>().map_err(|_| {
            format!("must be an integer (a JSON number or a decimal string), got {s:?}")
        }),
        other => Err(format!(
            "must be an integer (a JSON number or a decimal string), got {}",
            type_name(other)
        )),
    };
    parsed
        .map_err(|e| errors.push(format!(".{field}: {e}")))
        .ok()
}

/// A boolean given as JSON `true`/`false` or as the strings `"true"`/`"false"`.
fn boolean(field: &str, v: &Value, errors: &mut Vec<String>) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::String(s) if s == "true" => Some(true),
        Value::String(s) if s == "false" => Some(false),
        other => wrong_type(field, "true or false", other, errors),
    }
}

fn missing<T>(field: &str, errors: &mut Vec<String>) -> Option<T> {
    errors.push(format!(".{field}: required field is missing"));
    None
}

pub(crate) fn wrong_type<T>(
    field: &str,
    expected: &str,
    got: &Value,
    errors: &mut Vec<String>,
) -> Option<T> {
    errors.push(format!(
        ".{field}: must be {expected}, got {}",
        type_name(got)
    ));
    None
}

pub(crate) fn bad(message: String) -> Invalid {
    Invalid::BadRequest(vec![message])
}

/// The JSON type of a value, for error messages.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

mod detect;

pub use detect::retractions;

#[cfg(test)]
mod tests;
