//! `blocklist-flink`: the Flink watcher of blocklistd (the library, `blocklist_flink`, holds
//! what it does; this is its command line).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use blocklist::sidecar::{self, Command, DaemonArgs, LogFormat};
use blocklist_flink::filter::{self, Filter, Label, Pattern};
use blocklist_flink::flink::{Auth, Flink};
use blocklist_flink::judge::Rules;
use blocklist_flink::metrics::Metrics;
use blocklist_flink::report::Daemon;
use blocklist_flink::serve;
use blocklist_flink::watch::{Settings, Watcher};
use clap::{CommandFactory, Parser, ValueEnum};

/// The Flink watcher of blocklistd: task managers whose tasks keep failing, more than the
/// others running the same job, are blocked in the daemon, and the nodes under enough of
/// them; each report under the source <name>/<cluster>, with the job and the failures'
/// times as its evidence.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None, subcommand_negates_reqs = true)]
#[expect(
    clippy::doc_markdown,
    reason = "the text of --help, where backticks would show"
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,

    /// The Flink clusters to follow: NAME=URL of a JobManager's REST API, or a URL (named
    /// by its host and port). Repeatable, or comma-separated.
    #[arg(
        long = "flink",
        env = "BLOCKLIST_FLINK_CLUSTERS",
        value_delimiter = ',',
        required = true,
        value_name = "[NAME=]URL"
    )]
    flink: Vec<String>,

    /// How the daemons are reached.
    #[command(flatten)]
    connection: DaemonArgs,

    /// The watcher's name: its reports' source is NAME/<cluster>.
    #[arg(long, env = "BLOCKLIST_FLINK_NAME", default_value = "flink")]
    name: String,

    /// A file holding a bearer token for Flink's REST API (behind a proxy that asks).
    #[arg(long, env = "BLOCKLIST_FLINK_TOKEN_FILE", value_name = "PATH")]
    flink_token_file: Option<PathBuf>,

    /// A user for basic authentication to Flink's REST API; its password in
    /// --flink-password-file.
    #[arg(
        long,
        env = "BLOCKLIST_FLINK_USER",
        conflicts_with = "flink_token_file"
    )]
    flink_user: Option<String>,

    /// A file holding --flink-user's password (its first line).
    #[arg(
        long,
        env = "BLOCKLIST_FLINK_PASSWORD_FILE",
        value_name = "PATH",
        requires = "flink_user"
    )]
    flink_password_file: Option<PathBuf>,

    /// A CA certificate (PEM) to trust for an https:// Flink, besides the system's.
    #[arg(long, env = "BLOCKLIST_FLINK_CACERT", value_name = "PATH")]
    flink_cacert: Option<PathBuf>,

    /// How many entries Flink keeps of a job's exception history (its
    /// `web.exception-history-size`): a full one whose entries are all new may have lost
    /// some, which is logged and counted.
    #[arg(long, env = "BLOCKLIST_FLINK_HISTORY_SIZE", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    flink_history_size: u32,

    /// How often each cluster's exception histories are read.
    #[arg(long, env = "BLOCKLIST_FLINK_POLL", default_value = "1s", value_parser = humantime::parse_duration)]
    poll: Duration,

    /// The sliding window failures are counted in.
    #[arg(long, env = "BLOCKLIST_FLINK_WINDOW", default_value = "10m", value_parser = humantime::parse_duration)]
    window: Duration,

    /// A task manager is blocked after this many counted failures of one job within the
    /// window (when they stand out from the job's other task managers).
    #[arg(long, env = "BLOCKLIST_FLINK_TASK_MANAGER_FAILURES", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    task_manager_failures: u32,

    /// A task manager stands out when its failures exceed the median of the job's other
    /// task managers by more than this.
    #[arg(long, env = "BLOCKLIST_FLINK_MARGIN", default_value_t = 1)]
    margin: u32,

    /// When more than this share of a job's task managers failed within the window, the
    /// failure is the job's own: nobody is blocked.
    #[arg(long, env = "BLOCKLIST_FLINK_SPREAD_PERCENT", default_value_t = 50, value_parser = clap::value_parser!(u8).range(1..=100))]
    spread_percent: u8,

    /// A node is blocked when this many distinct task managers on it are (their nodes are
    /// the daemon's membership).
    #[arg(long, env = "BLOCKLIST_FLINK_NODE_TASK_MANAGERS", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    node_task_managers: u32,

    /// Exception classes whose failures may count (a class, or a prefix ending in `*`);
    /// the platform's by default: java.*, javax.*, jdk.*, sun.*, org.apache.flink.*,
    /// org.apache.hadoop.*, org.apache.pekko.*, io.netty.*, org.rocksdb.*.
    #[arg(long, env = "BLOCKLIST_FLINK_COUNT_EXCEPTIONS", value_delimiter = ',', value_parser = Pattern::parse, default_values = filter::DEFAULT_COUNT, hide_default_value = true)]
    count_exceptions: Vec<Pattern>,

    /// Exception classes whose failures never count: what is certainly the job's fault
    /// or certainly not the machine's (see the documentation for the default list).
    #[arg(long, env = "BLOCKLIST_FLINK_IGNORE_EXCEPTIONS", value_delimiter = ',', value_parser = Pattern::parse, default_values = filter::DEFAULT_IGNORE, hide_default_value = true)]
    ignore_exceptions: Vec<Pattern>,

    /// Only failures carrying one of these failure labels (KEY=VALUE, from a Flink
    /// FailureEnricher) count.
    #[arg(long, env = "BLOCKLIST_FLINK_REQUIRE_LABELS", value_delimiter = ',', value_parser = Label::parse)]
    require_label: Vec<Label>,

    /// Failures carrying one of these failure labels never count.
    #[arg(long, env = "BLOCKLIST_FLINK_IGNORE_LABELS", value_delimiter = ',', value_parser = Label::parse, default_values = filter::DEFAULT_IGNORE_LABELS)]
    ignore_label: Vec<Label>,

    /// The blocks' action.
    #[arg(long, env = "BLOCKLIST_FLINK_ACTION", value_enum, default_value_t = Action::MarkBlocked)]
    action: Action,

    /// How long a block lasts after the newest failure behind it.
    #[arg(long, env = "BLOCKLIST_FLINK_DURATION", default_value = "1h", value_parser = humantime::parse_duration)]
    duration: Duration,

    /// Block nothing: log what would be blocked.
    #[arg(long, env = "BLOCKLIST_FLINK_DRY_RUN")]
    dry_run: bool,

    /// Register Flink's task managers in the daemon's membership on the hosts Flink
    /// reports (for clusters where no other registrar runs: never beside blocklist-kube).
    #[arg(long, env = "BLOCKLIST_FLINK_REGISTER_TASK_MANAGERS")]
    register_task_managers: bool,

    /// Where `/healthz`, `/readyz` and `/metrics` are served; port 0 picks a free one (the
    /// bound address is printed on stdout).
    #[arg(long, env = "BLOCKLIST_FLINK_LISTEN", default_value = "0.0.0.0:7226")]
    listen: SocketAddr,

    /// Log level (or a `RUST_LOG` filter, which wins when set).
    #[arg(long, env = "BLOCKLIST_FLINK_LOG_LEVEL", default_value = "info")]
    log_level: String,

    /// Log format: `json` for a log collector, one object per line.
    #[arg(long, env = "BLOCKLIST_FLINK_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Action {
    #[value(name = "MARK_BLOCKED")]
    MarkBlocked,
    #[value(name = "MARK_BLOCKED_AND_EVACUATE_TASKS")]
    MarkBlockedAndEvacuateTasks,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(command) = &args.command {
        return command.print(&Args::command());
    }
    args.log_format.init(&args.log_level);
    sidecar::run("blocklist-flink", run(args))
}

