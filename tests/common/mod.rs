//! Test harness: the real `blocklistd` binary on `127.0.0.1:0` with a temporary data dir,
//! spoken to over real HTTP.
#![allow(dead_code)] // each test file uses a different part of the harness

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use blocklistd::store::{Store, StoreConfig};
use reqwest::{Method, StatusCode};
use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_blocklistd");

/// How long anything in a test may take before it counts as hung.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// A running daemon. Killed (SIGKILL) on drop.
pub struct Daemon {
    child: Child,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    pub client: reqwest::Client,
}

/// A temporary directory holding a data dir and the daemons' logs.
pub struct Workspace {
    pub tmp: tempfile::TempDir,
    runs: usize,
}

impl Workspace {
    pub fn new() -> Workspace {
        Workspace {
            tmp: tempfile::tempdir().expect("temp dir"),
            runs: 0,
        }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.tmp.path().join("data")
    }

    /// Starts a daemon on this workspace's data dir.
    pub fn start(&mut self, extra: &[&str]) -> Daemon {
        self.runs += 1;
        let log = self.tmp.path().join(format!("daemon-{}.log", self.runs));
        Daemon::start(&self.data_dir(), &log, extra)
    }

    /// Opens the store offline (no daemon running) and returns what `verify` finds, and the
    /// sizes of the items and expiry trees.
    pub fn inspect(&self) -> (Vec<String>, (usize, usize)) {
        let dir = self.data_dir();
        // On a plain thread: the store's shutdown blocks, which a tokio worker may not do.
        let result = std::thread::spawn(move || {
            let store = Store::open(&StoreConfig::new(dir)).expect("open the store offline");
            let problems = store.verify().expect("verify");
            let sizes = store.tree_sizes().expect("tree sizes");
            store.shutdown().expect("shutdown");
            (problems, sizes)
        })
        .join()
        .expect("inspect thread");
        wait_until_unlocked(&self.data_dir());
        result
    }
}

/// Opens the sled database in `dir` directly, with the segment size it was created with.
pub fn open_sled(dir: impl AsRef<Path>) -> sled::Db {
    blocklistd::store::sled_config(dir.as_ref())
        .expect("a readable conf")
        .open()
        .expect("open sled")
}

/// Waits until no sled instance in this process holds the database in `dir` any more.
///
/// Dropping a `sled::Db` (or closing a `Store`) does not release the database's file lock
/// at once: sled's I/O threads finish their last writes holding it. A daemon started in
/// that window refuses the dir as in use, so a test that opened the database in-process
/// calls this before starting one.
pub fn wait_until_unlocked(dir: &Path) {
    use rustix::fs::{flock, FlockOperation};
    let Ok(file) = std::fs::File::open(dir.join("db")) else {
        return; // no database yet
    };
    let deadline = Instant::now() + DEADLINE;
    while flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
        assert!(Instant::now() < deadline, "{} stays locked", dir.display());
        std::thread::sleep(Duration::from_millis(5));
    }
    // Closing the file releases the lock we took.
}

impl Daemon {
    /// The daemon's `/metrics` text.
    pub async fn scrape(&self) -> String {
        let resp = self.client.get(self.url("/metrics")).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        resp.text().await.unwrap()
    }

    /// One sample of `/metrics` (0 when absent).
    pub async fn metric(&self, name_and_labels: &str) -> f64 {
        metric(&self.scrape().await, name_and_labels)
    }

    /// How many items the sweeper has announced expired (its lag histogram counts each one).
    pub async fn swept(&self) -> usize {
        self.metric("blocklist_sweeper_lag_seconds_count").await as usize
    }

    /// How many announced items the sweeper has deleted from storage.
    pub async fn reclaimed(&self) -> usize {
        self.metric("blocklist_reclaimed_entries_total").await as usize
    }

