//! Why the daemon could not start, or stopped with an error.

use crate::store::StoreError;

/// Why the daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Config(String),
    #[error("cannot open the store: {0}")]
    Store(#[from] StoreError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("server error: {0}")]
    Serve(std::io::Error),
    /// The roles met an observation their transitions do not allow (a bug, never a
    /// condition of the cluster): the daemon stops rather than guess.
    #[error("internal error: {0}")]
    Internal(String),
}
