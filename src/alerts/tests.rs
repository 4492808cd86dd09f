use serde_json::json;

use super::*;

/// An hour after the alerts' start (2027-01-15T08:00:00.5Z).
const NOW: i64 = 1_800_003_600_500;

fn alert(status: &str, labels: serde_json::Value) -> Alert {
    let mut alert: Alert = serde_json::from_value(json!({
        "status": status,
        "labels": {},
        "annotations": {"summary": "disk errors on sda, sdb"},
        "startsAt": "2027-01-15T08:00:00.5Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus/graph?g0.expr=x",
        "fingerprint": "6d2a1c0e4f3b8a91",
    }))
    .unwrap();
    alert.labels = serde_json::from_value(labels).unwrap();
    alert
}

fn node_alert(status: &str) -> Alert {
    alert(
        status,
        json!({"alertname": "NodeDiskErrors", "blocklist_kind": "node", "node": "n1"}),
    )
}

#[test]
fn a_firing_alert_reports_its_node_under_its_own_source() {
    let Decision::Signal(Signal::Report(kind, item)) = decide(&node_alert("firing"), "am", NOW)
    else {
        panic!("not a report")
    };
    assert_eq!(kind, Kind::Node);
    assert_eq!(item.id, "n1");
    assert_eq!(item.action, Action::MarkBlocked);
    assert_eq!(item.end, PERMANENT, "until it resolves");
    assert_eq!(item.source, "am/NodeDiskErrors/6d2a1c0e4f3b8a91");
    assert_eq!(
        item.cause, "NodeDiskErrors: disk errors on sda; sdb",
        "one cause"
    );
    assert!(item.allow_merge);
    assert_eq!(item.details["fingerprint"], "6d2a1c0e4f3b8a91");
    assert_eq!(item.details["startsAt"], "2027-01-15T08:00:00.5Z");
    assert_eq!(
        item.details["generatorURL"],
        "http://prometheus/graph?g0.expr=x"
    );
    assert_eq!(item.details["alertname"], "NodeDiskErrors");
}

#[test]
fn its_resolve_retracts_exactly_its_episode() {
    let Decision::Signal(Signal::Retract(kind, retraction)) =
        decide(&node_alert("resolved"), "am", NOW)
    else {
        panic!("not a retraction")
    };
    assert_eq!(kind, Kind::Node);
    assert_eq!(retraction.id, "n1");
    assert_eq!(retraction.source, "am/NodeDiskErrors/6d2a1c0e4f3b8a91");
    assert_eq!(
        retraction.details,
        Details::from([
            ("fingerprint".into(), "6d2a1c0e4f3b8a91".into()),
            ("startsAt".into(), "2027-01-15T08:00:00.5Z".into()),
        ])
    );
}

#[test]
fn the_rule_says_kind_id_label_action_and_duration() {
    let a = alert(
        "firing",
        json!({"alertname": "TmLost", "blocklist_kind": "taskmanager",
            "blocklist_id_label": "tm", "tm": "tm-7",
            "blocklist_action": "evacuate", "blocklist_duration": "2h"}),
    );
    let Decision::Signal(Signal::Report(Kind::TaskManager, item)) = decide(&a, "am", NOW) else {
        panic!("not a task manager report")
    };
    assert_eq!(item.id, "tm-7");
    assert_eq!(item.action, Action::MarkBlockedAndEvacuateTasks);
    // From the alert's start, not from the delivery: a repeat asks for the same end.
    let starts = OffsetDateTime::parse("2027-01-15T08:00:00.5Z", &Rfc3339).unwrap();
    let starts = (starts.unix_timestamp_nanos() / 1_000_000) as i64;
    assert_eq!(item.end, starts + 2 * 3_600_000);
    assert_eq!(item.timeout, Some(2 * 3_600_000));
    // A task manager's id defaults to the pod label; settings may be annotations.
    let mut b = alert(
        "firing",
        json!({"alertname": "X", "blocklist_kind": "taskmanager", "pod": "tm-1"}),
    );
    b.annotations.insert(
        "blocklist_action".into(),
        "MARK_BLOCKED_AND_EVACUATE_TASKS".into(),
    );
    let Decision::Signal(Signal::Report(_, item)) = decide(&b, "am", NOW) else {
        panic!("not a report")
    };
    assert_eq!(
        (item.id.as_str(), item.action),
        ("tm-1", Action::MarkBlockedAndEvacuateTasks)
    );
}

