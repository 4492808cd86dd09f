//! What the cluster's machinery asks: probes and metrics (the per-request measurements
//! behind them are [`super::observe`]).

use axum::extract::State;
use axum::http::header::{ACCEPT, CONTENT_TYPE, VARY};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::ToSchema;

use super::error::{Result, Unavailable};
use super::state::AppState;
use crate::metrics::Exposition;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
}

/// Liveness: always `{"status": "ok"}` while the process answers.
#[derive(Serialize, ToSchema)]
pub(super) struct Health {
    #[schema(pattern = "^ok$")]
    status: &'static str,
}

/// Liveness: the process answers
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    responses((status = 200, description = "Alive", body = Health)),
)]
pub(super) async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// Readiness of the store, its committer and the sweeper.
#[derive(Serialize, ToSchema)]
pub(super) struct Readiness {
    /// `ready` when the store is open, the committer and the sweeper run and (on etcd)
    /// this daemon is the writer, else `not ready`.
    #[schema(schema_with = ready_status)]
    status: &'static str,
    /// `open`, `reopening` for the moments after a storage error (reads and writes
    /// answer 503 meanwhile), or, on etcd, `replica` while another daemon writes the prefix
    /// and this one follows it, serving reads and sending writes on to the writer.
    #[schema(pattern = "^(open|reopening|replica)$")]
    store: &'static str,
    /// `running` or `stopped`; `none` on a replica (the writer's runs).
    committer: &'static str,
    /// `running` or `stopped`; `none` on a replica (the writer's runs).
    sweeper: &'static str,
    /// The current revision.
    revision: u64,
    /// With `--store etcd` only: `writer` while this daemon holds the prefix's writer key,
    /// `not the writer` while it is trying to win it back (a lease that ended: it answers
    /// 503), or, while etcd refuses its writes for a reason only an operator can clear
    /// (its NOSPACE alarm), what to do — reads are served then, and the status stays
    /// `ready`, since no other daemon could write either.
    /// On a replica, `replica` while it is current (etcd answers, and its watch of the
    /// prefix has applied every acknowledged write within a bound), else `replica, not
    /// current` with `reason`.
    #[serde(skip_serializing_if = "Option::is_none")]
    etcd: Option<&'static str>,
    /// Why a replica is not ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// With `--store etcd` only: each member's etcd version by endpoint, as last read
    /// (when the daemon started, and every 10 s since); `unknown` while a member has not
    /// answered.
    #[serde(rename = "etcdVersions", skip_serializing_if = "Option::is_none")]
    etcd_versions: Option<std::collections::BTreeMap<String, String>>,
    /// Present when an etcd member runs a release without etcd's fixes for linearizable
    /// reads and the watch (older than 3.4.42, 3.5.28, 3.6.9): which, what is at risk, and
    /// what to do. It does not make the daemon not ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    warning: Option<String>,
}

/// The etcd members' versions for [`Readiness`], and the warning when one lacks the fixes.
fn etcd_versions(
    standing: Option<&crate::store::EtcdStanding>,
) -> (
    Option<std::collections::BTreeMap<String, String>>,
    Option<String>,
) {
    let Some(standing) = standing else {
        return (None, None);
    };
    let versions = standing
        .member_versions
        .iter()
        .map(|(member, version, _)| {
            let version = version.clone().unwrap_or_else(|| "unknown".to_owned());
            (member.clone(), version)
        })
        .collect();
    (Some(versions), standing.version_warning.clone())
}

fn ready_status() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["ready", "not ready"]))
        .description(Some(
            "`ready` when the store is open, the committer and the sweeper run and (on etcd) \
             this daemon is the writer, or a replica that is current; else `not ready`",
        ))
        .into()
}

/// Readiness: the store is open, its committer and sweeper run, and on etcd it is the writer or a current replica
///
/// Migrations ran before the listener opened.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    responses(
        (status = 200, description = "Ready", body = Readiness),
        (status = 503, description = "Not ready: the store is being reopened, the committer or the sweeper stopped, or (on etcd) this daemon is a writer whose lease ended or a replica that cannot confirm it is current", body = Readiness),
    ),
)]
pub(super) async fn readyz(State(state): State<AppState>) -> Response {
    if state.store.is_replica() {
        return replica_readyz(&state).await;
    }
    let committer = state.store.committer_alive();
    let sweeper = state.sweeper.as_ref().is_some_and(|s| !s.is_finished());
    let open = state.store.is_open();
    let etcd = state.store.etcd_standing();
    let writer = etcd.as_ref().is_none_or(|etcd| etcd.writer);
    let ready = committer && sweeper && open && writer;
    let (etcd_versions, warning) = etcd_versions(etcd.as_ref());
    let readiness = Readiness {
        status: if ready { "ready" } else { "not ready" },
        store: if open { "open" } else { "reopening" },
        committer: if committer { "running" } else { "stopped" },
        sweeper: if sweeper { "running" } else { "stopped" },
        revision: state.store.revision(),
        etcd: etcd.map(|etcd| match (etcd.writer, etcd.refusal) {
            (true, Some(refusal)) => refusal,
            (true, None) => "writer",
            (false, _) => "not the writer",
        }),
        reason: None,
        etcd_versions,
        warning,
    };
    readiness.into_response()
}

