//! Bearer-token authentication for mutating requests (and reads, if the operator asks).
//!
//! Tokens come from `--token-file` (one per line, so a token can be rotated without a gap:
//! add the new one, move clients, remove the old). Comparison is constant-time, and tokens
//! are never logged: only the method and path of a refused request are.

use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::error::ApiError;

/// The accepted tokens and what they protect.
#[derive(Clone)]
pub struct Auth {
    tokens: Vec<Vec<u8>>,
    /// Whether reads need a token too.
    reads: bool,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the tokens themselves.
        f.debug_struct("Auth")
            .field("tokens", &self.tokens.len())
            .field("reads", &self.reads)
            .finish()
    }
}

impl Auth {
    /// Reads the token file: one token per line; blank lines and `#` comments are skipped.
    pub fn from_file(path: &Path, reads: bool) -> Result<Auth, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?;
        let tokens: Vec<Vec<u8>> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| l.as_bytes().to_vec())
            .collect();
        if tokens.is_empty() {
            return Err(format!("the token file {} holds no token", path.display()));
        }
        Ok(Auth { tokens, reads })
    }

    fn accepts(&self, presented: &[u8]) -> bool {
        // Check every token (no early exit), each in constant time.
        self.tokens
            .iter()
            .fold(subtle::Choice::from(0), |ok, t| {
                ok | t.as_slice().ct_eq(presented)
            })
            .into()
    }

    /// Whether this request needs a token.
    fn protects(&self, method: &Method, path: &str) -> bool {
        // The cluster's own machinery (probes, scraping) must never be locked out.
        if matches!(path, "/healthz" | "/readyz" | "/metrics") {
            return false;
        }
        let read = matches!(*method, Method::GET | Method::HEAD)
            || (*method == Method::POST && path == "/blocklist/check");
        !read || self.reads
    }
}

/// Middleware: refuses a protected request without a valid token with 401. Installed only
/// when a token file was given (`http::router`).
pub async fn require_token(State(auth): State<Arc<Auth>>, req: Request, next: Next) -> Response {
    if !auth.protects(req.method(), req.uri().path()) {
        return next.run(req).await;
    }
    let presented = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
    match presented {
        Some(token) if auth.accepts(token) => next.run(req).await,
        other => {
            let why = if other.is_some() {
                "the bearer token is not valid"
            } else {
                "this request needs an Authorization: Bearer <token> header"
            };
            tracing::info!(method = %req.method(), path = req.uri().path(), "refused: {why}");
            let mut response = ApiError::Unauthorized(why.into()).into_response();
            response.headers_mut().insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"blocklistd\""),
            );
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(reads: bool) -> Auth {
        Auth {
            tokens: vec![b"old".to_vec(), b"new-token".to_vec()],
            reads,
        }
    }

    #[test]
    fn any_listed_token_is_accepted_and_nothing_else() {
        let a = auth(false);
        assert!(a.accepts(b"old"));
        assert!(a.accepts(b"new-token"));
        assert!(!a.accepts(b"new-toke"));
        assert!(!a.accepts(b""));
    }

    #[test]
    fn what_is_protected() {
        let a = auth(false);
        assert!(a.protects(&Method::POST, "/blocklist/nodes"));
        assert!(a.protects(&Method::DELETE, "/blocklist/nodes/x"));
        assert!(a.protects(&Method::PUT, "/taskmanagers/x"));
        assert!(!a.protects(&Method::GET, "/blocklist"));
        assert!(!a.protects(&Method::POST, "/blocklist/check"));
        let a = auth(true);
        assert!(a.protects(&Method::GET, "/blocklist"));
        assert!(a.protects(&Method::POST, "/blocklist/check"));
        assert!(!a.protects(&Method::GET, "/healthz"));
        assert!(!a.protects(&Method::GET, "/metrics"));
    }
}
