//! Several daemons on one etcd prefix: a daemon that is not the writer listens at once as a
//! replica, serves reads itself and sends writes on to the writer, returning its answers
//! unchanged with the caller's identity carried; a request that waits through an election
//! is applied once.
//!
//! Built with the `etcd` feature only (`cargo test --features etcd`): its client's build
//! needs `protoc`.
#![cfg(feature = "etcd")]

mod common;

use std::time::{Duration, Instant};

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::json;

const TOKEN: &str = "alice-token-value";
const AUTH: (&str, &str) = ("Authorization", "Bearer alice-token-value");

/// The flags of a daemon on `cluster` under `/t/` with a token file naming `alice`.
fn flags(
    cluster: &EtcdCluster,
    ws: &Workspace,
    lease_secs: u64,
    forward_wait_ms: u64,
) -> Vec<String> {
    let tokens = ws.tmp.path().join("tokens");
    std::fs::write(&tokens, format!("{TOKEN} name=alice role=admin\n")).unwrap();
    let mut flags = cluster.daemon_flags("/t/", lease_secs, 1_000);
    flags.extend([
        "--token-file".to_owned(),
        tokens.to_str().unwrap().to_owned(),
        "--forward-wait-ms".to_owned(),
        forward_wait_ms.to_string(),
    ]);
    flags
}

fn spawn(ws: &Workspace, flags: &[String], n: usize) -> Daemon {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let log = ws.tmp.path().join(format!("daemon-{n}.log"));
    Daemon::spawn(&ws.data_dir(), &log, &flags).listening()
}

/// The headers a caller reads off an answer, as text.
fn header(headers: &reqwest::header::HeaderMap, name: &str) -> Option<String> {
    headers.get(name).map(|v| v.to_str().unwrap().to_owned())
}

