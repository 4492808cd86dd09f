//! Command-line flags and their environment variables. Each doc comment is the `--help` text.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};

mod store;
mod tls;

pub use store::{Opener, StoreFlags, StoreKind};
pub use tls::{ClientAuth, TlsFiles, TlsFlags};

use crate::model::Kind;
use crate::policy::{slot, Overrides};
use crate::store::{HistoryRetention, Retention, StoreConfig};

/// blocklistd: a persistent FLIP-224 blocklist daemon (task managers and nodes) over REST.
///
/// Without a subcommand it serves; `check`, `export`, `salvage` and `import` work on a
/// stopped daemon's data dir; `completion` and `man` print a shell completion script and
/// the manual pages.
#[derive(Debug, Clone, Parser)]
#[command(version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub serve: Config,
}

/// What the binary does instead of serving.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    #[command(flatten)]
    Offline(Offline),
    /// Print the completion script for a shell, e.g. `blocklistd completion bash >
    /// /etc/bash_completion.d/blocklistd`.
    Completion {
        #[arg(value_enum)]
        shell: crate::shell::Shell,
    },
    /// Print the manual page (roff), or with `--dir` write it and one page per subcommand
    /// (blocklistd-import.1, ...) into a directory, e.g. /usr/local/share/man/man1.
    Man {
        /// The directory to write the pages into (it must exist); they are listed on stdout.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// Offline tools for a data dir no daemon is running on. Each shows its progress on stderr:
/// a bar when stderr is a terminal, one summary line when it is not.
#[derive(Debug, Clone, Subcommand)]
pub enum Offline {
    /// Verify the store's invariants (items vs. expiry index, membership index, event log,
    /// every value decodes); prints what is wrong. Exit 0 when sound, 1 when not.
    Check {
        #[command(flatten)]
        progress: ProgressArgs,
    },
    /// Write every active item and registration as JSON lines.
    Export {
        /// Where to write; `-` for stdout.
        #[arg(long, default_value = "-")]
        out: PathBuf,
        #[command(flatten)]
        progress: ProgressArgs,
    },
    /// Export what is still readable from a data dir the daemon cannot open (a disk that
    /// lost data), as JSON lines for `import` into a new data dir. Works on copies; the data
    /// dir is never written. Exit 0 when something was read, 1 when nothing could be.
    Salvage {
        /// Where to write; `-` for stdout.
        #[arg(long, default_value = "-")]
        out: PathBuf,
        /// Where to make the working copies (as large as the data dir); by default a
        /// temporary directory beside the data dir.
        #[arg(long)]
        scratch: Option<PathBuf>,
        #[command(flatten)]
        progress: ProgressArgs,
    },
    /// Load JSON lines written by `export` (or GET /blocklist/export). Expired items are
    /// skipped.
    Import {
        /// The file to read; `-` for stdin.
        file: PathBuf,
        /// `merge`: merge into what is there (FLIP-224 rules); `replace`: empty the store
        /// of items and registrations first.
        #[arg(long, value_enum, default_value_t = ImportMode::Merge)]
        mode: ImportMode,
        #[command(flatten)]
        progress: ProgressArgs,
    },
}

/// How an offline subcommand reports its progress.
#[derive(Debug, Clone, Copy, Args)]
pub struct ProgressArgs {
    /// Show no progress and no summary on stderr; errors and warnings still go there.
    #[arg(long, short)]
    pub quiet: bool,
}

impl Offline {
    pub fn progress(&self) -> ProgressArgs {
        match self {
            Offline::Check { progress }
            | Offline::Export { progress, .. }
            | Offline::Salvage { progress, .. }
            | Offline::Import { progress, .. } => *progress,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ImportMode {
    Merge,
    Replace,
}

/// The log format: `json` for a log collector, one object per line. The daemon's, and the
/// binaries' beside it (`blocklist::sidecar`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    /// Logs to stderr at `level` in this format. `RUST_LOG` wins over the level when set,
    /// as operators expect from Rust daemons; colours only on a terminal.
    pub fn init(self, level: &str) {
        use std::io::IsTerminal;
        use tracing_subscriber::EnvFilter;
        let filter = EnvFilter::try_from_default_env()
            .or_else(|_| EnvFilter::try_new(level))
            .unwrap_or_else(|_| EnvFilter::new("info"));
        let logs = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr);
        match self {
            LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
            LogFormat::Json => logs.json().with_current_span(false).init(),
        }
    }
}

/// The daemon's flags.
#[derive(Debug, Clone, Args)]
pub struct Config {
    /// Address to listen on; port 0 picks a free one (the bound address is printed on stdout).
    #[arg(long, env = "BLOCKLISTD_LISTEN", default_value = "127.0.0.1:7224")]
    pub listen: SocketAddr,

    /// Directory of the sled database; created if missing (by the daemon and `import`).
    // Global: one flag for the daemon and the subcommands, before or after the subcommand's
    // name. (Each subcommand had its own: `blocklistd --data-dir D import F` then imported
    // into ./blocklistd-data and left D untouched.)
    #[arg(
        long,
        env = "BLOCKLISTD_DATA_DIR",
        default_value = "./blocklistd-data",
        global = true
    )]
    pub data_dir: PathBuf,

    #[command(flatten)]
    pub store: StoreFlags,

    /// sled page cache, in MiB. sled counts nodes at their encoded size, so the memory it
    /// holds runs to several times this (1M items loaded: RSS ~270 MB at 8, ~295 at 16).
    #[arg(long, env = "BLOCKLISTD_CACHE_MB", default_value_t = 8)]
    pub cache_mb: u64,

    /// Memory for recent check verdicts, in MiB (0: none). A kept verdict is served until
    /// a key it was read from changes or an item it shows ends, so it is never stale.
    #[arg(long, env = "BLOCKLISTD_CHECK_CACHE_MB", default_value_t = 16)]
    pub check_cache_mb: u64,

    /// fsync the database log after every group commit, so acknowledged writes survive a
    /// power cut and not only a crash. `--fsync false` trades that for speed.
    #[arg(long, env = "BLOCKLISTD_FSYNC", default_value_t = true, action = ArgAction::Set)]
    pub fsync: bool,

    /// sled's segment size, in bytes, for a NEW data dir (an existing one keeps the size it
    /// was created with). For tests only: the default keeps every tree node under sled's
    /// blob threshold (docs/architecture.md, "Blob files"); a smaller one makes sled write
    /// blob files.
    #[arg(long, env = "BLOCKLISTD_SEGMENT_BYTES", hide = true,
          default_value_t = crate::store::SEGMENT_BYTES,
          value_parser = parse_segment_bytes)]
    pub segment_bytes: usize,

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

    /// Expired items are announced on time, but their storage is deleted only once no
    /// client write has committed for this long (ms), so a mass expiry does not slow the
    /// writers down.
    #[arg(long, env = "BLOCKLISTD_RECLAIM_IDLE_MS", default_value_t = 250)]
    pub reclaim_idle_ms: u64,

    /// Under continuous writes, still delete the storage of at least this many expired
    /// items per second (0: only when writers pause).
    #[arg(long, env = "BLOCKLISTD_RECLAIM_MIN_RATE", default_value_t = 1_000)]
    pub reclaim_min_rate: u32,

    /// The change log keeps at most this many events; a watch from an older revision gets
    /// 410 Gone and must list again.
    #[arg(long, env = "BLOCKLISTD_EVENTS_RETENTION_COUNT", default_value_t = 100_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub events_retention_count: u64,

    /// The change log keeps no event older than this, in seconds.
    #[arg(long, env = "BLOCKLISTD_EVENTS_RETENTION_SECS", default_value_t = 24 * 3600)]
    pub events_retention_secs: u64,

    /// How many past blocks each id keeps (`GET /blocklist/{kind}/{id}/history`); the oldest
    /// goes when one more ends.
    #[arg(long, env = "BLOCKLISTD_HISTORY_PER_ID", default_value_t = 20,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub history_per_id: u64,

    /// Past blocks are kept for this many seconds after they ended (30 days by default).
    #[arg(long, env = "BLOCKLISTD_HISTORY_RETENTION_SECS", default_value_t = 30 * 24 * 3600,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub history_retention_secs: u64,

    /// How long a write's Idempotency-Key and its answer are kept: a retry with the key
    /// within this is answered as the first time, a later one is a new request. A duration
    /// such as 30m, 24h or 7d (at least 1s).
    #[arg(long, env = "BLOCKLISTD_IDEMPOTENCY_RETENTION", default_value = "24h",
          value_name = "DURATION", value_parser = parse_retention)]
    pub idempotency_retention: Duration,

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

    /// Guardrails set at start. Each flag given replaces its field of the stored policy
    /// (`GET /policy`), and the change is recorded in the change feed; fields without a
    /// flag keep what is stored (on a new data dir, the defaults). `off` turns a guard off.
    #[command(flatten)]
    pub guardrails: GuardrailFlags,

    /// A file holding the bearer token(s) that mutating requests must carry
    /// (`Authorization: Bearer <token>`), one per line as `TOKEN [name=NAME]
    /// [role=admin|writer|reader]` (a bare token is a writer); blank lines and `#` comments
    /// are ignored. Without it, nothing is authenticated (and only loopback may be bound).
    #[arg(long, env = "BLOCKLISTD_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,

    #[command(flatten)]
    pub tls: TlsFlags,

    /// With --token-file, require the token for reads too (probes and /metrics stay open).
    #[arg(long, env = "BLOCKLISTD_AUTH_READS", default_value_t = false, action = ArgAction::Set)]
    pub auth_reads: bool,

    /// Lets pages served from ORIGIN (`scheme://host[:port]`, exactly as the browser sends
    /// it) call the API and follow the feed from a browser (CORS). Repeatable; without it,
    /// no page of another origin may. The console at /ui needs none.
    #[arg(long = "cors-origin", env = "BLOCKLISTD_CORS_ORIGINS", value_delimiter = ',',
          value_parser = parse_origin)]
    pub cors_origins: Vec<String>,

    /// Allow listening on a non-loopback address without --token-file.
    #[arg(long, env = "BLOCKLISTD_ALLOW_UNAUTHENTICATED")]
    pub allow_unauthenticated: bool,

    /// A client must send a request's headers within this many ms, or its connection is
    /// closed (slow-header clients).
    #[arg(long, env = "BLOCKLISTD_HEADER_TIMEOUT_MS", default_value_t = 10_000)]
    pub header_timeout_ms: u64,

    /// A client must send a request's body within this many ms, or it gets 408.
    #[arg(long, env = "BLOCKLISTD_BODY_TIMEOUT_MS", default_value_t = 30_000)]
    pub body_timeout_ms: u64,

    /// The most open connections; more are answered 503 and closed.
    #[arg(long, env = "BLOCKLISTD_MAX_CONNECTIONS", default_value_t = 4096,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,

    /// Log format on stderr.
    #[arg(long, env = "BLOCKLISTD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log level (error, warn, info, debug, trace) or a full filter; `RUST_LOG` wins when set.
    #[arg(long, env = "BLOCKLISTD_LOG_LEVEL", default_value = "info")]
    pub log_level: String,

    /// How long shutdown waits for in-flight requests before exiting anyway, in seconds.
    #[arg(long, env = "BLOCKLISTD_SHUTDOWN_TIMEOUT", default_value_t = 10)]
    pub shutdown_timeout: u64,
}

