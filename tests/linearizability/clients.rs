//! The clients of the linearizability tests and what becomes of their history: random ops
//! on a few contended task-manager ids against whichever daemons the nemesis says are
//! there, each recorded with the times it was sent and answered; then each id's history
//! checked ([`crate::checker`]) and the witnesses of a violation printed.
//!
//! A request that could not connect (its daemon was already dead) did not happen and is not
//! recorded; one with no usable answer (cut, timed out, a 5xx) is recorded as cut off, and
//! the test bounds when it may have taken effect ([`End::Cut`]) once the run is over.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::checker::{self, Action, Block, Call, End, Fault, Op, Outcome};
use crate::common::{trusting_daemons, Daemon, DEADLINE};

/// How long one request may take before it counts as cut off. A live daemon answers in
/// milliseconds; this only keeps a client from waiting on one that hangs.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The distinct causes: few, so merges keep changing an item's causes and repeat them too.
const CAUSES: [&str; 3] = ["net", "disk", "oom"];

/// A number from the environment, or `default`.
pub fn setting(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?}: not a number")),
        Err(_) => default,
    }
}

/// The seed of a run: `BLOCKLISTD_LIN_SEED`, or the clock's.
pub fn seed() -> u64 {
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    setting("BLOCKLISTD_LIN_SEED", clock)
}

/// splitmix64: enough randomness for op choices, without a dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn in_range(&mut self, range: std::ops::Range<u64>) -> u64 {
        range.start + self.below(range.end - range.start)
    }
}

/// A daemon the clients may talk to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// Which daemon (0 = the first started); a restarted one is a new daemon.
    pub incarnation: usize,
    pub addr: SocketAddr,
    /// Whether it serves https.
    pub https: bool,
}

impl Target {
    /// Daemon `daemon`, the `incarnation`th started.
    pub fn of(incarnation: usize, daemon: &Daemon) -> Target {
        Target {
            incarnation,
            addr: daemon.addr,
            https: daemon.url("").starts_with("https:"),
        }
    }

    /// Its URL for `path`.
    pub fn url(&self, path: &str) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}{path}", self.addr)
    }
}

/// What the nemesis tells the clients.
#[derive(Clone, Default)]
pub struct Signal {
    /// The daemons up now (none while the only one is down or not ready yet); each op goes
    /// to one of them at random.
    pub targets: Vec<Target>,
    pub stopping: bool,
}

/// The clients' side of a run: spawned at once, each sending ops until the nemesis says
/// stop.
pub struct Clients {
    ids: Arc<Vec<String>>,
    /// The run's clock: every recorded time is since this instant.
    pub base: Instant,
    signal: watch::Sender<Signal>,
    tasks: Vec<tokio::task::JoinHandle<Finished>>,
}

/// What a client did: its ops, how many requests found no daemon, and the calls it gave up
/// on after retrying them for as long as it was allowed (`retry_for` of [`Clients::spawn`]).
type Finished = (Vec<Recorded>, usize, Vec<String>);

/// A client's op, with the index of its id.
pub type Recorded = (usize, Op);

/// How a request went, before it is recorded.
pub enum Sent {
    Answered(Outcome),
    Cut(String),
    /// No connection: the daemon was not there.
    Refused,
}

/// A run's record once the clients stopped.
pub struct History {
    pub ops: Vec<Recorded>,
    /// Requests that found no daemon (not recorded).
    pub refused: usize,
    /// Calls still without an answer when their retries ran out, each with its last error
    /// (`retry_for` of [`Clients::spawn`]; none otherwise).
    pub failed: Vec<String>,
}

impl Clients {
    /// `writers` clients that write and read and `readers` that only read and check, on
    /// `ids` task-manager ids, their choices from `seed`, talking to `targets`. With
    /// `retry_for`, each client sends a call that got no usable answer (cut off, a 5xx)
    /// again, to any daemon up, until it is answered or `retry_for` has passed since it was
    /// first sent, as a caller with bounded retries does: every attempt is an op of the
    /// history, and a call that ran out of retries is one of its `failed`.
    pub fn spawn(
        writers: usize,
        readers: usize,
        ids: usize,
        seed: u64,
        targets: Vec<Target>,
        retry_for: Option<Duration>,
    ) -> Clients {
        let ids = Arc::new((0..ids).map(|i| format!("tm-{i}")).collect::<Vec<_>>());
        let base = Instant::now();
        let (signal, watch) = watch::channel(Signal {
            targets,
            stopping: false,
        });
        let tasks = (0..writers + readers)
            .map(|n| {
                let seed = seed ^ (n as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d);
                let reader = n >= writers;
                let ids = ids.clone();
                tokio::spawn(client(n, reader, seed, ids, base, watch.clone(), retry_for))
            })
            .collect();
        Clients {
            ids,
            base,
            signal,
            tasks,
        }
    }

