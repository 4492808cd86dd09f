//! What a commit wrote, key by key: the unit a replicated store commits and a follower
//! replays.
//!
//! Every write of the committer goes through a [`TxTree`] (inside the batch's transaction)
//! or a [`Logged`] batch (the prunes after it). Each keeps, when the store keeps a
//! [`WriteLog`], the write as a [`Write`]: the tree, the key, and the new value (`None`:
//! removed). Replaying a commit's writes in order onto the state before it gives the state
//! after it, byte for byte, in every tree ([`replay`]; the test below holds the committer to
//! it across every kind of write).
//!
//! Within one transaction a key may be written twice; the later write wins, on sled and in
//! the replay alike.

use std::cell::RefCell;

use serde::{Deserialize, Serialize};
use sled::transaction::{TransactionalTree, UnabortableTransactionError};
use sled::IVec;

use super::{TreeId, Trees};

/// One key written: its new value, or `None` when it was removed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Write {
    pub tree: TreeId,
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

/// The writes of one commit so far, in order.
pub(crate) type WriteLog = RefCell<Vec<Write>>;

pub(crate) fn log_write(log: Option<&WriteLog>, tree: TreeId, key: &[u8], value: Option<&[u8]>) {
    if let Some(log) = log {
        log.borrow_mut().push(Write {
            tree,
            key: key.to_vec(),
            value: value.map(<[u8]>::to_vec),
        });
    }
}

/// Where each durable group's writes go before the group is answered: a replicated log.
/// A group is acknowledged only once `replicate` returned `Ok` for its writes (and those of
/// every group before it); an error fails the groups like a failed flush, and the committer
/// reopens the store before its next write.
pub(crate) trait Replicate: Send + Sync + std::fmt::Debug {
    /// Commits `writes`, the writes of one or more groups in commit order, in one step.
    fn replicate(&self, writes: &[Write]) -> Result<(), super::StoreError>;

    /// Err while the replica refuses every write for a reason only an operator can clear
    /// (etcd's NOSPACE alarm, still raised): a batch is then refused before it changes the
    /// mirror, instead of committed, refused and rolled back by a rebuild each time.
    fn refuses_writes(&self) -> Result<(), super::StoreError> {
        Ok(())
    }
}

type TxTreeResult<T> = Result<T, UnabortableTransactionError>;

/// A tree inside the batch's transaction: sled's own, with each write also logged when the
/// store keeps a [`WriteLog`]. The methods are sled's, by name and signature.
#[derive(Clone, Copy)]
pub(crate) struct TxTree<'a> {
    tree: &'a TransactionalTree,
    id: TreeId,
    log: Option<&'a WriteLog>,
}

impl<'a> TxTree<'a> {
    pub fn new(tree: &'a TransactionalTree, id: TreeId, log: Option<&'a WriteLog>) -> Self {
        TxTree { tree, id, log }
    }

    pub fn get<K: AsRef<[u8]>>(&self, key: K) -> TxTreeResult<Option<IVec>> {
        self.tree.get(key)
    }

    pub fn insert<K, V>(&self, key: K, value: V) -> TxTreeResult<Option<IVec>>
    where
        K: AsRef<[u8]> + Into<IVec>,
        V: Into<IVec>,
    {
        if self.log.is_none() {
            return self.tree.insert(key, value);
        }
        let value: IVec = value.into();
        log_write(self.log, self.id, key.as_ref(), Some(&value));
        self.tree.insert(key, value)
    }

    pub fn remove<K>(&self, key: K) -> TxTreeResult<Option<IVec>>
    where
        K: AsRef<[u8]> + Into<IVec>,
    {
        log_write(self.log, self.id, key.as_ref(), None);
        self.tree.remove(key)
    }
}

/// A batch of removals from one tree outside the transaction (the prunes), logged as it
/// is built and applied at once.
pub(crate) struct Logged<'a> {
    batch: sled::Batch,
    id: TreeId,
    log: Option<&'a WriteLog>,
}

impl<'a> Logged<'a> {
    pub fn new(id: TreeId, log: Option<&'a WriteLog>) -> Self {
        Logged {
            batch: sled::Batch::default(),
            id,
            log,
        }
    }