/// An origin as a browser sends it in `Origin`: `http` or `https`, a host, an optional
/// port, nothing else (no path, no wildcard).
fn parse_origin(text: &str) -> Result<String, String> {
    let example = "an origin such as https://console.example.com or http://127.0.0.1:8080";
    let uri: axum::http::Uri = text.parse().map_err(|e| format!("{e}: give {example}"))?;
    let scheme = uri.scheme_str().filter(|s| matches!(*s, "http" | "https"));
    let (Some(scheme), Some(authority)) = (scheme, uri.authority()) else {
        return Err(format!("{text:?} is not {example}"));
    };
    if authority.as_str().contains('@')
        || uri.path() != "/"
        || uri.query().is_some()
        || text.contains('#')
        || text.ends_with('/')
    {
        return Err(format!(
            "{text:?} is not {example} (no path, user, fragment or trailing slash)"
        ));
    }
    // A browser's `Origin` leaves the scheme's default port out: so does the one kept.
    let host = authority.host().to_ascii_lowercase();
    Ok(match (scheme, authority.port_u16()) {
        ("http", Some(80)) | ("https", Some(443)) | (_, None) => format!("{scheme}://{host}"),
        (_, Some(port)) => format!("{scheme}://{host}:{port}"),
    })
}

/// A retention as people write it (`24h`, `90m`, `7d`, `1h 30m`), at least a second.
fn parse_retention(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text.trim())
        .map_err(|e| format!("{e} (examples: 30m, 24h, 7d)"))?;
    if duration < Duration::from_secs(1) {
        return Err("must be at least 1s".into());
    }
    Ok(duration)
}

