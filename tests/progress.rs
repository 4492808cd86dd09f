//! Progress of the offline subcommands on stderr: one summary line with the right counts
//! when stderr is not a terminal, nothing with `--quiet`, a bar with counts, rate and ETA
//! on a terminal; stdout (the data of `export`) the same in every case.

mod common;

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Output};

use common::*;

const ITEMS: usize = 3000;
const REGISTRATIONS: usize = 4;

/// An export file: `ITEMS` lasting items (a third of them permanent), one item that has
/// already expired, `REGISTRATIONS` registrations.
fn export_file(dir: &Path) -> std::path::PathBuf {
    let mut text = String::new();
    for i in 0..ITEMS {
        let (kind, end) = match i % 3 {
            0 => ("taskmanager", i64::MAX),
            1 => ("taskmanager", now_ms() + 3_600_000),
            _ => ("node", now_ms() + 7_200_000),
        };
        let _ = writeln!(
            text,
            "{{\"type\":\"item\",\"kind\":\"{kind}\",\"id\":\"id-{i:05}\",\"action\":\"MARK_BLOCKED\",\
             \"startTimestamp\":1,\"endTimestamp\":{end},\"cause\":\"bulk\"}}"
        );
    }
    text.push_str(
        "{\"type\":\"item\",\"kind\":\"node\",\"id\":\"gone\",\"action\":\"MARK_BLOCKED\",\
         \"startTimestamp\":1,\"endTimestamp\":2,\"cause\":\"old\"}\n",
    );
    for i in 0..REGISTRATIONS {
        let _ = writeln!(
            text,
            "{{\"type\":\"registration\",\"id\":\"tm-{i}\",\"node\":\"id-00002\"}}"
        );
    }
    let file = dir.join("in.jsonl");
    std::fs::write(&file, text).unwrap();
    file
}

/// Runs an offline subcommand on the data dir `dir` with stdout and stderr piped (so
/// neither is a terminal) and `RUST_LOG` as given (`None`: unset, the default `info`).
fn run(dir: &Path, args: &[&OsStr], rust_log: Option<&str>) -> Output {
    let mut command = Command::new(&*BIN);
    command
        .arg("--data-dir")
        .arg(dir)
        .args(args)
        .env_remove("RUST_LOG");
    if let Some(filter) = rust_log {
        command.env("RUST_LOG", filter);
    }
    let out = command.output().expect("run blocklistd");
    assert!(out.status.success(), "{args:?}: {out:?}");
    out
}

/// The one line on stderr.
fn only_line(out: &Output) -> String {
    let stderr = String::from_utf8(out.stderr.clone()).unwrap();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "expected one summary line:\n{stderr}");
    assert!(
        !stderr.contains('\u{1b}') && !stderr.contains('\r'),
        "{stderr:?}"
    );
    lines[0].to_owned()
}

/// `LINE` is `PREFIX; took S s, R UNIT/s`.
fn assert_summary(line: &str, prefix: &str, unit: &str) {
    let rest = line
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("expected {prefix:?}…, got {line:?}"));
    let timing = rest
        .strip_prefix("; took ")
        .unwrap_or_else(|| panic!("{line:?}"));
    let (secs, rate) = timing
        .split_once(" s, ")
        .unwrap_or_else(|| panic!("{line:?}"));
    assert!(secs.parse::<f64>().is_ok(), "{line:?}");
    let rate = rate
        .strip_suffix(&format!(" {unit}/s"))
        .unwrap_or_else(|| panic!("{line:?}"));
    assert!(rate.parse::<u64>().is_ok_and(|r| r > 0), "{line:?}");
}

