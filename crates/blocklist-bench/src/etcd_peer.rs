//! The peer with the daemon's guarantees: etcd (every acknowledged write fsynced, keys with
//! a time to live through leases, a watch that resumes by revision), a single-node member
//! on private loopback ports and directory, driven over its native gRPC API with the
//! `etcd-client` crate:
//! - per add: a transaction that puts the item under a lease only if the key does not
//!   exist yet (`create_revision == 0`: the conflict rule of a fresh add);
//! - per check: a get (linearizable, etcd's default: it confirms leadership, like our
//!   durable read);
//! - per subscriber of the feed: a watch of the items' prefix.
//!
//! Keys are `/blocklist/{kind}/{id}` and values the daemon's own bytes
//! (`blocklistd::store::codec`), so both sides store the same data.
//!
//! Leases: a lease per item would double the writes (a grant is a raft entry of its own),
//! which is not how anyone uses etcd. Each worker shares one lease among the items whose
//! ends fall in the same second, so an item expires within a second of its end, as in the
//! daemon.
//!
//! Built only with the bench's `etcd` feature (the client's build needs `protoc`), and run
//! only when `--etcd-bin` (`etcd` on PATH by default) is there; skipped with a note
//! otherwise.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use blocklistd::model::{Action, Block, Kind, Provenance};
use blocklistd::store::codec;
use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp, WatchOptions, WatchStream};
use tokio::sync::watch;

use crate::delivery::{number_after, Acks, Delivery, Progress};
use crate::load::{Rng, Worker};
use crate::server::{free_port, which, PeerProcess};

pub const NOT_INSTALLED: &str = "etcd skipped: --etcd-bin is not there (etcd on PATH by \
    default: apt-get install -y etcd-server; or a build: tests/servers/build etcd-3.6)";

/// etcd's limit on operations per transaction (`--max-txn-ops`), for bulk loading.
const MAX_TXN_OPS: usize = 128;

pub struct Etcd {
    /// The member the bench started, held for its drop (which stops it); `None` on a
    /// cluster it was given (`--etcd-peer-endpoints`).
    _process: Option<PeerProcess>,
    endpoints: Vec<String>,
    /// The processes whose CPU is the peer's: the member started, or the given cluster's
    /// members found on this machine.
    pids: Vec<u32>,
}

impl Etcd {
    /// Starts a single-node etcd (`bin`: a name on PATH or a path) in `dir`, or `Ok(None)`
    /// when it is not there.
    pub async fn start(dir: &Path, bin: &Path) -> Result<Option<Etcd>, String> {
        let found = if bin.components().count() > 1 {
            bin.is_file().then(|| bin.to_owned())
        } else {
            which(&bin.to_string_lossy())
        };
        let Some(bin) = found else {
            return Ok(None);
        };
        let (client_port, peer_port) = (free_port()?, free_port()?);
        let endpoint = format!("http://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let log = dir.join("etcd.log");
        let log_file =
            std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let child = Command::new(bin)
            .args(["--name", "bench"])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &endpoint])
            .args(["--advertise-client-urls", &endpoint])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("bench={peer}")])
            // etcd's defaults otherwise (the WAL fsynced before every acknowledgement); the
            // backend quota from 2 to 8 GiB, room for the check fixture's million items and
            // the revisions the scenarios leave behind (nothing compacts them).
            .args(["--quota-backend-bytes", &(8u64 << 30).to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .map_err(|e| format!("cannot start etcd: {e}"))?;
        let mut process = PeerProcess::new("etcd", child, log);
        process
            .wait_answering(Duration::from_secs(20), || {
                let endpoint = endpoint.clone();
                async move {
                    match Client::connect([&endpoint], None).await {
                        Ok(mut client) => client.get("/ready", None).await.is_ok(),
                        Err(_) => false,
                    }
                }
            })
            .await?;
        let pids = vec![process.pid()];
        Ok(Some(Etcd {
            _process: Some(process),
            endpoints: vec![endpoint],
            pids,
        }))
    }

    /// A running cluster's `endpoints` as the peer (the cluster the daemons are measured
    /// on, so the peer's figures are the same etcd's): its members' CPU is counted when
    /// they run on this machine (found by their `--listen-client-urls`).
    pub async fn existing(endpoints: Vec<String>) -> Result<Etcd, String> {
        let pids = member_pids(&endpoints);
        let etcd = Etcd {
            _process: None,
            endpoints,
            pids,
        };
        etcd.connect().await?;
        Ok(etcd)
    }

    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    /// A client on a connection of its own (an HTTP/2 channel), over every endpoint.
    pub async fn connect(&self) -> Result<Client, String> {
        Client::connect(&self.endpoints, None)
            .await
            .map_err(|e| format!("etcd connect: {e}"))
    }

    /// Stores items like `bulk_add` does on the daemon: `item(i)` for `i in 0..count`, in
    /// transactions of etcd's maximum size, without leases (a get does not read one).
    pub async fn load(
        &self,
        count: usize,
        item: &(dyn Fn(usize) -> (Kind, String, i64) + Sync),
    ) -> Result<(), String> {
        let mut client = self.connect().await?;
        let now = blocklistd::clock::now_ms();
        for first in (0..count).step_by(MAX_TXN_OPS) {
            let puts: Vec<TxnOp> = (first..(first + MAX_TXN_OPS).min(count))
                .map(|index| {
                    let (kind, id, end) = item(index);
                    TxnOp::put(key(kind, &id), value(now, end), None)
                })
                .collect();
            client
                .txn(Txn::new().and_then(puts))
                .await
                .map_err(|e| format!("etcd load: {e}"))?;
        }
        Ok(())
    }
}

