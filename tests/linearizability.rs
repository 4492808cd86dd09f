//! Point reads and checks are linearizable with respect to writes, across kill -9: a read
//! never shows a write that a crash then takes back, nor misses one that was acknowledged.
//!
//! Concurrent clients add (with and without merge), delete, read and check a few contended
//! task-manager ids on the real daemon, and as many readers only read and check them (a
//! read shows a write it should not only in the moment between the write's transaction
//! and its flush, so the more reads, the more often one lands there). Meanwhile a nemesis
//! kills the daemon (SIGKILL) after a random 20–150 ms of load and restarts it on the same
//! data dir. Every op is recorded with the times it was sent and answered; the checker
//! ([`checker`]) then searches each id's history for an order of its ops that respects
//! real time and a sequential model of one item. The items are permanent, so time does not
//! enter the model.
//!
//! Crash semantics: an op with no usable answer (its connection was cut, it timed out, or
//! it got a 5xx) may have taken effect or not, but not after its daemon died; one that
//! could not connect (the daemon was already dead) did not happen and is not recorded.
//! Clients learn each new daemon's address (it binds port 0) once it is ready.
//!
//! The defaults fit a plain `cargo test` on a small machine. For a longer campaign, set:
//!
//! - `BLOCKLISTD_LIN_KILLS`: how many kills (default 100; 30 on etcd, where each restart waits
//!   out the killed writer's lease),
//! - `BLOCKLISTD_LIN_CLIENTS`: clients that write and read (default 8),
//! - `BLOCKLISTD_LIN_READERS`: clients that only read and check (default 8),
//! - `BLOCKLISTD_LIN_IDS`: task-manager ids they share (default 4),
//! - `BLOCKLISTD_LIN_VIOLATIONS`: how many violations of each kind (across a kill, and
//!   without one) to look for per id (default 5; each costs searches of the history up to
//!   it, and the search stops after 20 s in all),
//! - `BLOCKLISTD_LIN_SEED`: the seed of the clients' choices and the kill delays (a run is
//!   not replayable, its timing is the machine's; the seed is printed),
//!
//! for example `BLOCKLISTD_LIN_KILLS=1000 cargo test --test linearizability -- --nocapture`.
//! A violation prints witnesses: a few of the offending id's ops, from a moment no op was
//! open, that no order explains, with the kills between them; the id's whole history goes
//! to a file under the target's tmp dir.

#[path = "linearizability/checker.rs"]
mod checker;
mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use checker::{Action, Block, Call, End, Op, Outcome};
use common::{on_etcd, Daemon, Workspace, DEADLINE};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::sync::watch;

/// How long one request may take before it counts as cut off. A live daemon answers in
/// milliseconds; this only keeps a client from waiting on one that hangs.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the clients run against each daemon before it is killed.
const LOAD: std::ops::Range<u64> = 20..150;

/// The distinct causes: few, so merges keep changing an item's causes and repeat them too.
const CAUSES: [&str; 3] = ["net", "disk", "oom"];

struct Settings {
    kills: usize,
    clients: usize,
    readers: usize,
    ids: usize,
    violations: usize,
    seed: u64,
}

impl Settings {
    fn from_env() -> Settings {
        let var = |name: &str, default: u64| -> u64 {
            match std::env::var(name) {
                Ok(v) => v
                    .parse()
                    .unwrap_or_else(|_| panic!("{name}={v:?}: not a number")),
                Err(_) => default,
            }
        };
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        Settings {
            // On etcd each restart waits out the killed writer's lease (2 s).
            kills: var("BLOCKLISTD_LIN_KILLS", if on_etcd() { 30 } else { 100 }) as usize,
            clients: var("BLOCKLISTD_LIN_CLIENTS", 8) as usize,
            readers: var("BLOCKLISTD_LIN_READERS", 8) as usize,
            ids: var("BLOCKLISTD_LIN_IDS", 4) as usize,
            violations: var("BLOCKLISTD_LIN_VIOLATIONS", 5) as usize,
            seed: var("BLOCKLISTD_LIN_SEED", clock),
        }
    }
}

/// splitmix64: enough randomness for op choices, without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn in_range(&mut self, range: std::ops::Range<u64>) -> u64 {
        range.start + self.below(range.end - range.start)
    }
}

/// Which daemon the clients should talk to.
#[derive(Clone, Copy)]
struct Target {
    incarnation: usize,
    addr: SocketAddr,
}

/// What the nemesis tells the clients.
#[derive(Clone, Copy)]
struct Signal {
    /// `None` while the daemon is down or not ready yet.
    target: Option<Target>,
    stopping: bool,
}

/// What every client reads.
struct Shared {
    ids: Vec<String>,
    /// The run's clock: every recorded time is since this instant.
    base: Instant,
}

