//! Property-driven fuzzing of request parsing and validation: arbitrary JSON (and arbitrary
//! bytes) never panic the validators, and whatever they accept satisfies the contract.
//!
//! More cases: `PROPTEST_CASES=200000 cargo test --release --test fuzz` (see docs/operations.md).

use blocklistd::model::{validate_id, MAX_CAUSE_BYTES, PERMANENT};
use blocklistd::validate::{add_batch, check_request, registration, registrations, Invalid};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

const NOW: i64 = 1_800_000_000_000;

/// Arbitrary JSON, biased towards the shapes the API expects (objects with its field names).
fn json_value() -> impl Strategy<Value = Value> {
    let field = prop_oneof![
        Just("id".to_owned()),
        Just("action".to_owned()),
        Just("cause".to_owned()),
        Just("timeout".to_owned()),
        Just("endTimestamp".to_owned()),
        Just("allowMerge".to_owned()),
        Just("mergeOnConflict".to_owned()),
        Just("mergeOnConflictallowMerge".to_owned()),
        Just("node".to_owned()),
        Just("items".to_owned()),
        Just("taskManagers".to_owned()),
        Just("nodes".to_owned()),
        "\\PC{0,8}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        prop_oneof![
            Just("MARK_BLOCKED".to_owned()),
            Just("MARK_BLOCKED_AND_EVACUATE_TASKS".to_owned()),
            Just("true".to_owned()),
            Just("3600000".to_owned()),
            Just("-1".to_owned()),
            "\\PC{0,12}",
            "[\\x00-\\x1f]{1,3}",
            ".{250,260}",
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((field.clone(), inner), 0..8)
                .prop_map(|fields| Value::Object(fields.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

proptest! {
    // 2,000 cases per property in the normal run; PROPTEST_CASES sets more for a long run.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000),
        ..ProptestConfig::default()
    })]

    #[test]
    fn add_validation_never_panics_and_accepts_only_valid_items(body in json_value()) {
        match add_batch(&body, NOW, 100) {
            Ok(items) => {
                prop_assert!(!items.is_empty() && items.len() <= 100);
                for item in items {
                    prop_assert!(validate_id(&item.id).is_ok());
                    prop_assert!(item.end > NOW || item.end == PERMANENT);
                    prop_assert!(!item.cause.is_empty() && item.cause.len() <= MAX_CAUSE_BYTES);
                }
            }
            Err(Invalid::BadRequest(errors)) => prop_assert!(!errors.is_empty()),
            Err(Invalid::TooLarge(message)) => prop_assert!(!message.is_empty()),
        }
    }

    #[test]
    fn other_validators_never_panic(body in json_value()) {
        if let Ok(node) = registration(&body) {
            prop_assert!(validate_id(&node).is_ok());
        }
        if let Ok(pairs) = registrations(&body, 100) {
            for (tm, node) in pairs {
                prop_assert!(validate_id(&tm).is_ok() && validate_id(&node).is_ok());
            }
        }
        if let Ok(req) = check_request(&body, 100) {
            prop_assert!(req.task_managers.len() + req.nodes.len() <= 100);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_parser(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        if let Ok(body) = serde_json::from_slice::<Value>(&bytes) {
            let _ = add_batch(&body, NOW, 100);
        }
    }

    /// Valid items survive validation exactly.
    #[test]
    fn valid_items_are_accepted_as_given(
        id in "[a-zA-Z0-9/ ü%._-]{1,64}",
        timeout in 1i64..1_000_000_000,
        evacuate in any::<bool>(),
        merge in any::<bool>(),
    ) {
        let action = if evacuate { "MARK_BLOCKED_AND_EVACUATE_TASKS" } else { "MARK_BLOCKED" };
        let body = json!([{"id": id, "action": action, "cause": "c", "timeout": timeout, "allowMerge": merge}]);
        let items = add_batch(&body, NOW, 100).unwrap();
        prop_assert_eq!(items.len(), 1);
        prop_assert_eq!(&items[0].id, &id);
        prop_assert_eq!(items[0].end, NOW + timeout);
        prop_assert_eq!(items[0].allow_merge, merge);
    }
}
