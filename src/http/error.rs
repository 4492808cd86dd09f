//! The one error type of the HTTP layer, its `{"errors": [...]}` response, and the
//! reusable error responses of the `OpenAPI` document.

use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::ToResponse;

use super::reply;
use crate::store::{KeptResponse, StoreError};
use crate::validate::Invalid;

pub type Result<T, E = ApiError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("bad request: {0:?}")]
    BadRequest(Vec<String>),
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// The token is valid but its role is too low for the request (`http::caller`): 403.
    /// The message says which role the action needs and which one the token has.
    #[error("forbidden: {0}")]
    Forbidden(String),
    #[error("request timeout: {0}")]
    RequestTimeout(String),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("method not allowed: {0}")]
    MethodNotAllowed(String),
    #[error("gone: {0}")]
    Gone(String),
    #[error("conflict: {0:?}")]
    Conflict(Vec<String>),
    /// `If-Match` named another state than the item's: 412, nothing written.
    #[error("precondition failed: {0}")]
    PreconditionFailed(String),
    /// A guardrail refused the write and time will fix it: 429, with `Retry-After` in
    /// seconds when the daemon knows when relief comes.
    #[error("too many requests: {errors:?}")]
    TooMany {
        errors: Vec<String>,
        retry_after_secs: Option<u64>,
    },
    /// A guardrail refused the write and retrying it as is never passes: 422.
    #[error("unprocessable: {0:?}")]
    Unprocessable(Vec<String>),
    #[error("payload too large: {0}")]
    PayloadTooLarge(String),
    #[error("unsupported media type: {0}")]
    UnsupportedMediaType(String),
    /// Not an error: a write answered before under its `Idempotency-Key`, sent again as it
    /// was with `Idempotent-Replayed: true` (`http::idempotency`, `reply::replay`). Here because it ends a
    /// handler where the store is called, as an error does, with an answer it did not build.
    #[error("replayed ({})", .0.status)]
    Replayed(Box<KeptResponse>),
    /// 503 with `Retry-After` and a message the client may read: on etcd, no writer could
    /// be reached within `--forward-wait-ms` for a request only the writer serves
    /// (`http::forward`), or a replica could not confirm it shows every acknowledged write
    /// ([`StoreError::Behind`]).
    #[error("unavailable: {0}")]
    Unavailable(String),
    #[error(transparent)]
    Store(StoreError),
}

/// A store error as the client is told it: a replay and a reused key have answers of their
/// own; the rest are the store's failures.
impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        match e {
            StoreError::Replay(kept) => ApiError::Replayed(kept),
            StoreError::Behind(why) => ApiError::Unavailable(why),
            StoreError::KeyReused(key) => ApiError::Unprocessable(vec![format!(
                "Idempotency-Key {key:?}: was first used for a different request (another \
                 method, path, query, Blocklist-Source, If-Match or body) within the \
                 retention; nothing was written. Send a new key for a new request"
            )]),
            e => ApiError::Store(e),
        }
    }
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::BadRequest(vec![message.into()])
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::PreconditionFailed(_) => StatusCode::PRECONDITION_FAILED,
            ApiError::TooMany { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Gone(_) => StatusCode::GONE,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Replayed(kept) => StatusCode::from_u16(kept.status).unwrap_or(StatusCode::OK),
            ApiError::Store(e) if e.is_unavailable() => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn messages(self) -> Vec<String> {
        match self {
            ApiError::BadRequest(errors)
            | ApiError::Conflict(errors)
            | ApiError::Unprocessable(errors)
            | ApiError::TooMany { errors, .. } => errors,
            ApiError::NotFound(m)
            | ApiError::Unauthorized(m)
            | ApiError::Forbidden(m)
            | ApiError::RequestTimeout(m)
            | ApiError::MethodNotAllowed(m)
            | ApiError::Gone(m)
            | ApiError::PreconditionFailed(m)
            | ApiError::PayloadTooLarge(m)
            | ApiError::UnsupportedMediaType(m)
            | ApiError::Unavailable(m) => vec![m],
            // Answered by `into_response` with the kept body, never with messages.
            ApiError::Replayed(_) => Vec::new(),
            // Details of internal failures go to the log, not to the client.
            // A write answered this may still have been applied: its transaction committed
            // and only the flush failed, and the reopen found it on disk.
            ApiError::Store(e) if e.operator_action().is_some() => {
                vec![e.operator_action().unwrap_or_default().into()]
            }
            ApiError::Store(e) if e.is_unavailable() => vec![
                "the store is unavailable (storage error); retry later. A write answered this \
                 was not acknowledged and may or may not have been applied: retry it with the \
                 same Idempotency-Key, or re-read before retrying, or retry an add with \
                 allowMerge"
                    .into(),
            ],
            ApiError::Store(_) => {
                vec!["internal error; the daemon's log has the details".into()]
            }
        }
    }
}

