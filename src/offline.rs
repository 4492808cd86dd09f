//! The offline subcommands: `check`, `export`, `import` on a stopped daemon's data dir.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::backup;
use crate::clock::now_ms;
use crate::config::{Command, ImportMode};
use crate::store::{DiskUsage, Store, StoreConfig};

/// Runs a subcommand; the process exit code is 0 on success, 1 otherwise.
pub async fn run(command: Command, data_dir: &Path) -> Result<(), String> {
    match command {
        Command::Check => check(data_dir),
        Command::Export { out } => export(data_dir, &out),
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

fn export(dir: &Path, out: &PathBuf) -> Result<(), String> {
    let store = open_existing(dir)?;
    let text = backup::export(&store, now_ms()).map_err(|e| e.to_string());
    close(store)?;
    let text = text?;
    if out.as_os_str() == "-" {
        std::io::stdout()
            .write_all(text.as_bytes())
            .map_err(|e| e.to_string())
    } else {
        std::fs::write(out, text).map_err(|e| format!("cannot write {}: {e}", out.display()))
    }
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
