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
    /// `feed`'s add rate when given (`--feed-rate`), instead of half the capacity.
    pub feed_rate: Option<f64>,
    /// The etcd peer's binary (`--etcd-bin`); read only by the peer (feature `etcd`).
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub etcd_bin: PathBuf,
    /// The running cluster the etcd peer uses instead of a member of its own
    /// (`--etcd-peer-endpoints`); read only by the peer (feature `etcd`).
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub etcd_peer_endpoints: Option<Vec<String>>,
    pub subscribers: Vec<usize>,
    pub work_dir: Option<PathBuf>,
    pub keep: bool,
    pub wait_quiet: Duration,
}