/// The processes on this machine that serve one of `endpoints` (an etcd member is started
/// with its client URL in `--listen-client-urls`).
fn member_pids(endpoints: &[String]) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            let serves = args.windows(2).any(|pair| {
                pair[0] == b"--listen-client-urls"
                    && endpoints.iter().any(|url| pair[1] == url.as_bytes())
            });
            serves.then_some(pid)
        })
        .collect()
}

pub fn key(kind: Kind, id: &str) -> String {
    format!("/blocklist/{}/{id}", kind.plural())
}

/// The prefix a watch of task-manager items follows.
pub fn task_managers_prefix() -> String {
    key(Kind::TaskManager, "")
}

fn value(now: i64, end: i64) -> Vec<u8> {
    codec::encode_block(&Block {
        action: Action::MarkBlocked,
        start: now,
        end,
        cause: "bench".into(),
        forced: None,
        provenance: Provenance::first("bench", now),
        revision: 0,
        escalated: None,
    })
}

/// One add per call: a fresh id, `txn(if create_revision == 0 then put with lease)`,
/// acknowledged after etcd's fsync.
pub struct AddWorker {
    client: Client,
    worker: usize,
    seq: u64,
    /// The lease for items ending in second `.0`: `.1`.
    lease: Option<(i64, i64)>,
    acks: Option<Arc<Acks>>,
}

impl AddWorker {
    pub async fn new(etcd: &Etcd, worker: usize, acks: Option<Arc<Acks>>) -> Result<Self, String> {
        Ok(AddWorker {
            client: etcd.connect().await?,
            worker,
            seq: 0,
            lease: None,
            acks,
        })
    }

    /// The lease every item ending in `end`'s second shares, granted on first use.
    async fn lease_for(&mut self, now: i64, end: i64) -> Result<i64, String> {
        let second = end / 1000;
        if let Some((for_second, id)) = self.lease {
            if for_second == second {
                return Ok(id);
            }
        }
        let ttl = (second * 1000 - now) / 1000 + 1;
        let id = self
            .client
            .lease_grant(ttl, None)
            .await
            .map_err(|e| format!("lease grant: {e}"))?
            .id();
        self.lease = Some((second, id));
        Ok(id)
    }
}

impl Worker for AddWorker {
    async fn call(&mut self) -> Result<u64, String> {
        let (id, n) = match &self.acks {
            Some(acks) => acks.next_id(),
            None => {
                self.seq += 1;
                (format!("add-{}-{}", self.worker, self.seq), 0)
            }
        };
        let key = key(Kind::TaskManager, &id);
        let now = blocklistd::clock::now_ms();
        let end = now + 3_600_000;
        let lease = self.lease_for(now, end).await?;
        let put = TxnOp::put(
            key.clone(),
            value(now, end),
            Some(PutOptions::new().with_lease(lease)),
        );
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([put]);
        let reply = self.client.txn(txn).await.map_err(|e| e.to_string())?;
        if !reply.succeeded() {
            return Err(format!("{id} exists"));
        }
        if let Some(acks) = &self.acks {
            acks.acked(n);
        }
        Ok(1)
    }
}

/// One check per call: a get of a random registered task manager `tm-{0..registered}`.
pub struct CheckWorker {
    client: Client,
    rng: Rng,
    registered: u64,
}

impl CheckWorker {
    pub async fn new(etcd: &Etcd, seed: u64, registered: u64) -> Result<Self, String> {
        Ok(CheckWorker {
            client: etcd.connect().await?,
            rng: Rng::new(seed),
            registered,
        })
    }
}

impl Worker for CheckWorker {
    async fn call(&mut self) -> Result<u64, String> {
        let id = format!("tm-{}", self.rng.below(self.registered));
        self.client
            .get(key(Kind::TaskManager, &id), None)
            .await
            .map_err(|e| e.to_string())?;
        Ok(1)
    }
}

/// A watch of every task-manager item, on a connection of its own, created (etcd has
/// confirmed it) when this returns.
pub async fn watch(etcd: &Etcd) -> Result<WatchStream, String> {
    let mut client = etcd.connect().await?;
    let mut stream = client
        .watch(
            task_managers_prefix(),
            Some(WatchOptions::new().with_prefix()),
        )
        .await
        .map_err(|e| format!("etcd watch: {e}"))?;
    match stream.message().await {
        Ok(Some(reply)) if reply.created() => Ok(stream),
        other => Err(format!("etcd watch not created: {other:?}")),
    }
}

/// Follows `stream` until `stop`, timing the events of `acks`' adds.
pub async fn follow(
    mut stream: WatchStream,
    acks: Arc<Acks>,
    progress: Arc<Progress>,
    mut stop: watch::Receiver<bool>,
) -> Result<Delivery, String> {
    let needle = key(Kind::TaskManager, acks.prefix()).into_bytes();
    let mut delivery = Delivery::new();
    while !*stop.borrow() {
        let message = tokio::select! {
            message = stream.message() => message,
            _ = stop.changed() => break,
        };
        let reply = match message {
            Ok(Some(reply)) => reply,
            Ok(None) => return Err("etcd ended the watch".into()),
            Err(e) => return Err(format!("etcd watch: {e}")),
        };
        let received = Instant::now();
        for event in reply.events() {
            progress.event();
            if let Some(n) = event.kv().and_then(|kv| number_after(kv.key(), &needle)) {
                acks.received(n, received, &mut delivery);
                progress.timed();
            }
        }
    }
    Ok(delivery)
}
