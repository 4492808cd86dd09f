//! Every class of bad add request gets the right 4xx, an `errors` list naming the field and
//! element, and leaves the store exactly as it was.

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

const JSON: &str = "application/json";

fn ok(id: &str) -> Value {
    item(id, "MARK_BLOCKED", "c")
}

fn with(id: &str, field: &str, value: Value) -> Value {
    let mut v = ok(id);
    v[field] = value;
    v
}

#[tokio::test]
async fn bad_add_requests_are_refused_with_named_errors_and_change_nothing() {
    let mut ws = Workspace::new();
    let d = ws.start(&["--max-body-bytes", "65536", "--max-batch", "100"]);
    let mut existing = ok("existing");
    existing["timeout"] = json!(3_600_000);
    assert_eq!(
        d.post("/blocklist/nodes", json!([existing, ok("perm")]))
            .await
            .0,
        StatusCode::CREATED
    );
    assert_eq!(
        d.post("/blocklist/taskmanagers", json!([ok("tm")])).await.0,
        StatusCode::CREATED
    );
    let before = d.listing().await;
    let now = now_ms();

    let without = |field: &str| {
        let mut v = ok("x");
        v.as_object_mut().unwrap().remove(field);
        v
    };
    let big_batch: Vec<Value> = (0..101).map(|i| ok(&format!("b{i}"))).collect();
    let cases: Vec<(&str, Vec<u8>, &str, StatusCode, &str)> = vec![
        ("malformed JSON", b"[{\"id\": ".to_vec(), JSON, StatusCode::BAD_REQUEST, "not valid JSON"),
        ("trailing garbage", b"[] x".to_vec(), JSON, StatusCode::BAD_REQUEST, "not valid JSON"),
        ("invalid UTF-8", b"[{\"id\": \"\xff\xfe\"}]".to_vec(), JSON, StatusCode::BAD_REQUEST, "not valid JSON"),
        ("not an array", br#""hello""#.to_vec(), JSON, StatusCode::BAD_REQUEST, "must be a JSON array"),
        ("empty batch", b"[]".to_vec(), JSON, StatusCode::BAD_REQUEST, "empty"),
        ("element not an object", b"[1]".to_vec(), JSON, StatusCode::BAD_REQUEST, "items[0]: must be an object"),
        ("missing id", body(json!([ok("a"), without("id")])), JSON, StatusCode::BAD_REQUEST, "items[1].id: required"),
        ("missing action", body(json!([without("action")])), JSON, StatusCode::BAD_REQUEST, "items[0] (id \"x\").action: required"),
        ("missing cause", body(json!([without("cause")])), JSON, StatusCode::BAD_REQUEST, ".cause: required"),
        ("id wrong type", body(json!([with("x", "id", json!(7))])), JSON, StatusCode::BAD_REQUEST, ".id: must be a string"),
        ("unknown action", body(json!([with("x", "action", json!("BLOCK"))])), JSON, StatusCode::BAD_REQUEST, ".action: unknown action \"BLOCK\""),
        ("cause wrong type", body(json!([with("x", "cause", json!(["a"]))])), JSON, StatusCode::BAD_REQUEST, ".cause: must be a string"),
        ("unknown field typo", body(json!([with("x", "endTimeStamp", json!(now + 60_000))])), JSON, StatusCode::BAD_REQUEST, ".endTimeStamp: unknown field"),
        ("both timeout and end", body(json!([{"id": "x", "action": "MARK_BLOCKED", "cause": "c", "timeout": 5, "endTimestamp": now + 60_000}])), JSON, StatusCode::BAD_REQUEST, "at most one"),
        ("zero timeout", body(json!([with("x", "timeout", json!(0))])), JSON, StatusCode::BAD_REQUEST, ".timeout: must be a positive"),
        ("negative timeout", body(json!([with("x", "timeout", json!(-5))])), JSON, StatusCode::BAD_REQUEST, ".timeout: must be a positive"),
        ("timeout over 10^18 ms", body(json!([with("x", "timeout", json!(i64::MAX - 1))])), JSON, StatusCode::BAD_REQUEST, "over the limit"),
        ("timeout beyond i64", b"[{\"id\":\"x\",\"action\":\"MARK_BLOCKED\",\"cause\":\"c\",\"timeout\":99999999999999999999}]".to_vec(), JSON, StatusCode::BAD_REQUEST, "out of range"),
        ("fractional timeout", body(json!([with("x", "timeout", json!(1.5))])), JSON, StatusCode::BAD_REQUEST, "whole number"),
        ("timeout not a number", body(json!([with("x", "timeout", json!("soon"))])), JSON, StatusCode::BAD_REQUEST, ".timeout: must be an integer"),
        ("end in the past", body(json!([with("x", "endTimestamp", json!(now - 1))])), JSON, StatusCode::BAD_REQUEST, ".endTimestamp: must be in the future"),
        ("allowMerge wrong type", body(json!([with("x", "allowMerge", json!(1))])), JSON, StatusCode::BAD_REQUEST, ".allowMerge: must be true or false"),
        ("empty id", body(json!([ok("")])), JSON, StatusCode::BAD_REQUEST, ".id: must not be empty"),
        ("id too long", body(json!([ok(&"x".repeat(257))])), JSON, StatusCode::BAD_REQUEST, ".id: is 257 bytes"),
        ("control character in id", body(json!([ok("a\u{1}b")])), JSON, StatusCode::BAD_REQUEST, ".id: contains the control character U+0001"),
        ("newline in id", body(json!([ok("a\nb")])), JSON, StatusCode::BAD_REQUEST, "U+000A"),
        ("cause over 1 KiB", body(json!([with("x", "cause", json!("c".repeat(1025)))])), JSON, StatusCode::BAD_REQUEST, ".cause: is 1025 bytes"),
        ("empty cause", body(json!([with("x", "cause", json!(""))])), JSON, StatusCode::BAD_REQUEST, ".cause: must not be empty"),
        ("cause of separators only", body(json!([with("x", "cause", json!(",,"))])), JSON, StatusCode::BAD_REQUEST, ".cause: must not be empty"),
        ("a repeated key", br#"[{"id":"x","action":"MARK_BLOCKED","cause":"c","endTimestamp":4102444800000,"endTimestamp":null}]"#.to_vec(), JSON, StatusCode::BAD_REQUEST, "the key \"endTimestamp\" appears twice"),
        ("bad element after good ones", body(json!([ok("g1"), ok("g2"), with("g3", "timeout", json!(-1))])), JSON, StatusCode::BAD_REQUEST, "items[2] (id \"g3\").timeout"),
        ("unknown top-level field", body(json!({"items": [ok("x")], "dryRun": true})), JSON, StatusCode::BAD_REQUEST, "unknown field \"dryRun\""),
        ("deep nesting", format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)).into_bytes(), JSON, StatusCode::BAD_REQUEST, "not valid JSON"),
        ("batch over the limit", body(Value::Array(big_batch)), JSON, StatusCode::PAYLOAD_TOO_LARGE, "101 items; the limit is 100"),
        ("body over the limit", body(json!([with("x", "cause", json!("c".repeat(70_000)))])), JSON, StatusCode::PAYLOAD_TOO_LARGE, "size limit"),
        ("text content type", body(json!([ok("x")])), "text/plain", StatusCode::UNSUPPORTED_MEDIA_TYPE, "Content-Type: application/json"),
        ("form content type", b"id=x".to_vec(), "application/x-www-form-urlencoded", StatusCode::UNSUPPORTED_MEDIA_TYPE, "must be JSON"),
    ];
    for (what, bytes, content_type, status, needle) in cases {
        for kind in ["taskmanagers", "nodes"] {
            let (got, body) = d
                .post_raw(&format!("/blocklist/{kind}"), content_type, bytes.clone())
                .await;
            assert_eq!(got, status, "{what} on {kind}: {body}");
            let errors = body["errors"]
                .as_array()
                .unwrap_or_else(|| panic!("{what}: no errors list in {body}"));
            assert!(
                errors
                    .iter()
                    .any(|e| e.as_str().is_some_and(|e| e.contains(needle))),
                "{what}: no error contains {needle:?}: {errors:?}"
            );
        }
    }
    assert_eq!(d.listing().await, before, "bad requests changed the store");
}

