//! TLS on the listener, against the real daemon with a CA and certificates made in the test:
//! HTTPS for curl and rustls clients that trust the CA, refusals (the wrong CA, an expired
//! certificate, a name mismatch, plain HTTP) logged and counted, client certificates as
//! identities with their roles, certificates rotated under a running daemon without
//! dropping an open watch, and a third-party scanner's verdict (testssl.sh).

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

fn https(d: &Daemon, path: &str) -> String {
    format!("https://127.0.0.1:{}{path}", d.addr.port())
}

/// The status and JSON body of a request that completes its handshake.
async fn answer(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    read(request.send().await.expect("the request completes")).await
}

/// An add of one permanent task manager, `id`.
fn add(client: &reqwest::Client, d: &Daemon, id: &str) -> reqwest::RequestBuilder {
    client
        .post(https(d, "/blocklist/taskmanagers"))
        .json(&json!([item(id, "MARK_BLOCKED", "oom")]))
}

/// A daemon serving `server`'s certificate, with `extra` flags.
fn start(ws: &mut Workspace, server: &Issued, extra: &[&str]) -> Daemon {
    let (cert, key) = server.write(ws.tmp.path(), "server");
    let mut args = vec![
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    ws.start(&args)
}

/// The serial number of the certificate a new connection gets.
async fn serial_served(client: &reqwest::Client, d: &Daemon) -> String {
    let response = client.get(https(d, "/healthz")).send().await.unwrap();
    let info = response
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .expect("TLS info");
    let der = info.peer_certificate().expect("the server's certificate");
    let (_, cert) = x509_parser::parse_x509_certificate(der).unwrap();
    cert.tbs_certificate.raw_serial_as_string()
}

/// A sample of `/metrics`, scraped over https by `client`.
async fn tls_metric(client: &reqwest::Client, d: &Daemon, name_and_labels: &str) -> f64 {
    let text = client
        .get(https(d, "/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    metric(&text, name_and_labels)
}

/// Waits until a sample of `/metrics` is `value`: the daemon counts a failed handshake
/// after the client has seen it fail.
async fn until_metric(client: &reqwest::Client, d: &Daemon, name_and_labels: &str, value: f64) {
    let what = format!("{name_and_labels} = {value}");
    eventually(&what, || async {
        tls_metric(client, d, name_and_labels).await == value
    })
    .await;
}

fn failures(reason: &str) -> String {
    format!("blocklist_tls_handshake_failures_total{{reason=\"{reason}\"}}")
}

fn curl(args: &[&str]) -> std::process::Output {
    Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "20"])
        .args(args)
        .output()
        .expect("curl")
}

fn skip() -> bool {
    skip_on_etcd("TLS with --store etcd waits for TLS between replicas")
}

/// A CA of the test's own, and a daemon serving its certificate for 127.0.0.1 and
/// localhost.
fn serving() -> (Ca, Workspace, Daemon) {
    let ca = Ca::new("blocklistd test CA");
    let mut ws = Workspace::new();
    let d = start(&mut ws, &ca.server(&["127.0.0.1", "localhost"]), &[]);
    (ca, ws, d)
}

#[tokio::test]
async fn https_serves_the_cas_certificate_and_plain_http_is_told_to_use_https() {
    if skip() {
        return;
    }
    let (ca, ws, d) = serving();
    let ca_file = ca.write(ws.tmp.path(), "ca");
    let client = https_client(&ca, None);

    let (status, body) = answer(add(&client, &d, "tm-1")).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let listing: Value = client
        .get(https(&d, "/blocklist"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ids(&listing["blockedTaskManagers"]), ["tm-1"]);

    // curl with the CA, by address and by name; without it, curl refuses the certificate.
    let port = d.addr.port().to_string();
    for url in [
        https(&d, "/healthz"),
        format!("https://localhost:{port}/healthz"),
    ] {
        let out = curl(&["--cacert", ca_file.to_str().unwrap(), &url]);
        assert!(out.status.success(), "{url}: {out:?}");
    }
    let out = curl(&[&https(&d, "/healthz")]);
    assert_eq!(out.status.code(), Some(60), "{out:?}");

    // Plain HTTP to the TLS port: a 400 that says why, not a reset.
    let (status, body) = read(
        reqwest::Client::new()
            .get(d.url("/healthz"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["errors"][0].as_str().unwrap().contains("https://"),
        "{body}"
    );

    until_metric(&client, &d, &failures("plain_http"), 1.0).await;
    until_metric(&client, &d, &failures("client_refused_certificate"), 1.0).await;
    // 90 days after the start of today.
    let today = now_ms() / 1000 / 86_400 * 86_400;
    assert_eq!(
        tls_metric(
            &client,
            &d,
            "blocklist_tls_certificate_not_after_seconds{certificate=\"server\"}"
        )
        .await,
        (today + 90 * 86_400) as f64
    );
    let log = d.log_text();
    assert!(log.contains("TLS certificate loaded"), "{log}");
    assert!(log.contains("plain_http"), "{log}");
}

#[tokio::test]
async fn the_wrong_ca_an_expired_certificate_and_a_name_mismatch_are_refused_and_counted() {
    if skip() {
        return;
    }
    let (ca, _ws, d) = serving();
    let good = https_client(&ca, None);

    let stranger = https_client(&Ca::new("another CA"), None);
    let refused = stranger.get(https(&d, "/healthz")).send().await;
    assert!(refused.is_err(), "{refused:?}");

    // The right CA, the wrong name.
    let renamed = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem.as_bytes()).unwrap())
        .resolve("blocklist.example", d.addr)
        .build()
        .unwrap();
    let url = format!("https://blocklist.example:{}/healthz", d.addr.port());
    let refused = renamed.get(&url).send().await;
    assert!(refused.is_err(), "{refused:?}");
    until_metric(&good, &d, &failures("client_refused_certificate"), 2.0).await;
    let log = d.log_text();
    assert!(log.contains("TLS handshake failed"), "{log}");
    assert!(log.contains("UnknownCA"), "{log}");

    // An expired certificate: refused by a client that trusts its CA.
    let mut ws = Workspace::new();
    let expired = start(&mut ws, &ca.expired_server(), &[]);
    let refused = good.get(https(&expired, "/healthz")).send().await;
    let error = format!("{:?}", refused.expect_err("an expired certificate"));
    assert!(error.contains("Expired"), "{error}");
    let blind = reqwest::Client::builder()
        .use_rustls_tls()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    until_metric(
        &blind,
        &expired,
        &failures("client_refused_certificate"),
        1.0,
    )
    .await;
    // 2021-01-01T00:00:00Z: what an alert on the gauge would see.
    assert_eq!(
        tls_metric(
            &blind,
            &expired,
            "blocklist_tls_certificate_not_after_seconds{certificate=\"server\"}"
        )
        .await,
        1_609_459_200.0
    );
}

#[tokio::test]
async fn client_certificates_named_in_the_token_file_are_callers_with_their_roles() {
    if skip() {
        return;
    }
    let ca = Ca::new("blocklistd test CA");
    let mut ws = Workspace::new();
    let ca_file = ca.write(ws.tmp.path(), "ca");
    let tokens = ws.tmp.path().join("tokens");
    std::fs::write(
        &tokens,
        "subject=detector-7.example role=writer\n\
         subject=grafana.example name=grafana role=reader\n\
         admin-token name=ops role=admin\n",
    )
    .unwrap();
    let d = start(
        &mut ws,
        &ca.server(&["127.0.0.1"]),
        &[
            "--tls-client-ca",
            ca_file.to_str().unwrap(),
            "--tls-client-auth",
            "required",
            "--token-file",
            tokens.to_str().unwrap(),
        ],
    );
    let detector = https_client(&ca, Some(&ca.client("detector-7.example")));
    let grafana = https_client(&ca, Some(&ca.client("grafana.example")));

    // Required: no certificate, or one of another CA, and the handshake fails.
    let refused = https_client(&ca, None)
        .get(https(&d, "/healthz"))
        .send()
        .await;
    assert!(refused.is_err(), "{refused:?}");
    let other = Ca::new("another CA");
    let refused = https_client(&ca, Some(&other.client("detector-7.example")))
        .get(https(&d, "/healthz"))
        .send()
        .await;
    assert!(refused.is_err(), "{refused:?}");
    until_metric(&detector, &d, &failures("no_client_certificate"), 1.0).await;
    until_metric(&detector, &d, &failures("bad_client_certificate"), 1.0).await;

    // The writer's certificate writes, and the item records its name.
    let (status, body) = answer(add(&detector, &d, "tm-1")).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, got) = answer(grafana.get(https(&d, "/blocklist/taskmanagers/tm-1"))).await;
    assert_eq!(status, StatusCode::OK, "{got}");
    assert_eq!(got["source"], "detector-7.example", "{got}");

    // The reader's reads, and may not write.
    let (status, body) = answer(add(&grafana, &d, "tm-2")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["errors"][0]
            .as_str()
            .unwrap()
            .contains("this client certificate's role is reader"),
        "{body}"
    );

    // A certificate the CA signed but the token file does not name: no caller.
    let (status, body) = answer(add(
        &https_client(&ca, Some(&ca.client("stranger.example"))),
        &d,
        "tm-3",
    ))
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(body.to_string().contains("stranger.example"), "{body}");

    // A token sent on a certificate's connection is the caller.
    let (status, body) = answer(add(&grafana, &d, "tm-4").bearer_auth("admin-token")).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, got) = answer(grafana.get(https(&d, "/blocklist/taskmanagers/tm-4"))).await;
    assert_eq!(got["source"], "ops", "{got}");
}

