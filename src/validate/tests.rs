use super::*;
use serde_json::json;

const NOW: i64 = 1_700_000_000_000;

#[expect(
    clippy::needless_pass_by_value,
    reason = "the tests pass `json!` literals"
)]
fn parse(body: Value) -> Result<Vec<NewItem>, Invalid> {
    add_batch(&body, NOW, 100)
}

fn errors(body: Value) -> Vec<String> {
    match parse(body) {
        Err(Invalid::BadRequest(errors)) => errors,
        other => panic!("expected a 400, got {other:?}"),
    }
}

#[test]
fn a_cause_of_separators_only_is_empty() {
    for cause in [",", ",,,"] {
        let errors = errors(json!([{"id": "x", "action": "MARK_BLOCKED", "cause": cause}]));
        assert!(
            errors[0].contains(".cause: must not be empty"),
            "{errors:?}"
        );
    }
    // A stray separator next to text is fine: the set of causes is {"oom"}.
    parse(json!([{"id": "x", "action": "MARK_BLOCKED", "cause": "oom,"}])).unwrap();
}

#[test]
fn whole_numbers_written_as_doubles_are_taken_exactly() {
    let item = |timeout: Value| json!([{"id": "x", "action": "MARK_BLOCKED", "cause": "c", "timeout": timeout}]);
    let end = |v: Value| parse(item(v)).unwrap()[0].end;
    assert_eq!(end(json!(3_600_000.0)), NOW + 3_600_000);
    assert_eq!(end(json!(1e3)), NOW + 1_000);
    assert!(errors(item(json!(1.5)))[0].contains("whole number"));
    assert!(errors(item(json!(1e17)))[0].contains("too large to be exact"));
    assert!(errors(item(json!(1e300)))[0].contains("out of range"));
    assert!(errors(item(json!(-2.0)))[0].contains("must be a positive"));
}

#[test]
fn minimal_item_is_permanent_without_merge() {
    let items = parse(json!([{"id": "tm-1", "action": "MARK_BLOCKED", "cause": "c"}])).unwrap();
    assert_eq!(
        items,
        vec![NewItem {
            id: "tm-1".into(),
            action: Action::MarkBlocked,
            end: PERMANENT,
            cause: "c".into(),
            allow_merge: false,
            source: "unknown".into(),
            timeout: None,
            details: crate::model::Details::new(),
        }]
    );
}

#[test]
fn object_form_strings_for_numbers_and_booleans() {
    let items = parse(json!({"items": [
        {"id": "a", "action": "MARK_BLOCKED_AND_EVACUATE_TASKS", "cause": "c",
         "timeout": "3600000", "allowMerge": "true"},
        {"id": "b", "action": "MARK_BLOCKED", "cause": "c",
         "endTimestamp": NOW + 5, "mergeOnConflict": true},
        {"id": "c", "action": "MARK_BLOCKED", "cause": "c", "timeout": null},
    ]}))
    .unwrap();
    assert_eq!(items[0].end, NOW + 3_600_000);
    assert!(items[0].allow_merge);
    assert_eq!(items[1].end, NOW + 5);
    assert!(items[1].allow_merge);
    assert_eq!(items[2].end, PERMANENT);
}

#[test]
fn unknown_field_is_named_with_index_and_id() {
    let errs = errors(json!([
        {"id": "ok", "action": "MARK_BLOCKED", "cause": "c"},
        {"id": "tm-2", "action": "MARK_BLOCKED", "cause": "c", "endTimeStamp": NOW + 1000},
    ]));
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(errs[0].starts_with("items[1] (id \"tm-2\").endTimeStamp: unknown field"));
}

