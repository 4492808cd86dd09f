//! `blocklist-flink`: the Flink watcher of blocklistd. It polls Flink clusters' exception
//! histories, counts each task failure once in a sliding window, and asks the daemon to
//! block a task manager whose failures stand out from the others running the same job,
//! and a node under enough of them — under its own source, as a `detector`.
//!
//! - `history`: what Flink's REST API answers, and the failures a history holds;
//! - `filter`: which failures say something about the machine;
//! - `window`: the failures counted, each once, in the sliding window;
//! - `judge`: who stands out, as a pure function (the table test);
//! - `flink`: one cluster's REST API;
//! - `report`: the daemon's side: the block asked for, whether it is held already;
//! - `watch`: one cluster followed, poll by poll;
//! - `metrics`, `serve`: `/metrics`, `/healthz`, `/readyz`.

pub mod filter;
pub mod flink;
pub mod history;
pub mod judge;
pub mod metrics;
pub mod report;
pub mod serve;
pub mod watch;
pub mod window;
