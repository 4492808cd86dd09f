//! `Idempotency-Key` records, kept in the write's own transaction: a request that carries a
//! key is looked up in the `idempotency` tree before its command runs, and a write that
//! commits keeps its response there in the same transaction. So an acknowledged write
//! always has its record and a write that did not commit never has one, across `kill -9`
//! too; and two requests with one key in one batch see each other, because a sled
//! transaction reads its own writes (`TransactionalTree::get` looks in the transaction's
//! write set first; a test below pins that).
//!
//! Layout (keys in [`keys`], values in [`codec::idempotency`]):
//! - `k ++ key` → the head: when the write committed, the request's fingerprint, the
//!   response's length, and the encoded response's first 8 KiB;
//! - `k ++ key ++ 0x00 ++ chunk (u32 big-endian)` → each further 8 KiB of the encoded
//!   response, from chunk 1 (keys are printable ASCII, so `0x00` sorts a record's chunks
//!   right after its head; a head of format 1 carries no chunk, and its chunks start at 0);
//! - `t ++ committed at (u64 big-endian) ++ key` → empty: the time index retention prunes by.
//!
//! So a record whose response fits 8 KiB is two keys: each key a write adds costs the group
//! commit a share of a leaf's copy and split, and most answers are small.
//!
//! A record lives for `--idempotency-retention` from its commit; one past it counts as
//! absent at once (and a new request with its key replaces it), and is deleted after a
//! later commit ([`Committer::prune_records`]), in bounded batches, as the event log is.
//! Only what the HTTP layer renders as a success is kept (its render returns `None`
//! otherwise): a refusal wrote nothing, and a retry decides afresh.

use std::sync::Arc;

use super::{Committer, Tx, TxResult};
use crate::store::codec::idempotency::{
    decode_head, decode_response, encode_head, encode_response, later_chunks, Head, HeadV1,
};
use crate::store::writes::Logged;
use crate::store::TreeId;
use crate::store::{keys, CodecError, StoreError};

pub use crate::store::codec::idempotency::KeptResponse;

/// The response a request's outcome (and the revision after it) is answered with, as the
/// HTTP layer renders it; `None` for an outcome not answered with a success, which is not
/// kept. Run inside the transaction, which sled may re-run: it must only compute.
pub type Render<O> = Arc<dyn Fn(&O, u64) -> Option<KeptResponse> + Send + Sync>;

/// A request's `Idempotency-Key`: the key, the fingerprint of the request (SHA-256 of its
/// method, path, query, `Blocklist-Source` and `If-Match` headers and body), and the render
/// of its response.
pub struct Idempotency<O> {
    pub key: String,
    pub fingerprint: [u8; 32],
    pub render: Render<O>,
}

impl<O> Clone for Idempotency<O> {
    fn clone(&self) -> Self {
        Idempotency {
            key: self.key.clone(),
            fingerprint: self.fingerprint,
            render: self.render.clone(),
        }
    }
}

/// What a [`super::Writer`] attaches to the requests of outcome `O` it sends.
pub trait Keying<O> {
    fn idempotency(&self) -> Option<Idempotency<O>>;
}

/// A writer without an `Idempotency-Key`.
#[derive(Debug, Clone, Copy)]
pub struct Unkeyed;

impl<O> Keying<O> for Unkeyed {
    fn idempotency(&self) -> Option<Idempotency<O>> {
        None
    }
}

impl<O> Keying<O> for Option<Idempotency<O>> {
    fn idempotency(&self) -> Option<Idempotency<O>> {
        self.clone()
    }
}

/// What a transaction found under a request's key.
pub(super) enum Found {
    /// No live record: none at all, or the head of one past retention (still stored until
    /// pruned), which a new record replaces.
    Nothing(Option<Head>),
    /// A record of the same request: its response is the answer.
    Same(KeptResponse),
    /// A record of another request.
    Different,
}

/// How many records one commit prunes beyond as many requests as it had (so pruning keeps
/// pace with the writes that record), and the most keys one prune deletes.
const MAX_PRUNE_RECORDS: usize = 1_000;
const MAX_PRUNE_KEYS: usize = 20_000;

