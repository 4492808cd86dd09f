//! Listings in pages (`?limit=&continue=`): a walk lists every item present for its whole
//! length exactly once while writes go on, and with the feed from its revision converges to
//! the state at its end; every listing's pages join into the listing without `limit`; a
//! token older than the event log answers 410, a malformed one 400, and nothing changes for
//! a caller that gives no `limit`.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const MB: &str = "MARK_BLOCKED";

/// One page as a walk sees it.
struct Page {
    body: Value,
    revision: u64,
    /// The next page's path, from the `Link` header; `None` on the last page.
    next: Option<String>,
    token: Option<String>,
}

async fn page(d: &Daemon, path: &str) -> Page {
    let resp = d.send(Method::GET, path, None).await;
    let headers = resp.headers().clone();
    let (status, body) = read(resp).await;
    assert_eq!(status, StatusCode::OK, "{path}: {body}");
    let header = |name: &str| {
        headers
            .get(name)
            .map(|v| v.to_str().expect("ASCII").to_owned())
    };
    let token = header("x-blocklist-continue");
    let next = header("link").map(|link| {
        let (target, rel) = link.split_once(">; ").expect("<url>; rel");
        assert_eq!(rel, r#"rel="next""#);
        target.trim_start_matches('<').to_owned()
    });
    assert_eq!(
        token.is_some(),
        next.is_some(),
        "{path}: token and link go together"
    );
    if let (Some(token), Some(next)) = (&token, &next) {
        assert!(next.ends_with(&format!("&continue={token}")), "{next}");
    }
    Page {
        body,
        revision: header("x-blocklist-revision")
            .expect("a revision")
            .parse()
            .unwrap(),
        next,
        token,
    }
}

/// Every page of the walk of `path` in pages of `limit`, following the `Link` headers.
async fn walk(d: &Daemon, path: &str, limit: usize) -> Vec<Page> {
    let mut pages = vec![page(d, &format!("{path}?limit={limit}")).await];
    while let Some(next) = pages.last().unwrap().next.clone() {
        pages.push(page(d, &next).await);
    }
    let revision = pages[0].revision;
    assert!(
        pages.iter().all(|p| p.revision == revision),
        "{path}: every page reports the walk's revision"
    );
    pages
}

/// The elements of `pages` (arrays), in order, each page at most `limit` long.
fn joined(pages: &[Page], limit: usize) -> Vec<Value> {
    pages
        .iter()
        .flat_map(|p| {
            let list = p.body.as_array().expect("an array");
            assert!(list.len() <= limit, "a page of {}", list.len());
            list.clone()
        })
        .collect()
}

async fn add_all(d: &Daemon, kind: &str, ids: &[String]) {
    for batch in ids.chunks(10_000) {
        let items: Vec<Value> = batch.iter().map(|id| item(id, MB, "c")).collect();
        let (status, body) = d
            .post(&format!("/blocklist/{kind}"), Value::Array(items))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
}

#[tokio::test]
async fn a_walk_lists_every_item_present_throughout_exactly_once_while_writes_go_on() {
    let mut ws = Workspace::new();
    let d = Arc::new(ws.start(&[]));
    // 100,000 items that stay, and 5,000 that go during the walk, interleaved by id with
    // them and with the ones added during it.
    let stable: Vec<String> = (0..100_000).map(|i| format!("tm-{i:06}-s")).collect();
    let leaving: Vec<String> = (0..100_000)
        .step_by(20)
        .map(|i| format!("tm-{i:06}-l"))
        .collect();
    add_all(&d, "taskmanagers", &stable).await;
    add_all(&d, "taskmanagers", &leaving).await;

    // A writer removes the leaving ones and adds new ones, all over the id space, until the
    // walk ends.
    let done = Arc::new(AtomicBool::new(false));
    let changes = Arc::new(AtomicUsize::new(0));
    let writer = {
        let (d, done, changes, leaving) = (d.clone(), done.clone(), changes.clone(), leaving);
        tokio::spawn(async move {
            for (n, id) in leaving.iter().enumerate() {
                if done.load(Ordering::SeqCst) {
                    break;
                }
                let (status, body) = d.delete(&format!("/blocklist/taskmanagers/{id}")).await;
                assert_eq!(status, StatusCode::OK, "{body}");
                let fresh = format!("tm-{:06}-n", (n * 7919) % 100_000);
                let (status, body) = d
                    .post("/blocklist/taskmanagers", json!([item(&fresh, MB, "c")]))
                    .await;
                assert_eq!(status, StatusCode::CREATED, "{body}");
                changes.fetch_add(2, Ordering::SeqCst);
            }
        })
    };
    // Under way before the walk starts.
    eventually("the writer to start", || async {
        changes.load(Ordering::SeqCst) >= 20
    })
    .await;

    let pages = walk(&d, "/blocklist/taskmanagers", 1_000).await;
    let during = changes.load(Ordering::SeqCst);
    done.store(true, Ordering::SeqCst);
    writer.await.expect("the writer");
    let end = d.revision().await;
    assert!(
        during >= 100,
        "only {during} changes during the walk: it proves nothing"
    );
    assert!(pages.len() >= 100, "{} pages", pages.len());

    let listed: Vec<String> = joined(&pages, 1_000)
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_owned())
        .collect();
    // In id order (a walk resumes by id), so no id twice.
    assert!(listed.windows(2).all(|w| w[0] < w[1]), "out of order");
    let listed_set: BTreeSet<&String> = listed.iter().collect();
    let missing: Vec<&String> = stable
        .iter()
        .filter(|id| !listed_set.contains(id))
        .collect();
    assert!(
        missing.is_empty(),
        "{} stable ids missing: {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );

    // The walk, then the feed from its revision, make the state at the end: the revision
    // is where a list-then-watch resumes.
    let mut state: BTreeSet<String> = listed.into_iter().collect();
    let mut watch = Watch::open(&d, Some(pages[0].revision), None)
        .await
        .expect("the feed still holds the walk's revision");
    let mut at = pages[0].revision;
    while at < end {
        let event = watch.next().await.expect("an event");
        at = event.id;
        if event.data["kind"] != "taskmanager" {
            continue;
        }
        let id = event.data["id"].as_str().unwrap().to_owned();
        match event.event.as_str() {
            "removed" | "expired" => {
                state.remove(&id);
            }
            _ => {
                state.insert(id);
            }
        }
    }
    let (status, whole) = d.get("/blocklist/taskmanagers").await;
    assert_eq!(status, StatusCode::OK);
    let whole: Vec<String> = whole
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(state.into_iter().collect::<Vec<_>>(), whole);
}

#[tokio::test]
async fn the_pages_of_every_listing_join_into_the_whole_listing() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let tms: Vec<String> = (0..250).map(|i| format!("tm-{i:04}")).collect();
    let nodes: Vec<String> = (0..150).map(|i| format!("node-{i:04}")).collect();
    add_all(&d, "taskmanagers", &tms).await;
    add_all(&d, "nodes", &nodes).await;
    let registrations: Vec<Value> = (0..45)
        .map(|i| json!({"id": format!("w-{i:03}"), "node": format!("node-{:04}", i % 7)}))
        .collect();
    let (status, body) = d
        .call(
            Method::PUT,
            "/taskmanagers",
            Some(Value::Array(registrations)),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // Seven past blocks of one node.
    for _ in 0..7 {
        add_all(&d, "nodes", &["gone".to_owned()]).await;
        assert_eq!(d.delete("/blocklist/nodes/gone").await.0, StatusCode::OK);
    }

    for (path, limit) in [
        ("/blocklist/taskmanagers", 100),
        ("/blocklist/taskmanagers", 250),
        ("/blocklist/taskmanagers", 249),
        ("/blocklist/nodes", 7),
        ("/taskmanagers", 10),
        ("/taskmanagers", 1),
        ("/blocklist/nodes/gone/history", 3),
        ("/blocklist/nodes/gone/history", 7),
    ] {
        let (status, whole) = d.get(path).await;
        assert_eq!(status, StatusCode::OK);
        let whole = whole.as_array().unwrap().clone();
        let pages = walk(&d, path, limit).await;
        assert_eq!(
            pages.len(),
            whole.len().div_ceil(limit).max(1),
            "{path}?limit={limit}: full pages but the last, and no empty one after"
        );
        assert_eq!(joined(&pages, limit), whole, "{path}?limit={limit}");
    }

    // `GET /blocklist`: task managers, then nodes, each page of the listing's shape.
    let whole = d.listing().await;
    for limit in [60, 250, 400, 1_000] {
        let pages = walk(&d, "/blocklist", limit).await;
        let mut joined_tms = Vec::new();
        let mut joined_nodes = Vec::new();
        for p in &pages {
            let body = p.body.as_object().unwrap();
            assert_eq!(body.len(), 3, "{body:?}");
            assert_eq!(p.body["revision"], json!(p.revision));
            let (t, n) = (
                p.body["blockedTaskManagers"].as_array().unwrap(),
                p.body["blockedNodes"].as_array().unwrap(),
            );
            assert!(t.len() + n.len() <= limit);
            joined_tms.extend(t.iter().cloned());
            joined_nodes.extend(n.iter().cloned());
        }
        assert_eq!(pages.len(), 400_usize.div_ceil(limit), "limit {limit}");
        assert_eq!(json!(joined_tms), whole["blockedTaskManagers"]);
        assert_eq!(json!(joined_nodes), whole["blockedNodes"]);
    }

    // Without `limit`, a listing is what it always was: whole, no token, no link.
    let resp = d.send(Method::GET, "/blocklist/nodes", None).await;
    assert!(resp.headers().get("x-blocklist-continue").is_none());
    assert!(resp.headers().get("link").is_none());
}

#[tokio::test]
async fn a_token_older_than_the_event_log_answers_410_and_a_bad_one_400() {
    let mut ws = Workspace::new();
    let d = ws.start(&["--events-retention-count", "50"]);
    let ids: Vec<String> = (0..30).map(|i| format!("tm-{i:02}")).collect();
    add_all(&d, "taskmanagers", &ids).await;
    let first = page(&d, "/blocklist/taskmanagers?limit=10").await;
    let token = first.token.clone().expect("more than one page");
    let second = first.next.clone().unwrap();
    assert_eq!(page(&d, &second).await.body.as_array().unwrap().len(), 10);

    // `continue` alone: the rest, in pages of 1,000.
    let rest = page(&d, &format!("/blocklist/taskmanagers?continue={token}")).await;
    assert_eq!(rest.body.as_array().unwrap().len(), 20);
    assert!(rest.token.is_none());

    // Malformed, or of another listing: 400, naming the parameter.
    for (path, says) in [
        (
            "/blocklist/taskmanagers?limit=10&continue=bm90IGEgdG9rZW4",
            "continue",
        ),
        ("/blocklist/taskmanagers?limit=10&continue=%25", "continue"),
        (
            &format!("/blocklist/nodes?limit=10&continue={token}") as &str,
            "/blocklist/taskmanagers",
        ),
        (
            &format!("/taskmanagers?limit=10&continue={token}"),
            "continue",
        ),
        ("/blocklist/taskmanagers?limit=0", "limit"),
        ("/blocklist/taskmanagers?limit=10001", "limit"),
        ("/blocklist/taskmanagers?limit=ten", "limit"),
        ("/blocklist/taskmanagers?limit=1&limit=2", "limit"),
        (
            "/blocklist/nodes/x/history?limit=1&continue=e30",
            "continue",
        ),
    ] {
        let (status, body) = d.get(path).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        let message = body["errors"][0].as_str().unwrap();
        assert!(message.contains(says), "{path}: {message}");
    }

    // 60 more changes: the log of 50 no longer holds the walk's revision.
    for id in &ids {
        assert_eq!(
            d.delete(&format!("/blocklist/taskmanagers/{id}")).await.0,
            StatusCode::OK
        );
    }
    add_all(&d, "taskmanagers", &ids).await;
    let (status, body) = d.get(&second).await;
    assert_eq!(status, StatusCode::GONE, "{body}");
    let message = body["errors"][0].as_str().unwrap();
    assert!(
        message.contains(&format!("revision {}", first.revision))
            && message.contains("list again without continue"),
        "{message}"
    );
    // Starting again works, and the feed from the new walk's revision opens.
    let again = walk(&d, "/blocklist/taskmanagers", 10).await;
    assert_eq!(joined(&again, 10).len(), 30);
    assert!(Watch::open(&d, Some(again[0].revision), None).await.is_ok());
}
