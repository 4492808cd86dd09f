//! What every subcommand prints with: stdout that a closed pipe ends quietly, the
//! server's JSON as it came, and the words and time the human output uses.

use std::io::Write;

use blocklistd::model::Kind;

use crate::client::Reply;

/// Writes to stdout; `false` once stdout is closed (`blocklist watch | head`), which ends
/// the command quietly instead of panicking like `print!` would.
pub fn emit(text: &str) -> bool {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_ok()
}

/// `--json`: the server's body as it came (nothing when it is empty, as a 201 is).
pub fn print_json(reply: &Reply) {
    let text = String::from_utf8_lossy(&reply.body);
    let text = text.trim();
    if !text.is_empty() {
        emit(&format!("{text}\n"));
    }
}

/// `--json` of an answer the command put together (a listing joined from its pages), in the
/// server's compact form.
pub fn print_value(value: &serde_json::Value) {
    emit(&format!("{value}\n"));
}

/// The kind in sentences ("blocked task manager tm-1").
pub fn noun(kind: Kind) -> &'static str {
    match kind {
        Kind::TaskManager => "task manager",
        Kind::Node => "node",
    }
}

/// Now, in unix milliseconds (end times are shown relative to it).
pub fn now() -> i64 {
    blocklistd::clock::now_ms()
}
