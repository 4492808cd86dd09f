//! The deployments are what they say: the systemd unit (`docs/deploy/blocklistd.service`)
//! passes `systemd-analyze verify`; the Helm chart (`charts/blocklistd`), rendered by a real
//! `helm template`, makes the objects its README promises — for the production example, a
//! StatefulSet of three spread replicas probed over https on `/readyz` and `/healthz`, each
//! advertising its stable name of the headless Service, a Service for clients, a disruption
//! budget, every certificate, key and CA from the Secrets it documents, etcd over TLS; for
//! the sled example, the store on a claim the release's upgrades and removal keep — its
//! certificates name every host the daemons are reached at, by each other, by the bridge and
//! by Prometheus; its `PrometheusRule` holds the rules of `files/alerts.yaml`; it makes no
//! Secret (tokens are the operator's); and every flag and `BLOCKLISTD_*` variable the unit
//! or the chart uses is one `blocklistd --help` knows.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use common::*;
use serde_json::Value;

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

fn all_of_kind<'a>(documents: &'a [Value], kind: &str) -> Vec<&'a Value> {
    documents.iter().filter(|d| d["kind"] == kind).collect()
}

fn of_kind<'a>(documents: &'a [Value], kind: &str) -> &'a Value {
    documents
        .iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} among {documents:?}"))
}

fn named<'a>(documents: &'a [Value], kind: &str, name: &str) -> &'a Value {
    documents
        .iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {value}"))
        .iter()
        .map(|v| {
            v.as_str()
                .unwrap_or_else(|| panic!("not a string: {v}"))
                .to_owned()
        })
        .collect()
}

/// Each `--flag value` of `args` (every flag the chart passes the daemons takes a value).
fn flag_values(args: &[String]) -> BTreeMap<String, String> {
    let mut values = BTreeMap::new();
    for (i, arg) in args.iter().enumerate() {
        if arg.starts_with("--") {
            let value = args
                .get(i + 1)
                .filter(|v| !v.starts_with("--"))
                .unwrap_or_else(|| panic!("{arg} without a value: {args:?}"));
            values.insert(arg.clone(), value.clone());
        }
    }
    values
}

/// The environment variables of `container` that have a value.
fn env_values(container: &Value) -> BTreeMap<String, String> {
    container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?.to_owned(),
                e["value"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// Where the file at `path` in `container` of `pod` comes from: `(kind, name, key)` of the
/// `Secret` or `ConfigMap` whose volume holds it.
fn mounted(pod: &Value, container: &Value, path: &str) -> Option<(String, String, String)> {
    container["volumeMounts"]
        .as_array()?
        .iter()
        .find_map(|mount| {
            let dir = mount["mountPath"].as_str()?;
            let file = path.strip_prefix(dir)?.strip_prefix('/')?;
            let volume = pod["volumes"]
                .as_array()?
                .iter()
                .find(|v| v["name"] == mount["name"])?;
            let (kind, source) = if volume["secret"].is_object() {
                ("Secret", &volume["secret"])
            } else {
                ("ConfigMap", &volume["configMap"])
            };
            let name = source["secretName"]
                .as_str()
                .or_else(|| source["name"].as_str())?;
            let key = match source["items"].as_array() {
                Some(items) => items.iter().find(|item| item["path"] == file)?["key"]
                    .as_str()?
                    .to_owned(),
                None => file.to_owned(),
            };
            Some((kind.to_owned(), name.to_owned(), key))
        })
}

/// Whether a certificate's DNS name `pattern` (`*.` for one label) covers `host`.
fn covers(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(rest) => host
            .split_once('.')
            .is_some_and(|(label, tail)| !label.is_empty() && tail == rest),
        None => pattern == host,
    }
}

/// The parts of `https://host:port/...`.
fn host_and_port(url: &str) -> (String, u64) {
    let rest = url
        .strip_prefix("https://")
        .unwrap_or_else(|| panic!("not https: {url}"));
    let authority = rest.split('/').next().unwrap();
    let (host, port) = authority.rsplit_once(':').expect("a port");
    (host.to_owned(), port.parse().expect("a port number"))
}

/// The daemons' StatefulSet: its pod's spec, and its one container.
fn daemon_pod(documents: &[Value]) -> (&Value, &Value) {
    let pod = &of_kind(documents, "StatefulSet")["spec"]["template"]["spec"];
    (pod, &pod["containers"][0])
}

/// A Deployment's pod spec and its one container.
fn deployment_pod<'a>(documents: &'a [Value], name: &str) -> (&'a Value, &'a Value) {
    let pod = &named(documents, "Deployment", name)["spec"]["template"]["spec"];
    (pod, &pod["containers"][0])
}

