//! sled's blob files: why a database we create never gets one, and how one that does is made
//! durable anyway.
//!
//! sled 0.34.7 writes a log message larger than its blob threshold to a file of its own,
//! `blobs/<lsn>`, with no fsync, and logs only a pointer to it (`pagecache/logger.rs`,
//! `reserve_inner`: a message of `MAX_MSG_HEADER_LEN` (32) + its serialised size is a blob
//! when over `segment_size / MINIMUM_ITEMS_PER_SEGMENT (4) - SEG_HEADER_LEN (20)`;
//! `pagecache/blob_io.rs`, `write_blob`). After a power cut such a file may be empty while
//! the pointer survived, and sled's recovery then fails (it panics in `write_snapshot`).
//! The messages are tree nodes, and a node is written whole when consolidated, so the
//! threshold bounds a **node**, not a value: a leaf splits only once it holds more than 16
//! entries, on the next traversal after the insert that grew it (`node.rs`,
//! `should_split`), so a leaf holds up to 17; an index node up to 257 children.
//!
//! Two defences, neither load-bearing alone:
//! 1. **None by construction.** Every value and key we store has a size bound (the id and
//!    cause limits of [`crate::model`], the event chunk cut of [`super::codec`]), and
//!    [`SEGMENT_BYTES`] is chosen so that the largest node of any tree stays under the
//!    threshold; a compile-time assertion below checks it against sled's numbers. A data dir
//!    created with a smaller segment size (sled's default, 512 KiB) keeps it — sled cannot
//!    change it — and may still get blobs.
//! 2. **Synced when they exist.** After each transaction returns, the committer lists
//!    `blobs/` ([`BlobDir::sync_new`], one `getdents` when nothing is new) and fsyncs every
//!    new file and then the directory, before the group goes to the syncer to be flushed
//!    and acknowledged. After the transaction, because sled writes a blob while it reserves
//!    log space inside it: the syncer, which runs beside the next transaction, could meet a
//!    file half written. A log record pointing to a blob can reach the disk before the blob
//!    (sled writes a full buffer without waiting for us); a cut then leaves a group that was
//!    never acknowledged pointing at a lost file, which sled's recovery cannot get past —
//!    hence the first defence.
// sled's blob files carry a little-endian CRC: reading them is reading sled's format.
#![allow(clippy::little_endian_bytes)]

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::model::{MAX_CAUSE_BYTES, MAX_ID_BYTES, MAX_MERGED_CAUSE_BYTES};

use super::{codec, keys};

/// sled's segment size for a new data dir: 2 MiB, so the blob threshold is 512 KiB − 52
/// bytes, above the largest node any tree can hold ([`MAX_NODE_BYTES`], ≈363 KiB: a leaf of
/// the event log). sled's default, 512 KiB, gives a threshold of ≈128 KiB, which 17 items
/// with long merged causes exceed.
pub const SEGMENT_BYTES: usize = 2 * 1024 * 1024;

/// The largest log message sled 0.34.7 writes inline for a segment size (see the module
/// docs for where the numbers come from).
pub const fn blob_threshold(segment_bytes: usize) -> usize {
    const MINIMUM_ITEMS_PER_SEGMENT: usize = 4;
    const SEG_HEADER_LEN: usize = 20;
    const MAX_MSG_HEADER_LEN: usize = 32;
    segment_bytes / MINIMUM_ITEMS_PER_SEGMENT - SEG_HEADER_LEN - MAX_MSG_HEADER_LEN
}

/// sled's varint (and so any length prefix) takes at most 9 bytes.
const VARINT: usize = 9;

/// The most entries a leaf holds: it splits above 16, on the traversal after the insert
/// that made 17.
const MAX_LEAF_ENTRIES: usize = 17;

/// The most children an index node holds (it splits above 256 the same way).
const MAX_INDEX_CHILDREN: usize = 257;

