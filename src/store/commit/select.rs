//! Removing every active item of a kind that a [`Selector`] picks, in one transaction: all
//! of them (each with its `removed` event and its past block, as [`super::remove`] does one),
//! or, when more match than the request's limit, none.
//!
//! A transaction cannot scan, so the committer scans the kind just before the batch's
//! transaction ([`scan_selected`], from [`Committer::scan_due`]): it is the only writer, so
//! what the scan finds is what is stored when the batch starts. The transaction then re-reads
//! each candidate, and adds the items of the kind written earlier in it ([`Tx::written`]),
//! so an item the same batch added, changed or removed is judged as it stands at this
//! request's turn. The scan reads (and decodes) every item of the kind: this request costs
//! the committer a pass over the kind, which is why it is bounded and not made lightly.
//!
//! [`Committer::scan_due`]: super::Committer::scan_due

use std::cell::Cell;
use std::collections::BTreeSet;

use super::remove::remove;
use super::{Applied, Command, Keying, Op, Request, Tx, TxResult, Writer};
use crate::model::{Item, Kind};
use crate::provenance::{Selector, Unblock};
use crate::store::{codec, keys, Result, Trees, Watched};

pub(crate) struct RemoveSelected {
    kind: Kind,
    selector: Selector,
    unblock: Unblock,
    /// The most items it may remove; when more match, it removes none.
    limit: usize,
    /// How many active items of the kind matched at the scan, which keeps the keys of the
    /// first `limit + 1` only (enough to tell "too many"). Set by [`scan_selected`] before
    /// each transaction it applies in.
    matched: Cell<usize>,
}

/// What an unblock by selector did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectedOutcome {
    /// The items removed, sorted by id (none when none matched).
    Removed(Vec<Item>),
    /// Nothing removed: `matched` items match, more than the limit.
    OverLimit { matched: usize },
}

impl Command for RemoveSelected {
    type Outcome = SelectedOutcome;

    fn op(request: Request<RemoveSelected>) -> Op {
        Op::RemoveSelected(request)
    }

    fn weight(&self) -> usize {
        self.limit
    }