#[test]
fn the_production_example_runs_three_spread_replicas_over_tls_with_known_flags() {
    let test = "the_production_example_runs_three_spread_replicas_over_tls_with_known_flags";
    let Some(documents) = rendered(Some("etcd-tls"), test) else {
        return;
    };
    let certificates = &documents;
    assert!(
        all_of_kind(&documents, "Deployment")
            .iter()
            .all(
                |d| d["spec"]["template"]["spec"]["containers"][0]["command"][0]
                    != "/usr/local/bin/blocklistd"
            ),
        "the daemons are a StatefulSet"
    );
    // Tokens are the operator's Secrets, never values the chart writes out.
    assert!(all_of_kind(&documents, "Secret").is_empty());
    let set = of_kind(&documents, "StatefulSet");
    let spec = &set["spec"];
    assert_eq!(spec["replicas"], 3);
    assert_eq!(spec["updateStrategy"]["type"], "RollingUpdate");
    // The selector's labels, which the pods carry (with others that may change).
    let labels = &spec["selector"]["matchLabels"];
    let pod_labels = &spec["template"]["metadata"]["labels"];
    for (key, value) in labels.as_object().expect("matchLabels") {
        assert_eq!(&pod_labels[key], value, "the pods' {key}");
    }
    let (pod, container) = daemon_pod(&documents);
    let spread: Vec<&Value> = pod["topologySpreadConstraints"]
        .as_array()
        .expect("topology spread")
        .iter()
        .collect();
    assert!(
        spread
            .iter()
            .any(|c| c["topologyKey"] == "kubernetes.io/hostname"
                && c["whenUnsatisfiable"] == "DoNotSchedule"
                && &c["labelSelector"]["matchLabels"] == labels),
        "one pod per node: {spread:?}"
    );

    // One port, https: the probes use it with their https scheme.
    let ports = container["ports"].as_array().expect("ports");
    assert_eq!(ports.len(), 1, "{ports:?}");
    let port_name = ports[0]["name"].as_str().unwrap();
    let port = ports[0]["containerPort"].as_u64().unwrap();
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        assert_eq!(
            get["scheme"], "HTTPS",
            "{probe}: the port speaks https only"
        );
        assert_eq!(get["port"], port_name, "{probe}");
    }

    let args: Vec<String> = strings(&container["args"]);
    let flags = flag_values(&args);
    let env = env_values(container);
    assert_eq!(flags["--store"], "etcd");
    assert_eq!(flags["--listen"], format!("0.0.0.0:{port}"));

    // The https scheme everywhere: no URL of the daemon's settings is plain.
    for value in args.iter().chain(env.values()) {
        assert!(!value.contains("http://"), "plain HTTP: {value}");
    }
    let endpoints = &env["BLOCKLISTD_ETCD_ENDPOINTS"];
    assert!(
        endpoints.split(',').all(|e| e.starts_with("https://")),
        "etcd over TLS: {endpoints}"
    );

    // Each pod advertises its stable name: `<pod>.<headless Service>.<namespace>.svc`,
    // the Service the StatefulSet names, which publishes the pods before they are ready.
    let headless = named(&documents, "Service", spec["serviceName"].as_str().unwrap());
    assert_eq!(headless["spec"]["clusterIP"], "None");
    assert_eq!(headless["spec"]["publishNotReadyAddresses"], true);
    assert_eq!(&headless["spec"]["selector"], labels);
    assert_eq!(headless["spec"]["ports"][0]["port"], port);
    let field = |name: &str| {
        container["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .map(|e| e["valueFrom"]["fieldRef"]["fieldPath"].clone())
    };
    assert_eq!(field("POD_NAME"), Some("metadata.name".into()));
    assert_eq!(field("POD_NAMESPACE"), Some("metadata.namespace".into()));
    assert_eq!(
        flags["--advertise-url"],
        format!(
            "https://$(POD_NAME).{}.$(POD_NAMESPACE).svc:{port}",
            spec["serviceName"].as_str().unwrap()
        )
    );

    // The clients' Service: the same pods, the same port (ready ones only).
    let clients: Vec<&Value> = all_of_kind(&documents, "Service")
        .into_iter()
        .filter(|s| s["spec"]["clusterIP"] != "None")
        .collect();
    assert_eq!(clients.len(), 1, "{clients:?}");
    assert_eq!(&clients[0]["spec"]["selector"], labels);
    assert_eq!(clients[0]["spec"]["ports"][0]["targetPort"], port_name);
    assert_ne!(clients[0]["spec"]["publishNotReadyAddresses"], true);
    let budget = named(
        &documents,
        "PodDisruptionBudget",
        set["metadata"]["name"].as_str().unwrap(),
    );
    assert_eq!(&budget["spec"]["selector"]["matchLabels"], labels);
    assert_eq!(budget["spec"]["maxUnavailable"], 1);

    // Every file a flag names is a key of a Secret or ConfigMap mounted as a directory
    // (the kubelet renews a Secret's files only so), and every mounted key is a flag's.
    let mounts = container["volumeMounts"].as_array().unwrap();
    assert!(
        mounts.iter().all(|m| m.get("subPath").is_none()),
        "{mounts:?}"
    );
    let source = |flag: &str| {
        let path = flags
            .get(flag)
            .unwrap_or_else(|| panic!("no {flag}: {args:?}"));
        mounted(pod, container, path).unwrap_or_else(|| panic!("{flag} {path}: not mounted"))
    };
    let tokens = source("--token-file");
    assert_eq!(
        (tokens.0.as_str(), tokens.1.as_str(), tokens.2.as_str()),
        ("Secret", "blocklistd-tokens", "tokens"),
        "the token file is the example's tokens.existingSecret"
    );
    // The daemons' certificate, key and peer CA: one kubernetes.io/tls Secret.
    let (cert, key, peer_ca) = (
        source("--tls-cert"),
        source("--tls-key"),
        source("--tls-peer-ca"),
    );
    assert_eq!((cert.0.as_str(), cert.2.as_str()), ("Secret", "tls.crt"));
    assert_eq!((&key.1, key.2.as_str()), (&cert.1, "tls.key"));
    assert_eq!((&peer_ca.1, peer_ca.2.as_str()), (&cert.1, "ca.crt"));
    // etcd's: the client certificate and key from one Secret, etcd's CA beside them.
    let (etcd_cert, etcd_key, etcd_ca) = (
        source("--etcd-cert"),
        source("--etcd-key"),
        source("--etcd-cacert"),
    );
    assert_eq!(
        (etcd_cert.0.as_str(), etcd_cert.2.as_str()),
        ("Secret", "tls.crt")
    );
    assert_eq!(
        (&etcd_key.1, etcd_key.2.as_str()),
        (&etcd_cert.1, "tls.key")
    );
    assert_eq!(etcd_ca.2, "ca.crt");
    // The certificates' Secrets are cert-manager's, from the chart's Certificates.
    for made in [&cert.1, &etcd_cert.1] {
        assert!(
            all_of_kind(certificates, "Certificate")
                .iter()
                .any(|c| c["spec"]["secretName"] == made.as_str()),
            "no Certificate makes the Secret {made}"
        );
    }
    let used: BTreeSet<(String, String)> = [
        &tokens, &cert, &key, &peer_ca, &etcd_cert, &etcd_key, &etcd_ca,
    ]
    .iter()
    .map(|(_, name, key)| (name.clone(), key.clone()))
    .collect();
    for volume in pod["volumes"].as_array().unwrap() {
        let source = if volume["secret"].is_object() {
            &volume["secret"]
        } else {
            &volume["configMap"]
        };
        let Some(name) = source["secretName"].as_str().or(source["name"].as_str()) else {
            continue;
        };
        for item in source["items"].as_array().expect("items, each named") {
            let key = item["key"].as_str().unwrap().to_owned();
            assert!(
                used.contains(&(name.to_owned(), key.clone())),
                "{name} {key} is mounted but no flag reads it"
            );
        }
    }

    let flag_names: Vec<String> = flags.keys().cloned().collect();
    let variables: Vec<String> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .filter(|name| name.starts_with("BLOCKLISTD_"))
        .map(str::to_owned)
        .collect();
    assert_known("the chart's StatefulSet", &flag_names, &variables);
}

