//! `Idempotency-Key` on writes (the IETF httpapi-idempotency-key-header draft): the header's
//! syntax, the fingerprint of the request it comes with, the response kept for a replay,
//! and the header's place in the `OpenAPI` document.
//!
//! The store does the rest, in the write's own transaction (`store::commit::idempotency`):
//! a key whose live record was made by the same request is answered with that record's
//! response and `Idempotent-Replayed: true`, and nothing is applied; a key first used by a
//! different request is answered 422; a key without a record lets the write run, and its
//! response, when a success, is kept with it. A dry run neither looks a key up nor keeps
//! one. Which writes take a key: every one routed here, each handler extracting [`Key`]
//! (no body) or [`KeyedBody`] (a JSON body) and passing [`Key::render`] to the store.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::{CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName};
use axum::response::Response;
use http_body_util::BodyExt;
use serde_json::Value;
use sha2::{Digest, Sha256};
use utoipa::openapi::path::{Operation, Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::{HeaderBuilder, ObjectBuilder, RefOr, Required, Type};
use utoipa::Modify;

use super::error::ApiError;
use super::extract::{DryRun, JsonBody};
use super::provenance::SOURCE_HEADER;
use super::state::AppState;
use crate::store::{Idempotency, KeptResponse};

/// The request header, as the draft names it.
pub const KEY_HEADER: &str = "idempotency-key";

/// The longest key, in bytes (after unquoting).
pub const MAX_KEY_BYTES: usize = crate::store::MAX_IDEMPOTENCY_KEY_BYTES;

/// The key's syntax as the document states it: a bare key of visible ASCII not starting
/// with `"`, or the draft's Structured Field String (quoted; `\"` and `\\` escaped, spaces
/// allowed). A test holds it against [`parse_key`].
const KEY_PATTERN: &str = r#"^(?:[!#-~][!-~]{0,254}|"(?:[ !#-\[\]-~]|\\["\\]){1,255}")$"#;

/// The `Idempotency-Key` of a write, checked, with the fingerprint of its request: for a
/// write without a body (a body sent anyway is not read, nor fingerprinted).
/// [`KeyedBody`] is the one for a write with a body.
pub struct Key(Option<(String, [u8; 32])>);

impl<S: Send + Sync> FromRequestParts<S> for Key {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Key, ApiError> {
        let key = key_of(&parts.headers)?;
        Ok(Key(
            key.map(|key| (key, fingerprint(request_hash(parts), b"")))
        ))
    }
}

/// A write's JSON body (as [`JsonBody`] reads it) and its [`Key`], fingerprinted with the
/// body's bytes as they arrived.
pub struct KeyedBody(pub Key, pub Value);

impl FromRequest<AppState> for KeyedBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<KeyedBody, ApiError> {
        let (parts, body) = req.into_parts();
        let key = key_of(&parts.headers)?;
        let hash = request_hash(&parts);
        let (value, bytes) = JsonBody::read(Request::from_parts(parts, body), state).await?;
        let key = key.map(|key| (key, fingerprint(hash, &bytes)));
        Ok(KeyedBody(Key(key), value))
    }
}

impl Key {
    /// The key as the store takes it, with `respond`, the handler's own answer to each
    /// outcome (`None`: an outcome that is not answered with a success), as what is kept;
    /// `None` without the header, and for a dry run. `respond` runs in the write's
    /// transaction, which sled may run more than once: it only computes.
    pub fn render<O: 'static>(
        self,
        dry: DryRun,
        respond: impl Fn(&O, u64) -> Option<Response> + Send + Sync + 'static,
    ) -> Option<Idempotency<O>> {
        if dry.is_set() {
            return None;
        }
        let (key, fingerprint) = self.0?;
        Some(Idempotency {
            key,
            fingerprint,
            render: Arc::new(move |outcome: &O, revision| {
                respond(outcome, revision).and_then(kept)
            }),
        })
    }
}

/// The key a request carries: `None` without the header; a 400 naming the header when it
/// is malformed or repeated.
fn key_of(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let mut values = headers.get_all(KEY_HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::bad_request(
            "Idempotency-Key: given more than once (give one key per request)",
        ));
    }
    parse_key(value.as_bytes())
        .map(Some)
        .map_err(|why| ApiError::bad_request(format!("Idempotency-Key: {why}")))
}