/// How long a replica's readiness probe waits to confirm it is current: less than a
/// probe's usual timeout (Kubernetes' default is 1 s).
const REPLICA_READY_WITHIN: std::time::Duration = std::time::Duration::from_millis(900);

/// A replica is ready when it can serve linearizable reads: etcd answers (it has quorum)
/// and its watch has applied the log as far as etcd has it.
async fn replica_readyz(state: &AppState) -> Response {
    let current = tokio::time::timeout(REPLICA_READY_WITHIN, state.store.catch_up()).await;
    let (etcd_versions, warning) = etcd_versions(state.store.etcd_standing().as_ref());
    let reason = match current {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some(format!(
            "could not confirm within {REPLICA_READY_WITHIN:?} that this replica shows every \
             acknowledged write"
        )),
    };
    Readiness {
        status: if reason.is_none() {
            "ready"
        } else {
            "not ready"
        },
        store: "replica",
        committer: "none",
        sweeper: "none",
        revision: state.store.revision(),
        etcd: Some(if reason.is_none() {
            "replica"
        } else {
            "replica, not current"
        }),
        reason,
        etcd_versions,
        warning,
    }
    .into_response()
}

impl IntoResponse for Readiness {
    fn into_response(self) -> Response {
        let status = if self.status == "ready" {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        // Sent as a `serde_json::Value`, whose object keys are sorted (`committer` first):
        // that is this body's key order on the wire, while the struct keeps the documented
        // order.
        let body = serde_json::to_value(self).expect("readiness serializes");
        (status, Json(body)).into_response()
    }
}

/// Prometheus metrics
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    description = "In the Prometheus text exposition format 0.0.4, or in OpenMetrics 1.0.0 text \
        for a scraper that prefers it, as the request's `Accept` header says: its media ranges \
        are taken in order of preference (highest q-value first; equal ones in the order sent; \
        q=0 means not acceptable), and the first that names a format served here decides: \
        `application/openmetrics-text` with `version=1.0.0` or no version is OpenMetrics, \
        `text/plain` with `version=0.0.4` or no version is the Prometheus text format. \
        Anything else (no `Accept`, `*/*`, other types or versions) gets the Prometheus text \
        format, never a 406. Prometheus' own scrapers prefer OpenMetrics; curl and \
        `promtool check metrics` get the Prometheus text format.",
    responses(
        (status = 200, description = "The metrics, in the format the request's `Accept` prefers",
            headers(("Vary" = String, description = "`accept`: the format follows the request's `Accept` header")),
            content(
                (String = "text/plain; version=0.0.4; charset=utf-8"),
                (String = "application/openmetrics-text; version=1.0.0; charset=utf-8"),
            )),
        (status = 503, response = Unavailable),
    ),
)]
pub(super) async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Result<Response> {
    let format = negotiate(&headers);
    let metrics = state.metrics.clone();
    let text = state
        .blocking(move |store| Ok(metrics.render(&store.gauges(), format)))
        .await?;
    Ok((
        [(CONTENT_TYPE, format.content_type()), (VARY, "accept")],
        text,
    )
        .into_response())
}

/// The format a scrape asked for, chosen as Prometheus' client libraries choose it
/// (`client_golang`'s `expfmt.Negotiate`): the media ranges of every `Accept` header in
/// order of preference (highest q-value first; equal ones in the order sent), and the first
/// that names a format served here wins. Anything else, no `Accept` included, gets the
/// Prometheus text format: it is what curl users and `promtool` read, and what
/// `client_golang` answers too. Unlike `client_golang`, a range with `q=0` (RFC 9110: not
/// acceptable) or an unreadable q-value is skipped, and `OpenMetrics` 0.0.1 does not count
/// (only 1.0.0 is written here; Prometheus' scrapers rank 1.0.0 higher anyway).
pub(super) fn negotiate(headers: &HeaderMap) -> Exposition {
    let mut best: Option<(f32, Exposition)> = None;
    let ranges = headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','));
    for range in ranges {
        if let Some((q, format)) = served(range) {
            // Strictly greater: of equal preferences, the first sent stays.
            if q > 0.0 && best.is_none_or(|(top, _)| q > top) {
                best = Some((q, format));
            }
        }
    }
    best.map_or(Exposition::Prometheus, |(_, format)| format)
}