#[test]
fn every_bad_element_is_reported() {
    let errs = errors(json!([
        {"action": "MARK_BLOCKED", "cause": "c"},
        {"id": "x", "action": "BLOCK", "cause": 5},
        {"id": "y", "action": "MARK_BLOCKED", "cause": "c", "timeout": 5, "endTimestamp": NOW + 9},
        {"id": "z", "action": "MARK_BLOCKED", "cause": "c", "timeout": 0},
        {"id": "w", "action": "MARK_BLOCKED", "cause": "c", "timeout": i64::MAX},
        {"id": "v", "action": "MARK_BLOCKED", "cause": "c", "endTimestamp": NOW},
        {"id": "", "action": "MARK_BLOCKED", "cause": "c"},
        {"id": "u", "action": "MARK_BLOCKED", "cause": "x".repeat(1025)},
        {"id": "t", "action": "MARK_BLOCKED", "cause": "c", "timeout": 1.5},
        {"id": "s", "action": "MARK_BLOCKED", "cause": "c", "timeout": 1e30},
        {"id": "r", "action": "MARK_BLOCKED", "cause": "c", "allowMerge": "yes"},
        "not an object",
    ]));
    let expect = [
        "items[0].id: required field is missing",
        "items[1] (id \"x\").action: unknown action",
        "items[1] (id \"x\").cause: must be a string, got a number",
        "items[2] (id \"y\").timeout/.endTimestamp: give at most one",
        "items[3] (id \"z\").timeout: must be a positive",
        "items[4] (id \"w\").timeout: 9223372036854775807 ms is over the limit of 1000000000000000000 ms",
        "items[5] (id \"v\").endTimestamp: must be in the future",
        "items[6] (id \"\").id: must not be empty",
        "items[7] (id \"u\").cause: is 1025 bytes long",
        "items[8] (id \"t\").timeout: must be a whole number",
        "items[9] (id \"s\").timeout: 1e+30 is out of range",
        "items[10] (id \"r\").allowMerge: must be true or false",
        "items[11]: must be an object, got a string",
    ];
    assert_eq!(errs.len(), expect.len(), "{errs:#?}");
    for (got, want) in errs.iter().zip(expect) {
        assert!(got.starts_with(want), "{got:?} should start with {want:?}");
    }
}

#[test]
fn batch_shape_errors() {
    assert!(errors(json!([]))[0].contains("empty"));
    assert!(errors(json!({"items": []}))[0].contains("empty"));
    assert!(errors(json!({"item": []}))[0].contains("unknown field \"item\""));
    assert!(errors(json!({}))[0].contains("items: required"));
    assert!(errors(json!("x"))[0].contains("got a string"));
    let big: Vec<Value> = (0..101)
        .map(|i| json!({"id": format!("{i}"), "action": "MARK_BLOCKED", "cause": "c"}))
        .collect();
    assert!(matches!(
        parse(Value::Array(big)),
        Err(Invalid::TooLarge(_))
    ));
}

#[test]
fn registrations_parse_and_name_errors() {
    assert_eq!(registration(&json!({"node": "n1"})), Ok("n1".to_owned()));
    let Err(Invalid::BadRequest(errs)) = registration(&json!({"node": "", "nod": 1})) else {
        panic!("expected a 400");
    };
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(errs.iter().any(|e| e.starts_with("nod: unknown field")));
    assert!(errs
        .iter()
        .any(|e| e.starts_with("node: must not be empty")));

    let pairs = registrations(
        &json!([{"id": "t1", "node": "n1"}, {"id": "t2", "node": "n1"}]),
        10,
    );
    assert_eq!(pairs.unwrap().len(), 2);
    let Err(Invalid::BadRequest(errs)) =
        registrations(&json!([{"id": "t1", "node": "n1"}, {"id": "t2"}, 5]), 10)
    else {
        panic!("expected a 400");
    };
    assert_eq!(
        errs,
        [
            "items[1] (id \"t2\").node: required field is missing",
            "items[2]: must be an object, got a number",
        ]
    );
}

#[test]
fn check_requests() {
    let req = check_request(&json!({"taskManagers": ["a", "b"], "nodes": ["n"]}), 3).unwrap();
    assert_eq!(req.task_managers, ["a", "b"]);
    assert_eq!(req.nodes, ["n"]);
    assert_eq!(check_request(&json!({}), 3), Ok(CheckRequest::default()));
    assert!(matches!(
        check_request(&json!({"taskManagers": ["a", "b"], "nodes": ["n", "m"]}), 3),
        Err(Invalid::TooLarge(_))
    ));
    let Err(Invalid::BadRequest(errs)) =
        check_request(&json!({"taskManagers": ["ok", 1, ""], "node": []}), 10)
    else {
        panic!("expected a 400");
    };
    assert_eq!(errs.len(), 3, "{errs:?}");
}

#[test]
fn end_timestamp_may_be_permanent_explicitly() {
    let items = parse(json!([{"id": "a", "action": "MARK_BLOCKED", "cause": "c",
        "endTimestamp": "9223372036854775807"}]))
    .unwrap();
    assert_eq!(items[0].end, PERMANENT);
}
