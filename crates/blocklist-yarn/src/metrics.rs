//! The bridge's metrics, in Prometheus' text format at `/metrics` (`crate::serve`).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::plan::{Move, NodeManager, Settings};

type Labels = Vec<(String, String)>;

fn labels(all: &[(&str, &str)]) -> Labels {
    all.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Every series the bridge exports.
pub struct Metrics {
    registry: Registry,
    /// Passes by outcome (`ok`, `error`).
    passes: Family<Labels, Counter>,
    pass_seconds: Histogram,
    /// Writes to the ResourceManager by call and outcome (`ok`, `error`).
    rm_writes: Family<Labels, Counter>,
    /// 1 while the ResourceManager's last read answered.
    rm_up: Gauge,
    feed_revision: Gauge,
    feed_idle_seconds: Gauge<f64, AtomicU64>,
    /// Unix ms of the feed's last byte (an event or a heartbeat).
    feed_last_ms: AtomicI64,
    nodemanagers: Gauge,
    nodemanagers_labelled: Gauge,
    nodemanagers_stuck: Gauge,
    labelled: Counter,
    returned: Counter,
    block_to_label_seconds: Histogram,
    pub registrations: Counter,
    pub unregistrations: Counter,
    /// Containers stopped for an evacuation, by outcome (`stopped`, `error`).
    pub evacuations: Family<Labels, Counter>,
    pub containers_waiting: Gauge,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let mut m = Metrics {
            registry: Registry::with_prefix("blocklist_yarn"),
            passes: Family::default(),
            // 1 ms to about 16 s.
            pass_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            rm_writes: Family::default(),
            rm_up: Gauge::default(),
            feed_revision: Gauge::default(),
            feed_idle_seconds: Gauge::default(),
            feed_last_ms: AtomicI64::new(0),
            nodemanagers: Gauge::default(),
            nodemanagers_labelled: Gauge::default(),
            nodemanagers_stuck: Gauge::default(),
            labelled: Counter::default(),
            returned: Counter::default(),
            // 1 ms to about 16 s: the target (docs/benchmarks.md) is a bucket bound's
            // neighbour, so whether it is met reads off the buckets.
            block_to_label_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            registrations: Counter::default(),
            unregistrations: Counter::default(),
            evacuations: Family::default(),
            containers_waiting: Gauge::default(),
        };
        // Each series from the start, at 0: an alert's rate needs a series to begin with.
        for outcome in ["ok", "error"] {
            let _ = m.passes.get_or_create(&labels(&[("outcome", outcome)]));
            for call in ["add-node-labels", "replace-node-to-labels", "signal"] {
                let _ = m
                    .rm_writes
                    .get_or_create(&labels(&[("call", call), ("outcome", outcome)]));
            }
        }
        for outcome in ["stopped", "error"] {
            let _ = m
                .evacuations
                .get_or_create(&labels(&[("outcome", outcome)]));
        }
        let r = &mut m.registry;
        r.register(
            "passes",
            "Passes (read, plan, write, read back) by outcome",
            m.passes.clone(),
        );
        r.register(
            "pass_seconds",
            "How long a pass took",
            m.pass_seconds.clone(),
        );
        r.register(
            "rm_writes",
            "Writes to the ResourceManager by call and outcome",
            m.rm_writes.clone(),
        );
        r.register(
            "rm_up",
            "1 while the ResourceManager's last read answered",
            m.rm_up.clone(),
        );
        r.register(
            "feed_revision",
            "The revision of the daemon's feed the bridge has applied",
            m.feed_revision.clone(),
        );
        r.register(
            "feed_idle_seconds",
            "Seconds since the feed's last event or heartbeat",
            m.feed_idle_seconds.clone(),
        );
        r.register(
            "nodemanagers",
            "NodeManagers the ResourceManager lists",
            m.nodemanagers.clone(),
        );
        r.register(
            "nodemanagers_labelled",
            "NodeManagers in the bridge's partitions",
            m.nodemanagers_labelled.clone(),
        );
        r.register(
            "nodemanagers_stuck",
            "NodeManagers in the bridge's partitions that no block names and whose origin partition is gone",
            m.nodemanagers_stuck.clone(),
        );
        r.register(
            "labelled",
            "NodeManagers put into the bridge's partitions (read back)",
            m.labelled.clone(),
        );
        r.register(
            "returned",
            "NodeManagers returned to their partitions (read back)",
            m.returned.clone(),
        );
        r.register(
            "block_to_label_seconds",
            "From a block's last report in the daemon to its NodeManagers read back in the partition",
            m.block_to_label_seconds.clone(),
        );
        r.register(
            "registrations",
            "Task managers (Flink's containers) registered with the daemon",
            m.registrations.clone(),
        );
        r.register(
            "unregistrations",
            "Task managers unregistered (their container gone)",
            m.unregistrations.clone(),
        );
        r.register(
            "evacuations",
            "Containers stopped for an evacuation, by outcome",
            m.evacuations.clone(),
        );
        r.register(
            "containers_waiting",
            "Containers on evacuated nodes waiting their turn to be stopped",
            m.containers_waiting.clone(),
        );
        m
    }
}

