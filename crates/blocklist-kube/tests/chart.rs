//! The Helm chart (`charts/blocklistd`) on a real kube-apiserver, with a real `helm` (built
//! from its Go module):
//! - every object `helm template` makes, of the default values and of each example, is
//!   accepted with server-side dry run (`?dryRun=All&fieldValidation=Strict`: validated,
//!   strictly as to fields, and admitted; not stored) — cert-manager's and the Prometheus
//!   Operator's kinds against those projects' own CRDs, created first (`tests/crds/fetch`);
//! - `helm install` of the production example creates every object, and `helm upgrade` to a
//!   newer chart keeps the etcd prefix and endpoints;
//! - `helm upgrade` of the sled example to a newer chart and image is accepted (nothing
//!   immutable changed), keeps the StatefulSet and its claim template, and a real daemon run
//!   with the pod's arguments before and after the upgrade, on one directory standing for
//!   the claim, keeps every block;
//! - the bridge's Deployment uses only flags `blocklist-kube --help` knows.
//!
//! No kubelet runs: pods are never started; the bridge's RBAC, as the chart renders it, is
//! exercised by the bridge itself in `rbac.rs`.

#[path = "../../../tests/common/mod.rs"]
mod common;
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use support::{create, ENDPOINTS};

/// `tests/crds/fetch`: the directory of the CRDs the chart uses, copied out of their
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

