//! `blocklist-yarn`: the YARN bridge of blocklistd (the library, `blocklist_yarn`, holds
//! what it does; this is its command line).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use blocklist::enforcer::Daemon;
use blocklist::sidecar::{self, Command, DaemonArgs, LogFormat};
use blocklist_yarn::bridge::{Bridge, Pace};
use blocklist_yarn::partition::Partitions;
use blocklist_yarn::plan::Settings;
use blocklist_yarn::rm::ResourceManager;
use blocklist_yarn::{evacuation, follow, membership, pass, serve};
use clap::{CommandFactory, Parser};

/// The YARN bridge of blocklistd: every blocked node's NodeManagers go into an exclusive
/// partition (a node label) no application asks for, so YARN places no new container
/// there; an unblocked node returns to the partition it came from. Blocks with evacuation
/// have the node's Flink containers stopped, paced; Flink's containers are registered with
/// the daemon as task managers on their nodes.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None, subcommand_negates_reqs = true)]
#[expect(
    clippy::doc_markdown,
    reason = "the text of --help, where backticks would show"
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,

    /// The ResourceManagers' web addresses (http://rm:8088, or https), comma-separated for
    /// HA: requests go to the active one.
    #[arg(
        long = "resourcemanager",
        env = "BLOCKLIST_YARN_RESOURCEMANAGERS",
        value_delimiter = ',',
        required = true,
        value_name = "URL"
    )]
    resourcemanager: Vec<String>,

    /// The user the bridge acts as with simple authentication (`user.name`): a YARN admin
    /// (yarn.admin.acl), which changing node labels needs.
    #[arg(long, env = "BLOCKLIST_YARN_USER", value_name = "NAME")]
    user: Option<String>,

    /// A CA certificate (PEM) to trust for an https ResourceManager, besides the system's.
    #[arg(
        long,
        env = "BLOCKLIST_YARN_RESOURCEMANAGER_CACERT",
        value_name = "PATH"
    )]
    resourcemanager_cacert: Option<PathBuf>,

    /// How the daemons are reached.
    #[command(flatten)]
    connection: DaemonArgs,

    /// The bridge's name: its statuses in the daemon are reported under it (a token of role
    /// `enforcer` with a name reports only under it).
    #[arg(long, env = "BLOCKLIST_YARN_NAME", default_value = "blocklist-yarn")]
    name: String,

    /// The exclusive partition (node label) of blocked NodeManagers from the default
    /// partition; those from partition P go into LABEL-P. Created when missing, never
    /// removed.
    #[arg(long, env = "BLOCKLIST_YARN_LABEL", default_value = "blocklisted")]
    label: String,

    /// Never more than this share of the NodeManagers in the bridge's partitions: past it a
    /// blocked node waits (the status `heldBack`), oldest block first admitted.
    #[arg(long, env = "BLOCKLIST_YARN_MAX_LABELLED_NODES_PERCENT", default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=100))]
    max_labelled_nodes_percent: u8,

    /// Change nothing in YARN: plan, log and report (the statuses say `dryRun`).
    #[arg(long, env = "BLOCKLIST_YARN_DRY_RUN")]
    dry_run: bool,

    /// Seconds between listings of the daemon's blocks (the change feed brings each block at
    /// once; a listing catches anything missed).
    #[arg(long, env = "BLOCKLIST_YARN_RESYNC", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    resync: u64,

    /// How often the ResourceManager is read when no block changes: a NodeManager that
    /// appears, or a partition changed by hand, is put right within it.
    #[arg(long, env = "BLOCKLIST_YARN_POLL", default_value = "5s", value_parser = humantime::parse_duration)]
    poll: Duration,

    /// How often the running applications' containers are read for the membership (a
    /// request per application and two more each: not every --poll on a busy cluster).
    #[arg(long, env = "BLOCKLIST_YARN_MEMBERSHIP_POLL", default_value = "10s", value_parser = humantime::parse_duration)]
    membership_poll: Duration,

    /// Timeout of each request to the ResourceManager.
    #[arg(long, env = "BLOCKLIST_YARN_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    timeout: Duration,

    /// The applications whose containers are task managers: registered with the daemon on
    /// their nodes, and stopped by an evacuation. Repeatable, or comma-separated.
    #[arg(
        long,
        env = "BLOCKLIST_YARN_APPLICATION_TYPES",
        value_delimiter = ',',
        default_value = "Apache Flink"
    )]
    application_type: Vec<String>,

    /// At most this many containers stopped a minute across the cluster by evacuations.
    #[arg(long, env = "BLOCKLIST_YARN_EVICTIONS_PER_MINUTE", default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..))]
    evictions_per_minute: u32,

    /// At most this many blocked nodes emptied at once; the others wait their turn (oldest
    /// block first).
    #[arg(long, env = "BLOCKLIST_YARN_MAX_EVACUATING_NODES", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    max_evacuating_nodes: u32,

    /// Where `/healthz`, `/readyz` and `/metrics` are served; port 0 picks a free one (the
    /// bound address is printed on stdout).
    #[arg(long, env = "BLOCKLIST_YARN_LISTEN", default_value = "0.0.0.0:7227")]
    listen: SocketAddr,

    /// Log level (or a `RUST_LOG` filter, which wins when set).
    #[arg(long, env = "BLOCKLIST_YARN_LOG_LEVEL", default_value = "info")]
    log_level: String,

    /// Log format: `json` for a log collector, one object per line.
    #[arg(long, env = "BLOCKLIST_YARN_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(command) = &args.command {
        return command.print(&Args::command());
    }
    args.log_format.init(&args.log_level);
    sidecar::run("blocklist-yarn", run(args))
}

