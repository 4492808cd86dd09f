//! An etcd cluster of the tests' own on private loopback ports and directories, each
//! member killed, restarted or upgraded at will; optionally serving its clients over TLS
//! only, with client certificates required.
//!
//! Which etcd: `BLOCKLISTD_TEST_ETCD` ([`EtcdRelease::chosen`]); by default etcd 3.6,
//! built from the Go module in `tests/servers/etcd-3.6` into `target/servers/`.

use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use super::{available, Ca, DEADLINE};

/// An etcd release the tests run: its server and the etcdctl that drives it.
#[derive(Clone, Debug)]
pub struct EtcdRelease {
    /// What the tests call it: `3.6`, `3.4`, or the path it was given.
    pub name: String,
    etcd: PathBuf,
    etcdctl: PathBuf,
}

/// The release `BLOCKLISTD_TEST_ETCD` chose, resolved (built, if need be) once per test
/// process; the error says what is missing.
static CHOSEN: LazyLock<Result<EtcdRelease, String>> = LazyLock::new(|| {
    let choice = std::env::var("BLOCKLISTD_TEST_ETCD").unwrap_or_default();
    EtcdRelease::named(if choice.is_empty() { "3.6" } else { &choice })
});

impl EtcdRelease {
    /// The release the tests run (`BLOCKLISTD_TEST_ETCD`):
    /// - `3.6` (the default), `3.5`, `3.7`: built from `tests/servers/etcd-<line>` (its
    ///   go.mod pins the patch release) by `tests/servers/build`, once, into `target/`;
    /// - `3.4`: Debian's etcd-server and etcd-client on PATH (3.4.23);
    /// - a path to an `etcd` binary: it, and the `etcdctl` beside it (else on PATH).
    pub fn chosen() -> Result<EtcdRelease, String> {
        CHOSEN.clone()
    }

    /// The release `name` whatever the tests' choice (a test of what differs between
    /// releases), if it is here; if not, `test` is skipped or fails by the skip-or-fail
    /// rule.
    pub fn required(name: &str, test: &str) -> Option<EtcdRelease> {
        here(EtcdRelease::named(name), test)
    }

    /// A release by the names [`EtcdRelease::chosen`] takes.
    pub fn named(name: &str) -> Result<EtcdRelease, String> {
        let release = match name {
            "3.4" => EtcdRelease {
                name: name.into(),
                etcd: "etcd".into(),
                etcdctl: "etcdctl".into(),
            },
            line if line.starts_with("3.") => {
                let dir = super::build_server(&format!("etcd-{line}"))?;
                EtcdRelease {
                    name: line.into(),
                    etcd: dir.join("etcd"),
                    etcdctl: dir.join("etcdctl"),
                }
            }
            path => {
                let etcd = PathBuf::from(path);
                let beside = etcd.with_file_name("etcdctl");
                EtcdRelease {
                    name: path.into(),
                    etcdctl: if beside.exists() {
                        beside
                    } else {
                        "etcdctl".into()
                    },
                    etcd,
                }
            }
        };
        for program in [&release.etcd, &release.etcdctl] {
            if !super::runs(&program.display().to_string(), "version")
                && !super::runs(&program.display().to_string(), "--version")
            {
                return Err(format!(
                    "etcd {name}: {} does not run (3.4: Debian's etcd-server and etcd-client)",
                    program.display()
                ));
            }
        }
        Ok(release)
    }

    /// The version the server reports (`etcd --version`'s first line's last word).
    pub fn version(&self) -> String {
        let output = Command::new(&self.etcd)
            .arg("--version")
            .output()
            .expect("etcd --version");
        let text = String::from_utf8_lossy(&output.stdout);
        let first = text.lines().next().unwrap_or_default();
        first.rsplit(' ').next().unwrap_or_default().to_owned()
    }
}

/// The files of a cluster that serves TLS: its CA, and the client certificate etcdctl and
/// the daemons present.
pub struct EtcdTls {
    pub ca: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// The members' server certificate (127.0.0.1), and its key.
    server: (PathBuf, PathBuf),
}

