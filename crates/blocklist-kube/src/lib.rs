//! `blocklist-kube`: the Kubernetes bridge of blocklistd. Every node the daemon blocks
//! gets one `NoSchedule` taint of the bridge's own key and annotations that say why, by
//! whom and until when; a Node the blocklist no longer names loses exactly those. It
//! never touches another key's taint, never cordons, and changes nothing when it cannot
//! read the daemon.
//!
//! - `marking`: what a Node should carry, as a pure function (the patch);
//! - `nodes`: writing it, with the `resourceVersion` it was computed from;
//! - `daemon`: the blocked nodes, read from the daemon;
//! - `reconcile`: one full pass, the daemon read first;
//! - `follow`: the change feed, each node event applied as it comes, and the resyncs;
//! - `events`: Kubernetes Events on the Nodes it marks (who blocked, why);
//! - `desired`: what every Node should carry, as far as the bridge knows;
//! - `node_watch`: a Node that drifts from it (created later, changed by hand) put right;
//! - `membership`: the daemon's task managers kept current from the pods.

pub mod daemon;
pub mod desired;
pub mod events;
pub mod follow;
pub mod marking;
pub mod membership;
pub mod node_watch;
pub mod nodes;
pub mod reconcile;
