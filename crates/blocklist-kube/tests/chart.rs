//! Every manifest in `docs/deploy/` is accepted by a real kube-apiserver: each object is
//! created with server-side dry run (`?dryRun=All`: validated, strictly as to fields, and
//! admitted; not stored) in the namespace the manifests name, so a field the API does not
//! know, a bad value or a wrong reference fails here rather than at an operator's
//! `kubectl apply`. The objects of other projects' kinds (cert-manager's `Certificate` and
//! `Issuer`, the Prometheus Operator's `PrometheusRule` and `PodMonitor`) are checked
//! against those projects' own custom resource definitions, created first for real, as
//! their releases publish them (`tests/crds/fetch`).

#[path = "../../../tests/common/mod.rs"]
mod common;
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use support::{create, ENDPOINTS};

/// The namespace the deployment's objects go to (the bridge's `ClusterRoleBinding` names it).
const NAMESPACE: &str = "blocklist";

/// Files in `docs/deploy/` that are no Kubernetes objects: the Prometheus rule files of the
/// alerts and their unit tests (promtool's formats; `monitoring.yaml` carries the same rules
/// as a `PrometheusRule`), the example rules that block what they name and Alertmanager's
/// route to the daemons' webhook (Prometheus' and Alertmanager's own formats,
/// `tests/alerts.rs` checks them), and the systemd unit.
const NOT_MANIFESTS: [&str; 4] = [
    "alerts.yaml",
    "alerts.test.yaml",
    "blocking-rules.yaml",
    "alertmanager.yaml",
];

/// `tests/crds/fetch`: the directory of the CRDs the manifests use, copied out of their
/// projects' release modules through the Go module proxy.
fn crds() -> Result<PathBuf, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/crds/fetch");
    let output = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("{}: {e}", script.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{} failed (it needs the Go toolchain and the Go module proxy)",
            script.display()
        ));
    }
    Ok(PathBuf::from(
        String::from_utf8_lossy(&output.stdout).trim(),
    ))
}

/// POSTs `body` (YAML; `@file` reads a file) to `path` on the API server: the answer's
/// status code and body.
fn post_yaml(kube: &KubeApiServer, path: &str, body: &str) -> (String, String) {
    let answer = kube
        .curl(&[
            "-s",
            "-XPOST",
            "-H",
            "Content-Type: application/yaml",
            "--data-binary",
            body,
            "-w",
            "\n%{http_code}",
            &format!("{}{path}", kube.url),
        ])
        .expect("an answer");
    let (body, code) = answer.rsplit_once('\n').unwrap_or(("", &answer));
    (code.to_owned(), body.to_owned())
}