async fn run(args: Args) -> Result<(), String> {
    blocklistd::enforcement::validate_enforcer(&args.name).map_err(|e| format!("--name: {e}"))?;
    if args.poll.is_zero() || args.membership_poll.is_zero() || args.timeout.is_zero() {
        return Err("--poll, --membership-poll and --timeout must be longer than zero".into());
    }
    let rm = ResourceManager::new(
        &args.resourcemanager,
        args.user.clone(),
        args.resourcemanager_cacert.as_deref(),
        args.timeout,
    )?;
    let settings = Settings {
        partitions: Partitions::new(&args.label)?,
        max_percent: args.max_labelled_nodes_percent,
        dry_run: args.dry_run,
    };
    let pace = Pace {
        per_minute: args.evictions_per_minute,
        nodes: args.max_evacuating_nodes as usize,
    };
    let bridge = Arc::new(Bridge::new(
        rm,
        Daemon::from(args.connection.daemons()?),
        args.name.clone(),
        settings,
        pace,
        args.poll,
        args.application_type.clone(),
    ));
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("--listen {}: {e}", args.listen))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening on {bound}");
    tracing::info!(
        resourcemanagers = ?args.resourcemanager,
        daemons = ?args.connection.daemon,
        label = %args.label,
        dry_run = args.dry_run,
        "bridging"
    );
    let resync = Duration::from_secs(args.resync);
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(serve::run(listener, bridge.clone()));
    let b = bridge.clone();
    tasks.spawn(async move { follow::run(&b, resync).await });
    let b = bridge.clone();
    tasks.spawn(async move { pass::run(&b).await });
    let b = bridge.clone();
    let every = args.membership_poll;
    tasks.spawn(async move { membership::run(&b, every).await });
    let b = bridge.clone();
    tasks.spawn(async move { evacuation::run(&b).await });
    tokio::select! {
        _ = tasks.join_next() => Err("a task of the bridge stopped".into()),
        signal = sidecar::stopped() => {
            tracing::info!(%signal, "stopping");
            Ok(())
        }
    }
}
