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
    let started = Instant::now();
    loop {
        let (status, body) = answer(add(&detector, &replicas[0], "n-after")).await;
        if status == StatusCode::CREATED {
            break;
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(
            started.elapsed() < DEADLINE,
            "no write after the failover: {body}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    for replica in &replicas {
        let listing = replica.listing().await;
        let mut listed = ids(&listing["blockedNodes"]);
        listed.sort();
        assert_eq!(listed, ["n-after", "n-cert", "n-token"], "{listing}");
    }
}
