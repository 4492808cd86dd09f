//! A binary run on a pseudo-terminal (util-linux `script`), as an operator runs it, and
//! the text it drew there.

use std::path::Path;
use std::process::{Command, Stdio};

use super::{available, runs};

/// Whether `script` is here to give a command a terminal (see [`available`]).
pub fn have_script(test: &str) -> bool {
    available(
        "script is missing (Debian package: bsdutils)",
        runs("script", "--version"),
        test,
    )
}

/// Runs `program args...` with a terminal as its stdin, stdout and stderr; returns its exit
/// code and what it drew, with the terminal's escape sequences taken out and each carriage
/// return made a line break, so every frame of a progress bar is a line of its own.
pub fn on_terminal(program: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut line = quote(&program.to_string_lossy());
    for arg in args {
        line.push(' ');
        line.push_str(&quote(arg));
    }
    let out = Command::new("script")
        .args([
            "--quiet",
            "--flush",
            "--return",
            "--command",
            &line,
            "/dev/null",
        ])
        // No RUST_LOG from the test's environment: the log must not draw over the screen.
        .env_remove("RUST_LOG")
        .env("TERM", "xterm")
        .stdin(Stdio::null())
        .output()
        .expect("run script");
    let drawn = String::from_utf8_lossy(&out.stdout);
    (out.status.code(), plain(&drawn))
}

/// `text` without CSI escape sequences (`ESC [ ... letter`), `\r` as `\n`.
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => {
                if chars.next() == Some('[') {
                    for c in chars.by_ref() {
                        if c.is_ascii_alphabetic() {
                            break;
                        }
                    }
                }
            }
            '\r' => out.push('\n'),
            c => out.push(c),
        }
    }
    out
}

/// `arg` quoted for `sh -c`.
fn quote(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', r"'\''"))
}
