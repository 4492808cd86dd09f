//! The example deployments in `docs/deploy/` are what they say: the systemd unit passes
//! `systemd-analyze verify`; the Kubernetes manifests parse, hold the objects
//! `docs/deploy/README.md` promises (three spread replicas probed on `/readyz` and
//! `/healthz`, a Service, a disruption budget, secrets from the Secret); and every flag and
//! `BLOCKLISTD_*` variable either uses is one `blocklistd --help` knows.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use common::*;
use serde_json::Value;

fn deploy_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("docs/deploy")
        .join(name)
}

/// The long flags and the environment variables `blocklistd --help` names.
fn known_flags_and_variables() -> (BTreeSet<String>, BTreeSet<String>) {
    let help = blocklistd(&["--help".as_ref()]);
    assert!(help.status.success());
    let text = String::from_utf8(help.stdout).unwrap();
    let flags = text
        .split_whitespace()
        .filter(|word| word.starts_with("--"))
        .map(|word| {
            word.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
                .to_owned()
        })
        .collect();
    let variables = text
        .match_indices("env: ")
        .map(|(at, _)| {
            text[at + 5..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                .collect()
        })
        .collect();
    (flags, variables)
}

/// Fails naming every flag among `flags` and every variable among `variables` that
/// `--help` does not know.
fn assert_known(source: &str, flags: &[String], variables: &[String]) {
    let (known_flags, known_variables) = known_flags_and_variables();
    let unknown: Vec<&String> = flags
        .iter()
        .filter(|f| !known_flags.contains(*f))
        .chain(variables.iter().filter(|v| !known_variables.contains(*v)))
        .collect();
    assert!(
        unknown.is_empty(),
        "{source} uses what `blocklistd --help` does not know: {unknown:?}"
    );
    assert!(
        !flags.is_empty() && !variables.is_empty(),
        "{source}: nothing checked"
    );
}

#[test]
fn the_systemd_unit_verifies_and_uses_only_known_flags() {
    if !available(
        "systemd-analyze is not installed (Debian: systemd)",
        runs("systemd-analyze", "--version"),
        "the_systemd_unit_verifies_and_uses_only_known_flags",
    ) {
        return;
    }
    let unit = std::fs::read_to_string(deploy_file("blocklistd.service")).unwrap();
    // `verify` checks that the command exists: the binary this test built stands in for
    // the installed one.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("blocklistd.service");
    std::fs::write(
        &copy,
        unit.replace(
            "/usr/local/bin/blocklistd",
            env!("CARGO_BIN_EXE_blocklistd"),
        ),
    )
    .unwrap();
    let verified = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .expect("run systemd-analyze");
    let said = String::from_utf8_lossy(&verified.stderr);
    assert!(
        verified.status.success() && said.trim().is_empty(),
        "systemd-analyze verify: {}\n{said}",
        verified.status
    );

    let exec = unit
        .lines()
        .find_map(|line| line.strip_prefix("ExecStart="))
        .expect("an ExecStart line");
    let flags: Vec<String> = exec
        .split_whitespace()
        .filter(|w| w.starts_with("--"))
        .map(str::to_owned)
        .collect();
    let variables: Vec<String> = unit
        .lines()
        .filter_map(|line| line.strip_prefix("Environment="))
        .filter_map(|assignment| assignment.split_once('='))
        .map(|(name, _)| name.to_owned())
        .collect();
    assert_known("blocklistd.service", &flags, &variables);
}

/// The manifests as JSON, one value per YAML document (`PyYAML` does the parsing: a YAML
/// parser the cluster's tools agree with, rather than one of ours).
fn manifests() -> Option<Vec<Value>> {
    let parses = Command::new("python3")
        .args(["-c", "import yaml"])
        .status()
        .is_ok_and(|s| s.success());
    if !available(
        "python3 with PyYAML is not installed (Debian: python3-yaml)",
        parses,
        "the_kubernetes_manifests",
    ) {
        return None;
    }
    let output = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))",
        ])
        .arg(deploy_file("kubernetes.yaml"))
        .output()
        .expect("run python3");
    assert!(
        output.status.success(),
        "the manifests do not parse: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(serde_json::from_slice(&output.stdout).unwrap())
}

fn of_kind<'a>(documents: &'a [Value], kind: &str) -> &'a Value {
    documents
        .iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in kubernetes.yaml"))
}

#[test]
fn the_kubernetes_manifests_run_three_spread_probed_replicas_with_known_flags() {
    let Some(documents) = manifests() else {
        return;
    };
    let deployment = of_kind(&documents, "Deployment");
    let spec = &deployment["spec"];
    assert_eq!(spec["replicas"], 3);
    let pod = &spec["template"]["spec"];
    let labels = &spec["template"]["metadata"]["labels"];
    assert_eq!(&spec["selector"]["matchLabels"], labels);
    let spread: Vec<&Value> = pod["topologySpreadConstraints"]
        .as_array()
        .expect("topology spread")
        .iter()
        .collect();
    assert!(
        spread
            .iter()
            .any(|c| c["topologyKey"] == "kubernetes.io/hostname"
                && c["whenUnsatisfiable"] == "DoNotSchedule"),
        "one pod per node: {spread:?}"
    );
    let container = &pod["containers"][0];
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");

    // The secrets come from the Secret, under the paths the flags name.
    let secret = of_kind(&documents, "Secret");
    let secret_name = secret["metadata"]["name"].as_str().unwrap();
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["secret"]["secretName"] == secret_name)
        .expect("a volume of the Secret");
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == volume["name"])
        .expect("the Secret mounted");
    let args: Vec<String> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect();
    for item in volume["secret"]["items"].as_array().unwrap() {
        let key = item["key"].as_str().unwrap();
        assert!(
            secret["stringData"][key].is_string(),
            "the Secret has no {key}"
        );
        let path = format!(
            "{}/{}",
            mount["mountPath"].as_str().unwrap(),
            item["path"].as_str().unwrap()
        );
        assert!(args.contains(&path), "no flag names {path}: {args:?}");
    }

    let service = of_kind(&documents, "Service");
    assert_eq!(&service["spec"]["selector"], labels);
    let budget = of_kind(&documents, "PodDisruptionBudget");
    assert_eq!(&budget["spec"]["selector"]["matchLabels"], labels);
    assert_eq!(budget["spec"]["maxUnavailable"], 1);

    let flags: Vec<String> = args
        .iter()
        .filter(|a| a.starts_with("--"))
        .cloned()
        .collect();
    let variables: Vec<String> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .filter(|name| name.starts_with("BLOCKLISTD_"))
        .map(str::to_owned)
        .collect();
    assert!(
        args.windows(2).any(|w| w[0] == "--store" && w[1] == "etcd"),
        "{args:?}"
    );
    assert_known("kubernetes.yaml", &flags, &variables);
}
