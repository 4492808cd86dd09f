//! `blocklist-bench`: the load generator for blocklistd.
//!
//! Starts a fresh `blocklistd` (the binary next to this one) on a temp dir per scenario,
//! drives it over plain HTTP (or HTTPS, `--tls`) like any client, and measures in the same run, with the same
//! client and concurrency, what it is compared with: the HTTP ceiling (an empty axum
//! server), the store ceiling (sled straight, no HTTP) and the peers (Redis with fsync
//! always; etcd, with the `etcd` feature).
//! Prints one table and optionally writes it as JSON. See docs/benchmarks.md.
//!
//! Layout:
//! - `scenarios`: the named scenarios and the ceiling/peer measurements they use;
//! - `load`: the closed-loop driver (bounded in time and count) and its histograms;
//! - `client`: the HTTP/1.1 client, one kept-alive hyper connection per worker;
//! - `dataset`: request bodies, bulk loading, task manager registration;
//! - `delivery`: the change feed's delivery latency (ack times, subscribers' histograms);
//! - `ceiling`: the HTTP ceiling server (a hidden subcommand of this binary) and the store
//!   ceiling;
//! - `redis_peer`: the Redis peer;
//! - `etcd_peer`: the etcd peer (with the `etcd` feature);
//! - `server`: child processes (daemon, ceiling server) that announce their address;
//! - `procstat`: CPU, RSS and disk use from /proc and the file system;
//! - `report`: rows, the table and the JSON;
//! - `ab`: two daemon builds measured alternately in one run, with medians and ratios;
//! - `tls`: the certificate of daemons started with TLS, and which addresses speak it.

mod ab;
mod ceiling;
mod client;
mod dataset;
mod delivery;
#[cfg(feature = "etcd")]
mod etcd_peer;
mod load;
mod procstat;
mod redis_peer;
mod report;
mod scenarios;
mod server;
mod settings;
mod tls;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use report::{Machine, Report, Row};
use scenarios::{Bench, RUN_ORDER, SCENARIOS};
use server::DaemonSpec;
use settings::Settings;

