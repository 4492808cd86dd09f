//! `allow`'s subcommands: the allowlist.

use clap::{Args, Subcommand};

use super::{parse_timeout, parse_until, DryRunArg, KindArg};

#[derive(Debug, Subcommand)]
pub enum AllowCommand {
    /// Put an id on the allowlist (admin tokens only): it may not be blocked while the
    /// entry applies, and its active blocks are lifted now. Putting an id again replaces
    /// its entry.
    Add(AllowAddArgs),
    /// Take an id off the allowlist (admin tokens only; exit 1 when it had no entry).
    Remove {
        #[arg(value_enum)]
        kind: KindArg,
        /// The id (or prefix) of the entry.
        id: String,
        #[command(flatten)]
        dry_run: DryRunArg,
    },
    /// List the allowlist entries in force: all, or of one kind.
    List {
        #[arg(value_enum)]
        kind: Option<KindArg>,
    },
}

#[derive(Debug, Args)]
pub struct AllowAddArgs {
    #[arg(value_enum)]
    pub kind: KindArg,
    /// The id, or with `--prefix` the start of every id the entry covers.
    pub id: String,
    /// Why the id must never be blocked (required; shown in the allowlist).
    #[arg(long)]
    pub comment: String,
    /// Cover every id that starts with ID, not only ID itself.
    #[arg(long)]
    pub prefix: bool,
    /// How long the entry applies, e.g. `30m`, `2h`, `7d`. Without `--timeout` or
    /// `--until` it applies until removed.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout, conflicts_with = "until")]
    pub timeout: Option<i64>,
    /// When the entry stops applying, as an RFC 3339 time.
    #[arg(long, value_name = "TIME", value_parser = parse_until)]
    pub until: Option<i64>,
    #[command(flatten)]
    pub dry_run: DryRunArg,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::tests::parse;
    use crate::cli::{Api, Command};

    fn allow_add(args: &[&str]) -> Result<AllowAddArgs, clap::Error> {
        let mut all = vec!["allow", "add"];
        all.extend_from_slice(args);
        match parse(&all)?.command {
            Command::Api(Api::Allow(AllowCommand::Add(add))) => Ok(add),
            other => panic!("not an allow add: {other:?}"),
        }
    }

    #[test]
    fn allow_add_needs_a_comment_and_at_most_one_end() {
        let add = allow_add(&["nodes", "db-", "--comment", "databases", "--prefix"]).unwrap();
        assert_eq!(add.kind, KindArg::Node);
        assert_eq!(add.id, "db-");
        assert!(add.prefix);
        assert_eq!((add.timeout, add.until), (None, None));
        let add = allow_add(&["tm", "tm-1", "--comment", "c", "--timeout", "2h"]).unwrap();
        assert_eq!(add.timeout, Some(7_200_000));
        assert!(!add.prefix && !add.dry_run.dry_run);
        let add = allow_add(&[
            "node",
            "n1",
            "--comment",
            "c",
            "--until",
            "2030-01-01T00:00:00Z",
            "--dry-run",
        ])
        .unwrap();
        assert_eq!(add.until, Some(1_893_456_000_000));
        assert!(add.dry_run.dry_run);
        assert!(allow_add(&["node", "n1"]).is_err());
        assert!(allow_add(&["node", "--comment", "c"]).is_err());
        assert!(allow_add(&[
            "node",
            "n1",
            "--comment",
            "c",
            "--timeout",
            "1h",
            "--until",
            "2030-01-01T00:00:00Z"
        ])
        .is_err());
    }

    #[test]
    fn allow_remove_and_list() {
        match parse(&["allow", "remove", "tm", "tm-1", "--dry-run"])
            .unwrap()
            .command
        {
            Command::Api(Api::Allow(AllowCommand::Remove { kind, id, dry_run })) => {
                assert_eq!((kind, id.as_str()), (KindArg::TaskManager, "tm-1"));
                assert!(dry_run.dry_run);
            }
            other => panic!("{other:?}"),
        }
        assert!(parse(&["allow", "remove", "node"]).is_err());
        assert!(matches!(
            parse(&["allow", "list"]).unwrap().command,
            Command::Api(Api::Allow(AllowCommand::List { kind: None }))
        ));
        assert!(matches!(
            parse(&["allow", "list", "nodes"]).unwrap().command,
            Command::Api(Api::Allow(AllowCommand::List {
                kind: Some(KindArg::Node)
            }))
        ));
        assert!(parse(&["allow"]).is_err());
    }
}