/// Sends the daemon SIGHUP.
fn hangup(d: &Daemon) {
    let pid = d.pid().to_string();
    let sent = Command::new("kill").args(["-HUP", &pid]).status();
    assert!(sent.unwrap().success());
}

/// Replaces a certificate and key the way an agent rewrites them in place.
fn replace(dir: &Path, issued: &Issued) {
    issued.write(dir, "server");
}

#[tokio::test]
async fn a_new_certificate_is_served_without_a_restart_and_a_broken_one_is_not() {
    if skip() {
        return;
    }
    let ca = Ca::new("blocklistd test CA");
    let first = ca.server(&["127.0.0.1"]);
    let mut ws = Workspace::new();
    let d = start(&mut ws, &first, &[]);
    let dir = ws.tmp.path().to_owned();
    let client = https_client(&ca, None);
    assert_eq!(serial_served(&client, &d).await, first.serial);
    let mut watch = Watch::open_at(&client, &https(&d, "/blocklist/events?since=0"), None)
        .await
        .expect("a watch over https");

    let second = ca.server(&["127.0.0.1"]);
    replace(&dir, &second);
    eventually("new connections get the new certificate", || async {
        serial_served(&https_client(&ca, None), &d).await == second.serial
    })
    .await;
    assert_eq!(
        tls_metric(&client, &d, "blocklist_tls_reloads_total{result=\"ok\"}").await,
        1.0
    );

    // The watch opened before goes on.
    let (status, _) = answer(
        client
            .post(https(&d, "/blocklist/nodes"))
            .json(&json!([item("n-1", "MARK_BLOCKED", "disk")])),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    loop {
        let event = watch.next().await.expect("the stream is open");
        if event.event == "added" && event.data["id"] == "n-1" {
            break;
        }
    }

    // SIGHUP with the files unchanged: nothing to do.
    hangup(&d);
    // A broken certificate: refused, the pair in use stays.
    std::fs::write(
        dir.join("server.crt"),
        "-----BEGIN CERTIFICATE-----\nbroken\n",
    )
    .unwrap();
    eventually("the broken certificate is refused", || async {
        tls_metric(
            &client,
            &d,
            "blocklist_tls_reloads_total{result=\"failed\"}",
        )
        .await
            >= 1.0
    })
    .await;
    assert_eq!(
        serial_served(&https_client(&ca, None), &d).await,
        second.serial
    );
    assert!(d.log_text().contains("TLS reload failed"));
    assert_eq!(
        tls_metric(&client, &d, "blocklist_tls_reloads_total{result=\"ok\"}").await,
        1.0
    );
}

#[tokio::test]
async fn sighup_without_tls_does_not_stop_the_daemon() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    hangup(&d);
    eventually("the SIGHUP is logged", || async {
        d.log_text().contains("SIGHUP: nothing to reload")
    })
    .await;
    let (status, _) = d.get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
}

