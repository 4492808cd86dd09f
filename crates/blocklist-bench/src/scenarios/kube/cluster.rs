//! What the Kubernetes scenarios share: a real kube-apiserver (1.37, built from
//! `tests/servers/kube-1.37` by `tests/servers/build`) on an etcd 3.6 member of its own,
//! with an audit log of every write (who, what, when, the answer); the bridge run as a
//! process; the pods' kubelets played by the bench. The helpers for processes, built
//! servers and figures serve the `flink` scenario too.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::server::free_port;

/// The bridge's taint key (its default).
const TAINT: &str = "blocklistd.io/blocked";

/// The administrator's bearer token on the API server.
const TOKEN: &str = "blocklist-bench-admin";

/// Administrators of their own names (`blocklist-bench-<name>` their tokens), so the
/// audit log tells two bridges apart.
pub(super) const NAMED: [&str; 2] = ["bridge-a", "bridge-b"];

/// Every write, at the level of its metadata, once answered.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived, ResponseStarted]\nrules:\n- level: Metadata\n  verbs: [create, update, patch, delete]\n- level: None\n";

/// A child process killed on drop.
pub(in crate::scenarios) struct Killed(pub(in crate::scenarios) Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The API server, its etcd and an HTTPS client for it.
pub(super) struct Cluster {
    pub(super) url: String,
    pub(super) http: reqwest::Client,
    _etcd: Killed,
    _apiserver: Killed,
    pub(super) kubeconfig: PathBuf,
    dir: PathBuf,
    ca_file: String,
}

impl Cluster {
    /// Starts one in `dir`; with `audit`, the API server logs every write (a cost on each
    /// of its requests: only the scenarios that read the log ask for it).
    pub(super) async fn start(dir: &Path, audit: bool) -> Result<Cluster, String> {
        let etcd_dir = built("etcd-3.6")?;
        let kube_dir = built("kube-1.37")?;
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let (client_port, peer_port) = (free_port()?, free_port()?);
        let etcd_url = format!("http://127.0.0.1:{client_port}");
        let etcd = Command::new(etcd_dir.join("etcd"))
            .args(["--data-dir", &dir.join("etcd").display().to_string()])
            .args([
                "--listen-client-urls",
                &etcd_url,
                "--advertise-client-urls",
                &etcd_url,
            ])
            .args([
                "--listen-peer-urls",
                &format!("http://127.0.0.1:{peer_port}"),
            ])
            .args([
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{peer_port}"),
            ])
            .args([
                "--initial-cluster",
                &format!("default=http://127.0.0.1:{peer_port}"),
            ])
            .stdout(Stdio::null())
            .stderr(log(dir, "etcd.log")?)
            .spawn()
            .map_err(|e| format!("etcd: {e}"))?;
        let etcd = Killed(etcd);

        // A CA of its own, the serving certificate, the service accounts' key, the token.
        let ca_key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
        let mut ca_params =
            rcgen::CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).map_err(|e| e.to_string())?;
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let serving_key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
        let serving =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .map_err(|e| e.to_string())?
                .signed_by(&serving_key, &issuer)
                .map_err(|e| e.to_string())?;
        let sa = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
        let write = |name: &str, text: &str| -> Result<String, String> {
            let path = dir.join(name);
            std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(path.display().to_string())
        };
        let ca_file = write("ca.pem", &ca.pem())?;
        let cert = write("serving.pem", &serving.pem())?;
        let key = write("serving.key", &serving_key.serialize_pem())?;
        let sa_key = write("sa.key", &sa.serialize_pem())?;
        let sa_pub = write("sa.pub", &sa.public_key_pem())?;
        let named = NAMED.iter().fold(String::new(), |mut all, n| {
            let _ = writeln!(all, "blocklist-bench-{n},{n},{n}-uid,\"system:masters\"");
            all
        });
        let tokens = write(
            "tokens.csv",
            &format!("{TOKEN},admin,admin-uid,\"system:masters\"\n{named}"),
        )?;
        let policy = write("audit-policy.yaml", AUDIT_POLICY)?;
        let audit_log = dir.join("audit.log").display().to_string();
        let port = free_port()?;
        let url = format!("https://127.0.0.1:{port}");
        let mut apiserver = Command::new(kube_dir.join("kube-apiserver"));
        if audit {
            apiserver
                .args([
                    "--audit-policy-file",
                    &policy,
                    "--audit-log-path",
                    &audit_log,
                ])
                .args(["--audit-log-mode", "blocking"]);
        }
        let apiserver = apiserver
            .args(["--etcd-servers", &etcd_url, "--bind-address", "127.0.0.1"])
            .args(["--secure-port", &port.to_string()])
            .args(["--tls-cert-file", &cert, "--tls-private-key-file", &key])
            .args(["--cert-dir", &dir.join("certs").display().to_string()])
            .args(["--token-auth-file", &tokens, "--authorization-mode", "RBAC"])
            .args(["--service-cluster-ip-range", "10.96.0.0/24"])
            .args(["--service-account-issuer", "https://kubernetes.default.svc"])
            .args(["--service-account-key-file", &sa_pub])
            .args(["--service-account-signing-key-file", &sa_key])
            // No controller creates the `default` service account a pod would need.
            .args(["--disable-admission-plugins", "ServiceAccount"])
            .stdout(Stdio::null())
            .stderr(log(dir, "kube-apiserver.log")?)
            .spawn()
            .map_err(|e| format!("kube-apiserver: {e}"))?;
        let apiserver = Killed(apiserver);
        let root =
            reqwest::Certificate::from_pem(ca.pem().as_bytes()).map_err(|e| e.to_string())?;
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {TOKEN}").parse().map_err(|_| "a header")?,
        );
        let http = reqwest::Client::builder()
            .add_root_certificate(root)
            .default_headers(headers)
            .build()
            .map_err(|e| e.to_string())?;
        let mut cluster = Cluster {
            url,
            http,
            _etcd: etcd,
            _apiserver: apiserver,
            kubeconfig: PathBuf::new(),
            dir: dir.to_owned(),
            ca_file,
        };
        cluster.kubeconfig = cluster.kubeconfig_of("admin", TOKEN)?;
        let started = Instant::now();
        loop {
            let ready = cluster
                .http
                .get(format!("{}/readyz", cluster.url))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ready {
                return Ok(cluster);
            }
            if started.elapsed() > Duration::from_secs(120) {
                return Err(format!(
                    "kube-apiserver not ready in 2 minutes; its log: {}",
                    dir.join("kube-apiserver.log").display()
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// A kubeconfig of user `name` with bearer token `token`.
    pub(super) fn kubeconfig_of(&self, name: &str, token: &str) -> Result<PathBuf, String> {
        let (url, ca_file) = (&self.url, &self.ca_file);
        let path = self.dir.join(format!("{name}.kubeconfig"));
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: bench\n  cluster:\n    server: {url}\n    \
                 certificate-authority: {ca_file}\nusers:\n- name: {name}\n  user:\n    token: {token}\n\
                 contexts:\n- name: {name}\n  context:\n    cluster: bench\n    user: {name}\n\
                 current-context: {name}\n"
            ),
        )
        .map_err(|e| format!("kubeconfig: {e}"))?;
        Ok(path)
    }

    /// The kubeconfig of the named administrator `name` (one of [`NAMED`]).
    pub(super) fn kubeconfig_named(&self, name: &str) -> Result<PathBuf, String> {
        self.kubeconfig_of(name, &format!("blocklist-bench-{name}"))
    }

    /// Every eviction answered so far: who asked, the pod, the answer's code, and when it
    /// was received (seconds since the epoch), in order.
    pub(super) fn evictions(&self) -> Vec<(String, String, u64, f64)> {
        std::fs::read_to_string(self.dir.join("audit.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["objectRef"]["subresource"] == "eviction" && e["verb"] == "create")
            .map(|e| {
                let at = e["requestReceivedTimestamp"].as_str().unwrap_or_default();
                let at = humantime::parse_rfc3339_weak(at.trim_end_matches('Z'))
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0.0, |d| d.as_secs_f64());
                (
                    e["user"]["username"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    e["objectRef"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    e["responseStatus"]["code"].as_u64().unwrap_or_default(),
                    at,
                )
            })
            .collect()
    }

    /// The kubelets' last step, played for every pod: a pod marked for deletion (an
    /// eviction's) is deleted with no grace left, as soon as a watch of the pods shows it.
    pub(super) fn kubelets(&self) -> tokio::task::JoinHandle<()> {
        let (http, url) = (self.http.clone(), self.url.clone());
        tokio::spawn(async move {
            loop {
                let Ok(mut watch) = http.get(format!("{url}/api/v1/pods?watch=1")).send().await
                else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let mut buffer = Vec::new();
                while let Ok(Some(chunk)) = watch.chunk().await {
                    buffer.extend_from_slice(&chunk);
                    while let Some(end) = buffer.iter().position(|&b| b == b'\n') {
                        let line: Vec<u8> = buffer.drain(..=end).collect();
                        let Ok(event) = serde_json::from_slice::<Value>(&line) else {
                            continue;
                        };
                        let pod = &event["object"]["metadata"];
                        if event["type"] != "MODIFIED" || pod["deletionTimestamp"].is_null() {
                            continue;
                        }
                        let (Some(ns), Some(name)) =
                            (pod["namespace"].as_str(), pod["name"].as_str())
                        else {
                            continue;
                        };
                        let _ = http
                            .delete(format!("{url}/api/v1/namespaces/{ns}/pods/{name}"))
                            .json(&serde_json::json!({"gracePeriodSeconds": 0}))
                            .send()
                            .await;
                    }
                }
            }
        })
    }

    /// The pods bound to Node `node` now.
    pub(super) async fn pods_on(&self, node: &str) -> Result<usize, String> {
        let url = format!(
            "{}/api/v1/pods?fieldSelector=spec.nodeName%3D{node}",
            self.url
        );
        let list: Value = get_json(&self.http, &url).await?;
        Ok(list["items"].as_array().map_or(0, Vec::len))
    }

    /// Creates every object of `objects` in the collection `path`, 64 at a time.
    pub(super) async fn create_all(&self, path: &str, objects: Vec<Value>) -> Result<(), String> {
        let url = format!("{}{path}", self.url);
        let permits = Arc::new(tokio::sync::Semaphore::new(64));
        let mut tasks = tokio::task::JoinSet::new();
        for object in objects {
            let (http, url, permits) = (self.http.clone(), url.clone(), permits.clone());
            tasks.spawn(async move {
                let _permit = permits.acquire_owned().await;
                let answer = http.post(&url).json(&object).send().await;
                match answer {
                    Ok(r) if r.status().is_success() => Ok(()),
                    Ok(r) => Err(format!("creating at {url}: {}", r.status())),
                    Err(e) => Err(format!("creating at {url}: {e}")),
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.map_err(|e| e.to_string())??;
        }
        Ok(())
    }

    /// The PATCH requests on Nodes the API server has answered so far.
    pub(super) async fn node_patches(&self) -> Result<f64, String> {
        let text = get_text(&self.http, &format!("{}/metrics", self.url)).await?;
        Ok(text
            .lines()
            .filter(|l| {
                l.starts_with("apiserver_request_total{")
                    && l.contains(r#"resource="nodes""#)
                    && l.contains(r#"verb="PATCH""#)
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    }
}

/// Each Node's taint as the watcher last saw it, and when it changed: `(tainted, at)`.
pub(super) type Seen = Arc<Mutex<HashMap<String, (bool, Instant)>>>;

/// Watches every Node from now on: each one's taint, and when it last changed.
pub(super) async fn watch_taints(cluster: &Cluster) -> Result<Seen, String> {
    let listing: Value = cluster
        .http
        .get(format!("{}/api/v1/nodes?limit=1", cluster.url))
        .send()
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    let version = listing["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_owned();
    let mut watch = cluster
        .http
        .get(format!(
            "{}/api/v1/nodes?watch=1&resourceVersion={version}",
            cluster.url
        ))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let seen: Seen = Arc::default();
    let shared = seen.clone();
    tokio::spawn(async move {
        let mut buffer = Vec::new();
        while let Ok(Some(chunk)) = watch.chunk().await {
            let at = Instant::now();
            buffer.extend_from_slice(&chunk);
            while let Some(end) = buffer.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                let Ok(event) = serde_json::from_slice::<Value>(&line) else {
                    continue;
                };
                let node = &event["object"];
                let tainted = node["spec"]["taints"]
                    .as_array()
                    .is_some_and(|t| t.iter().any(|t| t["key"] == TAINT));
                if let Some(name) = node["metadata"]["name"].as_str() {
                    let mut seen = shared.lock().expect("the watcher's map");
                    let changed = seen.get(name).is_none_or(|(was, _)| *was != tainted);
                    if changed {
                        seen.insert(name.to_owned(), (tainted, at));
                    }
                }
            }
        }
    });
    Ok(seen)
}

/// When Node `node` was seen `tainted` (or not), at or after `since`; an error after 30 s.
pub(super) async fn until_seen(
    seen: &Seen,
    node: &str,
    tainted: bool,
    since: Instant,
) -> Result<Instant, String> {
    loop {
        let now = seen.lock().map_err(|_| "poisoned")?.get(node).copied();
        if let Some((state, at)) = now {
            if state == tainted && at >= since {
                return Ok(at);
            }
        }
        if since.elapsed() > Duration::from_secs(30) {
            return Err(format!(
                "{node} not {} in 30 s",
                if tainted { "tainted" } else { "untainted" }
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// For each `(node, since)`, how long after `since` its taint was seen ([`until_seen`]).
pub(super) async fn tainted_after<N: AsRef<str>>(
    seen: &Seen,
    sent: &[(N, Instant)],
) -> Result<Vec<Duration>, String> {
    let mut latencies = Vec::with_capacity(sent.len());
    for (node, since) in sent {
        let tainted = until_seen(seen, node.as_ref(), true, *since).await?;
        latencies.push(tainted.saturating_duration_since(*since));
    }
    Ok(latencies)
}

/// The directory of server `name`'s binaries, built from its Go module by
/// `tests/servers/build` when they are missing or older than the module.
pub(in crate::scenarios) fn built(name: &str) -> Result<PathBuf, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/servers/build");
    let out = Command::new(&script)
        .arg(name)
        .output()
        .map_err(|e| format!("{}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "building {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

pub(in crate::scenarios) fn log(dir: &Path, name: &str) -> Result<std::fs::File, String> {
    std::fs::File::create(dir.join(name)).map_err(|e| format!("{name}: {e}"))
}

pub(in crate::scenarios) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The `p` quantile of `durations`, in ms (nearest rank); 0 for none.
pub(in crate::scenarios) fn percentile(durations: &[Duration], p: f64) -> f64 {
    let mut sorted = durations.to_vec();
    sorted.sort();
    if sorted.is_empty() {
        return 0.0;
    }
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "an index into a few hundred"
    )]
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    ms(sorted[i])
}

/// The bridge (`blocklist-kube`, next to the bench's binary) with `kubeconfig` against the
/// daemon at `daemon`, with `args`, its log in `dir/<log>`; its probes' URL.
pub(super) fn spawn_bridge(
    kubeconfig: &Path,
    daemon: &str,
    args: &[&str],
    dir: &Path,
    log_name: &str,
) -> Result<(Killed, String), String> {
    let kubeconfig = kubeconfig.to_string_lossy();
    let all = [
        &["--daemon", daemon][..],
        args,
        &["--kubeconfig", &kubeconfig],
    ]
    .concat();
    spawn_sibling("blocklist-kube", &all, dir, log_name)
}

/// `name`, a binary next to the bench's (`blocklist-kube`, `blocklist-flink`,
/// `blocklist-yarn`), with `args` and `--listen 127.0.0.1:0`, its log in `dir/<log_name>`:
/// the process, and the URL of the address it says it listens on (`http://…`).
pub(in crate::scenarios) fn spawn_sibling(
    name: &str,
    args: &[&str],
    dir: &Path,
    log_name: &str,
) -> Result<(Killed, String), String> {
    let bin = std::env::current_exe()
        .map_err(|e| e.to_string())?
        .with_file_name(name);
    if !bin.is_file() {
        return Err(format!(
            "no {name} at {}: build it with `cargo build --release -p {name}`",
            bin.display()
        ));
    }
    let mut child = Command::new(&bin)
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(log(dir, log_name)?)
        .spawn()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    let mut line = String::new();
    let stdout = child.stdout.take().ok_or("its stdout")?;
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let child = Killed(child);
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .ok_or_else(|| format!("{name} said {line:?}"))?;
    Ok((child, format!("http://{addr}")))
}

/// Until the bridge at `probes` answers `/readyz`, for at most two minutes.
pub(in crate::scenarios) async fn wait_ready(
    http: &reqwest::Client,
    probes: &str,
) -> Result<(), String> {
    let started = Instant::now();
    while !http
        .get(format!("{probes}/readyz"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        if started.elapsed() > Duration::from_secs(120) {
            return Err("the bridge was not ready in 2 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// A GET of `url`, its body as text.
pub(super) async fn get_text(http: &reqwest::Client, url: &str) -> Result<String, String> {
    http.get(url)
        .send()
        .await
        .map_err(|e| e.to_string())?
        .text()
        .await
        .map_err(|e| e.to_string())
}

/// A GET of `url`, its body read as JSON.
pub(super) async fn get_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: &str,
) -> Result<T, String> {
    http.get(url)
        .send()
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())
}

/// Blocks the nodes `ids` with `action` on the daemon at `base`, past its caps
/// (`?force=true`: these scenarios measure the bridge, not the daemon's guardrails).
pub(in crate::scenarios) async fn block_nodes(
    http: &reqwest::Client,
    base: &str,
    ids: &[String],
    action: &str,
    cause: &str,
) -> Result<(), String> {
    let items: Vec<Value> = ids
        .iter()
        .map(|id| serde_json::json!({"id": id, "action": action, "cause": cause}))
        .collect();
    let r = http
        .post(format!("{base}/blocklist/nodes?force=true"))
        .json(&items)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if r.status().is_success() {
        Ok(())
    } else {
        Err(format!("blocking: {}", r.status()))
    }
}

/// How many task managers the daemon at `base` holds.
pub(super) async fn registered(http: &reqwest::Client, base: &str) -> Result<usize, String> {
    Ok(
        get_json::<Vec<Value>>(http, &format!("{base}/taskmanagers"))
            .await?
            .len(),
    )
}
