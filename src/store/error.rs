//! What can go wrong in the store, and which failures are the storage's own (answered 503)
//! rather than the data's; and the decoding of stored values, which fails as
//! [`StoreError::Corrupt`] naming the key.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{codec, datadir, CodecError, KeptResponse};
use crate::model::Block;

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("data dir {0} is in use by another process (is another blocklistd running on it?)")]
    InUse(PathBuf),
    #[error("not a blocklistd data dir: {0}")]
    Foreign(String),
    #[error(
        "the database has schema version {found}, newer than this binary supports \
         ({supported}): run a newer blocklistd"
    )]
    TooNew { found: u32, supported: u32 },
    #[error(
        "sled could not recover the database in {}: {cause}.{}\n{} Keep a copy of the whole \
         directory, then run `blocklistd --data-dir {} salvage --out items.jsonl` to export \
         what is still readable, and `blocklistd --data-dir NEW_DIR import items.jsonl` to \
         load it into a new data dir (docs/operations.md, \"A damaged data dir\")",
        dir.display(),
        damage_lines(files),
        if *untouched {
            "The data dir was not changed."
        } else {
            "sled may have rewritten the end of its log while it tried."
        },
        dir.display()
    )]
    Damaged {
        dir: PathBuf,
        cause: String,
        /// What looks damaged, one file per line (see [`datadir::damage_report`]).
        files: Vec<String>,
        /// Whether the failure was found before sled's recovery ran on the data dir.
        untouched: bool,
    },
    #[error("storage error: {0}")]
    Sled(#[from] sled::Error),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("corrupt value under key {key:?}: {source}")]
    Corrupt { key: String, source: CodecError },
    /// A write was not committed, or not made durable; [`CommitError`] says why. 503 (see
    /// [`StoreError::is_unavailable`]): the storage failed, not the request; the detail
    /// names paths and sled internals, so it goes to the log and the client gets the
    /// generic message.
    #[error("the write was not committed: {0}")]
    NotCommitted(#[from] CommitError),
    /// A read run on the blocking pool panicked or was cancelled. 503, as a failure of the
    /// daemon rather than of the request; a panic message is no business of the client's.
    #[error("read task failed: {0}")]
    ReadTaskFailed(#[source] tokio::task::JoinError),
    /// A streamed listing's producer stopped before its last chunk: the body fails rather
    /// than end early, so a client never takes a cut-off listing for a complete one. Met
    /// after the status is sent, so no status of its own is ever answered; it counts as
    /// 503 and stays out of the body like every storage failure.
    #[error("the listing stopped before its end")]
    ListingStopped,
    /// The transaction of a schema upgrade step failed on a storage error. Met while
    /// opening, so it stops the start (or fails a reopen) rather than reach a client; it
    /// counts as 503 like the storage error it is, with the detail kept to the log.
    #[error("upgrade to schema {to} failed: {source}")]
    UpgradeFailed {
        to: u32,
        #[source]
        source: sled::Error,
    },
    /// A call to etcd failed or went unanswered within its deadline (`--store etcd`). 503:
    /// a write it was part of may or may not have taken, which the reopen reads back.
    #[error("etcd: {0}")]
    Etcd(String),
    /// Another daemon is the writer of the etcd prefix (its name), or this one's lease
    /// ended: nothing is written until it wins the writer key again. 503.
    #[error("this daemon is not the writer of the etcd prefix ({0})")]
    NotWriter(String),
    /// A replica could not confirm it shows every acknowledged write (etcd unreachable,
    /// its watch behind or cut off): the read is not answered from a state that may be
    /// stale. 503; the message says why, for the client too.
    #[error("{0}")]
    Behind(String),
    #[error("the store is shut down")]
    Closed,
    #[error("the database is being reopened after a storage error")]
    Reopening,
    #[error(
        "the disk has not confirmed, within {0:?}, the writes this read depends on; \
         the answer is withheld rather than risk one a crash could take back"
    )]
    NotDurable(std::time::Duration),
    /// How a dry run's transaction ends once it has decided its outcome: rolled back, so
    /// that it writes nothing. Never leaves the committer.
    #[error("a dry run's transaction, rolled back on purpose")]
    RolledBack,
    /// Not a failure: the request's `Idempotency-Key` has a live record of the same
    /// request, whose response this is, to be sent again; nothing was applied. It takes the
    /// error path because it ends the request where the store is called, as a refusal would,
    /// with an answer the handler did not build.
    #[error("answered before under its Idempotency-Key: replayed")]
    Replay(Box<KeptResponse>),
    /// The request's `Idempotency-Key` was first used by a different request (another
    /// fingerprint), within the retention; nothing was applied. The HTTP layer answers 422.
    #[error("Idempotency-Key {0:?} was first used for a different request")]
    KeyReused(String),
}

impl StoreError {
    /// [`StoreError::Damaged`] for `dir`, with what [`datadir::damage_report`] finds there.
    pub(super) fn damaged(dir: &Path, cause: impl Into<String>, untouched: bool) -> StoreError {
        StoreError::Damaged {
            dir: dir.to_owned(),
            cause: cause.into(),
            files: datadir::damage_report(dir),
            untouched,
        }
    }
}

