//! The daemon binary: flags, logging, signals; everything else is in the library.

use std::future::Future;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use blocklistd::config::{Cli, Command};

/// sled copies tree nodes on every write and frees them from other threads (its epoch
/// reclamation); glibc's malloc spent a fifth of the committer's time on that and kept the
/// freed memory (RSS several times the cache). mimalloc handles both far better.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc's `mimalloc.h` (v3.3, as built by libmimalloc-sys
/// 0.1.49, which names no constant for it); `purge_delay_is_the_option_it_names` holds
/// the index to it.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Hands memory that sled frees back to the system at once, unless the operator set
/// `MIMALLOC_PURGE_DELAY`. mimalloc's default delays the purge (1 s, ten times that for
/// arenas) and carries out delayed purges only from later allocator calls, which leaves
/// the pages of a write storm resident in a daemon that then goes quiet. After loading 1M
/// items at `--cache-mb 8`: RSS ~400 MB without this, ~270 MB with it (docs/benchmarks.md),
/// at no cost on `add` beyond run-to-run noise.
fn purge_freed_memory_at_once() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one of mimalloc's option values, which it reads atomically; any
        // value of this option is valid.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
    }
}

/// `mi_option_allow_thp` in the same `mimalloc.h`; `allow_thp_is_the_option_it_names`
/// holds the index to it.
const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = 43;

/// Keeps the daemon's memory in 4 KiB pages, unless the operator set `MIMALLOC_ALLOW_THP`
/// (mimalloc's own switch for this; 0 there does the same). mimalloc asks for transparent
/// huge pages on its arenas by default; sled's copy-on-write nodes are small and scattered,
/// so a huge page is mostly a 2 MiB page zeroed at its first touch and resident for a few
/// nodes. Measured against the default on the 200,000-item bench (docs/benchmarks.md):
/// RSS after the load −19%, `add` +25%, the first restart −23%. mimalloc reads the option
/// before `main` for its own start; the process-wide switch (`PR_SET_THP_DISABLE`, inherited
/// by nothing else: the daemon starts no programs) covers what it already mapped.
fn small_pages_only() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        // SAFETY: sets one of mimalloc's option values, which it reads atomically; 0 and 1
        // are this option's values.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ALLOW_THP, 0) };
        // A kernel without the switch (before 3.15) has nothing to turn off here.
        let _ = rustix::thread::disable_transparent_huge_pages(true);
    }
}

fn main() -> ExitCode {
    purge_freed_memory_at_once();
    small_pages_only();
    let cli = Cli::parse();
    let printed = match &cli.command {
        Some(Command::Completion { shell }) => {
            Some(blocklistd::shell::print_completion(&Cli::command(), *shell))
        }
        Some(Command::Man { dir }) => Some(blocklistd::shell::print_man(
            &Cli::command(),
            dir.as_deref(),
        )),
        _ => None,
    };
    if let Some(printed) = printed {
        return exit(printed);
    }
    // `--quiet` offline work logs only warnings and errors: no "created a new database".
    let level = match &cli.command {
        Some(Command::Offline(work)) if work.progress().quiet => "warn",
        _ => &cli.serve.log_level,
    };
    cli.serve.log_format.init(level);
    log_panics();
    if cli.command.is_none() {
        raise_open_files_limit(cli.serve.max_connections);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("blocklistd: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(Command::Offline(work)) = cli.command {
        return exit(runtime.block_on(blocklistd::offline::run(work, &cli.serve)));
    }
    let shutdown = match runtime.block_on(async { shutdown_signal() }) {
        Ok(shutdown) => shutdown,
        Err(e) => {
            eprintln!("blocklistd: cannot install the signal handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(blocklistd::run(cli.serve, shutdown)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "blocklistd failed");
            eprintln!("blocklistd: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The exit of a subcommand: 0, or 1 with its error on stderr.
fn exit(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("blocklistd: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Panics go to the log like every other error, with where they happened, instead of as a
/// bare line on stderr. sled's recovery panics on some damage; the store catches that and
/// reports the damaged files, and this line says what sled said.
fn log_panics() {
    std::panic::set_hook(Box::new(|info| {
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let thread = std::thread::current();
        tracing::error!(thread = thread.name().unwrap_or("?"), %location, "panic: {message}");
    }));
}

/// File descriptors besides connections: the database's files, the listener, the runtime's.
const RESERVED_FILES: u64 = 64;

/// Every connection is a file descriptor. With a soft limit under `--max-connections`,
/// `accept` fails (logged, retried) before the cap's documented 503 can apply, and the
/// common default soft limit is 1,024 against our 4,096. So, as servers do, raise the soft
/// limit to the hard one, and warn when even that is short.
fn raise_open_files_limit(max_connections: u32) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let wanted = u64::from(max_connections) + RESERVED_FILES;
    let limit = getrlimit(Resource::Nofile);
    if limit.current.is_some_and(|current| current < wanted) {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::warn!(error = %e, "cannot raise the open-files limit");
        }
    }
    if let Some(current) = getrlimit(Resource::Nofile).current {
        if current < wanted {
            tracing::warn!(
                limit = current,
                max_connections,
                "the open-files limit is below --max-connections plus {RESERVED_FILES}: \
                 connections over it are refused by accept() rather than answered 503; \
                 raise the hard limit (LimitNOFILE=) or lower --max-connections"
            );
        }
    }
}

/// Installs the SIGINT and SIGTERM handlers now and returns a future that resolves on
/// either. They must be in place before `run` prints its address: supervisors and tests
/// may signal as soon as they read it, and a signal that arrives before a handler exists
/// kills the process with the default action instead of shutting it down cleanly.
fn shutdown_signal() -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        tracing::info!("signal received");
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Index 15 is the purge delay: its default (1000 ms in v3) is no other option's, and
    /// `MIMALLOC_PURGE_DELAY` moves it. A mimalloc whose options moved fails here rather
    /// than having the daemon set some other option to 0.
    #[test]
    fn purge_delay_is_the_option_it_names() {
        // SAFETY: reads an option value.
        let value = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        match std::env::var("MIMALLOC_PURGE_DELAY") {
            Ok(set) => assert_eq!(value.to_string(), set),
            Err(_) => assert_eq!(value, 1000),
        }
    }

    /// Index 43 is `allow_thp`: on by default on Linux, and `MIMALLOC_ALLOW_THP` moves it;
    /// index 42 (`page_cross_thread_max_reclaim`, 32) and 44 (`minimal_purge_size`, 0) are
    /// not. After `small_pages_only`, it is off and so is the process's THP switch.
    #[test]
    fn allow_thp_is_the_option_it_names() {
        // SAFETY: reads option values.
        let [before, after] = [42, 44].map(|i| unsafe { libmimalloc_sys::mi_option_get(i) });
        assert_eq!((before, after), (32, 0));
        if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
            return;
        }
        // SAFETY: reads an option value.
        let value = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_ALLOW_THP) };
        assert_eq!(value, 1);
        small_pages_only();
        // SAFETY: reads an option value.
        let value = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_ALLOW_THP) };
        assert_eq!(value, 0);
        assert_eq!(
            rustix::thread::transparent_huge_pages_are_disabled().ok(),
            Some(true)
        );
    }
}