/// A client's op, with the index of its id.
type Recorded = (usize, Op);

/// How a request went, before it is recorded.
enum Sent {
    Answered(Outcome),
    Cut(String),
    /// No connection: the daemon was not there.
    Refused,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn point_reads_and_checks_are_linearizable_across_kill_9() {
    let settings = Settings::from_env();
    println!(
        "BLOCKLISTD_LIN_SEED={} kills={} clients={} readers={} ids={}",
        settings.seed, settings.kills, settings.clients, settings.readers, settings.ids
    );
    let shared = Arc::new(Shared {
        ids: (0..settings.ids).map(|i| format!("tm-{i}")).collect(),
        base: Instant::now(),
    });
    let (ids, base) = (&shared.ids, shared.base);
    let mut ws = Workspace::new();
    let mut daemon = start(&mut ws).await;
    let (signal, watch) = watch::channel(Signal {
        target: Some(Target {
            incarnation: 0,
            addr: daemon.addr,
        }),
        stopping: false,
    });
    let clients: Vec<_> = (0..settings.clients + settings.readers)
        .map(|n| {
            let seed = settings.seed ^ (n as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d);
            let reader = n >= settings.clients;
            tokio::spawn(client(n, reader, seed, shared.clone(), watch.clone()))
        })
        .collect();

    // The nemesis: load, kill -9, restart on the same data dir, again and again.
    let mut rng = Rng(settings.seed);
    let mut ends = Vec::new();
    for incarnation in 1..=settings.kills {
        tokio::time::sleep(Duration::from_millis(rng.in_range(LOAD))).await;
        tokio::task::block_in_place(|| daemon.kill9());
        ends.push(base.elapsed());
        signal.send_modify(|s| s.target = None);
        daemon = start(&mut ws).await;
        let addr = daemon.addr;
        signal.send_modify(|s| s.target = Some(Target { incarnation, addr }));
    }
    tokio::time::sleep(Duration::from_millis(rng.in_range(LOAD))).await;
    signal.send_modify(|s| s.stopping = true);
    let mut history: Vec<Recorded> = Vec::new();
    let mut refused = 0;
    for c in clients {
        let (ops, n) = tokio::time::timeout(DEADLINE, c)
            .await
            .expect("a client did not stop")
            .expect("client");
        history.extend(ops);
        refused += n;
    }
    // A last read of each id, alone, once the load has stopped.
    let http = http_client();
    for (i, id) in ids.iter().enumerate() {
        let invoke = base.elapsed();
        let end = match send(&http, daemon.addr, id, &Call::Get).await {
            Sent::Answered(outcome) => End::Answered {
                at: base.elapsed(),
                outcome,
            },
            Sent::Cut(why) => panic!("the final read of {id} got no answer: {why}"),
            Sent::Refused => panic!("the final read of {id} could not connect"),
        };
        let op = Op {
            client: settings.clients + settings.readers,
            incarnation: settings.kills,
            call: Call::Get,
            invoke,
            end,
        };
        history.push((i, op));
    }
    let wall = base.elapsed();
    let exit = tokio::task::block_in_place(|| daemon.terminate());
    ends.push(base.elapsed());
    assert!(exit.success(), "the last daemon stopped with {exit}");
    summarize(&history, refused, settings.kills, wall);
    let (problems, _) = tokio::task::block_in_place(|| ws.inspect());
    if !problems.is_empty() {
        println!("verify found: {problems:?}");
    }

    let checked = Instant::now();
    let mut found = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let ops: Vec<Op> = history
            .iter()
            .filter(|(at, _)| *at == i)
            .map(|(_, op)| op.clone())
            .collect();
        if checker::check(&ops, &ends) {
            continue;
        }
        // A share of the time for each id: a violation found costs searches of the history
        // up to it, and a daemon that breaks the guarantee gives many.
        let deadline = Instant::now() + DEADLINE / ids.len() as u32;
        let violations = checker::violations(id, &ops, &ends, settings.violations, deadline);
        // One witness of each kind: across a kill, and without one.
        for across in [true, false] {
            if let Some(v) = violations.iter().find(|v| v.across_kill == across) {
                println!("{}", v.report);
            }
        }
        println!(
            "{id}: {} violations found ({} across a kill; the search stops at {} of each kind or \
             after its share of time); its whole history: {}\n",
            violations.len(),
            violations.iter().filter(|v| v.across_kill).count(),
            settings.violations,
            write_history(id, &ops, &ends).display()
        );
        found.extend(violations);
    }
    println!("checked in {:.1} s", checked.elapsed().as_secs_f64());
    let first = |across: Option<bool>| {
        found
            .iter()
            .filter(|v| across.is_none_or(|a| v.across_kill == a))
            .map(|v| v.kills_before)
            .min()
            .map_or("-".to_owned(), |k| k.to_string())
    };
    assert!(
        found.is_empty(),
        "not linearizable: {} violations found ({} across a kill) in {} kills; the first after \
         {} kills, the first across a kill after {} kills; witnesses above",
        found.len(),
        found.iter().filter(|v| v.across_kill).count(),
        settings.kills,
        first(None),
        first(Some(true)),
    );
    assert!(problems.is_empty(), "verify found: {problems:?}");
}

