//! The operator console (`GET /ui`) in a real headless Chromium against the real daemon:
//! it shows what is stored, follows the feed live (adds, removals and expiries by other
//! clients within a second, a kill -9 and restart with no row lost or repeated), shows what
//! an enforcer reports it did about an item, tries
//! writes as dry runs first, asks for the token when reads need one, works over HTTPS, and
//! CORS lets a page of another origin in only with `--cors-origin`.

#[path = "console/browser.rs"]
mod browser;
mod common;
#[path = "console/cors.rs"]
mod cors;

use std::time::Duration;

use browser::{have_chromium, one_at_a_time, Browser};
use common::*;
use fantoccini::key::Key;
use reqwest::StatusCode;
use serde_json::{json, Value};

const MB: &str = "MARK_BLOCKED";
const EVAC: &str = "MARK_BLOCKED_AND_EVACUATE_TASKS";
/// The rows' texts, joined by `|`.
const ROW_TEXTS: &str =
    "return [...document.querySelectorAll('#grid-rows .row')].map(r => r.textContent).join('|')";
/// How soon a change by another client must show in the page.
const LIVE: Duration = Duration::from_secs(1);

/// The keys (`kind/id`) of the stored items, sorted. Read from the two kinds' listings,
/// not `GET /blocklist`, so that the page's own listings can be counted.
async fn stored_keys(d: &Daemon) -> Vec<String> {
    let mut keys = Vec::new();
    for (path, kind) in [
        ("/blocklist/nodes", "node"),
        ("/blocklist/taskmanagers", "taskmanager"),
    ] {
        let (status, list) = d.get(path).await;
        assert_eq!(status, StatusCode::OK, "{list}");
        keys.extend(
            list.as_array()
                .unwrap()
                .iter()
                .map(|i| format!("{kind}/{}", i["id"].as_str().unwrap())),
        );
    }
    keys.sort();
    keys
}

/// Waits until the page shows exactly `expected` (sorted keys), within `within`.
async fn until_rows(browser: &Browser, what: &str, within: Duration, expected: &[String]) {
    let expected = json!(expected);
    browser
        .until(
            what,
            within,
            "return [...document.querySelectorAll('#grid-rows .row')].map(r => r.dataset.key).sort()",
            |rows| *rows == expected,
        )
        .await;
}

fn status_is(state: &'static str) -> impl Fn(&Value) -> bool {
    move |v| v.as_str() == Some(state)
}

const STATUS: &str = "return document.getElementById('feed-status').dataset.state";

