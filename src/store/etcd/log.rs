//! The log of groups under the prefix, and its folding into one key per stored key.
//!
//! Keys under the prefix `P`:
//! - `P/log/<entry>` (20 decimal digits): a group's writes — a format byte and how many
//!   parts follow (bincode), then the first part of the encoded [`Write`]s;
//! - `P/log/<entry>/<part>` (10 digits): a further part, when the writes exceed what one
//!   etcd request may carry (`--etcd-max-request-bytes`). Parts are put before their
//!   entry, so an entry that exists has all its parts; parts without an entry (a writer
//!   stopped between them) are never replayed, and a later entry of the same number
//!   overwrites them;
//! - `P/kv/<tree>/<key>`: the value every entry up to `P/applied` left under `key` of
//!   `tree` (a removed key has none), and `P/applied`: that entry's number;
//! - `P/head`: the number of the last entry, put in the entry's own transaction. It only
//!   grows, and a fold never deletes it: a replica reads it to learn how far the log
//!   reached before its read began ([`super::follow`]).
//!
//! Every put compares the writer key's create revision with the fence; an entry's put also
//! requires the entry absent. An entry is put once the syncer has flushed its groups, and
//! acknowledged once etcd answered.
//!
//! **Folding** keeps the log short: once enough entries piled up, the writer puts the last
//! value of every key they wrote under `P/kv/` (in transactions of at most
//! `--etcd-max-txn-ops`), then `P/applied`, then deletes the entries up to it. It runs on
//! etcd's runtime, beside the next groups' entries; a fold cut short leaves values of
//! entries still in the log, which the next restore replays over them in order, so the
//! result is the same.
//!
//! A **restore** reads, at one etcd revision, `P/applied`, every `P/kv/` key and every
//! entry after `P/applied`, and replays them in that order.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use etcd_client::{
    AlarmAction, AlarmType, Client, Compare, CompareOp, DeleteOptions, GetOptions, KeyValue, Txn,
    TxnOp,
};
use serde::{Deserialize, Serialize};

use super::log_state::Log;
use super::members::{Attempt, Members};
use super::{etcd_error, Etcd};
use crate::store::error::ETCD_NOSPACE;
use crate::store::writes::{replay, Replicate, Write};
use crate::store::TreeId;
use crate::store::{StoreError, Trees};

/// The format byte of a log entry; the only one so far.
pub(super) const ENTRY_FORMAT: u8 = 1;

/// Room left in a request beside the part itself: the keys, the compares, gRPC framing.
const REQUEST_OVERHEAD: usize = 4 * 1024;

/// What one operation of a transaction costs beside its key and value (protobuf framing).
const OP_OVERHEAD: usize = 16;

/// How many log keys one read of a restore asks for (each at most one request's size),
/// and how many folded keys.
const LOG_PAGE: i64 = 16;
const KV_PAGE: i64 = 10_000;

/// Folding also starts once the entries waiting wrote this many keys (beside
/// `--etcd-fold-entries` entries): what waits is held in memory.
const FOLD_KEYS: usize = 50_000;

/// What [`Etcd::load`] read.
pub(crate) struct Loaded {
    /// How many folded keys and entries (0: a new prefix).
    pub read: u64,
    /// Where the log stands after them.
    pub(super) log: Log,
    /// The etcd revision they were read at.
    pub revision: i64,
}

/// A log entry's head: how many parts follow its own.
#[derive(Serialize, Deserialize)]
pub(super) struct Head {
    pub format: u8,
    pub parts: u32,
}

impl Etcd {
    fn entry_key(&self, entry: u64) -> String {
        self.key(&format!("log/{entry:020}"))
    }

    fn part_key(&self, entry: u64, part: u32) -> String {
        self.key(&format!("log/{entry:020}/{part:010}"))
    }

    pub(super) fn head_key(&self) -> String {
        self.key("head")
    }

    fn applied_key(&self) -> String {
        self.key("applied")
    }

    fn kv_prefix(&self) -> String {
        self.key("kv/")
    }

