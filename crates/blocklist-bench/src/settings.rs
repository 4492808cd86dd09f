//! What every scenario runs with, from the flags.

use std::path::PathBuf;
use std::time::Duration;

/// The run's settings, as the scenarios see them.
#[derive(Debug, Clone)]
pub struct Settings {
    pub duration: Duration,
    pub concurrency: usize,
    pub items: usize,
    pub expire_window: Duration,
    pub restarts: usize,
    pub peer: bool,
    /// Requests go to a replica of each daemon started (`--via-replica`).
    pub via_replica: bool,
    pub subscribers: Vec<usize>,
    pub work_dir: Option<PathBuf>,
    pub keep: bool,
    pub wait_quiet: Duration,
}