/// The damaged files of [`StoreError::Damaged`], as lines of its message.
fn damage_lines(files: &[String]) -> String {
    if files.is_empty() {
        return " No file looks damaged on its own (the log itself may be).".into();
    }
    const SHOWN: usize = 10;
    let mut text = String::from(" Damaged files:");
    for file in files.iter().take(SHOWN) {
        text.push_str("\n  ");
        text.push_str(file);
    }
    if files.len() > SHOWN {
        let _ = write!(text, "\n  … and {} more", files.len() - SHOWN);
    }
    text
}

/// What etcd answers a write past its space quota with (its NOSPACE alarm).
pub(crate) const ETCD_NOSPACE: &str = "database space exceeded";

impl StoreError {
    /// What an operator must do before a 503 can clear, when the client may be told: etcd
    /// out of space (`--store etcd`). `None` for every other failure, whose details stay in
    /// the log.
    pub fn operator_action(&self) -> Option<&'static str> {
        let inner = match self {
            StoreError::NotCommitted(
                CommitError::SyncFailed(e)
                | CommitError::ReopenFailed(e)
                | CommitError::TransactionFailed(e),
            ) => e.as_ref(),
            other => other,
        };
        match inner {
            StoreError::Etcd(message) if message.contains(ETCD_NOSPACE) => Some(
                "etcd refuses writes: its space quota is exceeded (NOSPACE alarm). An operator \
                 must compact and defragment etcd and disarm the alarm \
                 (docs/operations.md, \"Running on etcd\")",
            ),
            _ => None,
        }
    }

    /// Whether the failure is the storage's (disk full, I/O error, shutting down) rather than
    /// a problem with the data: the HTTP layer answers 503 for these.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            StoreError::Sled(_)
                | StoreError::Io(_)
                | StoreError::NotCommitted(_)
                | StoreError::ReadTaskFailed(_)
                | StoreError::ListingStopped
                | StoreError::UpgradeFailed { .. }
                | StoreError::Closed
                | StoreError::Etcd(_)
                | StoreError::NotWriter(_)
                | StoreError::Behind(_)
                | StoreError::Reopening
                | StoreError::NotDurable(_)
        )
    }
}

/// Decodes the item stored under `key`.
pub(super) fn decode(key: &[u8], bytes: &[u8]) -> Result<Block> {
    codec::decode_block(bytes).map_err(|source| StoreError::Corrupt {
        key: String::from_utf8_lossy(key).into_owned(),
        source,
    })
}

/// Decodes the registration value of task manager `tm`.
pub(crate) fn registration(tm: &str, bytes: &[u8]) -> Result<String> {
    codec::decode_registration(bytes).map_err(|source| StoreError::Corrupt {
        key: format!("taskmanager registration {tm}"),
        source,
    })
}

/// The error for a key no encoding in [`super::keys`] produced.
pub(super) fn bad_key(key: &[u8]) -> StoreError {
    StoreError::Corrupt {
        key: String::from_utf8_lossy(key).into_owned(),
        source: CodecError::Decode("malformed key".into()),
    }
}

/// What a caught panic said.
pub(super) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(text), _) => (*text).to_owned(),
        (_, Some(text)) => text.clone(),
        _ => "a panic without a message".to_owned(),
    }
}

/// Why a write was not committed. One cause answers every request of a batch (or of a
/// sync pass), so it is cheap to clone: the sources are shared.
///
/// Each is answered as [`StoreError::NotCommitted`]: a 503 (see
/// [`StoreError::is_unavailable`]) with the generic "the store is unavailable" message of
/// `http::error`. The storage failed, not the request, so the client's part is to retry
/// later; the detail names paths and sled internals and goes to the daemon's log only.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CommitError {
    /// The storage failed earlier and does not work yet: the probe before a reopen (free
    /// space, then a small synced write in the data dir) failed, so the database stays
    /// closed and the batch is refused unwritten.
    #[error("storage probe failed: {0}")]
    StorageStillFailing(#[source] Arc<std::io::Error>),
    /// The storage works again but reopening the database on it failed; the batch is
    /// refused unwritten and the reopen is retried.
    #[error("reopening failed: {0}")]
    ReopenFailed(#[source] Arc<StoreError>),
    /// The batch's transaction, or the read of the expiry index it needs first, failed on
    /// a storage error: nothing of the batch was written.
    #[error("{0}")]
    TransactionFailed(#[source] Arc<StoreError>),
    /// The transaction committed in memory, but the flush or fsync meant to make it
    /// durable failed: it may or may not be on disk, which the reopen finds out.
    #[error("{0}")]
    SyncFailed(#[source] Arc<StoreError>),
    /// The transaction committed in memory, but the blob files sled wrote for it could not
    /// be fsynced: like a failed flush.
    #[error("fsync of sled's blob files failed: {0}")]
    BlobSyncFailed(#[source] Arc<std::io::Error>),
    /// The transaction committed in memory after a flush had failed: sled refuses to make
    /// anything durable until the database is reopened.
    #[error("an earlier flush failed; the database is being reopened")]
    EarlierSyncFailed,
}
