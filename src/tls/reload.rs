//! When the certificate is read again: on SIGHUP, and when one of its files changes in its
//! directory (cert-manager and Vault agent rewrite them in place, Kubernetes swaps a
//! symlink named `..data` to a new directory beside them). Other files in those
//! directories — a log being written, say — are no change, and a stream of changes delays
//! a reload by [`MOST_SETTLE`] at most.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use notify::{EventKind, RecursiveMode, Watcher};
use tokio::signal::unix::{signal, SignalKind};

use super::ServerTls;

/// How long a change must be quiet before the files are read: a writer replaces the key and
/// the certificate one after the other, and the pair is only whole once both are written.
const SETTLE: Duration = Duration::from_millis(300);

/// The longest changes that keep coming put a reload off.
const MOST_SETTLE: Duration = Duration::from_secs(3);

impl ServerTls {
    /// Reloads on SIGHUP and when the files change, until the daemon stops. The SIGHUP
    /// handler is in place when this returns.
    pub fn watch(self: &Arc<ServerTls>) -> std::io::Result<()> {
        let tls = self;
        let mut hangup = signal(SignalKind::hangup())?;
        let (changed, mut changes) = tokio::sync::mpsc::unbounded_channel::<()>();
        let names = file_names(tls);
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                // Reading the files (this reload's own reads among them) is no change.
                let Ok(event) = event else { return };
                if !matches!(event.kind, EventKind::Access(_))
                    && event.paths.iter().any(|path| is_tls_file(&names, path))
                {
                    let _ = changed.send(());
                }
            })
            .map_err(std::io::Error::other)?;
        for dir in directories(tls) {
            watcher
                .watch(&dir, RecursiveMode::NonRecursive)
                .map_err(|e| {
                    std::io::Error::other(format!("cannot watch {}: {e}", dir.display()))
                })?;
        }
        let tls = tls.clone();
        tokio::spawn(async move {
            // Watching stops when the watcher is dropped: it lives as long as this task.
            let _watcher = watcher;
            loop {
                let why = tokio::select! {
                    _ = hangup.recv() => "SIGHUP",
                    Some(()) = changes.recv() => {
                        let first = Instant::now();
                        loop {
                            tokio::time::sleep(SETTLE).await;
                            if changes.try_recv().is_err() || first.elapsed() >= MOST_SETTLE {
                                break;
                            }
                            while changes.try_recv().is_ok() {}
                        }
                        "the files changed"
                    }
                };
                let tls = tls.clone();
                let _ = tokio::task::spawn_blocking(move || tls.reload(why)).await;
            }
        });
        Ok(())
    }
}

/// The names of the TLS files, in their directories.
fn file_names(tls: &ServerTls) -> BTreeSet<OsString> {
    paths(tls)
        .filter_map(|path| path.file_name().map(ToOwned::to_owned))
        .collect()
}

/// Whether a change to `path` may change the TLS files: one of them, or an entry of
/// Kubernetes' atomic writer (`..data`, `..2024_…`), which swaps them all at once.
fn is_tls_file(names: &BTreeSet<OsString>, path: &Path) -> bool {
    path.file_name()
        .is_some_and(|name| names.contains(name) || name.as_encoded_bytes().starts_with(b".."))
}

/// The TLS files' paths.
fn paths(tls: &ServerTls) -> impl Iterator<Item = &PathBuf> {
    let files = &tls.files;
    [
        Some(&files.cert),
        Some(&files.key),
        files.client_ca.as_ref(),
        files.peer_ca.as_ref(),
    ]
    .into_iter()
    .flatten()
}

/// The directories that hold the TLS files.
fn directories(tls: &ServerTls) -> BTreeSet<PathBuf> {
    paths(tls)
        .map(|path| match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => Path::new(".").to_path_buf(),
        })
        .collect()
}

/// Without TLS, SIGHUP has nothing to reload: logged, rather than the default action of
/// ending the process (a supervisor's `reload` must not stop the daemon).
pub fn log_hangups() -> std::io::Result<()> {
    let mut hangup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            tracing::info!("SIGHUP: nothing to reload (no --tls-cert)");
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_tls_files_and_kubernetes_swaps_are_changes() {
        let names: BTreeSet<OsString> = ["server.crt", "server.key"]
            .into_iter()
            .map(OsString::from)
            .collect();
        for path in [
            "/etc/blocklistd/server.crt",
            "/etc/blocklistd/server.key",
            "/etc/tls/..data",
            "/etc/tls/..2026_12_04_12_00_00.123",
        ] {
            assert!(is_tls_file(&names, Path::new(path)), "{path}");
        }
        for path in [
            "/etc/blocklistd/daemon.log",
            "/etc/blocklistd/server.crt.tmp",
        ] {
            assert!(!is_tls_file(&names, Path::new(path)), "{path}");
        }
    }
}
