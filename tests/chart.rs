//! The Helm chart (`charts/blocklistd`) by Helm's own checks: `helm lint --strict` finds
//! nothing to say of the default values or of any example; `values.schema.json` refuses a
//! wrong value at install, naming it, before anything is rendered; and every value the
//! chart takes is typed and described in the schema (what `helm show values` and the
//! chart's README document). The objects it makes are checked by `tests/deploy.rs` (their
//! structure and flags) and, on a real kube-apiserver, by
//! `crates/blocklist-kube/tests/chart.rs`.

mod common;

use std::path::Path;

use common::*;
use serde_json::Value;

#[test]
fn helm_lint_strict_passes_for_the_defaults_and_every_example() {
    let Some(helm) = helm("helm_lint_strict_passes_for_the_defaults_and_every_example") else {
        return;
    };
    let chart = chart_dir();
    let chart = chart.to_str().unwrap();
    let examples = examples();
    let runs = std::iter::once(None).chain(examples.iter().map(Some));
    for values in runs {
        let mut args = vec!["lint", "--strict", chart, "--namespace", NAMESPACE];
        if let Some(file) = values {
            args.extend(["--values", file.to_str().unwrap()]);
        }
        let output = run_helm(&helm, &args);
        let said = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && said.contains("0 chart(s) failed"),
            "helm {}:\n{said}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
        // Strict makes warnings fail; an error of the templates would too. An [INFO] (the
        // icon Helm recommends) is all that may be said.
        for line in said.lines().filter(|l| l.starts_with('[')) {
            assert!(line.starts_with("[INFO]"), "helm lint said: {line}");
        }
    }
}

/// Each wrong value fails `helm template` (as it fails `helm install` and `helm upgrade`:
/// the same validation runs first) with an error naming the value, and nothing is
/// rendered.
#[test]
fn a_wrong_value_is_refused_by_the_schema_naming_it() {
    let Some(helm) = helm("a_wrong_value_is_refused_by_the_schema_naming_it") else {
        return;
    };
    let cases: [(&[&str], &str); 10] = [
        (&["replicass=3"], "replicass"),
        (&["replicas=-1"], "/replicas"),
        (&["store.type=disk"], "/store/type"),
        (&["store.type=etcd"], "/store/etcd/endpoints"),
        (&["replicas=3"], "/replicas"),
        (&["tls.mode=existingSecret"], "/tls/existingSecret"),
        (&["flink.enabled=true"], "/flink/clusters"),
        (
            &["bridge.maxTaintedNodesPercent=150"],
            "/bridge/maxTaintedNodesPercent",
        ),
        (
            &["guardrails.maxBlockedNodesPercent=lots"],
            "/guardrails/maxBlockedNodesPercent",
        ),
        (
            &["bridge.conditions[0]=Kernel Deadlock"],
            "/bridge/conditions/0",
        ),
    ];
    for (sets, named) in cases {
        match render(&helm, &[], sets) {
            Ok(objects) => panic!("{sets:?} accepted:\n{objects}"),
            Err(error) => assert!(
                error.contains(named) && error.contains("values don't meet the specifications"),
                "{sets:?}: the error does not name {named}:\n{error}"
            ),
        }
    }
    // The same values, right, render.
    for sets in [
        &["replicas=1"][..],
        &[
            "store.type=etcd",
            "store.etcd.endpoints[0]=https://etcd:2379",
            "replicas=3",
        ],
        &["tls.mode=existingSecret", "tls.existingSecret=mine"],
        &[
            "flink.enabled=true",
            "flink.clusters[0].name=a",
            "flink.clusters[0].url=http://a:8081",
        ],
        &["guardrails.maxBlockedNodesPercent=off"],
        // `--set` splits on commas; a value's own is escaped.
        &["bridge.conditions[0]=KernelDeadlock\\,hold=2m"],
    ] {
        if let Err(error) = render(&helm, &[], sets) {
            panic!("{sets:?} refused: {error}");
        }
    }
}

/// Walks `values` (values.yaml) beside `schema`: every key has a property in the schema,
/// described; `path` names where.
fn described(values: &Value, schema: &Value, path: &str, missing: &mut Vec<String>) {
    let Some(map) = values.as_object() else {
        return;
    };
    for (key, value) in map {
        let here = format!("{path}.{key}");
        let property = &schema["properties"][key];
        if property.is_null() {
            missing.push(format!("{here}: not in values.schema.json"));
            continue;
        }
        if !property["description"].is_string() {
            missing.push(format!("{here}: no description"));
        }
        if property["type"] == "object" && property["properties"].is_object() {
            described(value, property, &here, missing);
        }
    }
}

/// Every object of the schema refuses keys it does not list (a misspelt key fails at
/// install, not silently), and every property is described; `path` names where.
fn closed(schema: &Value, path: &str, open: &mut Vec<String>) {
    if let Some(properties) = schema["properties"].as_object() {
        if schema["additionalProperties"] != false {
            open.push(format!("{path}: takes any key"));
        }
        for (key, property) in properties {
            let here = format!("{path}.{key}");
            if !property["description"].is_string() {
                open.push(format!("{here}: no description"));
            }
            closed(property, &here, open);
        }
    }
    if schema["items"].is_object() {
        closed(&schema["items"], &format!("{path}[]"), open);
    }
}

#[test]
fn every_value_is_typed_and_described_in_the_schema() {
    let test = "every_value_is_typed_and_described_in_the_schema";
    let Some(values) = yaml_documents(&chart_file("values.yaml"), test) else {
        return;
    };
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(chart_file("values.schema.json")).expect("values.schema.json"),
    )
    .expect("values.schema.json is JSON");
    let mut problems = Vec::new();
    described(&values[0], &schema, "", &mut problems);
    closed(&schema, "", &mut problems);
    // And the other way: every property of the schema is a value with its default (and its
    // comment) in values.yaml, but for `global`, Helm's own.
    for key in schema["properties"].as_object().unwrap().keys() {
        if key != "global" && values[0][key].is_null() {
            problems.push(format!(".{key}: in the schema, not in values.yaml"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(Path::new(&chart_file("README.md")).exists());
}
