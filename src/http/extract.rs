//! Extractors that turn every malformed request into an [`ApiError`] naming what is wrong,
//! instead of axum's plain-text rejections.

use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde_json::Value;

use super::error::ApiError;
use super::AppState;
use crate::model::validate_id;

/// A request body that must be JSON (`application/json` or `application/*+json`).
pub struct JsonBody(pub Value);

impl FromRequest<AppState> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let content_type = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !is_json(content_type) {
            return Err(ApiError::UnsupportedMediaType(format!(
                "the body must be JSON: send Content-Type: application/json (got {:?})",
                content_type
            )));
        }
        // A client that trickles its body must not hold a connection and a task forever.
        // The size limit is applied here, the one place that reads bodies, rather than by a
        // layer that every request (most have no body) would pass through.
        let deadline = state.limits.body_timeout;
        let limit = state.limits.max_body_bytes;
        let body = Limited::new(req.into_body(), limit);
        let bytes = tokio::time::timeout(deadline, body.collect())
            .await
            .map_err(|_| {
                ApiError::RequestTimeout(format!(
                    "the body did not arrive within {} ms",
                    deadline.as_millis()
                ))
            })?
            .map_err(|e| {
                if e.downcast_ref::<LengthLimitError>().is_some() {
                    ApiError::PayloadTooLarge(format!(
                        "the body is over the size limit of {limit} bytes"
                    ))
                } else {
                    ApiError::bad_request(format!("could not read the body: {e}"))
                }
            })?
            .to_bytes();
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))
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

/// The `{id}` of a path, percent-decoded and checked against the id rules.
pub struct IdPath(pub String);

impl<S: Send + Sync> FromRequestParts<S> for IdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let axum::extract::Path(id) =
            axum::extract::Path::<String>::from_request_parts(parts, state)
                .await
                .map_err(|e: PathRejection| {
                    ApiError::bad_request(format!("id in the path: {e}"))
                })?;
        validate_id(&id).map_err(|why| ApiError::bad_request(format!("id in the path {why}")))?;
        Ok(IdPath(id))
    }
}

#[cfg(test)]
mod tests {
    use super::is_json;

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
