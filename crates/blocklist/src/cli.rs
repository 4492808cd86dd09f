//! Flags and subcommands (clap derive), and the pure parsers of flag values: timeouts,
//! end times, hold-offs, sources, kinds and actions. `policy`'s subcommands and the
//! guardrail settings of `policy set` are in [`policy`], `allow`'s in [`allow`], `remove`'s
//! (an id or a selector) in [`remove`], `update`'s in [`update`]. The `--help` text comes
//! from the doc comments.

use std::path::PathBuf;

use blocklistd::model::{Action, Kind};
use clap::{Args, Parser, Subcommand, ValueEnum};

mod allow;
mod policy;
mod remove;
mod retract;
mod update;

pub use allow::{AllowAddArgs, AllowCommand};
pub use policy::{PermanentArg, PolicyCommand, PolicyFields, PolicySetArgs, Setting};
pub use remove::RemoveArgs;
pub use retract::RetractArgs;
pub use update::UpdateArgs;

/// Default daemon address: the daemon's own default `--listen`.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7224";

/// Command-line client for blocklistd: block and unblock task managers and nodes, ask
/// whether one is blocked, and follow the change feed.
///
/// Exit codes: 0 done; 1 the request was refused (by the server, whose messages go to
/// stderr, or by this client before sending it); 2 the server could not be reached.
#[derive(Debug, Parser)]
#[command(name = "blocklist", version)]
pub struct Cli {
    /// Base URL of the daemon, http:// or https:// (a path prefix is kept, for a reverse
    /// proxy).
    #[arg(long, env = "BLOCKLIST_SERVER", default_value = DEFAULT_SERVER, global = true)]
    pub server: String,

    /// With an https:// server: a PEM file of CA certificates to trust besides the system's
    /// (a private CA's).
    #[arg(long, env = "BLOCKLIST_CACERT", value_name = "PATH", global = true)]
    pub cacert: Option<PathBuf>,