/// A segment size sled accepts: a power of two from 64 KiB to 16 MiB.
fn parse_segment_bytes(text: &str) -> Result<usize, String> {
    let bytes: usize = text.parse().map_err(|e| format!("{e}"))?;
    if bytes.is_power_of_two() && (64 * 1024..=16 * 1024 * 1024).contains(&bytes) {
        Ok(bytes)
    } else {
        Err("must be a power of two from 65536 to 16777216".into())
    }
}

impl Config {
    pub fn store(&self) -> StoreConfig {
        StoreConfig {
            data_dir: self.data_dir.clone(),
            cache_bytes: self.cache_mb * 1024 * 1024,
            fsync: self.fsync,
            segment_bytes: self.segment_bytes,
            max_commit_batch: self.commit_batch as usize,
            retention: Retention {
                count: self.events_retention_count,
                max_age_ms: i64::try_from(self.events_retention_secs.saturating_mul(1000))
                    .unwrap_or(i64::MAX),
            },
            history: HistoryRetention {
                per_id: self.history_per_id,
                max_age_ms: i64::try_from(self.history_retention_secs.saturating_mul(1000))
                    .unwrap_or(i64::MAX),
            },
            idempotency_retention_ms: i64::try_from(self.idempotency_retention.as_millis())
                .unwrap_or(i64::MAX),
            feed_buffer: 1024,
            metrics: std::sync::Arc::default(),
            new_policy: crate::policy::Policy::default(),
            policy: self.policy_overrides(),
            ..StoreConfig::new(self.data_dir.clone())
        }
    }

