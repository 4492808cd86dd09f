//! The `blocklist` command-line client against the real daemon: every subcommand in human
//! and `--json` form, the exit codes (1 refused with the server's message, 2 unreachable),
//! the bearer token, and `watch` — including its resume after a dropped connection. The
//! guardrail commands (policy, allowlist, hold-off, force) are in `cli/guardrails.rs`; who
//! reported what and the unblock by selector (`get`'s reports and past blocks, `history`,
//! `update`, `remove --by-source`) in `cli/provenance.rs`; a write sent again after a lost
//! answer, with its `Idempotency-Key`, in `cli/retry.rs` (against `cli/stand_in.rs`); big
//! listings read in pages in `cli/paging.rs`.

// The daemon's own test harness, shared rather than copied: it starts the real daemon binary
// and speaks HTTP to it.
#[path = "../../../tests/common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;

use common::*;
use serde_json::Value;

#[path = "cli/run.rs"]
mod run;

#[path = "cli/guardrails.rs"]
mod guardrails;

#[path = "cli/paging.rs"]
mod paging;

#[path = "cli/provenance.rs"]
mod provenance;

#[path = "cli/retry.rs"]
mod retry;

#[path = "cli/stand_in.rs"]
mod stand_in;

use run::*;
use stand_in::{stand_in, Answer};

#[test]
fn add_list_get_remove_in_human_and_json_form() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);

    let run = cli(
        &d,
        &[
            "add",
            "node",
            "n1",
            "--action",
            "evacuate",
            "--timeout",
            "2h",
            "--cause",
            "disk",
        ],
    )
    .ok();
    assert!(
        run.stdout.starts_with("blocked node n1: evacuate, ends "),
        "{run:?}"
    );
    assert!(run.stdout.contains("(in 2h)"), "{run:?}");
    // An id that needs percent-encoding, and the FLIP-224 action name.
    let tm = "tm/7 50%ü";
    let run = cli(
        &d,
        &[
            "add",
            "taskmanager",
            tm,
            "--action",
            "MARK_BLOCKED",
            "--cause",
            "oom",
        ],
    )
    .ok();
    assert_eq!(
        run.stdout,
        format!("blocked task manager {tm}: block, ends permanent\n")
    );

    let run = cli(&d, &["list"]).ok();
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{run:?}");
    assert!(lines[0].starts_with("KIND"), "{run:?}");
    for header in ["ID", "ACTION", "ENDS", "CAUSE"] {
        assert!(lines[0].contains(header), "{run:?}");
    }
    assert!(
        lines[1].starts_with(&format!("taskmanager  {tm}  block")),
        "{run:?}"
    );
    assert!(
        lines[1].contains("permanent") && lines[1].ends_with("oom"),
        "{run:?}"
    );
    assert!(lines[2].starts_with("node"), "{run:?}");
    assert!(
        lines[2].contains("evacuate") && lines[2].ends_with("disk"),
        "{run:?}"
    );
    assert!(
        lines[2].contains("(in 1h 59m)") || lines[2].contains("(in 2h)"),
        "{run:?}"
    );

    let all = cli(&d, &["list", "--json"]).ok().json();
    assert_eq!(ids(&all["blockedTaskManagers"]), [tm]);
    assert_eq!(ids(&all["blockedNodes"]), ["n1"]);
    assert!(all["revision"].as_u64().is_some(), "{all}");
    let nodes = cli(&d, &["--json", "list", "nodes"]).ok().json();
    assert_eq!(ids(&nodes), ["n1"]);
    assert_eq!(nodes[0]["action"], "MARK_BLOCKED_AND_EVACUATE_TASKS");
    let run = cli(&d, &["list", "taskmanagers"]).ok();
    assert_eq!(run.stdout.lines().count(), 2, "{run:?}");

    let item = cli(&d, &["get", "taskmanager", tm, "--json"]).ok().json();
    assert_eq!(item["id"], tm);
    assert_eq!(item["endTimestamp"], i64::MAX);
    let run = cli(&d, &["get", "node", "n1"]).ok();
    assert!(run.stdout.starts_with("KIND"), "{run:?}");
    assert!(
        run.stdout
            .contains("\nno task manager is registered on node n1\n"),
        "{run:?}"
    );

    let run = cli(&d, &["remove", "tm", tm]).ok();
    assert_eq!(run.stdout, format!("unblocked task manager {tm}\n"));
    assert_refused(&cli(&d, &["get", "taskmanager", tm]), &["404"]);
    assert_refused(&cli(&d, &["remove", "taskmanager", tm]), &["404"]);
    assert_eq!(
        cli(&d, &["list", "taskmanagers"]).ok().stdout,
        "no task manager is blocked\n"
    );
    assert_eq!(
        cli(&d, &["remove", "node", "n1", "--json"]).ok().stdout,
        "{}\n"
    );
    assert_eq!(cli(&d, &["list"]).ok().stdout, "nothing is blocked\n");
}

