//! Prometheus metrics: one registry, shared by the committer, the sweeper and the HTTP layer.
//!
//! Gauges that describe the store (items, revision, size on disk) are set at scrape time
//! from [`StoreGauges`], which the store reads from what its committer keeps up to date
//! (item counts live in `meta`), so a scrape never scans the blocklist.
//!
//! The store records into these metrics and hands over its gauges; this module imports
//! nothing of the store, so the dependency runs one way.
//!
//! Both text formats come from `prometheus_client`'s own encoders ([`Exposition`]); which
//! one a scrape gets is the HTTP layer's choice (`http::ops`).

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::{prometheus_text, text, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

mod detectors;
mod tls;

pub use detectors::DetectorMetrics;
pub use tls::TlsMetrics;

use crate::model::{Action, EventType, Kind};
use crate::policy::{Figure, Guard};

/// Sweeper lag buckets (seconds): fine around the tens of milliseconds that matter to a
/// scheduler, coarse beyond.
const LAG_BUCKETS: [f64; 22] = [
    0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0,
    5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// The text formats [`Metrics::render`] writes, each by `prometheus_client`'s encoder for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exposition {
    /// The Prometheus text exposition format 0.0.4, what `promtool check metrics` reads: a
    /// counter's `# HELP` and `# TYPE` name its `_total` series; no `# UNIT`, exemplars,
    /// `_created` series or `# EOF`.
    Prometheus,
    /// `OpenMetrics` 1.0.0 text: a counter is typed under its family's name (without
    /// `_total`), and the text ends with `# EOF`.
    OpenMetrics,
}

impl Exposition {
    /// The `Content-Type` of a text in this format.
    pub const fn content_type(self) -> &'static str {
        match self {
            Exposition::Prometheus => prometheus_text::CONTENT_TYPE,
            Exposition::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

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
pub struct GuardLabels {
    pub guard: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindGuardLabels {
    pub kind: &'static str,
    pub guard: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

/// A daemon's role on its etcd prefix: `writer`; `replica` (it follows the prefix, serves
/// reads and sends writes on to the writer); `candidate` (its store was the writer's, and
/// its lease ended: it sends every request on until it wins the key back).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RoleLabels {
    pub role: &'static str,
}

/// How a request sent on to the writer ended: `answered` (whatever the writer's status),
/// `no_writer` (none reachable in time), `failed` (sent, and no answer came back).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ForwardLabels {
    pub outcome: &'static str,
}

/// How a term as the writer of the etcd prefix went: `won` (this daemon became the
/// writer), `lost` (its term ended while it ran: its lease ended, or another daemon took
/// the key).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ElectionLabels {
    pub outcome: &'static str,
}

/// An etcd member, by endpoint, and the version it reports; `fixed`: whether that release
/// has etcd's fixes for linearizable reads and the watch.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MemberVersionLabels {
    pub member: String,
    pub version: String,
    pub fixed: &'static str,
}

/// The writer of the etcd prefix, by the name it announced.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriterLabels {
    pub name: String,
}

/// Where a group commit failed: `transaction` (nothing of it was applied: the storage, or
/// etcd's refusal, stopped it) or `sync` (applied, but its flush, fsync or etcd write
/// failed: whether it is durable is unknown until the store reopens and reads it back).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CommitStageLabels {
    pub stage: &'static str,
}