#[tokio::test]
async fn bad_ids_in_paths_are_400_and_change_nothing() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    d.post("/blocklist/nodes", json!([ok("n")])).await;
    let before = d.listing().await;
    let long = "x".repeat(257);
    for path in [
        "/blocklist/nodes/a%01b",
        "/blocklist/nodes/a%0Ab",
        "/blocklist/nodes/%FF%FE",
    ]
    .into_iter()
    .map(String::from)
    .chain([format!("/blocklist/nodes/{long}")])
    {
        for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
            let (status, body) = d.call(method.clone(), &path, None).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {path}: {body}");
            assert!(
                body["errors"][0]
                    .as_str()
                    .unwrap()
                    .contains("id in the path"),
                "{body}"
            );
        }
    }
    assert_eq!(d.listing().await, before);
}

#[expect(
    clippy::needless_pass_by_value,
    reason = "the tests pass `json!` literals"
)]
fn body(v: Value) -> Vec<u8> {
    serde_json::to_vec(&v).unwrap()
}

/// Everything a client can observe of the store: both listings, the registrations and the
/// revision (which any write would move).
async fn snapshot(d: &Daemon) -> Value {
    json!({
        "blocklist": d.listing().await,
        "registrations": d.get("/taskmanagers").await.1,
    })
}

