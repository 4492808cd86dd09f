//! The two ceilings the daemon is measured against in the same run.
//!
//! - **HTTP ceiling**: an axum server with handlers that do nothing (GET answers a small
//!   JSON, POST parses a small JSON body and answers 201). It runs as a separate process
//!   (this binary, re-executed with a hidden subcommand) on the same tokio runtime setup as
//!   the daemon, so client and server split the two cores exactly as they do against the
//!   daemon. No handler on this stack can beat it.
//! - **Store ceiling**: the daemon's keys and values (from `blocklistd::store::{keys, codec}`)
//!   inserted straight into sled, items + expiry index, one transaction per 100 items and
//!   one flush + fsync of the log per transaction (the daemon's durability), no HTTP.

use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use axum::extract::Path as UrlPath;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use blocklistd::model::{Action, Block, Kind, Provenance};
use blocklistd::store::{codec, keys};
use sled::Transactional;

use crate::load::{histogram, Phase};
use crate::server::Server;

/// The hidden subcommand that runs the HTTP ceiling server.
pub const SERVE_SUBCOMMAND: &str = "__serve-http-ceiling";

/// Starts the HTTP ceiling server as a child process.
pub fn spawn_http(log: &Path) -> Result<Server, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut command = Command::new(exe);
    command.arg(SERVE_SUBCOMMAND);
    Server::spawn(command, log)
}

/// The ceiling server's `main`: serves until its stdin closes (the bench dropped it or
/// died), so it can never outlive the run.
pub fn serve_http() -> ExitCode {
    std::thread::spawn(|| {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        std::process::exit(0);
    });
    // The daemon's runtime: `Runtime::new()`, one worker per core.
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        println!(
            "listening on {}",
            listener.local_addr().expect("local addr")
        );
        let app = Router::new()
            .route("/ceiling/{id}", get(ceiling_get))
            .route("/ceiling", post(ceiling_post));
        axum::serve(listener, app).await.expect("serve");
    });
    ExitCode::SUCCESS
}

/// A check-sized answer with a path parameter, like `GET /blocklist/check/taskmanagers/{id}`.
async fn ceiling_get(UrlPath(id): UrlPath<String>) -> Json<serde_json::Value> {
    Json(serde_json::json!({"id": id, "blocked": false, "action": null, "blockedBy": []}))
}

/// Parses the same JSON an add request carries, then answers 201 like an add.
async fn ceiling_post(Json(body): Json<serde_json::Value>) -> StatusCode {
    std::hint::black_box(body);
    StatusCode::CREATED
}

/// Items per store-ceiling transaction.
pub const STORE_TX_ITEMS: usize = 100;

/// Runs the store ceiling in `dir` for `duration` (at most `max_tx` transactions), with the
/// daemon's sled settings (64 MiB cache, no background flusher). Blocking: call it off the
/// async runtime. Latency is per transaction (100 items, flushed and fsynced).
pub fn store_ceiling(dir: &Path, duration: Duration, max_tx: u64) -> Result<StorePhase, String> {
    let db = sled::Config::new()
        .path(dir)
        .cache_capacity(64 * 1024 * 1024)
        // The daemon's segment size, so the ceiling measures the same log.
        .segment_size(blocklistd::store::SEGMENT_BYTES)
        .flush_every_ms(None)
        .open()
        .map_err(|e| format!("open sled: {e}"))?;
    let items = db.open_tree("items").map_err(|e| e.to_string())?;
    let expiry = db.open_tree("expiry").map_err(|e| e.to_string())?;
    let log = std::fs::File::open(dir.join("db")).map_err(|e| format!("open log: {e}"))?;
    let mut hist = histogram();
    let mut split = StoreSplit::default();
    let mut seq = 0u64;
    let mut tx = 0u64;
    let started = Instant::now();
    let deadline = started + duration;
    while Instant::now() < deadline && tx < max_tx {
        let t0 = Instant::now();
        let now = blocklistd::clock::now_ms();
        // The same bytes the daemon writes for a fresh 1-hour item.
        let batch: Vec<(Vec<u8>, Vec<u8>, Vec<u8>)> = (0..STORE_TX_ITEMS)
            .map(|_| {
                seq += 1;
                let id = format!("sc-{seq}");
                let block = Block {
                    action: Action::MarkBlocked,
                    start: now,
                    end: now + 3_600_000,
                    cause: "bench".into(),
                    forced: None,
                    provenance: Provenance::first("bench", now),
                    revision: 0,
                    escalated: None,
                };
                (
                    keys::item_key(Kind::TaskManager, &id),
                    codec::encode_block(&block),
                    keys::expiry_key(block.end, Kind::TaskManager, &id),
                )
            })
            .collect();
        let t_tx = Instant::now();
        (&items, &expiry)
            .transaction(|(items, expiry)| {
                for (key, value, expiry_key) in &batch {
                    items.insert(key.as_slice(), value.as_slice())?;
                    expiry.insert(expiry_key.as_slice(), &[] as &[u8])?;
                }
                Ok::<_, sled::transaction::ConflictableTransactionError<()>>(())
            })
            .map_err(|e| format!("transaction: {e:?}"))?;
        let t_flush = Instant::now();
        db.flush().map_err(|e| format!("flush: {e}"))?;
        let t_fsync = Instant::now();
        log.sync_data().map_err(|e| format!("fsync: {e}"))?;
        split.encode += t_tx - t0;
        split.transaction += t_flush - t_tx;
        split.flush += t_fsync - t_flush;
        split.fsync += t_fsync.elapsed();
        hist.saturating_record(t0.elapsed().as_micros().max(1) as u64);
        tx += 1;
    }
    Ok(StorePhase {
        phase: Phase {
            ops: tx,
            items: tx * STORE_TX_ITEMS as u64,
            errors: 0,
            first_error: None,
            elapsed: started.elapsed(),
            latency_us: hist,
        },
        split,
    })
}

/// Where the store ceiling's time went, summed over its transactions: the evidence of what
/// limits the store (and so the daemon's committer, which does the same work).
#[derive(Debug, Default, Clone, Copy)]
pub struct StoreSplit {
    /// Building keys and values (`keys`, `codec`).
    pub encode: Duration,
    /// The sled transaction over items + expiry.
    pub transaction: Duration,
    /// `Db::flush()` (sled's write of its buffers: pwrite + `sync_file_range`).
    pub flush: Duration,
    /// `fdatasync` of the log.
    pub fsync: Duration,
}

pub struct StorePhase {
    pub phase: Phase,
    pub split: StoreSplit,
}