/// Creates each CRD in `dir` (for real: the dry runs need them stored) and waits until the
/// API server serves its kind (its condition `Established`).
fn create_crds(kube: &KubeApiServer, dir: &Path) -> Vec<String> {
    let collection = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let mut names = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("the CRDs")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for file in files {
        let (code, body) = post_yaml(kube, collection, &format!("@{}", file.display()));
        assert_eq!(code, "201", "creating the CRD {}: {body}", file.display());
        let created: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        names.push(
            created["metadata"]["name"]
                .as_str()
                .expect("its name")
                .to_owned(),
        );
    }
    let started = Instant::now();
    for name in &names {
        loop {
            let crd: serde_json::Value = kube
                .curl(&["-sf", &format!("{}{collection}/{name}", kube.url)])
                .and_then(|text| serde_json::from_str(&text).ok())
                .unwrap_or_default();
            let established = crd["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Established" && c["status"] == "True");
            if established {
                break;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "the CRD {name} not established: {crd}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    names
}

#[test]
fn every_manifest_is_accepted_by_the_api_server_with_server_side_dry_run() {
    let test = "every_manifest_is_accepted_by_the_api_server_with_server_side_dry_run";
    let crd_dir = match crds() {
        Ok(dir) => dir,
        Err(why) => {
            available(&why, false, test);
            return;
        }
    };
    let Some(kube) = KubeApiServer::start("the manifests") else {
        return;
    };
    let namespace =
        format!(r#"{{"apiVersion":"v1","kind":"Namespace","metadata":{{"name":"{NAMESPACE}"}}}}"#);
    create(&kube, "/api/v1/namespaces", &namespace);
    let crds = create_crds(&kube, &crd_dir);
    assert!(crds.len() >= 4, "{crds:?}");

    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/deploy");
    let mut checked = Vec::new();
    let mut refused = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("docs/deploy")
        .map(|e| e.expect("an entry").path())
        .collect();
    files.sort();
    for path in files {
        let file = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if path.extension().is_none_or(|e| e != "yaml") || NOT_MANIFESTS.contains(&file.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("the manifest");
        for document in text.split("\n---\n") {
            let kind = document
                .lines()
                .find_map(|l| l.strip_prefix("kind: "))
                .unwrap_or_else(|| panic!("{file}: a document without a kind"));
            let (_, collection) = ENDPOINTS
                .iter()
                .find(|(k, _)| *k == kind)
                .unwrap_or_else(|| panic!("{file}: no endpoint for {kind}: add it to ENDPOINTS"));
            let path = format!(
                "{}?dryRun=All&fieldValidation=Strict",
                collection.replace("{ns}", NAMESPACE)
            );
            // A custom resource's kind is served a moment after its CRD is established.
            let started = Instant::now();
            let (code, body) = loop {
                let (code, body) = post_yaml(&kube, &path, document);
                if code != "404" || started.elapsed() > DEADLINE {
                    break (code, body);
                }
                std::thread::sleep(Duration::from_millis(200));
            };
            if code != "201" && code != "200" {
                refused.push(format!("{file}: {kind}: {code} {body}"));
            }
            checked.push(format!("{file}: {kind}"));
        }
    }
    assert!(refused.is_empty(), "refused:\n{}", refused.join("\n"));
    for expected in [
        "kubernetes.yaml: StatefulSet",
        "kubernetes.yaml: Service",
        "blocklist-kube.yaml: Deployment",
        "blocklist-kube.yaml: ClusterRole",
        "blocklist-flink.yaml: Deployment",
        "blocklist-flink.yaml: Secret",
        "certificates.yaml: Certificate",
        "certificates.yaml: Issuer",
        "monitoring.yaml: PrometheusRule",
        "monitoring.yaml: PodMonitor",
    ] {
        assert!(
            checked.iter().any(|c| c == expected),
            "no {expected} checked: {checked:?}"
        );
    }

    // The CRDs validate for real: a field cert-manager does not know is refused, as one
    // of Kubernetes' own kinds would be.
    let certificates =
        std::fs::read_to_string(dir.join("certificates.yaml")).expect("certificates.yaml");
    let certificate = certificates
        .split("\n---\n")
        .find(|d| d.lines().any(|l| l == "kind: Certificate"))
        .expect("a Certificate");
    let misspelt =
        certificate.replacen("\nspec:\n", "\nspec:\n  subjectAltNames: [blocklistd]\n", 1);
    assert_ne!(misspelt, certificate);
    let (code, body) = post_yaml(
        &kube,
        &format!(
            "/apis/cert-manager.io/v1/namespaces/{NAMESPACE}/certificates?dryRun=All&fieldValidation=Strict"
        ),
        &misspelt,
    );
    assert!(
        code.starts_with('4') && body.contains("subjectAltNames"),
        "a misspelt field accepted: {code} {body}"
    );
}

/// Every flag and `BLOCKLIST_*` variable the bridge's manifest uses is one
/// `blocklist-kube --help` knows.
#[test]
fn the_bridges_manifest_uses_only_flags_and_variables_it_knows() {
    let unknown = unknown_to_help(
        Path::new(env!("CARGO_BIN_EXE_blocklist-kube")),
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/deploy/blocklist-kube.yaml"),
        6,
    );
    assert!(
        unknown.is_empty(),
        "unknown to `blocklist-kube --help`: {unknown:?}"
    );
}
