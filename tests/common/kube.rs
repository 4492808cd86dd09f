//! A real kube-apiserver of the tests' own (Kubernetes 1.37, built from the Go module in
//! `tests/servers/kube-1.37` by `tests/servers/build`), on an etcd member of its own, on a
//! private loopback port: no kubelet, no scheduler, no controllers — what the bridge
//! reads and writes is the API server's, with its real semantics (resource versions,
//! conflicts, atomic lists, watches, RBAC).
//!
//! It serves https with a certificate of a CA made for it ([`KubeApiServer::ca`]) and
//! knows callers by bearer token (`--token-auth-file`): [`ADMIN_TOKEN`] is in
//! `system:masters`; authorization is RBAC, so a caller with a token of its own has only
//! the rights the test grants it. [`KubeApiServer::kubeconfig_of`] gives administrators of
//! their own names, so its audit log ([`KubeApiServer::audit`], every write and who made
//! it) tells two bridges apart.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{available, Ca, EtcdCluster, EtcdRelease, DEADLINE};

/// The administrator's bearer token (group `system:masters`).
pub const ADMIN_TOKEN: &str = "blocklistd-test-admin";

/// The bearer token of the bridge's service account, `blocklist:blocklistd-kube` (the chart's
/// name for it as the tests render it): it has the rights RBAC grants that account, and no
/// others.
pub const BRIDGE_TOKEN: &str = "blocklistd-test-bridge";

/// Administrators of their own names (in `system:masters`), one bearer token each:
/// `blocklistd-test-<name>`.
pub const NAMED_ADMINS: [&str; 3] = ["bridge-a", "bridge-b", "bridge-c"];

/// The audit policy: every write, at the level of its metadata (who, what, the answer),
/// once it was answered.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived, ResponseStarted]\nrules:\n- level: Metadata\n  verbs: [create, update, patch, delete, deletecollection]\n- level: None\n";

/// A running API server and its etcd; killed on drop.
pub struct KubeApiServer {
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// The CA of its serving certificate, and that CA's file.
    pub ca: Ca,
    pub ca_file: PathBuf,
    etcd: EtcdCluster,
    port: u16,
    bin: PathBuf,
}

impl KubeApiServer {
    /// Starts one (building it first if need be) and waits until it is ready; `None`
    /// (after the skip-or-fail rule) when it cannot be built here.
    pub fn start(test: &str) -> Option<KubeApiServer> {
        let bin = match super::build_server("kube-1.37") {
            Ok(dir) => Some(dir.join("kube-apiserver")),
            Err(why) => {
                available(&why, false, test);
                None
            }
        }?;
        let release = EtcdRelease::required("3.6", test)?;
        let etcd = EtcdCluster::start_release(&release, 1);
        let dir = tempfile::tempdir().expect("temp dir");
        let ca = Ca::new("kube-apiserver test CA");
        let ca_file = ca.write(dir.path(), "ca");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = listener.local_addr().expect("its address").port();
        drop(listener);
        let mut server = KubeApiServer {
            url: format!("https://127.0.0.1:{port}"),
            dir,
            child: None,
            ca,
            ca_file,
            etcd,
            port,
            bin,
        };
        server.launch();
        server.wait_ready();
        Some(server)
    }

