//! Bearer-token authentication for mutating requests (and reads, if the operator asks), and
//! the role each token has.
//!
//! Tokens come from `--token-file` (syntax: `super::tokens`), each with an optional name and
//! a role; so do client certificates (a name they carry, verified by `--tls-client-ca`): a
//! request without a token is its connection's certificate's, if the file names it. Several
//! tokens let one be rotated without a gap: add the new one, move clients, remove the old.
//! Comparison is constant-time over every token, and tokens are never logged: only the
//! method and path of a refused request, and the name and role of a caller refused for its
//! role.

use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use super::caller::{Caller, Role};
use super::error::ApiError;
use super::tokens::{self, Credential, Entry};
use crate::tls::Peer;

/// The accepted tokens, who holds each, and what they protect.
#[derive(Clone)]
pub struct Auth {
    entries: Vec<Entry>,
    /// Whether reads need a token too.
    reads: bool,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the tokens themselves.
        f.debug_struct("Auth")
            .field("tokens", &self.entries.len())
            .field("reads", &self.reads)
            .finish()
    }
}

impl Auth {
    /// Reads the token file (its syntax: `super::tokens`).
    pub fn from_file(path: &Path, reads: bool) -> Result<Auth, String> {
        let entries = tokens::read(path)?;
        let count = |role| entries.iter().filter(|e| e.caller.role == role).count();
        tracing::info!(
            path = %path.display(),
            admin = count(Role::Admin),
            writer = count(Role::Writer),
            enforcer = count(Role::Enforcer),
            detector = count(Role::Detector),
            reader = count(Role::Reader),
            "tokens read"
        );
        Ok(Auth { entries, reads })
    }

    /// The holder of `presented`, if it is a listed token.
    fn caller_of(&self, presented: &[u8]) -> Option<&Caller> {
        // Compare with every token (no early exit), each in constant time, and pick the
        // match without a branch on which one it was.
        let mut found = subtle::Choice::from(0);
        let mut index = 0u64;
        for (i, entry) in (0u64..).zip(&self.entries) {
            // Skipping certificates' entries tells only how many there are.
            let Credential::Token(token) = &entry.credential else {
                continue;
            };
            let hit = token.as_slice().ct_eq(presented);
            index.conditional_assign(&i, hit);
            found |= hit;
        }
        bool::from(found).then(|| &self.entries[index as usize].caller)
    }

    /// The holder of a verified client certificate: the entry of the first of its names
    /// (subject alternative names first, then the common name) the token file lists.
    fn caller_of_peer(&self, peer: &Peer) -> Option<&Caller> {
        peer.names.iter().find_map(|name| {
            self.entries
                .iter()
                .find_map(|entry| match &entry.credential {
                    Credential::Subject(subject) if subject == name => Some(&entry.caller),
                    _ => None,
                })
        })
    }

    /// The least role this request needs, or `None` when it needs no token.
    fn needs(&self, method: &Method, path: &str) -> Option<Role> {
        // The cluster's own machinery (probes, scraping) must never be locked out.
        if matches!(path, "/healthz" | "/readyz" | "/metrics") {
            return None;
        }
        // The console's page and scripts hold no data: the page asks for the token.
        if super::console::is_console(path) {
            return None;
        }
        let read = matches!(*method, Method::GET | Method::HEAD)
            || (*method == Method::POST && path == "/blocklist/check");
        if !read {
            // What an enforcer reports from its cluster: statuses, and where task managers
            // run. What a detector reports: blocks and their retraction, under its own name
            // (the handlers fix the source). Everything else that writes needs a writer.
            let enforced = path.starts_with("/enforcement/") || path.starts_with("/taskmanagers");
            let detected = *method == Method::POST && super::routes::is_detector_route(path);
            Some(if enforced {
                Role::Enforcer
            } else if detected {
                Role::Detector
            } else {
                Role::Writer
            })
        } else if self.reads {
            Some(Role::Reader)
        } else {
            None
        }
    }
}