    pub fn ids(&self) -> &[String] {
        &self.ids
    }

    /// The time since the run began.
    pub fn now(&self) -> Duration {
        self.base.elapsed()
    }

    /// Changes the daemons the clients talk to.
    pub fn targets(&self, change: impl FnOnce(&mut Vec<Target>)) {
        self.signal.send_modify(|s| change(&mut s.targets));
    }

    /// Stops the clients and takes their ops; then a last read of each id, alone, through
    /// `last`, once the load has stopped (the answer every earlier write must explain).
    pub async fn stop(self, last: Target) -> History {
        self.signal.send_modify(|s| s.stopping = true);
        // The final reads count as one more client's.
        let last_client = self.tasks.len();
        let mut history = History {
            ops: Vec::new(),
            refused: 0,
            failed: Vec::new(),
        };
        for task in self.tasks {
            let (ops, refused, failed) = tokio::time::timeout(DEADLINE, task)
                .await
                .expect("a client did not stop")
                .expect("client");
            history.ops.extend(ops);
            history.refused += refused;
            history.failed.extend(failed);
        }
        let http = http_client();
        for (i, id) in self.ids.iter().enumerate() {
            // Until answered: a replica may answer 503 until it is current after the last
            // fault (a cut-off read changes nothing, and is not recorded).
            let started = Instant::now();
            let (invoke, end) = loop {
                let invoke = self.base.elapsed();
                match send(&http, last, id, &Call::Get).await {
                    Sent::Answered(outcome) => {
                        let at = self.base.elapsed();
                        break (invoke, End::Answered { at, outcome });
                    }
                    Sent::Cut(_) if started.elapsed() < DEADLINE => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Sent::Cut(why) => panic!("the final read of {id} got no answer: {why}"),
                    Sent::Refused => panic!("the final read of {id} could not connect"),
                }
            };
            let op = Op {
                client: last_client,
                incarnation: last.incarnation,
                call: Call::Get,
                invoke,
                end,
            };
            history.ops.push((i, op));
        }
        history
    }
}

impl History {
    /// Sets when each cut-off op took effect by, if at all.
    pub fn bound_cut_ops(&mut self, by: impl Fn(&Op) -> Duration) {
        for (_, op) in &mut self.ops {
            let bound = by(op);
            if let End::Cut { by, .. } = &mut op.end {
                *by = bound;
            }
        }
    }

    /// Prints what the run did, so a passing run shows how much it tried.
    pub fn summarize(&self, faults: usize, wall: Duration) {
        let count = |f: &dyn Fn(&Op) -> bool| self.ops.iter().filter(|(_, op)| f(op)).count();
        let answered = |f: &dyn Fn(&Outcome) -> bool| {
            count(&|op| matches!(&op.end, End::Answered { outcome, .. } if f(outcome)))
        };
        println!(
            "{} ops in {:.1} s over {faults} faults: {} cut off, {} refused (not recorded); \
             201 {}, 202 {}, 409 {}, delete 200 {}, 404 {}, reads blocked {}, not blocked {}, \
             unexpected {}",
            self.ops.len(),
            wall.as_secs_f64(),
            count(&|op| matches!(op.end, End::Cut { .. })),
            self.refused,
            answered(&|o| *o == Outcome::Created),
            answered(&|o| matches!(o, Outcome::Merged(_))),
            answered(&|o| *o == Outcome::Conflict),
            answered(&|o| *o == Outcome::Removed),
            answered(&|o| *o == Outcome::NotFound),
            answered(&|o| matches!(o, Outcome::Read(Some(_)))),
            answered(&|o| *o == Outcome::Read(None)),
            answered(&|o| matches!(o, Outcome::Unexpected(_))),
        );
    }

