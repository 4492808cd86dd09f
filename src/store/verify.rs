//! `verify`: every invariant of the module header, checked against what the trees hold,
//! reading each tree once.

use super::codec::idempotency::{decode_head, decode_response, Head};
use super::keys::{Expiring, RecordKey};
use super::members::scan_exposure;
use super::meta::{
    announced, decode_counts, decode_exposure, decode_u64, read_watermark, EXPOSURE_KEY,
};
use super::{
    codec, count_slot, keys, Result, Store, COUNTS_KEY, POLICY_KEY, REVISION_KEY, UNRECLAIMED_KEY,
};
use crate::progress::{Progress, Ticks, Unit};

/// What the stages of a verify count.
const ENTRIES: Unit = Unit::Count("entries");

impl Store {
    /// Checks the store's invariants and returns every violation found (empty when sound).
    pub fn verify(&self) -> Result<Vec<String>> {
        self.verify_reporting(&())
    }

    /// [`Store::verify`], reporting each entry read to `progress`, one stage per tree. The
    /// items stage's total is the stored item counts (and the unreclaimed ones), the expiry
    /// index's the items with a finite end, the membership index's the registrations: all
    /// known before the stage, without a scan of their own.
    pub fn verify_reporting(&self, progress: &dyn Progress) -> Result<Vec<String>> {
        let mut problems = Vec::new();
        let handles = self.handles()?;
        let trees = &handles.trees;
        let watermark = match read_watermark(&trees.meta) {
            Ok(watermark) => watermark,
            Err(e) => {
                problems.push(format!("meta: {e}"));
                Vec::new()
            }
        };
        let stored_items = self.item_counts().iter().sum::<u64>() + self.unreclaimed();
        progress.stage("checking items", ENTRIES, Some(stored_items));
        let mut ticks = Ticks::new(progress);
        let mut indexed = 0usize;
        // The counts the committer should have kept; `None` once an item does not decode.
        let mut scanned = Some([0u64; 4]);
        for entry in &trees.items {
            let (key, bytes) = entry?;
            ticks.tick();
            let Some((kind, id)) = keys::parse_item_key(&key) else {
                problems.push(format!("items: malformed key {key:?}"));
                scanned = None;
                continue;
            };
            let block = codec::decode_block(&bytes);
            match (&mut scanned, &block) {
                (Some(counts), Ok(block)) if !announced(&watermark, block.end, kind, id) => {
                    counts[count_slot(kind, block.action)] += 1;
                }
                (_, Ok(_)) => {}
                (_, Err(_)) => scanned = None,
            }
            match block {
                Err(e) => problems.push(format!("items: {} {id:?}: {e}", kind.singular())),
                Ok(block) if block.is_permanent() => {}
                Ok(block) if block.end < 0 => problems.push(format!(
                    "items: {} {id:?} has a negative end {}",
                    kind.singular(),
                    block.end
                )),
                Ok(block) => {
                    indexed += 1;
                    if !trees
                        .expiry
                        .contains_key(keys::expiry_key(block.end, kind, id))?
                    {
                        problems.push(format!(
                            "expiry: no entry for {} {id:?} ending at {}",
                            kind.singular(),
                            block.end
                        ));
                    }
                }
            }
        }
        drop(ticks);
        progress.stage("checking the expiry index", ENTRIES, Some(indexed as u64));
        let mut ticks = Ticks::new(progress);
        // Items' entries only: an allowlist entry's is checked against its entry below.
        let mut entries = 0usize;
        // Entries at or before the watermark: announced expired, storage not reclaimed.
        let mut unreclaimed = 0u64;
        for key in trees.expiry.iter().keys() {
            let key = key?;
            ticks.tick();
            if !watermark.is_empty() && key.as_ref() <= watermark.as_slice() {
                unreclaimed += 1;
            }
            let (end, kind, id) = match keys::parse_expiry_target(&key) {
                Some((end, Expiring::Item(kind), id)) => (end, kind, id),
                Some((end, Expiring::Allow(kind), id)) => {
                    let entry = trees.allowlist.get(keys::item_key(kind, id))?;
                    let matches = entry
                        .and_then(|bytes| codec::decode_allow(kind, id, &bytes).ok())
                        .is_some_and(|entry| entry.end_timestamp == Some(end));
                    if !matches {
                        problems.push(format!(
                            "expiry: entry for the allowlisted {} {id:?} at {end} has no \
                             allowlist entry ending then",
                            kind.singular()
                        ));
                    }
                    continue;
                }
                None => {
                    problems.push(format!("expiry: malformed key {key:?}"));
                    continue;
                }
            };
            entries += 1;
            let item = trees.items.get(keys::item_key(kind, id))?;
            let matches = item
                .and_then(|bytes| codec::decode_block(&bytes).ok())
                .is_some_and(|block| block.end == end);
            if !matches {
                problems.push(format!(
                    "expiry: entry for {} {id:?} at {end} has no item ending then",
                    kind.singular()
                ));
            }
        }
        drop(ticks);
        progress.stage("checking registrations", ENTRIES, None);
        let mut ticks = Ticks::new(progress);
        let mut registrations = 0u64;
        for entry in &trees.tm_node {
            let (key, bytes) = entry?;
            ticks.tick();
            registrations += 1;
            let tm = String::from_utf8_lossy(&key);
            match codec::decode_registration(&bytes) {
                Err(e) => problems.push(format!("tm_node: {tm:?}: {e}")),
                Ok(node) => {
                    if !trees.node_tms.contains_key(keys::node_tm_key(&node, &tm))? {
                        problems.push(format!("node_tms: no entry for {tm:?} on {node:?}"));
                    }
                }
            }
        }
        drop(ticks);
        progress.stage(
            "checking the membership index",
            ENTRIES,
            Some(registrations),
        );
        let mut ticks = Ticks::new(progress);
        for key in trees.node_tms.iter().keys() {
            let key = key?;
            ticks.tick();
            let Some((node, tm)) = keys::parse_node_tm_key(&key) else {
                problems.push(format!("node_tms: malformed key {key:?}"));
                continue;
            };
            let registered = trees
                .tm_node
                .get(tm.as_bytes())?
                .and_then(|bytes| codec::decode_registration(&bytes).ok());
            if registered.as_deref() != Some(node) {
                problems.push(format!(
                    "node_tms: {tm:?} listed on {node:?} but registered on {registered:?}"
                ));
            }
        }
        let revision = if let Some(bytes) = trees.meta.get(REVISION_KEY)? {
            if let Some(revision) = decode_u64(&bytes) {
                revision
            } else {
                problems.push("meta: malformed revision".into());
                0
            }
        } else {
            problems.push("meta: no revision".into());
            0
        };
        match trees.meta.get(POLICY_KEY)? {
            Some(bytes) => {
                if let Err(e) = codec::decode_policy(&bytes) {
                    problems.push(format!("meta: the guardrail policy: {e}"));
                }
            }
            None => problems.push("meta: no guardrail policy".into()),
        }
        for entry in &trees.allowlist {
            let (key, bytes) = entry?;
            ticks.tick();
            let Some((kind, id)) = keys::parse_item_key(&key) else {
                problems.push(format!("allowlist: malformed key {key:?}"));
                continue;
            };
            match codec::decode_allow(kind, id, &bytes) {
                Err(e) => problems.push(format!("allowlist: {} {id:?}: {e}", kind.singular())),
                Ok(entry) => {
                    let indexed = match entry.end_timestamp {
                        Some(end) => trees
                            .expiry
                            .contains_key(keys::allow_expiry_key(end, kind, id))?,
                        None => true,
                    };
                    if !indexed {
                        problems.push(format!(
                            "allowlist: the entry of {} {id:?} has no expiry entry",
                            kind.singular()
                        ));
                    }
                }
            }
        }
        drop(ticks);
        progress.stage("checking events", ENTRIES, None);
        let mut ticks = Ticks::new(progress);
        let mut expected: Option<u64> = None;
        for entry in &trees.events {
            let (key, bytes) = entry?;
            ticks.tick();
            let Some(rev) = keys::parse_event_key(&key) else {
                problems.push(format!("events: malformed key {key:?}"));
                continue;
            };
            if let Some(expected) = expected.filter(|e| *e != rev) {
                problems.push(format!(
                    "events: revision {rev} follows a gap (expected {expected})"
                ));
            }
            // A chunk holds consecutive revisions from its key's.
            let len = match codec::decode_events(rev, &bytes) {
                Ok(chunk) => chunk.len() as u64,
                Err(e) => {
                    problems.push(format!("events: revision {rev}: {e}"));
                    1
                }
            };
            expected = Some(rev + len);
            if rev + len - 1 > revision {
                problems.push(format!(
                    "events: revision {} is past meta revision {revision}",
                    rev + len - 1
                ));
            }
        }
        if let Some(next) = expected.filter(|next| *next != revision + 1) {
            problems.push(format!(
                "events: the log ends at {} but meta revision is {revision}",
                next - 1
            ));
        }
        drop(ticks);
        progress.stage("checking Idempotency-Key records", ENTRIES, None);
        verify_records(&trees.idempotency, &mut Ticks::new(progress), &mut problems)?;
        let stored = trees.meta.get(COUNTS_KEY)?.and_then(|b| decode_counts(&b));
        let stored_unreclaimed = trees
            .meta
            .get(UNRECLAIMED_KEY)?
            .and_then(|b| <[u8; 8]>::try_from(b.as_ref()).ok())
            .map_or(0, u64::from_be_bytes);
        if stored_unreclaimed != unreclaimed {
            problems.push(format!(
                "meta: unreclaimed count {stored_unreclaimed} disagrees with the {unreclaimed} \
                 expiry entries at or before the watermark"
            ));
        }
        if let Some(scanned) = scanned {
            if stored != Some(scanned) {
                problems.push(format!(
                    "meta: item counts {stored:?} disagree with the items ({scanned:?})"
                ));
            }
            let stored = trees.meta.get(EXPOSURE_KEY)?.map(|b| decode_exposure(&b));
            let (_, counted) = scan_exposure(&trees.items, &trees.tm_node, &watermark)?;
            if stored != Some(Some(counted)) {
                problems.push(format!(
                    "meta: the share caps' figures {stored:?} disagree with the registrations \
                     and their items ({counted:?})"
                ));
            }
        }
        if entries != indexed && problems.is_empty() {
            problems.push(format!(
                "expiry: {entries} entries for {indexed} items with a finite end"
            ));
        }
        progress.stage("checking reports and past blocks", ENTRIES, None);
        verify_provenance(trees, &mut problems)?;
        verify_enforcement(trees, &mut problems)?;
        verify_live(trees, &mut problems)?;
        Ok(problems)
    }
}