/// A key as sent: bare (1 to 255 bytes of visible ASCII, not starting with `"`) or quoted
/// as the draft's Structured Field String (its content, unescaped, 1 to 255 bytes of
/// printable ASCII). Both forms of one content are the same key.
fn parse_key(value: &[u8]) -> Result<String, String> {
    const RULE: &str = "send 1 to 255 characters of visible ASCII (such as a UUID), bare or \
                        as a quoted string";
    let key = if let Some(quoted) = value.strip_prefix(b"\"") {
        let Some(content) = quoted.strip_suffix(b"\"") else {
            return Err(format!("a quoted key must end with a quote; {RULE}"));
        };
        let mut key = Vec::with_capacity(content.len());
        let mut bytes = content.iter();
        while let Some(&b) = bytes.next() {
            match b {
                b'\\' => match bytes.next() {
                    Some(&escaped @ (b'"' | b'\\')) => key.push(escaped),
                    _ => return Err(format!("only \\\" and \\\\ may be escaped; {RULE}")),
                },
                b'"' => {
                    return Err(format!(
                        "a quote inside a quoted key must be escaped; {RULE}"
                    ))
                }
                b' '..=b'~' => key.push(b),
                _ => return Err(format!("a character that is not printable ASCII; {RULE}")),
            }
        }
        key
    } else {
        if let Some(b) = value.iter().find(|b| !b.is_ascii_graphic()) {
            return Err(format!(
                "{} is not visible ASCII; {RULE}",
                if *b == b' ' {
                    "a space".to_owned()
                } else {
                    format!("byte {b:#04x}")
                }
            ));
        }
        value.to_vec()
    };
    if key.is_empty() {
        return Err(format!("empty; {RULE}"));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(format!("{} bytes long; {RULE}", key.len()));
    }
    Ok(String::from_utf8(key).expect("ASCII"))
}

/// The request headers that change what a write does, and so are part of its fingerprint:
/// who it reports as (kept in its reports and past blocks), and the state a `PATCH` is
/// conditional on.
const FINGERPRINTED_HEADERS: [&str; 2] = [SOURCE_HEADER, "if-match"];

/// The hash of a request's method, path and query (as sent) and its
/// [`FINGERPRINTED_HEADERS`] (each value as sent, after its name), to be finished with its
/// body. A NUL ends each part, and one more the headers: none of them can hold one.
fn request_hash(parts: &Parts) -> Sha256 {
    let mut hash = Sha256::new();
    hash.update(parts.method.as_str());
    hash.update([0]);
    hash.update(parts.uri.path());
    hash.update([0]);
    hash.update(parts.uri.query().unwrap_or(""));
    hash.update([0]);
    for name in FINGERPRINTED_HEADERS {
        for value in &parts.headers.get_all(name) {
            hash.update(name);
            hash.update(b":");
            hash.update(value.as_bytes());
            hash.update([0]);
        }
    }
    hash.update([0]);
    hash
}

/// The fingerprint of a request: [`request_hash`] finished with the body's bytes.
fn fingerprint(mut hash: Sha256, body: &[u8]) -> [u8; 32] {
    hash.update(body);
    hash.finalize().into()
}

/// The headers of a response that belong to its transport rather than to its answer: not
/// kept (hyper sets them again for the replay).
const TRANSPORT_HEADERS: [HeaderName; 4] = [CONTENT_LENGTH, TRANSFER_ENCODING, CONNECTION, DATE];

/// What a replay of `response` sends, when it is a success: the status, the headers the
/// handler set (the revision, the content type, and a `Location` or `ETag` if one ever does)
/// and the body's bytes.
fn kept(response: Response) -> Option<KeptResponse> {
    if !response.status().is_success() {
        return None;
    }
    let (parts, body) = response.into_parts();
    let headers = parts
        .headers
        .iter()
        .filter(|(name, _)| !TRANSPORT_HEADERS.contains(name))
        .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
        .collect();
    let body = ready_bytes(body);
    // Every answer of ours is built whole in memory; one that streams could not be kept.
    debug_assert!(
        body.is_some(),
        "a success answer to a write is not a whole body"
    );
    Some(KeptResponse {
        status: parts.status.as_u16(),
        headers,
        body: body?,
    })
}

/// The bytes of a body that is already whole (`Json`, an empty body): polled once, without
/// a runtime.
fn ready_bytes(body: Body) -> Option<Vec<u8>> {
    let mut collected = pin!(body.collect());
    match collected
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(Ok(collected)) => Some(collected.to_bytes().to_vec()),
        _ => None,
    }
}

