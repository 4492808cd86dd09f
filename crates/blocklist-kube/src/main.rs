//! `blocklist-kube`: the Kubernetes bridge of blocklistd (the library, `blocklist_kube`,
//! holds what it does; this is its command line).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use blocklist_kube::daemon::Daemon;
use blocklist_kube::desired::Desired;
use blocklist_kube::events::Events;
use blocklist_kube::marking::Marking;
use blocklist_kube::reconcile::reconcile;
use blocklist_kube::{follow, membership, node_watch};
use clap::Parser;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};

#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// The daemons' URLs, comma-separated: every daemon of the prefix (any answers; the
    /// bridge moves to the next when one fails).
    #[arg(
        long,
        env = "BLOCKLIST_URL",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:7224"
    )]
    daemon: Vec<String>,

    /// A file whose first line is the bearer token for the daemon.
    #[arg(long, env = "BLOCKLIST_TOKEN_FILE")]
    token_file: Option<PathBuf>,

    /// The kubeconfig to use; without it, the in-cluster service account or
    /// `$KUBECONFIG` / `~/.kube/config`.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,

    /// The key of the bridge's taint.
    #[arg(long, default_value = "blocklistd.io/blocked")]
    taint_key: String,

    /// The prefix of the bridge's annotations (cause, source, end, revision).
    #[arg(long, default_value = "blocklistd.io/")]
    annotation_prefix: String,

    /// The pods that are task managers: each, once bound, is registered with the daemon on
    /// its Node (Flink's native-Kubernetes task managers by default).
    #[arg(
        long,
        default_value = "type=flink-native-kubernetes,component=taskmanager"
    )]
    taskmanager_selector: String,

    /// The namespace of the task managers' pods (all namespaces without it).
    #[arg(long)]
    namespace: Option<String>,

    /// Seconds between full reconciles (the change feed brings each block at once; a
    /// resync puts back what was changed by hand and catches anything missed).
    #[arg(long, default_value_t = 30)]
    resync: u64,

    /// Change nothing in Kubernetes: every patch is sent as the API server's dry run (so it
    /// is checked), logged, and not stored; no Event is written.
    #[arg(long)]
    dry_run: bool,

    /// Reconcile once and exit, without following the feed.
    #[arg(long)]
    once: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    match Box::pin(run(args)).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("blocklist-kube: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
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
    let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
    let token = match &args.token_file {
        Some(file) => Some(
            std::fs::read_to_string(file)
                .map_err(|e| format!("{}: {e}", file.display()))?
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned(),
        ),
        None => None,
    };
    let daemon = Daemon {
        urls: args.daemon.clone(),
        current: std::sync::atomic::AtomicUsize::new(0),
        token,
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| e.to_string())?,
        stream: reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| e.to_string())?,
    };
    let marking = Marking {
        taint_key: args.taint_key.clone(),
        annotation_prefix: args.annotation_prefix.clone(),
        dry_run: args.dry_run,
    };
    let events = Events::new(client.clone(), marking.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = match &args.namespace {
        Some(namespace) => Api::namespaced(client, namespace),
        None => Api::all(client),
    };
    let desired = Desired::default();
    if args.once {
        let counts = reconcile(&daemon, &nodes, &marking, &desired, Some(&events)).await?;
        tracing::info!(?counts, "reconciled");
        return Ok(());
    }
    let resync = Duration::from_secs(args.resync);
    tokio::join!(
        follow::run(&daemon, &nodes, &marking, &desired, &events, resync),
        node_watch::run(nodes.clone(), &marking, &desired, &events),
        membership::run(&daemon, pods, &args.taskmanager_selector),
    );
    Ok(())
}