/// The daemons' certificate names every host they are reached at — each pod's advertised
/// name, the Service the bridge uses, the name Prometheus verifies — and serves both ends
/// of a request sent on; the bridge and Prometheus verify it with the daemons' CA; the
/// etcd client certificate is one for clients.
#[test]
fn the_certificates_name_every_host_the_daemons_are_reached_at() {
    let test = "the_certificates_name_every_host_the_daemons_are_reached_at";
    let Some(documents) = rendered(Some("etcd-tls"), test) else {
        return;
    };
    let (daemons, certificates, bridge, monitoring) =
        (&documents, &documents, &documents, &documents);
    let binding = of_kind(bridge, "ClusterRoleBinding");
    assert_eq!(binding["subjects"][0]["namespace"], NAMESPACE);
    let (pod, container) = daemon_pod(daemons);
    let flags = flag_values(&strings(&container["args"]));
    let (_, tls_secret, _) = mounted(pod, container, &flags["--tls-cert"]).unwrap();
    let certificate = all_of_kind(certificates, "Certificate")
        .into_iter()
        .find(|c| c["spec"]["secretName"] == tls_secret.as_str())
        .expect("the daemons' Certificate");
    let names = strings(&certificate["spec"]["dnsNames"]);
    let named_host = |host: &str| {
        assert!(
            names.iter().any(|n| covers(n, host)),
            "the daemons' certificate does not name {host}: {names:?}"
        );
    };
    let set = of_kind(daemons, "StatefulSet");
    for ordinal in 0..set["spec"]["replicas"].as_u64().unwrap() {
        let pod_name = format!("{}-{ordinal}", set["metadata"]["name"].as_str().unwrap());
        let url = flags["--advertise-url"]
            .replace("$(POD_NAME)", &pod_name)
            .replace("$(POD_NAMESPACE)", NAMESPACE);
        named_host(&host_and_port(&url).0);
    }
    let usages = strings(&certificate["spec"]["usages"]);
    for usage in ["server auth", "client auth"] {
        assert!(usages.contains(&usage.to_owned()), "{usages:?}");
    }
    // Its issuer is a CA the chart makes, the daemons' own.
    let issuer = named(
        certificates,
        "Issuer",
        certificate["spec"]["issuerRef"]["name"].as_str().unwrap(),
    );
    let ca = all_of_kind(certificates, "Certificate")
        .into_iter()
        .find(|c| c["spec"]["secretName"] == issuer["spec"]["ca"]["secretName"])
        .expect("the daemons' CA made here");
    assert_eq!(ca["spec"]["isCA"], true);

    // The bridge: https to the clients' Service under a name the certificate holds,
    // verified with the daemons' CA.
    let clients = all_of_kind(daemons, "Service")
        .into_iter()
        .find(|s| s["spec"]["clusterIP"] != "None")
        .expect("the clients' Service");
    let (bridge_pod, bridge_container) = deployment_pod(bridge, "blocklistd-kube");
    let env = env_values(bridge_container);
    let bridge_flags = flag_values(&strings(&bridge_container["args"]));
    for url in bridge_flags["--daemon"].split(',') {
        let (host, port) = host_and_port(url);
        named_host(&host);
        let service = host.split('.').next().unwrap();
        assert_eq!(service, clients["metadata"]["name"], "{url}");
        assert_eq!(port, clients["spec"]["ports"][0]["port"].as_u64().unwrap());
    }
    assert_eq!(
        mounted(bridge_pod, bridge_container, &env["BLOCKLIST_CACERT"]),
        Some(("Secret".into(), tls_secret.clone(), "ca.crt".into())),
        "the bridge verifies the daemons with their CA"
    );

    // Prometheus: the daemons' https port, their CA, a name the certificate holds.
    let monitor = named(monitoring, "PodMonitor", "blocklistd");
    assert_eq!(monitor["spec"]["jobLabel"], "app.kubernetes.io/name");
    assert_eq!(
        monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"], "blocklistd",
        "the alerts select job=\"blocklistd\""
    );
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["port"], container["ports"][0]["name"]);
    assert_eq!(endpoint["scheme"], "https");
    let ca_ref = &endpoint["tlsConfig"]["ca"]["secret"];
    assert_eq!(ca_ref["name"], tls_secret.as_str());
    assert_eq!(ca_ref["key"], "ca.crt");
    named_host(endpoint["tlsConfig"]["serverName"].as_str().unwrap());
    assert_eq!(
        &monitor["spec"]["selector"]["matchLabels"],
        &of_kind(daemons, "StatefulSet")["spec"]["selector"]["matchLabels"]
    );
    for (monitor, job) in [
        ("blocklistd-kube", "blocklist-kube"),
        ("blocklistd-flink", "blocklist-flink"),
    ] {
        let monitor = named(monitoring, "PodMonitor", monitor);
        assert_eq!(monitor["spec"]["jobLabel"], "app.kubernetes.io/name");
        assert_eq!(
            monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"], job,
            "the alerts select job=\"{job}\""
        );
        let (_, container) = deployment_pod(bridge, monitor["metadata"]["name"].as_str().unwrap());
        assert_eq!(
            monitor["spec"]["podMetricsEndpoints"][0]["port"],
            container["ports"][0]["name"]
        );
    }

    // etcd's client certificate: for clients, its CN the etcd user.
    let (_, etcd_secret, _) = mounted(pod, container, &flags["--etcd-cert"]).unwrap();
    let etcd = all_of_kind(certificates, "Certificate")
        .into_iter()
        .find(|c| c["spec"]["secretName"] == etcd_secret.as_str())
        .expect("the etcd client Certificate");
    assert!(strings(&etcd["spec"]["usages"]).contains(&"client auth".to_owned()));
    assert!(etcd["spec"]["commonName"].is_string());
}

