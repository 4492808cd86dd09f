//! `blocklist-yarn`: the YARN bridge of blocklistd. Every node the daemon blocks has its
//! NodeManagers put into an exclusive partition (a node label) no application asks for, so
//! the ResourceManager places no new container there; an unblocked one goes back to the
//! partition it came from, which the name of the bridge's partition records. A block with
//! evacuation also has the node's Flink containers stopped, paced. The running Flink
//! applications' containers (their task managers) are the daemon's membership. It never
//! moves a NodeManager the blocklist does not name, never removes a label, and changes
//! nothing while it cannot read the daemon or the ResourceManager.
//!
//! - `partition`: where a blocked NodeManager goes, and the record of where it came from;
//! - `plan`: what the ResourceManager should hold, as a pure function;
//! - `shape`: the ResourceManager's JSON, in each of the forms one list comes in;
//! - `rm`: the ResourceManager's REST API;
//! - `bridge`: what every part shares;
//! - `follow`: the daemon's blocked nodes, kept current by the change feed;
//! - `pass`: read, plan, write, read back, report;
//! - `membership`: Flink's containers registered with the daemon on their nodes;
//! - `evacuation`: the containers of a node blocked with evacuation stopped, paced;
//! - `metrics`, `serve`: `/metrics`, `/healthz`, `/readyz`.

pub mod bridge;
pub mod evacuation;
pub mod follow;
pub mod membership;
pub mod metrics;
pub mod partition;
pub mod pass;
pub mod plan;
pub mod rm;
pub mod serve;
pub mod shape;