#[test]
fn refusals_exit_1_with_the_servers_messages() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);

    cli(&d, &["add", "node", "n1", "--cause", "a"]).ok();
    // The same id again without --merge: the daemon's 409 and its message.
    let run = cli(&d, &["add", "node", "n1", "--cause", "b"]);
    assert_refused(
        &run,
        &["409 Conflict", "items[0] (id \"n1\")", "already blocked"],
    );

    // With --merge: 202 and the merged item.
    let merged = cli(
        &d,
        &[
            "add", "node", "n1", "--cause", "b", "--action", "evacuate", "--merge", "--json",
        ],
    )
    .ok()
    .json();
    assert_eq!(merged[0]["cause"], "a,b");
    assert_eq!(merged[0]["action"], "MARK_BLOCKED_AND_EVACUATE_TASKS");
    let run = cli(&d, &["add", "node", "n1", "n2", "--cause", "c", "--merge"]).ok();
    assert!(run.stdout.starts_with("blocked node n2: block"), "{run:?}");
    assert!(
        run.stdout.contains("merged into existing blocks"),
        "{run:?}"
    );
    assert!(run.stdout.contains("a,b,c"), "{run:?}");

    // A timeout the daemon refuses, one that does not parse, an end in the past.
    let run = cli(
        &d,
        &["add", "node", "n3", "--cause", "x", "--timeout", "0s"],
    );
    assert_refused(
        &run,
        &["400 Bad Request", "timeout: must be a positive number"],
    );
    let run = cli(
        &d,
        &["add", "node", "n3", "--cause", "x", "--timeout", "banana"],
    );
    assert_refused(&run, &["--timeout"]);
    let run = cli(
        &d,
        &[
            "add",
            "node",
            "n3",
            "--cause",
            "x",
            "--until",
            "2001-01-01T00:00:00Z",
        ],
    );
    assert_refused(&run, &["400 Bad Request", "endTimestamp"]);

    // --until in the future becomes exactly that endTimestamp.
    let end = chrono::Utc::now() + chrono::Duration::hours(3);
    let end = chrono::DateTime::from_timestamp_millis(end.timestamp_millis()).unwrap();
    let until = end.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    cli(
        &d,
        &["add", "node", "n3", "--cause", "x", "--until", &until],
    )
    .ok();
    let item = cli(&d, &["get", "node", "n3", "--json"]).ok().json();
    assert_eq!(item["endTimestamp"], end.timestamp_millis());

    // Caught before sending: an empty id, an unknown kind; and 404s.
    assert_refused(&cli(&d, &["get", "node", ""]), &["must not be empty"]);
    assert_refused(&cli(&d, &["get", "rack", "r1"]), &["rack"]);
    assert_refused(&cli(&d, &["unregister", "nobody"]), &["404"]);
    // No arguments at all is a usage error: exit 1 too, never 2.
    assert_eq!(run_cmd(command(&d.url(""), &[])).code, 1);
    // Help is not an error.
    let help = run_cmd(command(&d.url(""), &["add", "--help"])).ok();
    assert!(help.stdout.contains("--timeout"), "{help:?}");
}