    /// Reads every key from `from` up to `end` (excluded) at one revision (the first
    /// page's, when `revision` is 0), `page` keys a request; returns that revision.
    fn scan(
        &self,
        what: &str,
        from: Vec<u8>,
        end: &[u8],
        mut revision: i64,
        page: i64,
        mut each: impl FnMut(&KeyValue) -> Result<(), StoreError>,
    ) -> Result<i64, StoreError> {
        let mut from = from;
        loop {
            let options = GetOptions::new()
                .with_range(end)
                .with_limit(page)
                .with_revision(revision);
            let start = from.clone();
            let response = self.call(what, move |client| {
                let mut kv = client.kv_client().max_decoding_message_size(usize::MAX);
                let (start, options) = (start.clone(), options.clone());
                async move { kv.get(start, Some(options)).await }
            })?;
            if revision == 0 {
                revision = response
                    .header()
                    .map_or(0, etcd_client::ResponseHeader::revision);
            }
            for kv in response.kvs() {
                each(kv)?;
            }
            let Some(last) = response.kvs().last() else {
                return Ok(revision);
            };
            if !response.more() {
                return Ok(revision);
            }
            from = last.key().to_vec();
            from.push(0);
        }
    }

    /// Rebuilds the mirror: the folded state and every entry after it, read at one
    /// revision, replayed onto `trees` (empty); takes the next entry's number. Returns how
    /// many keys and entries it read (0: a new prefix).
    pub fn restore(&self, trees: &Trees) -> Result<u64, StoreError> {
        let loaded = self.load(trees)?;
        *self.log.lock().expect("not poisoned") = loaded.log;
        Ok(loaded.read)
    }

    /// Reads the folded state and every entry after it at one revision, and replays them
    /// onto `trees` (empty).
    pub(super) fn load(&self, trees: &Trees) -> Result<Loaded, StoreError> {
        let key = self.applied_key();
        let response = self.call("reading the log's start", move |mut client| {
            let key = key.clone();
            async move { client.get(key, None).await }
        })?;
        let revision = response
            .header()
            .map_or(0, etcd_client::ResponseHeader::revision);
        let applied = match response.kvs().first() {
            Some(kv) => kv
                .value_str()
                .ok()
                .and_then(|text| text.parse::<u64>().ok())
                .ok_or_else(|| StoreError::Etcd(format!("{} is malformed", self.applied_key())))?,
            None => 0,
        };
        let prefix = self.kv_prefix();
        let mut folded = 0u64;
        let mut loader = Loader::new(trees);
        self.scan(
            "reading the folded state",
            prefix.clone().into_bytes(),
            self.key("kv0").as_bytes(), // '0' follows '/'
            revision,
            KV_PAGE,
            |kv| {
                let (tree, key) = parse_kv_key(&kv.key()[prefix.len()..])
                    .ok_or_else(|| StoreError::Etcd(format!("malformed key {:?}", kv.key_str())))?;
                loader.insert(tree, key, kv.value())?;
                folded += 1;
                Ok(())
            },
        )?;
        loader.finish()?;
        let log_prefix = self.key("log/");
        let mut pending: Option<(u64, u32, Vec<u8>)> = None;
        let mut entries = 0u64;
        // The entries after `applied` are replayed, and wait to be folded again: a fold
        // deletes every entry up to the last it folds.
        let mut log = Log {
            next_entry: applied + 1,
            ..Log::default()
        };
        self.scan(
            "reading the log",
            self.entry_key(applied + 1).into_bytes(),
            self.key("log0").as_bytes(),
            revision,
            LOG_PAGE,
            |kv| {
                let key = kv.key_str().map_err(|e| etcd_error("a log key", e))?;
                let malformed = || StoreError::Etcd(format!("malformed log key {key}"));
                let rest = key.get(log_prefix.len()..).ok_or_else(malformed)?;
                match rest.split_once('/') {
                    None => {
                        if let Some(entry) = pending.take() {
                            replay_entry(trees, entry, &mut log)?;
                            entries += 1;
                        }
                        let number: u64 = rest.parse().map_err(|_| malformed())?;
                        let (head, first) = decode_head(kv.value())
                            .map_err(|e| etcd_error(&format!("log entry {key}"), e))?;
                        if head.format != ENTRY_FORMAT {
                            return Err(StoreError::Etcd(format!(
                                "log entry {key} has format {}, which this build does not read",
                                head.format
                            )));
                        }
                        pending = Some((number, head.parts, kv.value()[first..].to_vec()));
                        log.next_entry = number + 1;
                    }
                    Some((entry, part)) => {
                        let entry: u64 = entry.parse().map_err(|_| malformed())?;
                        let part: u32 = part.parse().map_err(|_| malformed())?;
                        // Parts of the entry being read; any other is an orphan.
                        if let Some((number, parts, bytes)) = pending.as_mut() {
                            if *number == entry && part <= *parts {
                                bytes.extend_from_slice(kv.value());
                            }
                        }
                    }
                }
                Ok(())
            },
        )?;
        if let Some(entry) = pending.take() {
            replay_entry(trees, entry, &mut log)?;
            entries += 1;
        }
        tracing::info!(
            applied,
            folded,
            entries,
            revision,
            "rebuilt the store from etcd"
        );
        Ok(Loaded {
            read: folded + entries,
            log,
            revision,
        })
    }