impl Metrics {
    pub fn render(&self) -> String {
        let idle = blocklistd::clock::now_ms() - self.feed_last_ms.load(Ordering::Relaxed);
        #[expect(clippy::cast_precision_loss, reason = "seconds of idleness")]
        self.feed_idle_seconds.set(idle.max(0) as f64 / 1000.0);
        let mut out = String::new();
        text::encode(&mut out, &self.registry).expect("metrics encode");
        out
    }

    pub fn feed_alive(&self) {
        self.feed_last_ms
            .store(blocklistd::clock::now_ms(), Ordering::Relaxed);
    }

    pub fn revision(&self, revision: u64) {
        self.feed_revision
            .set(i64::try_from(revision).unwrap_or(i64::MAX));
        self.feed_alive();
    }

    pub fn pass(&self, took: Duration, ok: bool) {
        let outcome = if ok { "ok" } else { "error" };
        self.passes
            .get_or_create(&labels(&[("outcome", outcome)]))
            .inc();
        self.pass_seconds.observe(took.as_secs_f64());
    }

    pub fn read(&self, ok: bool) {
        self.rm_up.set(i64::from(ok));
    }

    pub fn write(&self, call: &str, ok: bool) {
        let outcome = if ok { "ok" } else { "error" };
        self.rm_writes
            .get_or_create(&labels(&[("call", call), ("outcome", outcome)]))
            .inc();
    }

    pub fn block_to_label(&self, ms: i64) {
        #[expect(clippy::cast_precision_loss, reason = "milliseconds as seconds")]
        self.block_to_label_seconds
            .observe(ms.max(0) as f64 / 1000.0);
    }

    /// The gauges after a pass: NodeManagers, those in the bridge's partitions (as read,
    /// with the confirmed moves), those stuck; and the counters of the confirmed moves.
    pub fn gauges(
        &self,
        nodes: &[NodeManager],
        stuck: &[(String, String)],
        confirmed: &[&Move],
        settings: &Settings,
    ) {
        let ours = |p: Option<&str>| settings.partitions.ours(p);
        let mut labelled = nodes
            .iter()
            .filter(|n| ours(n.partition.as_deref()))
            .count();
        for m in confirmed {
            match (ours(m.from.as_deref()), ours(m.to.as_deref())) {
                (false, true) => {
                    labelled += 1;
                    self.labelled.inc();
                }
                (true, false) => {
                    labelled = labelled.saturating_sub(1);
                    self.returned.inc();
                }
                _ => {}
            }
        }
        self.nodemanagers
            .set(i64::try_from(nodes.len()).unwrap_or(i64::MAX));
        self.nodemanagers_labelled
            .set(i64::try_from(labelled).unwrap_or(i64::MAX));
        self.nodemanagers_stuck
            .set(i64::try_from(stuck.len()).unwrap_or(i64::MAX));
    }
}
