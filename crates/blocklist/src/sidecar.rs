//! What the binaries that run beside a cluster (`blocklist-kube`, `blocklist-flink`) share
//! besides the client: their `completion` and `man` subcommands, their logs (text on a
//! terminal, JSON for a log collector), their runtime, and the signal that stops them.

use std::future::Future;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use blocklistd::shell::Shell;
use clap::{Subcommand, ValueEnum};
use tracing_subscriber::EnvFilter;

/// The log format: `json` for a log collector, one object per line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// The subcommands that print what shells and `man` need, and exit.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print a shell completion script.
    Completion { shell: Shell },
    /// Print the manual page, or write the pages into a directory.
    Man {
        /// Write the pages here (one per command) instead of printing the first.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

impl Command {
    /// Prints what was asked of `cli` (the binary's whole clap definition).
    pub fn print(&self, cli: &clap::Command) -> ExitCode {
        let printed = match self {
            Command::Completion { shell } => blocklistd::shell::print_completion(cli, *shell),
            Command::Man { dir } => blocklistd::shell::print_man(cli, dir.as_deref()),
        };
        match printed {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{}: {e}", cli.get_name());
                ExitCode::FAILURE
            }
        }
    }
}

/// Logs to stderr at `level` (a `RUST_LOG` filter wins when set), in `format`.
pub fn init_logs(level: &str, format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => logs.json().with_current_span(false).init(),
    }
}

/// Runs `main` on a multi-threaded runtime: success, or its error on stderr after `name`.
pub fn run(name: &str, main: impl Future<Output = Result<(), String>>) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("{name}: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(Box::pin(main)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Until SIGTERM (Kubernetes stopping the pod) or SIGINT: the signal's name.
pub async fn stopped() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}
