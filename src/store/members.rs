//! What the committer keeps in memory beside the trees, read in full when the database
//! opens: the task managers on each node, the share caps' figures
//! ([`crate::policy::Exposure`], kept by `commit/exposure.rs` from then on), and the
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

/// The members and the figures of a database, read in full (at open, and after a reopen).
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
    let mut members = Members::new();
    let mut exposure = Exposure::default();
    let mut node_levels: HashMap<String, Level> = HashMap::new();
    for entry in tm_node {
        let (key, value) = entry?;
        let tm = std::str::from_utf8(&key)
            .map_err(|_| StoreError::Foreign("a task manager id is not UTF-8".into()))?;
        let Ok(node) = registration(tm, &value) else {
            continue;
        };
        let node_level = match node_levels.get(&node) {
            Some(level) => *level,
            None => {
                let level = level(Kind::Node, &node)?;
                node_levels.insert(node.clone(), level);
                exposure.add(&Exposure::one(Kind::Node, level));
                level
            }
        };
        let own = level(Kind::TaskManager, tm)?;
        exposure.add(&Exposure::one(Kind::TaskManager, own.max(node_level)));
        members.entry(node).or_default().insert(tm.to_owned());
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
