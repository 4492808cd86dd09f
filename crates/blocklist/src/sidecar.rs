//! What the binaries that run beside a cluster (`blocklist-kube`, `blocklist-flink`) share
//! besides the client: how they reach the daemons (their flags), their `completion` and
//! `man` subcommands, their log format (the daemon's), their runtime, and the signal that
//! stops them.

use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;

pub use blocklistd::config::LogFormat;
use blocklistd::shell::Shell;
use clap::{Args, Subcommand};

use crate::client::TlsFiles;

/// How a binary beside a cluster reaches the daemons: the same flags and variables as the
/// CLI's (`BLOCKLIST_SERVER`, `BLOCKLIST_TOKEN_FILE`, …).
#[derive(Args, Debug)]
pub struct DaemonArgs {
    /// The daemons' URLs, comma-separated: every daemon of the prefix (any answers; it
    /// moves to the next when one fails).
    #[arg(
        long,
        env = "BLOCKLIST_SERVER",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:7224"
    )]
    pub daemon: Vec<String>,

    /// A file holding the bearer token for the daemons (its first line; the role each
    /// binary needs is in its documentation).
    #[arg(long, env = "BLOCKLIST_TOKEN_FILE", value_name = "PATH")]
    pub token_file: Option<PathBuf>,

    /// A CA certificate (PEM) to trust for an https:// daemon, besides the system's.
    #[arg(long, env = "BLOCKLIST_CACERT", value_name = "PATH")]
    pub cacert: Option<PathBuf>,

    /// A client certificate (PEM) for a daemon that asks for one; with --key.
    #[arg(long, env = "BLOCKLIST_CERT", value_name = "PATH", requires = "key")]
    pub cert: Option<PathBuf>,

    /// The client certificate's private key (PEM); with --cert.
    #[arg(long, env = "BLOCKLIST_KEY", value_name = "PATH", requires = "cert")]
    pub key: Option<PathBuf>,
}

impl DaemonArgs {
    /// The daemons, each with its clients.
    pub fn daemons(&self) -> Result<crate::daemons::Daemons, String> {
        self.daemons_with_token(self.token_file.as_deref())
    }

    /// The daemons with the token of `token_file` instead (`None`: no token): a second
    /// identity of the same binary (the bridge's detector beside its enforcer).
    pub fn daemons_with_token(
        &self,
        token_file: Option<&std::path::Path>,
    ) -> Result<crate::daemons::Daemons, String> {
        let tls = TlsFiles {
            cacert: self.cacert.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
        };
        crate::daemons::Daemons::new(&self.daemon, token_file, &tls)
    }
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
