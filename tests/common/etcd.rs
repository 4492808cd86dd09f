//! An etcd cluster of the tests' own: Debian's `etcd` (etcd-server) on private loopback
//! ports and directories, each member killed and restarted at will; optionally serving its
//! clients over TLS only, with client certificates required.

use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use super::{available, Ca, DEADLINE};

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
    assert!(
        super::runs("etcd", "--version"),
        "BLOCKLISTD_TEST_STORE=etcd, and etcd is not installed (Debian: etcd-server)"
    );
    EtcdCluster::launch(1, &[], true, false)
});

/// Whether etcd is installed; if not, `test` is skipped or fails by the skip-or-fail rule.
fn installed(test: &str) -> bool {
    let installed = super::runs("etcd", "--version");
    available(
        "etcd is not installed (Debian: etcd-server)",
        installed,
        test,
    )
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
        installed(test).then(|| EtcdCluster::launch(size, extra, false, false))
    }

    /// [`EtcdCluster::start`], the members serving clients over TLS only
    /// (`--client-cert-auth`: a client must present a certificate of the cluster's CA).
    pub fn start_tls(size: usize, test: &str) -> Option<EtcdCluster> {
        installed(test).then(|| EtcdCluster::launch(size, &[], false, true))
    }

    fn launch(size: usize, extra: &[&str], shared: bool, tls: bool) -> EtcdCluster {
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
                client: format!("{scheme}://127.0.0.1:{}", free_port()),
                peer: format!("http://127.0.0.1:{}", free_port()),
                child: None,
                lifeline: None,
            })
            .collect();
        let mut cluster = EtcdCluster {
            dir,
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
                .arg(r#"etcd "$@" & e=$!; read -r _; kill -9 $e; wait $e; rm -rf "$0""#)
                .arg(self.dir.path())
                .stdin(Stdio::piped());
            sh
        } else {
            let mut etcd = Command::new("etcd");
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
        let mut command = Command::new("etcdctl");
        command.env("ETCDCTL_API", "3").args([
            "--endpoints",
            endpoints,
            "--command-timeout",
            timeout,
        ]);
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
        let start = Instant::now();
        for member in &self.members {
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
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        self.kill_all();
    }
}
