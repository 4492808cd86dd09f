//! The allowlist's writes: putting an entry (which lifts the blocks it covers, in the same
//! transaction), removing one, and its end (through the sweeper, like an item's). Entries
//! with an end have an expiry entry of their own ([`keys::allow_expiry_key`]), so the
//! sweeper that expires items wakes for them too.
//!
//! Prefix entries are few ([`MAX_PREFIX_ENTRIES`]) and checked against every id added, so
//! the committer keeps them in memory; exact entries are one point read each.

use super::remove::remove;
use super::{Applied, Command, Keying, Mode, Op, Request, Tx, TxResult, Writer};
use crate::allowlist::{Entry, MAX_PREFIX_ENTRIES};
use crate::model::{Change, EventType, Item, Kind};
use crate::provenance::Unblock;
use crate::store::{codec, keys, Result, Store, StoreError, Watched};

/// The most blocks one allowlist entry may lift at once: what one transaction may write.
pub const MAX_UNBLOCKED: usize = 20_000;

pub(crate) struct PutAllow {
    /// Boxed: the committer's queue holds every operation at the size of the largest.
    entry: Box<Entry>,
}

impl PutAllow {
    pub(super) fn entry(&self) -> &Entry {
        &self.entry
    }
}

/// The result of putting an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowOutcome {
    /// Stored; `replaced` when an entry of that id was there; the blocks it lifted.
    Put {
        replaced: bool,
        unblocked: Vec<Item>,
    },
    /// Nothing written: the allowlist holds [`MAX_PREFIX_ENTRIES`] prefix entries already.
    TooManyPrefixes,
    /// Nothing written: it would lift more than [`MAX_UNBLOCKED`] blocks at once.
    TooManyUnblocked,
}

impl Command for PutAllow {
    type Outcome = AllowOutcome;

    fn op(request: Request<PutAllow>) -> Op {
        Op::PutAllow(request)
    }

    fn weight(&self) -> usize {
        1
    }

    /// `due`: the items of the entry's kind and prefix, scanned before the transaction.
    fn touched(&self, due: &[Vec<u8>], mut visit: impl FnMut(Watched<'_>)) {
        visit(Watched::Item(self.entry.kind, &self.entry.id));
        for key in due {
            if let Some((kind, id)) = keys::parse_item_key(key) {
                visit(Watched::Item(kind, id));
            }
        }
    }

    fn apply(&self, tx: &Tx<'_>, due: &[Vec<u8>]) -> TxResult<Result<Applied<AllowOutcome>>> {
        let entry = &self.entry;
        let old = match tx.allow_entry(entry.kind, &entry.id)? {
            Ok(old) => old,
            Err(e) => return Ok(Err(e)),
        };
        let was_prefix = old.as_ref().is_some_and(|o| o.prefix);
        if entry.prefix && !was_prefix && tx.prefix_entries().len() >= MAX_PREFIX_ENTRIES {
            return Ok(Ok(Applied::endless(AllowOutcome::TooManyPrefixes)));
        }
        // What it covers: the scanned ids, and those written earlier in this transaction.
        let mut covered: Vec<String> = if entry.prefix {
            due.iter()
                .filter_map(|key| keys::parse_item_key(key).map(|(_, id)| id.to_owned()))
                .collect()
        } else {
            vec![entry.id.clone()]
        };
        if entry.prefix {
            for (kind, id) in tx.written.borrow().iter() {
                if *kind == entry.kind && entry.matches(id) && !covered.contains(id) {
                    covered.push(id.clone());
                }
            }
        }
        if covered.len() > MAX_UNBLOCKED {
            return Ok(Ok(Applied::endless(AllowOutcome::TooManyUnblocked)));
        }
        tx.put_allow(old.as_ref(), entry)?;
        let mut unblocked = Vec::new();
        let lifted = Unblock {
            source: entry.added_by.clone(),
            reason: Some(format!(
                "lifted by the allowlist entry {} {:?}{}",
                entry.kind.singular(),
                entry.id,
                if entry.prefix { " (a prefix)" } else { "" }
            )),
        };
        for id in &covered {
            match remove(tx, entry.kind, id, &lifted)? {
                Ok(Some(item)) => unblocked.push(item),
                Ok(None) => {}
                Err(e) => return Ok(Err(e)),
            }
        }
        Ok(Ok(Applied {
            outcome: AllowOutcome::Put {
                replaced: old.is_some(),
                unblocked,
            },
            earliest_end: entry.end_timestamp,
        }))
    }
}

pub(crate) struct RemoveAllow {
    kind: Kind,
    id: String,
}

impl Command for RemoveAllow {
    /// The entry removed; `None` when there was none (or it had ended).
    type Outcome = Option<Entry>;

