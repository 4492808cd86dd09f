//! One Flink cluster's REST API: its jobs, their exception histories, where a job runs,
//! its task managers. Over TLS when the URL says `https://` (a CA of its own may be
//! trusted), with basic or bearer authentication when Flink sits behind a proxy that asks.

use std::path::PathBuf;
use std::time::Duration;

use crate::history::{
    Exceptions, History, JobDetail, Overview, TaskManager, TaskManagers, VertexTaskManagers,
};

/// How the watcher authenticates to Flink's REST API.
#[derive(Debug, Clone, Default)]
pub struct Auth {
    /// A file holding a bearer token (its first line).
    pub token_file: Option<PathBuf>,
    /// A user for basic authentication, with its password's file.
    pub user: Option<String>,
    pub password_file: Option<PathBuf>,
    /// A CA certificate (PEM) to trust for https://, besides the system's.
    pub cacert: Option<PathBuf>,
}

/// One cluster: its name (the source's last part) and its client.
pub struct Flink {
    pub name: String,
    base: String,
    http: reqwest::Client,
    credentials: Credentials,
}

/// What each request carries (reqwest marks both headers sensitive).
enum Credentials {
    None,
    Bearer(String),
    Basic {
        user: String,
        password: Option<String>,
    },
}

/// A request's timeout: a poll never waits longer for one answer.
const TIMEOUT: Duration = Duration::from_secs(5);

fn first_line(path: &PathBuf, what: &str) -> Result<String, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("{what} {}: {e}", path.display()))?;
    let line = text.lines().next().unwrap_or_default().trim().to_owned();
    if line.is_empty() {
        return Err(format!("{what} {}: empty", path.display()));
    }
    Ok(line)
}

impl Flink {
    /// `spec` is `NAME=URL` or a URL (named by its host and port).
    pub fn new(spec: &str, auth: &Auth) -> Result<Flink, String> {
        let (name, url) = match spec.split_once('=') {
            Some((name, url)) if !name.contains("://") => (Some(name.to_owned()), url),
            _ => (None, spec),
        };
        let parsed = reqwest::Url::parse(url).map_err(|e| format!("--flink {spec}: {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(format!("--flink {spec}: not an http:// or https:// URL"));
        }
        let name = match name {
            Some(name) => name,
            None => {
                let host = parsed.host_str().unwrap_or_default();
                parsed
                    .port()
                    .map_or_else(|| host.to_owned(), |port| format!("{host}:{port}"))
            }
        };
        if name.is_empty() || name.chars().any(|c| c.is_control() || c == '/' || c == ' ') {
            return Err(format!(
                "--flink {spec}: the cluster's name must be non-empty, without `/`, spaces or control characters"
            ));
        }
        let mut builder = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .connect_timeout(TIMEOUT);
        if let Some(cacert) = &auth.cacert {
            let pem = std::fs::read(cacert)
                .map_err(|e| format!("--flink-cacert {}: {e}", cacert.display()))?;
            let cert = reqwest::Certificate::from_pem(&pem)
                .map_err(|e| format!("--flink-cacert {}: {e}", cacert.display()))?;
            builder = builder.add_root_certificate(cert);
        }
        let http = builder.build().map_err(|e| e.to_string())?;
        let credentials = match (&auth.token_file, &auth.user) {
            (Some(file), _) => Credentials::Bearer(first_line(file, "--flink-token-file")?),
            (None, Some(user)) => Credentials::Basic {
                user: user.clone(),
                password: match &auth.password_file {
                    Some(file) => Some(first_line(file, "--flink-password-file")?),
                    None => None,
                },
            },
            (None, None) => Credentials::None,
        };
        Ok(Flink {
            name,
            base: url.trim_end_matches('/').to_owned(),
            http,
            credentials,
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, String> {
        let mut request = self.http.get(format!("{}{path}", self.base));
        request = match &self.credentials {
            Credentials::None => request,
            Credentials::Bearer(token) => request.bearer_auth(token),
            Credentials::Basic { user, password } => request.basic_auth(user, password.as_ref()),
        };
        let response = request
            .send()
            .await
            .map_err(|e| format!("{}{path}: {}", self.base, blocklist::client::chain(&e)))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("{}{path}: {status}", self.base));
        }
        let body = response
            .bytes()
            .await
            .map_err(|e| format!("{}{path}: {e}", self.base))?;
        serde_json::from_slice(&body)
            .map_err(|e| format!("{}{path}: not Flink's answer: {e}", self.base))
    }

    pub async fn jobs(&self) -> Result<Overview, String> {
        self.get("/jobs/overview").await
    }

    pub async fn history(&self, job: &str) -> Result<History, String> {
        let exceptions: Exceptions = self.get(&format!("/jobs/{job}/exceptions")).await?;
        Ok(exceptions.exception_history)
    }

    /// The task managers `job` runs on now: those of every vertex's subtasks.
    pub async fn running(&self, job: &str) -> Result<Vec<String>, String> {
        let detail: JobDetail = self.get(&format!("/jobs/{job}")).await?;
        let mut all = Vec::new();
        for vertex in detail.vertices {
            let tms: VertexTaskManagers = self
                .get(&format!("/jobs/{job}/vertices/{}/taskmanagers", vertex.id))
                .await?;
            all.extend(tms.taskmanagers.into_iter().map(|tm| tm.id));
        }
        all.sort();
        all.dedup();
        Ok(all)
    }

    pub async fn task_managers(&self) -> Result<Vec<TaskManager>, String> {
        Ok(self
            .get::<TaskManagers>("/taskmanagers")
            .await?
            .taskmanagers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_is_named_by_its_name_or_its_address() {
        let auth = Auth::default();
        assert_eq!(
            Flink::new("prod=http://jm:8081", &auth).unwrap().name,
            "prod"
        );
        assert_eq!(
            Flink::new("http://jm:8081/", &auth).unwrap().name,
            "jm:8081"
        );
        assert_eq!(
            Flink::new("http://jm:8081/", &auth).unwrap().base(),
            "http://jm:8081"
        );
        assert!(Flink::new("ftp://jm", &auth).is_err());
        assert!(Flink::new("a/b=http://jm", &auth).is_err());
    }
}
