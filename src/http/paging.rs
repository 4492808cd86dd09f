//! Listings in pages: `?limit=N` asks for at most N entries, and the answer names where the
//! next page starts, a `continue` token, as Kubernetes pages its lists.
//!
//! - Without `limit` a listing is answered whole, as it always is (streamed).
//! - A page's entries are the listing's from its position on, read as of one revision (the
//!   store's [`crate::store::Store::consistent_read`]); pages resume by id, so an entry
//!   present for a whole walk is listed exactly once, whatever changes around it.
//! - Every page of a walk reports the revision read before its first page (the
//!   `X-Blocklist-Revision` header, and the body's `revision` where it has one): the feed
//!   watched from it brings every change made during or after the walk.
//! - A token names the listing it was made for (its route, with the id of a history), the
//!   walk's revision and the position. It is refused with 410 once the event log no longer holds the changes since
//!   that revision (retention or a restore), since the walk could no longer be made whole
//!   by the feed; with 400 when it is not one of this daemon's, or of another listing.
//!
//! The next page's token comes in `X-Blocklist-Continue`, and its URL in a `Link` header
//! (`rel="next"`, RFC 8288); the last page has neither.

use axum::extract::{FromRequestParts, MatchedPath, Path};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use utoipa::openapi::{HeaderBuilder, ObjectBuilder, RefOr, Type};
use utoipa::{IntoParams, Modify, ToResponse};

use super::error::{ApiError, ErrorBody};
use super::events::unreachable_from;
use super::extract::query_param;
use super::reply::with_revision;
use super::state::AppState;
use crate::listing::{Listing, Resume};
use crate::store::Store;

/// The largest page: a page is built whole in memory (about 250 bytes an entry).
pub const MAX_LIMIT: usize = 10_000;

/// The page size of a `continue` given without `limit`.
pub const DEFAULT_LIMIT: usize = 1_000;

/// The header that carries the next page's `continue` token.
pub const CONTINUE_HEADER: &str = "x-blocklist-continue";

/// The token's format version: a token of another version is refused as malformed.
const TOKEN_VERSION: u8 = 1;

/// `?limit=N&continue=TOKEN` on a listing. Also the parameters' documentation.
#[derive(Debug, Clone, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageParams {
    /// At most this many entries in the answer (1 to 10000); the next page's token comes in
    /// `X-Blocklist-Continue`. Without it (and without `continue`), the whole listing; with
    /// `continue` alone, pages of 1000.
    #[param(minimum = 1, maximum = 10_000)]
    #[expect(dead_code, reason = "documents the parameter the extractor reads")]
    limit: Option<u64>,
    /// The `X-Blocklist-Continue` token of the page before: the page after it. 410 once the event log no longer holds the changes since the walk's first page:
    /// list again from the first page.
    #[param(rename = "continue")]
    #[expect(dead_code, reason = "documents the parameter the extractor reads")]
    continue_token: Option<String>,
}

/// `limit` is not a whole number from 1 to 10000, `continue` is not a token of this
/// listing's, or either is given twice.
#[derive(ToResponse)]
#[expect(
    dead_code,
    reason = "documents a response; the body sent is `ApiError`'s"
)]
pub struct BadPage(ErrorBody);

/// The `continue` token's walk began at a revision the event log no longer holds (its
/// retention passed it, or the data was restored from an older backup): list again from
/// the first page.
#[derive(ToResponse)]
#[expect(
    dead_code,
    reason = "documents a response; the body sent is `ApiError`'s"
)]
pub struct ExpiredPage(ErrorBody);

/// What a `continue` token holds (URL-safe base64 of its JSON, without padding).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Token {
    v: u8,
    /// The listing it was made for: its route, path parameters filled in (decoded).
    p: String,
    /// The revision of the walk: read before its first page.
    r: u64,
    /// Where the next page resumes: a scan of the listing, and the position in it.
    s: usize,
    a: Option<String>,
}

impl Token {
    fn encode(&self) -> String {
        let json = serde_json::to_vec(self).expect("tokens serialize");
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    fn decode(text: &str) -> Option<Token> {
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .ok()?;
        serde_json::from_slice::<Token>(&json)
            .ok()
            .filter(|t| t.v == TOKEN_VERSION)
    }
}

/// A request for a page (`?limit=`), or `None` for the whole listing. Any other query
/// parameter is left alone, as before paging existed on these routes.
#[derive(Debug, Clone)]
pub struct Paging(pub Option<PageRequest>);

/// A page asked for: its size, and where it starts (the first page when `token` is None).
#[derive(Debug, Clone)]
pub struct PageRequest {
    pub limit: usize,
    token: Option<Token>,
    /// The listing a token must be of: the route, path parameters filled in (decoded), so
    /// that a token does not depend on how a client encodes an id.
    listing: String,
    /// The request's path as sent: the next page's link.
    path: String,
}

/// Where a page starts, once its token is checked.
#[derive(Debug, Clone)]
pub struct PageStart {
    /// The walk's revision.
    pub revision: u64,
    /// Where the page resumes the listing (`None`: the first page).
    pub resume: Option<Resume>,
}

impl<S: Send + Sync> FromRequestParts<S> for Paging {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let limit = query_param(parts, state, "limit")
            .await?
            .map(|value| {
                value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "limit: must be a whole number from 1 to {MAX_LIMIT}, got {value:?}"
                        ))
                    })
            })
            .transpose()?;
        let path = parts.uri.path().to_owned();
        let template = parts
            .extensions
            .get::<MatchedPath>()
            .map_or_else(|| path.clone(), |m| m.as_str().to_owned());
        // An id that does not decode is refused by the route's own extractor.
        let params = Path::<Vec<(String, String)>>::from_request_parts(parts, state)
            .await
            .map(|Path(params)| params)
            .unwrap_or_default();
        let listing = params.iter().fold(template, |listing, (name, value)| {
            listing.replace(&format!("{{{name}}}"), value)
        });
        let token = query_param(parts, state, "continue")
            .await?
            .map(|value| Token::decode(&value).ok_or_else(|| malformed(&listing)))
            .transpose()?;
        match (limit, token) {
            (None, None) => Ok(Paging(None)),
            (limit, token) => Ok(Paging(Some(PageRequest {
                limit: limit.unwrap_or(DEFAULT_LIMIT),
                token,
                listing,
                path,
            }))),
        }
    }
}

