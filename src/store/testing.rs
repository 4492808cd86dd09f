//! What the store's unit tests share: a runtime, a stop that waits for the committer, and
//! the new item they add.

use crate::model::{Action, NewItem, PERMANENT};

use super::Store;

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Stops `store` and waits for its committer (from a thread of its own: the stop blocks).
pub(crate) fn shut(store: Store) {
    std::thread::spawn(move || store.shutdown().unwrap())
        .join()
        .unwrap();
}

/// A permanent `MARK_BLOCKED` of `id` from `unknown`, no merge allowed.
pub(crate) fn new_item(id: &str) -> NewItem {
    NewItem {
        id: id.to_owned(),
        action: Action::MarkBlocked,
        end: PERMANENT,
        cause: "c".into(),
        allow_merge: false,
        source: "unknown".into(),
        timeout: None,
        details: crate::model::Details::new(),
    }
}