/// Benchmarks blocklistd against an HTTP ceiling, a store ceiling, Redis and etcd, in one run.
#[derive(Debug, Parser)]
#[command(about, long_about = None)]
// Each bool is an on/off command-line flag.
#[allow(clippy::struct_excessive_bools)]
struct Args {
    /// The scenario to run, or `all`; or `ab` followed by the scenarios to compare two
    /// daemons on (`--daemon OLD --daemon NEW`).
    #[arg(value_parser = clap::builder::PossibleValuesParser::new(
        ["all", "ab", "add", "add-keyed", "add-batch", "merge-hot", "feed", "check", "check-under-storm", "list", "list-pages", "expire", "idle", "restart", "footprint", "failover", "kube", "kube-evacuation", "alerts", "flink", "yarn"]
    ))]
    scenario: String,

    /// With `ab`: the scenarios to compare (`all` for every one).
    #[arg(value_parser = clap::builder::PossibleValuesParser::new(
        ["all", "add", "add-keyed", "add-batch", "merge-hot", "feed", "check", "check-under-storm", "list", "list-pages", "expire", "idle", "restart", "footprint"]
    ))]
    ab_scenarios: Vec<String>,

    /// With `ab`: how many rounds (each runs the scenarios once against each daemon).
    #[arg(long, default_value_t = 3)]
    rounds: usize,

    /// With `ab`: the names of the two daemons in the output (default: A and B).
    #[arg(long, value_delimiter = ',')]
    labels: Vec<String>,

    /// Seconds of each measured phase (after a warm-up of a fifth of it, at most 1 s).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,

    /// Connections of the single-request scenarios (`add`, `add-keyed`, `merge-hot`, `check`) and their
    /// ceilings and peer; `add-batch` uses an eighth of it.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,

    /// The "1M" of the scenarios (`check`, `expire`, `idle`, `restart`,
    /// `footprint`); `list` uses a tenth of it.
    #[arg(long, default_value_t = 1_000_000)]
    items: usize,

    /// Seconds over which the `expire` scenario's items come due.
    #[arg(long, default_value_t = 60.0)]
    expire_window: f64,

    /// How many SIGKILL-and-start rounds `restart` times.
    #[arg(long, default_value_t = 3)]
    restarts: usize,

    /// Write the results as JSON to this file.
    #[arg(long)]
    json_out: Option<PathBuf>,

    /// The blocklistd binary (default: `blocklistd` next to this binary); with `ab`, given
    /// twice: the first (A, the baseline) and the second (B).
    #[arg(long)]
    daemon: Vec<PathBuf>,

    /// Extra flag for every daemon started (repeatable), e.g. `--daemon-arg=--fsync=false`.
    #[arg(long, allow_hyphen_values = true)]
    daemon_arg: Vec<String>,

    /// The subscriber counts `feed` measures, one after the other.
    #[arg(long, value_delimiter = ',', default_values_t = [1u16, 100, 1000],
          value_parser = clap::value_parser!(u16).range(1..=10_000))]
    subscribers: Vec<u16>,

    /// Skip the peers (Redis, etcd) even when they are installed.
    #[arg(long)]
    no_peer: bool,

    /// `feed`: pace our adds at this many a second instead of half the capacity measured
    /// first (two runs compared at the same add rate: a writer and a replica, say).
    #[arg(long)]
    feed_rate: Option<f64>,

    /// The etcd binary of the etcd peer: a name on PATH or a path (e.g.
    /// target/servers/etcd-3.6/etcd, which `tests/servers/build etcd-3.6` builds), so the
    /// peer runs the release the daemons are measured on.
    #[arg(long, default_value = "etcd")]
    etcd_bin: PathBuf,

    /// The etcd peer on this running cluster (comma-separated client URLs) instead of a
    /// member of its own: the same etcd the daemons run on, for figures compared on it.
    #[arg(long, value_delimiter = ',')]
    etcd_peer_endpoints: Option<Vec<String>>,

    /// On etcd (`--daemon-arg=--store=etcd`): start each daemon with a second one on the
    /// same prefix, a replica, and send the scenario's requests to the replica (reads
    /// served there, writes sent on to the first daemon, the writer).
    #[arg(long)]
    via_replica: bool,

    /// Where the temp dirs (data dirs, logs) go (default: the system temp dir).
    #[arg(long)]
    work_dir: Option<PathBuf>,

    /// Before each measured phase, wait up to this many seconds for the other processes on
    /// the machine (builds...) to use under 10% of a core. 0: do not wait.
    #[arg(long, default_value_t = 0.0)]
    wait_quiet: f64,

    /// Keep the temp dirs (daemon logs, data) after the run, for inspection.
    #[arg(long)]
    keep: bool,

    /// Every daemon started serves TLS (a certificate made for the run), and every request
    /// to it goes over TLS on the same kept-alive connections.
    #[arg(long)]
    tls: bool,

    /// With `ab`: the daemons of the arm with this label serve TLS (e.g. `--daemon D
    /// --daemon D --labels plain,tls --tls-for tls`: one build, over plain HTTP and TLS).
    #[arg(long)]
    tls_for: Option<String>,
}

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some(ceiling::SERVE_SUBCOMMAND) {
        return ceiling::serve_http();
    }
    let args = Args::parse();
    let seconds = |s: f64, what: &str| {
        if s.is_finite() && s > 0.0 && s <= 3600.0 {
            Ok(Duration::from_secs_f64(s))
        } else {
            Err(format!(
                "--{what} must be between 0 and 3600 seconds, got {s}"
            ))
        }
    };
    let settings = match (
        seconds(args.duration, "duration"),
        seconds(args.expire_window, "expire-window"),
    ) {
        (Ok(duration), Ok(expire_window)) => Settings {
            duration,
            concurrency: args.concurrency.clamp(1, 4096),
            items: args.items.max(2),
            expire_window,
            restarts: args.restarts.clamp(1, 100),
            peer: !args.no_peer,
            via_replica: args.via_replica,
            etcd_bin: args.etcd_bin.clone(),
            feed_rate: args.feed_rate.filter(|r| r.is_finite() && *r > 0.0),
            etcd_peer_endpoints: args.etcd_peer_endpoints.clone(),
            subscribers: args.subscribers.iter().map(|&w| usize::from(w)).collect(),
            work_dir: args.work_dir.clone(),
            keep: args.keep,
            wait_quiet: Duration::from_secs_f64(if args.wait_quiet.is_finite() {
                args.wait_quiet.clamp(0.0, 3600.0)
            } else {
                0.0
            }),
        },
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("blocklist-bench: {e}");
            return ExitCode::from(2);
        }
    };
    if args.scenario == "ab" {
        return ab_main(&args, settings);
    }
    if args.daemon.len() > 1 || !args.ab_scenarios.is_empty() {
        eprintln!(
            "blocklist-bench: one scenario and one --daemon, except with `ab` \
             (blocklist-bench ab --daemon OLD --daemon NEW SCENARIO...)"
        );
        return ExitCode::from(2);
    }
    let Some(daemon) = daemon_spec(&args, args.daemon.first().cloned(), args.tls) else {
        return ExitCode::FAILURE;
    };
    let Some((rows, failed)) = run_interruptible(run(&args, settings.clone(), daemon)) else {
        return ExitCode::from(130);
    };
    let machine = print_machine(&args, &settings);
    print!("{}", report::table(&rows));
    if let Some(path) = &args.json_out {
        let report = Report {
            machine: &machine,
            settings: settings_map(&args, &settings),
            rows: &rows,
        };
        if let Err(e) = report::write_json(path, &report) {
            eprintln!("blocklist-bench: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The daemon to run: `bin`, or the one next to this binary; `None` (said why) if there is
/// none.
fn daemon_spec(args: &Args, bin: Option<PathBuf>, tls: bool) -> Option<DaemonSpec> {
    let (bin, warning) = match server::find_daemon(bin) {
        Ok(found) => found,
        Err(e) => {
            eprintln!("blocklist-bench: {e}");
            return None;
        }
    };
    if let Some(warning) = &warning {
        eprintln!("blocklist-bench: warning: {warning}");
    }
    let tls = if tls {
        match tls::BenchTls::new() {
            Ok(tls) => Some(std::sync::Arc::new(tls)),
            Err(e) => {
                eprintln!("blocklist-bench: {e}");
                return None;
            }
        }
    } else {
        None
    };
    Some(DaemonSpec {
        bin,
        extra: args.daemon_arg.clone(),
        tls,
    })
}

/// Runs `work` to its end, or until SIGINT/SIGTERM: then the run is dropped, and with it
/// every child process (daemons, the ceiling server, redis-server), so nothing outlives an
/// interrupted bench; `None` (said so) then.
fn run_interruptible<F: std::future::Future>(work: F) -> Option<F::Output> {
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let done = runtime.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            result = work => Some(result),
            _ = tokio::signal::ctrl_c() => None,
            _ = term.recv() => None,
        }
    });
    if done.is_none() {
        eprintln!("blocklist-bench: interrupted");
    }
    done
}