impl PageRequest {
    /// Where this page starts: the first page at the store's revision now, or where the
    /// token says once it is checked against this listing and the event log.
    pub fn start(&self, store: &Store) -> Result<PageStart, ApiError> {
        let Some(token) = &self.token else {
            return Ok(PageStart {
                revision: store.revision(),
                resume: None,
            });
        };
        if token.p != self.listing {
            return Err(ApiError::bad_request(format!(
                "continue: a token of the listing {}, not of {}: start this listing without \
                 continue",
                token.p, self.listing
            )));
        }
        let revision = token.r;
        // The walk is completed by the feed from its revision: a walk the feed can no
        // longer complete starts again.
        if let Some(why) = unreachable_from(store, revision) {
            return Err(ApiError::Gone(format!(
                "continue: the walk began at {why}: list again without continue"
            )));
        }
        Ok(PageStart {
            revision,
            resume: Some(Resume {
                scan: token.s,
                after: token.a.clone(),
            }),
        })
    }

    /// The refusal of this request's token: not one this daemon made for the listing.
    pub fn malformed(&self) -> ApiError {
        malformed(&self.listing)
    }

    /// The answer of a page: `body` (JSON), the walk's revision, and the next page's token
    /// and link when `next` says where it starts.
    pub fn answer(&self, body: Vec<u8>, revision: u64, next: Option<Resume>) -> Response {
        let mut response = with_revision(
            revision,
            (
                StatusCode::OK,
                [(
                    axum::http::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                body,
            )
                .into_response(),
        );
        if let Some(next) = next {
            let token = Token {
                v: TOKEN_VERSION,
                p: self.listing.clone(),
                r: revision,
                s: next.scan,
                a: next.after,
            }
            .encode();
            let link = format!(
                "<{}?limit={}&continue={token}>; rel=\"next\"",
                self.path, self.limit
            );
            let headers = response.headers_mut();
            headers.insert(
                CONTINUE_HEADER,
                HeaderValue::from_str(&token).expect("base64 is a header value"),
            );
            if let Ok(link) = HeaderValue::from_str(&link) {
                headers.insert(axum::http::header::LINK, link);
            }
        }
        response
    }
}

/// Documents the answers of every paged listing (an operation that takes `limit`): its 200
/// carries the next page's `X-Blocklist-Continue` and `Link` when more follows.
pub struct PageDoc;

impl Modify for PageDoc {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let header = |description: &str| {
            HeaderBuilder::new()
                .schema(ObjectBuilder::new().schema_type(Type::String))
                .description(Some(description))
                .build()
        };
        for item in openapi.paths.paths.values_mut() {
            let Some(get) = &mut item.get else { continue };
            let paged = get.parameters.iter().flatten().any(|p| p.name == "limit");
            let Some(RefOr::T(ok)) = get.responses.responses.get_mut("200") else {
                continue;
            };
            if paged {
                ok.headers.insert(
                    "X-Blocklist-Continue".into(),
                    header(
                        "With `limit`, when more follows: the `continue` token of the next page",
                    ),
                );
                ok.headers.insert(
                    "Link".into(),
                    header("With `limit`, when more follows: the next page's URL, `rel=\"next\"`"),
                );
            }
        }
    }
}

impl AppState {
    /// Answers `page` of the listing `build` makes from the walk's revision (for bodies that
    /// carry it): read as of one revision on the blocking pool, and sent once durable, as
    /// every listing is.
    pub(super) async fn paged(
        &self,
        page: &PageRequest,
        build: impl FnOnce(u64) -> Listing,
    ) -> Result<Response, ApiError> {
        let start = page.start(&self.store)?;
        let mut listing = build(start.revision);
        if let Some(resume) = &start.resume {
            if resume.scan >= listing.scans() {
                return Err(page.malformed());
            }
            listing = listing.resume_at(resume);
        }
        let limit = page.limit;
        let ((body, next), _) = self
            .listing(move |store| listing.page(store, limit))
            .await?;
        Ok(page.answer(body, start.revision, next))
    }
}

/// The refusal of a token that is not one of this daemon's for `listing`.
fn malformed(listing: &str) -> ApiError {
    ApiError::bad_request(format!(
        "continue: not a token of {listing}: give the X-Blocklist-Continue header of the page \
         before, or leave it out for the first page"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_reads_back_and_anything_else_is_refused() {
        let token = Token {
            v: TOKEN_VERSION,
            p: "/blocklist/nodes".into(),
            r: 42,
            s: 1,
            a: Some("node-7 é".into()),
        };
        let text = token.encode();
        assert!(text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(Token::decode(&text), Some(token.clone()));
        for bad in ["", "x", "%%%", &text[..text.len() - 2], "eyJ2IjoyfQ"] {
            assert_eq!(Token::decode(bad), None, "{bad:?}");
        }
        let other_version = Token { v: 2, ..token };
        assert_eq!(Token::decode(&other_version.encode()), None);
    }
}
