//! One eviction through the Eviction API (`policy/v1`, `POST pods/{name}/eviction`), the
//! way `kubectl drain` asks: the API server deletes the pod with its own grace period
//! only if no PodDisruptionBudget forbids it now. The bridge never deletes a pod itself.
//!
//! The request names the pod's `uid` as a precondition: a pod of the same name made
//! since (a StatefulSet's, on another node) is not evicted for its predecessor.

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::json;

/// What the API server answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// 201: the pod is being deleted (with `--dry-run`: would be).
    Evicted,
    /// 429: a budget refuses it now (the server's message): try again later.
    BudgetRefused(String),
    /// 404, or 409 on the `uid` precondition: that pod is gone already.
    Gone,
    /// Anything else (the message): tried again later.
    Error(String),
}

impl Answer {
    /// The metric's `outcome` label.
    pub fn outcome(&self) -> &'static str {
        match self {
            Answer::Evicted => "evicted",
            Answer::BudgetRefused(_) => "budget-refused",
            Answer::Gone => "gone",
            Answer::Error(_) => "error",
        }
    }
}

/// Asks the API server to evict pod `namespace/name` (`uid`: only that pod).
pub async fn evict(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
    dry_run: bool,
) -> (Answer, Result<(), kube::Error>) {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut path = format!("{}/{name}/eviction", api.resource_url());
    if dry_run {
        path.push_str("?dryRun=All");
    }
    let mut body = json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    });
    if let Some(uid) = uid {
        body["deleteOptions"] = json!({"preconditions": {"uid": uid}});
    }
    let request = http::Request::post(path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(&body).expect("a JSON value serialises"))
        .expect("a valid request");
    let result = client.request::<serde_json::Value>(request).await;
    let answer = match &result {
        Ok(_) => Answer::Evicted,
        Err(kube::Error::Api(status)) if status.code == 429 => {
            Answer::BudgetRefused(status.message.clone())
        }
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Answer::Gone,
        Err(e) => Answer::Error(e.to_string()),
    };
    (answer, result.map(|_| ()))
}
