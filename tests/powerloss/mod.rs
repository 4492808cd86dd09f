//! Shared by `tests/fsync_audit.rs` and `tests/power_cut.rs`: the daemon as a process these
//! tests control themselves (optionally under strace, killed by pid), the workloads that
//! reach sled's blob files through the API, and a ledger of what the daemon acknowledged.
//!
//! Why a launcher of our own next to `common::Daemon`: these tests must run the binary
//! under strace, and must learn the exit status of a daemon that dies while starting (a
//! panicking recovery exits 101), which `Daemon::start` turns into a bare panic.
#![allow(dead_code)] // each test file uses a different part

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{BIN, DEADLINE};

/// Ids of the long-causes workload per call: more than the 16 entries a sled leaf holds
/// before it splits, so a leaf of them (and of their events) outgrows a quarter segment.
pub const LONG_IDS: usize = 20;

/// Merges per id: 16 causes of [`LONG_CAUSE_BYTES`] plus separators is 16,015 bytes, just
/// under the 16 KiB cap on merged causes (`MAX_MERGED_CAUSE_BYTES`); a 17th would be dropped.
pub const LONG_ROUNDS: usize = 16;

/// Each cause is at the 1 KiB limit (`MAX_CAUSE_BYTES`) minus a little.
pub const LONG_CAUSE_BYTES: usize = 1000;

/// A daemon that did not come up: how it ended and what it logged.
#[derive(Debug)]
pub struct StartFailure {
    /// `None`: still running but silent past the deadline (then killed).
    pub status: Option<ExitStatus>,
    pub log: String,
}

impl std::fmt::Display for StartFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.status {
            Some(status) => write!(f, "the daemon exited ({status}) before listening")?,
            None => write!(f, "the daemon printed no address within {DEADLINE:?}")?,
        }
        write!(f, "; its log:\n{}", tail(&self.log, 40))
    }
}

/// The last `n` lines of a text.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A running `blocklistd`, perhaps under strace. Killed (SIGKILL) on drop.
pub struct Running {
    /// The daemon, or the strace that runs it.
    child: Child,
    /// The daemon's own pid (under strace, the child of `child`).
    pub pid: i32,
    pub addr: SocketAddr,
    pub log: PathBuf,
    pub client: reqwest::Client,
    exited: bool,
}