#[test]
fn register_check_unregister() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);

    let run = cli(&d, &["register", "tm-1", "--node", "n1"]).ok();
    assert_eq!(run.stdout, "registered task manager tm-1 on node n1\n");
    let run = cli(&d, &["register", "tm-1", "--node", "n1"]).ok();
    assert!(run.stdout.contains("registered before"), "{run:?}");
    let reg = cli(&d, &["register", "tm-2", "--node", "n1", "--json"])
        .ok()
        .json();
    assert_eq!(reg, serde_json::json!({"id": "tm-2", "node": "n1"}));

    assert_eq!(
        cli(&d, &["check", "tm-1"]).ok().stdout,
        "task manager tm-1 (on node n1) is not blocked\n"
    );
    cli(
        &d,
        &[
            "add", "node", "n1", "--action", "evacuate", "--cause", "disk",
        ],
    )
    .ok();
    let run = cli(&d, &["check", "tm-1"]).ok();
    assert!(
        run.stdout
            .starts_with("task manager tm-1 (on node n1) is blocked: evacuate\nKIND"),
        "{run:?}"
    );
    assert!(
        run.stdout
            .contains("\nnode  n1  evacuate  permanent  disk\n"),
        "{run:?}"
    );
    let answer = cli(&d, &["check", "--json", "taskmanager", "tm-1"])
        .ok()
        .json();
    assert_eq!(answer["blocked"], true);
    assert_eq!(answer["node"], "n1");
    assert_eq!(answer["blockedBy"][0]["kind"], "node");
    for args in [&["check", "node", "n1"][..], &["check", "--node", "n1"]] {
        let run = cli(&d, args).ok();
        assert!(
            run.stdout.starts_with("node n1 is blocked: evacuate\n"),
            "{run:?}"
        );
    }
    let run = cli(&d, &["get", "node", "n1"]).ok();
    assert!(
        run.stdout
            .contains("\ntask managers on node n1: tm-1, tm-2\n"),
        "{run:?}"
    );

    assert_eq!(
        cli(&d, &["unregister", "tm-1"]).ok().stdout,
        "unregistered task manager tm-1\n"
    );
    assert_eq!(
        cli(&d, &["check", "tm-1"]).ok().stdout,
        "task manager tm-1 (not registered on a node) is not blocked\n"
    );
    assert_refused(&cli(&d, &["unregister", "tm-1"]), &["404"]);
}

#[test]
fn unreachable_server_exits_2() {
    let server = dead_server();
    for args in [
        &["list"][..],
        &["add", "node", "n1", "--cause", "c"],
        &["watch"],
    ] {
        // The server comes from the environment this time.
        let mut cmd = Command::new(CLI);
        cmd.args(args)
            .env("BLOCKLIST_SERVER", &server)
            .env_remove("BLOCKLIST_TOKEN_FILE");
        let run = run_cmd(cmd);
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(run.stderr.contains("cannot reach the server"), "{run:?}");
        assert!(run.stderr.contains(&server), "{run:?}");
    }
}

