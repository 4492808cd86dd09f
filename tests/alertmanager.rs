//! Alertmanager's webhook (`POST /webhooks/alertmanager`) over a real socket, with payloads
//! shaped as Alertmanager 0.31 sends them: firing blocks with the alert's cause and
//! provenance, resolved retracts, an operator's block survives, two alerts need both
//! resolved, repeats write nothing, a storm is capped per alert, and bad input is a 400 or
//! a per-alert refusal, never a 5xx, writing nothing. The same with real Prometheus and
//! Alertmanager processes: `tests/alert_loop.rs`.

mod common;

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const PATH: &str = "/webhooks/alertmanager";
const STARTS: &str = "2026-12-07T05:00:00.123456789Z";

/// One alert of a delivery.
fn alert(status: &str, name: &str, node: &str, fingerprint: &str, extra: &Value) -> Value {
    let mut labels = json!({"alertname": name, "blocklist_kind": "node", "node": node,
        "severity": "critical"});
    for (k, v) in extra.as_object().unwrap() {
        labels[k] = v.clone();
    }
    let ends = if status == "firing" {
        "0001-01-01T00:00:00Z"
    } else {
        "2026-12-07T06:00:00Z"
    };
    json!({
        "status": status,
        "labels": labels,
        "annotations": {"summary": format!("{name} on {node}")},
        "startsAt": STARTS,
        "endsAt": ends,
        "generatorURL": format!("http://prometheus:9090/graph?g0.expr={name}"),
        "fingerprint": fingerprint,
    })
}

/// A delivery of `alerts` (the group's whole state), as Alertmanager posts it.
fn delivery(alerts: Vec<Value>) -> Value {
    json!({
        "version": "4",
        "groupKey": "{}/{}:{alertname=\"x\"}",
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "blocklist",
        "groupLabels": {},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": Value::Array(alerts),
    })
}

/// Posts a delivery: status, revision header, body.
async fn deliver(d: &Daemon, body: Value) -> (StatusCode, Option<u64>, Value) {
    deliver_as(d, None, body).await
}

async fn deliver_as(
    d: &Daemon,
    token: Option<&str>,
    body: Value,
) -> (StatusCode, Option<u64>, Value) {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
    let (status, h, body) = request(d, Method::POST, PATH, &headers, Some(body)).await;
    let revision = h
        .get("x-blocklist-revision")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    (status, revision, body)
}

