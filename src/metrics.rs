//! Prometheus metrics: one registry, shared by the committer, the sweeper and the HTTP layer.
//!
//! Gauges that describe the store (items, revision, size on disk) are set from the store at
//! scrape time — they are kept up to date by the committer (item counts live in `meta`), so
//! a scrape never scans the blocklist.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::model::{Action, EventType, Kind};
use crate::store::{count_slot, Store};

/// Sweeper lag buckets (seconds): fine around the tens of milliseconds that matter to a
/// scheduler, coarse beyond.
const LAG_BUCKETS: [f64; 22] = [
    0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0,
    5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChangeLabels {
    pub event: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ItemLabels {
    pub kind: &'static str,
    pub action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Static strings: building the labels of every request must not allocate.
    pub method: &'static str,
    pub route: &'static str,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectLabels {
    pub status: u16,
}

pub struct Metrics {
    registry: Registry,
    /// Committed changes by kind of change (added, merged, removed, expired, …).
    pub changes: Family<ChangeLabels, Counter>,
    /// Add batches refused with 409.
    pub conflicts: Counter,
    /// Requests answered 4xx or 5xx, by status.
    pub rejected: Family<RejectLabels, Counter>,
    pub request_seconds: Family<RequestLabels, Histogram>,
    /// now − endTimestamp of each item, when the sweeper announced it expired.
    pub sweeper_lag_seconds: Histogram,
    /// Expiry entries (with their items) deleted after being announced expired.
    pub reclaimed_entries: Counter,
    /// Items announced expired whose storage is still to be reclaimed.
    pub unreclaimed: Gauge,
    /// The deadline the sweeper sleeps until, unix seconds (0: it works, or nothing is due).
    sweeper_next_deadline: Gauge<f64, AtomicU64>,
    /// Requests per group commit.
    pub commit_batch_requests: Histogram,
    /// Transaction + flush + fsync of one group commit.
    pub commit_seconds: Histogram,
    items: Family<ItemLabels, Gauge>,
    revision: Gauge,
    disk_bytes: Gauge,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("blocklist");
        let changes = Family::<ChangeLabels, Counter>::default();
        registry.register("changes", "Committed changes, by event", changes.clone());
        let conflicts = Counter::default();
        registry.register(
            "conflicts",
            "Add batches refused because of a conflict",
            conflicts.clone(),
        );
        let rejected = Family::<RejectLabels, Counter>::default();
        registry.register(
            "rejected_requests",
            "Requests answered 4xx or 5xx, by status",
            rejected.clone(),
        );
        let request_seconds = Family::<RequestLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.000_05, 2.0, 18))
        });
        registry.register(
            "http_request_duration_seconds",
            "HTTP request duration, by route and status",
            request_seconds.clone(),
        );
        let sweeper_lag_seconds = Histogram::new(LAG_BUCKETS.iter().copied());
        registry.register(
            "sweeper_lag_seconds",
            "now - endTimestamp of each item, when the sweeper announced it expired",
            sweeper_lag_seconds.clone(),
        );
        let reclaimed_entries = Counter::default();
        registry.register(
            "reclaimed_entries",
            "Expired items whose storage was deleted after their expiry was announced",
            reclaimed_entries.clone(),
        );
        let unreclaimed = Gauge::default();
        registry.register(
            "unreclaimed_items",
            "Items announced expired whose storage is still to be reclaimed",
            unreclaimed.clone(),
        );
        let sweeper_next_deadline = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "sweeper_next_deadline_timestamp_seconds",
            "The endTimestamp the sweeper sleeps until, unix seconds (0 while it works or when nothing is due)",
            sweeper_next_deadline.clone(),
        );
        let commit_batch_requests = Histogram::new(exponential_buckets(1.0, 2.0, 12));
        registry.register(
            "commit_batch_requests",
            "Write requests per group commit",
            commit_batch_requests.clone(),
        );
        let commit_seconds = Histogram::new(exponential_buckets(0.000_05, 2.0, 18));
        registry.register(
            "commit_duration_seconds",
            "Transaction, flush and fsync of one group commit",
            commit_seconds.clone(),
        );
        let items = Family::<ItemLabels, Gauge>::default();
        registry.register(
            "items",
            "Items by kind and action (expired ones until the sweeper announces them)",
            items.clone(),
        );
        let revision = Gauge::default();
        registry.register(
            "revision",
            "The current revision of the change feed",
            revision.clone(),
        );
        let disk_bytes = Gauge::default();
        registry.register(
            "database_size_bytes",
            "The database's size on disk",
            disk_bytes.clone(),
        );
        Metrics {
            registry,
            changes,
            conflicts,
            rejected,
            request_seconds,
            sweeper_lag_seconds,
            reclaimed_entries,
            unreclaimed,
            sweeper_next_deadline,
            commit_batch_requests,
            commit_seconds,
            items,
            revision,
            disk_bytes,
        }
    }

    pub fn change(&self, event: EventType) {
        self.changes
            .get_or_create(&ChangeLabels {
                event: event.as_str(),
            })
            .inc();
    }

    /// The text exposition, with the store gauges read now. Blocking (reads the data dir's
    /// size): call off the async workers.
    pub fn render(&self, store: &Store) -> String {
        let counts = store.item_counts();
        for kind in Kind::ALL {
            for action in [Action::MarkBlocked, Action::MarkBlockedAndEvacuateTasks] {
                let labels = ItemLabels {
                    kind: kind.singular(),
                    action: action.as_str(),
                };
                self.items
                    .get_or_create(&labels)
                    .set(counts[count_slot(kind, action)] as i64);
            }
        }
        self.revision.set(store.revision() as i64);
        self.unreclaimed.set(store.unreclaimed() as i64);
        self.sweeper_next_deadline.set(
            store
                .sweep_signal()
                .sleeping_on()
                .map_or(0.0, |ms| ms as f64 / 1000.0),
        );
        if let Ok(bytes) = store.size_on_disk() {
            self.disk_bytes.set(bytes as i64);
        }
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String does not fail");
        out
    }
}