    pub fn remove(&mut self, key: &[u8]) {
        log_write(self.log, self.id, key, None);
        self.batch.remove(key);
    }

    /// Applies the batch to its tree among `trees`, atomically.
    pub fn apply(self, trees: &Trees) -> sled::Result<()> {
        self.id.of(trees).apply_batch(self.batch)
    }
}

/// Applies `writes`, in order, to `trees`: one atomic batch per tree (a replay of a whole
/// commit is made atomic by whoever reads only after it: the etcd store replays its log
/// before it opens).
#[cfg(any(test, feature = "etcd"))]
pub(crate) fn replay(trees: &Trees, writes: &[Write]) -> sled::Result<()> {
    for id in TreeId::ALL {
        let mut batch = sled::Batch::default();
        let mut any = false;
        for write in writes.iter().filter(|w| w.tree == id) {
            any = true;
            match &write.value {
                Some(value) => batch.insert(write.key.as_slice(), value.as_slice()),
                None => batch.remove(write.key.as_slice()),
            }
        }
        if any {
            id.of(trees).apply_batch(batch)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::*;
    use crate::allowlist::Entry;
    use crate::model::{Kind, NewItem, PERMANENT};
    use crate::store::testing::{new_item, runtime, shut};
    use crate::store::{
        AddOutcome, HistoryRetention, Idempotency, KeptResponse, Mode, Retention, Store,
        StoreConfig, StoreError,
    };

    /// Keeps every write it is handed, in order.
    #[derive(Debug, Default)]
    struct Kept(Mutex<Vec<Write>>);

    impl Replicate for Kept {
        fn replicate(&self, writes: &[Write]) -> Result<(), StoreError> {
            self.0.lock().unwrap().extend_from_slice(writes);
            Ok(())
        }
    }

    type Contents = BTreeMap<(u8, Vec<u8>), Vec<u8>>;

    fn contents(trees: &Trees) -> Contents {
        let mut all = Contents::new();
        for id in TreeId::ALL {
            for entry in id.of(trees) {
                let (key, value) = entry.unwrap();
                all.insert((id as u8, key.to_vec()), value.to_vec());
            }
        }
        all
    }

    fn element(id: &str, end: i64, source: &str) -> NewItem {
        NewItem {
            end,
            cause: format!("cause of {id}"),
            allow_merge: true,
            source: source.into(),
            ..new_item(id)
        }
    }

    /// A key whose successes are kept as `body`.
    fn keyed(key: &str, body: Vec<u8>) -> Idempotency<AddOutcome> {
        Idempotency {
            key: key.to_owned(),
            fingerprint: [7; 32],
            render: Arc::new(move |outcome: &AddOutcome, _| {
                matches!(outcome, AddOutcome::Written { .. }).then(|| KeptResponse {
                    status: 201,
                    headers: Vec::new(),
                    body: body.clone(),
                })
            }),
        }
    }

    fn now() -> i64 {
        let since = std::time::UNIX_EPOCH.elapsed().unwrap();
        i64::try_from(since.as_millis()).unwrap()
    }

    /// The invariant a replicated store rests on: the writes the committer hands over,
    /// replayed onto the state it opened with, give the state it stopped with, byte for
    /// byte in every tree — through adds, merges with reports, timed items expiring
    /// (announce, history, reclaim), removals, registrations, the allowlist, the policy,
    /// keyed writes with chunked answers, an import, and the prunes of the event log, the
    /// history and the records.
    #[test]
    fn replaying_the_handed_over_writes_gives_the_stored_state() {
        let dir = tempfile::tempdir().unwrap();
        let kept = Arc::new(Kept::default());
        let mut config = StoreConfig::new(dir.path().join("data"));
        config.replicate = Some(kept.clone());
        config.retention = Retention {
            count: 5,
            max_age_ms: i64::MAX,
        };
        config.history = HistoryRetention {
            per_id: 1,
            max_age_ms: 1,
        };
        config.idempotency_retention_ms = 50;
        let store = Store::open(&config).unwrap();
        let before = contents(&store.handles().unwrap().trees);

        runtime().block_on(async {
            let pairs = [("tm-1", "n1"), ("tm-2", "n1"), ("tm-3", "n2")];
            let pairs = pairs.map(|(tm, node)| (tm.to_owned(), node.to_owned()));
            store.register(pairs.to_vec()).await.unwrap();
            store.unregister("tm-3".into()).await.unwrap();
            let soon = now() + 40;
            let items = vec![element("n1", PERMANENT, "a"), element("n2", soon, "a")];
            store.add(Kind::Node, items, now()).await.unwrap();
            for source in ["b", "c", "d"] {
                let merge = vec![element("n1", PERMANENT, source)];
                store.add(Kind::Node, merge, now()).await.unwrap();
            }
            let tms = vec![element("tm-1", soon, "a"), element("tm-2", PERMANENT, "a")];
            store.add(Kind::TaskManager, tms, now()).await.unwrap();
            store
                .remove(Kind::TaskManager, "tm-2".into())
                .await
                .unwrap();
            let big = vec![b'x'; 40_000];
            let small = b"kept".to_vec();
            for (key, body) in [("k-big", big), ("k-small", small)] {
                let item = vec![element(key, PERMANENT, "k")];
                let writer = store.with_mode(Mode::Commit).keyed(Some(keyed(key, body)));
                writer.add(Kind::Node, item, now()).await.unwrap();
            }
            let entry = Entry {
                kind: Kind::Node,
                id: "safe-".into(),
                prefix: true,
                comment: "never".into(),
                added_by: None,
                added_at: now(),
                end_timestamp: None,
            };
            store.put_allow(entry).await.unwrap();
            store
                .remove_allow(Kind::Node, "safe-".into())
                .await
                .unwrap();
            let (mut policy, _) = store.policy().await.unwrap();
            policy.min_registered += 1;
            store.set_policy(policy).await.unwrap();
            let imported = (0..50)
                .map(|i| {
                    let item = element(&format!("imp-{i}"), PERMANENT, "i");
                    (
                        Kind::Node,
                        crate::model::Item::new(item.id.clone(), item.to_block(1)),
                    )
                })
                .collect();
            store.import(imported, false).await.unwrap();
            // The timed items come due; announced, then reclaimed; the records and the
            // history pass retention and are pruned by the commits after.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let (expired, _) = store.announce(now(), 100).await.unwrap();
            assert_eq!(expired.len(), 2, "{expired:?}");
            let reclaimable = store.reclaimable(100).unwrap();
            assert_eq!(store.reclaim(reclaimable).await.unwrap(), 2);
            for i in 0..3 {
                let item = vec![element(&format!("late-{i}"), PERMANENT, "l")];
                store.add(Kind::Node, item, now()).await.unwrap();
            }
        });
        let handles = store.handles().unwrap();
        shut(store);
        let after = contents(&handles.trees);
        drop(handles);

        let replica = sled::Config::new().temporary(true).open().unwrap();
        let trees = Trees::of(&replica).unwrap();
        for ((tree, key), value) in &before {
            let id = TreeId::ALL[usize::from(*tree)];
            id.of(&trees)
                .insert(key.as_slice(), value.as_slice())
                .unwrap();
        }
        let writes = kept.0.lock().unwrap().clone();
        for tree in [
            TreeId::Reports,
            TreeId::History,
            TreeId::Idempotency,
            TreeId::Allowlist,
        ] {
            assert!(
                writes.iter().any(|w| w.tree == tree && w.value.is_none()),
                "no removal from {tree:?} was handed over: the workload misses a case"
            );
        }
        replay(&trees, &writes).unwrap();
        let replayed = contents(&trees);
        let differ: Vec<_> = after
            .iter()
            .filter(|(key, value)| replayed.get(key) != Some(value))
            .map(|((tree, key), _)| {
                (
                    TreeId::ALL[usize::from(*tree)],
                    String::from_utf8_lossy(key),
                )
            })
            .chain(
                replayed
                    .keys()
                    .filter(|key| !after.contains_key(key))
                    .map(|(tree, key)| {
                        (
                            TreeId::ALL[usize::from(*tree)],
                            String::from_utf8_lossy(key),
                        )
                    }),
            )
            .collect();
        assert!(differ.is_empty(), "replayed state differs at {differ:?}");
    }
}