/// The invariants of `enforcement` (see `commit::enforcement`): every entry is an item's
/// (a block's end drops its statuses) and decodes.
fn verify_enforcement(trees: &super::Trees, problems: &mut Vec<String>) -> Result<()> {
    for entry in &trees.enforcement {
        let (key, bytes) = entry?;
        let Some((kind, id)) = keys::parse_item_key(&key) else {
            problems.push(format!("enforcement: malformed key {key:?}"));
            continue;
        };
        let what = format!("enforcement: {} {id:?}", kind.singular());
        if trees.items.get(&key)?.is_none() {
            problems.push(format!("{what}: statuses of no stored item"));
        }
        if let Err(e) = crate::enforcement::decode(&bytes) {
            problems.push(format!("{what}: {e}"));
        }
    }
    Ok(())
}

/// The invariants of `live` (see `commit::live`): every roster is a stored item's and
/// decodes; each of its sources has exactly one live report and no other source has one;
/// every report decodes and asks for no more than its block (the merge takes the strongest
/// action and the latest end).
fn verify_live(trees: &super::Trees, problems: &mut Vec<String>) -> Result<()> {
    let mut rosters: std::collections::HashMap<Vec<u8>, Vec<String>> =
        std::collections::HashMap::new();
    let mut reports = Vec::new();
    for entry in &trees.live {
        let (key, bytes) = entry?;
        match keys::parse_live_key(&key) {
            None => problems.push(format!("live: malformed key {key:?}")),
            Some((kind, id, None)) => match codec::decode_roster(&bytes) {
                Ok(roster) => {
                    rosters.insert(keys::item_key(kind, id), roster);
                }
                Err(e) => problems.push(format!("live: {} {id:?}: roster: {e}", kind.singular())),
            },
            Some((kind, id, Some(source))) => {
                reports.push((kind, id.to_owned(), source.to_owned(), bytes));
            }
        }
    }
    let mut held = std::collections::HashMap::new();
    for (kind, id, source, bytes) in reports {
        let what = format!("live: {} {id:?} by {source:?}", kind.singular());
        let item_key = keys::item_key(kind, &id);
        if !rosters.get(&item_key).is_some_and(|r| r.contains(&source)) {
            problems.push(format!("{what}: a report its roster does not list"));
        }
        *held.entry(item_key.clone()).or_insert(0_usize) += 1;
        let report = match codec::decode_live(&source, &bytes) {
            Ok(report) => report,
            Err(e) => {
                problems.push(format!("{what}: {e}"));
                continue;
            }
        };
        if let Some(Ok(block)) = trees.items.get(&item_key)?.map(|b| codec::decode_block(&b)) {
            if report.action > block.action || report.end > block.end {
                problems.push(format!("{what}: asks for more than its block"));
            }
        }
    }
    for (key, roster) in &rosters {
        let Some((kind, id)) = keys::parse_item_key(key) else {
            continue;
        };
        let what = format!("live: {} {id:?}", kind.singular());
        if trees.items.get(key)?.is_none() {
            problems.push(format!("{what}: the roster of no stored item"));
        }
        if held.get(key).copied().unwrap_or(0) != roster.len() {
            problems.push(format!(
                "{what}: {} sources in its roster, other reports",
                roster.len()
            ));
        }
    }
    Ok(())
}

