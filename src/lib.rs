//! blocklistd: a persistent blocklist daemon with Apache Flink's FLIP-224 semantics.
//!
//! Callers block task managers or nodes over REST, for a while or for good; the daemon
//! merges repeated reports, expires items on time, and acknowledges a write only once it is
//! on disk.
//!
//! # Layout
//! - `daemon`: the orchestration: [`run`] from the flags to a serving listener and back
//!   down, the writer's store and sweeper, and on etcd the roles taken in turn (replica,
//!   writer, replica again), their transitions a pure function.
//! - [`config`]: flags and environment variables.
//! - [`model`]: the pure domain: kinds, actions, items, the merge rule, id rules.
//! - [`validate`]: request JSON to validated domain values, with every error named.
//! - [`policy`]: the guardrails: what a caller may do to the blocklist at most (caps,
//!   evacuation rates, escalation), asked inside the transaction of the write; pure.
//! - [`alerts`]: Alertmanager's webhook payload, and what each alert asks of the blocklist
//!   (a report while it fires, its retraction once resolved); pure.
//! - [`allowlist`]: ids (exact, or by prefix) that may never be blocked, with why, who and
//!   until when; pure.
//! - [`provenance`]: who reported an item, the blocks an id had before, and the selectors
//!   of an unblock by provenance; pure, like [`model`].
//! - [`enforcement`]: what enforcers (a bridge acting on the blocklist in a cluster)
//!   report they did about blocked items: never provenance, never a change of the block.
//! - [`store`]: the only module that touches sled: trees, key and value encodings,
//!   migrations, the single group-commit writer and its durability (flush + fsync) thread.
//! - [`check`]: the effective "is this task manager or node blocked?" answer.
//! - [`sweeper`]: the expiry loop over the store's expiry index.
//! - [`sweep_signal`]: the sweeper's wake-up protocol, which the committer raises; below
//!   both the store and the sweeper, so that neither imports the other.
//! - [`http`]: the axum front end (routes, extractors, the error response, listings
//!   streamed with back-pressure, and the `OpenAPI` document generated from the handlers'
//!   annotations).
//! - [`listing`]: listings produced in bounded chunks (resumed by key), which the HTTP
//!   layer streams and the offline export collects.
//! - [`backup`]: export and import as JSON lines.
//! - [`offline`]: the `check`, `export`, `salvage` and `import` subcommands.
//! - [`progress`]: how far long offline work has got, on stderr: a bar on a terminal, one
//!   summary line otherwise; the work reports through its `Progress` trait.
//! - [`shell`]: completion scripts and manual pages from the clap definitions (both
//!   binaries' `completion` and `man` subcommands).
//! - [`metrics`]: the Prometheus registry.
//! - [`tls`]: TLS (rustls): the listener's certificate, reloaded without a restart, the
//!   identity of a client certificate, and the client side of a request sent on to the
//!   writer.
//! - [`pem`]: certificates and keys read from PEM files, the file named in every error.
//! - [`clock`]: unix-ms wall-clock time, and the daemon's clock, which never goes back
//!   before what was announced expired.

pub mod alerts;
pub mod allowlist;
pub mod backup;
pub mod check;
pub mod clock;
pub mod config;
mod daemon;
pub mod enforcement;
pub mod http;
pub mod listing;
pub mod metrics;
pub mod model;
pub mod offline;
pub mod pem;
pub mod policy;
pub mod progress;
pub mod provenance;
pub mod shell;
pub mod store;
pub mod sweep_signal;
pub mod sweeper;
pub mod tls;
pub mod validate;

pub use daemon::{run, Error};
