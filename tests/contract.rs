//! The `OpenAPI` document is exactly as strict as the server: for every request here, the
//! schema the document gives for it accepts it if and only if the daemon does (answers
//! anything but 400). A client generated from the document (or a tool such as Schemathesis
//! that reads it) then never sends what the server refuses, and never expects a refusal the
//! server does not give.
//!
//! Each request is validated with a JSON Schema 2020-12 validator against the schema the
//! served document states for it (request body, path, query or header parameter), with the
//! document's `components` in scope for its `$ref`s, then sent to a real daemon.
//!
//! What JSON Schema cannot state is left out here and written down in docs/api.md: the byte
//! limits (`maxLength` counts characters; ids and causes are limited in bytes of UTF-8) and
//! that `endTimestamp` must be in the future.

mod common;

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// The served document and validators built from its schemas.
struct Contract {
    doc: Value,
}

impl Contract {
    async fn of(d: &Daemon) -> Contract {
        let (status, doc) = d.get("/openapi.json").await;
        assert_eq!(status, StatusCode::OK);
        Contract { doc }
    }

    fn operation(&self, method: &Method, path: &str) -> &Value {
        let op = &self.doc["paths"][path][method.as_str().to_lowercase()];
        assert!(
            op.is_object(),
            "no operation {method} {path} in the document"
        );
        op
    }

    /// A validator of `schema`, with the document's components in scope.
    fn validator(&self, schema: &Value) -> jsonschema::Validator {
        let mut root = match schema {
            Value::Object(map) => map.clone(),
            other => panic!("a schema must be an object here, got {other}"),
        };
        root.insert("components".into(), self.doc["components"].clone());
        jsonschema::draft202012::new(&Value::Object(root))
            .unwrap_or_else(|e| panic!("the document's schema {schema} does not compile: {e}"))
    }

    fn body_schema(&self, method: &Method, path: &str) -> jsonschema::Validator {
        let op = self.operation(method, path);
        self.validator(&op["requestBody"]["content"]["application/json"]["schema"])
    }

    fn parameter_schema(&self, method: &Method, path: &str, name: &str) -> jsonschema::Validator {
        let op = self.operation(method, path);
        let parameter = op["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{method} {path} has no parameter {name}"));
        self.validator(&parameter["schema"])
    }

    /// The schema of one event of the change feed (a `$ref` followed).
    fn sse_schema(&self) -> &Value {
        let schema = &self.operation(&Method::GET, "/blocklist/events")["responses"]["200"]
            ["content"]["text/event-stream"]["schema"];
        match schema["$ref"].as_str() {
            Some(reference) => {
                let name = reference
                    .strip_prefix("#/components/schemas/")
                    .unwrap_or_else(|| panic!("a reference outside the components: {reference}"));
                &self.doc["components"]["schemas"][name]
            }
            None => schema,
        }
    }
}

/// Where the schema and the server disagree on `instance`, or the server's answer is not
/// `want`: what to report. The schema must accept exactly what the server does not answer
/// with 400.
fn disagreement(
    what: &str,
    validator: &jsonschema::Validator,
    instance: &Value,
    (status, body): (StatusCode, Value),
    want: StatusCode,
) -> Option<String> {
    if status != want {
        return Some(format!(
            "{what}: the server answered {status} {body}, not {want}"
        ));
    }
    let valid = validator.is_valid(instance);
    let accepted = status != StatusCode::BAD_REQUEST;
    (valid != accepted).then(|| {
        format!(
            "{what}: the document says {}, the server {} ({status} {body}) for {instance}",
            if valid { "valid" } else { "invalid" },
            if accepted {
                "accepted it"
            } else {
                "refused it"
            },
        )
    })
}