    fn launch(&mut self) {
        let dir = self.dir.path();
        let serving = self.ca.server(&["127.0.0.1", "localhost"]);
        let (cert, serving_key) = serving.write(dir, "serving");
        // The service accounts' signing key (no pod runs, so any will do), and its public
        // half, which is all `--service-account-key-file` reads.
        let key = rcgen::KeyPair::generate().expect("a key");
        let signing = dir.join("sa.key");
        let public = dir.join("sa.pub");
        std::fs::write(&signing, key.serialize_pem()).expect("sa.key");
        std::fs::write(&public, key.public_key_pem()).expect("sa.pub");
        let tokens = dir.join("tokens.csv");
        let named = NAMED_ADMINS.iter().fold(String::new(), |mut all, n| {
            let _ = writeln!(all, "blocklistd-test-{n},{n},{n}-uid,\"system:masters\"");
            all
        });
        std::fs::write(
            &tokens,
            format!(
                "{ADMIN_TOKEN},admin,admin-uid,\"system:masters\"\n\
                 {BRIDGE_TOKEN},system:serviceaccount:blocklist:blocklistd-kube,bridge-uid,\
                 \"system:serviceaccounts,system:serviceaccounts:blocklist\"\n{named}"
            ),
        )
        .expect("token file");
        let policy = dir.join("audit-policy.yaml");
        std::fs::write(&policy, AUDIT_POLICY).expect("audit policy");
        let log = std::fs::File::create(dir.join("kube-apiserver.log")).expect("log");
        let path = |p: &Path| p.display().to_string();
        let child = Command::new(&self.bin)
            .args(["--etcd-servers", &self.etcd.endpoints()])
            .args(["--bind-address", "127.0.0.1"])
            .args(["--secure-port", &self.port.to_string()])
            .args(["--tls-cert-file", &path(&cert)])
            .args(["--tls-private-key-file", &path(&serving_key)])
            .args(["--cert-dir", &path(&dir.join("certs"))])
            .args(["--token-auth-file", &path(&tokens)])
            .args(["--authorization-mode", "RBAC"])
            .args(["--service-cluster-ip-range", "10.96.0.0/24"])
            .args(["--service-account-issuer", "https://kubernetes.default.svc"])
            .args(["--service-account-key-file", &path(&public)])
            .args(["--service-account-signing-key-file", &path(&signing)])
            .args(["--audit-policy-file", &path(&policy)])
            .args(["--audit-log-path", &path(&dir.join("audit.log"))])
            .args(["--audit-log-mode", "blocking"])
            // No controller creates the `default` service account a pod would need.
            .args(["--disable-admission-plugins", "ServiceAccount"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start kube-apiserver");
        self.child = Some(child);
    }

    /// Waits until `/readyz` answers `ok` to the administrator.
    fn wait_ready(&mut self) {
        let started = Instant::now();
        loop {
            let ready = self
                .curl(&["-sf", &format!("{}/readyz", self.url)])
                .is_some_and(|body| body.trim() == "ok");
            if ready {
                return;
            }
            if let Some(child) = &mut self.child {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!("kube-apiserver exited ({status}):\n{}", self.log_text());
                }
            }
            assert!(
                started.elapsed() < DEADLINE * 3,
                "kube-apiserver not ready:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `curl` with the CA and the administrator's token: its stdout when it succeeded.
    pub fn curl(&self, args: &[&str]) -> Option<String> {
        let output = Command::new("curl")
            .arg("--cacert")
            .arg(&self.ca_file)
            .args(["-H", &format!("Authorization: Bearer {ADMIN_TOKEN}")])
            .args(args)
            .output()
            .ok()?;
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// A kubeconfig for `token`, written in the server's dir.
    pub fn kubeconfig(&self, name: &str, token: &str) -> PathBuf {
        let file = self.dir.path().join(format!("{name}.kubeconfig"));
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    \
             certificate-authority: {}\nusers:\n- name: {name}\n  user:\n    token: {token}\n\
             contexts:\n- name: {name}\n  context:\n    cluster: test\n    user: {name}\n\
             current-context: {name}\n",
            self.url,
            self.ca_file.display()
        );
        std::fs::write(&file, text).expect("kubeconfig");
        file
    }

    /// A kubeconfig of the administrator `name`, one of [`NAMED_ADMINS`].
    pub fn kubeconfig_of(&self, name: &str) -> PathBuf {
        assert!(
            NAMED_ADMINS.contains(&name),
            "{name} is not a named administrator"
        );
        self.kubeconfig(name, &format!("blocklistd-test-{name}"))
    }

    /// Every write answered so far, in order: the audit log's events (`user.username`,
    /// `verb`, `objectRef`, `responseStatus.code`, `requestReceivedTimestamp`, …).
    pub fn audit(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.path().join("audit.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// SIGKILL, then the same server again on the same etcd (what it stored survives).
    pub fn restart(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.launch();
        self.wait_ready();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("kube-apiserver.log")).unwrap_or_default()
    }
}

impl Drop for KubeApiServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
