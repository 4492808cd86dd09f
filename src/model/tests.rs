use super::*;

fn block(action: Action, end: i64, cause: &str) -> Block {
    Block {
        action,
        start: 100,
        end,
        cause: cause.into(),
        forced: None,
        provenance: Provenance::first(UNKNOWN_SOURCE, 100),
        revision: 0,
        escalated: None,
    }
}

#[test]
fn merge_takes_stronger_action_later_end_and_keeps_start() {
    let mut b = block(Action::MarkBlockedAndEvacuateTasks, 5_000, "a");
    b.merge(Action::MarkBlocked, 9_000, "b");
    assert_eq!(b.action, Action::MarkBlockedAndEvacuateTasks);
    assert_eq!(b.end, 9_000);
    assert_eq!(b.start, 100);
    assert_eq!(b.cause, "a,b");

    let mut b = block(Action::MarkBlocked, 9_000, "a");
    b.merge(Action::MarkBlockedAndEvacuateTasks, 5_000, "a");
    assert_eq!(b.action, Action::MarkBlockedAndEvacuateTasks);
    assert_eq!(b.end, 9_000);
    assert_eq!(b.cause, "a");
}

#[test]
fn permanent_wins_a_merge_either_way() {
    let mut b = block(Action::MarkBlocked, PERMANENT, "a");
    b.merge(Action::MarkBlocked, 9_000, "a");
    assert!(b.is_permanent());
    let mut b = block(Action::MarkBlocked, 9_000, "a");
    b.merge(Action::MarkBlocked, PERMANENT, "a");
    assert!(b.is_permanent());
}

#[test]
fn repeated_causes_are_not_repeated() {
    let mut b = block(Action::MarkBlocked, 1, "disk");
    for _ in 0..100 {
        b.merge(Action::MarkBlocked, 1, "disk");
        b.merge(Action::MarkBlocked, 1, "net");
    }
    assert_eq!(b.cause, "disk,net");
}

#[test]
fn causes_with_separators_merge_part_by_part() {
    assert_eq!(merge_causes("a,b", "b,c"), "a,b,c");
    assert_eq!(merge_causes("", "x,,y"), "x,y");
    assert_eq!(merge_causes("a", ""), "a");
}

#[test]
fn merged_cause_is_bounded() {
    let mut cause = String::new();
    for i in 0..10_000 {
        cause = merge_causes(&cause, &format!("cause-{i:05}"));
    }
    assert!(cause.len() <= MAX_MERGED_CAUSE_BYTES);
    assert!(cause.starts_with("cause-00000,cause-00001"));
}

#[test]
fn action_strength_order() {
    assert!(Action::MarkBlocked < Action::MarkBlockedAndEvacuateTasks);
    for a in Action::ALL {
        assert_eq!(Action::parse(a.as_str()), Some(a));
    }
    assert_eq!(Action::parse("mark_blocked"), None);
}

mod algebra {
    use super::*;
    use proptest::prelude::*;

    fn report() -> impl Strategy<Value = (Action, i64, String)> {
        (
            prop_oneof![
                Just(Action::MarkBlocked),
                Just(Action::MarkBlockedAndEvacuateTasks)
            ],
            prop_oneof![1i64..1_000_000, Just(PERMANENT)],
            "[a-d]{1,2}(,[a-d]{1,2}){0,2}",
        )
    }

    fn fold(reports: &[(Action, i64, String)]) -> Block {
        let (action, end, cause) = &reports[0];
        let mut block = Block {
            action: *action,
            start: 7,
            end: *end,
            cause: merge_causes("", cause),
            forced: None,
            provenance: Provenance::first(UNKNOWN_SOURCE, 7),
            revision: 0,
            escalated: None,
        };
        for (action, end, cause) in &reports[1..] {
            block.merge(*action, *end, cause);
        }
        block
    }

    proptest! {
        /// Action and end do not depend on the order reports arrive in; start never moves.
        #[test]
        fn action_and_end_are_order_independent(
            reports in prop::collection::vec(report(), 1..8),
            seed in any::<u64>(),
        ) {
            let mut shuffled = reports.clone();
            let n = shuffled.len();
            for i in (1..n).rev() {
                shuffled.swap(i, (seed.rotate_left(i as u32) % (i as u64 + 1)) as usize);
            }
            let (a, b) = (fold(&reports), fold(&shuffled));
            prop_assert_eq!(a.action, b.action);
            prop_assert_eq!(a.end, b.end);
            prop_assert_eq!(a.start, 7);
            prop_assert_eq!(a.action, reports.iter().map(|r| r.0).max().unwrap());
            prop_assert_eq!(a.end, reports.iter().map(|r| r.1).max().unwrap());
        }

        /// Merging the same report again changes nothing.
        #[test]
        fn merging_is_idempotent(reports in prop::collection::vec(report(), 1..6), again in 0usize..6) {
            let once = fold(&reports);
            let mut twice = once.clone();
            let (action, end, cause) = &reports[again % reports.len()];
            twice.merge(*action, *end, cause);
            prop_assert_eq!(once, twice);
        }

        /// Causes are the set of reported parts, in order of first arrival.
        #[test]
        fn causes_are_a_set_in_arrival_order(reports in prop::collection::vec(report(), 1..8)) {
            let block = fold(&reports);
            let mut expected: Vec<&str> = Vec::new();
            for (_, _, cause) in &reports {
                for part in cause.split(',') {
                    if !expected.contains(&part) {
                        expected.push(part);
                    }
                }
            }
            prop_assert_eq!(block.cause, expected.join(","));
        }
    }
}

#[test]
fn id_rules() {
    assert!(validate_id("tm-1").is_ok());
    assert!(validate_id("a/b c%20ü🦀").is_ok());
    assert!(validate_id(&"x".repeat(MAX_ID_BYTES)).is_ok());
    assert!(validate_id(&"x".repeat(MAX_ID_BYTES + 1)).is_err());
    // 128 two-byte characters are 256 bytes; one more is over.
    assert!(validate_id(&"ü".repeat(128)).is_ok());
    assert!(validate_id(&"ü".repeat(129)).is_err());
    assert!(validate_id("").is_err());
    assert!(validate_id("a\nb").is_err());
    assert!(validate_id("a\u{7f}").is_err());
    assert!(validate_id("a\u{0}").is_err());
}

/// The ranges `NO_CONTROL_CHARACTERS` excludes are exactly the characters the id rule
/// refuses (the regular expression's own meaning is checked against a JSON Schema
/// validator in `tests/contract.rs`).
#[test]
fn the_documented_character_ranges_are_the_control_characters() {
    assert_eq!(NO_CONTROL_CHARACTERS, r"^[^\u0000-\u001f\u007f-\u009f]*$");
    let documented = |c: char| matches!(u32::from(c), 0..=0x1f | 0x7f..=0x9f);
    for c in (0..=0x10_ffff).filter_map(char::from_u32) {
        assert_eq!(
            validate_id(&format!("a{c}")).is_err(),
            documented(c),
            "U+{:04X}",
            u32::from(c)
        );
    }
}