/// The invariants of `reports`, `history` and `history_ends` (see `commit::history`): every
/// report belongs to a stored item and is among the ones it keeps; every past block is
/// within its id's counter and has exactly its index key, and every index key its entry.
fn verify_provenance(trees: &super::Trees, problems: &mut Vec<String>) -> Result<()> {
    use crate::provenance::MAX_REPORTS;
    for entry in &trees.reports {
        let (key, bytes) = entry?;
        let parsed = keys::parse_number(&key).zip(
            key.len()
                .checked_sub(9)
                .and_then(|at| keys::parse_item_key(&key[..at])),
        );
        let Some((n, (kind, id))) = parsed else {
            problems.push(format!("reports: malformed key {key:?}"));
            continue;
        };
        if let Err(e) = codec::decode_report(&bytes) {
            problems.push(format!("reports: {} {id:?} #{n}: {e}", kind.singular()));
        }
        let kept = trees
            .items
            .get(keys::item_key(kind, id))?
            .and_then(|b| codec::decode_block(&b).ok())
            .map(|b| 0..b.provenance.reports.min(MAX_REPORTS));
        // `n` is a slot of the item's ring: it keeps one per report, up to MAX_REPORTS.
        if !kept.is_some_and(|kept| kept.contains(&n)) {
            problems.push(format!(
                "reports: {} {id:?} #{n} is not a report its item keeps",
                kind.singular()
            ));
        }
    }
    for entry in &trees.history {
        let (key, bytes) = entry?;
        let Some(split) = key.len().checked_sub(9).filter(|&at| key[at] == 0) else {
            continue; // a counter
        };
        let (Some((kind, id)), Some(n)) = (
            keys::parse_item_key(&key[..split]),
            keys::parse_number(&key),
        ) else {
            problems.push(format!("history: malformed key {key:?}"));
            continue;
        };
        let what = format!("history: {} {id:?} #{n}", kind.singular());
        match trees
            .history
            .get(keys::item_key(kind, id))?
            .map(|b| codec::decode_history_count(&b))
        {
            Some(Ok((first, next))) if (first..next).contains(&n) => {}
            Some(Ok((first, next))) => {
                problems.push(format!("{what} is outside its counter ({first}..{next})"));
            }
            Some(Err(e)) => problems.push(format!("{what}: its counter: {e}")),
            None => problems.push(format!("{what} has no counter")),
        }
        match codec::decode_past(&bytes) {
            Err(e) => problems.push(format!("{what}: {e}")),
            Ok((_, ending)) => {
                let index = keys::past_end_key(ending.timestamp, kind, id, n);
                if trees.history_ends.get(index)?.is_none() {
                    problems.push(format!("{what} has no history_ends entry"));
                }
            }
        }
    }
    for entry in &trees.history_ends {
        let (key, _) = entry?;
        let Some((_, kind, id, n)) = keys::parse_past_end_key(&key) else {
            problems.push(format!("history_ends: malformed key {key:?}"));
            continue;
        };
        if trees.history.get(keys::past_key(kind, id, n))?.is_none() {
            problems.push(format!(
                "history_ends: {} {id:?} #{n} has no past block",
                kind.singular()
            ));
        }
    }
    Ok(())
}