struct Member {
    name: String,
    /// The release it runs (a rolling upgrade changes it).
    release: EtcdRelease,
    client: String,
    peer: String,
    child: Option<Child>,
    /// The write end of the pipe a shared member's watchdog reads: it closes when the test
    /// process ends, however it ends, and the watchdog kills the member.
    lifeline: Option<ChildStdin>,
}

/// A running cluster; every member is killed on drop.
pub struct EtcdCluster {
    dir: tempfile::TempDir,
    /// The etcdctl the harness drives every member with: that of the release the cluster
    /// started on (etcdctl speaks the same v3 API to every release from 3.4 on).
    etcdctl: PathBuf,
    members: Vec<Member>,
    /// Flags every member gets besides its own.
    extra: Vec<String>,
    /// Lives as long as the test process (never dropped): each member runs under a
    /// watchdog that kills it and removes its directory when the process ends.
    shared: bool,
    pub tls: Option<EtcdTls>,
}

/// The one-member cluster the suites' daemons run on when `BLOCKLISTD_TEST_STORE=etcd`
/// (`super::process`), started on first use and shared by the test process's tests, each
/// daemon under a prefix of its own.
pub static SHARED_ETCD: LazyLock<EtcdCluster> = LazyLock::new(|| {
    let release =
        EtcdRelease::chosen().unwrap_or_else(|why| panic!("BLOCKLISTD_TEST_STORE=etcd, and {why}"));
    EtcdCluster::launch(&release, 1, &[], true, false)
});

/// The release the tests run, if it is here; if not, `test` is skipped or fails by the
/// skip-or-fail rule.
fn installed(test: &str) -> Option<EtcdRelease> {
    here(EtcdRelease::chosen(), test)
}