#[test]
fn offline_work_ends_with_one_summary_line_of_its_counts_when_stderr_is_not_a_terminal() {
    let ws = Workspace::new();
    let dir = ws.data_dir();
    let file = export_file(ws.tmp.path());

    // The daemon's info log ("created a new database") is not progress: warnings only.
    let out = run(&dir, &["import".as_ref(), file.as_os_str()], Some("warn"));
    assert_summary(
        &only_line(&out),
        &format!(
            "imported {ITEMS} items (1 expired skipped) and {REGISTRATIONS} registrations; \
             0 items cleared first"
        ),
        "records",
    );
    assert!(out.stdout.is_empty());

    // Now the data dir exists: nothing logs at info any more.
    let out = run(&dir, &["export".as_ref()], None);
    assert_summary(
        &only_line(&out),
        &format!("exported {ITEMS} items and {REGISTRATIONS} registrations to stdout"),
        "records",
    );
    let exported = String::from_utf8(out.stdout).unwrap();
    // The policy line, then the records counted.
    assert_eq!(exported.lines().count(), 1 + ITEMS + REGISTRATIONS);

    let out = run(&dir, &["check".as_ref()], None);
    let line = only_line(&out);
    // Two thirds of the items end, each with its expiry entry; the log holds the import's
    // events in chunks.
    let expiry = ITEMS / 3 * 2;
    let prefix = format!(
        "checked {ITEMS} items, {expiry} expiry entries, {REGISTRATIONS} registrations and "
    );
    let rest = line
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{line:?} does not start with {prefix:?}"));
    let (chunks, rest) = rest.split_once(" event chunks (").unwrap();
    let chunks: usize = chunks.parse().unwrap();
    assert!(chunks > 0, "{line:?}");
    let (read, rest) = rest.split_once(" entries read): 0 problem(s)").unwrap();
    // Each tree is read twice (checked, then measured), and `meta` once.
    let read: usize = read.parse().unwrap();
    let entries = ITEMS + expiry + 2 * REGISTRATIONS + chunks;
    assert!(
        (2 * entries..2 * entries + 10).contains(&read),
        "{read} entries read for {entries}: {line:?}"
    );
    assert_summary(rest, "", "entries");
    let report = String::from_utf8(out.stdout).unwrap();
    assert!(report.contains("ok: every invariant holds"), "{report}");

    let salvaged = ws.tmp.path().join("salvaged.jsonl");
    let out = run(
        &dir,
        &["salvage".as_ref(), "--out".as_ref(), salvaged.as_os_str()],
        None,
    );
    assert_summary(
        &only_line(&out),
        &format!(
            "salvaged {ITEMS} items (0 expired left out) and {REGISTRATIONS} registrations \
             from {}, opened the data dir as it is",
            dir.display()
        ),
        "records",
    );
    let mut salvaged = std::fs::read_to_string(&salvaged)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    let mut exported: Vec<String> = exported.lines().map(str::to_owned).collect();
    salvaged.sort();
    exported.sort();
    assert_eq!(salvaged, exported);
}

#[test]
fn quiet_offline_work_prints_nothing_on_stderr_and_the_same_data_on_stdout() {
    let ws = Workspace::new();
    let dir = ws.data_dir();
    let file = export_file(ws.tmp.path());
    let silent = |out: Output| {
        assert!(
            out.stderr.is_empty(),
            "stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };

    // Into a new data dir, at the default log level: not even "created a new database".
    let stdout = silent(run(
        &dir,
        &["import".as_ref(), "--quiet".as_ref(), file.as_os_str()],
        None,
    ));
    assert!(stdout.is_empty());
    let quiet = silent(run(&dir, &["export".as_ref(), "-q".as_ref()], None));
    let loud = run(&dir, &["export".as_ref()], None).stdout;
    assert!(quiet == loud, "export's data differs with --quiet");
    assert_eq!(
        String::from_utf8(quiet).unwrap().lines().count(),
        1 + ITEMS + REGISTRATIONS
    );
    let report = silent(run(&dir, &["check".as_ref(), "--quiet".as_ref()], None));
    assert!(String::from_utf8(report)
        .unwrap()
        .contains("ok: every invariant holds"));
    let out = ws.tmp.path().join("salvaged.jsonl");
    silent(run(
        &dir,
        &[
            "salvage".as_ref(),
            "--quiet".as_ref(),
            "--out".as_ref(),
            out.as_os_str(),
        ],
        None,
    ));
    assert_eq!(
        std::fs::read_to_string(&out).unwrap().lines().count(),
        1 + ITEMS + REGISTRATIONS
    );
}

#[test]
fn on_a_terminal_offline_work_draws_a_bar_with_counts_rate_and_eta() {
    let test = "on_a_terminal_offline_work_draws_a_bar_with_counts_rate_and_eta";
    if !have_script(test) {
        return;
    }
    let ws = Workspace::new();
    let dir = ws.data_dir();
    let file = export_file(ws.tmp.path());
    let (dir, file) = (dir.to_str().unwrap(), file.to_str().unwrap());
    let (code, drawn) = on_terminal(&BIN, &["--data-dir", dir, "import", file]);
    assert_eq!(code, Some(0), "{drawn}");
    let records = ITEMS + 1 + REGISTRATIONS;
    // A frame of the importing stage: `import: importing [===>   ] 1,000/3,005 records,
    // 2,000/s, ETA 1s` (how far it has got when a frame is drawn varies).
    let frame = drawn
        .lines()
        .find(|l| l.starts_with("import: importing ["))
        .unwrap_or_else(|| panic!("no frame of the importing stage:\n{drawn}"));
    let total = format!("/{},{:03} records, ", records / 1000, records % 1000);
    assert!(frame.contains(&total), "{frame:?} lacks {total:?}");
    assert!(frame.contains("/s, ETA "), "{frame:?}");
    // The bar is cleared at the end and the summary line stays.
    let last = drawn.lines().rev().find(|l| !l.trim().is_empty()).unwrap();
    assert_summary(
        last.trim_end(),
        &format!(
            "imported {ITEMS} items (1 expired skipped) and {REGISTRATIONS} registrations; \
             0 items cleared first"
        ),
        "records",
    );

    // A quiet run draws nothing but what the work prints on stdout (here: nothing).
    let (code, drawn) = on_terminal(&BIN, &["--data-dir", dir, "check", "--quiet"]);
    assert_eq!(code, Some(0), "{drawn}");
    assert!(!drawn.contains("check: "), "{drawn}");
    assert!(drawn.contains("ok: every invariant holds"), "{drawn}");
}
