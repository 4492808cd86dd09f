//! `blocklist-kube`: the Kubernetes bridge of blocklistd (the library, `blocklist_kube`,
//! holds what it does; this is its command line).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use blocklist::sidecar::{self, Command, DaemonArgs, LogFormat};
use blocklist_kube::bridge::Bridge;
use blocklist_kube::conditions::{spec, Conditions, Spec};
use blocklist_kube::daemon::Daemon;
use blocklist_kube::evacuation::{Evacuation, Settings};
use blocklist_kube::leader::{default_identity, Election, Leadership};
use blocklist_kube::marking::Marking;
use blocklist_kube::pods::Labels;
use blocklist_kube::reconcile::reconcile;
use blocklist_kube::{follow, membership, node_watch, serve};
use clap::{CommandFactory, Parser};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// The Kubernetes bridge of blocklistd: every blocked node becomes a NoSchedule taint of
/// the bridge's own key, with annotations and an Event that say who blocked it and why;
/// the daemon's membership is kept current from the task managers' pods.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
#[expect(
    clippy::doc_markdown,
    reason = "the text of --help, where backticks would show"
)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "a command line's switches, each its own flag"
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,

    /// How the daemons are reached.
    #[command(flatten)]
    connection: DaemonArgs,

    /// The bridge's name: its statuses in the daemon are reported under it (a token of
    /// role `enforcer` with a name reports only under that name).
    #[arg(long, env = "BLOCKLIST_KUBE_NAME", default_value = "blocklist-kube")]
    name: String,

    /// The kubeconfig to use; without it, the in-cluster service account or
    /// `$KUBECONFIG` / `~/.kube/config`.
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,

    /// The key of the bridge's taint (and of its label on a blocked task manager's pod).
    #[arg(
        long,
        env = "BLOCKLIST_KUBE_TAINT_KEY",
        default_value = "blocklistd.io/blocked"
    )]
    taint_key: String,

    /// The prefix of the bridge's annotations (cause, source, end, revision).
    #[arg(
        long,
        env = "BLOCKLIST_KUBE_ANNOTATION_PREFIX",
        default_value = "blocklistd.io/"
    )]
    annotation_prefix: String,

    /// The pods that are task managers: each, once bound, is registered with the daemon on
    /// its Node (Flink's native-Kubernetes task managers by default).
    #[arg(
        long,
        env = "BLOCKLIST_KUBE_TASKMANAGER_SELECTOR",
        default_value = "type=flink-native-kubernetes,component=taskmanager"
    )]
    taskmanager_selector: String,

    /// The namespace of the task managers' pods (all namespaces without it).
    #[arg(long, env = "BLOCKLIST_KUBE_NAMESPACE")]
    namespace: Option<String>,

    /// Seconds between full reconciles (the change feed brings each block at once; a
    /// resync puts back what was changed by hand and catches anything missed).
    #[arg(long, env = "BLOCKLIST_KUBE_RESYNC", default_value_t = 30)]
    resync: u64,

    /// Never more than this share of the cluster's Nodes carries the bridge's taint: past
    /// it no new taint (a log line, a metric, an Event, the status `heldBack`).
    #[arg(
        long,
        env = "BLOCKLIST_KUBE_MAX_TAINTED_NODES_PERCENT",
        default_value_t = 50,
        value_parser = clap::value_parser!(u8).range(0..=100)
    )]
    max_tainted_nodes_percent: u8,

    /// Change nothing in Kubernetes: every patch is sent as the API server's dry run (so it
    /// is checked), logged, and not stored; no Event is written; the statuses say `dryRun`.
    #[arg(long, env = "BLOCKLIST_KUBE_DRY_RUN")]
    dry_run: bool,

    /// The pods an evacuated node's work is (`MARK_BLOCKED_AND_EVACUATE_TASKS`): a label
    /// selector; the task managers' (--taskmanager-selector) without it.
    #[arg(
        long,
        env = "BLOCKLIST_KUBE_EVICT_SELECTOR",
        conflicts_with = "evict_all"
    )]
    evict_selector: Option<String>,

    /// An evacuated node's work is every pod on it (in --namespace, if given), but for
    /// DaemonSets' pods, mirror pods and pods that tolerate the bridge's taint.
    #[arg(long, env = "BLOCKLIST_KUBE_EVICT_ALL")]
    evict_all: bool,

    /// At most this many evictions a minute across the cluster, each a whole pace (60 s /
    /// the rate) after the one before.
    #[arg(
        long,
        env = "BLOCKLIST_KUBE_EVICTIONS_PER_MINUTE",
        default_value_t = 60,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    evictions_per_minute: u32,

    /// At most this many nodes being emptied at once; the others wait their turn (oldest
    /// block first).
    #[arg(
        long,
        env = "BLOCKLIST_KUBE_MAX_EVACUATING_NODES",
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    max_evacuating_nodes: u32,

    /// Elect one leader among the bridge's replicas through a Lease: only the leader
    /// writes (`false`: this bridge always writes; run one replica only).
    #[arg(
        long,
        env = "BLOCKLIST_KUBE_LEADER_ELECT",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    leader_elect: bool,

    /// The Lease the replicas elect their leader with.
    #[arg(
        long,
        env = "BLOCKLIST_KUBE_LEASE_NAME",
        default_value = "blocklist-kube"
    )]
    lease_name: String,

    /// The Lease's namespace: the bridge's own (in a pod) or the kubeconfig's without it.
    #[arg(long, env = "BLOCKLIST_KUBE_LEASE_NAMESPACE")]
    lease_namespace: Option<String>,

    /// Seconds a leader that stops renewing keeps the Lease: another replica takes over
    /// after it (the leader stops writing after two thirds of it by its own clock).
    #[arg(
        long,
        env = "BLOCKLIST_KUBE_LEASE_DURATION",
        default_value_t = 15,
        value_parser = clap::value_parser!(u64).range(2..)
    )]
    lease_duration: u64,

    /// This replica's identity in the Lease (default: the host's name, the process id and
    /// its start).
    #[arg(long, env = "BLOCKLIST_KUBE_IDENTITY")]
    identity: Option<String>,

    /// A Node condition that blocks its Node while it holds, repeatable (or `;`-separated
    /// in the variable): TYPE[,status=True|False|Unknown][,hold=1m][,action=block|evacuate]
    /// [,duration=1h|permanent]. Reported as a detector under NAME/condition/TYPE once
    /// held past its hold (default 1m), retracted when it clears. None by default.
    #[arg(
        long = "condition",
        env = "BLOCKLIST_KUBE_CONDITIONS",
        value_name = "SPEC",
        value_delimiter = ';'
    )]
    conditions: Vec<Spec>,

    /// A file holding the bearer token the conditions are reported with (its first line):
    /// a token of role `detector` named as --name. Needed with --condition when the
    /// daemons take tokens; the --token-file's (an enforcer's) never blocks.
    #[arg(long, env = "BLOCKLIST_KUBE_DETECTOR_TOKEN_FILE", value_name = "PATH")]
    detector_token_file: Option<PathBuf>,

    /// Reconcile once and exit, without following the feed (no condition is reported).
    #[arg(long)]
    once: bool,

    /// Where `/healthz`, `/readyz` and `/metrics` are served; port 0 picks a free one (the
    /// bound address is printed on stdout).
    #[arg(long, env = "BLOCKLIST_KUBE_LISTEN", default_value = "0.0.0.0:7225")]
    listen: SocketAddr,

    /// Log level (or a `RUST_LOG` filter, which wins when set).
    #[arg(long, env = "BLOCKLIST_KUBE_LOG_LEVEL", default_value = "info")]
    log_level: String,

    /// Log format: `json` for a log collector, one object per line.
    #[arg(long, env = "BLOCKLIST_KUBE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(command) = &args.command {
        return command.print(&Args::command());
    }
    args.log_format.init(&args.log_level);
    sidecar::run("blocklist-kube", run(args))
}

