//! What the client draws on a terminal and only there: a spinner while a request is slow,
//! and `watch`'s connection state. Piped, stderr stays empty.

// The daemon's test harness: the real daemon, and a terminal to run the client on.
#[path = "../../../tests/common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::json;

const CLI: &str = env!("CARGO_BIN_EXE_blocklist");

/// A server that answers every request with an empty listing after `delay`.
fn slow_server(delay: Duration) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                    line.clear();
                }
                std::thread::sleep(delay);
                let body = r#"{"blockedTaskManagers":[],"blockedNodes":[],"revision":0}"#;
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    format!("http://{addr}")
}

#[test]
fn a_slow_answer_shows_a_spinner_on_a_terminal_only() {
    if !have_script("a_slow_answer_shows_a_spinner_on_a_terminal_only") {
        return;
    }
    let server = slow_server(Duration::from_millis(1500));
    let (code, drawn) = on_terminal(Path::new(CLI), &["--server", &server, "list"]);
    assert_eq!(code, Some(0), "{drawn}");
    let waiting = format!("waiting for GET {server}/blocklist?limit=1000 (");
    assert!(drawn.contains(&waiting), "no {waiting:?} in:\n{drawn}");
    assert!(drawn.contains("nothing is blocked"), "{drawn}");

    // Piped: the answer, and nothing on stderr.
    let out = Command::new(CLI)
        .args(["--server", &server, "list"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "nothing is blocked\n");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn watch_shows_its_connection_on_a_terminal() {
    if !have_script("watch_shows_its_connection_on_a_terminal") {
        return;
    }
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let server = d.url("");
    let watch = {
        let server = server.clone();
        // Ctrl-C after 5 s, the normal end of a watch.
        std::thread::spawn(move || {
            on_terminal(
                Path::new("timeout"),
                &[
                    "--preserve-status",
                    "-s",
                    "INT",
                    "5",
                    CLI,
                    "--server",
                    &server,
                    "watch",
                ],
            )
        })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let item = json!([{"id": "n1", "action": "MARK_BLOCKED", "cause": "disk"}]);
    assert_eq!(d.post("/blocklist/nodes", item).await.0, 201);
    let (code, drawn) = watch.join().unwrap();
    assert_eq!(code, Some(0), "{drawn}");
    for line in [
        format!("watching {server}: connected, 0 events printed"),
        "1 added node n1: block, ends permanent, cause \"disk\"".to_owned(),
        format!("watching {server}: connected, 1 event printed"),
    ] {
        assert!(drawn.contains(&line), "no {line:?} in:\n{drawn}");
    }
}