    pub fn start(data_dir: &Path, log: &Path, extra: &[&str]) -> Daemon {
        let mut command = Command::new(BIN);
        if !extra.contains(&"--listen") {
            command.arg("--listen").arg("127.0.0.1:0");
        }
        // Logs at info, unless the test asks for a level (RUST_LOG would override the flag).
        if extra.contains(&"--log-level") {
            command.env_remove("RUST_LOG");
        } else {
            command.env("RUST_LOG", "info");
        }
        let mut child = command
            .arg("--data-dir")
            .arg(data_dir)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).expect("log file"))
            .spawn()
            .expect("start blocklistd");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next().and_then(Result::ok);
            let _ = tx.send(first);
            for _ in lines {} // keep the pipe drained
        });
        let line = match rx.recv_timeout(DEADLINE) {
            Ok(Some(line)) => line,
            other => {
                let _ = child.kill();
                panic!(
                    "blocklistd did not report its address ({other:?}); log:\n{}",
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
        };
        let addr = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .parse()
            .expect("an address");
        Daemon {
            child,
            addr,
            data_dir: data_dir.to_owned(),
            log: log.to_owned(),
            client: reqwest::Client::builder()
                .timeout(DEADLINE)
                .build()
                .expect("client"),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Sends a request with an optional JSON body; returns status and parsed body
    /// (`Value::Null` when empty).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        read(self.send(method, path, body).await).await
    }

    /// Sends a request with an optional JSON body and returns the raw response.
    pub async fn send(&self, method: Method, path: &str, body: Option<Value>) -> reqwest::Response {
        let mut req = self.client.request(method, self.url(path));
        if let Some(body) = body {
            req = req.json(&body);
        }
        req.send().await.expect("request")
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::DELETE, path, None).await
    }

    /// Sends raw bytes with a given content type.
    pub async fn post_raw(
        &self,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> (StatusCode, Value) {
        let resp = self
            .client
            .post(self.url(path))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .expect("request");
        read(resp).await
    }

    /// The whole blocklist as `GET /blocklist` returns it.
    pub async fn listing(&self) -> Value {
        let (status, body) = self.get("/blocklist").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    /// SIGKILL, as a crash or `kill -9` would.
    pub fn kill9(mut self) {
        self.child.kill().expect("kill -9");
        self.child.wait().expect("wait");
    }

    /// SIGTERM, then waits for the exit. A graceful stop must not panic in any thread (a
    /// panic off the main thread would not change the exit status).
    pub fn terminate(mut self) -> ExitStatus {
        let pid = self.child.id().to_string();
        let status = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill -TERM");
        assert!(status.success());
        let exit = wait_exit(&mut self.child);
        let log = self.log_text();
        assert!(!log.contains("panicked"), "a thread panicked:\n{log}");
        exit
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_exit(child: &mut Child) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the daemon did not exit in time"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn read(resp: reqwest::Response) -> (StatusCode, Value) {
    let status = resp.status();
    let bytes = resp.bytes().await.expect("body");
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            panic!(
                "response is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&bytes)
            )
        })
    };
    (status, body)
}

/// Polls `check` until it returns true, panicking after [`DEADLINE`].
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs the binary (an offline subcommand) to completion and returns what it printed.
pub fn blocklistd(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("run blocklistd")
}

/// Runs the binary to completion with these arguments; returns status and stderr.
pub fn run_to_exit(args: &[&std::ffi::OsStr]) -> (ExitStatus, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start blocklistd");
    let status = wait_exit(&mut child);
    let mut stderr = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    (status, stderr)
}

/// Starts the daemon on `dir` expecting it to refuse; returns what it printed on stderr.
pub fn refused_start(dir: &Path) -> String {
    let args = [
        "--listen".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--data-dir".as_ref(),
        dir.as_os_str(),
    ];
    let (status, stderr) = run_to_exit(&args);
    assert!(!status.success(), "the daemon started on {}", dir.display());
    stderr
}

/// An add element.
pub fn item(id: &str, action: &str, cause: &str) -> Value {
    serde_json::json!({"id": id, "action": action, "cause": cause})
}

/// Ids of a listing array, in order.
pub fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .expect("an array")
        .iter()
        .map(|i| i["id"].as_str().expect("an id").to_owned())
        .collect()
}

/// Percent-encodes an id for a path segment (everything but unreserved characters).
pub fn enc(id: &str) -> String {
    const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(id, SEGMENT).to_string()
}

pub fn now_ms() -> i64 {
    blocklistd::clock::now_ms()
}

/// One Server-Sent Event of the change feed.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedEvent {
    pub id: u64,
    pub event: String,
    pub data: Value,
}

/// A watch stream on `GET /blocklist/events`, parsed as it arrives.
pub struct Watch {
    resp: reqwest::Response,
    buf: Vec<u8>,
    /// Where in `buf` to resume looking for the blank line that ends an event.
    scanned: usize,
}

