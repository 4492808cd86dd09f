//! Command-line flags and their environment variables. Each doc comment is the `--help` text.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser};

use crate::store::{Retention, StoreConfig};

/// blocklistd: a persistent FLIP-224 blocklist daemon (task managers and nodes) over REST.
#[derive(Debug, Clone, Parser)]
#[command(version, about)]
pub struct Config {
    /// Address to listen on; port 0 picks a free one (the bound address is printed on stdout).
    #[arg(long, env = "BLOCKLISTD_LISTEN", default_value = "127.0.0.1:7224")]
    pub listen: SocketAddr,

    /// Directory of the sled database; created if missing.
    #[arg(long, env = "BLOCKLISTD_DATA_DIR", default_value = "./blocklistd-data")]
    pub data_dir: PathBuf,

    /// sled page cache, in MiB. The process's memory runs to a few times this.
    #[arg(long, env = "BLOCKLISTD_CACHE_MB", default_value_t = 64)]
    pub cache_mb: u64,

    /// fsync the database log after every group commit, so acknowledged writes survive a
    /// power cut and not only a crash. `--fsync false` trades that for speed.
    #[arg(long, env = "BLOCKLISTD_FSYNC", default_value_t = true, action = ArgAction::Set)]
    pub fsync: bool,

    /// The most write requests that share one transaction and one flush.
    #[arg(long, env = "BLOCKLISTD_COMMIT_BATCH", default_value_t = 256,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub commit_batch: u32,

    /// The largest request body accepted, in bytes; larger ones get 413.
    #[arg(long, env = "BLOCKLISTD_MAX_BODY_BYTES", default_value_t = 1024 * 1024)]
    pub max_body_bytes: usize,

    /// The most items one add request may carry; more get 413.
    #[arg(long, env = "BLOCKLISTD_MAX_BATCH", default_value_t = 10_000)]
    pub max_batch: usize,

    /// The least time between two sweeps of due items, in ms. 0 (the default) removes each
    /// item the moment it is due; a larger value trades prompt deletion for fewer, bigger
    /// expiry commits. Reads never show a due item either way.
    #[arg(long, env = "BLOCKLISTD_SWEEP_INTERVAL_MS", default_value_t = 0)]
    pub sweep_interval_ms: u64,

    /// The change log keeps at most this many events; a watch from an older revision gets
    /// 410 Gone and must list again.
    #[arg(long, env = "BLOCKLISTD_EVENTS_RETENTION_COUNT", default_value_t = 100_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub events_retention_count: u64,

    /// The change log keeps no event older than this, in seconds.
    #[arg(long, env = "BLOCKLISTD_EVENTS_RETENTION_SECS", default_value_t = 24 * 3600)]
    pub events_retention_secs: u64,

    /// How many events a watcher may fall behind the newest before it is disconnected (it
    /// resumes with Last-Event-ID). Memory does not grow with it: a lagging watcher reads
    /// from the log on disk.
    #[arg(long, env = "BLOCKLISTD_EVENTS_MAX_LAG", default_value_t = 50_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub events_max_lag: u64,

    /// Seconds between heartbeat comments on idle watch streams (keeps proxies from
    /// closing them).
    #[arg(long, env = "BLOCKLISTD_EVENTS_HEARTBEAT_SECS", default_value_t = 15,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub events_heartbeat_secs: u64,

    /// How long shutdown waits for in-flight requests before exiting anyway, in seconds.
    #[arg(long, env = "BLOCKLISTD_SHUTDOWN_TIMEOUT", default_value_t = 10)]
    pub shutdown_timeout: u64,
}

impl Config {
    pub fn store(&self) -> StoreConfig {
        StoreConfig {
            data_dir: self.data_dir.clone(),
            cache_bytes: self.cache_mb * 1024 * 1024,
            fsync: self.fsync,
            max_commit_batch: self.commit_batch as usize,
            retention: Retention {
                count: self.events_retention_count,
                max_age_ms: i64::try_from(self.events_retention_secs.saturating_mul(1000))
                    .unwrap_or(i64::MAX),
            },
            feed_buffer: 1024,
        }
    }

    pub fn sweep_interval(&self) -> Duration {
        Duration::from_millis(self.sweep_interval_ms)
    }

    pub fn events_heartbeat(&self) -> Duration {
        Duration::from_secs(self.events_heartbeat_secs)
    }

    pub fn shutdown_timeout(&self) -> Duration {
        Duration::from_secs(self.shutdown_timeout)
    }
}