fn corrupt(key: &str, source: CodecError) -> StoreError {
    StoreError::Corrupt {
        key: format!("idempotency record {key:?}"),
        source,
    }
}

impl Tx<'_> {
    /// The live record under `key`, compared with the request's `fingerprint`. The inner
    /// `Result` fails only this request (a record that does not decode).
    pub(super) fn recorded(
        &self,
        key: &str,
        fingerprint: &[u8; 32],
    ) -> TxResult<Result<Found, StoreError>> {
        let Some(bytes) = self.idempotency.get(keys::record_key(key))? else {
            return Ok(Ok(Found::Nothing(None)));
        };
        let head = match decode_head(&bytes) {
            Ok(head) => head,
            Err(e) => return Ok(Err(corrupt(key, e))),
        };
        if head.at <= self.records_expired_at {
            return Ok(Ok(Found::Nothing(Some(head))));
        }
        if head.fingerprint != *fingerprint {
            return Ok(Ok(Found::Different));
        }
        let mut response = head.inline.clone().unwrap_or_default();
        for chunk in head.stored_chunks() {
            let Ok(chunk) = u32::try_from(chunk) else {
                return Ok(Err(corrupt(
                    key,
                    CodecError::Decode("too many chunks".into()),
                )));
            };
            match self.idempotency.get(keys::record_chunk_key(key, chunk))? {
                Some(bytes) => response.extend_from_slice(&bytes),
                None => {
                    let missing = CodecError::Decode(format!("chunk {chunk} is missing"));
                    return Ok(Err(corrupt(key, missing)));
                }
            }
        }
        if response.len() as u64 != head.len {
            let short = CodecError::Decode(format!("{} of {} bytes", response.len(), head.len));
            return Ok(Err(corrupt(key, short)));
        }
        Ok(decode_response(&response)
            .map(Found::Same)
            .map_err(|e| corrupt(key, e)))
    }

    /// Keeps `response` under `key` for the request of `fingerprint`, committed now,
    /// replacing `stale`, the head of a record past retention still stored under `key` (as
    /// [`Tx::recorded`] found it).
    pub(super) fn record(
        &self,
        key: &str,
        fingerprint: [u8; 32],
        response: &KeptResponse,
        stale: Option<&Head>,
    ) -> TxResult<()> {
        if let Some(old) = stale {
            self.idempotency
                .remove(keys::record_time_key(old.at, key))?;
            for chunk in old.stored_chunks() {
                self.idempotency
                    .remove(keys::record_chunk_key(key, chunk as u32))?;
            }
        }
        let bytes = encode_response(response);
        for (chunk, part) in later_chunks(&bytes) {
            self.idempotency
                .insert(keys::record_chunk_key(key, chunk), part)?;
        }
        let head = HeadV1 {
            at: self.now,
            fingerprint,
            len: bytes.len() as u64,
        };
        self.idempotency
            .insert(keys::record_key(key), encode_head(&head, &bytes))?;
        self.idempotency
            .insert(keys::record_time_key(self.now, key), &[])?;
        Ok(())
    }
}

