//! The watcher's metrics, in Prometheus' text format at `/metrics` (`crate::serve`), and
//! its readiness: every cluster's last poll answered.

use std::collections::BTreeMap;
use std::sync::Mutex;

use prometheus_client::encoding::text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// Every series the watcher exports.
pub struct Metrics {
    registry: Registry,
    /// Polls by cluster and outcome (`ok`, `error`).
    pub polls: Family<Labels, Counter>,
    /// 1 while the cluster's last poll answered.
    pub up: Family<Labels, Gauge>,
    /// Jobs followed by cluster.
    pub jobs: Family<Labels, Gauge>,
    /// Failures seen by cluster and outcome (`counted`, or why not).
    pub failures: Family<Labels, Counter>,
    /// Reports by kind and outcome (`blocked`, `held`, `paid`, `refused`, `error`,
    /// `dry-run`).
    pub reports: Family<Labels, Counter>,
    /// Polls that found a job's history cut short (failures may have been lost).
    pub truncated: Family<Labels, Counter>,
    /// Jobs whose failures were spread over most of their task managers: blamed on the job.
    pub failing_everywhere: Family<Labels, Counter>,
    /// A failure's time to its being counted: how far the watcher is behind Flink.
    pub lag_seconds: Histogram,
    /// A history read to the report that it caused acknowledged: the watcher's own part.
    pub report_seconds: Histogram,
    /// Whether each cluster's last poll answered, for `/readyz`.
    answered: Mutex<BTreeMap<String, bool>>,
}

pub fn labels(all: &[(&str, &str)]) -> Labels {
    all.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

impl Metrics {
    /// The metrics of a watcher following `clusters`.
    pub fn new<'a>(clusters: impl IntoIterator<Item = &'a str>) -> Metrics {
        let mut metrics = Metrics {
            registry: Registry::with_prefix("blocklist_flink"),
            polls: Family::default(),
            up: Family::default(),
            jobs: Family::default(),
            failures: Family::default(),
            reports: Family::default(),
            truncated: Family::default(),
            failing_everywhere: Family::default(),
            // 10 ms to about 160 s.
            lag_seconds: Histogram::new(exponential_buckets(0.01, 2.0, 15)),
            // 1 ms to 10 s by 1-2-5: a bound at 20 ms, the target of the watcher's part
            // (docs/benchmarks.md), so whether it is met can be read off the buckets.
            report_seconds: Histogram::new([
                0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0,
            ]),
            answered: Mutex::new(BTreeMap::new()),
        };
        for cluster in clusters {
            let cluster_labels = labels(&[("cluster", cluster)]);
            // Each series from the start, at 0: an alert's rate needs a series to begin with.
            for outcome in ["ok", "error"] {
                let _ = metrics
                    .polls
                    .get_or_create(&labels(&[("cluster", cluster), ("outcome", outcome)]));
            }
            let _ = metrics.up.get_or_create(&cluster_labels);
            let _ = metrics.truncated.get_or_create(&cluster_labels);
            metrics
                .answered
                .lock()
                .expect("never poisoned")
                .insert(cluster.to_owned(), false);
        }
        for kind in ["taskmanagers", "nodes"] {
            for outcome in ["blocked", "held", "paid", "refused", "error", "dry-run"] {
                let _ = metrics
                    .reports
                    .get_or_create(&labels(&[("kind", kind), ("outcome", outcome)]));
            }
        }
        let r = &mut metrics.registry;
        r.register(
            "polls",
            "Polls of a Flink cluster by outcome",
            metrics.polls.clone(),
        );
        r.register(
            "up",
            "1 while the cluster's last poll answered",
            metrics.up.clone(),
        );
        r.register(
            "jobs",
            "Running and restarting jobs followed",
            metrics.jobs.clone(),
        );
        r.register(
            "failures",
            "Task failures seen in exception histories, by whether they counted",
            metrics.failures.clone(),
        );
        r.register(
            "reports",
            "Blocks asked of the daemon, by kind and outcome",
            metrics.reports.clone(),
        );
        r.register(
            "history_truncated",
            "Polls that found a job's exception history cut short: failures may have been lost",
            metrics.truncated.clone(),
        );
        r.register(
            "jobs_failing_everywhere",
            "Jobs whose failures were spread over most of their task managers (blamed on the job)",
            metrics.failing_everywhere.clone(),
        );
        r.register(
            "lag_seconds",
            "From a failure in Flink to its being counted",
            metrics.lag_seconds.clone(),
        );
        r.register(
            "report_seconds",
            "From reading the failure that crossed a threshold to the daemon's acknowledgement",
            metrics.report_seconds.clone(),
        );
        metrics
    }

    /// A cluster's poll answered or not.
    pub fn polled(&self, cluster: &str, ok: bool) {
        let outcome = if ok { "ok" } else { "error" };
        self.polls
            .get_or_create(&labels(&[("cluster", cluster), ("outcome", outcome)]))
            .inc();
        self.up
            .get_or_create(&labels(&[("cluster", cluster)]))
            .set(i64::from(ok));
        self.answered
            .lock()
            .expect("never poisoned")
            .insert(cluster.to_owned(), ok);
    }

    /// The clusters whose last poll did not answer (or that were not polled yet).
    pub fn unanswered(&self) -> Vec<String> {
        self.answered
            .lock()
            .expect("never poisoned")
            .iter()
            .filter(|(_, ok)| !**ok)
            .map(|(cluster, _)| cluster.clone())
            .collect()
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        text::encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}
