//! The files sled keeps in the data dir, and what makes each of them durable.
//!
//! sled 0.34.7 fsyncs its log `db` only during recovery (its `flush()` is `pwrite` +
//! `sync_file_range`; the syncer adds the fsync, `super::sync`) and `snap.*` files before it
//! renames them into place — but never a directory, never `conf`, and never a blob file. On
//! a file system that loses what was not fsynced, that leaves:
//!
//! | file | written by sled | made durable here |
//! |---|---|---|
//! | the data dir's entry in its parent | — (we create the dir) | parent fsynced at open, when we created it |
//! | `db`, `conf`, `blobs/`, `snap.*` entries | at open / recovery | data dir fsynced at every open, after sled's recovery |
//! | `conf` contents | at first open, no fsync | fsynced at every open |
//! | `snap.<lsn>` contents | at recovery (fsynced by sled, then renamed) | data dir fsynced after the rename |
//! | `blobs/<lsn>` | whenever a log message exceeds the blob threshold (`super::blobs`) | fsynced, with `blobs/`, before the next acknowledgement |
//!
//! sled 0.34.7 writes snapshots only while it opens (its `snapshot_after_ops` does
//! nothing), so "at every open" covers every snapshot. All of this happens before the store
//! answers anything.
//!
//! The segment size is sled's too: it is fixed when a database is created and recorded in
//! `conf`; opening it with another size fails. A new data dir gets ours
//! ([`super::blobs::SEGMENT_BYTES`]); an existing one keeps the size its `conf` records.
// sled's `conf` carries a little-endian CRC: reading it is reading sled's format.
#![allow(clippy::little_endian_bytes)]

use std::fs::File;
use std::io;
use std::path::Path;

use super::blobs;

/// Fsyncs `path` (a file or a directory).
pub(crate) fn fsync(path: &Path) -> io::Result<()> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| io::Error::new(e.kind(), format!("fsync of {}: {e}", path.display())))
}

/// Creates the data dir if it is missing, durably: the new directory's entry is fsynced in
/// its parent (and so on up, for every directory this created).
pub(crate) fn create(dir: &Path) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut at = dir;
    while !at.exists() {
        missing.push(at.to_path_buf());
        match at.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => at = parent,
            _ => break,
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    for created in missing.iter().rev() {
        if let Some(parent) = created.parent().filter(|p| !p.as_os_str().is_empty()) {
            fsync(parent)?;
        }
    }
    Ok(())
}

/// The segment size sled must open `dir` with: what its `conf` records, or `for_new` when
/// the dir holds no database yet. A database whose `conf` is missing or unreadable cannot be
/// opened safely (sled would write a new one with whatever size it is given, and read the
/// log with the wrong one): that is an error naming the file.
pub(crate) fn segment_bytes(dir: &Path, for_new: usize) -> Result<usize, String> {
    let conf = dir.join("conf");
    let db = dir.join("db");
    let text = match std::fs::read(&conf) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound && !db.exists() => return Ok(for_new),
        Err(e) => return Err(format!("cannot read {}: {e}", conf.display())),
    };
    parse_segment_size(&text).ok_or_else(|| {
        format!(
            "{} is damaged (it holds no readable segment size, {} bytes), so the database \
             cannot be opened safely",
            conf.display(),
            text.len()
        )
    })
}

/// The `segment_size` line of sled's `conf` (lines of `key: value`, then a 4-byte CRC).
fn parse_segment_size(conf: &[u8]) -> Option<usize> {
    let body = conf.get(..conf.len().checked_sub(4)?)?;
    let crc = u32::from_le_bytes(conf[body.len()..].try_into().ok()?);
    if crc32fast::hash(body) != crc {
        return None;
    }
    std::str::from_utf8(body)
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("segment_size: "))?
        .trim()
        .parse()
        .ok()
}

/// After sled opened (and recovered) the database in `dir`: makes every file it created or
/// rewrote durable, and their directory entries. Before the store answers anything.
pub(crate) fn make_durable_after_open(dir: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name == "conf" || name.starts_with("snap.") {
            fsync(&entry.path())?;
        }
    }
    let blobs = dir.join("blobs");
    if blobs.is_dir() {
        blobs::BlobDir::open(&blobs)?.sync_all()?;
    }
    fsync(dir)
}

/// What in `dir` looks damaged, for the message of a failed open: blob files that are empty
/// or fail their checksum, an unreadable `conf`, empty snapshot files. Each line names a
/// file and what is wrong with it.
pub(crate) fn damage_report(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    match std::fs::read(dir.join("conf")) {
        Ok(conf) if parse_segment_size(&conf).is_none() => found.push(format!(
            "{}: unreadable ({} bytes)",
            dir.join("conf").display(),
            conf.len()
        )),
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if dir.join("db").exists() {
                found.push(format!("{}: missing", dir.join("conf").display()));
            }
        }
        Err(e) => found.push(format!("{}: {e}", dir.join("conf").display())),
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            let is_snapshot = entry.file_name().to_string_lossy().starts_with("snap.");
            if is_snapshot && entry.metadata().map_or(0, |m| m.len()) <= 12 {
                found.push(format!("{}: empty snapshot", path.display()));
            }
        }
    }
    found.extend(
        blobs::damaged(&dir.join("blobs"))
            .into_iter()
            .map(|(path, why)| format!("{}: {why}", path.display())),
    );
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(segment: usize) -> Vec<u8> {
        let mut body = format!("segment_size: {segment}\nuse_compression: false\nversion: 0.34\n")
            .into_bytes();
        let crc = crc32fast::hash(&body);
        body.extend_from_slice(&crc.to_le_bytes());
        body
    }

    #[test]
    fn the_segment_size_comes_from_conf_and_a_damaged_conf_is_refused() {
        assert_eq!(parse_segment_size(&conf(524_288)), Some(524_288));
        let mut bad = conf(524_288);
        bad[3] ^= 1;
        assert_eq!(parse_segment_size(&bad), None);
        assert_eq!(parse_segment_size(b""), None);

        let dir = tempfile::tempdir().unwrap();
        assert_eq!(segment_bytes(dir.path(), 4096).unwrap(), 4096, "new dir");
        std::fs::write(dir.path().join("conf"), conf(1 << 19)).unwrap();
        assert_eq!(segment_bytes(dir.path(), 4096).unwrap(), 1 << 19);
        std::fs::write(dir.path().join("conf"), b"").unwrap();
        let e = segment_bytes(dir.path(), 4096).unwrap_err();
        assert!(e.contains("conf is damaged"), "{e}");
        std::fs::remove_file(dir.path().join("conf")).unwrap();
        std::fs::write(dir.path().join("db"), b"x").unwrap();
        let e = segment_bytes(dir.path(), 4096).unwrap_err();
        assert!(e.contains("cannot read"), "{e}");
    }

    #[test]
    fn a_new_data_dir_is_created_with_its_parents() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b/data");
        create(&dir).unwrap();
        assert!(dir.is_dir());
        create(&dir).unwrap();
    }
}
