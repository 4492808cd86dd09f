//! The daemon's side: the enforcer's part of the `blocklist` client's library (the blocked
//! items, the change feed, the membership and the bridge's statuses), shared with
//! `blocklist-yarn`.

pub use blocklist::enforcer::{Daemon, FeedError, Registration, Status};
