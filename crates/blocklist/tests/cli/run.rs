//! Running the CLI: a clean environment, a deadline, and what one run did.

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::mpsc;

use serde_json::Value;

use super::common::{Daemon, DEADLINE};

pub const CLI: &str = env!("CARGO_BIN_EXE_blocklist");

/// What one run of the CLI did.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn ok(self) -> Run {
        assert_eq!(self.code, 0, "expected success: {self:?}");
        self
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }
}

/// The CLI with a clean environment (no server or token from the caller's shell) and a
/// fixed time zone.
pub fn command(server: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(CLI);
    cmd.arg("--server")
        .arg(server)
        .args(args)
        .env_remove("BLOCKLIST_SERVER")
        .env_remove("BLOCKLIST_TOKEN_FILE")
        .env_remove("BLOCKLIST_CACERT")
        .env_remove("BLOCKLIST_CERT")
        .env_remove("BLOCKLIST_KEY")
        .env("TZ", "UTC");
    cmd
}

/// Runs the CLI to completion, failing the test if it takes longer than [`DEADLINE`].
pub fn run_cmd(mut cmd: Command) -> Run {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start blocklist");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = rx
        .recv_timeout(DEADLINE)
        .expect("blocklist did not finish in time")
        .expect("wait for blocklist");
    Run {
        code: out.status.code().expect("exited, not killed"),
        stdout: String::from_utf8(out.stdout).expect("UTF-8 stdout"),
        stderr: String::from_utf8(out.stderr).expect("UTF-8 stderr"),
    }
}

pub fn cli(d: &Daemon, args: &[&str]) -> Run {
    run_cmd(command(&d.url(""), args))
}

pub fn assert_refused(run: &Run, needles: &[&str]) {
    assert_eq!(run.code, 1, "expected a refusal: {run:?}");
    assert!(run.stdout.is_empty(), "{run:?}");
    for needle in needles {
        assert!(
            run.stderr.contains(needle),
            "stderr lacks {needle:?}: {run:?}"
        );
    }
}

/// A port nothing listens on: bound, then closed.
pub fn dead_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}
