//! What the committer keeps in memory beside the trees, read in full when the database
//! opens: the task managers on each node, the share caps' figures
//! ([`crate::policy::Exposure`], kept by `commit/exposure.rs` from then on, and stored in
//! `meta/exposure` so that an open reads them instead of counting them here), and the
//! allowlist's prefix entries. A transaction cannot scan a tree, so these are what it
//! cannot look up by key.

use std::collections::{BTreeSet, HashMap};

use sled::Tree;

use super::{announced, codec, keys, registration, Result, StoreError};
use crate::allowlist::Entry;
use crate::model::Kind;
use crate::policy::{Exposure, Level};

/// The task managers registered on each node (nodes without any are absent).
pub(crate) type Members = HashMap<String, BTreeSet<String>>;

/// The task managers registered on each node, from the registrations alone (at open, when
/// the figures are stored: see [`super::meta::EXPOSURE_KEY`]).
pub(crate) fn scan_members(tm_node: &Tree) -> Result<Members> {
    let mut members = Members::new();
    for entry in tm_node {
        let (key, value) = entry?;
        let tm = std::str::from_utf8(&key)
            .map_err(|_| StoreError::Foreign("a task manager id is not UTF-8".into()))?;
        if let Ok(node) = registration(tm, &value) {
            members.entry(node).or_default().insert(tm.to_owned());
        }
    }
    Ok(members)
}

/// The members and the figures of a database, read in full: the figures by reading the item
/// of every registered task manager and of its node, which pages most of `items` in on a
/// large blocklist (an upgrade to schema 9, `blocklistd check`, an open that finds no stored
/// figures).
pub(crate) fn scan_exposure(
    items: &Tree,
    tm_node: &Tree,
    watermark: &[u8],
) -> Result<(Members, Exposure)> {
    let level = |kind: Kind, id: &str| -> Result<Level> {
        let Some(bytes) = items.get(keys::item_key(kind, id))? else {
            return Ok(Level::Free);
        };
        let Ok(block) = codec::decode_block(&bytes) else {
            return Ok(Level::Free); // counted free, as in a transaction
        };
        Ok(if announced(watermark, block.end, kind, id) {
            Level::Free
        } else {
            Level::of(Some(block.action))
        })
    };
    let members = scan_members(tm_node)?;
    let mut exposure = Exposure::default();
    for (node, tms) in &members {
        let node_level = level(Kind::Node, node)?;
        exposure.add(&Exposure::one(Kind::Node, node_level));
        for tm in tms {
            let own = level(Kind::TaskManager, tm)?;
            exposure.add(&Exposure::one(Kind::TaskManager, own.max(node_level)));
        }
    }
    Ok((members, exposure))
}

/// Every prefix entry of the allowlist, ended or not (the sweeper removes ended ones).
pub(crate) fn scan_prefixes(allowlist: &Tree) -> Result<Vec<Entry>> {
    let mut prefixes = Vec::new();
    for entry in allowlist {
        let (key, value) = entry?;
        let Some((kind, id)) = keys::parse_item_key(&key) else {
            continue;
        };
        match codec::decode_allow(kind, id, &value) {
            Ok(entry) if entry.prefix => prefixes.push(entry),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, id, "an allowlist entry does not decode"),
        }
    }
    Ok(prefixes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Action, NewItem};
    use crate::store::meta::{encode_exposure, EXPOSURE_KEY};
    use crate::store::testing::{new_item, runtime, shut};
    use crate::store::{sled_config, Store, StoreConfig};

    fn element(id: &str, action: Action) -> NewItem {
        NewItem {
            action,
            ..new_item(id)
        }
    }

    fn figures(store: &Store) -> Exposure {
        *store.shared.guards.exposure.lock().unwrap()
    }

    /// Runs `open` until the data dir's file lock is free: sled releases it from its own
    /// threads a moment after the last handle goes.
    fn once_unlocked<T, E: std::fmt::Debug>(mut open: impl FnMut() -> Result<T, E>) -> T {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match open() {
                Ok(opened) => return opened,
                Err(e) if std::time::Instant::now() > deadline => panic!("{e:?}"),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
            }
        }
    }

    /// The share caps' figures live in `meta/exposure`: kept by every transaction, read back
    /// by the next open instead of a read of every registered item, and checked by `verify`
    /// against that read.
    #[test]
    fn the_figures_are_kept_read_back_at_open_and_verified() {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig::new(dir.path().join("data"));
        let store = Store::open(&config).unwrap();
        runtime().block_on(async {
            let pairs = [("tm-1", "n1"), ("tm-2", "n1"), ("tm-3", "n2")];
            let pairs = pairs.map(|(tm, node)| (tm.to_owned(), node.to_owned()));
            store.register(pairs.to_vec()).await.unwrap();
            let evacuate = vec![element("n1", Action::MarkBlockedAndEvacuateTasks)];
            store.add(Kind::Node, evacuate, 1).await.unwrap();
            let block = vec![element("tm-3", Action::MarkBlocked)];
            store.add(Kind::TaskManager, block, 1).await.unwrap();
        });
        let want = Exposure {
            registered: [3, 2],
            blocked: [3, 1],
            evacuating: [2, 1],
        };
        assert_eq!(figures(&store), want);
        assert_eq!(store.verify().unwrap(), Vec::<String>::new());
        shut(store);

        // Figures that disagree with the items: the next open takes them as stored, and
        // `verify` reports them.
        let wrong = Exposure {
            registered: [4, 2],
            ..want
        };
        {
            let db = once_unlocked(|| sled_config(&config.data_dir).unwrap().open());
            let meta = crate::store::TreeId::Meta.open(&db).unwrap();
            assert_eq!(
                meta.get(EXPOSURE_KEY).unwrap().as_deref(),
                Some(&encode_exposure(&want)[..])
            );
            meta.insert(EXPOSURE_KEY, encode_exposure(&wrong)).unwrap();
            db.flush().unwrap();
        }
        let store = once_unlocked(|| Store::open(&config));
        assert_eq!(figures(&store), wrong);
        let problems = store.verify().unwrap();
        assert!(
            problems.len() == 1 && problems[0].contains("share caps' figures"),
            "{problems:?}"
        );
        shut(store);
    }
}