    /// What the guardrail flags change in the stored policy.
    pub fn policy_overrides(&self) -> Overrides {
        self.guardrails.overrides()
    }

    pub fn sweep_interval(&self) -> Duration {
        Duration::from_millis(self.sweep_interval_ms)
    }

    pub fn reclaim(&self) -> crate::sweeper::Reclaim {
        crate::sweeper::Reclaim {
            idle: Duration::from_millis(self.reclaim_idle_ms),
            min_rate: self.reclaim_min_rate,
        }
    }

    pub fn events_heartbeat(&self) -> Duration {
        Duration::from_secs(self.events_heartbeat_secs)
    }

    pub fn header_timeout(&self) -> Duration {
        Duration::from_millis(self.header_timeout_ms)
    }

    pub fn body_timeout(&self) -> Duration {
        Duration::from_millis(self.body_timeout_ms)
    }

    pub fn shutdown_timeout(&self) -> Duration {
        Duration::from_secs(self.shutdown_timeout)
    }
}

/// A guardrail flag's value: a number, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting<T> {
    Off,
    Set(T),
}

impl<T> Setting<T> {
    fn get(self) -> Option<T> {
        match self {
            Setting::Off => None,
            Setting::Set(v) => Some(v),
        }
    }
}

fn setting<T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy>(
    s: &str,
    min: T,
    max: T,
) -> Result<Setting<T>, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(Setting::Off);
    }
    match s.parse::<T>() {
        Ok(v) if v >= min && v <= max => Ok(Setting::Set(v)),
        _ => Err(format!(
            "must be `off` or a whole number from {min} to {max}"
        )),
    }
}