/// Panics listing every disagreement found.
fn assert_none(disagreements: &[String]) {
    assert!(
        disagreements.is_empty(),
        "{} disagreement(s):\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
}

/// A JSON body sent to `path` against the request schema of its operation, `template`.
async fn body_case(
    d: &Daemon,
    c: &Contract,
    (method, template, path): (Method, &str, &str),
    body: Value,
    want: StatusCode,
) -> Option<String> {
    let validator = c.body_schema(&method, template);
    let answer = d.call(method.clone(), path, Some(body.clone())).await;
    disagreement(&format!("{method} {path}"), &validator, &body, answer, want)
}

/// An add element with a fresh id and `extra` fields, posted to `/blocklist/nodes`.
fn element(id: &str, extra: &Value) -> Value {
    let mut element = item(id, "MARK_BLOCKED", "c");
    for (k, v) in extra.as_object().unwrap() {
        element[k] = v.clone();
    }
    element
}

const CREATED: StatusCode = StatusCode::CREATED;
const BAD: StatusCode = StatusCode::BAD_REQUEST;

#[tokio::test]
async fn add_bodies_are_as_strict_in_the_document_as_in_the_server() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let c = Contract::of(&d).await;
    let mut found = Vec::new();
    let later = now_ms() + 3_600_000;
    let cases: Vec<(Value, StatusCode)> = vec![
        (json!([]), BAD),
        (json!({"items": []}), BAD),
        (json!([element("", &json!({}))]), BAD),
        (json!([element("ctl\u{1}", &json!({}))]), BAD),
        (json!([element("c1\u{85}", &json!({}))]), BAD),
        (json!([element("del\u{7f}", &json!({}))]), BAD),
        (json!([element(&"x".repeat(257), &json!({}))]), BAD),
        (json!([element(&"y".repeat(256), &json!({}))]), CREATED),
        (json!([element("ünïcödé / ok", &json!({}))]), CREATED),
        (json!([element("cause-empty", &json!({"cause": ""}))]), BAD),
        (
            json!([element("cause-commas", &json!({"cause": ",,"}))]),
            BAD,
        ),
        (
            json!([element("cause-some", &json!({"cause": "a,,"}))]),
            CREATED,
        ),
        (json!([element("t0", &json!({"timeout": 0}))]), BAD),
        (json!([element("t-neg", &json!({"timeout": -5}))]), BAD),
        (json!([element("t-str0", &json!({"timeout": "0"}))]), BAD),
        (json!([element("t-strneg", &json!({"timeout": "-5"}))]), BAD),
        (json!([element("t-abc", &json!({"timeout": "abc"}))]), BAD),
        (json!([element("t1", &json!({"timeout": 1_000}))]), CREATED),
        (
            json!([element("t-plus", &json!({"timeout": "+60000"}))]),
            CREATED,
        ),
        (
            json!([element("t-zeros", &json!({"timeout": "0060000"}))]),
            CREATED,
        ),
        (
            json!([element(
                "t-max",
                &json!({"timeout": 1_000_000_000_000_000_000_i64})
            )]),
            CREATED,
        ),
        (
            json!([element(
                "t-over",
                &json!({"timeout": 1_000_000_000_000_000_001_i64})
            )]),
            BAD,
        ),
        (
            json!([element(
                "t-strover",
                &json!({"timeout": "1000000000000000001"})
            )]),
            BAD,
        ),
        (
            json!([element("t-huge", &json!({"timeout": i64::MAX}))]),
            BAD,
        ),
        (
            json!([element("e1", &json!({"endTimestamp": later}))]),
            CREATED,
        ),
        (
            json!([element(
                "e-str",
                &json!({"endTimestamp": later.to_string()})
            )]),
            CREATED,
        ),
        (
            json!([element("e-max", &json!({"endTimestamp": i64::MAX}))]),
            CREATED,
        ),
        (
            json!([element(
                "e-strmax",
                &json!({"endTimestamp": "9223372036854775807"})
            )]),
            CREATED,
        ),
        (
            json!([element(
                "e-strover",
                &json!({"endTimestamp": "9223372036854775808"})
            )]),
            BAD,
        ),
        (
            json!([element(
                "e-over",
                &json!({"endTimestamp": 9_223_372_036_854_775_808_u64})
            )]),
            BAD,
        ),
        (json!([element("e-zero", &json!({"endTimestamp": 0}))]), BAD),
        (
            json!([element("e-neg", &json!({"endTimestamp": "-1"}))]),
            BAD,
        ),
        (
            json!([element(
                "both",
                &json!({"timeout": 1_000, "endTimestamp": later})
            )]),
            BAD,
        ),
        (
            json!([element(
                "both-null",
                &json!({"timeout": 1_000, "endTimestamp": null})
            )]),
            CREATED,
        ),
        (
            json!([element(
                "merge2",
                &json!({"allowMerge": true, "mergeOnConflict": false})
            )]),
            BAD,
        ),
        (
            json!([element(
                "merge2b",
                &json!({"mergeOnConflict": "true", "mergeOnConflictallowMerge": true})
            )]),
            BAD,
        ),
        (
            json!([element(
                "merge1",
                &json!({"allowMerge": true, "mergeOnConflict": null})
            )]),
            CREATED,
        ),
        (
            json!([element("merge-yes", &json!({"allowMerge": "yes"}))]),
            BAD,
        ),
        (
            json!([element("extra", &json!({"endTimeStamp": later}))]),
            BAD,
        ),
        (json!({"items": [element("wrapped", &json!({}))]}), CREATED),
    ];
    for (body, want) in cases {
        found.extend(
            body_case(
                &d,
                &c,
                (Method::POST, "/blocklist/nodes", "/blocklist/nodes"),
                body,
                want,
            )
            .await,
        );
    }
    assert_none(&found);
}