/// The stages [`CommitStageLabels`] names, each a series from the start.
const COMMIT_STAGES: [&str; 2] = ["transaction", "sync"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectLabels {
    pub status: u16,
}

/// What the store reports at scrape time: the gauges [`Metrics::render`] sets.
#[derive(Debug, Clone, Default)]
pub struct StoreGauges {
    /// Stored items per kind and action, every pair once (expired items count until the
    /// sweeper announces them).
    pub items: Vec<(Kind, Action, u64)>,
    /// The revision of the last committed change.
    pub revision: u64,
    /// Items announced expired whose storage is still to be reclaimed.
    pub unreclaimed: u64,
    /// The deadline the sweeper sleeps until (unix ms); `None` while it works or when
    /// nothing is due.
    pub sweeper_next_deadline_ms: Option<i64>,
    /// The database's size on disk; `None` when it could not be read, and the gauge keeps
    /// the last size read.
    pub disk_bytes: Option<u64>,
    /// Each count guard's figure against its limit.
    pub guards: Vec<Figure>,
    /// Registered ids per kind.
    pub registered: Vec<(Kind, u64)>,
    /// The evacuation tokens available per kind with a rate.
    pub evacuation_tokens: Vec<(Kind, f64)>,
    /// On etcd, this daemon's role on its prefix ([`RoleLabels`]); `None` on sled.
    pub etcd_role: Option<&'static str>,
    /// On a replica, how many log entries it is behind the last head it read, and for how
    /// many seconds.
    pub replica_lag: Option<(u64, f64)>,
    /// On etcd, how many times this daemon won the writer key, and how many of those terms
    /// ended while it ran; `None` on sled.
    pub etcd_elections: Option<(u64, u64)>,
    /// On etcd, the writer's name as this daemon last saw it; `None` on sled or while it
    /// knows none.
    pub etcd_writer: Option<String>,
    /// On etcd, each member's endpoint, the version it reported, and whether that release
    /// has the fixes; members that have not answered are left out.
    pub etcd_member_versions: Vec<(String, String, bool)>,
    /// On etcd, whether its last refusal of a write was its NOSPACE alarm, still raised.
    pub etcd_nospace: bool,
}

/// The roles [`RoleLabels`] names.
const ROLES: [&str; 3] = ["writer", "replica", "candidate"];

pub struct Metrics {
    registry: Registry,
    /// Committed changes by kind of change (added, merged, removed, expired, …).
    pub changes: Family<ChangeLabels, Counter>,
    /// Add batches refused with 409.
    pub conflicts: Counter,
    /// Writes answered from an `Idempotency-Key`'s record instead of applied.
    pub idempotent_replays: Counter,
    /// Add batches a guardrail refused (429 or 422), by guard (a batch that breaks two
    /// counts under each).
    guard_refusals: Family<GuardLabels, Counter>,
    /// Requests answered 4xx or 5xx, by status.
    pub rejected: Family<RejectLabels, Counter>,
    pub request_seconds: Family<RequestLabels, Histogram>,
    /// Requests sent on to the writer of the etcd prefix, by outcome: the time from their
    /// arrival to the writer's answer (waiting for a writer included).
    pub forwarded_seconds: Family<ForwardLabels, Histogram>,
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
    /// Group commits that failed, by stage.
    commit_failures: Family<CommitStageLabels, Counter>,
    etcd_nospace: Gauge,
    items: Family<ItemLabels, Gauge>,
    revision: Gauge,
    disk_bytes: Gauge,
    guard_current: Family<KindGuardLabels, Gauge>,
    guard_limit: Family<KindGuardLabels, Gauge>,
    registered: Family<KindLabels, Gauge>,
    evacuation_tokens: Family<KindLabels, Gauge<f64, AtomicU64>>,
    etcd_role: Family<RoleLabels, Gauge>,
    etcd_elections: Family<ElectionLabels, Counter>,
    etcd_writer: Family<WriterLabels, Gauge>,
    etcd_member_version: Family<MemberVersionLabels, Gauge>,
    replica_lag_entries: Gauge,
    replica_lag_seconds: Gauge<f64, AtomicU64>,
    /// Reads of the log's head a replica sent to confirm it is current, each shared by
    /// every read waiting when it was sent.
    pub replica_head_reads: Counter,
    /// The TLS listener's.
    pub tls: TlsMetrics,
    /// Retractions and the webhook's alerts.
    pub detectors: DetectorMetrics,
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
        let idempotent_replays = Counter::default();
        registry.register(
            "idempotent_replays",
            "Writes answered from an Idempotency-Key's record (the same request again) instead \
             of applied",
            idempotent_replays.clone(),
        );
        let guard_refusals = Family::<GuardLabels, Counter>::default();
        registry.register(
            "guard_refusals",
            "Add batches refused by a guardrail, by guard",
            guard_refusals.clone(),
        );
        // Every guard's series from the start, so a query sees 0 rather than nothing.
        for guard in Guard::ALL {
            let _ = guard_refusals.get_or_create(&GuardLabels {
                guard: guard.as_str(),
            });
        }
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
        let forwarded_seconds = Family::<ForwardLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.000_05, 2.0, 18))
        });
        registry.register(
            "forwarded_request_duration_seconds",
            "Requests sent on to the writer of the etcd prefix, by outcome (answered, \
             no_writer, failed): from their arrival to the writer's answer",
            forwarded_seconds.clone(),
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
        let commit_failures = Family::<CommitStageLabels, Counter>::default();
        registry.register(
            "commit_failures",
            "Group commits that failed, by stage: transaction (nothing of it was applied) or \
             sync (its flush, fsync or etcd write failed: durable or not, the reopen finds out)",
            commit_failures.clone(),
        );
        // Each stage's series from the start, at 0: an alert's rate needs a series to
        // rise from.
        for stage in COMMIT_STAGES {
            commit_failures
                .get_or_create(&CommitStageLabels { stage })
                .inc_by(0);
        }
        let etcd_nospace = Gauge::default();
        registry.register(
            "etcd_nospace",
            "On etcd, 1 while etcd refuses writes with its NOSPACE alarm (the daemon serves \
             reads and refuses writes until an operator frees space and disarms it), else 0",
            etcd_nospace.clone(),
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
        let guard_current = Family::<KindGuardLabels, Gauge>::default();
        registry.register(
            "guard_current",
            "Each count guard's current figure: items of the kind (max-items), registered ids \
             effectively blocked (blocked-share) or evacuating (evacuating-share)",
            guard_current.clone(),
        );
        let guard_limit = Family::<KindGuardLabels, Gauge>::default();
        registry.register(
            "guard_limit",
            "Each count guard's limit, in ids; absent while the guard is off or does not apply",
            guard_limit.clone(),
        );
        let registered = Family::<KindLabels, Gauge>::default();
        registry.register(
            "registered",
            "Registered ids per kind (a node, while a task manager is registered on it)",
            registered.clone(),
        );
        let evacuation_tokens = Family::<KindLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "evacuation_tokens",
            "New evacuations the rate admits now, per kind with a rate",
            evacuation_tokens.clone(),
        );
        let etcd_role = Family::<RoleLabels, Gauge>::default();
        registry.register(
            "etcd_role",
            "On etcd, 1 for this daemon's role on its prefix: writer; replica (follows the \
             prefix, serves reads, sends writes on to the writer); candidate (its lease ended: \
             sends every request on until it wins the writer key back); no series on sled",
            etcd_role.clone(),
        );
        let etcd_elections = Family::<ElectionLabels, Counter>::default();
        registry.register(
            "etcd_elections",
            "On etcd, this daemon's terms as the writer of its prefix: won (it became the \
             writer), lost (a term ended while it ran: its lease ended or another daemon took \
             the writer key)",
            etcd_elections.clone(),
        );
        let etcd_writer = Family::<WriterLabels, Gauge>::default();
        registry.register(
            "etcd_writer",
            "On etcd, 1 for the writer of the prefix as this daemon last saw it, by the name it \
             announced (process and address); no series while it knows none",
            etcd_writer.clone(),
        );
        let etcd_member_version = Family::<MemberVersionLabels, Gauge>::default();
        registry.register(
            "etcd_member_version",
            "On etcd, 1 for each member's version as this daemon last read it (at start and \
             every 10 s), by endpoint; fixed=\"false\": the release lacks etcd's fixes for \
             linearizable reads and the watch (older than 3.4.42, 3.5.28, 3.6.9)",
            etcd_member_version.clone(),
        );
        let replica_lag_entries = Gauge::default();
        registry.register(
            "replica_lag_entries",
            "On a replica, how many entries of the etcd prefix's log it had not applied when it \
             last read how far the log reached (0 on the writer and on sled)",
            replica_lag_entries.clone(),
        );
        let replica_lag_seconds = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "replica_lag_seconds",
            "On a replica, for how long it has been behind the etcd prefix's log (0 while it is \
             current)",
            replica_lag_seconds.clone(),
        );
        let replica_head_reads = Counter::default();
        registry.register(
            "replica_head_reads",
            "On a replica, reads of the etcd log's head sent to confirm it shows every \
             acknowledged write; each is shared by every read waiting when it was sent",
            replica_head_reads.clone(),
        );
        let tls = TlsMetrics::register(&mut registry);
        let detectors = DetectorMetrics::register(&mut registry);
        Metrics {
            registry,
            changes,
            conflicts,
            idempotent_replays,
            guard_refusals,
            rejected,
            request_seconds,
            forwarded_seconds,
            sweeper_lag_seconds,
            reclaimed_entries,
            unreclaimed,
            sweeper_next_deadline,
            commit_batch_requests,
            commit_seconds,
            commit_failures,
            etcd_nospace,
            items,
            revision,
            disk_bytes,
            guard_current,
            guard_limit,
            registered,
            evacuation_tokens,
            etcd_role,
            etcd_elections,
            etcd_writer,
            etcd_member_version,
            replica_lag_entries,
            replica_lag_seconds,
            replica_head_reads,
            tls,
            detectors,
        }
    }

    /// Counts one refused batch under each guard it broke.
    pub fn refused(&self, guards: impl IntoIterator<Item = Guard>) {
        let mut counted = Vec::new();
        for guard in guards {
            if !counted.contains(&guard) {
                counted.push(guard);
                self.guard_refusals
                    .get_or_create(&GuardLabels {
                        guard: guard.as_str(),
                    })
                    .inc();
            }
        }
    }

    /// Counts one group commit that failed at `stage` (a [`CommitStageLabels`] stage).
    pub fn commit_failed(&self, stage: &'static str) {
        debug_assert!(COMMIT_STAGES.contains(&stage), "{stage}");
        self.commit_failures
            .get_or_create(&CommitStageLabels { stage })
            .inc();
    }

    pub fn change(&self, event: EventType) {
        self.changes
            .get_or_create(&ChangeLabels {
                event: event.as_str(),
            })
            .inc();
    }

    /// The text exposition in `format`, with the store's gauges as `store` read them.
    pub fn render(&self, store: &StoreGauges, format: Exposition) -> String {
        for &(kind, action, count) in &store.items {
            let labels = ItemLabels {
                kind: kind.singular(),
                action: action.as_str(),
            };
            self.items.get_or_create(&labels).set(count as i64);
        }
        self.revision.set(store.revision as i64);
        self.unreclaimed.set(store.unreclaimed as i64);
        self.sweeper_next_deadline.set(
            store
                .sweeper_next_deadline_ms
                .map_or(0.0, |ms| ms as f64 / 1000.0),
        );
        if let Some(bytes) = store.disk_bytes {
            self.disk_bytes.set(bytes as i64);
        }
        for figure in &store.guards {
            let labels = KindGuardLabels {
                kind: figure.kind.singular(),
                guard: figure.guard.as_str(),
            };
            self.guard_current
                .get_or_create(&labels)
                .set(figure.current as i64);
            match figure.limit {
                Some(limit) => {
                    self.guard_limit.get_or_create(&labels).set(limit as i64);
                }
                None => {
                    self.guard_limit.remove(&labels);
                }
            }
        }
        for &(kind, count) in &store.registered {
            let labels = KindLabels {
                kind: kind.singular(),
            };
            self.registered.get_or_create(&labels).set(count as i64);
        }
        for kind in Kind::ALL {
            let labels = KindLabels {
                kind: kind.singular(),
            };
            match store.evacuation_tokens.iter().find(|(k, _)| *k == kind) {
                Some(&(_, tokens)) => {
                    self.evacuation_tokens.get_or_create(&labels).set(tokens);
                }
                None => {
                    self.evacuation_tokens.remove(&labels);
                }
            }
        }
        if let Some(role) = store.etcd_role {
            for other in ROLES.into_iter().filter(|&r| r != role) {
                self.etcd_role.remove(&RoleLabels { role: other });
            }
            self.etcd_role.get_or_create(&RoleLabels { role }).set(1);
        }
        if let Some((won, lost)) = store.etcd_elections {
            // The store counts; the counters catch up with it at each scrape.
            for (outcome, count) in [("won", won), ("lost", lost)] {
                let counter = self
                    .etcd_elections
                    .get_or_create(&ElectionLabels { outcome });
                counter.inc_by(count.saturating_sub(counter.get()));
            }
        }
        // One series at most: the writer now.
        self.etcd_writer.clear();
        if let Some(name) = &store.etcd_writer {
            self.etcd_writer
                .get_or_create(&WriterLabels { name: name.clone() })
                .set(1);
        }
        // A member's series goes with the version it reported last.
        self.etcd_member_version.clear();
        for (member, version, fixed) in &store.etcd_member_versions {
            let labels = MemberVersionLabels {
                member: member.clone(),
                version: version.clone(),
                fixed: if *fixed { "true" } else { "false" },
            };
            self.etcd_member_version.get_or_create(&labels).set(1);
        }
        self.etcd_nospace.set(i64::from(store.etcd_nospace));
        let (entries, seconds) = store.replica_lag.unwrap_or_default();
        self.replica_lag_entries.set(entries as i64);
        self.replica_lag_seconds.set(seconds);
        let mut out = String::new();
        match format {
            Exposition::Prometheus => prometheus_text::encode(&mut out, &self.registry),
            Exposition::OpenMetrics => text::encode(&mut out, &self.registry),
        }
        .expect("writing to a String does not fail");
        out
    }
}

#[cfg(test)]
mod tests;
