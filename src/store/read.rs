//! Reads: point gets and resumable range scans, straight from the trees. Every read filters
//! `end <= now` itself, so it never depends on how far the sweeper has got.

use std::ops::Bound;

use super::codec::{self, decode_allow, decode_policy};
use super::error::{bad_key, decode, registration};
use super::meta::after_watermark;
use super::{keys, Result, Seen, Store, StoreError, Watched, POLICY_KEY};
use crate::allowlist::Entry;
use crate::enforcement::Statuses;
use crate::model::{Block, Item, Kind, LiveReport};
use crate::policy::Policy;
use crate::provenance::{PastBlock, Report, MAX_REPORTS};

impl Store {
    /// The active item `(kind, id)` at `now`; `seen` records what the answer depends on.
    pub fn get(&self, kind: Kind, id: &str, now: i64, seen: &mut Seen) -> Result<Option<Block>> {
        let key = keys::item_key(kind, id);
        let bytes = self.handles()?.trees.items.get(&key)?;
        self.saw(seen, Watched::Item(kind, id));
        let Some(bytes) = bytes else {
            return Ok(None);
        };
        let block = decode(&key, &bytes)?;
        Ok(block.is_active(now).then_some(block))
    }

    /// The kept reports of `(kind, id)`'s stored block, newest first; `seen` records what
    /// the answer depends on (scanned before the item's stamp is taken: a report is written
    /// with its item, so the stamp covers every report the scan saw). A block's only report
    /// may be implied by the block rather than stored ([`Block::first_report`]).
    pub fn reports(&self, kind: Kind, id: &str, seen: &mut Seen) -> Result<Vec<Report>> {
        let trees = &self.handles()?.trees;
        let prefix = keys::numbered_prefix(kind, id);
        let (block, mut slots) = self.beside_block(kind, id, || {
            let mut slots = std::collections::HashMap::new();
            for entry in trees.reports.scan_prefix(&prefix) {
                let (slot_key, bytes) = entry?;
                let slot = keys::parse_number(&slot_key).unwrap_or(0);
                let report =
                    codec::decode_report(&bytes).map_err(|source| StoreError::Corrupt {
                        key: format!("reports/{}/{id}/{slot}", kind.plural()),
                        source,
                    })?;
                slots.insert(slot, report);
            }
            Ok(slots)
        })?;
        self.saw(seen, Watched::Item(kind, id));
        let Some(block) = block else {
            return Ok(Vec::new());
        };
        let count = block.provenance.reports;
        if count == 1 && !slots.contains_key(&0) {
            slots.insert(0, block.first_report());
        }
        Ok((count.saturating_sub(MAX_REPORTS)..count)
            .rev()
            .filter_map(|n| slots.remove(&(n % MAX_REPORTS)))
            .collect())
    }

    /// What `read` finds stored beside `(kind, id)`'s block, read between two reads of the
    /// block that agree (its revision, and its report count, which orders its ring): a
    /// write between them changes one, and `read` runs again. The block as it was, and
    /// what `read` returned.
    fn beside_block<T>(
        &self,
        kind: Kind,
        id: &str,
        mut read: impl FnMut() -> Result<T>,
    ) -> Result<(Option<Block>, T)> {
        let trees = &self.handles()?.trees;
        let key = keys::item_key(kind, id);
        let block = || -> Result<Option<Block>> {
            trees
                .items
                .get(&key)?
                .map(|bytes| decode(&key, &bytes))
                .transpose()
        };
        let state =
            |block: &Option<Block>| block.as_ref().map(|b| (b.provenance.reports, b.revision));
        loop {
            let before = block()?;
            let found = read()?;
            if state(&block()?) == state(&before) {
                return Ok((before, found));
            }
        }
    }