fn percent(s: &str) -> Result<Setting<u8>, String> {
    setting(s, 0, 100)
}

fn count(s: &str) -> Result<Setting<u64>, String> {
    setting(s, 0, u64::MAX)
}

fn per_minute(s: &str) -> Result<Setting<u32>, String> {
    setting(s, 1, u32::MAX)
}

fn secs(s: &str) -> Result<Setting<u64>, String> {
    setting(s, 1, u64::MAX)
}

/// Whether permanent blocks are allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Permanent {
    Allowed,
    Forbidden,
}

/// The guardrail flags (see [`Config::guardrails`]).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Guardrails (each replaces its field of the stored policy)")]
pub struct GuardrailFlags {
    /// At most this percentage of the registered nodes blocked at once (default 50); past
    /// it an add gets 429. Applies with at least --min-registered registered nodes.
    #[arg(long, env = "BLOCKLISTD_MAX_BLOCKED_NODES_PERCENT", value_name = "PERCENT|off",
          value_parser = percent)]
    pub max_blocked_nodes_percent: Option<Setting<u8>>,

    /// At most this percentage of the registered nodes evacuating at once (default 20).
    #[arg(long, env = "BLOCKLISTD_MAX_EVACUATING_NODES_PERCENT", value_name = "PERCENT|off",
          value_parser = percent)]
    pub max_evacuating_nodes_percent: Option<Setting<u8>>,

    /// At most this percentage of the registered task managers effectively blocked (by
    /// their own item or their node's) at once (default 50).
    #[arg(long, env = "BLOCKLISTD_MAX_BLOCKED_TASKMANAGERS_PERCENT",
          value_name = "PERCENT|off", value_parser = percent)]
    pub max_blocked_taskmanagers_percent: Option<Setting<u8>>,

    /// At most this percentage of the registered task managers evacuating at once
    /// (default off).
    #[arg(long, env = "BLOCKLISTD_MAX_EVACUATING_TASKMANAGERS_PERCENT",
          value_name = "PERCENT|off", value_parser = percent)]
    pub max_evacuating_taskmanagers_percent: Option<Setting<u8>>,

    /// The share caps of a kind apply only with at least this many of its ids registered
    /// (default 10).
    #[arg(long, env = "BLOCKLISTD_MIN_REGISTERED", value_name = "COUNT")]
    pub min_registered: Option<u64>,

    /// At most this many node items, registered or not (default off).
    #[arg(long, env = "BLOCKLISTD_MAX_BLOCKED_NODES", value_name = "COUNT|off",
          value_parser = count)]
    pub max_blocked_nodes: Option<Setting<u64>>,

    /// At most this many task manager items (default off).
    #[arg(long, env = "BLOCKLISTD_MAX_BLOCKED_TASKMANAGERS", value_name = "COUNT|off",
          value_parser = count)]
    pub max_blocked_taskmanagers: Option<Setting<u64>>,

    /// At most this many new node evacuations (`MARK_BLOCKED_AND_EVACUATE_TASKS`: a new
    /// item, or a merge that raises one) per minute, after a burst of
    /// --node-evacuation-burst; more get 429 with Retry-After (default off).
    #[arg(long, env = "BLOCKLISTD_NODE_EVACUATIONS_PER_MINUTE", value_name = "RATE|off",
          value_parser = per_minute)]
    pub node_evacuations_per_minute: Option<Setting<u32>>,

    /// How many node evacuations may come at once before the rate applies (default: the
    /// stored burst, or a minute's worth for a rate not stored yet).
    #[arg(long, env = "BLOCKLISTD_NODE_EVACUATION_BURST", value_name = "COUNT",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub node_evacuation_burst: Option<u32>,

    /// At most this many new task manager evacuations per minute, after a burst of
    /// --taskmanager-evacuation-burst (default off).
    #[arg(long, env = "BLOCKLISTD_TASKMANAGER_EVACUATIONS_PER_MINUTE",
          value_name = "RATE|off", value_parser = per_minute)]
    pub taskmanager_evacuations_per_minute: Option<Setting<u32>>,

    /// How many task manager evacuations may come at once before the rate applies
    /// (default: the stored burst, or a minute's worth for a rate not stored yet).
    #[arg(long, env = "BLOCKLISTD_TASKMANAGER_EVACUATION_BURST", value_name = "COUNT",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub taskmanager_evacuation_burst: Option<u32>,

    /// No block may last longer than this from its request, in seconds; a longer one gets
    /// 422 (default off).
    #[arg(long, env = "BLOCKLISTD_MAX_BLOCK_DURATION_SECS", value_name = "SECS|off",
          value_parser = secs)]
    pub max_block_duration_secs: Option<Setting<u64>>,

    /// Whether a block may be permanent (no timeout, no endTimestamp); a forbidden one
    /// gets 422 (default allowed).
    #[arg(long, env = "BLOCKLISTD_PERMANENT_BLOCKS", value_enum)]
    pub permanent_blocks: Option<Permanent>,
}