/// The chart's `PrometheusRule` holds exactly the groups of `files/alerts.yaml`, the rule
/// file `promtool` checks and tests.
#[test]
fn the_prometheus_rule_holds_the_rules_of_alerts_yaml() {
    let test = "the_prometheus_rule_holds_the_rules_of_alerts_yaml";
    let Some(monitoring) = rendered(Some("etcd-tls"), test) else {
        return;
    };
    let rule = of_kind(&monitoring, "PrometheusRule");
    let alerts = yaml_documents(&chart_file("files/alerts.yaml"), test).unwrap();
    assert_eq!(alerts.len(), 1, "alerts.yaml: one document");
    let groups = alerts[0]["groups"].as_array().expect("alerts.yaml: groups");
    assert!(!groups.is_empty(), "alerts.yaml: no groups");
    assert!(
        rule["spec"]["groups"] == alerts[0]["groups"],
        "the chart's PrometheusRule is not files/alerts.yaml"
    );
    // Without the bridge and the watcher, only the daemons' group: the others' absence
    // alerts would fire for ever.
    let Some(alone) = rendered_with(
        None,
        &[
            "monitoring.prometheusRule.enabled=true",
            "bridge.enabled=false",
        ],
        test,
    ) else {
        return;
    };
    let names: Vec<&Value> = of_kind(&alone, "PrometheusRule")["spec"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| &g["name"])
        .collect();
    assert_eq!(names, ["blocklistd"]);
}

