//! The external tools some tests need (strace, mkfs.ext4, promtool, …): whether they are
//! here, and what a test does when one is not.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Whether an external tool (or facility) these tests need is here. Missing: under `CI`
/// that fails the test; elsewhere the test says so loudly on stderr and does nothing.
pub fn available(what: &str, ok: bool, test: &str) -> bool {
    if ok {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set but {what}: {test} cannot run (CI must provide it)"
    );
    // Straight to the process's stderr: the test harness captures `eprintln!` of tests
    // that pass, and a skip must be seen.
    let banner = "!".repeat(72);
    let text = format!(
        "\n{banner}\n!!! SKIPPED {test}: {what}\n!!! (with CI set this is a failure)\n{banner}\n\n"
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr(), text.as_bytes());
    false
}

/// Whether `program` runs (`program arg` exits 0).
pub fn runs(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `tests/servers/build <name>`: the directory the server's binaries are in, built from
/// the Go module (or Maven project) of that name if they are missing or older than its
/// files.
pub fn build_server(name: &str) -> Result<PathBuf, String> {
    // The workspace's root: this harness is also compiled into other members' tests.
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|dir| dir.join("tests/servers/build"))
        .find(|script| script.exists())
        .ok_or("tests/servers/build is not in the workspace")?;
    let output = Command::new(&script)
        .arg(name)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("{}: {e}", script.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{} {name} failed (it needs the Go toolchain and the Go module proxy, or Maven and Maven Central)",
            script.display()
        ));
    }
    Ok(PathBuf::from(
        String::from_utf8_lossy(&output.stdout).trim(),
    ))
}

/// The documents of the YAML file at `path` as JSON, one value per document (`PyYAML` does
/// the parsing: a YAML parser the cluster's tools agree with, rather than one of ours).
/// `None` (after the skip-or-fail rule) without `PyYAML`.
pub fn yaml_documents(path: &Path, test: &str) -> Option<Vec<serde_json::Value>> {
    let parses = Command::new("python3")
        .args(["-c", "import yaml"])
        .status()
        .is_ok_and(|s| s.success());
    if !available(
        "python3 with PyYAML is not installed (Debian: python3-yaml)",
        parses,
        test,
    ) {
        return None;
    }
    let output = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))",
        ])
        .arg(path)
        .output()
        .expect("run python3");
    assert!(
        output.status.success(),
        "{} does not parse: {}",
        path.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    Some(serde_json::from_slice(&output.stdout).expect("PyYAML's JSON"))
}