/// Prints the machine and the settings above the results, and returns the machine.
fn print_machine(args: &Args, settings: &Settings) -> Machine {
    let machine = Machine::probe();
    println!(
        "\nblocklist-bench: {} cores ({}), kernel {}, {} MiB RAM; duration {} s, concurrency {}, items {}\n",
        machine.nproc,
        machine.cpu_model,
        machine.kernel,
        machine.mem_total_kb / 1024,
        args.duration,
        settings.concurrency,
        settings.items
    );
    machine
}

fn settings_map(args: &Args, settings: &Settings) -> BTreeMap<&'static str, String> {
    let mut map = BTreeMap::new();
    map.insert("scenario", args.scenario.clone());
    map.insert("duration_s", args.duration.to_string());
    map.insert("concurrency", settings.concurrency.to_string());
    map.insert("items", settings.items.to_string());
    map.insert("expire_window_s", args.expire_window.to_string());
    map.insert("daemon_args", args.daemon_arg.join(" "));
    map.insert("via_replica", args.via_replica.to_string());
    map.insert("etcd_bin", args.etcd_bin.display().to_string());
    map.insert("tls", args.tls.to_string());
    if let Some(label) = &args.tls_for {
        map.insert("tls_for", label.clone());
    }
    map
}

/// `ab`: the chosen scenarios against two daemons, alternately, `--rounds` times; prints
/// each figure's medians and their ratio (module `ab`).
fn ab_main(args: &Args, mut settings: Settings) -> ExitCode {
    if args.daemon.len() != 2
        || args.ab_scenarios.is_empty()
        || ![0, 2].contains(&args.labels.len())
    {
        eprintln!(
            "blocklist-bench: usage: blocklist-bench ab --daemon OLD --daemon NEW \
             [--labels OLD,NEW] SCENARIO..."
        );
        return ExitCode::from(2);
    }
    // The daemons' own rows only: a ceiling or a peer is the same program for both.
    settings.peer = false;
    let labels: Vec<String> = if args.labels.is_empty() {
        vec!["A".into(), "B".into()]
    } else {
        args.labels.clone()
    };
    let scenarios: Vec<String> = if args.ab_scenarios.iter().any(|s| s == "all") {
        RUN_ORDER.iter().map(|s| (*s).to_owned()).collect()
    } else {
        args.ab_scenarios.clone()
    };
    let mut arms = Vec::new();
    if let Some(label) = args.tls_for.as_ref().filter(|l| !labels.contains(l)) {
        eprintln!("blocklist-bench: --tls-for {label}: no arm has that label ({labels:?})");
        return ExitCode::from(2);
    }
    for (label, bin) in labels.iter().zip(&args.daemon) {
        let tls = args.tls || args.tls_for.as_ref() == Some(label);
        let Some(daemon) = daemon_spec(args, Some(bin.clone()), tls) else {
            return ExitCode::FAILURE;
        };
        let over = if tls { " over TLS" } else { "" };
        eprintln!("blocklist-bench ab: {label} = {}{over}", bin.display());
        match Bench::new(settings.clone(), daemon) {
            Ok(bench) => arms.push(ab::Arm {
                label: label.clone(),
                bench,
            }),
            Err(e) => {
                eprintln!("blocklist-bench: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let rounds = args.rounds.clamp(1, 100);
    let Some((results, failed)) = run_interruptible(ab::run(&mut arms, &scenarios, rounds)) else {
        return ExitCode::from(130);
    };
    let compared = ab::compare(&labels, &results);
    let machine = print_machine(args, &settings);
    for (label, bin) in labels.iter().zip(&args.daemon) {
        println!("{label}: {}", bin.display());
    }
    println!("{rounds} rounds, the order of the daemons alternating\n");
    print!("{}", ab::table(&labels, &compared));
    if let Some(path) = &args.json_out {
        #[derive(serde::Serialize)]
        struct AbReport<'a> {
            machine: &'a Machine,
            settings: BTreeMap<&'static str, String>,
            daemons: Vec<(String, String)>,
            rounds: &'a [ab::RoundRows],
            compared: &'a [ab::Compared],
        }
        let daemons = labels
            .iter()
            .zip(&args.daemon)
            .map(|(l, b)| (l.clone(), b.display().to_string()))
            .collect();
        let report = AbReport {
            machine: &machine,
            settings: settings_map(args, &settings),
            daemons,
            rounds: &results,
            compared: &compared,
        };
        if let Err(e) = report::write_json(path, &report) {
            eprintln!("blocklist-bench: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    if args.keep {
        for arm in &mut arms {
            eprintln!(
                "blocklist-bench: kept {}",
                arm.bench.keep_work_dir().display()
            );
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Runs the chosen scenarios; a failed scenario becomes a row saying so, and the run goes on.
async fn run(args: &Args, settings: Settings, daemon: DaemonSpec) -> (Vec<Row>, bool) {
    let keep = settings.keep;
    let mut bench = match Bench::new(settings, daemon) {
        Ok(bench) => bench,
        Err(e) => {
            eprintln!("blocklist-bench: {e}");
            return (Vec::new(), true);
        }
    };
    let chosen: Vec<&str> = if args.scenario == "all" {
        RUN_ORDER.to_vec()
    } else {
        vec![args.scenario.as_str()]
    };
    let mut rows = Vec::new();
    let mut failed = false;
    for scenario in chosen {
        eprintln!("blocklist-bench: running {scenario}");
        let (mut r, scenario_failed) = bench.run_or_row(scenario).await;
        rows.append(&mut r);
        failed |= scenario_failed;
    }
    if keep {
        eprintln!("blocklist-bench: kept {}", bench.keep_work_dir().display());
    }
    // The order of docs/benchmarks.md, each scenario's own row before its ceiling and peer.
    rows.sort_by_key(|r| {
        let scenario = SCENARIOS
            .iter()
            .position(|s| *s == r.scenario)
            .unwrap_or(SCENARIOS.len());
        (scenario, r.role as u8)
    });
    (rows, failed)
}
