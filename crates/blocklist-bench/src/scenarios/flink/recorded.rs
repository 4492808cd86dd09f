//! Flink's REST API as a cluster of [`JOBS`](super::JOBS) running jobs answers it, served
//! by the bench from payloads recorded from the harness: a real Flink running 200 jobs
//! (several task managers each, ~500 MB of JVM per cluster here) does not fit this machine.
//! `recorded-job.json` is one job of `GET /jobs/overview` (a running one), and
//! `recorded-exceptions.json` the `GET /jobs/<id>/exceptions` of a job whose subtasks
//! failed four times on each of four task managers: 16 entries, Flink's default
//! `web.exception-history-size`. Each job gets its own id, name and history, made from
//! them once; every answer is those bytes. Where a job runs (`GET /jobs/<id>` and its one
//! vertex's `…/vertices/<id>/taskmanagers`, which the watcher reads for a job with counted
//! failures) is the recorded shape with the four task managers the histories name.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};

const JOB: &str = include_str!("recorded-job.json");
const EXCEPTIONS: &str = include_str!("recorded-exceptions.json");

const MINUTE_MS: i64 = 60_000;

/// What the jobs' exception histories hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Histories {
    /// A healthy cluster: four in five jobs never failed (an empty history); of the rest,
    /// three in four had one failure on each of three task managers within the last 10
    /// minutes (counted, each task manager below the threshold of 2), and one in four a
    /// full history of 16 failures three hours ago (outside the window).
    Mixed,
    /// Every job's history full: 16 failures three hours ago, on four task managers.
    Full,
}

impl Histories {
    /// Job `i`'s history: how many of the recorded entries, and how long ago the newest.
    fn of(self, i: usize) -> (usize, i64) {
        match self {
            Histories::Full => (16, 180 * MINUTE_MS),
            Histories::Mixed => match i % 20 {
                0..16 => (0, 0),
                16..19 => (3, 2 * MINUTE_MS + i as i64 * 1000),
                _ => (16, 180 * MINUTE_MS),
            },
        }
    }
}

/// The served answers, and how many of each were asked for.
struct Answers {
    overview: Vec<u8>,
    histories: HashMap<String, Vec<u8>>,
    overviews_served: AtomicU64,
    histories_served: AtomicU64,
}

/// The server: its URL and counts; stopped on drop.
pub(super) struct Recorded {
    pub(super) url: String,
    answers: Arc<Answers>,
    task: tokio::task::JoinHandle<()>,
}

impl Recorded {
    /// Serves `jobs` running jobs whose histories are `histories`, their times taken back
    /// from now.
    pub(super) async fn start(jobs: usize, histories: Histories) -> Result<Recorded, String> {
        let job: Value = serde_json::from_str(JOB).map_err(|e| format!("recorded job: {e}"))?;
        let exceptions: Value =
            serde_json::from_str(EXCEPTIONS).map_err(|e| format!("recorded history: {e}"))?;
        let entries = exceptions["exceptionHistory"]["entries"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let recorded_newest = entries
            .iter()
            .filter_map(|e| e["timestamp"].as_i64())
            .max()
            .unwrap_or_default();
        let now = blocklistd::clock::now_ms();
        let mut overview = Vec::with_capacity(jobs);
        let mut answers = HashMap::with_capacity(jobs);
        for i in 0..jobs {
            // Ids of Flink's shape (32 hex digits), distinct per job.
            let jid = format!("{:016x}{i:016x}", 0xb10c_f11c_u64);
            let mut summary = job.clone();
            summary["jid"] = json!(jid);
            summary["name"] = json!(format!("job-{i:03}"));
            overview.push(summary);
            let (count, ago) = histories.of(i);
            // The first `count` entries (newest first), moved so the newest is `ago` old;
            // three entries are on three different task managers (the recorded order).
            let shift = now - ago - recorded_newest;
            let mine: Vec<Value> = entries
                .iter()
                .take(count)
                .map(|e| {
                    let mut e = e.clone();
                    e["timestamp"] = json!(e["timestamp"].as_i64().unwrap_or_default() + shift);
                    e
                })
                .collect();
            let body = json!({"exceptionHistory": {"entries": mine, "truncated": false}});
            answers.insert(jid, body.to_string().into_bytes());
        }
        let answers = Arc::new(Answers {
            overview: json!({"jobs": overview}).to_string().into_bytes(),
            histories: answers,
            overviews_served: AtomicU64::new(0),
            histories_served: AtomicU64::new(0),
        });
        let router = Router::new()
            .route("/jobs/overview", get(jobs_overview))
            .route("/jobs/{id}/exceptions", get(job_exceptions))
            .route("/jobs/{id}", get(job_detail))
            .route(
                "/jobs/{id}/vertices/{vertex}/taskmanagers",
                get(vertex_task_managers),
            )
            .with_state(answers.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Recorded {
            url: format!("http://{addr}"),
            answers,
            task,
        })
    }

    /// Answers served so far: overviews, exception histories.
    pub(super) fn served(&self) -> (u64, u64) {
        (
            self.answers.overviews_served.load(Ordering::Relaxed),
            self.answers.histories_served.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Recorded {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn json_answer(body: &[u8]) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json; charset=UTF-8")],
        body.to_vec(),
    )
        .into_response()
}

async fn jobs_overview(State(answers): State<Arc<Answers>>) -> Response {
    answers.overviews_served.fetch_add(1, Ordering::Relaxed);
    json_answer(&answers.overview)
}

async fn job_exceptions(State(answers): State<Arc<Answers>>, Path(id): Path<String>) -> Response {
    answers.histories_served.fetch_add(1, Ordering::Relaxed);
    match answers.histories.get(&id) {
        Some(body) => json_answer(body),
        // Flink's answer for a job it does not know.
        None => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "application/json; charset=UTF-8")],
            r#"{"errors":["Job could not be found."]}"#,
        )
            .into_response(),
    }
}

/// A job's detail, as far as the watcher reads it: its one vertex (source and sink chained,
/// as the harness's jobs are).
async fn job_detail(Path(id): Path<String>) -> Response {
    let body = json!({"jid": id, "state": "RUNNING",
                      "vertices": [{"id": "cbc357ccb763df2852fee8c4fc7d55f2", "parallelism": 4}]});
    json_answer(body.to_string().as_bytes())
}

/// Where the vertex's subtasks run: one on each of the four task managers.
async fn vertex_task_managers(Path((_, vertex)): Path<(String, String)>) -> Response {
    let tms: Vec<Value> = (1..=4)
        .map(|i| {
            json!({"endpoint": format!("localhost:{}", 40_000 + i), "status": "RUNNING",
                        "taskmanager-id": format!("tm-{i}")})
        })
        .collect();
    let body = json!({"id": vertex, "name": "Source: job -> Sink: discard", "taskmanagers": tms});
    json_answer(body.to_string().as_bytes())
}
