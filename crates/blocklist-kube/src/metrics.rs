//! The bridge's metrics, in Prometheus' text format at `/metrics` (`crate::serve`).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Every series the bridge exports.
pub struct Metrics {
    registry: Registry,
    pub taints_applied: Counter,
    pub taints_removed: Counter,
    pub reconciles: Counter,
    pub reconcile_seconds: Histogram,
    /// Requests to the API server by verb and HTTP code (`error`: no answer).
    pub api_requests: Family<Vec<(String, String)>, Counter>,
    pub feed_revision: Gauge,
    feed_idle_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// Unix ms of the feed's last byte (an event or a heartbeat).
    feed_last_ms: AtomicI64,
    pub nodes_missing: Gauge,
    pub nodes_tainted: Gauge,
    pub ceiling_refusals: Counter,
    pub block_to_taint_seconds: Histogram,
    pub registrations: Counter,
    pub unregistrations: Counter,
    pub pods_labelled: Counter,
    /// Evictions asked for, by outcome (`evicted`, `budget-refused`, `gone`, `error`).
    pub evictions: Family<Vec<(String, String)>, Counter>,
    pub pods_waiting: Gauge,
    pub nodes_evacuating: Gauge,
    pub block_to_empty_seconds: Histogram,
    pub leader: Gauge,
    /// Reports and retractions of Node conditions, by condition and outcome.
    pub condition_reports: Family<Vec<(String, String)>, Counter>,
    pub condition_to_report_seconds: Histogram,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let mut registry = Registry::with_prefix("blocklist_kube");
        let metrics = Metrics {
            taints_applied: Counter::default(),
            taints_removed: Counter::default(),
            reconciles: Counter::default(),
            // 5 ms to about 80 s.
            reconcile_seconds: Histogram::new(exponential_buckets(0.005, 2.0, 15)),
            api_requests: Family::default(),
            feed_revision: Gauge::default(),
            feed_idle_seconds: Gauge::default(),
            feed_last_ms: AtomicI64::new(0),
            nodes_missing: Gauge::default(),
            nodes_tainted: Gauge::default(),
            ceiling_refusals: Counter::default(),
            // 1 ms to about 16 s.
            block_to_taint_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            registrations: Counter::default(),
            unregistrations: Counter::default(),
            pods_labelled: Counter::default(),
            evictions: Family::default(),
            pods_waiting: Gauge::default(),
            nodes_evacuating: Gauge::default(),
            // 0.1 s to about 55 min.
            block_to_empty_seconds: Histogram::new(exponential_buckets(0.1, 2.0, 16)),
            leader: Gauge::default(),
            condition_reports: Family::default(),
            // 1 ms to about 16 s.
            condition_to_report_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register(
            "taints_applied",
            "Taints the bridge put on Nodes",
            metrics.taints_applied.clone(),
        );
        r.register(
            "taints_removed",
            "Taints the bridge took off Nodes",
            metrics.taints_removed.clone(),
        );
        r.register(
            "reconciles",
            "Full reconciles run",
            metrics.reconciles.clone(),
        );
        r.register(
            "reconcile_seconds",
            "How long a full reconcile took",
            metrics.reconcile_seconds.clone(),
        );
        r.register(
            "api_requests",
            "Requests to the Kubernetes API server, by verb and HTTP code",
            metrics.api_requests.clone(),
        );
        r.register(
            "feed_revision",
            "The revision of the daemon's change feed the bridge has applied",
            metrics.feed_revision.clone(),
        );
        r.register(
            "feed_idle_seconds",
            "Seconds since the change feed last delivered anything (an event or a heartbeat)",
            metrics.feed_idle_seconds.clone(),
        );
        r.register(
            "nodes_missing",
            "Blocked node ids that name no Node of the cluster",
            metrics.nodes_missing.clone(),
        );
        r.register(
            "nodes_tainted",
            "Nodes carrying the bridge's taint",
            metrics.nodes_tainted.clone(),
        );
        r.register(
            "ceiling_refusals",
            "Taints not put because the ceiling (--max-tainted-nodes-percent) was reached",
            metrics.ceiling_refusals.clone(),
        );
        r.register(
            "block_to_taint_seconds",
            "From a block's last report in the daemon to its taint on the Node",
            metrics.block_to_taint_seconds.clone(),
        );
        r.register(
            "registrations",
            "Task managers registered with the daemon from their pods",
            metrics.registrations.clone(),
        );
        r.register(
            "unregistrations",
            "Task managers unregistered from the daemon (their pods gone)",
            metrics.unregistrations.clone(),
        );
        r.register(
            "pods_labelled",
            "Label changes on task managers' pods (blocked or no longer)",
            metrics.pods_labelled.clone(),
        );
        r.register(
            "evictions",
            "Evictions the bridge asked the API server for, by outcome: evicted, budget-refused (a PodDisruptionBudget said not now), gone, error",
            metrics.evictions.clone(),
        );
        r.register(
            "pods_waiting",
            "Pods to evict that a PodDisruptionBudget holds back now",
            metrics.pods_waiting.clone(),
        );
        r.register(
            "nodes_evacuating",
            "Nodes being emptied now (at most --max-evacuating-nodes)",
            metrics.nodes_evacuating.clone(),
        );
        r.register(
            "block_to_empty_seconds",
            "From a node's block (its last report in the daemon) to the node empty of the work it evacuates",
            metrics.block_to_empty_seconds.clone(),
        );
        r.register(
            "leader",
            "1 while this replica leads (it acts), 0 while it follows",
            metrics.leader.clone(),
        );
        r.register(
            "condition_reports",
            "Node conditions sent to the daemon, by condition and outcome: reported, refused (a guardrail or the allowlist), ended (a block of the episode was ended since: not reported again), retracted, failed (the daemon unreachable: tried again)",
            metrics.condition_reports.clone(),
        );
        r.register(
            "condition_to_report_seconds",
            "From a Node condition counting (its lastTransitionTime plus its hold) to its report's acknowledgement",
            metrics.condition_to_report_seconds.clone(),
        );
        Metrics {
            registry,
            ..metrics
        }
    }
}

impl Metrics {
    /// Counts one request to the API server.
    pub fn api<T>(&self, verb: &str, result: &Result<T, kube::Error>) {
        let code = match result {
            Ok(_) => "200".to_owned(),
            Err(kube::Error::Api(status)) => status.code.to_string(),
            Err(_) => "error".to_owned(),
        };
        self.api_requests
            .get_or_create(&vec![("verb".into(), verb.into()), ("code".into(), code)])
            .inc();
    }

    /// Counts one eviction by its outcome.
    pub fn eviction(&self, outcome: &str) {
        self.evictions
            .get_or_create(&vec![("outcome".into(), outcome.into())])
            .inc();
    }

    /// Counts one report or retraction of a Node condition by its outcome.
    pub fn condition(&self, condition: &str, outcome: &str) {
        self.condition_reports
            .get_or_create(&vec![
                ("condition".into(), condition.into()),
                ("outcome".into(), outcome.into()),
            ])
            .inc();
    }

    /// The feed delivered something.
    pub fn feed_alive(&self) {
        self.feed_last_ms.store(now_ms(), Ordering::Relaxed);
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let last = self.feed_last_ms.load(Ordering::Relaxed);
        if last > 0 {
            #[expect(clippy::cast_precision_loss, reason = "milliseconds, far below 2^52")]
            self.feed_idle_seconds
                .set((now_ms() - last) as f64 / 1000.0);
        }
        let mut out = String::new();
        text::encode(&mut out, &self.registry).expect("writing to a String");
        out
    }
}

/// The wall clock in Unix ms.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