impl Running {
    /// Starts the binary on `data_dir` (`--listen 127.0.0.1:0`, logs at info into `log`),
    /// under `strace … -o trace` when `trace` is given, with the strace arguments of
    /// [`STRACE_ARGS`].
    pub fn start(
        data_dir: &Path,
        log: &Path,
        extra: &[&str],
        trace: Option<&Path>,
    ) -> Result<Running, StartFailure> {
        let mut command = match trace {
            Some(trace) => {
                let mut c = Command::new("strace");
                c.args(STRACE_ARGS)
                    .arg("-o")
                    .arg(trace)
                    .arg("--")
                    .arg(&*BIN);
                c
            }
            None => Command::new(&*BIN),
        };
        if let Some(parent) = data_dir.parent() {
            command.current_dir(parent);
        }
        let mut child = command
            .env("RUST_LOG", "info")
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
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
            let _ = tx.send(lines.next().and_then(Result::ok));
            for _ in lines {} // keep the pipe drained
        });
        let failed = |child: &mut Child| {
            let status = if let Ok(Some(status)) = child.try_wait() {
                Some(status)
            } else {
                // Silent or just closing its stdout: give it a moment to exit by itself.
                let start = Instant::now();
                loop {
                    if let Ok(Some(status)) = child.try_wait() {
                        break Some(status);
                    }
                    if start.elapsed() > Duration::from_secs(2) {
                        let _ = child.kill();
                        let _ = child.wait();
                        break None;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            };
            StartFailure {
                status,
                log: std::fs::read_to_string(log).unwrap_or_default(),
            }
        };
        let Ok(Some(line)) = rx.recv_timeout(DEADLINE) else {
            return Err(failed(&mut child));
        };
        let addr = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .parse()
            .expect("an address");
        let pid = match trace {
            Some(_) => traced_child(child.id()),
            None => child.id() as i32,
        };
        Ok(Running {
            child,
            pid,
            addr,
            log: log.to_owned(),
            client: reqwest::Client::builder()
                .timeout(DEADLINE)
                .build()
                .expect("client"),
            exited: false,
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.pid).expect("a pid");
        rustix::process::kill_process(pid, signal).expect("signal the daemon");
    }

    /// SIGKILL, as a power cut would stop it; returns once it is gone (and, under strace,
    /// once strace has written the end of the trace).
    pub fn kill9(mut self) {
        self.signal(rustix::process::Signal::KILL);
        self.child.wait().expect("wait");
        self.exited = true;
    }

    /// SIGTERM, then waits for the exit (SIGKILL after [`DEADLINE`]).
    pub fn terminate(mut self) -> ExitStatus {
        self.signal(rustix::process::Signal::TERM);
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                self.exited = true;
                return status;
            }
            assert!(
                start.elapsed() <= DEADLINE,
                "the daemon did not exit within {DEADLINE:?} of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Thread id → thread name, read from /proc while the daemon runs.
    pub fn thread_names(&self) -> BTreeMap<u32, String> {
        let mut names = BTreeMap::new();
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.pid)) else {
            return names;
        };
        for task in tasks.flatten() {
            let Ok(tid) = task.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if let Ok(comm) = std::fs::read_to_string(task.path().join("comm")) {
                names.insert(tid, comm.trim().to_owned());
            }
        }
        names
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.exited {
            if let Some(pid) = rustix::process::Pid::from_raw(self.pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// How the audit runs strace: follow threads, absolute timestamps and durations (`-T`:
/// the end of an fsync is its start plus its duration), file descriptors decoded to paths
/// and socket addresses (`-yy`), and only the calls that create, write or sync files and
/// sockets.
pub const STRACE_ARGS: &[&str] = &["-f", "-ttt", "-T", "-yy", "-e", "trace=file,desc,network"];

/// The pid strace started (its only child).
fn traced_child(strace: u32) -> i32 {
    let path = format!("/proc/{strace}/task/{strace}/children");
    let children = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    children
        .split_whitespace()
        .next()
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("strace ({strace}) has no child"))
}

/// Per task manager id, every cause the daemon acknowledged as stored (201: the causes
/// sent; 202: the stored state it answered for each merged item, which leaves out a cause
/// dropped at the 16 KiB cap).
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    pub causes: BTreeMap<String, BTreeSet<String>>,
    /// Acknowledged add requests.
    pub acks: usize,
    /// Requests answered with something else than 201/202 (503 while failing, say).
    pub refused: usize,
}

pub type SharedLedger = Arc<Mutex<Ledger>>;

impl Ledger {
    fn record(&mut self, id: &str, cause: &str) {
        let parts = cause
            .split(',')
            .filter(|p| !p.is_empty())
            .map(str::to_owned);
        self.causes.entry(id.to_owned()).or_default().extend(parts);
    }

    /// Takes note of an answer to an add of `sent` (id, cause); `false` for a refusal.
    pub fn answer(&mut self, sent: &[(String, String)], status: StatusCode, body: &Value) -> bool {
        match status {
            StatusCode::CREATED => {
                for (id, cause) in sent {
                    self.record(id, cause);
                }
            }
            StatusCode::ACCEPTED => {
                let merged = body.as_array().expect("a 202 carries the merged items");
                let mut answered = BTreeSet::new();
                for it in merged {
                    let id = it["id"].as_str().expect("an id");
                    self.record(id, it["cause"].as_str().expect("a cause"));
                    answered.insert(id.to_owned());
                }
                // The elements that were new are stored as sent.
                for (id, cause) in sent.iter().filter(|(id, _)| !answered.contains(id)) {
                    self.record(id, cause);
                }
            }
            _ => {
                self.refused += 1;
                return false;
            }
        }
        self.acks += 1;
        true
    }
}

/// How a cause appears in a report: its tag, without the padding.
pub fn short(cause: &str) -> &str {
    cause.split(':').next().unwrap_or(cause)
}

/// One add of `sent` with `allowMerge: true`, recorded in the ledger. `Err` when the
/// daemon is gone (connection refused or reset, no answer).
pub async fn add(
    client: &reqwest::Client,
    base: &str,
    sent: &[(String, String)],
    ledger: &SharedLedger,
) -> Result<StatusCode, reqwest::Error> {
    let body: Vec<Value> = sent
        .iter()
        .map(|(id, cause)| {
            json!({"id": id, "action": "MARK_BLOCKED", "cause": cause, "allowMerge": true})
        })
        .collect();
    let resp = client
        .post(format!("{base}/blocklist/taskmanagers"))
        .json(&body)
        .send()
        .await?;
    let status = resp.status();
    let bytes = resp.bytes().await?;
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    ledger.lock().unwrap().answer(sent, status, &body);
    Ok(status)
}

/// The long-causes workload: [`LONG_IDS`] adjacent ids `{prefix}-00`…, each merged
/// [`LONG_ROUNDS`] times with a distinct ~1 KiB cause until it holds ~16 KiB, one id per
/// request, from four concurrent clients. Values that size on adjacent keys make sled
/// write whole leaves (of `items`, and of `events`, whose entries carry the item) as blob
/// files at the default 512 KiB segments. Returns early, without error, when the daemon
/// goes away.
pub async fn long_causes(base: String, prefix: String, ledger: SharedLedger) {
    let client = reqwest::Client::builder()
        .timeout(DEADLINE)
        .build()
        .unwrap();
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let (base, prefix, ledger, client) =
                (base.clone(), prefix.clone(), ledger.clone(), client.clone());
            tokio::spawn(async move {
                for round in 0..LONG_ROUNDS {
                    for n in (c..LONG_IDS).step_by(4) {
                        let id = format!("{prefix}-{n:02}");
                        let sent = [(id.clone(), long_cause(&id, round))];
                        if add(&client, &base, &sent, &ledger).await.is_err() {
                            return;
                        }
                    }
                }
            })
        })
        .collect();
    for c in clients {
        c.await.expect("long-causes client");
    }
}