/// The sled example keeps its store where upgrades, scaling and removal leave it: one
/// daemon (sled is one process's database), its `--data-dir` the mount of the StatefulSet's
/// `data` claim template, retained when the release goes or scales down, the template's
/// labels only the selector's (a claim template is immutable: a label that changes with
/// the chart's version would make every upgrade fail); TLS from the example's Secret.
#[test]
fn the_sled_example_keeps_its_store_on_a_claim_the_release_never_drops() {
    let test = "the_sled_example_keeps_its_store_on_a_claim_the_release_never_drops";
    let Some(documents) = rendered(Some("sled"), test) else {
        return;
    };
    let set = of_kind(&documents, "StatefulSet");
    assert_eq!(set["spec"]["replicas"], 1);
    let (pod, container) = daemon_pod(&documents);
    let flags = flag_values(&strings(&container["args"]));
    assert_eq!(flags["--store"], "sled");
    assert!(!flags.contains_key("--advertise-url"), "{flags:?}");
    assert!(
        !flags.keys().any(|f| f.starts_with("--etcd")),
        "etcd flags on sled: {flags:?}"
    );
    let claims = set["spec"]["volumeClaimTemplates"]
        .as_array()
        .expect("a claim template");
    assert_eq!(claims.len(), 1, "{claims:?}");
    let claim = &claims[0];
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == claim["metadata"]["name"])
        .expect("the claim mounted");
    assert_eq!(mount["mountPath"], flags["--data-dir"].as_str());
    assert_ne!(mount["readOnly"], true);
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "20Gi");
    assert_eq!(claim["spec"]["storageClassName"], "standard");
    assert_eq!(
        &claim["metadata"]["labels"], &set["spec"]["selector"]["matchLabels"],
        "the claim template's labels are the selector's alone"
    );
    let retention = &set["spec"]["persistentVolumeClaimRetentionPolicy"];
    assert_eq!(retention["whenDeleted"], "Retain");
    assert_eq!(retention["whenScaled"], "Retain");
    // The example's own Secret, no cert-manager object.
    assert_eq!(
        mounted(pod, container, &flags["--tls-cert"]),
        Some(("Secret".into(), "blocklistd-tls".into(), "tls.crt".into()))
    );
    assert!(all_of_kind(&documents, "Certificate").is_empty());
    assert!(all_of_kind(&documents, "Issuer").is_empty());
    let flag_names: Vec<String> = flags.keys().cloned().collect();
    let variables: Vec<String> = env_values(container)
        .into_keys()
        .filter(|name| name.starts_with("BLOCKLISTD_"))
        .collect();
    assert_known("the sled example's StatefulSet", &flag_names, &variables);
}

