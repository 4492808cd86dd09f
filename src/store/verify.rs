//! `verify`: every invariant of the module header, checked against what the trees hold.

use super::meta::{count_unreclaimed, decode_counts, decode_u64, read_watermark, scan_counts};
use super::{codec, keys, Result, Store, COUNTS_KEY, REVISION_KEY, UNRECLAIMED_KEY};

impl Store {
    /// Checks the store's invariants and returns every violation found (empty when sound).
    pub fn verify(&self) -> Result<Vec<String>> {
        let mut problems = Vec::new();
        let handles = self.handles()?;
        let trees = &handles.trees;
        let mut indexed = 0usize;
        for entry in &trees.items {
            let (key, bytes) = entry?;
            let Some((kind, id)) = keys::parse_item_key(&key) else {
                problems.push(format!("items: malformed key {key:?}"));
                continue;
            };
            match codec::decode_block(&bytes) {
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
        let mut entries = 0usize;
        for key in trees.expiry.iter().keys() {
            let key = key?;
            entries += 1;
            let Some((end, kind, id)) = keys::parse_expiry_key(&key) else {
                problems.push(format!("expiry: malformed key {key:?}"));
                continue;
            };
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
        for entry in &trees.tm_node {
            let (key, bytes) = entry?;
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
        for key in trees.node_tms.iter().keys() {
            let key = key?;
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
        let mut expected: Option<u64> = None;
        for entry in &trees.events {
            let (key, bytes) = entry?;
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
        let stored = trees.meta.get(COUNTS_KEY)?.and_then(|b| decode_counts(&b));
        let watermark = match read_watermark(&trees.meta) {
            Ok(watermark) => watermark,
            Err(e) => {
                problems.push(format!("meta: {e}"));
                Vec::new()
            }
        };
        let stored_unreclaimed = trees
            .meta
            .get(UNRECLAIMED_KEY)?
            .and_then(|b| <[u8; 8]>::try_from(b.as_ref()).ok())
            .map_or(0, u64::from_be_bytes);
        let unreclaimed = count_unreclaimed(&trees.expiry, &watermark)?;
        if stored_unreclaimed != unreclaimed {
            problems.push(format!(
                "meta: unreclaimed count {stored_unreclaimed} disagrees with the {unreclaimed} \
                 expiry entries at or before the watermark"
            ));
        }
        if let Ok(scanned) = scan_counts(&trees.items, &watermark) {
            if stored != Some(scanned) {
                problems.push(format!(
                    "meta: item counts {stored:?} disagree with the items ({scanned:?})"
                ));
            }
        }
        if entries != indexed && problems.is_empty() {
            problems.push(format!(
                "expiry: {entries} entries for {indexed} items with a finite end"
            ));
        }
        Ok(problems)
    }
}