/// Adds `Idempotency-Key` to every write of the document (each POST, PUT, DELETE and PATCH
/// but `POST /blocklist/check`, a read), with `Idempotent-Replayed` on its successes and the
/// reused key's 422, so that a write added later is documented with it too.
pub(super) struct IdempotencyDoc;

/// The operations that are reads, whatever their method.
const READS: [&str; 1] = ["/blocklist/check"];

impl Modify for IdempotencyDoc {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for (path, item) in &mut openapi.paths.paths {
            if READS.contains(&path.as_str()) {
                continue;
            }
            for operation in [
                &mut item.post,
                &mut item.put,
                &mut item.delete,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                document(operation);
            }
        }
    }
}

const REUSED: &str = "The Idempotency-Key was first used for a different request (another \
                      method, path, query, Blocklist-Source, If-Match or body) within the \
                      retention; nothing was written";

fn document(operation: &mut Operation) {
    operation
        .parameters
        .get_or_insert_with(Vec::new)
        .push(key_parameter());
    let responses = &mut operation.responses.responses;
    for (status, response) in responses.iter_mut() {
        if let (true, RefOr::T(response)) = (status.starts_with('2'), response) {
            response.headers.insert(
                "Idempotent-Replayed".into(),
                HeaderBuilder::new()
                    .schema(ObjectBuilder::new().schema_type(Type::Boolean))
                    .description(Some(
                        "`true` on the answer replayed for a repeated Idempotency-Key: sent \
                         as first answered (status, body, revision), and nothing applied again",
                    ))
                    .build(),
            );
        }
    }
    match responses.get_mut("422") {
        Some(RefOr::T(unprocessable)) => {
            unprocessable.description = format!("{}; or: {REUSED}", unprocessable.description);
        }
        Some(RefOr::Ref(_)) => {}
        None => {
            let mut unprocessable = utoipa::openapi::ResponseBuilder::new()
                .description(REUSED)
                .build();
            unprocessable.content.insert(
                "application/json".into(),
                utoipa::openapi::content::ContentBuilder::new()
                    .schema(Some(utoipa::openapi::Ref::from_schema_name("ErrorBody")))
                    .build(),
            );
            responses.insert("422".into(), RefOr::T(unprocessable));
        }
    }
}

