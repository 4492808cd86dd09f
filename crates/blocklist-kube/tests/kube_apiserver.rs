//! The kube-apiserver harness itself (`tests/common/kube.rs`): the real API server starts
//! on an etcd of its own, stores a Node, keeps it across a restart, and refuses a caller
//! it does not know.

#[path = "../../../tests/common/mod.rs"]
mod common;

use common::*;

#[test]
fn the_api_server_stores_a_node_and_keeps_it_across_a_restart() {
    let Some(mut server) = KubeApiServer::start("kube_apiserver harness") else {
        return;
    };
    let node = r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"}}"#;
    let created = server
        .curl(&[
            "-sf",
            "-XPOST",
            "-H",
            "Content-Type: application/json",
            "-d",
            node,
            &format!("{}/api/v1/nodes", server.url),
        ])
        .unwrap_or_else(|| panic!("creating a Node failed:\n{}", server.log_text()));
    let name = |text: &str| -> serde_json::Value {
        serde_json::from_str::<serde_json::Value>(text).expect("JSON")["metadata"]["name"].clone()
    };
    assert_eq!(name(&created), "n1", "{created}");
    server.restart();
    let read = server
        .curl(&["-sf", &format!("{}/api/v1/nodes/n1", server.url)])
        .expect("the Node after a restart");
    assert_eq!(name(&read), "n1", "{read}");
    let stranger = std::process::Command::new("curl")
        .arg("--cacert")
        .arg(&server.ca_file)
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
        .args(["-H", "Authorization: Bearer nobody"])
        .arg(format!("{}/api/v1/nodes", server.url))
        .output()
        .expect("curl");
    assert_eq!(String::from_utf8_lossy(&stranger.stdout), "401");
}