#[tokio::test]
async fn update_bodies_are_as_strict_in_the_document_as_in_the_server() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let c = Contract::of(&d).await;
    let (status, _) = d
        .post("/blocklist/nodes", json!([item("n1", "MARK_BLOCKED", "c")]))
        .await;
    assert_eq!(status, CREATED);
    let mut found = Vec::new();
    let later = now_ms() + 3_600_000;
    let ok = StatusCode::OK;
    // Every accepted update leaves n1 blocked, for the next case.
    let cases: Vec<(Value, StatusCode)> = vec![
        (json!([]), BAD),
        (json!({}), BAD),
        (json!({"cause": null, "action": null}), BAD),
        (json!({"other": 1, "cause": "x"}), BAD),
        (json!({"permanent": false}), BAD),
        (json!({"permanent": "false", "cause": "x"}), BAD),
        (json!({"permanent": "yes"}), BAD),
        (json!({"permanent": true, "timeout": 60_000}), BAD),
        (json!({"permanent": "true", "endTimestamp": later}), BAD),
        (json!({"timeout": 60_000, "endTimestamp": later}), BAD),
        (json!({"timeout": 0}), BAD),
        (json!({"timeout": 1_000_000_000_000_000_001_i64}), BAD),
        (json!({"timeout": "x"}), BAD),
        (json!({"action": "SOMETHING"}), BAD),
        (json!({"cause": ""}), BAD),
        (json!({"cause": ",,"}), BAD),
        (json!({"cause": 5}), BAD),
        (json!({"timeout": "600000"}), ok),
        (json!({"timeout": 600_000, "endTimestamp": null}), ok),
        (json!({"permanent": false, "timeout": 600_000}), ok),
        (json!({"permanent": "false", "endTimestamp": later}), ok),
        (json!({"endTimestamp": later.to_string()}), ok),
        (json!({"permanent": true, "timeout": null}), ok),
        (json!({"permanent": "true"}), ok),
        (json!({"action": "MARK_BLOCKED_AND_EVACUATE_TASKS"}), ok),
        (json!({"cause": "more", "permanent": null}), ok),
    ];
    for (body, want) in cases {
        found.extend(
            body_case(
                &d,
                &c,
                (
                    Method::PATCH,
                    "/blocklist/nodes/{id}",
                    "/blocklist/nodes/n1",
                ),
                body,
                want,
            )
            .await,
        );
    }
    assert_none(&found);
}

#[tokio::test]
async fn registration_and_check_bodies_are_as_strict_in_the_document_as_in_the_server() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let c = Contract::of(&d).await;
    let mut found = Vec::new();
    let batch: Vec<(Value, StatusCode)> = vec![
        (json!([]), BAD),
        (json!({"items": []}), BAD),
        (json!([{"id": "tm", "node": ""}]), BAD),
        (json!([{"id": "tm\u{1b}", "node": "n"}]), BAD),
        (json!([{"id": "tm", "node": "x".repeat(257)}]), BAD),
        (json!([{"id": "tm-a", "node": "n"}]), CREATED),
    ];
    for (body, want) in batch {
        found.extend(
            body_case(
                &d,
                &c,
                (Method::PUT, "/taskmanagers", "/taskmanagers"),
                body,
                want,
            )
            .await,
        );
    }
    let one: Vec<(Value, StatusCode)> = vec![
        (json!({"node": ""}), BAD),
        (json!({"node": "n\u{7}"}), BAD),
        (json!({"node": "n\u{9f}"}), BAD),
        (json!({"node": "n"}), CREATED),
    ];
    for (body, want) in one {
        found.extend(
            body_case(
                &d,
                &c,
                (Method::PUT, "/taskmanagers/{id}", "/taskmanagers/tm-b"),
                body,
                want,
            )
            .await,
        );
    }
    let checks: Vec<(Value, StatusCode)> = vec![
        (json!({"nodes": [""]}), BAD),
        (json!({"nodes": ["n\u{4}"]}), BAD),
        (json!({"taskManagers": ["x".repeat(257)]}), BAD),
        (json!({"taskManagers": [5]}), BAD),
        (
            json!({"taskManagers": ["tm-a"], "nodes": ["n"]}),
            StatusCode::OK,
        ),
        (json!({"taskManagers": [], "nodes": null}), StatusCode::OK),
    ];
    for (body, want) in checks {
        found.extend(
            body_case(
                &d,
                &c,
                (Method::POST, "/blocklist/check", "/blocklist/check"),
                body,
                want,
            )
            .await,
        );
    }
    assert_none(&found);
}