    /// With an https:// server: a client certificate to present (PEM), with --key.
    #[arg(
        long,
        env = "BLOCKLIST_CERT",
        value_name = "PATH",
        global = true,
        requires = "key"
    )]
    pub cert: Option<PathBuf>,

    /// The private key of --cert (PEM).
    #[arg(
        long,
        env = "BLOCKLIST_KEY",
        value_name = "PATH",
        global = true,
        requires = "cert"
    )]
    pub key: Option<PathBuf>,

    /// File holding a token, sent as `Authorization: Bearer <token>` (surrounding
    /// whitespace is ignored). The token is never printed.
    #[arg(long, env = "BLOCKLIST_TOKEN_FILE", value_name = "PATH", global = true)]
    pub token_file: Option<PathBuf>,

    /// Print the server's JSON instead of a table (`watch`: one JSON object per line).
    #[arg(long, global = true)]
    pub json: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    #[command(flatten)]
    Api(Api),
    /// Print the completion script for a shell, e.g. `blocklist completion bash >
    /// /etc/bash_completion.d/blocklist`.
    Completion {
        #[arg(value_enum)]
        shell: blocklistd::shell::Shell,
    },
    /// Print the manual page (roff), or with `--dir` write it and one page per subcommand
    /// (blocklist-add.1, ...) into a directory, e.g. /usr/local/share/man/man1.
    Man {
        /// The directory to write the pages into (it must exist); they are listed on stdout.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// The subcommands that talk to the daemon.
#[derive(Debug, Subcommand)]
pub enum Api {
    /// List what is blocked: everything, or only task managers or only nodes.
    List {
        #[arg(value_enum)]
        kind: Option<KindArg>,
    },
    /// Show one blocked task manager or node: the item, who reported it (its most recent
    /// reports) and the blocks it had before (exit 1 when it is not blocked).
    Get {
        #[arg(value_enum)]
        kind: KindArg,
        id: String,
    },
    /// The blocks a task manager or node had before, newest first: how each ended, when,
    /// by whom and why (kept for the daemon's `--history-retention-secs`).
    History {
        #[arg(value_enum)]
        kind: KindArg,
        id: String,
    },
    /// Block task managers or nodes. Several ids are added as one atomic batch.
    Add(AddArgs),
    /// Change a blocked task manager or node in place: its end, its action, another cause
    /// (exit 1 when it is not blocked, or `--if-match` no longer matches).
    Update(UpdateArgs),
    /// Unblock a task manager or node (exit 1 when it was not blocked); or, with
    /// `--by-source`, `--by-cause` or `--all` instead of an id, every item of the kind they
    /// pick, in one transaction.
    #[command(override_usage = "blocklist remove <KIND> <ID> [OPTIONS]\n       \
                                blocklist remove <KIND> --by-source <NAME> | --by-cause <TEXT> | \
                                --all [OPTIONS]")]
    Remove(RemoveArgs),
    /// Take back one source's report of task managers or nodes: each block is then what
    /// the other sources' reports ask for, or ends when none is left. Retracting what is
    /// not there changes nothing (exit 0).
    Retract(RetractArgs),
    /// Is a task manager blocked (itself or through its node), or a node?
    ///
    /// `check tm-1` asks about task manager tm-1; `check node n1`, `check --node n1` about
    /// node n1; `check taskmanager tm-1` is the long form. Exit 0 either way: read the
    /// answer, or `"blocked"` in `--json`.
    Check(CheckArgs),
    /// Record that a task manager runs on a node (or moved to it).
    Register {
        /// Task manager id.
        taskmanager: String,
        /// The node it runs on.
        #[arg(long)]
        node: String,
        #[command(flatten)]
        dry_run: DryRunArg,
    },
    /// Forget where a task manager runs (exit 1 when it was not registered).
    Unregister {
        /// Task manager id.
        taskmanager: String,
        #[command(flatten)]
        dry_run: DryRunArg,
    },
    /// The guardrail policy: where each kind stands against it (`policy status`, also what
    /// `policy` alone shows), the policy itself (`policy show`), or a change to it
    /// (`policy set`).
    Policy {
        #[command(subcommand)]
        command: Option<PolicyCommand>,
    },
    /// The allowlist: ids that may never be blocked (`allow add`, `allow remove`, `allow
    /// list`).
    #[command(subcommand)]
    Allow(AllowCommand),
    /// Follow the change feed, one line per event, until Ctrl-C. Reconnects on its own
    /// after a dropped connection, resuming after the last event it printed. On a
    /// terminal, a status line on stderr shows the connection's state.
    Watch {
        /// Replay every event after this revision first (e.g. the `revision` of a
        /// `list --json`). Without it, only new events are shown.
        #[arg(long, value_name = "REV")]
        since: Option<u64>,
    },
}

#[derive(Debug, Args)]
pub struct AddArgs {
    #[arg(value_enum)]
    pub kind: KindArg,
    /// One or more ids.
    #[arg(required = true)]
    pub ids: Vec<String>,
    /// `block` (`MARK_BLOCKED`: place nothing new there) or `evacuate`
    /// (`MARK_BLOCKED_AND_EVACUATE_TASKS`: also move running work away). The FLIP-224 names
    /// are accepted too, in any case.
    #[arg(long, value_enum, ignore_case = true, default_value = "block")]
    pub action: ActionArg,
    /// How long the block lasts, e.g. `30m`, `2h`, `7d`, `1h 30m`. Without `--timeout`
    /// or `--until` the block is permanent.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout, conflicts_with = "until")]
    pub timeout: Option<i64>,
    /// When the block ends, as an RFC 3339 time (`2030-01-31T18:00:00+01:00` or
    /// `...Z`). The daemon refuses a time in the past.
    #[arg(long, value_name = "TIME", value_parser = parse_until)]
    pub until: Option<i64>,
    /// Why (required; shown to whoever reads the blocklist).
    #[arg(long)]
    pub cause: String,
    /// Merge into an existing block of the same id (stronger action, later end, causes
    /// joined) instead of failing with a conflict. Sent as `allowMerge`; the daemon also
    /// takes FLIP-224's spellings `mergeOnConflict` and `mergeOnConflictallowMerge`.
    #[arg(long)]
    pub merge: bool,
    /// Pass the caps (share and count) and the evacuation rate (admin tokens only; sent as
    /// `force=true`). Never the allowlist, the longest duration or the permanent guard.
    /// The blocks say they were forced, and by whom.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub source: SourceArg,
    #[command(flatten)]
    pub dry_run: DryRunArg,
}

/// `--source` on every change of an item: who makes it.
#[derive(Debug, Clone, Args)]
pub struct SourceArg {
    /// Who makes this change, e.g. `operator:alice` (1 to 128 visible ASCII characters; sent
    /// as `Blocklist-Source`). Without it, the daemon records the token's name, else
    /// `unknown`.
    #[arg(long, value_name = "NAME", value_parser = parse_source)]
    pub source: Option<String>,
}

impl SourceArg {
    /// The header that names the source, when one is given.
    pub fn header(&self) -> Option<(&'static str, &str)> {
        self.source
            .as_deref()
            .map(|source| ("blocklist-source", source))
    }
}

/// `--dry-run` on every write.
#[derive(Debug, Clone, Copy, Args)]
pub struct DryRunArg {
    /// Ask the daemon what the write would do, and write nothing (`?dryRun=true`): the
    /// same checks, conflicts and merges, the same answer and exit code, no change.
    #[arg(long)]
    pub dry_run: bool,
}

impl DryRunArg {
    /// `path` with the dry-run flag when it is set (after any query `path` has).
    pub fn path(self, path: &str) -> String {
        match (self.dry_run, path.contains('?')) {
            (false, _) => path.to_owned(),
            (true, false) => format!("{path}?dryRun=true"),
            (true, true) => format!("{path}&dryRun=true"),
        }
    }

    /// What a line of output says was done: `done` ("blocked"), or `would` ("would
    /// block") for a dry run.
    pub fn verb<'a>(self, done: &'a str, would: &'a str) -> &'a str {
        if self.dry_run {
            would
        } else {
            done
        }
    }
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// `[KIND] ID`: a task manager id, or a kind followed by an id.
    #[arg(
        value_name = "[KIND] ID",
        num_args = 1..=2,
        required_unless_present = "node",
        conflicts_with = "node"
    )]
    pub target: Vec<String>,
    /// Check this node instead of a task manager.
    #[arg(long, value_name = "ID")]
    pub node: Option<String>,
}

