//! The daemon binary: flags, logging, signals; everything else is in the library.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use blocklistd::config::{Cli, LogFormat};

/// sled copies tree nodes on every write and frees them from other threads (its epoch
/// reclamation); glibc's malloc spent a fifth of the committer's time on that and kept the
/// freed memory (RSS several times the cache). mimalloc handles both far better.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // RUST_LOG wins over --log-level when set, as operators expect from Rust daemons.
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&cli.serve.log_level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.serve.log_format {
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => logs.json().with_current_span(false).init(),
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("blocklistd: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(command) = cli.command {
        return match runtime.block_on(blocklistd::offline::run(command)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("blocklistd: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match runtime.block_on(blocklistd::run(cli.serve, shutdown_signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "blocklistd failed");
            eprintln!("blocklistd: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut sigterm) => {
                sigterm.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = ctrl_c => {}
        _ = terminate => {}
    }
    tracing::info!("signal received");
}