    /// Puts `bytes` as log entry `entry`, in parts where it must, fenced.
    fn append(&self, entry: u64, fence: i64, bytes: &[u8]) -> Result<(), StoreError> {
        let mut chunks = bytes.chunks(self.request_room());
        let first = chunks.next().unwrap_or_default();
        let rest: Vec<&[u8]> = chunks.collect();
        let fenced = Compare::create_revision(self.writer_key(), CompareOp::Equal, fence);
        for (n, part) in rest.iter().enumerate() {
            let op = TxnOp::put(self.part_key(entry, n as u32 + 1), part.to_vec(), None);
            self.commit_if(vec![fenced.clone()], vec![op])?;
        }
        let head = Head {
            format: ENTRY_FORMAT,
            parts: rest.len() as u32,
        };
        let mut value = bincode::serde::encode_to_vec(&head, bincode::config::standard())
            .map_err(|e| etcd_error("encoding a log entry", e))?;
        value.extend_from_slice(first);
        self.put_entry(entry, &value, fenced)
    }

    /// The bytes of keys and values one request may carry beside its framing.
    fn request_room(&self) -> usize {
        self.config
            .max_request_bytes
            .saturating_sub(REQUEST_OVERHEAD)
            .max(1024)
    }

    /// Runs `ops` if every compare holds (a repeated attempt included). Refused: this
    /// daemon is not the writer any more.
    fn commit_if(&self, compares: Vec<Compare>, ops: Vec<TxnOp>) -> Result<(), StoreError> {
        if self.try_commit_if(compares, ops)? {
            Ok(())
        } else {
            Err(self.refused())
        }
    }

    fn try_commit_if(&self, compares: Vec<Compare>, ops: Vec<TxnOp>) -> Result<bool, StoreError> {
        self.call("writing the log", move |client| {
            commit_if(client, compares.clone(), ops.clone())
        })
    }

    fn refused(&self) -> StoreError {
        self.deposed();
        StoreError::NotWriter("the writer key is no longer this daemon's".into())
    }

    /// Puts log entry `key` with `value` if absent, fenced. A refusal after an attempt
    /// whose answer was lost may be that attempt's own put: read back, the entry holding
    /// this value while the fence still holds is a success.
    fn put_entry(&self, entry: u64, value: &[u8], fenced: Compare) -> Result<(), StoreError> {
        let key = self.entry_key(entry);
        let absent = Compare::create_revision(key.clone(), CompareOp::Equal, 0);
        let put = TxnOp::put(key.clone(), value.to_vec(), None);
        let head = TxnOp::put(self.head_key(), entry.to_string(), None);
        if self.try_commit_if(vec![fenced.clone(), absent], vec![put, head])? {
            return Ok(());
        }
        let read = TxnOp::get(key, None);
        let found = self.call("reading a log entry back", move |mut client| {
            let (fenced, read) = (fenced.clone(), read.clone());
            async move {
                let txn = Txn::new().when([fenced]).and_then([read]);
                let response = client.txn(txn).await?;
                let value = response.op_responses().into_iter().find_map(|op| match op {
                    etcd_client::TxnOpResponse::Get(get) => {
                        get.kvs().first().map(|kv| kv.value().to_vec())
                    }
                    _ => None,
                });
                Ok(response.succeeded().then_some(value).flatten())
            }
        })?;
        if found.as_deref() == Some(value) {
            Ok(())
        } else {
            Err(self.refused())
        }
    }

