//! Child server processes the bench starts and owns: `blocklistd` itself and the bench's own
//! HTTP ceiling server. Both announce `listening on ADDR` as their first stdout line.
//! Every child is killed (SIGKILL) when its handle drops, so no run leaves one behind.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a server may take to print its address before the bench gives up on it.
const START_DEADLINE: Duration = Duration::from_secs(120);

pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    /// When the process was spawned, for readiness timing.
    pub spawned: Instant,
    /// When its `listening on` line arrived.
    pub listening: Instant,
    pub log: PathBuf,
}

impl Server {
    /// Spawns `command` with stderr to `log`, and waits for its address on stdout.
    pub fn spawn(mut command: Command, log: &Path) -> Result<Server, String> {
        let stderr = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let spawned = Instant::now();
        let mut child = command
            .stdin(Stdio::piped()) // the ceiling server exits when this closes
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("cannot start {command:?}: {e}"))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = tx.send(lines.next().and_then(Result::ok));
            for _ in lines {} // keep the pipe drained so the child never blocks on it
        });
        let line = match rx.recv_timeout(START_DEADLINE) {
            Ok(Some(line)) => line,
            other => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{command:?} did not report its address ({other:?}); its log:\n{}",
                    tail(log)
                ));
            }
        };
        let listening = Instant::now();
        let addr = line
            .strip_prefix("listening on ")
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| format!("unexpected first line {line:?}"))?;
        Ok(Server {
            child,
            addr,
            spawned,
            listening,
            log: log.to_owned(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How the process ended, if it has: a daemon that dies mid-scenario must be reported,
    /// not just counted as connection errors.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGKILL, as a crash or `kill -9` would, and reap it.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How long a daemon dropped by the bench may take to stop cleanly before it is killed.
const STOP_WITHIN: Duration = Duration::from_secs(5);

impl Drop for Server {
    /// Stops the daemon as an operator does (SIGTERM), so that on etcd it gives the writer
    /// key up and the next daemon the bench starts on the same prefix writes at once
    /// instead of waiting out a dead writer's lease; killed if it takes longer than
    /// [`STOP_WITHIN`]. A scenario that measures a `kill -9` kills the daemon itself.
    fn drop(&mut self) {
        let pid = rustix::process::Pid::from_raw(self.child.id().cast_signed());
        if let Some(pid) = pid {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let stopping = Instant::now();
        while matches!(self.child.try_wait(), Ok(None)) && stopping.elapsed() < STOP_WITHIN {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Its port may go to a plain server next.
        crate::tls::speaks_tls(self.addr, None);
    }
}

/// A peer's server process (redis-server, etcd), killed (SIGKILL) when dropped.
pub struct PeerProcess {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl PeerProcess {
    /// `child`, named `name` in errors, writing its log to `log`.
    pub fn new(name: &'static str, child: Child, log: PathBuf) -> PeerProcess {
        PeerProcess { name, child, log }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Polls `answers` until it says the server answers; fails when the process exits or
    /// `deadline` passes first.
    pub async fn wait_answering<F: std::future::Future<Output = bool>>(
        &mut self,
        deadline: Duration,
        mut answers: impl FnMut() -> F,
    ) -> Result<(), String> {
        let started = Instant::now();
        loop {
            if answers().await {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "{} exited ({status}): {}",
                    self.name,
                    tail(&self.log)
                ));
            }
            if started.elapsed() > deadline {
                return Err(format!("{} did not answer within {deadline:?}", self.name));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free loopback port for a peer's server: bind :0, read it, release it. Another process
/// could take it in between; then the server fails to start and says so.
pub fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("free port: {e}"))
}

/// `name`'s path on PATH, if it is installed.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

/// The last lines of a log, for error messages.
pub fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// How to start `blocklistd` for the bench.
#[derive(Debug, Clone)]
pub struct DaemonSpec {
    pub bin: PathBuf,
    /// Extra flags after the bench's own.
    pub extra: Vec<String>,
    /// Serve TLS with this certificate, and be reached over it.
    pub tls: Option<std::sync::Arc<crate::tls::BenchTls>>,
}

/// The largest body the bench sends: 10,000 items of ~120 bytes fit in 2 MiB, registrations
/// too; 64 MiB leaves room and is what docs/benchmarks.md describes.
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

impl DaemonSpec {
    /// The value of the daemon flag `name` among the extra flags (`--name=value` or
    /// `--name value`).
    fn flag(&self, name: &str) -> Option<&str> {
        let long = format!("--{name}");
        self.extra
            .iter()
            .enumerate()
            .find_map(|(i, arg)| match arg.strip_prefix(&long) {
                Some(rest) => rest.strip_prefix('=').or_else(|| {
                    rest.is_empty()
                        .then(|| self.extra.get(i + 1).map(String::as_str))
                        .flatten()
                }),
                None => None,
            })
    }

    /// Whether the daemons run on etcd (`--store etcd` among the extra flags).
    pub fn on_etcd(&self) -> bool {
        self.flag("store") == Some("etcd")
    }

    /// The writer's lease on etcd, in seconds (`--etcd-lease-secs`, the daemon's default
    /// 10 without it).
    pub fn lease_secs(&self) -> u64 {
        self.flag("etcd-lease-secs")
            .and_then(|s| s.parse().ok())
            .unwrap_or(10)
    }

    /// Starts a daemon on `data_dir` (the daemon's defaults otherwise: fsync on, 64 MiB
    /// cache), logging at `info` to `log`.
    pub fn start(&self, data_dir: &Path, log: &Path) -> Result<Server, String> {
        let mut command = Command::new(&self.bin);
        command
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--max-body-bytes")
            .arg(MAX_BODY_BYTES.to_string())
            .args(&self.extra)
            .args(self.tls.iter().flat_map(|tls| tls.daemon_flags()))
            // The daemon's default level; BLOCKLIST_BENCH_DAEMON_LOG can add more (e.g.
            // `info,blocklistd::store::sync=trace` to see every group commit's size).
            .env(
                "RUST_LOG",
                std::env::var("BLOCKLIST_BENCH_DAEMON_LOG").unwrap_or_else(|_| "info".into()),
            );
        let server = Server::spawn(command, log)?;
        if let Some(tls) = &self.tls {
            tls.register(server.addr);
        }
        Ok(server)
    }
}

/// `blocklistd` next to the bench binary (`target/release/` or `target/debug/`). `cargo run
/// -p blocklist-bench` builds only the bench, so warn when the daemon looks older than its
/// sources.
pub fn find_daemon(explicit: Option<PathBuf>) -> Result<(PathBuf, Option<String>), String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let bin = match explicit {
        Some(bin) => bin,
        None => exe
            .parent()
            .ok_or("the bench binary has no directory")?
            .join("blocklistd"),
    };
    if !bin.is_file() {
        return Err(format!(
            "no daemon binary at {}: build it first with `cargo build --release -p blocklistd` \
             (or pass --daemon PATH)",
            bin.display()
        ));
    }
    // `cargo run -p blocklist-bench` rebuilds only the bench: say so when a daemon source
    // file is newer than the daemon binary (only meaningful in the source tree the bench was
    // built from; the daemon is the workspace's root package, two levels up).
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let newest_source = newest_daemon_source(&workspace);
    let warning = match (modified(&bin), newest_source) {
        (Some(daemon), Some((source, path))) if source > daemon => Some(format!(
            "{} is newer than {}: rebuild with `cargo build --release -p blocklistd`",
            path.display(),
            bin.display()
        )),
        _ => None,
    };
    Ok((bin, warning))
}

/// The most recently modified daemon source (`Cargo.toml`, `src/**`).
fn newest_daemon_source(root: &Path) -> Option<(std::time::SystemTime, PathBuf)> {
    let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
    let mut stack = vec![root.join("src"), root.join("Cargo.toml")];
    while let Some(path) = stack.pop() {
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&path) {
                stack.extend(entries.flatten().map(|e| e.path()));
            }
        } else if let Ok(time) = meta.modified() {
            if newest.as_ref().is_none_or(|(t, _)| time > *t) {
                newest = Some((time, path));
            }
        }
    }
    newest
}