/// POSTs `body` (YAML or JSON; `@file` reads a file) to `path` on the API server: the
/// answer's status code and body.
fn post(kube: &KubeApiServer, path: &str, body: &str) -> (String, String) {
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

/// Creates each CRD in `dir` (for real: the dry runs and installs need them stored) and
/// waits until the API server serves its kind (its condition `Established`).
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
        let (code, body) = post(kube, collection, &format!("@{}", file.display()));
        assert_eq!(code, "201", "creating the CRD {}: {body}", file.display());
        let created: Value = serde_json::from_str(&body).expect("JSON");
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
            let crd: Value = kube
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

/// An API server holding the namespace [`NAMESPACE`] and, with `crds`, the CRDs the chart
/// uses; `None` (after the skip-or-fail rule) when one of them cannot be had here.
fn cluster(test: &str, with_crds: bool) -> Option<KubeApiServer> {
    let crd_dir = if with_crds {
        match crds() {
            Ok(dir) => Some(dir),
            Err(why) => {
                available(&why, false, test);
                return None;
            }
        }
    } else {
        None
    };
    let kube = KubeApiServer::start(test)?;
    let namespace =
        format!(r#"{{"apiVersion":"v1","kind":"Namespace","metadata":{{"name":"{NAMESPACE}"}}}}"#);
    create(&kube, "/api/v1/namespaces", &namespace);
    if let Some(dir) = crd_dir {
        let crds = create_crds(&kube, &dir);
        assert!(crds.len() >= 5, "{crds:?}");
    }
    Some(kube)
}

/// The collection of `kind` in [`NAMESPACE`].
fn collection(kind: &str) -> String {
    let (_, path) = ENDPOINTS
        .iter()
        .find(|(k, _)| *k == kind)
        .unwrap_or_else(|| panic!("no endpoint for {kind}: add it to ENDPOINTS"));
    path.replace("{ns}", NAMESPACE)
}

#[test]
fn every_object_of_every_example_is_accepted_by_the_api_server_with_server_side_dry_run() {
    let test =
        "every_object_of_every_example_is_accepted_by_the_api_server_with_server_side_dry_run";
    let Some(helm) = helm(test) else {
        return;
    };
    let Some(kube) = cluster(test, true) else {
        return;
    };
    let mut checked = Vec::new();
    let mut refused = Vec::new();
    let examples = examples();
    for values in std::iter::once(None).chain(examples.iter().map(Some)) {
        let label = values.map_or("defaults".to_owned(), |f| {
            f.file_name().unwrap().to_string_lossy().into_owned()
        });
        let files: Vec<&Path> = values.map(PathBuf::as_path).into_iter().collect();
        let text = render(&helm, &files, &[]).unwrap_or_else(|e| panic!("{label}: {e}"));
        for document in text.split("\n---\n") {
            let Some(kind) = document.lines().find_map(|l| l.strip_prefix("kind: ")) else {
                continue; // a template that made nothing
            };
            let path = format!("{}?dryRun=All&fieldValidation=Strict", collection(kind));
            // A custom resource's kind is served a moment after its CRD is established.
            let started = Instant::now();
            let (code, body) = loop {
                let (code, body) = post(&kube, &path, document);
                if code != "404" || started.elapsed() > DEADLINE {
                    break (code, body);
                }
                std::thread::sleep(Duration::from_millis(200));
            };
            if code != "201" && code != "200" {
                refused.push(format!("{label}: {kind}: {code} {body}"));
            }
            checked.push(kind.to_owned());
        }
    }
    assert!(refused.is_empty(), "refused:\n{}", refused.join("\n"));
    for expected in [
        "StatefulSet",
        "Service",
        "PodDisruptionBudget",
        "Deployment",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "NetworkPolicy",
        "Certificate",
        "Issuer",
        "PrometheusRule",
        "PodMonitor",
        "AlertmanagerConfig",
    ] {
        assert!(
            checked.iter().any(|c| c == expected),
            "no {expected} checked: {checked:?}"
        );
    }

    // The CRDs validate for real: a field cert-manager does not know is refused, as one of
    // Kubernetes' own kinds would be.
    let text = render(&helm, &[], &[]).expect("the defaults render");
    let certificate = text
        .split("\n---\n")
        .find(|d| d.lines().any(|l| l == "kind: Certificate"))
        .expect("a Certificate");
    let misspelt =
        certificate.replacen("\nspec:\n", "\nspec:\n  subjectAltNames: [blocklistd]\n", 1);
    assert_ne!(misspelt, certificate);
    let (code, body) = post(
        &kube,
        &format!(
            "{}?dryRun=All&fieldValidation=Strict",
            collection("Certificate")
        ),
        &misspelt,
    );
    assert!(
        code.starts_with('4') && body.contains("subjectAltNames"),
        "a misspelt field accepted: {code} {body}"
    );
}

/// `helm ARGS --kubeconfig <the administrator's>`, which must succeed: its stdout.
fn helm_on(helm: &Path, kube: &KubeApiServer, args: &[&str]) -> String {
    let kubeconfig = kube.kubeconfig("helm", ADMIN_TOKEN);
    let mut all = args.to_vec();
    all.extend(["--kubeconfig", kubeconfig.to_str().unwrap()]);
    let output = run_helm(helm, &all);
    assert!(
        output.status.success(),
        "helm {}:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `helm install` (`verb` "install") or `helm upgrade` ("upgrade") of `chart` as [`RELEASE`]
/// in [`NAMESPACE`] with the values file `values` and the `--set` pairs `sets`.
fn release(
    helm: &Path,
    kube: &KubeApiServer,
    verb: &str,
    chart: &Path,
    values: &Path,
    sets: &[&str],
) {
    let mut args = vec![
        verb,
        RELEASE,
        chart.to_str().unwrap(),
        "--namespace",
        NAMESPACE,
        "--values",
        values.to_str().unwrap(),
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    helm_on(helm, kube, &args);
}

/// A copy of the chart in `dir` whose `Chart.yaml` says `version` and `appVersion`: the
/// next release of the chart and of the binaries, for an upgrade.
fn chart_at_version(dir: &Path, version: &str) -> PathBuf {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).expect("mkdir");
        for entry in std::fs::read_dir(from).expect("read_dir") {
            let entry = entry.expect("an entry");
            let target = to.join(entry.file_name());
            if entry.file_type().expect("its type").is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), &target).expect("copy");
            }
        }
    }
    let to = dir.join("blocklistd");
    copy(&chart_dir(), &to);
    let meta = to.join("Chart.yaml");
    let text = std::fs::read_to_string(&meta).expect("Chart.yaml");
    let text: String = text
        .lines()
        .map(|line| {
            if line.starts_with("version: ") {
                format!("version: {version}")
            } else if line.starts_with("appVersion: ") {
                format!("appVersion: \"{version}\"")
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&meta, text + "\n").expect("Chart.yaml");
    to
}

/// The stored object of `kind` named `name` in [`NAMESPACE`] (`None`: not there).
fn stored(kube: &KubeApiServer, kind: &str, name: &str) -> Option<Value> {
    let path = collection(kind);
    kube.curl(&["-sf", &format!("{}{path}/{name}", kube.url)])
        .and_then(|text| serde_json::from_str(&text).ok())
}

#[test]
fn helm_installs_the_production_example_and_an_upgrade_keeps_its_etcd_prefix() {
    let test = "helm_installs_the_production_example_and_an_upgrade_keeps_its_etcd_prefix";
    let Some(helm) = helm(test) else {
        return;
    };
    let (Some(objects), Some(kube)) = (rendered(Some("etcd-tls"), test), cluster(test, true))
    else {
        return;
    };
    let example = example("etcd-tls");
    release(&helm, &kube, "install", &chart_dir(), &example, &[]);
    // Every object of the rendering is stored, the release's.
    let mut missing = Vec::new();
    for object in &objects {
        let kind = object["kind"].as_str().unwrap();
        let name = object["metadata"]["name"].as_str().unwrap();
        match stored(&kube, kind, name) {
            Some(found) => assert_eq!(
                found["metadata"]["labels"]["app.kubernetes.io/managed-by"], "Helm",
                "{kind} {name}"
            ),
            None => missing.push(format!("{kind} {name}")),
        }
    }
    assert!(missing.is_empty(), "not created: {missing:?}");
    assert!(objects.len() >= 20, "{} objects", objects.len());

    let before = stored(&kube, "StatefulSet", RELEASE).expect("the StatefulSet");
    let dir = tempfile::tempdir().expect("temp dir");
    let next = chart_at_version(dir.path(), "0.2.0");
    release(&helm, &kube, "upgrade", &next, &example, &["replicas=5"]);
    let after = stored(&kube, "StatefulSet", RELEASE).expect("the StatefulSet");
    assert_eq!(
        after["metadata"]["uid"], before["metadata"]["uid"],
        "replaced"
    );
    assert_eq!(after["spec"]["replicas"], 5);
    let container = |set: &Value| set["spec"]["template"]["spec"]["containers"][0].clone();
    assert!(container(&after)["image"]
        .as_str()
        .unwrap()
        .ends_with(":0.2.0"));
    let env = |set: &Value, name: &str| {
        container(set)["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].clone())
    };
    for name in ["BLOCKLISTD_ETCD_PREFIX", "BLOCKLISTD_ETCD_ENDPOINTS"] {
        assert!(env(&before, name).is_some(), "{name}");
        assert_eq!(env(&after, name), env(&before, name), "{name} changed");
    }
    let history = helm_on(
        &helm,
        &kube,
        &["history", RELEASE, "--namespace", NAMESPACE],
    );
    assert!(
        history.contains("superseded") && history.contains("deployed"),
        "{history}"
    );
}

/// The daemon run as the pod of `set` (a stored StatefulSet) would run it: its container's
/// arguments, with the pod's paths moved into `root` (`/etc/blocklistd/…` to `root/etc/…`)
/// and its data dir the one of `ws` (the claim's mount); `--listen` and `--data-dir` are
/// the test's. Returns the daemon and the data dir the pod's arguments named.
fn daemon_as_the_pod(ws: &mut Workspace, root: &Path, set: &Value) -> (Starting, String) {
    let container = &set["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("a string").to_owned())
        .collect();
    let mut kept = Vec::new();
    let mut data_dir = String::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--data-dir" => data_dir = args.next().cloned().unwrap_or_default(),
            "--listen" => {
                args.next();
            }
            _ => kept.push(arg.replace("/etc/blocklistd/", &format!("{}/etc/", root.display()))),
        }
    }
    let kept: Vec<&str> = kept.iter().map(String::as_str).collect();
    let log = root.join(format!("daemon-{}.log", std::process::id()));
    (Daemon::spawn(&ws.data_dir(), &log, &kept), data_dir)
}

/// An https client trusting `ca`, sending `token`.
fn client_with_token(ca: &Ca, token: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {token}").parse().expect("a header"),
    );
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem.as_bytes()).unwrap())
        .default_headers(headers)
        .timeout(DEADLINE)
        .build()
        .expect("a client")
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upgrade_of_the_sled_example_keeps_its_store_and_every_block() {
    let test = "an_upgrade_of_the_sled_example_keeps_its_store_and_every_block";
    if skip_on_etcd("the sled example's store") {
        return;
    }
    let Some(helm) = helm(test) else {
        return;
    };
    let Some(kube) = cluster(test, false) else {
        return;
    };
    let example = example("sled");
    release(&helm, &kube, "install", &chart_dir(), &example, &[]);
    let before = stored(&kube, "StatefulSet", RELEASE).expect("the StatefulSet");

    // What the pod mounts, made here: the token file and the daemons' TLS Secret's keys.
    let mut ws = Workspace::new();
    let root = ws.tmp.path().to_owned();
    let ca = Ca::new("the chart's daemons");
    for (dir, files) in [
        (
            "auth",
            vec![("tokens", "the-admin-token name=ops role=admin\n".to_owned())],
        ),
        ("tls", {
            let issued = ca.daemon(&["127.0.0.1", "localhost"]);
            vec![
                ("tls.crt", issued.cert_pem),
                ("tls.key", issued.key_pem),
                ("ca.crt", ca.pem.clone()),
            ]
        }),
    ] {
        let dir = root.join("etc").join(dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        for (name, text) in files {
            std::fs::write(dir.join(name), text).expect("write");
        }
    }
    let https = || client_with_token(&ca, "the-admin-token");
    let (starting, data_dir) = daemon_as_the_pod(&mut ws, &root, &before);
    let daemon = starting.listening().over_https(https(), https());
    let blocks = json!([
        item("n1", "MARK_BLOCKED", "disk errors"),
        {"id": "n2", "action": "MARK_BLOCKED_AND_EVACUATE_TASKS", "cause": "ECC", "timeout": 3_600_000},
    ]);
    let (status, body) = daemon.post("/blocklist/nodes", blocks).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = daemon
        .post(
            "/blocklist/taskmanagers",
            json!([item("tm-1", "MARK_BLOCKED", "slow")]),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let listing = |body: &Value| {
        let mut items: Vec<(String, String, String)> = ["blockedNodes", "blockedTaskManagers"]
            .iter()
            .flat_map(|kind| body[*kind].as_array().cloned().unwrap_or_default())
            .map(|i| {
                (
                    i["id"].as_str().unwrap_or_default().to_owned(),
                    i["action"].as_str().unwrap_or_default().to_owned(),
                    i["endTimestamp"].to_string(),
                )
            })
            .collect();
        items.sort();
        items
    };
    let held = listing(&daemon.listing().await);
    assert_eq!(held.len(), 3, "{held:?}");
    // A rollout stops the pod with SIGTERM.
    assert!(daemon.terminate().success());

    // The next chart and binaries, and changed values: accepted (nothing immutable
    // changed), the same StatefulSet, the same claim template.
    let dir = tempfile::tempdir().expect("temp dir");
    let next = chart_at_version(dir.path(), "0.2.0");
    release(
        &helm,
        &kube,
        "upgrade",
        &next,
        &example,
        &[
            "resources.limits.memory=3Gi",
            "guardrails.maxBlockedNodesPercent=20",
            "logFormat=text",
        ],
    );
    let after = stored(&kube, "StatefulSet", RELEASE).expect("the StatefulSet");
    assert_eq!(
        after["metadata"]["uid"], before["metadata"]["uid"],
        "replaced"
    );
    assert_eq!(
        after["spec"]["volumeClaimTemplates"], before["spec"]["volumeClaimTemplates"],
        "the claim template changed"
    );
    assert_ne!(
        after["spec"]["template"], before["spec"]["template"],
        "the upgrade changed nothing the pods run"
    );
    assert!(after["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap()
        .ends_with(":0.2.0"));

    // The daemon as the upgraded pod runs it, on the same claim: every block, as it was.
    let (starting, data_dir_after) = daemon_as_the_pod(&mut ws, &root, &after);
    assert_eq!(data_dir_after, data_dir, "the data dir moved");
    let claim_mount = after["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == after["spec"]["volumeClaimTemplates"][0]["metadata"]["name"])
        .map(|m| m["mountPath"].clone());
    assert_eq!(claim_mount, Some(Value::String(data_dir.clone())));
    let daemon = starting.listening().over_https(https(), https());
    assert_eq!(listing(&daemon.listing().await), held);
}

/// Every flag and `BLOCKLIST_*` variable of the bridge's Deployment, as the production
/// example renders it (every flag the chart can pass), is one `blocklist-kube --help` knows.
#[test]
fn the_bridges_deployment_uses_only_flags_and_variables_it_knows() {
    let test = "the_bridges_deployment_uses_only_flags_and_variables_it_knows";
    let Some(objects) = rendered(Some("etcd-tls"), test) else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let deployment = object(&objects, "Deployment", "blocklistd-kube");
    let unknown = unknown_to_help(
        Path::new(env!("CARGO_BIN_EXE_blocklist-kube")),
        &object_file(dir.path(), deployment),
        12,
    );
    assert!(
        unknown.is_empty(),
        "unknown to `blocklist-kube --help`: {unknown:?}"
    );
}
