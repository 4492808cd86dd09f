//! The offline subcommands: `check`, `export`, `salvage`, `import` on a stopped daemon's
//! data dir.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::backup;
use crate::clock::now_ms;
use crate::config::{Command, ImportMode};
use crate::store::{self, DiskUsage, Store, StoreConfig};

/// Runs a subcommand; the process exit code is 0 on success, 1 otherwise.
pub async fn run(command: Command, data_dir: &Path) -> Result<(), String> {
    match command {
        Command::Check => check(data_dir),
        Command::Export { out } => export(data_dir, &out),
        Command::Salvage { out, scratch } => salvage(data_dir, &out, scratch.as_deref()),
        Command::Import { file, mode } => import(data_dir, &file, mode).await,
    }
}

/// Opens an existing store (never creates one: a typo must not make an empty database).
fn open_existing(dir: &Path) -> Result<Store, String> {
    if !dir.join("db").exists() {
        return Err(format!("{} holds no blocklistd database", dir.display()));
    }
    Store::open(&StoreConfig::new(dir)).map_err(|e| e.to_string())
}

fn close(store: Store) -> Result<(), String> {
    // The committer's shutdown blocks; run it off the async runtime.
    std::thread::spawn(move || store.shutdown())
        .join()
        .map_err(|_| "the store did not close cleanly".to_owned())?
        .map_err(|e| e.to_string())
}

fn check(dir: &Path) -> Result<(), String> {
    let store = open_existing(dir)?;
    let problems = store.verify().map_err(|e| e.to_string())?;
    let (items, expiry) = store.tree_sizes().map_err(|e| e.to_string())?;
    println!(
        "{}: {items} items ({} expired, storage not reclaimed yet), {expiry} expiry entries, \
         revision {}, events from {}",
        dir.display(),
        store.unreclaimed(),
        store.revision(),
        store.first_retained()
    );
    let usage = store.disk_usage().map_err(|e| e.to_string())?;
    print_disk_usage(&usage);
    close(store)?;
    if problems.is_empty() {
        println!("ok: every invariant holds");
        Ok(())
    } else {
        for p in &problems {
            println!("problem: {p}");
        }
        Err(format!("{} problem(s) found", problems.len()))
    }
}

/// One line per tree that holds anything, then the file against the live bytes.
fn print_disk_usage(usage: &DiskUsage) {
    const MIB: f64 = 1024.0 * 1024.0;
    for tree in usage.trees.iter().filter(|t| t.entries > 0) {
        println!(
            "tree {}: {} {}, {:.1} MiB of keys and values",
            tree.name,
            tree.entries,
            if tree.entries == 1 {
                "entry"
            } else {
                "entries"
            },
            tree.bytes as f64 / MIB
        );
    }
    let live = usage.live_bytes();
    println!(
        "on disk: {:.1} MiB for {:.1} MiB of live keys and values ({:.1}x; sled's log keeps whole leaves and superseded copies)",
        usage.on_disk as f64 / MIB,
        live as f64 / MIB,
        usage.on_disk as f64 / live.max(1) as f64
    );
}

fn export(dir: &Path, out: &Path) -> Result<(), String> {
    let store = open_existing(dir)?;
    let text = backup::export(&store, now_ms()).map_err(|e| e.to_string());
    close(store)?;
    write_out(out, text?.as_bytes())
}

/// Writes `bytes` to stdout (`-`) or, durably, to the file `out`: a temporary file beside
/// it, fsynced, renamed over it, and the directory fsynced — a crash leaves the old file or
/// the whole new one, never a torn one.
fn write_out(out: &Path, bytes: &[u8]) -> Result<(), String> {
    if out.as_os_str() == "-" {
        return std::io::stdout()
            .write_all(bytes)
            .map_err(|e| e.to_string());
    }
    let fail = |e: std::io::Error| format!("cannot write {}: {e}", out.display());
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut file = tempfile::NamedTempFile::new_in(parent).map_err(fail)?;
    file.write_all(bytes).map_err(fail)?;
    file.as_file().sync_all().map_err(fail)?;
    file.persist(out).map_err(|e| fail(e.error))?;
    std::fs::File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(fail)
}

fn salvage(dir: &Path, out: &Path, scratch: Option<&Path>) -> Result<(), String> {
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let scratch = match scratch {
        Some(scratch) => tempfile::Builder::new()
            .prefix("blocklistd-salvage-")
            .tempdir_in(scratch),
        None => tempfile::Builder::new()
            .prefix(".blocklistd-salvage-")
            .tempdir_in(parent),
    }
    .map_err(|e| format!("cannot make a scratch directory: {e}"))?;
    let salvaged = store::salvage(dir, scratch.path())?;
    let now = now_ms();
    let mut text = Vec::new();
    let (mut items, mut expired) = (0, 0);
    for (kind, item) in salvaged.items {
        if item.end_timestamp <= now {
            expired += 1;
            continue;
        }
        backup::write_record(&mut text, &backup::Record::Item { kind, item });
        items += 1;
    }
    let registrations = salvaged.registrations.len();
    for (id, node) in salvaged.registrations {
        backup::write_record(&mut text, &backup::Record::Registration { id, node });
    }
    write_out(out, &text)?;
    eprintln!(
        "salvaged {items} items ({expired} expired left out) and {registrations} registrations \
         from {}, opened {}",
        dir.display(),
        salvaged.how
    );
    for line in &salvaged.skipped {
        eprintln!("not salvaged: {line}");
    }
    Ok(())
}

async fn import(dir: &Path, file: &PathBuf, mode: ImportMode) -> Result<(), String> {
    let mut text = String::new();
    if file.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text)
    } else {
        std::fs::File::open(file).and_then(|mut f| f.read_to_string(&mut text))
    }
    .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let parsed = backup::parse(&text)
        .map_err(|errors| format!("nothing was imported:\n{}", errors.join("\n")))?;
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let store = Store::open(&StoreConfig::new(dir)).map_err(|e| e.to_string())?;
    let result = backup::import(&store, parsed, mode == ImportMode::Replace, now_ms()).await;
    close(store)?;
    let done = result.map_err(|e| e.to_string())?;
    eprintln!(
        "imported {} items ({} expired skipped) and {} registrations; {} items cleared first",
        done.items, done.skipped_expired, done.registrations, done.cleared
    );
    Ok(())
}
