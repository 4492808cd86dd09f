//! `policy`'s subcommands, and the flags of `policy set` with the parsers of their values.

use clap::{Args, Subcommand, ValueEnum};

use super::DryRunArg;

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Where each kind stands against the guardrails: items against the count cap,
    /// registered ids blocked and evacuating against the share caps, evacuations the rate
    /// admits now, the longest block.
    Status,
    /// The guardrail policy in force, one row per setting named as `policy set`'s flags.
    Show,
    /// Change some guardrails and keep the rest: reads the policy, changes the fields
    /// given, and stores the whole policy again (admin tokens only). `off` turns a guard
    /// off.
    Set(PolicySetArgs),
}

#[derive(Debug, Args)]
pub struct PolicySetArgs {
    // First, so that `--dry-run` stays under "Options" rather than the settings' heading.
    #[command(flatten)]
    pub dry_run: DryRunArg,
    #[command(flatten)]
    pub fields: PolicyFields,
}

/// One flag per field of the policy; at least one is required ([`PolicyFields::given`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Args)]
#[command(next_help_heading = "Settings (at least one)")]
pub struct PolicyFields {
    /// At most this percentage (0 to 100) of the registered nodes blocked at once, or
    /// `off`.
    #[arg(long, value_name = "PERCENT|off", value_parser = parse_percent)]
    pub nodes_max_blocked_percent: Option<Setting<u8>>,
    /// At most this percentage of the registered nodes evacuating at once, or `off`.
    #[arg(long, value_name = "PERCENT|off", value_parser = parse_percent)]
    pub nodes_max_evacuating_percent: Option<Setting<u8>>,
    /// At most this many node items, registered or not, or `off`.
    #[arg(long, value_name = "COUNT|off", value_parser = parse_count)]
    pub nodes_max_blocked: Option<Setting<u64>>,
    /// At most this many new node evacuations per minute after a burst, or `off`. A new
    /// rate starts with a burst of a minute's worth; a changed one keeps its burst.
    #[arg(long, value_name = "RATE|off", value_parser = parse_rate)]
    pub nodes_evacuations_per_minute: Option<Setting<u32>>,
    /// How many node evacuations may come at once before the rate applies (needs a rate,
    /// stored or given).
    #[arg(long, value_name = "COUNT")]
    pub nodes_evacuation_burst: Option<u32>,
    /// At most this percentage of the registered task managers effectively blocked (by
    /// their own item or their node's) at once, or `off`.
    #[arg(long, value_name = "PERCENT|off", value_parser = parse_percent)]
    pub taskmanagers_max_blocked_percent: Option<Setting<u8>>,
    /// At most this percentage of the registered task managers evacuating at once, or
    /// `off`.
    #[arg(long, value_name = "PERCENT|off", value_parser = parse_percent)]
    pub taskmanagers_max_evacuating_percent: Option<Setting<u8>>,
    /// At most this many task manager items, or `off`.
    #[arg(long, value_name = "COUNT|off", value_parser = parse_count)]
    pub taskmanagers_max_blocked: Option<Setting<u64>>,
    /// At most this many new task manager evacuations per minute after a burst, or `off`.
    #[arg(long, value_name = "RATE|off", value_parser = parse_rate)]
    pub taskmanagers_evacuations_per_minute: Option<Setting<u32>>,
    /// How many task manager evacuations may come at once before the rate applies.
    #[arg(long, value_name = "COUNT")]
    pub taskmanagers_evacuation_burst: Option<u32>,
    /// The share caps of a kind apply only with at least this many of its ids registered.
    #[arg(long, value_name = "COUNT")]
    pub min_registered: Option<u64>,
    /// No block may last longer than this from its request (`12h`, `7d`; whole seconds),
    /// or `off`. Sent as `maxBlockDurationSecs`.
    #[arg(long, value_name = "DURATION|off", value_parser = parse_max_duration)]
    pub max_block_duration: Option<Setting<u64>>,
    /// Whether a block may be permanent (no `--timeout`, no `--until`).
    #[arg(long, value_enum, value_name = "allowed|forbidden")]
    pub permanent_blocks: Option<PermanentArg>,
}

impl PolicyFields {
    /// Checks that some setting is given: a set that changes nothing is a mistake. (A clap
    /// group would say the same, but its usage line lists all thirteen flags.)
    pub fn given(self) -> Result<PolicyFields, String> {
        if self == PolicyFields::default() {
            Err(
                "policy set: give at least one setting to change (`blocklist policy set \
                 --help` lists them)"
                    .into(),
            )
        } else {
            Ok(self)
        }
    }
}

/// A guardrail's new value: a number, or `off` (`null` in the policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting<T> {
    Off,
    Set(T),
}

/// `--permanent-blocks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PermanentArg {
    Allowed,
    Forbidden,
}

/// `off`, or what `number` makes of the text.
fn setting<T>(s: &str, number: impl Fn(&str) -> Result<T, String>) -> Result<Setting<T>, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("off") {
        Ok(Setting::Off)
    } else {
        number(s).map(Setting::Set)
    }
}

/// A percentage, 0 to 100, or `off`.
pub fn parse_percent(s: &str) -> Result<Setting<u8>, String> {
    setting(s, |s| match s.parse::<u8>() {
        Ok(p) if p <= 100 => Ok(p),
        _ => Err("must be `off` or a whole percentage from 0 to 100".into()),
    })
}

/// A count of items, or `off`.
pub fn parse_count(s: &str) -> Result<Setting<u64>, String> {
    setting(s, |s| {
        s.parse::<u64>()
            .map_err(|_| "must be `off` or a whole number".into())
    })
}