/// Middleware: refuses a protected request without a valid token with 401, and one whose
/// token's role is too low for it (a `reader` token on a change) with 403; otherwise puts the
/// token's [`Caller`] into the request's extensions. Installed only when a token file was
/// given (`http::router`).
pub async fn require_token(
    State(auth): State<Arc<Auth>>,
    mut req: Request,
    next: Next,
) -> Response {
    let Some(needs) = auth.needs(req.method(), req.uri().path()) else {
        return next.run(req).await;
    };
    let presented = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
    let peer = certificate_caller(&req);
    let peer = peer.as_ref();
    // A token sent wins over the connection's certificate: the client chose it for this
    // request.
    let caller = match (presented, peer) {
        (Some(token), _) => auth.caller_of(token),
        (None, Some(peer)) => auth.caller_of_peer(peer),
        (None, None) => None,
    };
    let Some(caller) = caller else {
        let why = match (presented, peer) {
            (Some(_), _) => "the bearer token is not valid".to_owned(),
            (None, Some(peer)) => format!(
                "the client certificate ({}) is not in the token file, and no \
                 Authorization: Bearer <token> header was sent",
                peer.names.join(", ")
            ),
            (None, None) => "this request needs an Authorization: Bearer <token> header".to_owned(),
        };
        tracing::info!(method = %req.method(), path = req.uri().path(), "refused: {why}");
        let mut response = ApiError::Unauthorized(why).into_response();
        response.headers_mut().insert(
            WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"blocklistd\""),
        );
        return response;
    };
    // Checked before `require`, so that an allowed request builds no message.
    if !caller.role.grants(needs) {
        let what = format!("{} {}", req.method(), req.uri().path());
        tracing::info!(
            method = %req.method(),
            path = req.uri().path(),
            caller = caller.name.as_deref().unwrap_or("-"),
            role = %caller.role,
            "refused: the caller's role is too low"
        );
        if let Err(refused) = caller.require(needs, &what) {
            return refused.into_response();
        }
    }
    req.extensions_mut().insert(caller.clone());
    next.run(req).await
}

