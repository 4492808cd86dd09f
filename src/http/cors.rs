//! CORS, opt-in with `--cors-origin`: pages of exactly those origins may call the API and
//! follow the feed from a browser. No wildcard and no credentials: the API's credential is
//! a bearer token the page sends itself, which CORS treats as an ordinary header.

use std::time::Duration;

use axum::http::header::{
    AUTHORIZATION, CONTENT_TYPE, ETAG, IF_MATCH, LINK, RETRY_AFTER, WWW_AUTHENTICATE,
};
use axum::http::{HeaderName, HeaderValue, Method};
use tower_http::cors::{AllowOrigin, CorsLayer};

use super::idempotency::KEY_HEADER;
use super::paging::CONTINUE_HEADER;
use super::provenance::SOURCE_HEADER;
use super::reply::{DRY_RUN_HEADER, REPLAYED_HEADER, REVISION_HEADER};

/// The layer for `origins`, or `None` when there are none (no CORS header is sent).
pub fn layer(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let origins: Vec<HeaderValue> = origins
        .iter()
        .filter_map(|o| HeaderValue::from_str(o).ok())
        .collect();
    let header = HeaderName::from_static;
    Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(origins))
            .allow_methods([
                Method::GET,
                Method::HEAD,
                Method::POST,
                Method::PUT,
                Method::PATCH,
                Method::DELETE,
            ])
            .allow_headers([
                AUTHORIZATION,
                CONTENT_TYPE,
                IF_MATCH,
                header("last-event-id"),
                header(KEY_HEADER),
                header(SOURCE_HEADER),
            ])
            .expose_headers([
                ETAG,
                RETRY_AFTER,
                WWW_AUTHENTICATE,
                header(REVISION_HEADER),
                header(CONTINUE_HEADER),
                LINK,
                header(DRY_RUN_HEADER),
                header(REPLAYED_HEADER),
            ])
            .max_age(Duration::from_secs(600)),
    )
}
