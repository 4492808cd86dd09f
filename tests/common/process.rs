//! Process control: the daemon binary started on `127.0.0.1:0` with a temporary data dir,
//! stopped by SIGKILL or SIGTERM, and run to completion for its offline subcommands.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, LazyLock};
use std::time::{Duration, Instant};

use super::{raw_request, DEADLINE};

/// The daemon binary. Cargo names it to the daemon package's own tests; the tests of another
/// workspace member (the CLI) find it in the same target directory, where the workspace's
/// test command (`cargo test --workspace`) builds it.
pub static BIN: LazyLock<PathBuf> =
    LazyLock::new(|| workspace_binary("blocklistd", option_env!("CARGO_BIN_EXE_blocklistd")));

/// A binary of the workspace: `cargo_env` (Cargo's `CARGO_BIN_EXE_<name>`, set for the tests
/// of the binary's own package), else `name` beside this test executable's directory
/// (`target/<profile>/`), where `cargo test --workspace` builds every member's binaries.
pub fn workspace_binary(name: &str, cargo_env: Option<&str>) -> PathBuf {
    if let Some(bin) = cargo_env {
        return PathBuf::from(bin);
    }
    // A test executable lives in `target/<profile>/deps/`; the binaries one level up.
    let exe = std::env::current_exe().expect("current_exe");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps")
        .join(name);
    assert!(
        bin.is_file(),
        "no {name} binary at {}: build it with `cargo build -p {name}` \
         (`cargo test --workspace` does)",
        bin.display()
    );
    bin
}

/// Whether the suites' daemons run on etcd (`BLOCKLISTD_TEST_STORE=etcd`; else on sled).
pub fn on_etcd() -> bool {
    std::env::var("BLOCKLISTD_TEST_STORE").is_ok_and(|store| store == "etcd")
}

/// Ends the calling test at once, with a line saying why, when the suites run on etcd:
/// for a test of what only the sled store has (its files, its offline commands).
#[must_use]
pub fn skip_on_etcd(why: &str) -> bool {
    if on_etcd() {
        eprintln!("on sled only: {why}");
    }
    on_etcd()
}

/// The flags that put a daemon on the shared etcd member, under a prefix of its data
/// dir's own: a restart on the same data dir finds what it wrote.
pub fn store_flags(data_dir: &Path) -> Vec<String> {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(data_dir);
    vec![
        "--store".into(),
        "etcd".into(),
        "--etcd-endpoints".into(),
        super::SHARED_ETCD.endpoints(),
        "--etcd-prefix".into(),
        format!("/suite/{hash:016x}/"),
        // etcd's shortest: a restarted daemon waits this long for its killed
        // predecessor's key.
        "--etcd-lease-secs".into(),
        "2".into(),
    ]
}

/// A running daemon. Killed (SIGKILL) on drop.
pub struct Daemon {
    child: Child,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    pub client: reqwest::Client,
    /// For streams, which live as long as the test needs them: no overall timeout.
    pub streams: reqwest::Client,
    /// `http`, or `https` for a daemon serving TLS ([`Daemon::over_https`]).
    scheme: &'static str,
}

/// A temporary directory holding a data dir and the daemons' logs.
pub struct Workspace {
    pub tmp: tempfile::TempDir,
    runs: usize,
}

impl Workspace {
    pub fn new() -> Workspace {
        Workspace {
            tmp: tempfile::tempdir().expect("temp dir"),
            runs: 0,
        }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.tmp.path().join("data")
    }

    /// Starts a daemon on this workspace's data dir.
    pub fn start(&mut self, extra: &[&str]) -> Daemon {
        self.runs += 1;
        let log = self.tmp.path().join(format!("daemon-{}.log", self.runs));
        Daemon::start(&self.data_dir(), &log, extra)
    }
}

/// A daemon started and not yet listening.
pub struct Starting {
    /// Taken when it listens (`None` only then): dropped before that, it is killed.
    child: Option<Child>,
    first_line: mpsc::Receiver<Option<String>>,
    data_dir: PathBuf,
    log: PathBuf,
}

impl Starting {
    /// The daemon, once it said where it listens; `None` if it has not within `timeout`.
    pub fn listening_within(mut self, timeout: Duration) -> Result<Daemon, Starting> {
        let line = match self.first_line.recv_timeout(timeout) {
            Ok(Some(line)) => line,
            Err(mpsc::RecvTimeoutError::Timeout) => return Err(self),
            other => panic!(
                "blocklistd did not report its address ({other:?}); log:\n{}",
                self.log_text()
            ),
        };
        let addr = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .parse()
            .expect("an address");
        Ok(Daemon {
            child: self.child.take().expect("taken once"),
            addr,
            data_dir: self.data_dir.clone(),
            log: self.log.clone(),
            client: reqwest::Client::builder()
                .timeout(DEADLINE)
                .build()
                .expect("client"),
            streams: reqwest::Client::new(),
            scheme: "http",
        })
    }

