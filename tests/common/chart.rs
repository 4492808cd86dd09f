//! The Helm chart (`charts/blocklistd`) as Helm itself renders it: `helm` built from its Go
//! module (`tests/servers/helm-4.3`), its example values, and the objects `helm template`
//! makes of them, parsed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use super::{available, build_server, yaml_documents};

/// The release name and namespace the tests render and install the chart as (the kube test
/// server's token file names the bridge's service account `blocklist:blocklistd-kube`).
pub const RELEASE: &str = "blocklistd";
pub const NAMESPACE: &str = "blocklist";

/// The workspace's directory `charts/blocklistd`.
pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|dir| dir.join("charts/blocklistd"))
        .find(|path| path.join("Chart.yaml").exists())
        .expect("charts/blocklistd in the workspace")
}

/// A file of the chart (`files/alerts.yaml`, `values.schema.json`, …).
pub fn chart_file(name: &str) -> PathBuf {
    chart_dir().join(name)
}

/// The example values files (`charts/blocklistd/examples/*.yaml`), sorted.
pub fn examples() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(chart_dir().join("examples"))
        .expect("charts/blocklistd/examples")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "{files:?}");
    files
}

/// One example's file by its name (`etcd-tls`, `sled`, `dry-run`).
pub fn example(name: &str) -> PathBuf {
    let file = chart_dir().join("examples").join(format!("{name}.yaml"));
    assert!(file.exists(), "no example {}", file.display());
    file
}

/// The `helm` binary, built from its Go module if need be; `None` (after the skip-or-fail
/// rule) when it cannot be built here.
pub fn helm(test: &str) -> Option<PathBuf> {
    match build_server("helm-4.3") {
        Ok(dir) => Some(dir.join("helm")),
        Err(why) => {
            available(&why, false, test);
            None
        }
    }
}

/// `helm ARGS` with its state (caches, repositories, plugins) in a directory of its own,
/// so that nothing of the user's is read or written.
pub fn run_helm(helm: &Path, args: &[&str]) -> Output {
    let home = std::env::temp_dir().join("blocklistd-tests-helm");
    Command::new(helm)
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .expect("run helm")
}

/// `helm template` of the chart as [`RELEASE`] in [`NAMESPACE`] with the values files
/// `values` and `--set` pairs `sets`: the objects' YAML, or Helm's error.
pub fn render(helm: &Path, values: &[&Path], sets: &[&str]) -> Result<String, String> {
    let chart = chart_dir();
    let mut args = vec![
        "template".to_owned(),
        RELEASE.to_owned(),
        chart.display().to_string(),
        "--namespace".to_owned(),
        NAMESPACE.to_owned(),
    ];
    for file in values {
        args.extend(["--values".to_owned(), file.display().to_string()]);
    }
    for set in sets {
        args.extend(["--set".to_owned(), (*set).to_owned()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = run_helm(helm, &args);
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// The objects `helm template` makes of the example `name` (`None` for the defaults), as
/// JSON; `None` (after the skip-or-fail rule) without `helm` or `PyYAML`.
pub fn rendered(name: Option<&str>, test: &str) -> Option<Vec<Value>> {
    rendered_with(name, &[], test)
}

/// [`rendered`], with the `--set` pairs `sets` too.
pub fn rendered_with(name: Option<&str>, sets: &[&str], test: &str) -> Option<Vec<Value>> {
    let helm = helm(test)?;
    let values: Vec<PathBuf> = name.map(example).into_iter().collect();
    let values: Vec<&Path> = values.iter().map(PathBuf::as_path).collect();
    let text = render(&helm, &values, sets).unwrap_or_else(|e| panic!("helm template: {e}"));
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("rendered.yaml");
    std::fs::write(&file, text).expect("rendered.yaml");
    let documents = yaml_documents(&file, test)?;
    Some(documents.into_iter().filter(|d| !d.is_null()).collect())
}

/// The object of `kind` named `name` among `objects`.
pub fn object<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// Writes `object` as JSON into `dir`, for the checks that read a file
/// ([`super::unknown_to_help`]).
pub fn object_file(dir: &Path, object: &Value) -> PathBuf {
    let file = dir.join(format!(
        "{}-{}.json",
        object["kind"].as_str().unwrap_or("object"),
        object["metadata"]["name"].as_str().unwrap_or("unnamed")
    ));
    std::fs::write(&file, serde_json::to_string_pretty(object).expect("JSON")).expect("write");
    file
}