#[tokio::test]
async fn the_console_shows_the_store_and_follows_the_feed_through_a_restart() {
    if !have_chromium("the_console_shows_the_store_and_follows_the_feed_through_a_restart") {
        return;
    }
    let _turn = one_at_a_time().await;
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let port = d.addr.port().to_string();
    d.post(
        "/blocklist/nodes",
        json!([item("n1", MB, "disk"), item("n2", MB, "oom")]),
    )
    .await;
    d.post("/blocklist/taskmanagers", json!([item("tm-1", MB, "slow")]))
        .await;

    // The page and its files carry the headers that keep them to themselves.
    for path in ["/ui", "/ui/console.js", "/ui/console.css"] {
        let resp = d.client.get(d.url(path)).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
        let headers = resp.headers();
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert!(
            csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
            "{csp}"
        );
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert_eq!(headers["referrer-policy"], "no-referrer");
    }

    let browser = Browser::start(1280, 900).await;
    // The daemon's root sends a browser to the console.
    browser.client.goto(&d.url("/")).await.unwrap();
    let at = browser.client.current_url().await.unwrap();
    assert_eq!(at.path(), "/ui", "{at}");
    browser
        .until("the feed is live", DEADLINE, STATUS, status_is("live"))
        .await;
    until_rows(
        &browser,
        "the stored items",
        DEADLINE,
        &stored_keys(&d).await,
    )
    .await;
    assert_eq!(browser.console_errors().await, Vec::<String>::new());

    // Another client's add, removal and expiry show within a second, without a reload.
    d.post("/blocklist/nodes", json!([item("n3", MB, "fan")]))
        .await;
    until_rows(&browser, "an add", LIVE, &stored_keys(&d).await).await;
    assert_eq!(d.delete("/blocklist/nodes/n2").await.0, StatusCode::OK);
    until_rows(&browser, "a removal", LIVE, &stored_keys(&d).await).await;
    let expiring = json!([{"id": "tm-2", "action": MB, "cause": "brief", "timeout": 1500}]);
    d.post("/blocklist/taskmanagers", expiring).await;
    until_rows(&browser, "a short block", LIVE, &stored_keys(&d).await).await;
    let before_expiry = stored_keys(&d).await;
    let after_expiry: Vec<String> = before_expiry
        .iter()
        .filter(|k| *k != "taskmanager/tm-2")
        .cloned()
        .collect();
    until_rows(
        &browser,
        "an expiry",
        Duration::from_millis(1500) + LIVE,
        &after_expiry,
    )
    .await;

    // A registration moves a node's task managers column; an evacuation shows as one.
    let (status, body) = d
        .call(
            reqwest::Method::PUT,
            "/taskmanagers/tm-9",
            Some(json!({"node": "n1"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    browser
        .until("the node's task managers", LIVE, ROW_TEXTS, |t| {
            t.as_str().is_some_and(|t| t.contains("tm-9"))
        })
        .await;
    // A node blocked after its task manager registered: its row shows it too.
    let (status, body) = d
        .call(
            reqwest::Method::PUT,
            "/taskmanagers/tm-8",
            Some(json!({"node": "n5"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let evacuate = json!([{"id": "n5", "action": EVAC, "cause": "nic flapping",
        "timeout": 3_600_000, "source": "detector-x"}]);
    d.post("/blocklist/nodes", evacuate).await;
    browser
        .until("an evacuation", LIVE, ROW_TEXTS, |t| {
            t.as_str().is_some_and(|t| {
                t.contains("EVACUATE") && t.contains("detector-x (1)") && t.contains("tm-8")
            })
        })
        .await;
    // An enforcer's status (what blocklist-kube reports once it tainted the Node) shows in
    // the node's row; a status emits no event, so the page reads them every 5 s.
    let (status, body) = d
        .call(
            reqwest::Method::PUT,
            "/enforcement/blocklist-kube",
            Some(json!([{"kind": "node", "id": "n5", "state": "enforced",
                         "detail": "taint blocklistd.io/blocked=MARK_BLOCKED_AND_EVACUATE_TASKS:NoSchedule"}])),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Each enforcer's state a badge of its own, its name in the badge's label.
    let badges = "return [...document.querySelectorAll('#grid-rows .row .badge')]\
        .map(b => b.closest('.row').dataset.key + ' ' + b.className + ' ' + b.textContent + ' ' + b.getAttribute('aria-label')).join('|')";
    browser
        .until(
            "the node's enforcement status",
            // The next read of the statuses (every 5 s), with room for a loaded machine.
            Duration::from_secs(5) + 3 * LIVE,
            badges,
            |t| {
                t.as_str().is_some_and(|t| {
                    t.contains("node/n5 badge state-enforced enforced blocklist-kube: enforced")
                })
            },
        )
        .await;
    // A node the bridge holds back (its ceiling): not enforced, and it stands out.
    d.post("/blocklist/nodes", json!([item("n6", MB, "psu")]))
        .await;
    let (status, body) = d
        .call(
            reqwest::Method::PUT,
            "/enforcement/blocklist-kube",
            Some(json!([{"kind": "node", "id": "n6", "state": "heldBack",
                         "detail": "the ceiling of 10% of the Nodes is reached"}])),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    browser
        .until(
            "a node held back",
            Duration::from_secs(5) + 3 * LIVE,
            badges,
            |t| {
                t.as_str().is_some_and(|t| {
                    t.contains("node/n6 badge state-heldBack held back blocklist-kube: held back")
                })
            },
        )
        .await;
    // Held by two sources: the row names both, once the feed's merge is read again.
    let again = json!([{"id": "n6", "action": MB, "cause": "ecc", "source": "alerts/ECC/f1",
        "allowMerge": true}]);
    d.post("/blocklist/nodes", again).await;
    browser
        .until("the sources that hold it", LIVE * 3, ROW_TEXTS, |t| {
            t.as_str()
                .is_some_and(|t| t.contains("unknown, alerts/ECC/f1 (2)"))
        })
        .await;
    let desktop = browser.screenshot("console-desktop.png").await;
    eprintln!("screenshot: {}", desktop.display());

    // kill -9: the page says it is reconnecting. Changes made once the daemon is back, while
    // the page waits to retry, come from the feed it resumes from the revision it had: the
    // restarted daemon serves it no listing, and every row is there once.
    d.kill9();
    browser
        .until("reconnecting", DEADLINE, STATUS, status_is("reconnecting"))
        .await;
    // Long enough that the page's next retry is seconds away.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let d = ws.start(&["--listen", &format!("127.0.0.1:{port}")]);
    d.post("/blocklist/nodes", json!([item("n4", MB, "psu")]))
        .await;
    assert_eq!(d.delete("/blocklist/nodes/n3").await.0, StatusCode::OK);
    browser
        .until("live again", DEADLINE, STATUS, status_is("live"))
        .await;
    until_rows(
        &browser,
        "the changes made while away",
        LIVE,
        &stored_keys(&d).await,
    )
    .await;
    let (_, revision) = revision_of(&d, reqwest::Method::GET, "/blocklist/nodes", None).await;
    browser
        .until(
            "the revision shown",
            LIVE,
            "return document.getElementById('feed-revision').textContent",
            |t| *t == format!("revision {revision}"),
        )
        .await;
    let listings: f64 = d
        .scrape()
        .await
        .lines()
        .filter(|l| {
            l.starts_with("blocklist_http_request_duration_seconds_count{")
                && l.contains(r#"method="GET",route="/blocklist","#)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(
        listings, 0.0,
        "the page resumed from its revision without listing again"
    );
    // Fetch errors while the daemon was down are the browser's network log, not the page's.
    let errors: Vec<String> = browser
        .console_errors()
        .await
        .into_iter()
        .filter(|e| !e.contains("net::ERR_"))
        .collect();
    assert_eq!(errors, Vec::<String>::new());

    // Narrow: the same page in one column.
    browser.client.set_window_size(400, 900).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let narrow = browser.screenshot("console-narrow.png").await;
    eprintln!("screenshot: {}", narrow.display());
    browser.close().await;
}

#[tokio::test]
async fn a_dry_run_shows_the_merged_result_and_changes_nothing_then_the_add_lands() {
    if !have_chromium("a_dry_run_shows_the_merged_result_and_changes_nothing_then_the_add_lands") {
        return;
    }
    let _turn = one_at_a_time().await;
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    d.post("/blocklist/nodes", json!([item("n1", MB, "disk")]))
        .await;
    let browser = Browser::start(1280, 900).await;
    browser.client.goto(&d.url("/ui")).await.unwrap();
    browser
        .until("live", DEADLINE, STATUS, status_is("live"))
        .await;

    browser.fill("#a-ids", "n1").await;
    browser.fill("#a-cause", "oom").await;
    let before = (d.listing().await, d.revision().await);
    browser.click("#add-form button[name=dry]").await;
    let result = browser
        .until(
            "the dry run's answer",
            DEADLINE,
            "return document.getElementById('add-result').textContent",
            |t| t.as_str().is_some_and(|t| t.contains("Dry run")),
        )
        .await;
    let result = result.as_str().unwrap();
    assert!(result.contains("would answer 202"), "{result}");
    assert!(result.contains("disk,oom"), "the merged cause: {result}");
    assert_eq!(
        (d.listing().await, d.revision().await),
        before,
        "a dry run writes nothing"
    );

    browser.click("#add-form button[name=real]").await;
    browser
        .until("the merged row", LIVE, ROW_TEXTS, |t| {
            t.as_str().is_some_and(|t| t.contains("disk,oom"))
        })
        .await;
    assert_eq!(d.get("/blocklist/nodes/n1").await.1["cause"], "disk,oom");

    // The keyboard: into the table, down to the row, and (after the countdowns' repaints,
    // which must keep the focus) Enter opens its item.
    browser
        .client
        .execute("document.getElementById('grid').focus()", vec![])
        .await
        .unwrap();
    browser.press(Key::Down).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let focused = browser
        .client
        .execute("return document.activeElement.dataset.key || null", vec![])
        .await
        .unwrap();
    assert_eq!(focused, "node/n1");
    browser.press(Key::Enter).await;
    browser
        .until("the item opened", DEADLINE, "return document.getElementById('detail').hidden ? '' : document.getElementById('detail-title').textContent", |t| t == "Node n1")
        .await;

    // A refused add: the error is shown beside the field it names, and nothing is written.
    browser.fill("#a-ids", "n2").await;
    browser.fill("#a-minutes", "-5").await;
    let before = d.revision().await;
    browser.click("#add-form button[name=real]").await;
    let error = browser
        .until(
            "the error beside the timeout",
            DEADLINE,
            "return document.querySelector('#add-form [data-for=timeout]').textContent",
            |t| t.as_str().is_some_and(|t| t.contains("timeout")),
        )
        .await;
    assert!(error.as_str().unwrap().contains("positive"), "{error}");
    assert_eq!(d.revision().await, before);
    assert_eq!(d.get("/blocklist/nodes/n2").await.0, StatusCode::NOT_FOUND);
    browser.close().await;
}

/// Chromium's pin of a certificate's key: the SHA-256 of its `SubjectPublicKeyInfo`, base64.
fn spki_pin(cert_pem: &str) -> String {
    use base64::Engine as _;
    use rustls::pki_types::pem::PemObject as _;
    use sha2::Digest as _;
    let der = rustls::pki_types::CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap();
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(cert.public_key().raw))
}

#[tokio::test]
async fn the_console_works_over_https() {
    if !have_chromium("the_console_works_over_https")
        || skip_on_etcd("TLS with --store etcd waits for TLS between replicas")
    {
        return;
    }
    let _turn = one_at_a_time().await;
    let ca = Ca::new("blocklistd console test CA");
    let server = ca.server(&["127.0.0.1", "localhost"]);
    let mut ws = Workspace::new();
    let (cert, key) = server.write(ws.tmp.path(), "server");
    let d = ws.start(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    let base = format!("https://localhost:{}", d.addr.port());
    // Chromium trusts the test certificate by its key, the way its own tests pin one.
    let pin = format!(
        "--ignore-certificate-errors-spki-list={}",
        spki_pin(&server.cert_pem)
    );
    let browser = Browser::start_with(1280, 900, &[pin]).await;
    browser.client.goto(&format!("{base}/ui")).await.unwrap();
    browser
        .until("the feed is live", DEADLINE, STATUS, status_is("live"))
        .await;
    let client = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem.as_bytes()).unwrap())
        .build()
        .unwrap();
    let resp = client
        .post(format!("{base}/blocklist/nodes"))
        .json(&json!([item("n1", MB, "disk")]))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    until_rows(&browser, "an add", LIVE, &["node/n1".to_owned()]).await;
    assert_eq!(browser.console_errors().await, Vec::<String>::new());
    browser.close().await;
}

#[tokio::test]
async fn with_auth_reads_the_page_asks_for_the_token_and_then_works() {
    if !have_chromium("with_auth_reads_the_page_asks_for_the_token_and_then_works") {
        return;
    }
    let _turn = one_at_a_time().await;
    let mut ws = Workspace::new();
    let tokens = ws.tmp.path().join("tokens");
    std::fs::write(&tokens, "s3cret-console-token name=alice role=admin\n").unwrap();
    let d = ws.start(&[
        "--token-file",
        tokens.to_str().unwrap(),
        "--auth-reads",
        "true",
    ]);
    let auth = |req: reqwest::RequestBuilder| req.bearer_auth("s3cret-console-token");
    let add = |id: &str| json!([item(id, MB, "disk")]);
    let resp = auth(d.client.post(d.url("/blocklist/nodes")))
        .json(&add("n1"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);

    let browser = Browser::start(1280, 900).await;
    browser.client.goto(&d.url("/ui")).await.unwrap();
    let banner = browser
        .until(
            "the token is asked for",
            DEADLINE,
            "return document.getElementById('banner').textContent",
            |t| t.as_str().is_some_and(|t| !t.is_empty()),
        )
        .await;
    assert!(
        banner.as_str().unwrap().contains("Token missing or wrong"),
        "{banner}"
    );
    assert_eq!(browser.rows().await, Vec::<String>::new());

    browser.fill("#token", "s3cret-console-token").await;
    browser.click("#token-form button[type=submit]").await;
    browser
        .until("live", DEADLINE, STATUS, status_is("live"))
        .await;
    until_rows(
        &browser,
        "the stored item",
        DEADLINE,
        &["node/n1".to_owned()],
    )
    .await;
    let resp = auth(d.client.post(d.url("/blocklist/nodes")))
        .json(&add("n2"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    until_rows(
        &browser,
        "an add",
        LIVE,
        &["node/n1".to_owned(), "node/n2".to_owned()],
    )
    .await;
    // The token is in the tab's sessionStorage, never in the address.
    let url = browser.client.current_url().await.unwrap();
    assert!(!url.as_str().contains("s3cret"), "{url}");
    browser.close().await;
}

#[tokio::test]
async fn a_hundred_thousand_items_stay_usable() {
    if !have_chromium("a_hundred_thousand_items_stay_usable") {
        return;
    }
    let _turn = one_at_a_time().await;
    const ITEMS: usize = 100_000;
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    for batch in 0..ITEMS / 10_000 {
        let elements: Vec<Value> = (0..10_000)
            .map(|i| item(&format!("n{:06}", batch * 10_000 + i), MB, "bulk"))
            .collect();
        assert_eq!(
            d.post("/blocklist/nodes", json!(elements)).await.0,
            StatusCode::CREATED
        );
    }
    let browser = Browser::start(1280, 900).await;
    browser.client.goto(&d.url("/ui")).await.unwrap();
    let count = "return document.getElementById('count').textContent";
    browser
        .until("all items listed", DEADLINE, count, |t| t == "(100000)")
        .await;
    // Listed in pages of 1000: a hundred requests, none of them for the whole list.
    let pages = d
        .metric(r#"blocklist_http_request_duration_seconds_count{method="GET",route="/blocklist",status="200"}"#)
        .await;
    assert!(pages >= 100.0, "{pages} requests for /blocklist");
    // Only the rows in view are in the page.
    let rows = browser.rows().await;
    assert!(
        !rows.is_empty() && rows.len() < 100,
        "{} rows in the page",
        rows.len()
    );

    // Live with all of them: an add shows within a second.
    d.post("/blocklist/nodes", json!([item("n999999", MB, "one more")]))
        .await;
    browser
        .until("one more", LIVE, count, |t| t == "(100001)")
        .await;
    // Scrolled to the end (sorted by id), the last ids are in view.
    browser.pick("#f-sort", "id").await;
    browser
        .client
        .execute(
            "const g = document.getElementById('grid'); g.scrollTop = g.scrollHeight;",
            vec![],
        )
        .await
        .unwrap();
    browser
        .until(
            "the end of the table",
            LIVE,
            "return [...document.querySelectorAll('#grid-rows .row')].map(r => r.dataset.key)",
            |keys| {
                keys.as_array()
                    .is_some_and(|k| k.iter().any(|k| k == "node/n999999"))
            },
        )
        .await;
    assert_eq!(browser.console_errors().await, Vec::<String>::new());
    browser.close().await;
}