/// `release` if it is here; if not, `test` is skipped or fails by the skip-or-fail rule.
fn here(release: Result<EtcdRelease, String>, test: &str) -> Option<EtcdRelease> {
    let why = release.as_ref().err().cloned().unwrap_or_default();
    available(&why, release.is_ok(), test).then(|| release.expect("available"))
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

impl EtcdCluster {
    /// Starts `size` members and waits until the cluster takes a write; `None` (after the
    /// skip-or-fail rule) when etcd is not installed.
    pub fn start(size: usize, test: &str) -> Option<EtcdCluster> {
        EtcdCluster::start_with(size, &[], test)
    }

    /// [`EtcdCluster::start`], every member with `extra` flags too.
    pub fn start_with(size: usize, extra: &[&str], test: &str) -> Option<EtcdCluster> {
        installed(test).map(|release| EtcdCluster::launch(&release, size, extra, false, false))
    }

    /// [`EtcdCluster::start`] on `release`, whatever the tests' choice (a rolling upgrade
    /// starts on the release before it).
    pub fn start_release(release: &EtcdRelease, size: usize) -> EtcdCluster {
        EtcdCluster::launch(release, size, &[], false, false)
    }

    /// [`EtcdCluster::start`], the members serving clients over TLS only
    /// (`--client-cert-auth`: a client must present a certificate of the cluster's CA).
    pub fn start_tls(size: usize, test: &str) -> Option<EtcdCluster> {
        installed(test).map(|release| EtcdCluster::launch(&release, size, &[], false, true))
    }

    fn launch(
        release: &EtcdRelease,
        size: usize,
        extra: &[&str],
        shared: bool,
        tls: bool,
    ) -> EtcdCluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let tls = tls.then(|| {
            let ca = Ca::new("etcd test CA");
            let server = ca.server(&["127.0.0.1", "localhost"]);
            let client = ca.client("blocklistd");
            let (client_cert, client_key) = client.write(dir.path(), "etcd-client");
            EtcdTls {
                ca: ca.write(dir.path(), "etcd-ca"),
                client_cert,
                client_key,
                server: server.write(dir.path(), "etcd-server"),
            }
        });
        let scheme = if tls.is_some() { "https" } else { "http" };
        let members = (0..size)
            .map(|i| Member {
                name: format!("m{i}"),
                release: release.clone(),
                client: format!("{scheme}://127.0.0.1:{}", free_port()),
                peer: format!("http://127.0.0.1:{}", free_port()),
                child: None,
                lifeline: None,
            })
            .collect();
        let mut cluster = EtcdCluster {
            dir,
            etcdctl: release.etcdctl.clone(),
            members,
            extra: extra.iter().map(|f| (*f).to_owned()).collect(),
            shared,
            tls,
        };
        for i in 0..size {
            cluster.start_member(i);
        }
        cluster.wait_writable();
        cluster
    }

    fn start_member(&mut self, i: usize) {
        let initial: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer))
            .collect();
        let member = &self.members[i];
        let log = self.dir.path().join(format!("{}.log", member.name));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("log file");
        let mut command = if self.shared {
            // The watchdog: etcd in the background, and when the pipe on stdin closes (the
            // test process ended), its end.
            let mut sh = Command::new("sh");
            sh.arg("-c")
                .arg(r#"e="$1"; shift; "$e" "$@" & e=$!; read -r _; kill -9 $e; wait $e; rm -rf "$0""#)
                .arg(self.dir.path())
                .arg(&member.release.etcd)
                .stdin(Stdio::piped());
            sh
        } else {
            let mut etcd = Command::new(&member.release.etcd);
            etcd.stdin(Stdio::null());
            etcd
        };
        let mut child = command
            .args(["--name", &member.name])
            .arg("--data-dir")
            .arg(self.data_dir(i))
            .args(["--listen-client-urls", &member.client])
            .args(["--advertise-client-urls", &member.client])
            .args(["--listen-peer-urls", &member.peer])
            .args(["--initial-advertise-peer-urls", &member.peer])
            .args(["--initial-cluster", &initial.join(",")])
            .args(["--initial-cluster-state", "new"])
            .args(self.tls_member_flags())
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start etcd");
        self.members[i].lifeline = child.stdin.take();
        self.members[i].child = Some(child);
    }

    /// A member's TLS flags: its certificate, and client certificates required.
    fn tls_member_flags(&self) -> Vec<String> {
        let Some(tls) = &self.tls else {
            return Vec::new();
        };
        let path = |p: &PathBuf| p.display().to_string();
        vec![
            "--cert-file".into(),
            path(&tls.server.0),
            "--key-file".into(),
            path(&tls.server.1),
            "--trusted-ca-file".into(),
            path(&tls.ca),
            "--client-cert-auth".into(),
        ]
    }

    /// etcdctl (API 3) against `endpoints`, with the cluster's client certificate if it
    /// serves TLS, each call within `timeout`.
    fn etcdctl_to(&self, endpoints: &str, timeout: &str) -> Command {
        let mut command = Command::new(&self.etcdctl);
        command.args(["--endpoints", endpoints, "--command-timeout", timeout]);
        if let Some(tls) = &self.tls {
            command
                .arg("--cacert")
                .arg(&tls.ca)
                .arg("--cert")
                .arg(&tls.client_cert)
                .arg("--key")
                .arg(&tls.client_key);
        }
        command
    }

    fn data_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(&self.members[i].name)
    }

    /// The flags of a daemon (or an offline tool) on this cluster, under `prefix`, whose
    /// writer key lives `lease_secs`, each call to etcd within `timeout_ms`.
    pub fn daemon_flags(&self, prefix: &str, lease_secs: u64, timeout_ms: u64) -> Vec<String> {
        let lease = lease_secs.to_string();
        let timeout = timeout_ms.to_string();
        let mut flags = [
            "--store",
            "etcd",
            "--etcd-endpoints",
            &self.endpoints(),
            "--etcd-prefix",
            prefix,
            "--etcd-lease-secs",
            &lease,
            "--etcd-timeout-ms",
            &timeout,
        ]
        .map(str::to_owned)
        .to_vec();
        if let Some(tls) = &self.tls {
            for (flag, path) in [
                ("--etcd-cacert", &tls.ca),
                ("--etcd-cert", &tls.client_cert),
                ("--etcd-key", &tls.client_key),
            ] {
                flags.extend([flag.to_owned(), path.display().to_string()]);
            }
        }
        flags
    }

    /// The client URLs, as `--etcd-endpoints` takes them.
    pub fn endpoints(&self) -> String {
        let urls: Vec<&str> = self.members.iter().map(|m| m.client.as_str()).collect();
        urls.join(",")
    }

    /// `etcdctl` against the cluster: its stdout, or a panic with its stderr.
    pub fn etcdctl(&self, args: &[&str]) -> String {
        let output = self
            .etcdctl_to(&self.endpoints(), "3s")
            .args(args)
            .output()
            .expect("run etcdctl");
        assert!(
            output.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Waits until a write through `etcdctl` succeeds.
    pub fn wait_writable(&self) {
        let start = Instant::now();
        loop {
            let ok = self
                .etcdctl_to(&self.endpoints(), "1s")
                .args(["put", "/harness/ready", "yes"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return;
            }
            assert!(start.elapsed() < DEADLINE, "etcd did not become writable");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGKILL of member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `i` again on its data dir (it rejoins the cluster by itself).
    pub fn restart(&mut self, i: usize) {
        if self.members[i].child.is_none() {
            self.start_member(i);
        }
    }

    /// Stops member `i` as an operator does (SIGTERM: it hands its raft leadership over
    /// first), waiting until it has exited.
    pub fn stop(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let pid = child.id().to_string();
            let _ = Command::new("kill").args(["-TERM", &pid]).status();
            let start = Instant::now();
            while child.try_wait().ok().flatten().is_none() {
                if start.elapsed() > DEADLINE {
                    let _ = child.kill();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// One step of a rolling upgrade: member `i` stopped, then started on `release`, on
    /// the same data dir; waits until it answers healthy again.
    pub fn upgrade(&mut self, i: usize, release: &EtcdRelease) {
        self.stop(i);
        self.start_on(i, release);
    }

    /// Starts the stopped member `i` on `release`, on its data dir; waits until it answers
    /// healthy.
    pub fn start_on(&mut self, i: usize, release: &EtcdRelease) {
        assert!(self.members[i].child.is_none(), "m{i} runs");
        self.members[i].release = release.clone();
        self.start_member(i);
        self.wait_healthy(i);
    }

    /// The version member `i` reports (`etcdctl endpoint status`), if it answers.
    pub fn member_version(&self, i: usize) -> Option<String> {
        let output = self
            .etcdctl_to(&self.members[i].client, "1s")
            .args(["endpoint", "status", "-w", "json"])
            .output()
            .ok()?;
        let status: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
        status[0]["Status"]["version"].as_str().map(str::to_owned)
    }

    /// Waits until member `i` answers `endpoint health` as healthy.
    pub fn wait_healthy(&self, i: usize) {
        let member = &self.members[i];
        let start = Instant::now();
        while !self
            .etcdctl_to(&member.client, "1s")
            .args(["endpoint", "health"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            assert!(
                start.elapsed() < DEADLINE,
                "{} did not become healthy",
                member.name
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Which running member is the raft leader, as the members themselves say; `None`
    /// while none answers with one (an election).
    pub fn leader(&self) -> Option<usize> {
        let mut ids = Vec::new();
        let mut leader = None;
        for member in self.members.iter().filter(|m| m.child.is_some()) {
            let output = self
                .etcdctl_to(&member.client, "1s")
                .args(["endpoint", "status", "-w", "json"])
                .output()
                .ok()?;
            let status: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
            let status = &status[0]["Status"];
            ids.push(status["header"]["member_id"].as_u64()?);
            leader = leader.or(status["leader"].as_u64());
        }
        let leader = leader?;
        let i = ids.iter().position(|&id| id == leader)?;
        self.members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.child.is_some())
            .nth(i)
            .map(|(n, _)| n)
    }

    /// SIGKILL of every member.
    pub fn kill_all(&mut self) {
        for member in &mut self.members {
            if let Some(mut child) = member.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    /// Starts every member again on its data dir, and waits until the cluster takes writes
    /// and every member answers as healthy (a member still rejoining is a second failure
    /// for the next test step).
    pub fn restart_all(&mut self) {
        for i in 0..self.members.len() {
            if self.members[i].child.is_none() {
                self.start_member(i);
            }
        }
        self.wait_writable();
        for i in 0..self.members.len() {
            self.wait_healthy(i);
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        self.kill_all();
    }
}