#[test]
fn token_is_sent_as_bearer_and_never_printed() {
    // A stand-in server that records the request and refuses it, as an auth check would.
    let body = r#"{"errors":["token rejected"]}"#;
    let (server, recorder) = stand_in(vec![Answer::Reply(format!(
        "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ))]);
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret-token-xyz\n").unwrap();

    let run = run_cmd(command(
        &server,
        &["--token-file", token_file.to_str().unwrap(), "list"],
    ));
    let head = &recorder.join().unwrap()[0];
    assert!(
        head.contains("\r\nauthorization: bearer s3cret-token-xyz\r\n"),
        "{head}"
    );
    assert_refused(&run, &["401 Unauthorized: token rejected"]);
    assert!(!run.stderr.contains("s3cret"), "{run:?}");
}

#[test]
fn https_with_a_private_ca_and_a_client_certificate() {
    let ca = Ca::new("blocklist CLI test CA");
    let mut ws = Workspace::new();
    let dir = ws.tmp.path().to_owned();
    let path = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    let (cert, key) = ca.server(&["127.0.0.1"]).write(&dir, "server");
    let ca_file = path(&ca.write(&dir, "ca"));
    let (client_cert, client_key) = ca.client("detector-7.example").write(&dir, "detector");
    let tokens = dir.join("tokens");
    std::fs::write(&tokens, "subject=detector-7.example role=writer\n").unwrap();
    let d = ws.start(&[
        "--tls-cert",
        &path(&cert),
        "--tls-key",
        &path(&key),
        "--tls-client-ca",
        &ca_file,
        "--token-file",
        &path(&tokens),
    ]);
    let server = format!("https://127.0.0.1:{}", d.addr.port());

    // The system's CAs do not know the private one.
    let run = run_cmd(command(&server, &["list"]));
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("UnknownIssuer"), "{run:?}");

    run_cmd(command(&server, &["--cacert", &ca_file, "list"])).ok();
    let add = ["add", "node", "n1", "--cause", "disk"];
    let run = run_cmd(command(
        &server,
        &[&["--cacert", &ca_file][..], &add].concat(),
    ));
    assert_refused(&run, &["401"]);
    let with_certificate = [
        "--cacert",
        &ca_file,
        "--cert",
        &path(&client_cert),
        "--key",
        &path(&client_key),
    ];
    run_cmd(command(&server, &[&with_certificate[..], &add].concat())).ok();
    let run = run_cmd(command(
        &server,
        &["--cacert", &ca_file, "--json", "get", "node", "n1"],
    ))
    .ok();
    assert!(run.stdout.contains("detector-7.example"), "{run:?}");

    // --cert without --key is refused before anything is sent.
    let run = run_cmd(command(
        &server,
        &["--cacert", &ca_file, "--cert", &path(&client_cert), "list"],
    ));
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("--key"), "{run:?}");
}

/// A `blocklist watch` child whose stdout lines arrive on a channel; killed on drop.
struct Watcher {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Watcher {
    fn start(server: &str, args: &[&str]) -> Watcher {
        let mut child = command(server, args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start blocklist watch");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if tx.send(line.expect("UTF-8 line")).is_err() {
                    break;
                }
            }
        });
        Watcher { child, lines }
    }

    fn line(&self) -> String {
        self.lines
            .recv_timeout(DEADLINE)
            .expect("no watch line in time")
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn watch_prints_one_line_per_event() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    // From revision 0, so the test need not know when the watcher has connected.
    let human = Watcher::start(&d.url(""), &["watch", "--since", "0"]);
    let json = Watcher::start(&d.url(""), &["watch", "--since", "0", "--json"]);

    cli(&d, &["add", "node", "n1", "--cause", "disk"]).ok();
    cli(&d, &["register", "tm-1", "--node", "n1"]).ok();
    cli(&d, &["remove", "node", "n1"]).ok();

    assert_eq!(
        human.line(),
        "1 added node n1: block, ends permanent, cause \"disk\""
    );
    assert_eq!(human.line(), "2 registered taskmanager tm-1 on node n1");
    assert_eq!(
        human.line(),
        "3 removed node n1: block, ends permanent, cause \"disk\""
    );

    let events: Vec<Value> = (0..3)
        .map(|_| serde_json::from_str(&json.line()).expect("a JSON line"))
        .collect();
    assert_eq!(events[0]["revision"], 1);
    assert_eq!(events[0]["event"], "added");
    assert_eq!(events[0]["data"]["kind"], "node");
    assert_eq!(events[0]["data"]["id"], "n1");
    assert_eq!(events[1]["event"], "registered");
    assert_eq!(
        events[1]["data"],
        serde_json::json!({"id": "tm-1", "node": "n1"})
    );
    assert_eq!(events[2]["revision"], 3);
    assert_eq!(events[2]["event"], "removed");

    // Without --since only new events show: keep changing things until the watcher,
    // connected at some point, prints one; it must be newer than what happened before.
    let fresh = Watcher::start(&d.url(""), &["watch"]);
    let start = Instant::now();
    let first = loop {
        cli(
            &d,
            &[
                "register",
                "tm-2",
                "--node",
                &format!("n{}", start.elapsed().as_nanos()),
            ],
        )
        .ok();
        if let Ok(line) = fresh
            .lines
            .recv_timeout(std::time::Duration::from_millis(200))
        {
            break line;
        }
        assert!(start.elapsed() < DEADLINE, "the watcher printed nothing");
    };
    let revision: u64 = first.split(' ').next().unwrap().parse().unwrap();
    assert!(revision > 3, "{first}");
    assert!(first.contains("registered taskmanager tm-2"), "{first}");
}

#[test]
fn watch_refused_exits_1() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    // A revision ahead of the daemon's: 410 Gone, with the daemon's advice.
    let run = cli(&d, &["watch", "--since", "999"]);
    assert_refused(&run, &["410 Gone", "list again"]);
}

/// A TCP proxy in front of the daemon whose connections the test can cut, and which
/// records what clients send.
struct Proxy {
    addr: SocketAddr,
    open: Arc<Mutex<Vec<TcpStream>>>,
    sent: Arc<Mutex<Vec<u8>>>,
}

