//! Test harness: the real `blocklistd` binary on `127.0.0.1:0` with a temporary data dir,
//! spoken to over real HTTP.
//!
//! - `process`: starting, killing and stopping the daemon; its offline subcommands;
//! - `chart`: the Helm chart rendered by a real `helm`, and its examples;
//! - `alerting`: real Prometheus and Alertmanager processes, and a scrape target to flip;
//! - `etcd`: an etcd cluster of the test's own (`--store etcd`);
//! - `flink`: a real Flink cluster (a `JobManager` and task managers of chosen ids in one JVM)
//!   and the Flink watcher;
//! - `kube`: a kube-apiserver of the test's own, on an etcd member of its own;
//! - `yarn`: a YARN ResourceManager of the test's own (`MiniYARNCluster`), and an
//!   application master that asks for containers on command;
//! - `http`: JSON requests and the pieces of their answers;
//! - `sse`: the change feed's client;
//! - `proxy`: a TCP proxy a test cuts, for a partition;
//! - `replicas`: three daemons on one etcd prefix, the writer and two replicas;
//! - `raw`: a raw-socket HTTP/1.1 client;
//! - `metrics`: `/metrics` samples;
//! - `offline`: the data dir opened in-process (sled, or the store) while no daemon runs;
//! - `rules`: the alerting rules run by `promtool` against a real process's `/metrics`;
//! - `pki`: a private CA and the certificates it signs, for the TLS tests;
//! - `tools`: the external tools some tests need, the servers built from Go modules
//!   (`tests/servers/build`), and the skip-or-fail rule when one is missing;
//! - `terminal`: a binary run on a pseudo-terminal, and what it drew;
//! - `sidecar`: a binary beside the daemon (the Flink watcher, the YARN bridge), started;
//! - `shell`: the completion scripts and manual pages both binaries print, checked.
// Each test file uses a different part of the harness.
#![allow(dead_code, unused_imports)]

mod alerting;
mod chart;
mod etcd;
mod flink;
mod http;
mod kube;
mod metrics;
mod offline;
mod pki;
mod process;
mod proxy;
mod raw;
mod replicas;
mod rules;
mod shell;
mod sidecar;
mod sse;
mod terminal;
mod tools;
mod yarn;

use std::time::{Duration, Instant};

pub use alerting::*;
pub use chart::*;
pub use etcd::*;
pub use flink::*;
pub use http::*;
pub use kube::*;
pub use metrics::*;
pub use offline::*;
pub use pki::*;
pub use process::*;
pub use proxy::*;
pub use raw::*;
pub use replicas::*;
pub use rules::*;
pub use shell::*;
pub use sidecar::*;
pub use sse::*;
pub use terminal::*;
pub use tools::*;
pub use yarn::*;

/// How long anything in a test may take before it counts as hung.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// Polls `check` until it returns true, panicking after [`DEADLINE`].
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn now_ms() -> i64 {
    blocklistd::clock::now_ms()
}