#[tokio::test]
async fn path_ids_are_as_strict_in_the_document_as_in_the_server() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let c = Contract::of(&d).await;
    let mut found = Vec::new();
    let routes = [
        (Method::GET, "/blocklist/nodes/{id}", "/blocklist/nodes/"),
        (
            Method::DELETE,
            "/blocklist/taskmanagers/{id}",
            "/blocklist/taskmanagers/",
        ),
        (
            Method::GET,
            "/blocklist/check/nodes/{id}",
            "/blocklist/check/nodes/",
        ),
        (Method::GET, "/taskmanagers/{id}", "/taskmanagers/"),
    ];
    let ids = [
        ("\u{4}", BAD),
        ("a\u{85}b", BAD),
        ("\r", BAD),
        (&*"z".repeat(257), BAD),
        ("fine / id", StatusCode::NOT_FOUND),
    ];
    for (method, template, prefix) in &routes {
        let validator = c.parameter_schema(method, template, "id");
        for (id, want) in &ids {
            let mut want = *want;
            if want == StatusCode::NOT_FOUND && template.starts_with("/blocklist/check") {
                want = StatusCode::OK;
            }
            let path = format!("{prefix}{}", enc(id));
            let (status, body) = d.call(method.clone(), &path, None).await;
            found.extend(disagreement(
                &format!("{method} {path}"),
                &validator,
                &json!(id),
                (status, body),
                want,
            ));
        }
    }
    assert_none(&found);
}

#[tokio::test]
async fn feed_positions_are_as_strict_in_the_document_as_in_the_server() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let c = Contract::of(&d).await;
    let mut found = Vec::new();
    let since = c.parameter_schema(&Method::GET, "/blocklist/events", "since");
    let last_event_id = c.parameter_schema(&Method::GET, "/blocklist/events", "Last-Event-ID");
    let watch = |query: &'static str, header: Option<&'static str>| {
        let mut req = reqwest::Client::new().get(d.url(&format!("/blocklist/events{query}")));
        if let Some(h) = header {
            req = req.header("Last-Event-ID", h);
        }
        async move {
            let resp = req.send().await.unwrap();
            let status = resp.status();
            // A stream that was opened is dropped unread.
            let body = if status == StatusCode::OK {
                Value::Null
            } else {
                resp.json().await.unwrap()
            };
            (status, body)
        }
    };

    // The declared range of a revision is an int64's, and the server refuses anything
    // beyond it as malformed rather than as a position it does not have.
    let (status, body) = watch("?since=9223372036854775808", None).await;
    found.extend(disagreement(
        "since=2^63",
        &since,
        &json!(9_223_372_036_854_775_808_u64),
        (status, body),
        BAD,
    ));
    let (status, body) = watch("?since=9223372036854775807", None).await;
    found.extend(disagreement(
        "since=2^63-1",
        &since,
        &json!(i64::MAX),
        (status, body),
        StatusCode::GONE,
    ));
    let (status, body) = watch("", Some("9223372036854775808")).await;
    found.extend(disagreement(
        "Last-Event-ID: 2^63",
        &last_event_id,
        &json!(9_223_372_036_854_775_808_u64),
        (status, body),
        BAD,
    ));
    let (status, body) = watch("?since=0", None).await;
    found.extend(disagreement(
        "since=0",
        &since,
        &json!(0),
        (status, body),
        StatusCode::OK,
    ));

    // `null` is not a revision: the header is an integer, not a nullable one.
    let (status, body) = watch("", Some("null")).await;
    found.extend(disagreement(
        "Last-Event-ID: null",
        &last_event_id,
        &Value::Null,
        (status, body),
        BAD,
    ));

    // A malformed `since` is refused even when Last-Event-ID (which wins) is also given.
    let (status, body) = watch("?since=abc", Some("0")).await;
    let names_since = body["errors"][0]
        .as_str()
        .is_some_and(|e| e.contains("since"));
    if status != BAD || !names_since {
        found.push(format!("since=abc with Last-Event-ID: 0: {status} {body}"));
    }
    assert_none(&found);
}

/// Each event of the feed as Schemathesis (and other SSE tools) read it: an object of its
/// `event`, `id` and raw `data` fields.
fn as_read(event: &FeedEvent) -> Value {
    json!({
        "event": event.event,
        "id": event.id.to_string(),
        "data": serde_json::to_string(&event.data).unwrap(),
    })
}

