//! Extractors that turn every malformed request into an [`ApiError`] naming what is wrong,
//! instead of axum's plain-text rejections.

use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use utoipa::IntoParams;

use super::caller::{Caller, Role};
use super::error::ApiError;
use super::limits::read_body;
use super::reply::{with_revision, DRY_RUN_HEADER};
use super::state::AppState;
use crate::model::{validate_id, Id};
use crate::store::{Force, Mode};

/// A request body that must be JSON (`application/json` or `application/*+json`).
pub struct JsonBody(pub Value);

impl FromRequest<AppState> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let (value, _) = JsonBody::read(req, state).await?;
        Ok(JsonBody(value))
    }
}

impl JsonBody {
    /// The body as JSON, and its bytes as they arrived (what an `Idempotency-Key`'s
    /// fingerprint covers).
    pub async fn read(req: Request, state: &AppState) -> Result<(Value, Bytes), ApiError> {
        let content_type = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !is_json(content_type) {
            return Err(ApiError::UnsupportedMediaType(format!(
                "the body must be JSON: send Content-Type: application/json (got {content_type:?})"
            )));
        }
        let bytes = read_body(
            req.into_body(),
            state.limits.max_body_bytes,
            state.limits.body_timeout,
        )
        .await?;
        let value = serde_json::from_slice::<UniqueKeys>(&bytes)
            .map(|UniqueKeys(value)| value)
            .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))?;
        Ok((value, bytes))
    }
}

/// A JSON value parsed like `serde_json::Value`, except that an object that repeats a key is
/// refused instead of keeping the last one: `"endTimestamp": 1, "endTimestamp": null` would
/// otherwise silently make a permanent block (a mistyped field is an error, never a default).
struct UniqueKeys(Value);

impl<'de> Deserialize<'de> for UniqueKeys {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<UniqueKeys, D::Error> {
        deserializer
            .deserialize_any(UniqueKeysVisitor)
            .map(UniqueKeys)
    }
}

struct UniqueKeysVisitor;

impl<'de> Visitor<'de> for UniqueKeysVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // JSON has no NaN or infinity: serde_json never hands one over.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut values = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(UniqueKeys(value)) = seq.next_element()? {
            values.push(value);
        }
        Ok(Value::Array(values))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format!(
                    "the key {key:?} appears twice in one object"
                )));
            }
            let UniqueKeys(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

fn is_json(content_type: &str) -> bool {
    let mime = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
}

/// The `{id}` of a path, percent-decoded and checked against the id rules. Also the
/// parameter's documentation (`params(IdPath)` on every single-resource route).
#[derive(IntoParams)]
#[into_params(names("id"), parameter_in = Path)]
pub struct IdPath(
    /// The id, percent-encoded (`a%2Fb` for `a/b`).
    #[param(value_type = Id)]
    pub String,
);

impl<S: Send + Sync> FromRequestParts<S> for IdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let id = path_param(parts, state, "id").await?;
        validate_id(&id).map_err(|why| ApiError::bad_request(format!("id in the path {why}")))?;
        Ok(IdPath(id))
    }
}

/// The path parameter `name`, percent-decoded (routes with more than one parameter too).
pub async fn path_param<S: Send + Sync>(
    parts: &mut Parts,
    state: &S,
    name: &str,
) -> Result<String, ApiError> {
    let axum::extract::Path(params) =
        axum::extract::Path::<Vec<(String, String)>>::from_request_parts(parts, state)
            .await
            .map_err(|e: PathRejection| {
                ApiError::bad_request(format!("{name} in the path: {e}"))
            })?;
    params
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, value)| value)
        .ok_or_else(|| ApiError::bad_request(format!("the path has no {name}")))
}

/// `?dryRun=true` on a write: the request is decided exactly as it would be (validation,
/// conflicts, merges, against every committed change) and answered with the same status
/// and body, plus `Dry-Run: true`, and nothing is written: no change, no revision, no
/// event. Also the parameter's documentation (`params(DryRun)` on every write).
#[derive(Debug, Clone, Copy, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DryRun {
    /// `true`: decide and answer the write, but make no change (the answer carries
    /// `Dry-Run: true` and no `X-Blocklist-Revision`). Default `false`.
    #[param(rename = "dryRun")]
    dry_run: Option<bool>,
}