/// Starts a daemon on the workspace's data dir and waits until it is ready.
async fn start(ws: &mut Workspace) -> Daemon {
    let daemon = tokio::task::block_in_place(|| ws.start(&[]));
    let http = http_client();
    let url = daemon.url("/readyz");
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Ok(resp) = http.get(&url).send().await {
            if resp.status() == StatusCode::OK {
                return daemon;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the daemon was not ready in time; log:\n{}",
            daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(REQUEST_TIMEOUT)
        .connect_timeout(REQUEST_TIMEOUT)
        .build()
        .expect("client")
}

/// One client: random ops on random ids, one at a time, until told to stop. Returns its
/// ops and how many requests found no daemon.
async fn client(
    n: usize,
    reader: bool,
    seed: u64,
    shared: Arc<Shared>,
    mut watch: watch::Receiver<Signal>,
) -> (Vec<Recorded>, usize) {
    let (ids, base) = (&shared.ids, shared.base);
    let http = http_client();
    let mut rng = Rng(seed);
    let (mut ops, mut refused) = (Vec::new(), 0);
    // The daemon that refused the last connection: wait for another one.
    let mut gone = None;
    loop {
        let signal = *tokio::time::timeout(
            DEADLINE,
            watch.wait_for(|s| s.stopping || s.target.is_some_and(|t| Some(t.incarnation) != gone)),
        )
        .await
        .expect("no daemon to talk to")
        .expect("the nemesis is gone");
        let (false, Some(target)) = (signal.stopping, signal.target) else {
            return (ops, refused);
        };
        let id = rng.below(ids.len() as u64) as usize;
        let call = random_call(&mut rng, reader);
        let invoke = base.elapsed();
        let sent = send(&http, target.addr, &ids[id], &call).await;
        let at = base.elapsed();
        let end = match sent {
            Sent::Answered(outcome) => End::Answered { at, outcome },
            Sent::Cut(why) => End::Cut(why),
            Sent::Refused => {
                refused += 1;
                gone = Some(target.incarnation);
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
    }
}

/// A random op; only reads for a reader.
fn random_call(rng: &mut Rng, reader: bool) -> Call {
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
async fn send(http: &reqwest::Client, addr: SocketAddr, id: &str, call: &Call) -> Sent {
    let item_url = format!("http://{addr}/blocklist/taskmanagers/{id}");
    let request = match call {
        Call::Add {
            action,
            cause,
            merge,
        } => http
            .post(format!("http://{addr}/blocklist/taskmanagers"))
            .json(
                &json!([{"id": id, "action": action.wire(), "cause": cause, "allowMerge": merge}]),
            ),
        Call::Delete => http.delete(item_url),
        Call::Get => http.get(item_url),
        Call::Check => http.get(format!("http://{addr}/blocklist/check/taskmanagers/{id}")),
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

/// Prints what the run did, so a passing run shows how much it tried.
fn summarize(history: &[Recorded], refused: usize, kills: usize, wall: Duration) {
    let count = |f: &dyn Fn(&Op) -> bool| history.iter().filter(|(_, op)| f(op)).count();
    let answered = |f: &dyn Fn(&Outcome) -> bool| {
        count(&|op| matches!(&op.end, End::Answered { outcome, .. } if f(outcome)))
    };
    println!(
        "{} ops in {:.1} s over {kills} kills: {} cut off, {refused} refused (not recorded); \
         201 {}, 202 {}, 409 {}, delete 200 {}, 404 {}, reads blocked {}, not blocked {}, \
         unexpected {}",
        history.len(),
        wall.as_secs_f64(),
        count(&|op| matches!(op.end, End::Cut(_))),
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

/// Writes an id's whole history where it outlives the test's temp dir; returns the path.
fn write_history(id: &str, ops: &[Op], ends: &[Duration]) -> std::path::PathBuf {
    let path =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("linearizability-{id}.txt"));
    let mut sorted: Vec<&Op> = ops.iter().collect();
    sorted.sort_by_key(|op| op.invoke);
    let text = checker::render(&sorted, ends, Duration::ZERO, Duration::MAX);
    std::fs::write(&path, text).expect("write the history");
    path
}