#[tokio::test]
async fn every_kind_of_feed_event_matches_the_documented_event_schema() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let c = Contract::of(&d).await;
    let event_schema = c.validator(c.sse_schema());

    let mut watch = Watch::open(&d, Some(0), None).await.unwrap();
    let add = |id: &str, extra: Value| json!([element(id, &extra)]);
    assert_eq!(
        d.post("/blocklist/nodes", add("n1", json!({}))).await.0,
        CREATED
    );
    let merged = add("n1", json!({"allowMerge": true, "cause": "more"}));
    assert_eq!(
        d.post("/blocklist/nodes", merged).await.0,
        StatusCode::ACCEPTED
    );
    assert_eq!(d.delete("/blocklist/nodes/n1").await.0, StatusCode::OK);
    let short = add("tm1", json!({"timeout": 50}));
    assert_eq!(d.post("/blocklist/taskmanagers", short).await.0, CREATED);
    let register = d
        .call(
            Method::PUT,
            "/taskmanagers/tm2",
            Some(json!({"node": "n2"})),
        )
        .await;
    assert_eq!(register.0, CREATED, "{}", register.1);
    assert_eq!(d.delete("/taskmanagers/tm2").await.0, StatusCode::OK);

    let events = watch.take(7).await;
    let mut names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "added",
            "added",
            "expired",
            "merged",
            "registered",
            "removed",
            "unregistered"
        ]
    );
    let branches = c.sse_schema()["oneOf"]
        .as_array()
        .expect("a oneOf of event kinds");
    for event in &events {
        let read = as_read(event);
        assert!(
            event_schema.is_valid(&read),
            "the documented event schema refuses {read}"
        );
        // The data's own schema: `contentSchema` of the branch that names this event.
        let branch = branches
            .iter()
            .find(|b| {
                b["properties"]["event"]["enum"]
                    .as_array()
                    .is_some_and(|names| names.contains(&json!(event.event)))
            })
            .unwrap_or_else(|| panic!("no documented branch for {}", event.event));
        let data = &branch["properties"]["data"];
        assert_eq!(data["contentMediaType"], "application/json");
        let data_schema = c.validator(&data["contentSchema"]);
        assert!(
            data_schema.is_valid(&event.data),
            "the documented data of {} refuses {}",
            event.event,
            event.data
        );
    }
    // And the schema is not a blank cheque.
    let mut unknown = as_read(&events[0]);
    unknown["event"] = json!("bogus");
    assert!(!event_schema.is_valid(&unknown), "{unknown}");
    let mut no_id = as_read(&events[0]);
    no_id.as_object_mut().unwrap().remove("id");
    assert!(!event_schema.is_valid(&no_id), "{no_id}");
}

#[tokio::test]
async fn the_dry_run_flag_is_as_strict_in_the_document_as_in_the_server() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let c = Contract::of(&d).await;
    let mut found = Vec::new();
    let flag = c.parameter_schema(&Method::POST, "/blocklist/nodes", "dryRun");
    let cases = [
        ("true", json!(true), CREATED),
        ("false", json!(false), CREATED),
        ("maybe", json!("maybe"), BAD),
        ("1", json!(1), BAD),
    ];
    for (i, (text, instance, want)) in cases.into_iter().enumerate() {
        let path = format!("/blocklist/nodes?dryRun={text}");
        let body = json!([element(&format!("flag-{i}"), &json!({}))]);
        let answer = d.post(&path, body).await;
        found.extend(disagreement(&path, &flag, &instance, answer, want));
    }
    assert_none(&found);
}

/// A whole number written with a fraction (`3798509692882382.0`) is an integer to JSON
/// Schema, and to the server while a double holds it exactly: parsing must not round it
/// to a neighbour with a fraction.
#[tokio::test]
async fn whole_numbers_written_as_floats_are_taken_exactly() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let c = Contract::of(&d).await;
    let validator = c.body_schema(&Method::POST, "/blocklist/nodes");
    let mut found = Vec::new();
    for (i, number) in [
        "3798509692882382.0",
        "9007199254740992.0",
        "4102444800000.0",
    ]
    .into_iter()
    .enumerate()
    {
        let text = format!(
            r#"[{{"id": "float-{i}", "action": "MARK_BLOCKED", "cause": "c", "endTimestamp": {number}}}]"#
        );
        let instance: Value = serde_json::from_str(&text).unwrap();
        let answer = d
            .post_raw("/blocklist/nodes", "application/json", text.into_bytes())
            .await;
        found.extend(disagreement(number, &validator, &instance, answer, CREATED));
    }
    assert_none(&found);
}