impl Proxy {
    fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let open = Arc::new(Mutex::new(Vec::new()));
        let sent = Arc::new(Mutex::new(Vec::new()));
        let (open2, sent2) = (open.clone(), sent.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let server = TcpStream::connect(upstream).expect("connect to the daemon");
                {
                    let mut open = open2.lock().unwrap();
                    open.push(client.try_clone().unwrap());
                    open.push(server.try_clone().unwrap());
                }
                let sent = sent2.clone();
                let (mut c_read, mut s_write) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = c_read.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        sent.lock().unwrap().extend_from_slice(&buf[..n]);
                        if s_write.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = s_write.shutdown(Shutdown::Write);
                });
                let (mut s_read, mut c_write) = (server, client);
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut s_read, &mut c_write);
                    let _ = c_write.shutdown(Shutdown::Both);
                });
            }
        });
        Proxy { addr, open, sent }
    }

    /// Closes every connection open now, as a network failure or restart would.
    fn cut(&self) {
        for stream in self.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    fn sent_text(&self) -> String {
        String::from_utf8_lossy(&self.sent.lock().unwrap()).to_ascii_lowercase()
    }
}

#[test]
fn watch_resumes_after_a_dropped_connection_without_gap_or_duplicate() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let proxy = Proxy::start(d.addr);
    let watcher = Watcher::start(
        &format!("http://{}", proxy.addr),
        &["watch", "--since", "0"],
    );

    cli(&d, &["add", "node", "a", "--cause", "x"]).ok();
    assert!(watcher.line().starts_with("1 added node a:"));
    proxy.cut();
    // Written while the watcher may be disconnected: it must still arrive, once.
    cli(&d, &["add", "node", "b", "--cause", "x"]).ok();
    assert!(watcher.line().starts_with("2 added node b:"));
    cli(&d, &["add", "node", "c", "--cause", "x"]).ok();
    assert!(watcher.line().starts_with("3 added node c:"));
    let sent = proxy.sent_text();
    assert!(sent.contains("get /blocklist/events?since=0 "), "{sent}");
    assert!(
        sent.contains("\r\nlast-event-id: 1\r\n"),
        "the reconnect resumes: {sent}"
    );
}

#[test]
fn dry_runs_say_what_would_happen_and_change_nothing() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let revision = |d: &Daemon| cli(d, &["--json", "list"]).ok().json()["revision"].clone();
    let before = revision(&d);

    let run = cli(&d, &["add", "node", "n1", "--cause", "disk", "--dry-run"]).ok();
    assert!(
        run.stdout.starts_with("would block node n1: block, ends "),
        "{run:?}"
    );
    let run = cli(&d, &["register", "tm-1", "--node", "n1", "--dry-run"]).ok();
    assert_eq!(run.stdout, "would register task manager tm-1 on node n1\n");
    // Refused as the real write would be, with the same exit code.
    let run = cli(&d, &["remove", "node", "n1", "--dry-run"]);
    assert_refused(&run, &["node \"n1\" is not blocked"]);
    let run = cli(&d, &["unregister", "tm-1", "--dry-run"]);
    assert_refused(&run, &["not registered"]);
    assert_eq!(revision(&d), before, "a dry run wrote");

    cli(&d, &["add", "node", "n1", "--cause", "disk"]).ok();
    let run = cli(&d, &["remove", "node", "n1", "--dry-run"]).ok();
    assert_eq!(run.stdout, "would unblock node n1\n");
    let run = cli(&d, &["--json", "list", "nodes"]).ok();
    assert_eq!(ids(&run.json()), ["n1"], "the dry run removed it");
}

#[test]
fn policy_shows_the_guardrails_and_where_each_kind_stands() {
    let mut ws = Workspace::new();
    let d = ws.start(&[
        "--max-blocked-nodes",
        "5",
        "--permanent-blocks",
        "forbidden",
    ]);
    cli(
        &d,
        &["add", "node", "n1", "--cause", "disk", "--timeout", "1h"],
    )
    .ok();
    let run = cli(&d, &["policy"]).ok();
    assert_eq!(
        run.stdout,
        "nodes: 1 item, cap 5 (4 more allowed); no evacuation limit\n  \
         blocked: 0 of 0 registered; cap 50%, applies from 10 registered\n  \
         evacuating: 0 of 0 registered; cap 20%, applies from 10 registered\n\
         task managers: 0 items, no cap; no evacuation limit\n  \
         blocked: 0 of 0 registered; cap 50%, applies from 10 registered\n  \
         evacuating: 0 of 0 registered; no cap\n\
         blocks: no longest; permanent blocks not allowed\n"
    );
    let json = cli(&d, &["--json", "policy"]).ok().json();
    assert_eq!(json["nodes"]["headroom"], 4);
    // A refused add exits 1 with the daemon's message.
    let run = cli(&d, &["add", "node", "n2", "--cause", "disk"]);
    assert_refused(
        &run,
        &["permanent: a permanent node block is not allowed here"],
    );
}