impl DryRun {
    /// How the store is to take the write.
    pub fn mode(self) -> Mode {
        if self.is_set() {
            Mode::DryRun
        } else {
            Mode::Commit
        }
    }

    pub fn is_set(self) -> bool {
        self.dry_run == Some(true)
    }

    /// A successful write's response: with the revision of its change, or, for a dry run,
    /// with none (it made no change).
    pub fn written(self, revision: u64, response: impl IntoResponse) -> Response {
        if self.is_set() {
            response.into_response()
        } else {
            with_revision(revision, response)
        }
    }

    /// Any answer of the write's handler, marked `Dry-Run: true` for a dry run.
    pub fn answer(self, result: Result<Response, ApiError>) -> Response {
        let mut response = result.into_response();
        if self.is_set() {
            response
                .headers_mut()
                .insert(DRY_RUN_HEADER, HeaderValue::from_static("true"));
        }
        response
    }
}

impl<S: Send + Sync> FromRequestParts<S> for DryRun {
    type Rejection = ApiError;

    /// Every write takes it, so this is also where a write's query is checked whole: a
    /// parameter the write does not take is refused, never ignored (`?dryrun=true` must not
    /// make a real change).
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let taken = write_parameters(parts);
        let Query(query) = Query::<Vec<(String, String)>>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::bad_request(format!("query: {e}")))?;
        let unknown: Vec<String> = query
            .iter()
            .filter(|(name, _)| !taken.contains(&name.as_str()))
            .map(|(name, _)| format!("{name:?}"))
            .collect();
        if !unknown.is_empty() {
            return Err(ApiError::bad_request(format!(
                "query: this request takes no parameter {}; it takes {}",
                unknown.join(", "),
                taken.join(", ")
            )));
        }
        let dry_run = query_param(parts, state, "dryRun")
            .await?
            .map(|value| boolean("dryRun", &value))
            .transpose()?;
        Ok(DryRun { dry_run })
    }
}

/// The query parameters the write being extracted takes: `dryRun`, and `force` on an add or
/// an update, `holdOff` and `reason` on an unblock, the selector and `reason` on an unblock
/// by selector, `reason` on a retraction (from its route, as the router matched it).
fn write_parameters(parts: &Parts) -> &'static [&'static str] {
    let route = parts
        .extensions
        .get::<axum::extract::MatchedPath>()
        .map_or("", axum::extract::MatchedPath::as_str);
    match (parts.method.as_str(), route) {
        ("POST", "/blocklist/taskmanagers" | "/blocklist/nodes")
        | ("PATCH", "/blocklist/taskmanagers/{id}" | "/blocklist/nodes/{id}") => {
            &["dryRun", "force"]
        }
        ("DELETE", "/blocklist/taskmanagers/{id}" | "/blocklist/nodes/{id}") => {
            &["dryRun", "holdOff", "reason"]
        }
        ("DELETE", "/blocklist/taskmanagers" | "/blocklist/nodes") => {
            &["dryRun", "source", "cause", "all", "reason"]
        }
        ("POST", "/blocklist/retract/taskmanagers" | "/blocklist/retract/nodes") => {
            &["dryRun", "reason"]
        }
        _ => &["dryRun"],
    }
}

/// `?force=true` on an add: pass the blast-radius caps and the evacuation rate (never the
/// allowlist, the duration or the permanent guard). Admin tokens only; the blocks it lets
/// in say so (`forced`), and it is logged.
#[derive(Debug, Clone, Copy, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ForceParam {
    /// `true`: admit the batch even past the caps and the evacuation rate (admin tokens
    /// only). Default `false`.
    force: Option<bool>,
}

impl ForceParam {
    pub fn is_set(self) -> bool {
        self.force == Some(true)
    }