impl Watch {
    /// Opens a watch; `Err` carries the status and body of a refused one.
    pub async fn open(
        d: &Daemon,
        since: Option<u64>,
        last_event_id: Option<u64>,
    ) -> Result<Watch, (StatusCode, Value)> {
        let path = match since {
            Some(since) => format!("/blocklist/events?since={since}"),
            None => "/blocklist/events".to_owned(),
        };
        // No overall timeout: a watch lives as long as the test needs it.
        let mut req = reqwest::Client::new().get(d.url(&path));
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id.to_string());
        }
        let resp = req.send().await.expect("watch request");
        if resp.status() != StatusCode::OK {
            return Err(read(resp).await);
        }
        let content_type = resp.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}"
        );
        Ok(Watch {
            resp,
            buf: Vec::new(),
            scanned: 0,
        })
    }

    /// The next event; `None` when the server ended the stream. Panics after [`DEADLINE`].
    pub async fn next(&mut self) -> Option<FeedEvent> {
        tokio::time::timeout(DEADLINE, self.next_event())
            .await
            .expect("no event in time")
    }

    async fn next_event(&mut self) -> Option<FeedEvent> {
        loop {
            while let Some(at) = self.buf[self.scanned..]
                .windows(2)
                .position(|w| w == b"\n\n")
            {
                let end = self.scanned + at + 2;
                let block: Vec<u8> = self.buf.drain(..end).collect();
                self.scanned = 0;
                if let Some(event) = parse_block(&String::from_utf8(block).expect("UTF-8 SSE")) {
                    return Some(event);
                }
            }
            self.scanned = self.buf.len().saturating_sub(1);
            match self.resp.chunk().await {
                Ok(Some(chunk)) => self.buf.extend_from_slice(&chunk),
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// Takes `n` events, panicking if the stream ends first.
    pub async fn take(&mut self, n: usize) -> Vec<FeedEvent> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let event = self
                .next()
                .await
                .unwrap_or_else(|| panic!("stream ended after {} of {n} events", out.len()));
            out.push(event);
        }
        out
    }
}

/// Parses one SSE block; comments (heartbeats) give `None`.
fn parse_block(block: &str) -> Option<FeedEvent> {
    let (mut id, mut event, mut data) = (None, None, String::new());
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("id:") {
            id = Some(v.trim().parse().expect("numeric id"));
        } else if let Some(v) = line.strip_prefix("event:") {
            event = Some(v.trim().to_owned());
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push_str(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    Some(FeedEvent {
        id: id?,
        event: event?,
        data: serde_json::from_str(&data).expect("JSON data"),
    })
}

/// The `X-Blocklist-Revision` header of a response.
pub async fn revision_of(
    d: &Daemon,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, u64) {
    let resp = d.send(method, path, body).await;
    let status = resp.status();
    let revision = resp
        .headers()
        .get("x-blocklist-revision")
        .unwrap_or_else(|| panic!("no revision header on {path} ({status})"))
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    (status, revision)
}

/// Sends one HTTP/1.1 request over a plain socket and reads the answer, even when the
/// server answers (413, say) before the body is fully sent and closes the connection — a
/// case where ordinary clients report only a broken pipe.
pub fn raw_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> (StatusCode, Value) {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(addr).expect("connect");
    conn.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !content_type.is_empty() {
        head.push_str(&format!("Content-Type: {content_type}\r\n"));
    }
    head.push_str("\r\n");
    conn.write_all(head.as_bytes()).expect("write headers");
    for chunk in body.chunks(64 * 1024) {
        if conn.write_all(chunk).is_err() {
            break; // the server answered early and closed: read what it said
        }
    }
    let mut response = Vec::new();
    let _ = conn.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response);
    let status: u16 = text
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let body = serde_json::from_str(body).unwrap_or(Value::Null);
    (StatusCode::from_u16(status).unwrap(), body)
}

/// One sample of a `/metrics` text (0 when absent).
pub fn metric(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name_and_labels) && l[name_and_labels.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Asserts that `events` carry the revisions right after `after`, in order.
pub fn assert_consecutive(events: &[FeedEvent], after: u64) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(
            e.id,
            after + 1 + i as u64,
            "revisions are consecutive: {events:?}"
        );
    }
}