/// A serialised node with `entries` entries of at most `key` and `value` bytes: per entry a
/// length prefix each plus the bytes; per node the update tag, `next`, `merging_child`,
/// `merging`, `prefix_len`, the `lo` and `hi` bounds (each at most a key), the data tag and
/// the entry count (`serialization.rs`, `impl Serialize for Node` and `for Data`).
const fn node_bytes(entries: usize, key: usize, value: usize) -> usize {
    let header = 1 + VARINT + VARINT + 1 + 1 + 2 * (VARINT + key) + 1 + VARINT;
    header + entries * (2 * VARINT + key + value)
}

/// The largest key of any tree: a `node_tms` key, node id ++ 0x00 ++ task manager id.
const MAX_KEY_BYTES: usize = 2 * MAX_ID_BYTES + 1;

// The `idempotency` tree's keys are shorter: the bound above covers them.
const _: () = assert!(keys::MAX_RECORD_KEY_BYTES <= MAX_KEY_BYTES);

/// The largest node of any tree; see [`SEGMENT_BYTES`].
pub const MAX_NODE_BYTES: usize = {
    let items = node_bytes(
        MAX_LEAF_ENTRIES,
        MAX_KEY_BYTES,
        codec::max_block_bytes(MAX_MERGED_CAUSE_BYTES),
    );
    let events = node_bytes(
        MAX_LEAF_ENTRIES,
        MAX_KEY_BYTES,
        codec::max_chunk_bytes(MAX_ID_BYTES, MAX_MERGED_CAUSE_BYTES),
    );
    let registrations = node_bytes(MAX_LEAF_ENTRIES, MAX_KEY_BYTES, 1 + MAX_ID_BYTES);
    let reports = node_bytes(
        MAX_LEAF_ENTRIES,
        MAX_KEY_BYTES,
        codec::provenance::max_report_bytes(MAX_CAUSE_BYTES),
    );
    let history = node_bytes(
        MAX_LEAF_ENTRIES,
        MAX_KEY_BYTES,
        codec::provenance::max_past_bytes(MAX_MERGED_CAUSE_BYTES),
    );
    let live = node_bytes(
        MAX_LEAF_ENTRIES,
        MAX_KEY_BYTES,
        codec::provenance::max_live_bytes(MAX_MERGED_CAUSE_BYTES),
    );
    // `Idempotency-Key` records: heads with up to 8 KiB of their response, chunks of at most
    // 8 KiB, empty time entries.
    let records = node_bytes(
        MAX_LEAF_ENTRIES,
        MAX_KEY_BYTES,
        codec::idempotency::MAX_VALUE_BYTES,
    );
    // An index node's values are child page ids (a varint each).
    let index = node_bytes(MAX_INDEX_CHILDREN, MAX_KEY_BYTES, VARINT);
    let mut max = items;
    if events > max {
        max = events;
    }
    if registrations > max {
        max = registrations;
    }
    if reports > max {
        max = reports;
    }
    if history > max {
        max = history;
    }
    if records > max {
        max = records;
    }
    if live > max {
        max = live;
    }
    if index > max {
        max = index;
    }
    max
};

// The first defence: with our segment size, sled never writes a blob.
const _: () = assert!(MAX_NODE_BYTES < blob_threshold(SEGMENT_BYTES));
// And the bound is not vacuous: sled's default segment size would write blobs.
const _: () = assert!(MAX_NODE_BYTES > blob_threshold(512 * 1024));

/// `blobs/` of a data dir, and the files in it already known durable.
pub(crate) struct BlobDir {
    path: PathBuf,
    /// The directory, kept open: listing it again is one `lseek` and one `getdents`.
    dir: rustix::fs::Dir,
    /// Names fsynced already (or found at open and fsynced then).
    synced: HashSet<OsString>,
}

