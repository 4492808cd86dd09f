//! Which etcd member a call goes to. etcd-client balances over its endpoints but neither
//! skips a dead member nor retries (`../shared/ETCD.md`: about half the requests after a
//! member's death went to it, for as long as it stayed dead). So the daemon keeps one
//! client per member, sends every call to the **current** member, and moves on to the next
//! when a call to it fails the way another member may get past: a refused connection, no
//! answer within the attempt's time, no leader. etcd's own Go client pins one endpoint the
//! same way.
//!
//! Invariant: a call's attempt reads the current member once and reports a failure against
//! that member only, so attempts failing together on one dead member move the current
//! member by one step, not by one step each.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use tokio::sync::OnceCell;

/// One attempt's outcome.
pub(super) enum Attempt<T> {
    Done(T),
    /// Failed so that another attempt may succeed; the text says how.
    Again(String),
    /// Failed for good (a refusal, a malformed request).
    Failed(String),
}

pub(super) struct Members {
    urls: Vec<String>,
    options: ConnectOptions,
    /// Connected on first use: a member down at start costs nothing until it is tried.
    clients: Vec<OnceCell<Client>>,
    current: AtomicUsize,
}

impl Members {
    pub fn new(urls: Vec<String>, options: ConnectOptions) -> Members {
        let clients = urls.iter().map(|_| OnceCell::new()).collect();
        Members {
            urls,
            options,
            clients,
            current: AtomicUsize::new(0),
        }
    }

    /// The number of the member calls go to now.
    pub fn current(&self) -> usize {
        self.current.load(Ordering::SeqCst)
    }

    /// Member `member`'s client, connected on first use.
    pub async fn client(&self, member: usize) -> Result<Client, etcd_client::Error> {
        self.clients[member]
            .get_or_try_init(|| {
                Client::connect([self.urls[member].as_str()], Some(self.options.clone()))
            })
            .await
            .cloned()
    }

    /// Runs the call `make` builds once, on the current member, within `within`; moves on
    /// to the next member when it failed in a way another may get past.
    pub async fn attempt<T, F, Fut>(&self, within: Duration, make: &F) -> Attempt<T>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let member = self.current();
        // The connection too: opening one to a member that went away may hang.
        let outcome = tokio::time::timeout(within, async {
            match self.client(member).await {
                Ok(client) => make(client).await,
                Err(e) => Err(e),
            }
        })
        .await;
        match outcome {
            Ok(Ok(value)) => Attempt::Done(value),
            Ok(Err(e)) if !retryable(&e) => Attempt::Failed(e.to_string()),
            Ok(Err(e)) => {
                let error = e.to_string();
                self.failed(member, &error);
                Attempt::Again(error)
            }
            Err(_) => {
                let error = format!("no answer within {within:?}");
                self.failed(member, &error);
                Attempt::Again(error)
            }
        }
    }

    /// A call to `member` failed in a way another member may get past: later calls go to
    /// the next one, unless another failure moved on already.
    pub fn failed(&self, member: usize, error: &str) {
        let next = (member + 1) % self.urls.len();
        if next != member
            && self
                .current
                .compare_exchange(member, next, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            tracing::warn!(
                member = %self.urls[member],
                next = %self.urls[next],
                error,
                "an etcd member failed a call; moving to the next"
            );
        }
    }
}

/// Whether another attempt of a call that failed so may succeed.
fn retryable(error: &etcd_client::Error) -> bool {
    use tonic::Code;
    match error {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        etcd_client::Error::GRpcStatus(status) => matches!(
            status.code(),
            Code::Unavailable
                | Code::Unknown
                | Code::DeadlineExceeded
                | Code::Aborted
                | Code::Cancelled
        ),
        _ => false,
    }
}