    /// Checks each id's history ([`judge`]), then fails the test if any is not
    /// linearizable or could not be decided in time.
    pub fn assert_linearizable(&self, ids: &[String], faults: &[Fault], max: usize) {
        let checked = Instant::now();
        let mut failed = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            let ops: Vec<Op> = self
                .ops
                .iter()
                .filter(|(at, _)| *at == i)
                .map(|(_, op)| op.clone())
                .collect();
            if let Err(failure) = judge(id, &ops, faults, max, DEADLINE / ids.len() as u32) {
                failed.push(failure);
            }
        }
        println!("checked in {:.1} s", checked.elapsed().as_secs_f64());
        assert!(
            failed.is_empty(),
            "{} of {} ids failed ({} faults; witnesses above):\n{}",
            failed.len(),
            ids.len(),
            faults.len(),
            failed.join("\n"),
        );
    }
}

/// An id's history as a failing run saves it, to be checked again without the daemons.
#[derive(Serialize, Deserialize)]
pub struct Saved {
    pub id: String,
    pub ops: Vec<Op>,
    pub faults: Vec<Fault>,
}

impl Saved {
    /// The history named by `BLOCKLISTD_LIN_REPLAY` (a `.json` file a failing or undecided
    /// run wrote), if set: a test checks it instead of running the daemons.
    pub fn from_env() -> Option<Saved> {
        let path = PathBuf::from(std::env::var_os("BLOCKLISTD_LIN_REPLAY")?);
        let failed = |e: &dyn std::fmt::Display| -> ! {
            panic!("BLOCKLISTD_LIN_REPLAY={}: {e}", path.display())
        };
        let text = std::fs::read(&path).unwrap_or_else(|e| failed(&e));
        Some(serde_json::from_slice(&text).unwrap_or_else(|e| failed(&e)))
    }

    /// Checks it as the run that saved it did.
    pub fn assert_linearizable(&self, max: usize) {
        let checked = Instant::now();
        let judged = judge(&self.id, &self.ops, &self.faults, max, DEADLINE);
        println!("checked in {:.1} s", checked.elapsed().as_secs_f64());
        if let Err(failure) = judged {
            panic!("{failure}");
        }
    }
}

/// Checks one id's history, within [`check_time`]. When it is not linearizable, prints a
/// witness of each kind (across a fault, and without one) among up to `max` violations of
/// each searched for (for up to `witness_time`); in both failures, saves the history and
/// returns what went wrong.
fn judge(
    id: &str,
    ops: &[Op],
    faults: &[Fault],
    max: usize,
    witness_time: Duration,
) -> Result<(), String> {
    let limit = check_time();
    let failure = match checker::check(ops, Instant::now() + limit) {
        Ok(true) => return Ok(()),
        Ok(false) => {
            // A violation found costs searches of the history up to it, and a daemon that
            // breaks the guarantee gives many: the search for witnesses stops in time.
            let violations =
                checker::violations(id, ops, faults, max, Instant::now() + witness_time);
            for across in [true, false] {
                if let Some(v) = violations.iter().find(|v| v.across_fault == across) {
                    println!("{}", v.report);
                }
            }
            let first = |across: bool| {
                violations
                    .iter()
                    .filter(|v| !across || v.across_fault)
                    .map(|v| v.faults_before.to_string())
                    .next()
                    .unwrap_or_else(|| "-".to_owned())
            };
            format!(
                "{id}: not linearizable: {} violations found ({} across a fault; the search \
                 stops at {max} of each kind or after {witness_time:?}), the first after {} \
                 faults, the first across a fault after {} faults",
                violations.len(),
                violations.iter().filter(|v| v.across_fault).count(),
                first(false),
                first(true),
            )
        }
        Err(checker::OutOfTime) => format!(
            "{id}: undecided: the checker searched {} ops for {limit:?} (more: \
             BLOCKLISTD_LIN_CHECK_SECS)",
            ops.len()
        ),
    };
    let (text, json) = save_history(id, ops, faults);
    println!(
        "{failure}\n{id}: its whole history: {}; to check it again: BLOCKLISTD_LIN_REPLAY={}\n",
        text.display(),
        json.display()
    );
    Err(failure)
}