/// Evacuations per minute, or `off`. Zero is passed on for the daemon to refuse, with its
/// advice to use `off`.
pub fn parse_rate(s: &str) -> Result<Setting<u32>, String> {
    setting(s, |s| {
        s.parse::<u32>()
            .map_err(|_| "must be `off` or a whole number of evacuations per minute".into())
    })
}

/// `--max-block-duration`: a humantime duration in whole seconds (the policy's unit), or
/// `off`.
pub fn parse_max_duration(s: &str) -> Result<Setting<u64>, String> {
    setting(s, |s| {
        let d =
            humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 12h, 7d, off)"))?;
        if d.subsec_nanos() != 0 {
            return Err("must be whole seconds".into());
        }
        Ok(d.as_secs())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::tests::parse;
    use crate::cli::{Api, Command};

    #[test]
    fn guardrail_settings() {
        assert_eq!(parse_percent("0"), Ok(Setting::Set(0)));
        assert_eq!(parse_percent("100"), Ok(Setting::Set(100)));
        assert_eq!(parse_percent("off"), Ok(Setting::Off));
        assert_eq!(parse_percent("OFF"), Ok(Setting::Off));
        for bad in ["101", "-1", "50%", "", "none"] {
            assert!(parse_percent(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_count("0"), Ok(Setting::Set(0)));
        assert_eq!(
            parse_count("18446744073709551615"),
            Ok(Setting::Set(u64::MAX))
        );
        assert!(parse_count("1.5").is_err());
        // Zero goes to the daemon, whose message says to use `off`.
        assert_eq!(parse_rate("0"), Ok(Setting::Set(0)));
        assert_eq!(parse_rate("off"), Ok(Setting::Off));
        assert!(parse_rate("4294967296").is_err());
        assert_eq!(parse_max_duration("12h"), Ok(Setting::Set(43_200)));
        assert_eq!(parse_max_duration("1d 30m"), Ok(Setting::Set(88_200)));
        assert_eq!(parse_max_duration("off"), Ok(Setting::Off));
        assert!(parse_max_duration("1500ms").is_err());
        assert!(parse_max_duration("12").is_err());
    }

    #[test]
    fn policy_alone_is_status() {
        for (args, expected) in [
            (&["policy"][..], None),
            (&["policy", "status"], Some("status")),
            (&["policy", "show"], Some("show")),
        ] {
            let Command::Api(Api::Policy { command }) = parse(args).unwrap().command else {
                panic!("not policy: {args:?}")
            };
            let name = command.map(|c| match c {
                PolicyCommand::Status => "status",
                PolicyCommand::Show => "show",
                PolicyCommand::Set(_) => "set",
            });
            assert_eq!(name, expected, "{args:?}");
        }
        assert!(parse(&["policy", "reset"]).is_err());
    }

    fn policy_set(args: &[&str]) -> Result<PolicySetArgs, String> {
        let mut all = vec!["policy", "set"];
        all.extend_from_slice(args);
        match parse(&all).map_err(|e| e.to_string())?.command {
            Command::Api(Api::Policy {
                command: Some(PolicyCommand::Set(set)),
            }) => {
                let fields = set.fields.given()?;
                Ok(PolicySetArgs { fields, ..set })
            }
            other => panic!("not a policy set: {other:?}"),
        }
    }

    #[test]
    fn policy_set_takes_one_flag_per_field_and_needs_one() {
        let set = policy_set(&[
            "--nodes-max-blocked-percent",
            "off",
            "--nodes-max-evacuating-percent",
            "10",
            "--nodes-max-blocked",
            "5",
            "--nodes-evacuations-per-minute",
            "6",
            "--nodes-evacuation-burst",
            "2",
            "--taskmanagers-max-blocked-percent",
            "40",
            "--taskmanagers-max-evacuating-percent",
            "off",
            "--taskmanagers-max-blocked",
            "off",
            "--taskmanagers-evacuations-per-minute",
            "off",
            "--taskmanagers-evacuation-burst",
            "9",
            "--min-registered",
            "3",
            "--max-block-duration",
            "7d",
            "--permanent-blocks",
            "forbidden",
            "--dry-run",
        ])
        .unwrap();
        assert!(set.dry_run.dry_run);
        assert_eq!(
            set.fields,
            PolicyFields {
                nodes_max_blocked_percent: Some(Setting::Off),
                nodes_max_evacuating_percent: Some(Setting::Set(10)),
                nodes_max_blocked: Some(Setting::Set(5)),
                nodes_evacuations_per_minute: Some(Setting::Set(6)),
                nodes_evacuation_burst: Some(2),
                taskmanagers_max_blocked_percent: Some(Setting::Set(40)),
                taskmanagers_max_evacuating_percent: Some(Setting::Off),
                taskmanagers_max_blocked: Some(Setting::Off),
                taskmanagers_evacuations_per_minute: Some(Setting::Off),
                taskmanagers_evacuation_burst: Some(9),
                min_registered: Some(3),
                max_block_duration: Some(Setting::Set(7 * 86_400)),
                permanent_blocks: Some(PermanentArg::Forbidden),
            }
        );
        let err = policy_set(&["--dry-run"]).unwrap_err();
        assert!(err.contains("at least one setting"), "{err}");
        assert!(policy_set(&[]).is_err());
        assert!(policy_set(&["--nodes-max-blocked-percent", "101"]).is_err());
        assert!(policy_set(&["--permanent-blocks", "maybe"]).is_err());
        assert!(policy_set(&["--nodes-evacuation-burst", "off"]).is_err());
        assert!(policy_set(&["--min-registered", "off"]).is_err());
    }
}
