//! The bench binary runs every scenario end to end on a small list and writes its JSON.
//! No speed is asserted: this proves the harness works, not how fast the daemon is.
//! Passes with or without redis-server and etcd installed (a missing peer is a "skipped"
//! row); with the `etcd` feature and etcd installed, etcd's rows must be measured.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BENCH: &str = env!("CARGO_BIN_EXE_blocklist-bench");

/// Every scenario; the JSON must hold one `ours` row for each.
const SCENARIOS: [&str; 12] = [
    "add",
    "add-keyed",
    "add-batch",
    "merge-hot",
    "feed",
    "check",
    "check-under-storm",
    "list",
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