    /// The store's force of `caller`, when the write asks for one: admin tokens only.
    pub fn by(self, caller: &Caller) -> Result<Option<Force>, ApiError> {
        if !self.is_set() {
            return Ok(None);
        }
        caller.require(Role::Admin, "forcing a write past the guardrails")?;
        Ok(Some(Force {
            by: caller.name.clone(),
        }))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for ForceParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let force = query_param(parts, state, "force")
            .await?
            .map(|value| boolean("force", &value))
            .transpose()?;
        Ok(ForceParam { force })
    }
}

/// The longest hold-off of an unblock, in seconds: a week.
pub const MAX_HOLD_OFF_SECS: u64 = 7 * 24 * 3600;

/// The units of a hold-off, with their seconds.
const HOLD_OFF_UNITS: [(char, u64); 4] = [('s', 1), ('m', 60), ('h', 3600), ('d', 86_400)];

/// `?holdOff=30m` on an unblock: for that long, the id is on the allowlist (admin tokens
/// only), so the detector that blocked it cannot block it again at once.
///
/// Its pattern (a whole number of one unit without leading zeros, up to a week: `604800s`,
/// `10080m`, `168h`, `7d`) is what [`hold_off_secs`] takes; a test builds it from
/// [`HOLD_OFF_UNITS`] and the week and compares it with the document's.
#[derive(Debug, Clone, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HoldOffParam {
    /// How long the id may not be blocked again: a whole number of seconds (`s`), minutes
    /// (`m`), hours (`h`) or days (`d`), up to a week, e.g. `30m` (admin tokens only).
    #[param(rename = "holdOff", value_type = Option<String>, pattern = "^(?:(?:[1-9][0-9]{0,4}|[1-5][0-9]{5}|60[0-3][0-9]{3}|604[0-7][0-9]{2}|604800)s|(?:[1-9][0-9]{0,3}|100[0-7][0-9]|10080)m|(?:[1-9][0-9]{0,1}|1[0-5][0-9]|16[0-7]|168)h|(?:[1-6]|7)d)$")]
    hold_off_ms: Option<i64>,
}

impl HoldOffParam {
    pub fn ms(&self) -> Option<i64> {
        self.hold_off_ms
    }
}

/// The seconds of a hold-off as its pattern spells it; `None` for anything else.
fn hold_off_secs(value: &str) -> Option<u64> {
    let unit = value.chars().last()?;
    let (_, secs) = HOLD_OFF_UNITS.iter().find(|(u, _)| *u == unit)?;
    let number = &value[..value.len() - 1];
    let valid = number.bytes().all(|b| b.is_ascii_digit()) && !number.starts_with('0');
    let total = number
        .parse::<u64>()
        .ok()
        .filter(|_| valid)?
        .checked_mul(*secs)?;
    (1..=MAX_HOLD_OFF_SECS).contains(&total).then_some(total)
}

impl<S: Send + Sync> FromRequestParts<S> for HoldOffParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Some(value) = query_param(parts, state, "holdOff").await? else {
            return Ok(HoldOffParam { hold_off_ms: None });
        };
        let secs = hold_off_secs(&value).ok_or_else(|| {
            ApiError::bad_request(format!(
                "holdOff: must be a whole number of s, m, h or d up to a week, such as 30m \
                 or 2h, got {value:?}"
            ))
        })?;
        let ms = i64::try_from(secs * 1000).expect("at most a week of ms");
        Ok(HoldOffParam {
            hold_off_ms: Some(ms),
        })
    }
}

/// `value` with every whole number written as floating point up to 2^53 (where a double is
/// exact) as the integer it is: JSON Schema counts `46.0` as an integer, and typed bodies
/// take it so.
pub fn whole_floats_as_integers(value: &mut Value) {
    const EXACT: f64 = 9_007_199_254_740_992.0;
    match value {
        Value::Number(n) if !n.is_i64() && !n.is_u64() => {
            if let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() <= EXACT) {
                #[expect(clippy::cast_possible_truncation, reason = "whole and within 2^53")]
                let whole = f as i64;
                *value = Value::from(whole);
            }
        }
        Value::Array(values) => values.iter_mut().for_each(whole_floats_as_integers),
        Value::Object(map) => map.values_mut().for_each(whole_floats_as_integers),
        _ => {}
    }
}