impl Committer {
    /// Deletes records past retention, oldest first: at most `max_records` (plus
    /// [`MAX_PRUNE_RECORDS`]) records and about [`MAX_PRUNE_KEYS`] keys, each record whole
    /// (head, chunks, time entry) in one atomic batch. Outside the transaction and without
    /// a flush of its own, like the event log's prune: a prune lost to a crash leaves
    /// records that already count as absent.
    pub(super) fn prune_records(&mut self, now: i64, max_records: usize) {
        let expired_at = now.saturating_sub(self.config.idempotency_retention_ms);
        let tree = &self.handles().trees.idempotency;
        let max_records = max_records + MAX_PRUNE_RECORDS;
        let mut batch = Logged::new(TreeId::Idempotency, self.pruned_log());
        let (mut records, mut deleted) = (0, 0);
        let expired =
            keys::record_time_start()..keys::record_time_bound(expired_at.saturating_add(1));
        for entry in tree.range(expired) {
            if records >= max_records || deleted >= MAX_PRUNE_KEYS {
                break;
            }
            let time_key = match entry {
                Ok((time_key, _)) => time_key,
                Err(e) => {
                    tracing::warn!(error = %e, "reading the idempotency records failed");
                    return;
                }
            };
            let Some((at, key)) = keys::parse_record_time_key(&time_key) else {
                // Left for `blocklistd check` to report.
                continue;
            };
            let head = match tree.get(keys::record_key(key)) {
                Ok(head) => head.and_then(|bytes| decode_head(&bytes).ok()),
                Err(e) => {
                    tracing::warn!(error = %e, "reading an idempotency record failed");
                    return;
                }
            };
            // A head of another time belongs to a later record under the same key (which
            // has its own entry); an undecodable one is left for `check`.
            if let Some(head) = head.filter(|head| head.at == at) {
                batch.remove(&keys::record_key(key));
                for chunk in head.stored_chunks() {
                    batch.remove(&keys::record_chunk_key(key, chunk as u32));
                }
                deleted += 1 + head.stored_chunks().count();
            }
            batch.remove(&time_key);
            deleted += 1;
            records += 1;
        }
        if records > 0 {
            if let Err(e) = batch.apply(&self.handles().trees) {
                tracing::warn!(error = %e, "pruning the idempotency records failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Exposition, StoreGauges};
    use crate::model::{Item, Kind};
    use crate::store::codec::idempotency::RESPONSE_CHUNK_BYTES;
    use crate::store::testing::{new_item as element, runtime, shut};
    use crate::store::{AddOutcome, Mode, Store, StoreConfig};

    /// What the design rests on: inside a sled 0.34.7 transaction, `get` sees the
    /// transaction's own inserts and removes (sled's `TransactionalTree::get` looks in its
    /// write set before the tree).
    #[test]
    fn a_sled_transaction_reads_its_own_writes() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let tree = crate::store::TreeId::Idempotency.open(&db).unwrap();
        tree.insert(b"gone", &b"before"[..]).unwrap();
        let seen: sled::transaction::TransactionResult<_, ()> = tree.transaction(|tx| {
            let before = tx.get(b"new")?;
            tx.insert(&b"new"[..], &b"v"[..])?;
            let after = tx.get(b"new")?;
            tx.remove(&b"gone"[..])?;
            Ok((before, after, tx.get(b"gone")?))
        });
        let (before, after, gone) = seen.unwrap();
        assert_eq!(before, None);
        assert_eq!(after.as_deref(), Some(&b"v"[..]));
        assert_eq!(gone, None);
    }

    /// A key for an add whose successes are kept as `body`.
    fn key(key: &str, fingerprint: u8, body: Vec<u8>) -> Idempotency<AddOutcome> {
        Idempotency {
            key: key.to_owned(),
            fingerprint: [fingerprint; 32],
            render: Arc::new(move |outcome: &AddOutcome, revision| match outcome {
                AddOutcome::Written { .. } => Some(KeptResponse {
                    status: 201,
                    headers: vec![("x-blocklist-revision".into(), revision.to_string().into())],
                    body: body.clone(),
                }),
                _ => None,
            }),
        }
    }

    /// Two requests with one key in one batch: the first applies and keeps its answer, the
    /// second finds it through the transaction's own reads and is answered it.
    #[test]
    fn one_key_twice_in_one_batch_applies_once() {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig::new(dir.path().join("data"));
        let metrics = config.metrics.clone();
        let store = Store::open(&config).unwrap();
        let runtime = runtime();
        let (a, b) = runtime.block_on(async {
            // A batch of its own that takes a while (its weight fills a batch), so that both
            // keyed adds are queued before the committer gathers the next one.
            let items: Vec<(Kind, Item)> = (0..20_000)
                .map(|i| {
                    let block = element(&format!("bulk-{i}")).to_block(1);
                    (Kind::Node, Item::new(format!("bulk-{i}"), block))
                })
                .collect();
            let bulk = tokio::spawn({
                let store = store.clone();
                async move { store.import(items, false).await }
            });
            let add = |store: Store| async move {
                store
                    .with_mode(Mode::Commit)
                    .keyed(Some(key("twice", 1, b"kept".to_vec())))
                    .add(Kind::Node, vec![element("n1")], 1)
                    .await
            };
            let a = tokio::spawn(add(store.clone()));
            let b = tokio::spawn(add(store.clone()));
            bulk.await.unwrap().unwrap();
            (a.await.unwrap(), b.await.unwrap())
        });
        let (applied, replayed) = if a.is_ok() { (a, b) } else { (b, a) };
        let (outcome, revision) = applied.unwrap();
        assert_eq!(
            outcome,
            AddOutcome::Written {
                merged: Vec::new(),
                escalated: Vec::new(),
                repeated: 0,
            }
        );
        let Err(StoreError::Replay(kept)) = replayed else {
            panic!("{replayed:?}")
        };
        assert_eq!(kept.body, b"kept");
        assert_eq!(kept.headers[0].1, revision.to_string().as_bytes());
        assert_eq!(revision, 20_001, "one added event after the bulk's");
        // Both were in one group: two groups in all, of one and two requests.
        let metrics = metrics.render(&StoreGauges::default(), Exposition::Prometheus);
        assert!(
            metrics.contains("blocklist_commit_batch_requests_sum 3.0"),
            "{metrics}"
        );
        assert!(
            metrics.contains("blocklist_commit_batch_requests_count 2"),
            "{metrics}"
        );
        assert!(
            metrics.contains("blocklist_idempotent_replays_total 1"),
            "{metrics}"
        );
        assert_eq!(store.verify().unwrap(), Vec::<String>::new());
        shut(store);
    }

    /// The keys of the `idempotency` tree, by kind.
    fn stored(store: &Store) -> Vec<keys::RecordKey<'static>> {
        let tree = store.handles().unwrap().trees.idempotency.clone();
        tree.iter()
            .keys()
            .map(|key| {
                let key: &'static [u8] = Box::leak(key.unwrap().to_vec().into_boxed_slice());
                keys::parse_record_key(key).unwrap()
            })
            .collect()
    }

    /// A record exists exactly for a committed success: a refused add keeps none, and its
    /// key is decided afresh; a written one keeps its head, its chunks and its time entry;
    /// the same key with another fingerprint is refused and writes nothing.
    #[test]
    fn only_a_committed_success_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreConfig::new(dir.path().join("data"))).unwrap();
        let runtime = runtime();
        let add = |key_name: &str, fingerprint: u8, body: Vec<u8>| {
            runtime.block_on(
                store
                    .with_mode(Mode::Commit)
                    .keyed(Some(key(key_name, fingerprint, body)))
                    .add(Kind::Node, vec![element("n1")], 1),
            )
        };
        runtime
            .block_on(store.add(Kind::Node, vec![element("n1")], 1))
            .unwrap();
        let (refused, _) = add("k", 1, Vec::new()).unwrap();
        assert!(matches!(refused, AddOutcome::Conflict(_)), "{refused:?}");
        assert_eq!(stored(&store), []);
        runtime
            .block_on(store.remove(Kind::Node, "n1".into()))
            .unwrap();
        let body = vec![b'x'; 2 * RESPONSE_CHUNK_BYTES + 1];
        let (written, revision) = add("k", 1, body.clone()).unwrap();
        assert!(matches!(written, AddOutcome::Written { .. }));
        let now = store.now();
        let records = stored(&store);
        assert!(
            // Three chunks: the first in the head.
            matches!(records[..], [
            keys::RecordKey::Head("k"),
            keys::RecordKey::Chunk("k", 1),
            keys::RecordKey::Chunk("k", 2),
            keys::RecordKey::Time(at, "k"),
        ] if at <= now),
            "{records:?}"
        );
        let Err(StoreError::KeyReused(reused)) = add("k", 2, Vec::new()) else {
            panic!("another fingerprint")
        };
        assert_eq!(reused, "k");
        let Err(StoreError::Replay(kept)) = add("k", 1, Vec::new()) else {
            panic!("the same fingerprint")
        };
        assert_eq!(kept.body, body, "the first answer, not this render's");
        assert_eq!(store.revision(), revision, "nothing applied since");
        assert_eq!(store.verify().unwrap(), Vec::<String>::new());
        shut(store);
    }