/// `--tls-peer-ca` verifies the other daemons of an etcd prefix; a daemon on sled has none,
/// so the flag is said to be unused rather than silently ignored.
#[tokio::test]
async fn the_peer_ca_on_the_sled_store_is_said_to_be_unused() {
    if skip() {
        return;
    }
    let ca = Ca::new("blocklistd test CA");
    let mut ws = Workspace::new();
    let ca_file = ca.write(ws.tmp.path(), "peer-ca");
    let d = start(
        &mut ws,
        &ca.server(&["127.0.0.1"]),
        &["--tls-peer-ca", ca_file.to_str().unwrap()],
    );
    eventually("the warning is logged", || async {
        d.log_text()
            .contains("--tls-peer-ca is unused on the sled store")
    })
    .await;
}

/// What testssl.sh must find: these protocols not offered, these cipher categories not
/// offered (NULL, anonymous, export, 64-bit and DES/RC2/RC4, 3DES and IDEA, CBC).
const NOT_OFFERED: [&str; 10] = [
    "SSLv2",
    "SSLv3",
    "TLS1",
    "TLS1_1",
    "cipherlist_NULL",
    "cipherlist_aNULL",
    "cipherlist_EXPORT",
    "cipherlist_LOW",
    "cipherlist_3DES_IDEA",
    "cipherlist_AVERAGE",
];

