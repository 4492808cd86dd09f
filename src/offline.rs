//! The offline subcommands: `check`, `export`, `salvage`, `import` on a stopped daemon's
//! data dir, or (`--store etcd`) on an etcd prefix no daemon writes (`salvage` excepted:
//! it reads a damaged data dir's files). Each reports its progress through a [`Meter`] on
//! stderr and ends with one summary line there (none with `--quiet`); stdout carries only
//! the work's own output.

use std::io::{Read, Write};
use std::path::Path;

use crate::backup;
use crate::clock::now_ms;
use crate::config::{Config, ImportMode, Offline, Opener, StoreKind};
use crate::progress::{Meter, Output, Progress, Unit};
use crate::store::{self, DiskUsage, Store, StoreConfig, StoreError};

/// Runs a subcommand; the process exit code is 0 on success, 1 otherwise.
pub async fn run(command: Offline, config: &Config) -> Result<(), String> {
    let output = Output::for_stderr(command.progress().quiet);
    let place = Place { config };
    match command {
        Offline::Check { .. } => check(place, output),
        Offline::Export { out, .. } => export(place, &out, output),
        Offline::Salvage { out, scratch, .. } => {
            if place.in_etcd() {
                return Err(
                    "salvage reads a damaged data dir's files (--store sled); an etcd \
                     prefix is read whole by `export`"
                        .into(),
                );
            }
            salvage(&config.data_dir, &out, scratch.as_deref(), output)
        }
        Offline::Import { file, mode, .. } => import(place, &file, mode, output).await,
    }
}

/// Where a subcommand works: the data dir, or the etcd prefix.
#[derive(Clone, Copy)]
struct Place<'a> {
    config: &'a Config,
}

impl Place<'_> {
    fn in_etcd(self) -> bool {
        self.config.store.kind == StoreKind::Etcd
    }

    /// The data dir, or the prefix, as the summaries name it.
    fn name(self) -> String {
        if self.in_etcd() {
            format!("etcd prefix {}", self.config.store.etcd_prefix)
        } else {
            self.config.data_dir.display().to_string()
        }
    }

    /// The store's settings; `create`: whether an empty place gets a new store.
    fn store_config(self, create: bool) -> Result<StoreConfig, String> {
        let mut store = StoreConfig::new(&self.config.data_dir);
        let name = crate::store::Announcement {
            name: format!("blocklistd offline tool, pid {}", std::process::id()),
            url: None,
        }
        .to_value();
        self.config
            .store
            .place(&mut store, name, Opener::Tool { create })?;
        Ok(store)
    }
}

/// What a record count is, in the summary lines.
const RECORDS: Unit = Unit::Count("records");
const ENTRIES: Unit = Unit::Count("entries");

/// Opens an existing store (never creates one: a typo must not make an empty database).
fn open_existing(place: Place, meter: &Meter) -> Result<Store, String> {
    let dir = &place.config.data_dir;
    if !place.in_etcd() && !dir.join("db").exists() {
        return Err(format!("{} holds no blocklistd database", dir.display()));
    }
    open(place, false, meter)
}

/// Opens (or, with `create`, creates) the store; sled's recovery of a large log takes a
/// while, and so does the rebuild from a prefix. On etcd, another writer's key is waited
/// for one lease (a killed daemon's), then named.
fn open(place: Place, create: bool, meter: &Meter) -> Result<Store, String> {
    meter.wait("opening the store");
    Store::open(&place.store_config(create)?).map_err(|e| match e {
        StoreError::NotWriter(writer) => {
            format!("a daemon writes {} ({writer}): stop it first", place.name())
        }
        e => e.to_string(),
    })
}

fn close(store: Store) -> Result<(), String> {
    // The committer's shutdown blocks; run it off the async runtime.
    std::thread::spawn(move || store.shutdown())
        .join()
        .map_err(|_| "the store did not close cleanly".to_owned())?
        .map_err(|e| e.to_string())
}

