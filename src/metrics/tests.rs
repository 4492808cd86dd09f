//! The metrics' names and values as both text formats render them.

use super::*;

#[test]
fn the_store_gauges_render_under_their_names() {
    for format in [Exposition::Prometheus, Exposition::OpenMetrics] {
        let metrics = Metrics::new();
        let gauges = StoreGauges {
            items: vec![
                (Kind::TaskManager, Action::MarkBlocked, 3),
                (Kind::Node, Action::MarkBlockedAndEvacuateTasks, 1),
            ],
            revision: 42,
            unreclaimed: 7,
            sweeper_next_deadline_ms: Some(1_500),
            disk_bytes: Some(4096),
            guards: vec![
                Figure {
                    kind: Kind::Node,
                    guard: Guard::BlockedShare,
                    current: 5,
                    limit: Some(100),
                },
                Figure {
                    kind: Kind::Node,
                    guard: Guard::EvacuatingShare,
                    current: 2,
                    limit: None,
                },
            ],
            registered: vec![(Kind::Node, 200)],
            evacuation_tokens: vec![(Kind::TaskManager, 2.5)],
            etcd_role: Some("writer"),
            replica_lag: None,
            etcd_elections: Some((3, 2)),
            etcd_writer: Some("blocklistd 7 at 10.0.0.1:7224".into()),
            etcd_member_versions: vec![
                ("http://10.0.0.2:2379".into(), "3.6.17".into(), true),
                ("http://10.0.0.3:2379".into(), "3.4.23".into(), false),
            ],
            etcd_nospace: true,
        };
        metrics.commit_failed("sync");
        let text = metrics.render(&gauges, format);
        assert!(
            !text.contains(r#"blocklist_guard_limit{kind="node",guard="evacuating-share"}"#),
            "a guard that does not apply has no limit:\n{text}"
        );
        for line in [
            r#"blocklist_guard_current{kind="node",guard="blocked-share"} 5"#,
            r#"blocklist_guard_limit{kind="node",guard="blocked-share"} 100"#,
            r#"blocklist_registered{kind="node"} 200"#,
            r#"blocklist_evacuation_tokens{kind="taskmanager"} 2.5"#,
            r#"blocklist_etcd_role{role="writer"} 1"#,
            r#"blocklist_etcd_elections_total{outcome="won"} 3"#,
            r#"blocklist_etcd_elections_total{outcome="lost"} 2"#,
            r#"blocklist_etcd_writer{name="blocklistd 7 at 10.0.0.1:7224"} 1"#,
            r#"blocklist_etcd_member_version{member="http://10.0.0.2:2379",version="3.6.17",fixed="true"} 1"#,
            r#"blocklist_etcd_member_version{member="http://10.0.0.3:2379",version="3.4.23",fixed="false"} 1"#,
            r#"blocklist_items{kind="taskmanager",action="MARK_BLOCKED"} 3"#,
            r#"blocklist_items{kind="node",action="MARK_BLOCKED_AND_EVACUATE_TASKS"} 1"#,
            "blocklist_revision 42",
            "blocklist_unreclaimed_items 7",
            "blocklist_sweeper_next_deadline_timestamp_seconds 1.5",
            "blocklist_database_size_bytes 4096",
            "blocklist_etcd_nospace 1",
            r#"blocklist_commit_failures_total{stage="sync"} 1"#,
            r#"blocklist_commit_failures_total{stage="transaction"} 0"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{format:?}: no {line:?} in\n{text}"
            );
        }
        // A size that could not be read leaves the last one; no deadline reads as 0.
        let text = metrics.render(
            &StoreGauges {
                disk_bytes: None,
                ..StoreGauges::default()
            },
            format,
        );
        assert!(text
            .lines()
            .any(|l| l == "blocklist_database_size_bytes 4096"));
        assert!(text
            .lines()
            .any(|l| l == "blocklist_sweeper_next_deadline_timestamp_seconds 0.0"));
    }
}

#[test]
fn each_format_declares_a_counter_its_own_way_with_the_same_sample() {
    let metrics = Metrics::new();
    metrics.conflicts.inc();
    let store = StoreGauges::default();

    let prometheus = metrics.render(&store, Exposition::Prometheus);
    assert!(
        prometheus.contains(
            "# HELP blocklist_conflicts_total Add batches refused because of a conflict.\n\
             # TYPE blocklist_conflicts_total counter\n\
             blocklist_conflicts_total 1\n"
        ),
        "{prometheus}"
    );
    assert!(!prometheus.contains("# EOF"), "{prometheus}");

    let openmetrics = metrics.render(&store, Exposition::OpenMetrics);
    assert!(
        openmetrics.contains(
            "# HELP blocklist_conflicts Add batches refused because of a conflict.\n\
             # TYPE blocklist_conflicts counter\n\
             blocklist_conflicts_total 1\n"
        ),
        "{openmetrics}"
    );
    assert!(openmetrics.ends_with("\n# EOF\n"), "{openmetrics}");
}
