//! The operator console: a single page (`GET /ui`) and its scripts and style, embedded in
//! the binary (`console/`), served with headers that keep it to itself: a strict
//! `Content-Security-Policy` (scripts and styles from this origin only, no inline script,
//! no framing), `nosniff` and `no-referrer`. The page calls the API of the same origin with
//! the token the operator enters, so it needs no CORS, and the page itself needs no token
//! (`auth::Auth::needs`).

use axum::extract::Path;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::error::ApiError;

/// What the page may load and do: everything from this origin only, nothing inline, no
/// plugins, no `<base>`, no form posts elsewhere, and no page may frame it.
pub const CONTENT_SECURITY_POLICY_VALUE: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

const JS: &str = "text/javascript; charset=utf-8";

/// The page's files: name, media type, content.
const FILES: &[(&str, &str, &str)] = &[
    ("api.js", JS, include_str!("console/api.js")),
    (
        "console.css",
        "text/css; charset=utf-8",
        include_str!("console/console.css"),
    ),
    ("console.js", JS, include_str!("console/console.js")),
    (
        "favicon.svg",
        "image/svg+xml",
        include_str!("console/favicon.svg"),
    ),
    ("forms.js", JS, include_str!("console/forms.js")),
    ("table.js", JS, include_str!("console/table.js")),
];

const PAGE: &str = include_str!("console/index.html");

/// Generic over the state, which the console does not read.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(to_console))
        .route("/ui", get(page))
        .route("/ui/", get(page))
        .route("/ui/{file}", get(file))
}

/// Whether a request path is the console's (served without a token).
pub fn is_console(path: &str) -> bool {
    path == "/" || path == "/ui" || path.starts_with("/ui/")
}

/// The daemon's root: a browser opened on the daemon's address is sent to the console.
async fn to_console() -> axum::response::Redirect {
    axum::response::Redirect::to("/ui")
}

async fn page() -> Response {
    served("text/html; charset=utf-8", PAGE)
}

async fn file(Path(name): Path<String>) -> Response {
    match FILES.iter().find(|(file, _, _)| *file == name) {
        Some((_, media_type, content)) => served(media_type, content),
        None => ApiError::NotFound(format!("the console has no file {name:?}")).into_response(),
    }
}

fn served(media_type: &'static str, content: &'static str) -> Response {
    (
        [
            (CONTENT_TYPE, media_type),
            (CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY_VALUE),
            (X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (REFERRER_POLICY, "no-referrer"),
            // The files change with the binary: a browser asks again rather than keep a
            // page whose scripts no longer match the API.
            (CACHE_CONTROL, "no-cache"),
        ],
        content,
    )
        .into_response()
}
