//! What Flink's REST API answers, as far as the watcher reads it, and the failures an
//! exception history holds.
//!
//! `GET /jobs/<id>/exceptions` answers `{"exceptionHistory": {"entries": [...], "truncated"}}`,
//! newest first; each entry names the exception, when it happened (ms), the task manager
//! that had it, and the failures that happened with it (`concurrentExceptions`, each of the
//! same shape). The last entry of a job whose recovery is suppressed names no task
//! manager itself: only its concurrent exceptions do. Fields Flink leaves out are `None`.

use std::collections::BTreeMap;

use serde::Deserialize;

/// `GET /jobs/overview`.
#[derive(Debug, Deserialize)]
pub struct Overview {
    pub jobs: Vec<JobSummary>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct JobSummary {
    pub jid: String,
    pub name: String,
    pub state: String,
}

impl JobSummary {
    /// Whether its failures are followed: a job that runs, or restarts after a failure.
    pub fn followed(&self) -> bool {
        matches!(
            self.state.as_str(),
            "RUNNING" | "RESTARTING" | "FAILING" | "CREATED" | "INITIALIZING" | "RECONCILING"
        )
    }
}

/// `GET /jobs/<id>/exceptions`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Exceptions {
    pub exception_history: History,
}

#[derive(Debug, Default, Deserialize)]
pub struct History {
    #[serde(default)]
    pub entries: Vec<Entry>,
    /// Flink dropped older entries than it keeps (`web.exception-history-size`).
    #[serde(default)]
    pub truncated: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    #[serde(default)]
    pub exception_name: String,
    #[serde(default)]
    pub stacktrace: String,
    #[serde(default)]
    pub timestamp: i64,
    #[serde(default)]
    pub failure_labels: BTreeMap<String, String>,
    pub task_name: Option<String>,
    pub task_manager_id: Option<String>,
    #[serde(default)]
    pub concurrent_exceptions: Vec<Entry>,
}

/// One failure of a task on a task manager: what the watcher counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub job: String,
    pub task_manager: String,
    /// Unix ms, as Flink recorded it.
    pub timestamp: i64,
    /// The exception's class, as Flink names it.
    pub exception: String,
    /// The exception's message: the first line of its stack trace after the class name.
    pub message: String,
    pub labels: BTreeMap<String, String>,
}

impl Failure {
    /// What makes a failure itself, however many polls see it.
    pub fn key(&self) -> (String, i64, String) {
        (self.job.clone(), self.timestamp, self.task_manager.clone())
    }
}

impl History {
    /// Every failure of `job` this history holds that names its task manager: the entries
    /// and their concurrent exceptions, newest first. A failure with no task manager (a
    /// global failure of the job) blames no machine and is left out.
    pub fn failures(&self, job: &str) -> Vec<Failure> {
        let mut failures = Vec::new();
        for entry in &self.entries {
            for e in std::iter::once(entry).chain(&entry.concurrent_exceptions) {
                let Some(task_manager) = e.task_manager_id.as_deref() else {
                    continue;
                };
                if task_manager.is_empty() {
                    continue;
                }
                failures.push(Failure {
                    job: job.to_owned(),
                    task_manager: task_manager.to_owned(),
                    timestamp: e.timestamp,
                    exception: e.exception_name.clone(),
                    message: message(&e.exception_name, &e.stacktrace),
                    labels: e.failure_labels.clone(),
                });
            }
        }
        failures
    }

    /// The oldest entry's time, when the history holds any.
    pub fn oldest(&self) -> Option<i64> {
        self.entries.iter().map(|e| e.timestamp).min()
    }
}

/// The exception's message from its stack trace's first line (`class: message`).
fn message(exception: &str, stacktrace: &str) -> String {
    let first = stacktrace.lines().next().unwrap_or_default();
    first
        .strip_prefix(exception)
        .map_or(first.trim(), |rest| rest.trim_start_matches(':').trim())
        .to_owned()
}

/// `GET /jobs/<id>`: the job's vertices.
#[derive(Debug, Deserialize)]
pub struct JobDetail {
    #[serde(default)]
    pub vertices: Vec<Vertex>,
}

#[derive(Debug, Deserialize)]
pub struct Vertex {
    pub id: String,
}

/// `GET /jobs/<id>/vertices/<vertex>/taskmanagers`: where a vertex's subtasks run.
#[derive(Debug, Deserialize)]
pub struct VertexTaskManagers {
    #[serde(default)]
    pub taskmanagers: Vec<VertexTaskManager>,
}

#[derive(Debug, Deserialize)]
pub struct VertexTaskManager {
    #[serde(rename = "taskmanager-id")]
    pub id: String,
}

/// `GET /taskmanagers`.
#[derive(Debug, Deserialize)]
pub struct TaskManagers {
    pub taskmanagers: Vec<TaskManager>,
}

#[derive(Debug, Deserialize)]
pub struct TaskManager {
    pub id: String,
    /// Its RPC address: `pekko.tcp://flink@HOST:PORT/user/rpc/taskmanager_0`.
    #[serde(default)]
    pub path: String,
}

impl TaskManager {
    /// The host it runs on, from its RPC address.
    pub fn host(&self) -> Option<&str> {
        let rest = self.path.split_once('@')?.1;
        let host = rest.split(['/', ':']).next()?;
        (!host.is_empty()).then_some(host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_come_from_entries_and_their_concurrent_exceptions() {
        let body = r#"{"exceptionHistory":{"entries":[
            {"exceptionName":"org.apache.flink.runtime.JobException","stacktrace":"org.apache.flink.runtime.JobException: Recovery is suppressed","timestamp":30,"failureLabels":{},
             "concurrentExceptions":[{"exceptionName":"java.io.IOException","stacktrace":"java.io.IOException: disk\n\tat x","timestamp":30,"failureLabels":{"type":"System"},"taskName":"src (1/8)","taskManagerId":"tm-2","concurrentExceptions":[]}]},
            {"exceptionName":"java.io.IOException","stacktrace":"java.io.IOException: injected failure on tm-2\n\tat y","timestamp":20,"failureLabels":{},"taskName":"src (2/8)","endpoint":"127.0.0.1:1","taskManagerId":"tm-2","concurrentExceptions":[]}
        ],"truncated":true}}"#;
        let exceptions: Exceptions = serde_json::from_str(body).unwrap();
        assert!(exceptions.exception_history.truncated);
        let failures = exceptions.exception_history.failures("j1");
        assert_eq!(failures.len(), 2, "{failures:?}");
        assert_eq!(failures[0].task_manager, "tm-2");
        assert_eq!(failures[0].timestamp, 30);
        assert_eq!(failures[0].message, "disk");
        assert_eq!(
            failures[0].labels.get("type").map(String::as_str),
            Some("System")
        );
        assert_eq!(failures[1].message, "injected failure on tm-2");
        assert_eq!(exceptions.exception_history.oldest(), Some(20));
    }

    #[test]
    fn a_task_managers_host_is_read_from_its_rpc_address() {
        let tm = TaskManager {
            id: "tm-1".into(),
            path: "pekko.tcp://flink@10.0.0.7:6122/user/rpc/taskmanager_0".into(),
        };
        assert_eq!(tm.host(), Some("10.0.0.7"));
        let local = TaskManager {
            id: "tm-1".into(),
            path: String::new(),
        };
        assert_eq!(local.host(), None);
    }
}