impl CheckArgs {
    /// The kind and id asked about. clap has already made sure exactly one of the forms
    /// was given; what is left to check is the kind word of `check KIND ID`.
    pub fn resolve(&self) -> Result<(Kind, String), String> {
        if let Some(node) = &self.node {
            return Ok((Kind::Node, node.clone()));
        }
        match self.target.as_slice() {
            [id] => Ok((Kind::TaskManager, id.clone())),
            [kind, id] => {
                let kind = KindArg::from_str(kind, true).map_err(|_| {
                    format!("check: {kind:?} is not a kind; use `check ID`, `check taskmanager ID` or `check node ID`")
                })?;
                Ok((kind.into(), id.clone()))
            }
            _ => Err("check: give a task manager id, or a kind and an id".into()),
        }
    }
}

/// `taskmanager` or `node`, with the plural and short spellings people type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KindArg {
    #[value(name = "taskmanager", alias = "taskmanagers", alias = "tm")]
    TaskManager,
    #[value(name = "node", alias = "nodes")]
    Node,
}

impl From<KindArg> for Kind {
    fn from(kind: KindArg) -> Kind {
        match kind {
            KindArg::TaskManager => Kind::TaskManager,
            KindArg::Node => Kind::Node,
        }
    }
}

/// The two actions, by the short names and by their FLIP-224 names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ActionArg {
    #[value(name = "block", alias = "MARK_BLOCKED")]
    Block,
    #[value(name = "evacuate", alias = "MARK_BLOCKED_AND_EVACUATE_TASKS")]
    Evacuate,
}

impl From<ActionArg> for Action {
    fn from(action: ActionArg) -> Action {
        match action {
            ActionArg::Block => Action::MarkBlocked,
            ActionArg::Evacuate => Action::MarkBlockedAndEvacuateTasks,
        }
    }
}

/// `--timeout`: a humantime duration (`30m`, `2h`, `7d`, `1h 30m`) as whole milliseconds,
/// the unit of the API's `timeout`. Zero is passed on for the daemon to refuse, so its
/// rule and message stay the only ones.
pub fn parse_timeout(s: &str) -> Result<i64, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("{e} (examples: 30m, 2h, 7d, 1h 30m)"))?;
    i64::try_from(d.as_millis())
        .map_err(|_| "too long; omit --timeout for a permanent block".into())
}

/// `--until`: an RFC 3339 time as unix milliseconds (the API's `endTimestamp`). Whether it
/// is in the future is the daemon's call: its clock is the one that counts.
pub fn parse_until(s: &str) -> Result<i64, String> {
    chrono::DateTime::parse_from_rfc3339(s.trim())
        .map(|t| t.timestamp_millis())
        .map_err(|e| format!("{e}: expected an RFC 3339 time such as 2030-01-31T18:00:00Z"))
}