    /// The daemon, once listening; panics with its log if it is not within [`DEADLINE`].
    pub fn listening(self) -> Daemon {
        match self.listening_within(DEADLINE) {
            Ok(daemon) => daemon,
            Err(starting) => panic!(
                "blocklistd did not report its address in time; log:\n{}",
                starting.log_text()
            ),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Daemon {
    pub fn start(data_dir: &Path, log: &Path, extra: &[&str]) -> Daemon {
        let daemon = Daemon::spawn(data_dir, log, extra).listening();
        if on_etcd() && !extra.contains(&"--store") {
            daemon.until_writer();
        }
        daemon
    }

    /// On etcd, a daemon restarted after a `kill -9` serves as a replica until its killed
    /// predecessor's lease ends (reads of the stored state, writes waiting for a writer),
    /// and applies its flags' policy when it becomes the writer: a suite's test, written for
    /// one daemon per data dir, talks to it once it is the writer — waiting at most the
    /// lease and a few seconds, so a test of a daemon that never writes goes on.
    fn until_writer(&self) {
        let until = Instant::now() + Duration::from_secs(6);
        while Instant::now() < until {
            let (status, body) = raw_request(self.addr, "GET", "/readyz", "", b"");
            if status == reqwest::StatusCode::OK && body["etcd"] == "writer" {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts a daemon without waiting for it to listen.
    pub fn spawn(data_dir: &Path, log: &Path, extra: &[&str]) -> Starting {
        let mut command = Command::new(&*BIN);
        if on_etcd() && !extra.contains(&"--store") {
            command.args(store_flags(data_dir));
        }
        if !extra.contains(&"--listen") {
            command.arg("--listen").arg("127.0.0.1:0");
        }
        // Logs at info, unless the test asks for a level (RUST_LOG would override the flag).
        if extra.contains(&"--log-level") {
            command.env_remove("RUST_LOG");
        } else {
            command.env("RUST_LOG", "info");
        }
        let mut child = command
            .arg("--data-dir")
            .arg(data_dir)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).expect("log file"))
            .spawn()
            .expect("start blocklistd");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, first_line) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next().and_then(Result::ok);
            let _ = tx.send(first);
            for _ in lines {} // keep the pipe drained
        });
        Starting {
            child: Some(child),
            first_line,
            data_dir: data_dir.to_owned(),
            log: log.to_owned(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.addr)
    }

    /// The daemon serving TLS (`--tls-cert`): every helper's request goes over https with
    /// `client`, and every stream with `streams`.
    pub fn over_https(mut self, client: reqwest::Client, streams: reqwest::Client) -> Daemon {
        self.scheme = "https";
        self.client = client;
        self.streams = streams;
        self
    }

    /// SIGKILL, as a crash or `kill -9` would.
    pub fn kill9(mut self) {
        self.child.kill().expect("kill -9");
        self.child.wait().expect("wait");
    }

    /// SIGTERM, then waits for the exit. A graceful stop must not panic in any thread (a
    /// panic off the main thread would not change the exit status).
    pub fn terminate(mut self) -> ExitStatus {
        let pid = self.child.id().to_string();
        let status = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill -TERM");
        assert!(status.success());
        let exit = wait_exit(&mut self.child);
        let log = self.log_text();
        assert!(!log.contains("panicked"), "a thread panicked:\n{log}");
        exit
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_exit(child: &mut Child) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the daemon did not exit in time"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs the binary (an offline subcommand) to completion and returns what it printed. On
/// etcd (`BLOCKLISTD_TEST_STORE`) it works on the prefix of the data dir it is given.
pub fn blocklistd(args: &[&std::ffi::OsStr]) -> std::process::Output {
    let mut command = Command::new(&*BIN);
    let data_dir = args
        .iter()
        .position(|a| *a == "--data-dir")
        .and_then(|i| args.get(i + 1));
    if let Some(dir) = data_dir.filter(|_| on_etcd() && !args.iter().any(|a| *a == "--store")) {
        command.args(store_flags(Path::new(dir)));
    }
    command.args(args).output().expect("run blocklistd")
}

/// `blocklistd import --data-dir data_dir file` (merging), which must succeed.
pub fn import_into(data_dir: &Path, file: &Path) {
    let out = blocklistd(&[
        "import".as_ref(),
        "--data-dir".as_ref(),
        data_dir.as_os_str(),
        file.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs the binary to completion with these arguments; returns status and stderr.
pub fn run_to_exit(args: &[&std::ffi::OsStr]) -> (ExitStatus, String) {
    let mut child = Command::new(&*BIN)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start blocklistd");
    let status = wait_exit(&mut child);
    let mut stderr = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    (status, stderr)
}

/// Runs `blocklistd check` on a stopped daemon's data dir and asserts that it passes.
pub fn assert_check_passes(dir: &Path) {
    let out = blocklistd(&["--data-dir".as_ref(), dir.as_os_str(), "check".as_ref()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("ok: every invariant holds"), "{stdout}");
}

/// Starts the daemon on `dir` expecting it to refuse; returns what it printed on stderr.
pub fn refused_start(dir: &Path) -> String {
    let args = [
        "--listen".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--data-dir".as_ref(),
        dir.as_os_str(),
    ];
    let (status, stderr) = run_to_exit(&args);
    assert!(!status.success(), "the daemon started on {}", dir.display());
    stderr
}

/// Sends `signal` (as `kill` takes it: `-STOP`, `-CONT`) to process `pid`.
pub fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill {signal} {pid}");
}
