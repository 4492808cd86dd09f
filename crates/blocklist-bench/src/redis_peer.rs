//! The peer a team would otherwise build: Redis with `appendonly yes` and
//! `appendfsync always` (every acknowledged write fsynced, like the daemon), on a private
//! port and directory, doing the equivalent work:
//! - per add: `MULTI; HSET items <key> <value>; ZADD expiry <end> <key>; EXEC`;
//! - per check: `HGET items <key>`.
//!
//! Keys and values are the daemon's own bytes (`blocklistd::store::{keys, codec}`), so both
//! sides store the same data. Skipped, with a note, when `redis-server` is not on PATH.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use blocklistd::model::{Action, Block, Kind, Provenance};
use blocklistd::store::{codec, keys};
use redis::aio::MultiplexedConnection;

use crate::load::{Rng, Worker};
use crate::server::{free_port, which, PeerProcess};

pub const NOT_INSTALLED: &str =
    "peer skipped: redis-server is not on PATH (install it: apt-get install -y redis-server)";

pub struct Redis {
    process: PeerProcess,
    client: redis::Client,
}

impl Redis {
    /// Starts `redis-server` in `dir`, or `Ok(None)` when it is not installed.
    pub async fn start(dir: &Path) -> Result<Option<Redis>, String> {
        let Some(bin) = which("redis-server") else {
            return Ok(None);
        };
        let port = free_port()?;
        let log = dir.join("redis.log");
        let child = Command::new(bin)
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .arg("--dir")
            .arg(dir)
            .args(["--appendonly", "yes", "--appendfsync", "always"])
            // No RDB snapshots: they would fork and compete for the two cores mid-run.
            .args(["--save", "", "--daemonize", "no", "--protected-mode", "yes"])
            .arg("--logfile")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start redis-server: {e}"))?;
        let mut process = PeerProcess::new("redis-server", child, log);
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .map_err(|e| format!("redis client: {e}"))?;
        process
            .wait_answering(Duration::from_secs(15), || {
                let client = client.clone();
                async move {
                    match client.get_multiplexed_async_connection().await {
                        Ok(mut con) => redis::cmd("PING").exec_async(&mut con).await.is_ok(),
                        Err(_) => false,
                    }
                }
            })
            .await?;
        Ok(Some(Redis { process, client }))
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    pub async fn connect(&self) -> Result<MultiplexedConnection, String> {
        self.client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| format!("redis connect: {e}"))
    }

    /// Stores items like `bulk_add` does on the daemon: `item(i)` for `i in 0..count`,
    /// pipelined in chunks (each chunk is one write and one fsync on the server).
    pub async fn load(
        &self,
        count: usize,
        item: &(dyn Fn(usize) -> (Kind, String, i64) + Sync),
    ) -> Result<(), String> {
        let mut con = self.connect().await?;
        let now = blocklistd::clock::now_ms();
        for first in (0..count).step_by(1_000) {
            let mut pipe = redis::pipe();
            for index in first..(first + 1_000).min(count) {
                let (kind, id, end) = item(index);
                add_item(&mut pipe, &keys::item_key(kind, &id), now, end);
            }
            pipe.exec_async(&mut con)
                .await
                .map_err(|e| format!("redis load: {e}"))?;
        }
        Ok(())
    }
}

/// The peer's equivalent of one add: the item (the daemon's own key and value bytes) and
/// its expiry-index entry.
fn add_item(pipe: &mut redis::Pipeline, key: &[u8], now: i64, end: i64) {
    let value = codec::encode_block(&Block {
        action: Action::MarkBlocked,
        start: now,
        end,
        cause: "bench".into(),
        forced: None,
        provenance: Provenance::first("bench", now),
        revision: 0,
        escalated: None,
    });
    pipe.cmd("HSET")
        .arg("items")
        .arg(key)
        .arg(value)
        .ignore()
        .cmd("ZADD")
        .arg("expiry")
        .arg(end)
        .arg(key)
        .ignore();
}

/// One add per call: a fresh id, `MULTI; HSET; ZADD; EXEC`, acknowledged after fsync.
pub struct AddWorker {
    pub con: MultiplexedConnection,
    pub worker: usize,
    pub seq: u64,
}

impl Worker for AddWorker {
    async fn call(&mut self) -> Result<u64, String> {
        self.seq += 1;
        let id = format!("add-{}-{}", self.worker, self.seq);
        let key = keys::item_key(Kind::TaskManager, &id);
        let now = blocklistd::clock::now_ms();
        let end = now + 3_600_000;
        let mut pipe = redis::pipe();
        pipe.atomic();
        add_item(&mut pipe, &key, now, end);
        pipe.exec_async(&mut self.con)
            .await
            .map_err(|e| e.to_string())?;
        Ok(1)
    }
}

/// One check per call: `HGET` of a random registered task manager `tm-{0..registered}`.
pub struct CheckWorker {
    pub con: MultiplexedConnection,
    pub rng: Rng,
    pub registered: u64,
}

impl Worker for CheckWorker {
    async fn call(&mut self) -> Result<u64, String> {
        let id = format!("tm-{}", self.rng.below(self.registered));
        let key = keys::item_key(Kind::TaskManager, &id);
        let _: Option<Vec<u8>> = redis::cmd("HGET")
            .arg("items")
            .arg(&key)
            .query_async(&mut self.con)
            .await
            .map_err(|e| e.to_string())?;
        Ok(1)
    }
}