/// `--source`: what a header can carry (visible ASCII and spaces); its length and the
/// rest of its rules are the daemon's, and its message.
pub fn parse_source(s: &str) -> Result<String, String> {
    if s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        Ok(s.to_owned())
    } else {
        Err("must be visible ASCII: it is sent as the Blocklist-Source header".into())
    }
}

/// `--hold-off`: any humantime duration of whole seconds, sent as the daemon spells one (a
/// whole number of its largest unit that divides it: `1h 30m` goes as `90m`); the daemon's
/// range (1s to 7d) stays its own rule and message.
pub fn parse_hold_off(s: &str) -> Result<String, String> {
    let duration = humantime::parse_duration(s.trim())
        .map_err(|e| format!("{e} (examples: 30m, 2h, 1h 30m, 1d)"))?;
    if duration.subsec_nanos() != 0 || duration.as_secs() == 0 {
        return Err("a hold-off is a whole number of seconds, at least one".into());
    }
    let secs = duration.as_secs();
    let (count, unit) = [(86_400, 'd'), (3_600, 'h'), (60, 'm'), (1, 's')]
        .into_iter()
        .find(|(unit_secs, _)| secs % unit_secs == 0)
        .map(|(unit_secs, unit)| (secs / unit_secs, unit))
        .expect("every whole number of seconds divides by one");
    Ok(format!("{count}{unit}"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn flags_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn timeouts() {
        assert_eq!(parse_timeout("30m"), Ok(30 * 60_000));
        assert_eq!(parse_timeout("2h"), Ok(2 * 3_600_000));
        assert_eq!(parse_timeout("7d"), Ok(7 * 86_400_000));
        assert_eq!(parse_timeout("1h 30m"), Ok(90 * 60_000));
        assert_eq!(parse_timeout("1500ms"), Ok(1500));
        assert_eq!(parse_timeout("0s"), Ok(0));
        assert!(parse_timeout("2").is_err());
        assert!(parse_timeout("banana").is_err());
        assert!(parse_timeout("-5m").is_err());
        assert!(parse_timeout("999999999999999y").is_err());
    }

    #[test]
    fn until_times() {
        assert_eq!(parse_until("1970-01-01T00:00:01Z"), Ok(1000));
        assert_eq!(
            parse_until("2030-01-01T01:00:00+01:00"),
            Ok(1_893_456_000_000)
        );
        assert_eq!(
            parse_until("2030-01-01T00:00:00.250Z"),
            Ok(1_893_456_000_250)
        );
        assert!(parse_until("2030-01-01").is_err());
        assert!(parse_until("tomorrow").is_err());
    }

    pub(crate) fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("blocklist").chain(args.iter().copied()))
    }

    #[test]
    fn actions_accept_short_and_flip_224_names() {
        for (word, action) in [
            ("block", ActionArg::Block),
            ("evacuate", ActionArg::Evacuate),
            ("MARK_BLOCKED", ActionArg::Block),
            ("mark_blocked", ActionArg::Block),
            ("MARK_BLOCKED_AND_EVACUATE_TASKS", ActionArg::Evacuate),
        ] {
            let cli = parse(&["add", "node", "n1", "--cause", "c", "--action", word]).unwrap();
            let Command::Api(Api::Add(add)) = cli.command else {
                panic!("not an add")
            };
            assert_eq!(add.action, action, "{word}");
        }
        assert!(parse(&["add", "node", "n1", "--cause", "c", "--action", "nuke"]).is_err());
    }

    #[test]
    fn add_needs_a_cause_and_at_most_one_end() {
        assert!(parse(&["add", "node", "n1"]).is_err());
        assert!(parse(&[
            "add",
            "node",
            "n1",
            "--cause",
            "c",
            "--timeout",
            "1h",
            "--until",
            "2030-01-01T00:00:00Z"
        ])
        .is_err());
        let cli = parse(&[
            "add",
            "tm",
            "a",
            "b",
            "--cause",
            "c",
            "--timeout",
            "2h",
            "--merge",
        ])
        .unwrap();
        let Command::Api(Api::Add(add)) = cli.command else {
            panic!("not an add")
        };
        assert_eq!(add.kind, KindArg::TaskManager);
        assert_eq!(add.ids, ["a", "b"]);
        assert_eq!(add.timeout, Some(7_200_000));
        assert!(add.merge);
    }

    fn check(args: &[&str]) -> Result<(Kind, String), String> {
        let mut all = vec!["check"];
        all.extend_from_slice(args);
        match parse(&all).map_err(|e| e.to_string())?.command {
            Command::Api(Api::Check(check)) => check.resolve(),
            other => panic!("not a check: {other:?}"),
        }
    }

    #[test]
    fn check_forms() {
        assert_eq!(check(&["tm-1"]), Ok((Kind::TaskManager, "tm-1".into())));
        assert_eq!(check(&["node", "n1"]), Ok((Kind::Node, "n1".into())));
        assert_eq!(check(&["nodes", "n1"]), Ok((Kind::Node, "n1".into())));
        assert_eq!(check(&["--node", "n1"]), Ok((Kind::Node, "n1".into())));
        assert_eq!(
            check(&["taskmanager", "tm-1"]),
            Ok((Kind::TaskManager, "tm-1".into()))
        );
        // A task manager may be called "node": one word is always a task manager id.
        assert_eq!(check(&["node"]), Ok((Kind::TaskManager, "node".into())));
        assert!(check(&["rack", "r1"]).is_err());
        assert!(check(&["tm-1", "--node", "n1"]).is_err());
        assert!(check(&[]).is_err());
    }

    #[test]
    fn list_kinds() {
        for (word, kind) in [
            ("taskmanagers", KindArg::TaskManager),
            ("nodes", KindArg::Node),
            ("node", KindArg::Node),
        ] {
            match parse(&["list", word]).unwrap().command {
                Command::Api(Api::List { kind: Some(k) }) => assert_eq!(k, kind),
                other => panic!("{other:?}"),
            }
        }
        assert!(matches!(
            parse(&["list"]).unwrap().command,
            Command::Api(Api::List { kind: None })
        ));
    }

    #[test]
    fn force_and_hold_off() {
        let Command::Api(Api::Add(add)) = parse(&["add", "node", "n1", "--cause", "c", "--force"])
            .unwrap()
            .command
        else {
            panic!("not an add")
        };
        assert!(add.force);
        match parse(&["remove", "node", "n1", "--hold-off", " 30m "])
            .unwrap()
            .command
        {
            Command::Api(Api::Remove(remove)) => {
                assert_eq!(remove.hold_off.as_deref(), Some("30m"));
            }
            other => panic!("{other:?}"),
        }
        match parse(&["remove", "node", "n1"]).unwrap().command {
            Command::Api(Api::Remove(remove)) => assert_eq!(remove.hold_off, None),
            other => panic!("{other:?}"),
        }
        assert!(parse(&["remove", "node", "n1", "--hold-off", "soon"]).is_err());
        // The daemon's range is its own: a day past it is sent, and refused there.
        assert!(parse(&["remove", "node", "n1", "--hold-off", "8d"]).is_ok());
        for (given, sent) in [
            ("1h 30m", "90m"),
            ("2h", "2h"),
            ("90s", "90s"),
            ("48h", "2d"),
        ] {
            assert_eq!(parse_hold_off(given).as_deref(), Ok(sent), "{given}");
        }
        assert!(parse_hold_off("1500ms").is_err());
    }

    #[test]
    fn sources_are_what_a_header_carries() {
        let Command::Api(Api::Add(add)) = parse(&[
            "add",
            "node",
            "n1",
            "--cause",
            "c",
            "--source",
            "operator:alice",
        ])
        .unwrap()
        .command
        else {
            panic!("not an add")
        };
        assert_eq!(
            add.source.header(),
            Some(("blocklist-source", "operator:alice"))
        );
        assert!(parse(&["add", "node", "n1", "--cause", "c", "--source", "äl"]).is_err());
        assert!(parse(&["add", "node", "n1", "--cause", "c", "--source", "a\tb"]).is_err());
    }

    #[test]
    fn dry_run_joins_a_query() {
        let dry = DryRunArg { dry_run: true };
        assert_eq!(dry.path("/policy"), "/policy?dryRun=true");
        assert_eq!(
            dry.path("/blocklist/nodes?force=true"),
            "/blocklist/nodes?force=true&dryRun=true"
        );
        let real = DryRunArg { dry_run: false };
        assert_eq!(
            real.path("/blocklist/nodes?force=true"),
            "/blocklist/nodes?force=true"
        );
    }
}