    /// The roster of `(kind, id)`'s block: the sources whose live reports hold it, in the
    /// order of their first reports; empty while its first source alone holds it by the
    /// block itself. `seen` as for [`Store::reports`] (a roster is written under its
    /// item's stamp).
    pub fn roster(&self, kind: Kind, id: &str, seen: &mut Seen) -> Result<Vec<String>> {
        let key = keys::item_key(kind, id);
        let bytes = self.handles()?.trees.live.get(&key)?;
        self.saw(seen, Watched::Item(kind, id));
        bytes.map_or_else(
            || Ok(Vec::new()),
            |bytes| {
                codec::decode_roster(&bytes).map_err(|source| StoreError::Corrupt {
                    key: format!("live/{}/{id}", kind.plural()),
                    source,
                })
            },
        )
    }

    /// The live reports of `(kind, id)`'s stored block, in the order of their first
    /// reports (the one the block implies, when none is kept apart); `seen` as for
    /// [`Store::reports`].
    pub fn live_reports(&self, kind: Kind, id: &str, seen: &mut Seen) -> Result<Vec<LiveReport>> {
        let trees = &self.handles()?.trees;
        let (block, reports) = self.beside_block(kind, id, || {
            let mut reports = Vec::new();
            for source in self.roster(kind, id, seen)? {
                let Some(bytes) = trees.live.get(keys::live_key(kind, id, &source))? else {
                    continue; // written after the roster was read: the block changed too
                };
                let report =
                    codec::decode_live(&source, &bytes).map_err(|e| StoreError::Corrupt {
                        key: format!("live/{}/{id}/{source}", kind.plural()),
                        source: e,
                    })?;
                reports.push(report);
            }
            Ok(reports)
        })?;
        self.saw(seen, Watched::Item(kind, id));
        Ok(match block {
            Some(block) if reports.is_empty() => vec![LiveReport::implied(&block)],
            _ => reports,
        })
    }

    /// Every enforcer's status of `(kind, id)`'s block ([`crate::enforcement`]); `seen` as
    /// for [`Store::reports`] (a status is written under its item's stamp).
    pub fn statuses(&self, kind: Kind, id: &str, seen: &mut Seen) -> Result<Statuses> {
        let key = keys::item_key(kind, id);
        let bytes = self.handles()?.trees.enforcement.get(&key)?;
        self.saw(seen, Watched::Item(kind, id));
        bytes.map_or_else(|| Ok(Statuses::new()), |bytes| statuses(&key, &bytes))
    }

    /// Every item's statuses, in item key order (kind, then id). Items whose block ended
    /// have none: their end dropped them.
    pub fn all_statuses(&self) -> Result<Vec<(Kind, String, Statuses)>> {
        let mut out = Vec::new();
        for entry in &self.handles()?.trees.enforcement {
            let (key, bytes) = entry?;
            let (kind, id) = keys::parse_item_key(&key).ok_or_else(|| bad_key(&key))?;
            out.push((kind, id.to_owned(), statuses(&key, &bytes)?));
        }
        Ok(out)
    }

    /// The past blocks of `(kind, id)`, newest first; `seen` as for [`Store::reports`].
    pub fn past_blocks(&self, kind: Kind, id: &str, seen: &mut Seen) -> Result<Vec<PastBlock>> {
        let mut out = Vec::new();
        self.visit_past_blocks(kind, id, None, seen, |_, past| {
            out.push(past);
            true
        })?;
        Ok(out)
    }

    /// At most `limit` past blocks of `(kind, id)`, newest first, from the first older than
    /// past block number `before` (from the newest when `None`), each with its number, and
    /// whether older ones follow; `seen` as for [`Store::reports`]. Numbers only grow, so a
    /// page resumed from one never lists a block twice.
    pub fn past_blocks_page(
        &self,
        kind: Kind,
        id: &str,
        before: Option<u64>,
        limit: usize,
        seen: &mut Seen,
    ) -> Result<(Vec<(u64, PastBlock)>, bool)> {
        let mut out = Vec::new();
        let mut more = false;
        self.visit_past_blocks(kind, id, before, seen, |n, past| {
            if out.len() == limit {
                more = true;
                return false;
            }
            out.push((n, past));
            true
        })?;
        Ok((out, more))
    }

