//! Reading what is still readable from a data dir whose database sled cannot open.
//!
//! The data dir itself is never written: every attempt works on a fresh copy, in order,
//! until sled opens one —
//! 1. the copy as it is (a dir that fails to open only because another process holds it,
//!    or that sled recovers after all);
//! 2. without the blob files that are empty or fail their checksum (sled's recovery stops
//!    at the first one and may then fail);
//! 3. without those and without the snapshot files, so sled replays its log from the start.
//!
//! Where `conf` is unreadable, the copy gets none (sled writes a new one) and each
//! segment size the daemon has used is tried in turn. Then every entry of `items` and
//! `tm_node` is decoded on its own: an entry that does not decode is reported and skipped,
//! never the reason to give up.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::model::{Item, Kind};
use crate::progress::{Progress, Ticks, Unit};

use super::{blobs, codec, datadir, keys, panic_message, TreeId, POLICY_KEY};
use crate::allowlist::Entry;
use crate::policy::Policy;

/// What a salvage read.
#[derive(Debug, Default)]
pub struct Salvaged {
    /// Every item that decoded, active or not, by kind and id.
    pub items: Vec<(Kind, Item)>,
    /// Every registration `(task manager, node)` that decoded.
    pub registrations: Vec<(String, String)>,
    /// The guardrail policy, if it decoded.
    pub policy: Option<Policy>,
    /// Every allowlist entry that decoded, ended or not.
    pub allowlist: Vec<Entry>,
    /// Which attempt opened the copy.
    pub how: String,
    /// What could not be read, one line each.
    pub skipped: Vec<String>,
}

/// Reads what is readable from the database in `dir`, working on copies made under
/// `scratch` (which it empties again). Fails only when no attempt opens it. Each attempt
/// reports to `progress` a stage of copying (its total: the size of the data dir's files)
/// and one of reading (without a total: the damaged store's own counts are not to be
/// trusted).
pub fn salvage(dir: &Path, scratch: &Path, progress: &dyn Progress) -> Result<Salvaged, String> {
    if !dir.join("db").is_file() {
        return Err(format!(
            "{} holds no sled database (no db file)",
            dir.display()
        ));
    }
    let sizes = match datadir::segment_bytes(dir, blobs::SEGMENT_BYTES) {
        Ok(size) => vec![size],
        // Unknown: sled's default (every data dir before ours) and ours.
        Err(_) => vec![512 * 1024, blobs::SEGMENT_BYTES],
    };
    let damaged: Vec<PathBuf> = blobs::damaged(&dir.join("blobs"))
        .into_iter()
        .map(|(path, _)| path)
        .collect();
    let attempts: [(&str, bool, bool); 3] = [
        ("the data dir as it is", false, false),
        ("without its damaged blob files", true, false),
        (
            "without its damaged blob files and snapshots (the whole log replayed)",
            true,
            true,
        ),
    ];
    let size = dir_size(dir).ok();
    let mut failures = Vec::new();
    for (n, (how, drop_blobs, drop_snapshots)) in attempts.into_iter().enumerate() {
        if drop_blobs && damaged.is_empty() && !drop_snapshots {
            continue; // the same as the first attempt
        }
        // With the segment size unknown, a wrong one may still open and read less (or
        // nothing): the size that yields the most wins.
        let mut best: Option<Salvaged> = None;
        for &segment in &sizes {
            let copy = scratch.join(format!("attempt-{}-{segment}", n + 1));
            progress.stage("copying the data dir", Unit::Bytes, size);
            let result = copy_dir(dir, &copy, progress)
                .map_err(|e| format!("cannot copy {} to {}: {e}", dir.display(), copy.display()))
                .and_then(|()| {
                    prepare(
                        &copy,
                        &damaged,
                        dir,
                        drop_blobs,
                        drop_snapshots,
                        sizes.len() > 1,
                    )
                })
                .and_then(|()| {
                    progress.stage("reading", Unit::Count("entries"), None);
                    read(&copy, segment, progress)
                });
            progress.wait("removing the copy");
            let _ = std::fs::remove_dir_all(&copy);
            match result {
                Ok(mut salvaged) => {
                    salvaged.how = if sizes.len() > 1 {
                        format!("{how}, with {segment}-byte segments")
                    } else {
                        how.to_owned()
                    };
                    let found = |s: &Salvaged| s.items.len() + s.registrations.len();
                    if best.as_ref().is_none_or(|b| found(&salvaged) > found(b)) {
                        best = Some(salvaged);
                    }
                }
                Err(e) => failures.push(format!("{how} ({segment}-byte segments): {e}")),
            }
        }
        if let Some(mut salvaged) = best {
            if drop_blobs {
                salvaged.skipped.extend(
                    damaged
                        .iter()
                        .map(|p| format!("{}: set aside (damaged)", p.display())),
                );
            }
            return Ok(salvaged);
        }
    }
    Err(format!(
        "sled could not open any copy of {}:\n  {}",
        dir.display(),
        failures.join("\n  ")
    ))
}

/// Whether sled opens a copy of `dir` with `segment`-byte segments, made in a temporary
/// directory beside it: for a data dir with damaged blob files, where sled's own recovery
/// may fail after rewriting the end of its log, so it must not run on the original first.
pub(crate) fn opens_on_copy(dir: &Path, segment: usize) -> Result<(), String> {
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let scratch = tempfile::Builder::new()
        .prefix(".blocklistd-trial-open-")
        .tempdir_in(parent)
        .map_err(|e| format!("cannot make a trial copy beside the data dir: {e}"))?;
    let copy = scratch.path().join("data");
    copy_dir(dir, &copy, &()).map_err(|e| format!("cannot make a trial copy: {e}"))?;
    open_raw(&copy, segment).map(drop)
}

