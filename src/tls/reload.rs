//! When the certificate is read again: on SIGHUP, and when anything changes in the
//! directories of its files (cert-manager and Vault agent rewrite them in place, Kubernetes
//! swaps a symlink to a new directory beside them).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};
use tokio::signal::unix::{signal, SignalKind};

use super::ServerTls;

/// How long a change must be quiet before the files are read: a writer replaces the key and
/// the certificate one after the other, and the pair is only whole once both are written.
const SETTLE: Duration = Duration::from_millis(300);

pub(super) fn watch(tls: &Arc<ServerTls>) -> std::io::Result<()> {
    let mut hangup = signal(SignalKind::hangup())?;
    let (changed, mut changes) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Reading the files (this reload's own reads among them) is no change.
        if event.is_ok_and(|e| !matches!(e.kind, EventKind::Access(_))) {
            let _ = changed.send(());
        }
    })
    .map_err(std::io::Error::other)?;
    for dir in directories(tls) {
        watcher
            .watch(&dir, RecursiveMode::NonRecursive)
            .map_err(|e| std::io::Error::other(format!("cannot watch {}: {e}", dir.display())))?;
    }
    let tls = tls.clone();
    tokio::spawn(async move {
        // Watching stops when the watcher is dropped: it lives as long as this task.
        let _watcher = watcher;
        loop {
            let why = tokio::select! {
                _ = hangup.recv() => "SIGHUP",
                Some(()) = changes.recv() => {
                    loop {
                        tokio::time::sleep(SETTLE).await;
                        if changes.try_recv().is_err() {
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

/// The directories that hold the TLS files.
fn directories(tls: &ServerTls) -> BTreeSet<PathBuf> {
    let files = &tls.files;
    [
        Some(&files.cert),
        Some(&files.key),
        files.client_ca.as_ref(),
    ]
    .into_iter()
    .flatten()
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
