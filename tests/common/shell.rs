//! The completion scripts and manual pages a binary prints (`completion SHELL`, `man`),
//! checked the same way for both binaries: every subcommand named in every script, and
//! every page rendered by groff without a warning.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use super::{available, runs};

/// The shells `completion` takes.
pub const SHELLS: [&str; 5] = ["bash", "zsh", "fish", "powershell", "elvish"];

/// The subcommands `BIN --help` lists (clap's "Commands:" section), without `help`.
pub fn subcommands_in_help(bin: &Path) -> Vec<String> {
    let out = Command::new(bin)
        .arg("--help")
        .output()
        .expect("run --help");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// Runs `bin args...` and returns its stdout, asserting exit 0 and nothing on stderr.
pub fn printed(bin: &Path, args: &[&str]) -> String {
    let out = Command::new(bin)
        .args(args)
        .output()
        .expect("run the binary");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{} {args:?}: {out:?}",
        bin.display()
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// Every shell's completion script of `bin` names each of `subcommands`.
pub fn assert_completions_name(bin: &Path, subcommands: &[String]) {
    for shell in SHELLS {
        let script = printed(bin, &["completion", shell]);
        assert!(
            script.len() > 500,
            "{shell}: a script this short is not one:\n{script}"
        );
        for sub in subcommands {
            assert!(
                script.contains(sub.as_str()),
                "the {shell} script does not name `{sub}`:\n{script}"
            );
        }
    }
}

/// Whether groff is here (see [`available`]).
pub fn have_groff(test: &str) -> bool {
    available(
        "groff is missing (Debian package: groff-base)",
        runs("groff", "--version"),
        test,
    )
}

/// `page` (roff) as groff renders it for a terminal, with every warning turned on; panics
/// on any warning or error.
pub fn render_man(page: &[u8], what: &str) -> String {
    let mut groff = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-rLL=100n"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start groff");
    groff
        .stdin
        .take()
        .expect("stdin")
        .write_all(page)
        .expect("feed groff");
    let out = groff.wait_with_output().expect("groff");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "groff on {what}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // Bold and underline are drawn by overstriking (`X\bX`); keep the letters.
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut plain = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '\u{8}' {
            plain.pop();
        } else {
            plain.push(c);
        }
    }
    plain
}

/// Every flag (`--…`) and `BLOCKLIST_*` variable a deployment manifest uses outside its
/// comments that `bin --help` does not know; panics unless it uses at least `least` (so a
/// manifest the parse misreads cannot pass empty).
pub fn unknown_to_help(bin: &Path, manifest: &Path, least: usize) -> Vec<String> {
    let help = printed(bin, &["--help"]);
    let text = std::fs::read_to_string(manifest).expect("the manifest");
    let objects: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    let words = |text: &str| -> Vec<String> {
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .map(str::to_owned)
            .collect()
    };
    let named = |w: &str, prefix: &str| {
        w.starts_with(prefix) && w[prefix.len()..].starts_with(|c: char| c.is_ascii_alphabetic())
    };
    let used: Vec<String> = words(&objects)
        .into_iter()
        .filter(|w| named(w, "--") || named(w, "BLOCKLIST_"))
        .collect();
    assert!(used.len() >= least, "{}: {used:?}", manifest.display());
    let known = words(&help);
    used.into_iter().filter(|w| !known.contains(w)).collect()
}

/// Runs `bin` with `args` (and `--listen 127.0.0.1:0`), which must fail at start with every
/// one of `says` on stderr.
pub fn refuses(bin: &Path, args: &[&str], says: &[&str]) {
    let out = std::process::Command::new(bin)
        .args(args)
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?}: {stderr}");
    for part in says {
        assert!(stderr.contains(part), "{args:?}: {part} in {stderr}");
    }
}
