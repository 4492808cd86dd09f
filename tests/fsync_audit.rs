//! Power-loss durability read from the system calls: the daemon runs under strace, and
//! every file and directory it creates inside its data dir must be durable before a
//! response that may depend on it leaves for a client.
//!
//! "Durable" is what a power cut leaves on disk: the new file's contents were fsync'd (or
//! fdatasync'd) — after its last write, for a file written and closed before the response —
//! and its parent directory was fsync'd *after* the entry appeared, both before that write
//! to a TCP socket. A renamed file carries the syncs of its old name; `sync_file_range`
//! counts for nothing (it writes pages, not metadata, and flushes no disk cache). The data
//! dir itself is created by the daemon here, so its parent must be fsync'd too.
//!
//! Which response depends on a creation: the first one that went out on a group commit
//! whose flush began after the creation (see [`audit`]). For whatever the daemon creates
//! before it serves (data dir, `conf`, `db`, `blobs/`, `snap.*` on a restart) that is the
//! very first response; for a blob file the committer writes while the syncer answers the
//! previous group, it is the response after the next log sync. (The literal "first response
//! after the creation" would fail a correct pipelined daemon: a group answered while the
//! next one is being committed cannot depend on what that one creates.)
//!
//! Why: sled 0.34.7 writes a leaf bigger than about a quarter of a segment as its own file
//! `blobs/<lsn>` without fsync, and fsyncs no directory nor `conf`; after a power cut the
//! blob is empty and sled's recovery panics or drops acknowledged writes (see
//! docs/architecture.md, "Blob files" and `tests/power_cut.rs`).
//!
//! Each audited run is two daemon runs on one data dir: on a fresh data dir (which the
//! daemon creates), then restarted on it (sled recovers and writes a snapshot,
//! `snap.*.generating` renamed to `snap.*`). The first two tests share one audited run with
//! the daemon's default settings; the third forces blob files with small segments
//! (`--segment-bytes`, a hidden test flag of the daemon) to prove they are fsync'd.
//! `KEEP_TRACE=<dir>` keeps the traces. Without strace (or when it cannot trace here) the
//! tests print a loud SKIPPED on stderr and pass, except with `CI` set, where that is a
//! failure.

mod common;
mod powerloss;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use common::available;
use powerloss::{long_causes, small_writers, Ledger, Running};

#[path = "fsync_audit/model.rs"]
mod model;
#[path = "fsync_audit/trace.rs"]
mod trace;

use model::*;
use trace::*;

// ---------------------------------------------------------------------------------------
// The run

