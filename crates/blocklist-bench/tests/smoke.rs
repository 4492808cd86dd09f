//! The bench binary runs every scenario end to end on a small list and writes its JSON.
//! No speed is asserted: this proves the harness works, not how fast the daemon is.
//! Passes with or without redis-server and etcd installed (a missing peer is a "skipped"
//! row); with the `etcd` feature and etcd installed, etcd's rows must be measured.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BENCH: &str = env!("CARGO_BIN_EXE_blocklist-bench");

/// Every scenario; the JSON must hold one `ours` row for each.
const SCENARIOS: [&str; 13] = [
    "add",
    "add-keyed",
    "add-batch",
    "merge-hot",
    "feed",
    "check",
    "check-under-storm",
    "list",
    "list-pages",
    "expire",
    "idle",
    "restart",
    "footprint",
];

#[test]
fn every_scenario_runs_and_is_reported() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let json = tmp.path().join("results.json");
    let mut child = Command::new(BENCH)
        .args([
            "all",
            "--items",
            "1000",
            "--duration",
            "1",
            "--concurrency",
            "16",
        ])
        .args([
            "--expire-window",
            "2",
            "--restarts",
            "1",
            "--subscribers",
            "1,10",
        ])
        .arg("--json-out")
        .arg(&json)
        .arg("--work-dir")
        .arg(tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start blocklist-bench");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(180) {
            let _ = child.kill();
            panic!("blocklist-bench did not finish within 180 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        status.success(),
        "exit {status}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );

    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("the JSON was written"))
            .expect("the JSON parses");
    let rows = report["rows"].as_array().expect("rows");
    for scenario in SCENARIOS {
        let row = rows
            .iter()
            .find(|r| r["scenario"] == scenario && r["role"] == "ours")
            .unwrap_or_else(|| panic!("no row for {scenario} in {report:#}"));
        assert!(
            !row["note"].as_str().unwrap_or("").starts_with("FAILED"),
            "{scenario}: {}",
            row["note"]
        );
    }
    // Built with the etcd peer, and etcd installed: its rows are measured, not skipped.
    if cfg!(feature = "etcd") && on_path("etcd") {
        for scenario in ["add", "check", "feed"] {
            let row = rows
                .iter()
                .find(|r| r["scenario"] == scenario && r["role"] == "etcd")
                .unwrap_or_else(|| panic!("no etcd row for {scenario} in {report:#}"));
            assert!(row["ops"].as_u64().unwrap_or(0) > 0, "{scenario}: {row:#}");
        }
    }
    assert!(report["machine"]["nproc"].as_u64().is_some());
    // The printed table has the same rows.
    for scenario in SCENARIOS {
        assert!(
            stdout.contains(&format!("| {scenario} | ours |")),
            "{stdout}"
        );
    }
}

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(name).is_file()))
}

/// `ab` with the same daemon on both sides: every round of both runs, and each figure of
/// both scenarios gets its medians and a ratio (1.00x for a size that cannot differ).
#[test]
fn ab_compares_two_daemons_round_by_round() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let json = tmp.path().join("ab.json");
    // The daemon the bench finds next to itself.
    let daemon = std::path::Path::new(BENCH).with_file_name("blocklistd");
    let output = Command::new(BENCH)
        .args([
            "ab",
            "add",
            "footprint",
            "--items",
            "1000",
            "--duration",
            "0.5",
        ])
        .args(["--concurrency", "8", "--rounds", "2", "--labels", "old,new"])
        .arg("--daemon")
        .arg(&daemon)
        .arg("--daemon")
        .arg(&daemon)
        .arg("--json-out")
        .arg(&json)
        .arg("--work-dir")
        .arg(tmp.path())
        .output()
        .expect("run blocklist-bench ab");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "exit {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    assert!(
        stdout.contains(
            "| scenario | figure | old (median [rounds]) | new (median [rounds]) | ratio |"
        ),
        "{stdout}"
    );
    for line in ["| add | ops_s |", "| footprint | disk_bytes_per_item |"] {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(line))
            .unwrap_or_else(|| panic!("no {line} in\n{stdout}"));
        assert!(row.trim_end().ends_with("x |"), "no ratio: {row}");
    }
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("the JSON was written"))
            .expect("the JSON parses");
    let rounds = report["rounds"].as_array().expect("rounds");
    assert_eq!(rounds.len(), 4, "2 rounds × 2 daemons");
    // The order alternates: old, new, then new, old.
    let labels: Vec<&str> = rounds
        .iter()
        .map(|r| r["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["old", "new", "new", "old"]);
    for round in rounds {
        let rows = round["rows"].as_array().expect("rows");
        assert!(rows.iter().all(|r| r["role"] == "ours"), "{round:#}");
        assert_eq!(rows.len(), 2, "add and footprint: {round:#}");
    }
}
