//! A binary beside the daemon (the Flink watcher, the YARN bridge) started on
//! `127.0.0.1:0`: the address it prints first, its log, its probes and metrics; killed
//! (SIGKILL) on drop.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use super::{metric, DEADLINE};

/// A running sidecar.
pub struct Sidecar {
    child: Child,
    /// Where its probes and metrics are served (`127.0.0.1:<port>`).
    pub addr: String,
    pub log: PathBuf,
}

impl Sidecar {
    /// Starts `bin` with `args` and `RUST_LOG=rust_log`, its log in `dir` (named after
    /// `name` and the moment), and waits for the address it prints first
    /// (`listening on …`).
    pub fn spawn(bin: &Path, dir: &Path, name: &str, args: &[String], rust_log: &str) -> Sidecar {
        let log = dir.join(format!(
            "{name}-{}.log",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let mut child = Command::new(bin)
            .args(args)
            .env("RUST_LOG", rust_log)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = tx.send(lines.next().and_then(Result::ok));
            for _ in lines {}
        });
        let first = rx.recv_timeout(DEADLINE).ok().flatten().unwrap_or_else(|| {
            panic!(
                "the {name} did not start:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        });
        let addr = first
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("the {name} said {first:?}"))
            .to_owned();
        Sidecar { child, addr, log }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its `/metrics` text.
    pub async fn scrape(&self) -> String {
        reqwest::get(format!("http://{}/metrics", self.addr))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub async fn metric(&self, name_and_labels: &str) -> f64 {
        metric(&self.scrape().await, name_and_labels)
    }

    pub async fn ready(&self) -> bool {
        reqwest::get(format!("http://{}/readyz", self.addr))
            .await
            .is_ok_and(|r| r.status().is_success())
    }

    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