/// Opens the database in `dir` with sled alone, a panic of its recovery as an error.
fn open_raw(dir: &Path, segment: usize) -> Result<sled::Db, String> {
    let config = sled::Config::new()
        .path(dir)
        .segment_size(segment)
        .flush_every_ms(None);
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| config.open())) {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(e)) => Err(e.to_string()),
        Err(panic) => Err(format!(
            "sled's recovery panicked: {}",
            panic_message(&*panic)
        )),
    }
}

/// Removes from the copy what an attempt sets aside.
fn prepare(
    copy: &Path,
    damaged: &[PathBuf],
    dir: &Path,
    drop_blobs: bool,
    drop_snapshots: bool,
    drop_conf: bool,
) -> Result<(), String> {
    let remove =
        |path: &Path| std::fs::remove_file(path).map_err(|e| format!("{}: {e}", path.display()));
    if drop_blobs {
        for path in damaged {
            let relative = path.strip_prefix(dir).expect("a blob of the data dir");
            remove(&copy.join(relative))?;
        }
    }
    if drop_conf && copy.join("conf").exists() {
        remove(&copy.join("conf"))?;
    }
    if drop_snapshots {
        for entry in std::fs::read_dir(copy).map_err(|e| e.to_string())? {
            let entry = entry.map_err(|e| e.to_string())?;
            if entry.file_name().to_string_lossy().starts_with("snap.") {
                remove(&entry.path())?;
            }
        }
    }
    Ok(())
}

/// Opens the copy with sled and decodes every item and registration it can.
fn read(copy: &Path, segment: usize, progress: &dyn Progress) -> Result<Salvaged, String> {
    let db = open_raw(copy, segment)?;
    let mut salvaged = Salvaged::default();
    for (key, value) in readable(&db, TreeId::Items, &mut salvaged.skipped, progress)? {
        let Some((kind, id)) = keys::parse_item_key(&key) else {
            salvaged
                .skipped
                .push(format!("items: malformed key {key:?}"));
            continue;
        };
        match codec::decode_block(&value) {
            Ok(block) => salvaged.items.push((kind, Item::new(id.to_owned(), block))),
            Err(e) => salvaged
                .skipped
                .push(format!("items: {} {id:?}: {e}", kind.singular())),
        }
    }
    for (key, value) in readable(&db, TreeId::TmNode, &mut salvaged.skipped, progress)? {
        let tm = String::from_utf8_lossy(&key).into_owned();
        match codec::decode_registration(&value) {
            Ok(node) => salvaged.registrations.push((tm, node)),
            Err(e) => salvaged.skipped.push(format!("tm_node: {tm:?}: {e}")),
        }
    }
    for (key, value) in readable(&db, TreeId::Allowlist, &mut salvaged.skipped, progress)? {
        let Some((kind, id)) = keys::parse_item_key(&key) else {
            salvaged
                .skipped
                .push(format!("allowlist: malformed key {key:?}"));
            continue;
        };
        match codec::decode_allow(kind, id, &value) {
            Ok(entry) => salvaged.allowlist.push(entry),
            Err(e) => salvaged
                .skipped
                .push(format!("allowlist: {} {id:?}: {e}", kind.singular())),
        }
    }
    let meta = TreeId::Meta.open(&db).map_err(|e| e.to_string())?;
    match meta.get(POLICY_KEY) {
        Ok(Some(bytes)) => match codec::decode_policy(&bytes) {
            Ok(policy) => salvaged.policy = Some(policy),
            Err(e) => salvaged.skipped.push(format!("meta: policy: {e}")),
        },
        Ok(None) => {}
        Err(e) => salvaged.skipped.push(format!("meta: policy: {e}")),
    }
    progress.wait("closing the copy");
    drop(db);
    Ok(salvaged)
}

/// The entries of tree `id` of `db` up to the first that cannot be read (noted in
/// `skipped`).
fn readable(
    db: &sled::Db,
    id: TreeId,
    skipped: &mut Vec<String>,
    progress: &dyn Progress,
) -> Result<Vec<(sled::IVec, sled::IVec)>, String> {
    let tree = id.open(db).map_err(|e| e.to_string())?;
    let name = id.name();
    let mut ticks = Ticks::new(progress);
    let mut entries = Vec::new();
    for entry in &tree {
        match entry {
            Ok(entry) => {
                ticks.tick();
                entries.push(entry);
            }
            Err(e) => {
                skipped.push(format!("{name}: the rest of the tree is unreadable: {e}"));
                break;
            }
        }
    }
    Ok(entries)
}

/// Copies the files of `from` (and of its subdirectories) into a new directory `to`,
/// reporting the bytes copied.
fn copy_dir(from: &Path, to: &Path, progress: &dyn Progress) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target, progress)?;
        } else {
            copy_file(&entry.path(), &target, progress)?;
        }
    }
    Ok(())
}

/// Copies one file in pieces of 1 MiB, reporting each (the log is most of a data dir).
fn copy_file(from: &Path, to: &Path, progress: &dyn Progress) -> std::io::Result<()> {
    let mut source = std::fs::File::open(from)?;
    let mut target = std::fs::File::create(to)?;
    let mut buf = vec![0; 1024 * 1024];
    loop {
        let n = match source.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        target.write_all(&buf[..n])?;
        progress.advance(n as u64);
    }
}

/// The bytes of the files under `dir`: what a copy of it writes.
fn dir_size(dir: &Path) -> std::io::Result<u64> {
    let mut size = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        size += if meta.is_dir() {
            dir_size(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(size)
}
