//! HTTP helpers: JSON requests to a running daemon and the pieces of their answers.

use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::Daemon;

impl Daemon {
    /// Waits until `/readyz` answers 200 (on etcd: this daemon is the writer and has loaded
    /// the blocklist, or a current replica), at most `limit`: how long it took, or the last
    /// readiness body.
    pub async fn ready_within(
        &self,
        limit: std::time::Duration,
    ) -> Result<std::time::Duration, Value> {
        self.readiness_within(limit, |_| true).await
    }

    /// Waits until `/readyz` says this daemon is the ready writer of its etcd prefix (a
    /// replica is ready too, as a replica), at most `limit`: how long it took, or the last
    /// readiness body.
    pub async fn writer_within(
        &self,
        limit: std::time::Duration,
    ) -> Result<std::time::Duration, Value> {
        self.readiness_within(limit, |body| body["etcd"] == "writer")
            .await
    }

    /// Waits until `/readyz` answers 200 with a body `wanted` accepts, at most `limit`.
    async fn readiness_within(
        &self,
        limit: std::time::Duration,
        wanted: impl Fn(&Value) -> bool,
    ) -> Result<std::time::Duration, Value> {
        let begun = std::time::Instant::now();
        loop {
            let (status, body) = self.get("/readyz").await;
            if status == StatusCode::OK && wanted(&body) {
                return Ok(begun.elapsed());
            }
            if begun.elapsed() >= limit {
                return Err(body);
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// The body of `GET /blocklist/export`, which must answer 200: the store as JSON lines.
    pub async fn export(&self) -> String {
        let response = self
            .client
            .get(self.url("/blocklist/export"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "GET /blocklist/export");
        response.text().await.unwrap()
    }

    /// Sends a request with an optional JSON body; returns status and parsed body
    /// (`Value::Null` when empty).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        read(self.send(method, path, body).await).await
    }

    /// Sends a request with an optional JSON body and returns the raw response.
    pub async fn send(&self, method: Method, path: &str, body: Option<Value>) -> reqwest::Response {
        let mut req = self.client.request(method, self.url(path));
        if let Some(body) = body {
            req = req.json(&body);
        }
        req.send().await.expect("request")
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::DELETE, path, None).await
    }

    /// Sends raw bytes with a given content type.
    pub async fn post_raw(
        &self,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> (StatusCode, Value) {
        let resp = self
            .client
            .post(self.url(path))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .expect("request");
        read(resp).await
    }

    /// The whole blocklist as `GET /blocklist` returns it.
    pub async fn listing(&self) -> Value {
        let (status, body) = self.get("/blocklist").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    /// The revision `GET /blocklist` reports: every change committed before it.
    pub async fn revision(&self) -> u64 {
        self.listing().await["revision"].as_u64().unwrap()
    }
}

pub async fn read(resp: reqwest::Response) -> (StatusCode, Value) {
    let status = resp.status();
    let bytes = resp.bytes().await.expect("body");
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            panic!(
                "response is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&bytes)
            )
        })
    };
    (status, body)
}

/// The `X-Blocklist-Revision` header of a response.
pub async fn revision_of(
    d: &Daemon,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, u64) {
    let resp = d.send(method, path, body).await;
    let status = resp.status();
    let revision = resp
        .headers()
        .get("x-blocklist-revision")
        .unwrap_or_else(|| panic!("no revision header on {path} ({status})"))
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    (status, revision)
}

/// A request with extra headers: its status, headers and JSON body (`Null` when empty).
pub async fn request(
    d: &Daemon,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    let mut req = d.client.request(method, d.url(path));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.bytes().await.expect("body");
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).expect("a JSON body")
    };
    (status, headers, body)
}

/// An add element.
pub fn item(id: &str, action: &str, cause: &str) -> Value {
    serde_json::json!({"id": id, "action": action, "cause": cause})
}

/// Ids of a listing array, in order.
pub fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .expect("an array")
        .iter()
        .map(|i| i["id"].as_str().expect("an id").to_owned())
        .collect()
}

/// Percent-encodes an id for a path segment (everything but unreserved characters).
pub fn enc(id: &str) -> String {
    const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(id, SEGMENT).to_string()
}