impl BlobDir {
    /// Opens `blobs/` (sled creates it when it creates the database).
    pub fn open(path: &Path) -> io::Result<BlobDir> {
        let fd = rustix::fs::open(
            path,
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        Ok(BlobDir {
            path: path.to_path_buf(),
            dir: rustix::fs::Dir::new(fd)?,
            synced: HashSet::new(),
        })
    }

    /// Fsyncs every blob file not synced yet, then the directory when any was (or when
    /// `always`). Returns how many files it synced.
    fn sync(&mut self, always: bool) -> io::Result<usize> {
        self.dir.rewind();
        let mut new = Vec::new();
        let mut present = HashSet::new();
        while let Some(entry) = self.dir.read() {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let name = OsStr::from_bytes(name).to_os_string();
            if !self.synced.contains(&name) {
                new.push(name.clone());
            }
            present.insert(name);
        }
        for name in &new {
            match File::open(self.path.join(name)) {
                Ok(file) => file.sync_all().map_err(|e| {
                    io::Error::new(e.kind(), format!("fsync of blob {}: {e}", name.display()))
                })?,
                // sled removed it since the listing (its page was rewritten): nothing to keep.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        if !new.is_empty() || always {
            File::open(&self.path)
                .and_then(|dir| dir.sync_all())
                .map_err(|e| {
                    io::Error::new(e.kind(), format!("fsync of {}: {e}", self.path.display()))
                })?;
        }
        // What is listed now, all synced: removed ones are forgotten, so the set does not
        // grow with every blob ever written.
        self.synced = present;
        Ok(new.len())
    }

    /// Fsyncs every file in the directory and the directory itself (at open).
    pub fn sync_all(&mut self) -> io::Result<usize> {
        self.synced.clear();
        self.sync(true)
    }

    /// Fsyncs the blob files created since the last call, and the directory if there were
    /// any. Cheap when there are none: one listing of a (normally empty) directory.
    pub fn sync_new(&mut self) -> io::Result<usize> {
        self.sync(false)
    }
}

/// The blob files in `dir` that sled could not read back: empty, too short, or failing
/// their checksum (`blob_io.rs`: a little-endian CRC-32 of the kind byte and the data, then
/// the kind byte, then the data).
pub(crate) fn damaged(dir: &Path) -> Vec<(PathBuf, &'static str)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let mut bytes = Vec::new();
        if File::open(&path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .is_err()
        {
            found.push((path, "unreadable"));
            continue;
        }
        if bytes.is_empty() {
            found.push((path, "empty blob"));
        } else if bytes.len() < 5 {
            found.push((path, "truncated blob"));
        } else {
            let crc = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"));
            if crc32fast::hash(&bytes[4..]) != crc {
                found.push((path, "blob fails its checksum"));
            }
        }
    }
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Action, Kind, NewItem};
    use crate::store::{Store, StoreConfig};

    /// Writes the largest values the API allows, on adjacent keys, into a store with
    /// `segment_bytes`, and returns how many blob files sled wrote.
    fn blobs_after_the_largest_writes(segment_bytes: usize) -> usize {
        let tmp = tempfile::tempdir().unwrap();
        let mut config = StoreConfig::new(tmp.path().join("data"));
        config.segment_bytes = segment_bytes;
        let store = Store::open(&config).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // Ids of the longest length, adjacent; each merged up to the longest cause, so the
        // items' leaves and the event log's (each merge's event carries the whole cause)
        // hold values as large as they get.
        let ids: Vec<String> = (0..40)
            .map(|i| format!("{i:02}{}", "x".repeat(MAX_ID_BYTES - 2)))
            .collect();
        let parts = MAX_MERGED_CAUSE_BYTES / MAX_CAUSE_BYTES + 1;
        for part in 0..parts {
            let items = ids
                .iter()
                .map(|id| NewItem {
                    id: id.clone(),
                    action: Action::MarkBlocked,
                    end: crate::model::PERMANENT,
                    cause: format!("{part:02}{}", "c".repeat(MAX_CAUSE_BYTES - 3)),
                    allow_merge: true,
                    source: "unknown".into(),
                    timeout: None,
                    details: crate::model::Details::new(),
                })
                .collect();
            runtime
                .block_on(store.add(Kind::TaskManager, items, 1))
                .unwrap();
        }
        let (reader, id) = (store.clone(), ids[0].clone());
        let cause = runtime
            .block_on(store.read_durably(move |seen| reader.get(Kind::TaskManager, &id, 1, seen)))
            .unwrap()
            .unwrap()
            .cause;
        assert!(
            cause.len() > MAX_MERGED_CAUSE_BYTES - MAX_CAUSE_BYTES,
            "{}",
            cause.len()
        );
        std::thread::spawn(move || store.shutdown().unwrap())
            .join()
            .unwrap();
        std::fs::read_dir(tmp.path().join("data/blobs"))
            .unwrap()
            .count()
    }

    #[test]
    fn the_largest_values_make_no_blob_with_our_segments_and_some_with_sleds_default() {
        assert_eq!(blobs_after_the_largest_writes(SEGMENT_BYTES), 0);
        // The same writes with sled's default segment size: the bound is not vacuous.
        assert!(blobs_after_the_largest_writes(512 * 1024) > 0);
    }

    #[test]
    fn new_blob_files_are_found_and_removed_ones_forgotten() {
        let tmp = tempfile::tempdir().unwrap();
        let blobs = tmp.path().join("blobs");
        std::fs::create_dir(&blobs).unwrap();
        std::fs::write(blobs.join("1"), b"old").unwrap();
        let mut dir = BlobDir::open(&blobs).unwrap();
        assert_eq!(dir.sync_all().unwrap(), 1);
        assert_eq!(dir.sync_new().unwrap(), 0, "nothing new");
        std::fs::write(blobs.join("2"), b"new").unwrap();
        std::fs::write(blobs.join("3"), b"new").unwrap();
        assert_eq!(dir.sync_new().unwrap(), 2);
        std::fs::remove_file(blobs.join("2")).unwrap();
        assert_eq!(dir.sync_new().unwrap(), 0);
        assert_eq!(dir.synced.len(), 2, "{:?}", dir.synced);
    }

    #[test]
    fn damaged_blobs_are_named() {
        let tmp = tempfile::tempdir().unwrap();
        let good = {
            let mut b = crc32fast::hash(b"\x05data").to_le_bytes().to_vec();
            b.extend_from_slice(b"\x05data");
            b
        };
        std::fs::write(tmp.path().join("10"), &good).unwrap();
        std::fs::write(tmp.path().join("11"), b"").unwrap();
        let mut bad = good.clone();
        bad[6] ^= 1;
        std::fs::write(tmp.path().join("12"), &bad).unwrap();
        let found: Vec<_> = damaged(tmp.path())
            .into_iter()
            .map(|(p, why)| (p.file_name().unwrap().to_string_lossy().into_owned(), why))
            .collect();
        assert_eq!(
            found,
            [
                ("11".to_owned(), "empty blob"),
                ("12".to_owned(), "blob fails its checksum")
            ]
        );
    }

    /// `docs/architecture.md` ("Blob files and the data dir") quotes these numbers.
    #[test]
    fn the_budget_numbers_the_docs_quote() {
        use crate::model::*;
        assert_eq!(MAX_NODE_BYTES, 371_590);
        assert_eq!(
            codec::max_chunk_bytes(MAX_ID_BYTES, MAX_MERGED_CAUSE_BYTES),
            21_264
        );
        assert_eq!(codec::max_block_bytes(MAX_MERGED_CAUSE_BYTES), 16_882);
        assert_eq!(
            codec::provenance::max_past_bytes(MAX_MERGED_CAUSE_BYTES),
            18_064
        );
        assert_eq!(codec::provenance::max_report_bytes(MAX_CAUSE_BYTES), 1_191);
        assert_eq!(codec::idempotency::MAX_VALUE_BYTES, 8_243);
        assert_eq!(codec::idempotency::MAX_HEAD_BYTES, 51);
        assert_eq!(keys::MAX_RECORD_KEY_BYTES, 264);
        assert_eq!(blob_threshold(512 * 1024), 131_020);
        assert_eq!(blob_threshold(SEGMENT_BYTES), 524_236);
    }
}
