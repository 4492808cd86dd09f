//! `blocklist-kube`: the Kubernetes bridge of blocklistd. Every node the daemon blocks
//! gets one `NoSchedule` taint of the bridge's own key and annotations that say why, by
//! whom and until when; a Node the blocklist no longer names loses exactly those. A block
//! that asks for evacuation also has the work evicted, paced, budgets honoured. It
//! never touches another key's taint, never cordons, and changes nothing when it cannot
//! read the daemon. It keeps the daemon's membership current from the task managers'
//! pods, labels a blocked task manager's pod, and reports what it did to the daemon.
//!
//! - `bridge`: what every part shares, and how an outcome becomes a status;
//! - `marking`: what a Node should carry, as a pure function (the patch);
//! - `nodes`: writing it, with the `resourceVersion` it was computed from;
//! - `ceiling`: never more than a share of the Nodes tainted;
//! - `daemon`: the daemon's side (over the `blocklist` client's library);
//! - `reconcile`: one full pass, the daemon read first;
//! - `follow`: the change feed, each event applied as it comes, and the resyncs;
//! - `events`: Kubernetes Events on the Nodes it marks (who blocked, why);
//! - `desired`: what every Node should carry, as far as the bridge knows;
//! - `node_watch`: a Node that drifts from it (created later, changed by hand) put right;
//! - `membership`: the daemon's task managers kept current from the pods;
//! - `pods`: a blocked task manager's pod labelled;
//! - `evacuation`: the work moved off what is blocked with evacuation, paced, through
//!   `eviction` (the Eviction API), of the pods `evictable` says are work, from the cache
//!   `workload` keeps;
//! - `conditions`: the Node conditions an operator names, reported to the daemon as a
//!   detector while they hold, retracted when they clear;
//! - `leader`: one replica acts, elected through a Lease;
//! - `report`: the statuses sent to the daemon (`PUT /enforcement/{name}`);
//! - `metrics`, `serve`: `/metrics`, `/healthz`, `/readyz`.

pub mod bridge;
pub mod ceiling;
pub mod conditions;
pub mod daemon;
pub mod desired;
pub mod evacuation;
pub mod events;
pub mod evictable;
pub mod eviction;
pub mod follow;
pub mod leader;
pub mod marking;
pub mod membership;
pub mod metrics;
pub mod node_watch;
pub mod nodes;
pub mod pods;
pub mod reconcile;
pub mod report;
pub mod serve;
pub mod workload;