impl From<Invalid> for ApiError {
    fn from(invalid: Invalid) -> ApiError {
        match invalid {
            Invalid::BadRequest(errors) => ApiError::BadRequest(errors),
            Invalid::TooLarge(message) => ApiError::PayloadTooLarge(message),
        }
    }
}

/// The body of every error response.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What is wrong; each message names the element index, the field and the id where
    /// there is one.
    pub errors: Vec<String>,
}

// ---- Reusable error responses ----------------------------------------------------------
// What several operations list in one line each (`(status = 401, response = Unauthorized)`):
// a description of when the status is sent, over the same `ErrorBody`. They are never built:
// the handlers answer with an `ApiError`, whose status picks the case.

/// The `{id}` in the path breaks the id rules (empty, over 256 bytes, a control character,
/// or not valid percent-encoded UTF-8).
#[derive(ToResponse)]
#[expect(
    dead_code,
    reason = "documents a response; the body sent is `ApiError`'s"
)]
pub struct BadId(ErrorBody);

/// `--token-file` is set and this request carries no valid `Authorization: Bearer` token
/// (mutations always need one; reads only with `--auth-reads`).
#[derive(ToResponse)]
#[response(headers(("WWW-Authenticate" = String, description = "`Bearer realm=\"blocklistd\"`")))]
#[expect(
    dead_code,
    reason = "documents a response; the body sent is `ApiError`'s"
)]
pub struct Unauthorized(ErrorBody);

/// `--token-file` is set and this request's token has a role too low for it: a `reader`
/// token on a change, or a `writer` token on an admin action. The message names the role
/// needed and the token's.
#[derive(ToResponse)]
#[expect(
    dead_code,
    reason = "documents a response; the body sent is `ApiError`'s"
)]
pub struct Forbidden(ErrorBody);

/// The body did not arrive within `--body-timeout-ms`.
#[derive(ToResponse)]
#[expect(
    dead_code,
    reason = "documents a response; the body sent is `ApiError`'s"
)]
pub struct RequestTimeout(ErrorBody);

/// The body is over `--max-body-bytes`, or holds more than `--max-batch` elements (ids, for a
/// check).
#[derive(ToResponse)]
#[expect(
    dead_code,
    reason = "documents a response; the body sent is `ApiError`'s"
)]
pub struct PayloadTooLarge(ErrorBody);

/// `Content-Type` is not `application/json` (or `application/*+json`).
#[derive(ToResponse)]
#[expect(
    dead_code,
    reason = "documents a response; the body sent is `ApiError`'s"
)]
pub struct UnsupportedMediaType(ErrorBody);

/// A stored value does not decode (details in the daemon's log).
#[derive(ToResponse)]
#[expect(
    dead_code,
    reason = "documents a response; the body sent is `ApiError`'s"
)]
pub struct Internal(ErrorBody);

/// The store is unavailable (disk full, I/O error, reopening after a storage fault, shutting
/// down). Retry later. A write answered 503 was not acknowledged, and may or may not have
/// been applied: retry it with the same Idempotency-Key, or re-read before retrying, or
/// retry an add with allowMerge.
#[derive(ToResponse)]
#[expect(
    dead_code,
    reason = "documents a response; the body sent is `ApiError`'s"
)]
pub struct Unavailable(ErrorBody);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Replayed(kept) = self {
            return reply::replay(*kept);
        }
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(error = %self, "request failed");
        }
        let retry_after = match &self {
            ApiError::TooMany {
                retry_after_secs: Some(secs),
                ..
            } => Some(HeaderValue::from(*secs)),
            // An election takes about a lease; a second is the pace of a replica's campaign.
            ApiError::Unavailable(_) => Some(HeaderValue::from(1)),
            _ => None,
        };
        let errors = self.messages();
        let mut response = (status, Json(ErrorBody { errors })).into_response();
        if let Some(secs) = retry_after {
            response.headers_mut().insert(RETRY_AFTER, secs);
        }
        response
    }
}