    /// `due`: the matching items the scan found.
    fn touched(&self, due: &[Vec<u8>], mut visit: impl FnMut(Watched<'_>)) {
        for key in due {
            if let Some((kind, id)) = keys::parse_item_key(key) {
                visit(Watched::Item(kind, id));
            }
        }
    }

    fn apply(&self, tx: &Tx<'_>, due: &[Vec<u8>]) -> TxResult<Result<Applied<SelectedOutcome>>> {
        let kind = self.kind;
        // The candidates: what the scan matched, and what this transaction wrote before.
        let mut candidates: BTreeSet<String> = due
            .iter()
            .filter_map(|key| keys::parse_item_key(key))
            .filter(|(k, _)| *k == kind)
            .map(|(_, id)| id.to_owned())
            .collect();
        for (k, id) in tx.written.borrow().iter() {
            if *k == kind {
                candidates.insert(id.clone());
            }
        }
        let mut selected = Vec::new();
        for id in &candidates {
            let block = match tx.read(kind, id)? {
                Ok(Some(block)) if block.is_active(tx.now) => block,
                Ok(_) => continue,
                Err(e) => return Ok(Err(e)),
            };
            let roster = match tx.roster(kind, id)? {
                Ok(roster) => roster,
                Err(e) => return Ok(Err(e)),
            };
            if self.selector.matches(&block, &roster) {
                selected.push(id.as_str());
            }
        }
        // Matches the scan counted past the keys it kept: not re-read, so taken as they were
        // (only an earlier request of this batch could have changed one), and reason enough
        // to remove none, since they cannot be removed with the others.
        let unread = self.matched.get().saturating_sub(due.len());
        if unread > 0 || selected.len() > self.limit {
            return Ok(Ok(Applied::endless(SelectedOutcome::OverLimit {
                matched: selected.len() + unread,
            })));
        }
        let mut removed = Vec::with_capacity(selected.len());
        for id in selected {
            match remove(tx, kind, id, &self.unblock)? {
                Ok(Some(item)) => removed.push(item),
                // Re-checked active just above, in this transaction.
                Ok(None) => {}
                Err(e) => return Ok(Err(e)),
            }
        }
        Ok(Ok(Applied::endless(SelectedOutcome::Removed(removed))))
    }
}

/// The keys of the active items of `command`'s kind its selector matches, read before its
/// transaction (which cannot scan) at commit time `now`: the first `limit + 1`, in key
/// order, with the count of all in `command.matched`. An item that does not decode is
/// passed over, for `blocklistd check` to report.
pub(super) fn scan_selected(
    trees: &Trees,
    command: &RemoveSelected,
    now: i64,
) -> Result<Vec<Vec<u8>>> {
    let (mut kept, mut matched, mut undecodable) = (Vec::new(), 0, 0_usize);
    for entry in trees.items.scan_prefix(keys::item_prefix(command.kind)) {
        let (key, value) = entry?;
        let Ok(block) = codec::decode_block(&value) else {
            undecodable += 1;
            continue;
        };
        if !block.is_active(now) {
            continue;
        }
        // The roster is looked up only where the source decides: a selector without one
        // reads the items alone.
        let stored = match &command.selector.source {
            Some(_) => trees.live.get(&key)?,
            None => None,
        };
        let roster = match stored.map(|bytes| codec::decode_roster(&bytes)) {
            Some(Ok(roster)) => roster,
            Some(Err(_)) => {
                undecodable += 1;
                continue;
            }
            None => Vec::new(),
        };
        if command.selector.matches(&block, &roster) {
            matched += 1;
            if kept.len() <= command.limit {
                kept.push(key.to_vec());
            }
        }
    }
    if undecodable > 0 {
        tracing::warn!(
            undecodable,
            "items that do not decode were passed over by an unblock by selector"
        );
    }
    command.matched.set(matched);
    Ok(kept)
}

impl<K: Keying<SelectedOutcome>> Writer<'_, K> {
    /// Removes every active item of `kind` that `selector` picks, saying who and why
    /// (`unblock`), if they are at most `limit`; none otherwise.
    pub async fn remove_selected(
        &self,
        kind: Kind,
        selector: Selector,
        unblock: Unblock,
        limit: usize,
    ) -> Result<(SelectedOutcome, u64)> {
        self.submit(RemoveSelected {
            kind,
            selector,
            unblock,
            limit,
            matched: Cell::new(0),
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::SelectedOutcome;
    use crate::model::{Action, Item, Kind, NewItem, PERMANENT};
    use crate::provenance::{Selector, Unblock};
    use crate::store::{AddOutcome, Mode, Store, StoreConfig};

    fn new(id: &str, source: &str) -> NewItem {
        NewItem {
            id: id.to_owned(),
            action: Action::MarkBlocked,
            end: PERMANENT,
            cause: "c".to_owned(),
            allow_merge: true,
            source: source.to_owned(),
            timeout: None,
            details: crate::model::Details::new(),
        }
    }

    fn ids(items: &[Item]) -> Vec<&str> {
        items.iter().map(|i| i.id.as_str()).collect()
    }

    /// Adds queued before and after an unblock by selector, while the committer is busy
    /// (so they likely share its batch): the ones before are removed with what was stored,
    /// written earlier in the same transaction or not; the ones after stay.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unblock_by_selector_takes_what_its_batch_wrote_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreConfig::new(dir.path().join("data"))).unwrap();
        let now = crate::clock::now_ms();
        let items = vec![new("stored-a", "det-a"), new("stored-b", "det-b")];
        store.add(Kind::TaskManager, items, now).await.unwrap();
        // A batch of its own that keeps the committer busy while the rest queue up.
        let filler: Vec<(Kind, Item)> = (0..20_000)
            .map(|i| {
                let item = Item::new(format!("n{i:05}"), new("n", "det-a").to_block(now));
                (Kind::Node, item)
            })
            .collect();
        let writer = store.with_mode(Mode::Commit);
        let selector = Selector {
            source: Some("det-a".to_owned()),
            ..Selector::default()
        };
        let before = vec![new("before-a", "det-a"), new("before-b", "det-b")];
        let after = vec![new("after-a", "det-a")];
        // `join!` polls in order first: the requests are queued in this order.
        let (import, added_before, removed, added_after) = tokio::join!(
            store.import(filler, false),
            writer.add(Kind::TaskManager, before, now),
            writer.remove_selected(Kind::TaskManager, selector, Unblock::default(), 10),
            writer.add(Kind::TaskManager, after, now),
        );
        import.unwrap();
        for added in [added_before, added_after] {
            assert!(matches!(added.unwrap().0, AddOutcome::Written { .. }));
        }
        let (SelectedOutcome::Removed(removed), _) = removed.unwrap() else {
            panic!("not removed")
        };
        assert_eq!(ids(&removed), ["before-a", "stored-a"]);
        let later = crate::clock::now_ms();
        tokio::task::spawn_blocking(move || {
            let left = store.list(Kind::TaskManager, later).unwrap();
            assert_eq!(ids(&left), ["after-a", "before-b", "stored-b"]);
            assert_eq!(store.list(Kind::Node, later).unwrap().len(), 20_000);
            store.shutdown().unwrap();
        })
        .await
        .unwrap();
    }

    /// More matches than the limit remove none, and say how many match.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn over_the_limit_removes_none() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreConfig::new(dir.path().join("data"))).unwrap();
        let now = crate::clock::now_ms();
        let items = (0..5).map(|i| new(&format!("t{i}"), "det-a")).collect();
        store.add(Kind::TaskManager, items, now).await.unwrap();
        let all = Selector {
            all: true,
            ..Selector::default()
        };
        for limit in [1, 3, 4] {
            let (outcome, _) = store
                .with_mode(Mode::Commit)
                .remove_selected(Kind::TaskManager, all.clone(), Unblock::default(), limit)
                .await
                .unwrap();
            assert_eq!(
                outcome,
                SelectedOutcome::OverLimit { matched: 5 },
                "{limit}"
            );
        }
        let (outcome, _) = store
            .with_mode(Mode::Commit)
            .remove_selected(Kind::TaskManager, all, Unblock::default(), 5)
            .await
            .unwrap();
        let SelectedOutcome::Removed(removed) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(removed.len(), 5);
        tokio::task::spawn_blocking(move || store.shutdown().unwrap())
            .await
            .unwrap();
    }
}