#[tokio::test]
async fn bad_requests_on_every_other_endpoint_are_refused_and_change_nothing() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    d.post("/blocklist/nodes", json!([ok("n1")])).await;
    d.call(
        reqwest::Method::PUT,
        "/taskmanagers/tm-1",
        Some(json!({"node": "n1"})),
    )
    .await;
    let before = snapshot(&d).await;

    let ten_mb = vec![b' '; 10 * 1024 * 1024];
    let huge_batch = body(Value::Array(
        (0..100_000).map(|i| ok(&format!("x{i}"))).collect(),
    ));
    use reqwest::Method as M;
    /// Method, path, content type, body, expected status, a phrase the errors must hold.
    type Case<'a> = (M, &'a str, &'a str, Vec<u8>, StatusCode, &'a str);
    let cases: Vec<Case> = vec![
        (
            M::PUT,
            "/taskmanagers/tm-2",
            JSON,
            b"{\"node\":".to_vec(),
            StatusCode::BAD_REQUEST,
            "not valid JSON",
        ),
        (
            M::PUT,
            "/taskmanagers/tm-2",
            JSON,
            body(json!({"node": 1})),
            StatusCode::BAD_REQUEST,
            "node: must be a string",
        ),
        (
            M::PUT,
            "/taskmanagers/tm-2",
            JSON,
            body(json!({"node": "n", "extra": 1})),
            StatusCode::BAD_REQUEST,
            "extra: unknown field",
        ),
        (
            M::PUT,
            "/taskmanagers/tm-2",
            JSON,
            body(json!({"node": "a\tb"})),
            StatusCode::BAD_REQUEST,
            "control character",
        ),
        (
            M::PUT,
            "/taskmanagers/tm-2",
            "text/plain",
            body(json!({"node": "n"})),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "application/json",
        ),
        (
            M::PUT,
            "/taskmanagers/tm-2",
            JSON,
            ten_mb.clone(),
            StatusCode::PAYLOAD_TOO_LARGE,
            "size limit",
        ),
        (
            M::PUT,
            "/taskmanagers/%00",
            JSON,
            body(json!({"node": "n"})),
            StatusCode::BAD_REQUEST,
            "id in the path",
        ),
        (
            M::PUT,
            "/taskmanagers",
            JSON,
            body(json!([{"id": "a", "node": "n"}, {"id": "b", "node": 2}])),
            StatusCode::BAD_REQUEST,
            "items[1] (id \"b\").node",
        ),
        (
            M::PUT,
            "/taskmanagers",
            JSON,
            body(json!({"items": {}})),
            StatusCode::BAD_REQUEST,
            "items: must be an array",
        ),
        (
            M::POST,
            "/blocklist/check",
            JSON,
            body(json!({"taskManagers": "tm-1"})),
            StatusCode::BAD_REQUEST,
            "taskManagers: must be an array",
        ),
        (
            M::POST,
            "/blocklist/check",
            JSON,
            body(json!({"taskManagers": [null]})),
            StatusCode::BAD_REQUEST,
            "taskManagers[0]: must be a string",
        ),
        (
            M::POST,
            "/blocklist/check",
            JSON,
            body(json!([])),
            StatusCode::BAD_REQUEST,
            "must be an object",
        ),
        (
            M::POST,
            "/blocklist/check",
            "application/xml",
            b"<x/>".to_vec(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "must be JSON",
        ),
        (
            M::POST,
            "/blocklist/nodes",
            JSON,
            ten_mb,
            StatusCode::PAYLOAD_TOO_LARGE,
            "size limit",
        ),
        (
            M::POST,
            "/blocklist/nodes",
            JSON,
            huge_batch,
            StatusCode::PAYLOAD_TOO_LARGE,
            "size limit",
        ),
        (
            M::POST,
            "/blocklist/nodes",
            JSON,
            b"\xef\xbb\xbf[]".to_vec(),
            StatusCode::BAD_REQUEST,
            "not valid JSON",
        ),
        (
            M::POST,
            "/blocklist/nodes",
            JSON,
            br#"[{"id":"a","action":"MARK_BLOCKED","cause":"c","id":"b"}]"#.to_vec(),
            StatusCode::BAD_REQUEST,
            "the key \"id\" appears twice in one object",
        ),
        (
            M::GET,
            "/blocklist/events?since=1e3",
            "",
            vec![],
            StatusCode::BAD_REQUEST,
            "since: must be a revision",
        ),
        (
            M::GET,
            "/blocklist/events?since=0&since=1",
            "",
            vec![],
            StatusCode::BAD_REQUEST,
            "since: given more than once",
        ),
        (
            M::GET,
            "/blocklist/events?since=99999999999999999999999",
            "",
            vec![],
            StatusCode::BAD_REQUEST,
            "since",
        ),
        (
            M::GET,
            "/blocklist/nodes/..%2F..%2Fetc%2Fpasswd",
            "",
            vec![],
            StatusCode::NOT_FOUND,
            "is not blocked",
        ),
        (
            M::GET,
            "/blocklist/nodes/n1/extra",
            "",
            vec![],
            StatusCode::NOT_FOUND,
            "no such endpoint",
        ),
        (
            M::GET,
            "/blocklist/check/taskmanagers/%0A",
            "",
            vec![],
            StatusCode::BAD_REQUEST,
            "id in the path",
        ),
        (
            M::PATCH,
            "/blocklist/nodes",
            JSON,
            body(json!([ok("x")])),
            StatusCode::METHOD_NOT_ALLOWED,
            "PATCH is not allowed",
        ),
        (
            M::DELETE,
            "/blocklist",
            "",
            vec![],
            StatusCode::METHOD_NOT_ALLOWED,
            "DELETE is not allowed",
        ),
        (
            M::POST,
            "/taskmanagers/tm-1",
            JSON,
            body(json!({"node": "n"})),
            StatusCode::METHOD_NOT_ALLOWED,
            "POST is not allowed",
        ),
        (
            M::PUT,
            "/blocklist/nodes/n1",
            JSON,
            body(json!(ok("n1"))),
            StatusCode::METHOD_NOT_ALLOWED,
            "PUT is not allowed",
        ),
        (
            M::DELETE,
            "/taskmanagers",
            "",
            vec![],
            StatusCode::METHOD_NOT_ALLOWED,
            "DELETE is not allowed",
        ),
        (
            M::POST,
            "/blocklist/events",
            JSON,
            b"{}".to_vec(),
            StatusCode::METHOD_NOT_ALLOWED,
            "POST is not allowed",
        ),
    ];
    for (method, path, content_type, bytes, status, needle) in cases {
        let addr = d.addr;
        let m = method.to_string();
        let p = path.to_owned();
        let ct = content_type.to_owned();
        let (got, body) =
            tokio::task::spawn_blocking(move || raw_request(addr, &m, &p, &ct, &bytes))
                .await
                .unwrap();
        assert_eq!(got, status, "{method} {path}: {body}");
        let errors = body["errors"]
            .as_array()
            .unwrap_or_else(|| panic!("{method} {path}: no errors in {body}"));
        assert!(
            errors
                .iter()
                .any(|e| e.as_str().is_some_and(|e| e.contains(needle))),
            "{method} {path}: no error contains {needle:?}: {errors:?}"
        );
    }
    assert_eq!(snapshot(&d).await, before, "bad requests changed the store");
}
