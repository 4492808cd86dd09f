//! Where a blocked NodeManager goes, and where it came from, written in YARN itself.
//!
//! A NodeManager is in one partition at most (YARN's node labels): the default one (no
//! label) or a named one (`gpu`). A blocked NodeManager goes into an exclusive partition of
//! the bridge's: `--label` (`blocklisted`) when it came from the default partition,
//! `<label>-<origin>` (`blocklisted-gpu`) when it came from `origin`. The partition's name
//! is the record of where to return it: it lives in the ResourceManager's node-label store
//! (it survives a restart of the bridge or of the ResourceManager, and an unblock while the
//! bridge was down), anyone sees it (`yarn node -list -showDetails`, the RM's UI), and the
//! bridge never guesses. No application asks for these partitions, so they receive no new
//! container; queues must not list them (docs/yarn.md).

/// The bridge's partitions, from `--label`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partitions {
    label: String,
}

/// Where a NodeManager in one of the bridge's partitions came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The default partition (no label).
    Default,
    /// A named partition.
    Named(String),
}

impl Partitions {
    /// `label` must be a YARN label name: a letter or digit, then letters, digits, `-` and
    /// `_`, at most 255 characters (`NodeLabelUtil`'s rule), short enough to leave room for
    /// an origin.
    pub fn new(label: &str) -> Result<Partitions, String> {
        if !is_label_name(label) || label.len() > 128 {
            return Err(format!(
                "--label {label:?}: a YARN label is a letter or digit, then letters, digits, \
                 `-` and `_` (at most 128 characters here)"
            ));
        }
        Ok(Partitions {
            label: label.to_owned(),
        })
    }

    /// The partition a NodeManager from `origin` goes into while blocked.
    pub fn blocked(&self, origin: &Origin) -> String {
        match origin {
            Origin::Default => self.label.clone(),
            Origin::Named(name) => format!("{}-{name}", self.label),
        }
    }

    /// Where a NodeManager in `partition` came from, if that is one of the bridge's
    /// partitions; `None` for any other partition (the default one included).
    pub fn origin(&self, partition: Option<&str>) -> Option<Origin> {
        let partition = partition?;
        if partition == self.label {
            return Some(Origin::Default);
        }
        let origin = partition.strip_prefix(&self.label)?.strip_prefix('-')?;
        (!origin.is_empty()).then(|| Origin::Named(origin.to_owned()))
    }

    /// Whether `partition` is one of the bridge's.
    pub fn ours(&self, partition: Option<&str>) -> bool {
        self.origin(partition).is_some()
    }
}

impl Origin {
    /// The partition to return to (`None`: the default one).
    pub fn partition(&self) -> Option<&str> {
        match self {
            Origin::Default => None,
            Origin::Named(name) => Some(name),
        }
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Default => f.write_str("the default partition"),
            Origin::Named(name) => write!(f, "partition {name}"),
        }
    }
}

/// YARN's rule for a label's name (`NodeLabelUtil.checkAndThrowLabelName`).
pub fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && name.len() <= 255
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partition_says_where_a_node_came_from() {
        let p = Partitions::new("blocklisted").unwrap();
        assert_eq!(p.blocked(&Origin::Default), "blocklisted");
        assert_eq!(p.blocked(&Origin::Named("gpu".into())), "blocklisted-gpu");
        assert_eq!(p.origin(Some("blocklisted")), Some(Origin::Default));
        assert_eq!(
            p.origin(Some("blocklisted-gpu-a100")),
            Some(Origin::Named("gpu-a100".into()))
        );
        for other in [
            None,
            Some("gpu"),
            Some("blocklisted-"),
            Some("blocklistedx"),
            Some("x-blocklisted"),
        ] {
            assert_eq!(p.origin(other), None, "{other:?}");
            assert!(!p.ours(other));
        }
        for origin in [Origin::Default, Origin::Named("gpu".into())] {
            assert_eq!(p.origin(Some(&p.blocked(&origin))), Some(origin));
        }
    }

    #[test]
    fn a_label_is_a_yarn_label_name() {
        assert!(Partitions::new("blocklisted").is_ok());
        assert!(Partitions::new("b_l-1").is_ok());
        for bad in ["", "-x", "a b", "a.b", "ä"] {
            assert!(Partitions::new(bad).is_err(), "{bad:?}");
        }
    }
}