#[test]
fn a_tls_scanner_finds_no_old_protocol_no_weak_cipher_and_nothing_high() {
    let test = "a_tls_scanner_finds_no_old_protocol_no_weak_cipher_and_nothing_high";
    if skip()
        || !available(
            "testssl (Debian's testssl.sh) is missing",
            runs("testssl", "--version"),
            test,
        )
    {
        return;
    }
    let (ca, ws, d) = serving();
    let ca_file = ca.write(ws.tmp.path(), "ca");
    let report = ws.tmp.path().join("testssl.json");
    // Protocols, cipher categories, server defaults (the certificate), vulnerabilities.
    let out = Command::new("testssl")
        .args(["--quiet", "--color", "0", "--warnings", "off", "--add-ca"])
        .arg(&ca_file)
        .arg("--jsonfile")
        .arg(&report)
        .args(["-p", "-s", "-S", "-U"])
        .arg(format!("127.0.0.1:{}", d.addr.port()))
        .output()
        .expect("testssl");
    let findings: Vec<Value> = serde_json::from_slice(
        &std::fs::read(&report).unwrap_or_else(|e| panic!("no report ({e}): {out:?}")),
    )
    .expect("testssl's JSON");
    let finding = |id: &str| {
        findings
            .iter()
            .find(|f| f["id"] == id)
            .unwrap_or_else(|| panic!("testssl reported no {id}"))["finding"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let high: Vec<&Value> = findings
        .iter()
        .filter(|f| matches!(f["severity"].as_str(), Some("HIGH" | "CRITICAL")))
        .collect();
    assert!(high.is_empty(), "{high:#?}");
    for id in NOT_OFFERED {
        assert_eq!(finding(id), "not offered", "{id}");
    }
    assert_eq!(finding("TLS1_2"), "offered");
    assert!(
        finding("TLS1_3").starts_with("offered"),
        "{}",
        finding("TLS1_3")
    );
    assert_eq!(finding("cert_chain_of_trust"), "passed.");
}