async fn run(args: Args) -> Result<(), String> {
    let auth = Auth {
        token_file: args.flink_token_file.clone(),
        user: args.flink_user.clone(),
        password_file: args.flink_password_file.clone(),
        cacert: args.flink_cacert.clone(),
    };
    let clusters = args
        .flink
        .iter()
        .map(|spec| Flink::new(spec, &auth))
        .collect::<Result<Vec<_>, _>>()?;
    let mut names: Vec<&str> = clusters.iter().map(|c| c.name.as_str()).collect();
    names.sort_unstable();
    if names.windows(2).any(|w| w[0] == w[1]) {
        return Err("--flink names a cluster twice: give each its own NAME=".into());
    }
    for cluster in &clusters {
        blocklistd::model::validate_source(&format!("{}/{}", args.name, cluster.name))
            .map_err(|e| format!("--name and --flink make the source: {e}"))?;
    }
    if args.duration.is_zero() || args.window.is_zero() || args.poll.is_zero() {
        return Err("--poll, --window and --duration must be longer than zero".into());
    }
    let daemon = Arc::new(Daemon::new(args.connection.daemons()?));
    let settings = Arc::new(Settings {
        name: args.name.clone(),
        poll: args.poll,
        window: args.window,
        rules: Rules {
            per_task_manager: args.task_manager_failures as usize,
            margin: args.margin as usize,
            spread_percent: usize::from(args.spread_percent),
            per_node: args.node_task_managers as usize,
        },
        filter: Filter {
            count: args.count_exceptions.clone(),
            ignore: args.ignore_exceptions.clone(),
            require_labels: args.require_label.clone(),
            ignore_labels: args.ignore_label.clone(),
        },
        action: match args.action {
            Action::MarkBlocked => "MARK_BLOCKED",
            Action::MarkBlockedAndEvacuateTasks => "MARK_BLOCKED_AND_EVACUATE_TASKS",
        }
        .to_owned(),
        duration: args.duration,
        dry_run: args.dry_run,
        register: args.register_task_managers,
        history_size: args.flink_history_size as usize,
    });
    let metrics = Arc::new(Metrics::new(clusters.iter().map(|c| c.name.as_str())));
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("--listen {}: {e}", args.listen))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening on {bound}");
    tracing::info!(clusters = ?names, daemons = ?args.connection.daemon, dry_run = args.dry_run, "watching");
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(serve::run(listener, metrics.clone()));
    for cluster in clusters {
        let watcher = Watcher::new(cluster, daemon.clone(), settings.clone(), metrics.clone());
        tasks.spawn(watcher.run());
    }
    tokio::select! {
        _ = tasks.join_next() => Err("a task of the watcher stopped".into()),
        signal = sidecar::stopped() => {
            tracing::info!(%signal, "stopping");
            Ok(())
        }
    }
}