/// The value of query parameter `name`, if given; a 400 when it is given more than once.
/// Other parameters are left alone, as on every write.
pub async fn query_param<S: Send + Sync>(
    parts: &mut Parts,
    state: &S,
    name: &str,
) -> Result<Option<String>, ApiError> {
    let Query(query) = Query::<Vec<(String, String)>>::from_request_parts(parts, state)
        .await
        .map_err(|e| ApiError::bad_request(format!("query: {e}")))?;
    let mut given = query.into_iter().filter(|(n, _)| n == name).map(|(_, v)| v);
    let first = given.next();
    if given.next().is_some() {
        return Err(ApiError::bad_request(format!(
            "{name}: given more than once (give it once)"
        )));
    }
    Ok(first)
}

pub fn boolean(name: &str, value: &str) -> Result<bool, ApiError> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        other => Err(ApiError::bad_request(format!(
            "{name}: must be true or false, got {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::{is_json, UniqueKeys};
    use serde_json::Value;

    #[test]
    fn bodies_parse_like_values_but_refuse_a_repeated_key() {
        let parse = |text: &str| serde_json::from_str::<UniqueKeys>(text).map(|u| u.0);
        for text in [
            r#"[{"id": "a", "timeout": 5, "n": -3, "f": 1.5, "z": null, "b": [true, {"x": {}}]}]"#,
            r#"{"taskManagers": ["a", "b"], "nodes": []}"#,
            r#""just a string""#,
            "18446744073709551615",
        ] {
            let want: Value = serde_json::from_str(text).unwrap();
            assert_eq!(parse(text).unwrap(), want, "{text}");
        }
        let err = parse(r#"[{"id": "d1", "endTimestamp": 4102444800000, "endTimestamp": null}]"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("the key \"endTimestamp\" appears twice"),
            "{err}"
        );
        // The same key in two different objects is fine.
        assert!(parse(r#"[{"id": "a"}, {"id": "b", "x": {"id": "c"}}]"#).is_ok());
        // serde_json's nesting limit still applies.
        assert!(parse(&format!("{}{}", "[".repeat(10_000), "]".repeat(10_000))).is_err());
    }

    #[test]
    fn hold_offs_are_exactly_what_their_pattern_spells() {
        use super::{hold_off_secs, HOLD_OFF_UNITS, MAX_HOLD_OFF_SECS};
        // The document's pattern is the one built from the units and the week.
        let document: Value = serde_json::from_str(crate::http::openapi_document()).unwrap();
        let parameters = &document["paths"]["/blocklist/nodes/{id}"]["delete"]["parameters"];
        let documented = parameters
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "holdOff")
            .unwrap()["schema"]["pattern"]
            .as_str()
            .unwrap()
            .to_owned();
        let units: Vec<String> = HOLD_OFF_UNITS
            .iter()
            .map(|(unit, secs)| {
                let max = i64::try_from(MAX_HOLD_OFF_SECS / secs).unwrap();
                format!("(?:{}){unit}", crate::http::schema::digits_up_to(max))
            })
            .collect();
        assert_eq!(documented, format!("^(?:{})$", units.join("|")));
        assert_eq!(hold_off_secs("30m"), Some(1800));
        assert_eq!(hold_off_secs("7d"), Some(MAX_HOLD_OFF_SECS));
        assert_eq!(hold_off_secs("604800s"), Some(MAX_HOLD_OFF_SECS));
        for bad in [
            "", "0s", "8d", "604801s", "030m", "1h30m", "+5m", "5", "m", "5 m", "1.5h",
        ] {
            assert_eq!(hold_off_secs(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn whole_floats_become_integers_up_to_two_to_the_53() {
        let mut value = serde_json::json!({"a": 46.0, "b": [1.5, 2.0], "c": 1e300, "d": -3.0});
        super::whole_floats_as_integers(&mut value);
        assert_eq!(
            value,
            serde_json::json!({"a": 46, "b": [1.5, 2], "c": 1e300, "d": -3})
        );
    }

    #[test]
    fn json_content_types() {
        assert!(is_json("application/json"));
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(is_json("application/merge-patch+json"));
        assert!(!is_json("text/plain"));
        assert!(!is_json(""));
        assert!(!is_json("application/jsonx"));
    }
}