/// The conditions to report, with the daemons as the detector.
fn conditions(args: &Args) -> Result<Conditions, String> {
    if args.conditions.is_empty() {
        return Ok(Conditions::off());
    }
    spec::distinct(&args.conditions)?;
    if args.connection.token_file.is_some() && args.detector_token_file.is_none() {
        return Err(format!(
            "--condition needs --detector-token-file: a token of role detector named {} \
             (the --token-file's, an enforcer's, never blocks)",
            args.name
        ));
    }
    let daemons = args
        .connection
        .daemons_with_token(args.detector_token_file.as_deref())?;
    let conditions = Conditions::new(&args.name, args.conditions.clone(), Some(daemons));
    for spec in &args.conditions {
        blocklistd::model::validate_source(&conditions.source(&spec.kind))
            .map_err(|e| format!("--name and --condition {} make the source: {e}", spec.kind))?;
    }
    Ok(conditions)
}

async fn run(args: Args) -> Result<(), String> {
    blocklistd::enforcement::validate_enforcer(&args.name).map_err(|e| format!("--name: {e}"))?;
    let conditions = conditions(&args)?;
    let config = match &args.kubeconfig {
        Some(path) => {
            let file =
                Kubeconfig::read_from(path).map_err(|e| format!("{}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => kube::Config::infer().await.map_err(|e| e.to_string())?,
    };
    // The bridge paces and retries its own requests: the client's retries of 429s would
    // send evictions outside the pace, and ask a budget again without backoff of its own.
    let mut config = config;
    config.default_retry = false;
    let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
    let daemon = Daemon::from(args.connection.daemons()?);
    let marking = Marking {
        taint_key: args.taint_key.clone(),
        annotation_prefix: args.annotation_prefix.clone(),
        dry_run: args.dry_run,
    };
    let election = (args.leader_elect && !args.once).then(|| Election {
        api: Api::namespaced(
            client.clone(),
            args.lease_namespace
                .as_deref()
                .unwrap_or(client.default_namespace()),
        ),
        name: args.lease_name.clone(),
        identity: args.identity.clone().unwrap_or_else(default_identity),
        duration: Duration::from_secs(args.lease_duration),
    });
    let bridge = Arc::new(
        Bridge::new(
            args.name.clone(),
            daemon,
            &client,
            marking,
            args.max_tainted_nodes_percent,
        )
        .with_leadership(Leadership::new(election))
        .with_conditions(conditions),
    );
    if args.once {
        let counts = reconcile(&bridge).await?;
        tracing::info!(?counts, "reconciled");
        return bridge.reporter.flush(&bridge.daemon, &bridge.name).await;
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("--listen {}: {e}", args.listen))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening on {bound}");
    let pods: Api<Pod> = match &args.namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    };
    let evict_selector = if args.evict_all {
        None
    } else {
        Some(
            args.evict_selector
                .clone()
                .unwrap_or_else(|| args.taskmanager_selector.clone()),
        )
    };
    // The task managers are the work (the default): the membership's watch feeds the
    // evacuation's cache, one watch of those pods instead of two.
    let shared_watch = evict_selector.as_deref() == Some(args.taskmanager_selector.as_str());
    let evacuation = Evacuation::new(
        client.clone(),
        Settings {
            per_minute: args.evictions_per_minute,
            max_nodes: args.max_evacuating_nodes as usize,
            selector: evict_selector,
            namespace: args.namespace.clone(),
        },
        &args.taint_key,
    );
    let workload = evacuation.workload();
    let labels = Labels::new(client, args.namespace.clone());
    let resync = Duration::from_secs(args.resync.max(1));
    let running = async {
        tokio::join!(
            serve::run(listener, bridge.clone()),
            bridge.leader.run(),
            follow::run(&bridge, &labels, resync),
            node_watch::run(&bridge),
            membership::run(
                &bridge,
                &labels,
                pods,
                &args.taskmanager_selector,
                shared_watch.then_some(workload),
            ),
            bridge
                .reporter
                .run(&bridge.daemon, &bridge.name, &bridge.leader),
            async {
                if !shared_watch {
                    workload.watch(&bridge).await;
                }
            },
            evacuation.run(&bridge, &labels),
            bridge
                .conditions
                .run(&bridge.leader, &bridge.metrics, &bridge.events),
        );
    };
    tokio::select! {
        () = running => {}
        signal = sidecar::stopped() => {
            tracing::info!(%signal, "stopping");
            bridge.leader.release().await;
        }
    }
    Ok(())
}