    fn op(request: Request<RemoveAllow>) -> Op {
        Op::RemoveAllow(request)
    }

    fn weight(&self) -> usize {
        1
    }

    fn touched(&self, _due: &[Vec<u8>], _visit: impl FnMut(Watched<'_>)) {}

    fn apply(&self, tx: &Tx<'_>, _due: &[Vec<u8>]) -> TxResult<Result<Applied<Option<Entry>>>> {
        let old = match tx.allow_entry(self.kind, &self.id)? {
            Ok(old) => old,
            Err(e) => return Ok(Err(e)),
        };
        let Some(old) = old else {
            return Ok(Ok(Applied::endless(None)));
        };
        tx.delete_allow(&old)?;
        if !old.is_active(tx.now) {
            // Ended; the sweeper had not reached it.
            tx.emit(EventType::AllowlistExpired, Change::Json(old.event_data()));
            return Ok(Ok(Applied::endless(None)));
        }
        tx.emit(EventType::Unallowlisted, Change::Json(old.event_data()));
        Ok(Ok(Applied::endless(Some(old))))
    }
}

impl Tx<'_> {
    /// The stored entry of `(kind, id)`, ended or not.
    pub(super) fn allow_entry(
        &self,
        kind: Kind,
        id: &str,
    ) -> TxResult<Result<Option<Entry>, StoreError>> {
        let Some(bytes) = self.allowlist.get(keys::item_key(kind, id))? else {
            return Ok(Ok(None));
        };
        Ok(codec::decode_allow(kind, id, &bytes)
            .map(Some)
            .map_err(|source| StoreError::Corrupt {
                key: format!("allowlist/{}/{id}", kind.plural()),
                source,
            }))
    }

    /// The prefix entries as this transaction goes.
    pub(super) fn prefix_entries(&self) -> Vec<Entry> {
        match &*self.prefixes_changed.borrow() {
            Some(changed) => changed.clone(),
            None => self.prefixes.to_vec(),
        }
    }

    fn set_prefix(&self, kind: Kind, id: &str, entry: Option<&Entry>) {
        let mut prefixes = self.prefix_entries();
        prefixes.retain(|p| !(p.kind == kind && p.id == id));
        if let Some(entry) = entry.filter(|e| e.prefix) {
            prefixes.push(entry.clone());
        }
        *self.prefixes_changed.borrow_mut() = Some(prefixes);
    }

    /// The active entry that covers `(kind, id)`, if any: its own, or a prefix entry's.
    pub(super) fn allowlisted(&self, kind: Kind, id: &str) -> TxResult<Option<Entry>> {
        // The usual case, and every add's: nothing to read.
        if self.allow_entries.get() <= 0 {
            return Ok(None);
        }
        let own = match self.allow_entry(kind, id)? {
            Ok(own) => own,
            // A corrupt entry still protects its id: refusing a block is the safe side.
            Err(e) => {
                tracing::warn!(error = %e, "an allowlist entry does not decode");
                return Ok(Some(Entry {
                    kind,
                    id: id.to_owned(),
                    prefix: false,
                    comment: "(its stored entry does not decode)".into(),
                    added_by: None,
                    added_at: 0,
                    end_timestamp: None,
                }));
            }
        };
        if let Some(own) = own.filter(|e| e.is_active(self.now) && e.matches(id)) {
            return Ok(Some(own));
        }
        let covering = |prefixes: &[Entry]| {
            prefixes
                .iter()
                .find(|p| p.kind == kind && p.is_active(self.now) && p.matches(id))
                .cloned()
        };
        Ok(match &*self.prefixes_changed.borrow() {
            Some(changed) => covering(changed),
            None => covering(self.prefixes),
        })
    }

    /// Stores `entry` over `old` (with their expiry entries) and emits `allowlisted`.
    pub(super) fn put_allow(&self, old: Option<&Entry>, entry: &Entry) -> TxResult<()> {
        let (kind, id) = (entry.kind, entry.id.as_str());
        if let Some(end) = old.and_then(|o| o.end_timestamp) {
            self.expiry.remove(keys::allow_expiry_key(end, kind, id))?;
        }
        if let Some(end) = entry.end_timestamp {
            self.expiry
                .insert(keys::allow_expiry_key(end, kind, id), &[])?;
        }
        self.allowlist
            .insert(keys::item_key(kind, id), codec::encode_allow(entry))?;
        if old.is_none() {
            self.allow_entries.set(self.allow_entries.get() + 1);
        }
        if entry.prefix || old.is_some_and(|o| o.prefix) {
            self.set_prefix(kind, id, Some(entry));
        }
        self.emit(EventType::Allowlisted, Change::Json(entry.event_data()));
        Ok(())
    }

    /// Deletes `entry` with its expiry entry (no event).
    fn delete_allow(&self, entry: &Entry) -> TxResult<()> {
        let (kind, id) = (entry.kind, entry.id.as_str());
        if let Some(end) = entry.end_timestamp {
            self.expiry.remove(keys::allow_expiry_key(end, kind, id))?;
        }
        self.allowlist.remove(keys::item_key(kind, id))?;
        self.allow_entries.set(self.allow_entries.get() - 1);
        if entry.prefix {
            self.set_prefix(kind, id, None);
        }
        Ok(())
    }

    /// The sweeper reached the expiry entry `key` of `(kind, id)`, ending at `end`: the
    /// entry goes, with an `allowlist-expired` event, when it is the one that ends then.
    pub(super) fn expire_allow(&self, kind: Kind, id: &str, end: i64, key: &[u8]) -> TxResult<()> {
        match self.allow_entry(kind, id)? {
            Ok(Some(entry)) if entry.end_timestamp == Some(end) && !entry.is_active(self.now) => {
                self.delete_allow(&entry)?;
                self.emit(
                    EventType::AllowlistExpired,
                    Change::Json(entry.event_data()),
                );
            }
            // Stale (replaced or removed since), or not decodable: the key alone goes; a
            // corrupt entry stays for `blocklistd check` to report.
            _ => {
                self.expiry.remove(key)?;
            }
        }
        Ok(())
    }
}

impl<K> Writer<'_, K> {
    /// Puts an allowlist entry, lifting the blocks it covers.
    pub async fn put_allow(&self, entry: Entry) -> Result<(AllowOutcome, u64)>
    where
        K: Keying<AllowOutcome>,
    {
        self.submit(PutAllow {
            entry: Box::new(entry),
        })
        .await
    }

    /// Removes the allowlist entry `(kind, id)`.
    pub async fn remove_allow(&self, kind: Kind, id: String) -> Result<(Option<Entry>, u64)>
    where
        K: Keying<Option<Entry>>,
    {
        self.submit(RemoveAllow { kind, id }).await
    }
}

impl Store {
    pub async fn put_allow(&self, entry: Entry) -> Result<(AllowOutcome, u64)> {
        self.with_mode(Mode::Commit).put_allow(entry).await
    }

    pub async fn remove_allow(&self, kind: Kind, id: String) -> Result<(Option<Entry>, u64)> {
        self.with_mode(Mode::Commit).remove_allow(kind, id).await
    }
}

/// The items a prefix entry of `kind` covers, read before its transaction (which cannot
/// scan): at most one more than [`MAX_UNBLOCKED`], so the transaction can tell.
pub(super) fn scan_covered(items: &sled::Tree, entry: &Entry) -> Result<Vec<Vec<u8>>> {
    if !entry.prefix {
        return Ok(Vec::new());
    }
    items
        .scan_prefix(keys::item_key(entry.kind, &entry.id))
        .keys()
        .take(MAX_UNBLOCKED + 1)
        .map(|key| Ok(key?.to_vec()))
        .collect()
}
