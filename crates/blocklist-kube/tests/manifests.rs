//! Every manifest in `docs/deploy/` is accepted by a real kube-apiserver: each object is
//! created with server-side dry run (`?dryRun=All`: validated, strictly as to fields, and admitted; not stored) in
//! the namespace the manifests name, so a field the API does not know, a bad value or a
//! wrong reference fails here rather than at an operator's `kubectl apply`.

#[path = "../../../tests/common/mod.rs"]
mod common;
mod support;

use common::*;
use support::{create, ENDPOINTS};

/// The namespace the deployment's objects go to (the bridge's `ClusterRoleBinding` names it).
const NAMESPACE: &str = "blocklist";

#[test]
fn every_manifest_is_accepted_by_the_api_server_with_server_side_dry_run() {
    let Some(kube) = KubeApiServer::start("the manifests") else {
        return;
    };
    let namespace =
        format!(r#"{{"apiVersion":"v1","kind":"Namespace","metadata":{{"name":"{NAMESPACE}"}}}}"#);
    create(&kube, "/api/v1/namespaces", &namespace);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/deploy");
    let mut checked = 0;
    let mut refused = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("docs/deploy") {
        let path = entry.expect("an entry").path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("the manifest");
        let file = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        for document in text.split("\n---\n") {
            let kind = document
                .lines()
                .find_map(|l| l.strip_prefix("kind: "))
                .unwrap_or_else(|| panic!("{file}: a document without a kind"));
            let (_, collection) = ENDPOINTS
                .iter()
                .find(|(k, _)| *k == kind)
                .unwrap_or_else(|| panic!("{file}: no endpoint for {kind}: add it to ENDPOINTS"));
            let url = format!(
                "{}{}?dryRun=All&fieldValidation=Strict",
                kube.url,
                collection.replace("{ns}", NAMESPACE)
            );
            let answer = kube
                .curl(&[
                    "-s",
                    "-XPOST",
                    "-H",
                    "Content-Type: application/yaml",
                    "--data-binary",
                    document,
                    "-w",
                    "\n%{http_code}",
                    &url,
                ])
                .expect("an answer");
            let (body, code) = answer.rsplit_once('\n').unwrap_or(("", &answer));
            if code != "201" && code != "200" {
                refused.push(format!("{file}: {kind}: {code} {body}"));
            }
            checked += 1;
        }
    }
    assert!(refused.is_empty(), "refused:\n{}", refused.join("\n"));
    assert!(checked >= 9, "only {checked} objects in docs/deploy");
}

/// Every flag and `BLOCKLIST_*` variable the bridge's manifest uses is one
/// `blocklist-kube --help` knows.
#[test]
fn the_bridges_manifest_uses_only_flags_and_variables_it_knows() {
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_blocklist-kube"))
        .arg("--help")
        .output()
        .expect("blocklist-kube --help");
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let manifest = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../docs/deploy/blocklist-kube.yaml"),
    )
    .expect("the manifest");
    // What the objects say, not the comments.
    let manifest: String = manifest
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    let words = |prefix: &str| -> Vec<String> {
        manifest
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .filter(|w| {
                w.starts_with(prefix)
                    && w[prefix.len()..].starts_with(|c: char| c.is_ascii_alphabetic())
            })
            .map(str::to_owned)
            .collect()
    };
    let used: Vec<String> = words("--").into_iter().chain(words("BLOCKLIST_")).collect();
    assert!(used.len() >= 6, "{used:?}");
    let unknown: Vec<&String> = used
        .iter()
        .filter(|w| {
            !help
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
                .any(|h| h == w.as_str())
        })
        .collect();
    assert!(
        unknown.is_empty(),
        "unknown to `blocklist-kube --help`: {unknown:?}"
    );
}
