//! The share caps' figures ([`Exposure`]): how many registered ids of each kind are
//! effectively blocked and evacuating, kept by every transaction as it changes items and
//! registrations, so that a guard reads them rather than scanning.
//!
//! Each figure is a sum of contributions: a node with at least one registered task manager
//! contributes its own level; a registered task manager contributes the stronger of its own
//! level and its node's. A change of one id's level, or of one registration, changes only
//! the contributions of the ids it touches (a node's change, those of its task managers), so
//! the transaction adds the difference of exactly those, before and after. The committer
//! keeps the node → task managers map in memory ([`Members`]): a transaction cannot scan
//! `node_tms`.

use std::collections::{BTreeSet, HashMap};

use super::{Tx, TxResult};
use crate::model::Kind;
use crate::policy::{Exposure, Level};
use crate::store::members::Members;
use crate::store::{codec, keys};

impl Tx<'_> {
    /// The level `(kind, id)` is blocked to, as the caps count: its stored item's action
    /// until the item is announced expired. A value that does not decode counts as free
    /// (`blocklistd check` reports it); failing every write near it would be worse.
    pub(super) fn level(&self, kind: Kind, id: &str) -> TxResult<Level> {
        Ok(match self.read(kind, id)? {
            Ok(Some(block)) if !self.is_announced(kind, id, &block) => {
                Level::of(Some(block.action))
            }
            Ok(_) => Level::Free,
            Err(e) => {
                tracing::warn!(error = %e, "an item does not decode; the caps count it free");
                Level::Free
            }
        })
    }

    /// The task managers on `node` as this transaction goes.
    pub(super) fn members_of(&self, node: &str) -> BTreeSet<String> {
        if let Some(set) = self.members_changed.borrow().get(node) {
            return set.clone();
        }
        self.members.get(node).cloned().unwrap_or_default()
    }

    fn has_members(&self, node: &str) -> bool {
        match self.members_changed.borrow().get(node) {
            Some(set) => !set.is_empty(),
            None => self.members.contains_key(node),
        }
    }

    /// What node `node` contributes at `level`.
    fn node_share(&self, node: &str, level: Level) -> Exposure {
        if self.has_members(node) {
            Exposure::one(Kind::Node, level)
        } else {
            Exposure::default()
        }
    }

    /// Whether any task manager is registered, as this transaction goes.
    fn any_registered(&self) -> bool {
        !self.members.is_empty()
            || self
                .members_changed
                .borrow()
                .values()
                .any(|s| !s.is_empty())
    }

    /// What task manager `tm` contributes with its own level `own`, on its node as stored.
    fn tm_share(&self, tm: &str, own: Level) -> TxResult<Exposure> {
        Ok(self
            .registered_node_level(tm)?
            .map_or_else(Exposure::default, |node| {
                Exposure::one(Kind::TaskManager, own.max(node))
            }))
    }

    /// The level of the node task manager `tm` is registered on, as this transaction has
    /// it; `None` when `tm` is not registered (or its registration does not decode: the
    /// caps skip it).
    fn registered_node_level(&self, tm: &str) -> TxResult<Option<Level>> {
        // Plain FLIP-224 use registers nobody: nothing to read.
        if !self.any_registered() {
            return Ok(None);
        }
        let node = match self.node_of(tm)? {
            Ok(Some(node)) => node,
            Ok(None) => return Ok(None),
            Err(e) => {
                tracing::warn!(error = %e, "a registration does not decode; the caps skip it");
                return Ok(None);
            }
        };
        Ok(Some(self.level(Kind::Node, &node)?))
    }

    /// How the figures change when `(kind, id)`'s own level goes from `from` to `to`,
    /// everything else as this transaction has it.
    pub(super) fn exposure_delta(
        &self,
        kind: Kind,
        id: &str,
        from: Level,
        to: Level,
    ) -> TxResult<Exposure> {
        let mut delta = Exposure::default();
        if from == to {
            return Ok(delta);
        }
        match kind {
            // The registration and the node's level are read once, for both levels.
            Kind::TaskManager => {
                if let Some(node) = self.registered_node_level(id)? {
                    delta.add(&Exposure::one(Kind::TaskManager, to.max(node)));
                    delta.sub(&Exposure::one(Kind::TaskManager, from.max(node)));
                }
            }
            Kind::Node => {
                delta.add(&self.node_share(id, to));
                delta.sub(&self.node_share(id, from));
                for tm in self.members_of(id) {
                    let own = self.level(Kind::TaskManager, &tm)?;
                    delta.add(&Exposure::one(Kind::TaskManager, own.max(to)));
                    delta.sub(&Exposure::one(Kind::TaskManager, own.max(from)));
                }
            }
        }
        Ok(delta)
    }

    /// Records that `(kind, id)`'s own level went from `from` to `to`.
    pub(super) fn level_changed(
        &self,
        kind: Kind,
        id: &str,
        from: Level,
        to: Level,
    ) -> TxResult<()> {
        let delta = self.exposure_delta(kind, id, from, to)?;
        let mut exposure = self.exposure.get();
        exposure.add(&delta);
        self.exposure.set(exposure);
        Ok(())
    }

    /// What `tm` and the nodes `nodes` contribute now.
    fn registration_shares(&self, tm: &str, nodes: &[&str]) -> TxResult<Exposure> {
        let mut sum = self.tm_share(tm, self.level(Kind::TaskManager, tm)?)?;
        for node in nodes {
            sum.add(&self.node_share(node, self.level(Kind::Node, node)?));
        }
        Ok(sum)
    }

    /// Moves task manager `tm` from node `old` to node `new` (either may be none): both
    /// registration trees, the members, and the figures.
    pub(super) fn set_registration(
        &self,
        tm: &str,
        old: Option<&str>,
        new: Option<&str>,
    ) -> TxResult<()> {
        if old == new {
            return Ok(());
        }
        let nodes: Vec<&str> = old.into_iter().chain(new).collect();
        let before = self.registration_shares(tm, &nodes)?;
        if let Some(old) = old {
            self.node_tms.remove(keys::node_tm_key(old, tm))?;
            let mut set = self.members_of(old);
            set.remove(tm);
            self.members_changed
                .borrow_mut()
                .insert(old.to_owned(), set);
        }
        match new {
            Some(new) => {
                self.tm_node
                    .insert(tm.as_bytes(), codec::encode_registration(new))?;
                self.node_tms.insert(keys::node_tm_key(new, tm), &[])?;
                let mut set = self.members_of(new);
                set.insert(tm.to_owned());
                self.members_changed
                    .borrow_mut()
                    .insert(new.to_owned(), set);
            }
            None => {
                self.tm_node.remove(tm.as_bytes())?;
            }
        }
        let mut exposure = self.exposure.get();
        exposure.sub(&before);
        exposure.add(&self.registration_shares(tm, &nodes)?);
        self.exposure.set(exposure);
        Ok(())
    }
}

/// Takes a committed transaction's changed node sets into `members`.
pub(super) fn adopt_members(members: &mut Members, changed: &HashMap<String, BTreeSet<String>>) {
    for (node, set) in changed {
        if set.is_empty() {
            members.remove(node);
        } else {
            members.insert(node.clone(), set.clone());
        }
    }
}