fn outcomes(body: &Value) -> Vec<String> {
    body["alerts"]
        .as_array()
        .unwrap_or_else(|| panic!("{body}"))
        .iter()
        .map(|a| a["outcome"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_firing_alert_blocks_its_node_and_its_resolve_retracts_it() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let firing = alert(
        "firing",
        "NodeDiskErrors",
        "n1",
        "6d2a1c0e4f3b8a91",
        &json!({}),
    );
    let (status, revision, body) = deliver(&d, delivery(vec![firing.clone()])).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(outcomes(&body), ["blocked"]);
    assert_eq!(body["counts"], json!({"blocked": 1}));
    assert_eq!(body["alerts"][0]["id"], "n1");
    assert_eq!(revision, Some(1));
    let (status, item) = d.get("/blocklist/nodes/n1").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(item["action"], "MARK_BLOCKED");
    assert_eq!(item["cause"], "NodeDiskErrors: NodeDiskErrors on n1");
    assert_eq!(
        item["source"],
        "alertmanager/NodeDiskErrors/6d2a1c0e4f3b8a91"
    );
    assert_eq!(item["endTimestamp"], json!(i64::MAX), "until it resolves");
    let details = &item["liveReports"][0]["details"];
    assert_eq!(details["fingerprint"], "6d2a1c0e4f3b8a91", "{item}");
    assert_eq!(details["startsAt"], STARTS);
    assert_eq!(
        details["generatorURL"],
        "http://prometheus:9090/graph?g0.expr=NodeDiskErrors"
    );

    // Delivered again (a reload, a repeat_interval): nothing new.
    let (_, revision, body) = deliver(&d, delivery(vec![firing])).await;
    assert_eq!(outcomes(&body), ["repeated"]);
    assert_eq!(revision, Some(1), "no new revision");

    let resolved = alert(
        "resolved",
        "NodeDiskErrors",
        "n1",
        "6d2a1c0e4f3b8a91",
        &json!({}),
    );
    let (_, revision, body) = deliver(&d, delivery(vec![resolved.clone()])).await;
    assert_eq!(outcomes(&body), ["retracted"], "{body}");
    assert_eq!(revision, Some(2));
    assert_eq!(d.get("/blocklist/nodes/n1").await.0, StatusCode::NOT_FOUND);
    let (_, past) = d.get("/blocklist/nodes/n1/history").await;
    assert_eq!(past[0]["ended"]["how"], "retracted", "{past}");
    assert_eq!(past[0]["ended"]["reason"], "alert NodeDiskErrors resolved");
    // The resolve delivered again: nothing to retract, nothing written.
    let (_, revision, body) = deliver(&d, delivery(vec![resolved])).await;
    assert_eq!(outcomes(&body), ["absent"]);
    assert_eq!(revision, Some(2));

    let metrics = d.scrape().await;
    for outcome in ["blocked", "repeated", "retracted", "absent"] {
        let series =
            format!("blocklist_alerts_total{{outcome=\"{outcome}\",alertname=\"NodeDiskErrors\"}}");
        assert_eq!(metric(&metrics, &series), 1.0, "{series}");
    }
}

#[tokio::test]
async fn an_operators_block_outlives_the_resolve_and_two_alerts_need_both_resolved() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let (status, _) = d
        .post(
            "/blocklist/nodes",
            json!([{"id": "n1", "action": "MARK_BLOCKED",
            "cause": "replace the disk", "source": "operator:alice"}]),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let disk = |s| {
        alert(
            s,
            "NodeDiskErrors",
            "n1",
            "f-disk",
            &json!({"blocklist_action": "evacuate"}),
        )
    };
    let ecc = |s| alert(s, "NodeECCErrors", "n1", "f-ecc", &json!({}));
    let (_, _, body) = deliver(&d, delivery(vec![disk("firing"), ecc("firing")])).await;
    assert_eq!(outcomes(&body), ["blocked", "blocked"], "{body}");
    let (_, item) = d.get("/blocklist/nodes/n1").await;
    assert_eq!(item["action"], "MARK_BLOCKED_AND_EVACUATE_TASKS");
    assert_eq!(item["heldBy"].as_array().map(Vec::len), Some(3), "{item}");

    // One group's state: the disk alert resolved, the ECC one still firing.
    let (_, _, body) = deliver(&d, delivery(vec![disk("resolved"), ecc("firing")])).await;
    assert_eq!(outcomes(&body), ["retracted", "repeated"], "{body}");
    let (_, item) = d.get("/blocklist/nodes/n1").await;
    assert_eq!(
        item["action"], "MARK_BLOCKED",
        "the evacuation was the disk alert's: {item}"
    );
    let (_, _, body) = deliver(&d, delivery(vec![ecc("resolved")])).await;
    assert_eq!(outcomes(&body), ["retracted"]);
    let (status, item) = d.get("/blocklist/nodes/n1").await;
    assert_eq!(status, StatusCode::OK, "the operator's block stays");
    assert_eq!(item["cause"], "replace the disk", "{item}");
    assert!(item.get("heldBy").is_none(), "{item}");

    // Without the operator, the last resolve ends it.
    let (_, _, _) = deliver(
        &d,
        delivery(vec![alert("firing", "A", "n2", "f2", &json!({}))]),
    )
    .await;
    let (_, _, _) = deliver(
        &d,
        delivery(vec![alert("firing", "B", "n2", "f3", &json!({}))]),
    )
    .await;
    deliver(
        &d,
        delivery(vec![alert("resolved", "A", "n2", "f2", &json!({}))]),
    )
    .await;
    assert_eq!(
        d.get("/blocklist/nodes/n2").await.0,
        StatusCode::OK,
        "B still fires"
    );
    deliver(
        &d,
        delivery(vec![alert("resolved", "B", "n2", "f3", &json!({}))]),
    )
    .await;
    assert_eq!(d.get("/blocklist/nodes/n2").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_storm_blocks_up_to_the_cap_and_refuses_the_rest_per_alert() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    // Ten registered nodes: the default share cap lets five be blocked.
    let registrations: Vec<Value> = (0..10)
        .map(|i| json!({"id": format!("tm-{i}"), "node": format!("n{i}")}))
        .collect();
    let (status, body) = d
        .call(Method::PUT, "/taskmanagers", Some(json!(registrations)))
        .await;
    assert!(status.is_success(), "{body}");
    let storm: Vec<Value> = (0..6)
        .map(|i| {
            alert(
                "firing",
                "KernelDeadlock",
                &format!("n{i}"),
                &format!("f{i}"),
                &json!({}),
            )
        })
        .collect();
    let (status, _, body) = deliver(&d, delivery(storm)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        outcomes(&body),
        ["blocked", "blocked", "blocked", "blocked", "blocked", "refused"],
        "{body}"
    );
    let reason = body["alerts"][5]["reason"].as_str().unwrap();
    assert!(
        reason.contains("blockedShare") || reason.contains("share"),
        "{reason}"
    );
    assert_eq!(
        d.listing().await["blockedNodes"].as_array().unwrap().len(),
        5
    );
    let (_, status) = d.get("/policy/status").await;
    assert_eq!(status["nodes"]["blockedShare"]["current"], 5, "{status}");
    let metrics = d.scrape().await;
    let series = "blocklist_alerts_total{outcome=\"refused\",alertname=\"KernelDeadlock\"}";
    assert_eq!(metric(&metrics, series), 1.0);
}

#[tokio::test]
async fn what_names_nothing_is_ignored_per_alert_and_bad_payloads_are_400_writing_nothing() {
    let mut ws = Workspace::new();
    let d = ws.start(&["--max-batch", "50"]);
    let (_, _, body) = deliver(
        &d,
        delivery(vec![
            json!({"status": "firing", "labels": {"alertname": "Watchdog"}, "annotations": {},
                "startsAt": STARTS, "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "",
                "fingerprint": "w"}),
            alert("firing", "Bad", "n\u{1}x", "f1", &json!({})),
            alert("firing", "Bad", &"x".repeat(300), "f2", &json!({})),
            alert(
                "firing",
                "Bad",
                "n1",
                "f3",
                &json!({"blocklist_kind": "rack"}),
            ),
            alert("firing", "Good", "n1", "f4", &json!({})),
        ]),
    )
    .await;
    assert_eq!(
        outcomes(&body),
        ["ignored", "ignored", "ignored", "ignored", "blocked"],
        "{body}"
    );
    assert!(body["alerts"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("no blocklist_kind"));
    assert!(body["alerts"][1]["reason"]
        .as_str()
        .unwrap()
        .contains("control character"));
    assert!(body["alerts"][2]["reason"]
        .as_str()
        .unwrap()
        .contains("256 bytes"));
    let at = d.revision().await;
    assert!(
        d.log_text().contains("Watchdog"),
        "ignored alerts are logged by name"
    );

    let bad: Vec<(Value, &str)> = vec![
        (json!({"version": "3", "alerts": []}), "version"),
        (json!({"version": "4"}), "alerts"),
        (
            json!({"version": "4", "alerts": [{"status": "firing"}]}),
            "alerts[0]",
        ),
        (
            json!({"version": "4", "alerts": [{"status": "firing", "labels": {"a": 1},
            "startsAt": STARTS, "fingerprint": "f"}]}),
            "alerts[0].labels.a",
        ),
        (json!([1, 2]), "not Alertmanager's"),
        (json!("hello"), "not Alertmanager's"),
    ];
    for (payload, named) in bad {
        let (status, revision, body) = deliver(&d, payload.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{payload}: {body}");
        assert!(
            body["errors"][0].as_str().unwrap().contains(named),
            "{payload}: {body}"
        );
        assert_eq!(revision, None);
    }
    let (status, body) = d
        .post_raw(PATH, "application/json", b"{\"version\": \"4\", ".to_vec())
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let huge: Vec<Value> = (0..51)
        .map(|i| {
            alert(
                "firing",
                "A",
                &format!("n{i}"),
                &format!("f{i}"),
                &json!({}),
            )
        })
        .collect();
    let (status, _, body) = deliver(&d, delivery(huge)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(d.revision().await, at, "nothing written");
    // Over the body limit (the daemon closes that connection once it answered).
    let big = "x".repeat(2 * 1024 * 1024);
    let (status, _) = d.post_raw(PATH, "application/json", big.into_bytes()).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn the_webhook_takes_a_detector_token_and_reports_under_its_name() {
    let mut ws = Workspace::new();
    let tokens = ws.tmp.path().join("tokens");
    std::fs::write(
        &tokens,
        "am-token name=alertmanager-prod role=detector\nreader-token name=grafana role=reader\n",
    )
    .unwrap();
    let d = ws.start(&["--token-file", tokens.to_str().unwrap()]);
    let firing = delivery(vec![alert("firing", "A", "n1", "f1", &json!({}))]);
    let (status, _, _) = deliver_as(&d, None, firing.clone()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, _) = deliver_as(&d, Some("reader-token"), firing.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, body) = deliver_as(&d, Some("am-token"), firing).await;
    assert_eq!(
        (status, outcomes(&body)),
        (StatusCode::OK, vec!["blocked".to_owned()])
    );
    let (_, item) = d.get("/blocklist/nodes/n1").await;
    assert_eq!(item["source"], "alertmanager-prod/A/f1");
}

#[tokio::test]
async fn a_keyed_retry_of_a_delivery_is_answered_as_the_first() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let body = delivery(vec![
        alert("firing", "A", "n1", "f1", &json!({})),
        alert("resolved", "B", "n2", "f2", &json!({})),
    ]);
    let key = [("Idempotency-Key", "2d1f7a3e-5b6c-4d8e-9f0a-1b2c3d4e5f60")];
    let (status, headers, first) = request(&d, Method::POST, PATH, &key, Some(body.clone())).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert!(headers.get("idempotent-replayed").is_none());
    let at = d.revision().await;
    let (status, headers, again) = request(&d, Method::POST, PATH, &key, Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(again, first, "the first answer, replayed");
    assert_eq!(outcomes(&again), ["blocked", "absent"]);
    assert_eq!(d.revision().await, at, "applied once");
}