    /// Visits the past blocks of `(kind, id)` numbered below `before` (all when `None`),
    /// newest first, each with its number, for as long as `visit` returns true.
    fn visit_past_blocks(
        &self,
        kind: Kind,
        id: &str,
        before: Option<u64>,
        seen: &mut Seen,
        mut visit: impl FnMut(u64, PastBlock) -> bool,
    ) -> Result<()> {
        let prefix = keys::numbered_prefix(kind, id);
        let end = match before {
            Some(n) => Bound::Excluded(keys::past_key(kind, id, n)),
            None => Bound::Included(keys::past_key(kind, id, u64::MAX)),
        };
        let range = self
            .handles()?
            .trees
            .history
            .range::<Vec<u8>, _>((Bound::Included(prefix), end));
        for entry in range.rev() {
            let (key, bytes) = entry?;
            let n = keys::parse_number(&key).unwrap_or(0);
            let (block, ended) =
                codec::decode_past(&bytes).map_err(|source| StoreError::Corrupt {
                    key: format!("history/{}/{id}/{n}", kind.plural()),
                    source,
                })?;
            let past = PastBlock {
                item: Item::new(id.to_owned(), block),
                ended,
            };
            if !visit(n, past) {
                break;
            }
        }
        self.saw(seen, Watched::Item(kind, id));
        Ok(())
    }

