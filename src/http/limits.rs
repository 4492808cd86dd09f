//! The request limits every part of the front end applies, from the flags, and reading a
//! request's body within them.

use std::time::Duration;

use axum::body::{Body, Bytes};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::error::ApiError;

/// Request limits, from the flags.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_batch: usize,
    /// Between heartbeat comments on idle watch streams.
    pub events_heartbeat: Duration,
    /// How many events a watcher may fall behind the head before it is disconnected.
    pub events_max_lag: u64,
    /// Deadline for a request's headers.
    pub header_timeout: Duration,
    /// Deadline for a request's body.
    pub body_timeout: Duration,
    /// The most open connections.
    pub max_connections: usize,
}

/// A request's body, whole: at most `limit` bytes (413), arrived within `deadline` (408).
///
/// A client that trickles its body must not hold a connection and a task forever. The
/// size limit is applied where bodies are read (here, for the JSON bodies and the requests
/// sent on to the writer) rather than by a layer that every request, most without a body,
/// would pass through.
pub(super) async fn read_body(
    body: Body,
    limit: usize,
    deadline: Duration,
) -> Result<Bytes, ApiError> {
    let body = Limited::new(body, limit);
    Ok(tokio::time::timeout(deadline, body.collect())
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
        .to_bytes())
}