/// How long the checker may search one id's history: `BLOCKLISTD_LIN_CHECK_SECS`, or a
/// minute (the CI runs' ids check in well under a second).
fn check_time() -> Duration {
    Duration::from_secs(setting("BLOCKLISTD_LIN_CHECK_SECS", 60))
}

/// A client of the daemons, over http or https.
pub fn http_client() -> reqwest::Client {
    trusting_daemons()
        .no_proxy()
        .timeout(REQUEST_TIMEOUT)
        .connect_timeout(REQUEST_TIMEOUT)
        .build()
        .expect("client")
}

/// One client: random ops on random ids, one at a time, each to a random daemon of those
/// up, until told to stop; with `retry_for`, a call without a usable answer is sent again
/// until answered or out of time (`retry_for` of [`Clients::spawn`]).
async fn client(
    n: usize,
    reader: bool,
    seed: u64,
    ids: Arc<Vec<String>>,
    base: Instant,
    mut watch: watch::Receiver<Signal>,
    retry_for: Option<Duration>,
) -> Finished {
    let http = http_client();
    let mut rng = Rng(seed);
    let (mut ops, mut refused, mut failed) = (Vec::new(), 0, Vec::new());
    // The call being retried: its id, the call, and when it was first sent.
    let mut retrying: Option<(usize, Call, Instant)> = None;
    // The daemons that refused a connection: wait for others.
    let mut gone = Vec::new();
    loop {
        let signal = tokio::time::timeout(
            DEADLINE,
            watch.wait_for(|s| {
                s.stopping || s.targets.iter().any(|t| !gone.contains(&t.incarnation))
            }),
        )
        .await
        .expect("no daemon to talk to")
        .expect("the nemesis is gone")
        .clone();
        if signal.stopping {
            return (ops, refused, failed);
        }
        let up: Vec<Target> = signal
            .targets
            .into_iter()
            .filter(|t| !gone.contains(&t.incarnation))
            .collect();
        let target = up[rng.below(up.len() as u64) as usize];
        let (id, call, first_sent) = match retrying.take() {
            Some(again) => again,
            None => {
                let id = rng.below(ids.len() as u64) as usize;
                (id, random_call(&mut rng, reader), Instant::now())
            }
        };
        let invoke = base.elapsed();
        let sent = send(&http, target, &ids[id], &call).await;
        let at = base.elapsed();
        let end = match sent {
            Sent::Answered(outcome) => End::Answered { at, outcome },
            // Bounded once the run is over ([`History::bound_cut_ops`]).
            Sent::Cut(why) => {
                match retry_for {
                    Some(limit) if first_sent.elapsed() < limit => {
                        retrying = Some((id, call.clone(), first_sent));
                    }
                    Some(limit) => failed.push(format!(
                        "client {n}: {call:?} on {} unanswered after {limit:?}: {why}",
                        ids[id]
                    )),
                    None => {}
                }
                End::Cut {
                    why,
                    by: Duration::MAX,
                }
            }
            Sent::Refused => {
                refused += 1;
                gone.push(target.incarnation);
                if retry_for.is_some() {
                    retrying = Some((id, call, first_sent));
                }
                continue;
            }
        };
        ops.push((
            id,
            Op {
                client: n,
                incarnation: target.incarnation,
                call,
                invoke,
                end,
            },
        ));
        if retrying.is_some() {
            // As a caller backs off before it tries again (`Retry-After` is a second; the
            // daemons' elections take less).
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A random op; only reads for a reader.
pub fn random_call(rng: &mut Rng, reader: bool) -> Call {
    if reader {
        return if rng.below(2) == 0 {
            Call::Get
        } else {
            Call::Check
        };
    }
    let action = if rng.below(2) == 0 {
        Action::MarkBlocked
    } else {
        Action::Evacuate
    };
    let cause = CAUSES[rng.below(CAUSES.len() as u64) as usize].to_owned();
    match rng.below(100) {
        0..15 => Call::Add {
            action,
            cause,
            merge: false,
        },
        15..35 => Call::Add {
            action,
            cause,
            merge: true,
        },
        35..50 => Call::Delete,
        50..75 => Call::Get,
        _ => Call::Check,
    }
}

/// Sends one op and reduces the answer to what the model predicts.
pub async fn send(http: &reqwest::Client, target: Target, id: &str, call: &Call) -> Sent {
    let item_url = target.url(&format!("/blocklist/taskmanagers/{id}"));
    let request = match call {
        Call::Add {
            action,
            cause,
            merge,
        } => http.post(target.url("/blocklist/taskmanagers")).json(
            &json!([{"id": id, "action": action.wire(), "cause": cause, "allowMerge": merge}]),
        ),
        Call::Delete => http.delete(item_url),
        Call::Get => http.get(item_url),
        Call::Check => http.get(target.url(&format!("/blocklist/check/taskmanagers/{id}"))),
    };
    let resp = match request.send().await {
        Ok(resp) => resp,
        Err(e) if e.is_connect() => return Sent::Refused,
        Err(e) => return Sent::Cut(describe(&e)),
    };
    let status = resp.status();
    let body = match resp.bytes().await {
        Ok(body) => body,
        Err(e) => return Sent::Cut(format!("{status}, then {}", describe(&e))),
    };
    if status.is_server_error() {
        return Sent::Cut(status.to_string());
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let unexpected = || Outcome::Unexpected(format!("{status} {body}"));
    let outcome = match (call, status) {
        (Call::Add { .. }, StatusCode::CREATED) => Outcome::Created,
        (Call::Add { .. }, StatusCode::ACCEPTED) => match body.as_array().map(Vec::as_slice) {
            Some([merged]) => block(merged, id).map_or_else(unexpected, Outcome::Merged),
            _ => unexpected(),
        },
        (Call::Add { .. }, StatusCode::CONFLICT) => Outcome::Conflict,
        (Call::Delete, StatusCode::OK) => Outcome::Removed,
        (Call::Delete, StatusCode::NOT_FOUND) => Outcome::NotFound,
        (Call::Get, StatusCode::OK) => {
            block(&body, id).map_or_else(unexpected, |b| Outcome::Read(Some(b)))
        }
        (Call::Get, StatusCode::NOT_FOUND) => Outcome::Read(None),
        (Call::Check, StatusCode::OK) => verdict(&body, id).map_or_else(unexpected, Outcome::Read),
        _ => unexpected(),
    };
    Sent::Answered(outcome)
}

fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timed out".to_owned()
    } else {
        "connection cut".to_owned()
    }
}

/// The block of a permanent item of `id`, as GET and 202 bodies give it.
fn block(item: &Value, id: &str) -> Option<Block> {
    (item["id"] == id && item["endTimestamp"].as_i64() == Some(i64::MAX)).then_some(())?;
    Some(Block::new(
        Action::parse(item["action"].as_str()?)?,
        item["cause"].as_str()?,
    ))
}

/// The task manager's own item in a check verdict: it is never registered on a node, so
/// that item is all that can block it.
#[expect(
    clippy::option_option,
    reason = "not a verdict on this id, or a verdict: blocked by an item or not blocked"
)]
fn verdict(body: &Value, id: &str) -> Option<Option<Block>> {
    if body["id"] != id || body.get("node").is_some() {
        return None;
    }
    match (&body["blocked"], body["blockedBy"].as_array()?.as_slice()) {
        (Value::Bool(false), []) if body["action"].is_null() => Some(None),
        (Value::Bool(true), [own])
            if own["kind"] == "taskmanager" && own["action"] == body["action"] =>
        {
            block(own, id).map(Some)
        }
        _ => None,
    }
}

/// Writes an id's whole history where it outlives the test's temp dir, rendered and as
/// [`Saved`] JSON; returns their paths.
fn save_history(id: &str, ops: &[Op], faults: &[Fault]) -> (PathBuf, PathBuf) {
    let path = |ext: &str| {
        Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("{}-{id}.{ext}", env!("CARGO_CRATE_NAME")))
    };
    let mut sorted: Vec<&Op> = ops.iter().collect();
    sorted.sort_by_key(|op| op.invoke);
    let text = checker::render(&sorted, faults, Duration::ZERO, Duration::MAX);
    std::fs::write(path("txt"), text).expect("write the history");
    let saved = Saved {
        id: id.to_owned(),
        ops: ops.to_vec(),
        faults: faults.to_vec(),
    };
    let json = serde_json::to_vec(&saved).expect("a history serializes");
    std::fs::write(path("json"), json).expect("write the history");
    (path("txt"), path("json"))
}