/// Whether strace is here and can trace a child (ptrace may be forbidden in a container).
fn strace_works(test: &str) -> bool {
    let traces = std::process::Command::new("strace")
        .args(["-f", "-o", "/dev/null", "--", "true"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    available("strace is missing or cannot trace here", traces, test)
}

/// Everything under `dir` (and `dir` itself), directories included.
fn all_paths(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(p) = stack.pop() {
        if !p.exists() {
            continue;
        }
        if let Ok(entries) = std::fs::read_dir(&p) {
            stack.extend(entries.flatten().map(|e| e.path()));
        }
        out.push(p);
    }
    out
}

/// Runs the daemon (with `extra` flags) under strace twice on one data dir, and audits each
/// trace: first on a fresh data dir, which it creates; then restarted on it, where sled
/// recovers and writes a snapshot (`snap.*.generating`, renamed to `snap.*`). Each run
/// takes the long-causes workload on 20 adjacent ids (new ids each time) with two writers
/// of small adds beside it, and is stopped with SIGTERM.
fn audited_run(extra: &[&str], later_syncs: usize) -> Vec<Audit> {
    let tmp = tempfile::tempdir().expect("temp dir");
    // /proc shows descriptors by their real path: compare against the canonical one.
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let data_dir = root.join("data");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut phases = Vec::new();
    for (n, phase) in ["fresh data dir", "restart"].into_iter().enumerate() {
        let existing = all_paths(&data_dir);
        let trace = root.join(format!("strace-{n}.txt"));
        let log = root.join(format!("daemon-{n}.log"));
        let d = Running::start(&data_dir, &log, extra, Some(&trace))
            .unwrap_or_else(|failure| panic!("{phase}: {failure}"));
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        runtime.block_on(async {
            let stop = Arc::new(AtomicBool::new(false));
            let small = tokio::spawn(small_writers(
                d.url(""),
                format!("small{n}"),
                2,
                ledger.clone(),
                stop.clone(),
            ));
            long_causes(d.url(""), format!("tm{n}"), ledger.clone()).await;
            stop.store(true, Ordering::Relaxed);
            small.await.unwrap();
        });
        let threads = d.thread_names();
        let blobs_at_end = powerloss::listing(&data_dir.join("blobs"));
        let log = d.log_text();
        let exit = d.terminate();
        assert!(
            !log.contains("panicked"),
            "{phase}: the daemon panicked:\n{log}"
        );
        assert!(exit.success(), "{phase}: the daemon exited {exit}");
        let ledger = ledger.lock().unwrap().clone();
        assert_eq!(ledger.refused, 0, "{phase}: some adds were refused");

        let text = std::fs::read_to_string(&trace).expect("the trace");
        let calls = parse_trace(&text);
        let (nodes, acks, violations) = audit(&calls, &data_dir, &root, &existing, later_syncs);
        let thread = |tid: u32| threads.get(&tid).cloned().unwrap_or(format!("tid {tid}"));
        let mut syncs = BTreeMap::new();
        for c in &calls {
            if !matches!(c.name.as_str(), "fsync" | "fdatasync" | "sync_file_range") {
                continue;
            }
            let Some(path) = c.args.first().and_then(|a| decoration(a)) else {
                continue;
            };
            if Path::new(path).starts_with(&root) {
                let key = (
                    kind_of(Path::new(path), &data_dir),
                    c.name.clone(),
                    thread(c.tid),
                );
                *syncs.entry(key).or_default() += 1;
            }
        }
        let audit = Audit {
            phase,
            data_dir: data_dir.clone(),
            nodes,
            acks,
            violations,
            syncs,
            threads,
            t0: calls.first().map_or(0, |c| c.start),
            acked_adds: ledger.acks,
            blobs_at_end,
        };
        eprintln!("fsync audit {extra:?}, {}", audit.summary());
        // The audit saw what it should have looked at, or it proves nothing.
        assert!(
            audit.acks.len() >= audit.acked_adds,
            "{phase}: responses missing from the trace"
        );
        if n == 0 {
            assert!(
                audit.nodes.iter().any(|n| n.path == data_dir.join("db")),
                "the trace shows no creation of db: the audit cannot see the daemon's files"
            );
        }
        if let Some(keep) = std::env::var_os("KEEP_TRACE") {
            let kept = PathBuf::from(keep).join(format!("fsync-audit-{n}.strace"));
            std::fs::copy(&trace, &kept).unwrap();
            eprintln!("trace kept at {}", kept.display());
        }
        phases.push(audit);
    }
    phases
}

/// The run with the daemon's default settings, shared by the first two tests.
fn default_run() -> Option<&'static [Audit]> {
    static RUN: OnceLock<Vec<Audit>> = OnceLock::new();
    if !strace_works("the fsync audit") {
        return None;
    }
    Some(RUN.get_or_init(|| audited_run(&[], 1)))
}

fn assert_durable(phases: &[Audit], what: &str) {
    let bad: Vec<&Audit> = phases.iter().filter(|a| !a.violations.is_empty()).collect();
    assert!(
        bad.is_empty(),
        "{what}: {} of {} files and directories created in {} were not durable before \
         the response that followed them:\n{}\n{}",
        bad.iter().map(|a| a.violations.len()).sum::<usize>(),
        phases
            .iter()
            .flat_map(|a| &a.nodes)
            .filter(|n| n.path.starts_with(&phases[0].data_dir))
            .count(),
        phases[0].data_dir.display(),
        bad.iter()
            .map(|a| a.report())
            .collect::<Vec<_>>()
            .join("\n"),
        phases
            .iter()
            .map(model::Audit::summary)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn everything_created_in_the_data_dir_is_durable_before_the_next_response() {
    let Some(phases) = default_run() else { return };
    assert_durable(phases, "default settings");
}

/// With the default segment size, no leaf of the long-causes workload reaches sled's
/// blob threshold: the daemon's segments are big enough by construction.
#[test]
fn the_long_causes_workload_writes_no_blob_file_at_default_settings() {
    let Some(phases) = default_run() else { return };
    for audit in phases {
        let blobs = audit.blob_files();
        assert!(
            blobs.is_empty() && audit.blobs_at_end.is_empty(),
            "{}: sled wrote {} blob files during the workload ({} in blobs/ at its end), \
             e.g. {:?}",
            audit.phase,
            blobs.len(),
            audit.blobs_at_end.len(),
            blobs.iter().take(3).map(|n| &n.path).collect::<Vec<_>>()
        );
    }
}

/// Small segments force blob files; each must be fsync'd, with `blobs/`, before any
/// response that may depend on it (`audit`, with the committer's window of two syncs).
/// Uses the daemon's hidden `--segment-bytes` flag (the segment size of a new data dir).
#[test]
fn blob_files_forced_by_small_segments_are_durable_before_the_next_response() {
    if !strace_works("the fsync audit with small segments") {
        return;
    }
    let phases = audited_run(&["--segment-bytes", "65536"], 2);
    for audit in &phases {
        assert!(
            !audit.blob_files().is_empty(),
            "{}: 64 KiB segments made no blob file: this run proves nothing about them\n{}",
            audit.phase,
            audit.summary()
        );
    }
    assert_durable(&phases, "64 KiB segments");
}

// ---------------------------------------------------------------------------------------
// The audit's own checks, on hand-written traces

const SYNTHETIC: &str = r#"100 1000.000000 mkdir("/d", 0777) = 0 <0.000010>
100 1000.000100 openat(AT_FDCWD</>, "/d/blobs/7", O_WRONLY|O_CREAT|O_EXCL|O_CLOEXEC, 0666) = 3</d/blobs/7> <0.000010>
100 1000.000200 write(3</d/blobs/7>, "abc", 3) = 3 <0.000010>
101 1000.000250 fsync(4</d/blobs/7> <unfinished ...>
100 1000.000300 close(3</d/blobs/7>) = 0 <0.000010>
101 1000.000400 <... fsync resumed>) = 0 <0.000200>
"#;

fn synthetic(rest: &str) -> (Vec<Node>, Vec<Violation>) {
    let text = format!("{SYNTHETIC}{rest}");
    let calls = parse_trace(&text);
    let (nodes, _, violations) = audit(&calls, Path::new("/d"), Path::new("/"), &[], 1);
    (nodes, violations)
}

#[test]
fn the_parser_joins_unfinished_calls_and_reads_decorations() {
    let calls = parse_trace(SYNTHETIC);
    assert_eq!(calls.len(), 5, "{calls:?}");
    let fsync = calls.iter().find(|c| c.name == "fsync").unwrap();
    assert_eq!(
        (fsync.tid, fsync.start, fsync.end),
        (101, 1_000_000_250, 1_000_000_450)
    );
    assert_eq!(decoration(&fsync.args[0]), Some("/d/blobs/7"));
    let (args, rest) =
        split_args(r#"7<TCP:[127.0.0.1:80->127.0.0.1:9]>, "HTTP/1.1 2"..., 5) = 5"#).unwrap();
    assert_eq!(args.len(), 3, "{args:?}");
    assert_eq!(
        decoration(&args[0]),
        Some("TCP:[127.0.0.1:80->127.0.0.1:9]")
    );
    assert_eq!(rest.trim(), "= 5");
    assert_eq!(c_string(r#""a\"b\n\x41\101""#).as_deref(), Some("a\"b\nAA"));
}

#[test]
fn the_audit_flags_what_is_missing_and_accepts_a_durable_creation() {
    let ack = r#"102 1000.001000 writev(9<TCP:[127.0.0.1:80->127.0.0.1:9]>, [{iov_base="HTTP/1.1 201 Created\r\n", iov_len=22}], 1) = 22 <0.000010>
"#;
    // The blob's contents are synced, but neither blobs/ (not even created here: the
    // trace starts after it) nor /d nor / is.
    let (nodes, violations) = synthetic(ack);
    assert_eq!(nodes.len(), 2);
    let missing: Vec<(&Path, &Vec<String>)> = violations
        .iter()
        .map(|v| (v.node.path.as_path(), &v.missing))
        .collect();
    assert_eq!(missing.len(), 2, "{missing:?}");
    assert!(
        missing[0].1.iter().any(|m| m.contains("never fsync'd")),
        "{missing:?}"
    );
    assert!(
        missing[1].1[0].contains("/d/blobs not fsync'd"),
        "{missing:?}"
    );
    assert_eq!(violations[1].ack.head, "HTTP/1.1 201 Created");

    // Synced directories before the response: clean.
    let synced = r"101 1000.000500 fsync(5</d/blobs>) = 0 <0.000010>
101 1000.000600 fsync(6</d>) = 0 <0.000010>
101 1000.000700 fsync(7</>) = 0 <0.000010>
";
    let (_, violations) = synthetic(&format!("{synced}{ack}"));
    assert!(violations.is_empty(), "{violations:?}");

    // The same syncs after the response count for nothing; a sync_file_range neither.
    let late = synced.replace("1000.000", "1000.002");
    let (_, violations) = synthetic(&format!(
        "101 1000.000500 sync_file_range(5</d/blobs/7>, 0, 3, SYNC_FILE_RANGE_WRITE) = 0 <0.000010>\n{ack}{late}"
    ));
    assert_eq!(violations.len(), 2, "{violations:?}");

    // A directory fsync that began before the file was created does not cover it.
    let early = "101 1000.000050 fsync(5</d/blobs>) = 0 <0.000500>\n";
    let (_, violations) = synthetic(&format!(
        "{early}101 1000.000600 fsync(6</d>) = 0 <0.000010>\n101 1000.000700 fsync(7</>) = 0 <0.000010>\n{ack}"
    ));
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(violations[0].missing[0].contains("/d/blobs not fsync'd"));
}

#[test]
fn a_renamed_file_keeps_the_syncs_of_its_old_name() {
    let text = r#"100 1000.000100 openat(AT_FDCWD</d>, "snap.1.generating", O_WRONLY|O_CREAT|O_CLOEXEC, 0666) = 3</d/snap.1.generating> <0.000010>
100 1000.000200 write(3</d/snap.1.generating>, "abc", 3) = 3 <0.000010>
100 1000.000300 fsync(3</d/snap.1.generating>) = 0 <0.000010>
100 1000.000400 close(3</d/snap.1.generating>) = 0 <0.000010>
100 1000.000500 rename("/d/snap.1.generating", "/d/snap.1") = 0 <0.000010>
100 1000.000600 fsync(4</d>) = 0 <0.000010>
102 1000.001000 write(9<TCP:[127.0.0.1:80->127.0.0.1:9]>, "HTTP/1.1 202 Accepted\r\n", 23) = 23 <0.000010>
"#;
    let calls = parse_trace(text);
    let (nodes, _, violations) = audit(&calls, Path::new("/d"), Path::new("/"), &[], 1);
    assert_eq!(nodes.len(), 2);
    assert!(violations.is_empty(), "{violations:?}");
    // Without the directory fsync, the rename target's entry is missing; the
    // `.generating` name is gone before the response and owes nothing.
    let text = text.replace("fsync(4</d>)", "fstat(4</d>)");
    let (_, _, violations) = audit(&parse_trace(&text), Path::new("/d"), Path::new("/"), &[], 1);
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert_eq!(violations[0].node.path, Path::new("/d/snap.1"));
}

#[test]
fn a_blob_of_the_next_group_is_owed_only_by_responses_that_may_depend_on_it() {
    // Group k's log sync ends at 1000.000500. The committer writes a blob for group k+1
    // at .000600, while the syncer answers group k (.000700): not owed yet. Group k+1's
    // sync (.000800) began after it, and the next one (.001000) surely covers it: the
    // response at .001100 owes it, and finds it unsynced.
    let text = r#"100 1000.000400 fdatasync(3</d/db>) = 0 <0.000100>
101 1000.000600 openat(AT_FDCWD</d>, "/d/blobs/9", O_WRONLY|O_CREAT|O_EXCL|O_CLOEXEC, 0666) = 4</d/blobs/9> <0.000010>
102 1000.000700 writev(9<TCP:[127.0.0.1:80->127.0.0.1:9]>, [{iov_base="HTTP/1.1 201 Created\r\n", iov_len=22}], 1) = 22 <0.000010>
100 1000.000800 fdatasync(3</d/db>) = 0 <0.000100>
102 1000.000950 writev(9<TCP:[127.0.0.1:80->127.0.0.1:9]>, [{iov_base="HTTP/1.1 202 Accepted\r\n", iov_len=23}], 1) = 23 <0.000010>
100 1000.001000 fdatasync(3</d/db>) = 0 <0.000050>
102 1000.001100 writev(9<TCP:[127.0.0.1:80->127.0.0.1:9]>, [{iov_base="HTTP/1.1 201 Created\r\n", iov_len=22}], 1) = 22 <0.000010>
"#;
    let calls = parse_trace(text);
    let (_, _, violations) = audit(&calls, Path::new("/d"), Path::new("/"), &[], 1);
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert_eq!(violations[0].ack.at, 1_000_001_100);
    // Synced (file and directory) before that response: clean.
    let synced = text.replace(
        "100 1000.001000 fdatasync",
        "101 1000.000960 fsync(4</d/blobs/9>) = 0 <0.000010>\n\
         101 1000.000980 fsync(5</d/blobs>) = 0 <0.000010>\n100 1000.001000 fdatasync",
    );
    let (_, _, violations) = audit(
        &parse_trace(&synced),
        Path::new("/d"),
        Path::new("/"),
        &[],
        1,
    );
    assert!(violations.is_empty(), "{violations:?}");
}