/// The client certificate a request is the caller's by: its connection's, or — on a
/// request another daemon sent on, over a connection whose certificate `--tls-peer-ca`
/// verified — the one the caller showed that daemon, by the names it sent
/// ([`crate::tls::FORWARDED_NAMES_HEADER`]; none: the caller showed no certificate, and
/// the forwarding daemon's own is not the caller's). Anyone else's names header is ignored.
fn certificate_caller(req: &Request) -> Option<Peer> {
    let connection = req.extensions().get::<Peer>()?;
    if !(connection.daemon && req.headers().contains_key(super::forward::FORWARDED_HEADER)) {
        return Some(connection.clone());
    }
    let names: Vec<String> = req
        .headers()
        .get_all(crate::tls::FORWARDED_NAMES_HEADER)
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_owned))
        .collect();
    (!names.is_empty()).then(|| Peer {
        names: names.into(),
        daemon: false,
    })
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::StatusCode;
    use axum::routing::get;
    use axum::Router;
    use http_body_util::BodyExt;
    use tower_service::Service;

    use super::super::caller::TokenCheck;
    use super::*;

    fn auth(text: &str, reads: bool) -> Auth {
        Auth {
            entries: tokens::parse(text).unwrap(),
            reads,
        }
    }

    #[test]
    fn each_listed_token_is_its_own_caller_and_nothing_else_is_one() {
        let a = auth(
            "old\nnew-token name=alice role=admin\nro role=reader",
            false,
        );
        assert_eq!(
            a.caller_of(b"old"),
            Some(&Caller::with_token(None, Role::Writer))
        );
        assert_eq!(
            a.caller_of(b"new-token"),
            Some(&Caller::with_token(Some("alice".into()), Role::Admin))
        );
        assert_eq!(a.caller_of(b"ro").map(|c| c.role), Some(Role::Reader));
        assert_eq!(a.caller_of(b"new-toke"), None);
        assert_eq!(a.caller_of(b"new-token "), None);
        assert_eq!(a.caller_of(b""), None);
    }

    #[test]
    fn a_certificate_is_the_caller_its_first_listed_name_says() {
        let a = auth(
            "subject=cn.example name=by-cn role=reader\n\
             subject=san.example name=by-san role=admin\n\
             san.example",
            false,
        );
        let peer = |names: &[&str]| Peer {
            daemon: false,
            names: names.iter().map(|n| (*n).to_owned()).collect(),
        };
        // Subject alternative names come first: the first listed one wins.
        assert_eq!(
            a.caller_of_peer(&peer(&["san.example", "cn.example"])),
            Some(&Caller::with_certificate("by-san".into(), Role::Admin))
        );
        assert_eq!(
            a.caller_of_peer(&peer(&["other.example", "cn.example"])),
            Some(&Caller::with_certificate("by-cn".into(), Role::Reader))
        );
        assert_eq!(a.caller_of_peer(&peer(&["other.example"])), None);
        // A token line is no certificate, and a subject is no token.
        assert_eq!(
            a.caller_of(b"san.example"),
            Some(&Caller::with_token(None, Role::Writer))
        );
        assert_eq!(a.caller_of(b"subject=san.example"), None);
    }

    #[test]
    fn what_each_request_needs() {
        let a = auth("t", false);
        // What a detector reports: blocks, retractions, alerts (a writer may too).
        for path in [
            "/blocklist/nodes",
            "/blocklist/taskmanagers",
            "/blocklist/retract/nodes",
            "/webhooks/alertmanager",
        ] {
            assert_eq!(a.needs(&Method::POST, path), Some(Role::Detector), "{path}");
        }
        assert_eq!(
            a.needs(&Method::PATCH, "/blocklist/nodes/x"),
            Some(Role::Writer)
        );
        assert_eq!(
            a.needs(&Method::DELETE, "/blocklist/nodes/x"),
            Some(Role::Writer)
        );
        assert_eq!(
            a.needs(&Method::PUT, "/taskmanagers/x"),
            Some(Role::Enforcer)
        );
        assert_eq!(
            a.needs(&Method::PUT, "/enforcement/bridge"),
            Some(Role::Enforcer)
        );
        assert_eq!(
            a.needs(&Method::DELETE, "/blocklist/taskmanagers/x"),
            Some(Role::Writer)
        );
        assert_eq!(a.needs(&Method::GET, "/blocklist"), None);
        assert_eq!(a.needs(&Method::POST, "/blocklist/check"), None);
        let a = auth("t", true);
        assert_eq!(a.needs(&Method::GET, "/blocklist"), Some(Role::Reader));
        assert_eq!(
            a.needs(&Method::POST, "/blocklist/check"),
            Some(Role::Reader)
        );
        assert_eq!(
            a.needs(&Method::DELETE, "/blocklist/nodes"),
            Some(Role::Writer)
        );
        assert_eq!(a.needs(&Method::GET, "/healthz"), None);
        assert_eq!(a.needs(&Method::GET, "/metrics"), None);
    }

    /// A router whose one route answers with the caller its handler sees.
    fn app(reads: bool) -> Router {
        async fn who(caller: Caller) -> String {
            format!("{} {}", caller.name.as_deref().unwrap_or("-"), caller.role)
        }
        let auth = Arc::new(auth(
            "w name=ci\nr name=grafana role=reader\na role=admin",
            reads,
        ));
        Router::new()
            .route("/x", get(who).post(who))
            .layer(axum::middleware::from_fn_with_state(auth, require_token))
            .with_state(TokenCheck::On)
    }

    async fn send(app: &mut Router, method: Method, token: Option<&str>) -> (StatusCode, String) {
        let mut request = Request::builder().method(method).uri("/x");
        if let Some(token) = token {
            request = request.header(AUTHORIZATION, format!("Bearer {token}"));
        }
        let response = app
            .call(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn the_handler_sees_the_tokens_caller_and_a_reader_cannot_write() {
        let mut app = app(false);
        assert_eq!(
            send(&mut app, Method::POST, Some("w")).await,
            (StatusCode::OK, "ci writer".into())
        );
        assert_eq!(
            send(&mut app, Method::POST, Some("a")).await,
            (StatusCode::OK, "- admin".into())
        );
        assert_eq!(
            send(&mut app, Method::POST, Some("r")).await,
            (
                StatusCode::FORBIDDEN,
                r#"{"errors":["POST /x needs a writer token; this token's role is reader"]}"#
                    .into()
            )
        );
        assert_eq!(
            send(&mut app, Method::POST, None).await.0,
            StatusCode::UNAUTHORIZED
        );
        // An open read is not checked, even with a token: it is anonymous, and no admin.
        assert_eq!(
            send(&mut app, Method::GET, None).await,
            (StatusCode::OK, "- reader".into())
        );
        assert_eq!(
            send(&mut app, Method::GET, Some("a")).await,
            (StatusCode::OK, "- reader".into())
        );
    }

    #[tokio::test]
    async fn with_auth_reads_a_reader_token_reads() {
        let mut app = app(true);
        assert_eq!(
            send(&mut app, Method::GET, Some("r")).await,
            (StatusCode::OK, "grafana reader".into())
        );
        assert_eq!(
            send(&mut app, Method::GET, None).await.0,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            send(&mut app, Method::POST, Some("r")).await.0,
            StatusCode::FORBIDDEN
        );
    }
}
