//! TLS everywhere on etcd: a three-member etcd serving its clients over TLS only, client
//! certificates required, and three daemons serving https that send writes on to the
//! writer over https, each verifying the other with the peers' CA. A caller is the same
//! caller through any daemon, by token or by client certificate; a client cannot pass for
//! another by claiming a forwarded certificate; and the writer's death loses nothing.
//!
//! Built with the `etcd` feature only (`cargo test --features etcd`).
#![cfg(feature = "etcd")]

mod common;

use std::time::Instant;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// An add of node `id` through `d` by `client`.
fn add(client: &reqwest::Client, d: &Daemon, id: &str) -> reqwest::RequestBuilder {
    client
        .post(d.url("/blocklist/nodes"))
        .json(&json!([item(id, "MARK_BLOCKED", "c")]))
}

async fn answer(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    read(request.send().await.expect("the request completes")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_everywhere_a_caller_is_the_same_through_any_daemon_and_a_failover_loses_nothing()
{
    let _one = ONE_AT_A_TIME.lock().await;
    let test = "over_tls_everywhere_a_caller_is_the_same_through_any_daemon";
    let ws = Workspace::new();
    let Some((_cluster, mut flags)) = tls_cluster(&ws, test, LEASE_SECS, 1_000) else {
        return;
    };
    // The clients' certificates come from a CA of their own: a client's certificate must
    // not pass for a daemon's.
    let clients = Ca::new("blocklistd clients CA");
    let client_ca = clients.write(ws.tmp.path(), "client-ca");
    let tokens = ws.tmp.path().join("tokens");
    std::fs::write(
        &tokens,
        "detector-token name=by-token role=writer\n\
         subject=detector-7.example name=detector-7 role=writer\n\
         subject=grafana.example name=grafana role=reader\n",
    )
    .unwrap();
    for (flag, path) in [("--tls-client-ca", &client_ca), ("--token-file", &tokens)] {
        flags.extend([flag.to_owned(), path.display().to_string()]);
    }
    let (writer, replicas) = three_daemons(&ws, &flags).await;
    let identified = |name| https_client(daemons_ca(), Some(&clients.client(name)));
    let (detector, grafana) = (
        identified("detector-7.example"),
        identified("grafana.example"),
    );
    let stranger = identified("stranger.example");
    let anonymous = https_client(daemons_ca(), None);

    // Through a replica, by token and by certificate: the writer records the caller.
    let (status, body) =
        answer(add(&anonymous, &replicas[0], "n-token").bearer_auth("detector-token")).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = answer(add(&detector, &replicas[0], "n-cert")).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    for (id, source) in [("n-token", "by-token"), ("n-cert", "detector-7")] {
        let (status, got) = replicas[1].get(&format!("/blocklist/nodes/{id}")).await;
        assert_eq!(status, StatusCode::OK, "{got}");
        assert_eq!(got["source"], source, "{got}");
    }
    let forwarded = replicas[0]
        .metric("blocklist_forwarded_request_duration_seconds_count{outcome=\"answered\"}")
        .await;
    assert!(
        forwarded >= 2.0,
        "the replica sent the writes on: {forwarded}"
    );
    // The client certificate given to etcd, watched to expire like the listener's.
    let now = now_ms() / 1000;
    for d in [&replicas[0], &writer] {
        let expires = d
            .metric(r#"blocklist_tls_certificate_not_after_seconds{certificate="etcd-client"}"#)
            .await;
        let server = d
            .metric(r#"blocklist_tls_certificate_not_after_seconds{certificate="server"}"#)
            .await;
        #[expect(clippy::cast_precision_loss, reason = "unix seconds, far below 2^52")]
        let now = now as f64;
        assert!(expires > now && server > now, "{expires} {server}");
    }

    // The reader's certificate keeps its role through a replica.
    let (status, body) = answer(add(&grafana, &replicas[0], "n-reader")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");

    // A client claiming a certificate it does not hold: through a replica (which drops the
    // claim), and straight to the writer as if it were a daemon sending a request on (its
    // certificate is not a daemon's).
    let claim = |request: reqwest::RequestBuilder| {
        request.header("blocklist-forwarded-certificate", "detector-7.example")
    };
    let (status, body) = answer(claim(add(&stranger, &replicas[0], "n-forged-1"))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let as_a_daemon = claim(add(&stranger, &writer, "n-forged-2"))
        .header("blocklist-forwarded-by", "https://127.0.0.1:1");
    let (status, body) = answer(as_a_daemon).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");

    // The writer dies: a write through a replica is acknowledged once another daemon has
    // taken over, and nothing acknowledged before is lost.
    writer.kill9();
    add_acknowledged_by(&detector, &replicas[0], "n-after").await;
    for replica in &replicas {
        let listing = replica.listing().await;
        let mut listed = ids(&listing["blockedNodes"]);
        listed.sort();
        assert_eq!(listed, ["n-after", "n-cert", "n-token"], "{listing}");
    }
}

/// The daemons' CA and certificates replaced under running daemons — first a bundle of the
/// old CA and the new, then the new certificate, then the new CA alone, each followed by
/// SIGHUP — and writes still go from a replica to the writer: the forwarding side verifies
/// with the CA as last loaded and presents the certificate as last loaded, no restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemons_ca_and_certificates_rotate_without_a_restart() {
    let _one = ONE_AT_A_TIME.lock().await;
    let test = "the_daemons_ca_and_certificates_rotate_without_a_restart";
    let ws = Workspace::new();
    let Some((_cluster, flags)) = tls_cluster(&ws, test, LEASE_SECS, 1_000) else {
        return;
    };
    let (writer, replicas) = three_daemons(&ws, &flags).await;
    let daemons = [&writer, &replicas[0], &replicas[1]];
    let rotated = Ca::new("rotated daemons' CA");
    let dir = ws.tmp.path();
    let hangup = || {
        for d in daemons {
            signal(d.pid(), "-HUP");
        }
    };
    let bundle = format!("{}{}", daemons_ca().pem, rotated.pem);
    std::fs::write(dir.join("daemons-ca.crt"), bundle).unwrap();
    hangup();
    rotated
        .daemon(&["127.0.0.1", "localhost"])
        .write(dir, "daemon");
    hangup();
    rotated.write(dir, "daemons-ca");
    hangup();

    // Only the new CA is trusted anywhere now, and every daemon serves a certificate of it.
    let client = https_client(&rotated, None);
    let started = Instant::now();
    let (status, body) = loop {
        let answer = match add(&client, &replicas[0], "n-rotated").send().await {
            Ok(response) => read(response).await,
            Err(e) => (StatusCode::BAD_GATEWAY, json!(e.to_string())),
        };
        if answer.0 == StatusCode::CREATED || started.elapsed() > DEADLINE {
            break answer;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let reloads = || {
        let lines = daemons.iter().flat_map(|d| {
            let log = d.log_text();
            log.lines()
                .filter(|l| l.contains("TLS"))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        });
        lines.collect::<Vec<_>>().join("\n")
    };
    assert_eq!(
        status,
        StatusCode::CREATED,
        "through the replica: {body}; the daemons' TLS lines:\n{}",
        reloads()
    );
    let (status, got) = read(
        client
            .get(replicas[1].url("/blocklist/nodes/n-rotated"))
            .send()
            .await
            .expect("a read"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{got}");
}
