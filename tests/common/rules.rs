//! The alerting rules (`charts/blocklistd/files/alerts.yaml`) run by `promtool` against what a real
//! process exports: its `/metrics` text becomes the input of a `promtool test rules` file,
//! which asserts that every selector of a group's rules (a metric's name and its label
//! matchers, `outcome="won"` included) selects some of those series, and that no alert of
//! the group fires on a healthy process.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::{available, chart_file, runs, yaml_documents};

/// A file of `docs/deploy/`.
pub fn deploy_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|dir| dir.join("docs/deploy").join(name))
        .find(|path| path.exists())
        .unwrap_or_else(|| panic!("no docs/deploy/{name} in the workspace"))
}

/// Whether `promtool` runs here (the skip-or-fail rule otherwise).
pub fn have_promtool(test: &str) -> bool {
    available(
        "promtool is missing (Debian package: prometheus)",
        runs("promtool", "--version"),
        test,
    )
}

/// The alerts of `group` in alerts.yaml: each one's name and expression.
pub fn alerts_of(group: &str, test: &str) -> Option<Vec<(String, String)>> {
    let rules = yaml_documents(&chart_file("files/alerts.yaml"), test)?;
    let groups = rules[0]["groups"].as_array().expect("groups").clone();
    let group = groups
        .iter()
        .find(|g| g["name"] == group)
        .unwrap_or_else(|| panic!("no group {group} in alerts.yaml"));
    Some(
        group["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .map(|r| {
                (
                    r["alert"].as_str().expect("an alert").to_owned(),
                    r["expr"].as_str().expect("an expression").to_owned(),
                )
            })
            .collect(),
    )
}

/// The selectors of an expression whose metric name starts with `prefix` (`up` and the
/// like aside), each as written: the name, then its `{…}` matchers if it has any, without
/// a range (`[5m]`).
pub fn selectors(expr: &str, prefix: &str) -> BTreeSet<String> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let chars: Vec<char> = expr.chars().collect();
    let mut found = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        if !is_word(chars[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && is_word(chars[i]) {
            i += 1;
        }
        let name: String = chars[start..i].iter().collect();
        // A word inside `{…}` or a label list is never one of ours: label names have no
        // prefix, and the values are quoted (skipped below).
        if !name.starts_with(prefix) {
            continue;
        }
        let mut selector = name;
        if chars.get(i) == Some(&'{') {
            let mut quoted = false;
            while i < chars.len() {
                let c = chars[i];
                selector.push(c);
                i += 1;
                match c {
                    '\\' if quoted => {
                        if let Some(&escaped) = chars.get(i) {
                            selector.push(escaped);
                            i += 1;
                        }
                    }
                    '"' => quoted = !quoted,
                    '}' if !quoted => break,
                    _ => {}
                }
            }
        }
        found.insert(selector);
    }
    found
}

/// The metric name of a selector.
fn metric_of(selector: &str) -> &str {
    selector.split('{').next().unwrap_or(selector)
}

/// Feeds the samples of `scrape` (a `/metrics` text), as series of scrape job `job`, to the
/// rules of `group` with `promtool test rules`: every selector of the group's rules must
/// select some of them, but those of the metrics in `elsewhere` (which another test proves,
/// each with the reason), and none of the group's alerts may fire within 10 minutes of
/// them staying as they are. Panics with promtool's verdict otherwise.
pub fn feed_through_the_rules(
    scrape: &str,
    job: &str,
    group: &str,
    elsewhere: &[&str],
    test: &str,
) {
    let Some(alerts) = alerts_of(group, test) else {
        return;
    };
    // The daemon's metrics are `blocklist_…`; those of the binaries beside it (the bridge,
    // the watcher) their own name's: `blocklist_kube_…`, `blocklist_flink_…`.
    let others = ["blocklist_kube_", "blocklist_flink_"];
    let prefix = match job {
        "blocklistd" => "blocklist_".to_owned(),
        beside => format!("{}_", beside.replace('-', "_")),
    };
    let named: BTreeSet<String> = alerts
        .iter()
        .flat_map(|(_, expr)| selectors(expr, &prefix))
        .filter(|s| job != "blocklistd" || !others.iter().any(|o| s.starts_with(o)))
        .filter(|s| !elsewhere.contains(&metric_of(s)))
        .collect();
    assert!(!named.is_empty(), "no metric named by the {group} rules");

    let labels = format!(r#"job="{job}", namespace="test", instance="under-test""#);
    let mut file = format!(
        "rule_files:\n  - {}\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n      - series: 'up{{{labels}}}'\n        values: '1x10'\n",
        chart_file("files/alerts.yaml").display()
    );
    for line in scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line.rsplit_once(' ').expect("a sample: series and value");
        let series = match series.split_once('{') {
            Some((name, rest)) => format!("{name}{{{labels}, {rest}"),
            None => format!("{series}{{{labels}}}"),
        };
        let _ = writeln!(
            file,
            "      - series: '{}'\n        values: '{value}x10'",
            series.replace('\'', "''")
        );
    }
    file.push_str("    promql_expr_test:\n");
    for selector in &named {
        // 1 when the selector selects some of the scrape's series, nothing (a failed test,
        // which names the expression) when it selects none.
        let _ = writeln!(
            file,
            "      - expr: 'count({}) > bool 0'\n        eval_time: 10m\n        exp_samples:\n          - labels: '{{}}'\n            value: 1",
            selector.replace('\'', "''")
        );
    }
    file.push_str("    alert_rule_test:\n");
    for (alert, _) in &alerts {
        let _ = writeln!(
            file,
            "      - eval_time: 10m\n        alertname: {alert}\n        exp_alerts: []"
        );
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("scrape.test.yaml");
    std::fs::write(&path, &file).expect("write the test file");
    let output = Command::new("promtool")
        .arg("test")
        .arg("rules")
        .arg(&path)
        .output()
        .expect("run promtool");
    assert!(
        output.status.success(),
        "the {group} rules against a real {job}'s /metrics (selectors: {named:?}):\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Every alert of the rule file, for the checks of its tests and runbook.
pub fn every_alert(test: &str) -> Option<Vec<Value>> {
    let rules = yaml_documents(&chart_file("files/alerts.yaml"), test)?;
    Some(
        rules[0]["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .flat_map(|g| g["rules"].as_array().expect("rules").clone())
            .collect(),
    )
}
