//! What the ResourceManager should hold, as a pure function of the blocklist and of the
//! NodeManagers as read: which NodeManager goes into which partition, which labels must
//! exist first, and what to tell the daemon about each blocked node. The shell
//! ([`crate::pass`]) reads, calls [`plan`], writes what it says and reads back.
//!
//! Invariants:
//! - only NodeManagers matching a blocked node are put into the bridge's partitions, and
//!   only NodeManagers in the bridge's partitions are taken out (back to where their
//!   partition says they came from); every other NodeManager's partition is left as read;
//! - a NodeManager in the bridge's partition whose origin partition no longer exists stays
//!   where it is (never a guess), reported as stuck;
//! - never more than `max_percent` of the NodeManagers are in the bridge's partitions;
//!   past it a blocked node waits (`heldBack`), oldest block first admitted;
//! - a plan of a converged cluster is empty: no write.

use std::collections::{BTreeMap, BTreeSet};

use blocklist::enforcer::Block;

use crate::partition::{Origin, Partitions};

/// A NodeManager as the ResourceManager lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeManager {
    /// `host:port`, YARN's node id.
    pub id: String,
    pub host: String,
    /// Its partition (`None`: the default one).
    pub partition: Option<String>,
}

/// What the bridge was told to do.
#[derive(Debug, Clone)]
pub struct Settings {
    pub partitions: Partitions,
    /// `--max-labelled-nodes-percent`.
    pub max_percent: u8,
    /// `--dry-run`: plan, report, write nothing.
    pub dry_run: bool,
}

/// One NodeManager moved from a partition to another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub node: String,
    pub from: Option<String>,
    pub to: Option<String>,
}

/// The state of a blocked node, for the daemon (`PUT /enforcement/{name}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemStatus {
    pub id: String,
    pub state: &'static str,
    pub detail: String,
    pub revision: u64,
    /// The NodeManagers the item names (for the read back and for evacuation).
    pub targets: Vec<String>,
}

/// What to write, and what to report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Labels to add (exclusive) before the moves.
    pub labels: BTreeSet<String>,
    pub moves: Vec<Move>,
    pub statuses: Vec<ItemStatus>,
    /// NodeManagers in the bridge's partitions that no block names and that cannot go back
    /// (their origin partition is gone), with why.
    pub stuck: Vec<(String, String)>,
}

/// The most characters of a status' `detail` the daemon takes.
const DETAIL_MAX: usize = 1024;

