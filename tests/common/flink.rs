//! A real Flink 2.3 cluster (the harness built from `tests/servers/flink-2.3` by Maven: a
//! `JobManager` and task managers of chosen ids in one JVM, driven over its stdin), and the
//! Flink watcher (`blocklist-flink`) run as a process: the watcher's tests, and the loop
//! through the Kubernetes bridge.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{mpsc, LazyLock};
use std::time::Duration;

use super::{available, build_server, runs, workspace_binary, Daemon, Sidecar, DEADLINE};

/// The watcher's binary: Cargo names it to its own package's tests; another member's
/// tests (the bridge's loop) find it beside them, where `cargo test --workspace` builds it.
static WATCHER: LazyLock<PathBuf> = LazyLock::new(|| {
    workspace_binary(
        "blocklist-flink",
        option_env!("CARGO_BIN_EXE_blocklist-flink"),
    )
});

/// How long a Flink cluster may take to start (a JVM, a `JobManager`, four task managers).
const FLINK_START: Duration = Duration::from_secs(90);

/// The harness's directory (`harness.jar`, `lib/`, `plugins/`), built if needed; `None`
/// (after the skip-or-fail rule) without Java or Maven.
pub fn flink_harness(test: &str) -> Option<PathBuf> {
    let tools = runs("java", "-version") && runs("mvn", "-v");
    if !available(
        "java and mvn are not installed (Debian: default-jdk-headless maven)",
        tools,
        test,
    ) {
        return None;
    }
    Some(build_server("flink-2.3").unwrap_or_else(|e| panic!("{e}")))
}

/// A running Flink cluster, stopped (SIGKILL) on drop.
pub struct Flink {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    pub port: u16,
    pub dir: PathBuf,
    pub log: PathBuf,
}

pub struct FlinkSpec<'a> {
    pub task_managers: &'a [&'a str],
    /// Load the `FailureEnricher` that labels failures `type=System` (an `IOException`) or
    /// `type=User` (anything else).
    pub enricher: bool,
    /// The REST port: 0 for a free one.
    pub port: u16,
}

impl FlinkSpec<'static> {
    /// Four task managers, `tm-1` to `tm-4`, REST on a free port.
    pub fn four(enricher: bool) -> FlinkSpec<'static> {
        FlinkSpec {
            task_managers: &["tm-1", "tm-2", "tm-3", "tm-4"],
            enricher,
            port: 0,
        }
    }
}

impl Flink {
    pub fn start(harness: &Path, dir: &Path, spec: &FlinkSpec) -> Flink {
        std::fs::create_dir_all(dir).unwrap();
        let log = dir.join(format!("flink-{}.log", std::process::id()));
        let mut command = Command::new("java");
        command
            .arg(format!("-Djava.io.tmpdir={}", dir.display()))
            .arg("-Xmx768m")
            .arg("-jar")
            .arg(harness.join("harness.jar"))
            .args(["--rest-port", &spec.port.to_string()])
            .args(["--taskmanagers", &spec.task_managers.join(",")])
            .args(["--slots", "4"])
            .arg("--dir")
            .arg(dir);
        if spec.enricher {
            command.arg("--plugins").arg(harness.join("plugins"));
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start the Flink harness");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut flink = Flink {
            child,
            stdin,
            lines,
            port: 0,
            dir: dir.to_owned(),
            log,
        };
        let ready = flink.answer(FLINK_START);
        flink.port = ready
            .strip_prefix("READY ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("the harness said {ready:?}\n{}", flink.log_text()));
        flink
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn answer(&self, within: Duration) -> String {
        self.lines
            .recv_timeout(within)
            .unwrap_or_else(|e| panic!("the harness did not answer ({e}):\n{}", self.log_text()))
    }

    /// Submits a job of `parallelism` whose subtasks on `fail_on` (task manager ids, `*`
    /// for all, none for none) throw `exception` `times` times each, `delay_ms` after they
    /// start: its job id.
    pub fn submit(
        &mut self,
        name: &str,
        parallelism: u32,
        fail_on: &[&str],
        exception: &str,
        times: u32,
    ) -> String {
        let fail_on = if fail_on.is_empty() {
            "-".to_owned()
        } else {
            fail_on.join(",")
        };
        writeln!(
            self.stdin,
            "submit {name} {parallelism} {fail_on} {exception} {times} 300"
        )
        .unwrap();
        self.stdin.flush().unwrap();
        let answer = self.answer(Duration::from_secs(60));
        let prefix = format!("JOB {name} ");
        answer
            .strip_prefix(&prefix)
            .unwrap_or_else(|| panic!("submit {name}: {answer}\n{}", self.log_text()))
            .trim()
            .to_owned()
    }

    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Flink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The watcher: a [`Sidecar`].
pub type Watcher = Sidecar;

impl Sidecar {
    /// `blocklist-flink` following `flink` (named `test`) for `daemon` (unless `extra` names
    /// the daemons), polling every 200 ms.
    pub fn start(dir: &Path, flink: &str, daemon: &Daemon, extra: &[&str]) -> Watcher {
        let mut args = vec!["--flink".to_owned(), format!("test={flink}")];
        if !extra.contains(&"--daemon") {
            args.extend(["--daemon".to_owned(), daemon.url("")]);
        }
        args.extend(["--listen", "127.0.0.1:0", "--poll", "200ms"].map(str::to_owned));
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        Sidecar::spawn(
            &WATCHER,
            dir,
            "watcher",
            &args,
            "info,blocklist_flink=debug",
        )
    }
}