#[test]
fn a_rule_that_keeps_the_block_retracts_nothing_on_resolve() {
    let a = alert(
        "resolved",
        json!({"alertname": "A", "blocklist_kind": "node", "node": "n1",
            "blocklist_duration": "1h", "blocklist_on_resolve": "keep"}),
    );
    assert_eq!(decide(&a, "am", NOW), Decision::Kept);
}

#[test]
fn an_alert_that_names_nothing_or_names_it_wrongly_is_ignored_with_the_reason() {
    let cases = [
        (
            json!({"alertname": "A", "node": "n1"}),
            "no blocklist_kind label",
        ),
        (
            json!({"alertname": "A", "blocklist_kind": "rack", "node": "n1"}),
            "must be node or taskmanager",
        ),
        (
            json!({"alertname": "A", "blocklist_kind": "node", "instance": "n1:9100"}),
            "no label \"node\"",
        ),
        (
            json!({"alertname": "A", "blocklist_kind": "node", "node": "n\u{1}"}),
            "control character",
        ),
        (
            json!({"alertname": "A", "blocklist_kind": "node", "node": "n1", "blocklist_action": "kill"}),
            "blocklist_action is \"kill\"",
        ),
        (
            json!({"alertname": "A", "blocklist_kind": "node", "node": "n1", "blocklist_duration": "soon"}),
            "is not a duration",
        ),
        (
            json!({"alertname": "A", "blocklist_kind": "node", "node": "n1", "blocklist_on_resolve": "keep"}),
            "no blocklist_duration",
        ),
        (
            json!({"alertname": "A", "blocklist_kind": "node", "node": "n1", "blocklist_duration": "1s"}),
            "has passed",
        ),
    ];
    for (labels, why) in cases {
        match decide(&alert("firing", labels.clone()), "am", NOW) {
            Decision::Ignored(reason) => assert!(reason.contains(why), "{labels}: {reason}"),
            other => panic!("{labels}: {other:?}"),
        }
    }
    let mut odd = node_alert("firing");
    odd.status = "pending".into();
    assert!(matches!(decide(&odd, "am", NOW), Decision::Ignored(r) if r.contains("\"pending\"")));
    let mut late = node_alert("firing");
    late.starts_at = "yesterday".into();
    assert!(matches!(decide(&late, "am", NOW), Decision::Ignored(r) if r.contains("RFC 3339")));
}

#[test]
fn a_source_stays_within_its_limit_and_unique() {
    let long = "A".repeat(300);
    let s = source("alertmanager", &long, "6d2a1c0e4f3b8a91");
    assert_eq!(s.len(), MAX_SOURCE_BYTES);
    assert!(
        s.starts_with("alertmanager/AAA") && s.ends_with("/6d2a1c0e4f3b8a91"),
        "{s}"
    );
    let s = source("am", "Ünïcödé".repeat(40).as_str(), "f");
    assert!(s.len() <= MAX_SOURCE_BYTES && s.ends_with("/f"), "{s}");
}

#[test]
fn the_payload_reads_version_4_and_leaves_unknown_fields_alone() {
    let payload: Payload = serde_json::from_value(json!({
        "version": "4", "groupKey": "{}:{}", "status": "firing", "receiver": "blocklist",
        "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
        "externalURL": "http://am", "truncatedAlerts": 0, "someFutureField": true,
        "alerts": [{"status": "firing", "labels": {"alertname": "A"}, "annotations": {},
            "startsAt": "2027-01-15T08:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "", "fingerprint": "f"}],
    }))
    .unwrap();
    assert_eq!(payload.version, VERSION);
    assert_eq!(payload.alerts[0].name(), "A");
}

#[test]
fn hostile_alerts_make_bounded_reports_of_visible_text() {
    let mut a = node_alert("firing");
    a.fingerprint = format!("f\u{1}{}", "x".repeat(10_000));
    a.starts_at = "2027-01-15T08:00:00.5Z".into();
    a.generator_url = "u".repeat(100_000);
    a.labels
        .insert("alertname".into(), format!("A\u{7}{}", "n".repeat(10_000)));
    let Decision::Signal(Signal::Report(_, item)) = decide(&a, "am", NOW) else {
        panic!("not a report")
    };
    assert!(
        crate::model::validate_source(&item.source).is_ok(),
        "{}",
        item.source
    );
    assert!(crate::model::validate_details(&item.details).is_ok());
    assert!(!item.cause.chars().any(char::is_control));
    assert!(item.cause.len() <= MAX_CAUSE_BYTES);
}