    /// A record past retention counts as absent at once: its key is taken by the next
    /// request, whatever its fingerprint, and the old record is replaced whole in that
    /// write's transaction.
    #[test]
    fn a_record_past_retention_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = StoreConfig::new(dir.path().join("data"));
        config.idempotency_retention_ms = 50;
        let store = Store::open(&config).unwrap();
        let runtime = runtime();
        let add = |id: &str, fingerprint: u8, chunks: usize| {
            let body = vec![b'x'; chunks * RESPONSE_CHUNK_BYTES];
            runtime.block_on(
                store
                    .with_mode(Mode::Commit)
                    .keyed(Some(key("k", fingerprint, body)))
                    .add(Kind::Node, vec![element(id)], 1),
            )
        };
        add("n1", 1, 3).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let (written, _) = add("n2", 2, 1).unwrap();
        assert!(matches!(written, AddOutcome::Written { .. }), "{written:?}");
        // The old record's chunks 1 to 3 and time entry went: the new one has two chunks,
        // the first in its head.
        let records = stored(&store);
        assert!(
            matches!(
                records[..],
                [
                    keys::RecordKey::Head("k"),
                    keys::RecordKey::Chunk("k", 1),
                    keys::RecordKey::Time(_, "k"),
                ]
            ),
            "{records:?}"
        );
        assert_eq!(store.verify().unwrap(), Vec::<String>::new());
        shut(store);
    }

    /// The largest records, on adjacent keys of the longest length, keep every key and value
    /// within the bounds `store::blobs::MAX_NODE_BYTES` is computed from (a compile-time
    /// assertion holds that bound under sled's blob threshold), and sled writes no blob file
    /// for them, also once their leaves are rewritten whole (sled writes a leaf whole when it
    /// consolidates its updates; the chunks are rewritten as they are a few times for that).
    /// sled's default segments would not make this test fail: its leaves fill up to 17
    /// chunks, ~145 KiB, only when inserted out of order, while appended keys split leaves
    /// half full. The bound is the proof; this is the check that its inputs are right.
    #[test]
    fn the_largest_records_stay_within_the_node_bound() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreConfig::new(dir.path().join("data"))).unwrap();
        let runtime = runtime();
        let longest = "k".repeat(crate::store::MAX_IDEMPOTENCY_KEY_BYTES - 2);
        for i in 0..20 {
            let body = vec![b'x'; 12 * RESPONSE_CHUNK_BYTES];
            let id = format!("n{i}");
            runtime
                .block_on(
                    store
                        .with_mode(Mode::Commit)
                        .keyed(Some(key(&format!("{i:02}{longest}"), 1, body)))
                        .add(Kind::Node, vec![element(&id)], 1),
                )
                .unwrap();
        }
        let tree = store.handles().unwrap().trees.idempotency.clone();
        let mut chunks = 0;
        for _ in 0..3 {
            for entry in &tree {
                let (key, value) = entry.unwrap();
                assert!(key.len() <= keys::MAX_RECORD_KEY_BYTES, "{}", key.len());
                assert!(
                    value.len() <= crate::store::codec::idempotency::MAX_VALUE_BYTES,
                    "{}",
                    value.len()
                );
                // A full chunk, or a head carrying one.
                chunks += usize::from(value.len() >= RESPONSE_CHUNK_BYTES);
                tree.insert(key, value).unwrap();
            }
        }
        assert_eq!(
            chunks,
            3 * 20 * 12,
            "full chunks and heads: the largest values"
        );
        drop(tree);
        assert_eq!(store.verify().unwrap(), Vec::<String>::new());
        shut(store);
        let blobs = std::fs::read_dir(dir.path().join("data/blobs"))
            .unwrap()
            .count();
        assert_eq!(blobs, 0);
    }
}
