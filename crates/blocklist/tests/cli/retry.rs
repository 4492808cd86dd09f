//! Writes the CLI sends again when it got no answer: with the same `Idempotency-Key` and
//! the same headers, against a stand-in that drops the first attempt.

use super::common::*;
use super::run::*;
use super::stand_in::{header_of, stand_in, Answer};
use super::Proxy;

#[test]
fn a_write_that_got_no_answer_is_sent_again_with_its_idempotency_key() {
    // A stand-in server: the first attempt is read and its connection dropped unanswered
    // (as a daemon killed after the write, or a lost answer); the second is answered.
    let (server, recorder) = stand_in(vec![
        Answer::Drop,
        Answer::Reply(
            "HTTP/1.1 201 Created\r\nx-blocklist-revision: 1\r\n\
             content-length: 0\r\nconnection: close\r\n\r\n"
                .into(),
        ),
    ]);
    let run = run_cmd(command(&server, &["add", "node", "n1", "--cause", "disk"])).ok();
    assert!(run.stdout.starts_with("blocked node n1"), "{run:?}");
    let heads = recorder.join().unwrap();
    let keys: Vec<&str> = heads
        .iter()
        .map(|head| header_of(head, "idempotency-key").expect("a key on every attempt"))
        .collect();
    assert_eq!(keys[0], keys[1], "one key for the write and its retry");
    assert_eq!(keys[0].len(), 36, "a UUID: {keys:?}");
    // Another write gets another key; a read gets none.
    let d = {
        let mut ws = Workspace::new();
        let d = ws.start(&[]);
        (ws, d)
    };
    let proxy = Proxy::start(d.1.addr);
    let through = format!("http://{}", proxy.addr);
    run_cmd(command(&through, &["add", "node", "n2", "--cause", "disk"])).ok();
    run_cmd(command(&through, &["list"])).ok();
    let sent = proxy.sent_text();
    let sent_keys: Vec<&str> = sent
        .split("\r\n\r\n")
        .filter_map(|head| header_of(head, "idempotency-key"))
        .collect();
    assert_eq!(sent_keys.len(), 1, "{sent}");
    assert_ne!(sent_keys[0], keys[0]);
}

#[test]
fn a_retried_write_carries_its_headers_with_its_key() {
    // As above, but an update with `--if-match` and `--source`: the retry is the same
    // request (the daemon's fingerprint covers those headers), so it must carry them again.
    let (server, recorder) = stand_in(vec![
        Answer::Drop,
        Answer::Reply(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
             x-blocklist-revision: 13\r\ncontent-length: 2\r\n\
             connection: close\r\n\r\n{}"
                .into(),
        ),
    ]);
    let args = [
        "--json",
        "update",
        "node",
        "n1",
        "--timeout",
        "30m",
        "--if-match",
        "12",
        "--source",
        "operator:alice",
    ];
    let run = run_cmd(command(&server, &args)).ok();
    assert_eq!(run.stdout.trim(), "{}", "{run:?}");
    let heads = recorder.join().unwrap();
    for name in ["idempotency-key", "if-match", "blocklist-source"] {
        let values: Vec<Option<&str>> = heads.iter().map(|head| header_of(head, name)).collect();
        assert!(
            values[0].is_some(),
            "{name} on the first attempt: {heads:?}"
        );
        assert_eq!(values[0], values[1], "{name} on both attempts");
    }
    assert_eq!(header_of(&heads[1], "if-match"), Some("\"12\""));
    assert_eq!(
        header_of(&heads[1], "blocklist-source"),
        Some("operator:alice")
    );
}