/// A cause of [`LONG_CAUSE_BYTES`]: a readable tag, then padding.
pub fn long_cause(id: &str, round: usize) -> String {
    let mut cause = format!("{id}/r{round:02}:");
    let pad = LONG_CAUSE_BYTES - cause.len();
    cause.extend(std::iter::repeat_n('x', pad));
    cause
}

/// `writers` concurrent clients adding small batches of new ids (`{prefix}-w{w}-n{n}-{i}`)
/// and merging small causes into a few hot ids, until `stop` is set or the daemon is gone.
pub async fn small_writers(
    base: String,
    prefix: String,
    writers: usize,
    ledger: SharedLedger,
    stop: Arc<AtomicBool>,
) {
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let (base, prefix, ledger, stop) =
                (base.clone(), prefix.clone(), ledger.clone(), stop.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::builder()
                    .timeout(DEADLINE)
                    .build()
                    .unwrap();
                for n in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let sent: Vec<(String, String)> = if n % 4 == 3 {
                        vec![(format!("{prefix}-hot-{}", w % 4), format!("w{w}n{n}"))]
                    } else {
                        (0..3)
                            .map(|i| (format!("{prefix}-w{w}-n{n}-{i}"), format!("c{w}.{n}")))
                            .collect()
                    };
                    if add(&client, &base, &sent, &ledger).await.is_err() {
                        return;
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("small writer");
    }
}

/// What of the ledger the daemon no longer has, per id: a missing id or missing causes.
/// Reads the per-kind listing, and each id holding a long cause by a point read as well.
pub async fn lost(d: &Running, ledger: &Ledger) -> BTreeMap<String, Vec<String>> {
    let mut problems: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let resp = d
        .client
        .get(d.url("/blocklist/taskmanagers"))
        .send()
        .await
        .expect("list");
    assert_eq!(resp.status(), StatusCode::OK, "the listing answered");
    let list: Value = resp.json().await.expect("a JSON listing");
    let present: BTreeMap<&str, &str> = list
        .as_array()
        .expect("an array")
        .iter()
        .map(|it| (it["id"].as_str().unwrap(), it["cause"].as_str().unwrap()))
        .collect();
    for (id, causes) in &ledger.causes {
        let mut seen = vec![(
            "listing",
            present
                .get(id.as_str())
                .map(std::string::ToString::to_string),
        )];
        // The long-causes ids also by a point read (a different path through the store).
        if causes.iter().any(|c| c.len() >= LONG_CAUSE_BYTES) {
            let resp = d
                .client
                .get(d.url(&format!("/blocklist/taskmanagers/{id}")))
                .send()
                .await
                .expect("point read");
            let cause = match resp.status() {
                StatusCode::OK => {
                    let it: Value = resp.json().await.expect("an item");
                    Some(it["cause"].as_str().unwrap_or_default().to_owned())
                }
                _ => None,
            };
            seen.push(("point read", cause));
        }
        for (how, cause) in seen {
            let Some(cause) = cause else {
                problems.entry(id.clone()).or_default().push(format!(
                    "acknowledged id {id} is missing ({how}; it had {} acknowledged causes)",
                    causes.len()
                ));
                continue;
            };
            let stored: BTreeSet<&str> = cause.split(',').collect();
            let missing: Vec<&str> = causes
                .iter()
                .filter(|c| !stored.contains(c.as_str()))
                .map(|c| short(c))
                .collect();
            if !missing.is_empty() {
                problems.entry(id.clone()).or_default().push(format!(
                    "{id} lost {} of {} acknowledged causes ({how}): {missing:?}",
                    missing.len(),
                    causes.len()
                ));
            }
        }
    }
    problems
}

/// `blocklistd --data-dir <dir> check`: exit status and everything it printed.
pub fn offline_check(dir: &Path) -> (ExitStatus, String) {
    let out = Command::new(&*BIN)
        .arg("--data-dir")
        .arg(dir)
        .arg("check")
        .output()
        .expect("run blocklistd check");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status, text)
}

/// Files under `dir` (recursively), relative, with their sizes; for failure reports.
pub fn listing(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap_or(&path).to_owned();
                out.push((rel, meta.len()));
            }
        }
    }
    out.sort();
    out
}