fn check(place: Place, output: Output) -> Result<(), String> {
    let meter = Meter::new("check", output);
    let store = open_existing(place, &meter)?;
    let problems = store.verify_reporting(&meter).map_err(|e| e.to_string())?;
    // The sizes read the same trees again (and `meta`): as many entries as verify read.
    meter.stage("measuring the trees", ENTRIES, Some(meter.done()));
    let usage = store
        .disk_usage_reporting(&meter)
        .map_err(|e| e.to_string())?;
    let entries = |name: &str| {
        usage
            .trees
            .iter()
            .find(|t| t.name == name)
            .map_or(0, |t| t.entries)
    };
    let (unreclaimed, revision, first) = (
        store.unreclaimed(),
        store.revision(),
        store.first_retained(),
    );
    meter.wait("closing the store");
    close(store)?;
    let read = meter.done();
    // The bar goes before the report is printed: on a terminal both share the screen.
    meter.finish(
        format_args!(
            "checked {} items, {} expiry entries, {} registrations and {} event chunks \
             ({read} entries read): {} problem(s)",
            entries("items"),
            entries("expiry"),
            entries("tm_node"),
            entries("events"),
            problems.len()
        ),
        read,
        ENTRIES,
    );
    println!(
        "{}: {} items ({unreclaimed} expired, storage not reclaimed yet), {} expiry entries, \
         revision {revision}, events from {first}",
        place.name(),
        entries("items"),
        entries("expiry"),
    );
    // A prefix's mirror is a temporary copy: its files say nothing of etcd's.
    if !place.in_etcd() {
        print_disk_usage(&usage);
    }
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

fn export(place: Place, out: &Path, output: Output) -> Result<(), String> {
    let meter = Meter::new("export", output);
    let store = open_existing(place, &meter)?;
    let exported = backup::export_reporting(&store, now_ms(), &meter).map_err(|e| e.to_string());
    meter.wait("closing the store");
    close(store)?;
    let exported = exported?;
    write_out(out, &exported.text, &meter)?;
    let records = exported.items + exported.registrations;
    meter.finish(
        format_args!(
            "exported {} items and {} registrations to {}",
            exported.items,
            exported.registrations,
            destination(out)
        ),
        records,
        RECORDS,
    );
    Ok(())
}

/// `out` as the summary names it.
fn destination(out: &Path) -> String {
    if out.as_os_str() == "-" {
        "stdout".to_owned()
    } else {
        out.display().to_string()
    }
}

/// Writes `bytes` to stdout (`-`) or, durably, to the file `out`: a temporary file beside
/// it, fsynced, renamed over it, and the directory fsynced — a crash leaves the old file or
/// the whole new one, never a torn one. Reports the bytes written to `progress`.
fn write_out(out: &Path, bytes: &[u8], progress: &dyn Progress) -> Result<(), String> {
    /// Written at a time, so that the bar moves on a large export.
    const PIECE: usize = 1024 * 1024;
    progress.stage("writing", Unit::Bytes, Some(bytes.len() as u64));
    let write = |to: &mut dyn Write| -> std::io::Result<()> {
        for piece in bytes.chunks(PIECE) {
            to.write_all(piece)?;
            progress.advance(piece.len() as u64);
        }
        to.flush()
    };
    if out.as_os_str() == "-" {
        return write(&mut std::io::stdout().lock()).map_err(|e| e.to_string());
    }
    let fail = |e: std::io::Error| format!("cannot write {}: {e}", out.display());
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut file = tempfile::NamedTempFile::new_in(parent).map_err(fail)?;
    write(&mut file).map_err(fail)?;
    file.as_file().sync_all().map_err(fail)?;
    file.persist(out).map_err(|e| fail(e.error))?;
    std::fs::File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(fail)
}

fn salvage(dir: &Path, out: &Path, scratch: Option<&Path>, output: Output) -> Result<(), String> {
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
    let meter = Meter::new("salvage", output);
    let salvaged = store::salvage(dir, scratch.path(), &meter)?;
    let now = now_ms();
    let entries: Vec<_> = salvaged
        .allowlist
        .into_iter()
        .filter(|e| e.is_active(now))
        .collect();
    // The head an export starts with, but only of what decoded: an import keeps its own
    // policy when the salvage found none.
    let mut text = match &salvaged.policy {
        Some(policy) => backup::export_head(policy, &entries),
        None => backup::export_head_entries(&entries),
    };
    let (mut items, mut expired) = (0, 0);
    for (kind, item) in salvaged.items {
        if item.end_timestamp <= now {
            expired += 1;
            continue;
        }
        // Salvage reads items only: their provenance summary, not their kept reports, but
        // an item's only report is the one the item itself implies, as the export shows it.
        let reports = if item.report_count == 1 {
            vec![item.block().first_report()]
        } else {
            Vec::new()
        };
        let record = backup::Record::Item {
            kind,
            reports,
            item,
        };
        backup::write_record(&mut text, &record);
        items += 1;
    }
    let registrations = salvaged.registrations.len();
    for (id, node) in salvaged.registrations {
        backup::write_record(&mut text, &backup::Record::Registration { id, node });
    }
    write_out(out, &text, &meter)?;
    meter.finish(
        format_args!(
            "salvaged {items} items ({expired} expired left out) and {registrations} \
             registrations from {}, opened {}",
            dir.display(),
            salvaged.how
        ),
        (items + registrations) as u64,
        RECORDS,
    );
    // Not progress: what is lost, which `--quiet` does not hide.
    for line in &salvaged.skipped {
        eprintln!("not salvaged: {line}");
    }
    Ok(())
}

async fn import(
    place: Place<'_>,
    file: &Path,
    mode: ImportMode,
    output: Output,
) -> Result<(), String> {
    let meter = Meter::new("import", output);
    let text = read_in(file, &meter).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    meter.stage("checking", Unit::Bytes, Some(text.len() as u64));
    let parsed = backup::parse_reporting(&text, &meter)
        .map_err(|errors| format!("nothing was imported:\n{}", errors.join("\n")))?;
    drop(text);
    let records = parsed.records() as u64;
    if !place.in_etcd() {
        std::fs::create_dir_all(&place.config.data_dir).map_err(|e| e.to_string())?;
    }
    let store = open(place, true, &meter)?;
    let result = backup::import_reporting(
        &store,
        parsed,
        mode == ImportMode::Replace,
        now_ms(),
        &meter,
    )
    .await;
    meter.wait("closing the store");
    close(store)?;
    let done = result.map_err(|e| e.to_string())?;
    meter.finish(
        format_args!(
            "imported {} items ({} expired skipped) and {} registrations; {} items cleared first",
            done.items, done.skipped_expired, done.registrations, done.cleared
        ),
        records,
        RECORDS,
    );
    Ok(())
}

/// The whole of `file` (`-`: stdin) as text, read in pieces that are reported to
/// `progress` (with the file's size as the stage's total; stdin has none).
fn read_in(file: &Path, progress: &dyn Progress) -> std::io::Result<String> {
    let mut input: Box<dyn Read> = if file.as_os_str() == "-" {
        progress.stage("reading", Unit::Bytes, None);
        Box::new(std::io::stdin().lock())
    } else {
        let f = std::fs::File::open(file)?;
        progress.stage("reading", Unit::Bytes, Some(f.metadata()?.len()));
        Box::new(f)
    };
    let mut bytes = Vec::new();
    let mut buf = vec![0; 1024 * 1024];
    loop {
        match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                bytes.extend_from_slice(&buf[..n]);
                progress.advance(n as u64);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    String::from_utf8(bytes)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()))
}
