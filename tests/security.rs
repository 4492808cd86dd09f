//! Authentication, exposure and resource limits over real sockets.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use reqwest::StatusCode;
use serde_json::json;

const TOKEN: &str = "s3cret-token-value";

fn token_file(ws: &Workspace, contents: &str) -> String {
    let path = ws.tmp.path().join("tokens");
    std::fs::write(&path, contents).unwrap();
    path.to_string_lossy().into_owned()
}

#[tokio::test]
async fn mutations_need_the_bearer_token_and_reads_stay_open() {
    let mut ws = Workspace::new();
    let tokens = token_file(&ws, &format!("# rotated tokens\nold-token\n\n{TOKEN}\n"));
    // At trace, where every request is logged: a token must not reach even those lines.
    let d = ws.start(&["--token-file", &tokens, "--log-level", "trace"]);
    let body = json!([item("n1", "MARK_BLOCKED", "c")]);
    let url = d.url("/blocklist/nodes");

    let resp = d.client.post(&url).json(&body).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        resp.headers()["www-authenticate"],
        "Bearer realm=\"blocklistd\""
    );
    assert!(resp.json::<serde_json::Value>().await.unwrap()["errors"][0].is_string());

    let resp = d
        .client
        .post(&url)
        .bearer_auth("wrong")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    for path in ["/blocklist/nodes/n1", "/taskmanagers/t"] {
        let resp = d.client.delete(d.url(path)).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
    let resp = d
        .client
        .put(d.url("/taskmanagers/t"))
        .json(&json!({"node": "n"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        d.get("/blocklist/nodes").await.1,
        json!([]),
        "nothing was written"
    );

    let resp = d
        .client
        .post(&url)
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let resp = d
        .client
        .put(d.url("/taskmanagers/t"))
        .bearer_auth("old-token")
        .json(&json!({"node": "n1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status(),
        StatusCode::CREATED,
        "every listed token works"
    );

    // Reads, checks and probes need nothing.
    assert_eq!(d.get("/blocklist/nodes/n1").await.0, StatusCode::OK);
    assert_eq!(
        d.post("/blocklist/check", json!({"nodes": ["n1"]})).await.0,
        StatusCode::OK
    );
    assert_eq!(d.get("/healthz").await.0, StatusCode::OK);

    let log = d.log_text();
    assert!(
        log.contains("route=/blocklist/nodes"),
        "requests logged: {log}"
    );
    assert!(
        !log.contains(TOKEN) && !log.contains("wrong"),
        "tokens never reach the log"
    );
}

#[tokio::test]
async fn reads_can_be_closed_but_probes_and_metrics_stay_open() {
    let mut ws = Workspace::new();
    let tokens = token_file(&ws, TOKEN);
    let d = ws.start(&["--token-file", &tokens, "--auth-reads", "true"]);
    assert_eq!(d.get("/blocklist").await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(
        d.post("/blocklist/check", json!({"nodes": ["n"]})).await.0,
        StatusCode::UNAUTHORIZED
    );
    let resp = d
        .client
        .get(d.url("/blocklist"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    for open in ["/healthz", "/readyz", "/metrics"] {
        let resp = d.client.get(d.url(open)).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{open}");
    }
}

/// A request with a bearer token; its status and JSON body.
async fn with_token(
    d: &Daemon,
    method: reqwest::Method,
    path: &str,
    token: &str,
    body: Option<serde_json::Value>,
) -> (StatusCode, serde_json::Value) {
    let mut request = d.client.request(method, d.url(path)).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let resp = request.send().await.unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap_or(serde_json::Value::Null))
}

#[tokio::test]
async fn a_token_has_the_role_its_line_gives_and_a_bare_token_writes() {
    use reqwest::Method;
    let mut ws = Workspace::new();
    let tokens = token_file(
        &ws,
        "# a bare token, as files were before roles
         bare-token-value
         reader-token-value name=grafana role=reader
         
         admin-token-value role=admin name=alice
",
    );
    let d = ws.start(&["--token-file", &tokens, "--auth-reads", "true"]);
    let add = |id: &str| Some(json!([item(id, "MARK_BLOCKED", "c")]));

    // The bare token still writes (and reads).
    let (status, _) = with_token(
        &d,
        Method::POST,
        "/blocklist/nodes",
        "bare-token-value",
        add("n1"),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = with_token(
        &d,
        Method::GET,
        "/blocklist/nodes",
        "bare-token-value",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    // The reader reads and checks, and changes nothing.
    let reader = "reader-token-value";
    let (status, nodes) = with_token(&d, Method::GET, "/blocklist/nodes", reader, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(nodes.as_array().map(Vec::len), Some(1), "{nodes}");
    let (status, _) = with_token(
        &d,
        Method::POST,
        "/blocklist/check",
        reader,
        Some(json!({"nodes": ["n1"]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = with_token(&d, Method::POST, "/blocklist/nodes", reader, add("n2")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        body,
        json!({"errors": ["POST /blocklist/nodes needs a detector or writer token; this token's role is reader"]})
    );
    let (status, _) = with_token(&d, Method::DELETE, "/blocklist/nodes/n1", reader, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = with_token(
        &d,
        Method::PUT,
        "/taskmanagers/t",
        reader,
        Some(json!({"node": "n1"})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (_, nodes) = with_token(&d, Method::GET, "/blocklist/nodes", reader, None).await;
    assert_eq!(
        nodes.as_array().map(Vec::len),
        Some(1),
        "nothing was written: {nodes}"
    );
    let (_, registrations) = with_token(&d, Method::GET, "/taskmanagers", reader, None).await;
    assert_eq!(registrations, json!([]));

    // The admin does everything a writer does.
    let (status, _) = with_token(
        &d,
        Method::POST,
        "/blocklist/nodes",
        "admin-token-value",
        add("n3"),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    // Fields do not make a token: the whole line is no token.
    let (status, _) = with_token(
        &d,
        Method::GET,
        "/blocklist/nodes",
        "reader-token-value name=grafana role=reader",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let log = d.log_text();
    assert!(
        log.contains("caller=\"grafana\"") && log.contains("role=reader"),
        "the refusal names the token's holder: {log}"
    );
    assert!(!log.contains("-token-value"), "tokens never reach the log");
}

#[tokio::test]
async fn a_bad_token_line_stops_the_daemon_naming_the_line_and_not_the_token() {
    let ws = Workspace::new();
    let tokens = token_file(
        &ws,
        "fine-token
# ops
secret-token-value name=bob role=superuser
",
    );
    let dir = ws.data_dir();
    let (status, stderr) = run_to_exit(&[
        "--listen".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--data-dir".as_ref(),
        dir.as_os_str(),
        "--token-file".as_ref(),
        tokens.as_ref(),
    ]);
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("the token file {tokens}, line 3"))
            && stderr.contains(
                "the field `role` must be admin, writer, enforcer, detector or reader, not `superuser`"
            ),
        "{stderr}"
    );
    assert!(!stderr.contains("secret-token"), "{stderr}");
    assert!(
        !dir.join("db").exists(),
        "refused before touching the data dir"
    );
}

#[tokio::test]
async fn a_non_loopback_address_without_a_token_is_refused() {
    let ws = Workspace::new();
    let dir = ws.data_dir();
    let args = [
        "--listen".as_ref(),
        "0.0.0.0:0".as_ref(),
        "--data-dir".as_ref(),
        dir.as_os_str(),
    ];
    let (status, stderr) = run_to_exit(&args);
    assert!(!status.success());
    assert!(
        stderr.contains("without authentication") && stderr.contains("--token-file"),
        "{stderr}"
    );
    assert!(
        !dir.join("db").exists(),
        "refused before touching the data dir"
    );

    let empty = ws.tmp.path().join("empty-tokens");
    std::fs::write(&empty, "# nothing\n").unwrap();
    let (status, stderr) = run_to_exit(&[
        args[0],
        args[1],
        args[2],
        args[3],
        "--token-file".as_ref(),
        empty.as_os_str(),
    ]);
    assert!(!status.success());
    assert!(stderr.contains("holds no token"), "{stderr}");
}

#[tokio::test]
async fn a_non_loopback_address_is_allowed_with_the_explicit_flag() {
    let mut ws = Workspace::new();
    let d = ws.start(&["--listen", "0.0.0.0:0", "--allow-unauthenticated"]);
    assert!(d.addr.ip().is_unspecified(), "{}", d.addr);
    assert_eq!(d.get("/healthz").await.0, StatusCode::OK);
}

#[test]
fn a_client_that_trickles_its_headers_is_cut_off() {
    let mut ws = Workspace::new();
    let d = ws.start(&["--header-timeout-ms", "500"]);
    let mut conn = TcpStream::connect(d.addr).unwrap();
    conn.set_read_timeout(Some(DEADLINE)).unwrap();
    let started = Instant::now();
    conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    // One header byte a second; the daemon closes the connection at the deadline.
    let mut closed = false;
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(300));
        if conn.write_all(b"X").is_err() {
            closed = true;
            break;
        }
        let mut buf = [0u8; 256];
        conn.set_nonblocking(true).unwrap();
        let read = conn.read(&mut buf);
        conn.set_nonblocking(false).unwrap();
        if matches!(read, Ok(0)) || matches!(read, Ok(n) if n > 0) {
            closed = true;
            break;
        }
    }
    assert!(closed, "the connection stayed open");
    // Well under the 10 s default: the flag's 500 ms applied (generous for a loaded CI).
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_client_that_trickles_its_body_gets_408() {
    let mut ws = Workspace::new();
    let d = ws.start(&["--body-timeout-ms", "500"]);
    let mut conn = TcpStream::connect(d.addr).unwrap();
    conn.set_read_timeout(Some(DEADLINE)).unwrap();
    conn.write_all(b"POST /blocklist/nodes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n[").unwrap();
    let mut response = String::new();
    let _ = conn.read_to_string(&mut response);
    assert!(response.starts_with("HTTP/1.1 408"), "{response}");
    assert!(response.contains("\"errors\""), "{response}");
    assert_eq!(d.get("/blocklist/nodes").await.1, json!([]));
}

#[tokio::test]
async fn connections_over_the_cap_are_refused_with_503() {
    let mut ws = Workspace::new();
    let d = ws.start(&["--max-connections", "2"]);
    // A connection of the harness's own (its readiness reads on etcd) may hold a slot a
    // moment after its answer: take the two slots once both are ours (neither answered
    // with the 503 within 200 ms).
    let started = std::time::Instant::now();
    let idle: Vec<TcpStream> = loop {
        let idle: Vec<TcpStream> = (0..2)
            .map(|_| TcpStream::connect(d.addr).unwrap())
            .collect();
        let refused = idle.iter().any(|mut conn| {
            conn.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            conn.read(&mut [0u8; 1]).is_ok()
        });
        if !refused {
            break idle;
        }
        assert!(started.elapsed() < DEADLINE, "no two slots free");
        std::thread::sleep(Duration::from_millis(100));
    };
    // The third gets a 503 and is closed; nothing hangs.
    let mut extra = TcpStream::connect(d.addr).unwrap();
    extra.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut response = String::new();
    let _ = extra.read_to_string(&mut response);
    assert!(response.starts_with("HTTP/1.1 503"), "{response}");
    assert!(response.contains("too many open connections"));
    drop(idle);
    eventually("a slot to free up", || async {
        reqwest::Client::new()
            .get(d.url("/healthz"))
            .send()
            .await
            .is_ok_and(|r| r.status() == StatusCode::OK)
    })
    .await;
}