fn key_parameter() -> Parameter {
    ParameterBuilder::new()
        .name("Idempotency-Key")
        .parameter_in(ParameterIn::Header)
        .required(Required::False)
        .description(Some(
            "Makes the write safe to retry (docs/api.md, \"Idempotency-Key\"): the same key \
             with the same request within --idempotency-retention (24h by default) is \
             answered as the first time, with `Idempotent-Replayed: true`, and applies \
             nothing again, also after a crash; with a different request, 422. Only \
             successes are kept: a refusal is decided afresh. A dry run neither looks the \
             key up nor keeps it. 1 to 255 characters of visible ASCII (a UUID, say), bare or \
             as the draft's quoted string; a malformed key, or the header twice, is a 400.",
        ))
        .schema(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(KEY_PATTERN)),
        ))
        .build()
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;

    use super::*;

    #[test]
    fn keys_bare_or_quoted() {
        assert_eq!(
            parse_key(b"8e03978e-40d5-43e8-bc93-6894a57f9324").unwrap(),
            "8e03978e-40d5-43e8-bc93-6894a57f9324"
        );
        assert_eq!(parse_key(b"\"a b\"").unwrap(), "a b");
        assert_eq!(
            parse_key(br#""say \"hi\" \\o/""#).unwrap(),
            r#"say "hi" \o/"#
        );
        assert_eq!(parse_key(&[b'k'; 255]).unwrap().len(), 255);
        let quoted: Vec<u8> = [&b"\""[..], &[b'k'; 255], b"\""].concat();
        assert_eq!(parse_key(&quoted).unwrap().len(), 255);
        for bad in [
            &b""[..],
            b"\"\"",
            b"a b",
            b"\"open",
            b"\"a\"b\"",
            b"\"\\n\"",
            b"tab\t",
            "ü".as_bytes(),
            &[b'k'; 256],
        ] {
            assert!(
                parse_key(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    /// The document's pattern takes exactly what [`parse_key`] takes, on a spread of values
    /// (judged by a JSON Schema validator, as a client generating from the document would).
    #[test]
    fn the_documented_pattern_is_the_parser() {
        let schema = serde_json::json!({"type": "string", "pattern": KEY_PATTERN});
        let validator = jsonschema::draft202012::new(&schema).unwrap();
        let long = "k".repeat(255);
        let too_long = "k".repeat(256);
        let quoted_long = format!("\"{long}\"");
        let quoted_too_long = format!("\"{too_long}\"");
        let escaped_long = format!("\"{}\"", "\\\"".repeat(255));
        for value in [
            "abc",
            "a\"b",
            "\"a b\"",
            "\"\"",
            "\"a\\\"b\"",
            "\"a\\nb\"",
            "a b",
            "\"",
            "\"ab",
            "x\"",
            "",
            "\t",
            "ü",
            long.as_str(),
            too_long.as_str(),
            quoted_long.as_str(),
            quoted_too_long.as_str(),
            escaped_long.as_str(),
            "\"\\\\\"",
            "!",
            "~",
        ] {
            assert_eq!(
                validator.is_valid(&serde_json::json!(value)),
                parse_key(value.as_bytes()).is_ok(),
                "{value:?}"
            );
        }
    }

    #[test]
    fn fingerprints_tell_method_path_query_headers_and_body_apart() {
        let parts = |method: &str, uri: &str, headers: &[(&str, &str)]| {
            let mut request = axum::http::Request::builder().method(method).uri(uri);
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            let (parts, ()) = request.body(()).unwrap().into_parts();
            parts
        };
        let with = |method, uri, headers: &[(&str, &str)], body: &[u8]| {
            fingerprint(request_hash(&parts(method, uri, headers)), body)
        };
        let of = |method, uri, body: &[u8]| with(method, uri, &[], body);
        let base = of("POST", "/blocklist/nodes", b"[1]");
        assert_eq!(base, of("POST", "/blocklist/nodes", b"[1]"));
        assert_eq!(
            base,
            of("POST", "/blocklist/nodes?", b"[1]"),
            "an empty query is none"
        );
        for other in [
            of("PUT", "/blocklist/nodes", b"[1]"),
            of("POST", "/blocklist/taskmanagers", b"[1]"),
            of("POST", "/blocklist/nodes?force=true", b"[1]"),
            of("POST", "/blocklist/nodes", b"[1] "),
            of("POST", "/blocklist/nodes", b""),
            with(
                "POST",
                "/blocklist/nodes",
                &[("Blocklist-Source", "a")],
                b"[1]",
            ),
            with("POST", "/blocklist/nodes", &[("If-Match", "\"1\"")], b"[1]"),
        ] {
            assert_ne!(base, other);
        }
        // A header the write does not depend on is not part of it; the name of a counted
        // one is, so the same value under the other name is another request.
        assert_eq!(
            base,
            with("POST", "/blocklist/nodes", &[("Accept", "*/*")], b"[1]")
        );
        let source = with("PATCH", "/n", &[("Blocklist-Source", "\"1\"")], b"{}");
        let tag = with("PATCH", "/n", &[("If-Match", "\"1\"")], b"{}");
        assert_ne!(source, tag);
        assert_eq!(
            source,
            with("PATCH", "/n", &[("blocklist-source", "\"1\"")], b"{}"),
            "names are case-insensitive"
        );
    }

    #[test]
    fn a_kept_response_is_replayed_as_it_was_with_the_mark() {
        let response = super::super::reply::with_revision(
            7,
            (
                StatusCode::ACCEPTED,
                axum::Json(serde_json::json!([{"id": "n1"}])),
            ),
        );
        let kept = kept(response).unwrap();
        assert_eq!(kept.status, 202);
        assert_eq!(kept.body, br#"[{"id":"n1"}]"#);
        let names: Vec<&str> = kept.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["content-type", "x-blocklist-revision"]);
        let replayed = super::super::reply::replay(kept.clone());
        assert_eq!(replayed.status(), StatusCode::ACCEPTED);
        assert_eq!(replayed.headers()["x-blocklist-revision"], "7");
        assert_eq!(replayed.headers()["content-type"], "application/json");
        assert_eq!(
            replayed.headers()[super::super::reply::REPLAYED_HEADER],
            "true"
        );
        assert_eq!(ready_bytes(replayed.into_body()).unwrap(), kept.body);
        assert!(kept_refusal_is_none());
    }

    fn kept_refusal_is_none() -> bool {
        kept(StatusCode::CONFLICT.into_response()).is_none()
    }
}
