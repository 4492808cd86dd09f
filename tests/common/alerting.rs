//! Real Prometheus and Alertmanager processes for the alert tests: a scrape target the test
//! flips ([`Exporter`]), Debian's Prometheus evaluating alerting rules every second, and an
//! Alertmanager (0.31 built from its Go module, or Debian's 0.25) posting to the daemon's
//! webhook with a detector token.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::tools::{available, build_server};

/// A port free on loopback now (the servers here take a port, not `:0`).
pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A scrape target: `/metrics` answers the gauges set, each a line `series value`.
pub struct Exporter {
    pub addr: SocketAddr,
    values: Arc<Mutex<BTreeMap<String, f64>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Exporter {
    pub async fn start() -> Exporter {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let values: Arc<Mutex<BTreeMap<String, f64>>> = Arc::default();
        let served = values.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let values = served.clone();
                tokio::spawn(async move {
                    // A scrape is a small GET: read its head, answer, close.
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let body = values.lock().unwrap().iter().fold(
                        String::new(),
                        |mut body, (series, value)| {
                            let _ = writeln!(body, "{series} {value}");
                            body
                        },
                    );
                    let response = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(response.as_bytes()).await;
                });
            }
        });
        Exporter { addr, values, task }
    }

    /// Sets `series` (`name{label="v"}`) to `value`.
    pub fn set(&self, series: &str, value: f64) {
        self.values.lock().unwrap().insert(series.to_owned(), value);
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A child process killed when dropped, with its log file.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    pub log: PathBuf,
}

impl Server {
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `GET path` answers 200.
    pub async fn ready(&mut self, path: &str) {
        let url = format!("http://{}{path}", self.addr);
        let client = reqwest::Client::new();
        let deadline = std::time::Instant::now() + super::DEADLINE;
        loop {
            let answered = client.get(&url).send().await;
            if answered.is_ok_and(|r| r.status().is_success()) {
                return;
            }
            let exited = self.child.try_wait().ok().flatten();
            assert!(
                exited.is_none() && std::time::Instant::now() < deadline,
                "{url} does not answer (exited: {exited:?}):\n{}",
                self.log_text()
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Debian's Prometheus (`/usr/bin/prometheus`), scraping `target` and evaluating `rules`
/// (a rule file's YAML) every second, sending its alerts to the Alertmanager at `am`.
/// `None` (after the skip-or-fail rule) when it is not installed.
pub fn prometheus(
    dir: &Path,
    target: SocketAddr,
    am: SocketAddr,
    rules: &str,
    test: &str,
) -> Option<Server> {
    let binary = Path::new("/usr/bin/prometheus");
    if !available(
        "Prometheus is not installed (Debian: prometheus)",
        binary.exists(),
        test,
    ) {
        return None;
    }
    let dir = dir.join("prometheus");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("rules.yml"), rules).unwrap();
    let config = [
        "global: {scrape_interval: 1s, evaluation_interval: 1s}".to_owned(),
        "rule_files: [rules.yml]".to_owned(),
        "alerting:".to_owned(),
        "  alertmanagers:".to_owned(),
        format!("  - static_configs: [{{targets: ['{am}']}}]"),
        "scrape_configs:".to_owned(),
        "- job_name: flip".to_owned(),
        "  honor_labels: true".to_owned(),
        format!("  static_configs: [{{targets: ['{target}']}}]"),
    ]
    .join("\n");
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let log = dir.join("prometheus.log");
    let child = Command::new(binary)
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .arg(format!("--web.external-url=http://{addr}/"))
        .arg("--rules.alert.resend-delay=1s")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start prometheus");
    Some(Server { child, addr, log })
}

/// Which Alertmanager a test runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertmanagerRelease {
    /// 0.31.1, built from its Go module (`tests/servers/alertmanager-0.31`).
    Built,
    /// Debian's 0.25 (`prometheus-alertmanager`).
    Debian,
}

/// The Alertmanager binary of `release`; `None` (after the skip-or-fail rule) when it cannot
/// be had.
pub fn alertmanager_binary(release: AlertmanagerRelease, test: &str) -> Option<PathBuf> {
    match release {
        AlertmanagerRelease::Built => {
            let built = build_server("alertmanager-0.31");
            let ok = built.is_ok();
            if !available(
                "Alertmanager 0.31 could not be built (Go toolchain)",
                ok,
                test,
            ) {
                return None;
            }
            Some(built.unwrap().join("alertmanager"))
        }
        AlertmanagerRelease::Debian => {
            let binary = PathBuf::from("/usr/bin/prometheus-alertmanager");
            let ok = binary.exists();
            available(
                "Alertmanager is not installed (Debian: prometheus-alertmanager)",
                ok,
                test,
            )
            .then_some(binary)
        }
    }
}

/// An Alertmanager listening on `addr`, grouping by `group_by` with `group_wait: 0s`,
/// `group_interval: 1s` and `repeat_interval`, posting every group to `webhook` with the
/// bearer token in `token_file`.
pub fn alertmanager(
    binary: &Path,
    dir: &Path,
    addr: SocketAddr,
    webhook: &str,
    token_file: &Path,
    group_by: &str,
    repeat_interval: &str,
) -> Server {
    let dir = dir.join("alertmanager");
    std::fs::create_dir_all(&dir).unwrap();
    let config = [
        "route:".to_owned(),
        "  receiver: blocklist".to_owned(),
        format!("  group_by: [{group_by}]"),
        "  group_wait: 0s".to_owned(),
        "  group_interval: 1s".to_owned(),
        format!("  repeat_interval: {repeat_interval}"),
        "receivers:".to_owned(),
        "- name: blocklist".to_owned(),
        "  webhook_configs:".to_owned(),
        format!("  - url: '{webhook}'"),
        "    send_resolved: true".to_owned(),
        "    http_config:".to_owned(),
        "      authorization:".to_owned(),
        "        type: Bearer".to_owned(),
        format!("        credentials_file: '{}'", token_file.display()),
    ]
    .join("\n");
    std::fs::write(dir.join("alertmanager.yml"), config).unwrap();
    let log = dir.join("alertmanager.log");
    let child = Command::new(binary)
        .arg(format!(
            "--config.file={}",
            dir.join("alertmanager.yml").display()
        ))
        .arg(format!("--storage.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address={addr}"))
        .arg(format!("--web.external-url=http://{addr}/"))
        .arg("--cluster.listen-address=")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start alertmanager");
    Server { child, addr, log }
}