    /// Hands the entries' folding to etcd's runtime when enough wait and none runs.
    fn fold_if_due(&self, log: &mut Log, fence: i64) {
        if log.folding
            || (log.unfolded_entries < self.config.fold_entries && log.unfolded.len() < FOLD_KEYS)
        {
            return;
        }
        log.folding = true;
        let through = log.unfolded_through;
        let unfolded = std::mem::take(&mut log.unfolded);
        log.unfolded_entries = 0;
        let fold = Fold {
            members: self.members.clone(),
            fenced: Compare::create_revision(self.writer_key(), CompareOp::Equal, fence),
            kv_prefix: self.kv_prefix(),
            applied_key: self.applied_key(),
            log_start: self.key("log/"),
            log_end: self.entry_key(through + 1),
            max_ops: self.config.max_txn_ops.max(1),
            room: self.request_room(),
            timeout: self.config.call_timeout,
        };
        let state = self.log.clone();
        let lease_lost = self.lease_lost.clone();
        self.runtime().spawn(async move {
            let keys = unfolded.len();
            let result = fold.run(&unfolded, through).await;
            let mut log = state.lock().expect("not poisoned");
            log.folding = false;
            match result {
                Ok(()) => tracing::debug!(through, keys, "folded the log"),
                Err(e) => {
                    if !lease_lost.load(Ordering::SeqCst) {
                        tracing::warn!(error = %e, through, "folding the log failed; retried later");
                    }
                    // Newer writes win over the ones handed back.
                    let newer = std::mem::replace(&mut log.unfolded, unfolded);
                    log.unfolded.extend(newer);
                    log.unfolded_through = log.unfolded_through.max(through);
                    log.unfolded_entries += 1;
                }
            }
        });
    }
}

impl Replicate for Etcd {
    fn replicate(&self, writes: &[Write]) -> Result<(), StoreError> {
        let fence = self.fence()?;
        // A group that changed nothing (a wake-up, dry runs alone) has nothing to log: an
        // empty entry would cost a put, and fail like any other while etcd refuses puts.
        if writes.is_empty() {
            return Ok(());
        }
        let bytes = bincode::serde::encode_to_vec(writes, bincode::config::standard())
            .map_err(|e| etcd_error("encoding a log entry", e))?;
        // Only the syncer appends, so the number cannot move meanwhile; the lock is not
        // held across the call, which runs on the runtime a fold needs it on.
        let entry = self.log.lock().expect("not poisoned").next_entry;
        // Whether a failed put took is unknown: the reopen reads the log again.
        let appended = self.append(entry, fence, &bytes);
        *self.refusal.lock().expect("not poisoned") = appended
            .as_ref()
            .err()
            .and_then(StoreError::operator_action);
        appended?;
        let mut log = self.log.lock().expect("not poisoned");
        log.next_entry = entry + 1;
        log.unfold(entry, writes.to_vec());
        self.fold_if_due(&mut log, fence);
        Ok(())
    }

    /// While etcd's last refusal was its NOSPACE alarm, asks etcd whether the alarm is
    /// still raised (a read, which etcd serves under the alarm): raised, the batch is
    /// refused; disarmed, writes go on.
    fn refuses_writes(&self) -> Result<(), StoreError> {
        if self.refusal().is_none() {
            return Ok(());
        }
        let alarms = self.call("reading etcd's alarms", |mut client| async move {
            client.alarm(AlarmAction::Get, AlarmType::None, None).await
        })?;
        if alarms
            .alarms()
            .iter()
            .any(|a| a.alarm() == AlarmType::Nospace)
        {
            return Err(StoreError::Etcd(format!(
                "etcd's NOSPACE alarm is raised: {ETCD_NOSPACE}"
            )));
        }
        *self.refusal.lock().expect("not poisoned") = None;
        Ok(())
    }
}

/// What a fold needs, moved onto etcd's runtime.
struct Fold {
    members: Arc<Members>,
    fenced: Compare,
    kv_prefix: String,
    applied_key: String,
    log_start: String,
    log_end: String,
    max_ops: usize,
    /// The bytes of keys and values one transaction may carry.
    room: usize,
    timeout: std::time::Duration,
}

