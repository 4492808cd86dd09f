//! The ResourceManager's REST API (`/ws/v1/cluster`), the calls the bridge makes: the
//! NodeManagers and their partitions, the cluster's labels, labels added and NodeManagers
//! moved (as an admin: `user.name` with simple auth), the running Flink applications'
//! containers, and a container stopped.
//!
//! Every answer is read whole or refused whole ([`crate::shape`]); a write the
//! ResourceManager answers 200 may still have done nothing (a body it does not understand
//! is ignored), so the caller reads back what it wrote ([`crate::pass`]).

use std::path::Path;
use std::time::Duration;

use reqwest::{Method, StatusCode, Url};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::plan::NodeManager;
use crate::shape;

/// One or more ResourceManagers (HA): requests go to the one that answered last, and move
/// on to the next when it cannot be reached or is a standby.
pub struct ResourceManager {
    urls: Vec<Url>,
    current: std::sync::atomic::AtomicUsize,
    user: Option<String>,
    client: reqwest::Client,
}

/// A label of the cluster (its exclusivity comes as a string, `"true"`, and is not read:
/// the bridge only ever adds exclusive ones, and YARN refuses to change a label's).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ClusterLabel {
    pub name: String,
}

/// A NodeManager as `GET /nodes` lists it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeInfo {
    id: String,
    node_host_name: String,
    #[serde(default)]
    node_labels: Value,
}

/// A running application (`GET /apps`).
#[derive(Debug, Deserialize)]
struct App {
    id: String,
}

/// An application's attempt (`GET /apps/{id}/appattempts`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Attempt {
    app_attempt_id: String,
    /// The application master's container (empty for an unmanaged one).
    #[serde(default)]
    container_id: String,
}

/// A container of an attempt (`GET /apps/{id}/appattempts/{attempt}/containers`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerInfo {
    container_id: String,
    node_id: String,
    #[serde(default)]
    container_state: String,
}

/// A container of a running application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    pub id: String,
    /// Its NodeManager (`host:port`).
    pub node: String,
    /// Whether it runs the application master (the JobManager of a Flink application).
    pub master: bool,
}

impl ResourceManager {
    /// `urls`: the ResourceManagers' web addresses (`http://rm:8088`, or https with `cacert`
    /// trusted besides the system's); `user`: the `user.name` of simple authentication.
    pub fn new(
        urls: &[String],
        user: Option<String>,
        cacert: Option<&Path>,
        timeout: Duration,
    ) -> Result<ResourceManager, String> {
        if urls.is_empty() {
            return Err("--resourcemanager: name at least one ResourceManager".into());
        }
        let urls = urls
            .iter()
            .map(|u| {
                let url = Url::parse(u.trim_end_matches('/'))
                    .map_err(|e| format!("--resourcemanager {u}: {e}"))?;
                if !matches!(url.scheme(), "http" | "https") {
                    return Err(format!("--resourcemanager {u}: not an http(s) URL"));
                }
                Ok(url)
            })
            .collect::<Result<Vec<_>, String>>()?;
        let mut builder = reqwest::Client::builder()
            .timeout(timeout)
            // A standby answers with a redirect to the active one; following it would
            // send a write to an address the operator did not name.
            .redirect(reqwest::redirect::Policy::none());
        if let Some(path) = cacert {
            let pem = std::fs::read(path)
                .map_err(|e| format!("--resourcemanager-cacert {}: {e}", path.display()))?;
            let cert = reqwest::Certificate::from_pem(&pem)
                .map_err(|e| format!("--resourcemanager-cacert {}: {e}", path.display()))?;
            builder = builder.add_root_certificate(cert);
        }
        Ok(ResourceManager {
            urls,
            current: std::sync::atomic::AtomicUsize::new(0),
            user,
            client: builder.build().map_err(|e| e.to_string())?,
        })
    }