/// One media range of `Accept` (`type/subtype;param=value;…`): its q-value and the format
/// it names, when it names one served here. `text/plain` is the Prometheus text format
/// with `version=0.0.4` or no version (Prometheus 3 also asks for a `text/plain` 1.0.0,
/// which is another format); `application/openmetrics-text` is `OpenMetrics` with
/// `version=1.0.0` or no version. Other parameters (`charset`, `escaping`) do not matter:
/// metric names here are plain ASCII.
fn served(range: &str) -> Option<(f32, Exposition)> {
    let mut parts = range.split(';');
    let media_type = parts.next()?.trim();
    let (mut q, mut version) = (1.0, None);
    for param in parts {
        let Some((name, value)) = param.split_once('=') else {
            continue;
        };
        let value = value.trim().trim_matches('"');
        match name.trim() {
            name if name.eq_ignore_ascii_case("q") => {
                q = value.parse().ok().filter(|q| (0.0..=1.0).contains(q))?;
            }
            name if name.eq_ignore_ascii_case("version") => version = Some(value),
            _ => {}
        }
    }
    let format = if media_type.eq_ignore_ascii_case("text/plain") {
        Exposition::Prometheus
    } else if media_type.eq_ignore_ascii_case("application/openmetrics-text") {
        Exposition::OpenMetrics
    } else {
        return None;
    };
    let wanted = match format {
        Exposition::Prometheus => "0.0.4",
        Exposition::OpenMetrics => "1.0.0",
    };
    version.is_none_or(|v| v == wanted).then_some((q, format))
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn accepting(values: &[&str]) -> Exposition {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(ACCEPT, HeaderValue::from_str(value).unwrap());
        }
        negotiate(&headers)
    }

    use Exposition::{OpenMetrics, Prometheus};

    #[test]
    fn without_a_preference_for_a_served_format_the_answer_is_the_prometheus_text_format() {
        for accept in [
            &[][..],
            &["*/*"],
            &["text/*"],
            &["application/json"],
            &["text/plain;version=1.0.0"],
            &["application/openmetrics-text;version=0.0.1"],
            &["application/openmetrics-text;version=2.0.0, */*;q=0.1"],
            &["application/openmetrics-text;q=0"],
            &["application/openmetrics-text;q=1.5"],
            &["application/openmetrics-text;q=high"],
            &[""],
            &[",;,"],
        ] {
            assert_eq!(accepting(accept), Prometheus, "Accept: {accept:?}");
        }
    }

    #[test]
    fn the_text_format_is_served_when_named() {
        for accept in [
            "text/plain",
            "text/plain;version=0.0.4",
            "text/plain; version=0.0.4; charset=utf-8",
            "TEXT/PLAIN; Version=\"0.0.4\"",
        ] {
            assert_eq!(accepting(&[accept]), Prometheus, "Accept: {accept}");
        }
    }

    #[test]
    fn openmetrics_is_served_when_preferred() {
        for accept in [
            "application/openmetrics-text",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            "Application/OpenMetrics-Text;VERSION=1.0.0",
            // Prometheus 3's default, and Prometheus 2's.
            "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,\
             application/openmetrics-text;version=0.0.1;q=0.4,\
             text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,\
             text/plain;version=0.0.4;q=0.2,*/*;q=0.1",
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,\
             text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
            "text/plain;q=0.5, application/openmetrics-text",
            "text/plain;q=0, application/openmetrics-text;q=0.1",
        ] {
            assert_eq!(accepting(&[accept]), OpenMetrics, "Accept: {accept}");
        }
    }

    #[test]
    fn the_higher_q_value_wins_and_a_tie_goes_to_the_first_sent() {
        assert_eq!(
            accepting(&["application/openmetrics-text;q=0.3, text/plain;version=0.0.4;q=0.8"]),
            Prometheus
        );
        assert_eq!(
            accepting(&["text/plain;q=0.5, application/openmetrics-text;q=0.5"]),
            Prometheus
        );
        assert_eq!(
            accepting(&["application/openmetrics-text;q=0.5, text/plain;q=0.5"]),
            OpenMetrics
        );
        // Several `Accept` headers are one list.
        assert_eq!(
            accepting(&["text/plain;q=0.2", "application/openmetrics-text;q=0.9"]),
            OpenMetrics
        );
        // A range that names no served format does not count, whatever its q-value.
        assert_eq!(
            accepting(&["application/json, application/openmetrics-text;q=0.1"]),
            OpenMetrics
        );
    }
}