    /// Visits every past block in `history` key order (kind, id, oldest first), from the
    /// first key after `after`, for as long as `visit` returns true; true when it got past
    /// the last. Resumable in chunks like [`Store::scan_items`].
    pub fn scan_past(
        &self,
        after: Option<&[u8]>,
        mut visit: impl FnMut(&[u8], Kind, PastBlock) -> Result<bool>,
    ) -> Result<bool> {
        let from = match after {
            Some(key) => Bound::Excluded(key.to_vec()),
            None => Bound::Unbounded,
        };
        for entry in self
            .handles()?
            .trees
            .history
            .range::<Vec<u8>, _>((from, Bound::Unbounded))
        {
            let (key, bytes) = entry?;
            // Counters (kind ++ id) sit beside the entries (kind ++ id ++ 0x00 ++ n).
            let Some(split) = key.len().checked_sub(9).filter(|&at| key[at] == 0) else {
                continue;
            };
            let (kind, id) = keys::parse_item_key(&key[..split]).ok_or_else(|| bad_key(&key))?;
            let (block, ended) =
                codec::decode_past(&bytes).map_err(|source| StoreError::Corrupt {
                    key: format!("history/{}/{id}", kind.plural()),
                    source,
                })?;
            let past = PastBlock {
                item: Item::new(id.to_owned(), block),
                ended,
            };
            if !visit(&key, kind, past)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Every active item of `kind` at `now`, sorted by id (byte order of UTF-8).
    pub fn list(&self, kind: Kind, now: i64) -> Result<Vec<Item>> {
        let mut out = Vec::new();
        self.scan_items(kind, None, now, |item| {
            out.push(item);
            Ok(true)
        })?;
        Ok(out)
    }

    /// Visits the active items of `kind` at `now` in id order, from the first id after
    /// `after` (from the first of all when `None`), for as long as `visit` returns true.
    /// Returns true when the scan got past the last item of `kind`.
    ///
    /// This is how a listing is read in bounded chunks: each chunk is one call, resumed
    /// after the last id the previous one visited. The database handles are held for the
    /// call only — never between chunks, so a slow client cannot delay a reopen after a
    /// storage fault (a kept `sled::Iter` would also keep the old database, and its file
    /// lock, alive).
    pub fn scan_items(
        &self,
        kind: Kind,
        after: Option<&str>,
        now: i64,
        mut visit: impl FnMut(Item) -> Result<bool>,
    ) -> Result<bool> {
        let from = match after {
            Some(id) => Bound::Excluded(keys::item_key(kind, id)),
            None => Bound::Included(keys::item_prefix(kind).to_vec()),
        };
        let to = Bound::Excluded(keys::item_prefix_end(kind).to_vec());
        for entry in self.handles()?.trees.items.range((from, to)) {
            let (key, bytes) = entry?;
            let block = decode(&key, &bytes)?;
            if block.is_active(now) {
                let (_, id) = keys::parse_item_key(&key).ok_or_else(|| bad_key(&key))?;
                if !visit(Item::new(id.to_owned(), block))? {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// The node task manager `tm` is registered on; `seen` records what the answer depends
    /// on.
    pub fn node_of(&self, tm: &str, seen: &mut Seen) -> Result<Option<String>> {
        let bytes = self.handles()?.trees.tm_node.get(tm.as_bytes())?;
        self.saw(seen, Watched::Registration(tm));
        let Some(bytes) = bytes else {
            return Ok(None);
        };
        registration(tm, &bytes).map(Some)
    }

    /// Every registration `(task manager, node)`, sorted by task manager id.
    pub fn registrations(&self) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        self.scan_registrations(None, |tm, node| {
            out.push((tm, node));
            Ok(true)
        })?;
        Ok(out)
    }

    /// Visits the registrations `(task manager, node)` in task manager order, from the first
    /// after `after`, for as long as `visit` returns true; true when it got past the last.
    /// Resumable in chunks like [`Store::scan_items`].
    pub fn scan_registrations(
        &self,
        after: Option<&str>,
        mut visit: impl FnMut(String, String) -> Result<bool>,
    ) -> Result<bool> {
        let from = match after {
            Some(tm) => Bound::Excluded(tm.as_bytes().to_vec()),
            None => Bound::Unbounded,
        };
        for entry in self
            .handles()?
            .trees
            .tm_node
            .range::<Vec<u8>, _>((from, Bound::Unbounded))
        {
            let (key, bytes) = entry?;
            let tm = std::str::from_utf8(&key).map_err(|_| bad_key(&key))?;
            let node = registration(tm, &bytes)?;
            if !visit(tm.to_owned(), node)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The task managers registered on `node`, sorted by id: one prefix scan of the index;
    /// `seen` records what the answer depends on.
    pub fn task_managers_on(&self, node: &str, seen: &mut Seen) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for key in self
            .handles()?
            .trees
            .node_tms
            .scan_prefix(keys::node_tm_prefix(node))
            .keys()
        {
            let key = key?;
            let (_, tm) = keys::parse_node_tm_key(&key).ok_or_else(|| bad_key(&key))?;
            out.push(tm.to_owned());
        }
        self.saw_all(seen);
        Ok(out)
    }

    /// The earliest end in the expiry index not yet announced expired, if any.
    pub fn first_deadline(&self) -> Result<Option<i64>> {
        let from = after_watermark(&self.shared.sweep.watermark.load());
        let first = self
            .handles()?
            .trees
            .expiry
            .range::<Vec<u8>, _>((from, Bound::Unbounded))
            .keys()
            .next();
        match first {
            Some(key) => {
                let key = key?;
                Ok(Some(
                    keys::expiry_key_end(&key).ok_or_else(|| bad_key(&key))?,
                ))
            }
            None => Ok(None),
        }
    }

    /// The earliest end after `now` of an item of `kind` (of either kind: `None`) not yet
    /// announced expired: when the first such block ends, which relieves a cap. Looks at
    /// `limit` entries at most (others come in between); `None` when it found none.
    pub fn next_end_of(&self, kind: Option<Kind>, now: i64, limit: usize) -> Result<Option<i64>> {
        let from = after_watermark(&self.shared.sweep.watermark.load());
        let entries = self
            .handles()?
            .trees
            .expiry
            .range::<Vec<u8>, _>((from, Bound::Unbounded))
            .keys()
            .take(limit);
        for key in entries {
            let key = key?;
            let (end, of, _) = keys::parse_expiry_target(&key).ok_or_else(|| bad_key(&key))?;
            let wanted = match of {
                keys::Expiring::Item(of) => kind.is_none_or(|kind| kind == of),
                keys::Expiring::Allow(_) => false,
            };
            if wanted && end > now {
                return Ok(Some(end));
            }
        }
        Ok(None)
    }

    /// Up to `limit` expiry keys of items announced expired but still stored (at or before
    /// the watermark), earliest first: what reclaiming has left to delete.
    pub fn reclaimable(&self, limit: usize) -> Result<Vec<Vec<u8>>> {
        let watermark = self.shared.sweep.watermark.load_full();
        if watermark.is_empty() {
            return Ok(Vec::new());
        }
        self.handles()?
            .trees
            .expiry
            .range::<Vec<u8>, _>((Bound::Unbounded, Bound::Included(watermark.to_vec())))
            .keys()
            .take(limit)
            .map(|k| Ok(k?.to_vec()))
            .collect()
    }
}

impl Store {
    /// The guardrail policy in force, as durably stored, and the revision it reflects.
    pub async fn policy(&self) -> Result<(Policy, u64)> {
        let store = self.clone();
        self.read_durably(move |seen| {
            store.saw_all(seen);
            let revision = store.revision();
            Ok((store.stored_policy()?, revision))
        })
        .await
    }

    /// The stored policy, as it is now (a stopped daemon's store: nothing is in flight).
    pub fn stored_policy(&self) -> Result<Policy> {
        let meta = &self.handles()?.trees.meta;
        let bytes = meta
            .get(POLICY_KEY)?
            .ok_or_else(|| StoreError::Foreign("it has no stored guardrail policy".into()))?;
        decode_policy(&bytes).map_err(|source| StoreError::Corrupt {
            key: "meta/policy".into(),
            source,
        })
    }

    /// The allowlist entries of `kind` (of both: `None`) active at `now`, in kind and id
    /// order, as stored now: a running daemon's readers wait for them to be durable
    /// (`http::AppState::listing`), a stopped one's have nothing to wait for.
    pub fn stored_allowlist(&self, kind: Option<Kind>, now: i64) -> Result<Vec<Entry>> {
        let tree = &self.handles()?.trees.allowlist;
        let scan = match kind {
            Some(kind) => tree.scan_prefix(keys::item_prefix(kind)),
            None => tree.iter(),
        };
        let mut entries = Vec::new();
        for entry in scan {
            let (key, value) = entry?;
            let (kind, id) = keys::parse_item_key(&key).ok_or_else(|| bad_key(&key))?;
            let entry = decode_allow(kind, id, &value).map_err(|source| StoreError::Corrupt {
                key: format!("allowlist/{}/{id}", kind.plural()),
                source,
            })?;
            if entry.is_active(now) {
                entries.push(entry);
            }
        }
        Ok(entries)
    }

    /// The allowlist entry `(kind, id)` active at `now`.
    pub async fn allow_entry(&self, kind: Kind, id: &str, now: i64) -> Result<Option<Entry>> {
        let (store, id) = (self.clone(), id.to_owned());
        self.read_durably(move |seen| {
            store.saw_all(seen);
            let tree = &store.handles()?.trees.allowlist;
            let Some(bytes) = tree.get(keys::item_key(kind, &id))? else {
                return Ok(None);
            };
            let entry = decode_allow(kind, &id, &bytes).map_err(|source| StoreError::Corrupt {
                key: format!("allowlist/{}/{id}", kind.plural()),
                source,
            })?;
            Ok(entry.is_active(now).then_some(entry))
        })
        .await
    }
}

/// Decodes the statuses stored under item key `key`.
fn statuses(key: &[u8], bytes: &[u8]) -> Result<Statuses> {
    crate::enforcement::decode(bytes).map_err(|e| StoreError::Corrupt {
        key: format!("enforcement/{}", String::from_utf8_lossy(key)),
        source: super::codec::CodecError::Decode(e.to_string()),
    })
}