    /// A request to `path` (under `/ws/v1/cluster`) with `query`, to each ResourceManager
    /// in turn from the current one until one answers as the active one: its status and
    /// JSON body.
    async fn call(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<(StatusCode, Value), String> {
        let start = self.current.load(std::sync::atomic::Ordering::Relaxed);
        let mut last = String::new();
        for step in 0..self.urls.len() {
            let at = (start + step) % self.urls.len();
            let mut url = self.urls[at].clone();
            url.set_path(&format!(
                "{}/ws/v1/cluster{path}",
                url.path().trim_end_matches('/')
            ));
            {
                let mut pairs = url.query_pairs_mut();
                for (k, v) in query {
                    pairs.append_pair(k, v);
                }
                if let Some(user) = &self.user {
                    pairs.append_pair("user.name", user);
                }
            }
            let mut request = self
                .client
                .request(method.clone(), url.clone())
                .header("Accept", "application/json");
            if let Some(body) = body {
                request = request.json(body);
            }
            match request.send().await {
                Ok(response) if response.status().is_redirection() => {
                    last = format!("{}: a standby ResourceManager", self.urls[at]);
                }
                Ok(response) => {
                    self.current.store(at, std::sync::atomic::Ordering::Relaxed);
                    let status = response.status();
                    let bytes = response
                        .bytes()
                        .await
                        .map_err(|e| format!("{method} {path}: {e}"))?;
                    let value = if bytes.is_empty() {
                        Value::Null
                    } else {
                        serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                            Value::String(String::from_utf8_lossy(&bytes).into_owned())
                        })
                    };
                    return Ok((status, value));
                }
                Err(e) => last = format!("{}: {}", self.urls[at], blocklist::client::chain(&e)),
            }
        }
        Err(format!(
            "{method} {path}: no ResourceManager answered ({last})"
        ))
    }

    /// [`Self::call`], an answer other than 2xx an error naming it.
    async fn ok(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<Value, String> {
        let (status, value) = self.call(method.clone(), path, query, body).await?;
        if status.is_success() {
            Ok(value)
        } else {
            let text = match &value {
                Value::String(s) => s.chars().take(300).collect(),
                other => other.to_string().chars().take(300).collect::<String>(),
            };
            Err(format!("{method} {path}: {status}: {text}"))
        }
    }

    /// Every NodeManager with its partition.
    pub async fn nodes(&self) -> Result<Vec<NodeManager>, String> {
        let answer = self.ok(Method::GET, "/nodes", &[], None).await?;
        let infos: Vec<NodeInfo> = shape::list(&answer, &["nodes", "node"])?;
        infos
            .into_iter()
            .map(|info| {
                let labels: Vec<String> = shape::list(&info.node_labels, &[])?;
                if labels.len() > 1 {
                    return Err(format!(
                        "NodeManager {}: in several partitions {labels:?}",
                        info.id
                    ));
                }
                Ok(NodeManager {
                    host: info.node_host_name,
                    partition: labels.into_iter().next().filter(|l| !l.is_empty()),
                    id: info.id,
                })
            })
            .collect()
    }

    /// The cluster's labels.
    pub async fn labels(&self) -> Result<Vec<ClusterLabel>, String> {
        let answer = self.ok(Method::GET, "/get-node-labels", &[], None).await?;
        shape::list(&answer, &["nodeLabelInfo"])
    }

    /// Adds `names` as exclusive labels.
    pub async fn add_labels(&self, names: &[String]) -> Result<(), String> {
        let infos: Vec<Value> = names
            .iter()
            .map(|name| json!({"name": name, "exclusivity": true}))
            .collect();
        let body = json!({ "nodeLabelInfo": infos });
        self.ok(Method::POST, "/add-node-labels", &[], Some(&body))
            .await
            .map(drop)
    }

    /// The running containers of the running applications of `types` (their current
    /// attempt's), each with its NodeManager.
    pub async fn containers(&self, types: &[String]) -> Result<Vec<Container>, String> {
        let types = types.join(",");
        let apps = self
            .ok(
                Method::GET,
                "/apps",
                &[("states", "RUNNING"), ("applicationTypes", &types)],
                None,
            )
            .await?;
        let apps: Vec<App> = shape::list(&apps, &["apps", "app"])?;
        let mut all = Vec::new();
        for app in apps {
            let attempts = self
                .ok(
                    Method::GET,
                    &format!("/apps/{}/appattempts", app.id),
                    &[],
                    None,
                )
                .await?;
            let attempts: Vec<Attempt> = shape::list(&attempts, &["appAttempts", "appAttempt"])?;
            // The current attempt is the last; only its containers run.
            let Some(attempt) = attempts.last() else {
                continue;
            };
            let path = format!(
                "/apps/{}/appattempts/{}/containers",
                app.id, attempt.app_attempt_id
            );
            let containers = match self.ok(Method::GET, &path, &[], None).await {
                Ok(containers) => containers,
                // The application ended between the two reads.
                Err(e) if e.contains("404") => continue,
                Err(e) => return Err(e),
            };
            let containers: Vec<ContainerInfo> = shape::list(&containers, &["container"])?;
            all.extend(
                containers
                    .into_iter()
                    .filter(|c| c.container_state.is_empty() || c.container_state == "RUNNING")
                    .map(|c| Container {
                        master: c.container_id == attempt.container_id,
                        id: c.container_id,
                        node: c.node_id,
                    }),
            );
        }
        Ok(all)
    }

    /// Asks the NodeManager of `container` to stop it (`GRACEFUL_SHUTDOWN`: SIGTERM, then
    /// its kill after the NodeManager's delay).
    pub async fn stop(&self, container: &str) -> Result<(), String> {
        if !container.starts_with("container_") || container.contains('/') {
            return Err(format!("{container}: not a container id"));
        }
        self.ok(
            Method::POST,
            &format!("/containers/{container}/signal/GRACEFUL_SHUTDOWN"),
            &[],
            None,
        )
        .await
        .map(drop)
    }

    /// Puts each NodeManager into its partition (`None`: the default one), in one request.
    pub async fn move_nodes(&self, moves: &[(String, Option<String>)]) -> Result<(), String> {
        let entries: Vec<Value> = moves
            .iter()
            .map(|(node, to)| json!({"nodeId": node, "labels": to.iter().collect::<Vec<_>>()}))
            .collect();
        let body = json!({ "nodeToLabels": entries });
        self.ok(Method::POST, "/replace-node-to-labels", &[], Some(&body))
            .await
            .map(drop)
    }
}

/// The host of a NodeManager's id (`host:port`).
pub fn host_of(node: &str) -> &str {
    node.rsplit_once(':').map_or(node, |(host, _)| host)
}
