//! `remove`'s flags: one item by its id, or every item of a kind that a selector picks.

use clap::{ArgGroup, Args};

use super::{parse_hold_off, DryRunArg, KindArg, SourceArg};

/// `remove KIND ID` or `remove KIND --by-source NAME | --by-cause TEXT | --all`.
#[derive(Debug, Args)]
#[command(group(
    ArgGroup::new("target")
        .args(["id", "by_source", "by_cause", "all"])
        .required(true)
        .multiple(true)
))]
pub struct RemoveArgs {
    #[arg(value_enum)]
    pub kind: KindArg,
    /// The id to unblock. Without it, a selector (`--by-source`, `--by-cause`, `--all`) names
    /// the items.
    #[arg(conflicts_with_all = ["by_source", "by_cause", "all"])]
    pub id: Option<String>,
    #[command(flatten)]
    pub selector: SelectorArgs,
    /// Keep the id from being blocked again for this long, e.g. `30m`, `2h` (1s to 7d;
    /// admin tokens only): the daemon puts an allowlist entry that ends then, in the
    /// same transaction as the unblock. Sent as `holdOff`; one id only.
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = parse_hold_off,
        conflicts_with_all = ["by_source", "by_cause", "all"]
    )]
    pub hold_off: Option<String>,
    /// Why it is unblocked (up to 1 KiB): kept with the block in the id's history (each
    /// item's, with a selector). Sent as `reason`.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    #[command(flatten)]
    pub source: SourceArg,
    #[command(flatten)]
    pub dry_run: DryRunArg,
}

/// The selector of `remove KIND` without an id: the parts given combine with AND, and
/// every item of the kind they match goes in one transaction (or none, when more match
/// than the daemon's `--max-batch`).
#[derive(Debug, Clone, Args)]
pub struct SelectorArgs {
    /// Unblock the items whose source (who blocked them: the first report's) is exactly
    /// NAME. Sent as `source`.
    #[arg(long, value_name = "NAME")]
    pub by_source: Option<String>,
    /// Unblock the items whose cause contains TEXT. Sent as `cause`.
    #[arg(long, value_name = "TEXT")]
    pub by_cause: Option<String>,
    /// Unblock every item of the kind (admin tokens only); with `--by-source` or
    /// `--by-cause`, those narrow it.
    #[arg(long)]
    pub all: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::tests::parse;
    use crate::cli::{Api, Command};

    fn remove(args: &[&str]) -> Result<RemoveArgs, clap::Error> {
        let mut all = vec!["remove"];
        all.extend_from_slice(args);
        match parse(&all)?.command {
            Command::Api(Api::Remove(remove)) => Ok(remove),
            other => panic!("not a remove: {other:?}"),
        }
    }

    #[test]
    fn an_id_or_a_selector() {
        let one = remove(&["node", "n1", "--reason", "fixed", "--source", "op:al"]).unwrap();
        assert_eq!(one.id.as_deref(), Some("n1"));
        assert!(one.selector.by_source.is_none() && !one.selector.all);
        assert_eq!(one.reason.as_deref(), Some("fixed"));
        assert_eq!(one.source.source.as_deref(), Some("op:al"));
        let by = remove(&[
            "tm",
            "--by-source",
            "det-a",
            "--by-cause",
            "oom",
            "--dry-run",
        ])
        .unwrap();
        assert_eq!(by.id, None);
        assert!(by.dry_run.dry_run);
        assert_eq!(
            (
                by.selector.by_source.as_deref(),
                by.selector.by_cause.as_deref()
            ),
            (Some("det-a"), Some("oom"))
        );
        assert!(remove(&["tm", "--all"]).unwrap().selector.all);
        // Neither, both, or a hold-off without an id.
        assert!(remove(&["tm"]).is_err());
        assert!(remove(&["tm", "t1", "--all"]).is_err());
        assert!(remove(&["tm", "t1", "--by-cause", "x"]).is_err());
        assert!(remove(&["tm", "--all", "--hold-off", "1h"]).is_err());
        // `--source` is who removes, never a selector.
        assert!(remove(&["tm", "--source", "det-a"]).is_err());
    }
}