/// Through the replica: an add with a source and a key, its replay, a read, a PATCH with
/// `If-Match`, a refused write and the feed each answer exactly as the writer does, and
/// the writer records the caller, not the replica. Reads are the replica's own (nothing
/// forwarded), as are its probes and metrics; a write forwarded to it already is not sent
/// on again.
#[tokio::test(flavor = "multi_thread")]
async fn a_replica_sends_writes_on_to_the_writer_and_serves_reads_itself() {
    let Some(cluster) = EtcdCluster::start(1, "etcd_forwarding answers") else {
        return;
    };
    let ws = Workspace::new();
    let flags = flags(&cluster, &ws, 10, 500);
    let writer = spawn(&ws, &flags, 1);
    let replica = spawn(&ws, &flags, 2);
    eventually("the replica says it follows", || async {
        replica.log_text().contains("serving as a replica")
    })
    .await;
    let mut feed = Watch::open(&replica, Some(0), None)
        .await
        .expect("the feed through the replica");

    let add = Some(json!([item("n1", "MARK_BLOCKED", "c")]));
    let keyed = [
        AUTH,
        ("Blocklist-Source", "detector"),
        ("Idempotency-Key", "k1"),
    ];
    let (status, headers, body) = request(
        &replica,
        Method::POST,
        "/blocklist/nodes",
        &keyed,
        add.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let revision = header(&headers, "x-blocklist-revision").expect("the revision header");
    let (status, again, replayed) =
        request(&replica, Method::POST, "/blocklist/nodes", &keyed, add).await;
    assert_eq!((status, &replayed), (StatusCode::CREATED, &body));
    assert_eq!(
        header(&again, "idempotent-replayed").as_deref(),
        Some("true")
    );
    assert_eq!(header(&again, "x-blocklist-revision"), Some(revision));

    // Reads: the writer's answer, headers included.
    let (status, via_replica, item_body) =
        request(&replica, Method::GET, "/blocklist/nodes/n1", &[], None).await;
    let (_, via_writer, writer_body) =
        request(&writer, Method::GET, "/blocklist/nodes/n1", &[], None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(item_body, writer_body);
    assert_eq!(header(&via_replica, "etag"), header(&via_writer, "etag"));
    assert_eq!(item_body["source"], "detector", "{item_body}");

    // A PATCH with the ETag read through the replica, reported as the token's name.
    let etag = header(&via_replica, "etag").unwrap();
    let (status, patched, _) = request(
        &replica,
        Method::PATCH,
        "/blocklist/nodes/n1",
        &[AUTH, ("If-Match", &etag)],
        Some(json!({"cause": "more"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (_, now, stored) = request(&writer, Method::GET, "/blocklist/nodes/n1", &[], None).await;
    assert_eq!(header(&patched, "etag"), header(&now, "etag"));
    assert_eq!(stored["cause"], "c,more");
    assert_eq!(stored["reports"][0]["source"], "alice", "{stored}");

    // The writer's refusals too: no token is its 401, with its challenge.
    let (status, refused, _) = request(
        &replica,
        Method::POST,
        "/blocklist/nodes",
        &[],
        Some(json!([item("n2", "MARK_BLOCKED", "c")])),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(header(&refused, "www-authenticate").is_some());

    // The feed, streamed through the replica: the add and the update, in order.
    let events = feed.take(2).await;
    assert_eq!(
        events.iter().map(|e| e.event.as_str()).collect::<Vec<_>>(),
        ["added", "updated"],
        "{:?}",
        events.iter().map(|e| &e.data).collect::<Vec<_>>()
    );

    // The API document and the console come from the writer too.
    assert_eq!(replica.get("/openapi.json").await.0, StatusCode::OK);

    // Its own probes and metrics: ready as a current replica; the four writes forwarded,
    // the reads not.
    let (status, readiness) = replica.get("/readyz").await;
    assert_eq!(status, StatusCode::OK, "{readiness}");
    assert_eq!(
        (&readiness["store"], &readiness["etcd"]),
        (&json!("replica"), &json!("replica")),
        "{readiness}"
    );
    assert_eq!(writer.get("/readyz").await.0, StatusCode::OK);
    let answered = replica
        .metric("blocklist_forwarded_request_duration_seconds_count{outcome=\"answered\"}")
        .await;
    assert_eq!(answered, 4.0, "answered forwards");
    let role =
        |text: &str, role: &str| metric(text, &format!("blocklist_etcd_role{{role=\"{role}\"}}"));
    let (replica_text, writer_text) = (replica.scrape().await, writer.scrape().await);
    assert_eq!(
        (
            role(&replica_text, "replica"),
            role(&replica_text, "writer")
        ),
        (1.0, 0.0)
    );
    assert_eq!(
        (role(&writer_text, "writer"), role(&writer_text, "replica")),
        (1.0, 0.0)
    );
    assert!(metric(&replica_text, "blocklist_replica_head_reads_total") >= 1.0);

    // Sent on once at most: a request another daemon forwarded is answered here, 503 at
    // once.
    let started = Instant::now();
    let (status, headers, body) = request(
        &replica,
        Method::POST,
        "/blocklist/nodes",
        &[AUTH, ("Blocklist-Forwarded-By", "http://elsewhere")],
        Some(json!([item("looped", "MARK_BLOCKED", "c")])),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(header(&headers, "retry-after").as_deref(), Some("1"));
    assert!(
        started.elapsed() < Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        writer.get("/blocklist/nodes/looped").await.0,
        StatusCode::NOT_FOUND
    );
}

/// The writer killed: a write through the replica meanwhile answers 503 with Retry-After
/// once `--forward-wait-ms` passes without a writer, having changed nothing; retried with
/// its key, it is applied once by the replica when it has taken over.
#[tokio::test(flavor = "multi_thread")]
async fn a_write_through_an_election_is_applied_once() {
    let Some(cluster) = EtcdCluster::start(1, "etcd_forwarding election") else {
        return;
    };
    let ws = Workspace::new();
    let lease_secs = 3;
    let flags = flags(&cluster, &ws, lease_secs, 1_000);
    let writer = spawn(&ws, &flags, 1);
    let replica = spawn(&ws, &flags, 2);
    eventually("the replica says it follows", || async {
        replica.log_text().contains("serving as a replica")
    })
    .await;
    let keyed = [AUTH, ("Idempotency-Key", "through-the-election")];
    let add = || Some(json!([item("n1", "MARK_BLOCKED", "c")]));
    writer.kill9();
    let killed = Instant::now();

    let (status, headers, body) =
        request(&replica, Method::POST, "/blocklist/nodes", &keyed, add()).await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{body} after {:?}; the replica's log:\n{}",
        killed.elapsed(),
        replica.log_text()
    );
    assert_eq!(header(&headers, "retry-after").as_deref(), Some("1"));
    assert!(
        body["errors"][0]
            .as_str()
            .unwrap()
            .contains("--forward-wait-ms"),
        "{body}"
    );

    // Retried as a client does on 503: the first 201 is the write applied, not a replay of
    // one of the 503s.
    loop {
        let (status, headers, body) =
            request(&replica, Method::POST, "/blocklist/nodes", &keyed, add()).await;
        if status == StatusCode::CREATED {
            assert_eq!(header(&headers, "idempotent-replayed"), None, "{body}");
            break;
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(killed.elapsed() < DEADLINE, "no writer took over: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = killed.elapsed();
    eprintln!("a write through the replica applied {took:?} after the writer's kill -9");
    assert!(
        took <= Duration::from_secs(lease_secs + 3),
        "took {took:?}: more than the lease, the forward wait and 2 s"
    );
    let (status, headers, _) =
        request(&replica, Method::POST, "/blocklist/nodes", &keyed, add()).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        header(&headers, "idempotent-replayed").as_deref(),
        Some("true")
    );
    let listed = ids(&replica.listing().await["blockedNodes"]);
    assert_eq!(listed, ["n1"]);
    assert_eq!(replica.get("/readyz").await.0, StatusCode::OK);
}
