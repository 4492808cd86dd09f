//! The library of the `blocklist` client: what talks to a daemon, shared by the command
//! line (`src/main.rs`) and the binaries beside a cluster (`blocklist-kube`,
//! `blocklist-yarn`, `blocklist-flink`).
//!
//! - [`client`]: HTTP to one daemon: its base URL, TLS (a CA, a client certificate), the
//!   bearer token, writes retried with their `Idempotency-Key`, and every outcome mapped
//!   onto "refused" or "unreachable".
//! - [`sse`]: the change feed's Server-Sent Events, parsed incrementally.
//! - [`status`]: the spinner on stderr while a request is slow, on a terminal only;
//! - [`daemons`]: every daemon of a prefix, moved on from when one fails, for the binaries
//!   beside a cluster;
//! - [`sidecar`]: what the binaries beside a cluster share (their logs, `completion` and
//!   `man`, their runtime and stop signal);
//! - [`detector`]: a detector's reports under its own source, and their retraction;
//! - [`enforcer`]: an enforcer's side of the daemons: the blocked items, the feed's item
//!   events, the membership and the enforcer's statuses.

pub mod client;
pub mod daemons;
pub mod detector;
pub mod enforcer;
pub mod sidecar;
pub mod sse;
pub mod status;
