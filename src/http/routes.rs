//! The list of every route the router serves, kept by hand (see [`ROUTES`]): the
//! `OpenAPI` check and the request timing's labels read it.

/// Every (method, path) the router serves, besides the implicit HEAD of each GET. Kept by
/// hand because an axum `Router` cannot list its routes: a unit test checks that the `OpenAPI`
/// document names exactly these, and `tests/openapi.rs` that the running daemon serves them
/// (and no other method on their paths). Add a route here when you add it to a resource's
/// router.
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/blocklist"),
    ("GET", "/blocklist/export"),
    ("GET", "/blocklist/taskmanagers"),
    ("POST", "/blocklist/taskmanagers"),
    ("DELETE", "/blocklist/taskmanagers"),
    ("GET", "/blocklist/taskmanagers/{id}"),
    ("DELETE", "/blocklist/taskmanagers/{id}"),
    ("PATCH", "/blocklist/taskmanagers/{id}"),
    ("GET", "/blocklist/taskmanagers/{id}/history"),
    ("GET", "/blocklist/nodes"),
    ("POST", "/blocklist/nodes"),
    ("DELETE", "/blocklist/nodes"),
    ("GET", "/blocklist/nodes/{id}"),
    ("DELETE", "/blocklist/nodes/{id}"),
    ("PATCH", "/blocklist/nodes/{id}"),
    ("GET", "/blocklist/nodes/{id}/history"),
    ("POST", "/blocklist/retract/taskmanagers"),
    ("POST", "/blocklist/retract/nodes"),
    ("POST", "/webhooks/alertmanager"),
    ("POST", "/blocklist/check"),
    ("GET", "/blocklist/check/taskmanagers/{id}"),
    ("GET", "/blocklist/check/nodes/{id}"),
    ("GET", "/blocklist/events"),
    ("GET", "/policy"),
    ("PUT", "/policy"),
    ("GET", "/policy/status"),
    ("GET", "/allowlist"),
    ("GET", "/allowlist/{kind}"),
    ("GET", "/allowlist/{kind}/{id}"),
    ("PUT", "/allowlist/{kind}/{id}"),
    ("DELETE", "/allowlist/{kind}/{id}"),
    ("GET", "/taskmanagers"),
    ("PUT", "/taskmanagers"),
    ("GET", "/taskmanagers/{id}"),
    ("PUT", "/taskmanagers/{id}"),
    ("DELETE", "/taskmanagers/{id}"),
    ("GET", "/enforcement"),
    ("PUT", "/enforcement/{enforcer}"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
    ("GET", "/openapi.json"),
];

/// The path of Alertmanager's webhook receiver (`super::alertmanager`).
pub const ALERTMANAGER_WEBHOOK: &str = "/webhooks/alertmanager";

/// Whether a POST to `path` is one a `detector` token may send: a report, a retraction, an
/// alert (the handlers fix the source to the token's name).
pub fn is_detector_route(path: &str) -> bool {
    matches!(
        path,
        "/blocklist/taskmanagers"
            | "/blocklist/nodes"
            | "/blocklist/retract/taskmanagers"
            | "/blocklist/retract/nodes"
            | ALERTMANAGER_WEBHOOK
    )
}
