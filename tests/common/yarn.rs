//! A real YARN ResourceManager of the test's own (Hadoop 3.4.3's `MiniYARNCluster`, built
//! from the Maven project `tests/servers/yarn-3.4` by `tests/servers/build`): node labels
//! on, a loopback REST port, NodeManagers on the loopback hosts the test names (two may
//! share one), and, in the same JVM, an unmanaged application master (an application of
//! type `Apache Flink`) that asks for containers on command, launches them, and says where
//! they were placed — the scheduler's real decision.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

use super::{available, build_server, DEADLINE};

/// The YARN admin the cluster names (`yarn.admin.acl`): the bridge acts as it.
pub const YARN_ADMIN: &str = "blocklist";

/// A running cluster; killed on drop.
pub struct Yarn {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    /// `http://127.0.0.1:<port>`.
    pub rest: String,
    /// With https: the CA (PEM) of the REST API's certificate.
    pub ca: Option<PathBuf>,
    dir: tempfile::TempDir,
}

impl Yarn {
    /// Starts a cluster of NodeManagers on `hosts` (loopback addresses; one NodeManager per
    /// entry, a host named twice has two); `None` (after the skip-or-fail rule) when it
    /// cannot be built here.
    pub fn start(hosts: &[&str], test: &str) -> Option<Yarn> {
        Yarn::start_with(hosts, &[], test)
    }

    /// [`Yarn::start`], its REST API over https only, with a certificate of a CA made for it
    /// ([`Yarn::ca`]).
    pub fn start_https(hosts: &[&str], test: &str) -> Option<Yarn> {
        Yarn::start_with(hosts, &["--https"], test)
    }

    fn start_with(hosts: &[&str], extra: &[&str], test: &str) -> Option<Yarn> {
        let dir = match build_server("yarn-3.4") {
            Ok(dir) => dir,
            Err(why) => {
                available(&why, false, test);
                return None;
            }
        };
        let work = tempfile::tempdir().expect("temp dir");
        let log = std::fs::File::create(work.path().join("yarn.log")).expect("log");
        let mut child = Command::new(dir.join("yarn-cluster"))
            .arg(work.path())
            .arg("0")
            .arg("--nodes")
            .arg(hosts.join(","))
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start the YARN cluster");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.starts_with('{') && tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut yarn = Yarn {
            child,
            stdin,
            lines,
            rest: String::new(),
            ca: None,
            dir: work,
        };
        let ready = yarn.answer(DEADLINE * 6);
        assert_eq!(ready["ready"], true, "{ready}");
        ready["rest"]
            .as_str()
            .expect("rest")
            .clone_into(&mut yarn.rest);
        yarn.ca = ready["ca"].as_str().map(PathBuf::from);
        Some(yarn)
    }

    /// The next JSON line the cluster prints, within `timeout`.
    fn answer(&mut self, timeout: Duration) -> Value {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => serde_json::from_str(&line).expect("a JSON line"),
            Err(e) => panic!(
                "the YARN cluster did not answer ({e}):\n{}",
                self.log_text()
            ),
        }
    }

    /// Sends `command` and waits for its answer.
    pub fn command(&mut self, command: &str) -> Value {
        writeln!(self.stdin, "{command}").expect("the cluster's stdin");
        self.stdin.flush().expect("flush");
        self.answer(DEADLINE * 3)
    }

    /// Asks for `n` containers with no label expression: where the scheduler placed them
    /// (`{"allocated": {node id: count}, "containers": [...], "pending": k}`).
    pub fn ask(&mut self, n: usize) -> Value {
        self.command(&format!("ask {n}"))
    }

    /// The number of containers of `answer` (of [`Yarn::ask`]) placed on each host.
    pub fn per_host(answer: &Value) -> std::collections::BTreeMap<String, u64> {
        let mut hosts = std::collections::BTreeMap::new();
        for (node, count) in answer["allocated"].as_object().expect("allocated") {
            let host = node.rsplit_once(':').map_or(node.as_str(), |(h, _)| h);
            *hosts.entry(host.to_owned()).or_insert(0) += count.as_u64().expect("a count");
        }
        hosts
    }

    /// `curl ARGS` of the REST API at `path` (under `/ws/v1/cluster`) as the admin.
    fn curl(&self, args: &[&str], path: &str) -> std::process::Output {
        let separator = if path.contains('?') { '&' } else { '?' };
        let mut curl = Command::new("curl");
        if let Some(ca) = &self.ca {
            curl.arg("--cacert").arg(ca);
        }
        curl.args(args)
            .arg(format!(
                "{}/ws/v1/cluster{path}{separator}user.name={YARN_ADMIN}",
                self.rest
            ))
            .output()
            .expect("curl")
    }

    /// `GET` of `path`: the JSON.
    pub fn get(&self, path: &str) -> Value {
        let out = self.curl(&["-sf", "-H", "Accept: application/json"], path);
        assert!(
            out.status.success(),
            "GET {path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON")
    }

    /// `POST` of `body` (JSON) to `path`: the HTTP code.
    pub fn post(&self, path: &str, body: &str) -> String {
        let out = self.curl(
            &[
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "-XPOST",
                "-H",
                "Content-Type: application/json",
                "--data-binary",
                body,
            ],
            path,
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Each NodeManager's partition as the ResourceManager lists it (`None`: the default).
    pub fn partitions(&self) -> std::collections::BTreeMap<String, Option<String>> {
        let nodes = self.get("/nodes");
        let list = match &nodes["nodes"]["node"] {
            Value::Array(all) => all.clone(),
            Value::Null => Vec::new(),
            one => vec![one.clone()],
        };
        list.iter()
            .map(|n| {
                let label = match &n["nodeLabels"] {
                    Value::Array(all) => all.first().and_then(Value::as_str).map(str::to_owned),
                    Value::String(s) if !s.is_empty() => Some(s.clone()),
                    _ => None,
                };
                (n["id"].as_str().expect("an id").to_owned(), label)
            })
            .collect()
    }

    /// Stops and starts the ResourceManager (the labels kept in its store).
    pub fn restart_rm(&mut self) -> Value {
        self.command("restart-rm")
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("yarn.log")).unwrap_or_default()
    }
}

impl Drop for Yarn {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