impl Fold {
    /// Puts the last values, then `P/applied`, then deletes the folded entries: each step
    /// fenced, in order.
    async fn run(
        &self,
        unfolded: &BTreeMap<(TreeId, Vec<u8>), Option<Vec<u8>>>,
        through: u64,
    ) -> Result<(), String> {
        // Each transaction within both of etcd's limits: its operations, and its bytes (a
        // key's value may be kilobytes: an item's merged cause, a chunk of events).
        let mut ops = Vec::new();
        let mut bytes = 0;
        for ((tree, key), value) in unfolded {
            let mut name = format!("{}{}/", self.kv_prefix, tree.name()).into_bytes();
            name.extend_from_slice(key);
            let size = name.len() + value.as_ref().map_or(0, Vec::len) + OP_OVERHEAD;
            if !ops.is_empty() && (ops.len() >= self.max_ops || bytes + size > self.room) {
                self.step(std::mem::take(&mut ops)).await?;
                bytes = 0;
            }
            bytes += size;
            ops.push(match value {
                Some(value) => TxnOp::put(name, value.clone(), None),
                None => TxnOp::delete(name, None),
            });
        }
        if !ops.is_empty() {
            self.step(ops).await?;
        }
        self.step(vec![TxnOp::put(
            self.applied_key.clone(),
            through.to_string(),
            None,
        )])
        .await?;
        let folded = DeleteOptions::new().with_range(self.log_end.clone());
        self.step(vec![TxnOp::delete(self.log_start.clone(), Some(folded))])
            .await
    }

    /// One attempt: a failed fold is handed back and retried with the next.
    async fn step(&self, ops: Vec<TxnOp>) -> Result<(), String> {
        let txn = |client| commit_if(client, vec![self.fenced.clone()], ops.clone());
        match self.members.attempt(self.timeout, &txn).await {
            Attempt::Done(true) => Ok(()),
            Attempt::Done(false) => Err("the writer key is no longer this daemon's".into()),
            Attempt::Again(error) | Attempt::Failed(error) => Err(error),
        }
    }
}

async fn commit_if(
    mut client: Client,
    compares: Vec<Compare>,
    ops: Vec<TxnOp>,
) -> Result<bool, etcd_client::Error> {
    let txn = Txn::new().when(compares).and_then(ops);
    client.txn(txn).await.map(|r| r.succeeded())
}

/// Loads the folded keys into the mirror's trees in batches: they arrive sorted by tree,
/// and one batch per tree and [`LOAD_BATCH`] keys costs a fraction of an insert each.
struct Loader<'a> {
    trees: &'a Trees,
    tree: Option<TreeId>,
    batch: sled::Batch,
    keys: usize,
}

/// The most keys one batch of the loader holds.
const LOAD_BATCH: usize = 10_000;

impl<'a> Loader<'a> {
    fn new(trees: &'a Trees) -> Loader<'a> {
        Loader {
            trees,
            tree: None,
            batch: sled::Batch::default(),
            keys: 0,
        }
    }

    fn insert(&mut self, tree: TreeId, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        if self.tree != Some(tree) || self.keys >= LOAD_BATCH {
            self.finish()?;
            self.tree = Some(tree);
        }
        self.batch.insert(key, value);
        self.keys += 1;
        Ok(())
    }

    /// Applies the batch held, if any.
    fn finish(&mut self) -> Result<(), StoreError> {
        if let Some(tree) = self.tree.take() {
            tree.of(self.trees)
                .apply_batch(std::mem::take(&mut self.batch))?;
            self.keys = 0;
        }
        Ok(())
    }
}

/// The tree and the key of a folded key, after `P/kv/`.
fn parse_kv_key(rest: &[u8]) -> Option<(TreeId, &[u8])> {
    let slash = rest.iter().position(|&b| b == b'/')?;
    let name = std::str::from_utf8(&rest[..slash]).ok()?;
    let tree = TreeId::ALL.into_iter().find(|t| t.name() == name)?;
    Some((tree, &rest[slash + 1..]))
}

pub(super) fn decode_head(bytes: &[u8]) -> Result<(Head, usize), bincode::error::DecodeError> {
    bincode::serde::decode_from_slice(bytes, bincode::config::standard())
}

/// Replays one whole entry onto `trees`; its writes are also the next fold's to put.
fn replay_entry(
    trees: &Trees,
    (number, _, bytes): (u64, u32, Vec<u8>),
    log: &mut Log,
) -> Result<(), StoreError> {
    let (writes, _): (Vec<Write>, usize) =
        bincode::serde::decode_from_slice(&bytes, bincode::config::standard())
            .map_err(|e| etcd_error(&format!("log entry {number}"), e))?;
    replay(trees, &writes)?;
    log.unfold(number, writes);
    Ok(())
}
