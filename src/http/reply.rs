//! What successful responses of several resources share: the revision and dry-run headers,
//! the empty body of a DELETE, and a kept response replayed for an `Idempotency-Key`.

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::store::KeptResponse;

/// The header that carries the revision a response reflects.
pub const REVISION_HEADER: &str = "x-blocklist-revision";

/// The header that marks the answer to a dry run (`?dryRun=true`).
pub const DRY_RUN_HEADER: &str = "dry-run";

/// The header that marks an answer replayed for a repeated `Idempotency-Key`.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// Adds the `X-Blocklist-Revision` header to a response.
pub(crate) fn with_revision(revision: u64, response: impl IntoResponse) -> Response {
    let mut response = response.into_response();
    response
        .headers_mut()
        .insert(REVISION_HEADER, HeaderValue::from(revision));
    response
}

/// The body of a successful DELETE: an empty object.
// `deny_unknown_fields` is for the schema derive: it documents `additionalProperties: false`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

/// A kept response (`http::idempotency`) as it is sent again: its status, headers and body
/// as first sent, marked `Idempotent-Replayed: true`.
pub fn replay(kept: KeptResponse) -> Response {
    let mut response = Response::new(Body::from(kept.body));
    *response.status_mut() = StatusCode::from_u16(kept.status).unwrap_or(StatusCode::OK);
    let headers = response.headers_mut();
    for (name, value) in kept.headers {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::from_bytes(&value))
        {
            headers.append(name, value);
        }
    }
    headers.insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    response
}
