//! `retract`'s flags: take back one source's live report of items.

use clap::Args;

use super::{parse_source, DryRunArg, KindArg};

/// `retract KIND ID… [--source NAME] [--reason TEXT]`.
#[derive(Debug, Args)]
pub struct RetractArgs {
    #[arg(value_enum)]
    pub kind: KindArg,
    /// The ids whose report to take back (one transaction).
    #[arg(required = true)]
    pub ids: Vec<String>,
    /// Whose report: a source's name, e.g. `alertmanager/NodeDiskErrors/6d2a1c0e4f3b8a91`.
    /// Without it, the caller's own (the token's name; a `detector` token's always is).
    /// Sent as each element's `source`.
    #[arg(long, value_name = "NAME", value_parser = parse_source)]
    pub source: Option<String>,
    /// Why (up to 1 KiB): kept with the past block of a block the retraction ends. Sent
    /// as `reason`.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    #[command(flatten)]
    pub dry_run: DryRunArg,
}

#[cfg(test)]
mod tests {
    use crate::cli::tests::parse;
    use crate::cli::{Api, Command};

    #[test]
    fn ids_and_a_source() {
        let cli = parse(&["retract", "node", "n1", "n2", "--source", "alerts/Disk/f1"]).unwrap();
        let Command::Api(Api::Retract(retract)) = cli.command else {
            panic!("not a retract")
        };
        assert_eq!(retract.ids, ["n1", "n2"]);
        assert_eq!(retract.source.as_deref(), Some("alerts/Disk/f1"));
        assert!(parse(&["retract", "node"]).is_err(), "an id is needed");
    }
}