/// Every guardrail the chart takes becomes its flag (`maxBlockedNodesPercent`:
/// `--max-blocked-nodes-percent`), one `blocklistd --help` knows: each of
/// `values.schema.json`'s `guardrails` set at once.
#[test]
fn every_guardrail_value_is_a_flag_blocklistd_knows() {
    let test = "every_guardrail_value_is_a_flag_blocklistd_knows";
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(chart_file("values.schema.json")).expect("the schema"),
    )
    .expect("JSON");
    let names: Vec<&String> = schema["properties"]["guardrails"]["properties"]
        .as_object()
        .expect("guardrails")
        .keys()
        .collect();
    assert!(names.len() >= 13, "{names:?}");
    let sets: Vec<String> = names
        .iter()
        .map(|name| {
            let value = if *name == "permanentBlocks" {
                "forbidden"
            } else {
                "1"
            };
            format!("guardrails.{name}={value}")
        })
        .collect();
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    let Some(documents) = rendered_with(None, &sets, test) else {
        return;
    };
    let (_, container) = daemon_pod(&documents);
    let flags = flag_values(&strings(&container["args"]));
    for name in &names {
        let flag = name.chars().fold("--".to_owned(), |mut flag, c| {
            if c.is_ascii_uppercase() {
                flag.push('-');
            }
            flag.push(c.to_ascii_lowercase());
            flag
        });
        assert!(
            flags.contains_key(&flag),
            "guardrails.{name}: no {flag} in {flags:?}"
        );
    }
    let flag_names: Vec<String> = flags.into_keys().collect();
    assert_known(
        "the guardrails' flags",
        &flag_names,
        &["BLOCKLISTD_SHUTDOWN_TIMEOUT".into()],
    );
}
