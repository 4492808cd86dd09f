//! What successful responses of several resources share: the revision and dry-run headers,
//! and the empty body of a DELETE.

use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// The header that carries the revision a response reflects.
pub const REVISION_HEADER: &str = "x-blocklist-revision";

/// The header that marks the answer to a dry run (`?dryRun=true`).
pub const DRY_RUN_HEADER: &str = "dry-run";

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