impl GuardrailFlags {
    fn overrides(&self) -> Overrides {
        fn by_kind<T>(tm: Option<T>, node: Option<T>) -> [Option<T>; 2] {
            let mut pair = [None, None];
            pair[slot(Kind::TaskManager)] = tm;
            pair[slot(Kind::Node)] = node;
            pair
        }
        Overrides {
            max_blocked_percent: by_kind(
                self.max_blocked_taskmanagers_percent.map(Setting::get),
                self.max_blocked_nodes_percent.map(Setting::get),
            ),
            max_evacuating_percent: by_kind(
                self.max_evacuating_taskmanagers_percent.map(Setting::get),
                self.max_evacuating_nodes_percent.map(Setting::get),
            ),
            max_blocked: by_kind(
                self.max_blocked_taskmanagers.map(Setting::get),
                self.max_blocked_nodes.map(Setting::get),
            ),
            evacuations_per_minute: by_kind(
                self.taskmanager_evacuations_per_minute.map(Setting::get),
                self.node_evacuations_per_minute.map(Setting::get),
            ),
            evacuation_burst: by_kind(
                self.taskmanager_evacuation_burst,
                self.node_evacuation_burst,
            ),
            min_registered: self.min_registered,
            max_block_duration_secs: self.max_block_duration_secs.map(Setting::get),
            permanent_blocks_allowed: self.permanent_blocks.map(|p| p == Permanent::Allowed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retentions_as_people_write_them() {
        assert_eq!(parse_retention("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_retention(" 1h 30m "), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse_retention("1s"), Ok(Duration::from_secs(1)));
        assert!(parse_retention("500ms").is_err());
        assert!(parse_retention("0s").is_err());
        assert!(parse_retention("forever").is_err());
    }

    #[test]
    fn origins_as_browsers_send_them() {
        assert_eq!(
            parse_origin("https://Console.Example.com"),
            Ok("https://console.example.com".into())
        );
        assert_eq!(
            parse_origin("http://127.0.0.1:8080"),
            Ok("http://127.0.0.1:8080".into())
        );
        assert_eq!(
            parse_origin("https://example.com:443"),
            Ok("https://example.com".into())
        );
        assert_eq!(parse_origin("http://[::1]:80"), Ok("http://[::1]".into()));
        for bad in [
            "*",
            "null",
            "console.example.com",
            "ftp://example.com",
            "https://example.com/",
            "https://example.com/ui",
            "https://user@example.com",
            "https://example.com?x=1",
            "https://example.com#top",
        ] {
            assert!(parse_origin(bad).is_err(), "{bad}");
        }
    }
}
