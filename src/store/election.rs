//! The prefix's writer election as the rest of the daemon sees it: whether this daemon is
//! the writer, who is, and how to stop waiting to become it. On sled there is no election
//! (`StoreConfig::election` is `None`); on etcd it is the writer key ([`super::etcd`]).

use std::sync::Arc;

use super::Result;

/// The writer election of an etcd prefix.
#[derive(Clone, Debug)]
pub struct Election {
    #[cfg(feature = "etcd")]
    pub(super) etcd: Arc<super::etcd::Etcd>,
    #[cfg(not(feature = "etcd"))]
    never: Arc<std::convert::Infallible>,
}

impl Election {
    /// Whether this daemon holds the writer key with a live lease.
    pub fn is_writer(&self) -> bool {
        #[cfg(feature = "etcd")]
        return self.etcd.is_writer();
        #[cfg(not(feature = "etcd"))]
        match *self.never {}
    }

    /// What the current writer wrote in the writer key when it won it (its announcement:
    /// name and URL), or `None` while nobody holds it. A linearizable read.
    pub fn writer(&self) -> Result<Option<String>> {
        #[cfg(feature = "etcd")]
        return self.etcd.writer();
        #[cfg(not(feature = "etcd"))]
        match *self.never {}
    }

    /// Whether the writer key holds another daemon's announcement, or nothing (a
    /// linearizable read).
    pub fn not_held_by_this(&self) -> Result<bool> {
        #[cfg(feature = "etcd")]
        return self.etcd.not_held_by_this();
        #[cfg(not(feature = "etcd"))]
        match *self.never {}
    }

    /// Tries once to become the writer, without waiting for another daemon's lease to end:
    /// `Ok(true)` when this daemon is the writer now.
    pub fn try_win(&self) -> Result<bool> {
        #[cfg(feature = "etcd")]
        return match self.etcd.campaign(Some(std::time::Duration::ZERO)) {
            Ok(()) => Ok(true),
            Err(super::StoreError::NotWriter(_)) => Ok(false),
            Err(e) => Err(e),
        };
        #[cfg(not(feature = "etcd"))]
        match *self.never {}
    }

    /// Gives the writer key up (revokes this daemon's lease) after an open as the writer
    /// failed: another daemon may take over meanwhile. Blocking.
    pub fn give_up(&self) {
        #[cfg(feature = "etcd")]
        self.etcd.resign();
        #[cfg(not(feature = "etcd"))]
        match *self.never {}
    }

    /// Ends a wait to become the writer (a replica's open that is still waiting returns
    /// [`super::StoreError::Closed`]): the daemon is stopping.
    pub fn stop_waiting(&self) {
        #[cfg(feature = "etcd")]
        self.etcd.stop_waiting();
        #[cfg(not(feature = "etcd"))]
        match *self.never {}
    }
}

/// What a daemon writes in the writer key when it wins it: who it is, for operators and
/// the logs, and where the other daemons on the prefix send what only the writer does.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Announcement {
    /// For people: the process and its address.
    pub name: String,
    /// Where to forward requests to (`--advertise-url`); `None` for an offline tool, which
    /// serves nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

impl Announcement {
    /// As written in the writer key.
    pub fn to_value(&self) -> String {
        serde_json::to_string(self).expect("an announcement serializes")
    }

    /// Read from the writer key: a value that is not an announcement (another program's)
    /// is a name without a URL.
    pub fn from_value(value: &str) -> Announcement {
        serde_json::from_str(value).unwrap_or_else(|_| Announcement {
            name: value.to_owned(),
            url: None,
        })
    }
}
