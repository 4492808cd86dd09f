//! What shells and `man` need from a binary: completion scripts and manual pages, both
//! generated from its clap definitions, so they list exactly the subcommands and flags the
//! binary has. The daemon's `completion` and `man` subcommands use this, and so do the
//! client's (`blocklist` reaches it through this library).

use std::fmt::Write as _;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

pub use clap_complete::Shell;

/// The completion script of `command` for `shell`.
pub fn completion(command: &clap::Command, shell: Shell) -> Vec<u8> {
    let mut command = command.clone();
    let name = command.get_name().to_owned();
    let mut script = Vec::new();
    // Into memory, not stdout: the generators panic on a failed write (a closed pipe).
    clap_complete::generate(shell, &mut command, name, &mut script);
    script
}

/// The command as its manual pages show it: without clap's `help` subcommand, which would
/// get a page of its own that says nothing `--help` does not.
fn for_man(command: &clap::Command) -> clap::Command {
    let mut command = command.clone().disable_help_subcommand(true);
    command.build();
    command
}

/// The manual page of `command` itself (roff, section 1). Its SUBCOMMANDS section refers
/// to one page per subcommand, `NAME-SUBCOMMAND(1)`, which [`write_man_pages`] writes.
pub fn man_page(command: &clap::Command) -> io::Result<Vec<u8>> {
    let mut page = Vec::new();
    clap_mangen::Man::new(for_man(command)).render(&mut page)?;
    Ok(page)
}

/// Writes `NAME.1` and `NAME-SUBCOMMAND.1` for each visible subcommand (and theirs) into
/// `dir`, which must exist; returns the files written.
pub fn write_man_pages(command: &clap::Command, dir: &Path) -> io::Result<Vec<PathBuf>> {
    fn write(command: &clap::Command, dir: &Path, written: &mut Vec<PathBuf>) -> io::Result<()> {
        let man = clap_mangen::Man::new(command.clone());
        let path = dir.join(man.get_filename());
        let mut page = Vec::new();
        man.render(&mut page)?;
        std::fs::File::create(&path)
            .and_then(|mut file| file.write_all(&page))
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        written.push(path);
        for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
            write(sub, dir, written)?;
        }
        Ok(())
    }
    let mut written = Vec::new();
    write(&for_man(command), dir, &mut written)?;
    Ok(written)
}

/// `completion SHELL`: prints the script on stdout.
pub fn print_completion(command: &clap::Command, shell: Shell) -> Result<(), String> {
    print(&completion(command, shell))
}

/// `man [--dir DIR]`: prints the binary's page on stdout, or writes every page into `dir`
/// and prints their paths.
pub fn print_man(command: &clap::Command, dir: Option<&Path>) -> Result<(), String> {
    match dir {
        None => print(&man_page(command).map_err(|e| e.to_string())?),
        Some(dir) => {
            let written = write_man_pages(command, dir)
                .map_err(|e| format!("cannot write the manual pages: {e}"))?;
            let mut list = String::new();
            for path in written {
                let _ = writeln!(list, "{}", path.display());
            }
            print(list.as_bytes())
        }
    }
}

/// Writes to stdout; a reader that stops early (`| head`) is no error.
fn print(bytes: &[u8]) -> Result<(), String> {
    let mut out = io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(format!("cannot write: {e}")),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn pages_are_named_after_the_binary_and_its_subcommands() {
        let dir = tempfile::tempdir().unwrap();
        let written = write_man_pages(&crate::config::Cli::command(), dir.path()).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names[0], "blocklistd.1");
        for sub in ["check", "export", "salvage", "import", "completion", "man"] {
            assert!(
                names.contains(&format!("blocklistd-{sub}.1")),
                "{sub}: {names:?}"
            );
        }
        assert!(!names.iter().any(|n| n.contains("help")), "{names:?}");
    }
}
