//! CORS from a real page of another origin: refused without `--cors-origin`, let in with
//! it; and the preflights themselves, with and without a token file.

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::browser::{have_chromium, one_at_a_time, Browser};
use super::common::*;
use super::MB;

/// A page of another origin (another port) that adds an item with a JSON body (a request
/// the browser preflights) on the daemon at `?d=URL`, then lists the blocklist; its title
/// says how it went.
const FOREIGN_PAGE: &str = r#"<!doctype html><title>pending</title><script>
const d = new URLSearchParams(location.search).get("d");
fetch(d + "/blocklist/nodes", {method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify([{id: "from-afar", action: "MARK_BLOCKED", cause: "cors"}])})
  .then(r => fetch(d + "/blocklist").then(() => r.status))
  .then(status => { document.title = "ok " + status; }, e => { document.title = "refused"; });
</script>"#;

/// Serves [`FOREIGN_PAGE`] on a loopback port of its own; its origin.
async fn foreign_origin() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = vec![0u8; 8192];
                let _ = stream.read(&mut buf).await;
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{FOREIGN_PAGE}",
                    FOREIGN_PAGE.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    origin
}

#[tokio::test]
async fn a_page_of_another_origin_is_refused_without_cors_origin_and_works_with_it() {
    if !have_chromium("a_page_of_another_origin_is_refused_without_cors_origin_and_works_with_it") {
        return;
    }
    let _turn = one_at_a_time().await;
    let origin = foreign_origin().await;
    let (mut closed_ws, mut open_ws) = (Workspace::new(), Workspace::new());
    let closed = closed_ws.start(&[]);
    let open = open_ws.start(&["--cors-origin", &origin]);
    let browser = Browser::start(1280, 900).await;
    let title = "return document.title";
    let settled = |t: &Value| t.as_str().is_some_and(|t| t != "pending");

    browser
        .client
        .goto(&format!("{origin}/?d=http://{}", closed.addr))
        .await
        .unwrap();
    let outcome = browser
        .until("the page's fetch", DEADLINE, title, settled)
        .await;
    assert_eq!(outcome, "refused");
    assert_eq!(
        closed.get("/blocklist/nodes/from-afar").await.0,
        StatusCode::NOT_FOUND
    );

    browser
        .client
        .goto(&format!("{origin}/?d=http://{}", open.addr))
        .await
        .unwrap();
    let outcome = browser
        .until("the page's fetch", DEADLINE, title, settled)
        .await;
    assert_eq!(outcome, "ok 201");
    assert_eq!(
        open.get("/blocklist/nodes/from-afar").await.0,
        StatusCode::OK
    );

    // The preflight itself, as the browser sent it: the origin back, and no wildcard; none
    // for a stranger, and without the flag not answered as one.
    let headers = Some("authorization, content-type, if-match");
    let (status, allowed) = preflight(&open, &origin, "PATCH", headers).await;
    assert!(status.is_success(), "{status}");
    assert_eq!(allowed.as_deref(), Some(origin.as_str()));
    let (_, allowed) = preflight(&open, "http://elsewhere.example", "POST", None).await;
    assert_eq!(allowed, None);
    let (status, allowed) = preflight(&closed, &origin, "POST", None).await;
    assert_eq!((status, allowed), (StatusCode::METHOD_NOT_ALLOWED, None));
    browser.close().await;

    // With a token file: a preflight (which never carries the token) is answered before the
    // token check, and a 401 carries the origin too, so the page can read why.
    let mut token_ws = Workspace::new();
    let tokens = token_ws.tmp.path().join("tokens");
    std::fs::write(&tokens, "cors-test-token name=ops\n").unwrap();
    let token_file = tokens.to_str().unwrap();
    let guarded = token_ws.start(&["--token-file", token_file, "--cors-origin", &origin]);
    let headers = Some("authorization, content-type");
    let (status, allowed) = preflight(&guarded, &origin, "POST", headers).await;
    assert!(status.is_success(), "{status}");
    assert_eq!(allowed.as_deref(), Some(origin.as_str()));
    let unauthorized = guarded
        .client
        .post(guarded.url("/blocklist/nodes"))
        .header("Origin", &origin)
        .json(&json!([item("n1", MB, "x")]))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorized.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        allowed_origin(&unauthorized).as_deref(),
        Some(origin.as_str())
    );
}

/// The `Access-Control-Allow-Origin` of an answer.
fn allowed_origin(resp: &reqwest::Response) -> Option<String> {
    resp.headers()
        .get("access-control-allow-origin")
        .map(|v| v.to_str().unwrap().to_owned())
}

/// A browser's preflight of `method` (with `headers` asked for) from `origin` for
/// `POST /blocklist/nodes`'s path: its status, and the origin it allows.
async fn preflight(
    d: &Daemon,
    origin: &str,
    method: &str,
    headers: Option<&str>,
) -> (StatusCode, Option<String>) {
    let mut req = d
        .client
        .request(reqwest::Method::OPTIONS, d.url("/blocklist/nodes"))
        .header("Origin", origin)
        .header("Access-Control-Request-Method", method);
    if let Some(headers) = headers {
        req = req.header("Access-Control-Request-Headers", headers);
    }
    let resp = req.send().await.unwrap();
    (resp.status(), allowed_origin(&resp))
}
