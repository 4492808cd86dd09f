//! Every daemon of one prefix, as the binaries beside a cluster reach them.
//!
//! Any daemon of a prefix answers (replicas serve reads and send writes on to the writer,
//! and the feed resumes anywhere by its event ids), so they are given them all and move to
//! the next one whenever the one they use fails: a writer killed, a replica gone.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use reqwest::Method;

use crate::client::{Client, Failure, Reply, TlsFiles};

/// The daemons of one prefix, each with a client for requests and one for streams.
pub struct Daemons {
    daemons: Vec<(Client, Client)>,
    /// The daemon requests go to now.
    current: AtomicUsize,
}

impl Daemons {
    /// Clients for every URL, with the token (its file's first line) and the TLS files.
    pub fn new(
        urls: &[String],
        token_file: Option<&Path>,
        tls: &TlsFiles,
    ) -> Result<Daemons, String> {
        if urls.is_empty() {
            return Err("--daemon names no daemon".into());
        }
        let client = |url: &str, streaming| {
            Client::new(url, token_file, tls, streaming)
                .map_err(|e| format!("--daemon {url}: {}", e.messages().join("; ")))
        };
        let daemons = urls
            .iter()
            .map(|url| Ok((client(url, false)?, client(url, true)?)))
            .collect::<Result<_, String>>()?;
        Ok(Daemons {
            daemons,
            current: AtomicUsize::new(0),
        })
    }

    fn pair(&self) -> &(Client, Client) {
        &self.daemons[self.current.load(Ordering::SeqCst) % self.daemons.len()]
    }

    /// The client of the daemon requests go to now.
    pub fn client(&self) -> &Client {
        &self.pair().0
    }

    /// Its client for streams (no whole-request timeout): the change feed.
    pub fn streams(&self) -> &Client {
        &self.pair().1
    }

    /// The daemon in use failed: later requests go to the next one.
    pub fn failed(&self) {
        if self.daemons.len() > 1 {
            let next = self.current.fetch_add(1, Ordering::SeqCst) + 1;
            let failed = self.daemons[(next - 1) % self.daemons.len()].0.base();
            let next = self.daemons[next % self.daemons.len()].0.base();
            tracing::warn!(%failed, %next, "a daemon failed; moving to the next");
        }
    }

    /// A failure as text, after moving on from the daemon when it could not be reached or
    /// was not able to answer (5xx): another may.
    pub fn failure(&self, what: &str, failure: &Failure) -> String {
        let moves = match failure {
            Failure::Unreachable(_) => true,
            Failure::Refused(messages) => messages.iter().any(|m| m.starts_with('5')),
        };
        if moves {
            self.failed();
        }
        format!("{what}: {}", failure.messages().join("; "))
    }

    /// [`Client::send`] to the daemon in use, moving on from it when it fails as
    /// [`Daemons::failure`] says.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<Reply, Failure> {
        let answer = self.client().send(method, path, body).await;
        if let Err(failure) = &answer {
            let _ = self.failure(path, failure);
        }
        answer
    }
}