/// Checks the `idempotency` tree in one pass (a record's chunks follow its head; the time
/// index comes after every record): every head decodes and has exactly its chunks, which
/// add up to its length and decode as a response, and its time index entry; every time
/// entry has a head committed then.
fn verify_records(
    tree: &sled::Tree,
    ticks: &mut Ticks<'_>,
    problems: &mut Vec<String>,
) -> Result<()> {
    /// The record whose chunks are being read: key, head, the bytes so far (the head's own
    /// first), and the number of the chunk expected next.
    struct Open {
        key: String,
        head: Head,
        bytes: Vec<u8>,
        chunks: u64,
    }
    fn close(open: Option<Open>, problems: &mut Vec<String>) {
        let Some(open) = open else { return };
        let key = &open.key;
        if open.chunks != open.head.chunks() || open.bytes.len() as u64 != open.head.len {
            problems.push(format!(
                "idempotency: record {key:?} has {} of its {} chunks ({} of {} bytes)",
                open.chunks,
                open.head.chunks(),
                open.bytes.len(),
                open.head.len
            ));
        } else if let Err(e) = decode_response(&open.bytes) {
            problems.push(format!("idempotency: record {key:?}: its response: {e}"));
        }
    }
    let mut open: Option<Open> = None;
    for entry in tree {
        let (raw, value) = entry?;
        ticks.tick();
        match keys::parse_record_key(&raw) {
            Some(RecordKey::Head(key)) => {
                close(open.take(), problems);
                match decode_head(&value) {
                    Ok(head) => {
                        if !tree.contains_key(keys::record_time_key(head.at, key))? {
                            problems.push(format!(
                                "idempotency: record {key:?} has no time index entry"
                            ));
                        }
                        open = Some(Open {
                            key: key.to_owned(),
                            bytes: head.inline.clone().unwrap_or_default(),
                            chunks: head.stored_chunks().start,
                            head,
                        });
                    }
                    Err(e) => problems.push(format!("idempotency: record {key:?}: {e}")),
                }
            }
            Some(RecordKey::Chunk(key, index)) => match &mut open {
                Some(open) if open.key == key && u64::from(index) == open.chunks => {
                    open.bytes.extend_from_slice(&value);
                    open.chunks += 1;
                }
                _ => problems.push(format!(
                    "idempotency: chunk {index} of {key:?} does not follow its record's head \
                     and chunks"
                )),
            },
            Some(RecordKey::Time(at, key)) => {
                close(open.take(), problems);
                let head = tree
                    .get(keys::record_key(key))?
                    .and_then(|bytes| decode_head(&bytes).ok());
                if head.is_none_or(|head| head.at != at) {
                    problems.push(format!(
                        "idempotency: time index entry of {key:?} at {at} has no record \
                         committed then"
                    ));
                }
            }
            None => {
                close(open.take(), problems);
                problems.push(format!("idempotency: malformed key {raw:?}"));
            }
        }
    }
    close(open, problems);
    Ok(())
}
