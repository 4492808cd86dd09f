//! `update`'s flags: a change to one blocked item in place (`PATCH`).

use clap::{ArgGroup, Args};

use super::{parse_timeout, parse_until, ActionArg, DryRunArg, KindArg, SourceArg};

/// `update KIND ID` with at least one change: a new end (at most one of `--timeout`,
/// `--end`, `--permanent`), an action, a cause to append.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("new_end").args(["timeout", "end", "permanent"])))]
#[command(group(
    ArgGroup::new("change")
        .args(["timeout", "end", "permanent", "action", "cause"])
        .required(true)
        .multiple(true)
))]
pub struct UpdateArgs {
    #[arg(value_enum)]
    pub kind: KindArg,
    pub id: String,
    /// The new end, this long from now, e.g. `30m`, `2h`, `7d` (shorter than before is
    /// fine).
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    pub timeout: Option<i64>,
    /// The new end, as an RFC 3339 time (`2030-01-31T18:00:00Z`); the daemon refuses a
    /// time in the past.
    #[arg(long, value_name = "TIME", value_parser = parse_until)]
    pub end: Option<i64>,
    /// Make the block permanent.
    #[arg(long)]
    pub permanent: bool,
    /// The new action, up (`evacuate`) or down (`block`).
    #[arg(long, value_enum, ignore_case = true)]
    pub action: Option<ActionArg>,
    /// A cause to append to the item's causes.
    #[arg(long)]
    pub cause: Option<String>,
    /// Update only if the item is still as it was read: its `ETag` as `get` shows it (`12`
    /// or `"12"`). Another answers 412 and nothing is written.
    #[arg(long, value_name = "ETAG")]
    pub if_match: Option<String>,
    /// Pass the caps and the evacuation rate, as `add --force` does (admin tokens only).
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub source: SourceArg,
    #[command(flatten)]
    pub dry_run: DryRunArg,
}

impl UpdateArgs {
    /// `--if-match` as the header carries it: a bare revision quoted, anything else
    /// (`"12"`, `*`, a list) as given.
    pub fn if_match_header(&self) -> Option<String> {
        let tag = self.if_match.as_deref()?.trim();
        Some(
            if !tag.is_empty() && tag.bytes().all(|b| b.is_ascii_digit()) {
                format!("\"{tag}\"")
            } else {
                tag.to_owned()
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::tests::parse;
    use crate::cli::{Api, Command};

    fn update(args: &[&str]) -> Result<UpdateArgs, clap::Error> {
        let mut all = vec!["update"];
        all.extend_from_slice(args);
        match parse(&all)?.command {
            Command::Api(Api::Update(update)) => Ok(update),
            other => panic!("not an update: {other:?}"),
        }
    }

    #[test]
    fn an_update_needs_a_change_and_at_most_one_end() {
        let u = update(&["node", "n1", "--timeout", "2h", "--if-match", "12"]).unwrap();
        assert_eq!(u.timeout, Some(7_200_000));
        assert_eq!(u.if_match_header().as_deref(), Some("\"12\""));
        let u = update(&["tm", "t1", "--action", "evacuate", "--cause", "c"]).unwrap();
        assert_eq!(u.action, Some(ActionArg::Evacuate));
        assert_eq!(u.if_match_header(), None);
        let u = update(&["tm", "t1", "--permanent", "--if-match", "\"7\""]).unwrap();
        assert!(u.permanent);
        assert_eq!(u.if_match_header().as_deref(), Some("\"7\""));
        assert_eq!(
            update(&["tm", "t1", "--end", "2030-01-01T00:00:00Z"])
                .unwrap()
                .end,
            Some(1_893_456_000_000)
        );
        assert!(update(&["tm", "t1"]).is_err(), "no change");
        assert!(update(&["tm", "t1", "--timeout", "1h", "--permanent"]).is_err());
        assert!(update(&[
            "tm",
            "t1",
            "--timeout",
            "1h",
            "--end",
            "2030-01-01T00:00:00Z"
        ])
        .is_err());
    }
}