/// The plan for `blocked` (the blocked nodes by id) against `nodes` (every NodeManager
/// listed) and `labels` (the labels the cluster has).
pub fn plan(
    blocked: &BTreeMap<String, Block>,
    nodes: &[NodeManager],
    labels: &BTreeSet<String>,
    settings: &Settings,
) -> Plan {
    let partitions = &settings.partitions;
    let mut plan = Plan::default();
    // A blocked node id names the NodeManagers of that host, or one NodeManager by its id.
    let targets = |item: &str| -> Vec<&NodeManager> {
        nodes
            .iter()
            .filter(|n| n.host.eq_ignore_ascii_case(item) || n.id.eq_ignore_ascii_case(item))
            .collect()
    };
    let mut named: BTreeSet<&str> = BTreeSet::new();
    for id in blocked.keys() {
        for node in targets(id) {
            named.insert(&node.id);
        }
    }

    // NodeManagers no block names leave the bridge's partitions.
    for node in nodes {
        let Some(origin) = partitions.origin(node.partition.as_deref()) else {
            continue;
        };
        if named.contains(node.id.as_str()) {
            continue;
        }
        match origin.partition() {
            Some(back) if !labels.contains(back) => plan.stuck.push((
                node.id.clone(),
                format!("its origin, partition {back}, no longer exists"),
            )),
            back => plan.moves.push(Move {
                node: node.id.clone(),
                from: node.partition.clone(),
                to: back.map(str::to_owned),
            }),
        }
    }

    // The ceiling: NodeManagers in the bridge's partitions that stay there, and room for
    // more.
    let limit = nodes.len() * usize::from(settings.max_percent.min(100)) / 100;
    let mut held = nodes
        .iter()
        .filter(|n| partitions.ours(n.partition.as_deref()) && named.contains(n.id.as_str()))
        .count();

    // Oldest block first: the first blocked gets the room.
    let mut order: Vec<&Block> = blocked.values().collect();
    order.sort_by(|a, b| (a.revision, &a.id).cmp(&(b.revision, &b.id)));
    for block in order {
        let targets = targets(&block.id);
        let mut status = ItemStatus {
            id: block.id.clone(),
            state: "enforced",
            detail: String::new(),
            revision: block.revision,
            targets: targets.iter().map(|n| n.id.clone()).collect(),
        };
        if targets.is_empty() {
            status.state = "noTarget";
            status.detail = "no NodeManager of this host or id; labelled when one appears".into();
            plan.statuses.push(status);
            continue;
        }
        let mut done = Vec::new();
        let mut waiting = Vec::new();
        for node in targets {
            if let Some(origin) = partitions.origin(node.partition.as_deref()) {
                done.push(format!("{} (from {origin})", node.id));
                continue;
            }
            let origin = node
                .partition
                .clone()
                .map_or(Origin::Default, Origin::Named);
            if held >= limit {
                waiting.push(node.id.clone());
                continue;
            }
            held += 1;
            let to = partitions.blocked(&origin);
            if !labels.contains(&to) {
                plan.labels.insert(to.clone());
            }
            done.push(format!("{} (from {origin})", node.id));
            plan.moves.push(Move {
                node: node.id.clone(),
                from: node.partition.clone(),
                to: Some(to),
            });
        }
        status.detail = format!("in the bridge's partition: {}", done.join(", "));
        if !waiting.is_empty() {
            status.state = "heldBack";
            status.detail = format!(
                "{}% of the NodeManagers in the bridge's partitions (--max-labelled-nodes-percent); waiting: {}{}",
                settings.max_percent,
                waiting.join(", "),
                if done.is_empty() {
                    String::new()
                } else {
                    format!("; {}", status.detail)
                }
            );
        }
        plan.statuses.push(status);
    }

    if settings.dry_run {
        for status in &mut plan.statuses {
            if status.state == "enforced"
                && plan.moves.iter().any(|m| status.targets.contains(&m.node))
            {
                status.state = "dryRun";
                status.detail = format!("would be {}", status.detail);
            }
        }
        plan.labels.clear();
        plan.moves.clear();
    }
    for status in &mut plan.statuses {
        if status.detail.len() > DETAIL_MAX {
            let mut end = DETAIL_MAX - 3;
            while !status.detail.is_char_boundary(end) {
                end -= 1;
            }
            status.detail.truncate(end);
            status.detail.push_str("...");
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nm(id: &str, partition: Option<&str>) -> NodeManager {
        NodeManager {
            id: id.to_owned(),
            host: id.split(':').next().unwrap().to_owned(),
            partition: partition.map(str::to_owned),
        }
    }

    fn block(id: &str, revision: u64) -> Block {
        Block {
            id: id.to_owned(),
            action: "MARK_BLOCKED".into(),
            cause: "disk".into(),
            source: "ops".into(),
            end_timestamp: i64::MAX,
            revision,
            ..Block::default()
        }
    }

    fn settings(max_percent: u8) -> Settings {
        Settings {
            partitions: Partitions::new("blocklisted").unwrap(),
            max_percent,
            dry_run: false,
        }
    }

    fn blocked(items: &[(&str, u64)]) -> BTreeMap<String, Block> {
        items
            .iter()
            .map(|(id, rev)| ((*id).to_owned(), block(id, *rev)))
            .collect()
    }

    fn labels(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    fn mv(node: &str, from: Option<&str>, to: Option<&str>) -> Move {
        Move {
            node: node.into(),
            from: from.map(Into::into),
            to: to.map(Into::into),
        }
    }

    fn states(plan: &Plan) -> Vec<(&str, &str)> {
        plan.statuses
            .iter()
            .map(|s| (s.id.as_str(), s.state))
            .collect()
    }

    #[test]
    fn a_blocked_host_puts_every_nodemanager_of_it_into_the_partition() {
        let nodes = [
            nm("a:1", None),
            nm("a:2", None),
            nm("b:1", None),
            nm("c:1", None),
        ];
        let plan = plan(&blocked(&[("a", 1)]), &nodes, &labels(&[]), &settings(100));
        assert_eq!(plan.labels, labels(&["blocklisted"]));
        assert_eq!(
            plan.moves,
            [
                mv("a:1", None, Some("blocklisted")),
                mv("a:2", None, Some("blocklisted"))
            ]
        );
        assert_eq!(states(&plan), [("a", "enforced")]);
        assert_eq!(plan.statuses[0].targets, ["a:1", "a:2"]);
    }

    #[test]
    fn a_nodemanager_id_names_that_nodemanager_alone() {
        let nodes = [nm("a:1", None), nm("a:2", None)];
        let plan = plan(
            &blocked(&[("a:2", 1)]),
            &nodes,
            &labels(&["blocklisted"]),
            &settings(100),
        );
        assert!(plan.labels.is_empty());
        assert_eq!(plan.moves, [mv("a:2", None, Some("blocklisted"))]);
    }

    #[test]
    fn a_converged_cluster_plans_no_write() {
        let nodes = [
            nm("a:1", Some("blocklisted")),
            nm("b:1", Some("gpu")),
            nm("c:1", None),
        ];
        let plan = plan(
            &blocked(&[("a", 1)]),
            &nodes,
            &labels(&["blocklisted", "gpu"]),
            &settings(100),
        );
        assert!(plan.labels.is_empty() && plan.moves.is_empty(), "{plan:?}");
        assert_eq!(states(&plan), [("a", "enforced")]);
    }

    #[test]
    fn a_node_of_another_partition_goes_to_its_own_and_returns_after_the_unblock() {
        let nodes = [nm("g:1", Some("gpu")), nm("c:1", None)];
        let plan1 = plan(
            &blocked(&[("g", 1)]),
            &nodes,
            &labels(&["gpu", "blocklisted"]),
            &settings(100),
        );
        assert_eq!(plan1.labels, labels(&["blocklisted-gpu"]));
        assert_eq!(
            plan1.moves,
            [mv("g:1", Some("gpu"), Some("blocklisted-gpu"))]
        );
        assert!(
            plan1.statuses[0].detail.contains("from partition gpu"),
            "{:?}",
            plan1.statuses
        );
        // Unblocked (the bridge may have restarted meanwhile: the partition says it all).
        let nodes = [nm("g:1", Some("blocklisted-gpu")), nm("c:1", None)];
        let plan2 = plan(
            &blocked(&[]),
            &nodes,
            &labels(&["gpu", "blocklisted-gpu"]),
            &settings(100),
        );
        assert_eq!(
            plan2.moves,
            [mv("g:1", Some("blocklisted-gpu"), Some("gpu"))]
        );
        // And from the default partition back to it.
        let nodes = [nm("c:1", Some("blocklisted"))];
        let plan3 = plan(
            &blocked(&[]),
            &nodes,
            &labels(&["blocklisted"]),
            &settings(100),
        );
        assert_eq!(plan3.moves, [mv("c:1", Some("blocklisted"), None)]);
    }

    #[test]
    fn a_node_whose_origin_partition_is_gone_stays_and_is_reported_stuck() {
        let nodes = [nm("g:1", Some("blocklisted-gpu"))];
        let plan = plan(
            &blocked(&[]),
            &nodes,
            &labels(&["blocklisted-gpu"]),
            &settings(100),
        );
        assert!(plan.moves.is_empty());
        assert_eq!(plan.stuck.len(), 1);
        assert!(plan.stuck[0].1.contains("gpu"));
    }

    #[test]
    fn other_partitions_are_never_touched() {
        let nodes = [
            nm("g:1", Some("gpu")),
            nm("x:1", Some("blocklistedx")),
            nm("c:1", None),
        ];
        let plan = plan(
            &blocked(&[]),
            &nodes,
            &labels(&["gpu", "blocklistedx"]),
            &settings(100),
        );
        assert_eq!(plan, Plan::default());
    }

    #[test]
    fn a_host_the_cluster_does_not_know_is_no_target() {
        let nodes = [nm("a:1", None)];
        let plan = plan(&blocked(&[("z", 1)]), &nodes, &labels(&[]), &settings(100));
        assert!(plan.moves.is_empty() && plan.labels.is_empty());
        assert_eq!(states(&plan), [("z", "noTarget")]);
    }

    #[test]
    fn a_nodemanager_that_appears_for_a_blocked_host_is_labelled() {
        let blocked = blocked(&[("z", 1)]);
        let before = plan(
            &blocked,
            &[nm("a:1", None)],
            &labels(&["blocklisted"]),
            &settings(100),
        );
        assert_eq!(states(&before), [("z", "noTarget")]);
        let after = plan(
            &blocked,
            &[nm("a:1", None), nm("z:7", None)],
            &labels(&["blocklisted"]),
            &settings(100),
        );
        assert_eq!(after.moves, [mv("z:7", None, Some("blocklisted"))]);
        assert_eq!(states(&after), [("z", "enforced")]);
    }

    #[test]
    fn the_ceiling_holds_back_the_newest_blocks() {
        let nodes = [
            nm("a:1", None),
            nm("b:1", None),
            nm("c:1", None),
            nm("d:1", None),
        ];
        // 50% of 4: two. c is the newest block.
        let plan1 = plan(
            &blocked(&[("c", 9), ("a", 1), ("b", 2)]),
            &nodes,
            &labels(&[]),
            &settings(50),
        );
        assert_eq!(
            plan1.moves,
            [
                mv("a:1", None, Some("blocklisted")),
                mv("b:1", None, Some("blocklisted"))
            ]
        );
        assert_eq!(
            states(&plan1),
            [("a", "enforced"), ("b", "enforced"), ("c", "heldBack")]
        );
        // Once a is unblocked, c takes its room.
        let nodes = [
            nm("a:1", Some("blocklisted")),
            nm("b:1", Some("blocklisted")),
            nm("c:1", None),
            nm("d:1", None),
        ];
        let plan2 = plan(
            &blocked(&[("c", 9), ("b", 2)]),
            &nodes,
            &labels(&["blocklisted"]),
            &settings(50),
        );
        assert_eq!(
            plan2.moves,
            [
                mv("a:1", Some("blocklisted"), None),
                mv("c:1", None, Some("blocklisted"))
            ]
        );
        assert_eq!(states(&plan2), [("b", "enforced"), ("c", "enforced")]);
    }

    #[test]
    fn a_dry_run_reports_and_writes_nothing() {
        let nodes = [nm("a:1", None), nm("b:1", Some("blocklisted"))];
        let mut s = settings(100);
        s.dry_run = true;
        let plan = plan(&blocked(&[("a", 1)]), &nodes, &labels(&[]), &s);
        assert!(plan.moves.is_empty() && plan.labels.is_empty(), "{plan:?}");
        assert_eq!(states(&plan), [("a", "dryRun")]);
        assert!(plan.statuses[0].detail.starts_with("would be"));
    }

    #[test]
    fn host_names_match_whatever_their_case() {
        let nodes = [nm("Node-A.example:1", None)];
        let plan = plan(
            &blocked(&[("node-a.example", 1)]),
            &nodes,
            &labels(&[]),
            &settings(100),
        );
        assert_eq!(plan.moves.len(), 1);
    }
}
